#include "profile/segment_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace segstore::profile {
namespace {

constexpr UnixSeconds kNow = 1'790'000'000;

Columns Make(const std::vector<Segment>& segments) {
  std::string body;
  EncodeSegments(segments, &body);
  Columns c;
  EXPECT_TRUE(DecodeColumns(body, &c).ok());
  return c;
}

std::vector<uint64_t> Ids(const GetResult& r) { return r.ids; }

TEST(SelectTest, HidesExpiredSegmentsFromTheirExpirySecondOn) {
  Columns c = Make({{1, kNow, {}, {}}, {2, kNow + 1, {}, {}}, {3, kNever, {}, {}}});
  GetResult r;
  EXPECT_EQ(Select(c, kNow, {}, &r), 2u);
  EXPECT_EQ(Ids(r), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(Select(c, kNow + 1, {}, &r), 1u);
  EXPECT_EQ(Ids(r), (std::vector<uint64_t>{3}));
}

TEST(SelectTest, ExpiryWindowAndItsInverse) {
  const UnixSeconds end_of_day = kNow + 3600;
  Columns c = Make({{1, kNow + 60, {}, {}}, {2, kNow + 7200, {}, {}}, {3, kNever, {}, {}}});
  GetOptions today;
  today.expiry_from = kNow;
  today.expiry_to = end_of_day;
  GetResult r;
  Select(c, kNow, today, &r);
  EXPECT_EQ(Ids(r), (std::vector<uint64_t>{1}));
  today.outside_expiry_window = true;  // "segments that will not expire today"
  Select(c, kNow, today, &r);
  EXPECT_EQ(Ids(r), (std::vector<uint64_t>{2, 3}));
  GetOptions open_ended;
  open_ended.expiry_from = kNow + 100;  // no upper end: never-expiring ones are inside
  Select(c, kNow, open_ended, &r);
  EXPECT_EQ(Ids(r), (std::vector<uint64_t>{2, 3}));
}

TEST(SelectTest, IdRangeCountOnlyAndLimit) {
  std::vector<Segment> in;
  for (uint64_t id = 7990; id < 9020; id += 10) in.push_back({id, kNow + 100, {}, {}});
  Columns c = Make(in);
  GetOptions o;
  o.id_from = 8000;
  o.id_to = 9000;
  GetResult r;
  EXPECT_EQ(Select(c, kNow, o, &r), in.size());
  EXPECT_EQ(r.count, 101u);
  EXPECT_EQ(r.size(), 101u);
  o.limit = 5;
  Select(c, kNow, o, &r);
  EXPECT_EQ(r.count, 101u);  // every match counted
  EXPECT_EQ(Ids(r), (std::vector<uint64_t>{8000, 8010, 8020, 8030, 8040}));
  o.count_only = true;
  Select(c, kNow, o, &r);
  EXPECT_EQ(r.count, 101u);
  EXPECT_TRUE(r.ids.empty());
}

TEST(SelectTest, IdsOnlyAndAttributeColumns) {
  Columns c = Make({{1, kNow + 5, 7u, {}}, {2, kNow + 6, {}, {}}, {3, kNow + 7, {}, {}}});
  GetResult r;
  Select(c, kNow, {}, &r);
  EXPECT_EQ(r.expires, (std::vector<UnixSeconds>{kNow + 5, kNow + 6, kNow + 7}));
  ASSERT_EQ(r.attr1.size(), 3u);  // some segment has attr1: a full column
  EXPECT_EQ(r.attr1[0], 7u);
  EXPECT_FALSE(r.attr1[1].has_value());
  EXPECT_TRUE(r.attr2.empty());  // none has attr2: no column
  EXPECT_EQ(r.At(0), (Segment{1, kNow + 5, 7u, {}}));
  GetOptions ids_only;
  ids_only.ids_only = true;
  Select(c, kNow, ids_only, &r);
  EXPECT_EQ(r.ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(r.expires.empty());
  EXPECT_TRUE(r.attr1.empty());
}

TEST(ValidateUpsertTest, RefusesWhatCannotBeStored) {
  auto check = [](std::vector<SegmentUpdate> u, UpsertMode m) {
    return ValidateUpsert(u, m, kNow).code();
  };
  using C = Status::Code;
  EXPECT_EQ(check({{1, kNow + 10, false, {}, {}}}, UpsertMode::kSet), C::kOk);
  EXPECT_EQ(check({{1, kNever, false, {}, {}}}, UpsertMode::kSet), C::kOk);
  EXPECT_EQ(check({{1, kNow, false, {}, {}}}, UpsertMode::kSet), C::kInvalidArgument);
  EXPECT_EQ(check({{1, 0, true, {}, {}}}, UpsertMode::kSet), C::kInvalidArgument);
  EXPECT_EQ(check({{1, UINT32_MAX, true, {}, {}}}, UpsertMode::kExtend), C::kInvalidArgument);
  EXPECT_EQ(check({{1, 5, false, {}, {}}, {1, 6, false, {}, {}}}, UpsertMode::kAdd),
            C::kInvalidArgument);
  EXPECT_EQ(check({{1, 0, false, {}, {}}}, UpsertMode::kAdd), C::kInvalidArgument);
}

TEST(MergeTest, SetExtendAndAdd) {
  Columns c = Make({{5484, kNow + 100, 7u, {}}, {6000, kNever, {}, {}}, {7000, kNow - 1, {}, {}}});
  std::vector<Segment> out;
  // set: replace the expiry; attributes kept unless given
  UpsertResult r =
      Merge(&c, std::vector<SegmentUpdate>{{5484, 50, true, {}, 9u}}, UpsertMode::kSet, kNow, &out);
  EXPECT_EQ(r.updated, 1u);
  EXPECT_EQ(r.trimmed, 1u);  // 7000 had expired
  EXPECT_EQ(r.count, 2u);
  EXPECT_EQ(out[0], (Segment{5484, kNow + 50, 7u, 9u}));
  // extend: the later one wins; never beats anything
  Merge(&c, std::vector<SegmentUpdate>{{5484, 50, true, {}, {}}, {6000, 10, true, {}, {}}},
        UpsertMode::kExtend, kNow, &out);
  EXPECT_EQ(out[0].expires_at, kNow + 100);
  EXPECT_EQ(out[1].expires_at, kNever);
  // add: "add 5 hours to segment 5484"; a new segment gets now + value
  r = Merge(&c, std::vector<SegmentUpdate>{{5484, 5 * 3600, false, {}, {}}, {1, 60, false, {}, {}}},
            UpsertMode::kAdd, kNow, &out);
  EXPECT_EQ(r.inserted, 1u);
  EXPECT_EQ(r.updated, 1u);
  EXPECT_EQ(out[0], (Segment{1, kNow + 60, {}, {}}));
  EXPECT_EQ(out[1].expires_at, kNow + 100 + 5 * 3600);
  // an expired segment upserted again is a new one
  r = Merge(&c, std::vector<SegmentUpdate>{{7000, 30, true, {}, {}}}, UpsertMode::kExtend, kNow,
            &out);
  EXPECT_EQ(r.inserted, 1u);
  EXPECT_EQ(out.back(), (Segment{7000, kNow + 30, {}, {}}));
}

// Merge against a plain model (a map, one update at a time) on random
// profiles: ids at both ends of the range, expired segments an update names,
// attributes, every mode, no old record, and an output that was not empty.
TEST(MergeTest, AgreesWithAPlainModelOnRandomProfiles) {
  std::mt19937_64 rng(17);
  auto pick = [&](uint64_t n) { return static_cast<uint64_t>(rng() % n); };
  auto id_at = [&]() -> uint64_t {
    const uint64_t r = pick(40);
    return r < 4 ? UINT64_MAX - r : r < 8 ? r - 4 : 1000 + pick(60);
  };
  const auto sat = [](uint64_t v) {
    return static_cast<UnixSeconds>(std::min<uint64_t>(v, UINT32_MAX));
  };
  std::vector<Segment> out{{42, kNow + 1, 1u, 2u}};  // stale content, to be replaced
  for (int round = 0; round < 3000; ++round) {
    const bool with_attrs = round % 3 == 0;
    std::map<uint64_t, Segment> old;
    for (uint64_t n = pick(12); n > 0; --n) {
      const uint64_t id = id_at();
      const UnixSeconds e = pick(5) == 0 ? kNever : kNow - 50 + static_cast<UnixSeconds>(pick(100));
      Segment s{id, e, {}, {}};
      if (with_attrs && pick(2) == 0) s.attr1 = static_cast<uint32_t>(pick(1000));
      if (with_attrs && pick(2) == 0) s.attr2 = static_cast<uint32_t>(pick(1000));
      old[id] = s;
    }
    std::vector<Segment> segments;
    for (const auto& [id, s] : old) segments.push_back(s);
    const bool no_record = segments.empty() && pick(2) == 0;
    Columns c = Make(segments);

    const auto mode = static_cast<UpsertMode>(pick(3));
    std::map<uint64_t, SegmentUpdate> updates;
    for (uint64_t n = pick(6); n > 0; --n) {
      SegmentUpdate u;
      u.id = id_at();
      u.ttl = mode == UpsertMode::kAdd || pick(2) == 0;
      u.value = !u.ttl && pick(4) == 0 ? kNever : static_cast<uint32_t>(1 + pick(5000));
      if (!u.ttl && u.value != kNever) u.value += kNow;
      if (pick(3) == 0) u.attr1 = static_cast<uint32_t>(pick(1000));
      if (pick(3) == 0) u.attr2 = static_cast<uint32_t>(pick(1000));
      updates[u.id] = u;
    }
    std::vector<SegmentUpdate> listed;
    for (const auto& [id, u] : updates) listed.push_back(u);
    std::shuffle(listed.begin(), listed.end(), rng);

    // The model.
    UpsertResult want;
    std::map<uint64_t, Segment> model;
    for (const auto& [id, s] : old) {
      if (Alive(s.expires_at, kNow)) {
        model[id] = s;
      } else {
        ++want.trimmed;
      }
    }
    for (const auto& [id, u] : updates) {
      const UnixSeconds asked = u.ttl ? sat(uint64_t{kNow} + u.value) : u.value;
      auto it = model.find(id);
      if (it == model.end()) {
        ++want.inserted;
        model[id] = Segment{id, mode == UpsertMode::kAdd ? sat(uint64_t{kNow} + u.value) : asked,
                            u.attr1, u.attr2};
        continue;
      }
      ++want.updated;
      Segment& s = it->second;
      const UnixSeconds was = s.expires_at;
      if (mode == UpsertMode::kSet) {
        s.expires_at = asked;
      } else if (mode == UpsertMode::kExtend) {
        s.expires_at = was == kNever || asked == kNever ? kNever : std::max(was, asked);
      } else {
        s.expires_at = was == kNever ? kNever : sat(uint64_t{was} + u.value);
      }
      if (u.attr1) s.attr1 = u.attr1;
      if (u.attr2) s.attr2 = u.attr2;
    }
    std::vector<Segment> expected;
    for (const auto& [id, s] : model) expected.push_back(s);

    const UpsertResult got = Merge(no_record ? nullptr : &c, listed, mode, kNow, &out);
    ASSERT_EQ(out, expected) << "round " << round;
    EXPECT_EQ(got.inserted, want.inserted) << "round " << round;
    EXPECT_EQ(got.updated, want.updated) << "round " << round;
    EXPECT_EQ(got.trimmed, want.trimmed) << "round " << round;
    EXPECT_EQ(got.count, expected.size()) << "round " << round;
  }
}

TEST(MergeTest, ReplaceAttrsMakesANamedSegmentsAttributesExactlyTheGivenOnes) {
  Columns c = Make({{1, kNow + 100, 7u, 8u}, {2, kNow + 100, 5u, {}}, {3, kNever, 6u, 9u}});
  std::vector<Segment> out;
  // 1: one given, the other cleared; 2: none given, both cleared; 3 is not
  // named and keeps its own; 4 is new and gets what is given.
  const std::vector<SegmentUpdate> u = {
      {1, 50, true, {}, 4u}, {2, 50, true, {}, {}}, {4, 50, true, 1u, {}}};
  UpsertResult r = Merge(&c, u, UpsertOptions{UpsertMode::kSet, true}, kNow, &out);
  EXPECT_EQ(r.updated, 2u);
  EXPECT_EQ(r.inserted, 1u);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], (Segment{1, kNow + 50, {}, 4u}));
  EXPECT_EQ(out[1], (Segment{2, kNow + 50, {}, {}}));
  EXPECT_EQ(out[2], (Segment{3, kNever, 6u, 9u}));
  EXPECT_EQ(out[3], (Segment{4, kNow + 50, 1u, {}}));
  // Every mode replaces alike; the expiry follows the mode as usual.
  r = Merge(&c, std::vector<SegmentUpdate>{{1, 10, true, 2u, {}}},
            UpsertOptions{UpsertMode::kExtend, true}, kNow, &out);
  EXPECT_EQ(out[0], (Segment{1, kNow + 100, 2u, {}}));
  r = Merge(&c, std::vector<SegmentUpdate>{{3, 10, false, {}, {}}},
            UpsertOptions{UpsertMode::kAdd, true}, kNow, &out);
  EXPECT_EQ(out[2], (Segment{3, kNever, {}, {}}));
  // Without it, absent keeps the current value.
  Merge(&c, std::vector<SegmentUpdate>{{1, 50, true, {}, 4u}}, UpsertMode::kSet, kNow, &out);
  EXPECT_EQ(out[0], (Segment{1, kNow + 50, 7u, 4u}));
}

TEST(ExpireTest, ConditionsCountNeverAsInfinityOnBothSides) {
  using EC = ExpireCondition;
  const UnixSeconds t = kNow + 100;
  struct Case {
    EC condition;
    UnixSeconds current, target;
    bool holds;
  };
  const Case cases[] = {
      {EC::kNone, t, t, true},
      {EC::kNone, kNever, kNever, true},
      {EC::kNx, kNever, t, true},
      {EC::kNx, t, t + 1, false},
      {EC::kXx, t, t + 1, true},
      {EC::kXx, kNever, t, false},
      {EC::kGt, t, t + 1, true},
      {EC::kGt, t, t, false},
      {EC::kGt, t, t - 1, false},
      {EC::kGt, t, kNever, true},  // never is later
      {EC::kGt, kNever, t, false},
      {EC::kGt, kNever, kNever, false},
      {EC::kLt, t, t - 1, true},
      {EC::kLt, t, t, false},
      {EC::kLt, t, t + 1, false},
      {EC::kLt, t, kNever, false},
      {EC::kLt, kNever, t, true},
      {EC::kLt, kNever, kNever, false},
      {EC::kLt, kNever, kNow - 50, true},  // a past time is earlier than never
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ExpireHolds(c.condition, c.current, c.target), c.holds)
        << static_cast<int>(c.condition) << " " << c.current << " " << c.target;
  }
}

