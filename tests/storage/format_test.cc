#include "storage/format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/coding.h"

// Header-only (no link dependency): used only to re-seal deliberately
// malformed structures with a valid checksum, so that the validation step
// behind the checksum is what gets tested.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace segstore::storage {
namespace {

constexpr uint64_t kSeq = 0x0123'4567'89AB'CDEFULL;

RecordHeader MakeHeader(RecordKind kind, std::string_view key, std::string_view body) {
  RecordHeader h;
  h.kind = kind;
  h.key_len = static_cast<uint16_t>(key.size());
  h.body_len = static_cast<uint32_t>(body.size());
  h.generation = 7;
  h.version = 0xFEDC'BA98'7654'3210ULL;
  h.last_update = 1'700'000'000;
  h.sweep_at = 1'700'000'100;
  h.void_at = 1'800'000'000;
  return h;
}

// Encodes into a buffer of exactly the record's footprint, pre-filled with
// garbage so that the padding is seen to be zeroed.
std::vector<uint8_t> Encode(const RecordHeader& h, std::string_view key, std::string_view body,
                            uint64_t seq) {
  std::vector<uint8_t> buf(RecordFootprint(h.key_len, h.body_len), 0xA5);
  EncodeRecord(h, key, body, seq, buf.data());
  return buf;
}

uint32_t UsedBytes(const RecordHeader& h) { return kRecordHeaderSize + h.key_len + h.body_len; }

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

void ExpectHeadersEqual(const RecordHeader& a, const RecordHeader& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.key_len, b.key_len);
  EXPECT_EQ(a.body_len, b.body_len);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.last_update, b.last_update);
  EXPECT_EQ(a.sweep_at, b.sweep_at);
  EXPECT_EQ(a.void_at, b.void_at);
}

// Rewrites the checksum in bytes [0, 4) over [4, n) with `seed`, the way the
// format seals every structure.
void Reseal(uint8_t* p, size_t n, uint64_t seed) {
  EncodeFixed32(p, static_cast<uint32_t>(XXH3_64bits_withSeed(p + 4, n - 4, seed)));
}

// ---- Records ----

TEST(FormatTest, FootprintRoundsUpToSixteen) {
  EXPECT_EQ(RecordFootprint(1, 0), 48u);   // 37 -> 48
  EXPECT_EQ(RecordFootprint(12, 0), 48u);  // exactly 48
  EXPECT_EQ(RecordFootprint(13, 0), 64u);  // 49 -> 64
  EXPECT_EQ(RecordFootprint(4, 8), 48u);   // exactly 48
  EXPECT_EQ(RecordFootprint(65535, 0), (36u + 65535u + 15u) / 16u * 16u);
  for (uint32_t k = 1; k < 64; ++k) {
    for (uint32_t b = 0; b < 64; ++b) {
      uint32_t f = RecordFootprint(k, b);
      EXPECT_EQ(f % kRecordAlign, 0u);
      EXPECT_GE(f, kRecordHeaderSize + k + b);
      EXPECT_LT(f - (kRecordHeaderSize + k + b), kRecordAlign);
    }
  }
}

TEST(FormatTest, PutRoundTrips) {
  std::string key = "user:42";
  std::string body = "a body with some bytes \x00\x01\x02 in it";
  RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
  std::vector<uint8_t> buf = Encode(h, key, body, kSeq);

  Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ExpectHeadersEqual(v->header, h);
  EXPECT_EQ(v->key, key);
  EXPECT_EQ(v->body, body);
  EXPECT_EQ(v->footprint, RecordFootprint(h.key_len, h.body_len));
  EXPECT_EQ(v->footprint, buf.size());
  // The views point into the source bytes; nothing is copied.
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(v->key.data()), buf.data() + kRecordHeaderSize);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(v->body.data()),
            buf.data() + kRecordHeaderSize + key.size());
}

TEST(FormatTest, TombstoneRoundTrips) {
  std::string key = "gone";
  RecordHeader h = MakeHeader(RecordKind::kTombstone, key, "");
  h.sweep_at = 0;
  h.void_at = 0;
  std::vector<uint8_t> buf = Encode(h, key, "", kSeq);

  Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->header.kind, RecordKind::kTombstone);
  ExpectHeadersEqual(v->header, h);
  EXPECT_EQ(v->key, key);
  EXPECT_TRUE(v->body.empty());
}

TEST(FormatTest, EmptyBodyRoundTrips) {
  std::string key = "k";
  RecordHeader h = MakeHeader(RecordKind::kPut, key, "");
  std::vector<uint8_t> buf = Encode(h, key, "", kSeq);
  ASSERT_EQ(buf.size(), 48u);

  Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->key, "k");
  EXPECT_EQ(v->body.size(), 0u);
  EXPECT_EQ(v->header.body_len, 0u);
  EXPECT_EQ(v->footprint, 48u);
}

