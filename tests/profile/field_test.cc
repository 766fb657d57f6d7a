// Profile fields (issue 21): the fields section of codec 4, the store's
// name table, and the profile layer's field writes and reads.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "profile/codec.h"
#include "profile/field_codec.h"
#include "profile/field_names.h"
#include "profile/fields.h"
#include "profile/segment_ops.h"
#include "profile/test_util.h"

namespace segstore::profile {
namespace {

using testing::kTestStart;
using testing::ProfileStoreFixture;

constexpr UnixSeconds kNow = kTestStart;

StoredField Numbered(uint32_t id, FieldValue v, UnixSeconds expires = kNever) {
  return StoredField{id, {}, std::move(v), expires};
}
StoredField Inline(std::string name, FieldValue v, UnixSeconds expires = kNever) {
  return StoredField{0, std::move(name), std::move(v), expires};
}

// Decodes `section` from a heap buffer of exactly its size (so that a read
// past its end is caught by the sanitizers).
Status DecodeExact(const std::string& section, std::vector<StoredField>* out) {
  std::vector<char> exact(section.begin(), section.end());
  return DecodeFieldSection(std::string_view(exact.data(), exact.size()), out);
}

TEST(FieldCodecTest, EveryTypeExpiryAndNameFormRoundTrips) {
  const std::vector<StoredField> in = {
      Numbered(1, FieldValue::Int(0)),
      Numbered(2, FieldValue::Int(-1), kNow + 86400),
      Numbered(3, FieldValue::Int(std::numeric_limits<int64_t>::min()), kNow + 86400),
      Numbered(900, FieldValue::Int(std::numeric_limits<int64_t>::max()), kNow + 7),
      Numbered(901, FieldValue::Double(0.25)),
      Numbered(5000, FieldValue::Double(std::nan("")), UINT32_MAX),
      Numbered(FieldNames::kMaxNames, FieldValue::Time(UINT32_MAX)),
      Inline("a", FieldValue::String(""), 1),
      Inline("consent", FieldValue::String(std::string(120, 'c')), kNow + 390 * 86400),
      Inline("raw", FieldValue::Bytes(std::string("\0\xff\x01", 3))),
      Inline(std::string(kMaxFieldNameBytes, 'z'), FieldValue::Time(0), kNow + 86400),
  };
  std::string section;
  EncodeFieldSection(in, &section);
  std::vector<StoredField> out;
  ASSERT_TRUE(DecodeExact(section, &out).ok());
  EXPECT_EQ(out, in);
  // One field alone, never expiring: no expiry bits at all.
  const std::vector<StoredField> one = {Numbered(7, FieldValue::Int(3))};
  section.clear();
  EncodeFieldSection(one, &section);
  ASSERT_TRUE(DecodeExact(section, &out).ok());
  EXPECT_EQ(out, one);
  EXPECT_EQ(section.size(), 7u);  // t, id, k, s, d, one byte of bits, the value
}

// Codec 4 holds fields beside segments and a group; a body without fields is
// byte for byte what codecs 1 to 3 wrote, and reads the same.
TEST(FieldCodecTest, Version4CarriesFieldsBesideSegmentsAndGroup) {
  const std::vector<Segment> segments = testing::ReferenceProfile(1, kNow, 50);
  const std::vector<StoredField> fields = {Numbered(4, FieldValue::Int(2), kNow + 3600),
                                           Inline("country", FieldValue::String("FR"))};
  Group group;
  group.members = {GroupMember{"cookie-1", kNever}, GroupMember{"cookie-2", kNow + 60}};
  for (const uint64_t position : {uint64_t{0}, uint64_t{77}}) {
    for (const bool grouped : {false, true}) {
      const Group g = grouped ? group : Group();
      std::string without, with;
      EncodeProfile(segments, position, g, &without);
      std::string same;
      EncodeProfile(segments, position, g, std::span<const StoredField>(), &same);
      EXPECT_EQ(same, without);
      EXPECT_FALSE(HasFieldSection(without));
      EncodeProfile(segments, position, g, fields, &with);
      EXPECT_EQ(with[0], 4);
      EXPECT_TRUE(HasFieldSection(with));
      EXPECT_EQ(HasGroupSection(with), grouped);
      EXPECT_EQ(*DecodeLogPosition(with), position);
      Columns c;
      ASSERT_TRUE(DecodeColumns(with, &c).ok());
      EXPECT_EQ(c.log_position, position);
      EXPECT_EQ(c.group, g);
      std::vector<StoredField> back;
      ASSERT_TRUE(DecodeFieldSection(c.fields, &back).ok());
      EXPECT_EQ(back, fields);
      // The segments read as from the body without fields, on both paths.
      std::vector<Segment> a, b;
      ASSERT_TRUE(DecodeSegments(with, &a).ok());
      ASSERT_TRUE(DecodeSegments(without, &b).ok());
      EXPECT_EQ(a, b);
      Columns scratch;
      GetResult ga, gb;
      EXPECT_EQ(*DecodeSelect(with, kNow, GetOptions{}, &scratch, &ga), segments.size());
      EXPECT_EQ(scratch.fields, c.fields);
      ASSERT_TRUE(DecodeSelect(without, kNow, GetOptions{}, &scratch, &gb).ok());
      EXPECT_TRUE(scratch.fields.empty());
      EXPECT_EQ(ga.ids, gb.ids);
      EXPECT_EQ(ga.expires, gb.expires);
      // The raw section re-encodes to the same body.
      std::string again;
      EncodeProfile(segments, position, g, std::string_view(c.fields), &again);
      EXPECT_EQ(again, with);
    }
  }
}

// The workload's fields (../shared/workload.md, "Profile fields"): 20
// frequency-cap counters named from 5,000 campaigns, expiring at the end of
// the day, and five more. Issue 21's budget: at most 120 bytes on the device
// beside the profile without them, not counting the bytes of string values.
TEST(FieldCodecTest, TheWorkloadsFieldsCostUnder120BytesBesidesStrings) {
  std::mt19937_64 rng(21);
  // The name table as a store fills it: campaigns numbered in the order they
  // were first seen, the five other names among them.
  std::vector<uint32_t> campaign_ids(5000);
  for (uint32_t i = 0; i < 5000; ++i) campaign_ids[i] = 6 + i;
  std::shuffle(campaign_ids.begin(), campaign_ids.end(), rng);
  const UnixSeconds end_of_day = (kNow / 86400 + 1) * 86400;
  size_t worst = 0;
  for (int user = 0; user < 200; ++user) {
    std::vector<StoredField> fields;
    std::set<uint32_t> caps;
    while (caps.size() < 20) caps.insert(campaign_ids[rng() % 5000]);
    for (uint32_t id : caps) {
      fields.push_back(Numbered(id, FieldValue::Int(static_cast<int64_t>(rng() % 11)), end_of_day));
    }
    const std::string device(8 + rng() % 9, 'd');
    fields.push_back(
        Numbered(1, FieldValue::Time(kNow - static_cast<UnixSeconds>(rng() % (30 * 86400)))));
    fields.push_back(Numbered(2, FieldValue::String("FR")));
    fields.push_back(
        Numbered(3, FieldValue::Double(std::ldexp(double(rng() >> 11), -53)), kNow + 7 * 86400));
    fields.push_back(Numbered(4, FieldValue::String(device)));
    fields.push_back(Numbered(5, FieldValue::String(std::string(120, 'c')), kNow + 390 * 86400));
    std::sort(fields.begin(), fields.end(), StoredBefore);
    const std::vector<Segment> segments = testing::ReferenceProfile(user, kNow);
    std::string without, with;
    EncodeProfile(segments, 0, Group(), &without);
    EncodeProfile(segments, 0, Group(), fields, &with);
    const size_t strings = 2 + device.size() + 120;
    const size_t cost = with.size() - without.size() - strings;
    worst = std::max(worst, cost);
    EXPECT_LE(cost, 120u) << "user " << user;
  }
  std::printf("workload fields: at most %zu bytes beside the profile, strings not counted\n",
              worst);
}

TEST(FieldCodecTest, EveryTruncationAndDamageIsCorruptionNeverAnOverread) {
  const std::vector<StoredField> in = {
      Numbered(3, FieldValue::Int(-5), kNow + 10), Numbered(40, FieldValue::Double(1.5)),
      Numbered(41, FieldValue::Time(kNow), kNow + 20), Inline("n", FieldValue::Bytes("xyz"))};
  std::string section;
  EncodeFieldSection(in, &section);
  std::vector<StoredField> out;
  for (size_t n = 0; n < section.size(); ++n) {
    EXPECT_TRUE(DecodeExact(section.substr(0, n), &out).IsCorruption()) << n;
  }
  EXPECT_TRUE(DecodeExact(section + "x", &out).IsCorruption());
  // Any byte changed: decodes or is Corruption, and never reads past the end.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string bad = section;
    bad[rng() % bad.size()] = static_cast<char>(rng());
    if (rng() % 3 == 0) bad[rng() % bad.size()] = static_cast<char>(rng());
    Status s = DecodeExact(bad, &out);
    EXPECT_TRUE(s.ok() || s.IsCorruption()) << s.ToString();
  }
  // Hand-made: what no encoder writes.
  const std::vector<std::string> bad = {
      std::string("\x00\x00\x00", 3),                  // no fields
      std::string("\x01\x00\x00\x00\x00\x00", 6),      // first id 0
      std::string("\x01\x01\x21\x00\x00\x00\x00", 7),  // Rice parameter 33
      std::string("\x00\x01\x00\x00\x00", 5),          // an inline name of 0 bytes
      std::string("\x00\x02\x01"
                  "b"
                  "\x01"
                  "a"
                  "\x00\x00\x00\x00",
                  10),                                 // names out of order
      std::string("\x01\x01\x00\x00\x00\x07\x00", 7),  // type 7
      std::string("\x03\x01\x00\x00\x02\x05\x01\x60\x00\x00\x00\x00\x00", 13),  // expiry 3 of 2
      std::string("\x01\x01\x00\x00\x02\x05\x05\x00\x00", 9),  // more expiries than fields
      std::string("\x01\x01\x00\x00\x00\x04\x80", 7),          // a time cut short
      std::string("\x01\x01\x00\x00\x00\x02\x05"
                  "ab",
                  9),  // a string longer than the rest
  };
  for (const std::string& b : bad) {
    EXPECT_TRUE(DecodeExact(b, &out).IsCorruption()) << ::testing::PrintToString(b);
  }
  // A version-4 body whose section flags lack the fields bit, or hold an unknown one.
  for (const char flags : {char(0), char(1), char(6)}) {
    std::string body = std::string("\x04\x00", 2) + flags + "\x01\x00\x00";
    std::vector<char> exact(body.begin(), body.end());
    Columns c;
    EXPECT_TRUE(DecodeColumns(std::string_view(exact.data(), exact.size()), &c).IsCorruption());
  }
}

// ---- The profile layer.

class FieldTest : public ProfileStoreFixture {
 protected:
  // The user's record's fields section, as stored.
  std::vector<StoredField> Stored(const std::string& user) {
    auto r = session_->worker().GetSync(user);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    Columns c;
    EXPECT_TRUE(DecodeColumns(r->body(), &c).ok());
    std::vector<StoredField> out;
    if (!c.fields.empty()) {
      EXPECT_TRUE(DecodeFieldSection(c.fields, &out).ok());
    }
    return out;
  }
  Result<FieldWriteResult> Set(const std::string& user, std::vector<FieldUpdate> fields) {
    return Run<FieldWriteResult>([&](auto cb) { session_->FieldSet({}, user, fields, cb); });
  }
  Result<FieldWriteResult> Del(const std::string& user, std::vector<std::string> names) {
    return Run<FieldWriteResult>([&](auto cb) { session_->FieldDelete({}, user, names, cb); });
  }
  Result<IncrementResult> Incr(const std::string& user, segstore::FieldIncrement inc) {
    return Run<IncrementResult>([&](auto cb) { session_->FieldIncrement({}, user, inc, cb); });
  }
  Result<FieldMaxResult> Max(const std::string& user, FieldUpdate f) {
    return Run<FieldMaxResult>([&](auto cb) { session_->FieldMax({}, user, f, cb); });
  }
  Result<GetResult> Fields(const std::string& user,
                           FieldSelection sel = {FieldSelection::Mode::kAll, {}, {}}) {
    GetOptions o;
    o.fields = std::move(sel);
    return session_->GetSync(user, o);
  }
  template <typename T, typename Start>
  Result<T> Run(Start start) {
    std::optional<Result<T>> out;
    start([&out](Result<T> r) { out.emplace(std::move(r)); });
    while (!out) session_->Wait(std::chrono::milliseconds(10));
    return std::move(*out);
  }
  // Waits until the name table numbers `name` (its registration is
  // asynchronous, on this session's worker, which waiting drives), for at
  // most a minute: Wait returns early whenever work completes, so the
  // deadline is a time, not a count of waits.
  void AwaitNumbered(const std::string& name) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (names().Find(name) == 0 && std::chrono::steady_clock::now() < deadline) {
      session_->Wait(std::chrono::milliseconds(5));
    }
    ASSERT_NE(names().Find(name), 0u) << name << " not numbered within a minute";
  }
  const FieldNames& names() { return FieldNamesOf(*profiles_); }
  // The user's record is what encoding its decoded self gives, byte for
  // byte, and its times are what its stored segments and fields (expired
  // ones still in it too) make them: however a write got there (a write of
  // fields keeps the segments' bytes and, when no field's expiry changed,
  // the record's times).
  void ExpectStoredAsEncoded(const std::string& user) {
    auto r = session_->worker().GetSync(user);
    ASSERT_TRUE(r.ok()) << user << ": " << r.status().ToString();
    Columns c;
    ASSERT_TRUE(DecodeColumns(r->body(), &c).ok()) << user;
    std::vector<Segment> segments(c.size());
    for (size_t i = 0; i < c.size(); ++i) c.CopyTo(i, &segments[i]);
    std::string again;
    EncodeProfile(segments, c.log_position, c.group, c.fields, &again);
    EXPECT_EQ(again, r->body()) << user;
    std::vector<StoredField> stored;
    if (!c.fields.empty()) {
      ASSERT_TRUE(DecodeFieldSection(c.fields, &stored).ok()) << user;
    }
    std::vector<UnixSeconds> expiries;
    for (const StoredField& f : stored) expiries.push_back(f.expires_at);
    if (!c.group.empty()) return;  // a group's links count too (tested with links)
    const RecordTimes t = TimesFor(segments, ProfileOptions().sweep_share, expiries);
    EXPECT_EQ(r->sweep_at(), t.sweep_at) << user;
    EXPECT_EQ(r->void_at(), t.void_at) << user;
  }
};

