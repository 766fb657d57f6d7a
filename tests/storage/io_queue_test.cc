#include "storage/io_queue.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/aligned_buffer.h"
#include "storage/fault_device.h"
#include "storage/test_util.h"
#include "storage/uring_queue.h"

namespace segstore::storage {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using testing::TempDir;

constexpr uint64_t kDeviceSize = 4u << 20;

// Records what an I/O completed with, and when.
struct Recorder final : IoCompletion {
  void OnIoComplete(int32_t result) override {
    results.push_back(result);
    at = steady_clock::now();
    if (then) then(result);
  }
  bool done() const { return !results.empty(); }
  int32_t result() const { return results.empty() ? INT32_MIN : results.front(); }

  std::vector<int32_t> results;
  steady_clock::time_point at;
  std::function<void(int32_t)> then;  // optional follow-up, run inside the completion
};

// Fills `n` bytes with a pattern unique to `seed`.
void Fill(uint8_t* p, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng());
}

bool Matches(const uint8_t* p, size_t n, uint32_t seed) {
  std::vector<uint8_t> want(n);
  Fill(want.data(), n, seed);
  return std::memcmp(p, want.data(), n) == 0;
}

// Drives `q` until `pred` holds or a generous deadline passes.
bool RunUntil(IoQueue& q, const std::function<bool()>& pred,
              std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto deadline = steady_clock::now() + limit;
  while (!pred() && steady_clock::now() < deadline) q.Wait(milliseconds(50));
  return pred();
}

// Whether `fd` is readable within `timeout_ms`.
bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & POLLIN) != 0;
}

// io_uring is tested in the plain and ASan builds, not under ThreadSanitizer,
// which cannot see the kernel's accesses through the ring (scripts/tsan.sh).
constexpr const char* kNoUringUnderTsan =
    "io_uring is not run under ThreadSanitizer: it cannot see the kernel's accesses";

const char* BackendName(IoBackend b) {
  switch (b) {
    case IoBackend::kIoUring:
      return "io_uring";
    case IoBackend::kSync:
      return "sync";
    case IoBackend::kAuto:
      return "auto";
  }
  return "?";
}

// ---- The file device, over both backends ----

class IoQueueTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == IoBackend::kIoUring) {
      if (kThreadSanitizer) GTEST_SKIP() << kNoUringUnderTsan;
      std::string why;
      ASSERT_TRUE(IoUringAvailable(&why)) << "io_uring must work on this machine: " << why;
    }
    Result<std::shared_ptr<Device>> d = OpenFileDevice(path_, kDeviceSize, GetParam());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    device_ = *d;
    queue_ = NewQueue(64);
    ASSERT_NE(queue_, nullptr);
  }

  void TearDown() override {
    // Never destroy a queue with I/O in flight: completions and buffers live
    // in this fixture, so they outlive a test body that failed early.
    for (auto& q : queues_) {
      if (q) {
        EXPECT_TRUE(RunUntil(*q, [&] { return q->in_flight() == 0; }));
      }
    }
    queues_.clear();
  }

  IoQueue* NewQueue(uint32_t depth) {
    Result<std::unique_ptr<IoQueue>> q = device_->NewQueue(depth);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    if (!q.ok()) return nullptr;
    queues_.push_back(std::move(q).value());
    return queues_.back().get();
  }
  Recorder* NewRecorder() { return &recorders_.emplace_back(); }
  uint8_t* NewBuffer(size_t size) { return buffers_.emplace_back(size).data(); }

  TempDir dir_;
  std::string path_ = dir_.File("device");
  std::shared_ptr<Device> device_;
  std::deque<AlignedBuffer> buffers_;
  std::deque<Recorder> recorders_;
  std::vector<std::unique_ptr<IoQueue>> queues_;  // destroyed before buffers and recorders
  IoQueue* queue_ = nullptr;
};

TEST_P(IoQueueTest, ReportsBackendAndSize) {
  EXPECT_EQ(device_->size(), kDeviceSize);
  EXPECT_EQ(device_->name(), path_);
  EXPECT_STREQ(device_->backend_name(), BackendName(GetParam()));
  EXPECT_STREQ(queue_->backend_name(), BackendName(GetParam()));
  EXPECT_EQ(queue_->in_flight(), 0u);
}