TEST(ExpireTest, EachListedIdGetsItsOutcomeAgainstTheProfileAsItWas) {
  using EO = ExpireOutcome;
  // 1 finite, 2 never, 3 expired, 4 finite with attributes.
  Columns c = Make({{1, kNow + 100, {}, {}},
                    {2, kNever, {}, {}},
                    {3, kNow - 5, {}, {}},
                    {4, kNow + 1000, 7u, 8u}});
  std::vector<Segment> out;
  ExpireResult r;
  uint32_t trimmed = 0;
  // Set: every live listed segment; 3 has expired and 99 was never there;
  // 1 listed twice gets its outcome twice.
  EXPECT_TRUE(ApplyExpire(c, std::vector<uint64_t>{1, 2, 3, 99, 4, 1}, ExpireSpec{50, true}, kNow,
                          &r, &out, &trimmed));
  EXPECT_EQ(r.results,
            (std::vector<EO>{EO::kSet, EO::kSet, EO::kMissing, EO::kMissing, EO::kSet, EO::kSet}));
  EXPECT_EQ(r.count, 3u);
  EXPECT_EQ(trimmed, 1u);
  EXPECT_EQ(out, (std::vector<Segment>{
                     {1, kNow + 50, {}, {}}, {2, kNow + 50, {}, {}}, {4, kNow + 50, 7u, 8u}}));
  // gt: judged against each segment's own expiry, before the request.
  EXPECT_TRUE(ApplyExpire(c, std::vector<uint64_t>{4, 1, 2},
                          ExpireSpec{kNow + 500, false, ExpireCondition::kGt}, kNow, &r, &out,
                          &trimmed));
  EXPECT_EQ(r.results, (std::vector<EO>{EO::kUnchanged, EO::kSet, EO::kUnchanged}));
  EXPECT_EQ(out, (std::vector<Segment>{
                     {1, kNow + 500, {}, {}}, {2, kNever, {}, {}}, {4, kNow + 1000, 7u, 8u}}));
  // Nothing holds: no change, only the expired one trimmed.
  EXPECT_FALSE(ApplyExpire(c, std::vector<uint64_t>{1, 4, 7},
                           ExpireSpec{0, false, ExpireCondition::kNx}, kNow, &r, &out, &trimmed));
  EXPECT_EQ(r.results, (std::vector<EO>{EO::kUnchanged, EO::kUnchanged, EO::kMissing}));
  EXPECT_EQ(trimmed, 1u);
  EXPECT_EQ(r.count, 3u);
  // No IDs: nothing to do.
  EXPECT_FALSE(ApplyExpire(c, {}, ExpireSpec{50, true}, kNow, &r, &out, &trimmed));
  EXPECT_TRUE(r.results.empty());
  EXPECT_EQ(r.count, 3u);
}

