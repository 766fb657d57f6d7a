// A plain POSIX TCP client for tests of the RESP port: it writes raw bytes
// and reads back one whole RESP reply at a time, as the bytes the server
// sent (so a test can hold a reply to its exact encoding), with poll()-based
// timeouts, and tells when the server closed. Not thread-safe.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace segstore::testing {

// The bytes the whole RESP2 or RESP3 reply at the front of `s` takes; 0 when
// it has not come whole.
inline size_t RespReplyLength(std::string_view s) {
  if (s.empty()) return 0;
  const size_t eol = s.find("\r\n");
  if (eol == std::string_view::npos) return 0;
  const size_t line = eol + 2;
  int64_t n = 0;
  const auto count = [&] {
    std::from_chars(s.data() + 1, s.data() + eol, n);
    return n;
  };
  switch (s[0]) {
    case '$':
    case '=':
    case '!':
      if (count() < 0) return line;
      return s.size() >= line + static_cast<size_t>(n) + 2 ? line + static_cast<size_t>(n) + 2 : 0;
    case '*':
    case '~':
    case '>':
    case '%':
    case '|': {
      if (count() < 0) return line;
      const int64_t elements = (s[0] == '%' || s[0] == '|') ? 2 * n : n;
      size_t at = line;
      for (int64_t i = 0; i < elements; ++i) {
        const size_t one = RespReplyLength(s.substr(at));
        if (one == 0) return 0;
        at += one;
      }
      return at;
    }
    default:  // + - : _ # , (
      return line;
  }
}

class RespConn {
 public:
  RespConn() = default;
  ~RespConn() { Close(); }
  RespConn(const RespConn&) = delete;
  RespConn& operator=(const RespConn&) = delete;

  bool Connect(uint16_t port) {
    Close();
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Close();
      return false;
    }
    return true;
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    in_.clear();
    closed_ = false;
  }

  // Writes all of `data` (blocking); false when the connection broke.
  bool Write(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // A command as a multibulk of its words.
  static std::string Command(const std::vector<std::string>& words) {
    std::string out = "*" + std::to_string(words.size()) + "\r\n";
    for (const std::string& w : words) out += "$" + std::to_string(w.size()) + "\r\n" + w + "\r\n";
    return out;
  }

  // The next whole reply, as sent; nullopt when the server closed first or
  // `timeout` passed (closed() tells which).
  std::optional<std::string> Read(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (const size_t n = RespReplyLength(in_); n > 0) {
        std::string reply = in_.substr(0, n);
        in_.erase(0, n);
        return reply;
      }
      if (closed_) return std::nullopt;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        closed_ = true;
      }
    }
  }

  // Sends one command and reads its reply ("" when none came).
  std::string Call(const std::vector<std::string>& words) {
    if (!Write(Command(words))) return "";
    return Read().value_or("");
  }

  // The server closed the connection (seen by a Read).
  bool closed() const { return closed_; }
  // Bytes received after the last whole reply.
  const std::string& rest() const { return in_; }

 private:
  int fd_ = -1;
  std::string in_;
  bool closed_ = false;
};

}  // namespace segstore::testing
