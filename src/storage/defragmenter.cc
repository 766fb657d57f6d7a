#include "storage/defragmenter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "common/aligned_buffer.h"
#include "common/coding.h"
#include "storage/format.h"
#include "storage/store_impl.h"
#include "storage/worker_impl.h"

namespace segstore::storage {
namespace {

// Waits for `io` on the pass's own worker (which runs its posted work meanwhile).
void WaitFor(WorkerImpl* w, const AwaitedIo& io) {
  w->queue()->Submit();
  while (!io.done) w->Wait(std::chrono::milliseconds(10));
}

Status FlushWriter(WorkerImpl* w) {
  std::optional<Status> out;
  w->writer().FlushAll([&out](Status s) { out = std::move(s); });
  w->queue()->Submit();
  while (!out) w->Wait(std::chrono::milliseconds(10));
  return *out;
}

}  // namespace

Status Defragmenter::RunPass(WorkerImpl* w, const Budget& budget) {
  BlockTable& blocks = store_->blocks();
  SweepIndex(budget.sweep_partitions);

  uint64_t max_live =
      static_cast<uint64_t>(store_->options().defrag_threshold * store_->block_size());
  Status first_error;
  for (uint32_t b : blocks.DefragCandidates(max_live, budget.rewrite_blocks)) {
    Status s = Rewrite(w, b, /*rotation=*/false);
    if (!s.ok() && first_error.ok()) first_error = s;
  }

  bool tombstones_wait = tombstones_last_ > 0 || tombstones_seen_ > 0;
  for (uint32_t i = 0; i < budget.rotate_blocks && (tombstones_wait || budget.force_rotate); ++i) {
    // The oldest block on the device may be someone's open block: ask for it
    // to be sealed so that a later pass can rotate it.
    uint64_t watermark = blocks.Watermark();
    std::optional<uint32_t> oldest = blocks.OldestUsed();
    if (watermark != UINT64_MAX && (!oldest || blocks.seq(*oldest) > watermark)) {
      RequestSeal(watermark + 1);
    }
    if (!oldest) break;
    Status s = Rewrite(w, *oldest, /*rotation=*/true);
    if (!s.ok() && first_error.ok()) first_error = s;
  }

  Status s = FreeReady(w);
  if (!s.ok() && first_error.ok()) first_error = s;
  return first_error;
}

void Defragmenter::SweepIndex(uint32_t partitions) {
  BlockTable& blocks = store_->blocks();
  Counters& counters = store_->background_counters();
  const UnixSeconds now = store_->DropHorizon();
  for (uint32_t i = 0; i < partitions; ++i) {
    Index::Locked table = store_->index().Lock(sweep_cursor_);
    // Both read under this partition's lock: every block holding a record of
    // the partition is then in the watermark's set, and every version in it
    // was taken before the bound.
    const uint64_t watermark = blocks.Watermark();
    const uint64_t version_bound = store_->CurrentSeq();
    table->Sweep([&](IndexEntry& e) {
      uint32_t block = store_->BlockOf(e.offset());
      if (e.tombstone()) {
        if (e.version() < watermark) {
          blocks.AddLive(block, -int64_t{AccountedBytes(e)});
          counters.Bump(counters.tombstones_reclaimed);
          return false;
        }
        ++tombstones_seen_;
        return true;
      }
      if (e.void_at() != 0 && e.void_at() <= now) {
        // Dead without being read: from now on it only guards older versions.
        blocks.AddLive(block, -int64_t{AccountedBytes(e)});
        e = IndexEntry::Tombstone(e.tag(), e.offset(), e.size(), version_bound);
        blocks.AddLive(block, AccountedBytes(e));
        counters.Bump(counters.expired_dropped);
        ++tombstones_seen_;
      }
      return true;
    });
    if (++sweep_cursor_ == Index::kPartitions) {
      sweep_cursor_ = 0;
      tombstones_last_ = tombstones_seen_;
      tombstones_seen_ = 0;
    }
  }
}

Status Defragmenter::Rewrite(WorkerImpl* w, uint32_t block, bool rotation) {
  BlockTable& blocks = store_->blocks();
  if (!blocks.BeginDefrag(block)) return Status::OK();  // no longer a candidate
  const uint32_t block_size = store_->block_size();
  const uint64_t base = store_->BlockOffset(block);

  AwaitedIo read;
  AlignedBuffer buf = AlignedBuffer::Uninitialized(block_size);
  w->queue()->Read(base, buf.data(), block_size, &read);
  WaitFor(w, read);
  if (read.result != static_cast<int32_t>(block_size)) {
    blocks.AbortDefrag(block);
    return Status::IOError(
        fmt::format("defragmentation read of write block {}: {}", block,
                    read.result < 0 ? std::strerror(-read.result) : "short read"));
  }

  // Versions below this have no older version left once `block` is gone.
  // Every record examined below was written before this pass began, so
  // every block holding an older version of its key is already counted.
  const uint64_t watermark = blocks.Watermark(block);
  const UnixSeconds now = store_->DropHorizon();
  Counters& counters = store_->background_counters();
  BlockScanner scan(buf.data(), block_size, blocks.salt(block));
  RecordView v;
  uint32_t off;
  while (scan.Next(&v, &off)) {
    const uint64_t offset = base + off;
    const uint32_t partition = Index::PartitionOf(v.key);
    const uint32_t tag = Index::TagOf(store_->DigestOf(v.key));
    if (store_->index().Lock(partition)->Find(tag, offset) == nullptr) continue;  // garbage
    // Room before taking the lock for good: sealing a block and opening
    // another must not happen under it.
    Status room = w->writer().Reserve(v.footprint, BlockTable::Purpose::kDefrag, v.reference.size());
    if (room.code() == Status::Code::kDeviceFull && !erasing_.empty()) {
      // On a nearly full device: free what earlier rewrites emptied, then go on.
      room = FreeReady(w);
      if (room.ok()) {
        room = w->writer().Reserve(v.footprint, BlockTable::Purpose::kDefrag, v.reference.size());
      }
    }
    if (!room.ok()) {
      blocks.AbortDefrag(block);
      return room.WithContext(fmt::format("defragmenting write block {}", block));
    }
    Index::Locked table = store_->index().Lock(partition);
    const IndexEntry* e = table->Find(tag, offset);
    if (e == nullptr) continue;  // superseded meanwhile
    const uint64_t stamp = store_->CurrentSeq();
    const IndexEntry old = *e;
    bool dead = old.tombstone() || (old.void_at() != 0 && old.void_at() <= now);
    IndexEntry moved;
    std::string_view reference;
    if (!dead) {
      BlockWriter::Slot slot = w->writer().Append(v.footprint, stamp, v.reference.size());
      EncodeRecord(v.header, v.key, v.reference, v.body, slot.block_salt, slot.dst);
      // The reference from the record itself, which the entry's mirrors.
      reference = v.reference;
      moved = IndexEntry::Live(tag, slot.offset, v.footprint, old.sweep_at(), old.void_at(),
                               !reference.empty());
      counters.Bump(counters.defrag_records_moved);
    } else if (v.header.version < watermark) {
      table->Erase(tag, offset);
      blocks.AddLive(block, -int64_t{AccountedBytes(old)});
      counters.Bump(old.tombstone() ? counters.tombstones_reclaimed : counters.expired_dropped);
      continue;
    } else {
      // Still guarding older versions: carry it forward as a bare tombstone.
      RecordHeader h = v.header;
      h.kind = RecordKind::kTombstone;
      h.body_len = 0;
      h.sweep_at = 0;
      h.void_at = 0;
      uint32_t footprint = RecordFootprint(h.key_len, 0);
      BlockWriter::Slot slot = w->writer().Append(footprint, stamp);
      EncodeRecord(h, v.key, std::string_view(), slot.block_salt, slot.dst);
      moved = IndexEntry::Tombstone(tag, slot.offset, footprint, h.version);
    }
    table->Replace(tag, offset, moved, reference);
    blocks.AddLive(block, -int64_t{AccountedBytes(old)});
    blocks.AddLive(store_->BlockOf(moved.offset()), AccountedBytes(moved));
  }
  if (int64_t left = blocks.live_bytes(block); left != 0) {
    // Index entries still point here: records the scan could not read
    // (damaged, their keys unknown). Drop them, or the block could never go.
    uint64_t lost = DropEntriesIn(block);
    if (lost > 0) {
      spdlog::error(
          "defragmentation: {} record(s) in write block {} of {} are damaged and could not be "
          "moved; they are lost",
          lost, block, store_->device().name());
    } else {
      spdlog::error(
          "defragmentation: write block {} counted {} live bytes with nothing indexed in "
          "it; accounting corrected",
          block, left);
      blocks.AddLive(block, -left);
    }
  }
  blocks.MarkErasing(block);
  erasing_.emplace_back(block, store_->CurrentSeq());
  if (rotation) counters.Bump(counters.rotated_blocks);
  return Status::OK();
}

Status Defragmenter::FreeReady(WorkerImpl* w) {
  if (erasing_.empty()) return Status::OK();
  // The copies first.
  SEGSTORE_RETURN_IF_ERROR(FlushWriter(w));
  static const AlignedBuffer zeros(kSectorSize);
  BlockTable& blocks = store_->blocks();
  Counters& counters = store_->background_counters();
  const uint64_t frontier = store_->DurableFrontier();
  while (!erasing_.empty() && erasing_.front().second <= frontier) {
    uint32_t block = erasing_.front().first;
    AwaitedIo erase;
    w->queue()->Write(store_->BlockOffset(block), zeros.data(), kSectorSize, &erase);
    WaitFor(w, erase);
    if (erase.result != static_cast<int32_t>(kSectorSize)) {
      Status s = Status::IOError(
          fmt::format("erasing the header of write block {}: {}", block,
                      erase.result < 0 ? std::strerror(-erase.result) : "short write"));
      store_->SetWriteError(s);
      return s;
    }
    blocks.Release(block);
    counters.Bump(counters.defrag_blocks);
    erasing_.pop_front();
  }
  return Status::OK();
}

void Defragmenter::RequestSeal(uint64_t seq) { store_->RequestSeal(seq); }

uint64_t Defragmenter::DropEntriesIn(uint32_t block) {
  BlockTable& blocks = store_->blocks();
  uint64_t dropped = 0;
  for (uint32_t p = 0; p < Index::kPartitions; ++p) {
    Index::Locked table = store_->index().Lock(p);
    table->Sweep([&](IndexEntry& e) {
      if (store_->BlockOf(e.offset()) != block) return true;
      blocks.AddLive(block, -int64_t{AccountedBytes(e)});
      ++dropped;
      return false;
    });
  }
  return dropped;
}

}  // namespace segstore::storage
