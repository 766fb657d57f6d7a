// Bootstrapping: how a node gets the partitions the map is moving to it
// (ClusterMap::incoming). For each, one after another, the Bootstrapper
//
// 1. drops whatever this node still holds of the partition (a copy from an
//    earlier time it held it, or an attempt cut short);
// 2. copies the partition's records, as stored, from a node that holds it,
//    page by page (copy_partition, proto/PROTOCOL.md), keeping the first
//    page's `next`: every record copied reflects each entry of the log
//    partition before it;
// 3. has the applier follow the partition from that offset
//    (Applier::Follow: reading its log partition again when it is already
//    past it), and waits until it applied as far as it was;
// 4. reports the partition ready (the agent puts it in the node's
//    registration), so the controller makes this node one of its replicas.
//
// A copy that fails (its source went away, the log no longer holds the
// offset) starts over, from another replica. Partitions this node neither
// holds nor is getting are dropped `drop_after` they left it, and at start.
//
// ReadPartitionPage is the other side: one page of a partition this node
// holds, for a copy_partition request.
//
// Thread-safety: Start/Stop from one thread; stats from any.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/view.h"
#include "replica/applier.h"
#include "segstore/messages.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::replica {

// Where a copy's pages come from: another node (the server's client
// library, in segstored; tests: in process). Called on the bootstrapper's
// thread; may block up to its own timeout.
class PartitionSource {
 public:
  virtual ~PartitionSource() = default;
  virtual Result<CopyPartitionResponse> Fetch(const ClusterNode& node,
                                              const CopyPartitionRequest& request) = 0;
};

struct BootstrapOptions {
  uint32_t page_bytes = 1u << 20;
  // After a failed copy, the next attempt of that partition waits this long.
  std::chrono::milliseconds retry_interval{1000};
  // A partition this node neither holds nor is getting is dropped this long
  // after it left (reads of it may still be finishing).
  std::chrono::milliseconds drop_after{10000};
};

struct BootstrapStats {
  uint32_t incoming = 0;  // partitions the map is moving to this node
  uint32_t ready = 0;     // of which copied and caught up
  uint64_t partitions_copied = 0;
  uint64_t records_copied = 0;
  uint64_t bytes_copied = 0;
  double copy_seconds = 0;  // spent copying (pages fetched and written)
  uint64_t copy_failures = 0;
  uint64_t partitions_dropped = 0;
  uint64_t records_dropped = 0;
};

class Bootstrapper {
 public:
  // `report_ready` gets the ready partitions and the revision of the map
  // they are incoming in, each time either changes (on the bootstrapper's
  // thread). Everything passed must outlive the bootstrapper.
  static Result<std::unique_ptr<Bootstrapper>> Start(
      const BootstrapOptions& options, profile::ProfileStore* profiles, Applier* applier,
      const cluster::ViewBoard* board, PartitionSource* source,
      std::function<void(std::vector<uint16_t>, uint64_t)> report_ready);
  ~Bootstrapper();  // Stop()
  Bootstrapper(const Bootstrapper&) = delete;
  Bootstrapper& operator=(const Bootstrapper&) = delete;

  // Stops (a copy in progress ends where it is; it starts over after a
  // restart). Idempotent.
  void Stop();
  BootstrapStats stats() const;

 private:
  Bootstrapper(const BootstrapOptions& options, profile::ProfileStore* profiles, Applier* applier,
               const cluster::ViewBoard* board, PartitionSource* source,
               std::function<void(std::vector<uint16_t>, uint64_t)> report_ready);
  class Loop;
  void Run();
  bool Sleep(std::chrono::milliseconds d);  // false when stopping

  const BootstrapOptions options_;
  profile::ProfileStore* const profiles_;
  Applier* const applier_;
  const cluster::ViewBoard* const board_;
  PartitionSource* const source_;
  const std::function<void(std::vector<uint16_t>, uint64_t)> report_ready_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;     // guarded by mu_
  BootstrapStats stats_;  // guarded by mu_
  std::atomic<bool> stopping_{false};
};

// A record of a partition, as ReadPartitionRecords read it, with its index
// tag (the page's order).
struct ListedRecord {
  uint32_t tag = 0;
  storage::Record record;
};
struct PartitionRecords {
  std::vector<ListedRecord> records;  // in tag order; the node's reserved keys left out
  uint64_t cursor = 0;                // past the last tag listed; kPartitionListEnd: done
};

// The records of `partition` from `cursor` on (storage::Store::ListPartition's
// tags), listed until their stored bytes reach `list_bytes` (at least one
// tag's, when any is left; at most 1,024 records), each read at once (one
// version of each record). A page whose records moved while read
// (defragmentation) is read again, a few times, then Busy; a device error
// is answered as it is. At least one record unless the partition is
// finished. Runs on `worker`'s thread; `done` runs there, never inside the
// call.
void ReadPartitionRecords(storage::Store& store, storage::Worker& worker, uint32_t partition,
                          uint64_t cursor, uint32_t list_bytes,
                          std::function<void(Result<PartitionRecords>)> done);

// How many of `records` (ReadPartitionRecords') a page answers: whole tags
// (records sharing a tag go together) while the sum of size_of(i) stays
// within `budget`, the first tag's whatever their size. When that is fewer
// than all, *cursor becomes the first tag left out (where the next page
// starts); otherwise it is left as it is.
template <typename SizeOf>
size_t CutAtTags(const std::vector<ListedRecord>& records, size_t budget, SizeOf size_of,
                 uint64_t* cursor) {
  size_t used = 0;
  size_t i = 0;
  while (i < records.size()) {
    size_t end = i;
    size_t group = 0;
    while (end < records.size() && records[end].tag == records[i].tag) group += size_of(end++);
    if (i > 0 && used + group > budget) {
      *cursor = records[i].tag;
      return i;
    }
    used += group;
    i = end;
  }
  return i;
}

// One page of `partition` as this node stores it, for copy_partition:
// records from `cursor` on (storage::Store::ListPartition's tags), about
// `max_bytes` of them (at least one when any is left), the node's reserved
// keys left out, and the cursor of the next page. `next` is left for the
// caller to fill in: the applier's AppliedNext, read before this is called.
// Runs on `worker`'s thread; `done` runs there, never inside the call.
// `profiles` (null: bodies as stored) makes each body portable
// (ProfileStore::PortableBody): another node's name table is not this one's.
void ReadPartitionPage(storage::Store& store, const profile::ProfileStore* profiles,
                       storage::Worker& worker, uint32_t partition, uint64_t cursor,
                       uint32_t max_bytes, std::function<void(Result<CopyPartitionResponse>)> done);

}  // namespace segstore::replica
