#include "storage/recovery.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/aligned_buffer.h"
#include "storage/format.h"
#include "storage/store_impl.h"

namespace segstore::storage {
namespace {

// One version of a key that recovery found (in a block read whole, or in a
// block's summary), filed under its key's partition.
struct Version {
  uint64_t digest_lo;
  uint64_t digest_hi;
  uint64_t offset;
  uint64_t version;
  uint64_t block_seq;
  uint32_t size;
  UnixSeconds sweep_at;
  UnixSeconds void_at;
  uint32_t reference;  // kPutRef: its index in the references found; else kNone
  RecordKind kind;
  static constexpr uint32_t kNone = UINT32_MAX;
};

// The order a partition's versions are folded in: by tag (so that the index
// table fills in the order of its slots), then by key, newest first (equal
// versions are one record and its copy by defragmentation: the one in the
// newer block first).
bool FoldOrder(const Version& a, const Version& b) {
  const auto ta = static_cast<uint32_t>(a.digest_lo), tb = static_cast<uint32_t>(b.digest_lo);
  if (ta != tb) return ta < tb;
  if (a.digest_lo != b.digest_lo) return a.digest_lo < b.digest_lo;
  if (a.digest_hi != b.digest_hi) return a.digest_hi < b.digest_hi;
  if (a.version != b.version) return a.version > b.version;
  return a.block_seq > b.block_seq;
}

// A read the scan waits for: `len` bytes at `at` in `block`.
struct PendingRead {
  uint32_t block = 0;
  uint32_t len = 0;
  AlignedBuffer buf;
  AwaitedIo io;
};

struct ReadRange {
  uint32_t block = 0;
  uint32_t at = 0;  // in the block: a multiple of kSectorSize
  uint32_t len = 0;
};

// Issues the reads of `ranges`, at most `depth` at a time, and hands each
// completed one to `on_read` in order. Counts the bytes of buffers it
// allocates in stats->read_buffer_bytes, and the bytes read in
// stats->bytes_read.
template <typename F>
Status ReadRanges(StoreImpl* store, IoQueue* queue, RecoveryStats* stats,
                  const std::vector<ReadRange>& ranges, size_t depth, F&& on_read) {
  std::deque<std::unique_ptr<PendingRead>> inflight;
  // At most `depth` buffers, each used again once its block is scanned: a
  // fresh one per block, with the scan's small allocations landing between
  // them, grew the heap by about a block per block read and left it all
  // resident after recovery (650 MB of free heap after reading 2.8 GB).
  std::vector<std::unique_ptr<PendingRead>> spare;
  size_t next = 0;
  while (next < ranges.size() || !inflight.empty()) {
    while (next < ranges.size() && inflight.size() < depth) {
      const ReadRange& range = ranges[next++];
      std::unique_ptr<PendingRead> r;
      if (spare.empty()) {
        r = std::make_unique<PendingRead>();
      } else {
        r = std::move(spare.back());
        spare.pop_back();
        r->io = AwaitedIo{};
      }
      if (r->buf.size() < range.len) {
        stats->read_buffer_bytes += range.len - r->buf.size();
        r->buf = AlignedBuffer::Uninitialized(range.len);
      }
      r->block = range.block;
      r->len = range.len;
      queue->Read(store->BlockOffset(r->block) + range.at, r->buf.data(), range.len, &r->io);
      inflight.push_back(std::move(r));
    }
    queue->Submit();
    while (!inflight.front()->io.done) queue->Wait(std::chrono::milliseconds(100));
    std::unique_ptr<PendingRead> r = std::move(inflight.front());
    inflight.pop_front();
    if (r->io.result != static_cast<int32_t>(r->len)) {
      // Drain what is still in flight before the buffers go away.
      while (!inflight.empty()) {
        while (!inflight.front()->io.done) queue->Wait(std::chrono::milliseconds(100));
        inflight.pop_front();
      }
      return Status::IOError(fmt::format(
          "recovery: read of write block {} of {}: {}", r->block, store->device().name(),
          r->io.result < 0 ? std::strerror(-r->io.result) : "short read"));
    }
    stats->bytes_read += r->len;
    on_read(*r);
    spare.push_back(std::move(r));
  }
  return Status::OK();
}

// The same `len` bytes at the start of each block of `blocks`.
template <typename F>
Status ReadBlocks(StoreImpl* store, IoQueue* queue, RecoveryStats* stats,
                  const std::vector<uint32_t>& blocks, uint32_t len, size_t depth, F&& on_read) {
  std::vector<ReadRange> ranges;
  ranges.reserve(blocks.size());
  for (uint32_t b : blocks) ranges.push_back(ReadRange{b, 0, len});
  return ReadRanges(store, queue, stats, ranges, depth, std::forward<F>(on_read));
}

}  // namespace

Status FindBlocksInUse(StoreImpl* store, IoQueue* queue, RecoveryStats* stats,
                       std::vector<BlockInUse>* in_use) {
  const Superblock& sb = store->superblock();
  const uint32_t count = store->blocks().block_count();
  const uint32_t block_size = sb.block_size;
  auto read_blocks = [&](const std::vector<uint32_t>& list, uint32_t len, size_t depth, auto f) {
    return ReadBlocks(store, queue, stats, list, len, depth, f);
  };

  std::vector<uint32_t> all;
  for (uint32_t b = 1; b < count; ++b) all.push_back(b);
  Status newer_than_superblock;
  SEGSTORE_RETURN_IF_ERROR(read_blocks(all, kSectorSize, 64, [&](PendingRead& r) {
    Result<BlockHeader> h = DecodeBlockHeader(r.buf.data());
    if (!h.ok()) {
      if (!h.status().IsNotFound()) {
        spdlog::warn("recovery: write block {}: {}; treated as free", r.block,
                     h.status().ToString());
      }
      return;
    }
    if (h->device_id != sb.device_id || h->block_index != r.block || h->block_size != block_size) {
      return;  // left by an earlier format of this device, or misplaced
    }
    if (h->version > sb.version) {
      // A block of this device in a version newer than its superblock's: the
      // superblock is upgraded, durably, before anything is written in a
      // newer version (store.cc), so it was put back after (an older copy of
      // block 0?). Treating the block as free would drop acknowledged
      // records and then write over them: the file is refused instead, and
      // nothing is written (recovery runs before the store writes anything).
      if (newer_than_superblock.ok()) {
        newer_than_superblock = Status::Corruption(fmt::format(
            "write block {} of {} is in data file format version {}, newer than its "
            "superblock's ({}): the superblock was put back after the file was upgraded; "
            "refusing to open it (nothing was written to it)",
            r.block, store->device().name(), h->version, sb.version));
      }
      return;
    }
    in_use->push_back(BlockInUse{r.block, h->seq, h->salt()});
  }));
  SEGSTORE_RETURN_IF_ERROR(newer_than_superblock);
  stats->blocks_scanned = count - 1;
  stats->blocks_in_use = static_cast<uint32_t>(in_use->size());
  return Status::OK();
}

Status RebuildIndex(StoreImpl* store, IoQueue* queue, const std::vector<BlockInUse>& valid,
                    RecoveryStats* stats) {
  const Superblock& sb = store->superblock();
  BlockTable& blocks = store->blocks();
  const uint32_t block_size = sb.block_size;
  auto& progress = store->options().on_recovery_progress;
  auto read_blocks = [&](const std::vector<uint32_t>& list, uint32_t len, size_t depth, auto f) {
    return ReadBlocks(store, queue, stats, list, len, depth, f);
  };

  // Every version found, by partition; the newest of each key wins (below).
  // Vectors, sorted once a partition: a node-based map of 1.7 M keys cost
  // more CPU than reading their blocks' summaries.
  std::vector<std::vector<Version>> versions(Index::kPartitions);
  std::vector<std::string> references;  // of kPutRef versions
  auto consider = [&](uint64_t lo, uint64_t hi, uint16_t partition, uint64_t offset,
                      uint64_t version, uint64_t block_seq, uint32_t size, UnixSeconds sweep_at,
                      UnixSeconds void_at, RecordKind kind, std::string_view reference) {
    stats->max_seq = std::max(stats->max_seq, version);
    uint32_t ref = Version::kNone;
    if (kind == RecordKind::kPutRef) {
      ref = static_cast<uint32_t>(references.size());
      references.emplace_back(reference);
    }
    versions[partition].push_back(
        Version{lo, hi, offset, version, block_seq, size, sweep_at, void_at, ref, kind});
  };
  std::unordered_map<uint32_t, const BlockInUse*> header_of;
  for (const BlockInUse& v : valid) {
    header_of[v.block] = &v;
    stats->max_seq = std::max(stats->max_seq, v.seq);
  }

  // First the blocks' summaries (FORMAT.md, "Block summaries"): the last
  // sector of each block, and the rest of a summary longer than that. A
  // block with none, or with one that fails any check, is read whole below.
  std::vector<uint32_t> whole;
  if (store->options().block_summaries) {
    // A summary's entries, kept until the whole of it has checked out.
    std::vector<SummaryEntry> entries;
    auto take_summary = [&](uint32_t block, const SummaryTrailer& t, const uint8_t* bytes) {
      const BlockInUse& h = *header_of[block];
      entries.clear();
      Status s = ReadSummaryEntries(t, bytes, h.salt,
                                    [&](const SummaryEntry& e) { entries.push_back(e); });
      if (!s.ok()) {
        spdlog::warn("recovery: write block {}: {}; reading the block whole", block, s.message());
        ++stats->summaries_refused;
        whole.push_back(block);
        return;
      }
      const uint64_t base = store->BlockOffset(block);
      for (const SummaryEntry& e : entries) {
        consider(e.digest_lo, e.digest_hi, e.partition, base + e.offset, e.version, h.seq,
                 e.footprint, e.sweep_at, e.void_at, e.kind, e.reference);
      }
      stats->records_from_summaries += entries.size();
      ++stats->blocks_from_summaries;
    };
    std::vector<ReadRange> tails;
    tails.reserve(valid.size());
    for (const BlockInUse& v : valid) {
      tails.push_back(ReadRange{v.block, block_size - kSectorSize, kSectorSize});
    }
    // Summaries longer than a sector, and what their trailers said.
    std::vector<ReadRange> longer;
    std::unordered_map<uint32_t, SummaryTrailer> trailer_of;
    SEGSTORE_RETURN_IF_ERROR(ReadRanges(store, queue, stats, tails, 64, [&](PendingRead& r) {
      const BlockInUse& h = *header_of[r.block];
      Result<SummaryTrailer> t = DecodeSummaryTrailer(
          r.buf.data() + kSectorSize - kSummaryTrailerSize, h.salt, h.seq, block_size);
      if (!t.ok()) {
        if (!t.status().IsNotFound()) {
          spdlog::warn("recovery: write block {}: {}; reading the block whole", r.block,
                       t.status().message());
          ++stats->summaries_refused;
        }
        whole.push_back(r.block);
        return;
      }
      const uint32_t region = SummaryRegionSize(t->entry_bytes);
      if (region == kSectorSize) {
        take_summary(r.block, *t, r.buf.data());
        return;
      }
      trailer_of[r.block] = *t;
      longer.push_back(ReadRange{r.block, block_size - region, region});
    }));
    SEGSTORE_RETURN_IF_ERROR(ReadRanges(store, queue, stats, longer, 16, [&](PendingRead& r) {
      take_summary(r.block, trailer_of[r.block], r.buf.data());
    }));
    std::sort(whole.begin(), whole.end());
  } else {
    for (const BlockInUse& v : valid) whole.push_back(v.block);
  }

  // Then every other block, read whole.
  uint32_t read_so_far = 0;
  auto last_report = std::chrono::steady_clock::now();
  SEGSTORE_RETURN_IF_ERROR(read_blocks(whole, block_size, 4, [&](PendingRead& r) {
    const uint64_t seq = header_of[r.block]->seq;
    // Records newer than the superblock's version do not validate (see
    // DecodeRecord): none can be of this file.
    BlockScanner scan(r.buf.data(), block_size, header_of[r.block]->salt, sb.version);
    RecordView v;
    uint32_t off;
    while (scan.Next(&v, &off)) {
      ++stats->records_scanned;
      const Digest d = store->DigestOf(v.key);
      consider(d.lo, d.hi, static_cast<uint16_t>(Index::PartitionOf(v.key)),
               store->BlockOffset(r.block) + off, v.header.version, seq, v.footprint,
               v.header.sweep_at, v.header.void_at, v.header.kind, v.reference);
    }
    if (scan.damaged() > 0) {
      stats->damaged_regions += scan.damaged();
      // Up to kMaxFlights flushes of a block are in flight at once, so a
      // crash can leave a hole (a flush that never landed, so never
      // acknowledged) before records of a later one: this is not only damage.
      spdlog::warn(
          "recovery: write block {} holds {} stretch(es) that do not read as records "
          "(flushes a crash interrupted, never acknowledged, or damage); what was there "
          "is lost, the rest of the block is recovered",
          r.block, scan.damaged());
    }
    ++read_so_far;
    ++stats->blocks_read_whole;
    auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(1)) {
      last_report = now;
      spdlog::info("recovery: read {} of {} write blocks in use", read_so_far, whole.size());
      if (progress) progress(read_so_far, static_cast<uint32_t>(whole.size()));
    }
  }));

