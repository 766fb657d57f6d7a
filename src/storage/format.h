// The on-device format of the storage engine: superblock, write block header,
// record, pad marker. Prose, diagrams and the reasoning: src/storage/FORMAT.md.
// Every integer is little-endian (common/coding.h). Pure functions, no I/O;
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "segstore/result.h"
#include "storage/io_queue.h"

namespace segstore::storage {

// ---- The data file format version: the one number that versions everything
// on the device, the record bodies the layers above write included (their
// encodings, and how a key's digest picks its partition, are part of it).
// The superblock carries it; write block headers and records carry the
// version they were written in (never newer than the superblock's; older in a
// file upgraded from an older version). Rules (what a release does with an
// older or a newer version, the fixture every version gets): FORMAT.md,
// "Versions". Version 2: the profile codec may write its version 2 (a log
// position in the body, src/profile/codec.h); the layouts below are the
// same in both. Version 3: records of kind kPutRef (a put naming another
// key, its reference). Version 4: the profile codec's version 4 (a
// profile's fields) and the field name table's records (src/profile).
inline constexpr uint16_t kFormatVersion = 4;        // what this build writes
inline constexpr uint16_t kOldestFormatVersion = 1;  // the oldest it reads
static_assert(kOldestFormatVersion >= 1 && kOldestFormatVersion <= kFormatVersion);

// ---- Superblock: the first kSectorSize bytes of write block 0 (which holds
// nothing else). Written when the device is formatted, and rewritten only to
// upgrade its version (UpgradeSuperblock). Its first 16 bytes (checksum over
// [4, 64), magic, version) mean the same in every format version, so any
// release can tell another version from damage.
inline constexpr uint64_t kSuperMagic = 0x45524f5453474553ULL;  // "SEGSTORE"
struct Superblock {
  //  0  u32 checksum     XXH3-64 (low 32 bits) of bytes [4, 64), seed 0
  //  4  u64 magic        kSuperMagic
  // 12  u16 version      the data file format version (kFormatVersion when written)
  // 14  u16 reserved     0
  // 16  u64 device_id    random at format: ties every write block to this format
  // 24  u64 hash_seed    random at format: seeds the key digest
  // 32  u64 device_size  bytes in use (a multiple of block_size)
  // 40  u32 block_size   write block size in bytes
  // 44  u32 reserved     0
  // 48  u64 created_at   Unix seconds
  // 56  u64 reserved     0
  uint16_t version = kFormatVersion;  // decoded; the encoder writes kFormatVersion
  uint64_t device_id = 0;
  uint64_t hash_seed = 0;
  uint64_t device_size = 0;
  uint32_t block_size = 0;
  uint64_t created_at = 0;
};
inline constexpr uint32_t kSuperblockEncodedSize = 64;
// Writes `sb` in version kFormatVersion (sb.version is not read).
void EncodeSuperblock(const Superblock& sb, uint8_t* dst /* kSuperblockEncodedSize */);
// NotFound when the bytes are all zero (a never-formatted device).
// Unsupported for a valid superblock of a format version this build does not
// read (newer than kFormatVersion, or older than kOldestFormatVersion); the
// message names both versions: "data file format version 3 is newer than this
// build reads (1 to 2): ...". Corruption when the bytes are anything else that is
// not a valid superblock, version 0 included (no release writes it). On
// success, `version` is the file's, from kOldestFormatVersion to kFormatVersion.
Result<Superblock> DecodeSuperblock(const uint8_t* src /* kSuperblockEncodedSize */);
// Rewrites the version of the valid superblock at `sb` (one DecodeSuperblock
// accepted) to kFormatVersion and recomputes its checksum; every other byte
// stays as it was. Only bytes [0, 4) and [12, 14) change: both inside the
// first 512 bytes of the device, so one write of the sector holding them is
// atomic on any device (FORMAT.md, "Versions": the upgrade).
void UpgradeSuperblock(uint8_t* sb /* kSuperblockEncodedSize */);

// ---- Write block header: the first bytes of every write block but block 0.
// Written by the first flush of the block; never rewritten while the block is
// in use; overwritten with zeros ("erased") when the block is freed.
inline constexpr uint32_t kBlockMagic = 0x42574753;  // "SGWB"
struct BlockHeader {
  //  0  u32 checksum     XXH3-64 (low 32 bits) of bytes [4, 64), seed 0
  //  4  u32 magic        kBlockMagic
  //  8  u16 version      the format version it was written in: kFormatVersion when
  //                      written; kOldestFormatVersion..kFormatVersion when read
  // 10  u16 reserved     0
  // 12  u32 block_size   must equal the superblock's
  // 16  u64 seq          this incarnation's sequence (see FORMAT.md: one counter
  //                      numbers block incarnations and record versions)
  // 24  u64 device_id    must equal the superblock's
  // 32  u32 block_index  where the block sits: guards against misdirected writes
  // 36  u64 nonce        random per incarnation: with seq, makes the salt
  // 44  ... 20 reserved bytes, 0
  uint16_t version = kFormatVersion;  // decoded; the encoder writes kFormatVersion
  uint64_t seq = 0;
  uint64_t device_id = 0;
  uint32_t block_index = 0;
  uint32_t block_size = 0;
  uint64_t nonce = 0;
  // What this incarnation's records and pad markers are checksummed with.
  // Unique to the incarnation even if a sequence value is ever handed out
  // twice (a restart resumes after the highest sequence still on the device).
  uint64_t salt() const { return seq ^ nonce; }
};
inline constexpr uint32_t kBlockHeaderSize = 64;
// Writes `h` in version kFormatVersion (h.version is not read).
void EncodeBlockHeader(const BlockHeader& h, uint8_t* dst /* kBlockHeaderSize */);
// NotFound for an erased or never-written block (all zeros), Corruption for a
// header that fails validation or carries a format version this build does
// not read (outside kOldestFormatVersion..kFormatVersion). One this build
// reads but newer than the superblock's is judged by recovery (recovery.cc),
// which knows whether the block is of this device.
Result<BlockHeader> DecodeBlockHeader(const uint8_t* src /* kBlockHeaderSize */);

// ---- Record: one version of one key, or a tombstone. Starts at a 16-byte
// aligned offset inside its write block; padded with zeros to 16 bytes.
// kPutRef (format version 3 on): a put that names another key, its
// reference (a linked profile's master); its stored body starts with
// `u16 ref_len (1..65535), ref bytes`, then the caller's body. The index
// marks such records and keeps their references in DRAM (index.h), so a get
// can read the referenced key's record in the same round trip.
enum class RecordKind : uint8_t { kPut = 1, kTombstone = 2, kPutRef = 3 };
constexpr bool IsPut(RecordKind k) { return k == RecordKind::kPut || k == RecordKind::kPutRef; }
struct RecordHeader {
  //  0  u32 checksum     XXH3-64 (low 32 bits) of bytes [4, 36 + key_len + body_len),
  //                      seeded with the salt of the write block holding it, so a
  //                      stale record of an earlier incarnation never validates
  //  4  u8  kind         RecordKind (kPutRef only in format version 3 on)
  //  5  u8  version      the format version it was written in: kFormatVersion when
  //                      written; kOldestFormatVersion..kFormatVersion when read
  //                      (format_version below)
  //  6  u16 key_len      1..65535
  //  8  u32 body_len     0 for a tombstone; for kPutRef the reference's prefix
  //                      included (StoredBodySize)
  // 12  u32 generation   1 for a new key; +1 per write of the same key
  // 16  u64 version      the global sequence when written; newest wins
  // 24  u32 last_update  Unix seconds
  // 28  u32 sweep_at     Unix seconds; 0 = none (caller's hint: worth rewriting)
  // 32  u32 void_at      Unix seconds; 0 = never (caller's: nothing alive after)
  // 36  key bytes, then body bytes
  RecordKind kind = RecordKind::kPut;
  uint8_t format_version = kFormatVersion;  // decoded; the encoder writes kFormatVersion
  uint16_t key_len = 0;
  uint32_t body_len = 0;
  uint32_t generation = 0;
  uint64_t version = 0;
  UnixSeconds last_update = 0;
  UnixSeconds sweep_at = 0;
  UnixSeconds void_at = 0;
};
inline constexpr uint32_t kRecordHeaderSize = 36;
inline constexpr uint32_t kRecordAlign = 16;

// Bytes a record of this key and body occupies in its block, padding included.
constexpr uint32_t RecordFootprint(uint32_t key_len, uint32_t body_len) {
  return (kRecordHeaderSize + key_len + body_len + kRecordAlign - 1) & ~(kRecordAlign - 1);
}

// The body_len of a record whose caller's body is `body` bytes: with a
// reference (kPutRef), its 2-byte length and its bytes come first.
constexpr uint32_t StoredBodySize(size_t reference, size_t body) {
  return static_cast<uint32_t>(reference == 0 ? body : 2 + reference + body);
}
inline constexpr size_t kMaxReferenceSize = 65535;

// Writes header, key, reference (kPutRef only: non-empty, at most
// kMaxReferenceSize bytes) and body at `dst` (RecordFootprint bytes, padding
// zeroed) for a block of salt `block_salt`. `h.key_len` and `h.body_len`
// (StoredBodySize) must match. The record says kFormatVersion
// (h.format_version is not read).
void EncodeRecord(const RecordHeader& h, std::string_view key, std::string_view reference,
                  std::string_view body, uint64_t block_salt, uint8_t* dst);
inline void EncodeRecord(const RecordHeader& h, std::string_view key, std::string_view body,
                         uint64_t block_salt, uint8_t* dst) {
  EncodeRecord(h, key, std::string_view(), body, block_salt, dst);
}

struct RecordView {
  RecordHeader header;
  std::string_view key;
  std::string_view reference;  // kPutRef only; empty otherwise
  std::string_view body;       // the caller's body (after the reference)
  uint32_t footprint = 0;      // bytes it occupies, padding included
};
// Parses the record at `src`, with `avail` bytes readable there, in a block of
// salt `block_salt`. Never reads past `avail`. Corruption when the bytes are
// not a valid record of that block (torn, stale, damaged), or say a format
// version outside kOldestFormatVersion..`newest`. `newest` is the device's
// version, the superblock's: kFormatVersion once the store is open (Open
// upgrades the superblock before anything can be written); recovery, which
// runs before that, passes the superblock's as it found it.
Result<RecordView> DecodeRecord(const uint8_t* src, size_t avail, uint64_t block_salt,
                                uint16_t newest = kFormatVersion);

// ---- Pad marker: written at the end of a partial flush that does not end on
// a sector boundary; the scan resumes at the next sector. 8 bytes.
inline constexpr uint32_t kPadMagic = 0x44415053;  // "SPAD"
inline constexpr uint32_t kPadMarkerSize = 8;
//  0  u32 magic        kPadMagic
//  4  u32 salt_low     low 32 bits of the block's salt
void EncodePadMarker(uint64_t block_salt, uint8_t* dst);
bool IsPadMarker(const uint8_t* src, size_t avail, uint64_t block_salt);

// ---- Walking a write block: the records a block's flushes wrote, in order.
// Skips pad markers. Where bytes fail validation it looks for the next valid
// record at every 16-byte step: stale bytes of an earlier incarnation and
// garbage never validate (checksums are seeded with this block's salt), so a
// damaged record costs only itself. A stretch of invalid bytes followed by a
// valid record is counted as damaged; the invalid tail is simply the end.
// Records of a format version newer than `newest` (the superblock's; see
// DecodeRecord) do not validate.
class BlockScanner {
 public:
  BlockScanner(const uint8_t* block, uint32_t block_size, uint64_t block_salt,
               uint16_t newest = kFormatVersion)
      : p_(block), size_(block_size), salt_(block_salt), newest_(newest), off_(kBlockHeaderSize) {}
  // The next valid record and its offset in the block; false at the end.
  bool Next(RecordView* record, uint32_t* offset);
  // Invalid stretches that were followed by a valid record.
  uint32_t damaged() const { return damaged_; }

