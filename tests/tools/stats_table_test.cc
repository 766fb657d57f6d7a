// segctl stats' tables (src/tools/stats_table.h).

#include "tools/stats_table.h"

#include <gtest/gtest.h>

#include <string>

namespace segstore::tools {
namespace {

Stats Sample() {
  Stats s;
  s.entries = {
      {"server.version", std::string("segstored 0.1.0")},
      {"server.uptime_seconds", 6.5},
      {"process.cpu_seconds.user", 0.25},
      {"server.requests", uint64_t{2000}},
      {"server.requests.ping", uint64_t{0}},
      {"server.requests.get", uint64_t{2000}},
      {"server.responses", uint64_t{2000}},
      {"server.responses.ping.ok", uint64_t{0}},
      {"server.responses.get.ok", uint64_t{1996}},
      {"server.responses.get.not_found", uint64_t{3}},
      {"server.responses.get.io_error", uint64_t{1}},
      {"server.request_duration.get.count", uint64_t{2000}},
      {"server.request_duration.get.mean_us", 61.5},
      {"server.request_duration.get.p50_us", uint64_t{55}},
      {"server.request_duration.get.p90_us", uint64_t{90}},
      {"server.request_duration.get.p99_us", uint64_t{152}},
      {"server.request_duration.get.p999_us", uint64_t{400}},
      {"server.request_duration.get.max_us", uint64_t{900}},
      {"storage.index_entries", uint64_t{77}},
      {"newsection.thing", uint64_t{5}},
  };
  return s;
}

TEST(StatsTableTest, OperationsFormOneTableWithErrorsAndPercentiles) {
  const std::string t = FormatStatsTable(Sample());
  EXPECT_NE(t.find("operation"), std::string::npos) << t;
  // get: 2000 requests, 4 errors, mean, p50, p90, p99, p999, max in order.
  const size_t row = t.find("\nget ");
  ASSERT_NE(row, std::string::npos) << t;
  const std::string line = t.substr(row + 1, t.find('\n', row + 1) - row - 1);
  EXPECT_EQ(line.substr(0, 14), "get           ");
  size_t at = 0;
  for (const char* v : {"2000", "4", "61.5", "55", "90", "152", "400", "900"}) {
    const size_t found = line.find(v, at);
    ASSERT_NE(found, std::string::npos) << v << " in \"" << line << "\"";
    at = found + 1;
  }
  // An operation never served shows dashes, not zeros.
  const size_t ping = t.find("\nping ");
  ASSERT_NE(ping, std::string::npos) << t;
  EXPECT_NE(t.substr(ping, t.find('\n', ping + 1) - ping).find('-'), std::string::npos);
  // Ping comes before get: the server's order.
  EXPECT_LT(ping, row);
}

TEST(StatsTableTest, ErrorsAreListedByOperationAndStatus) {
  const std::string t = FormatStatsTable(Sample());
  EXPECT_NE(t.find("errors by operation and status"), std::string::npos) << t;
  EXPECT_NE(t.find("get not_found"), std::string::npos) << t;
  EXPECT_NE(t.find("get io_error"), std::string::npos) << t;
  // Successes are not errors.
  EXPECT_EQ(t.find(" ok "), std::string::npos) << t;
}

TEST(StatsTableTest, EverythingElseIsPrintedUnderItsSection) {
  const std::string t = FormatStatsTable(Sample());
  for (const char* s : {"\nserver\n", "\nprocess\n", "\nstorage\n", "\nnewsection\n"}) {
    EXPECT_NE(t.find(s), std::string::npos) << s << " in\n" << t;
  }
  EXPECT_NE(t.find("version"), std::string::npos);
  EXPECT_NE(t.find("segstored 0.1.0"), std::string::npos);
  EXPECT_NE(t.find("0.25"), std::string::npos);
  EXPECT_NE(t.find("thing"), std::string::npos);
  // The per-operation names are not repeated under "server"; the totals are.
  EXPECT_EQ(t.find("requests.get"), std::string::npos) << t;
  EXPECT_EQ(t.find("responses.get"), std::string::npos) << t;
  EXPECT_EQ(t.find("request_duration"), std::string::npos) << t;
  EXPECT_NE(t.find("  requests "), std::string::npos) << t;
}

TEST(StatsTableTest, NoStatsNoTable) {
  EXPECT_EQ(FormatStatsTable(Stats{}), "");
}

}  // namespace
}  // namespace segstore::tools