TEST_P(IoQueueTest, WritesThenReadsBackWithManyInFlight) {
  struct Io {
    uint64_t offset;
    uint32_t len;
    uint8_t* buf;
    Recorder* done;
  };
  // Different sizes at scattered offsets, all in flight together.
  std::vector<Io> ios;
  uint64_t offset = 0;
  for (uint32_t i = 0; i < 16; ++i) {
    uint32_t len = (1 + i % 4) * kSectorSize;
    ios.push_back(Io{offset, len, NewBuffer(len), NewRecorder()});
    Fill(ios.back().buf, len, 1000 + i);
    offset += len + kSectorSize * (i % 3);
  }
  ASSERT_LE(offset, kDeviceSize);
  for (const Io& io : ios) queue_->Write(io.offset, io.buf, io.len, io.done);
  EXPECT_EQ(queue_->in_flight(), ios.size());
  queue_->Submit();
  ASSERT_TRUE(RunUntil(*queue_, [&] { return queue_->in_flight() == 0; }));
  for (const Io& io : ios) {
    ASSERT_EQ(io.done->results.size(), 1u) << "each completion runs exactly once";
    EXPECT_EQ(io.done->result(), static_cast<int32_t>(io.len)) << io.offset;
  }

  // Read everything back, again all at once, into fresh buffers.
  std::vector<Io> reads;
  for (const Io& io : ios) reads.push_back(Io{io.offset, io.len, NewBuffer(io.len), NewRecorder()});
  for (const Io& io : reads) queue_->Read(io.offset, io.buf, io.len, io.done);
  EXPECT_EQ(queue_->in_flight(), reads.size());
  ASSERT_TRUE(RunUntil(*queue_, [&] { return queue_->in_flight() == 0; }));
  for (uint32_t i = 0; i < reads.size(); ++i) {
    ASSERT_EQ(reads[i].done->results.size(), 1u);
    EXPECT_EQ(reads[i].done->result(), static_cast<int32_t>(reads[i].len));
    EXPECT_TRUE(Matches(reads[i].buf, reads[i].len, 1000 + i)) << "offset " << reads[i].offset;
  }
  // Untouched sectors between the writes read as zeros (a fresh file).
  uint8_t* gap = NewBuffer(kSectorSize);
  std::memset(gap, 0xFF, kSectorSize);
  Recorder* r = NewRecorder();
  queue_->Read(ios[1].offset + ios[1].len, gap, kSectorSize, r);  // i = 1 leaves a gap
  ASSERT_TRUE(RunUntil(*queue_, [&] { return r->done(); }));
  EXPECT_EQ(r->result(), static_cast<int32_t>(kSectorSize));
  EXPECT_TRUE(std::all_of(gap, gap + kSectorSize, [](uint8_t b) { return b == 0; }));
}

TEST_P(IoQueueTest, ManyMoreIosThanTheQueueDepth) {
  IoQueue* q = NewQueue(8);
  ASSERT_NE(q, nullptr);
  constexpr uint32_t kIos = 100;
  uint8_t* bufs = NewBuffer(kIos * kSectorSize);
  std::vector<Recorder*> done;
  for (uint32_t i = 0; i < kIos; ++i) {
    Fill(bufs + i * kSectorSize, kSectorSize, i);
    done.push_back(NewRecorder());
    q->Write(uint64_t{i} * kSectorSize, bufs + i * kSectorSize, kSectorSize, done.back());
  }
  q->Submit();
  ASSERT_TRUE(RunUntil(*q, [&] { return q->in_flight() == 0; }));
  for (Recorder* r : done) EXPECT_EQ(r->result(), static_cast<int32_t>(kSectorSize));
  uint8_t* back = NewBuffer(kIos * kSectorSize);
  Recorder* r = NewRecorder();
  q->Read(0, back, kIos * kSectorSize, r);
  ASSERT_TRUE(RunUntil(*q, [&] { return r->done(); }));
  ASSERT_EQ(r->result(), static_cast<int32_t>(kIos * kSectorSize));
  for (uint32_t i = 0; i < kIos; ++i) EXPECT_TRUE(Matches(back + i * kSectorSize, kSectorSize, i));
}

TEST_P(IoQueueTest, CompletionMayQueueMoreIo) {
  // Each completion queues the next read: a chain of five.
  uint8_t* buf = NewBuffer(kSectorSize);
  int reads = 0;
  Recorder* r = NewRecorder();
  r->then = [&](int32_t result) {
    EXPECT_EQ(result, static_cast<int32_t>(kSectorSize));
    if (++reads < 5) queue_->Read(uint64_t(reads) * kSectorSize, buf, kSectorSize, r);
  };
  queue_->Read(0, buf, kSectorSize, r);
  ASSERT_TRUE(RunUntil(*queue_, [&] { return reads == 5 && queue_->in_flight() == 0; }));
  EXPECT_EQ(r->results.size(), 5u);
}

TEST_P(IoQueueTest, TimeoutFiresWithEtimeNotEarly) {
  Recorder* r = NewRecorder();
  auto start = steady_clock::now();
  queue_->Timeout(milliseconds(200), r);
  EXPECT_EQ(queue_->in_flight(), 1u);
  ASSERT_TRUE(RunUntil(*queue_, [&] { return r->done(); }));
  EXPECT_EQ(r->result(), -ETIME);
  EXPECT_EQ(r->results.size(), 1u);
  EXPECT_GE(r->at - start, milliseconds(100));
  EXPECT_EQ(queue_->in_flight(), 0u);
}

TEST_P(IoQueueTest, TimersFireInDeadlineOrder) {
  Recorder* slow = NewRecorder();
  Recorder* fast = NewRecorder();
  auto start = steady_clock::now();
  queue_->Timeout(milliseconds(1500), slow);
  queue_->Timeout(milliseconds(20), fast);
  ASSERT_TRUE(RunUntil(*queue_, [&] { return fast->done(); }));
  EXPECT_FALSE(slow->done()) << "the 1.5 s timer fired with the 20 ms one";
  ASSERT_TRUE(RunUntil(*queue_, [&] { return slow->done(); }));
  EXPECT_EQ(fast->result(), -ETIME);
  EXPECT_EQ(slow->result(), -ETIME);
  EXPECT_GE(slow->at - start, milliseconds(750));
}

