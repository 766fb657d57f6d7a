// WaitFor: how a test waits for another thread or process, on a condition
// rather than a sleep: polls `done` every `poll` until it holds, and is
// false if it still does not at `timeout` (asked once more then).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace segstore::testing {

inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                    std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

}  // namespace segstore::testing
