// StoreImpl: the state every worker of one store shares (device, superblock,
// index, block table, the global sequence, counters) and the background
// defragmentation thread. Workers, writers, recovery and defragmentation reach
// it directly; callers see only the Store interface.
//
// Thread-safety: everything here is safe to call from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "segstore/storage.h"
#include "storage/block_table.h"
#include "storage/format.h"
#include "storage/index.h"
#include "storage/io_queue.h"

namespace segstore::storage {

class BlockWriter;
class Defragmenter;

// Event counters of one worker (or of the store's own background work).
// Written by one thread, read by stats() from any.
struct Counters {
  std::atomic<uint64_t> gets{0};
  std::atomic<uint64_t> writes{0};
  std::atomic<uint64_t> update_retries{0};
  std::atomic<uint64_t> device_reads{0};
  std::atomic<uint64_t> memory_reads{0};
  std::atomic<uint64_t> corruptions{0};
  std::atomic<uint64_t> flushes{0};
  std::atomic<uint64_t> defrag_blocks{0};
  std::atomic<uint64_t> rotated_blocks{0};
  std::atomic<uint64_t> defrag_records_moved{0};
  std::atomic<uint64_t> tombstones_reclaimed{0};
  std::atomic<uint64_t> expired_dropped{0};

  void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void AddTo(StoreStats* s) const;
};

// Bytes an index entry makes its block count as live: what defragmentation
// would have to copy. A tombstone standing on an expired record costs only
// the small tombstone that would replace it.
inline uint32_t AccountedBytes(const IndexEntry& e) {
  constexpr uint32_t kTombstoneCost = 128;
  return e.live() ? e.size() : std::min(e.size(), kTombstoneCost);
}

class StoreImpl final : public Store {
 public:
  static Result<std::unique_ptr<Store>> OpenOn(const StoreOptions& options,
                                               std::shared_ptr<Device> device);
  ~StoreImpl() override;

  Result<std::unique_ptr<Worker>> NewWorker(const WorkerOptions& options) override;
  StoreStats stats() override;
  const RecoveryStats& recovery() const override { return recovery_; }
  uint32_t max_key_size() const override { return options_.max_key_size; }
  uint32_t max_body_size() const override { return max_body_size_; }
  Status DefragNow(bool rotate) override;
  uint64_t ReleaseSpareImages(std::chrono::steady_clock::duration unused_for) override;
  uint32_t FindDue(uint32_t now, size_t max, uint32_t* cursor,
                   std::vector<RecordRef>* out) override;
  void ListPartition(uint32_t partition, uint64_t tag_from, size_t max, std::vector<RecordRef>* out,
                     uint64_t* tag_next) override;

  const StoreOptions& options() const { return options_; }
  Device& device() { return *device_; }
  Index& index() { return index_; }
  BlockTable& blocks() { return *blocks_; }
  Clock& clock() override { return *clock_; }
  // Records past their void_at are dropped only once it is before this:
  // the clock less StoreOptions::void_grace_seconds.
  uint32_t DropHorizon() const {
    const uint32_t now = clock_->Now();
    return now > options_.void_grace_seconds ? now - options_.void_grace_seconds : 0;
  }
  const Superblock& superblock() const { return superblock_; }
  uint32_t block_size() const { return superblock_.block_size; }
  uint64_t BlockOffset(uint32_t b) const { return uint64_t{b} * superblock_.block_size; }
  uint32_t BlockOf(uint64_t offset) const {
    return static_cast<uint32_t>(offset / superblock_.block_size);
  }
  Digest DigestOf(std::string_view key) const { return DigestKey(key, superblock_.hash_seed); }

  // The global sequence: numbers block incarnations and record versions alike.
  uint64_t NextSeq() { return seq_.fetch_add(1, std::memory_order_acq_rel); }
  uint64_t CurrentSeq() const { return seq_.load(std::memory_order_acquire); }
  // Bytes of write block images mapped (open, being flushed, or a writer's
  // spare): BlockWriter counts them as it maps and unmaps them.
  void CountImageBytes(int64_t delta) {
    image_bytes_.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  }

  // The first device write error. Once set, writes are refused with
  // Unavailable; reads go on. OK while the device is healthy.
  Status write_error() const;
  void SetWriteError(const Status& s);
  bool writes_failed() const { return writes_failed_.load(std::memory_order_acquire); }

  // Writers register so defragmentation can tell when every write older than
  // a given stamp is on the device (see BlockWriter::pending_min).
  void RegisterWriter(BlockWriter* w);
  void UnregisterWriter(BlockWriter* w);
  uint64_t DurableFrontier() const;
  // Asks every writer whose open block is older than `seq` to seal it, and
  // wakes their event loops; they act on it in their next Poll().
  void RequestSeal(uint64_t seq);
  uint64_t seal_below() const { return seal_below_.load(std::memory_order_acquire); }

  // The clean close's last step, which the destructor takes once the
  // defragmentation thread has stopped: writes the index checkpoint
  // (StoreOptions::index_checkpoint, index_checkpoint.h), so that the next
  // start loads the index instead of scanning the device. OK at once when
  // none is configured. Unavailable, writing nothing, unless the device
  // holds everything the index says: a worker (the defragmentation thread's
  // included) is still open, a device write error was recorded, or a block
  // is still open or being defragmented. IOError when the file cannot be
  // written (the previous one, if any, stays as it was). Call only once
  // nothing else uses the store.
  Status CheckpointIndex();

  // Counters of workers (registered while they live) and of background work.
  void RegisterCounters(const Counters* c);
  void UnregisterCounters(const Counters* c);
  Counters& background_counters() { return background_; }

 private:
  StoreImpl(const StoreOptions& options, std::shared_ptr<Device> device);
  Status Start();
  Status LoadOrFormat(IoQueue* queue);
  // A file of an older format version this build reads: its superblock's
  // version becomes kFormatVersion, durably, before anything can be written
  // (FORMAT.md, "Versions"). Nothing to do for a file of this version.
  Status UpgradeFormat(IoQueue* queue);
  void DefragLoop();

  StoreOptions options_;
  std::shared_ptr<Device> device_;
  Clock* clock_;
  Superblock superblock_;
  uint32_t max_body_size_ = 0;
  Index index_;
  // Before blocks_: images the block table still holds are counted out as
  // it goes.
  std::atomic<uint64_t> image_bytes_{0};
  std::unique_ptr<BlockTable> blocks_;
  std::atomic<uint64_t> seq_{1};
  RecoveryStats recovery_;
  bool started_ = false;  // Start succeeded: the index is whole

  mutable std::mutex error_mu_;
  Status write_error_;
  std::atomic<bool> writes_failed_{false};

  mutable std::mutex registry_mu_;
  std::vector<BlockWriter*> writers_;
  std::atomic<uint64_t> seal_below_{0};
  std::vector<const Counters*> counters_;
  Counters retired_;     // counters of workers that are gone
  Counters background_;  // defragmentation and expiry

  // Defragmentation: one pass at a time (background thread or DefragNow).
  std::mutex defrag_mu_;
  std::unique_ptr<Defragmenter> defrag_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread defrag_thread_;
};

}  // namespace segstore::storage