FieldUpdate F(std::string name, FieldValue v, uint32_t expiry = kNever, bool ttl = false) {
  return FieldUpdate{std::move(name), std::move(v), expiry, ttl};
}

TEST_F(FieldTest, SetGetAndDeleteWithEverySelection) {
  Open();
  const std::vector<SegmentUpdate> seg = {{5, 3600, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", seg).ok());
  auto set = Set(
      "u",
      {F("cap:100001", FieldValue::Int(2), 86400, true),
       F("cap:100002", FieldValue::Int(0), kNow + 100), F("country", FieldValue::String("FR")),
       F("score", FieldValue::Double(0.75), 7 * 86400, true), F("seen", FieldValue::Time(kNow - 5)),
       F("blob", FieldValue::Bytes(std::string("\0\1", 2)))});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->changed, 6u);
  EXPECT_EQ(set->count, 6u);
  // No fields asked: the answer is exactly the segments, as before fields.
  auto plain = session_->GetSync("u");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->fields.empty());
  EXPECT_EQ(plain->ids, std::vector<uint64_t>{5});
  auto all = Fields("u");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->fields.size(), 6u);
  EXPECT_EQ(all->fields[0], (Field{"blob", FieldValue::Bytes(std::string("\0\1", 2)), kNever}));
  EXPECT_EQ(all->fields[1], (Field{"cap:100001", FieldValue::Int(2), kNow + 86400}));
  EXPECT_EQ(all->fields[2], (Field{"cap:100002", FieldValue::Int(0), kNow + 100}));
  EXPECT_EQ(all->fields[3].name, "country");
  EXPECT_EQ(all->fields[4], (Field{"score", FieldValue::Double(0.75), kNow + 7 * 86400}));
  EXPECT_EQ(all->fields[5], (Field{"seen", FieldValue::Time(kNow - 5), kNever}));
  EXPECT_EQ(all->ids, std::vector<uint64_t>{5});
  auto prefix = Fields("u", {FieldSelection::Mode::kPrefix, {}, "cap:"});
  ASSERT_TRUE(prefix.ok());
  ASSERT_EQ(prefix->fields.size(), 2u);
  EXPECT_EQ(prefix->fields[1].name, "cap:100002");
  auto named = Fields("u", {FieldSelection::Mode::kNames, {"score", "absent", "country"}, {}});
  ASSERT_TRUE(named.ok());
  ASSERT_EQ(named->fields.size(), 2u);
  EXPECT_EQ(named->fields[0].name, "country");
  EXPECT_EQ(named->fields[1].name, "score");
  // Expired: hidden from then on.
  clock_.Advance(100);
  prefix = Fields("u", {FieldSelection::Mode::kPrefix, {}, "cap:"});
  ASSERT_EQ(prefix->fields.size(), 1u);
  EXPECT_EQ(prefix->fields[0].name, "cap:100001");
  // Delete: counts the live ones named.
  auto del = Del("u", {"cap:100002", "country", "nope"});
  ASSERT_TRUE(del.ok()) << del.status().ToString();
  EXPECT_EQ(del->changed, 1u);
  EXPECT_EQ(del->count, 4u);
  EXPECT_TRUE(Del("nobody", {"x"}).status().IsNotFound());
  // Setting again replaces value, type and expiry.
  ASSERT_TRUE(Set("u", {F("score", FieldValue::String("high"))}).ok());
  named = Fields("u", {FieldSelection::Mode::kNames, {"score"}, {}});
  ASSERT_EQ(named->fields.size(), 1u);
  EXPECT_EQ(named->fields[0], (Field{"score", FieldValue::String("high"), kNever}));
}