// A timer queued when the submission ring is full forces a submission inside
// Timeout(); its delay must still be its own.
TEST_P(IoQueueTest, TimeoutQueuedWhileRingIsFullKeepsItsDelay) {
  IoQueue* q = NewQueue(4);
  ASSERT_NE(q, nullptr);
  uint8_t* buf = NewBuffer(4 * kSectorSize);
  for (uint32_t i = 0; i < 4; ++i) {
    q->Read(uint64_t{i} * kSectorSize, buf + i * kSectorSize, kSectorSize, NewRecorder());
  }
  Recorder* slow = NewRecorder();
  Recorder* fast = NewRecorder();
  auto start = steady_clock::now();
  q->Timeout(milliseconds(1500), slow);  // the ring is full: this one submits the reads
  q->Timeout(milliseconds(1), fast);
  q->Submit();
  ASSERT_TRUE(RunUntil(*q, [&] { return slow->done() && fast->done(); }));
  EXPECT_EQ(slow->result(), -ETIME);
  EXPECT_EQ(fast->result(), -ETIME);
  EXPECT_GE(slow->at - start, milliseconds(750))
      << "a 1.5 s timeout fired after "
      << std::chrono::duration_cast<milliseconds>(slow->at - start).count() << " ms";
}

TEST_P(IoQueueTest, WaitWithNothingPendingReturnsZero) {
  // Wait() may return early (EINTR), so only its result is checked, and that
  // it comes back at all.
  EXPECT_EQ(queue_->Wait(milliseconds(40)), 0u);
  EXPECT_EQ(queue_->Poll(), 0u);
  EXPECT_EQ(queue_->in_flight(), 0u);
}

TEST_P(IoQueueTest, EventFdReadableWhenCompletionPending) {
  queue_->ClearEvent();
  EXPECT_FALSE(Readable(queue_->event_fd(), 0));
  uint8_t* buf = NewBuffer(kSectorSize);
  Fill(buf, kSectorSize, 5);
  Recorder* r = NewRecorder();
  queue_->Write(0, buf, kSectorSize, r);
  queue_->Submit();
  // An event loop would sleep on the descriptor: it must wake up.
  EXPECT_TRUE(Readable(queue_->event_fd(), 10000))
      << "event_fd() stayed unreadable for 10 s with a write submitted";
  queue_->ClearEvent();
  ASSERT_TRUE(RunUntil(*queue_, [&] { return r->done(); }));
  EXPECT_EQ(r->result(), static_cast<int32_t>(kSectorSize));
  queue_->ClearEvent();
  EXPECT_FALSE(Readable(queue_->event_fd(), 0)) << "still readable with nothing pending";
}

TEST_P(IoQueueTest, EventFdReadableWhenTimerFires) {
  queue_->ClearEvent();
  Recorder* r = NewRecorder();
  queue_->Timeout(milliseconds(30), r);
  queue_->Submit();
  EXPECT_TRUE(Readable(queue_->event_fd(), 10000))
      << "event_fd() stayed unreadable for 10 s with a 30 ms timer pending";
  queue_->ClearEvent();
  ASSERT_TRUE(RunUntil(*queue_, [&] { return r->done(); }));
  EXPECT_EQ(r->result(), -ETIME);
}

TEST_P(IoQueueTest, NotifyAndClearEvent) {
  queue_->ClearEvent();
  EXPECT_FALSE(Readable(queue_->event_fd(), 0));
  queue_->Notify();
  EXPECT_TRUE(Readable(queue_->event_fd(), 0));
  queue_->Notify();  // twice before a clear: one clear still resets
  queue_->ClearEvent();
  EXPECT_FALSE(Readable(queue_->event_fd(), 0));
  queue_->ClearEvent();  // clearing when clear is harmless
  EXPECT_FALSE(Readable(queue_->event_fd(), 0));

  // From another thread, waking a sleeping event loop.
  std::thread waker([q = queue_] {
    std::this_thread::sleep_for(milliseconds(20));
    q->Notify();
  });
  EXPECT_TRUE(Readable(queue_->event_fd(), 10000));
  waker.join();
  queue_->ClearEvent();
  EXPECT_FALSE(Readable(queue_->event_fd(), 0));
  // A Notify alone runs nothing.
  queue_->Notify();
  EXPECT_EQ(queue_->Poll(), 0u);
  queue_->ClearEvent();
}

TEST_P(IoQueueTest, ReadPastTheEndIsShortOrAnError) {
  uint8_t* buf = NewBuffer(2 * kSectorSize);
  Recorder* straddling = NewRecorder();
  Recorder* beyond = NewRecorder();
  queue_->Read(kDeviceSize - kSectorSize, buf, 2 * kSectorSize, straddling);
  queue_->Read(kDeviceSize + 16 * kSectorSize, buf, kSectorSize, beyond);
  ASSERT_TRUE(RunUntil(*queue_, [&] { return straddling->done() && beyond->done(); }));
  EXPECT_LT(straddling->result(), static_cast<int32_t>(2 * kSectorSize));
  EXPECT_LE(straddling->result(), static_cast<int32_t>(kSectorSize));
  EXPECT_LE(beyond->result(), 0);
}

