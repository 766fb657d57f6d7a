// PendingWrites: the writes this node sent to the cluster's log whose
// clients wait for their answer, each under the ticket its log entry
// carries. The answer comes from this node's applier once it applied that
// entry (so a read from this node then sees the write), or from the log
// writer when the log did not take it, or, past a deadline, InDoubt: the
// entry is in the log (or may be) but this node did not apply it in time.
//
// Thread-safe: handlers add from their event loops, the applier completes
// from its thread, the log writer fails from its own. Each waiter's callback
// runs exactly once, on whichever thread settled it, outside the lock: it
// must hand the answer to its own loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "replica/write_ids.h"

namespace segstore::replica {

class PendingWrites {
 public:
  using Clock = std::chrono::steady_clock;
  using Done = std::function<void(const WriteAnswer&)>;

  // Waits, settled at `deadline` at the latest. Returns the waiter's ticket
  // (never 0), for the log entry that answers it.
  uint64_t Add(Clock::time_point deadline, Done done);
  // The waiter with `ticket`, if still waiting, gets `answer`.
  void Settle(uint64_t ticket, const WriteAnswer& answer);
  // Every waiter past its deadline at `now` gets `answer`; returns how many.
  size_t Expire(Clock::time_point now, const WriteAnswer& answer);
  // Every waiter gets `answer` (shutting down).
  void FailAll(const WriteAnswer& answer);
  size_t size() const;

 private:
  struct Waiter {
    Clock::time_point deadline;
    Done done;
  };

  mutable std::mutex mu_;
  uint64_t next_ticket_ = 1;                      // guarded by mu_
  std::unordered_map<uint64_t, Waiter> waiters_;  // guarded by mu_
};

}  // namespace segstore::replica
