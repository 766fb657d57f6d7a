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

struct DigestHash {
  size_t operator()(const Digest& d) const { return static_cast<size_t>(d.lo ^ d.hi); }
};

// The newest version of a key seen so far.
struct Newest {
  uint64_t offset;
  uint64_t version;
  uint64_t block_seq;
  uint32_t size;
  UnixSeconds sweep_at;
  UnixSeconds void_at;
  RecordKind kind;
  uint16_t partition;  // the key's (in the padding: the map holds one per key)
};

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

  // The newest version of each key wins.
  std::unordered_map<Digest, Newest, DigestHash> newest;
  // The reference of each key whose newest version so far is a kPutRef
  // record, by that record's offset (a newer version of another kind leaves
  // it behind, unmatched): only linked keys pay for it.
  std::unordered_map<Digest, std::pair<uint64_t, std::string>, DigestHash> references;
  auto consider = [&](const Digest& digest, const Newest& n, std::string_view reference) {
    stats->max_seq = std::max(stats->max_seq, n.version);
    auto [it, inserted] = newest.try_emplace(digest, n);
    if (!inserted) {
      Newest& cur = it->second;
      // Equal versions are one record and its copy by defragmentation: keep either.
      if (n.version > cur.version || (n.version == cur.version && n.block_seq > cur.block_seq)) {
        cur = n;
        inserted = true;
      }
    }
    if (inserted && n.kind == RecordKind::kPutRef) {
      references[digest] = {n.offset, std::string(reference)};
    }
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
    std::vector<std::pair<Digest, Newest>> entries;
    std::vector<std::string_view> entry_references;
    auto take_summary = [&](uint32_t block, const SummaryTrailer& t, const uint8_t* bytes) {
      const BlockInUse& h = *header_of[block];
      entries.clear();
      entry_references.clear();
      Status s = ReadSummaryEntries(t, bytes, h.salt, [&](const SummaryEntry& e) {
        entries.emplace_back(Digest{e.digest_lo, e.digest_hi},
                             Newest{store->BlockOffset(block) + e.offset, e.version, h.seq,
                                    e.footprint, e.sweep_at, e.void_at, e.kind, e.partition});
        entry_references.push_back(e.reference);
      });
      if (!s.ok()) {
        spdlog::warn("recovery: write block {}: {}; reading the block whole", block, s.message());
        ++stats->summaries_refused;
        whole.push_back(block);
        return;
      }
      for (size_t i = 0; i < entries.size(); ++i) {
        consider(entries[i].first, entries[i].second, entry_references[i]);
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
      consider(store->DigestOf(v.key),
               Newest{store->BlockOffset(r.block) + off, v.header.version, seq, v.footprint,
                      v.header.sweep_at, v.header.void_at, v.header.kind,
                      static_cast<uint16_t>(Index::PartitionOf(v.key))},
               v.reference);
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
  for (const auto& [digest, n] : newest) {
    bool dead = n.kind == RecordKind::kTombstone || (n.void_at != 0 && n.void_at <= now);
    if (dead && n.version < watermark) continue;  // nothing older can come back
    uint32_t tag = Index::TagOf(digest);
    std::string_view reference;
    if (!dead && n.kind == RecordKind::kPutRef) {
      // The map holds this very record's: its entry was set when it became the newest.
      auto ref = references.find(digest);
      if (ref != references.end() && ref->second.first == n.offset) reference = ref->second.second;
    }
    IndexEntry e =
        dead ? IndexEntry::Tombstone(tag, n.offset, n.size, n.version)
             : IndexEntry::Live(tag, n.offset, n.size, n.sweep_at, n.void_at, !reference.empty());
    index.Lock(n.partition)->Insert(e, reference);
    blocks.AddLive(store->BlockOf(n.offset), AccountedBytes(e));
    if (dead) {
      ++stats->tombstones;
    } else {
      ++stats->live_records;
    }
  }
  return Status::OK();
}

}  // namespace segstore::storage
