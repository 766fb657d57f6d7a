#include "proto/get_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <msgpack.hpp>
#include <random>
#include <string>
#include <vector>

namespace segstore::proto::internal {
namespace {

bool SameRows(const GetResult& a, const GetResult& b) {
  return a.count == b.count && a.ids == b.ids && a.expires == b.expires && a.attr1 == b.attr1 &&
         a.attr2 == b.attr2 && a.master == b.master && a.profiles == b.profiles &&
         a.fields_asked == b.fields_asked && a.fields == b.fields;
}

bool SameResult(const Result<GetResult>& a, const Result<GetResult>& b) {
  if (a.ok() != b.ok()) return false;
  if (!a.ok()) {
    return a.status().code() == b.status().code() && a.status().message() == b.status().message();
  }
  return SameRows(*a, *b);
}

bool Same(const BatchGetResponse& a, const BatchGetResponse& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!SameResult(a[i], b[i])) return false;
  }
  return true;
}

bool Same(const GetResult& a, const GetResult& b) { return SameRows(a, b); }

// Every integer width of both columns, and attributes with gaps.
GetResult Wide() {
  GetResult r;
  r.ids = {0, 127, 128, 255, 256, 65535, 65536, 0xffffffffull, 0x100000000ull, UINT64_MAX};
  r.expires = {0, 127, 128, 255, 256, 65535, 65536, 0x7fffffff, 0xfffffffe, UINT32_MAX};
  r.attr1 = {std::nullopt, 1, 200, 70000, std::nullopt, 0, 5, 6, 7, UINT32_MAX};
  r.attr2.assign(10, std::nullopt);
  r.count = 4000000000u;
  return r;
}

// A profile of the reference workload: 1,000 ids under 82,000, hour expiries.
GetResult Profile(uint32_t seed) {
  std::mt19937 rng(seed);
  GetResult r;
  for (uint64_t id = rng() % 80; r.ids.size() < 1000; id += 1 + rng() % 160) {
    r.ids.push_back(id);
    r.expires.push_back(1790000000u + 3600u * (1 + rng() % 720));
  }
  r.count = 1000;
  return r;
}

// A linked user's merged view (profile bridging): the columns, then
// "master" and "profiles".
GetResult Merged(std::string master, uint32_t profiles) {
  GetResult r = Wide();
  r.master = std::move(master);
  r.profiles = profiles;
  return r;
}

// An answer with profile fields: every value type and width, names as str
// and as bin (not UTF-8), one at the length limit.
GetResult WithFields() {
  GetResult r = Profile(3);
  r.fields_asked = true;
  r.fields = {
      Field{"cap:1", FieldValue::Int(0), kNever},
      Field{"cap:2", FieldValue::Int(-1), 1790000000u},
      Field{"cap:3", FieldValue::Int(INT64_MIN), UINT32_MAX},
      Field{"cap:4", FieldValue::Int(INT64_MAX), 7},
      Field{"cap:5", FieldValue::Int(-129), 0},
      Field{"cap:6", FieldValue::Int(-40000), 0},
      Field{"cap:7", FieldValue::Int(-3000000000ll), 0},
      Field{"cap:8", FieldValue::Int(300), 0},
      Field{"country", FieldValue::String("DE"), 0},
      Field{"empty", FieldValue::String(""), 0},
      Field{"long", FieldValue::String(std::string(70000, 'x')), 0},
      Field{"raw", FieldValue::Bytes(std::string("\0\xff", 2)), 0},
      Field{"score", FieldValue::Double(-0.25), 0},
      Field{"seen", FieldValue::Time(1790000000u), 0},
      Field{"seen0", FieldValue::Time(0), 0},
      Field{"seenmax", FieldValue::Time(UINT32_MAX), 0},
      Field{std::string(kMaxFieldNameBytes, 'z'), FieldValue::Double(1e300), 0},
      Field{std::string("\xfe\x01", 2), FieldValue::Int(1), 0},
  };
  return r;
}