TEST_F(FieldTest, IncrementsCountUpToTheCapInFixedAndSlidingWindows) {
  Open();
  segstore::FieldIncrement cap;
  cap.name = "cap:77";
  cap.delta = 1;
  cap.ttl = 86400;
  cap.cap = 3;
  for (int64_t i = 1; i <= 3; ++i) {
    auto r = Incr("u", cap);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->value, i);
    EXPECT_FALSE(r->capped);
    clock_.Advance(3600);
  }
  // The fourth is refused, and writes nothing.
  auto before = session_->worker().GetSync("u");
  auto r = Incr("u", cap);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->capped);
  EXPECT_EQ(r->value, 3);
  EXPECT_EQ(session_->worker().GetSync("u")->version(), before->version());
  // A fixed window: the expiry set at the first increment holds.
  auto got = Fields("u");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->fields.size(), 1u);
  EXPECT_EQ(got->fields[0].expires_at, kNow + 86400);
  EXPECT_TRUE(got->ids.empty());  // a profile of fields alone exists
  // Once it expires the counter starts again.
  clock_.Advance(86400);
  r = Incr("u", cap);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->value, 1);
  // A sliding window: every increment pushes the expiry.
  segstore::FieldIncrement slide;
  slide.name = "visits";
  slide.delta = 5;
  slide.ttl = 600;
  slide.window = segstore::FieldIncrement::Window::kSliding;
  ASSERT_TRUE(Incr("u", slide).ok());
  clock_.Advance(500);
  r = Incr("u", slide);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->value, 10);
  got = Fields("u", {FieldSelection::Mode::kNames, {"visits"}, {}});
  ASSERT_EQ(got->fields.size(), 1u);
  EXPECT_EQ(got->fields[0].expires_at, clock_.Now() + 600);
  // Negative deltas, and a cap below.
  segstore::FieldIncrement down;
  down.name = "visits";
  down.delta = -7;
  down.cap = 0;
  r = Incr("u", down);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->value, 3);
  r = Incr("u", down);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->capped);
  EXPECT_EQ(r->value, 3);
}

