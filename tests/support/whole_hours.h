// HourWatch: whether a test crossed a whole hour. The reference workload's
// shortest expiry is the next whole hour (workload.md: `(floor(now / 3600) +
// h) * 3600`, h >= 1), so a reference profile loaded at 16:59:50 loses its
// h = 1 segments at 17:00:00: a test that counts live segments exactly holds
// that count only while the hour it loaded in lasts, and otherwise checks
// the bounds the crossing allows.
#pragma once

#include <chrono>
#include <cstdint>

namespace segstore::testing {

class HourWatch {
 public:
  HourWatch() : hour_(Hour()) {}

  // Whether a whole hour passed since construction (or the last Reset).
  bool Crossed() const { return Hour() != hour_; }
  void Reset() { hour_ = Hour(); }

 private:
  static int64_t Hour() {
    return std::chrono::duration_cast<std::chrono::hours>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  int64_t hour_;
};

}  // namespace segstore::testing
