// The index checkpoint: a file holding what recovery would otherwise rebuild
// by reading every write block in use (the index, the references of linked
// entries, the block table and the sequence), written by a clean close and
// loaded by the next start once the device's block headers show that
// nothing was written since. Layout, and why the header check suffices:
// src/storage/FORMAT.md, "The index checkpoint".
//
// The file is streamed both ways, one chunk (about 64 KiB) at a time: an
// index of 100 M records is 2 GB and is never held twice.
//
// Thread-safety: none needed. The store writes it at close once nothing else
// runs, and loads it in Start before anything else runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "segstore/storage.h"
#include "storage/recovery.h"

namespace segstore::storage {

class StoreImpl;

// ---- The file. Every integer little-endian (common/coding.h).
// Its own version, apart from the data file format version: the device's
// bytes do not change with it. A build loads only this version; any other
// is refused (the device is scanned instead), so a change here never needs
// a conversion. The digest, partition and tag rules a version-1 checkpoint
// was derived by are part of version 1 (FORMAT.md, "Versions").
inline constexpr uint16_t kCheckpointVersion = 1;
inline constexpr uint64_t kCheckpointMagic = 0x5845444E49474553ULL;  // "SEGINDEX"
// Header, the first 64 bytes:
//  0  u32 checksum      XXH3-64 (low 32 bits) of bytes [4, 64), seed 0
//  4  u64 magic         kCheckpointMagic
// 12  u16 version       kCheckpointVersion
// 14  u16 data_version  the superblock's data file format version
// 16  u64 device_id     the superblock's
// 24  u64 hash_seed     the superblock's
// 32  u64 device_size   the superblock's
// 40  u32 block_size    the superblock's
// 44  u32 partitions    Index::kPartitions (4,096)
// 48  u64 next_seq      the store's sequence: the next value to hand out
// 56  u32 blocks        write blocks listed (every one whose header may be
//                       on the device)
// 60  u32 reserved      0
inline constexpr uint32_t kCheckpointHeaderSize = 64;
// Then chunks, each a 16-byte frame and its payload:
//  0  u32 checksum      XXH3-64 (low 32 bits) of bytes [4, 16 + length),
//                       seeded with the chunk's ordinal (0 for the first):
//                       a chunk read out of place never validates
//  4  u8  kind          CheckpointChunk
//  5  u8  reserved      0
//  6  u16 partition     kEntries: the index partition; else 0
//  8  u32 length        payload bytes (at most kMaxCheckpointChunk)
// 12  u32 count         items in the payload
// 16  payload
// kBlocks: `count` blocks in ascending block order, 20 bytes each: u32 block
// index, u64 seq, u64 salt. kEntries: `count` index entries of one
// partition, each its 20 bytes as five u32 words (IndexEntry::ToWords),
// followed when linked by its reference: u16 length (1..65535), bytes.
// Partitions ascend; one may span consecutive chunks; empty ones have none.
// kEnd, last, followed by nothing: u64 entries, u64 references (totals).
enum class CheckpointChunk : uint8_t { kBlocks = 1, kEntries = 2, kEnd = 3 };
inline constexpr uint32_t kCheckpointChunkHeaderSize = 16;
inline constexpr uint32_t kMaxCheckpointChunk = 1u << 20;

// What a checkpoint written holds.
struct CheckpointSummary {
  uint32_t blocks = 0;
  uint64_t entries = 0;
  uint64_t references = 0;
  uint64_t bytes = 0;  // of the file
};

// Writes the checkpoint of `store` to `path`: to `<path>.tmp`, fsync,
// rename over `path`, fsync of the directory, so that a crash leaves the
// old file or none, never a part of one. The caller makes sure nothing else
// runs and every block listed is wholly on the device
// (StoreImpl::CheckpointIndex). IOError naming the file on a failure, after
// which `<path>.tmp` is gone and `path` is as it was.
Status WriteIndexCheckpoint(StoreImpl* store, const std::string& path, CheckpointSummary* summary);

// Loads the checkpoint at `path` into `store`'s index and block table (both
// empty, the superblock read) when it is of this device and describes
// exactly the blocks `on_device` lists (FindBlocksInUse); then fills
// stats' live_records, tombstones and max_seq (the checkpoint's next_seq
// less one). The message of a failure says why, for the log: NotFound (no
// file), Corruption (damaged or truncated), Unsupported (another checkpoint
// version), Conflict (another device, or the device changed since). A
// failure may leave part of the file loaded: the caller empties the index
// and block table before it scans.
Status LoadIndexCheckpoint(StoreImpl* store, const std::string& path,
                           const std::vector<BlockInUse>& on_device, RecoveryStats* stats);

}  // namespace segstore::storage