TEST(FormatTest, MaxKeyLengthRoundTrips) {
  std::mt19937 rng(1);
  std::string key = RandomBytes(rng, 65535);
  for (std::string body : {std::string(), RandomBytes(rng, 1000)}) {
    RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
    ASSERT_EQ(h.key_len, 65535);
    std::vector<uint8_t> buf = Encode(h, key, body, kSeq);

    Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->header.key_len, 65535);
    EXPECT_EQ(v->key, key);
    EXPECT_EQ(v->body, body);
    EXPECT_EQ(v->footprint, buf.size());
  }
}

TEST(FormatTest, PaddingIsZeroed) {
  std::mt19937 rng(2);
  for (uint32_t key_len = 1; key_len <= 40; ++key_len) {
    for (uint32_t body_len = 0; body_len <= 40; ++body_len) {
      std::string key = RandomBytes(rng, key_len);
      std::string body = RandomBytes(rng, body_len);
      RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
      std::vector<uint8_t> buf = Encode(h, key, body, kSeq);  // pre-filled with 0xA5
      ASSERT_EQ(buf.size() % kRecordAlign, 0u);
      for (size_t i = UsedBytes(h); i < buf.size(); ++i) {
        ASSERT_EQ(buf[i], 0) << "key_len " << key_len << " body_len " << body_len << " byte " << i;
      }
      Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_EQ(v->key, key);
      EXPECT_EQ(v->body, body);
    }
  }
}

TEST(FormatTest, EncodeWritesNothingPastTheFootprint) {
  std::string key = "abc";
  std::string body = "defgh";
  RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
  uint32_t footprint = RecordFootprint(h.key_len, h.body_len);
  std::vector<uint8_t> buf(footprint + 64, 0xEE);
  EncodeRecord(h, key, body, kSeq, buf.data());
  for (size_t i = footprint; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xEE) << i;
}

TEST(FormatTest, RecordEndingExactlyAtAvailDecodes) {
  // Padding is not part of the record's validity: a record whose last body
  // byte is the last readable byte decodes.
  std::string key = "key";
  std::string body = "body";  // 36 + 3 + 4 = 43 bytes, footprint 48
  RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
  std::vector<uint8_t> full = Encode(h, key, body, kSeq);
  std::vector<uint8_t> exact(full.begin(), full.begin() + UsedBytes(h));
  Result<RecordView> v = DecodeRecord(exact.data(), exact.size(), kSeq);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->key, key);
  EXPECT_EQ(v->body, body);
}

TEST(FormatTest, ChecksumIsSeededWithBlockSeq) {
  std::string key = "user:1";
  std::string body = "hello";
  RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
  std::vector<uint8_t> buf = Encode(h, key, body, kSeq);
  ASSERT_TRUE(DecodeRecord(buf.data(), buf.size(), kSeq).ok());

  for (uint64_t other : {kSeq + 1, kSeq - 1, kSeq ^ (uint64_t{1} << 40), kSeq ^ (uint64_t{1} << 63),
                         uint64_t{0}, UINT64_MAX}) {
    Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), other);
    ASSERT_FALSE(v.ok()) << "a record of seq " << kSeq << " decoded under seq " << other;
    EXPECT_TRUE(v.status().IsCorruption()) << v.status().ToString();
  }
}

TEST(FormatTest, FlippedByteAnywhereIsCorruption) {
  std::mt19937 rng(3);
  std::string key = RandomBytes(rng, 23);
  std::string body = RandomBytes(rng, 101);
  for (RecordKind kind : {RecordKind::kPut, RecordKind::kTombstone}) {
    std::string b = kind == RecordKind::kPut ? body : std::string();
    RecordHeader h = MakeHeader(kind, key, b);
    const std::vector<uint8_t> good = Encode(h, key, b, kSeq);
    ASSERT_TRUE(DecodeRecord(good.data(), good.size(), kSeq).ok());
    for (size_t i = 0; i < UsedBytes(h); ++i) {
      for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x10}, uint8_t{0x80}, uint8_t{0xFF}}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= mask;
        Result<RecordView> v = DecodeRecord(bad.data(), bad.size(), kSeq);
        ASSERT_FALSE(v.ok()) << "byte " << i << " mask " << int{mask};
        EXPECT_TRUE(v.status().IsCorruption()) << v.status().ToString();
      }
    }
  }
}

TEST(FormatTest, TruncatedIsCorruptionAndNeverReadsPastAvail) {
  std::mt19937 rng(4);
  std::string key = RandomBytes(rng, 30);
  std::string body = RandomBytes(rng, 77);
  RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
  std::vector<uint8_t> good = Encode(h, key, body, kSeq);
  for (size_t avail = 0; avail < UsedBytes(h); ++avail) {
    // Exactly `avail` bytes on the heap: a sanitizer catches any over-read.
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<ptrdiff_t>(avail));
    Result<RecordView> v = DecodeRecord(cut.data(), avail, kSeq);
    ASSERT_FALSE(v.ok()) << "avail " << avail;
    EXPECT_TRUE(v.status().IsCorruption()) << v.status().ToString();
  }
  // The same bytes with `avail` telling the truth about a longer buffer: the
  // decoder honours `avail`, not the buffer's real size.
  for (size_t avail : {size_t{0}, size_t{35}, size_t{36}, size_t{UsedBytes(h) - 1}}) {
    Result<RecordView> v = DecodeRecord(good.data(), avail, kSeq);
    ASSERT_FALSE(v.ok()) << "avail " << avail;
    EXPECT_TRUE(v.status().IsCorruption());
  }
}

