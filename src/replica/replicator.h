// Replicator: a cluster node's link to the cluster's log (issue 18). Writes
// go through it: Submit turns a client's write into a log entry (entry.h),
// appends it to the log partition of its user, and answers once this node's
// own Applier (applier.h) applied it, with what it answered, so a read from
// this node sees the write. It owns the log writer, the table of waiting
// writes and the applier.
//
// Thread-safety: Start/Stop from one thread; Submit, Stale, caught_up and
// stats from any. Submit's callback runs once, on some thread of the
// replicator's (the applier's or the log writer's): it must hand the answer
// to its own event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cluster/view.h"
#include "log/log.h"
#include "replica/applier.h"
#include "replica/entry.h"
#include "replica/pending.h"
#include "segstore/profile.h"

namespace segstore::replica {

struct ReplicaOptions {
  log::LogOptions log;
  ApplierOptions applier;  // its log_partitions is log.partitions
  // A write the log took but this node did not apply within this is
  // answered InDoubt. Longer than the log's append timeout, so that a write
  // the log refused is answered LogUnavailable first.
  std::chrono::milliseconds apply_timeout{10000};
  // A passive cluster's node (a second datacenter): it applies the log
  // another cluster writes and writes nothing to it. No writer is opened;
  // Submit answers ReadOnly.
  bool passive = false;
};

struct ReplicaStats {
  log::LogWriterStats writer;
  ApplierStats applier;
  uint64_t submitted = 0;
  uint64_t log_refused = 0;  // answered LogUnavailable
  uint64_t in_doubt = 0;     // answered InDoubt (log timeout after sending, or not applied in time)
  size_t waiting = 0;        // writes waiting for their answer now
};

// What a passive node answers a write: ReadOnly, saying where writes go.
Status PassiveRefusal();

class Replicator {
 public:
  // Opens the log (a writer and a reader; Unavailable when it cannot be
  // reached, InvalidArgument when its topic has another partition count)
  // and starts the applier. `profiles` and `board` must outlive it.
  static Result<std::unique_ptr<Replicator>> Start(const ReplicaOptions& options,
                                                   profile::ProfileStore* profiles,
                                                   const cluster::ViewBoard* board);
  // Opens on a writer and reader the caller made (tests: another engine);
  // `writer` is null when options.passive.
  static Result<std::unique_ptr<Replicator>> Start(const ReplicaOptions& options,
                                                   profile::ProfileStore* profiles,
                                                   const cluster::ViewBoard* board,
                                                   std::unique_ptr<log::LogWriter> writer,
                                                   std::unique_ptr<log::LogReader> reader);
  ~Replicator();  // Stop()
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Stops the applier (after a last checkpoint) and the writer; writes still
  // waiting are answered Unavailable ("shutting down"). Idempotent.
  void Stop();

  // Sends `entry` (its write_id made up when empty; its request's own
  // write_id left empty) to the log. `done` gets what this node's applier
  // answered; LogUnavailable when the log did not take it (nothing was
  // written); InDoubt when the log may have taken it but did not say, or
  // this node did not apply it within apply_timeout; Unavailable, at once,
  // when the applier stopped for good or the replicator is stopping;
  // ReadOnly, at once, when passive.
  void Submit(WriteEntry entry, PendingWrites::Done done);
  bool passive() const { return options_.passive; }

  bool Stale(uint32_t partition) const { return applier_->Stale(partition); }
  bool caught_up() const { return applier_->caught_up(); }
  uint32_t log_partitions() const { return options_.log.partitions; }
  // The applier (bootstrapping and copy_partition use it directly).
  Applier* applier() const { return applier_.get(); }
  ReplicaStats stats() const;

 private:
  explicit Replicator(const ReplicaOptions& options) : options_(options) {}

  const ReplicaOptions options_;
  PendingWrites pending_;
  // Stop() takes it away while stats() may read it; Submit is not called
  // after Stop (the front end stops first) and reads it without the lock.
  mutable std::mutex writer_mu_;
  std::unique_ptr<log::LogWriter> writer_;
  std::unique_ptr<Applier> applier_;
  std::atomic<uint64_t> submitted_{0};
  std::atomic<uint64_t> log_refused_{0};
  std::atomic<uint64_t> in_doubt_{0};
  std::atomic<uint64_t> id_counter_{0};
  // Random per start: the high half of made-up write IDs (which never
  // repeat) and the origin of this node's log entries.
  uint64_t id_prefix_ = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace segstore::replica
