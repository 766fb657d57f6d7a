// segstored as a process: systemd readiness through a NOTIFY_SOCKET the test
// listens on, the port it reports, a clean stop on SIGTERM, a restart on the
// same data, the watchdog, and configuration errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "integration/daemon.h"
#include "segstore/client.h"
#include "server/http_client.h"
#include "server/raw_conn.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using std::chrono::milliseconds;
using testing::Connect;
using testing::Daemon;
using testing::AdminPortOf;
using testing::Ask;
using testing::HttpAnswer;
using testing::NotifySocket;
using testing::PortOf;
using testing::ReadFile;

class DaemonTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.File(name); }
  storage::testing::TempDir dir_;
};

TEST_F(DaemonTest, ServesOnDefaultsReportsReadinessAndStopsCleanly) {
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  {
    // No config file: the default data path, under the working directory.
    Daemon d(dir_.File(""), {"--listen", "127.0.0.1:0", "--file-size", "64MiB"}, log,
             {"NOTIFY_SOCKET=" + notify.path()});
    const std::string ready = notify.WaitFor("READY=1");
    ASSERT_FALSE(ready.empty()) << ReadFile(log);
    const uint16_t port = PortOf(ready);
    ASSERT_NE(port, 0) << ready;
    EXPECT_TRUE(std::filesystem::exists(Path("segstore-data/segstore.dat")));
    auto c = Connect(port);
    ASSERT_NE(c, nullptr);
    std::vector<SegmentUpdate> up = {{5484, 3600, true, {}, {}}, {8000, 0, false, 7u, {}}};
    ASSERT_TRUE(c->Upsert("alice", up).ok());
    ASSERT_TRUE(c->Upsert("bob", up).ok());
    ASSERT_TRUE(*c->Delete("bob"));
    c.reset();
    d.Signal(SIGTERM);
    EXPECT_FALSE(notify.WaitFor("STOPPING=1").empty());
    EXPECT_EQ(d.Wait(), 0) << ReadFile(log);
  }
  const std::string first_log = ReadFile(log);
  EXPECT_NE(first_log.find("segstored 0.1.0 serving on 127.0.0.1:"), std::string::npos);
  EXPECT_NE(first_log.find("stopped cleanly"), std::string::npos) << first_log;

  // A second start on the same data finds everything, and not what was deleted.
  Daemon d(dir_.File(""), {"--listen", "127.0.0.1:0"}, log, {"NOTIFY_SOCKET=" + notify.path()});
  const std::string ready = notify.WaitFor("READY=1");
  ASSERT_FALSE(ready.empty()) << ReadFile(log);
  auto c = Connect(PortOf(ready));
  ASSERT_NE(c, nullptr);
  auto got = c->Get("alice");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->count, 2u);
  EXPECT_EQ(got->At(1).attr1, 7u);
  EXPECT_TRUE(c->Get("bob").status().IsNotFound());
  c.reset();
  d.Signal(SIGINT);
  EXPECT_EQ(d.Wait(), 0) << ReadFile(log);
  // Recovery was reported while it ran.
  bool status_seen = false;
  for (const std::string& m : notify.messages()) {
    if (m.find("STATUS=recovering") != std::string::npos) status_seen = true;
  }
  EXPECT_TRUE(status_seen);
}

TEST_F(DaemonTest, PingsTheWatchdogWhileItsLoopsTurn) {
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  Daemon d(dir_.File(""),
           {"--listen", "127.0.0.1:0", "--data", Path("data"), "--file-size", "64MiB"}, log,
           {"NOTIFY_SOCKET=" + notify.path(), "WATCHDOG_USEC=400000"});
  ASSERT_FALSE(notify.WaitFor("READY=1").empty()) << ReadFile(log);
  EXPECT_FALSE(notify.WaitFor("WATCHDOG=1", milliseconds(10000)).empty()) << ReadFile(log);
  d.Signal(SIGTERM);
  EXPECT_EQ(d.Wait(), 0) << ReadFile(log);
}