// When the kernel wants completions reaped before it takes more submissions
// (-EBUSY on CQ overflow, -EAGAIN), the queue reaps them but must not run
// them there: Submit() is reached from inside Read()/Write() on a full ring,
// whose callers are mid-way through state changes.
TEST(UringQueueTest, CompletionsReapedBySubmitWaitForPoll) {
  if (kThreadSanitizer) GTEST_SKIP() << kNoUringUnderTsan;
  TempDir dir;
  auto device = OpenFileDevice(dir.File("device"), 1 << 20, IoBackend::kIoUring);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  auto q = (*device)->NewQueue(8);
  ASSERT_TRUE(q.ok());
  auto* uring = dynamic_cast<UringQueue*>(q->get());
  ASSERT_NE(uring, nullptr);
  AlignedBuffer buf(kSectorSize);
  struct Flagging final : IoCompletion {
    const bool* issuing = nullptr;
    int violations = 0;
    bool done = false;
    void OnIoComplete(int32_t) override {
      if (*issuing) ++violations;
      done = true;
    }
  };
  bool issuing = false;
  for (int error : {-EBUSY, -EAGAIN}) {
    Flagging first, second;
    first.issuing = second.issuing = &issuing;
    uring->ClearEvent();
    uring->Read(0, buf.data(), kSectorSize, &first);
    uring->Submit();
    // The first read's completion is on the ring, unreaped, once the ring's
    // eventfd says so (a fixed sleep would not know on a slow device, and
    // the test would pass without testing anything).
    ASSERT_TRUE(Readable(uring->event_fd(), 10000)) << "the first read did not complete in 10 s";
    issuing = true;
    uring->FailSubmitsForTesting(2, error);
    uring->Read(kSectorSize, buf.data(), kSectorSize, &second);
    uring->Submit();  // fails twice, reaps `first`, then submits
    issuing = false;
    EXPECT_FALSE(first.done) << "ran inside Submit() after " << error;
    while (!first.done || !second.done) uring->Wait(std::chrono::milliseconds(100));
    EXPECT_EQ(first.violations + second.violations, 0);
    EXPECT_EQ(uring->in_flight(), 0u);
  }
}

TEST_P(IoQueueTest, OpenFileDeviceCreatesAMissingFileAtTheRequestedSize) {
  std::string path = dir_.File("new-device");
  ASSERT_FALSE(std::filesystem::exists(path));
  Result<std::shared_ptr<Device>> d = OpenFileDevice(path, (3u << 20) + 100, GetParam());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->size(), 3u << 20);  // rounded down to whole sectors
  EXPECT_EQ(std::filesystem::file_size(path), 3u << 20);
}

TEST_P(IoQueueTest, OpenFileDeviceRefusesAFileAnotherOpenHolds) {
  std::string path = dir_.File("held");
  Result<std::shared_ptr<Device>> first = OpenFileDevice(path, 1u << 20, GetParam());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<std::shared_ptr<Device>> second =
      OpenFileDevice(path, 1u << 20, GetParam(), std::chrono::milliseconds(0));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Status::Code::kBusy) << second.status().ToString();
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos)
      << second.status().ToString();
  first->reset();  // closing the first lets go of the lock
  Result<std::shared_ptr<Device>> third = OpenFileDevice(path, 1u << 20, GetParam());
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

// A log sink that tells a thread when OpenFileDevice says it is waiting.
class WaitLineSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // True once a "waiting up to" line was logged; false after `limit`.
  bool AwaitWaiting(std::chrono::seconds limit) {
    std::unique_lock lock(seen_mu_);
    return seen_cv_.wait_for(lock, limit, [this] { return seen_; });
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (std::string_view(msg.payload.data(), msg.payload.size()).find("waiting up to") ==
        std::string_view::npos) {
      return;
    }
    {
      std::lock_guard lock(seen_mu_);
      seen_ = true;
    }
    seen_cv_.notify_all();
  }
  void flush_() override {}

 private:
  std::mutex seen_mu_;
  std::condition_variable seen_cv_;
  bool seen_ = false;
};

TEST_P(IoQueueTest, OpenFileDeviceWaitsForTheHolderToLetGo) {
  std::string path = dir_.File("handed-over");
  Result<std::shared_ptr<Device>> first = OpenFileDevice(path, 1u << 20, GetParam());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The holder lets go only once the second open says it is waiting (its
  // log line), so the wait itself is what is tested.
  auto sink = std::make_shared<WaitLineSink>();
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  std::atomic<bool> saw_wait{false};
  std::thread holder([&] {
    saw_wait = sink->AwaitWaiting(std::chrono::seconds(60));
    first->reset();  // the holder goes away while the second open waits
  });
  Result<std::shared_ptr<Device>> second =
      OpenFileDevice(path, 1u << 20, GetParam(), std::chrono::seconds(120));
  holder.join();
  spdlog::set_default_logger(previous);
  EXPECT_TRUE(saw_wait) << "the second open never said it was waiting";
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ((*second)->size(), 1u << 20);
}

TEST_P(IoQueueTest, OpenFileDeviceKeepsAnExistingFilesSize) {
  std::string path = dir_.File("existing");
  { std::ofstream(path).put('x'); }
  std::filesystem::resize_file(path, 1u << 20);
  {
    Result<std::shared_ptr<Device>> d = OpenFileDevice(path, 8u << 20, GetParam());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ((*d)->size(), 1u << 20);
    EXPECT_EQ(std::filesystem::file_size(path), 1u << 20);

    // What is written survives closing and reopening.
    Result<std::unique_ptr<IoQueue>> q = (*d)->NewQueue(8);
    ASSERT_TRUE(q.ok());
    uint8_t* buf = NewBuffer(kSectorSize);
    Fill(buf, kSectorSize, 77);
    Recorder* r = NewRecorder();
    (*q)->Write(kSectorSize, buf, kSectorSize, r);
    ASSERT_TRUE(RunUntil(**q, [&] { return r->done(); }));
    EXPECT_EQ(r->result(), static_cast<int32_t>(kSectorSize));
  }
  Result<std::shared_ptr<Device>> d = OpenFileDevice(path, 8u << 20, GetParam());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->size(), 1u << 20);
  Result<std::unique_ptr<IoQueue>> q = (*d)->NewQueue(8);
  ASSERT_TRUE(q.ok());
  uint8_t* buf = NewBuffer(2 * kSectorSize);
  Recorder* r = NewRecorder();
  (*q)->Read(0, buf, 2 * kSectorSize, r);
  ASSERT_TRUE(RunUntil(**q, [&] { return r->done(); }));
  EXPECT_EQ(r->result(), static_cast<int32_t>(2 * kSectorSize));
  EXPECT_EQ(buf[0], 'x');
  EXPECT_TRUE(Matches(buf + kSectorSize, kSectorSize, 77));
}

