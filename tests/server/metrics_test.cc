// The renderings of a MetricsSnapshot: the stats operation's map and the
// Prometheus text. The Prometheus text is checked line by line against the
// exposition format's grammar, and its histograms for consistency. Then the
// metric table they both read: every metric in both renderings with the same
// values, names unique, stats names by the one rule, docs/metrics.md current.

#include "server/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <variant>

#include "proto/protocol.h"
#include "server/glibc_heap.h"

namespace segstore::server {
namespace {

constexpr auto kGet = static_cast<uint8_t>(proto::Op::kGet);
constexpr auto kUpsert = static_cast<uint8_t>(proto::Op::kUpsert);

MetricsSnapshot Sample() {
  MetricsSnapshot m;
  m.version = "segstored 9.9 \"test\"";
  m.uptime_seconds = 12.5;
  m.pid = 42;
  m.resident_bytes = 1 << 20;
  m.server = std::make_unique<ServerCounters>();
  ServerCounters& c = *m.server;
  c.connections_open = 3;
  c.requests = 1003;
  c.requests_by_op[kGet] = 1000;
  c.requests_by_op[kUpsert] = 2;
  c.error_responses = 4;
  const size_t get = proto::OpSlot(kGet);
  const size_t upsert = proto::OpSlot(kUpsert);
  c.responses[get][0] = 997;
  c.responses[get][static_cast<size_t>(Status::Code::kNotFound)] = 3;
  c.responses[upsert][static_cast<size_t>(Status::Code::kUnavailable)] = 1;
  c.responses[upsert][0] = 1;
  c.responses[get][static_cast<size_t>(Status::Code::kIOError)] = 2;
  c.responses[get][static_cast<size_t>(Status::Code::kDeviceFull)] = 1;
  for (uint64_t us = 1; us <= 1000; ++us) {
    c.latency_us[get].Record(us * 10);  // 10 us .. 10 ms
    c.latency_sum_us[get] += us * 10;
  }
  c.latency_us[upsert].Record(70);
  c.latency_sum_us[upsert] = 70;
  m.storage.io_backend = "io_uring";
  m.storage.blocks_total = 63;
  m.storage.blocks_free = 60;
  m.storage.index_entries = 77;
  m.storage.write_error = "IOError: pwrite failed";
  m.recovery.seconds = 0.25;
  m.sweeper.segments_removed = 9;
  m.config.push_back({"config.server.listen", std::string("127.0.0.1:7700")});
  return m;
}

std::map<std::string, decltype(StatEntry::value)> AsMap(const Stats& s) {
  std::map<std::string, decltype(StatEntry::value)> out;
  for (const StatEntry& e : s.entries) {
    EXPECT_TRUE(out.emplace(e.name, e.value).second) << "duplicate " << e.name;
  }
  return out;
}

// The process figures come from the running process: the heap figures move
// with what it allocates and frees.
TEST(MetricsTest, ProcessFiguresFollowTheHeap) {
  SKIP_UNLESS_ON_GLIBC_HEAP();
  MetricsSnapshot before;
  ReadProcessFigures(&before);
  EXPECT_GT(before.resident_bytes, 0u);
  EXPECT_GT(before.heap_in_use_bytes, 0u);
  constexpr size_t kHeld = 8 << 20;
  auto held = std::make_unique<char[]>(kHeld);
  std::memset(held.get(), 1, kHeld);
  MetricsSnapshot during;
  ReadProcessFigures(&during);
  EXPECT_GE(during.heap_in_use_bytes, before.heap_in_use_bytes + kHeld);
  held.reset();
  MetricsSnapshot after;
  ReadProcessFigures(&after);
  EXPECT_LE(after.heap_in_use_bytes + kHeld, during.heap_in_use_bytes);
  EXPECT_EQ(after.pid, static_cast<uint64_t>(::getpid()));
}

TEST(MetricsTest, StatsCarryResponsesByStatusAndLatencyPercentiles) {
  const auto stats = AsMap(ToStats(Sample()));
  auto u64 = [&](const std::string& name) -> uint64_t {
    auto it = stats.find(name);
    if (it == stats.end()) {
      ADD_FAILURE() << "no " << name;
      return 0;
    }
    return std::get<uint64_t>(it->second);
  };
  EXPECT_EQ(u64("server.requests"), 1003u);  // the family's total
  EXPECT_EQ(u64("server.requests.get"), 1000u);
  EXPECT_EQ(u64("server.requests.unknown"), 1u);
  EXPECT_EQ(u64("server.responses.get.ok"), 997u);
  EXPECT_EQ(u64("server.responses.get.not_found"), 3u);
  EXPECT_EQ(u64("server.responses.upsert.unavailable"), 1u);
  EXPECT_EQ(u64("server.responses.get.io_error"), 2u);  // not "i_o_error"
  EXPECT_EQ(u64("server.responses.get.device_full"), 1u);
  EXPECT_EQ(u64("server.responses.ping.ok"), 0u);  // every operation's ok, served or not
  EXPECT_EQ(stats.count("server.responses.ping.not_found"), 0u);  // none happened
  EXPECT_EQ(u64("server.responses"), 997u + 3 + 1 + 1 + 2 + 1);
  EXPECT_EQ(u64("server.request_duration.get.count"), 1000u);
  EXPECT_NEAR(static_cast<double>(u64("server.request_duration.get.p50_us")), 5000, 5000 * 0.03);
  EXPECT_NEAR(static_cast<double>(u64("server.request_duration.get.p99_us")), 9900, 9900 * 0.03);
  EXPECT_EQ(u64("server.request_duration.get.max_us"), 10000u);
  EXPECT_DOUBLE_EQ(std::get<double>(stats.at("server.request_duration.get.mean_us")), 5005.0);
  // Never served: not summarized.
  EXPECT_EQ(stats.count("server.request_duration.ping.count"), 0u);
  EXPECT_EQ(u64("storage.writes_refused"), 1u);
  EXPECT_EQ(std::get<std::string>(stats.at("storage.write_error")), "IOError: pwrite failed");
  EXPECT_EQ(std::get<std::string>(stats.at("server.version")), "segstored 9.9 \"test\"");
  EXPECT_EQ(std::get<std::string>(stats.at("server.io_backend")), "io_uring");
  EXPECT_EQ(std::get<std::string>(stats.at("config.server.listen")), "127.0.0.1:7700");
  EXPECT_EQ(u64("sweeper.segments_removed"), 9u);
  // The settings come last.
  EXPECT_EQ(ToStats(Sample()).entries.back().name, "config.server.listen");
}

TEST(MetricsTest, StatsWithoutAServerHaveNoServerCounters) {
  MetricsSnapshot m = Sample();
  m.server.reset();
  const auto stats = AsMap(ToStats(m));
  EXPECT_EQ(stats.count("server.requests"), 0u);
  EXPECT_EQ(stats.count("server.connections_open"), 0u);
  EXPECT_EQ(stats.count("server.request_duration.get.count"), 0u);
  EXPECT_EQ(stats.count("server.version"), 1u);
  EXPECT_EQ(stats.count("storage.index_entries"), 1u);
  const std::string text = ToPrometheus(m);
  EXPECT_EQ(text.find("segstore_requests_total"), std::string::npos);
  EXPECT_NE(text.find("segstore_index_entries 77\n"), std::string::npos);
}

// Every line is a HELP or TYPE comment or a sample of a declared family, and
// every sample value parses.
TEST(MetricsTest, PrometheusTextFollowsTheExpositionFormat) {
  const std::string text = ToPrometheus(Sample());
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  const std::regex help(R"(# HELP (segstore_[a-z_]+) \S.*)");
  const std::regex type(R"(# TYPE (segstore_[a-z_]+) (counter|gauge|histogram))");
  const std::regex sample(
      R"re((segstore_[a-z_]+)(\{([a-z_]+="([^"\\]|\\.)*")(,[a-z_]+="([^"\\]|\\.)*")*\})? (-?[0-9.e+-]+|\+Inf))re");
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      EXPECT_TRUE(helped.insert(m[1]).second) << "two HELP lines for " << m[1];
    } else if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(types.emplace(m[1], m[2]).second) << "two TYPE lines for " << m[1];
      EXPECT_TRUE(helped.count(m[1])) << "TYPE before HELP for " << m[1];
    } else if (std::regex_match(line, m, sample)) {
      std::string family = m[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s = suffix;
        if (!types.count(family) && family.size() > s.size() &&
            family.compare(family.size() - s.size(), s.size(), s) == 0) {
          family = family.substr(0, family.size() - s.size());
        }
      }
      EXPECT_TRUE(types.count(family)) << "sample of an undeclared family: " << line;
      if (types[family] == "counter") {
        EXPECT_TRUE(family.size() > 6 && family.ends_with("_total")) << family;
      }
      ++samples;
    } else {
      ADD_FAILURE() << "not a valid line: \"" << line << "\"";
    }
  }
  EXPECT_GT(samples, 100);
  // Label values are escaped.
  EXPECT_NE(text.find(R"(version="segstored 9.9 \"test\"")"), std::string::npos);
  EXPECT_NE(text.find("segstore_writes_refused 1\n"), std::string::npos);
  EXPECT_NE(text.find("segstore_index_entries 77\n"), std::string::npos);
  EXPECT_NE(text.find("segstore_write_blocks_free 60\n"), std::string::npos);
  EXPECT_NE(text.find("segstore_recovery_seconds 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("segstore_responses_total{op=\"get\",status=\"not_found\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("segstore_responses_total{op=\"upsert\",status=\"unavailable\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("segstore_requests_total{op=\"unknown\"} 1\n"), std::string::npos);
}

// Buckets are cumulative, end with +Inf equal to the count, and the sum is in
// seconds.
TEST(MetricsTest, PrometheusHistogramsAreCumulativeAndConsistent) {
  const std::string text = ToPrometheus(Sample());
  const std::regex bucket(
      R"re(segstore_request_duration_seconds_bucket\{op="([a-z_]+)",le="([^"]+)"\} ([0-9]+))re");
  std::map<std::string, std::vector<std::pair<std::string, uint64_t>>> buckets;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, bucket)) {
      buckets[m[1]].emplace_back(m[2], std::stoull(m[3]));
    }
  }
  ASSERT_EQ(buckets.size(), proto::kOpCount);  // every operation, served or not
  for (const auto& [op, list] : buckets) {
    ASSERT_FALSE(list.empty());
    EXPECT_EQ(list.back().first, "+Inf") << op;
    for (size_t i = 1; i < list.size(); ++i) {
      EXPECT_LE(list[i - 1].second, list[i].second) << op << " le=" << list[i].first;
    }
  }
  const auto& get = buckets["get"];
  EXPECT_EQ(get.back().second, 1000u);
  // 10 us .. 10 ms in steps of 10 us: 5 values <= 50 us (exact: below 64),
  // 100 <= 1 ms and 1000 <= 10 ms, to within the bucket layout's 3%, and
  // never more than the truth (a bucket straddling a bound counts above it).
  for (const auto& [le, n] : get) {
    const auto got = static_cast<double>(n);
    if (le == "5e-05") {
      EXPECT_EQ(n, 5u);
    } else if (le == "0.001") {
      EXPECT_NEAR(got, 100, 3);
      EXPECT_LE(n, 100u);
    } else if (le == "0.01") {
      EXPECT_NEAR(got, 1000, 30);
      EXPECT_LE(n, 1000u);
    }
  }
  EXPECT_NE(text.find("segstore_request_duration_seconds_count{op=\"get\"} 1000\n"),
            std::string::npos);
  EXPECT_NE(text.find("segstore_request_duration_seconds_sum{op=\"get\"} 5.005\n"),
            std::string::npos);
}

// The metric table (metric_table.h): each metric named once, in both
// renderings, by one rule, and documented from the table.

// Every part of a snapshot filled, values distinct, TLS and a write error
// included, every operation served: every metric of the table is present.
MetricsSnapshot Full() {
  MetricsSnapshot m = Sample();
  m.cpu_user_seconds = 1.5;
  m.cpu_system_seconds = 0.25;
  ServerCounters& c = *m.server;
  uint64_t v = 100;
  c.connections_accepted = ++v;
  c.connections_refused = ++v;
  c.connections_idle_closed = ++v;
  c.connections_slow_closed = ++v;
  c.tls_handshake_failures = ++v;
  c.auth_failures = ++v;
  c.tls_certificate_not_after = 1'900'000'000;
  c.broken_frames = ++v;
  c.backpressure_pauses = ++v;
  c.bytes_in = ++v;
  c.bytes_out = ++v;
  for (size_t slot = 0; slot < kOpSlots; ++slot) {
    c.latency_us[slot].Record(40 + slot);
    c.latency_sum_us[slot] += 40 + slot;
  }
  // The RESP port answered SEG.GET twice, once with an error.
  const size_t seg_get = static_cast<size_t>(RespCmd::kSegGet);
  c.resp_commands[seg_get] = 2;
  c.resp_errors[seg_get] = 1;
  c.resp_latency_us[seg_get].Record(70);
  c.resp_latency_us[seg_get].Record(90);
  c.resp_latency_sum_us[seg_get] = 160;
  storage::StoreStats& s = m.storage;
  s.device_bytes = ++v;
  s.block_size = 1u << 20;
  s.live_bytes = ++v;
  s.index_tombstones = ++v;
  s.index_bytes = ++v;
  s.gets = ++v;
  s.writes = ++v;
  s.update_retries = ++v;
  s.device_reads = ++v;
  s.memory_reads = ++v;
  s.corruptions = ++v;
  s.flushes = ++v;
  s.defrag_blocks = ++v;
  s.rotated_blocks = ++v;
  s.defrag_records_moved = ++v;
  s.tombstones_reclaimed = ++v;
  s.expired_dropped = ++v;
  m.recovery.blocks_scanned = 63;
  m.recovery.records_scanned = ++v;
  m.recovery.live_records = ++v;
  m.recovery.damaged_regions = ++v;
  m.sweeper.records_visited = ++v;
  m.sweeper.records_rewritten = ++v;
  m.sweeper.records_deleted = ++v;
  m.sweeper.bytes_reclaimed = ++v;
  cluster::AgentStats& k = m.cluster.emplace();
  k.registered = true;
  k.controller = true;
  k.map_revision = ++v;
  k.partitions_held = 1365;
  k.etcd_errors = ++v;
  k.lease_expirations = ++v;
  k.maps_written = ++v;
  k.seconds_since_lease_ack = 1.5;
  replica::BootstrapStats& b = m.bootstrap.emplace();
  b.incoming = static_cast<uint32_t>(++v);
  b.ready = static_cast<uint32_t>(++v);
  b.partitions_copied = ++v;
  b.records_copied = ++v;
  b.bytes_copied = ++v;
  b.copy_seconds = 2.5;
  b.copy_failures = ++v;
  b.partitions_dropped = ++v;
  b.records_dropped = ++v;
  replica::ReplicaStats& r = m.replica.emplace();
  r.submitted = ++v;
  r.log_refused = ++v;
  r.in_doubt = ++v;
  r.waiting = ++v;
  r.writer.appended = ++v;
  r.writer.in_flight = ++v;
  r.applier.applied = ++v;
  r.applier.not_held = ++v;
  r.applier.duplicates = ++v;
  r.applier.replayed = ++v;
  r.applier.undecodable = ++v;
  r.applier.apply_failures = ++v;
  r.applier.lost_entries = ++v;
  r.applier.checkpoints = ++v;
  r.applier.window_ids = ++v;
  r.applier.caught_up = true;
  r.applier.log_healthy = true;
  r.applier.lanes = {replica::LaneStats{10, 15, 8, 0.25, true},
                     replica::LaneStats{20, 20, 20, 0, false}};
  return m;
}

std::string PrometheusType(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kHistogram:
      return "histogram";
    default:
      return "gauge";
  }
}