  // The block table, then the index.
  blocks.RecoverUsed(valid);
  const uint64_t watermark = blocks.Watermark();
  const UnixSeconds now = store->DropHorizon();
  Index& index = store->index();
  std::vector<int64_t> live(blocks.block_count(), 0);
  for (uint32_t p = 0; p < Index::kPartitions; ++p) {
    std::vector<Version>& found = versions[p];
    if (found.empty()) continue;
    std::sort(found.begin(), found.end(), FoldOrder);
    // The first of each key's run is its newest version. A dead one (a
    // tombstone, or past its void_at) below the watermark goes: nothing
    // older of its key can come back.
    auto dead = [now](const Version& v) {
      return v.kind == RecordKind::kTombstone || (v.void_at != 0 && v.void_at <= now);
    };
    auto kept = [&](size_t i) {
      const Version& v = found[i];
      if (i > 0 && found[i - 1].digest_lo == v.digest_lo && found[i - 1].digest_hi == v.digest_hi) {
        return false;  // an older version of the key before it
      }
      return !(dead(v) && v.version < watermark);
    };
    uint32_t count = 0;
    for (size_t i = 0; i < found.size(); ++i) count += kept(i) ? 1 : 0;
    Index::Locked table = index.Lock(p);
    table->Reserve(table->size() + count);
    for (size_t i = 0; i < found.size(); ++i) {
      if (!kept(i)) continue;
      const Version& v = found[i];
      const bool is_dead = dead(v);
      const auto tag = static_cast<uint32_t>(v.digest_lo);
      std::string_view reference;
      if (!is_dead && v.reference != Version::kNone) reference = references[v.reference];
      const IndexEntry e =
          is_dead ? IndexEntry::Tombstone(tag, v.offset, v.size, v.version)
                  : IndexEntry::Live(tag, v.offset, v.size, v.sweep_at, v.void_at,
                                     !reference.empty());
      table->Insert(e, reference);
      live[store->BlockOf(v.offset)] += AccountedBytes(e);
      if (is_dead) {
        ++stats->tombstones;
      } else {
        ++stats->live_records;
      }
    }
    std::vector<Version>().swap(found);  // its memory goes as the index grows
  }
  for (const BlockInUse& b : valid) {
    if (live[b.block] != 0) blocks.AddLive(b.block, live[b.block]);
  }
  return Status::OK();
}

}  // namespace segstore::storage
