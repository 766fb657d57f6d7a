#include "storage/uring_queue.h"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace segstore::storage {
namespace {

constexpr unsigned kReapBatch = 64;

void* AsUserData(IoCompletion* done) { return static_cast<void*>(done); }

}  // namespace

Result<std::unique_ptr<IoQueue>> UringQueue::Open(int fd, uint32_t depth) {
  int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) return Status::IOError(fmt::format("eventfd: {}", std::strerror(errno)));
  std::unique_ptr<UringQueue> q(new UringQueue(fd, efd));

  io_uring_params params{};
  // A single submitting thread, and completions that need not interrupt it:
  // both cut per-I/O overhead. Older kernels reject the flags; retry without.
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN;
  int rc = io_uring_queue_init_params(depth, &q->ring_, &params);
  if (rc == -EINVAL) {
    params = io_uring_params{};
    rc = io_uring_queue_init_params(depth, &q->ring_, &params);
  }
  if (rc < 0) return Status::IOError(fmt::format("io_uring_queue_init: {}", std::strerror(-rc)));
  q->ring_ready_ = true;
  rc = io_uring_register_eventfd(&q->ring_, efd);
  if (rc < 0) {
    return Status::IOError(fmt::format("io_uring_register_eventfd: {}", std::strerror(-rc)));
  }
  return std::unique_ptr<IoQueue>(std::move(q));
}

UringQueue::~UringQueue() {
  // The owner drains its I/O before destroying the queue (buffers and
  // completions are its own); a ring torn down with I/O in flight would let
  // the kernel write into memory the owner may already have freed.
  if (in_flight_ > 0) {
    fmt::print(stderr, "segstore: io_uring queue destroyed with {} operations in flight\n",
               in_flight_);
  }
  if (ring_ready_) io_uring_queue_exit(&ring_);
  ::close(event_fd_);
}

io_uring_sqe* UringQueue::NextSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    // The submission ring is full: hand it to the kernel and try again.
    Submit();
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void UringQueue::Read(uint64_t offset, void* buf, uint32_t len, IoCompletion* done) {
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_read(sqe, fd_, buf, len, offset);
  io_uring_sqe_set_data(sqe, AsUserData(done));
  ++in_flight_;
}

void UringQueue::Write(uint64_t offset, const void* buf, uint32_t len, IoCompletion* done) {
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_write(sqe, fd_, buf, len, offset);
  sqe->rw_flags = RWF_DSYNC;
  io_uring_sqe_set_data(sqe, AsUserData(done));
  ++in_flight_;
}

void UringQueue::Timeout(std::chrono::nanoseconds after, IoCompletion* done) {
  // The entry first: getting one may submit, which forgets pending timespecs.
  io_uring_sqe* sqe = NextSqe();
  __kernel_timespec& ts = pending_timespecs_.emplace_back();
  ts.tv_sec = after.count() / 1'000'000'000;
  ts.tv_nsec = after.count() % 1'000'000'000;
  io_uring_prep_timeout(sqe, &ts, 0, 0);
  io_uring_sqe_set_data(sqe, AsUserData(done));
  ++in_flight_;
}

void UringQueue::CancelTimeout(IoCompletion* done) {
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_timeout_remove(sqe, reinterpret_cast<__u64>(AsUserData(done)), 0);
  io_uring_sqe_set_data(sqe, AsUserData(&ignore_));
  ++in_flight_;
}

void UringQueue::Submit() {
  for (;;) {
    int rc = fail_submits_ > 0 ? (--fail_submits_, fail_error_) : io_uring_submit(&ring_);
    if (rc >= 0) break;
    if (rc == -EINTR) continue;
    if (rc == -EAGAIN || rc == -EBUSY) {
      // The kernel wants completions reaped first. Take them off the ring but
      // run them later, in Poll(): Submit() is called from the middle of
      // state changes that a callback must not see.
      Reap(&deferred_);
      continue;
    }
    // Submission itself failing means the ring is unusable; nothing can be
    // recovered here and continuing would lose track of I/O.
    fmt::print(stderr, "segstore: io_uring_submit failed: {}\n", std::strerror(-rc));
    std::abort();
  }
  pending_timespecs_.clear();
}

void UringQueue::Reap(std::vector<Completed>* out) {
  for (;;) {
    io_uring_cqe* cqes[kReapBatch];
    unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, kReapBatch);
    if (n == 0) return;
    for (unsigned i = 0; i < n; ++i) {
      // Kernels without IORING_FEAT_EXT_ARG (before 5.11): liburing's own
      // timeout for a timed wait completes here too; it is not ours.
      if (cqes[i]->user_data == LIBURING_UDATA_TIMEOUT) continue;
      out->push_back(
          Completed{static_cast<IoCompletion*>(io_uring_cqe_get_data(cqes[i])), cqes[i]->res});
    }
    io_uring_cq_advance(&ring_, n);
    if (n < kReapBatch) return;
  }
}

size_t UringQueue::Poll() {
  // Copy out before running: a callback may queue (and submit) new I/O.
  std::vector<Completed> run;
  run.swap(spare_);  // reuse the last call's buffer
  run.insert(run.end(), deferred_.begin(), deferred_.end());
  deferred_.clear();
  Reap(&run);
  const size_t ran = run.size();
  in_flight_ -= static_cast<uint32_t>(ran);
  for (const Completed& c : run) c.done->OnIoComplete(c.result);
  run.clear();
  if (run.capacity() > spare_.capacity()) spare_.swap(run);
  return ran;
}

size_t UringQueue::Wait(std::chrono::milliseconds timeout) {
  size_t ran = Poll();
  if (ran > 0) return ran;
  if (!deferred_.empty()) return Poll();
  __kernel_timespec ts{};
  ts.tv_sec = timeout.count() / 1000;
  ts.tv_nsec = (timeout.count() % 1000) * 1'000'000;
  io_uring_cqe* cqe = nullptr;
  int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
  pending_timespecs_.clear();
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
    fmt::print(stderr, "segstore: io_uring wait failed: {}\n", std::strerror(-rc));
    std::abort();
  }
  return Poll();
}

void UringQueue::Notify() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof one);
}

void UringQueue::ClearEvent() {
  uint64_t value;
  [[maybe_unused]] ssize_t n = ::read(event_fd_, &value, sizeof value);
}

}  // namespace segstore::storage
