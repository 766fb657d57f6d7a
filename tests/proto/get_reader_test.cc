#include "proto/get_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <msgpack.hpp>
#include <random>
#include <string>
#include <vector>

namespace segstore::proto::internal {
namespace {

bool SameRows(const GetResult& a, const GetResult& b) {
  return a.count == b.count && a.ids == b.ids && a.expires == b.expires && a.attr1 == b.attr1 &&
         a.attr2 == b.attr2 && a.master == b.master && a.profiles == b.profiles;
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

BatchGetResponse Batch() {
  BatchGetResponse m;
  m.push_back(Profile(1));
  m.push_back(Status::NotFound("no live segments"));
  m.push_back(GetResult{});
  m.push_back(Wide());
  m.push_back(Status::FromCode(Status::kMaxCode, ""));
  m.push_back(Merged("user-42", 3));
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
