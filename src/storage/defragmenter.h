// Defragmenter: reclaims write blocks. Three jobs, run as passes by the
// store's background thread (rate-limited) or by Store::DefragNow:
//
// - Index sweep: drops tombstones whose version is below the watermark (no
//   older version of their key is left on the device), and turns records past
//   their void_at into tombstones without reading them.
// - Rewrite: a block whose live bytes fall below the threshold has its live
//   records copied to the defragmenter's own open block (tombstones and
//   expired records as small tombstones, or not at all when below the
//   watermark), and is then freed.
// - Rotation: while tombstones wait, the oldest block is rewritten too, so the
//   watermark keeps advancing and every tombstone is reclaimed in time.
//
// A rewritten block is freed (its header erased) only once the copies are on
// the device and every write stamped before the rewrite finished is too
// (StoreImpl::DurableFrontier): a crash can then never find neither the old
// nor the new version of a key.
//
// Thread-safety: one pass at a time (the store holds a mutex around passes).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "segstore/status.h"

namespace segstore::storage {

class StoreImpl;
class WorkerImpl;

class Defragmenter {
 public:
  explicit Defragmenter(StoreImpl* store) : store_(store) {}

  struct Budget {
    uint32_t rewrite_blocks = 0;  // blocks below the threshold to rewrite
    uint32_t rotate_blocks = 0;   // oldest blocks to rewrite while tombstones wait
    uint32_t sweep_partitions = 0;
    bool force_rotate = false;  // rotate even with no tombstone waiting
  };
  // One pass on `w` (the calling thread's worker).
  Status RunPass(WorkerImpl* w, const Budget& budget);

 private:
  void SweepIndex(uint32_t partitions);
  Status Rewrite(WorkerImpl* w, uint32_t block, bool rotation);
  Status FreeReady(WorkerImpl* w);
  // Asks every writer holding an open block older than `seq` to seal it.
  void RequestSeal(uint64_t seq);
  // Drops every index entry that points into `block`; returns how many.
  uint64_t DropEntriesIn(uint32_t block);

  StoreImpl* store_;
  std::deque<std::pair<uint32_t, uint64_t>> erasing_;  // block, stamp its copies followed
  uint32_t sweep_cursor_ = 0;
  uint64_t tombstones_seen_ = 0;  // in the sweep cycle under way
  uint64_t tombstones_last_ = 0;  // in the last complete cycle
};

}  // namespace segstore::storage
