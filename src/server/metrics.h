// What segstored reports about itself, gathered at one moment, and its
// renderings, all read from the one metric table (metric_table.h): the stats
// operation's flat map (proto/PROTOCOL.md, "stats"; segctl stats),
// Prometheus's text exposition format (the admin endpoint's /metrics) and
// docs/metrics.md. Both value renderings come from one snapshot, so they
// never disagree. I/O-free apart from reading /proc/self for the process
// figures.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/agent.h"
#include "replica/bootstrap.h"
#include "replica/replicator.h"
#include "segstore/messages.h"
#include "segstore/profile.h"
#include "segstore/storage.h"
#include "server/metric_table.h"
#include "server/server.h"

namespace segstore::server {

// The figures of every metric, as their owners keep them (the metric
// table's collect functions say which field feeds which metric).
struct MetricsSnapshot {
  std::string version;  // "segstored 0.1.0"
  double uptime_seconds = 0;
  uint64_t pid = 0;
  uint64_t resident_bytes = 0;
  // The C allocator's heap (glibc mallinfo2): bytes handed out and not yet
  // freed, and bytes freed but kept (not given back to the kernel).
  uint64_t heap_in_use_bytes = 0;
  uint64_t heap_free_bytes = 0;
  // Trims of the heap so far, and how far they made the resident set fall.
  uint64_t heap_trims = 0;
  uint64_t heap_trimmed_bytes = 0;
  double cpu_user_seconds = 0;
  double cpu_system_seconds = 0;
  // The front end's counters; null when no server reports them. Held by
  // pointer: its latency histograms make it large.
  std::unique_ptr<ServerCounters> server;
  storage::StoreStats storage;
  storage::RecoveryStats recovery;
  profile::SweeperStats sweeper;
  // The profile field name table's highest number (profile/field_names.h):
  // the field names numbered so far.
  uint64_t field_names = 0;
  std::optional<cluster::AgentStats> cluster;        // in a cluster only
  std::optional<replica::ReplicaStats> replica;      // in a cluster with a log only
  std::optional<replica::BootstrapStats> bootstrap;  // in a cluster with a log only
  std::vector<StatEntry> config;                     // the settings in force, named "config.*"
};

// Fills the process figures (pid, resident set, heap, CPU time) of *m.
void ReadProcessFigures(MetricsSnapshot* m);

// The stats operation's map: every metric of the table present in `m`,
// named by its stats name (StatsNamePatterns), then `m.config`.
Stats ToStats(const MetricsSnapshot& m);

// Prometheus text format 0.0.4: every metric of the table present in `m`
// but the stats-only ones, named segstore_<name>.
std::string ToPrometheus(const MetricsSnapshot& m);

// docs/metrics.md: every metric's names in both schemes, kind, unit and
// help text, and the stats naming rule (`segstored --print-metrics-doc`).
std::string MetricsDoc();

}  // namespace segstore::server