TEST_F(FieldTest, MaxKeepsTheLargerValue) {
  Open();
  auto r = Max("u", F("last_seen", FieldValue::Time(kNow - 100)));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->replaced);
  r = Max("u", F("last_seen", FieldValue::Time(kNow - 200)));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->replaced);
  EXPECT_EQ(r->value, FieldValue::Time(kNow - 100));
  r = Max("u", F("last_seen", FieldValue::Time(kNow)));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->replaced);
  EXPECT_EQ(r->value, FieldValue::Time(kNow));
  r = Max("u", F("score", FieldValue::Double(-1.5)));
  ASSERT_TRUE(r.ok());
  r = Max("u", F("score", FieldValue::Double(-0.5), 60, true));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->replaced);
  auto got = Fields("u", {FieldSelection::Mode::kNames, {"score"}, {}});
  ASSERT_EQ(got->fields.size(), 1u);
  EXPECT_EQ(got->fields[0], (Field{"score", FieldValue::Double(-0.5), kNow + 60}));
}

TEST_F(FieldTest, BadRequestsAreRefusedAndWriteNothing) {
  ProfileOptions o;
  o.max_fields = 4;
  o.max_field_bytes = 16;
  Open(o);
  ASSERT_TRUE(Set("u", {F("n", FieldValue::String("text")), F("c", FieldValue::Int(1))}).ok());
  const uint64_t version = session_->worker().GetSync("u")->version();
  auto invalid = [&](Status s, const char* what) {
    EXPECT_TRUE(s.code() == Status::Code::kInvalidArgument) << what << ": " << s.ToString();
  };
  invalid(Set("u", {F("", FieldValue::Int(1))}).status(), "an empty name");
  invalid(Set("u", {F(std::string(65, 'x'), FieldValue::Int(1))}).status(), "a long name");
  invalid(Set("u", {F("a", FieldValue::Int(1)), F("a", FieldValue::Int(2))}).status(), "twice");
  invalid(Set("u", {F("a", FieldValue::Int(1), kNow)}).status(), "an expiry now");
  invalid(Set("u", {F("a", FieldValue::Int(1), 0, true)}).status(), "a TTL of 0");
  invalid(Set("u", {F("a", FieldValue::Int(1), UINT32_MAX, true)}).status(), "a TTL past 2106");
  FieldValue bad_time = FieldValue::Time(0);
  bad_time.i = -1;
  invalid(Set("u", {F("a", bad_time)}).status(), "a negative time");
  EXPECT_TRUE(Set("u", {F("a", FieldValue::Bytes(std::string(17, 'b')))}).status().code() ==
              Status::Code::kLimitExceeded);
  EXPECT_TRUE(
      Set("u", {F("a", FieldValue::Int(1)), F("b", FieldValue::Int(1)), F("d", FieldValue::Int(1))})
          .status()
          .code() == Status::Code::kLimitExceeded);  // 5 live fields
  segstore::FieldIncrement inc;
  inc.name = "n";
  invalid(Incr("u", inc).status(), "an increment of a string");
  inc.name = "c";
  inc.delta = std::numeric_limits<int64_t>::max();
  invalid(Incr("u", inc).status(), "an overflow");
  invalid(Max("u", F("n", FieldValue::String("z"))).status(), "max of a string");
  invalid(Max("u", F("c", FieldValue::Double(2))).status(), "max of another type");
  invalid(Del("u", {""}).status(), "delete of an empty name");
  EXPECT_EQ(session_->worker().GetSync("u")->version(), version);
  auto got = Fields("u");
  ASSERT_EQ(got->fields.size(), 2u);
  EXPECT_EQ(got->fields[0], (Field{"c", FieldValue::Int(1), kNever}));
}

TEST_F(FieldTest, SegmentWritesKeepFieldsAndFieldWritesKeepSegments) {
  Open();
  const std::vector<SegmentUpdate> segs = {
      {1, 3600, true, 9u, {}}, {2, 7200, true, {}, {}}, {3, 60, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", segs).ok());
  ASSERT_TRUE(Set("u", {F("a", FieldValue::Int(1)), F("b", FieldValue::Int(2), 30, true)}).ok());
  const std::vector<SegmentUpdate> more = {{4, 3600, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", more).ok());
  const std::vector<uint64_t> one = {2};
  ASSERT_TRUE(session_->RemoveSync("u", one).ok());
  ASSERT_TRUE(session_->ExpireSync("u", std::vector<uint64_t>{4}, ExpireSpec{100, true, {}}).ok());
  auto got = Fields("u");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 3, 4}));
  ASSERT_EQ(got->fields.size(), 2u);
  // A field write keeps the live segments (and their attributes) and drops
  // the expired ones, as upsert does.
  clock_.Advance(61);
  segstore::FieldIncrement inc;
  inc.name = "a";
  ASSERT_TRUE(Incr("u", inc).ok());
  got = Fields("u");
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 4}));
  EXPECT_EQ(got->attr1[0], 9u);
  ASSERT_EQ(got->fields.size(), 1u);  // b expired at +30
  EXPECT_EQ(got->fields[0], (Field{"a", FieldValue::Int(2), kNever}));
  EXPECT_EQ(Stored("u").size(), 1u);  // and is gone from the record
  // A link keeps the fields too.
  ASSERT_TRUE(session_->LinkSync("m", "u").ok() || true);
  ASSERT_TRUE(session_->UpsertSync("m", more).ok());
  ASSERT_TRUE(session_->LinkSync("u", "m").ok());
  got = session_->GetSync(
      "u", GetOptions{.own_only = true, .fields = {FieldSelection::Mode::kAll, {}, {}}});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->fields.size(), 1u);
  // Delete takes the fields with the profile.
  ASSERT_TRUE(*session_->DeleteSync("u"));
  EXPECT_TRUE(Fields("u").status().IsNotFound());
}