TEST(FormatTest, HugeLengthsAreCorruption) {
  std::string key = "key";
  std::string body = "body";
  RecordHeader h = MakeHeader(RecordKind::kPut, key, body);
  const std::vector<uint8_t> good = Encode(h, key, body, kSeq);
  struct Lens {
    uint16_t key_len;
    uint32_t body_len;
  };
  for (Lens l : {Lens{0xFFFF, 4}, Lens{3, 0xFFFFFFFF}, Lens{0xFFFF, 0xFFFFFFFF},
                 Lens{3, 0x8000'0000}, Lens{3, 0xFFFFFFFF - 36}, Lens{0x8000, 0}}) {
    std::vector<uint8_t> bad = good;
    EncodeFixed16(bad.data() + 6, l.key_len);
    EncodeFixed32(bad.data() + 8, l.body_len);
    // Whether or not the checksum is resealed, the lengths alone doom it.
    for (bool reseal : {false, true}) {
      if (reseal) Reseal(bad.data(), bad.size(), kSeq);
      Result<RecordView> v = DecodeRecord(bad.data(), bad.size(), kSeq);
      ASSERT_FALSE(v.ok()) << l.key_len << " " << l.body_len;
      EXPECT_TRUE(v.status().IsCorruption());
    }
  }
}

TEST(FormatTest, EmptyKeyIsCorruptionEvenWithValidChecksum) {
  RecordHeader h = MakeHeader(RecordKind::kPut, "", "body");
  std::vector<uint8_t> buf = Encode(h, "", "body", kSeq);
  Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(v.status().IsCorruption());
}

TEST(FormatTest, UnknownKindIsCorruptionEvenWithValidChecksum) {
  for (uint8_t kind : {uint8_t{0}, uint8_t{4}, uint8_t{0xFF}}) {
    RecordHeader h = MakeHeader(static_cast<RecordKind>(kind), "key", "body");
    std::vector<uint8_t> buf = Encode(h, "key", "body", kSeq);
    Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
    ASSERT_FALSE(v.ok()) << int{kind};
    EXPECT_TRUE(v.status().IsCorruption());
  }
}

// kPutRef (version 3 on): the reference comes back apart from the body.
TEST(FormatTest, PutWithAReferenceRoundTrips) {
  RecordHeader h = MakeHeader(RecordKind::kPutRef, "member", "");
  h.body_len = StoredBodySize(6, 4);
  EXPECT_EQ(h.body_len, 12u);
  std::vector<uint8_t> buf(RecordFootprint(h.key_len, h.body_len), 0xA5);
  EncodeRecord(h, "member", "master", "body", kSeq, buf.data());
  Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ExpectHeadersEqual(v->header, h);
  EXPECT_EQ(v->key, "member");
  EXPECT_EQ(v->reference, "master");
  EXPECT_EQ(v->body, "body");
  EXPECT_EQ(v->footprint, buf.size());
  const uint32_t used = UsedBytes(h);
  // In a record of version 2 (or on a device of version 2) kind 3 is damage:
  // the kind is checked, not just the checksum.
  std::vector<uint8_t> old = buf;
  old[5] = 2;
  Reseal(old.data(), used, kSeq);
  EXPECT_EQ(DecodeRecord(old.data(), old.size(), kSeq).status().message(), "record kind");
  EXPECT_TRUE(DecodeRecord(buf.data(), buf.size(), kSeq, 2).status().IsCorruption());

  // An empty body is fine; the reference is not.
  h.body_len = StoredBodySize(1, 0);
  std::vector<uint8_t> small(RecordFootprint(h.key_len, h.body_len));
  EncodeRecord(h, "member", "m", "", kSeq, small.data());
  v = DecodeRecord(small.data(), small.size(), kSeq);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->reference, "m");
  EXPECT_EQ(v->body, "");
}

TEST(FormatTest, AReferenceLengthOutsideItsBodyIsCorruption) {
  RecordHeader h = MakeHeader(RecordKind::kPutRef, "member", "");
  h.body_len = StoredBodySize(6, 4);
  std::vector<uint8_t> buf(RecordFootprint(h.key_len, h.body_len));
  EncodeRecord(h, "member", "master", "body", kSeq, buf.data());
  for (uint16_t len : {uint16_t{0}, uint16_t{11}, uint16_t{0xFFFF}}) {
    std::vector<uint8_t> bad = buf;
    EncodeFixed16(bad.data() + kRecordHeaderSize + 6, len);
    Reseal(bad.data(), UsedBytes(h), kSeq);
    Result<RecordView> v = DecodeRecord(bad.data(), bad.size(), kSeq);
    ASSERT_FALSE(v.ok()) << len;
    EXPECT_TRUE(v.status().IsCorruption()) << len;
  }
  // 10 fits: the reference takes the whole body.
  EncodeFixed16(buf.data() + kRecordHeaderSize + 6, 10);
  Reseal(buf.data(), UsedBytes(h), kSeq);
  Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->reference, "masterbody");
  EXPECT_EQ(v->body, "");
}

