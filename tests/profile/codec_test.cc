#include "profile/codec.h"

#include <gtest/gtest.h>

#include <random>

#include "profile/segment_ops.h"
#include "profile/test_util.h"

namespace segstore::profile {
namespace {

constexpr UnixSeconds kNow = 1'790'000'000;

std::vector<Segment> RoundTrip(const std::vector<Segment>& in) {
  std::string body;
  EncodeSegments(in, &body);
  std::vector<Segment> out;
  Status s = DecodeSegments(body, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(CodecTest, EmptyProfile) {
  std::string body;
  EncodeSegments({}, &body);
  EXPECT_EQ(body.size(), 2u);
  std::vector<Segment> out{Segment{}};
  ASSERT_TRUE(DecodeSegments(body, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(CodecTest, TheLatestPossibleExpiryRoundTrips) {
  // UINT32_MAX is a finite expiry like any other, alone or beside "never".
  const std::vector<Segment> alone = {{7, UINT32_MAX, {}, {}}};
  EXPECT_EQ(RoundTrip(alone), alone);
  const std::vector<Segment> mixed = {{1, kNever, {}, {}}, {7, UINT32_MAX, {}, {}}};
  EXPECT_EQ(RoundTrip(mixed), mixed);
  const std::vector<Segment> spread = {{1, kNow, {}, {}}, {7, UINT32_MAX, 2u, {}}};
  EXPECT_EQ(RoundTrip(spread), spread);
}

TEST(CodecTest, RoundTripsEveryShape) {
  std::vector<std::vector<Segment>> cases = {
      {{5, kNow + 1, {}, {}}},
      {{0, kNever, {}, {}}},
      {{1, kNever, {}, {}}, {2, kNow + 7, {}, {}}, {3, kNever, {}, {}}},
      // consecutive ids (Rice parameter 0), one expiry for all (width 0)
      {{10, kNow + 60, {}, {}}, {11, kNow + 60, {}, {}}, {12, kNow + 60, {}, {}}},
      // gaps far beyond the escape, ids at both ends of the range
      {{0, kNow + 1, {}, {}},
       {1ull << 40, kNow + 2, {}, {}},
       {UINT64_MAX - 1, kNow + 3, {}, {}},
       {UINT64_MAX, kNow + 4, {}, {}}},
      // the widest gap there is: the mean gap's Rice parameter is 63
      {{0, kNow + 1, {}, {}}, {UINT64_MAX, kNow + 2, {}, {}}},
      // attributes present on some segments only, up to 32 bits
      {{7, kNow + 86400, 1u, {}},
       {9, kNow + 3600, {}, 0xffffffffu},
       {12, kNever, 0u, 5u},
       {15, kNow + 120, {}, {}}},
      // the largest expiry there is
      {{3, UINT32_MAX, {}, {}}, {4, 1, {}, {}}},
  };
  for (auto& c : cases) EXPECT_EQ(RoundTrip(c), c);
}

TEST(CodecTest, PicksTheCoarsestExactUnit) {
  // Whole days, whole hours, whole minutes and seconds: all exact.
  for (UnixSeconds step : {86400u, 3600u, 60u, 1u}) {
    std::vector<Segment> in;
    for (uint64_t i = 0; i < 50; ++i) {
      in.push_back(
          Segment{i * 3, static_cast<UnixSeconds>((kNow / 86400 + 1) * 86400 + i * step), {}, {}});
    }
    EXPECT_EQ(RoundTrip(in), in) << step;
  }
}

TEST(CodecTest, ReferenceProfileRoundTrips) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto in = testing::ReferenceProfile(seed, kNow);
    EXPECT_EQ(RoundTrip(in), in);
    auto secs = testing::ReferenceProfile(seed, kNow, 1000, 82000, /*second_ttl=*/true);
    EXPECT_EQ(RoundTrip(secs), secs);
  }
}

// The goals of the codec, on the reference workload, counting the record
// around the body (its 36-byte header and a 36-byte user id) and the padding.
TEST(CodecTest, ReferenceProfileFitsTheByteBudget) {
  double worst_hours = 0, worst_seconds = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::string body;
    EncodeSegments(testing::ReferenceProfile(seed, kNow), &body);
    worst_hours = std::max(worst_hours, (36 + 36 + body.size() + 15) / 1000.0);
    EncodeSegments(testing::ReferenceProfile(seed, kNow, 1000, 82000, true), &body);
    worst_seconds = std::max(worst_seconds, (36 + 36 + body.size() + 15) / 1000.0);
  }
  EXPECT_LE(worst_hours, 2.6);
  EXPECT_LE(worst_seconds, 4.0);
}

TEST(CodecTest, EveryTruncationIsCorruption) {
  std::vector<Segment> in = testing::ReferenceProfile(1, kNow, 200);
  in[3].attr1 = 77;
  in[9].attr2 = 1;
  std::string body;
  EncodeSegments(in, &body);
  for (size_t len = 0; len < body.size(); ++len) {
    // An exact-size copy, so a read past the end would be caught by ASan.
    std::vector<char> cut(body.begin(), body.begin() + static_cast<ptrdiff_t>(len));
    std::vector<Segment> out;
    Status s = DecodeSegments(std::string_view(cut.data(), cut.size()), &out);
    EXPECT_TRUE(s.IsCorruption()) << "length " << len << ": " << s.ToString();
  }
}

TEST(CodecTest, TrailingBytesAreCorruption) {
  std::string body;
  EncodeSegments(testing::ReferenceProfile(2, kNow, 10), &body);
  body.push_back('\0');
  std::vector<Segment> out;
  EXPECT_TRUE(DecodeSegments(body, &out).IsCorruption());
}

TEST(CodecTest, HostileHeadersAreRefusedBeforeAllocating) {
  std::vector<Segment> out;
  // 2^60 segments claimed in a few bytes.
  std::string huge = {char(1),    char(0x80), char(0x80), char(0x80), char(0x80),
                      char(0x80), char(0x80), char(0x80), char(0x80), char(0x10),
                      char(0),    char(3),    char(2),    char(0),    char(10)};
  EXPECT_TRUE(DecodeSegments(huge, &out).IsCorruption());
  // Unknown versions; a varint of eleven bytes; an expiry base beyond 32 bits.
  EXPECT_TRUE(DecodeSegments(std::string(1, char(0)), &out).IsCorruption());
  EXPECT_TRUE(DecodeSegments(std::string(1, char(4)), &out).IsCorruption());
  EXPECT_TRUE(DecodeSegments(std::string("\x04\x00", 2), &out).IsCorruption());
  EXPECT_TRUE(
      DecodeSegments(std::string("\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12), &out)
          .IsCorruption());
  std::string base = {char(1),    char(1),    char(5),    char(0),    char(0), char(0xff),
                      char(0xff), char(0xff), char(0xff), char(0x7f), char(1), char(0)};
  EXPECT_TRUE(DecodeSegments(base, &out).IsCorruption());
  // The same, behind a version-2 header: refused alike.
  EXPECT_TRUE(DecodeSegments("\x02\x07" + huge.substr(1), &out).IsCorruption());
  EXPECT_TRUE(DecodeSegments("\x02\x07" + base.substr(1), &out).IsCorruption());
  // And behind a version-3 header (position 7, one member "a").
  const std::string v3(
      std::string_view("\x03\x07\x00\x01\x01"
                       "a"
                       "\x00",
                       7));
  EXPECT_TRUE(DecodeSegments(v3 + huge.substr(1), &out).IsCorruption());
  EXPECT_TRUE(DecodeSegments(v3 + base.substr(1), &out).IsCorruption());
}

TEST(CodecTest, RandomBytesNeverCrashAndValidOnesReencodeTheSame) {
  std::mt19937_64 rng(9);
  std::string valid, valid_v3;
  EncodeSegments(testing::ReferenceProfile(3, kNow, 50), &valid);
  Group group;
  group.member = true;
  group.link_expires = kNow;
  group.members = {{"ab", kNever}, {"abc", kNow + 5}, {"b", kNow}};
  EncodeProfile(testing::ReferenceProfile(3, kNow, 50), 9, group, &valid_v3);
  int accepted = 0;
  Columns columns;
  for (int i = 0; i < 50000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      bytes.resize(rng() % 64);
      for (char& c : bytes) c = static_cast<char>(rng());
      if (!bytes.empty()) bytes[0] = char(1 + i % 6 / 2);  // versions 1, 2 and 3
    } else {
      bytes = i % 4 == 1 ? valid : valid_v3;
      for (int f = 0; f < 3; ++f) bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    std::vector<char> exact(bytes.begin(), bytes.end());
    const std::string_view view(exact.data(), exact.size());
    std::vector<Segment> out;
    Status s = DecodeSegments(view, &out);
    EXPECT_EQ(DecodeColumns(view, &columns).ok(), s.ok());
    if (!s.ok()) {
      EXPECT_TRUE(s.IsCorruption());
      continue;
    }
    ++accepted;
    // Whatever decoded is a well-formed profile, in a well-formed group.
    for (size_t j = 1; j < out.size(); ++j) ASSERT_LT(out[j - 1].id, out[j].id);
    const std::vector<GroupMember>& members = columns.group.members;
    for (size_t j = 0; j < members.size(); ++j) {
      ASSERT_FALSE(members[j].user.empty());
      if (j > 0) {
        ASSERT_LT(members[j - 1].user, members[j].user);
      }
    }
    EXPECT_EQ(columns.group.empty(), bytes[0] != char(3));
  }
  EXPECT_GT(accepted, 0);  // flips in expiry bits decode to other valid profiles
}

// The get path decodes and selects in one pass (DecodeSelect); it must give
// exactly what decoding every column and then selecting gives, for every
// option, every shape of profile and every time, and refuse the same bodies.
void ExpectSameAsTwoSteps(std::string_view body, UnixSeconds now, const GetOptions& o,
                          Columns* scratch, const std::string& what) {
  Columns columns;
  GetResult want;
  const Status decoded = DecodeColumns(body, &columns);
  uint32_t want_live = 0;
  if (decoded.ok()) want_live = Select(columns, now, o, &want);
  GetResult got;
  got.ids = {42};  // a reused result: nothing of it may survive
  got.expires = {7};
  got.attr1 = {1u};
  scratch->log_position = 12345;  // from an earlier body: must not survive
  scratch->group.member = true;   // nor its group
  scratch->group.link_expires = 5;
  scratch->group.members = {{"earlier", 7}};
  Result<uint32_t> live = DecodeSelect(body, now, o, scratch, &got);
  ASSERT_EQ(live.ok(), decoded.ok()) << what << ": " << live.status().ToString();
  if (!decoded.ok()) {
    EXPECT_TRUE(live.status().IsCorruption()) << what;
    return;
  }
  EXPECT_EQ(scratch->log_position, columns.log_position) << what;
  EXPECT_EQ(scratch->group, columns.group) << what;
  EXPECT_EQ(*live, want_live) << what;
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.ids, want.ids) << what;
  EXPECT_EQ(got.expires, want.expires) << what;
  EXPECT_EQ(got.attr1, want.attr1) << what;
  EXPECT_EQ(got.attr2, want.attr2) << what;
}

TEST(CodecTest, DecodeSelectGivesWhatDecodeThenSelectGives) {
  std::mt19937_64 rng(17);
  Columns scratch;  // reused across every case, as a session reuses it
  for (int round = 0; round < 400; ++round) {
    const size_t n = round % 10 == 0 ? rng() % 3 : 1 + rng() % 300;
    std::vector<Segment> segs =
        testing::ReferenceProfile(rng(), kNow, n, n + rng() % 5000, round % 2 == 1);
    for (Segment& s : segs) {
      if (round % 3 == 0 && rng() % 5 == 0) s.expires_at = kNever;
      if (round % 7 == 0 && rng() % 4 == 0) s.attr1 = static_cast<uint32_t>(rng() % 1000);
      if (round % 11 == 0 && rng() % 4 == 0) s.attr2 = static_cast<uint32_t>(rng());
    }
    std::string body;
    const uint64_t position = round % 4 == 1 ? 1 + rng() % 100000 : 0;
    Group group;  // a group now and then (version 3), with or without a position
    if (round % 5 == 2) {
      group.member = rng() % 2 == 0;
      group.link_expires = group.member ? static_cast<UnixSeconds>(rng()) : kNever;
      const size_t m = group.member ? rng() % 3 : 1 + rng() % 5;
      for (size_t i = 0; i < m; ++i) {
        group.members.push_back({"user" + std::to_string(1000 + i * 7), i % 2 ? kNever : kNow});
      }
    }
    EncodeProfile(segs, position, group, &body);
    for (int q = 0; q < 8; ++q) {
      GetOptions o;
      if (rng() % 2) o.id_from = rng() % 5000;
      if (rng() % 2) o.id_to = rng() % 5000;
      if (rng() % 3 == 0) {
        o.expiry_from = kNow + static_cast<UnixSeconds>(rng() % (800 * 3600));
        o.expiry_to =
            rng() % 2 ? UINT32_MAX : o.expiry_from + static_cast<UnixSeconds>(rng() % (400 * 3600));
        o.outside_expiry_window = rng() % 2;
      }
      o.count_only = rng() % 5 == 0;
      o.ids_only = rng() % 4 == 0;
      if (rng() % 3 == 0) o.limit = static_cast<uint32_t>(rng() % 20);
      // From before every expiry to after most of them.
      const UnixSeconds now = kNow + static_cast<UnixSeconds>(rng() % (800 * 3600));
      ExpectSameAsTwoSteps(body, now, o, &scratch,
                           "round " + std::to_string(round) + " query " + std::to_string(q));
    }
    // Damaged copies of the body: refused alike, or read alike.
    for (int f = 0; f < 4 && !body.empty(); ++f) {
      std::string bad = body;
      bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
      if (rng() % 2) bad.resize(rng() % bad.size());
      std::vector<char> exact(bad.begin(), bad.end());  // ASan sees any over-read
      ExpectSameAsTwoSteps(std::string_view(exact.data(), exact.size()), kNow, GetOptions{},
                           &scratch, "damaged, round " + std::to_string(round));
    }
  }
}

// ---- Version 2: the log position of the last cluster log entry applied.

std::string Bytes(std::string_view literal) { return std::string(literal); }

// Profiles of every shape the codec has: empty, one segment, "never" among
// finite expiries, attributes, gaps past the escape.
std::vector<std::vector<Segment>> Shapes() {
  return {
      {},
      {{5, 1790000001, {}, {}}},
      {{1, kNever, {}, {}},
       {2, 1790003600, {}, {}},
       {40, 1790007200, {}, {}},
       {41, kNever, {}, {}}},
      {{7, 1790006400, 1u, {}},
       {9, 1790003600, {}, 0xffffffffu},
       {12, kNever, 0u, 5u},
       {15, 1790000120, {}, {}}},
      {{0, 1790000001, {}, {}}, {1ull << 40, 1790000002, {}, {}}, {UINT64_MAX, UINT32_MAX, {}, {}}},
  };
}

// Without a position, the bodies are exactly what the codec wrote before
// version 2 existed (these bytes are from that build, and data file format 1
// holds them): single servers keep writing the same bytes.
TEST(CodecTest, BodiesWithoutAPositionAreVersionOneByteForByte) {
  using namespace std::string_view_literals;
  const std::vector<std::string> before = {
      Bytes("\x01\x00"sv),
      Bytes("\x01\x01\x05\x00\x00\x81\xf7\xc4\xd5\x06\x00"sv),
      Bytes("\x01\x04\x01\x03\x04\x90\x93\xc5\xd5\x06\x0c\xf0\x0a\x00\x10\x00\x11\x0e\x00"sv),
      Bytes("\x01\x04\x07\x00\x1c\xf8\xf7\xc4\xd5\x06\x0d\x01\x20\x6d\x89\x38\xb3\x01\x80\x00"
            "\x50\xd9\xff\xff\xff\x7f\x01\x00\x00\x00"sv),
      Bytes("\x01\x03\x00\x20\x00\x81\xf7\xc4\xd5\x06\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff"
            "\x00\x00\x00\xff\xff\xff\xff\xfe\xff\xff\xff\xff\xfe\xff\xff\x00\x00\x00\x00\x01"
            "\x00\x00\x00\x7e\xc4\x4e\x95"sv),
  };
  const std::vector<std::vector<Segment>> shapes = Shapes();
  ASSERT_EQ(shapes.size(), before.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string body, zero;
    EncodeSegments(shapes[i], &body);
    EXPECT_EQ(body, before[i]) << "shape " << i;
    EncodeSegments(shapes[i], 0, &zero);  // position 0: no position, version 1
    EXPECT_EQ(zero, before[i]) << "shape " << i;
    Columns c;
    c.log_position = 99;
    ASSERT_TRUE(DecodeColumns(body, &c).ok());
    EXPECT_EQ(c.log_position, 0u);
    EXPECT_EQ(*DecodeLogPosition(body), 0u);
  }
}

// Version 2 is the version byte, the position as a varint, then the
// version-1 body from its segment count on.
TEST(CodecTest, LogPositionsRoundTrip) {
  struct Case {
    uint64_t position;
    size_t varint_bytes;
  };
  const std::vector<Case> cases = {
      {1, 1}, {127, 1}, {128, 2}, {uint64_t{1} << 32, 5}, {UINT64_MAX, 10}};
  std::vector<std::vector<Segment>> shapes = Shapes();
  shapes.push_back(testing::ReferenceProfile(4, kNow));
  Columns reused;
  for (const Case& k : cases) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      SCOPED_TRACE("position " + std::to_string(k.position) + ", shape " + std::to_string(i));
      std::string v1, v2;
      EncodeSegments(shapes[i], &v1);
      EncodeSegments(shapes[i], k.position, &v2);
      ASSERT_EQ(v2.size(), v1.size() + k.varint_bytes);
      EXPECT_EQ(v2[0], char(2));
      EXPECT_EQ(v2.substr(1 + k.varint_bytes), v1.substr(1));

      Result<uint64_t> position = DecodeLogPosition(v2);
      ASSERT_TRUE(position.ok()) << position.status().ToString();
      EXPECT_EQ(*position, k.position);
      ASSERT_TRUE(DecodeColumns(v2, &reused).ok());
      EXPECT_EQ(reused.log_position, k.position);
      std::vector<Segment> out;
      ASSERT_TRUE(DecodeSegments(v2, &out).ok());
      EXPECT_EQ(out, shapes[i]);
      // The version-1 body, decoded into the same Columns: no position left over.
      ASSERT_TRUE(DecodeColumns(v1, &reused).ok());
      EXPECT_EQ(reused.log_position, 0u);
      // Re-encoding what was decoded gives the same bytes.
      std::string again;
      EncodeSegments(out, k.position, &again);
      EXPECT_EQ(again, v2);
    }
  }
}

TEST(CodecTest, DecodeSelectFillsTheLogPosition) {
  const std::vector<Segment> segs = testing::ReferenceProfile(5, kNow, 40);
  std::string v1, v2;
  EncodeSegments(segs, &v1);
  EncodeSegments(segs, 300, &v2);
  Columns scratch;
  GetResult a, b;
  Result<uint32_t> live = DecodeSelect(v2, kNow, GetOptions{}, &scratch, &a);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_EQ(*live, 40u);
  EXPECT_EQ(scratch.log_position, 300u);
  live = DecodeSelect(v1, kNow, GetOptions{}, &scratch, &b);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_EQ(scratch.log_position, 0u);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.expires, b.expires);
  // With attributes (the two-step path) and empty, too.
  std::vector<Segment> with_attr = segs;
  with_attr[3].attr1 = 9;
  EncodeSegments(with_attr, 301, &v2);
  ASSERT_TRUE(DecodeSelect(v2, kNow, GetOptions{}, &scratch, &a).ok());
  EXPECT_EQ(scratch.log_position, 301u);
  EncodeSegments({}, 302, &v2);
  live = DecodeSelect(v2, kNow, GetOptions{}, &scratch, &a);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_EQ(*live, 0u);
  EXPECT_EQ(scratch.log_position, 302u);
}

// Truncated or hostile version-2 headers: Corruption from every decoder,
// never an over-read (each input is an exact-size copy, for ASan).
TEST(CodecTest, HostileVersionTwoHeadersAreCorruption) {
  using namespace std::string_view_literals;
  const std::vector<std::string> bad = {
      Bytes("\x02"sv),                                                  // no position
      Bytes("\x02\x80"sv),                                              // position cut
      Bytes("\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff"sv),              // cut after 9 bytes
      Bytes("\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02\x00"sv),      // beyond 64 bits
      Bytes("\x02\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x00"sv),  // eleven bytes
      Bytes("\x02\x00\x00"sv),      // position 0 is never written
      Bytes("\x02\x80\x00\x00"sv),  // 0, spelt long
  };
  for (const std::string& b : bad) {
    std::vector<char> exact(b.begin(), b.end());
    const std::string_view body(exact.data(), exact.size());
    std::vector<Segment> out;
    EXPECT_TRUE(DecodeSegments(body, &out).IsCorruption()) << ::testing::PrintToString(b);
    Columns scratch;
    GetResult got;
    EXPECT_TRUE(DecodeSelect(body, kNow, GetOptions{}, &scratch, &got).status().IsCorruption());
    EXPECT_TRUE(DecodeLogPosition(body).status().IsCorruption()) << ::testing::PrintToString(b);
  }
  // A whole position but no body after it: the header reads (DecodeLogPosition
  // reads nothing more), the body does not.
  const std::string header_only = "\x02\x05";
  std::vector<char> exact(header_only.begin(), header_only.end());
  const std::string_view body(exact.data(), exact.size());
  EXPECT_EQ(*DecodeLogPosition(body), 5u);
  std::vector<Segment> out;
  EXPECT_TRUE(DecodeSegments(body, &out).IsCorruption());
  // No version this build reads: Corruption, and nothing is read past the version byte.
  for (char version : {char(0), char(5), char(0x7f), char(0xff)}) {
    const std::string b = std::string(1, version) + "\x05";
    EXPECT_TRUE(DecodeLogPosition(b).status().IsCorruption()) << int{version};
    EXPECT_TRUE(DecodeSegments(b, &out).IsCorruption()) << int{version};
  }
  EXPECT_TRUE(DecodeLogPosition(std::string_view()).status().IsCorruption());
}

TEST(CodecTest, EveryTruncationOfAVersionTwoBodyIsCorruption) {
  std::vector<Segment> in = testing::ReferenceProfile(6, kNow, 100);
  in[2].attr2 = 4;
  std::string body;
  EncodeSegments(in, UINT64_MAX, &body);
  for (size_t len = 0; len < body.size(); ++len) {
    std::vector<char> cut(body.begin(), body.begin() + static_cast<ptrdiff_t>(len));
    const std::string_view view(cut.data(), cut.size());
    std::vector<Segment> out;
    Status s = DecodeSegments(view, &out);
    EXPECT_TRUE(s.IsCorruption()) << "length " << len << ": " << s.ToString();
    // The header alone reads once the whole position is there (1 + 10 bytes).
    EXPECT_EQ(DecodeLogPosition(view).ok(), len >= 11) << "length " << len;
  }
}

// ---- Version 3: the group section, for a profile linked to others.

GroupMember Member(std::string user, UnixSeconds expires_at = kNever) {
  return GroupMember{std::move(user), expires_at};
}

// Group sections of every shape: a member with and without a link expiry, a
// master of one and of many (users from 1 to 65535 bytes, expiries and none,
// prefixes of one another), and both at once.
std::vector<Group> Groups() {
  std::vector<Group> groups(8);
  groups[0].member = true;  // its link never expires
  groups[1].member = true;
  groups[1].link_expires = kNow + 3600;
  groups[2].member = true;
  groups[2].link_expires = UINT32_MAX;
  groups[3].members = {Member("u")};
  groups[4].members = {Member("alice", kNow + 86400)};
  groups[5].members = {Member("a", 1),       Member("ab"),     Member("abc", UINT32_MAX),
                       Member("b", kNow),    Member("user-7"), Member(std::string(300, 'x')),
                       Member("\xff\xfe", 5)};
  groups[6].members = {Member(std::string(1, '\0')), Member(std::string(65535, 'z'), kNow)};
  groups[7].member = true;
  groups[7].link_expires = kNow;
  groups[7].members = {Member("m1", kNow + 60), Member("m2")};
  return groups;
}

// Version 3 is the version byte, the position, the group section, then the
// version-1 body from its segment count on.
TEST(CodecTest, GroupsRoundTripInEveryCombination) {
  std::vector<std::vector<Segment>> shapes = Shapes();  // empty, with and without attributes
  shapes.push_back(testing::ReferenceProfile(7, kNow));
  Columns reused;
  for (const Group& group : Groups()) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (uint64_t position : {uint64_t{0}, uint64_t{1}, uint64_t{300}, UINT64_MAX}) {
        SCOPED_TRACE("members " + std::to_string(group.members.size()) + ", member " +
                     std::to_string(group.member) + ", shape " + std::to_string(i) + ", position " +
                     std::to_string(position));
        std::string v1, v3;
        EncodeSegments(shapes[i], &v1);
        EncodeProfile(shapes[i], position, group, &v3);
        EXPECT_EQ(v3[0], char(3));
        ASSERT_GT(v3.size(), v1.size());
        EXPECT_EQ(v3.substr(v3.size() - (v1.size() - 1)), v1.substr(1));

        ASSERT_TRUE(DecodeColumns(v3, &reused).ok());
        EXPECT_EQ(reused.log_position, position);
        EXPECT_EQ(reused.group, group);
        ASSERT_EQ(reused.size(), shapes[i].size());
        for (size_t j = 0; j < reused.size(); ++j) EXPECT_EQ(reused.At(j), shapes[i][j]);
        std::vector<Segment> out;
        ASSERT_TRUE(DecodeSegments(v3, &out).ok());
        EXPECT_EQ(out, shapes[i]);
        Result<uint64_t> read = DecodeLogPosition(v3);
        ASSERT_TRUE(read.ok()) << read.status().ToString();
        EXPECT_EQ(*read, position);
        // Re-encoding what was decoded gives the same bytes.
        std::string again;
        EncodeProfile(out, reused.log_position, reused.group, &again);
        EXPECT_EQ(again, v3);
      }
    }
  }
}