 private:
  const uint8_t* p_;
  uint32_t size_;
  uint64_t salt_;
  uint16_t newest_;
  uint32_t off_;
  uint32_t damaged_ = 0;
};

// ---- Block summary: the last sectors of a sealed write block list the
// records the block holds (FORMAT.md, "Block summaries"), so that a crash
// recovery reads them instead of the whole block. Written by the block's last
// flush, only once every earlier flush of the block completed; a block
// without a valid one (open at the crash, a record too large to leave room,
// damage) is read whole as before. The entries: what recovery derives from
// each record (its key's digest and partition, as of summary version 1), so
// nothing else of the block need be read.
inline constexpr uint32_t kSummaryMagic = 0x4D534753;  // "SGSM"
// Its own version, apart from the data file format's: a release that does
// not read it reads the block whole, as a release before summaries does
// (summary bytes never validate as records). Version 1 means the digest
// rule of DigestKey and the routing partition of include/segstore/routing.h.
inline constexpr uint16_t kSummaryVersion = 1;
// The trailer: the last 64 bytes of the block.
//  0  u32 checksum      XXH3-64 (low 32 bits) of bytes [4, 64), seeded with the block's salt
//  4  u32 magic         kSummaryMagic
//  8  u16 version       kSummaryVersion
// 10  u16 reserved      0
// 12  u32 count         entries
// 16  u32 entry_bytes   bytes of the entries
// 20  u32 records_end   end of the block's last record (<= where the entries start)
// 24  u64 seq           the block header's seq
// 32  u64 entries_sum   XXH3-64 of the entries, seeded with the block's salt
// 40  ... 24 reserved bytes, 0
// The entries start SummaryRegionSize(entry_bytes) bytes before the block's
// end (a sector boundary), in the order of the records' offsets:
//  0  u64 digest_lo, u64 digest_hi   DigestKey(key, the superblock's hash seed)
// 16  u64 version       the record's
// 24  u32 offset        in the block (a multiple of kRecordAlign, >= kBlockHeaderSize)
// 28  u32 footprint     RecordFootprint of the record
// 32  u32 sweep_at, 36 u32 void_at   the record's
// 40  u8  kind          RecordKind
// 41  u8  reserved      0
// 42  u16 partition     the key's routing partition
// 44  kPutRef only: u16 reference length (1..65535), reference bytes
inline constexpr uint32_t kSummaryTrailerSize = 64;
inline constexpr uint32_t kSummaryEntrySize = 44;
constexpr uint32_t SummaryEntryBytes(size_t reference) {
  return kSummaryEntrySize + (reference == 0 ? 0 : 2 + static_cast<uint32_t>(reference));
}
// Bytes at the end of the block the summary takes: whole sectors.
constexpr uint32_t SummaryRegionSize(uint64_t entry_bytes) {
  return static_cast<uint32_t>((entry_bytes + kSummaryTrailerSize + kSectorSize - 1) &
                               ~uint64_t{kSectorSize - 1});
}
struct SummaryEntry {
  uint64_t digest_lo = 0;
  uint64_t digest_hi = 0;
  uint64_t version = 0;
  uint32_t offset = 0;
  uint32_t footprint = 0;
  UnixSeconds sweep_at = 0;
  UnixSeconds void_at = 0;
  RecordKind kind = RecordKind::kPut;
  uint16_t partition = 0;
  std::string_view reference;  // kPutRef only
};
void AppendSummaryEntry(const SummaryEntry& e, std::string* out);
struct SummaryTrailer {
  uint32_t count = 0;
  uint32_t entry_bytes = 0;
  uint32_t records_end = 0;
  uint64_t seq = 0;
  uint64_t entries_sum = 0;
};
uint64_t SummaryEntriesChecksum(const uint8_t* entries, size_t n, uint64_t block_salt);
void EncodeSummaryTrailer(const SummaryTrailer& t, uint64_t block_salt,
                          uint8_t* dst /* kSummaryTrailerSize */);
// The trailer at `src` (the block's last 64 bytes) of a block of this salt and
// seq, whose size is `block_size`. NotFound when there is none (no summary
// was written: the bytes do not validate under this salt); Corruption when
// it validates but says something impossible for the block (another seq, a
// version this build does not read, entries that cannot fit).
Result<SummaryTrailer> DecodeSummaryTrailer(const uint8_t* src, uint64_t block_salt,
                                            uint64_t block_seq, uint32_t block_size);
// Reads the entries `t` describes, at `entries` (t.entry_bytes bytes), after
// checking their checksum: calls f(const SummaryEntry&) for each, in order.
// Corruption (and no further call) at the first entry that cannot be a
// record of the block: out of order, overlapping, past records_end, an
// unknown kind, a partition >= 4096, a bad reference length, or a count
// that does not match. The caller must be ready to discard what f saw.
template <typename F>
Status ReadSummaryEntries(const SummaryTrailer& t, const uint8_t* entries, uint64_t block_salt,
                          F&& f);

// ---- Key digest: 128 bits of XXH3, seeded per device. Its low 32 bits are
// the index tag (the partition is the key's routing partition); see index.h.
struct Digest {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const Digest&) const = default;
};
Digest DigestKey(std::string_view key, uint64_t seed);

