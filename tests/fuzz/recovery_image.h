// The device image fuzz_recovery corrupts, and the edits it applies; shared
// with fuzz_recovery_seeds (recovery_seeds.cc), which writes seed edits aimed
// at its fields.
//
// The image is built once per process: a small store (12 write blocks of 64
// KiB on a FaultDevice) written through the real engine with puts, updates,
// deletes and records past their void_at, records of 40 bytes to 6 KiB (some
// straddling sectors, so there are pad markers too), several flushes. The
// engine picks its device id, hash seed and block nonces at random; they are
// then replaced by fixed values (every checksum and pad marker rewritten to
// match), so an input means the same thing in every process and a finding
// reproduces.
//
// An input is a list of 5-byte edits: a flags byte (bit 0: XOR the value in,
// else store it; bit 1: reseal), a 24-bit little-endian offset (modulo the
// image size) and the value. Plain edits almost always just break a checksum,
// which recovery must survive; a reseal then recomputes the checksum of the
// structure holding the byte (superblock, write block header, or record: the
// image's record there, else one starting at the 16-byte boundary below), so
// hostile but well-checksummed headers and records reach the code behind the
// checksums too.
//
// Not thread-safe; one fuzzing thread.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/clock.h"
#include "common/coding.h"
#include "fuzz/fuzz_util.h"
#include "segstore/storage.h"
#include "storage/fault_device.h"
#include "storage/format.h"

