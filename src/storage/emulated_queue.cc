#include "storage/emulated_queue.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#if defined(SEGSTORE_THREAD_SANITIZER)
// Exported by the ThreadSanitizer runtime (not in its public header): a plain
// read or write of a range, made by the calling thread now.
extern "C" void __tsan_read_range(void* addr, unsigned long size);
extern "C" void __tsan_write_range(void* addr, unsigned long size);
#endif

namespace segstore::storage {
namespace {

// Tells ThreadSanitizer that the kernel reads (a device write) or writes (a
// device read) the buffer now, on this thread: pwritev2 is not intercepted,
// and io_uring may touch a buffer anywhere from submission to completion, so
// SyncQueue declares the access at both ends. A no-op in other builds.
void KernelAccess([[maybe_unused]] bool write, [[maybe_unused]] void* buf,
                  [[maybe_unused]] uint32_t len) {
#if defined(SEGSTORE_THREAD_SANITIZER)
  if (write) {
    __tsan_read_range(buf, len);
  } else {
    __tsan_write_range(buf, len);
  }
#endif
}

}  // namespace

EmulatedQueue::EmulatedQueue() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0 || timer_fd_ < 0) {
    init_status_ = Status::IOError(fmt::format("emulated queue: {}", std::strerror(errno)));
    return;
  }
  for (int fd : {wake_fd_, timer_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) < 0) {
      init_status_ = Status::IOError(fmt::format("epoll_ctl: {}", std::strerror(errno)));
      return;
    }
  }
}

EmulatedQueue::~EmulatedQueue() {
  for (int fd : {epoll_fd_, wake_fd_, timer_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void EmulatedQueue::Read(uint64_t offset, void* buf, uint32_t len, IoCompletion* done) {
  queued_.push_back(Op{false, offset, buf, len, done});
  ++in_flight_;
}

void EmulatedQueue::Write(uint64_t offset, const void* buf, uint32_t len, IoCompletion* done) {
  queued_.push_back(Op{true, offset, const_cast<void*>(buf), len, done});
  ++in_flight_;
}

void EmulatedQueue::Timeout(std::chrono::nanoseconds after, IoCompletion* done) {
  timers_.push_back(Timer{Clock::now() + after, done});
  ++in_flight_;
  ArmTimerFd();
}

void EmulatedQueue::CancelTimeout(IoCompletion* done) {
  for (size_t i = 0; i < timers_.size(); ++i) {
    if (timers_[i].done == done) {
      cancelled_.push_back(Done{done, -ECANCELED});
      timers_[i] = timers_.back();
      timers_.pop_back();
      ArmTimerFd();
      Notify();
      return;
    }
  }
}

void EmulatedQueue::ArmTimerFd() {
  itimerspec spec{};
  if (!timers_.empty()) {
    auto due = std::min_element(timers_.begin(), timers_.end(), [](const Timer& a, const Timer& b) {
                 return a.due < b.due;
               })->due;
    auto wait = std::max<std::chrono::nanoseconds>(due - Clock::now(), std::chrono::nanoseconds(1));
    spec.it_value.tv_sec = wait.count() / 1'000'000'000;
    spec.it_value.tv_nsec = wait.count() % 1'000'000'000;
  }
  ::timerfd_settime(timer_fd_, 0, &spec, nullptr);
}

void EmulatedQueue::Submit() {
  if (queued_.empty()) return;
  std::vector<Op> ops;
  ops.swap(queued_);
  Start(&ops);
  Notify();
}

size_t EmulatedQueue::Poll() {
  Submit();
  reaped_.clear();
  reaped_.insert(reaped_.end(), cancelled_.begin(), cancelled_.end());
  cancelled_.clear();
  auto now = Clock::now();
  bool fired = false;
  for (size_t i = 0; i < timers_.size();) {
    if (timers_[i].due <= now) {
      reaped_.push_back(Done{timers_[i].done, -ETIME});
      timers_[i] = timers_.back();
      timers_.pop_back();
      fired = true;
    } else {
      ++i;
    }
  }
  if (fired) ArmTimerFd();
  Reap(&reaped_);
  // Run from a local copy: a completion may submit more work into this queue.
  std::vector<Done> run;
  run.swap(reaped_);
  in_flight_ -= static_cast<uint32_t>(run.size());
  for (const Done& d : run) d.done->OnIoComplete(d.result);
  return run.size();
}

size_t EmulatedQueue::Wait(std::chrono::milliseconds timeout) {
  size_t ran = Poll();
  if (ran > 0) return ran;
  epoll_event events[2];
  int n = ::epoll_wait(epoll_fd_, events, 2, static_cast<int>(timeout.count()));
  if (n > 0) ClearEvent();
  return Poll();
}

void EmulatedQueue::Notify() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void EmulatedQueue::ClearEvent() {
  uint64_t value;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_, &value, sizeof value);
  n = ::read(timer_fd_, &value, sizeof value);
}

Result<std::unique_ptr<IoQueue>> SyncQueue::Open(int fd) {
  std::unique_ptr<SyncQueue> q(new SyncQueue(fd));
  if (!q->init_status().ok()) return q->init_status();
  return std::unique_ptr<IoQueue>(std::move(q));
}

void SyncQueue::Start(std::vector<Op>* ops) {
  for (const Op& op : *ops) {
    ssize_t n;
    if (op.write) {
      KernelAccess(true, op.buf, op.len);
      iovec iov{op.buf, op.len};
      do {
        n = ::pwritev2(fd_, &iov, 1, static_cast<off_t>(op.offset), RWF_DSYNC);
      } while (n < 0 && errno == EINTR);
    } else {
      do {
        n = ::pread(fd_, op.buf, op.len, static_cast<off_t>(op.offset));
      } while (n < 0 && errno == EINTR);
    }
    done_.push_back(Finished{op, n < 0 ? -errno : static_cast<int32_t>(n)});
  }
}

void SyncQueue::Reap(std::vector<Done>* out) {
  for (const Finished& f : done_) {
    KernelAccess(f.op.write, f.op.buf, f.op.len);
    out->push_back(Done{f.op.done, f.result});
  }
  done_.clear();
}

}  // namespace segstore::storage
