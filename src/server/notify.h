// The daemon's side of systemd's readiness protocol (sd_notify(3)): READY,
// STATUS, EXTEND_TIMEOUT_USEC, STOPPING and WATCHDOG messages to the socket
// named by $NOTIFY_SOCKET. Without that variable every call does nothing, so
// the daemon runs the same by hand, in a container or under systemd.
// Thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace segstore::server {

// Sends `state` (newline-separated KEY=VALUE lines). Returns false when there
// is no notify socket or the send failed.
bool Notify(std::string_view state);
// The watchdog interval systemd asked for (WATCHDOG_USEC for this process),
// if any.
std::optional<std::chrono::microseconds> WatchdogInterval();

}  // namespace segstore::server