TEST(FormatTest, WrongRecordVersionIsCorruptionEvenWithValidChecksum) {
  RecordHeader h = MakeHeader(RecordKind::kPut, "key", "body");
  std::vector<uint8_t> buf = Encode(h, "key", "body", kSeq);
  for (uint8_t version : {uint8_t{0}, uint8_t{kFormatVersion + 1}, uint8_t{0xFF}}) {
    std::vector<uint8_t> bad = buf;
    bad[5] = version;
    Reseal(bad.data(), UsedBytes(h), kSeq);
    Result<RecordView> v = DecodeRecord(bad.data(), bad.size(), kSeq);
    ASSERT_FALSE(v.ok()) << int{version};
    EXPECT_TRUE(v.status().IsCorruption());
  }
}

// Records carry the version they were written in: every version this build
// reads decodes (and says which it is), up to the device's version, the
// superblock's (FORMAT.md, "Versions"); the encoder writes kFormatVersion.
TEST(FormatTest, RecordOfEveryVersionThisBuildReadsDecodes) {
  RecordHeader h = MakeHeader(RecordKind::kPut, "key", "body");
  h.format_version = kOldestFormatVersion;  // not read by the encoder
  std::vector<uint8_t> buf = Encode(h, "key", "body", kSeq);
  EXPECT_EQ(buf[5], kFormatVersion);
  for (uint16_t version = kOldestFormatVersion; version <= kFormatVersion; ++version) {
    std::vector<uint8_t> at = buf;
    at[5] = static_cast<uint8_t>(version);
    Reseal(at.data(), UsedBytes(h), kSeq);
    for (uint16_t newest = version; newest <= kFormatVersion; ++newest) {
      Result<RecordView> v = DecodeRecord(at.data(), at.size(), kSeq, newest);
      ASSERT_TRUE(v.ok()) << version << " under " << newest << ": " << v.status().ToString();
      EXPECT_EQ(v->header.format_version, version);
      EXPECT_EQ(v->body, "body");
    }
  }
}

TEST(FormatTest, RecordNewerThanTheDevicesVersionIsCorruption) {
  RecordHeader h = MakeHeader(RecordKind::kPut, "key", "body");
  std::vector<uint8_t> buf = Encode(h, "key", "body", kSeq);  // kFormatVersion
  for (uint16_t newest = kOldestFormatVersion; newest < kFormatVersion; ++newest) {
    Result<RecordView> v = DecodeRecord(buf.data(), buf.size(), kSeq, newest);
    ASSERT_FALSE(v.ok()) << newest;
    EXPECT_TRUE(v.status().IsCorruption()) << v.status().ToString();
  }
  // A bound past what this build reads does not widen it.
  std::vector<uint8_t> bad = buf;
  bad[5] = static_cast<uint8_t>(kFormatVersion + 1);
  Reseal(bad.data(), UsedBytes(h), kSeq);
  EXPECT_TRUE(DecodeRecord(bad.data(), bad.size(), kSeq, 0xFF).status().IsCorruption());
}

// Recovery scans with the superblock's version as the bound: records newer
// than it are not records of this file.
TEST(FormatTest, BlockScannerSkipsRecordsNewerThanItsBound) {
  constexpr uint32_t kBlock = 2 * kSectorSize;
  std::vector<uint8_t> block(kBlock, 0);
  uint32_t off = kBlockHeaderSize;
  std::vector<uint32_t> offsets;
  for (int i = 0; i < 6; ++i) {
    const std::string key = "key" + std::to_string(i);
    RecordHeader h = MakeHeader(RecordKind::kPut, key, "body");
    EncodeRecord(h, key, "body", kSeq, block.data() + off);
    if (i % 2 == 0) {  // every other one in the oldest version
      block[off + 5] = static_cast<uint8_t>(kOldestFormatVersion);
      Reseal(block.data() + off, UsedBytes(h), kSeq);
    }
    offsets.push_back(off);
    off += RecordFootprint(h.key_len, h.body_len);
  }
  auto scan = [&](uint16_t newest) {
    std::vector<std::string> keys;
    BlockScanner s(block.data(), kBlock, kSeq, newest);
    RecordView v;
    uint32_t at;
    while (s.Next(&v, &at)) keys.emplace_back(v.key);
    return keys;
  };
  EXPECT_EQ(scan(kFormatVersion).size(), 6u);
  if (kOldestFormatVersion < kFormatVersion) {
    EXPECT_EQ(scan(kOldestFormatVersion), (std::vector<std::string>{"key0", "key2", "key4"}));
  }
}

