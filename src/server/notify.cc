#include "server/notify.h"

#include <systemd/sd-daemon.h>

#include <string>

namespace segstore::server {

bool Notify(std::string_view state) {
  const std::string s(state);
  return sd_notify(0, s.c_str()) > 0;
}

std::optional<std::chrono::microseconds> WatchdogInterval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec);
}

}  // namespace segstore::server
