// Clock: where every layer reads the current time, in Unix seconds, so tests
// can move time forward instead of sleeping. Implementations are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace segstore {

// Unix time in whole seconds. 32 bits last until 2106, the range of the
// on-device format.
using UnixSeconds = uint32_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual UnixSeconds Now() const = 0;
  // The process-wide wall clock. Never null; lives for the whole process.
  static Clock* System();
};

// A clock that moves only when told to. For tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(UnixSeconds now) : now_(now) {}
  UnixSeconds Now() const override { return now_.load(std::memory_order_relaxed); }
  void Set(UnixSeconds now) { now_.store(now, std::memory_order_relaxed); }
  void Advance(uint32_t seconds) { now_.fetch_add(seconds, std::memory_order_relaxed); }

 private:
  std::atomic<UnixSeconds> now_;
};

}  // namespace segstore
