#include "support/etcd_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "support/redis_server.h"  // FreePort()
#include "support/stop_process.h"

namespace segstore::testing {

namespace {

constexpr const char* kEtcdBinary = "/usr/bin/etcd";
// Starts of the whole cluster: the first, plus up to 3 on new ports.
constexpr int kStartAttempts = 4;
// A busy 2-core machine can take a while to elect a leader.
constexpr auto kHealthDeadline = std::chrono::seconds(60);
constexpr auto kStopGrace = std::chrono::seconds(5);

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

bool Healthy(uint16_t port) {
  const HttpResponse r = HttpRequest(port, "GET", "/health", "", std::chrono::seconds(3));
  return r.status == 200 && r.body.find("\"health\":\"true\"") != std::string::npos;
}

std::string Url(uint16_t port) { return "http://127.0.0.1:" + std::to_string(port); }

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "ended";
}

}  // namespace

HttpResponse HttpRequest(uint16_t port, std::string_view method, const std::string& path,
                         const std::string& body, std::chrono::milliseconds timeout) {
  HttpResponse out;
  const auto deadline = Clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return out;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  std::string raw;
  bool complete = false;
  do {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno != EINPROGRESS) break;
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, RemainingMs(deadline)) != 1) break;
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) break;
    }
    std::string request = std::string(method) + " " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n";
    if (!body.empty()) {
      request += "Content-Type: application/json\r\n";
      request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    request += "Connection: close\r\n\r\n" + body;
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, RemainingMs(deadline)) != 1) break;
    }
    if (sent < request.size()) break;
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        raw.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {  // the server closed: the whole response is in
        complete = true;
        break;
      }
      if (errno != EAGAIN && errno != EINTR) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, RemainingMs(deadline)) != 1) break;
    }
  } while (false);
  ::close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\n<body>"
  const size_t header_end = raw.find("\r\n\r\n");
  if (!complete || raw.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos) return out;
  out.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  out.body = raw.substr(header_end + 4);
  return out;
}

EtcdCluster::EtcdCluster(int members) : members_(members < 1 ? 1 : members) {}

EtcdCluster::~EtcdCluster() {
  std::vector<int> all;
  for (int i = 0; i < size(); ++i) all.push_back(i);
  End(all);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool EtcdCluster::Start(std::string* why) {
  std::vector<int> all;
  for (int i = 0; i < size(); ++i) all.push_back(i);
  End(all);
  if (dir_.empty()) {
    char dir_template[] = "/tmp/segstore-etcd-XXXXXX";
    if (::mkdtemp(dir_template) == nullptr) {
      *why = "mkdtemp failed";
      return false;
    }
    dir_ = dir_template;
  }
  std::string last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    if (!PickPorts()) {
      last = "no free loopback ports";
      continue;
    }
    // Member IDs derive from the peer URLs and the token: a new set of ports
    // needs new data dirs.
    token_ = "segstore-test-" + std::filesystem::path(dir_).filename().string() + "-" +
             std::to_string(attempt);
    for (int i : all) {
      std::error_code ec;
      std::filesystem::remove_all(dir_ + "/m" + std::to_string(i), ec);
    }
    bool spawned = true;
    for (int i : all) {
      if (!Spawn(i)) {
        spawned = false;
        break;
      }
    }
    if (!spawned) {
      for (int i : all) Kill(i);
      *why = "fork of etcd failed";
      return false;
    }
    bool port_clash = false;
    if (WaitHealthy(all, &last, &port_clash)) return true;
    for (int i : all) Kill(i);
    if (!port_clash) {
      *why = last;
      return false;
    }
  }
  *why = "etcd did not start after " + std::to_string(kStartAttempts) + " attempts; last: " + last;
  return false;
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (const Member& m : members_) out.push_back(Url(m.client_port));
  return out;
}

std::string EtcdCluster::endpoint(int i) const {
  return Valid(i) ? Url(members_[i].client_port) : std::string();
}

uint16_t EtcdCluster::client_port(int i) const { return Valid(i) ? members_[i].client_port : 0; }

pid_t EtcdCluster::pid(int i) const { return Valid(i) ? members_[i].pid : -1; }

void EtcdCluster::Kill(int i) {
  if (!Valid(i) || members_[i].pid <= 0) return;
  ::kill(members_[i].pid, SIGKILL);
  int status = 0;
  while (::waitpid(members_[i].pid, &status, 0) < 0 && errno == EINTR) {
  }
  members_[i].pid = -1;
}

void EtcdCluster::Stop(int i) {
  if (Valid(i)) End({i});
}

bool EtcdCluster::Restart(int i, std::string* why) {
  if (!Valid(i)) {
    *why = "no member " + std::to_string(i);
    return false;
  }
  if (members_[i].pid > 0) {
    *why = "member " + std::to_string(i) + " is still running";
    return false;
  }
  if (members_[i].client_port == 0) {
    *why = "member " + std::to_string(i) + " was never started";
    return false;
  }
  if (!Spawn(i)) {
    *why = "fork of etcd failed";
    return false;
  }
  bool port_clash = false;
  if (WaitHealthy({i}, why, &port_clash)) return true;
  End({i});
  return false;
}