// A write of fields keeps the segments' bytes as they are, expired ones too
// (hidden from reads), until the record is due for the sweeper
// (sweep_share of it expired); then it trims them, as an upsert does.
TEST_F(FieldTest, AFieldWriteKeepsTheSegmentsUntilTheRecordIsDueForTheSweeper) {
  Open();
  ASSERT_EQ(ProfileOptions().sweep_share, 0.25);
  std::vector<SegmentUpdate> segs;
  for (uint64_t id = 1; id <= 8; ++id) segs.push_back({id, id == 3 ? 100u : 90000u, true, {}, {}});
  ASSERT_TRUE(session_->UpsertSync("u", segs).ok());  // one of eight expires first
  for (uint64_t id = 1; id <= 8; ++id) segs[id - 1].value = id <= 3 ? 100u : 90000u;
  ASSERT_TRUE(session_->UpsertSync("v", segs).ok());  // three of eight
  ASSERT_TRUE(Set("u", {F("a", FieldValue::Int(1))}).ok());
  ASSERT_TRUE(Set("v", {F("a", FieldValue::Int(1))}).ok());
  auto columns = [this](const std::string& user) {
    Columns c;
    auto r = session_->worker().GetSync(user);
    EXPECT_TRUE(r.ok() && DecodeColumns(r->body(), &c).ok()) << user;
    return c.size();
  };
  clock_.Advance(101);
  segstore::FieldIncrement inc;
  inc.name = "a";
  ASSERT_TRUE(Incr("u", inc).ok());
  ASSERT_TRUE(Incr("v", inc).ok());
  EXPECT_EQ(columns("u"), 8u);  // one of eight expired: not due, kept
  EXPECT_EQ(columns("v"), 5u);  // three of eight: due, trimmed
  for (const std::string user : {"u", "v"}) {
    auto got = Fields(user);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->ids.size(), user == "u" ? 7u : 5u);
    ASSERT_EQ(got->fields.size(), 1u);
    EXPECT_EQ(got->fields[0].value.i, 2);
    ExpectStoredAsEncoded(user);
  }
  // A sliding window moves the record's times, worked out again.
  inc.ttl = 500;
  inc.window = segstore::FieldIncrement::Window::kSliding;
  ASSERT_TRUE(Incr("u", inc).ok());
  ExpectStoredAsEncoded("u");
  EXPECT_EQ(columns("u"), 8u);
  // The last field deleted beside an expired segment: written from the
  // live segments.
  ASSERT_TRUE(Del("u", {"a"}).ok());
  EXPECT_EQ(columns("u"), 7u);
  ExpectStoredAsEncoded("u");
}

TEST_F(FieldTest, AProfileOfFieldsAloneExistsUntilTheyExpire) {
  Open();
  ASSERT_TRUE(Set("u", {F("a", FieldValue::Int(1), 100, true)}).ok());
  auto got = session_->GetSync("u");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->ids.empty());
  EXPECT_EQ(*session_->CountSync("u"), 0u);
  clock_.Advance(100);
  EXPECT_TRUE(session_->GetSync("u").status().IsNotFound());
  EXPECT_TRUE(Fields("u").status().IsNotFound());
  // The engine drops the record at its void_at, unread.
  EXPECT_TRUE(session_->worker().GetSync("u").status().IsNotFound());
  // A delete of a profile of fields alone deletes it, and says there was one.
  ASSERT_TRUE(Set("v", {F("a", FieldValue::Int(1))}).ok());
  EXPECT_TRUE(*session_->DeleteSync("v"));
  EXPECT_TRUE(Fields("v").status().IsNotFound());
  EXPECT_FALSE(*session_->DeleteSync("v"));
}

TEST_F(FieldTest, NamesAreNumberedOnceRegisteredAndSurviveARestart) {
  Open();
  ASSERT_TRUE(
      Set("a", {F("cap:1", FieldValue::Int(1)), F("country", FieldValue::String("DE"))}).ok());
  // The first write names them inline; registration follows on its own.
  std::vector<StoredField> first = Stored("a");
  ASSERT_EQ(first.size(), 2u);
  AwaitNumbered("cap:1");
  AwaitNumbered("country");
  ASSERT_TRUE(
      Set("b", {F("country", FieldValue::String("IT")), F("new", FieldValue::Int(0))}).ok());
  std::vector<StoredField> second = Stored("b");
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].name_id, names().Find("country"));
  EXPECT_TRUE(second[0].name.empty());
  EXPECT_EQ(second[1].name_id, 0u);
  EXPECT_EQ(second[1].name, "new");
  AwaitNumbered("new");
  // A write of "a" renumbers its inline names.
  segstore::FieldIncrement inc;
  inc.name = "cap:1";
  ASSERT_TRUE(Incr("a", inc).ok());
  for (const StoredField& f : Stored("a")) EXPECT_NE(f.name_id, 0u);
  // The table is in the data file: a restart reads it back.
  const uint32_t country = names().Find("country");
  Reopen();
  EXPECT_EQ(names().Find("country"), country);
  EXPECT_EQ(names().size(), 3u);
  auto got = Fields("a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->fields.size(), 2u);
  EXPECT_EQ(got->fields[0], (Field{"cap:1", FieldValue::Int(2), kNever}));
  EXPECT_EQ(got->fields[1], (Field{"country", FieldValue::String("DE"), kNever}));
  // The name records are the node's own keys.
  auto rec = session_->worker().GetSync(FieldNames::Key(country));
  ASSERT_TRUE(rec.ok());
  EXPECT_TRUE(storage::IsReservedKey(rec->key()));
}

// A lower max_field_names on a store that numbered more names keeps
// reading every field (the table loads every number it holds); only new
// names stop being numbered.
// A session that goes while names it registers are being written (a
// cluster's applier that stops, a server shutting down) leaves the table
// able to register: the next session's writes get their names numbered,
// those left over included.
TEST_F(FieldTest, NamesLeftByASessionThatWentAreRegisteredByTheNext) {
  Open();
  std::vector<std::string> all;
  for (int p = 0; p < 3; ++p) {
    std::vector<FieldUpdate> fields;
    for (int i = 0; i < 200; ++i) {
      all.push_back("p" + std::to_string(p) + ":" + std::to_string(i));
      fields.push_back(F(all.back(), FieldValue::Int(i)));
    }
    ASSERT_TRUE(Set("u" + std::to_string(p), fields).ok());
  }
  session_.reset();  // at once: 600 names queued, in three batches
  auto sess = profiles_->NewSession();
  ASSERT_TRUE(sess.ok());
  session_ = std::move(sess).value();
  ASSERT_TRUE(Set("late", {F("late", FieldValue::Int(1))}).ok());
  AwaitNumbered("late");
  for (const std::string& name : all) AwaitNumbered(name);
  EXPECT_EQ(names().size(), 601u);
  Reopen();
  EXPECT_EQ(names().size(), 601u);
  EXPECT_NE(names().Find("late"), 0u);
}

