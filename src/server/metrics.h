// What segstored reports about itself, gathered at one moment, and its two
// renderings: the stats operation's flat map (proto/PROTOCOL.md, "stats";
// segctl stats) and Prometheus's text exposition format (the admin
// endpoint's /metrics). Both come from one snapshot, so they never disagree.
// I/O-free apart from reading /proc/self for the process figures.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "segstore/messages.h"
#include "segstore/profile.h"
#include "segstore/storage.h"
#include "server/server.h"

namespace segstore::server {

struct MetricsSnapshot {
  std::string version;  // "segstored 0.1.0"
  double uptime_seconds = 0;
  uint64_t pid = 0;
  uint64_t resident_bytes = 0;
  double cpu_user_seconds = 0;
  double cpu_system_seconds = 0;
  // The front end's counters; null when no server reports them. Held by
  // pointer: its latency histograms make it large.
  std::unique_ptr<ServerCounters> server;
  storage::StoreStats storage;
  storage::RecoveryStats recovery;
  profile::SweeperStats sweeper;
  std::vector<StatEntry> config;  // the settings in force, named "config.*"
};

// Fills the process figures (pid, resident set, CPU time) of *m.
void ReadProcessFigures(MetricsSnapshot* m);

// The stats operation's map: "server.*", "latency.<op>.*", "process.*",
// "storage.*", "recovery.*", "sweeper.*", "config.*".
Stats ToStats(const MetricsSnapshot& m);

// Prometheus text format 0.0.4, every metric named segstore_*.
std::string ToPrometheus(const MetricsSnapshot& m);

}  // namespace segstore::server