bool EtcdCluster::Pause(int i) {
  return Valid(i) && members_[i].pid > 0 && StopProcess(members_[i].pid);
}

void EtcdCluster::Resume(int i) {
  if (Valid(i) && members_[i].pid > 0) ::kill(members_[i].pid, SIGCONT);
}

bool EtcdCluster::PickPorts() {
  std::set<uint16_t> taken;
  for (Member& m : members_) {
    for (uint16_t* port : {&m.client_port, &m.peer_port}) {
      *port = 0;
      for (int tries = 0; tries < 20 && *port == 0; ++tries) {
        const uint16_t p = FreePort();
        if (p != 0 && taken.insert(p).second) *port = p;
      }
      if (*port == 0) return false;
    }
  }
  return true;
}

std::string EtcdCluster::LogPath(int i) const { return dir_ + "/m" + std::to_string(i) + ".log"; }

std::string EtcdCluster::LogSinceSpawn(int i) const {
  std::ifstream in(LogPath(i), std::ios::binary);
  if (!in) return {};
  in.seekg(members_[i].log_offset);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool EtcdCluster::Spawn(int i) {
  Member& self = members_[i];
  std::string initial_cluster;
  for (int j = 0; j < size(); ++j) {
    if (j > 0) initial_cluster += ",";
    initial_cluster += "m" + std::to_string(j) + "=" + Url(members_[j].peer_port);
  }
  const std::string client_url = Url(self.client_port);
  const std::string peer_url = Url(self.peer_port);
  std::vector<std::string> args = {"etcd",
                                   "--name",
                                   "m" + std::to_string(i),
                                   "--data-dir",
                                   dir_ + "/m" + std::to_string(i),
                                   "--listen-client-urls",
                                   client_url,
                                   "--advertise-client-urls",
                                   client_url,
                                   "--listen-peer-urls",
                                   peer_url,
                                   "--initial-advertise-peer-urls",
                                   peer_url,
                                   "--initial-cluster",
                                   initial_cluster,
                                   "--initial-cluster-state",
                                   "new",
                                   "--initial-cluster-token",
                                   token_,
                                   "--heartbeat-interval",
                                   "50",
                                   "--election-timeout",
                                   "500",
                                   "--logger",
                                   "zap",
                                   "--log-outputs",
                                   "stderr",
                                   "--log-level",
                                   "error"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Appended to, so that a restart keeps the earlier runs' lines.
  const int log_fd = ::open(LogPath(i).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return false;
  struct stat st {};
  self.log_offset = ::fstat(log_fd, &st) == 0 ? st.st_size : 0;
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to execv.
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    // Dies with the test, even if the test crashes before TearDown.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    ::execv(kEtcdBinary, argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) return false;
  self.pid = pid;
  return true;
}

bool EtcdCluster::WaitHealthy(const std::vector<int>& which, std::string* why, bool* port_clash) {
  *port_clash = false;
  const auto deadline = Clock::now() + kHealthDeadline;
  std::set<int> pending(which.begin(), which.end());
  while (true) {
    for (auto it = pending.begin(); it != pending.end();) {
      const int i = *it;
      Member& m = members_[i];
      int status = 0;
      if (m.pid <= 0 || ::waitpid(m.pid, &status, WNOHANG) == m.pid) {
        m.pid = -1;
        const std::string log = LogSinceSpawn(i);
        *port_clash = log.find("address already in use") != std::string::npos;
        *why = "etcd m" + std::to_string(i) + " " + DescribeStatus(status) + "; see " + LogPath(i) +
               (log.empty() ? "" : ": " + log.substr(0, 600));
        return false;
      }
      if (Healthy(m.client_port)) {
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (pending.empty()) return true;
    if (Clock::now() >= deadline) break;
    ::usleep(50 * 1000);
  }
  std::ostringstream out;
  out << "etcd member(s)";
  for (int i : pending) out << " m" << i;
  out << " not healthy after " << kHealthDeadline.count() << " s; see " << dir_ << "/m*.log";
  *why = out.str();
  return false;
}

void EtcdCluster::End(const std::vector<int>& which) {
  // One at a time: a leader told to stop first hands its leadership to a
  // follower, and waits (etcd's request timeout, 6 s here) if that follower
  // is stopping at the same moment.
  for (int i : which) {
    if (!Valid(i) || members_[i].pid <= 0) continue;
    const pid_t pid = members_[i].pid;
    ::kill(pid, SIGCONT);
    ::kill(pid, SIGTERM);
    const auto deadline = Clock::now() + kStopGrace;
    int status = 0;
    pid_t r = 0;
    while (true) {
      r = ::waitpid(pid, &status, WNOHANG);
      if (r < 0 && errno == EINTR) continue;
      if (r != 0 || Clock::now() >= deadline) break;
      ::usleep(20 * 1000);
    }
    if (r == 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    members_[i].pid = -1;
  }
}

}  // namespace segstore::testing
