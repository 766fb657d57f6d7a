#include "support/kafka_mock.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace segstore::testing {

namespace {

#ifndef SEGSTORE_TEST_KAFKA_PATH
#error "SEGSTORE_TEST_KAFKA_PATH must name the segstore-test-kafka executable"
#endif
constexpr const char* kBinary = SEGSTORE_TEST_KAFKA_PATH;

using Clock = std::chrono::steady_clock;
// A busy 2-core machine may take a while to start a process.
constexpr auto kStartDeadline = std::chrono::seconds(30);
constexpr auto kCommandDeadline = std::chrono::seconds(10);
constexpr auto kExitGrace = std::chrono::seconds(5);

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

void Set(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

}  // namespace

KafkaMock::KafkaMock(KafkaMockOptions options) : options_(std::move(options)) {}

KafkaMock::~KafkaMock() { End(); }

bool KafkaMock::Start(std::string* why) {
  End();
  // The child's stdin is a socket, so that a write to a child that died
  // fails (MSG_NOSIGNAL) instead of raising SIGPIPE in the test.
  int in[2];
  int out[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    Set(why, "socketpair failed");
    return false;
  }
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    Set(why, "pipe failed");
    return false;
  }
  std::vector<std::string> args = {
      "segstore-test-kafka", "--brokers",    std::to_string(options_.brokers),   "--topic",
      options_.topic,        "--partitions", std::to_string(options_.partitions)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to execv.
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    // Dies with the test, even if the test crashes before its destructor.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    ::execv(kBinary, argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    Set(why, "fork failed");
    return false;
  }
  pid_ = pid;
  to_child_ = in[1];
  from_child_ = out[0];
  buffer_.clear();
  std::string line;
  if (!ReadLine(Clock::now() + kStartDeadline, &line)) {
    End();
    Set(why, std::string("segstore-test-kafka (") + kBinary + ") printed no bootstrap line");
    return false;
  }
  if (line.rfind("bootstrap ", 0) != 0) {
    End();
    Set(why, "segstore-test-kafka said: " + line);
    return false;
  }
  bootstrap_ = line.substr(10);
  return true;
}

bool KafkaMock::ReadLine(Clock::time_point deadline, std::string* line) {
  for (;;) {
    const size_t eol = buffer_.find('\n');
    if (eol != std::string::npos) {
      *line = buffer_.substr(0, eol);
      buffer_.erase(0, eol + 1);
      return true;
    }
    pollfd p{from_child_, POLLIN, 0};
    const int r = ::poll(&p, 1, RemainingMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;  // the deadline passed
    char buf[4096];
    const ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // the child ended
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

bool KafkaMock::Command(const std::string& line, std::string* why) {
  if (pid_ <= 0) {
    Set(why, "the mock is not running");
    return false;
  }
  const std::string out = line + "\n";
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(to_child_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Set(why, "the mock's stdin is closed");
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  if (!ReadLine(Clock::now() + kCommandDeadline, &answer)) {
    Set(why, "no answer to '" + line + "'");
    return false;
  }
  if (answer == "ok") return true;
  Set(why, "'" + line + "': " + answer);
  return false;
}

bool KafkaMock::BrokerDown(int broker_id, std::string* why) {
  return Command("down " + std::to_string(broker_id), why);
}

bool KafkaMock::BrokerUp(int broker_id, std::string* why) {
  return Command("up " + std::to_string(broker_id), why);
}

bool KafkaMock::SetLeader(int partition, int broker_id, std::string* why) {
  return Command("leader " + std::to_string(partition) + " " + std::to_string(broker_id), why);
}

bool KafkaMock::PushErrors(std::string_view api, std::string_view error, int count,
                           std::string* why) {
  return Command(
      "errors " + std::string(api) + " " + std::string(error) + " " + std::to_string(count), why);
}

bool KafkaMock::ClearErrors(std::string* why) { return Command("clear", why); }

bool KafkaMock::SetRtt(int broker_id, std::chrono::milliseconds rtt, std::string* why) {
  return Command("rtt " + std::to_string(broker_id) + " " + std::to_string(rtt.count()), why);
}

bool KafkaMock::CreateTopic(std::string_view name, int partitions, std::string* why) {
  return Command("topic " + std::string(name) + " " + std::to_string(partitions), why);
}

bool KafkaMock::SetTopicError(std::string_view name, std::string_view error, std::string* why) {
  return Command("topic-error " + std::string(name) + " " + std::string(error), why);
}

void KafkaMock::End() {
  if (to_child_ >= 0) {
    ::close(to_child_);  // end of its stdin: it exits
    to_child_ = -1;
  }
  if (pid_ > 0) {
    const auto deadline = Clock::now() + kExitGrace;
    int status = 0;
    pid_t r = 0;
    while (true) {
      r = ::waitpid(pid_, &status, WNOHANG);
      if (r < 0 && errno == EINTR) continue;
      if (r != 0 || Clock::now() >= deadline) break;
      ::usleep(10 * 1000);
    }
    if (r == 0) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pid_ = -1;
  }
  if (from_child_ >= 0) {
    ::close(from_child_);
    from_child_ = -1;
  }
  buffer_.clear();
}

}  // namespace segstore::testing
