// profile_bench: the profile codec on the reference workload.
//
// First a table: bytes a segment on the device (record header, 36-byte user
// id and padding included) for expiries on whole hours and for second-level
// TTLs, beside MessagePack of the reference article's shape {id: [expiry
// hours, {}]} and Aerospike's measured 10,471 bytes a user. Then Google
// Benchmark timings: encoding a 1,000-segment profile, and decoding one and
// selecting its live segments, and the whole answer of a get (decode, select,
// encode the frame: the get path without the device and the socket), for one
// profile and for the merged view of a group of linked profiles.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <msgpack.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "profile/codec.h"
#include "profile/segment_ops.h"
#include "proto/wire.h"
#include "storage/format.h"

namespace segstore::profile {
namespace {

constexpr UnixSeconds kNow = 1'790'000'000;
constexpr size_t kSegments = 1000;

// `id_space`: segment IDs are uniform in [0, id_space) (the workload's 82,000).
std::vector<Segment> ReferenceProfile(uint64_t seed, bool second_ttl, uint64_t id_space = 82000) {
  std::mt19937_64 rng(seed);
  std::set<uint64_t> ids;
  while (ids.size() < kSegments) ids.insert(rng() % id_space);
  std::vector<Segment> out;
  for (uint64_t id : ids) {
    UnixSeconds e = second_ttl
                        ? kNow + 3600 + static_cast<UnixSeconds>(rng() % (2592000 - 3600 + 1))
                        : static_cast<UnixSeconds>((kNow / 3600 + 1 + rng() % 720) * 3600);
    out.push_back(Segment{id, e, {}, {}});
  }
  return out;
}

// Bytes on the device for a user: the record (header, 36-byte key, body) padded to 16.
double DeviceBytesPerSegment(size_t body) {
  return static_cast<double>(storage::RecordFootprint(36, static_cast<uint32_t>(body))) / kSegments;
}

size_t MessagePackBytes(const std::vector<Segment>& segments) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_map(static_cast<uint32_t>(segments.size()));
  for (const Segment& s : segments) {
    pk.pack(s.id);
    pk.pack_array(2);
    pk.pack(s.expires_at / 3600);
    pk.pack_map(0);
  }
  return buf.size();
}

void PrintSizes() {
  double hours = 0, seconds = 0, mp = 0;
  constexpr int kProfiles = 50;
  std::string body;
  for (int i = 0; i < kProfiles; ++i) {
    auto h = ReferenceProfile(i, false);
    EncodeSegments(h, &body);
    hours += DeviceBytesPerSegment(body.size());
    mp += static_cast<double>(MessagePackBytes(h)) / kSegments;
    EncodeSegments(ReferenceProfile(i, true), &body);
    seconds += DeviceBytesPerSegment(body.size());
  }
  std::printf(
      "bytes a segment, reference workload (1,000 segments a user, ids uniform in [0, 82000); "
      "mean of %d users)\n",
      kProfiles);
  std::printf(
      "  segstore, expiries on whole hours, on the device (record included): %5.2f  "
      "(goal 2.6; information content ~2.2)\n",
      hours / kProfiles);
  std::printf(
      "  segstore, second-level TTLs, on the device (record included):       %5.2f  "
      "(goal: under 4)\n",
      seconds / kProfiles);
  std::printf("  MessagePack {id: [expiry_hours, {}]}, body alone:                   %5.2f\n",
              mp / kProfiles);
  std::printf("  Aerospike, measured by the reference article (10,471 bytes a user): %5.2f\n\n",
              10471.0 / kSegments);
}

void BM_Encode(benchmark::State& state) {
  auto segments = ReferenceProfile(1, state.range(0) != 0);
  std::string body;
  for (auto _ : state) {
    EncodeSegments(segments, &body);
    benchmark::DoNotOptimize(body.data());
  }
  state.counters["bytes"] = static_cast<double>(body.size());
}
BENCHMARK(BM_Encode)->Arg(0)->Arg(1)->ArgName("second_ttl");

// Decoding a profile and selecting its live segments: in two steps
// (DecodeColumns, then Select) or in the get path's one pass (DecodeSelect).
void BM_DecodeAndSelectLive(benchmark::State& state) {
  std::string body;
  EncodeSegments(ReferenceProfile(1, state.range(0) != 0), &body);
  const bool one_pass = state.range(1) != 0;
  Columns columns;
  GetResult result;
  // A third of the segments have expired by then.
  const UnixSeconds now = kNow + 240 * 3600;
  for (auto _ : state) {
    if (one_pass) {
      Result<uint32_t> live = DecodeSelect(body, now, GetOptions{}, &columns, &result);
      benchmark::DoNotOptimize(live.ok());
    } else {
      Status s = DecodeColumns(body, &columns);
      benchmark::DoNotOptimize(s.ok());
      Select(columns, now, GetOptions{}, &result);
    }
    benchmark::DoNotOptimize(result.ids.data());
  }
  state.counters["live"] = static_cast<double>(result.count);
}
BENCHMARK(BM_DecodeAndSelectLive)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"second_ttl", "one_pass"});