TEST(FormatTest, ZeroBytesAreNotARecord) {
  std::vector<uint8_t> zeros(4096, 0);
  Result<RecordView> v = DecodeRecord(zeros.data(), zeros.size(), kSeq);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(v.status().IsCorruption());
  v = DecodeRecord(zeros.data(), zeros.size(), 0);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(v.status().IsCorruption());
}

// Whether `bytes` really hold a valid record of `seq` as decoded in `v`: the
// encoder, given what the decoder saw, reproduces every byte it covers.
bool ReallyValid(const std::vector<uint8_t>& bytes, const RecordView& v, uint64_t seq) {
  uint64_t used = uint64_t{kRecordHeaderSize} + v.header.key_len + v.header.body_len;
  if (used > bytes.size()) return false;
  if (v.key.size() != v.header.key_len || v.body.size() != v.header.body_len) return false;
  if (reinterpret_cast<const uint8_t*>(v.key.data()) != bytes.data() + kRecordHeaderSize) {
    return false;
  }
  std::vector<uint8_t> again(RecordFootprint(v.header.key_len, v.header.body_len));
  EncodeRecord(v.header, v.key, v.body, seq, again.data());
  return std::memcmp(again.data(), bytes.data(), used) == 0;
}

TEST(FormatTest, RandomBytesFuzz) {
  std::mt19937 rng(0x5e65'7041);
  int accepted = 0;
  int valid_seeds = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    uint64_t seq = (uint64_t{rng()} << 32) | rng();
    std::vector<uint8_t> bytes;
    switch (iter % 4) {
      case 0: {  // pure noise
        bytes.resize(rng() % 200);
        for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
        break;
      }
      case 1: {  // noise with a plausible kind, version and small lengths
        bytes.resize(kRecordHeaderSize + rng() % 160);
        for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
        bytes[4] = static_cast<uint8_t>(1 + rng() % 2);
        bytes[5] = static_cast<uint8_t>(kFormatVersion);
        EncodeFixed16(bytes.data() + 6, static_cast<uint16_t>(rng() % 80));
        EncodeFixed32(bytes.data() + 8, rng() % 80);
        break;
      }
      default: {  // a valid record, then a few random mutations, maybe truncated
        std::string key = RandomBytes(rng, 1 + rng() % 40);
        std::string body = RandomBytes(rng, rng() % 100);
        RecordHeader h =
            MakeHeader(rng() % 2 ? RecordKind::kPut : RecordKind::kTombstone, key, body);
        bytes = Encode(h, key, body, seq);
        int mutations = static_cast<int>(rng() % 4);
        for (int m = 0; m < mutations; ++m) {
          bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        }
        if (rng() % 4 == 0) bytes.resize(rng() % (bytes.size() + 1));
        if (mutations == 0 && bytes.size() >= UsedBytes(h)) ++valid_seeds;
        break;
      }
    }
    // A fresh, exactly sized copy: any read past `avail` is a heap over-read.
    std::vector<uint8_t> exact(bytes);
    Result<RecordView> v = DecodeRecord(exact.data(), exact.size(), seq);
    if (v.ok()) {
      ++accepted;
      ASSERT_TRUE(ReallyValid(exact, *v, seq)) << "iteration " << iter << " accepted garbage";
    }
  }
  // The fuzz really did reach the accepting path too.
  EXPECT_GT(valid_seeds, 0);
  EXPECT_GE(accepted, valid_seeds);
}

// ---- Pad marker ----