// "server.responses.<op>.<status>" as a regular expression: each <label>
// any of the label's values, <figure> any histogram figure.
std::regex PatternRegex(const std::string& pattern) {
  std::map<std::string, std::string> choices;
  auto join = [](const auto& values) {
    std::string out;
    for (const auto& v : values) out += (out.empty() ? "" : "|") + std::string(v);
    return "(" + out + ")";
  };
  for (const MetricLabelDef& l : MetricLabels()) {
    choices["<" + std::string(l.name) + ">"] = l.values.empty() ? "[^.]+" : join(l.values);
  }
  choices["<figure>"] = join(kHistogramFigures);
  std::string re;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '<') {
      const size_t end = pattern.find('>', i);
      const std::string label = pattern.substr(i, end - i + 1);
      EXPECT_TRUE(choices.count(label)) << "unknown label " << label << " in " << pattern;
      re += choices[label];
      i = end + 1;
    } else {
      if (pattern[i] == '.') re += '\\';
      re += pattern[i++];
    }
  }
  return std::regex(re);
}

const MetricDef* FindMetric(std::string_view name) {
  for (const MetricDef& def : MetricTable()) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

// "segstore_x{a=\"b\"}" -> "1.5": every sample of a Prometheus text.
std::map<std::string, std::string> PrometheusSamples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

double AsDouble(const decltype(StatEntry::value)& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  ADD_FAILURE() << "a string where a number was expected";
  return -1;
}

// Outside a cluster there is no cluster series at all.
TEST(MetricTableTest, ASingleServerHasNoClusterMetrics) {
  MetricsSnapshot m = Full();
  m.cluster.reset();
  m.replica.reset();
  m.bootstrap.reset();
  EXPECT_EQ(ToPrometheus(m).find("segstore_cluster_"), std::string::npos);
  EXPECT_EQ(ToPrometheus(m).find("segstore_replica_"), std::string::npos);
  for (const StatEntry& e : ToStats(m).entries) {
    EXPECT_NE(e.name.rfind("cluster.", 0), 0u) << e.name;
    EXPECT_NE(e.name.rfind("replica.", 0), 0u) << e.name;
  }
}

// The log partitions' figures, one series each, and the stale count.
TEST(MetricTableTest, ReplicaFiguresArePerLogPartition) {
  const MetricsSnapshot m = Full();
  const std::string text = ToPrometheus(m);
  EXPECT_NE(text.find("segstore_replica_lag_entries{log_partition=\"0\"} 5\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("segstore_replica_lag_entries{log_partition=\"1\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("segstore_replica_lag_seconds{log_partition=\"0\"} 0.25\n"),
            std::string::npos);
  EXPECT_NE(text.find("segstore_replica_applied_offset{log_partition=\"1\"} 20\n"),
            std::string::npos);
  EXPECT_NE(text.find("segstore_replica_log_partitions_stale 1\n"), std::string::npos);
  bool found = false;
  for (const StatEntry& e : ToStats(m).entries) {
    if (e.name == "replica.lag_entries.0") {
      found = true;
      EXPECT_EQ(std::get<uint64_t>(e.value), 5u);
    }
  }
  EXPECT_TRUE(found);
}

TEST(MetricTableTest, EveryMetricIsInBothRenderings) {
  const MetricsSnapshot m = Full();
  const std::string text = ToPrometheus(m);
  const Stats stats = ToStats(m);
  for (const MetricDef& def : MetricTable()) {
    SCOPED_TRACE(std::string(def.name));
    const std::string family = "segstore_" + std::string(def.name);
    if (def.kind == MetricKind::kStatsOnly) {
      EXPECT_EQ(text.find(family), std::string::npos);
    } else {
      const std::string header = "# HELP " + family + " " + std::string(def.help) + "\n# TYPE " +
                                 family + " " + PrometheusType(def.kind) + "\n";
      EXPECT_NE(text.find(header), std::string::npos) << "no family headed\n" << header;
      EXPECT_NE(text.find("\n" + family), std::string::npos) << "no sample";
    }
    for (const std::string& pattern : StatsNamePatterns(def)) {
      const std::regex re = PatternRegex(pattern);
      bool found = false;
      for (const StatEntry& e : stats.entries) found = found || std::regex_match(e.name, re);
      EXPECT_TRUE(found) << "no stats name like " << pattern;
    }
  }
  // And nothing else: every Prometheus family is in the table.
  const std::regex type(R"(# TYPE segstore_([a-z_]+) .*)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch match;
    if (std::regex_match(line, match, type)) {
      const MetricDef* def = FindMetric(match[1].str());
      EXPECT_TRUE(def != nullptr && def->kind != MetricKind::kStatsOnly) << line;
    }
  }
}

TEST(MetricTableTest, NamesAreUnique) {
  std::set<std::string> prometheus;
  std::set<std::string> stats;
  for (const MetricDef& def : MetricTable()) {
    const std::string name(def.name);
    EXPECT_TRUE(prometheus.insert(name).second) << "two metrics named " << name;
    if (def.kind == MetricKind::kHistogram) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        EXPECT_TRUE(prometheus.insert(name + suffix).second) << name << suffix;
      }
    }
    for (const std::string& pattern : StatsNamePatterns(def)) {
      EXPECT_TRUE(stats.insert(pattern).second) << "two metrics have stats name " << pattern;
    }
  }
  // Rendered, every stats name is one metric's (ToStats' names are unique:
  // AsMap checks) and no two patterns claim one name.
  const Stats rendered = ToStats(Full());
  AsMap(rendered);
  std::vector<std::pair<std::string, std::regex>> patterns;
  for (const std::string& p : stats) patterns.emplace_back(p, PatternRegex(p));
  for (const StatEntry& e : rendered.entries) {
    if (e.name.starts_with("config.")) continue;  // the settings, named by config.cc
    std::vector<std::string> claims;
    for (const auto& [p, re] : patterns) {
      if (std::regex_match(e.name, re)) claims.push_back(p);
    }
    EXPECT_EQ(claims.size(), 1u) << e.name << " is claimed by " << ::testing::PrintToString(claims);
  }
}

// The rule (StatsStem): section, then the Prometheus name without the
// section's word and _total (and a histogram's unit).
TEST(MetricTableTest, StatsNamesFollowFromPrometheusNamesByOneRule) {
  const std::pair<const char*, const char*> examples[] = {
      {"connections_open", "server.connections_open"},
      {"connections_accepted_total", "server.connections_accepted"},
      {"received_bytes_total", "server.received_bytes"},
      {"process_resident_memory_bytes", "process.resident_memory_bytes"},
      {"process_cpu_seconds_total", "process.cpu_seconds"},
      {"store_gets_total", "storage.gets"},
      {"defrag_blocks_total", "storage.defrag_blocks"},
      {"recovery_seconds", "recovery.seconds"},
      {"sweeper_records_visited_total", "sweeper.records_visited"},
      {"request_duration_seconds", "server.request_duration"},
      {"process_pid", "process.pid"},
  };
  for (const auto& [prometheus, stats] : examples) {
    const MetricDef* def = FindMetric(prometheus);
    ASSERT_NE(def, nullptr) << prometheus;
    EXPECT_EQ(StatsStem(*def), stats);
  }
  for (const MetricDef& def : MetricTable()) {
    SCOPED_TRACE(std::string(def.name));
    const std::string stem = StatsStem(def);
    const std::string section = std::string(SectionName(def.section)) + ".";
    ASSERT_TRUE(stem.starts_with(section));
    const std::string rest = stem.substr(section.size());
    // What is left is a piece of the Prometheus name, only its ends cut.
    EXPECT_FALSE(rest.empty());
    EXPECT_NE(std::string(def.name).find(rest), std::string::npos);
    EXPECT_FALSE(rest.ends_with("_total"));
    for (const std::string& pattern : StatsNamePatterns(def)) {
      EXPECT_TRUE(pattern.starts_with(def.kind == MetricKind::kInfo ? section : stem)) << pattern;
    }
  }
}

// What clients read today keeps its name (the rule allows it).
TEST(MetricTableTest, StatsNamesClientsReadAreKept) {
  const auto stats = AsMap(ToStats(Full()));
  const char* kept[] = {"server.version",
                        "server.uptime_seconds",
                        "process.pid",
                        "server.connections_open",
                        "server.connections_accepted",
                        "server.connections_refused",
                        "server.connections_idle_closed",
                        "server.connections_slow_closed",
                        "server.tls_handshake_failures",
                        "server.auth_failures",
                        "server.broken_frames",
                        "server.requests",
                        "server.error_responses",
                        "server.backpressure_pauses",
                        "server.requests.get",
                        "storage.device_bytes",
                        "storage.live_bytes",
                        "storage.index_tombstones",
                        "storage.index_bytes",
                        "storage.gets",
                        "storage.writes",
                        "storage.update_retries",
                        "storage.device_reads",
                        "storage.memory_reads",
                        "storage.corruptions",
                        "storage.flushes",
                        "storage.defrag_blocks",
                        "storage.defrag_records_moved",
                        "storage.tombstones_reclaimed",
                        "storage.expired_dropped",
                        "storage.writes_refused",
                        "storage.write_error",
                        "recovery.seconds",
                        "recovery.blocks_scanned",
                        "recovery.records_scanned",
                        "recovery.live_records",
                        "recovery.damaged_regions",
                        "sweeper.records_visited",
                        "sweeper.records_rewritten",
                        "sweeper.records_deleted",
                        "sweeper.segments_removed",
                        "sweeper.bytes_reclaimed"};
  for (const char* name : kept) {
    EXPECT_EQ(stats.count(name), 1u) << name;
  }
}

TEST(MetricTableTest, PrometheusNamesFollowItsConventions) {
  for (const MetricDef& def : MetricTable()) {
    SCOPED_TRACE(std::string(def.name));
    const std::string name(def.name);
    EXPECT_TRUE(std::regex_match(name, std::regex("[a-z][a-z0-9_]*[a-z0-9]")));
    EXPECT_EQ(name.ends_with("_total"), def.kind == MetricKind::kCounter);
    const std::string base = name.ends_with("_total") ? name.substr(0, name.size() - 6) : name;
    // The unit is named, and a name ending in a unit declares it.
    if (def.unit != MetricUnit::kNone) {
      EXPECT_NE(name.find(std::string(UnitName(def.unit))), std::string::npos);
    }
    if (base.ends_with("_bytes")) {
      EXPECT_EQ(def.unit, MetricUnit::kBytes);
    }
    if (base.ends_with("_seconds") || def.kind == MetricKind::kHistogram) {
      EXPECT_EQ(def.unit, MetricUnit::kSeconds);
    }
    EXPECT_TRUE(def.help.ends_with(".")) << def.help;
    EXPECT_EQ(def.help.find('\n'), std::string_view::npos);
    EXPECT_EQ(def.help.find('\\'), std::string_view::npos);
  }
}

// Each series of a counter or gauge has one value, whichever rendering.
TEST(MetricTableTest, BothRenderingsCarryTheSameValues) {
  const MetricsSnapshot m = Full();
  const auto stats = AsMap(ToStats(m));
  const auto samples = PrometheusSamples(ToPrometheus(m));
  int compared = 0;
  for (const MetricDef& def : MetricTable()) {
    if (def.kind == MetricKind::kStatsOnly || def.kind == MetricKind::kInfo) continue;
    std::vector<MetricSeries> series;
    def.collect(m, &series);
    for (const MetricSeries& s : series) {
      std::string stats_name = StatsStem(def);
      std::string labels;
      for (size_t i = 0; i < def.labels.size(); ++i) {
        if (def.labels[i].empty()) continue;
        stats_name += "." + s.labels[i];
        labels +=
            (labels.empty() ? "" : ",") + std::string(def.labels[i]) + "=\"" + s.labels[i] + "\"";
      }
      const std::string family = "segstore_" + std::string(def.name);
      const std::string braces = labels.empty() ? "" : "{" + labels + "}";
      SCOPED_TRACE(family + braces);
      if (def.kind == MetricKind::kHistogram) {
        ASSERT_TRUE(samples.count(family + "_count" + braces));
        EXPECT_EQ(std::stod(samples.at(family + "_count" + braces)),
                  AsDouble(stats.at(stats_name + ".count")));
      } else {
        ASSERT_TRUE(samples.count(family + braces));
        ASSERT_TRUE(stats.count(stats_name)) << stats_name;
        EXPECT_EQ(std::stod(samples.at(family + braces)), AsDouble(stats.at(stats_name)));
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 60);
}

TEST(MetricTableTest, DocsListEveryNameInBothSchemes) {
  const std::string doc = MetricsDoc();
  for (const MetricDef& def : MetricTable()) {
    if (def.kind != MetricKind::kStatsOnly) {
      EXPECT_NE(doc.find("`segstore_" + std::string(def.name)), std::string::npos) << def.name;
    }
    for (const std::string& pattern : StatsNamePatterns(def)) {
      EXPECT_NE(doc.find("`" + pattern + "`"), std::string::npos) << pattern;
    }
    EXPECT_NE(doc.find(std::string(def.help)), std::string::npos) << def.help;
  }
}

TEST(MetricTableTest, DocsMatchTheTable) {
  const std::string path = std::string(SEGSTORE_SOURCE_DIR) + "/docs/metrics.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream file;
  file << in.rdbuf();
  const std::string want = MetricsDoc();
  if (file.str() == want) return;
  // Point at the first line that differs.
  std::istringstream a(file.str()), b(want);
  std::string la, lb;
  int line = 1;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, la));
    const bool more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a) la = "(end of file)";
    if (!more_b) lb = "(end of table)";
    if (!more_a || !more_b || la != lb) break;
    ++line;
  }
  FAIL() << "docs/metrics.md differs from the metric table (src/server/metric_table.cc) at "
            "line "
         << line << ":\n  file:  " << la << "\n  table: " << lb
         << "\nRegenerate it from the source directory:\n"
            "  ./build/src/server/segstored --print-metrics-doc > docs/metrics.md";
}

}  // namespace
}  // namespace segstore::server