// The bytes of the group section, spelt out.
TEST(CodecTest, VersionThreeBytes) {
  using namespace std::string_view_literals;
  Group member;
  member.member = true;
  member.link_expires = 300;
  std::string body;
  EncodeProfile({}, 0, member, &body);
  EXPECT_EQ(body, Bytes("\x03\x00\x01\xac\x02\x00\x00"sv));
  member.link_expires = kNever;
  EncodeProfile({}, 0, member, &body);
  EXPECT_EQ(body, Bytes("\x03\x00\x01\x00\x00\x00"sv));
  Group master;
  master.members = {Member("a"), Member("bc", 5)};
  EncodeProfile({}, 7, master, &body);
  EXPECT_EQ(body, Bytes("\x03\x07\x00\x02\x01"
                        "a\x00\x02"
                        "bc\x05\x00"sv));
  const std::vector<Segment> one = {{5, 1790000001, {}, {}}};
  EncodeProfile(one, 7, master, &body);
  EXPECT_EQ(body, Bytes("\x03\x07\x00\x02\x01"
                        "a\x00\x02"
                        "bc\x05\x01\x05\x00\x00\x81\xf7\xc4\xd5\x06\x00"sv));
}

// A profile in no group is written exactly as before version 3, whatever
// its group's unused link expiry says.
TEST(CodecTest, EncodeProfileWithAnEmptyGroupIsVersionOneOrTwo) {
  std::vector<std::vector<Segment>> shapes = Shapes();
  shapes.push_back(testing::ReferenceProfile(8, kNow));
  Group ignored_expiry;
  ignored_expiry.link_expires = kNow;  // not a member: nothing to expire
  for (const Group& empty : {Group{}, ignored_expiry}) {
    ASSERT_TRUE(empty.empty());
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::string v1, v1_zero, v2, profile_v1, profile_v2;
      EncodeSegments(shapes[i], &v1);
      EncodeSegments(shapes[i], 0, &v1_zero);
      EncodeSegments(shapes[i], 41, &v2);
      EncodeProfile(shapes[i], 0, empty, &profile_v1);
      EncodeProfile(shapes[i], 41, empty, &profile_v2);
      EXPECT_EQ(profile_v1, v1) << "shape " << i;
      EXPECT_EQ(profile_v1, v1_zero) << "shape " << i;
      EXPECT_EQ(profile_v2, v2) << "shape " << i;
      EXPECT_EQ(profile_v1[0], char(1));
      EXPECT_EQ(profile_v2[0], char(2));
    }
  }
}