TEST_F(FieldTest, ALowerNameLimitKeepsEveryNumberedName) {
  Open();
  ASSERT_TRUE(Set("a", {F("n1", FieldValue::Int(1)), F("n2", FieldValue::Int(2)),
                        F("n3", FieldValue::Int(3))})
                  .ok());
  AwaitNumbered("n1");
  AwaitNumbered("n2");
  AwaitNumbered("n3");
  segstore::FieldIncrement inc;
  inc.name = "n3";
  ASSERT_TRUE(Incr("a", inc).ok());  // renumbers the record's inline names
  for (const StoredField& f : Stored("a")) ASSERT_NE(f.name_id, 0u) << f.name;
  Close();
  ProfileOptions o;
  o.max_field_names = 1;
  Open(o);
  EXPECT_EQ(names().size(), 3u);
  auto got = Fields("a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->fields.size(), 3u);
  EXPECT_EQ(got->fields[2], (Field{"n3", FieldValue::Int(4), kNever}));
  // A new name is stored inline, and stays so.
  ASSERT_TRUE(Set("a", {F("n4", FieldValue::Int(5))}).ok());
  ASSERT_TRUE(Set("b", {F("n4", FieldValue::Int(6))}).ok());
  EXPECT_EQ(names().Find("n4"), 0u);
  const std::vector<StoredField> b = Stored("b");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].name_id, 0u);
  EXPECT_EQ(b[0].name, "n4");
  EXPECT_EQ(Fields("a")->fields.size(), 4u);
}

// Numbers are a node's own: a body sent to another node names its fields
// inline, and reads the same there with a table that knows none of them.
TEST_F(FieldTest, APortableBodyNamesEveryFieldInline) {
  Open();
  const std::vector<SegmentUpdate> seg = {{1, 3600, true, 4u, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", seg).ok());
  ASSERT_TRUE(
      Set("u", {F("cap:1", FieldValue::Int(1), 60, true), F("zz", FieldValue::Int(2))}).ok());
  AwaitNumbered("cap:1");
  AwaitNumbered("zz");
  ASSERT_TRUE(Set("u", {F("new", FieldValue::String("x"))}).ok());  // numbered and inline
  auto rec = session_->worker().GetSync("u");
  ASSERT_TRUE(rec.ok());
  std::string portable;
  ASSERT_TRUE(PortableBody(rec->body(), names(), &portable).ok());
  Columns here, there;
  ASSERT_TRUE(DecodeColumns(rec->body(), &here).ok());
  ASSERT_TRUE(DecodeColumns(portable, &there).ok());
  EXPECT_EQ(there.log_position, here.log_position);
  EXPECT_EQ(there.group, here.group);
  ASSERT_EQ(there.size(), here.size());
  EXPECT_EQ(there.At(0), here.At(0));
  std::vector<StoredField> stored;
  ASSERT_TRUE(DecodeFieldSection(there.fields, &stored).ok());
  for (const StoredField& f : stored) EXPECT_EQ(f.name_id, 0u) << f.name;
  const FieldNames empty(16);
  std::vector<Field> mine, theirs;
  ASSERT_TRUE(ResolveFields(here.fields, names(), &mine).ok());
  ASSERT_TRUE(ResolveFields(there.fields, empty, &theirs).ok());
  EXPECT_EQ(theirs, mine);
  EXPECT_EQ(theirs.size(), 3u);
  // A body without fields goes as it is; a number the table lacks is damage.
  const std::vector<Segment> plain = {{5, kNever, {}, {}}};
  std::string body, out;
  EncodeProfile(plain, 0, Group(), &body);
  ASSERT_TRUE(PortableBody(body, names(), &out).ok());
  EXPECT_EQ(out, body);
  EXPECT_TRUE(PortableBody(rec->body(), empty, &out).IsCorruption());
  // Asked to, the fields whose numbers the table lacks are left out (a lost
  // name record), the rest kept.
  std::vector<uint32_t> dropped;
  ASSERT_TRUE(PortableBody(rec->body(), empty, &out, &dropped).ok());
  EXPECT_EQ(dropped.size(), 2u);
  Columns kept;
  ASSERT_TRUE(DecodeColumns(out, &kept).ok());
  ASSERT_EQ(kept.size(), 1u);
  std::vector<Field> left;
  ASSERT_TRUE(ResolveFields(kept.fields, empty, &left).ok());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].name, "new");
}