// The admin endpoint of a real daemon: metrics that follow what the client
// did, liveness and readiness, and readiness lost while stopping.
TEST_F(DaemonTest, AdminEndpointServesMetricsHealthAndReadiness) {
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  Daemon d(dir_.File(""),
           {"--listen", "127.0.0.1:0", "--data", Path("data"), "--file-size", "64MiB"}, log,
           {"NOTIFY_SOCKET=" + notify.path()});
  const std::string ready = notify.WaitFor("READY=1");
  ASSERT_FALSE(ready.empty()) << ReadFile(log);
  const uint16_t admin = AdminPortOf(ready);
  ASSERT_NE(admin, 0) << ready;
  auto c = Connect(PortOf(ready));
  ASSERT_NE(c, nullptr);
  std::vector<SegmentUpdate> up = {{5484, 3600, true, {}, {}}};
  ASSERT_TRUE(c->Upsert("alice", up).ok());
  ASSERT_TRUE(c->Get("alice").ok());
  EXPECT_TRUE(c->Get("nobody").status().IsNotFound());

  const HttpAnswer m = Ask(admin, "GET", "/metrics");
  ASSERT_EQ(m.status, 200) << m.head;
  for (const char* line : {"segstore_responses_total{op=\"upsert\",status=\"ok\"} 1\n",
                           "segstore_responses_total{op=\"get\",status=\"ok\"} 1\n",
                           "segstore_responses_total{op=\"get\",status=\"not_found\"} 1\n",
                           "segstore_request_duration_seconds_count{op=\"get\"} 2\n",
                           "segstore_index_entries 1\n", "segstore_connections_open 1\n",
                           "segstore_writes_refused 0\n"}) {
    EXPECT_NE(m.body.find(line), std::string::npos) << line << " not in\n" << m.body;
  }
  EXPECT_EQ(Ask(admin, "GET", "/health").status, 200);
  const HttpAnswer r = Ask(admin, "GET", "/ready");
  EXPECT_EQ(r.status, 200) << r.body;

  // Stopping: /ready says so for as long as the endpoint still answers.
  d.Signal(SIGTERM);
  ASSERT_FALSE(notify.WaitFor("STOPPING=1").empty());
  HttpAnswer stopping = Ask(admin, "GET", "/ready");
  if (stopping.status != 0) {  // 0: the endpoint is already gone
    EXPECT_EQ(stopping.status, 503);
    EXPECT_EQ(stopping.body, "stopping\n");
  }
  c.reset();
  EXPECT_EQ(d.Wait(), 0) << ReadFile(log);
}

TEST_F(DaemonTest, ConfigurationErrorsExitWithAClearMessage) {
  const std::string log = Path("segstored.log");
  {
    Daemon d(dir_.File(""), {"--config", Path("missing.toml")}, log, {});
    EXPECT_EQ(d.Wait(), 2);
    EXPECT_NE(ReadFile(log).find("does not exist"), std::string::npos) << ReadFile(log);
  }
  {
    std::ofstream(Path("bad.toml")) << "[storage]\ndurability = \"sometimes\"\n";
    Daemon d(dir_.File(""), {"--config", Path("bad.toml")}, log, {});
    EXPECT_EQ(d.Wait(), 2);
    EXPECT_NE(ReadFile(log).find("storage.durability"), std::string::npos) << ReadFile(log);
  }
  {
    Daemon d(dir_.File(""), {"--listen", "127.0.0.1:99999"}, log, {});
    EXPECT_EQ(d.Wait(), 2);
    EXPECT_NE(ReadFile(log).find("bad port"), std::string::npos) << ReadFile(log);
  }
  {
    // The shipped config file is valid.
    Daemon d(dir_.File(""),
             {"--config", std::string(SEGSTORE_SOURCE_DIR) + "/config/segstored.toml",
              "--print-config"},
             log, {});
    EXPECT_EQ(d.Wait(), 0) << ReadFile(log);
    EXPECT_NE(ReadFile(log).find("storage.durability=commit"), std::string::npos);
  }
}

}  // namespace
}  // namespace segstore::server
