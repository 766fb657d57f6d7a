// UringQueue: the io_uring implementation of IoQueue; the production path.
// One ring per thread, created on that thread (IORING_SETUP_SINGLE_ISSUER where
// the kernel has it). An eventfd registered with the ring is event_fd(): the
// kernel signals it on every completion.
#pragma once

#include <liburing.h>

#include <deque>
#include <memory>
#include <vector>

#include "storage/io_queue.h"

namespace segstore::storage {

class UringQueue final : public IoQueue {
 public:
  // Opens a ring of `depth` entries over `fd` (not owned; must outlive the queue).
  // Destroy only with nothing in flight: the owner drains its own I/O first.
  static Result<std::unique_ptr<IoQueue>> Open(int fd, uint32_t depth);
  ~UringQueue() override;

  const char* backend_name() const override { return "io_uring"; }
  void Read(uint64_t offset, void* buf, uint32_t len, IoCompletion* done) override;
  void Write(uint64_t offset, const void* buf, uint32_t len, IoCompletion* done) override;
  void Timeout(std::chrono::nanoseconds after, IoCompletion* done) override;
  void CancelTimeout(IoCompletion* done) override;
  void Submit() override;
  size_t Poll() override;
  size_t Wait(std::chrono::milliseconds timeout) override;
  int event_fd() const override { return event_fd_; }
  void Notify() override;
  void ClearEvent() override;
  uint32_t in_flight() const override { return in_flight_; }

  // Testing: the next `n` submissions report `error` (-EBUSY, -EAGAIN) as
  // the kernel does when it wants completions reaped first, before the real
  // submission goes ahead.
  void FailSubmitsForTesting(int n, int error) {
    fail_submits_ = n;
    fail_error_ = error;
  }

 private:
  UringQueue(int fd, int event_fd) : fd_(fd), event_fd_(event_fd) {}
  io_uring_sqe* NextSqe();
  struct Completed {
    IoCompletion* done;
    int32_t result;
  };
  // Moves every completion on the ring to `out` without running it.
  void Reap(std::vector<Completed>* out);

  // Completes the cancel request itself; the cancelled timer reports on its own.
  struct Ignore final : IoCompletion {
    void OnIoComplete(int32_t) override {}
  };
  Ignore ignore_;

  io_uring ring_{};
  bool ring_ready_ = false;
  int fd_;
  int event_fd_;
  uint32_t in_flight_ = 0;
  // Timeout specs must stay put until the kernel has read them at submission.
  std::deque<__kernel_timespec> pending_timespecs_;
  std::vector<Completed> deferred_;  // reaped by Submit(), run by the next Poll()
  std::vector<Completed> spare_;     // Poll()'s buffer, kept between calls
  int fail_submits_ = 0;
  int fail_error_ = 0;
};

}  // namespace segstore::storage