TEST(ExpireTest, AnExpiryNotInTheFutureRemovesAndNeverPersists) {
  using EO = ExpireOutcome;
  Columns c = Make({{1, kNow + 100, {}, {}}, {2, kNever, {}, {}}, {3, kNow + 200, 5u, {}}});
  std::vector<Segment> out;
  ExpireResult r;
  uint32_t trimmed = 0;
  // Now itself, the past, and a TTL of 0 are not in the future: removed.
  for (const ExpireSpec& past :
       {ExpireSpec{kNow, false}, ExpireSpec{1, false}, ExpireSpec{0, true}}) {
    EXPECT_TRUE(ApplyExpire(c, std::vector<uint64_t>{1, 2}, past, kNow, &r, &out, &trimmed));
    EXPECT_EQ(r.results, (std::vector<EO>{EO::kRemoved, EO::kRemoved}));
    EXPECT_EQ(out, (std::vector<Segment>{{3, kNow + 200, 5u, {}}}));
    EXPECT_EQ(r.count, 1u);
  }
  // Conditions come first: gt never holds for a past time against a later
  // expiry; lt always does (and for a never-expiring segment).
  ApplyExpire(c, std::vector<uint64_t>{1, 2}, ExpireSpec{kNow - 10, false, ExpireCondition::kGt},
              kNow, &r, &out, &trimmed);
  EXPECT_EQ(r.results, (std::vector<EO>{EO::kUnchanged, EO::kUnchanged}));
  ApplyExpire(c, std::vector<uint64_t>{1, 2}, ExpireSpec{kNow - 10, false, ExpireCondition::kLt},
              kNow, &r, &out, &trimmed);
  EXPECT_EQ(r.results, (std::vector<EO>{EO::kRemoved, EO::kRemoved}));
  // An absolute 0 is never: HPERSIST is xx with 0. The attributes stay.
  EXPECT_TRUE(ApplyExpire(c, std::vector<uint64_t>{1, 2, 3},
                          ExpireSpec{kNever, false, ExpireCondition::kXx}, kNow, &r, &out,
                          &trimmed));
  EXPECT_EQ(r.results, (std::vector<EO>{EO::kSet, EO::kUnchanged, EO::kSet}));
  EXPECT_EQ(out,
            (std::vector<Segment>{{1, kNever, {}, {}}, {2, kNever, {}, {}}, {3, kNever, 5u, {}}}));
  // Removing every segment leaves none.
  EXPECT_TRUE(ApplyExpire(c, std::vector<uint64_t>{3, 2, 1}, ExpireSpec{0, true}, kNow, &r, &out,
                          &trimmed));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(r.count, 0u);
}