TEST_P(IoQueueTest, OpenFileDeviceRoundsAnExistingFileDownToSectors) {
  std::string path = dir_.File("ragged");
  { std::ofstream(path).put('x'); }
  std::filesystem::resize_file(path, (1u << 20) + 100);
  Result<std::shared_ptr<Device>> d = OpenFileDevice(path, 8u << 20, GetParam());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->size(), 1u << 20);
  EXPECT_EQ(std::filesystem::file_size(path), (1u << 20) + 100);
}

TEST_P(IoQueueTest, OpenFileDeviceRejectsADirectory) {
  Result<std::shared_ptr<Device>> d = OpenFileDevice(dir_.File(""), 1u << 20, GetParam());
  EXPECT_FALSE(d.ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, IoQueueTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kSync),
                         [](const ::testing::TestParamInfo<IoBackend>& p) {
                           return p.param == IoBackend::kIoUring ? std::string("IoUring")
                                                                 : std::string("Sync");
                         });

// ---- FaultDevice ----

constexpr uint64_t kFaultSize = 1u << 20;

class FaultDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = FaultDevice::Create(kFaultSize, 1234);
    queue_ = QueueOn(device_);
  }

  std::unique_ptr<IoQueue> QueueOn(const std::shared_ptr<FaultDevice>& d) {
    Result<std::unique_ptr<IoQueue>> q = d->NewQueue(64);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return q.ok() ? std::move(q).value() : nullptr;
  }
  Recorder* NewRecorder() { return &recorders_.emplace_back(); }
  uint8_t* NewBuffer(size_t size) { return buffers_.emplace_back(size).data(); }

  // One write, completed; returns its result.
  int32_t WriteNow(IoQueue& q, uint64_t offset, const uint8_t* buf, uint32_t len) {
    Recorder* r = NewRecorder();
    q.Write(offset, buf, len, r);
    q.Poll();
    EXPECT_TRUE(r->done()) << "Poll() completes every submitted operation";
    return r->result();
  }
  int32_t ReadNow(IoQueue& q, uint64_t offset, uint8_t* buf, uint32_t len) {
    Recorder* r = NewRecorder();
    q.Read(offset, buf, len, r);
    q.Poll();
    EXPECT_TRUE(r->done());
    return r->result();
  }
  bool ImageMatches(const std::shared_ptr<FaultDevice>& d, uint64_t offset, size_t len,
                    uint32_t seed) {
    std::vector<uint8_t> img = d->ReadImage(offset, len);
    return Matches(img.data(), len, seed);
  }
  bool ImageIsZero(const std::shared_ptr<FaultDevice>& d, uint64_t offset, size_t len) {
    std::vector<uint8_t> img = d->ReadImage(offset, len);
    return std::all_of(img.begin(), img.end(), [](uint8_t b) { return b == 0; });
  }

  std::deque<AlignedBuffer> buffers_;
  std::deque<Recorder> recorders_;
  std::shared_ptr<FaultDevice> device_;
  std::unique_ptr<IoQueue> queue_;
};

TEST_F(FaultDeviceTest, IsAZeroFilledDevice) {
  EXPECT_EQ(device_->size(), kFaultSize);
  EXPECT_STREQ(device_->backend_name(), "fault");
  EXPECT_STREQ(queue_->backend_name(), "fault");
  EXPECT_TRUE(ImageIsZero(device_, 0, kFaultSize));
}