BatchGetResponse Batch() {
  BatchGetResponse m;
  m.push_back(Profile(1));
  m.push_back(Status::NotFound("no live segments"));
  m.push_back(GetResult{});
  m.push_back(Wide());
  m.push_back(Status::FromCode(Status::kMaxCode, ""));
  m.push_back(Merged("user-42", 3));
  m.push_back(WithFields());
  GetResult none_found;  // asked for fields, the profile has none
  none_found.fields_asked = true;
  m.push_back(none_found);
  return m;
}

template <typename T>
std::string Encoded(const T& m) {
  std::string out;
  Encode(m, &out);
  return out;
}

// Decodes `body` both ways and checks the answers agree: when the one-pass
// reader takes a body, the general path takes it too, with the same rows;
// and Decode, whichever path it took, answers as the general path does.
template <typename T>
void ExpectAgree(const std::string& body, const DecodeLimits& lim = {}) {
  T general;
  const Status general_status = DecodeGeneral(body, lim, &general);
  T fast;
  if (ReadGetAnswer(body, lim, &fast)) {
    ASSERT_TRUE(general_status.ok()) << general_status.ToString();
    ASSERT_TRUE(Same(fast, general));
  }
  T decoded;
  const Status s = Decode(body, lim, &decoded);
  ASSERT_EQ(s.code(), general_status.code());
  ASSERT_EQ(s.message(), general_status.message());
  if (s.ok()) {
    ASSERT_TRUE(Same(decoded, general));
  }
}

TEST(GetReaderTest, ReadsEveryAnswerTheServerWrites) {
  std::vector<GetResult> answers = {GetResult{}, Wide(), Profile(7)};
  GetResult ids_only = Profile(8);
  ids_only.expires.clear();
  answers.push_back(ids_only);
  GetResult count_only;
  count_only.count = 12345;
  answers.push_back(count_only);
  answers.push_back(Merged("user-42", 4));
  answers.push_back(Merged(std::string(kDefaultMaxKeyBytes, '\xff'), UINT32_MAX));
  GetResult merged_ids = ids_only;
  merged_ids.master = std::string("\0m", 2);
  merged_ids.profiles = 2;
  answers.push_back(merged_ids);
  GetResult merged_count = count_only;
  merged_count.master = "m";
  merged_count.profiles = 65;
  answers.push_back(merged_count);
  answers.push_back(WithFields());
  GetResult merged_fields = WithFields();
  merged_fields.master = "m";
  merged_fields.profiles = 3;
  answers.push_back(merged_fields);
  GetResult asked_none;
  asked_none.fields_asked = true;
  answers.push_back(asked_none);
  for (const GetResult& r : answers) {
    GetResult out;
    ASSERT_TRUE(ReadGetAnswer(Encoded(r), {}, &out));
    EXPECT_TRUE(Same(out, r));
    ExpectAgree<GetResult>(Encoded(r));
  }
  BatchGetResponse batch;
  ASSERT_TRUE(ReadGetAnswer(Encoded(Batch()), {}, &batch));
  EXPECT_TRUE(Same(batch, Batch()));
  ASSERT_FALSE(batch[1].ok());
  EXPECT_TRUE(batch[1].status().IsNotFound());
  EXPECT_EQ(batch[1].status().message(), "no live segments");
  ExpectAgree<BatchGetResponse>(Encoded(Batch()));
  ASSERT_TRUE(ReadGetAnswer(Encoded(BatchGetResponse{}), {}, &batch));
  EXPECT_TRUE(batch.empty());
}