TEST(ExpireTest, ATtlPastTheEndOfTimeIsRefused) {
  EXPECT_TRUE(ValidateExpire(ExpireSpec{UINT32_MAX - kNow, true}, kNow).ok());
  EXPECT_EQ(ValidateExpire(ExpireSpec{UINT32_MAX - kNow + 1, true}, kNow).code(),
            Status::Code::kInvalidArgument);
  EXPECT_TRUE(ValidateExpire(ExpireSpec{UINT32_MAX, false}, kNow).ok());  // absolute: any time
  EXPECT_TRUE(ValidateExpire(ExpireSpec{0, true}, kNow).ok());            // removes
}

TEST(RemoveAndTrimTest, ReportWhatTheyDid) {
  Columns c = Make({{1, kNow + 10, {}, {}}, {2, kNow - 5, {}, {}}, {3, kNow + 5000, {}, {}}});
  std::vector<Segment> out;
  uint32_t trimmed = 0;
  EXPECT_EQ(RemoveIds(c, std::vector<uint64_t>{1, 2, 99}, kNow, &out, &trimmed), 1u);
  EXPECT_EQ(trimmed, 1u);
  ASSERT_EQ(out.size(), 1u);
  TrimResult t = TrimBefore(c, kNow + 100, &out);  // also what expires within 100 s
  EXPECT_EQ(t.trimmed, 2u);
  EXPECT_EQ(t.remaining, 1u);
}