TEST(CodecTest, DecodeSelectOnAVersionThreeBodySelectsAsOnVersionOne) {
  std::vector<std::vector<Segment>> shapes = Shapes();
  shapes.push_back(testing::ReferenceProfile(9, kNow, 60));
  std::vector<Segment> with_attr = testing::ReferenceProfile(10, kNow, 60);
  with_attr[4].attr1 = 3;  // the two-step path
  shapes.push_back(with_attr);
  std::vector<GetOptions> options(4);
  options[1].ids_only = true;
  options[1].limit = 5;
  options[2].count_only = true;
  options[2].id_from = 100;
  options[3].expiry_from = kNow + 3600 * 100;
  const std::vector<Group> groups = Groups();
  Columns scratch;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Group& group = groups[i % groups.size()];
    std::string v1, v3;
    EncodeSegments(shapes[i], &v1);
    EncodeProfile(shapes[i], i, group, &v3);
    for (size_t k = 0; k < options.size(); ++k) {
      SCOPED_TRACE("shape " + std::to_string(i) + ", options " + std::to_string(k));
      for (UnixSeconds now : {kNow, kNow + 3600 * 300}) {
        GetResult a, b;
        Result<uint32_t> live3 = DecodeSelect(v3, now, options[k], &scratch, &a);
        ASSERT_TRUE(live3.ok()) << live3.status().ToString();
        EXPECT_EQ(scratch.group, group);
        EXPECT_EQ(scratch.log_position, i);
        Result<uint32_t> live1 = DecodeSelect(v1, now, options[k], &scratch, &b);
        ASSERT_TRUE(live1.ok()) << live1.status().ToString();
        EXPECT_TRUE(scratch.group.empty());  // the reused scratch: nothing of the group left
        EXPECT_EQ(scratch.log_position, 0u);
        EXPECT_EQ(*live3, *live1);
        EXPECT_EQ(a.count, b.count);
        EXPECT_EQ(a.ids, b.ids);
        EXPECT_EQ(a.expires, b.expires);
        EXPECT_EQ(a.attr1, b.attr1);
        EXPECT_EQ(a.attr2, b.attr2);
      }
    }
  }
}

