// BlockWriter: the open write block of one worker (or of defragmentation),
// and the flushes that carry it to the device.
//
// Appends go into an in-memory image of the block; a flush writes the range
// from the end of the previous flush up to the next sector boundary, in one
// durable write. A flush that ends mid-sector pads the rest of that sector
// (a pad marker) and later appends start at the next sector, so no flush
// ever rewrites a sector an earlier flush wrote: a torn write can only harm
// records that were not yet acknowledged. Up to kMaxFlights flushes of one
// block are in flight at once, over disjoint ranges; they may complete in any
// order, but a record counts as on the device (its waiters run, pending_min
// lets it go) only once its flush and every earlier flush of the block
// completed.
//
// Group commit: a commit write waits for the next flush, posted to run once
// the current burst of work is appended; while kMaxFlights are out, writes
// share the flush that follows the first to complete.
//
// Not thread-safe: the owning thread only, except pending_min(), which any
// thread may read. The owner calls Append while holding the partition lock of
// the key being written (so readers on other threads see the bytes).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "segstore/storage.h"
#include "storage/block_table.h"
#include "storage/format.h"
#include "storage/io_queue.h"

namespace segstore::storage {

class StoreImpl;
struct Counters;

// Runs a task later on the owning thread (inside Poll).
using PostFn = std::function<void(std::function<void()>)>;

class BlockWriter {
 public:
  // `counters` and `post` belong to the owner and outlive the writer.
  // Buffered writes reach the device within `flush_interval`.
  BlockWriter(StoreImpl* store, IoQueue* queue, Counters* counters, PostFn post,
              std::chrono::microseconds flush_interval);
  ~BlockWriter();  // the owner drains the queue first (see idle())
  BlockWriter(const BlockWriter&) = delete;
  BlockWriter& operator=(const BlockWriter&) = delete;

  // Where an append landed.
  struct Slot {
    uint8_t* dst = nullptr;     // write the record here (footprint bytes)
    uint64_t offset = 0;        // device offset of the record
    uint64_t block_salt = 0;    // salt of the block incarnation holding it
    uint32_t end_in_block = 0;  // end of the record inside its block
  };

  // Makes sure the open block has room for `footprint` bytes, and for the
  // record's entry in the block's summary (a kPutRef record's names its
  // reference: `reference` bytes), sealing it and opening another if needed;
  // `purpose` says which free-block reserve a new block may come from.
  // DeviceFull when no block can be had; Unavailable after a device error
  // (sticky).
  Status Reserve(uint32_t footprint, BlockTable::Purpose purpose, size_t reference = 0);
  // Claims `footprint` bytes (Reserve'd just before, on this thread, with a
  // `reference` at least this long). `stamp` is the global sequence the
  // write is ordered by (see pending_min). The caller writes the record at
  // the slot before it lets go of the thread.
  Slot Append(uint32_t footprint, uint64_t stamp, size_t reference = 0);
  // Runs `done` once the record of `slot` is on the device (or the flush failed).
  void WhenDurable(const Slot& slot, FlushCallback done);
  // For buffered writes: makes sure a flush happens within the flush interval.
  void FlushWithinInterval();
  // Flushes everything appended so far; `done` runs once it is all on the device.
  void FlushAll(FlushCallback done);

  // Seals the open block (its owner is closing): a block with records gets
  // its summary, so that a start after a later crash need not read it whole.
  void SealOpen() {
    if (open_) Seal();
  }
  // Seals the open block if its sequence is below `seq`: the store asks when
  // that block is the oldest on the device and holds the watermark back.
  void SealIfOlderThan(uint64_t seq) {
    if (open_seq() < seq) Seal();
  }
  uint64_t open_seq() const;
  // open_seq() as last published, for other threads.
  uint64_t open_seq_hint() const { return open_seq_hint_.load(std::memory_order_relaxed); }
  // Any thread: wakes the owner's event loop (which then runs Poll()).
  void Wake() { queue_->Notify(); }
  // Hands over the spare image if it was kept before `kept_before` (null if
  // none), for the caller to unmap and count out. Any thread (the store's
  // registry lock held).
  std::unique_ptr<BlockImage> ReleaseSpare(std::chrono::steady_clock::time_point kept_before);

  // Cancels the flush-interval timer (the owner is shutting down).
  void CancelTimer();

  // The lowest stamp among appended records not yet on the device, UINT64_MAX
  // when everything is. Any thread.
  uint64_t pending_min() const { return pending_min_.load(std::memory_order_acquire); }
  // No flush or timer in flight.
  bool idle() const;

 private:
  struct Open;
  struct Flight;
  // Flushes of one block in flight at once. On this VM's virtio disk, 32 KiB
  // durable writes went from 2.9k/s at one in flight to 4.2k/s at four
  // (RWF_DSYNC from threads, 2026-11-23); more would mostly split group
  // commits into smaller writes.
  static constexpr size_t kMaxFlights = 4;
  struct Timer final : IoCompletion {
    BlockWriter* writer = nullptr;
    bool armed = false;
    void OnIoComplete(int32_t result) override;
  };

  void OpenBlock(const BlockHeader& h);
  // Where a record of `footprint` bytes would start, appended at `write_off`:
  // there, or (align_records) the next sector rather than straddle two.
  uint32_t Placement(uint32_t write_off, uint32_t footprint) const;
  void Seal();
  // Whether a record of `footprint` bytes (and `reference`) fits in `ob`,
  // its summary entry included.
  bool Fits(const Open& ob, uint32_t footprint, size_t reference) const;
  // A sealed block whose records are all on the device: writes its summary
  // (once), else finishes it.
  void Complete(Open* ob);
  // Lists the records of `ob`'s image in its summary, at the block's end;
  // false (the block goes without one) when they do not fit.
  bool EncodeSummary(Open* ob);
  void Flush(Open* ob);
  void OnFlushed(Open* ob, Flight* flight, int32_t result);
  void Finish(Open* ob);
  void Fail(const Status& s);
  void PublishPendingMin();
  std::shared_ptr<BlockImage> TakeImage(uint64_t salt);

  StoreImpl* store_;
  IoQueue* queue_;
  Counters* counters_;
  PostFn post_;
  const std::chrono::microseconds flush_interval_;
  std::unique_ptr<Open> open_;                  // may be null
  std::vector<std::unique_ptr<Open>> sealing_;  // sealed, last flush not yet done
  Timer timer_;
  bool flush_posted_ = false;
  std::atomic<uint64_t> pending_min_{UINT64_MAX};
  std::atomic<uint64_t> open_seq_hint_{UINT64_MAX};
  std::mt19937_64 nonces_;  // per-incarnation block nonces
  // One finished image kept for the next block. A new mapping faults each
  // page in on first touch, and on a virtual machine a fault can cost 15 us:
  // 3.8 ms for a 1 MiB block, against 14 us to zero a resident one
  // (bench/RESULTS.md, "spare images"). Shared with the images' deleter,
  // which may run on a reader's thread after the writer is gone.
  struct Spare;
  std::shared_ptr<Spare> spare_;
};

}  // namespace segstore::storage