TEST(FormatTest, PadMarkerRecognisedOnlyWithMatchingSeqLowBits) {
  uint8_t buf[kPadMarkerSize];
  EncodePadMarker(kSeq, buf);
  EXPECT_EQ(DecodeFixed32(buf), kPadMagic);
  EXPECT_TRUE(IsPadMarker(buf, sizeof buf, kSeq));
  // Only the low 32 bits are stored.
  EXPECT_TRUE(IsPadMarker(buf, sizeof buf, kSeq ^ (uint64_t{1} << 32)));
  EXPECT_TRUE(IsPadMarker(buf, sizeof buf, kSeq & 0xFFFF'FFFF));
  EXPECT_FALSE(IsPadMarker(buf, sizeof buf, kSeq + 1));
  EXPECT_FALSE(IsPadMarker(buf, sizeof buf, kSeq ^ 0x8000'0000));
  EXPECT_FALSE(IsPadMarker(buf, sizeof buf, 0));
}

TEST(FormatTest, PadMarkerNeedsEightBytesAndItsMagic) {
  uint8_t buf[kPadMarkerSize];
  EncodePadMarker(kSeq, buf);
  for (size_t avail = 0; avail < kPadMarkerSize; ++avail) {
    std::vector<uint8_t> cut(buf, buf + avail);
    EXPECT_FALSE(IsPadMarker(cut.data(), avail, kSeq)) << avail;
  }
  std::vector<uint8_t> exact(buf, buf + kPadMarkerSize);
  EXPECT_TRUE(IsPadMarker(exact.data(), exact.size(), kSeq));
  for (size_t i = 0; i < kPadMarkerSize; ++i) {
    std::vector<uint8_t> bad = exact;
    bad[i] ^= 0x01;
    EXPECT_FALSE(IsPadMarker(bad.data(), bad.size(), kSeq)) << i;
  }
  uint8_t zeros[kPadMarkerSize] = {};
  EXPECT_FALSE(IsPadMarker(zeros, sizeof zeros, 0));
}

TEST(FormatTest, PadMarkerIsNotARecord) {
  uint8_t buf[64] = {};
  EncodePadMarker(kSeq, buf);
  EXPECT_FALSE(DecodeRecord(buf, sizeof buf, kSeq).ok());
}

// ---- Superblock ----

Superblock GoodSuperblock() {
  Superblock sb;
  sb.device_id = 0x1122'3344'5566'7788ULL;
  sb.hash_seed = 0x99AA'BBCC'DDEE'FF00ULL;
  sb.block_size = 64u << 10;
  sb.device_size = uint64_t{1024} * sb.block_size;
  sb.created_at = 1'700'000'000;
  return sb;
}

TEST(FormatTest, SuperblockRoundTrips) {
  Superblock sb = GoodSuperblock();
  uint8_t buf[kSuperblockEncodedSize];
  std::memset(buf, 0xCC, sizeof buf);
  EncodeSuperblock(sb, buf);
  EXPECT_EQ(DecodeFixed64(buf + 4), kSuperMagic);
  Result<Superblock> got = DecodeSuperblock(buf);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->device_id, sb.device_id);
  EXPECT_EQ(got->hash_seed, sb.hash_seed);
  EXPECT_EQ(got->device_size, sb.device_size);
  EXPECT_EQ(got->block_size, sb.block_size);
  EXPECT_EQ(got->created_at, sb.created_at);
}

TEST(FormatTest, SuperblockAllZeroIsNotFound) {
  uint8_t buf[kSuperblockEncodedSize] = {};
  Result<Superblock> got = DecodeSuperblock(buf);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsNotFound()) << got.status().ToString();
}

TEST(FormatTest, SuperblockFlippedByteIsCorruption) {
  uint8_t good[kSuperblockEncodedSize];
  EncodeSuperblock(GoodSuperblock(), good);
  for (size_t i = 0; i < kSuperblockEncodedSize; ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      uint8_t bad[kSuperblockEncodedSize];
      std::memcpy(bad, good, sizeof bad);
      bad[i] ^= mask;
      Result<Superblock> got = DecodeSuperblock(bad);
      ASSERT_FALSE(got.ok()) << "byte " << i;
      EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
    }
  }
}

TEST(FormatTest, SuperblockWritesTheDataFileFormatVersion) {
  uint8_t buf[kSuperblockEncodedSize];
  EncodeSuperblock(GoodSuperblock(), buf);
  EXPECT_EQ(DecodeFixed16(buf + 12), kFormatVersion);
  EXPECT_EQ(DecodeSuperblock(buf)->version, kFormatVersion);
  // Every version from the oldest this build reads opens, and says which.
  for (uint16_t version = kOldestFormatVersion; version <= kFormatVersion; ++version) {
    EncodeFixed16(buf + 12, version);
    Reseal(buf, sizeof buf, 0);
    Result<Superblock> got = DecodeSuperblock(buf);
    ASSERT_TRUE(got.ok()) << version << ": " << got.status().ToString();
    EXPECT_EQ(got->version, version);
  }
}

// The upgrade (FORMAT.md, "Versions"): an older version's superblock says
// kFormatVersion, with every other byte as it was: only the checksum (bytes
// 0-3) and the version (12-13) change.
TEST(FormatTest, UpgradeSuperblockRewritesOnlyItsVersionAndChecksum) {
  for (uint16_t version = kOldestFormatVersion; version <= kFormatVersion; ++version) {
    uint8_t buf[kSuperblockEncodedSize];
    EncodeSuperblock(GoodSuperblock(), buf);
    EncodeFixed16(buf + 12, version);
    Reseal(buf, sizeof buf, 0);
    uint8_t before[kSuperblockEncodedSize];
    std::memcpy(before, buf, sizeof buf);
    UpgradeSuperblock(buf);
    for (size_t i = 0; i < sizeof buf; ++i) {
      if (i < 4 || i == 12 || i == 13) continue;
      EXPECT_EQ(buf[i], before[i]) << "byte " << i;
    }
    EXPECT_EQ(DecodeFixed16(buf + 12), kFormatVersion);
    Result<Superblock> got = DecodeSuperblock(buf);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->version, kFormatVersion);
    EXPECT_EQ(got->device_id, GoodSuperblock().device_id);
    EXPECT_EQ(got->hash_seed, GoodSuperblock().hash_seed);
    EXPECT_EQ(got->device_size, GoodSuperblock().device_size);
    EXPECT_EQ(got->block_size, GoodSuperblock().block_size);
    EXPECT_EQ(got->created_at, GoodSuperblock().created_at);
  }
}

