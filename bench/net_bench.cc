// net_bench: end-to-end gets against a running segstored over loopback, on
// the reference workload (../shared/workload.md): users of 1,000 segments,
// IDs uniform in [0, 82000), expiries on whole hours up to 30 days ahead.
//
//   segstored --listen 127.0.0.1:7700 --data /tmp/nb.dat --file-size 2GiB &
//   net_bench --server 127.0.0.1:7700 --load --users 100000
//   net_bench --server 127.0.0.1:7700 --users 100000 --connections 32 --seconds 20
//
// Closed loop: each connection keeps `--depth` gets in flight and sends the
// next when one completes; latency is from send to answer (no correction for
// coordinated omission: the benchmark issue's load generator will pace by
// intended send time). One client thread drives every connection through the
// async client library. Prints operations per second and p50/p99/p99.9 in
// microseconds.
#include <CLI/CLI.hpp>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "bench/workload.h"
#include "common/histogram.h"
#include "segstore/client.h"

namespace {

using namespace segstore;
using Clock = std::chrono::steady_clock;

std::vector<SegmentUpdate> ReferenceSegments(uint64_t user, uint32_t now) {
  std::vector<SegmentUpdate> out;
  for (const bench::ReferenceSegment& s : bench::ReferenceSegments(user)) {
    out.push_back({s.id, bench::WholeHourExpiry(now, s.hours), false, {}, {}});
  }
  return out;
}

int Load(const client::ClientOptions& options, uint64_t users) {
  auto c = client::Client::Connect(options);
  if (!c.ok()) {
    std::fprintf(stderr, "net_bench: %s\n", c.status().ToString().c_str());
    return 1;
  }
  const auto now = static_cast<uint32_t>(std::time(nullptr));
  const auto start = Clock::now();
  constexpr uint64_t kPerFrame = 50;  // ~8 KB a user: 400 KB frames
  for (uint64_t first = 0; first < users; first += kPerFrame) {
    std::vector<UpsertItem> items;
    for (uint64_t u = first; u < std::min(users, first + kPerFrame); ++u) {
      items.push_back({bench::UserKey(u), ReferenceSegments(u, now), UpsertMode::kSet});
    }
    auto r = (*c)->BatchUpsert(items);
    if (!r.ok()) {
      std::fprintf(stderr, "net_bench: load: %s\n", r.status().ToString().c_str());
      return 1;
    }
    for (const auto& one : *r) {
      if (!one.ok()) {
        std::fprintf(stderr, "net_bench: load: %s\n", one.status().ToString().c_str());
        return 1;
      }
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("loaded %llu users of 1000 segments in %.1f s (%.0f users/s)\n",
              static_cast<unsigned long long>(users), s, static_cast<double>(users) / s);
  return 0;
}

struct Run {
  uint64_t users = 100000;
  unsigned connections = 32;
  unsigned depth = 1;
  double seconds = 20;
  double warmup = 3;
  bool ids_only = false;
  unsigned batch = 0;  // >0: batch gets of this many users
};

int Measure(const client::ClientOptions& options, const Run& run) {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<client::AsyncClient>> conns(run.connections);
  unsigned connected = 0, failed = 0;
  for (unsigned i = 0; i < run.connections; ++i) {
    client::AsyncClient::Connect(io, options,
                                 [&, i](Result<std::unique_ptr<client::AsyncClient>> r) {
                                   if (!r.ok()) {
                                     std::fprintf(stderr, "net_bench: %s\n",
                                                  r.status().ToString().c_str());
                                     ++failed;
                                     return;
                                   }
                                   conns[i] = std::move(r).value();
                                   ++connected;
                                 });
  }
  while (connected + failed < run.connections) io.run_one();
  if (failed > 0) return 1;

  GetOptions get;
  get.ids_only = run.ids_only;
  Histogram latency;
  uint64_t ops = 0, errors = 0, not_found = 0, segments = 0;
  bool measuring = false, stopping = false;
  std::mt19937_64 rng(42);
  std::function<void(unsigned)> issue = [&](unsigned c) {
    if (stopping) return;
    const auto sent = Clock::now();
    auto done = [&, c, sent](bool ok, bool missing, uint64_t segs) {
      if (measuring) {
        latency.Record(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - sent).count()));
        ++ops;
        segments += segs;
        if (!ok) ++errors;
        if (missing) ++not_found;
      }
      issue(c);
    };
    if (run.batch == 0) {
      conns[c]->Get(bench::UserKey(rng() % run.users), get, [done](Result<GetResult> r) {
        done(r.ok() || r.status().IsNotFound(), r.status().IsNotFound(), r.ok() ? r->count : 0);
      });
    } else {
      std::vector<std::string> users;
      for (unsigned i = 0; i < run.batch; ++i) users.push_back(bench::UserKey(rng() % run.users));
      conns[c]->BatchGet(users, get, [done](Result<BatchGetResult> r) {
        uint64_t segs = 0;
        bool missing = false;
        if (r.ok()) {
          for (const auto& one : *r) {
            if (one.ok()) segs += one->count;
            if (!one.ok()) missing = true;
          }
        }
        done(r.ok(), missing, segs);
      });
    }
  };
  for (unsigned c = 0; c < run.connections; ++c) {
    for (unsigned d = 0; d < run.depth; ++d) issue(c);
  }
  const auto t0 = Clock::now();
  const auto warm_end = t0 + std::chrono::duration<double>(run.warmup);
  const auto end = warm_end + std::chrono::duration<double>(run.seconds);
  while (Clock::now() < warm_end) io.run_for(std::chrono::milliseconds(10));
  measuring = true;
  const auto m0 = Clock::now();
  while (Clock::now() < end) io.run_for(std::chrono::milliseconds(10));
  measuring = false;
  const double secs = std::chrono::duration<double>(Clock::now() - m0).count();
  stopping = true;
  while (true) {
    size_t inflight = 0;
    for (auto& c : conns) inflight += c->in_flight();
    if (inflight == 0) break;
    io.run_for(std::chrono::milliseconds(10));
  }
  conns.clear();
  const double per_op = run.batch == 0 ? 1.0 : run.batch;
  std::printf(
      "%s%s: %u connections x depth %u, %llu users, %.1f s: %.0f requests/s (%.0f users/s), "
      "p50 %.0f us, p99 %.0f us, p99.9 %.0f us, max %.0f us; %.0f segments a user; "
      "%llu errors, %llu not found\n",
      run.batch == 0 ? "get" : ("batch_get x" + std::to_string(run.batch)).c_str(),
      run.ids_only ? " (ids)" : " (full)", run.connections, run.depth,
      static_cast<unsigned long long>(run.users), secs, static_cast<double>(ops) / secs,
      static_cast<double>(ops) * per_op / secs,
      static_cast<double>(latency.Percentile(0.50)) / 1e3,
      static_cast<double>(latency.Percentile(0.99)) / 1e3,
      static_cast<double>(latency.Percentile(0.999)) / 1e3,
      static_cast<double>(latency.max()) / 1e3,
      ops > 0 ? static_cast<double>(segments) / (static_cast<double>(ops) * per_op) : 0.0,
      static_cast<unsigned long long>(errors), static_cast<unsigned long long>(not_found));
  std::printf("machine: %u cores; client and server on loopback\n",
              std::thread::hardware_concurrency());
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"net_bench: end-to-end gets against segstored"};
  std::string server = "127.0.0.1:7700";
  bool load = false;
  Run run;
  app.add_option("--server", server, "host:port of a running segstored");
  app.add_flag("--load", load, "load the users first (batch upserts), then exit");
  app.add_option("--users", run.users, "users in the data set (reference: 100000)");
  app.add_option("--connections", run.connections, "connections (default 32)");
  app.add_option("--depth", run.depth, "requests in flight per connection (default 1)");
  app.add_option("--seconds", run.seconds, "measured seconds (default 20)");
  app.add_option("--warmup", run.warmup, "unmeasured seconds first (default 3)");
  app.add_flag("--ids-only", run.ids_only, "ask for segment IDs only");
  app.add_option("--batch", run.batch, "batch gets of this many users (default: single gets)");
  CLI11_PARSE(app, argc, argv);

  client::ClientOptions options;
  if (Status s = client::ParseServerAddress(server, &options); !s.ok()) {
    std::fprintf(stderr, "net_bench: %s\n", s.ToString().c_str());
    return 2;
  }
  options.request_timeout = std::chrono::milliseconds(30000);
  options.connect_timeout = std::chrono::milliseconds(10000);
  if (load) return Load(options, run.users);
  return Measure(options, run);
}
