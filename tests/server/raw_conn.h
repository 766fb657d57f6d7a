// A plain POSIX TCP client for the front end's tests: it writes raw bytes
// (well-formed frames or not) and reads frames back with poll()-based
// timeouts, so a test can see exactly what the server sends and when it
// closes. Not thread-safe; one RawConn per thread.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "proto/protocol.h"
#include "segstore/status.h"

namespace segstore::server::testing {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

inline constexpr milliseconds kPatience{5000};  // for things that should happen

// Polls `pred` every millisecond until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& pred, milliseconds timeout = kPatience) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

struct Frame {
  proto::FrameHeader header;
  std::string raw_header;  // the 16 header bytes as sent (reserved bytes included)
  std::string body;
  uint32_t id() const { return header.request_id; }
  uint8_t op() const { return header.op; }
  Status::Code status() const { return static_cast<Status::Code>(header.status); }
};

// A whole frame: header (any version or status) and body.
inline std::string MakeFrame(uint8_t op, uint32_t request_id, std::string_view body,
                             uint8_t version = proto::kVersion, uint8_t status = 0) {
  proto::FrameHeader h;
  h.version = version;
  h.op = op;
  h.status = status;
  h.request_id = request_id;
  h.body_length = static_cast<uint32_t>(body.size());
  std::string out(proto::kHeaderSize, '\0');
  proto::EncodeHeader(h, reinterpret_cast<uint8_t*>(out.data()));
  out.append(body);
  return out;
}

// A header announcing `body_length` bytes, without the body.
inline std::string MakeHeader(uint8_t op, uint32_t request_id, uint32_t body_length) {
  proto::FrameHeader h;
  h.op = op;
  h.request_id = request_id;
  h.body_length = body_length;
  std::string out(proto::kHeaderSize, '\0');
  proto::EncodeHeader(h, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

class RawConn {
 public:
  enum class ReadResult { kFrame, kClosed, kTimeout };

  RawConn() = default;
  ~RawConn() { Close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  RawConn(RawConn&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)),
        in_(std::move(o.in_)),
        pos_(o.pos_),
        eof_(o.eof_),
        reset_(o.reset_) {}

  // Connects to 127.0.0.1:port (blocking), then makes the socket
  // non-blocking. `rcvbuf` > 0 sets SO_RCVBUF first, which bounds the window
  // the client advertises. Returns false with errno set on failure.
  bool Connect(uint16_t port, int rcvbuf = 0) {
    Close();
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int e = errno;
      Close();
      errno = e;
      return false;
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    return true;
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    in_.clear();
    pos_ = 0;
    eof_ = reset_ = false;
  }
  // Closes with SO_LINGER 0: the peer sees a reset, not an orderly close.
  void Abort() {
    if (fd_ < 0) return;
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    Close();
  }

  // Ends what this side sends (end of stream for the server) and keeps
  // reading: a client that has sent its last request.
  void ShutdownWrite() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
  }

  int fd() const { return fd_; }
  bool was_reset() const { return reset_; }

  // Writes all of `data`. While the socket is full and `drain` is set, what
  // the server sends meanwhile is read into the buffer (so a large pipelined
  // burst cannot deadlock against the server's own writes).
  ::testing::AssertionResult Write(std::string_view data, bool drain = true,
                                   milliseconds timeout = kPatience) {
    const auto deadline = Clock::now() + timeout;
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return ::testing::AssertionFailure() << "send: " << std::strerror(errno);
      }
      const int left = Remaining(deadline);
      if (left == 0) {
        return ::testing::AssertionFailure()
               << "send blocked with " << data.size() << " bytes left";
      }
      pollfd p{fd_, static_cast<short>(POLLOUT | (drain && !eof_ ? POLLIN : 0)), 0};
      if (::poll(&p, 1, left) > 0 && (p.revents & POLLIN) != 0) Fill();
    }
    return ::testing::AssertionSuccess();
  }

