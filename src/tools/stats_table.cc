#include "tools/stats_table.h"

#include <fmt/format.h>

#include <map>
#include <string_view>
#include <variant>
#include <vector>

namespace segstore::tools {

namespace {

std::string ValueText(const StatEntry& e) {
  if (const auto* u = std::get_if<uint64_t>(&e.value)) return std::to_string(*u);
  if (const auto* d = std::get_if<double>(&e.value)) return fmt::format("{:.6g}", *d);
  return std::get<std::string>(e.value);
}

uint64_t ValueNumber(const StatEntry& e) {
  if (const auto* u = std::get_if<uint64_t>(&e.value)) return *u;
  if (const auto* d = std::get_if<double>(&e.value)) return static_cast<uint64_t>(*d);
  return 0;
}

constexpr std::string_view kRequests = "server.requests.";
constexpr std::string_view kResponses = "server.responses.";
constexpr std::string_view kDuration = "server.request_duration.";

// One row of the operations table.
struct OpRow {
  uint64_t requests = 0;
  uint64_t errors = 0;
  std::map<std::string, std::string> latency;  // "p50_us" -> "55"
};

}  // namespace

std::string FormatStatsTable(const Stats& stats) {
  // Operations in the server's order of first mention.
  std::vector<std::string> op_order;
  std::map<std::string, OpRow> ops;
  auto row = [&](const std::string& op) -> OpRow& {
    auto [it, inserted] = ops.try_emplace(op);
    if (inserted) op_order.push_back(op);
    return it->second;
  };
  std::vector<std::pair<std::string, uint64_t>> errors;  // "get not_found", n
  std::vector<std::string> section_order;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> sections;

  for (const StatEntry& e : stats.entries) {
    const std::string_view name = e.name;
    // Per-operation families (docs/metrics.md): "server.requests.<op>",
    // "server.responses.<op>.<status>", "server.request_duration.<op>.<figure>".
    if (name.starts_with(kRequests)) {
      row(std::string(name.substr(kRequests.size()))).requests = ValueNumber(e);
      continue;
    }
    if (name.starts_with(kResponses)) {
      const std::string_view rest = name.substr(kResponses.size());  // "<op>.<status>"
      const size_t dot = rest.find('.');
      if (dot != std::string_view::npos) {
        const std::string op(rest.substr(0, dot));
        const std::string_view status = rest.substr(dot + 1);
        OpRow& r = row(op);
        if (status != "ok") {
          r.errors += ValueNumber(e);
          if (ValueNumber(e) != 0) {
            errors.emplace_back(op + " " + std::string(status), ValueNumber(e));
          }
        }
        continue;
      }
    }
    if (name.starts_with(kDuration)) {
      const std::string_view rest = name.substr(kDuration.size());  // "<op>.<figure>"
      const size_t dot = rest.find('.');
      if (dot != std::string_view::npos) {
        row(std::string(rest.substr(0, dot))).latency[std::string(rest.substr(dot + 1))] =
            ValueText(e);
        continue;
      }
    }
    const size_t dot = name.find('.');
    const std::string section(dot == std::string_view::npos ? name : name.substr(0, dot));
    const std::string key(dot == std::string_view::npos ? name : name.substr(dot + 1));
    auto [it, inserted] = sections.try_emplace(section);
    if (inserted) section_order.push_back(section);
    it->second.emplace_back(key, ValueText(e));
  }

  std::string out;
  auto line = [&](std::string_view text) {
    out += text;
    out += '\n';
  };
  if (!ops.empty()) {
    line(fmt::format("{:<14}{:>12}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}", "operation",
                     "requests", "errors", "mean_us", "p50_us", "p90_us", "p99_us", "p999_us",
                     "max_us"));
    for (const std::string& op : op_order) {
      const OpRow& r = ops[op];
      auto figure = [&](const char* k) {
        auto it = r.latency.find(k);
        return it == r.latency.end() ? std::string("-") : it->second;
      };
      line(fmt::format("{:<14}{:>12}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}", op, r.requests,
                       r.errors, figure("mean_us"), figure("p50_us"), figure("p90_us"),
                       figure("p99_us"), figure("p999_us"), figure("max_us")));
    }
    line("(service time in the server: from a request read to its answer ready)");
  }
  if (!errors.empty()) {
    line("");
    line("errors by operation and status");
    for (const auto& [what, n] : errors) line(fmt::format("  {:<36}{:>12}", what, n));
  }
  for (const std::string& section : section_order) {
    line("");
    line(section);
    for (const auto& [key, value] : sections[section]) {
      line(fmt::format("  {:<36}{}", key, value));
    }
  }
  return out;
}

}  // namespace segstore::tools
