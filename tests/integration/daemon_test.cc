// segstored as a process: systemd readiness through a NOTIFY_SOCKET the test
// listens on, the port it reports, a clean stop on SIGTERM, a restart on the
// same data, the watchdog, and configuration errors; TLS and shared secrets
// through segctl's flags, their reload on SIGHUP, and bad credential files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "integration/daemon.h"
#include "segstore/client.h"
#include "server/http_client.h"
#include "server/raw_conn.h"
#include "storage/test_util.h"
#include "support/test_pki.h"

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
using testing::Has;
using testing::ReadFile;
using testing::Segctl;

// Writes `text` to `path` with `mode`, replacing it atomically (a new file
// renamed over the old), so a daemon never reads half of it.
void WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode = 0600) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << tmp;
  ASSERT_EQ(::fchmod(fd, mode), 0) << tmp;  // whatever the umask
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size())) << tmp;
  ASSERT_EQ(::close(fd), 0) << tmp;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

// A secret file holding `secret`, mode 0600 unless said.
void WriteSecretFile(const std::string& path, const std::string& secret, mode_t mode = 0600) {
  WriteFileAtomically(path, "# a test's shared secret\n" + secret + "\n", mode);
}

size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Polls `pred` every 100 ms until it holds or `timeout` passes.
template <typename Pred>
bool Eventually(Pred pred, milliseconds timeout = milliseconds(30000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(milliseconds(100));
  }
  return true;
}

constexpr const char* kSecret1 = "first-shared-secret-0123456789";
constexpr const char* kSecret2 = "second-shared-secret-9876543210";

class DaemonTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.File(name); }

  // Makes the test PKI under Path("pki") into pki_.
  void MakePki() {
    auto pki = segstore::testing::MakeTestPki(Path("pki"));
    ASSERT_TRUE(pki.ok()) << pki.status().ToString();
    pki_ = *pki;
  }

  // Starts segstored serving TLS with pki_'s server certificate and requiring
  // a secret of `secret_file`, reporting to `notify`, logging to `log`; sets
  // *port to its client port (0 if it did not get ready).
  std::unique_ptr<Daemon> StartSecure(const std::string& secret_file, NotifySocket* notify,
                                      const std::string& log, uint16_t* port) {
    auto d = std::make_unique<Daemon>(
        dir_.File(""),
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--data", Path("data"), "--file-size",
                                 "64MiB", "--tls-cert", pki_.server_cert, "--tls-key",
                                 pki_.server_key, "--auth-secret-file", secret_file},
        log, std::vector<std::string>{"NOTIFY_SOCKET=" + notify->path()});
    *port = PortOf(notify->WaitFor("READY=1"));
    return d;
  }

  storage::testing::TempDir dir_;
  segstore::testing::TestPki pki_;
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
  EXPECT_NE(first_log.find("segstored 0.4.0 serving on 127.0.0.1:"), std::string::npos);
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

