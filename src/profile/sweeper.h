// Sweeper: keeps the store free of expired segments without reading all of
// it. The engine's index holds each record's sweep_at (when a share of its
// segments will have expired); a pass asks the engine for live records whose
// sweep_at has passed (Store::FindDue, in DRAM) and rewrites each without
// its expired segments (ProfileSessionImpl::SweepAt: read once at its place,
// then a read-modify-write of its key, so a concurrent upsert is never lost).
// Expired links and profile fields go the same way.
// Its writes are buffered: a lost rewrite only brings back expired segments,
// which reads hide. Records with nothing left alive are not visited at all:
// their void_at has passed and the engine drops them unread.
//
// Not thread-safe: one pass at a time, on the session's thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "profile/profile_session.h"
#include "segstore/profile.h"

namespace segstore::profile {

class Sweeper {
 public:
  explicit Sweeper(storage::Store* store) : store_(store) {}
  // Visits up to `budget` due records on `session` and waits until every
  // rewrite is done. Returns how many records it found due.
  size_t RunPass(ProfileSessionImpl* session, size_t budget);
  SweeperStats stats() const;

 private:
  storage::Store* store_;
  uint32_t cursor_ = 0;                    // index partition the next pass starts at
  std::vector<storage::RecordRef> due_;    // found due, not yet visited
  std::vector<storage::RecordRef> batch_;  // this pass's share of due_
  std::atomic<uint64_t> visited_{0}, rewritten_{0}, deleted_{0}, segments_{0}, fields_{0},
      bytes_{0};
};

}  // namespace segstore::profile
