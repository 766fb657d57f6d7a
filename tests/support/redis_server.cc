#include "support/redis_server.h"

#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "support/stop_process.h"

namespace segstore::testing {

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
  }
  ::close(fd);
  return port;
}

std::string RedisServerBinary() {
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      const std::string candidate = dir + "/redis-server";
      if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "/usr/bin/redis-check-rdb";
}

SyncClient::SyncClient(uint16_t port) {
  timeval tv{5, 0};
  c_ = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c_ != nullptr && c_->err == 0) redisSetTimeout(c_, tv);
}

SyncClient::~SyncClient() {
  if (c_ != nullptr) redisFree(c_);
}

std::unique_ptr<redisReply, void (*)(redisReply*)> SyncClient::Run(std::vector<std::string> words) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& w : words) {
    argv.push_back(w.c_str());
    lens.push_back(w.size());
  }
  void* r = ok() ? redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data())
                 : nullptr;
  return {static_cast<redisReply*>(r), [](redisReply* p) {
            if (p != nullptr) freeReplyObject(p);
          }};
}

std::map<std::string, std::string> SyncClient::HashOf(const std::string& key) {
  std::map<std::string, std::string> out;
  auto r = Run({"HGETALL", key});
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    out.emplace(std::string(r->element[i]->str, r->element[i]->len),
                std::string(r->element[i + 1]->str, r->element[i + 1]->len));
  }
  return out;
}

long long SyncClient::Integer(std::vector<std::string> words) {  // NOLINT: hiredis's type
  auto r = Run(std::move(words));
  return r != nullptr && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

RedisServer::RedisServer(std::vector<std::string> extra_args)
    : extra_args_(std::move(extra_args)) {}

RedisServer::~RedisServer() { Stop(); }

bool RedisServer::Start(std::string* why) {
  char dir_template[] = "/tmp/segstore-redis-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    *why = "mkdtemp failed";
    return false;
  }
  dir_ = dir_template;
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = FreePort();
    if (port_ == 0) continue;
    if (!Spawn()) {
      *why = "fork failed";
      return false;
    }
    if (WaitReady()) return true;
    Stop();
  }
  *why = "redis did not start; see " + dir_ + "/redis.log";
  return false;
}

bool RedisServer::Pause() { return StopProcess(pid_); }
void RedisServer::Resume() { ::kill(pid_, SIGCONT); }

bool RedisServer::Spawn() {
  const std::string binary = RedisServerBinary();
  std::vector<std::string> args = {"redis-server",
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--daemonize",
                                   "no",
                                   "--dir",
                                   dir_,
                                   "--logfile",
                                   dir_ + "/redis.log"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    // Dies with the test, even if the test crashes before TearDown.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  return true;
}

bool RedisServer::WaitReady() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: the port, probably
      pid_ = -1;
      return false;
    }
    SyncClient client(port_);
    if (client.ok()) {
      auto r = client.Run({"PING"});
      if (r != nullptr && r->type == REDIS_REPLY_STATUS && std::string(r->str) == "PONG") {
        return true;
      }
    }
    ::usleep(50 * 1000);
  }
  return false;
}

void RedisServer::End(int signal) {
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

}  // namespace segstore::testing
