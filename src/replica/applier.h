// Applier: one thread that makes this node's copy follow the cluster's log.
// It reads every log partition in offset order (log::LogReader) and applies
// each entry whose user's partition this node holds through its own profile
// session, at the entry's time and position (profile::WriteContext), one
// entry at a time per log partition (so the writes of one user land in log
// order) and the log partitions side by side. What each write answered goes
// to the node's waiting clients (PendingWrites) and to the window of recent
// write IDs (a retry is not applied twice). Every `checkpoint_interval`,
// once what it applied is on the device, it records how far each log
// partition got (checkpoint.h); a restart resumes there.
//
// It also judges, per log partition, whether this node's copy may be behind
// (reads of its partitions are then marked stale): still catching up after
// a start, lagging the log by more than `max_lag`, unable to reach the log,
// its etcd lease not acknowledged within the TTL, or unable to apply (a
// device error). The request path reads that as one atomic load.
//
// Thread-safety: Start/Stop/the destructor from one thread; Stale,
// caught_up and stats from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/view.h"
#include "log/log.h"
#include "replica/pending.h"
#include "segstore/profile.h"

namespace segstore::replica {

struct ApplierOptions {
  uint32_t log_partitions = 64;
  // This node's replicator: entries of this origin answer its waiting clients
  // (PendingWrites, by the entry's ticket).
  uint64_t origin = 0;
  // The window of recent writes (write_ids.h): a retry is recognised within
  // this many seconds of the first (entry times) and among the last
  // window_max_ids / log_partitions entries of its log partition.
  uint32_t window_seconds = 60;
  size_t window_max_ids = 1'000'000;
  // Reads of a log partition that has been behind the log for longer than
  // this (see LaneStats::lag_seconds) are marked stale.
  std::chrono::milliseconds max_lag{5000};
  std::chrono::milliseconds checkpoint_interval{1000};
  // Entries read ahead and waiting to be applied, over all log partitions:
  // at most this many, and this many bytes.
  size_t max_queued = 20000;
  size_t max_queued_bytes = 64u << 20;
  // The node's lease: how long since etcd acknowledged it (seconds, -1:
  // never), and the TTL past which reads are marked stale. Null: not checked.
  std::function<double()> lease_age_seconds;
  double lease_ttl_seconds = 10;
};

// One log partition as the applier sees it.
struct LaneStats {
  int64_t next = 0;          // the next offset to apply
  int64_t end = -1;          // the log's end as last heard (-1: not yet)
  int64_t checkpointed = 0;  // next, as the last checkpoint on the device says
  // How far behind the log: since when the log has had entries this node has
  // not applied (or the age of the oldest one read and not applied, if more).
  double lag_seconds = 0;
  bool stale = true;
};

struct ApplierStats {
  uint64_t applied = 0;          // entries applied (whatever the write answered)
  uint64_t not_held = 0;         // entries of partitions this node does not hold: skipped
  uint64_t duplicates = 0;       // write IDs applied before: not again
  uint64_t replayed = 0;         // found already applied after a restart: skipped
  uint64_t undecodable = 0;      // entries that could not be read: skipped, logged
  uint64_t apply_failures = 0;   // device trouble applying (retried), damaged records (skipped)
  uint64_t lost_entries = 0;     // offsets the log no longer had when this node needed them
  uint64_t checkpoints = 0;      // checkpoint records written
  uint64_t expired_waiters = 0;  // clients' writes answered InDoubt: not applied here in time
  uint64_t replays = 0;          // entries applied again for a partition catching up (Follow)
  uint64_t rewinds = 0;          // times a log partition was read again for one
  size_t window_ids = 0;
  bool caught_up = false;  // every log partition reached the end it had at the start
  bool log_healthy = false;
  std::vector<LaneStats> lanes;
};

class Applier {
 public:
  // Starts the thread: it opens a profile session, waits for the cluster view
  // to have a map, reads the checkpoints and starts reading the log. `reader`
  // becomes the applier's; `profiles`, `board` and `pending` must outlive it.
  static Result<std::unique_ptr<Applier>> Start(const ApplierOptions& options,
                                                profile::ProfileStore* profiles,
                                                std::unique_ptr<log::LogReader> reader,
                                                const cluster::ViewBoard* board,
                                                PendingWrites* pending);
  ~Applier();  // Stop()
  Applier(const Applier&) = delete;
  Applier& operator=(const Applier&) = delete;