// A valid superblock of a later format version: Unsupported, not
// Corruption, and the message names both versions (FORMAT.md, "Versions").
TEST(FormatTest, SuperblockOfANewerVersionIsUnsupportedNamingBoth) {
  uint8_t buf[kSuperblockEncodedSize];
  EncodeSuperblock(GoodSuperblock(), buf);
  for (uint16_t version : {uint16_t{kFormatVersion + 1}, uint16_t{0x0100}, uint16_t{0xFFFF}}) {
    EncodeFixed16(buf + 12, version);
    Reseal(buf, sizeof buf, 0);
    Result<Superblock> got = DecodeSuperblock(buf);
    ASSERT_FALSE(got.ok()) << version;
    EXPECT_EQ(got.status().code(), Status::Code::kUnsupported) << got.status().ToString();
    const std::string want =
        "data file format version " + std::to_string(version) + " is newer than this build reads (";
    EXPECT_NE(got.status().message().find(want), std::string::npos) << got.status().ToString();
    EXPECT_NE(got.status().message().find(std::to_string(kFormatVersion) + ")"), std::string::npos)
        << got.status().ToString();
  }
}

// No release writes version 0: a superblock saying so is damaged.
TEST(FormatTest, SuperblockOfVersionZeroIsCorruption) {
  uint8_t buf[kSuperblockEncodedSize];
  EncodeSuperblock(GoodSuperblock(), buf);
  EncodeFixed16(buf + 12, 0);
  Reseal(buf, sizeof buf, 0);
  Result<Superblock> got = DecodeSuperblock(buf);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
  EXPECT_NE(got.status().message().find("format version 0"), std::string::npos)
      << got.status().ToString();
}

// The checksum covers the version: a version damaged on the device is
// Corruption, never taken for a newer format.
TEST(FormatTest, SuperblockVersionDamagedWithoutResealIsCorruption) {
  uint8_t buf[kSuperblockEncodedSize];
  EncodeSuperblock(GoodSuperblock(), buf);
  EncodeFixed16(buf + 12, kFormatVersion + 1);
  Result<Superblock> got = DecodeSuperblock(buf);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
}

TEST(FormatTest, SuperblockWrongMagicIsCorruption) {
  uint8_t buf[kSuperblockEncodedSize];
  EncodeSuperblock(GoodSuperblock(), buf);
  EncodeFixed64(buf + 4, kSuperMagic ^ 1);
  Reseal(buf, sizeof buf, 0);
  Result<Superblock> got = DecodeSuperblock(buf);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsCorruption());
}

TEST(FormatTest, SuperblockImpossibleGeometryIsCorruption) {
  struct Geometry {
    uint64_t device_size;
    uint32_t block_size;
  };
  for (Geometry g : {
           Geometry{1u << 20, 0},                         // no block size at all
           Geometry{1u << 20, kSectorSize},               // blocks smaller than two sectors
           Geometry{1u << 20, 512},                       // smaller than a sector
           Geometry{3 * 10000, 10000},                    // not a multiple of the sector
           Geometry{(64u << 10) * 10 + 4096, 64u << 10},  // device not a multiple of blocks
           Geometry{64u << 10, 64u << 10},                // a single block: no room for data
           Geometry{0, 64u << 10},                        // empty device
       }) {
    Superblock sb = GoodSuperblock();
    sb.device_size = g.device_size;
    sb.block_size = g.block_size;
    uint8_t buf[kSuperblockEncodedSize];
    EncodeSuperblock(sb, buf);
    Result<Superblock> got = DecodeSuperblock(buf);
    ASSERT_FALSE(got.ok()) << g.device_size << " / " << g.block_size;
    EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
  }
  // The smallest possible geometry is fine.
  Superblock sb = GoodSuperblock();
  sb.block_size = 2 * kSectorSize;
  sb.device_size = 2 * sb.block_size;
  uint8_t buf[kSuperblockEncodedSize];
  EncodeSuperblock(sb, buf);
  EXPECT_TRUE(DecodeSuperblock(buf).ok());
}

// ---- Write block header ----

BlockHeader GoodBlockHeader() {
  BlockHeader h;
  h.seq = kSeq;
  h.device_id = 0x1122'3344'5566'7788ULL;
  h.block_index = 12345;
  h.block_size = 64u << 10;
  return h;
}

TEST(FormatTest, BlockHeaderRoundTrips) {
  BlockHeader h = GoodBlockHeader();
  uint8_t buf[kBlockHeaderSize];
  std::memset(buf, 0xCC, sizeof buf);
  EncodeBlockHeader(h, buf);
  EXPECT_EQ(DecodeFixed32(buf + 4), kBlockMagic);
  // Reserved bytes are zero.
  for (size_t i = 36; i < kBlockHeaderSize; ++i) EXPECT_EQ(buf[i], 0) << i;
  Result<BlockHeader> got = DecodeBlockHeader(buf);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->seq, h.seq);
  EXPECT_EQ(got->device_id, h.device_id);
  EXPECT_EQ(got->block_index, h.block_index);
  EXPECT_EQ(got->block_size, h.block_size);
}

