// The two renderings of a MetricsSnapshot: the stats operation's map and the
// Prometheus text. The Prometheus text is checked line by line against the
// exposition format's grammar, and its histograms for consistency.

#include "server/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <variant>

#include "proto/protocol.h"

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

TEST(MetricsTest, StatsCarryErrorsByStatusAndLatencyPercentiles) {
  const auto stats = AsMap(ToStats(Sample()));
  auto u64 = [&](const std::string& name) -> uint64_t {
    auto it = stats.find(name);
    if (it == stats.end()) {
      ADD_FAILURE() << "no " << name;
      return 0;
    }
    return std::get<uint64_t>(it->second);
  };
  EXPECT_EQ(u64("server.requests.get"), 1000u);
  EXPECT_EQ(u64("server.errors.get.not_found"), 3u);
  EXPECT_EQ(u64("server.errors.upsert.unavailable"), 1u);
  EXPECT_EQ(u64("server.errors.get.io_error"), 2u);  // not "i_o_error"
  EXPECT_EQ(u64("server.errors.get.device_full"), 1u);
  EXPECT_EQ(stats.count("server.errors.get.ok"), 0u);  // successes are not errors
  EXPECT_EQ(stats.count("server.errors.ping.not_found"), 0u);  // none happened
  EXPECT_EQ(u64("latency.get.count"), 1000u);
  EXPECT_NEAR(static_cast<double>(u64("latency.get.p50_us")), 5000, 5000 * 0.03);
  EXPECT_NEAR(static_cast<double>(u64("latency.get.p99_us")), 9900, 9900 * 0.03);
  EXPECT_EQ(u64("latency.get.max_us"), 10000u);
  EXPECT_DOUBLE_EQ(std::get<double>(stats.at("latency.get.mean_us")), 5005.0);
  EXPECT_EQ(stats.count("latency.ping.count"), 0u);  // never served: not listed
  EXPECT_EQ(u64("storage.writes_refused"), 1u);
  EXPECT_EQ(std::get<std::string>(stats.at("storage.write_error")), "IOError: pwrite failed");
  EXPECT_EQ(std::get<std::string>(stats.at("config.server.listen")), "127.0.0.1:7700");
  EXPECT_EQ(u64("sweeper.segments_removed"), 9u);
}

TEST(MetricsTest, StatsWithoutAServerHaveNoServerCounters) {
  MetricsSnapshot m = Sample();
  m.server.reset();
  const auto stats = AsMap(ToStats(m));
  EXPECT_EQ(stats.count("server.requests"), 0u);
  EXPECT_EQ(stats.count("latency.get.count"), 0u);
  EXPECT_EQ(stats.count("storage.records"), 1u);
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

}  // namespace
}  // namespace segstore::server
