// A Service with no storage behind it, for the front end's tests.
//
// Its handlers answer every request at once (inside Handle) unless told to
// hold them: then the replies wait in the handler until the test calls
// ReleaseHeld(), which signals each handler's eventfd so that the loop runs
// OnEvent() and the replies are made there, on the handler's own thread, as
// a real storage worker's would be.
//
// What a request gets: `stats` (0x03) with a 4-byte big-endian body N gets a
// response body of N bytes; every other op gets its request body echoed.
//
// Request IDs carry a tag in their top 12 bits (Tag(), IdFor()); the service
// counts requests seen and outstanding per tag, so a test that gives each
// connection its own tag sees per-connection numbers.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "proto/protocol.h"
#include "server/service.h"

namespace segstore::server::testing {

inline constexpr uint32_t IdFor(uint32_t tag, uint32_t seq) { return (tag << 20) | seq; }
inline constexpr uint32_t Tag(uint32_t request_id) { return request_id >> 20; }

// The body of a `stats` request asking for `n` response bytes.
inline std::string SizeBody(uint32_t n) {
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
}

class StubService : public Service {
 public:
  struct TagStats {
    uint64_t seen = 0;         // requests handed to a handler
    uint32_t outstanding = 0;  // seen and not yet answered
    uint32_t max_outstanding = 0;
  };

  StubService() = default;
  ~StubService() override {
    for (int fd : fds_) ::close(fd);
  }

  Result<std::unique_ptr<Handler>> NewHandler(unsigned /*thread_index*/,
                                              std::shared_ptr<LoopPoster> /*poster*/) override;

  // While set, handlers keep their replies until ReleaseHeld().
  void set_hold(bool hold) { hold_.store(hold); }
  // Makes every handler answer the requests it holds (asynchronously, on its
  // own thread). Requests that arrive afterwards are held again while
  // set_hold(true).
  void ReleaseHeld() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
    }
  }

  uint64_t held() const { return held_.load(); }
  uint64_t handled() const { return handled_.load(); }
  TagStats tag(uint32_t t) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tags_.find(t);
    return it == tags_.end() ? TagStats{} : it->second;
  }

 private:
  friend class StubHandler;

  void Seen(uint32_t tag) {
    handled_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    TagStats& s = tags_[tag];
    ++s.seen;
    ++s.outstanding;
    s.max_outstanding = std::max(s.max_outstanding, s.outstanding);
  }
  void Answered(uint32_t tag) {
    std::lock_guard<std::mutex> lock(mu_);
    --tags_[tag].outstanding;
  }

  std::atomic<bool> hold_{false};
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> handled_{0};
  mutable std::mutex mu_;
  std::vector<int> fds_;  // one eventfd per handler; owned here, outliving the handlers
  std::map<uint32_t, TagStats> tags_;
};

class StubHandler : public Handler {
 public:
  // An answer made and not yet sent (while the service holds answers).
  struct Held {
    std::string frame;
    uint32_t tag;
    Responder to;
  };

  StubHandler(StubService* service, int fd) : service_(service), fd_(fd) {}

  // Replies still held are made now, on this thread; the front end drops
  // them (their connections are closed), as the contract allows.
  ~StubHandler() override { ReplyAll(); }

  void Handle(const proto::FrameHeader& header, std::string_view body, Responder to) override {
    const uint32_t tag = Tag(header.request_id);
    service_->Seen(tag);
    Held answer{Response(header, body), tag, std::move(to)};
    if (service_->hold_.load()) {
      held_.push_back(std::move(answer));
      service_->held_.fetch_add(1);
    } else {
      Send(answer);
    }
  }

  int event_fd() const override { return fd_; }

  void OnEvent() override {
    uint64_t count = 0;
    [[maybe_unused]] ssize_t n = ::read(fd_, &count, sizeof(count));
    ReplyAll();
  }

 private:
  static std::string Response(const proto::FrameHeader& header, std::string_view body) {
    size_t size = body.size();
    const bool sized = header.op == static_cast<uint8_t>(proto::Op::kStats) && body.size() == 4;
    if (sized) {
      const auto* b = reinterpret_cast<const uint8_t*>(body.data());
      size = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    }
    proto::FrameHeader h;
    h.op = header.op;
    h.request_id = header.request_id;
    h.body_length = static_cast<uint32_t>(size);
    std::string frame(proto::kHeaderSize, '\0');
    proto::EncodeHeader(h, reinterpret_cast<uint8_t*>(frame.data()));
    if (sized) {
      frame.append(size, 'r');
    } else {
      frame.append(body);
    }
    return frame;
  }

  void ReplyAll() {
    // A reply may make the connection serve the next buffered request, which
    // re-enters Handle(): work on a batch of our own.
    auto batch = std::move(held_);
    held_.clear();
    service_->held_.fetch_sub(batch.size());
    for (Held& answer : batch) Send(answer);
  }

  void Send(Held& answer) {
    service_->Answered(answer.tag);
    answer.to.Send(std::move(answer.frame));
  }

  StubService* service_;
  int fd_;
  std::vector<Held> held_;
};

inline Result<std::unique_ptr<Handler>> StubService::NewHandler(
    unsigned /*thread_index*/, std::shared_ptr<LoopPoster> /*poster*/) {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return Status::IOError("eventfd failed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
  }
  return std::unique_ptr<Handler>(std::make_unique<StubHandler>(this, fd));
}

}  // namespace segstore::server::testing
