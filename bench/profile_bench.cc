// profile_bench: the profile codec on the reference workload.
//
// First a table: bytes a segment on the device (record header, 36-byte user
// id and padding included) for expiries on whole hours and for second-level
// TTLs, beside MessagePack of the reference article's shape {id: [expiry
// hours, {}]} and Aerospike's measured 10,471 bytes a user; then the bytes
// the workload's 25 profile fields add (issue 21's budget). Then Google
// Benchmark timings: encoding a 1,000-segment profile, and decoding one and
// selecting its live segments, and the whole answer of a get (decode, select,
// encode the frame: the get path without the device and the socket), for one
// profile and for the merged view of a group of linked profiles; and for a
// profile holding the 25 fields, the get's answer asking for none or for the
// counters, and the record rewrites of an increment and of an upsert of one
// segment.
//
// Profile fields are named by their numbers in a field name table as a
// store's (src/profile/field_names.h): the table is made at start in a
// scratch store under $TMPDIR, with the workload's 5,005 names in the order
// segbench registers them (bench/workload.h, ReferenceFieldNameList).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <msgpack.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "profile/codec.h"
#include "profile/field_codec.h"
#include "profile/field_names.h"
#include "profile/fields.h"
#include "profile/segment_ops.h"
#include "proto/wire.h"
#include "segstore/storage.h"
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

// ---- Profile fields

// The workload's field name table, as a store that has served the workload
// has it: made once, in a scratch store (removed at once), and loaded as a
// store loads it at open.
class ReferenceNames {
 public:
  static const FieldNames& Get() {
    static ReferenceNames* made = new ReferenceNames();  // never freed: outlives every benchmark
    return made->names_;
  }