TEST(FormatTest, BlockHeaderAllZeroIsNotFound) {
  uint8_t buf[kBlockHeaderSize] = {};
  Result<BlockHeader> got = DecodeBlockHeader(buf);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsNotFound()) << got.status().ToString();
}

TEST(FormatTest, BlockHeaderFlippedByteIsCorruption) {
  uint8_t good[kBlockHeaderSize];
  EncodeBlockHeader(GoodBlockHeader(), good);
  for (size_t i = 0; i < kBlockHeaderSize; ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      uint8_t bad[kBlockHeaderSize];
      std::memcpy(bad, good, sizeof bad);
      bad[i] ^= mask;
      Result<BlockHeader> got = DecodeBlockHeader(bad);
      ASSERT_FALSE(got.ok()) << "byte " << i;
      EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
    }
  }
}

TEST(FormatTest, BlockHeaderWrongVersionIsCorruption) {
  uint8_t buf[kBlockHeaderSize];
  EncodeBlockHeader(GoodBlockHeader(), buf);
  for (uint16_t version : {uint16_t{0}, uint16_t{kFormatVersion + 1}, uint16_t{0xFFFF}}) {
    EncodeFixed16(buf + 8, version);
    Reseal(buf, sizeof buf, 0);
    Result<BlockHeader> got = DecodeBlockHeader(buf);
    ASSERT_FALSE(got.ok()) << version;
    EXPECT_TRUE(got.status().IsCorruption());
    EXPECT_NE(got.status().message().find("format version " + std::to_string(version)),
              std::string::npos)
        << got.status().ToString();
  }
}

TEST(FormatTest, BlockHeaderOfEveryVersionThisBuildReadsDecodes) {
  uint8_t buf[kBlockHeaderSize];
  BlockHeader h = GoodBlockHeader();
  h.version = kOldestFormatVersion;  // not read by the encoder
  EncodeBlockHeader(h, buf);
  EXPECT_EQ(DecodeFixed16(buf + 8), kFormatVersion);
  for (uint16_t version = kOldestFormatVersion; version <= kFormatVersion; ++version) {
    EncodeFixed16(buf + 8, version);
    Reseal(buf, sizeof buf, 0);
    Result<BlockHeader> got = DecodeBlockHeader(buf);
    ASSERT_TRUE(got.ok()) << version << ": " << got.status().ToString();
    EXPECT_EQ(got->version, version);
    EXPECT_EQ(got->seq, kSeq);
  }
}

TEST(FormatTest, BlockHeaderWrongMagicIsCorruption) {
  uint8_t buf[kBlockHeaderSize];
  EncodeBlockHeader(GoodBlockHeader(), buf);
  EncodeFixed32(buf + 4, kBlockMagic ^ 0x100);
  Reseal(buf, sizeof buf, 0);
  Result<BlockHeader> got = DecodeBlockHeader(buf);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsCorruption());
}

TEST(FormatTest, SuperblockIsNotABlockHeaderNorViceVersa) {
  uint8_t sb[kSuperblockEncodedSize];
  EncodeSuperblock(GoodSuperblock(), sb);
  EXPECT_TRUE(DecodeBlockHeader(sb).status().IsCorruption());
  uint8_t bh[kBlockHeaderSize];
  EncodeBlockHeader(GoodBlockHeader(), bh);
  EXPECT_TRUE(DecodeSuperblock(bh).status().IsCorruption());
}

// ---- Key digest ----

TEST(FormatTest, DigestKeyIsDeterministicAndSeeded) {
  Digest a = DigestKey("user:42", 1);
  EXPECT_EQ(a, DigestKey("user:42", 1));
  EXPECT_FALSE(a == DigestKey("user:42", 2));
  EXPECT_FALSE(a == DigestKey("user:43", 1));
  EXPECT_FALSE(a == DigestKey("user:4", 1));
  EXPECT_NE(a.lo, a.hi);
  // The empty key and long keys are fine.
  EXPECT_EQ(DigestKey("", 7), DigestKey("", 7));
  EXPECT_FALSE(DigestKey("", 7) == DigestKey("", 8));
  std::string big(65535, 'x');
  EXPECT_EQ(DigestKey(big, 9), DigestKey(big, 9));
  // Only the bytes count, not where they live.
  std::string copy = "user:42";
  EXPECT_EQ(DigestKey(std::string_view(copy), 1), a);
}

TEST(FormatTest, DigestKeySpreadsAcrossSeeds) {
  // Over many seeds no two digests of the same key collide.
  std::vector<Digest> seen;
  for (uint64_t seed = 0; seed < 1000; ++seed) seen.push_back(DigestKey("same key", seed));
  for (size_t i = 0; i < seen.size(); ++i) {
    for (size_t j = i + 1; j < seen.size(); ++j) ASSERT_FALSE(seen[i] == seen[j]) << i << " " << j;
  }
}

}  // namespace
}  // namespace segstore::storage