// The read path reuses one Columns across records: a version 1 or 2 body
// decoded after a version-3 one (or after a version-3 one that failed
// halfway through its members) has no group.
TEST(CodecTest, VersionOneAndTwoBodiesAfterAVersionThreeOneHaveNoGroup) {
  const std::vector<Segment> segs = testing::ReferenceProfile(11, kNow, 30);
  std::string v1, v2, v3;
  EncodeSegments(segs, &v1);
  EncodeSegments(segs, 12, &v2);
  Group group;
  group.member = true;
  group.link_expires = kNow;
  group.members = {Member("a"), Member("b", kNow), Member("c")};
  EncodeProfile(segs, 0, group, &v3);
  // The same body, its last member's user changed to "a": refused after two
  // members were read.
  std::string bad = v3;
  const size_t c = bad.find(
      "\x01"
      "c");
  ASSERT_NE(c, std::string::npos);
  bad[c + 1] = 'a';
  for (const std::string* plain : {&v1, &v2}) {
    Columns reused;
    ASSERT_TRUE(DecodeColumns(v3, &reused).ok());
    EXPECT_EQ(reused.group, group);
    EXPECT_EQ(reused.log_position, 0u);
    ASSERT_TRUE(DecodeColumns(*plain, &reused).ok());
    EXPECT_TRUE(reused.group.empty());
    EXPECT_EQ(reused.group, Group{});
    EXPECT_EQ(reused.log_position, plain == &v1 ? 0u : 12u);

    EXPECT_TRUE(DecodeColumns(bad, &reused).IsCorruption());
    ASSERT_TRUE(DecodeColumns(*plain, &reused).ok());
    EXPECT_EQ(reused.group, Group{});
  }
}