namespace segstore::fuzz {

inline constexpr uint32_t kFuzzBlockSize = 64u << 10;
inline constexpr uint32_t kFuzzBlocks = 12;
inline constexpr uint64_t kFuzzDeviceSize = uint64_t{kFuzzBlocks} * kFuzzBlockSize;
inline constexpr UnixSeconds kFuzzNow = 1'700'000'000;
inline constexpr int kFuzzKeys = 40;
inline constexpr size_t kEditSize = 5;
inline constexpr uint8_t kEditXor = 1;
inline constexpr uint8_t kEditReseal = 2;

inline std::string FuzzKey(int i) { return "user-" + std::to_string(i); }

// The store's clock: fixed, so void_at decides the same way in every run.
inline Clock* FuzzClock() {
  static ManualClock clock(kFuzzNow);
  return &clock;
}

inline storage::StoreOptions FuzzStoreOptions() {
  storage::StoreOptions o;
  o.path = "fuzz";
  o.write_block_size = kFuzzBlockSize;
  o.background_defrag = false;
  o.clock = FuzzClock();
  o.queue_depth = 16;
  return o;
}

// The checksum of FORMAT.md: XXH3-64 of the bytes, low 32 bits.
inline uint32_t FormatChecksum(const uint8_t* p, size_t n, uint64_t seed) {
  return static_cast<uint32_t>(XXH3_64bits_withSeed(p, n, seed));
}

struct RecoveryImage {
  struct Span {
    uint64_t start;  // in the image
    uint32_t size;   // footprint
  };
  std::vector<uint8_t> bytes;     // the whole device
  std::vector<Span> records;      // every valid record, by start
  std::vector<uint64_t> pads;     // every pad marker
  std::vector<uint64_t> headers;  // every block with a valid header (its start)
  std::vector<std::string> keys;  // every key written, deleted ones too
  // Every body each key was ever given, and what it reads as now (absent:
  // deleted or past its void_at).
  std::map<std::string, std::set<std::string>> bodies;
  std::map<std::string, std::string> latest;
};

// Replaces the whole image of `device` with `image` (kFuzzDeviceSize bytes, aligned).
inline void Overwrite(storage::FaultDevice* device, const AlignedBuffer& image) {
  auto queue = device->NewQueue(8);
  FUZZ_CHECK(queue.ok());
  storage::AwaitedIo io;
  (*queue)->Write(0, image.data(), static_cast<uint32_t>(kFuzzDeviceSize), &io);
  FUZZ_CHECK((*queue)->Await(io) == static_cast<int32_t>(kFuzzDeviceSize));
}

// A fresh in-memory device holding `image`.
inline std::shared_ptr<storage::FaultDevice> DeviceHolding(const AlignedBuffer& image) {
  auto device = storage::FaultDevice::Create(kFuzzDeviceSize, /*seed=*/2);
  Overwrite(device.get(), image);
  return device;
}

namespace internal {

inline std::string FuzzBody(int i, int version, size_t size) {
  std::string b = "v" + std::to_string(version) + ":" + std::to_string(i) + ":";
  std::mt19937 rng(static_cast<uint32_t>(i * 7919 + version));
  while (b.size() < size) b.push_back(static_cast<char>('a' + rng() % 26));
  return b;
}

// Writes the store's content through the engine; returns the device.
inline std::shared_ptr<storage::FaultDevice> WriteStore(RecoveryImage* img) {
  auto device = storage::FaultDevice::Create(kFuzzDeviceSize, /*seed=*/1);
  auto store = storage::Store::Open(FuzzStoreOptions(), device);
  FUZZ_CHECK(store.ok());
  auto worker = (*store)->NewWorker();
  FUZZ_CHECK(worker.ok());
  storage::Worker& w = **worker;
  auto put = [&](int i, int version, size_t size, uint32_t sweep_at, uint32_t void_at) {
    const std::string key = FuzzKey(i), body = FuzzBody(i, version, size);
    FUZZ_CHECK(w.PutSync(key, body, sweep_at, void_at).ok());
    img->bodies[key].insert(body);
    if (void_at == 0 || void_at > kFuzzNow) {
      img->latest[key] = body;
    } else {
      img->latest.erase(key);
    }
  };
  for (int i = 0; i < kFuzzKeys; ++i) {
    img->keys.push_back(FuzzKey(i));
    const size_t size = i % 10 == 9 ? 6000 : 40 + (i * 397) % 3000;
    const uint32_t void_at = i % 7 == 3 ? kFuzzNow - 60 : i % 7 == 4 ? kFuzzNow + 86400 : 0;
    put(i, 1, size, void_at != 0 ? void_at - 30 : 0, void_at);
  }
  FUZZ_CHECK(w.FlushSync().ok());
  for (int i = 0; i < kFuzzKeys; i += 3) put(i, 2, 100 + (i * 131) % 2000, 0, 0);
  FUZZ_CHECK(w.FlushSync().ok());
  for (int i = 1; i < kFuzzKeys; i += 5) {
    FUZZ_CHECK(w.DeleteSync(FuzzKey(i)).ok());
    img->latest.erase(FuzzKey(i));
  }
  for (int i = 2; i < kFuzzKeys; i += 8) put(i, 3, 500, 0, 0);
  FUZZ_CHECK(w.FlushSync().ok());
  worker->reset();
  store->reset();
  return device;
}

// The records and pad markers of the block at `start` whose salt is `salt`,
// found as BlockScanner finds them.
inline void Walk(RecoveryImage* img, uint64_t start, uint64_t salt) {
  const uint8_t* p = img->bytes.data() + start;
  uint32_t off = storage::kBlockHeaderSize;
  while (off + storage::kPadMarkerSize <= kFuzzBlockSize) {
    if (storage::IsPadMarker(p + off, kFuzzBlockSize - off, salt)) {
      img->pads.push_back(start + off);
      off = static_cast<uint32_t>(AlignUp(off + 1, storage::kSectorSize));
      continue;
    }
    Result<storage::RecordView> v = storage::DecodeRecord(p + off, kFuzzBlockSize - off, salt);
    if (v.ok()) {
      img->records.push_back(RecoveryImage::Span{start + off, v->footprint});
      off += v->footprint;
    } else {
      off += storage::kRecordAlign;
    }
  }
}

// Replaces the random identities with fixed ones and rewrites every checksum
// and pad marker to match.
inline void Normalise(RecoveryImage* img) {
  uint8_t* d = img->bytes.data();
  Result<storage::Superblock> sb = storage::DecodeSuperblock(d);
  FUZZ_CHECK(sb.ok());
  const uint64_t old_device_id = sb->device_id;
  sb->device_id = 0x5345475354524931ULL;
  sb->hash_seed = 0x0123456789abcdefULL;
  sb->created_at = kFuzzNow;
  storage::EncodeSuperblock(*sb, d);
  for (uint32_t b = 1; b < kFuzzBlocks; ++b) {
    const uint64_t start = uint64_t{b} * kFuzzBlockSize;
    Result<storage::BlockHeader> h = storage::DecodeBlockHeader(d + start);
    if (!h.ok()) continue;
    FUZZ_CHECK(h->device_id == old_device_id);
    const uint64_t old_salt = h->salt();
    const size_t first_record = img->records.size(), first_pad = img->pads.size();
    Walk(img, start, old_salt);
    h->device_id = sb->device_id;
    h->nonce = 0x9e3779b97f4a7c15ULL * b;
    storage::EncodeBlockHeader(*h, d + start);
    img->headers.push_back(start);
    const uint64_t salt = h->salt();
    for (size_t i = first_pad; i < img->pads.size(); ++i) {
      storage::EncodePadMarker(salt, d + img->pads[i]);
    }
    for (size_t i = first_record; i < img->records.size(); ++i) {
      uint8_t* r = d + img->records[i].start;
      const uint32_t used =
          storage::kRecordHeaderSize + DecodeFixed16(r + 6) + DecodeFixed32(r + 8);
      EncodeFixed32(r, FormatChecksum(r + 4, used - 4, salt));
    }
  }
}

// The normalised image must still be the store that was written.
inline void Verify(const RecoveryImage& img) {
  AlignedBuffer copy(kFuzzDeviceSize);
  std::memcpy(copy.data(), img.bytes.data(), kFuzzDeviceSize);
  auto store = storage::Store::Open(FuzzStoreOptions(), DeviceHolding(copy));
  FUZZ_CHECK(store.ok());
  FUZZ_CHECK((*store)->recovery().damaged_regions == 0);
  auto worker = (*store)->NewWorker();
  FUZZ_CHECK(worker.ok());
  for (const std::string& key : img.keys) {
    Result<storage::Record> r = (*worker)->GetSync(key);
    auto it = img.latest.find(key);
    if (it == img.latest.end()) {
      FUZZ_CHECK(r.status().IsNotFound());
    } else {
      FUZZ_CHECK(r.ok() && r->body() == it->second);
    }
  }
}

}  // namespace internal

// Built (and checked) on first use; every later call returns the same image.
inline const RecoveryImage& TheRecoveryImage() {
  static const RecoveryImage* image = [] {
    auto* img = new RecoveryImage;
    std::shared_ptr<storage::FaultDevice> device = internal::WriteStore(img);
    img->bytes = device->ReadImage(0, kFuzzDeviceSize);
    internal::Normalise(img);
    FUZZ_CHECK(img->headers.size() >= 2 && !img->records.empty() && !img->pads.empty());
    internal::Verify(*img);
    return img;
  }();
  return *image;
}

// The structure a reseal of the byte at `offset` re-checksums, identified by
// its start: 0 for the superblock, a block's start for its header, else a
// record's start (the image's record holding the byte, or the 16-byte
// boundary below it). UINT64_MAX: none (the rest of block 0).
inline uint64_t ResealTarget(const RecoveryImage& img, uint64_t offset) {
  const uint64_t in_block = offset % kFuzzBlockSize;
  if (offset < kFuzzBlockSize) return in_block < storage::kSuperblockEncodedSize ? 0 : UINT64_MAX;
  if (in_block < storage::kBlockHeaderSize) return offset - in_block;
  auto it = std::upper_bound(img.records.begin(), img.records.end(), offset,
                             [](uint64_t o, const RecoveryImage::Span& s) { return o < s.start; });
  if (it != img.records.begin()) {
    --it;
    if (offset < it->start + it->size) return it->start;
  }
  return AlignDown(offset, storage::kRecordAlign);
}

// Recomputes the checksum of the structure starting at `start` in `d` (a
// device image laid out as the fuzz image), from its bytes as they are now.
inline void Reseal(uint8_t* d, uint64_t start) {
  const uint64_t in_block = start % kFuzzBlockSize;
  if (in_block == 0) {  // the superblock or a write block header: both 64 bytes
    EncodeFixed32(d + start, FormatChecksum(d + start + 4, 60, 0));
    return;
  }
  const uint8_t* block = d + (start - in_block);
  const uint64_t salt = DecodeFixed64(block + 16) ^ DecodeFixed64(block + 36);
  const uint64_t used = uint64_t{storage::kRecordHeaderSize} + DecodeFixed16(d + start + 6) +
                        DecodeFixed32(d + start + 8);
  if (in_block + used > kFuzzBlockSize) return;  // runs past its block: cannot validate anyway
  EncodeFixed32(d + start, FormatChecksum(d + start + 4, used - 4, salt));
}

// Applies the edits of `input` to `d` (a copy of the image). Returns whether
// any edit asked for a reseal.
inline bool ApplyEdits(const RecoveryImage& img, const uint8_t* input, size_t size, uint8_t* d) {
  std::set<uint64_t> reseal;  // ordered: overlapping reseals apply by start
  for (size_t i = 0; i + kEditSize <= size; i += kEditSize) {
    const uint8_t flags = input[i];
    const uint64_t offset =
        (input[i + 1] | uint64_t{input[i + 2]} << 8 | uint64_t{input[i + 3]} << 16) %
        kFuzzDeviceSize;
    const uint8_t value = input[i + 4];
    d[offset] = (flags & kEditXor) != 0 ? static_cast<uint8_t>(d[offset] ^ value) : value;
    if ((flags & kEditReseal) != 0) {
      const uint64_t target = ResealTarget(img, offset);
      if (target != UINT64_MAX) reseal.insert(target);
    }
  }
  for (uint64_t start : reseal) Reseal(d, start);
  return !reseal.empty();
}

// One edit, encoded as ApplyEdits reads it.
inline void AppendEdit(std::string* out, uint8_t flags, uint64_t offset, uint8_t value) {
  out->push_back(static_cast<char>(flags));
  for (int i = 0; i < 3; ++i) out->push_back(static_cast<char>(offset >> (8 * i)));
  out->push_back(static_cast<char>(value));
}

}  // namespace segstore::fuzz