  // The next frame, or kClosed once the server closed (or reset) the
  // connection with no whole frame left, or kTimeout.
  ReadResult ReadFrame(Frame* frame, milliseconds timeout = kPatience) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (TakeFrame(frame)) return ReadResult::kFrame;
      if (eof_) return ReadResult::kClosed;
      const int left = Remaining(deadline);
      if (left == 0) return ReadResult::kTimeout;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) > 0) Fill();
    }
  }

  // Reads the next frame and checks it; the frame goes to *out when given.
  ::testing::AssertionResult Expect(uint32_t id, Status::Code status, Frame* out = nullptr,
                                    milliseconds timeout = kPatience) {
    Frame f;
    switch (ReadFrame(&f, timeout)) {
      case ReadResult::kClosed:
        return ::testing::AssertionFailure() << "closed while waiting for request " << id;
      case ReadResult::kTimeout:
        return ::testing::AssertionFailure()
               << "no response to request " << id << " in " << timeout.count() << " ms";
      case ReadResult::kFrame:
        break;
    }
    if (f.id() != id || f.status() != status) {
      return ::testing::AssertionFailure()
             << "expected request " << id << " status " << static_cast<int>(status) << ", got "
             << f.id() << " status " << static_cast<int>(f.status());
    }
    if (out != nullptr) *out = std::move(f);
    return ::testing::AssertionSuccess();
  }

  // The server closes the connection (orderly or by reset) within `timeout`
  // and sends no frame first.
  ::testing::AssertionResult ExpectClosed(milliseconds timeout = kPatience) {
    Frame f;
    switch (ReadFrame(&f, timeout)) {
      case ReadResult::kClosed:
        if (in_.size() > pos_) {
          return ::testing::AssertionFailure() << in_.size() - pos_ << " stray bytes before close";
        }
        return ::testing::AssertionSuccess();
      case ReadResult::kTimeout:
        return ::testing::AssertionFailure() << "still open after " << timeout.count() << " ms";
      case ReadResult::kFrame:
        break;
    }
    return ::testing::AssertionFailure()
           << "unexpected frame: request " << f.id() << " status " << static_cast<int>(f.status());
  }

  // Raw bytes, not frames (the admin endpoint's HTTP): what is buffered or
  // arrives within `timeout`, appended to *out. False when nothing came:
  // closed, or the time passed.
  bool ReadSome(std::string* out, milliseconds timeout = kPatience) {
    const auto deadline = Clock::now() + timeout;
    while (in_.size() == pos_ && !eof_) {
      const int left = Remaining(deadline);
      if (left == 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) > 0) Fill();
    }
    if (in_.size() == pos_) return false;
    out->append(in_, pos_, std::string::npos);
    in_.clear();
    pos_ = 0;
    return true;
  }

  // The server closes (orderly or by reset) within `timeout`; whatever it
  // sent first is dropped.
  bool WaitClosed(milliseconds timeout = kPatience) {
    const auto deadline = Clock::now() + timeout;
    while (!eof_) {
      const int left = Remaining(deadline);
      if (left == 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) > 0) Fill();
    }
    return true;
  }

  // Nothing arrives and the connection stays open for `duration`.
  ::testing::AssertionResult ExpectQuiet(milliseconds duration) {
    Frame f;
    switch (ReadFrame(&f, duration)) {
      case ReadResult::kTimeout:
        if (in_.size() > pos_) return ::testing::AssertionFailure() << "a partial frame arrived";
        return ::testing::AssertionSuccess();
      case ReadResult::kClosed:
        return ::testing::AssertionFailure() << "closed";
      case ReadResult::kFrame:
        break;
    }
    return ::testing::AssertionFailure() << "unexpected frame: request " << f.id();
  }

 private:
  static int Remaining(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(left);
  }

  // Reads what the socket has into in_.
  void Fill() {
    char buf[64 * 1024];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        eof_ = true;
      } else if (errno == EINTR) {
        continue;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        eof_ = true;
        reset_ = true;
      }
      return;
    }
  }

  bool TakeFrame(Frame* frame) {
    if (pos_ > 0 && pos_ >= in_.size() / 2) {
      in_.erase(0, pos_);
      pos_ = 0;
    }
    if (in_.size() - pos_ < proto::kHeaderSize) return false;
    const auto* head = reinterpret_cast<const uint8_t*>(in_.data() + pos_);
    if (head[0] != proto::kMagic0 || head[1] != proto::kMagic1) {
      ADD_FAILURE() << "the server sent bytes that are not a frame";
      in_.clear();
      pos_ = 0;
      eof_ = true;
      return false;
    }
    proto::FrameHeader h;
    (void)proto::DecodeHeader(head, UINT32_MAX, &h);
    const size_t size = proto::kHeaderSize + size_t{h.body_length};
    if (in_.size() - pos_ < size) return false;
    frame->header = h;
    frame->raw_header.assign(in_, pos_, proto::kHeaderSize);
    frame->body.assign(in_, pos_ + proto::kHeaderSize, h.body_length);
    pos_ += size;
    if (pos_ == in_.size()) {
      in_.clear();
      pos_ = 0;
    }
    return true;
  }

  int fd_ = -1;
  std::string in_;  // received; in_[pos_..] not yet returned
  size_t pos_ = 0;
  bool eof_ = false;
  bool reset_ = false;
};

}  // namespace segstore::server::testing