 private:
  ReferenceNames() : names_(65535) {
    std::string dir = (std::filesystem::temp_directory_path() / "profile-bench-XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr) Die("cannot make a scratch directory", dir);
    {
      storage::StoreOptions o;
      o.path = dir + "/names.dat";
      o.file_size = 64u << 20;
      o.write_block_size = 256u << 10;
      o.durability = storage::Durability::kBuffered;
      auto store = storage::Store::Open(o);
      if (!store.ok()) Die(store.status().ToString(), o.path);
      auto worker = (*store)->NewWorker();
      if (!worker.ok()) Die(worker.status().ToString(), o.path);
      uint32_t id = 0;
      for (const std::string& name : bench::ReferenceFieldNameList()) {
        // A name record: a version byte (1), then the name (field_names.h).
        auto put = (*worker)->PutSync(FieldNames::Key(++id), "\x01" + name);
        if (!put.ok()) Die(put.status().ToString(), o.path);
      }
      if (Status s = (*worker)->FlushSync(); !s.ok()) Die(s.ToString(), o.path);
      if (Status s = names_.Load(**worker); !s.ok()) Die(s.ToString(), o.path);
    }
    std::filesystem::remove_all(dir);
    if (names_.size() != bench::ReferenceFieldNameList().size()) Die("names missing", dir);
  }
  [[noreturn]] static void Die(const std::string& what, const std::string& where) {
    std::fprintf(stderr, "profile_bench: the field name table (%s): %s\n", where.c_str(),
                 what.c_str());
    std::exit(1);
  }

  FieldNames names_;
};

// User `user`'s 25 reference fields at `now` as a body stores them: named by
// number, in StoredBefore order. *string_bytes: the bytes of their string
// values.
std::vector<StoredField> ReferenceStoredFields(uint64_t user, UnixSeconds now,
                                               size_t* string_bytes = nullptr) {
  const FieldNames& names = ReferenceNames::Get();
  const std::vector<bench::ReferenceField> fields = bench::ReferenceFields(user, now);
  if (string_bytes != nullptr) *string_bytes = bench::StringBytes(fields);
  std::vector<StoredField> out;
  for (const bench::ReferenceField& f : fields) {
    StoredField s;
    s.name_id = names.Find(f.name);
    s.expires_at = f.expires_at;
    switch (f.type) {
      case bench::ReferenceField::Type::kInt:
        s.value = FieldValue::Int(f.i);
        break;
      case bench::ReferenceField::Type::kDouble:
        s.value = FieldValue::Double(f.d);
        break;
      case bench::ReferenceField::Type::kString:
        s.value = FieldValue::String(f.s);
        break;
      case bench::ReferenceField::Type::kTime:
        s.value = FieldValue::Time(static_cast<UnixSeconds>(f.i));
        break;
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), StoredBefore);
  return out;
}

// One reference profile's bytes with and without its fields.
struct FieldBytes {
  size_t body_without = 0;    // the record body (codec 1)
  size_t body_with = 0;       // with the fields section (codec 4)
  size_t device_without = 0;  // the record on the device (header, 36-byte key, padding)
  size_t device_with = 0;
  size_t strings = 0;  // bytes of the fields' string values
  // What the fields cost on the device, their strings left out (issue 21's
  // budget: at most 120).
  double cost() const {
    return static_cast<double>(device_with) - static_cast<double>(device_without) -
           static_cast<double>(strings);
  }
};

// Profile i's: profile_bench's reference segments of seed i, user i's fields, at kNow.
FieldBytes BytesOf(uint64_t i) {
  FieldBytes b;
  const std::vector<Segment> segments = ReferenceProfile(i, false);
  const std::vector<StoredField> fields = ReferenceStoredFields(i, kNow, &b.strings);
  std::string body;
  EncodeProfile(segments, 0, Group(), &body);
  b.body_without = body.size();
  EncodeProfile(segments, 0, Group(), fields, &body);
  b.body_with = body.size();
  b.device_without = storage::RecordFootprint(36, static_cast<uint32_t>(b.body_without));
  b.device_with = storage::RecordFootprint(36, static_cast<uint32_t>(b.body_with));
  return b;
}

// The mean of kFieldProfiles profiles' figures, and the worst cost.
constexpr int kFieldProfiles = 50;
struct MeanFieldBytes {
  double body_without = 0, body_with = 0, device_without = 0, device_with = 0, strings = 0;
  double cost = 0, worst_cost = 0;
};
MeanFieldBytes MeanBytes() {
  MeanFieldBytes m;
  for (int i = 0; i < kFieldProfiles; ++i) {
    const FieldBytes b = BytesOf(static_cast<uint64_t>(i));
    m.body_without += static_cast<double>(b.body_without) / kFieldProfiles;
    m.body_with += static_cast<double>(b.body_with) / kFieldProfiles;
    m.device_without += static_cast<double>(b.device_without) / kFieldProfiles;
    m.device_with += static_cast<double>(b.device_with) / kFieldProfiles;
    m.strings += static_cast<double>(b.strings) / kFieldProfiles;
    m.cost += b.cost() / kFieldProfiles;
    m.worst_cost = std::max(m.worst_cost, b.cost());
  }
  return m;
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
  const MeanFieldBytes m = MeanBytes();
  std::printf(
      "bytes a user on the device, the reference profile with and without the workload's 25 "
      "fields (20 counters named by number, 5 more; mean of %d users)\n",
      kFieldProfiles);
  std::printf("  without fields: %7.1f   with them: %7.1f   string values: %5.1f\n",
              m.device_without, m.device_with, m.strings);
  std::printf(
      "  the fields, string values not counted: %5.1f (worst %.0f; issue 21's budget: at most "
      "120)\n\n",
      m.cost, m.worst_cost);
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

// The read of the benchmarks below: a third of the reference segments have
// expired by then (the fields are made at this time, so all are live).
constexpr UnixSeconds kRead = kNow + 240 * 3600;

// What the server does for a get between the device read and the socket
// (profile_session.cc, AnswerOwn): decode, select the live segments, answer
// the fields `options` asks for (AnswerFields: nothing decoded when none is
// asked), encode the answer frame.
void GetAnswerLoop(benchmark::State& state, const std::string& body, const GetOptions& options) {
  const FieldNames& names = ReferenceNames::Get();
  Columns columns;
  std::vector<StoredField> stored;
  size_t bytes = 0, fields = 0;
  for (auto _ : state) {
    GetResult result;
    Result<uint32_t> live = DecodeSelect(body, kRead, options, &columns, &result);
    benchmark::DoNotOptimize(live.ok());
    uint32_t live_fields = 0;
    Status s = AnswerFields(columns.fields, names, options.fields, kRead, *live, &stored,
                            &result.fields, &live_fields);
    benchmark::DoNotOptimize(s.ok());
    result.fields_asked = options.fields.mode != FieldSelection::Mode::kNone;
    std::string frame;
    (void)proto::AppendFrame(&frame, static_cast<uint8_t>(proto::Op::kGet), 1, 0,
                             proto::kMaxResponseBytes,
                             [&](std::string* out) { proto::Encode(result, out); });
    benchmark::DoNotOptimize(frame.data());
    bytes = frame.size();
    fields = result.fields.size();
  }
  state.counters["frame_bytes"] = static_cast<double>(bytes);
  state.counters["fields"] = static_cast<double>(fields);
}

// A profile without fields. (Before issue 21 this did not call
// AnswerFields, which the server did not have: its cost is the get's now.)
void BM_GetAnswer(benchmark::State& state) {
  std::string body;
  EncodeSegments(ReferenceProfile(1, state.range(0) != 0), &body);
  GetAnswerLoop(state, body, GetOptions{});
}
BENCHMARK(BM_GetAnswer)->Arg(0)->Arg(1)->ArgName("second_ttl");

// The same profile holding also the workload's 25 fields (codec 4), the get
// asking for none of them (asked:0: issue 21's goal, no more than
// BM_GetAnswer) or for the counters (asked:1, field_prefix "cap:", what a
// frequency-capping bidder asks: 20 fields).
void BM_GetAnswerWithFields(benchmark::State& state) {
  std::string body;
  EncodeProfile(ReferenceProfile(1, state.range(0) != 0), 0, Group(),
                ReferenceStoredFields(1, kRead), &body);
  GetOptions options;
  if (state.range(1) != 0) {
    options.fields = FieldSelection{FieldSelection::Mode::kPrefix, {}, bench::kCapPrefix};
  }
  GetAnswerLoop(state, body, options);
}
BENCHMARK(BM_GetAnswerWithFields)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"second_ttl", "asked"});

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

