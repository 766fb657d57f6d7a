#include "server/metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <string_view>
#include <type_traits>
#include <variant>

#include "server/heap.h"

namespace segstore::server {

namespace {

// Latency histogram bucket bounds: microseconds, and as Prometheus writes
// them (seconds).
struct LatencyBound {
  uint64_t us;
  const char* le;
};
constexpr LatencyBound kLatencyBounds[] = {
    {50, "5e-05"},        {100, "0.0001"},  {250, "0.00025"}, {500, "0.0005"},
    {1'000, "0.001"},     {2'500, "0.0025"}, {5'000, "0.005"}, {10'000, "0.01"},
    {25'000, "0.025"},    {50'000, "0.05"},  {100'000, "0.1"}, {250'000, "0.25"},
    {500'000, "0.5"},     {1'000'000, "1"},  {2'500'000, "2.5"}, {5'000'000, "5"},
    {10'000'000, "10"},
};

// Writes metric families in Prometheus text format 0.0.4.
class PromWriter {
 public:
  // HELP and TYPE lines; every sample of the family follows.
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP segstore_{} {}\n# TYPE segstore_{} {}\n",
                   name, help, name, type);
  }
  template <typename V>
  void Sample(std::string_view name, std::string_view labels, V value) {
    out_ += "segstore_";
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    if constexpr (std::is_floating_point_v<V>) {
      fmt::format_to(std::back_inserter(out_), "{}", static_cast<double>(value));
    } else {
      fmt::format_to(std::back_inserter(out_), "{}", static_cast<uint64_t>(value));
    }
    out_ += '\n';
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// A label value with \, " and newline escaped.
std::string LabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

void ReadProcessFigures(MetricsSnapshot* m) {
  m->pid = static_cast<uint64_t>(::getpid());
  const HeapFigures heap = ReadHeapFigures();
  m->resident_bytes = heap.resident_bytes;
  m->heap_in_use_bytes = heap.in_use_bytes;
  m->heap_free_bytes = heap.free_bytes;
  const HeapTrimCounts trims = ReadHeapTrimCounts();
  m->heap_trims = trims.trims;
  m->heap_trimmed_bytes = trims.released_bytes;
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  m->cpu_user_seconds = seconds(usage.ru_utime);
  m->cpu_system_seconds = seconds(usage.ru_stime);
}

namespace {

std::string_view PrometheusType(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kHistogram:
      return "histogram";
    case MetricKind::kGauge:
    case MetricKind::kInfo:
    case MetricKind::kStatsOnly:
      break;
  }
  return "gauge";
}

// `op="get",status="ok"`: a series' labels as Prometheus writes them.
std::string PrometheusLabels(const MetricDef& def, const MetricSeries& s) {
  std::string out;
  for (size_t i = 0; i < def.labels.size(); ++i) {
    if (def.labels[i].empty()) continue;
    if (!out.empty()) out += ',';
    fmt::format_to(std::back_inserter(out), "{}=\"{}\"", def.labels[i], LabelValue(s.labels[i]));
  }
  return out;
}

// ".get.ok": a series' labels as components of a stats name.
std::string StatsLabels(const MetricDef& def, const MetricSeries& s) {
  std::string out;
  for (size_t i = 0; i < def.labels.size(); ++i) {
    if (def.labels[i].empty()) continue;
    out += '.';
    out += s.labels[i];
  }
  return out;
}

bool Labelled(const MetricDef& def) { return !def.labels[0].empty(); }

}  // namespace

Stats ToStats(const MetricsSnapshot& m) {
  Stats out;
  auto add = [&](std::string name, MetricValue v) {
    if (auto* u = std::get_if<uint64_t>(&v)) {
      out.entries.push_back({std::move(name), *u});
    } else if (auto* d = std::get_if<double>(&v)) {
      out.entries.push_back({std::move(name), *d});
    } else if (auto* s = std::get_if<std::string>(&v)) {
      out.entries.push_back({std::move(name), std::move(*s)});
    }
  };
  std::vector<MetricSeries> series;
  for (const MetricDef& def : MetricTable()) {
    series.clear();
    def.collect(m, &series);
    if (series.empty()) continue;
    const std::string stem = StatsStem(def);
    if (def.kind == MetricKind::kInfo) {
      // Each fact a string of its own: "server.version".
      for (size_t i = 0; i < def.labels.size(); ++i) {
        if (def.labels[i].empty()) continue;
        add(fmt::format("{}.{}", SectionName(def.section), def.labels[i]), series[0].labels[i]);
      }
      continue;
    }
    if (def.kind == MetricKind::kHistogram) {
      // A summary in microseconds, of each series observed at all.
      for (const MetricSeries& s : series) {
        const HistogramValue& hv = std::get<HistogramValue>(s.value);
        const Histogram& h = *hv.histogram;
        if (h.count() == 0) continue;
        const MetricValue figures[] = {
            h.count(),
            static_cast<double>(hv.sum_us) / static_cast<double>(h.count()),
            h.Percentile(0.50),
            h.Percentile(0.90),
            h.Percentile(0.99),
            h.Percentile(0.999),
            h.max()};
        static_assert(std::size(figures) == std::size(kHistogramFigures));
        const std::string prefix = stem + StatsLabels(def, s) + ".";
        for (size_t i = 0; i < std::size(figures); ++i) {
          add(prefix + std::string(kHistogramFigures[i]), figures[i]);
        }
      }
      continue;
    }
    if (Labelled(def) && def.kind == MetricKind::kCounter) {
      // The family's total under its name alone: "server.requests".
      uint64_t sum = 0;
      double fsum = 0;
      bool floating = false;
      for (const MetricSeries& s : series) {
        if (const auto* u = std::get_if<uint64_t>(&s.value)) {
          sum += *u;
          fsum += static_cast<double>(*u);
        } else if (const auto* d = std::get_if<double>(&s.value)) {
          fsum += *d;
          floating = true;
        }
      }
      add(stem, floating ? MetricValue(fsum) : MetricValue(sum));
    }
    for (MetricSeries& s : series) add(stem + StatsLabels(def, s), std::move(s.value));
  }
  for (const StatEntry& e : m.config) out.entries.push_back(e);
  return out;
}

std::string ToPrometheus(const MetricsSnapshot& m) {
  PromWriter w;
  std::vector<MetricSeries> series;
  for (const MetricDef& def : MetricTable()) {
    if (def.kind == MetricKind::kStatsOnly) continue;
    series.clear();
    def.collect(m, &series);
    if (series.empty()) continue;
    w.Family(def.name, PrometheusType(def.kind), def.help);
    for (const MetricSeries& s : series) {
      const std::string labels = PrometheusLabels(def, s);
      if (const auto* hv = std::get_if<HistogramValue>(&s.value)) {
        const Histogram& h = *hv->histogram;
        const std::string sep = labels.empty() ? "" : ",";
        const std::string bucket = std::string(def.name) + "_bucket";
        for (const LatencyBound& b : kLatencyBounds) {
          w.Sample(bucket, fmt::format("{}{}le=\"{}\"", labels, sep, b.le), h.CountAtMost(b.us));
        }
        w.Sample(bucket, fmt::format("{}{}le=\"+Inf\"", labels, sep), h.count());
        w.Sample(std::string(def.name) + "_sum", labels, static_cast<double>(hv->sum_us) / 1e6);
        w.Sample(std::string(def.name) + "_count", labels, h.count());
      } else if (const auto* u = std::get_if<uint64_t>(&s.value)) {
        w.Sample(def.name, labels, *u);
      } else if (const auto* d = std::get_if<double>(&s.value)) {
        w.Sample(def.name, labels, *d);
      }
    }
  }
  return w.Take();
}

namespace {

// Text for a Markdown table cell.
std::string Cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string Codes(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ", ";
    out += "`" + n + "`";
  }
  return out;
}

}  // namespace

std::string MetricsDoc() {
  std::string out = R"(# segstored's metrics

<!-- Generated from src/server/metric_table.cc by `segstored --print-metrics-doc`:
     do not edit; tests/server/metrics_test.cc fails when the two differ. -->

segstored reports what it does two ways, from one table
(`src/server/metric_table.cc`), so the two always agree:

- **Prometheus** text on the admin endpoint's `/metrics` (README, "Monitor"):
  every name starts with `segstore_`, counters end in `_total`, and a
  histogram is its `_bucket{le}`, `_sum` and `_count` series, in seconds.
- **The stats operation** (proto/PROTOCOL.md; `segctl stats`, `--json` for
  scripts): one flat map from dotted names to values (`u64`, `float64` or
  `str`), in the order of the table below.

## Stats names

A metric's stats name follows from its Prometheus name by one rule:

1. its section (`server`, `process`, `storage`, `recovery`, `sweeper`) and a dot;
2. then the Prometheus name without `segstore_`, without the section's word
   at its start (`process_`, `store_`, `recovery_`, `sweeper_`), and without
   `_total` at its end: `segstore_sweeper_records_visited_total` is
   `sweeper.records_visited`;
3. then one component per label value, in the order of the labels:
   `server.responses.get.not_found`; a labelled counter also has its total
   under the name alone (`server.requests`);
4. a histogram is summarized, for each series with at least one observation,
   in microseconds: the name without its unit, the label values, then one of
   `count`, `mean_us`, `p50_us`, `p90_us`, `p99_us`, `p999_us`, `max_us`
   (percentiles within 3%): `server.request_duration.get.p99_us`;
5. an info metric's labels are strings of their own: `server.version`.

A few names appear only when they apply (the TLS certificate's expiry with
TLS; the write error after one). After the metrics, the stats map lists the
settings in force as `config.<section>.<key>`, named as in
config/segstored.toml. Names are added over time: a client must not rely on
one being present.

## Metrics

)";
  out += "| Prometheus | stats | kind | unit | meaning |\n";
  out += "| --- | --- | --- | --- | --- |\n";
  for (const MetricDef& def : MetricTable()) {
    std::string prometheus = "-";
    if (def.kind != MetricKind::kStatsOnly) {
      prometheus = "`segstore_" + std::string(def.name);
      std::string labels;
      for (std::string_view label : def.labels) {
        if (label.empty()) continue;
        if (!labels.empty()) labels += ',';
        labels += label;
      }
      if (!labels.empty()) prometheus += "{" + labels + "}";
      prometheus += "`";
    }
    out += fmt::format("| {} | {} | {} | {} | {} |\n", prometheus, Codes(StatsNamePatterns(def)),
                       KindName(def.kind), UnitName(def.unit), Cell(def.help));
  }
  out += "\n## Labels\n\n";
  out += "| label | meaning | values |\n";
  out += "| --- | --- | --- |\n";
  for (const MetricLabelDef& label : MetricLabels()) {
    out += fmt::format("| `{}` | {} | {} |\n", label.name, Cell(label.meaning),
                       label.values.empty() ? std::string("text") : Codes(label.values));
  }
  return out;
}

}  // namespace segstore::server