// segctl's TLS and secret flags against a daemon serving TLS and requiring a
// shared secret: the right ones work (for every kind of command, load too),
// and each thing missing or wrong fails with a non-zero exit and a message
// that says what.
TEST_F(DaemonTest, SegctlReachesATlsServerWithTheSharedSecret) {
  ASSERT_NO_FATAL_FAILURE(MakePki());
  const std::string secret = Path("server.secret");
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(secret, kSecret1));
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  uint16_t port = 0;
  auto d = StartSecure(secret, &notify, log, &port);
  ASSERT_NE(port, 0) << ReadFile(log);

  const std::string tls = "--tls-ca " + pki_.ca_cert;
  const std::string auth = " --auth-secret-file " + secret;
  auto [rc, out] = Segctl(port, "upsert alice 5484@+5h 8000@never " + tls + auth);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "2 inserted, 0 updated")) << out;
  std::tie(rc, out) = Segctl(port, "get alice " + tls + auth);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "alice: 2 matching live segments")) << out;
  // The name to verify given apart from the address.
  std::tie(rc, out) = Segctl(port, "count alice --tls-server-name localhost " + tls + auth);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "segments in 0-max: 2")) << out;
  // The secret file from the environment; --tls-ca alone implies --tls.
  std::tie(rc, out) =
      Segctl(port, "get alice --ids-only " + tls, "SEGSTORE_AUTH_SECRET_FILE=" + secret);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "5484")) << out;
  // No verification at all, for tests.
  std::tie(rc, out) = Segctl(port, "ping --tls-insecure" + auth);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "pong from 127.0.0.1:")) << out;
  // load, through its own connections.
  WriteFileAtomically(Path("rows.csv"), "bob,5484,3600\nbob,8000,7200\ncarol,5484,3600\n", 0644);
  std::tie(rc, out) =
      Segctl(port, "load " + Path("rows.csv") + " --no-progress --json " + tls + auth);
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Segctl(port, "get bob " + tls + auth);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "bob: 2 matching live segments")) << out;

  // No secret: the server refuses the request.
  std::tie(rc, out) = Segctl(port, "get alice " + tls);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "Unauthenticated")) << out;
  EXPECT_FALSE(Has(out, "matching live segments")) << out;
  // A wrong secret: refused too.
  const std::string wrong = Path("wrong.secret");
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(wrong, kSecret2));
  std::tie(rc, out) = Segctl(port, "get alice " + tls + " --auth-secret-file " + wrong);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "Unauthenticated")) << out;
  // Plain TCP to the TLS port fails, and says the connection failed.
  std::tie(rc, out) = Segctl(port, "get alice" + auth);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "segctl: Unavailable: ")) << out;
  EXPECT_TRUE(Has(out, "if it serves TLS, add --tls")) << out;
  EXPECT_FALSE(Has(out, "matching live segments")) << out;
  // The test CA is in no system trust store, and the certificate does not
  // name other.example.
  std::tie(rc, out) = Segctl(port, "get alice --tls" + auth);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "TLS handshake failed")) << out;
  std::tie(rc, out) = Segctl(port, "get alice --tls-server-name other.example " + tls + auth);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "TLS handshake failed")) << out;

  // Bad flags fail before connecting, naming the flag.
  std::tie(rc, out) = Segctl(port, "get alice --tls-cert " + pki_.client_cert + " " + tls + auth);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "InvalidArgument: --tls-cert needs --tls-key")) << out;
  std::tie(rc, out) = Segctl(port, "get alice " + tls + " --auth-secret-file " + Path("nope"));
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "NotFound: --auth-secret-file: ")) << out;
  std::tie(rc, out) = Segctl(port, "load " + Path("rows.csv") + " " + tls,
                             "SEGSTORE_AUTH_SECRET_FILE=" + Path("nope"));
  EXPECT_EQ(rc, 2) << out;  // load's exit status for a load that never started
  EXPECT_TRUE(Has(out, "NotFound: SEGSTORE_AUTH_SECRET_FILE: ")) << out;
  // A server that refuses load's connections: no secret, a wrong one, no TLS.
  for (const std::string& flags : {tls, tls + " --auth-secret-file " + wrong, auth}) {
    std::tie(rc, out) = Segctl(port, "load --no-progress " + Path("rows.csv") + " " + flags);
    EXPECT_EQ(rc, 2) << flags << "\n" << out;
    EXPECT_TRUE(Has(out, "segctl load: ")) << out;
  }
  const std::string short_secret = Path("short.secret");
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(short_secret, "too-short"));
  std::tie(rc, out) = Segctl(port, "get alice " + tls + " --auth-secret-file " + short_secret);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "InvalidArgument: --auth-secret-file: ")) << out;
  // A secret file others may read works, with a warning.
  const std::string loose = Path("loose.secret");
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(loose, kSecret1, 0644));
  std::tie(rc, out) = Segctl(port, "get alice " + tls + " --auth-secret-file " + loose);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "warning: --auth-secret-file: " + loose)) << out;

  d->Signal(SIGTERM);
  EXPECT_EQ(d->Wait(), 0) << ReadFile(log);
}