// The name table's records are the node's own: no profile operation
// reaches them (a single server's clients included).
TEST_F(FieldTest, TheNameTablesKeysAreNoUsersKeys) {
  Open();
  ASSERT_TRUE(Set("a", {F("country", FieldValue::String("PT"))}).ok());
  AwaitNumbered("country");
  const std::string key = FieldNames::Key(names().Find("country"));
  auto refused = [](const Status& s) { return s.code() == Status::Code::kInvalidArgument; };
  EXPECT_TRUE(refused(Set(key, {F("x", FieldValue::Int(1))}).status()));
  const std::vector<SegmentUpdate> seg = {{1, 60, true, {}, {}}};
  EXPECT_TRUE(refused(session_->UpsertSync(key, seg).status()));
  EXPECT_TRUE(refused(session_->GetSync(key).status()));
  EXPECT_TRUE(refused(session_->DeleteSync(key).status()));
  EXPECT_TRUE(refused(session_->LinkSync("a", key).status()));
  EXPECT_TRUE(refused(session_->UpsertSync(std::string("\xff\x00", 2), seg).status()));
  auto batch = session_->BatchGetSync(std::vector<std::string>{"a", key});
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE((*batch)[0].ok());
  EXPECT_TRUE(refused((*batch)[1].status()));
  Reopen();
  EXPECT_NE(names().Find("country"), 0u);
  auto got = Fields("a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->fields[0], (Field{"country", FieldValue::String("PT"), kNever}));
}

TEST_F(FieldTest, TheSweeperDropsExpiredFields) {
  Open();
  const std::vector<SegmentUpdate> segs = {{1, 30 * 86400, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", segs).ok());
  std::vector<FieldUpdate> caps;
  for (int i = 0; i < 4; ++i)
    caps.push_back(F("cap:" + std::to_string(i), FieldValue::Int(i), 3600, true));
  caps.push_back(F("country", FieldValue::String("ES")));
  ASSERT_TRUE(Set("u", caps).ok());
  ASSERT_EQ(Stored("u").size(), 5u);
  clock_.Advance(3601);
  ASSERT_TRUE(profiles_->SweepNow().ok());
  EXPECT_EQ(profiles_->sweeper_stats().fields_removed, 4u);
  const std::vector<StoredField> left = Stored("u");
  ASSERT_EQ(left.size(), 1u);
  auto got = Fields("u");
  ASSERT_EQ(got->fields.size(), 1u);
  EXPECT_EQ(got->fields[0].name, "country");
  EXPECT_EQ(got->ids, std::vector<uint64_t>{1});
}

TEST_F(FieldTest, AGetByALinkedUserAnswersItsMastersFields) {
  Open();
  const std::vector<SegmentUpdate> a = {{1, 3600, true, {}, {}}};
  const std::vector<SegmentUpdate> b = {{2, 3600, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("master", a).ok());
  ASSERT_TRUE(session_->UpsertSync("cookie", b).ok());
  ASSERT_TRUE(Set("master", {F("cap:1", FieldValue::Int(2))}).ok());
  ASSERT_TRUE(Set("cookie", {F("own", FieldValue::Int(9))}).ok());
  ASSERT_TRUE(session_->LinkSync("cookie", "master").ok());
  for (const std::string user : {"master", "cookie"}) {
    auto got = Fields(user);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->master, "master");
    EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 2}));
    ASSERT_EQ(got->fields.size(), 1u) << user;
    EXPECT_EQ(got->fields[0].name, "cap:1");
  }
  GetOptions own;
  own.own_only = true;
  own.fields.mode = FieldSelection::Mode::kAll;
  auto got = session_->GetSync("cookie", own);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->fields.size(), 1u);
  EXPECT_EQ(got->fields[0].name, "own");
  // Writes by a linked user land on its master: a cap counts the person.
  segstore::FieldIncrement inc;
  inc.name = "cap:1";
  auto r = Incr("cookie", inc);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->value, 3);
  ASSERT_TRUE(Set("cookie", {F("seen", FieldValue::Time(kNow))}).ok());
  ASSERT_TRUE(Max("cookie", F("score", FieldValue::Double(0.5))).ok());
  EXPECT_EQ(Stored("master").size(), 3u);
  EXPECT_EQ(Stored("cookie").size(), 1u);  // its own, untouched
  auto del = Del("cookie", {"seen"});
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->changed, 1u);
  EXPECT_EQ(del->count, 2u);
  // Unlinked, it writes and reads its own again.
  ASSERT_TRUE(*session_->UnlinkSync("cookie"));
  r = Incr("cookie", inc);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->value, 1);
  got = Fields("cookie");
  ASSERT_EQ(got->fields.size(), 2u);
  EXPECT_EQ(got->fields[0], (Field{"cap:1", FieldValue::Int(1), kNever}));
}