TEST(CodecTest, EveryTruncationOfAVersionThreeBodyIsCorruption) {
  std::vector<Segment> in = testing::ReferenceProfile(12, kNow, 100);
  in[5].attr1 = 8;
  Group group;
  group.member = true;
  group.link_expires = kNow;
  group.members = {Member("first", kNow + 60), Member("second"), Member("third", UINT32_MAX)};
  std::string with_segments, group_only;
  EncodeProfile(in, UINT64_MAX, group, &with_segments);
  EncodeProfile({}, 0, group, &group_only);
  for (const std::string& body : {with_segments, group_only}) {
    const size_t header = body.size() == group_only.size() ? 2 : 11;  // version and position
    for (size_t len = 0; len < body.size(); ++len) {
      std::vector<char> cut(body.begin(), body.begin() + static_cast<ptrdiff_t>(len));
      const std::string_view view(cut.data(), cut.size());
      std::vector<Segment> out;
      Status s = DecodeSegments(view, &out);
      EXPECT_TRUE(s.IsCorruption()) << "length " << len << ": " << s.ToString();
      Columns scratch;
      GetResult got;
      EXPECT_TRUE(DecodeSelect(view, kNow, GetOptions{}, &scratch, &got).status().IsCorruption())
          << "length " << len;
      // The position alone reads once it is whole.
      EXPECT_EQ(DecodeLogPosition(view).ok(), len >= header) << "length " << len;
    }
  }
}

