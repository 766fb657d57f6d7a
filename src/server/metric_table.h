// The one table of everything segstored reports about itself: each metric
// is declared once (its name, kind, unit, help text and where its value
// comes from) in metric_table.cc, and every rendering reads that table: the
// Prometheus text of /metrics, the stats operation's flat map, and
// docs/metrics.md (`segstored --print-metrics-doc`). metrics.h renders.
//
// A metric has one name, its Prometheus family without `segstore_`. Its
// stats name follows from that name by one rule (StatsStem, and
// docs/metrics.md spells the rule out), so the two never drift apart.
//
// The table is for naming and rendering only: values are read from a
// MetricsSnapshot when a rendering is asked for, never looked up on the
// request path (the front end counts in per-loop relaxed atomics,
// connection.h). Immutable; any thread may read it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/histogram.h"
#include "segstore/status.h"

namespace segstore::server {

struct MetricsSnapshot;

// Where a metric belongs: the first component of its stats name, and the
// word its Prometheus name may start with (dropped from the stats name).
enum class MetricSection : uint8_t {
  kServer,
  kProcess,
  kStorage,
  kRecovery,
  kSweeper,
  kCluster,
  kReplica,
};

enum class MetricKind : uint8_t {
  kCounter,    // only ever grows; the Prometheus name ends in _total
  kGauge,      // a level that goes up and down
  kHistogram,  // observations in microseconds, by bucket (Prometheus: in seconds)
  kInfo,       // string facts as labels of one series of value 1 (segstore_info)
  kStatsOnly,  // a string or identifier Prometheus has no series for: stats only
};

enum class MetricUnit : uint8_t { kNone, kBytes, kSeconds };

// A histogram's observations, in microseconds, and their sum.
struct HistogramValue {
  const Histogram* histogram = nullptr;
  uint64_t sum_us = 0;
};

using MetricValue = std::variant<uint64_t, double, std::string, HistogramValue>;

// One series of a metric: the values of its labels (in the order of
// MetricDef::labels) and its value (an info metric's value is 1).
struct MetricSeries {
  std::array<std::string, 2> labels;
  MetricValue value;
};

// Fills *out with a metric's series from the snapshot; none when the metric
// is absent from it (no front end, no TLS certificate, no write error).
using CollectSeries = void (*)(const MetricsSnapshot& m, std::vector<MetricSeries>* out);

struct MetricDef {
  MetricSection section;
  MetricKind kind;
  // The Prometheus family without "segstore_": "connections_accepted_total".
  std::string_view name;
  MetricUnit unit;
  // One sentence or two; Prometheus's HELP line and the documentation.
  std::string_view help;
  CollectSeries collect;
  // Label names; empty ones unused. An info metric's labels are its facts.
  std::array<std::string_view, 2> labels = {};
};

// Every metric, in the order both renderings list them.
std::span<const MetricDef> MetricTable();

// The label names the table uses, what each means and its values.
struct MetricLabelDef {
  std::string_view name;
  std::string_view meaning;
  std::vector<std::string> values;  // empty: free text (an info label)
};
std::vector<MetricLabelDef> MetricLabels();

// "server", "process", "storage", "recovery", "sweeper", "cluster", "replica".
std::string_view SectionName(MetricSection section);
// "counter", "gauge", "histogram", "info", "stats only".
std::string_view KindName(MetricKind kind);
// "", "bytes", "seconds".
std::string_view UnitName(MetricUnit unit);

// The stats name of a metric, before any label values: its section, a dot,
// then its name without the section's word at the start ("process_",
// "store_", "recovery_", "sweeper_"), without "_total" at the end, and for a
// histogram without its unit (its figures carry it: p99_us). Prometheus
// "segstore_sweeper_records_visited_total" is stats "sweeper.records_visited".
std::string StatsStem(const MetricDef& def);

// The figures of a histogram series in the stats map, after
// "<stem>.<label values>.": microseconds but the count (percentiles within 3%).
inline constexpr std::string_view kHistogramFigures[] = {"count",  "mean_us", "p50_us", "p90_us",
                                                         "p99_us", "p999_us", "max_us"};

// The stats names a metric renders as, label values and histogram figures
// written <op>, <status>, <figure>: {"server.requests", "server.requests.<op>"}.
// The rule in full; docs/metrics.md lists these.
std::vector<std::string> StatsNamePatterns(const MetricDef& def);

// Label values: an operation slot's name (proto::OpSlot; "unknown" for codes
// outside the table), and a status in snake case ("ok", "not_found",
// "io_error").
std::string OpLabel(size_t slot);
// A RESP command slot's label (resp_commands.h): "seg_get", "unknown".
std::string RespCommandLabel(size_t slot);
std::string StatusLabel(Status::Code code);

}  // namespace segstore::server