// A link a crash cut in two (the member names the master, the master does
// not list it) counts as no link: the member's writes stay its own.
TEST_F(FieldTest, AHalfLinksFieldWritesStayOnTheUsersOwnRecord) {
  Open();
  const std::vector<SegmentUpdate> a = {{1, 3600, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("master", a).ok());
  ASSERT_TRUE(session_->UpsertSync("cookie", a).ok());
  LinkStep name;
  name.kind = LinkStep::Kind::kName;
  name.user = "cookie";
  name.master = "master";
  ASSERT_TRUE(Run<LinkStepResult>([&](auto cb) { session_->ApplyLinkStep({}, name, cb); }).ok());
  segstore::FieldIncrement inc;
  inc.name = "cap:9";
  ASSERT_TRUE(Incr("cookie", inc).ok());
  EXPECT_EQ(Stored("cookie").size(), 1u);
  EXPECT_TRUE(Stored("master").empty());
}

// A master that joined another group (a state only damage or a crash
// leaves: a link step that names a master drops its members) is a master no
// more, for writes as for reads: its old member's writes are its own.
TEST_F(FieldTest, AMembersWritesStayItsOwnWhenItsMasterIsItselfAMember) {
  Open();
  const std::vector<SegmentUpdate> a = {{1, 3600, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("master", a).ok());
  ASSERT_TRUE(session_->UpsertSync("cookie", a).ok());
  ASSERT_TRUE(session_->LinkSync("cookie", "master").ok());
  auto rec = session_->worker().GetSync("master");
  ASSERT_TRUE(rec.ok());
  Columns c;
  ASSERT_TRUE(DecodeColumns(rec->body(), &c).ok());
  ASSERT_EQ(c.group.members.size(), 1u);
  c.group.member = true;  // and names "other"
  std::vector<Segment> segments = {c.At(0)};
  std::string body;
  EncodeProfile(segments, 0, c.group, &body);
  ASSERT_TRUE(session_->worker()
                  .UpdateSync("master",
                              [&](const storage::Record*) -> Result<storage::Mutation> {
                                storage::Mutation m = storage::Mutation::Put(body);
                                m.reference = "other";
                                return m;
                              })
                  .ok());
  segstore::FieldIncrement inc;
  inc.name = "cap:9";
  ASSERT_TRUE(Incr("cookie", inc).ok());
  EXPECT_EQ(Stored("cookie").size(), 1u);
  EXPECT_TRUE(Stored("master").empty());
}

// field_max refuses a NaN (nothing could ever replace it), and a NaN that
// field_set stored counts below every number.
TEST_F(FieldTest, FieldMaxRefusesANaNAndReplacesAStoredOne) {
  Open();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto r = Max("u", F("score", FieldValue::Double(nan)));
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  EXPECT_TRUE(session_->worker().GetSync("u").status().IsNotFound());
  ASSERT_TRUE(Set("u", {F("score", FieldValue::Double(nan))}).ok());
  r = Max("u", F("score", FieldValue::Double(-1e300)));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->replaced);
  EXPECT_EQ(Fields("u")->fields[0].value.d, -1e300);
}

// A cluster's delete (a log entry) says whether there was a profile: a
// profile of fields alone is one.
TEST_F(FieldTest, ALoggedDeleteOfAProfileOfFieldsAloneSaysDeleted) {
  Open();
  ASSERT_TRUE(Set("v", {F("a", FieldValue::Int(1))}).ok());
  auto deleted = Run<bool>([&](auto cb) { session_->Delete(WriteContext{0, 5}, "v", cb); });
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_TRUE(*deleted);
  EXPECT_TRUE(Fields("v").status().IsNotFound());
  deleted = Run<bool>([&](auto cb) { session_->Delete(WriteContext{0, 6}, "v", cb); });
  ASSERT_TRUE(deleted.ok());
  EXPECT_FALSE(*deleted);
}

// The sweeper drops what expired before its horizon (now less
// log_grace_seconds) and no more: fields expired since stay in the record,
// though none is alive now, for a log entry from before they expired.
TEST_F(FieldTest, TheSweeperKeepsFieldsExpiredWithinTheLogGrace) {
  ProfileOptions o;
  o.log_grace_seconds = 1000;
  Open(o);
  const std::vector<SegmentUpdate> segs = {{1, 10, true, {}, {}}, {2, 100000, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", segs).ok());
  ASSERT_TRUE(Set("u", {F("a", FieldValue::Int(7), 1500, true)}).ok());
  clock_.Advance(2000);  // the horizon: +1000; segment 1 expired before it, field a after
  ASSERT_TRUE(profiles_->SweepNow().ok());
  const std::vector<StoredField> stored = Stored("u");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].value, FieldValue::Int(7));
  Columns c;
  auto rec = session_->worker().GetSync("u");
  ASSERT_TRUE(rec.ok());
  ASSERT_TRUE(DecodeColumns(rec->body(), &c).ok());
  EXPECT_EQ(c.size(), 1u);  // segment 1 went
  EXPECT_TRUE(Fields("u")->fields.empty());
  ExpectStoredAsEncoded("u");
}

// Segments and fields, written and expiring at random, across restarts,
// against a model.
TEST_F(FieldTest, RandomWritesOfSegmentsAndFieldsMatchTheModelAcrossRestarts) {
  Open();
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct ModelField {
    FieldValue value;
    UnixSeconds expires_at;
  };
  struct Model {
    std::map<uint64_t, UnixSeconds> segments;
    std::map<std::string, ModelField> fields;
  };
  std::map<std::string, Model> model;
  auto alive = [](UnixSeconds e, UnixSeconds now) { return e == kNever || e > now; };
  for (int step = 0; step < 1500; ++step) {
    const UnixSeconds now = clock_.Now();
    const std::string user = "u" + std::to_string(rng() % 8);
    Model& m = model[user];
    std::erase_if(m.fields, [&](const auto& f) { return !alive(f.second.expires_at, now); });
    std::erase_if(m.segments, [&](const auto& s) { return !alive(s.second, now); });
    const std::string name = "f" + std::to_string(rng() % 12);
    const uint32_t ttl = rng() % 4 == 0 ? 0 : 1 + static_cast<uint32_t>(rng() % 7200);
    switch (rng() % 7) {
      case 0: {
        const std::vector<SegmentUpdate> up = {
            {rng() % 50, 1 + static_cast<uint32_t>(rng() % 7200), true, {}, {}}};
        ASSERT_TRUE(session_->UpsertSync(user, up).ok());
        m.segments[up[0].id] = now + up[0].value;
        break;
      }
      case 1:
      case 2: {
        FieldValue v;
        switch (rng() % 4) {
          case 0:
            v = FieldValue::Int(static_cast<int64_t>(rng() % 100) - 50);
            break;
          case 1:
            v = FieldValue::Double(double(rng() % 1000) / 8);
            break;
          case 2:
            v = FieldValue::String(std::string(rng() % 20, 's'));
            break;
          default:
            v = FieldValue::Time(now - static_cast<UnixSeconds>(rng() % 1000));
            break;
        }
        ASSERT_TRUE(Set(user, {F(name, v, ttl, ttl != 0)}).ok());
        m.fields[name] = ModelField{v, ttl == 0 ? kNever : now + ttl};
        break;
      }
      case 3: {
        segstore::FieldIncrement inc;
        inc.name = name;
        inc.delta = static_cast<int64_t>(rng() % 5);
        inc.ttl = ttl;
        inc.window = rng() % 2 ? segstore::FieldIncrement::Window::kSliding
                               : segstore::FieldIncrement::Window::kFixed;
        auto it = m.fields.find(name);
        auto r = Incr(user, inc);
        if (it != m.fields.end() && it->second.value.type != FieldValue::Type::kInt) {
          ASSERT_TRUE(r.status().code() == Status::Code::kInvalidArgument);
          break;
        }
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        if (it == m.fields.end()) {
          m.fields[name] = ModelField{FieldValue::Int(inc.delta), ttl == 0 ? kNever : now + ttl};
        } else {
          it->second.value.i += inc.delta;
          if (inc.window == segstore::FieldIncrement::Window::kSliding && ttl != 0) {
            it->second.expires_at = now + ttl;
          }
        }
        EXPECT_EQ(r->value, m.fields[name].value.i);
        break;
      }
      case 4: {
        auto r = Del(user, {name});
        const bool exists = !m.fields.empty() || !m.segments.empty();
        if (!exists) {
          ASSERT_TRUE(r.status().IsNotFound()) << r.status().ToString();
          break;
        }
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(r->changed, m.fields.erase(name));
        break;
      }
      case 5:
        clock_.Advance(static_cast<UnixSeconds>(rng() % 1800));
        break;
      default:
        if (rng() % 20 == 0) Reopen();
        if (rng() % 10 == 0) {
          ASSERT_TRUE(profiles_->SweepNow().ok());
        }
        break;
    }
    // Every user as the model says.
    if (step % 10 != 0) continue;
    const UnixSeconds at = clock_.Now();
    for (auto& [u, mm] : model) {
      auto got = Fields(u);
      std::vector<Field> want;
      for (const auto& [n, f] : mm.fields) {
        if (alive(f.expires_at, at)) want.push_back(Field{n, f.value, f.expires_at});
      }
      size_t live_segments = 0;
      for (const auto& [id, e] : mm.segments) live_segments += alive(e, at) ? 1 : 0;
      if (want.empty() && live_segments == 0) {
        ASSERT_TRUE(got.status().IsNotFound()) << u << " seed " << seed;
        continue;
      }
      ASSERT_TRUE(got.ok()) << u << ": " << got.status().ToString() << " seed " << seed;
      EXPECT_EQ(got->fields, want) << u << " seed " << seed;
      EXPECT_EQ(got->ids.size(), live_segments) << u << " seed " << seed;
      ExpectStoredAsEncoded(u);
    }
  }
}

}  // namespace
}  // namespace segstore::profile