// What the server does for a get between the device read and the socket:
// decode, select the live segments, encode the answer frame.
void BM_GetAnswer(benchmark::State& state) {
  std::string body;
  EncodeSegments(ReferenceProfile(1, state.range(0) != 0), &body);
  Columns columns;
  const UnixSeconds now = kNow + 240 * 3600;  // a third expired
  size_t bytes = 0;
  for (auto _ : state) {
    GetResult result;
    Result<uint32_t> live = DecodeSelect(body, now, GetOptions{}, &columns, &result);
    benchmark::DoNotOptimize(live.ok());
    std::string frame;
    (void)proto::AppendFrame(&frame, static_cast<uint8_t>(proto::Op::kGet), 1, 0,
                             proto::kMaxResponseBytes,
                             [&](std::string* out) { proto::Encode(result, out); });
    benchmark::DoNotOptimize(frame.data());
    bytes = frame.size();
  }
  state.counters["frame_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_GetAnswer)->Arg(0)->Arg(1)->ArgName("second_ttl");

// What the server does for a get by a linked user between the device reads
// and the socket (group_read.cc): decode the k profiles of the group, merge
// them and select the merged view's live segments (SelectMerged), encode the
// answer frame.
// `sparse`: IDs uniform over 2^40 instead of the workload's 82,000.
void BM_MergedGetAnswer(benchmark::State& state) {
  const auto k = static_cast<size_t>(state.range(0));
  const uint64_t id_space = state.range(1) != 0 ? uint64_t{1} << 40 : 82000;
  std::vector<std::string> bodies(k);
  for (size_t p = 0; p < k; ++p)
    EncodeSegments(ReferenceProfile(p + 1, false, id_space), &bodies[p]);
  const UnixSeconds now = kNow + 240 * 3600;  // a third expired
  size_t bytes = 0, segments = 0;
  MergeScratch scratch;  // a server thread's, kept across reads
  std::vector<Columns> kept(k);
  for (auto _ : state) {
    // `reuse`: decoded into Columns kept from the last read (group_read.cc's
    // pool), or into fresh ones.
    std::vector<Columns> fresh(state.range(2) != 0 ? 0 : k);
    std::vector<Columns>& columns = state.range(2) != 0 ? kept : fresh;
    std::vector<const Columns*> ptrs;
    for (size_t p = 0; p < k; ++p) {
      Status s = DecodeColumns(bodies[p], &columns[p]);
      benchmark::DoNotOptimize(s.ok());
      ptrs.push_back(&columns[p]);
    }
    GetResult result;
    SelectMerged(ptrs, now, GetOptions{}, &scratch, &result);
    result.master = "00000000-0000-0000-0000-000000000000";
    result.profiles = static_cast<uint32_t>(k);
    std::string frame;
    (void)proto::AppendFrame(&frame, static_cast<uint8_t>(proto::Op::kGet), 1, 0,
                             proto::kMaxResponseBytes,
                             [&](std::string* out) { proto::Encode(result, out); });
    benchmark::DoNotOptimize(frame.data());
    bytes = frame.size();
    segments = result.size();
  }
  state.counters["frame_bytes"] = static_cast<double>(bytes);
  state.counters["segments"] = static_cast<double>(segments);
}
BENCHMARK(BM_MergedGetAnswer)
    ->ArgsProduct({{2, 5, 10}, {0, 1}, {0, 1}})
    ->ArgNames({"k", "sparse", "reuse"});

// The merge and select alone (SelectMerged), the k profiles decoded once.
void BM_SelectMerged(benchmark::State& state) {
  const auto k = static_cast<size_t>(state.range(0));
  const uint64_t id_space = state.range(1) != 0 ? uint64_t{1} << 40 : 82000;
  std::vector<Columns> columns(k);
  std::vector<const Columns*> ptrs;
  for (size_t p = 0; p < k; ++p) {
    std::string body;
    EncodeSegments(ReferenceProfile(p + 1, false, id_space), &body);
    if (!DecodeColumns(body, &columns[p]).ok()) std::abort();
    ptrs.push_back(&columns[p]);
  }
  const UnixSeconds now = kNow + 240 * 3600;  // a third expired
  MergeScratch scratch;
  size_t segments = 0;
  for (auto _ : state) {
    GetResult result;
    SelectMerged(ptrs, now, GetOptions{}, &scratch, &result);
    benchmark::DoNotOptimize(result.ids.data());
    segments = result.size();
  }
  state.counters["segments"] = static_cast<double>(segments);
}
BENCHMARK(BM_SelectMerged)->ArgsProduct({{2, 5, 10}, {0, 1}})->ArgNames({"k", "sparse"});

// What an upsert does to a profile between reading and writing its record:
// decode it, merge 5 segments (set, with TTLs; expired ones trimmed on the
// way), work out its sweep and void times, encode it again.
void BM_UpsertRewrite(benchmark::State& state) {
  std::string body;
  EncodeSegments(ReferenceProfile(1, false), &body);
  const UnixSeconds now = kNow + 240 * 3600;  // a third expired
  std::vector<SegmentUpdate> updates;
  for (uint64_t id : {17u, 4000u, 31337u, 60000u, 81999u}) {
    SegmentUpdate u;
    u.id = id;
    u.value = 3600 * 24;
    u.ttl = true;
    updates.push_back(u);
  }
  Columns columns;
  std::vector<Segment> merged;
  std::string out;
  for (auto _ : state) {
    Status s = DecodeColumns(body, &columns);
    benchmark::DoNotOptimize(s.ok());
    UpsertResult r = Merge(&columns, updates, UpsertMode::kSet, now, &merged);
    RecordTimes t = TimesFor(merged, 0.25);
    EncodeSegments(merged, &out);
    benchmark::DoNotOptimize(r.count + t.sweep_at + t.void_at);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_UpsertRewrite);

void BM_DecodeAndCountRange(benchmark::State& state) {
  std::string body;
  EncodeSegments(ReferenceProfile(1, false), &body);
  Columns columns;
  GetResult result;
  GetOptions o;
  o.id_from = 8000;
  o.id_to = 9000;
  o.count_only = true;
  for (auto _ : state) {
    Status s = DecodeColumns(body, &columns);
    benchmark::DoNotOptimize(s.ok());
    Select(columns, kNow, o, &result);
    benchmark::DoNotOptimize(result.count);
  }
}
BENCHMARK(BM_DecodeAndCountRange);

}  // namespace
}  // namespace segstore::profile

int main(int argc, char** argv) {
  segstore::profile::PrintSizes();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
