// BlockTable: the engine's bookkeeping of write blocks: which are free, open,
// in use or being reclaimed, each one's sequence and live bytes, the free list,
// and the in-memory image of blocks not yet fully on the device. No I/O here,
// so it is tested without a device.
//
// Block 0 holds the superblock and is never handed out.
//
// Thread-safety: every method may be called from any thread. Per-block fields
// are atomics; the free list and the in-memory images have their own mutexes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace segstore::storage {

enum class BlockState : uint8_t {
  kReserved,  // block 0: the superblock
  kFree,      // erased (or never written): no valid header on the device
  kOpen,      // a writer appends to it; its image is in memory
  kUsed,      // sealed and wholly on the device
  kDefrag,    // being rewritten by defragmentation; still readable
  kErasing,   // emptied; waiting for its header to be erased, then free
};

// The in-memory image of a write block while it is open or being flushed.
// Readers on other threads may copy records out of it (see PinImage).
//
// Its own anonymous mapping, not heap memory: pages become resident as
// records are appended, and they go back to the kernel when the image is
// unmapped. (From the heap, a freed 1 MiB image stayed resident until a
// trim, and images freed and made in turn left the heap fragmented: 22 MB
// free in it after a 100,000-user load, bench/RESULTS.md.) Its writer may
// keep one finished image to fill its next block (BlockWriter's spare).
class BlockImage {
 public:
  // Zero-filled. Throws std::bad_alloc when the mapping fails.
  explicit BlockImage(uint32_t block_size);
  ~BlockImage();
  BlockImage(const BlockImage&) = delete;
  BlockImage& operator=(const BlockImage&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  uint64_t salt = 0;  // of the incarnation the image holds
  // [0, dirty) may hold non-zero bytes; the rest is zeros. Whoever finishes
  // with a block may lower it, so that a reuse zeroes no more than it must.
  uint32_t dirty;

 private:
  uint8_t* data_;
  size_t size_;
};

// A write block holding a valid header of this device, as recovery found
// it (storage/recovery.h): where, and its header's seq and salt.
struct BlockInUse {
  uint32_t block = 0;
  uint64_t seq = 0;
  uint64_t salt = 0;
  bool operator==(const BlockInUse&) const = default;
};

class BlockTable {
 public:
  // Who asks for a block. Writes leave a few blocks free for deletes, and
  // deletes leave the last ones for defragmentation, which must always be able
  // to proceed in order to free anything.
  enum class Purpose : uint8_t { kWrite, kDelete, kDefrag };
  static constexpr uint32_t kDefragReserve = 2;
  static constexpr uint32_t kDeleteReserve = 2;

  BlockTable(uint32_t block_count, uint32_t block_size);

  uint32_t block_count() const { return count_; }
  uint32_t block_size() const { return block_size_; }

  // ---- Lifecycle. Each returns false (changing nothing) when the block is not
  // in the state the transition starts from.
  // Free -> Open with sequence `seq` and salt `salt` (see BlockHeader), or
  // nullopt when the reserve for `p` is reached.
  std::optional<uint32_t> Allocate(Purpose p, uint64_t seq, uint64_t salt);
  // Open -> Used: its last flush completed.
  bool MarkUsed(uint32_t b);
  // Open -> Free: it was never written (its header never reached the device).
  bool ReleaseUnwritten(uint32_t b);
  // Used -> Defrag.
  bool BeginDefrag(uint32_t b);
  // Defrag -> Used: defragmentation gave up on it.
  bool AbortDefrag(uint32_t b);
  // Defrag -> Erasing: every record moved or dropped.
  bool MarkErasing(uint32_t b);
  // Erasing -> Free: its header is erased on the device.
  bool Release(uint32_t b);
  // Recovery only, before any other use: each of `used` Free -> Used, with
  // its header's seq and salt. One pass over the free list, whatever their
  // number: a search and an erase a block made a 4 TB device's four million
  // blocks cost hours.
  void RecoverUsed(std::span<const BlockInUse> used);

  BlockState state(uint32_t b) const { return meta_[b].state.load(std::memory_order_acquire); }
  uint64_t seq(uint32_t b) const { return meta_[b].seq.load(std::memory_order_acquire); }
  // Names the incarnation: differs whenever the block is reused.
  uint64_t salt(uint32_t b) const { return meta_[b].salt.load(std::memory_order_acquire); }
  int64_t live_bytes(uint32_t b) const { return meta_[b].live.load(std::memory_order_relaxed); }
  void AddLive(uint32_t b, int64_t delta) {
    meta_[b].live.fetch_add(delta, std::memory_order_relaxed);
  }
  uint32_t free_count() const { return free_count_.load(std::memory_order_relaxed); }
  uint64_t total_live_bytes() const;

  // ---- In-memory images.
  void AttachImage(uint32_t b, std::shared_ptr<const BlockImage> image);
  void DetachImage(uint32_t b);
  // The image of block `b`, or null when it is only on the device. Holding the
  // returned pointer keeps the bytes alive.
  std::shared_ptr<const BlockImage> PinImage(uint32_t b) const;

  // ---- Choices for defragmentation.
  // Used blocks with fewer than `max_live` live bytes, emptiest first, at most `limit`.
  std::vector<uint32_t> DefragCandidates(uint64_t max_live, size_t limit) const;
  // The Used block with the lowest sequence.
  std::optional<uint32_t> OldestUsed() const;
  // The lowest sequence of any block whose header may be on the device (every
  // state but Free), leaving out `exclude`; UINT64_MAX when there is none. A
  // record version below it has no older version left anywhere on the device.
  // Constant time. A block enters the set when allocated, before anything is
  // written into it, so a caller holding a partition lock sees every block
  // holding a record of that partition.
  uint64_t Watermark(std::optional<uint32_t> exclude = std::nullopt) const;

 private:
  struct Meta {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> salt{0};
    std::atomic<int64_t> live{0};
    std::atomic<BlockState> state{BlockState::kFree};
    std::atomic<bool> has_image{false};
  };
  static constexpr size_t kImageStripes = 64;

  bool Transition(uint32_t b, BlockState from, BlockState to);
  uint32_t ReserveFor(Purpose p) const;

  const uint32_t count_;
  const uint32_t block_size_;
  std::unique_ptr<Meta[]> meta_;

  mutable std::mutex free_mu_;
  std::deque<uint32_t> free_;  // FIFO: spreads writes over the device
  std::atomic<uint32_t> free_count_{0};
  std::set<std::pair<uint64_t, uint32_t>> not_free_;  // (seq, block) of every non-free block

  mutable std::array<std::mutex, kImageStripes> image_mu_;
  std::vector<std::shared_ptr<const BlockImage>> images_;
};

}  // namespace segstore::storage