// SIGHUP rereads the secret file for new connections: the new secret is
// accepted and the old refused; a file it cannot use leaves the secrets in
// force, and the daemon serves on.
TEST_F(DaemonTest, SighupReloadsTheSharedSecrets) {
  ASSERT_NO_FATAL_FAILURE(MakePki());
  const std::string secret = Path("server.secret");
  const std::string old_secret = Path("old.secret");
  const std::string new_secret = Path("new.secret");
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(secret, kSecret1));
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(old_secret, kSecret1));
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(new_secret, kSecret2));
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  uint16_t port = 0;
  auto d = StartSecure(secret, &notify, log, &port);
  ASSERT_NE(port, 0) << ReadFile(log);

  const std::string tls = "--tls-ca " + pki_.ca_cert;
  const std::string with_old = tls + " --auth-secret-file " + old_secret;
  const std::string with_new = tls + " --auth-secret-file " + new_secret;
  auto [rc, out] = Segctl(port, "upsert alice 5484@+5h " + with_old);
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Segctl(port, "get alice " + with_new);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "Unauthenticated")) << out;

  // Rotate: the server's file now holds only the new secret.
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(secret, kSecret2));
  d->Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return Has(ReadFile(log), "SIGHUP: reloaded credentials"); }))
      << ReadFile(log);
  EXPECT_TRUE(Eventually([&] { return Segctl(port, "get alice " + with_new).first == 0; }))
      << Segctl(port, "get alice " + with_new).second << ReadFile(log);
  std::tie(rc, out) = Segctl(port, "get alice " + with_old);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "Unauthenticated")) << out;

  // A broken file (a secret under 16 bytes): the reload fails, saying why,
  // and the new secret stays in force.
  ASSERT_NO_FATAL_FAILURE(WriteSecretFile(secret, "too-short"));
  d->Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return Has(ReadFile(log), "SIGHUP: reload failed"); }))
      << ReadFile(log);
  const std::string after = ReadFile(log);
  EXPECT_TRUE(Has(after.substr(after.find("SIGHUP: reload failed")), secret)) << after;
  std::tie(rc, out) = Segctl(port, "upsert alice 8000@never " + with_new);
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Segctl(port, "get alice " + with_new);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "alice: 2 matching live segments")) << out;
  std::tie(rc, out) = Segctl(port, "get alice " + with_old);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "Unauthenticated")) << out;
  EXPECT_EQ(Occurrences(ReadFile(log), "SIGHUP: reloaded credentials"), 1u) << ReadFile(log);

  d->Signal(SIGTERM);
  EXPECT_EQ(d->Wait(), 0) << ReadFile(log);
}

// Credential files the daemon cannot use stop it at start, with a message
// naming the file.
TEST_F(DaemonTest, RefusesToStartWithUnusableCredentialFiles) {
  ASSERT_NO_FATAL_FAILURE(MakePki());
  {
    // A key that is not the certificate's.
    const std::string log = Path("mismatch.log");
    Daemon d(dir_.File(""),
             {"--listen", "127.0.0.1:0", "--data", Path("data1"), "--file-size", "64MiB",
              "--tls-cert", pki_.server_cert, "--tls-key", pki_.other_server_key},
             log, {});
    const int rc = d.Wait();
    EXPECT_GT(rc, 0) << ReadFile(log);
    EXPECT_LT(rc, 128) << ReadFile(log);  // an exit, not a crash
    EXPECT_TRUE(Has(ReadFile(log), pki_.other_server_key)) << ReadFile(log);
  }
  {
    const std::string log = Path("missing.log");
    const std::string missing = Path("missing.secret");
    Daemon d(dir_.File(""),
             {"--listen", "127.0.0.1:0", "--data", Path("data2"), "--file-size", "64MiB",
              "--auth-secret-file", missing},
             log, {});
    const int rc = d.Wait();
    EXPECT_GT(rc, 0) << ReadFile(log);
    EXPECT_LT(rc, 128) << ReadFile(log);
    EXPECT_TRUE(Has(ReadFile(log), missing)) << ReadFile(log);
  }
}

}  // namespace
}  // namespace segstore::server
