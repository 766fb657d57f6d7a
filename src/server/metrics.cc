#include "server/metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <string_view>
#include <type_traits>
#include <variant>

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
  m->resident_bytes = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long long size = 0, resident = 0;
    if (std::fscanf(f, "%llu %llu", &size, &resident) == 2) {
      m->resident_bytes = resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    }
    std::fclose(f);
  }
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

}  // namespace segstore::server
