// A real Redis server for tests (Debian's redis-tools: its server binary is
// redis-check-rdb run as "redis-server"), started on an ephemeral loopback
// port with no persistence and stopped (SIGTERM) by its owner, and a
// synchronous hiredis client to talk to it.
#pragma once

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace segstore::testing {

// A loopback port nothing listens on right now.
uint16_t FreePort();

// The Redis server binary: redis-server if on PATH, else redis-tools' copy.
std::string RedisServerBinary();

// A synchronous hiredis connection, for setting up and checking data.
class SyncClient {
 public:
  explicit SyncClient(uint16_t port);
  ~SyncClient();
  SyncClient(const SyncClient&) = delete;
  SyncClient& operator=(const SyncClient&) = delete;

  bool ok() const { return c_ != nullptr && c_->err == 0; }

  // Runs a command given as words; returns the reply (null on a failure).
  std::unique_ptr<redisReply, void (*)(redisReply*)> Run(std::vector<std::string> words);

  // HGETALL as a map (empty on any failure).
  std::map<std::string, std::string> HashOf(const std::string& key);

  long long Integer(std::vector<std::string> words);  // NOLINT: hiredis's type

 private:
  redisContext* c_ = nullptr;
};

// One Redis server process, owned by the test.
class RedisServer {
 public:
  // `extra_args`: more command-line options, e.g. {"--cluster-enabled", "yes"}.
  explicit RedisServer(std::vector<std::string> extra_args = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts it on a free port and waits until it answers PING; retries on
  // another port if it exits (a port taken in between).
  bool Start(std::string* why);

  // SIGTERM (after SIGCONT, if paused), then reaps it.
  void Stop() { End(SIGTERM); }
  // SIGKILL: the server disappears at once, sockets and all.
  void Kill() { End(SIGKILL); }
  [[nodiscard]] bool Pause();  // false if not every thread stopped within 10 s
  void Resume();

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

 private:
  bool Spawn();
  bool WaitReady();
  void End(int signal);

  std::vector<std::string> extra_args_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::string dir_;
};

}  // namespace segstore::testing