// Hostile or damaged group sections: Corruption from every decoder, never an
// over-read (exact-size copies, for ASan) nor an allocation the body cannot
// justify. Each is one change away from a valid body.
TEST(CodecTest, HostileGroupSectionsAreCorruption) {
  using namespace std::string_view_literals;
  // Valid: a member (link never expires) of no one's, master of "a" and "b".
  const std::string valid = Bytes(
      "\x03\x05\x01\x00\x02\x01"
      "a\x00\x01"
      "b\x00\x00"sv);
  {
    Columns c;
    ASSERT_TRUE(DecodeColumns(valid, &c).ok());
    EXPECT_EQ(c.log_position, 5u);
    EXPECT_TRUE(c.group.member);
    EXPECT_EQ(c.group.members, (std::vector<GroupMember>{Member("a"), Member("b")}));
  }
  std::vector<std::pair<std::string, std::string>> bad = {
      {"no flags", Bytes("\x03\x05"sv)},
      {"no link expiry", Bytes("\x03\x05\x01"sv)},
      {"no member count", Bytes("\x03\x05\x00"sv)},
      {"an empty group (never written)", Bytes("\x03\x05\x00\x00\x00"sv)},
      {"an empty group, no position", Bytes("\x03\x00\x00\x00\x00"sv)},
      {"link expiry past 32 bits", Bytes("\x03\x05\x01\x80\x80\x80\x80\x10\x00\x00"sv)},
      {"member expiry past 32 bits", Bytes("\x03\x05\x00\x01\x01"
                                           "a\x80\x80\x80\x80\x10\x00"sv)},
      {"member expiry past 64 bits", Bytes("\x03\x05\x00\x01\x01"
                                           "a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x00"sv)},
      {"zero-length user", Bytes("\x03\x05\x00\x01\x00\x00\x00"sv)},
      {"user of 65536 bytes", Bytes("\x03\x05\x00\x01\x80\x80\x04"
                                    "abc\x00\x00"sv)},
      {"user past the end", Bytes("\x03\x05\x00\x01\x05"
                                  "ab\x00"sv)},
      {"user cut", Bytes("\x03\x05\x00\x01\x03"
                         "ab"sv)},
      {"unsorted", Bytes("\x03\x05\x00\x02\x01"
                         "b\x00\x01"
                         "a\x00\x00"sv)},
      {"unsorted prefix", Bytes("\x03\x05\x00\x02\x02"
                                "ab\x00\x01"
                                "a\x00\x00"sv)},
      {"duplicate", Bytes("\x03\x05\x00\x02\x01"
                          "a\x00\x01"
                          "a\x07\x00"sv)},
      {"more members than bytes", Bytes("\x03\x05\x00\x05\x01"
                                        "a\x00\x01"
                                        "b\x00\x00"sv)},
      {"one member more than the bytes", Bytes("\x03\x05\x00\x03\x01"
                                               "a\x00\x01"
                                               "b\x00\x00"sv)},
      {"2^60 members", Bytes("\x03\x05\x00\x80\x80\x80\x80\x80\x80\x80\x80\x10\x01"
                             "a\x00\x00"sv)},
      {"no segment count", Bytes("\x03\x05\x00\x01\x01"
                                 "a\x00"sv)},
      {"a byte after an empty profile", Bytes("\x03\x05\x00\x01\x01"
                                              "a\x00\x00\x00"sv)},
  };
  // Every unknown flag bit, alone and beside the member bit.
  for (int bit = 1; bit < 8; ++bit) {
    std::string flipped = valid;
    flipped[2] = static_cast<char>(flipped[2] | (1 << bit));
    bad.emplace_back("flag bit " + std::to_string(bit), flipped);
    flipped[2] = static_cast<char>(1 << bit);
    bad.emplace_back("flag bit " + std::to_string(bit) + " alone", flipped);
  }
  for (const auto& [what, b] : bad) {
    std::vector<char> exact(b.begin(), b.end());
    const std::string_view body(exact.data(), exact.size());
    std::vector<Segment> out;
    EXPECT_TRUE(DecodeSegments(body, &out).IsCorruption()) << what;
    Columns columns;
    columns.group.members = {Member("left over")};
    EXPECT_TRUE(DecodeColumns(body, &columns).IsCorruption()) << what;
    Columns scratch;
    GetResult got;
    EXPECT_TRUE(DecodeSelect(body, kNow, GetOptions{}, &scratch, &got).status().IsCorruption())
        << what;
    // Reserved by the count only after it is bounded by the bytes left.
    EXPECT_LE(columns.group.members.capacity(), std::max<size_t>(1, b.size() / 3)) << what;
  }
}