// ---- ReadSummaryEntries, defined here for its callback.
// One entry decoded from `p` (`avail` bytes), or an error saying what is wrong.
Result<SummaryEntry> DecodeSummaryEntry(const uint8_t* p, size_t avail);

template <typename F>
Status ReadSummaryEntries(const SummaryTrailer& t, const uint8_t* entries, uint64_t block_salt,
                          F&& f) {
  if (SummaryEntriesChecksum(entries, t.entry_bytes, block_salt) != t.entries_sum) {
    return Status::Corruption("block summary: entries checksum mismatch");
  }
  size_t at = 0;
  uint32_t end_of_last = kBlockHeaderSize;
  for (uint32_t i = 0; i < t.count; ++i) {
    Result<SummaryEntry> e = DecodeSummaryEntry(entries + at, t.entry_bytes - at);
    if (!e.ok()) return e.status();
    if (e->offset < end_of_last || uint64_t{e->offset} + e->footprint > t.records_end) {
      return Status::Corruption("block summary: an entry overlaps another or the summary");
    }
    end_of_last = e->offset + e->footprint;
    at += SummaryEntryBytes(e->reference.size());
    f(*e);
  }
  if (at != t.entry_bytes) return Status::Corruption("block summary: entries do not fill it");
  return Status::OK();
}

}  // namespace segstore::storage
