// EmulatedQueue: the part of an IoQueue that does not need io_uring: the
// queue of submitted operations, timers, and a pollable event descriptor (an
// epoll set of an eventfd and a timerfd). Subclasses decide how an operation
// is carried out: SyncQueue with pread/pwrite (the fallback), FaultQueue on an
// in-memory device (tests). Owner-thread only, like every IoQueue.
#pragma once

#include <chrono>
#include <vector>

#include "storage/io_queue.h"

namespace segstore::storage {

class EmulatedQueue : public IoQueue {
 public:
  ~EmulatedQueue() override;

  void Read(uint64_t offset, void* buf, uint32_t len, IoCompletion* done) override;
  void Write(uint64_t offset, const void* buf, uint32_t len, IoCompletion* done) override;
  void Timeout(std::chrono::nanoseconds after, IoCompletion* done) override;
  void CancelTimeout(IoCompletion* done) override;
  void Submit() override;
  size_t Poll() override;
  size_t Wait(std::chrono::milliseconds timeout) override;
  int event_fd() const override { return epoll_fd_; }
  void Notify() override;
  void ClearEvent() override;
  uint32_t in_flight() const override { return in_flight_; }

 protected:
  struct Op {
    bool write;
    uint64_t offset;
    void* buf;
    uint32_t len;
    IoCompletion* done;
  };
  struct Done {
    IoCompletion* done;
    int32_t result;
  };

  EmulatedQueue();
  // Whether construction managed to create its descriptors.
  Status init_status() const { return init_status_; }
  // Takes submitted operations; they later come back through Reap().
  virtual void Start(std::vector<Op>* ops) = 0;
  // Appends the operations that have finished.
  virtual void Reap(std::vector<Done>* out) = 0;

 private:
  using Clock = std::chrono::steady_clock;
  struct Timer {
    Clock::time_point due;
    IoCompletion* done;
  };
  void ArmTimerFd();

  int epoll_fd_ = -1;
  int wake_fd_ = -1;   // eventfd: submissions and Notify()
  int timer_fd_ = -1;  // timerfd: the earliest timer
  Status init_status_;
  uint32_t in_flight_ = 0;
  std::vector<Op> queued_;
  std::vector<Timer> timers_;
  std::vector<Done> reaped_;
  std::vector<Done> cancelled_;
};

// pread/pwritev2(RWF_DSYNC) at submission time. The fallback for kernels and
// sandboxes without io_uring: correct, but one blocking system call per I/O.
// Also what kAuto picks in a ThreadSanitizer build, where it tells the
// sanitizer of the kernel's accesses to each buffer (KernelAccess).
class SyncQueue final : public EmulatedQueue {
 public:
  static Result<std::unique_ptr<IoQueue>> Open(int fd);
  const char* backend_name() const override { return "sync"; }

 protected:
  void Start(std::vector<Op>* ops) override;
  void Reap(std::vector<Done>* out) override;

 private:
  explicit SyncQueue(int fd) : fd_(fd) {}
  struct Finished {
    Op op;
    int32_t result;
  };
  int fd_;
  std::vector<Finished> done_;
};

}  // namespace segstore::storage