// DecodeLogPosition reads a version-3 body's position, 0 included, and not
// its group section.
TEST(CodecTest, DecodeLogPositionReadsVersionThree) {
  using namespace std::string_view_literals;
  Group group;
  group.members = {Member("m")};
  for (uint64_t position : {uint64_t{0}, uint64_t{1}, uint64_t{128}, UINT64_MAX}) {
    std::string body;
    EncodeProfile(testing::ReferenceProfile(13, kNow, 20), position, group, &body);
    Result<uint64_t> read = DecodeLogPosition(body);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(*read, position);
  }
  // The header alone, or a damaged group after it: the position still reads.
  for (const std::string& b : {Bytes("\x03\x05"sv), Bytes("\x03\x05\xff"sv),
                               Bytes("\x03\x05\x00\x09\x00"sv), Bytes("\x03\x00"sv)}) {
    std::vector<char> exact(b.begin(), b.end());
    const std::string_view body(exact.data(), exact.size());
    Result<uint64_t> read = DecodeLogPosition(body);
    ASSERT_TRUE(read.ok()) << ::testing::PrintToString(b);
    EXPECT_EQ(*read, b[1] == char(5) ? 5u : 0u);
    std::vector<Segment> out;
    EXPECT_TRUE(DecodeSegments(body, &out).IsCorruption()) << ::testing::PrintToString(b);
  }
  // A position missing or cut.
  for (const std::string& b : {Bytes("\x03"sv), Bytes("\x03\x80"sv),
                               Bytes("\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff"sv)}) {
    std::vector<char> exact(b.begin(), b.end());
    EXPECT_TRUE(
        DecodeLogPosition(std::string_view(exact.data(), exact.size())).status().IsCorruption())
        << ::testing::PrintToString(b);
  }
}

}  // namespace
}  // namespace segstore::profile