// The Store() step of a write (profile_session.cc): the record's times count
// the fields' expiries (its section decoded for them), then the body.
void StoreProfile(const std::vector<Segment>& segments, const Group& group,
                  std::string_view section, std::vector<StoredField>* stored,
                  std::vector<UnixSeconds>* expiries, std::string* out) {
  expiries->clear();
  if (!section.empty()) {
    Status s = DecodeFieldSection(section, stored);
    benchmark::DoNotOptimize(s.ok());
    for (const StoredField& f : *stored) expiries->push_back(f.expires_at);
  }
  EncodeProfile(segments, 0, group, section, out);
  RecordTimes t = TimesFor(segments, 0.25, *expiries);
  benchmark::DoNotOptimize(t.sweep_at + t.void_at);
  benchmark::DoNotOptimize(out->data());
}

// The reference profile at kRead: with its 25 fields or none; with the
// third of its segments that expired by then, or swept (only the live ones:
// what the sweeper, or a write that trims them, leaves).
std::string ReferenceBody(bool fields, bool swept) {
  std::vector<Segment> segments = ReferenceProfile(1, false);
  if (swept) std::erase_if(segments, [](const Segment& s) { return !Alive(s.expires_at, kRead); });
  std::string body;
  if (fields) {
    EncodeProfile(segments, 0, Group(), ReferenceStoredFields(1, kRead), &body);
  } else {
    EncodeSegments(segments, &body);
  }
  return body;
}

// An upsert of one segment (segbench's upsert-1), as the session does it:
// decode, merge the segment (expired ones trimmed on the way), store. On the
// reference profile without fields (fields:0) or with its 25 (fields:1),
// a third of its segments expired (swept:0) or none (swept:1).
void BM_UpsertOneRewrite(benchmark::State& state) {
  const std::string body = ReferenceBody(state.range(0) != 0, state.range(1) != 0);
  // Expiring on a whole hour, as segbench's upsert-1 (and the workload's
  // segments) do: the profile keeps its expiries in hours.
  SegmentUpdate u;
  u.id = 31337;
  u.value = bench::WholeHourExpiry(kRead, 24);
  const std::vector<SegmentUpdate> updates = {u};
  Columns columns;
  std::vector<Segment> merged;
  std::vector<StoredField> stored;
  std::vector<UnixSeconds> expiries;
  std::string out;
  for (auto _ : state) {
    Status s = DecodeColumns(body, &columns);
    benchmark::DoNotOptimize(s.ok());
    UpsertResult r = Merge(&columns, updates, UpsertMode::kSet, kRead, &merged);
    benchmark::DoNotOptimize(r.count);
    StoreProfile(merged, columns.group, columns.fields, &stored, &expiries, &out);
  }
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_UpsertOneRewrite)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"fields", "swept"});