// Bodies in forms the server never writes but MessagePack allows: the
// reader passes them to the general path, which takes or refuses them.
TEST(GetReaderTest, LeavesOtherFormsToTheGeneralPath) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  auto fresh = [&]() -> msgpack::packer<msgpack::sbuffer>& {
    b.clear();
    return pk;
  };
  auto body = [&] { return std::string(b.data(), b.size()); };
  auto expect_general = [&](const std::string& s, bool general_ok) {
    GetResult out;
    EXPECT_FALSE(ReadGetAnswer(s, {}, &out));
    GetResult general;
    EXPECT_EQ(DecodeGeneral(s, {}, &general).ok(), general_ok);
    ExpectAgree<GetResult>(s);
  };

  // A map of `fields` entries that opens with count and an ids array of
  // `ids` elements; the caller packs the elements and any further fields.
  auto count_and_ids = [&](uint32_t fields, uint64_t count, uint32_t ids) {
    fresh().pack_map(fields);
    pk.pack(std::string("count"));
    pk.pack_uint64(count);
    pk.pack(std::string("ids"));
    pk.pack_array(ids);
  };

  // A signed form of a non-negative id: valid MessagePack, read generally.
  count_and_ids(2, 1, 1);
  pk.pack_fix_int8(5);
  expect_general(body(), true);

  // An unknown key is ignored by the general path.
  count_and_ids(3, 0, 0);
  pk.pack(std::string("later"));
  pk.pack(std::string("field"));
  expect_general(body(), true);

  // A repeated key, or one that is not a string: refused, as in requests.
  count_and_ids(3, 0, 0);
  pk.pack(std::string("count"));
  pk.pack_uint32(9);
  expect_general(body(), false);
  count_and_ids(3, 0, 0);
  pk.pack_uint32(7);
  pk.pack_uint32(9);
  expect_general(body(), false);

  // A nil column reads as absent there.
  count_and_ids(3, 0, 0);
  pk.pack(std::string("expires"));
  pk.pack_nil();
  expect_general(body(), true);

  // Wrong: a negative id, an expiry past 32 bits, columns of unequal length,
  // no ids, a count past 32 bits, trailing bytes, nothing at all.
  count_and_ids(2, 1, 1);
  pk.pack_int8(-1);
  expect_general(body(), false);
  count_and_ids(3, 1, 1);
  pk.pack_uint32(7);
  pk.pack(std::string("expires"));
  pk.pack_array(1);
  pk.pack_uint64(1ull << 32);
  expect_general(body(), false);
  GetResult r = Wide();
  std::string s = Encoded(r);
  r.expires.pop_back();
  expect_general(Encoded(r), false);
  fresh().pack_map(1);
  pk.pack(std::string("count"));
  pk.pack_uint32(1);
  expect_general(body(), false);
  count_and_ids(2, 1ull << 32, 0);
  expect_general(body(), false);
  expect_general(s + '\0', false);
  expect_general("", false);

  // A merged view's "master" in other forms than the server's bin: a str and
  // nil are read generally; an empty one, or one over the limit, is refused.
  auto with_master = [&](auto pack_master) {
    count_and_ids(4, 0, 0);
    pk.pack(std::string("master"));
    pack_master();
    pk.pack(std::string("profiles"));
    pk.pack_uint32(2);
    return body();
  };
  expect_general(with_master([&] { pk.pack(std::string("user-42")); }), true);
  expect_general(with_master([&] { pk.pack_nil(); }), true);
  expect_general(with_master([&] {
                   pk.pack_bin(0);
                   pk.pack_bin_body("", 0);
                 }),
                 false);
  expect_general(with_master([&] { pk.pack_uint32(42); }), false);
  const std::string long_master(kDefaultMaxKeyBytes + 1, 'm');
  expect_general(with_master([&] {
                   pk.pack_bin(static_cast<uint32_t>(long_master.size()));
                   pk.pack_bin_body(long_master.data(), static_cast<uint32_t>(long_master.size()));
                 }),
                 false);
  // "profiles" without a master counts for nothing, on both paths.
  count_and_ids(3, 0, 0);
  pk.pack(std::string("profiles"));
  pk.pack_uint32(4);
  {
    GetResult fast;
    ASSERT_TRUE(ReadGetAnswer(body(), {}, &fast));
    EXPECT_EQ(fast.profiles, 0u);
    ExpectAgree<GetResult>(body());
  }
  // "profiles" negative or past 32 bits; "master" twice.
  count_and_ids(3, 0, 0);
  pk.pack(std::string("profiles"));
  pk.pack_int8(-1);
  expect_general(body(), false);
  count_and_ids(3, 0, 0);
  pk.pack(std::string("profiles"));
  pk.pack_uint64(1ull << 32);
  expect_general(body(), false);
  count_and_ids(4, 0, 0);
  pk.pack(std::string("master"));
  pk.pack_bin(1);
  pk.pack_bin_body("a", 1);
  pk.pack(std::string("master"));
  pk.pack_bin(1);
  pk.pack_bin_body("b", 1);
  expect_general(body(), false);
}