TEST(TimesForTest, SweepWhenAQuarterHasExpiredVoidWhenAllHave) {
  std::vector<Segment> s;
  for (UnixSeconds i = 1; i <= 100; ++i) s.push_back({i, kNow + i * 10, {}, {}});
  RecordTimes t = TimesFor(s, 0.25);
  EXPECT_EQ(t.sweep_at, kNow + 250);  // the 25th expiry
  EXPECT_EQ(t.void_at, kNow + 1000);
  s.push_back({1000, kNever, {}, {}});
  t = TimesFor(s, 0.25);
  EXPECT_EQ(t.void_at, 0u);  // one segment never expires
  EXPECT_GT(t.sweep_at, 0u);
  std::vector<Segment> forever = {{1, kNever, {}, {}}, {2, kNever, {}, {}}};
  EXPECT_EQ(TimesFor(forever, 0.25).sweep_at, 0u);
  std::vector<Segment> one = {{1, kNow + 9, {}, {}}};
  EXPECT_EQ(TimesFor(one, 0.25).sweep_at, kNow + 9);  // never later than void_at
}

TEST(TimesForTest, SweepAtIsExactlyTheKthExpiryForAnySpread) {
  // Against sorting: clustered, spread, duplicated, extreme and "never"
  // expiries, shares from a sliver to all.
  std::mt19937_64 rng(23);
  for (int round = 0; round < 2000; ++round) {
    const size_t n = 1 + rng() % 1500;
    std::vector<Segment> s;
    std::vector<UnixSeconds> finite;
    for (size_t i = 0; i < n; ++i) {
      UnixSeconds e;
      switch (round % 5) {
        case 0:
          e = kNow + static_cast<UnixSeconds>(rng() % 3);
          break;  // a few values
        case 1:
          e = static_cast<UnixSeconds>((kNow / 3600 + 1 + rng() % 720) * 3600);
          break;
        case 2:
          e = 1 + static_cast<UnixSeconds>(rng() % UINT32_MAX);
          break;  // the whole range
        case 3:
          e = rng() % 2 ? UINT32_MAX : 1;
          break;  // both ends
        default:
          e = rng() % 4 == 0 ? kNever : kNow + static_cast<UnixSeconds>(rng() % 100000);
      }
      s.push_back({i, e, {}, {}});
      if (e != kNever) finite.push_back(e);
    }
    std::sort(finite.begin(), finite.end());
    const double share = (round % 4 == 0) ? 1.0 : static_cast<double>(1 + rng() % 100) / 100;
    const size_t k =
        std::clamp<size_t>(static_cast<size_t>(std::ceil(share * static_cast<double>(n))), 1, n);
    RecordTimes t = TimesFor(s, share);
    EXPECT_EQ(t.sweep_at, k <= finite.size() ? finite[k - 1] : 0u) << "round " << round;
    EXPECT_EQ(t.void_at, finite.size() == n ? finite.back() : 0u) << "round " << round;
  }
}

}  // namespace
}  // namespace segstore::profile