// An increment of one of the profile's 20 counters (segbench's incr), as
// field_write.cc's WriteFields does it between reading and writing the
// record: read the body up to its segments, resolve the fields' names, drop
// expired fields, add 1, encode the section again (names by number). Then:
// - swept:1, a profile none of whose segments expired, or fewer than the
//   sweeper's share: the section goes before the segments' bytes, kept as
//   they are; in a fixed window (sliding:0) the fields expire as before, so
//   the record's times stay; in a sliding one (sliding:1) they are worked
//   out again from the segments' expiries (decoded) and the fields';
// - swept:0, a profile due for the sweeper (a third of its segments
//   expired): the segments are decoded, trimmed and encoded again, as an
//   upsert does, which saves the sweeper that rewrite.
// Issue 21's goal: no more than BM_UpsertOneRewrite/fields:1 on the same
// profile.
void BM_IncrementRewrite(benchmark::State& state) {
  const bool swept = state.range(0) != 0, sliding = state.range(1) != 0;
  const FieldNames& names = ReferenceNames::Get();
  const std::string body = ReferenceBody(true, swept);
  const std::string counter = bench::CapName(bench::ReferenceCampaigns(1)[7]);
  BodyHead head;
  Columns columns;
  std::vector<Field> fields;
  std::vector<UnixSeconds> before, after;
  std::vector<std::string> unnumbered;
  std::vector<Segment> merged;
  std::vector<StoredField> stored;
  std::vector<UnixSeconds> expiries;
  std::string section;
  std::string out;
  UnixSeconds window = kRead + 86400;
  for (auto _ : state) {
    Status s = DecodeHead(body, &head);
    benchmark::DoNotOptimize(s.ok());
    if (Alive(head.earliest, kRead) != swept) std::abort();
    s = ResolveFields(head.fields, names, &fields);
    benchmark::DoNotOptimize(s.ok());
    before.clear();
    for (const Field& f : fields) before.push_back(f.expires_at);
    std::erase_if(fields, [](const Field& f) { return !Alive(f.expires_at, kRead); });
    Field* f = FindField(fields, counter);
    if (f == nullptr) std::abort();
    ++f->value.i;
    if (sliding) f->expires_at = ++window;
    section.clear();
    unnumbered.clear();
    EncodeFields(fields, names, &section, &unnumbered);
    after.clear();
    for (const Field& g : fields) after.push_back(g.expires_at);
    if (!swept) {
      s = DecodeColumns(body, &columns);
      benchmark::DoNotOptimize(s.ok());
      TrimResult t = TrimBefore(columns, kRead, &merged);
      benchmark::DoNotOptimize(t.trimmed);
      EncodeProfile(merged, 0, head.group, std::string_view(section), &out);
      RecordTimes times = TimesFor(merged, 0.25, after);
      benchmark::DoNotOptimize(times.sweep_at + times.void_at);
      continue;
    }
    EncodeProfileKeeping(head.segments, head.log_position, head.group, section, &out);
    std::sort(before.begin(), before.end());
    std::sort(after.begin(), after.end());
    if ((before == after) == sliding) std::abort();
    if (sliding) {
      s = DecodeColumns(body, &columns);
      benchmark::DoNotOptimize(s.ok());
      RecordTimes times = TimesFor(columns.expires, 0.25, after);
      benchmark::DoNotOptimize(times.sweep_at + times.void_at);
    }
    benchmark::DoNotOptimize(out.data());
  }
  if (!unnumbered.empty()) std::abort();  // every name has its number
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_IncrementRewrite)
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({0, 0})
    ->ArgNames({"swept", "sliding"});

// Encoding the reference profile with its 25 fields; the counters: bytes of
// the profile without and with them (the record body, and on the device:
// header, 36-byte key and padding included), the string values' bytes, and
// what the fields cost on the device besides those (issue 21's budget: at
// most 120), the mean of 50 profiles, and the worst.
void BM_EncodeWithFields(benchmark::State& state) {
  const std::vector<Segment> segments = ReferenceProfile(1, false);
  const std::vector<StoredField> fields = ReferenceStoredFields(1, kNow);
  std::string body;
  for (auto _ : state) {
    EncodeProfile(segments, 0, Group(), fields, &body);
    benchmark::DoNotOptimize(body.data());
  }
  const MeanFieldBytes m = MeanBytes();
  state.counters["body_bytes_without"] = m.body_without;
  state.counters["body_bytes_with"] = m.body_with;
  state.counters["device_bytes_without"] = m.device_without;
  state.counters["device_bytes_with"] = m.device_with;
  state.counters["string_bytes"] = m.strings;
  state.counters["fields_device_bytes"] = m.cost;
  state.counters["fields_device_bytes_worst"] = m.worst_cost;
}
BENCHMARK(BM_EncodeWithFields);

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