// Profile fields in forms the server never writes: read generally or refused
// there, never by the one-pass reader.
TEST(GetReaderTest, LeavesOtherFieldFormsToTheGeneralPath) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  auto body = [&] { return std::string(b.data(), b.size()); };
  // {"count": 0, "ids": [], "fields": <map of n entries, packed by the caller>}
  auto fields = [&](uint32_t n) {
    b.clear();
    pk.pack_map(3);
    pk.pack(std::string("count"));
    pk.pack_uint32(0);
    pk.pack(std::string("ids"));
    pk.pack_array(0);
    pk.pack(std::string("fields"));
    pk.pack_map(n);
  };
  auto entry = [&](const std::string& name, auto pack_value, uint64_t expires = 0) {
    pk.pack(name);
    pk.pack_array(2);
    pack_value();
    pk.pack_uint64(expires);
  };
  auto expect_general = [&](const std::string& s, bool general_ok) {
    GetResult out;
    EXPECT_FALSE(ReadGetAnswer(s, {}, &out));
    GetResult general;
    const Status st = DecodeGeneral(s, {}, &general);
    EXPECT_EQ(st.ok(), general_ok) << st.ToString();
    ExpectAgree<GetResult>(s);
  };
  auto timestamp = [&](const std::string& ext) {
    pk.pack_ext(ext.size(), -1);
    pk.pack_ext_body(ext.data(), ext.size());
  };

  // Read generally: a float 32, a 64-bit timestamp, nil for the map.
  fields(1);
  entry("f", [&] { pk.pack_float(1.5f); });
  expect_general(body(), true);
  fields(1);
  entry("t", [&] { timestamp(std::string("\0\0\0\0\x6a\xb0\0\0", 8)); });
  expect_general(body(), true);
  b.clear();
  pk.pack_map(3);
  pk.pack(std::string("count"));
  pk.pack_uint32(0);
  pk.pack(std::string("ids"));
  pk.pack_array(0);
  pk.pack(std::string("fields"));
  pk.pack_nil();
  expect_general(body(), true);

  // Refused: names out of order or twice, empty, too long, not a name; an
  // entry not a pair; an integer past int64; a str not UTF-8; an expiry
  // past 32 bits; a timestamp with nanoseconds; another extension; "fields"
  // twice; a map of more entries than a body's map may hold.
  fields(2);
  entry("b", [&] { pk.pack_int32(1); });
  entry("a", [&] { pk.pack_int32(1); });
  expect_general(body(), false);
  fields(2);
  entry("a", [&] { pk.pack_int32(1); });
  entry("a", [&] { pk.pack_int32(1); });
  expect_general(body(), false);
  fields(1);
  entry("", [&] { pk.pack_int32(1); });
  expect_general(body(), false);
  fields(1);
  entry(std::string(kMaxFieldNameBytes + 1, 'n'), [&] { pk.pack_int32(1); });
  expect_general(body(), false);
  fields(1);
  pk.pack_uint32(5);
  pk.pack_array(2);
  pk.pack_int32(1);
  pk.pack_uint32(0);
  expect_general(body(), false);
  fields(1);
  pk.pack(std::string("a"));
  pk.pack_array(3);
  pk.pack_int32(1);
  pk.pack_uint32(0);
  pk.pack_uint32(0);
  expect_general(body(), false);
  fields(1);
  entry("a", [&] { pk.pack_uint64(uint64_t{INT64_MAX} + 1); });
  expect_general(body(), false);
  // A str value that is not UTF-8 (a server stores none: PROTOCOL.md,
  // "Profile fields"): the general path refuses it, naming it.
  for (const std::string& bad : {std::string("\xff"), std::string("\xed\xa0\x80")}) {
    fields(1);
    entry("s", [&] { pk.pack(bad); });
    expect_general(body(), false);
  }
  fields(1);
  entry(
      "a", [&] { pk.pack_int32(1); }, uint64_t{1} << 32);
  expect_general(body(), false);
  fields(1);
  entry("t", [&] { timestamp(std::string("\0\0\0\x04\x6a\xb0\0\0", 8)); });
  expect_general(body(), false);
  fields(1);
  entry("x", [&] {
    pk.pack_ext(4, 7);
    pk.pack_ext_body("abcd", 4);
  });
  expect_general(body(), false);
  fields(0);
  pk.pack(std::string("fields"));
  pk.pack_map(0);
  {
    std::string twice = body();
    twice[0] = '\x84';
    expect_general(twice, false);
  }
  fields(static_cast<uint32_t>(kMaxMapEntries + 1));
  for (uint64_t i = 0; i <= kMaxMapEntries; ++i) {
    char name[8];
    std::snprintf(name, sizeof name, "f%05u", static_cast<unsigned>(i));
    entry(name, [&] { pk.pack_int32(1); });
  }
  expect_general(body(), false);
  fields(static_cast<uint32_t>(kMaxMapEntries));
  for (uint64_t i = 0; i < kMaxMapEntries; ++i) {
    char name[8];
    std::snprintf(name, sizeof name, "f%05u", static_cast<unsigned>(i));
    entry(name, [&] { pk.pack_int32(1); });
  }
  {
    GetResult out;
    ASSERT_TRUE(ReadGetAnswer(body(), {}, &out));
    EXPECT_EQ(out.fields.size(), kMaxMapEntries);
    ExpectAgree<GetResult>(body());
  }

  // A batch's error answer with fields beside it: its other keys do not
  // count, but a timestamp there is refused as anywhere a value is not read.
  for (bool with_time : {false, true}) {
    b.clear();
    pk.pack_map(1);
    pk.pack(std::string("results"));
    pk.pack_array(1);
    pk.pack_map(2);
    pk.pack(std::string("status"));
    pk.pack_uint8(2);
    pk.pack(std::string("fields"));
    pk.pack_map(1);
    entry("t", [&] {
      if (with_time) {
        timestamp(std::string("\0\0\0\x01", 4));
      } else {
        pk.pack_int32(1);
      }
    });
    BatchGetResponse out;
    EXPECT_FALSE(ReadGetAnswer(body(), {}, &out));
    BatchGetResponse general;
    EXPECT_EQ(DecodeGeneral(body(), {}, &general).ok(), !with_time);
    ExpectAgree<BatchGetResponse>(body());
  }
}

