// sweeper_bench: what the expiry sweeper costs the gets that run beside it.
//
// Loads the reference workload (scaled down: --users, default 40,000; each
// user 1,000 segments, ids uniform in [0, 82000), expiries on whole hours up
// to 30 days), then moves the store's clock 200 hours on: about 28% of the
// segments have expired and every record is past its sweep point (a quarter
// expired). Then rounds of gets (one thread, queue depth 32, random users, the
// live segments of each) alternate without and with the sweeper running at
// its cap; each round's p99 and, with the sweeper, the segments it removed a
// second in that window. Goal: p99 with the sweeper within 10% of without.
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::bench {
namespace {

using Clock = std::chrono::steady_clock;
using profile::SegmentUpdate;

struct Options {
  std::string path = "segstore-data/sweeper-bench.dat";
  uint64_t users = 40000;
  uint32_t rate = 500;  // sweeper cap, records a second (ProfileOptions' default)
  double seconds = 4;
  uint32_t rounds = 3;
  uint32_t depth = 32;
  bool defrag = true;
  bool buffered = false;
};

[[noreturn]] void Die(const char* what, const Status& s) {
  std::fprintf(stderr, "sweeper_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

std::vector<SegmentUpdate> UserSegments(uint64_t user, uint32_t now) {
  std::mt19937_64 rng(user);
  std::set<uint64_t> ids;
  while (ids.size() < 1000) ids.insert(rng() % 82000);
  std::vector<SegmentUpdate> out;
  for (uint64_t id : ids) {
    uint32_t expiry = static_cast<uint32_t>((now / 3600 + 1 + rng() % 720) * 3600);
    out.push_back(SegmentUpdate{id, expiry, false, {}, {}});
  }
  return out;
}

// Gets for `seconds` at queue depth `depth`; latencies into `h`.
void RunGets(profile::ProfileSession* s, const Options& o, Histogram* h, std::mt19937_64* rng) {
  uint64_t issued = 0, done = 0;
  auto end = Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  bool stopping = false;
  while (!stopping || done < issued) {
    if (!stopping) {
      storage::Worker::Batch batch(s->worker());
      while (issued - done < o.depth) {
        ++issued;
        auto began = Clock::now();
        s->Get(UserKey((*rng)() % o.users), profile::GetOptions{},
               [&done, h, began](Result<profile::GetResult> r) {
                 if (!r.ok()) Die("get", r.status());
                 ++done;
                 h->Record(static_cast<uint64_t>(
                     std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - began)
                         .count()));
               });
      }
    }
    s->Wait(std::chrono::milliseconds(100));
    if (Clock::now() >= end) stopping = true;
  }
}

int Main(int argc, char** argv) {
  Options o;
  const option longs[] = {
      {"path", required_argument, nullptr, 'p'},   {"users", required_argument, nullptr, 'u'},
      {"rate", required_argument, nullptr, 'r'},   {"seconds", required_argument, nullptr, 's'},
      {"rounds", required_argument, nullptr, 'n'}, {"no-defrag", no_argument, nullptr, 'D'},
      {"buffered", no_argument, nullptr, 'B'},     {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, nullptr)) != -1;) {
    switch (c) {
      case 'p':
        o.path = optarg;
        break;
      case 'u':
        o.users = std::stoull(optarg);
        break;
      case 'r':
        o.rate = static_cast<uint32_t>(std::stoul(optarg));
        break;
      case 's':
        o.seconds = std::stod(optarg);
        break;
      case 'n':
        o.rounds = static_cast<uint32_t>(std::stoul(optarg));
        break;
      case 'D':
        o.defrag = false;
        break;
      case 'B':
        o.buffered = true;
        break;
      default:
        std::fprintf(stderr,
                     "usage: sweeper_bench [--path FILE] [--users N] [--rate RECORDS_PER_S] "
                     "[--seconds S] [--rounds N]\n");
        return 2;
    }
  }
  std::error_code ec;
  std::filesystem::remove(o.path, ec);
  ManualClock clock(static_cast<UnixSeconds>(std::time(nullptr)));
  storage::StoreOptions so;
  so.path = o.path;
  so.file_size = uint64_t{1} << 30;
  so.clock = &clock;
  so.background_defrag = o.defrag;
  if (o.buffered) so.durability = storage::Durability::kBuffered;
  auto engine = storage::Store::Open(so);
  if (!engine.ok()) Die("open", engine.status());
  profile::ProfileOptions po;
  po.sweeper = false;
  auto profiles = profile::ProfileStore::Open(engine->get(), po);
  if (!profiles.ok()) Die("profiles", profiles.status());
  auto session = (*profiles)->NewSession();
  if (!session.ok()) Die("session", session.status());
  profile::ProfileSession* s = session->get();

  std::printf(
      "reference workload scaled down to %llu users (1,000 segments each), commit "
      "durability; sweeper cap %u records/s; %u rounds of %.0f s each way\n",
      static_cast<unsigned long long>(o.users), o.rate, o.rounds, o.seconds);
  auto t0 = Clock::now();
  uint64_t loaded = 0, next = 0;
  while (loaded < o.users) {
    {
      storage::Worker::Batch batch(s->worker());
      while (next < o.users && next - loaded < 64) {
        auto segs = UserSegments(next, clock.Now());
        s->Upsert(UserKey(next), segs, profile::UpsertMode::kSet,
                  [&loaded](Result<profile::UpsertResult> r) {
                    if (!r.ok()) Die("load", r.status());
                    ++loaded;
                  });
        ++next;
      }
    }
    s->Wait(std::chrono::milliseconds(10));
  }
  std::printf("loaded in %.1f s\n", std::chrono::duration<double>(Clock::now() - t0).count());
  clock.Advance(200 * 3600);

  std::mt19937_64 rng(5);
  std::vector<double> p99_without, p99_with;
  Histogram all_without, all_with;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    Histogram without;
    RunGets(s, o, &without, &rng);
    p99_without.push_back(static_cast<double>(without.Percentile(0.99)));
    all_without.Merge(without);

    po.sweeper = true;
    po.sweep_records_per_second = o.rate;
    po.sweep_interval = std::chrono::milliseconds(20);
    auto sweeping = profile::ProfileStore::Open(engine->get(), po);
    if (!sweeping.ok()) Die("sweeper", sweeping.status());
    Histogram with;
    profile::SweeperStats before = (*sweeping)->sweeper_stats();
    storage::StoreStats engine_before = (*engine)->stats();
    auto w0 = Clock::now();
    RunGets(s, o, &with, &rng);
    double window = std::chrono::duration<double>(Clock::now() - w0).count();
    profile::SweeperStats after = (*sweeping)->sweeper_stats();
    storage::StoreStats engine_after = (*engine)->stats();
    sweeping->reset();
    p99_with.push_back(static_cast<double>(with.Percentile(0.99)));
    all_with.Merge(with);
    std::printf(
        "round %u: p99 %5llu us without, %5llu us with the sweeper; it rewrote %.0f "
        "records/s and removed %.0f segments/s in the window; defragmentation freed "
        "%.1f blocks/s, %.0f device flushes/s\n",
        round + 1, static_cast<unsigned long long>(without.Percentile(0.99)),
        static_cast<unsigned long long>(with.Percentile(0.99)),
        (after.records_visited - before.records_visited) / window,
        (after.segments_removed - before.segments_removed) / window,
        (engine_after.defrag_blocks - engine_before.defrag_blocks) / window,
        (engine_after.flushes - engine_before.flushes) / window);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("gets without the sweeper: p50 %llu us, p99 %llu us, p99.9 %llu us (%llu gets)\n",
              static_cast<unsigned long long>(all_without.Percentile(0.5)),
              static_cast<unsigned long long>(all_without.Percentile(0.99)),
              static_cast<unsigned long long>(all_without.Percentile(0.999)),
              static_cast<unsigned long long>(all_without.count()));
  std::printf("gets with the sweeper:    p50 %llu us, p99 %llu us, p99.9 %llu us (%llu gets)\n",
              static_cast<unsigned long long>(all_with.Percentile(0.5)),
              static_cast<unsigned long long>(all_with.Percentile(0.99)),
              static_cast<unsigned long long>(all_with.Percentile(0.999)),
              static_cast<unsigned long long>(all_with.count()));
  std::printf("median p99 with / without: %.2f (goal: at most 1.10)\n",
              median(p99_with) / median(p99_without));
  session->reset();
  profiles->reset();
  engine->reset();
  std::filesystem::remove(o.path, ec);
  return 0;
}

}  // namespace
}  // namespace segstore::bench

int main(int argc, char** argv) { return segstore::bench::Main(argc, argv); }