TEST_F(FaultDeviceTest, WritesLandInTheImageOnlyOnCompletion) {
  uint8_t* buf = NewBuffer(2 * kSectorSize);
  Fill(buf, 2 * kSectorSize, 1);
  Recorder* r = NewRecorder();
  queue_->Write(2 * kSectorSize, buf, 2 * kSectorSize, r);
  EXPECT_TRUE(ImageIsZero(device_, 0, kFaultSize)) << "queued";
  queue_->Submit();
  EXPECT_TRUE(ImageIsZero(device_, 0, kFaultSize)) << "submitted";
  EXPECT_FALSE(r->done());
  EXPECT_EQ(queue_->in_flight(), 1u);
  EXPECT_EQ(device_->writes_completed(), 0u);

  EXPECT_EQ(queue_->Poll(), 1u);
  EXPECT_EQ(r->result(), static_cast<int32_t>(2 * kSectorSize));
  EXPECT_TRUE(ImageMatches(device_, 2 * kSectorSize, 2 * kSectorSize, 1));
  EXPECT_TRUE(ImageIsZero(device_, 0, 2 * kSectorSize));
  EXPECT_TRUE(ImageIsZero(device_, 4 * kSectorSize, kFaultSize - 4 * kSectorSize));
  EXPECT_EQ(device_->writes_completed(), 1u);
  EXPECT_EQ(queue_->in_flight(), 0u);

  // And through Wait() too, then read back through the queue.
  Recorder* w = NewRecorder();
  uint8_t* buf2 = NewBuffer(kSectorSize);
  Fill(buf2, kSectorSize, 2);
  queue_->Write(0, buf2, kSectorSize, w);
  EXPECT_EQ(queue_->Wait(milliseconds(1000)), 1u);
  EXPECT_EQ(w->result(), static_cast<int32_t>(kSectorSize));
  uint8_t* back = NewBuffer(3 * kSectorSize);
  EXPECT_EQ(ReadNow(*queue_, 0, back, 3 * kSectorSize), static_cast<int32_t>(3 * kSectorSize));
  EXPECT_TRUE(Matches(back, kSectorSize, 2));
  EXPECT_TRUE(
      std::all_of(back + kSectorSize, back + 2 * kSectorSize, [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(Matches(back + 2 * kSectorSize, kSectorSize, 1));
}

TEST_F(FaultDeviceTest, CompletionsArriveInAShuffledOrder) {
  constexpr uint32_t kIos = 32;
  uint8_t* buf = NewBuffer(kSectorSize);
  std::vector<uint32_t> order;
  std::vector<Recorder*> done;
  for (uint32_t i = 0; i < kIos; ++i) {
    done.push_back(NewRecorder());
    done.back()->then = [&order, i](int32_t) { order.push_back(i); };
    queue_->Write(uint64_t{i} * kSectorSize, buf, kSectorSize, done.back());
  }
  // Each poll completes some of them (at least one), so a power loss can
  // find any mix of earlier writes pending and later ones done.
  std::vector<size_t> per_poll;
  while (queue_->in_flight() > 0) per_poll.push_back(queue_->Poll());
  EXPECT_TRUE(std::all_of(per_poll.begin(), per_poll.end(), [](size_t n) { return n > 0; }));
  EXPECT_GT(per_poll.size(), 1u) << "one poll completed all " << kIos;
  ASSERT_EQ(order.size(), kIos);
  std::vector<uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> identity(kIos);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity) << "every operation completes exactly once";
  EXPECT_NE(order, identity) << "completions came back in submission order";
}

TEST_F(FaultDeviceTest, PowerLossTearsInFlightWritesSectorWise) {
  constexpr uint32_t kSectors = 64;
  constexpr uint32_t kLen = kSectors * kSectorSize;
  uint8_t* old_data = NewBuffer(kLen);
  uint8_t* new_data = NewBuffer(kLen);
  Fill(old_data, kLen, 10);
  Fill(new_data, kLen, 11);
  ASSERT_EQ(WriteNow(*queue_, 0, old_data, kLen), static_cast<int32_t>(kLen));

  // Submitted, not completed: torn by the power loss.
  Recorder* torn = NewRecorder();
  queue_->Write(0, new_data, kLen, torn);
  queue_->Submit();
  // Queued, never submitted: never reaches the device.
  uint8_t* unsent = NewBuffer(kSectorSize);
  Fill(unsent, kSectorSize, 12);
  Recorder* lost = NewRecorder();
  queue_->Write(kLen, unsent, kSectorSize, lost);

  device_->PowerLoss();
  std::vector<uint8_t> img = device_->ReadImage(0, kLen);
  uint32_t kept_new = 0;
  uint32_t kept_old = 0;
  for (uint32_t s = 0; s < kSectors; ++s) {
    const uint8_t* sector = img.data() + s * kSectorSize;
    bool is_new = std::memcmp(sector, new_data + s * kSectorSize, kSectorSize) == 0;
    bool is_old = std::memcmp(sector, old_data + s * kSectorSize, kSectorSize) == 0;
    ASSERT_TRUE(is_new || is_old) << "sector " << s << " is neither old nor new";
    kept_new += is_new;
    kept_old += is_old;
  }
  EXPECT_GT(kept_new, 0u) << "a torn write keeps some of its sectors";
  EXPECT_GT(kept_old, 0u) << "a torn write loses some of its sectors";
  EXPECT_EQ(device_->writes_torn(), 1u);
  EXPECT_TRUE(ImageIsZero(device_, kLen, kFaultSize - kLen));

  // The interrupted I/O fails, and so does everything after.
  while (queue_->in_flight() > 0) queue_->Poll();
  EXPECT_EQ(torn->result(), -EIO);
  EXPECT_EQ(lost->result(), -EIO);
  EXPECT_EQ(queue_->in_flight(), 0u);
  EXPECT_EQ(WriteNow(*queue_, 0, new_data, kSectorSize), -EIO);
  uint8_t* back = NewBuffer(kSectorSize);
  EXPECT_EQ(ReadNow(*queue_, 0, back, kSectorSize), -EIO);
  EXPECT_EQ(device_->ReadImage(0, kLen), img) << "nothing changes after the power loss";
  EXPECT_TRUE(ImageIsZero(device_, kLen, kFaultSize - kLen));
  device_->PowerLoss();  // twice is harmless
  EXPECT_EQ(device_->ReadImage(0, kLen), img);

  // Rebooting yields the surviving image on a working device.
  std::shared_ptr<FaultDevice> rebooted = device_->Reboot();
  ASSERT_NE(rebooted, nullptr);
  EXPECT_EQ(rebooted->size(), kFaultSize);
  EXPECT_EQ(rebooted->ReadImage(0, kFaultSize), device_->ReadImage(0, kFaultSize));
  std::unique_ptr<IoQueue> q2 = QueueOn(rebooted);
  ASSERT_NE(q2, nullptr);
  uint8_t* reread = NewBuffer(kLen);
  ASSERT_EQ(ReadNow(*q2, 0, reread, kLen), static_cast<int32_t>(kLen));
  EXPECT_EQ(std::memcmp(reread, img.data(), kLen), 0);
  EXPECT_EQ(WriteNow(*q2, kLen, unsent, kSectorSize), static_cast<int32_t>(kSectorSize));
  EXPECT_TRUE(ImageMatches(rebooted, kLen, kSectorSize, 12));
  // The dead device is untouched by the new one.
  EXPECT_TRUE(ImageIsZero(device_, kLen, kSectorSize));
  EXPECT_EQ(WriteNow(*queue_, 0, new_data, kSectorSize), -EIO);
}

TEST_F(FaultDeviceTest, PowerLossKeepsCompletedWritesWhole) {
  uint8_t* a = NewBuffer(8 * kSectorSize);
  Fill(a, 8 * kSectorSize, 20);
  ASSERT_EQ(WriteNow(*queue_, 0, a, 8 * kSectorSize), static_cast<int32_t>(8 * kSectorSize));
  device_->PowerLoss();
  EXPECT_EQ(device_->writes_torn(), 0u);
  EXPECT_TRUE(ImageMatches(device_, 0, 8 * kSectorSize, 20));
  EXPECT_TRUE(ImageMatches(device_->Reboot(), 0, 8 * kSectorSize, 20));
}

TEST_F(FaultDeviceTest, DestroyedQueueForgetsItsWrites) {
  uint8_t* a = NewBuffer(4 * kSectorSize);
  Fill(a, 4 * kSectorSize, 30);
  {
    std::unique_ptr<IoQueue> q = QueueOn(device_);
    q->Write(0, a, 4 * kSectorSize, NewRecorder());
    q->Submit();
    // The queue goes away with the write issued but never completed.
  }
  device_->PowerLoss();  // must not touch the forgotten write
  EXPECT_TRUE(ImageIsZero(device_, 0, kFaultSize));
  EXPECT_EQ(device_->writes_torn(), 0u);
}

TEST_F(FaultDeviceTest, FailWritesAfterLetsNThrough) {
  uint8_t* buf = NewBuffer(kSectorSize);
  device_->FailWritesAfter(2);
  for (uint32_t i = 0; i < 5; ++i) {
    Fill(buf, kSectorSize, 40 + i);
    int32_t want = i < 2 ? static_cast<int32_t>(kSectorSize) : -EIO;
    EXPECT_EQ(WriteNow(*queue_, uint64_t{i} * kSectorSize, buf, kSectorSize), want) << i;
  }
  EXPECT_TRUE(ImageMatches(device_, 0, kSectorSize, 40));
  EXPECT_TRUE(ImageMatches(device_, kSectorSize, kSectorSize, 41));
  EXPECT_TRUE(ImageIsZero(device_, 2 * kSectorSize, kFaultSize - 2 * kSectorSize));
  EXPECT_EQ(device_->writes_completed(), 2u);
  // Reads are unaffected.
  uint8_t* back = NewBuffer(kSectorSize);
  EXPECT_EQ(ReadNow(*queue_, 0, back, kSectorSize), static_cast<int32_t>(kSectorSize));
  EXPECT_TRUE(Matches(back, kSectorSize, 40));

  device_->ClearFaults();
  EXPECT_EQ(WriteNow(*queue_, 4 * kSectorSize, buf, kSectorSize),
            static_cast<int32_t>(kSectorSize));
  device_->FailWritesAfter(0);
  EXPECT_EQ(WriteNow(*queue_, 5 * kSectorSize, buf, kSectorSize), -EIO);
  EXPECT_TRUE(ImageIsZero(device_, 5 * kSectorSize, kSectorSize));
}

TEST_F(FaultDeviceTest, FailWritesAfterCountsAcrossQueues) {
  std::unique_ptr<IoQueue> other = QueueOn(device_);
  uint8_t* buf = NewBuffer(kSectorSize);
  device_->FailWritesAfter(1);
  EXPECT_EQ(WriteNow(*other, 0, buf, kSectorSize), static_cast<int32_t>(kSectorSize));
  EXPECT_EQ(WriteNow(*queue_, 0, buf, kSectorSize), -EIO);
  EXPECT_EQ(WriteNow(*other, 0, buf, kSectorSize), -EIO);
}

TEST_F(FaultDeviceTest, FailReadsAfterLetsNThrough) {
  uint8_t* buf = NewBuffer(kSectorSize);
  Fill(buf, kSectorSize, 50);
  ASSERT_EQ(WriteNow(*queue_, 0, buf, kSectorSize), static_cast<int32_t>(kSectorSize));
  device_->FailReadsAfter(1);
  uint8_t* back = NewBuffer(kSectorSize);
  EXPECT_EQ(ReadNow(*queue_, 0, back, kSectorSize), static_cast<int32_t>(kSectorSize));
  EXPECT_TRUE(Matches(back, kSectorSize, 50));
  std::memset(back, 0xEE, kSectorSize);
  EXPECT_EQ(ReadNow(*queue_, 0, back, kSectorSize), -EIO);
  EXPECT_EQ(ReadNow(*queue_, 0, back, kSectorSize), -EIO);
  EXPECT_EQ(back[0], 0xEE) << "a failed read leaves the buffer alone";
  // Writes are unaffected.
  EXPECT_EQ(WriteNow(*queue_, kSectorSize, buf, kSectorSize), static_cast<int32_t>(kSectorSize));
  device_->ClearFaults();
  EXPECT_EQ(ReadNow(*queue_, 0, back, kSectorSize), static_cast<int32_t>(kSectorSize));
  device_->FailReadsAfter(0);
  EXPECT_EQ(ReadNow(*queue_, 0, back, kSectorSize), -EIO);
}

TEST_F(FaultDeviceTest, ShortWritesTransferTheFirstHalf) {
  uint8_t* old_data = NewBuffer(4 * kSectorSize);
  uint8_t* new_data = NewBuffer(4 * kSectorSize);
  Fill(old_data, 4 * kSectorSize, 60);
  Fill(new_data, 4 * kSectorSize, 61);
  ASSERT_EQ(WriteNow(*queue_, 0, old_data, 4 * kSectorSize), static_cast<int32_t>(4 * kSectorSize));

  device_->SetShortWrites(true);
  EXPECT_EQ(WriteNow(*queue_, 0, new_data, 4 * kSectorSize), static_cast<int32_t>(2 * kSectorSize));
  std::vector<uint8_t> img = device_->ReadImage(0, 4 * kSectorSize);
  EXPECT_EQ(std::memcmp(img.data(), new_data, 2 * kSectorSize), 0);
  EXPECT_EQ(std::memcmp(img.data() + 2 * kSectorSize, old_data + 2 * kSectorSize, 2 * kSectorSize),
            0);
  // Three sectors: one goes through. A single sector cannot be split.
  EXPECT_EQ(WriteNow(*queue_, 8 * kSectorSize, new_data, 3 * kSectorSize),
            static_cast<int32_t>(kSectorSize));
  EXPECT_TRUE(ImageIsZero(device_, 9 * kSectorSize, 2 * kSectorSize));
  EXPECT_EQ(WriteNow(*queue_, 16 * kSectorSize, new_data, kSectorSize),
            static_cast<int32_t>(kSectorSize));

  device_->SetShortWrites(false);
  EXPECT_EQ(WriteNow(*queue_, 0, new_data, 4 * kSectorSize), static_cast<int32_t>(4 * kSectorSize));
  EXPECT_TRUE(ImageMatches(device_, 0, 4 * kSectorSize, 61));
  device_->SetShortWrites(true);
  device_->ClearFaults();
  EXPECT_EQ(WriteNow(*queue_, 0, new_data, 4 * kSectorSize), static_cast<int32_t>(4 * kSectorSize));
}

TEST_F(FaultDeviceTest, XorByteAndReadImage) {
  device_->XorByte(4097, 0x0F);
  EXPECT_EQ(device_->ReadImage(4096, 3), (std::vector<uint8_t>{0x00, 0x0F, 0x00}));
  uint8_t* back = NewBuffer(kSectorSize);
  EXPECT_EQ(ReadNow(*queue_, kSectorSize, back, kSectorSize), static_cast<int32_t>(kSectorSize));
  EXPECT_EQ(back[0], 0x00);
  EXPECT_EQ(back[1], 0x0F);
  device_->XorByte(4097, 0xFF);
  EXPECT_EQ(device_->ReadImage(4097, 1), (std::vector<uint8_t>{0xF0}));
  device_->XorByte(4097, 0xF0);
  EXPECT_TRUE(ImageIsZero(device_, 0, kFaultSize));
  device_->XorByte(kFaultSize - 1, 0x80);
  EXPECT_EQ(device_->ReadImage(kFaultSize - 1, 1), (std::vector<uint8_t>{0x80}));
  EXPECT_TRUE(device_->ReadImage(17, 0).empty());
}

TEST_F(FaultDeviceTest, OutOfRangeIoFails) {
  uint8_t* buf = NewBuffer(2 * kSectorSize);
  EXPECT_LT(ReadNow(*queue_, kFaultSize - kSectorSize, buf, 2 * kSectorSize), 0);
  EXPECT_LT(WriteNow(*queue_, kFaultSize, buf, kSectorSize), 0);
  EXPECT_TRUE(ImageIsZero(device_, 0, kFaultSize));
}

TEST_F(FaultDeviceTest, RebootWithoutPowerLossCopiesTheImage) {
  uint8_t* buf = NewBuffer(kSectorSize);
  Fill(buf, kSectorSize, 70);
  ASSERT_EQ(WriteNow(*queue_, 0, buf, kSectorSize), static_cast<int32_t>(kSectorSize));
  device_->FailWritesAfter(0);
  std::shared_ptr<FaultDevice> copy = device_->Reboot();
  EXPECT_TRUE(ImageMatches(copy, 0, kSectorSize, 70));
  // The copy has no faults and is independent of the original.
  std::unique_ptr<IoQueue> q = QueueOn(copy);
  Fill(buf, kSectorSize, 71);
  EXPECT_EQ(WriteNow(*q, 0, buf, kSectorSize), static_cast<int32_t>(kSectorSize));
  EXPECT_TRUE(ImageMatches(copy, 0, kSectorSize, 71));
  EXPECT_TRUE(ImageMatches(device_, 0, kSectorSize, 70));
  EXPECT_EQ(WriteNow(*queue_, 0, buf, kSectorSize), -EIO);
}

TEST_F(FaultDeviceTest, TimersAndEventsWorkLikeAnyQueue) {
  Recorder* r = NewRecorder();
  queue_->ClearEvent();
  queue_->Timeout(milliseconds(30), r);
  EXPECT_TRUE(Readable(queue_->event_fd(), 10000));
  ASSERT_TRUE(RunUntil(*queue_, [&] { return r->done(); }));
  EXPECT_EQ(r->result(), -ETIME);
  queue_->ClearEvent();
  EXPECT_FALSE(Readable(queue_->event_fd(), 0));
}

}  // namespace
}  // namespace segstore::storage