// The reader holds "master" to the caller's limits as the general path does.
TEST(GetReaderTest, AMastersLengthIsHeldToTheLimits) {
  DecodeLimits lim;
  lim.max_key_bytes = 4;
  GetResult out;
  EXPECT_TRUE(ReadGetAnswer(Encoded(Merged("abcd", 2)), lim, &out));
  EXPECT_EQ(out.master, "abcd");
  EXPECT_EQ(out.profiles, 2u);
  ExpectAgree<GetResult>(Encoded(Merged("abcd", 2)), lim);
  EXPECT_FALSE(ReadGetAnswer(Encoded(Merged("abcde", 2)), lim, &out));
  GetResult general;
  EXPECT_FALSE(DecodeGeneral(Encoded(Merged("abcde", 2)), lim, &general).ok());
  ExpectAgree<GetResult>(Encoded(Merged("abcde", 2)), lim);
  BatchGetResponse batch;
  batch.push_back(Merged("abcde", 2));
  ExpectAgree<BatchGetResponse>(Encoded(batch), lim);
}

// A user in no group: no "master", no "profiles", exactly as before bridging.
TEST(GetReaderTest, AnAnswerWithoutAMasterLeavesThemEmpty) {
  GetResult out;
  out.master = "stale";
  out.profiles = 9;
  ASSERT_TRUE(ReadGetAnswer(Encoded(Wide()), {}, &out));
  EXPECT_TRUE(out.master.empty());
  EXPECT_EQ(out.profiles, 0u);
}

