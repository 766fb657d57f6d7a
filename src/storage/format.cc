#include "storage/format.h"

#include <fmt/format.h>
#include <xxhash.h>
#if defined(__x86_64__)
// The same hashes, through the library's runtime dispatch to the widest
// vector unit present (AVX2, AVX-512): 2.4x faster on a 3 KiB record here.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstring>
#include <string>

#include "common/coding.h"

namespace segstore::storage {
namespace {

uint32_t Checksum(const uint8_t* p, size_t n, uint64_t seed) {
  return static_cast<uint32_t>(XXH3_64bits_withSeed(p, n, seed));
}

bool AllZero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

// The format versions this build reads: "1", or "1 to 3".
std::string ReadableVersions() {
  if (kOldestFormatVersion == kFormatVersion) return fmt::format("{}", kFormatVersion);
  return fmt::format("{} to {}", kOldestFormatVersion, kFormatVersion);
}

// OK for a data file format version this build reads; see FORMAT.md, "Versions".
Status CheckFormatVersion(uint16_t version) {
  if (version == 0) {
    return Status::Corruption(fmt::format(
        "superblock says data file format version 0, which no release writes (this build "
        "reads {})",
        ReadableVersions()));
  }
  if (version > kFormatVersion) {
    return Status::Unsupported(fmt::format(
        "data file format version {} is newer than this build reads ({}): the file was written "
        "by a later release of segstore; run that release or a later one on it",
        version, ReadableVersions()));
  }
  if (version < kOldestFormatVersion) {
    return Status::Unsupported(fmt::format(
        "data file format version {} is older than this build reads ({}): open it first with a "
        "release that reads both, which upgrades it",
        version, ReadableVersions()));
  }
  return Status::OK();
}

}  // namespace

void EncodeSuperblock(const Superblock& sb, uint8_t* dst) {
  std::memset(dst, 0, kSuperblockEncodedSize);
  EncodeFixed64(dst + 4, kSuperMagic);
  EncodeFixed16(dst + 12, kFormatVersion);
  EncodeFixed64(dst + 16, sb.device_id);
  EncodeFixed64(dst + 24, sb.hash_seed);
  EncodeFixed64(dst + 32, sb.device_size);
  EncodeFixed32(dst + 40, sb.block_size);
  EncodeFixed64(dst + 48, sb.created_at);
  EncodeFixed32(dst, Checksum(dst + 4, kSuperblockEncodedSize - 4, 0));
}

Result<Superblock> DecodeSuperblock(const uint8_t* src) {
  if (AllZero(src, kSuperblockEncodedSize)) return Status::NotFound("device is not formatted");
  if (DecodeFixed64(src + 4) != kSuperMagic) {
    return Status::Corruption("no segstore superblock (wrong magic): not a segstore device");
  }
  if (DecodeFixed32(src) != Checksum(src + 4, kSuperblockEncodedSize - 4, 0)) {
    return Status::Corruption("superblock checksum mismatch");
  }
  // The checksum first: it covers the version in every format version, so a
  // damaged version field is Corruption, never a version this build refuses.
  SEGSTORE_RETURN_IF_ERROR(CheckFormatVersion(DecodeFixed16(src + 12)));
  Superblock sb;
  sb.version = DecodeFixed16(src + 12);
  sb.device_id = DecodeFixed64(src + 16);
  sb.hash_seed = DecodeFixed64(src + 24);
  sb.device_size = DecodeFixed64(src + 32);
  sb.block_size = DecodeFixed32(src + 40);
  sb.created_at = DecodeFixed64(src + 48);
  if (sb.block_size < 2 * kSectorSize || sb.block_size % kSectorSize != 0 ||
      sb.device_size % sb.block_size != 0 || sb.device_size / sb.block_size < 2) {
    return Status::Corruption(
        fmt::format("superblock geometry is impossible: {} bytes in blocks of {}", sb.device_size,
                    sb.block_size));
  }
  return sb;
}

void UpgradeSuperblock(uint8_t* sb) {
  EncodeFixed16(sb + 12, kFormatVersion);
  EncodeFixed32(sb, Checksum(sb + 4, kSuperblockEncodedSize - 4, 0));
}

void EncodeBlockHeader(const BlockHeader& h, uint8_t* dst) {
  std::memset(dst, 0, kBlockHeaderSize);
  EncodeFixed32(dst + 4, kBlockMagic);
  EncodeFixed16(dst + 8, kFormatVersion);
  EncodeFixed32(dst + 12, h.block_size);
  EncodeFixed64(dst + 16, h.seq);
  EncodeFixed64(dst + 24, h.device_id);
  EncodeFixed32(dst + 32, h.block_index);
  EncodeFixed64(dst + 36, h.nonce);
  EncodeFixed32(dst, Checksum(dst + 4, kBlockHeaderSize - 4, 0));
}

Result<BlockHeader> DecodeBlockHeader(const uint8_t* src) {
  if (AllZero(src, kBlockHeaderSize)) return Status::NotFound("erased write block");
  if (DecodeFixed32(src + 4) != kBlockMagic) return Status::Corruption("write block magic");
  if (DecodeFixed32(src) != Checksum(src + 4, kBlockHeaderSize - 4, 0)) {
    return Status::Corruption("write block header checksum mismatch");
  }
  const uint16_t version = DecodeFixed16(src + 8);
  if (version < kOldestFormatVersion || version > kFormatVersion) {
    return Status::Corruption(fmt::format("write block format version {} (this build reads {})",
                                          version, ReadableVersions()));
  }
  BlockHeader h;
  h.version = version;
  h.block_size = DecodeFixed32(src + 12);
  h.seq = DecodeFixed64(src + 16);
  h.device_id = DecodeFixed64(src + 24);
  h.block_index = DecodeFixed32(src + 32);
  h.nonce = DecodeFixed64(src + 36);
  return h;
}

void EncodeRecord(const RecordHeader& h, std::string_view key, std::string_view reference,
                  std::string_view body, uint64_t block_salt, uint8_t* dst) {
  dst[4] = static_cast<uint8_t>(h.kind);
  dst[5] = static_cast<uint8_t>(kFormatVersion);
  EncodeFixed16(dst + 6, h.key_len);
  EncodeFixed32(dst + 8, h.body_len);
  EncodeFixed32(dst + 12, h.generation);
  EncodeFixed64(dst + 16, h.version);
  EncodeFixed32(dst + 24, h.last_update);
  EncodeFixed32(dst + 28, h.sweep_at);
  EncodeFixed32(dst + 32, h.void_at);
  std::memcpy(dst + kRecordHeaderSize, key.data(), key.size());
  uint8_t* at = dst + kRecordHeaderSize + key.size();
  if (h.kind == RecordKind::kPutRef) {
    EncodeFixed16(at, static_cast<uint16_t>(reference.size()));
    std::memcpy(at + 2, reference.data(), reference.size());
    at += 2 + reference.size();
  }
  if (!body.empty()) std::memcpy(at, body.data(), body.size());
  uint32_t used = kRecordHeaderSize + h.key_len + h.body_len;
  uint32_t footprint = RecordFootprint(h.key_len, h.body_len);
  std::memset(dst + used, 0, footprint - used);
  EncodeFixed32(dst, Checksum(dst + 4, used - 4, block_salt));
}

Result<RecordView> DecodeRecord(const uint8_t* src, size_t avail, uint64_t block_salt,
                                uint16_t newest) {
  if (avail < kRecordHeaderSize) return Status::Corruption("record header truncated");
  RecordView v;
  RecordHeader& h = v.header;
  uint8_t kind = src[4];
  if (kind != static_cast<uint8_t>(RecordKind::kPut) &&
      kind != static_cast<uint8_t>(RecordKind::kTombstone) &&
      !(kind == static_cast<uint8_t>(RecordKind::kPutRef) && src[5] >= 3)) {
    return Status::Corruption("record kind");
  }
  if (src[5] < kOldestFormatVersion || src[5] > std::min(newest, kFormatVersion)) {
    return Status::Corruption("record format version");
  }
  h.kind = static_cast<RecordKind>(kind);
  h.format_version = src[5];
  h.key_len = DecodeFixed16(src + 6);
  h.body_len = DecodeFixed32(src + 8);
  if (h.key_len == 0) return Status::Corruption("record with an empty key");
  uint64_t used = uint64_t{kRecordHeaderSize} + h.key_len + h.body_len;
  if (used > avail) return Status::Corruption("record length runs past its block");
  if (DecodeFixed32(src) != Checksum(src + 4, used - 4, block_salt)) {
    return Status::Corruption("record checksum mismatch");
  }
  h.generation = DecodeFixed32(src + 12);
  h.version = DecodeFixed64(src + 16);
  h.last_update = DecodeFixed32(src + 24);
  h.sweep_at = DecodeFixed32(src + 28);
  h.void_at = DecodeFixed32(src + 32);
  const char* chars = reinterpret_cast<const char*>(src);
  v.key = std::string_view(chars + kRecordHeaderSize, h.key_len);
  v.body = std::string_view(chars + kRecordHeaderSize + h.key_len, h.body_len);
  if (h.kind == RecordKind::kPutRef) {
    const size_t ref = v.body.size() >= 2 ? DecodeFixed16(src + kRecordHeaderSize + h.key_len) : 0;
    if (ref == 0 || 2 + ref > v.body.size()) return Status::Corruption("record reference");
    v.reference = v.body.substr(2, ref);
    v.body.remove_prefix(2 + ref);
  }
  v.footprint = RecordFootprint(h.key_len, h.body_len);
  return v;
}

void EncodePadMarker(uint64_t block_salt, uint8_t* dst) {
  EncodeFixed32(dst, kPadMagic);
  EncodeFixed32(dst + 4, static_cast<uint32_t>(block_salt));
}

bool IsPadMarker(const uint8_t* src, size_t avail, uint64_t block_salt) {
  return avail >= kPadMarkerSize && DecodeFixed32(src) == kPadMagic &&
         DecodeFixed32(src + 4) == static_cast<uint32_t>(block_salt);
}

bool BlockScanner::Next(RecordView* record, uint32_t* offset) {
  bool skipped = false;
  while (off_ + kPadMarkerSize <= size_) {
    if (IsPadMarker(p_ + off_, size_ - off_, salt_)) {
      off_ = static_cast<uint32_t>(AlignUp(off_ + 1, kSectorSize));
      continue;
    }
    Result<RecordView> v = DecodeRecord(p_ + off_, size_ - off_, salt_, newest_);
    if (v.ok()) {
      if (skipped) ++damaged_;
      *record = *v;
      *offset = off_;
      off_ += v->footprint;
      return true;
    }
    skipped = true;
    off_ += kRecordAlign;
  }
  return false;
}

void AppendSummaryEntry(const SummaryEntry& e, std::string* out) {
  uint8_t b[kSummaryEntrySize] = {};
  EncodeFixed64(b, e.digest_lo);
  EncodeFixed64(b + 8, e.digest_hi);
  EncodeFixed64(b + 16, e.version);
  EncodeFixed32(b + 24, e.offset);
  EncodeFixed32(b + 28, e.footprint);
  EncodeFixed32(b + 32, e.sweep_at);
  EncodeFixed32(b + 36, e.void_at);
  b[40] = static_cast<uint8_t>(e.kind);
  EncodeFixed16(b + 42, e.partition);
  out->append(reinterpret_cast<const char*>(b), sizeof b);
  if (e.kind == RecordKind::kPutRef) {
    uint8_t len[2];
    EncodeFixed16(len, static_cast<uint16_t>(e.reference.size()));
    out->append(reinterpret_cast<const char*>(len), 2);
    out->append(e.reference);
  }
}

Result<SummaryEntry> DecodeSummaryEntry(const uint8_t* p, size_t avail) {
  if (avail < kSummaryEntrySize) return Status::Corruption("block summary: an entry is cut");
  SummaryEntry e;
  e.digest_lo = DecodeFixed64(p);
  e.digest_hi = DecodeFixed64(p + 8);
  e.version = DecodeFixed64(p + 16);
  e.offset = DecodeFixed32(p + 24);
  e.footprint = DecodeFixed32(p + 28);
  e.sweep_at = DecodeFixed32(p + 32);
  e.void_at = DecodeFixed32(p + 36);
  const uint8_t kind = p[40];
  e.partition = DecodeFixed16(p + 42);
  if (kind < static_cast<uint8_t>(RecordKind::kPut) ||
      kind > static_cast<uint8_t>(RecordKind::kPutRef) || p[41] != 0) {
    return Status::Corruption(fmt::format("block summary: an entry of unknown kind {}", kind));
  }
  e.kind = static_cast<RecordKind>(kind);
  if (e.partition >= 4096 || e.offset % kRecordAlign != 0 || e.footprint < kRecordHeaderSize ||
      e.footprint % kRecordAlign != 0 || e.version == 0) {
    return Status::Corruption("block summary: an entry no record can have");
  }
  if (e.kind == RecordKind::kPutRef) {
    if (avail < kSummaryEntrySize + 2) return Status::Corruption("block summary: an entry is cut");
    const uint16_t len = DecodeFixed16(p + kSummaryEntrySize);
    if (len == 0 || avail - kSummaryEntrySize - 2 < len) {
      return Status::Corruption("block summary: an impossible reference length");
    }
    e.reference =
        std::string_view(reinterpret_cast<const char*>(p + kSummaryEntrySize + 2), len);
  }
  return e;
}

uint64_t SummaryEntriesChecksum(const uint8_t* entries, size_t n, uint64_t block_salt) {
  return XXH3_64bits_withSeed(entries, n, block_salt);
}

void EncodeSummaryTrailer(const SummaryTrailer& t, uint64_t block_salt, uint8_t* dst) {
  std::memset(dst, 0, kSummaryTrailerSize);
  EncodeFixed32(dst + 4, kSummaryMagic);
  EncodeFixed16(dst + 8, kSummaryVersion);
  EncodeFixed32(dst + 12, t.count);
  EncodeFixed32(dst + 16, t.entry_bytes);
  EncodeFixed32(dst + 20, t.records_end);
  EncodeFixed64(dst + 24, t.seq);
  EncodeFixed64(dst + 32, t.entries_sum);
  EncodeFixed32(dst, Checksum(dst + 4, kSummaryTrailerSize - 4, block_salt));
}

Result<SummaryTrailer> DecodeSummaryTrailer(const uint8_t* src, uint64_t block_salt,
                                            uint64_t block_seq, uint32_t block_size) {
  if (DecodeFixed32(src + 4) != kSummaryMagic ||
      DecodeFixed32(src) != Checksum(src + 4, kSummaryTrailerSize - 4, block_salt)) {
    return Status::NotFound("no block summary");
  }
  const uint16_t version = DecodeFixed16(src + 8);
  if (version != kSummaryVersion) {
    return Status::Corruption(fmt::format(
        "block summary version {}; this build reads version {}", version, kSummaryVersion));
  }
  SummaryTrailer t;
  t.count = DecodeFixed32(src + 12);
  t.entry_bytes = DecodeFixed32(src + 16);
  t.records_end = DecodeFixed32(src + 20);
  t.seq = DecodeFixed64(src + 24);
  t.entries_sum = DecodeFixed64(src + 32);
  if (t.seq != block_seq) {
    return Status::Corruption(
        fmt::format("block summary of seq {} in a block of seq {}", t.seq, block_seq));
  }
  if (uint64_t{t.entry_bytes} + kSummaryTrailerSize > block_size - kBlockHeaderSize ||
      t.records_end < kBlockHeaderSize ||
      t.records_end > block_size - SummaryRegionSize(t.entry_bytes) ||
      uint64_t{t.count} * kSummaryEntrySize > t.entry_bytes) {
    return Status::Corruption(fmt::format(
        "block summary of {} entries in {} bytes, records to {}: impossible in a block of {}",
        t.count, t.entry_bytes, t.records_end, block_size));
  }
  return t;
}

Digest DigestKey(std::string_view key, uint64_t seed) {
  XXH128_hash_t h = XXH3_128bits_withSeed(key.data(), key.size(), seed);
  return Digest{h.low64, h.high64};
}

}  // namespace segstore::storage
