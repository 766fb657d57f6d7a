// segstored as a child process, for tests that start, signal and restart
// it: a stand-in for systemd's notify socket, the process itself, and small
// helpers. Servers listen on ephemeral loopback ports; each Daemon is ended
// by its own PID.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "segstore/client.h"
#include "support/stop_process.h"

extern char** environ;

namespace segstore::server::testing {

using std::chrono::milliseconds;

// A datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
  }
  ~NotifySocket() { ::close(fd_); }
  const std::string& path() const { return path_; }

  // Waits for a message containing `needle`; returns it ("" on timeout).
  std::string WaitFor(const std::string& needle, milliseconds timeout = milliseconds(30000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) continue;
      std::string msg(buf, static_cast<size_t>(n));
      messages_.push_back(msg);
      if (msg.find(needle) != std::string::npos) return msg;
    }
    return "";
  }
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> messages_;
};

class Daemon {
 public:
  // Starts segstored in `cwd` with `args`, stderr to `log`, and these extra
  // environment variables.
  Daemon(const std::string& cwd, std::vector<std::string> args, const std::string& log,
         std::vector<std::string> env) {
    std::vector<std::string> argv = {SEGSTORED_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    // The admin endpoint on an ephemeral port too, unless the test says.
    if (std::find(args.begin(), args.end(), "--admin-listen") == args.end()) {
      argv.insert(argv.end(), {"--admin-listen", "127.0.0.1:0"});
    }
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view v(*e);
      if (v.starts_with("NOTIFY_SOCKET=") || v.starts_with("WATCHDOG_")) continue;
      env.emplace_back(*e);
    }
    std::vector<char*> cenv;
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_APPEND, 0644);
    const int rc = posix_spawn(&pid_, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "posix_spawn " << SEGSTORED_PATH;
  }
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Exit code once it exits within `timeout`, or -1.
  int Wait(milliseconds timeout = milliseconds(30000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return -1;
  }
  // Sends `sig` to this daemon; nothing once it has exited (Wait saw it).
  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // SIGSTOP, returning once every thread has stopped (stop_process.h).
  void Pause() {
    if (pid_ > 0) {
      EXPECT_TRUE(segstore::testing::StopProcess(pid_)) << "not every thread stopped";
    }
  }

 private:
  pid_t pid_ = -1;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The port in "STATUS=serving on 127.0.0.1:PORT".
inline uint16_t PortOf(const std::string& ready) {
  const std::string key = "serving on 127.0.0.1:";
  const size_t at = ready.find(key);
  if (at == std::string::npos) return 0;
  return static_cast<uint16_t>(std::stoi(ready.substr(at + key.size())));
}

// The admin port in "STATUS=serving on ..., admin on http://127.0.0.1:PORT".
inline uint16_t AdminPortOf(const std::string& ready) {
  const std::string key = "admin on http://127.0.0.1:";
  const size_t at = ready.find(key);
  if (at == std::string::npos) return 0;
  return static_cast<uint16_t>(std::stoi(ready.substr(at + key.size())));
}

inline std::unique_ptr<client::Client> Connect(uint16_t port) {
  client::ClientOptions o;
  o.port = port;
  o.connect_timeout = milliseconds(10000);
  o.request_timeout = milliseconds(10000);
  auto c = client::Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Runs segctl against 127.0.0.1:`port` with `args` and (unless `args` sets
// one) a generous timeout; returns its exit code (-1 if it did not exit) and its output, stdout and
// stderr together. SEGSTORE_AUTH_SECRET_FILE is unset unless `env`
// ("NAME=value ...") sets it.
inline std::pair<int, std::string> Segctl(uint16_t port, const std::string& args,
                                          const std::string& env = "") {
  const std::string timeout =
      args.find("--timeout") == std::string::npos ? " --timeout 20000 " : " ";
  const std::string cmd = "env -u SEGSTORE_AUTH_SECRET_FILE " + env + " " + SEGCTL_PATH +
                          " --server 127.0.0.1:" + std::to_string(port) + timeout + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "cannot run " + cmd};
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

}  // namespace segstore::server::testing