// An answer's lists are bound only by the body (a server's answers are not
// held to the request limits); a list claiming more elements than the bytes
// left could hold is refused by both paths.
TEST(GetReaderTest, ListsAreBoundOnlyByTheBody) {
  DecodeLimits lim;
  lim.max_list = 100;
  lim.max_batch = 10;
  GetResult r;
  r.ids.assign(1000, 1);
  r.count = 1000;
  GetResult out;
  EXPECT_TRUE(ReadGetAnswer(Encoded(r), lim, &out));
  EXPECT_EQ(out.ids.size(), 1000u);
  ExpectAgree<GetResult>(Encoded(r), lim);
  // {"count": 1, "ids": array32 claiming 2^20 elements}, then 3 bytes.
  static constexpr char kHead[] =
      "\x82\xa5"
      "count"
      "\x01\xa3"
      "ids"
      "\xdd\x00\x10\x00\x00";
  const std::string lying = std::string(kHead, sizeof kHead - 1) + std::string(3, '\x01');
  EXPECT_FALSE(ReadGetAnswer(lying, lim, &out));
  GetResult general;
  EXPECT_EQ(DecodeGeneral(lying, lim, &general).code(), Status::Code::kInvalidArgument);
  ExpectAgree<GetResult>(lying, lim);
}

// Every truncation and thousands of random edits of real answers: the two
// paths never disagree, and the reader never reads past the body (the
// sanitizer builds check that).
TEST(GetReaderTest, DamagedBodiesGetTheGeneralPathsAnswer) {
  const std::string single = Encoded(Wide());
  const std::string merged = Encoded(Merged("user-42", 3));
  const std::string batch = Encoded(Batch());
  const std::string with_fields = Encoded(WithFields());
  for (size_t n = 0; n < with_fields.size(); n += 97) {
    ExpectAgree<GetResult>(with_fields.substr(0, n));
  }
  for (size_t n = 0; n < single.size(); ++n) ExpectAgree<GetResult>(single.substr(0, n));
  for (size_t n = 0; n < merged.size(); ++n) ExpectAgree<GetResult>(merged.substr(0, n));
  for (size_t n = 0; n < batch.size(); n += 7) ExpectAgree<BatchGetResponse>(batch.substr(0, n));
  std::mt19937 rng(20261123);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string m = iter % 2 == 1 ? batch : iter % 4 == 0 ? single : merged;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0:
          m[at] = static_cast<char>(rng());
          break;
        case 1:
          m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8)));
          break;
        default:
          m.erase(m.begin() + static_cast<std::ptrdiff_t>(at));
          break;
      }
    }
    if (iter % 2 == 0) {
      ExpectAgree<GetResult>(m);
    } else {
      ExpectAgree<BatchGetResponse>(m);
    }
  }
}

}  // namespace
}  // namespace segstore::proto::internal