  // Finishes the entries being applied, writes a last checkpoint and joins.
  // Idempotent.
  void Stop();

  // True when reads of `partition` may be behind the log (see above).
  bool Stale(uint32_t partition) const {
    return stale_[partition % options_.log_partitions].load(std::memory_order_relaxed);
  }
  bool caught_up() const { return caught_up_.load(std::memory_order_acquire); }

  // The first offset of `log_partition` not yet applied (every entry before
  // it is applied, or skipped as not held): what a copy of one of its
  // partitions made now reflects at least. -1 before the applier started.
  int64_t AppliedNext(uint32_t log_partition) const {
    return applied_next_[log_partition % options_.log_partitions].load(std::memory_order_acquire);
  }

  // Bootstrapping a partition this node is getting (bootstrap.h): its copy,
  // taken from a replica, reflects every entry of its log partition before
  // `from`. From now on the applier applies the partition's entries from
  // `from` on, although the map does not give it the partition yet (going
  // back in the log when it is already past `from`; entries judged
  // duplicates then stay unapplied), and runs `done` on its thread once it
  // has applied them up to where it was when it took the request and flushed
  // them: OK; NotFound when the log no longer holds `from` (copy again);
  // Unavailable when Unfollow or Stop came first, or the flush failed.
  // Any thread.
  void Follow(uint32_t partition, int64_t from, std::function<void(Status)> done);
  // Applies `partition`'s entries no more unless the map gives it to this
  // node (before its copy is dropped). Any thread; takes effect on the
  // applier's next turn, before any entry of the partition is applied again.
  void Unfollow(uint32_t partition);
  // Partitions followed: from when the applier took the Follow (before it is
  // done) until it took the Unfollow, or the Follow failed; updated before
  // `done` runs. Any thread.
  std::vector<uint16_t> following() const;
  // OK while the applier runs; why not, once it stopped for good (it could
  // not open its session, read its checkpoints, ...): the node then applies
  // nothing, and writes must not wait for it.
  Status failure() const;
  ApplierStats stats() const;

 private:
  Applier(const ApplierOptions& options, profile::ProfileStore* profiles,
          std::unique_ptr<log::LogReader> reader, const cluster::ViewBoard* board,
          PendingWrites* pending);
  class Loop;
  void Run();
  // Stops for good: says why, and answers every waiting write Unavailable.
  void Fail(const Status& why);
  // Answers every Follow not taken yet Unavailable.
  void DropFollowRequests();

  const ApplierOptions options_;
  profile::ProfileStore* const profiles_;
  std::unique_ptr<log::LogReader> reader_;
  const cluster::ViewBoard* const board_;
  PendingWrites* const pending_;
  std::thread thread_;
  int wake_fd_ = -1;  // eventfd: Stop() wakes the thread
  std::atomic<bool> stopping_{false};
  std::unique_ptr<std::atomic<bool>[]> stale_;            // per log partition
  std::unique_ptr<std::atomic<int64_t>[]> applied_next_;  // per log partition

  // Follow/Unfollow requests for the thread, in order.
  struct FollowRequest {
    uint32_t partition = 0;
    bool follow = true;
    int64_t from = 0;
    std::function<void(Status)> done;
  };
  mutable std::mutex follow_mu_;
  std::vector<FollowRequest> follow_requests_;  // guarded by follow_mu_
  std::vector<uint16_t> following_;             // guarded by follow_mu_; written by the thread
  std::atomic<bool> caught_up_{false};
  std::atomic<bool> failed_{false};

  mutable std::mutex stats_mu_;
  ApplierStats stats_;  // guarded by stats_mu_; copied out by the thread each tick
  Status failure_;      // guarded by stats_mu_
};

}  // namespace segstore::replica