namespace segstore::profile {
namespace {

// MergeProfiles (a linked group's merged view) against a plain model: per id
// over every profile's live rows, the latest expiry (never the latest of
// all) with its attributes, the earliest profile on a tie.
TEST(MergeProfilesTest, AgreesWithAPlainModelOnRandomGroups) {
  std::mt19937_64 rng(20261126);
  for (int round = 0; round < 300; ++round) {
    const size_t k = 1 + rng() % 12;
    std::vector<Columns> columns(k);
    std::map<uint64_t, Segment> want;
    std::map<uint64_t, size_t> from;
    for (size_t p = 0; p < k; ++p) {
      std::map<uint64_t, Segment> mine;
      const size_t n = rng() % 60;
      for (size_t i = 0; i < n; ++i) {
        Segment s;
        s.id = rng() % 100;
        const int e = static_cast<int>(rng() % 6);
        // Expired, never, and a few shared expiries so that ties happen.
        s.expires_at = e == 0 ? kNow - 5 : e == 1 ? kNever : kNow + 10 * static_cast<uint32_t>(e);
        if (rng() % 3 == 0) s.attr1 = static_cast<uint32_t>(rng() % 1000);
        if (rng() % 5 == 0) s.attr2 = static_cast<uint32_t>(rng() % 1000);
        mine[s.id] = s;
      }
      std::vector<Segment> segs;
      for (const auto& [id, s] : mine) segs.push_back(s);
      std::string body;
      EncodeSegments(segs, &body);
      ASSERT_TRUE(DecodeColumns(body, &columns[p]).ok());
      for (const Segment& s : segs) {
        if (s.expires_at != kNever && s.expires_at <= kNow) continue;
        auto it = want.find(s.id);
        const bool later = it == want.end() ||
                           (s.expires_at != it->second.expires_at &&
                            (s.expires_at == kNever || (it->second.expires_at != kNever &&
                                                        s.expires_at > it->second.expires_at)));
        if (later) want[s.id] = s;
      }
    }
    std::vector<const Columns*> ptrs;
    for (const Columns& c : columns) ptrs.push_back(&c);
    Columns merged;
    MergeProfiles(ptrs, kNow, &merged);
    ASSERT_EQ(merged.size(), want.size()) << "round " << round;
    size_t i = 0;
    for (const auto& [id, s] : want) {
      ASSERT_EQ(merged.At(i), s) << "round " << round << " row " << i;
      ++i;
    }
  }
}

// Random groups for SelectMerged: k profiles whose ids are drawn from
// [base, base + space), with expired rows, rows that never expire, shared
// expiries (ties) and attributes when `attrs`.
std::vector<Columns> RandomGroup(std::mt19937_64& rng, size_t k, uint64_t base, uint64_t space,
                                 size_t max_rows, bool attrs) {
  std::vector<Columns> columns(k);
  for (size_t p = 0; p < k; ++p) {
    std::map<uint64_t, Segment> mine;
    const size_t n = max_rows == 0 ? 0 : rng() % (max_rows + 1);
    for (size_t i = 0; i < n; ++i) {
      Segment s;
      s.id = base + rng() % space;
      const int e = static_cast<int>(rng() % 7);
      s.expires_at = e == 0   ? kNow - 5
                     : e == 1 ? kNever
                     : e == 2 ? kNow  // expired from this second on
                     : e == 3 ? UINT32_MAX
                              : kNow + 10 * static_cast<uint32_t>(e);
      if (attrs && rng() % 3 == 0) s.attr1 = static_cast<uint32_t>(rng() % 1000);
      if (attrs && rng() % 5 == 0) s.attr2 = static_cast<uint32_t>(rng() % 1000);
      mine[s.id] = s;
    }
    std::vector<Segment> segs;
    for (const auto& [id, s] : mine) segs.push_back(s);
    std::string body;
    EncodeSegments(segs, &body);
    EXPECT_TRUE(DecodeColumns(body, &columns[p]).ok());
  }
  return columns;
}

// The options a get may carry, one set per round.
GetOptions RandomOptions(std::mt19937_64& rng, uint64_t base, uint64_t space) {
  GetOptions o;
  switch (rng() % 8) {
    case 0:
      break;  // the default: every live segment
    case 1:
      o.ids_only = true;
      break;
    case 2:
      o.count_only = true;
      break;
    case 3:
      o.limit = 1 + static_cast<uint32_t>(rng() % 40);
      break;
    case 4:
      o.id_from = base + rng() % space;
      o.id_to = o.id_from + rng() % space;
      break;
    case 5:
      o.expiry_from = kNow + 15;
      o.expiry_to = rng() % 2 ? UINT32_MAX : kNow + 45;
      break;
    case 6:
      o.expiry_from = kNow;
      o.expiry_to = kNow + 35;
      o.outside_expiry_window = true;
      break;
    default:
      o.limit = 1 + static_cast<uint32_t>(rng() % 40);
      o.id_from = base + rng() % space;
      o.ids_only = rng() % 2 == 0;
  }
  return o;
}

// SelectMerged against MergeProfiles then Select, the way a get by a linked
// user took before: the same answer and live count, for ids dense (the
// reference workload's kind: each row put in its id's place) and sparse
// (merged pairwise), with and without attributes, under every option.
TEST(SelectMergedTest, AnswersWhatMergeProfilesThenSelectAnswer) {
  std::mt19937_64 rng(2026112620);
  MergeScratch scratch;  // reused across rounds, as a server thread's is
  for (int round = 0; round < 3000; ++round) {
    const size_t k = rng() % 13;
    const bool attrs = rng() % 2 == 0;
    uint64_t base = 0, space = 100;
    switch (round % 4) {
      case 0:
        space = 1 + rng() % 200;  // dense, many shared ids
        break;
      case 1:
        base = rng() % 1000000;
        space = 82000;  // the reference workload's spread
        break;
      case 2:
        space = uint64_t{1} << 40;  // sparse
        break;
      default:
        base = UINT64_MAX - 5000;  // near the top of the id space
        space = 5000;
    }
    const size_t max_rows = round % 4 == 1 ? 1000 : 80;
    std::vector<Columns> columns = RandomGroup(rng, k, base, space, max_rows, attrs);
    std::vector<const Columns*> ptrs;
    for (const Columns& c : columns) ptrs.push_back(&c);
    const GetOptions o = RandomOptions(rng, base, space);
    for (const UnixSeconds now : {kNow, kNow + 25}) {
      Columns merged;
      MergeProfiles(ptrs, now, &merged);
      GetResult want;
      const uint32_t want_live = Select(merged, now, o, &want);
      GetResult got;
      got.ids = {1, 2, 3};  // whatever a reused result held is replaced
      got.attr1 = {std::nullopt};
      ASSERT_EQ(SelectMerged(ptrs, now, o, &scratch, &got), want_live) << "round " << round;
      ASSERT_EQ(got.count, want.count) << "round " << round;
      ASSERT_EQ(got.ids, want.ids) << "round " << round;
      ASSERT_EQ(got.expires, want.expires) << "round " << round;
      ASSERT_EQ(got.attr1, want.attr1) << "round " << round;
      ASSERT_EQ(got.attr2, want.attr2) << "round " << round;
    }
  }
}

// Equal expiries: the earlier profile's attributes, whichever way is taken.
TEST(SelectMergedTest, ATieGoesToTheEarlierProfileDenseOrSparse) {
  for (const uint64_t far : {uint64_t{50}, uint64_t{1} << 50}) {
    std::vector<Columns> columns;
    columns.push_back(Make({{7, kNow + 60, 1, {}}, {far, kNever, {}, 5}}));
    columns.push_back(
        Make({{7, kNow + 60, 2, 9}, {far, kNever, 3, {}}, {far + 1, kNow - 1, 4, {}}}));
    const std::vector<const Columns*> ptrs = {&columns[0], &columns[1]};
    MergeScratch scratch;
    GetResult r;
    EXPECT_EQ(SelectMerged(ptrs, kNow, {}, &scratch, &r), 2u);
    EXPECT_EQ(r.ids, (std::vector<uint64_t>{7, far}));
    EXPECT_EQ(r.expires, (std::vector<UnixSeconds>{kNow + 60, kNever}));
    EXPECT_EQ(r.attr1, (std::vector<std::optional<uint32_t>>{1, std::nullopt}));
    EXPECT_EQ(r.attr2, (std::vector<std::optional<uint32_t>>{std::nullopt, 5}));
  }
}

}  // namespace
}  // namespace segstore::profile
