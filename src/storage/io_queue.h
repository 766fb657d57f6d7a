// IoQueue: the asynchronous device I/O of one thread, and Device: what opens
// them. Every device read and write of the engine goes through an IoQueue.
//
// One IoQueue per thread (io_uring rings are not shared). All methods must be
// called from the owning thread; completions run on that thread, inside Poll()
// or Wait(). `event_fd()` becomes readable when completions may be waiting, so
// an event loop (Asio, epoll) can watch it and call Poll().
//
// Implementations: UringQueue (io_uring; the production path), SyncQueue
// (pread/pwrite, a loudly logged fallback where io_uring is forbidden) and
// FaultQueue (an in-memory device that injects faults and power loss; tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "segstore/result.h"
#include "segstore/storage.h"

namespace segstore::storage {

// Device geometry shared by every layer of the engine.
inline constexpr uint32_t kSectorSize = 4096;  // unit and alignment of every device I/O

// Something waiting for one I/O. `result` is the byte count transferred, or a
// negated errno (-ETIME for a timeout that fired). The object must stay alive
// until it has been called; it is called exactly once.
class IoCompletion {
 public:
  virtual void OnIoComplete(int32_t result) = 0;

 protected:
  ~IoCompletion() = default;
};

// A completion that just records its result, for code that waits on one I/O.
struct AwaitedIo final : IoCompletion {
  int32_t result = 0;
  bool done = false;
  void OnIoComplete(int32_t r) override {
    result = r;
    done = true;
  }
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;

  // "io_uring", "sync" or "fault": reported at start and by the benchmark.
  virtual const char* backend_name() const = 0;

  // Queues a read of `len` bytes at `offset` into `buf`. Offset, length and
  // buffer must be kSectorSize-aligned. The I/O starts at the next Submit()
  // (or earlier, when the queue is full).
  virtual void Read(uint64_t offset, void* buf, uint32_t len, IoCompletion* done) = 0;
  // Queues a durable write: it completes only once its data survives a power
  // loss (RWF_DSYNC: FUA on NVMe). Same alignment rules as Read.
  virtual void Write(uint64_t offset, const void* buf, uint32_t len, IoCompletion* done) = 0;
  // Queues a timer: `done` runs with -ETIME after `after` has passed.
  virtual void Timeout(std::chrono::nanoseconds after, IoCompletion* done) = 0;
  // Cancels the timer of `done` if it has not fired: it then runs with
  // -ECANCELED. A timer that already fired is left alone.
  virtual void CancelTimeout(IoCompletion* done) = 0;

  // Hands every queued operation to the device.
  virtual void Submit() = 0;
  // Runs the completions available now; never blocks. Returns how many ran.
  virtual size_t Poll() = 0;
  // Submits, then blocks until at least one completion is available or
  // `timeout` passes, then runs what is available. Returns how many ran.
  virtual size_t Wait(std::chrono::milliseconds timeout) = 0;

  // Readable when completions may be waiting; see ClearEvent().
  virtual int event_fd() const = 0;
  // Makes event_fd() readable (wakes the owner's event loop). Any thread.
  virtual void Notify() = 0;
  // Resets event_fd() readability. Call before Poll() when driven by an event loop.
  virtual void ClearEvent() = 0;

  // Operations queued or on the device, timers included.
  virtual uint32_t in_flight() const = 0;

  // Submits, then waits until `io` has completed; returns its result.
  int32_t Await(const AwaitedIo& io) {
    Submit();
    while (!io.done) Wait(std::chrono::milliseconds(100));
    return io.result;
  }
};

// A device: a regular file or a raw block device (FileDevice), or the
// in-memory FaultDevice. Thread-safe: any thread may open queues on it.
class Device {
 public:
  virtual ~Device() = default;
  // Bytes addressable on the device.
  virtual uint64_t size() const = 0;
  // The path or a description, for logs.
  virtual const std::string& name() const = 0;
  // The backend NewQueue() will use ("io_uring", "sync", "fault").
  virtual const char* backend_name() const = 0;
  // Opens the calling thread's queue, with room for `depth` operations in flight.
  virtual Result<std::unique_ptr<IoQueue>> NewQueue(uint32_t depth) = 0;
};

// Whether this is a ThreadSanitizer build (scripts/tsan.sh). The sanitizer
// cannot see what the kernel reads and writes through io_uring, so there
// IoBackend::kAuto means pread/pwrite.
#if defined(__SANITIZE_THREAD__)  // GCC
#define SEGSTORE_THREAD_SANITIZER 1
#elif defined(__has_feature)  // Clang
#if __has_feature(thread_sanitizer)
#define SEGSTORE_THREAD_SANITIZER 1
#endif
#endif
#if defined(SEGSTORE_THREAD_SANITIZER)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Opens `path` with O_DIRECT: a block device as it is, or a regular file,
// created at `create_size` bytes (fallocated) when missing. An existing file
// keeps its size. `backend` picks io_uring or the fallback; under kAuto an
// unavailable io_uring is logged as an error, in plain words, with the cause
// (and in a ThreadSanitizer build kAuto is the fallback, logged once).
// The file is locked (flock) while open: a second process opening it waits
// up to `lock_patience` for the lock (a killed process lets go of it a moment
// after it died), then gets Busy.
inline constexpr std::chrono::milliseconds kDefaultLockPatience{10'000};
Result<std::shared_ptr<Device>> OpenFileDevice(
    const std::string& path, uint64_t create_size, IoBackend backend,
    std::chrono::milliseconds lock_patience = kDefaultLockPatience);

// Whether this kernel and sandbox allow io_uring; on false, `why` says why.
bool IoUringAvailable(std::string* why);

}  // namespace segstore::storage
