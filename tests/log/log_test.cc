// The Kafka engine of the replicated log (src/log/kafka_log.cc) against
// librdkafka's mock cluster, which runs in a process of its own
// (tests/support/kafka_mock.h says what the mock models and what not):
// appends read back in order, assignments, opening with every broker down,
// a topic missing or with another partition count, refusals at append,
// brokers going down and coming back, injected broker errors (a batch too
// large, fatal producer errors), timeouts, the writer's destructor,
// retention passing a reader and a reader past the log's end, the reader's
// health, and the properties segstore refuses.
//
// A topic truncated, or deleted and made again, cannot be shown on the mock
// (librdkafka 2.0.2's mock has no call for either); a reader assigned past
// the end meets the same OFFSET_OUT_OF_RANGE, and MemoryLog's Truncate is
// tested in memory_log_test.cc.
//
// Nothing here sleeps for another thread: callbacks are awaited on a
// condition variable, entries on the reader's event_fd, each with a deadline
// generous enough for a busy 2-core machine.
#include "log/log.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "log/kafka_log.h"
#include "support/kafka_mock.h"

namespace segstore::log {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using segstore::testing::KafkaMock;
using segstore::testing::KafkaMockOptions;

constexpr uint32_t kPartitions = 4;
constexpr auto kWait = 20s;  // for anything the engine should do soon

// The outcomes of a set of appends, numbered in the order they were made;
// counts how often each callback ran. The callbacks share its state, so they
// may outlive it (a test that failed half-way).
class Outcomes {
 public:
  // Makes room for `n` appends; For(i) is append i's callback.
  void Expect(size_t n) {
    std::lock_guard lock(s_->mu);
    s_->outcomes.resize(n);
    s_->calls.assign(n, 0);
    s_->threads.resize(n);
  }
  AppendCallback For(size_t i) {
    return [s = s_, i](const AppendOutcome& o) {
      std::lock_guard lock(s->mu);
      if (s->calls[i]++ == 0) {
        s->outcomes[i].status = o.status;
        s->outcomes[i].offset = o.offset;
        s->outcomes[i].maybe_written = o.maybe_written;
        s->threads[i] = std::this_thread::get_id();
        ++s->done;
      }
      s->cv.notify_all();
    };
  }
  // Waits until every callback ran, at most `timeout`.
  bool WaitAll(std::chrono::milliseconds timeout = kWait) {
    std::unique_lock lock(s_->mu);
    return s_->cv.wait_for(lock, timeout, [this] { return s_->done == s_->calls.size(); });
  }
  // True when every callback ran exactly once.
  bool EachOnce() const {
    std::lock_guard lock(s_->mu);
    for (int c : s_->calls) {
      if (c != 1) return false;
    }
    return true;
  }
  AppendOutcome Get(size_t i) const {
    std::lock_guard lock(s_->mu);
    AppendOutcome o;
    o.status = s_->outcomes[i].status;
    o.offset = s_->outcomes[i].offset;
    o.maybe_written = s_->outcomes[i].maybe_written;
    return o;
  }
  std::thread::id Thread(size_t i) const {
    std::lock_guard lock(s_->mu);
    return s_->threads[i];
  }
  size_t size() const {
    std::lock_guard lock(s_->mu);
    return s_->calls.size();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<AppendOutcome> outcomes;
    std::vector<int> calls;
    std::vector<std::thread::id> threads;
    size_t done = 0;
  };
  std::shared_ptr<State> s_ = std::make_shared<State>();
};

// Appends one entry and waits for its outcome.
AppendOutcome AppendAndWait(LogWriter& writer, uint32_t partition, std::string_view key,
                            std::string_view value, std::chrono::milliseconds timeout = kWait) {
  Outcomes outcomes;
  outcomes.Expect(1);
  writer.Append(partition, key, value, outcomes.For(0));
  if (!outcomes.WaitAll(timeout)) {
    AppendOutcome none;
    none.status = Status::Timeout("the append's callback did not run in time");
    return none;
  }
  return outcomes.Get(0);
}

// One entry as read, owning its bytes.
struct Read {
  uint32_t partition = 0;
  int64_t offset = 0;
  std::string key;
  std::string value;
  int64_t timestamp_ms = 0;
};

// Drives a reader as an event loop would: waits on its event_fd, then polls
// until a Poll returns fewer than asked for.
class Driver {
 public:
  explicit Driver(LogReader* reader) : reader_(reader) {}

  // Reads until `done(entries read so far)` holds or `timeout` passes; the
  // first failed Poll ends it too (returned).
  Status ReadUntil(const std::function<bool(const std::vector<Read>&)>& done,
                   std::chrono::milliseconds timeout = kWait) {
    const auto deadline = Clock::now() + timeout;
    while (!done(read_)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Status::Timeout("the entries did not come in time");
      pollfd p{reader_->event_fd(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      Status s = Drain();
      if (!s.ok()) return s;
    }
    return Status::OK();
  }
  // Reads until `n` entries were read in all.
  Status ReadCount(size_t n, std::chrono::milliseconds timeout = kWait) {
    return ReadUntil([n](const std::vector<Read>& r) { return r.size() >= n; }, timeout);
  }
  // Polls until a Poll returns fewer than asked for, or fails.
  Status Drain() {
    for (;;) {
      Result<size_t> n = reader_->Poll(kMax, [this](const LogEntry& e) {
        read_.push_back(
            Read{e.partition, e.offset, std::string(e.key), std::string(e.value), e.timestamp_ms});
      });
      if (!n.ok()) return n.status();
      if (*n < kMax) return Status::OK();
    }
  }
  // Waits (polling the reader meanwhile) until `cond` holds.
  bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout = kWait) {
    const auto deadline = Clock::now() + timeout;
    while (!cond()) {
      if (Clock::now() >= deadline) return false;
      pollfd p{reader_->event_fd(), POLLIN, 0};
      ::poll(&p, 1, 20);
      Status s = Drain();
      if (!s.ok()) return false;
    }
    return true;
  }
  std::vector<Read>& read() { return read_; }

 private:
  static constexpr size_t kMax = 64;
  LogReader* reader_;
  std::vector<Read> read_;
};

std::optional<PartitionPosition> PositionOf(const LogReader& reader, uint32_t partition) {
  for (const PartitionPosition& p : reader.positions()) {
    if (p.partition == partition) return p;
  }
  return std::nullopt;
}

std::vector<std::pair<uint32_t, int64_t>> AllFrom(int64_t offset, uint32_t n = kPartitions) {
  std::vector<std::pair<uint32_t, int64_t>> from;
  for (uint32_t p = 0; p < n; ++p) from.emplace_back(p, offset);
  return from;
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { StartMock({}); }

  void StartMock(KafkaMockOptions options) {
    options.partitions = kPartitions;
    mock_ = std::make_unique<KafkaMock>(options);
    std::string why;
    ASSERT_TRUE(mock_->Start(&why)) << why;
  }

  LogOptions Options() const {
    LogOptions o;
    o.brokers = mock_->bootstrap();
    o.topic = mock_->options().topic;
    o.partitions = kPartitions;
    o.client_id = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.append_timeout = 10s;
    return o;
  }
  std::unique_ptr<LogWriter> Writer(const LogOptions& o) {
    Result<std::unique_ptr<LogWriter>> w = OpenKafkaWriter(o);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(w).value() : nullptr;
  }
  std::unique_ptr<LogReader> Reader(const LogOptions& o) {
    Result<std::unique_ptr<LogReader>> r = OpenKafkaReader(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  // Every partition's leader on `broker`.
  void LeadAllOn(int broker) {
    for (uint32_t p = 0; p < kPartitions; ++p) {
      std::string why;
      ASSERT_TRUE(mock_->SetLeader(static_cast<int>(p), broker, &why)) << why;
    }
  }

  std::unique_ptr<KafkaMock> mock_;
};

TEST_F(LogTest, AppendsAreReadBackInOrderAcrossPartitions) {
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->partitions(), kPartitions);
  constexpr size_t kN = 400;
  Outcomes outcomes;
  outcomes.Expect(kN);
  for (size_t i = 0; i < kN; ++i) {
    writer->Append(static_cast<uint32_t>(i % kPartitions), "k" + std::to_string(i),
                   "value " + std::to_string(i), outcomes.For(i));
  }
  ASSERT_TRUE(outcomes.WaitAll());
  // Offsets are contiguous from 0 in each partition, in the order appended.
  std::map<uint32_t, int64_t> next;
  for (size_t i = 0; i < kN; ++i) {
    const AppendOutcome o = outcomes.Get(i);
    ASSERT_TRUE(o.status.ok()) << i << ": " << o.status.ToString();
    EXPECT_FALSE(o.maybe_written);
    const auto p = static_cast<uint32_t>(i % kPartitions);
    EXPECT_EQ(o.offset, next[p]++) << "append " << i;
  }
  const LogWriterStats ws = writer->stats();
  EXPECT_EQ(ws.appended, kN);
  EXPECT_EQ(ws.failed + ws.maybe_written + ws.in_flight, 0u);

  // Another reader, from the beginning of every partition.
  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(reader->Assign(AllFrom(kFromBeginning)).ok());
  // The event_fd becomes readable once entries are fetched.
  pollfd p{reader->event_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kWait).count())), 1);
  Driver driver(reader.get());
  ASSERT_TRUE(driver.ReadCount(kN).ok());
  ASSERT_EQ(driver.read().size(), kN);
  std::map<uint32_t, int64_t> expect;
  for (const Read& r : driver.read()) {
    // The key names the append; its partition and offset are the callback's.
    const size_t i = std::stoul(r.key.substr(1));
    EXPECT_EQ(r.partition, i % kPartitions);
    EXPECT_EQ(r.offset, outcomes.Get(i).offset);
    EXPECT_EQ(r.offset, expect[r.partition]++) << "partition " << r.partition;
    EXPECT_EQ(r.value, "value " + std::to_string(i));
    EXPECT_GT(r.timestamp_ms, 0);
  }
  // Caught up: next and end agree, and the log starts at 0.
  ASSERT_TRUE(driver.WaitFor([&] {
    for (const PartitionPosition& pos : reader->positions()) {
      if (pos.next != pos.end || pos.end != static_cast<int64_t>(kN / kPartitions)) return false;
    }
    return true;
  })) << "positions never caught up";
  const std::vector<PartitionPosition> positions = reader->positions();
  ASSERT_EQ(positions.size(), kPartitions);
  for (const PartitionPosition& pos : positions) {
    EXPECT_EQ(pos.start, 0);
    EXPECT_EQ(pos.next, static_cast<int64_t>(kN / kPartitions));
  }
  EXPECT_TRUE(reader->health(5s).ok()) << reader->health(5s).ToString();
}

TEST_F(LogTest, AssignFromAnOffsetTheBeginningOrTheEnd) {
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(AppendAndWait(*writer, 0, "k", "p0-" + std::to_string(i)).status.ok());
    ASSERT_TRUE(AppendAndWait(*writer, 1, "k", "p1-" + std::to_string(i)).status.ok());
  }
  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->partitions(), kPartitions);

  // An exact offset.
  const std::pair<uint32_t, int64_t> at4[] = {{0, 4}};
  ASSERT_TRUE(reader->Assign(at4).ok());
  EXPECT_EQ(PositionOf(*reader, 0)->next, 4);
  {
    Driver d(reader.get());
    ASSERT_TRUE(d.ReadCount(6).ok());
    ASSERT_EQ(d.read().front().offset, 4);
    EXPECT_EQ(d.read().front().value, "p0-4");
    EXPECT_EQ(d.read().back().offset, 9);
  }

  // The beginning, of another partition: the first assignment is replaced.
  const std::pair<uint32_t, int64_t> begin1[] = {{1, kFromBeginning}};
  ASSERT_TRUE(reader->Assign(begin1).ok());
  {
    Driver d(reader.get());
    ASSERT_TRUE(d.ReadCount(10).ok());
    for (const Read& r : d.read()) EXPECT_EQ(r.partition, 1u);
    EXPECT_EQ(d.read().front().offset, 0);
    EXPECT_EQ(d.read().front().value, "p1-0");
    ASSERT_EQ(reader->positions().size(), 1u);
  }

  // The end: once the reader knows where it is (kFromEnd resolves when it
  // first reaches the engine), only what is appended after.
  const std::pair<uint32_t, int64_t> end0[] = {{0, kFromEnd}};
  ASSERT_TRUE(reader->Assign(end0).ok());
  {
    Driver d(reader.get());
    ASSERT_TRUE(d.WaitFor([&] { return PositionOf(*reader, 0)->next == 10; }))
        << "next " << PositionOf(*reader, 0)->next;
    EXPECT_TRUE(d.read().empty());
    EXPECT_TRUE(reader->health(5s).ok());
    const AppendOutcome o = AppendAndWait(*writer, 0, "k", "p0-10");
    ASSERT_TRUE(o.status.ok());
    ASSERT_EQ(o.offset, 10);
    // The event_fd wakes the reader for it.
    pollfd p{reader->event_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kWait).count())), 1);
    ASSERT_TRUE(d.ReadCount(1).ok());
    ASSERT_EQ(d.read().size(), 1u);
    EXPECT_EQ(d.read()[0].offset, 10);
    EXPECT_EQ(d.read()[0].value, "p0-10");
    EXPECT_EQ(PositionOf(*reader, 0)->next, 11);
  }
}

TEST_F(LogTest, AssignRefusesPartitionsOutOfRangeOrTwice) {
  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  const std::pair<uint32_t, int64_t> out_of_range[] = {{0, 0}, {kPartitions, 0}};
  EXPECT_EQ(reader->Assign(out_of_range).code(), Status::Code::kInvalidArgument);
  const std::pair<uint32_t, int64_t> twice[] = {{1, 0}, {1, kFromEnd}};
  EXPECT_EQ(reader->Assign(twice).code(), Status::Code::kInvalidArgument);
  const std::pair<uint32_t, int64_t> bad_offset[] = {{1, -7}};
  EXPECT_EQ(reader->Assign(bad_offset).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(reader->positions().empty());
  // Nothing assigned: nothing to be stale, once the topic was checked.
  Driver d(reader.get());
  EXPECT_TRUE(d.WaitFor([&] { return reader->health(0ms).ok(); }))
      << reader->health(0ms).ToString();
}

TEST_F(LogTest, ATopicWithAnotherPartitionCountIsRefusedOnceKnown) {
  // Opening does not ask the brokers: it works.
  LogOptions o = Options();
  o.partitions = 8;
  auto writer = Writer(o);
  auto reader = Reader(o);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  // Once the brokers answered: every append is refused, naming both counts
  // (partition 5 exists in the configuration, not in the topic).
  for (uint32_t partition : {0u, 5u}) {
    const AppendOutcome out = AppendAndWait(*writer, partition, "k", "v");
    EXPECT_EQ(out.status.code(), Status::Code::kInvalidArgument) << out.status.ToString();
    EXPECT_FALSE(out.maybe_written);
    EXPECT_NE(out.status.message().find("has 4 partitions"), std::string_view::npos)
        << out.status.ToString();
    EXPECT_NE(out.status.message().find("configured for 8"), std::string_view::npos)
        << out.status.ToString();
  }
  EXPECT_EQ(writer->stats().failed, 2u);
  // The reader reads nothing of a topic that has entries, and says why.
  auto good = Writer(Options());
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(AppendAndWait(*good, 0, "k", "v").status.ok());
  const std::pair<uint32_t, int64_t> from[] = {{0, kFromBeginning}};
  ASSERT_TRUE(reader->Assign(from).ok());
  Driver d(reader.get());
  ASSERT_TRUE(d.WaitFor([&] {
    return reader->health(10s).code() == Status::Code::kInvalidArgument;
  })) << reader->health(10s).ToString();
  EXPECT_NE(reader->health(10s).message().find("has 4 partitions"), std::string_view::npos)
      << reader->health(10s).ToString();
  EXPECT_EQ(d.ReadCount(1, 1500ms).code(), Status::Code::kTimeout);
  EXPECT_TRUE(d.read().empty());
}

TEST_F(LogTest, AMissingTopicIsRefusedUntilItExists) {
  // The mock makes any topic asked for (it serves Metadata v0-2 only, where
  // a client cannot ask it not to), so the topic is made missing.
  std::string why;
  ASSERT_TRUE(mock_->CreateTopic("later", static_cast<int>(kPartitions), &why)) << why;
  ASSERT_TRUE(mock_->SetTopicError("later", "UNKNOWN_TOPIC_OR_PART", &why)) << why;
  LogOptions o = Options();
  o.topic = "later";
  auto writer = Writer(o);
  auto reader = Reader(o);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const AppendOutcome refused = AppendAndWait(*writer, 1, "k", "refused");
  EXPECT_EQ(refused.status.code(), Status::Code::kInvalidArgument) << refused.status.ToString();
  EXPECT_NE(refused.status.message().find("does not exist"), std::string_view::npos)
      << refused.status.ToString();
  ASSERT_TRUE(reader->Assign(AllFrom(kFromBeginning)).ok());
  Driver d(reader.get());
  ASSERT_TRUE(d.WaitFor([&] {
    return reader->health(10s).code() == Status::Code::kInvalidArgument;
  })) << reader->health(10s).ToString();
  EXPECT_NE(reader->health(10s).message().find("does not exist"), std::string_view::npos);

  // The topic appears: both take it (they ask again every second).
  ASSERT_TRUE(mock_->SetTopicError("later", "NO_ERROR", &why)) << why;
  AppendOutcome taken;
  ASSERT_TRUE(d.WaitFor([&] {
    taken = AppendAndWait(*writer, 1, "k", "taken");
    return taken.status.ok();
  })) << taken.status.ToString();
  EXPECT_EQ(taken.offset, 0);
  ASSERT_TRUE(d.ReadCount(1).ok());
  EXPECT_EQ(d.read()[0].value, "taken");
  EXPECT_TRUE(d.WaitFor([&] { return reader->health(10s).ok(); }))
      << reader->health(10s).ToString();
}

TEST_F(LogTest, OpenRefusesBadOptionsAndProperties) {
  LogOptions o = Options();
  // Not a power of two dividing 4096.
  o.partitions = 3;
  EXPECT_EQ(OpenKafkaWriter(o).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(OpenKafkaReader(o).status().code(), Status::Code::kInvalidArgument);
  // A property librdkafka does not know.
  o = Options();
  o.properties = {{"no.such.property", "1"}};
  EXPECT_EQ(OpenKafkaReader(o).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(OpenKafkaWriter(o).status().code(), Status::Code::kInvalidArgument);
  // One segstore sets itself.
  o.properties = {{"acks", "1"}};
  Result<std::unique_ptr<LogWriter>> w = OpenKafkaWriter(o);
  EXPECT_EQ(w.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(w.status().message().find("acks"), std::string_view::npos) << w.status().ToString();
  o.properties = {{"auto.offset.reset", "latest"}};
  EXPECT_EQ(OpenKafkaReader(o).status().code(), Status::Code::kInvalidArgument);
  // A combination librdkafka refuses only when the client is made.
  o.properties = {{"max.in.flight", "50"}};
  w = OpenKafkaWriter(o);
  EXPECT_EQ(w.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(w.status().message().find("max.in.flight"), std::string_view::npos)
      << w.status().ToString();
}

TEST_F(LogTest, OpeningNeedsNoBrokerAndAppendsWaitForOne) {
  std::string why;
  for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerDown(b, &why)) << why;
  LogOptions o = Options();
  o.append_timeout = 1500ms;
  const auto start = Clock::now();
  auto impatient = Writer(o);
  o.append_timeout = 30s;
  auto writer = Writer(o);
  auto reader = Reader(o);
  ASSERT_NE(impatient, nullptr);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  EXPECT_LT(Clock::now() - start, 3s);  // no broker was waited for

  // The reader says it has no answer; it can be assigned all the same.
  const Status h = reader->health(30s);
  EXPECT_EQ(h.code(), Status::Code::kUnavailable) << h.ToString();
  EXPECT_NE(h.message().find("answered"), std::string_view::npos) << h.ToString();
  ASSERT_TRUE(reader->Assign(AllFrom(kFromBeginning)).ok());

  // An append waits up to its append timeout for a broker, then fails as
  // not written.
  const auto t0 = Clock::now();
  const AppendOutcome lost = AppendAndWait(*impatient, 0, "k", "lost");
  EXPECT_EQ(lost.status.code(), Status::Code::kUnavailable) << lost.status.ToString();
  EXPECT_FALSE(lost.maybe_written);
  EXPECT_GE(Clock::now() - t0, 1400ms);
  EXPECT_NE(lost.status.message().find("not written"), std::string_view::npos)
      << lost.status.ToString();

  // Appends made while every broker is down go through, in order, once they
  // are up.
  constexpr size_t kN = 12;
  Outcomes outcomes;
  outcomes.Expect(kN);
  for (size_t i = 0; i < kN; ++i) {
    writer->Append(static_cast<uint32_t>(i % kPartitions), "k", "v" + std::to_string(i),
                   outcomes.For(i));
  }
  for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerUp(b, &why)) << why;
  ASSERT_TRUE(outcomes.WaitAll(40s));
  for (size_t i = 0; i < kN; ++i) {
    const AppendOutcome out = outcomes.Get(i);
    ASSERT_TRUE(out.status.ok()) << i << ": " << out.status.ToString();
    EXPECT_EQ(out.offset, static_cast<int64_t>(i / kPartitions)) << i;
    EXPECT_NE(outcomes.Thread(i), std::this_thread::get_id());
  }
  // The other writer works too now.
  Driver d(reader.get());
  AppendOutcome later;
  ASSERT_TRUE(d.WaitFor([&] {
    later = AppendAndWait(*impatient, 0, "k", "later");
    return later.status.ok();
  })) << later.status.ToString();
  EXPECT_EQ(later.offset, static_cast<int64_t>(kN / kPartitions));

  // The reader reads them all, and is healthy.
  ASSERT_TRUE(d.ReadCount(kN + 1).ok()) << d.read().size();
  std::map<uint32_t, int64_t> next;
  for (const Read& r : d.read()) EXPECT_EQ(r.offset, next[r.partition]++) << r.value;
  EXPECT_TRUE(d.WaitFor([&] { return reader->health(5s).ok(); })) << reader->health(5s).ToString();
  writer.reset();
  impatient.reset();
  EXPECT_TRUE(outcomes.EachOnce());
}

TEST_F(LogTest, AppendRefusesAPartitionOutOfRangeAndAValueTooLarge) {
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  Outcomes outcomes;
  outcomes.Expect(2);
  writer->Append(kPartitions, "k", "v", outcomes.For(0));
  writer->Append(0, "k", std::string(2 << 20, 'x'), outcomes.For(1));  // over message.max.bytes
  ASSERT_TRUE(outcomes.WaitAll());
  for (size_t i = 0; i < 2; ++i) {
    const AppendOutcome o = outcomes.Get(i);
    EXPECT_EQ(o.status.code(), Status::Code::kInvalidArgument) << o.status.ToString();
    EXPECT_FALSE(o.maybe_written);
    // Never inside Append: on the writer's thread.
    EXPECT_NE(outcomes.Thread(i), std::this_thread::get_id());
  }
  EXPECT_EQ(writer->stats().failed, 2u);
  // The writer goes on.
  EXPECT_TRUE(AppendAndWait(*writer, 0, "k", "v").status.ok());
  writer.reset();
  EXPECT_TRUE(outcomes.EachOnce());
}

TEST_F(LogTest, ABatchRefusedAsTooLargeFailsItsSmallEntriesAsNotWritten) {
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(AppendAndWait(*writer, 0, "k", "first").status.ok());
  // The broker refuses a whole batch: librdkafka fails every entry of it,
  // each small and valid. Not the caller's fault: Unavailable, not written.
  for (const char* error : {"MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"}) {
    std::string why;
    ASSERT_TRUE(mock_->PushErrors("Produce", error, 1, &why)) << why;
    constexpr size_t kN = 4;
    Outcomes outcomes;
    outcomes.Expect(kN);
    for (size_t i = 0; i < kN; ++i) writer->Append(0, "k", "small", outcomes.For(i));
    ASSERT_TRUE(outcomes.WaitAll());
    size_t refused = 0;
    for (size_t i = 0; i < kN; ++i) {
      const AppendOutcome out = outcomes.Get(i);
      if (out.status.ok()) continue;  // sent in a later produce request
      ++refused;
      EXPECT_EQ(out.status.code(), Status::Code::kUnavailable) << error << ": "
                                                               << out.status.ToString();
      EXPECT_FALSE(out.maybe_written) << out.status.ToString();
      EXPECT_NE(out.status.message().find("refused the batch"), std::string_view::npos)
          << out.status.ToString();
    }
    EXPECT_GE(refused, 1u) << error;
  }
  // And the writer goes on.
  EXPECT_TRUE(AppendAndWait(*writer, 0, "k", "last").status.ok());
}

TEST_F(LogTest, BrokerDownWithAppendsInFlightLeadersMovedThenBack) {
  LeadAllOn(1);
  LogOptions o = Options();
  o.append_timeout = 3s;
  auto writer = Writer(o);
  auto reader = Reader(o);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(reader->Assign(AllFrom(kFromBeginning)).ok());

  auto value = [](const std::string& tag, size_t i) { return tag + std::to_string(i); };
  auto append = [&](Outcomes* outcomes, const std::string& tag, size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      writer->Append(static_cast<uint32_t>(i % kPartitions), "k", value(tag, i), outcomes->For(i));
    }
  };
  // value -> (partition, offset) of every acknowledged append; the values of
  // those that failed as not written.
  std::map<std::string, std::pair<uint32_t, int64_t>> acknowledged;
  std::set<std::string> not_written;
  size_t failed = 0;
  auto collect = [&](const Outcomes& outcomes, const std::string& tag) {
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const AppendOutcome out = outcomes.Get(i);
      if (out.status.ok()) {
        acknowledged[value(tag, i)] = {static_cast<uint32_t>(i % kPartitions), out.offset};
        continue;
      }
      ++failed;
      EXPECT_EQ(out.status.code(), Status::Code::kUnavailable) << out.status.ToString();
      if (!out.maybe_written) not_written.insert(value(tag, i));
    }
  };

  Outcomes before;
  before.Expect(20);
  append(&before, "before-", 0, 20);
  ASSERT_TRUE(before.WaitAll());
  for (size_t i = 0; i < 20; ++i) ASSERT_TRUE(before.Get(i).status.ok());
  collect(before, "before-");

  // Broker 1, every partition's leader, goes away with appends in flight;
  // then the partitions move to broker 2 (the mock does not move them).
  std::string why;
  Outcomes during;
  during.Expect(300);
  append(&during, "during-", 0, 200);
  ASSERT_TRUE(mock_->BrokerDown(1, &why)) << why;
  append(&during, "during-", 200, 250);
  LeadAllOn(2);
  append(&during, "during-", 250, 300);
  ASSERT_TRUE(during.WaitAll());
  collect(during, "during-");

  // Broker 1 comes back and leads again.
  ASSERT_TRUE(mock_->BrokerUp(1, &why)) << why;
  LeadAllOn(1);
  Outcomes after;
  after.Expect(20);
  append(&after, "after-", 0, 20);
  ASSERT_TRUE(after.WaitAll());
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_TRUE(after.Get(i).status.ok()) << after.Get(i).status.ToString();
  }
  collect(after, "after-");
  writer.reset();
  EXPECT_TRUE(before.EachOnce() && during.EachOnce() && after.EachOnce());

  // The reader, on the same brokers, sees every acknowledged entry where its
  // append said, each partition in offset order, and none of those that
  // failed as not written.
  Driver d(reader.get());
  Status s = d.ReadUntil([&](const std::vector<Read>& r) {
    size_t found = 0;
    for (const Read& e : r) found += acknowledged.count(e.value);
    return found >= acknowledged.size();
  });
  ASSERT_TRUE(s.ok()) << s.ToString() << "; acknowledged " << acknowledged.size() << ", failed "
                      << failed << ", read " << d.read().size();
  ASSERT_TRUE(d.WaitFor([&] {
    for (const PartitionPosition& p : reader->positions()) {
      if (p.end < 0 || p.next != p.end) return false;
    }
    return true;
  }));
  std::map<uint32_t, int64_t> last;
  std::set<std::string> seen;
  for (const Read& e : d.read()) {
    auto it = last.find(e.partition);
    if (it != last.end()) {
      EXPECT_EQ(e.offset, it->second + 1);
    }
    last[e.partition] = e.offset;
    EXPECT_TRUE(seen.insert(e.value).second) << e.value << " read twice";
    EXPECT_EQ(not_written.count(e.value), 0u) << e.value << " failed as not written, yet is there";
    auto ack = acknowledged.find(e.value);
    if (ack != acknowledged.end()) {
      EXPECT_EQ(ack->second.first, e.partition);
      EXPECT_EQ(ack->second.second, e.offset);
    }
  }
  EXPECT_TRUE(reader->health(5s).ok()) << reader->health(5s).ToString();
}

TEST_F(LogTest, NotEnoughReplicasIsRetriedUntilTheAppendTimeout) {
  LogOptions o = Options();
  o.append_timeout = 2s;
  auto writer = Writer(o);
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(AppendAndWait(*writer, 0, "k", "first").status.ok());

  // A few: librdkafka retries the refused produce request (the error is
  // retriable) and the append succeeds, once, at the next offset.
  std::string why;
  ASSERT_TRUE(mock_->PushErrors("Produce", "NOT_ENOUGH_REPLICAS", 3, &why)) << why;
  AppendOutcome o2 = AppendAndWait(*writer, 0, "k", "second");
  ASSERT_TRUE(o2.status.ok()) << o2.status.ToString();
  EXPECT_EQ(o2.offset, 1);

  // More than fit in the append timeout: it fails, as not written (every
  // attempt was refused).
  ASSERT_TRUE(mock_->PushErrors("Produce", "NOT_ENOUGH_REPLICAS", 100000, &why)) << why;
  const auto start = Clock::now();
  AppendOutcome o3 = AppendAndWait(*writer, 0, "k", "third");
  EXPECT_EQ(o3.status.code(), Status::Code::kUnavailable) << o3.status.ToString();
  EXPECT_FALSE(o3.maybe_written) << o3.status.ToString();
  EXPECT_GE(Clock::now() - start, 1900ms);
  ASSERT_TRUE(mock_->ClearErrors(&why)) << why;
  AppendOutcome o4 = AppendAndWait(*writer, 0, "k", "fourth");
  ASSERT_TRUE(o4.status.ok()) << o4.status.ToString();
  EXPECT_EQ(o4.offset, 2);

  // What was read: first, second, fourth; never twice, never the third.
  auto reader = Reader(o);
  ASSERT_NE(reader, nullptr);
  const std::pair<uint32_t, int64_t> from[] = {{0, kFromBeginning}};
  ASSERT_TRUE(reader->Assign(from).ok());
  Driver d(reader.get());
  ASSERT_TRUE(d.WaitFor([&] { return PositionOf(*reader, 0)->next == 3; }));
  ASSERT_EQ(d.read().size(), 3u);
  EXPECT_EQ(d.read()[0].value, "first");
  EXPECT_EQ(d.read()[1].value, "second");
  EXPECT_EQ(d.read()[2].value, "fourth");
}

TEST_F(LogTest, AnAppendCutOffAfterItWasSentMayHaveBeenWritten) {
  LogOptions o = Options();
  o.append_timeout = 1500ms;
  auto writer = Writer(o);
  ASSERT_NE(writer, nullptr);
  // Every produce request ends in a dropped connection: librdkafka cannot
  // know whether the broker took the entry, and retries (idempotently) until
  // the append timeout.
  std::string why;
  ASSERT_TRUE(mock_->PushErrors("Produce", "_TRANSPORT", 100000, &why)) << why;
  AppendOutcome cut = AppendAndWait(*writer, 2, "k", "cut off");
  EXPECT_EQ(cut.status.code(), Status::Code::kUnavailable) << cut.status.ToString();
  EXPECT_TRUE(cut.maybe_written) << cut.status.ToString();
  EXPECT_NE(cut.status.message().find("may have been written"), std::string_view::npos);
  EXPECT_EQ(writer->stats().maybe_written, 1u);
  ASSERT_TRUE(mock_->ClearErrors(&why)) << why;
  AppendOutcome next = AppendAndWait(*writer, 2, "k", "next");
  ASSERT_TRUE(next.status.ok()) << next.status.ToString();
  EXPECT_EQ(next.offset, 0);  // the mock refused the first before writing it
}

TEST_F(LogTest, AppendTimesOutWhenEveryBrokerIsDown) {
  LogOptions o = Options();
  o.append_timeout = 1s;
  auto writer = Writer(o);
  ASSERT_NE(writer, nullptr);
  std::string why;
  for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerDown(b, &why)) << why;
  Outcomes outcomes;
  outcomes.Expect(1);
  const auto start = Clock::now();
  writer->Append(1, "k", "v", outcomes.For(0));
  ASSERT_TRUE(outcomes.WaitAll());
  const AppendOutcome out = outcomes.Get(0);
  EXPECT_EQ(out.status.code(), Status::Code::kUnavailable) << out.status.ToString();
  EXPECT_GE(Clock::now() - start, 900ms);
  // Usually not written (never sent), but the writer may not have seen the
  // last connection drop before it sent the entry: maybe_written either way.
  writer.reset();
  EXPECT_TRUE(outcomes.EachOnce());
}

TEST_F(LogTest, WriterDestructorRunsEveryCallbackOnce) {
  // Brokers up: the destructor waits for what is in flight.
  {
    auto writer = Writer(Options());
    ASSERT_NE(writer, nullptr);
    constexpr size_t kN = 500;
    Outcomes outcomes;
    outcomes.Expect(kN);
    for (size_t i = 0; i < kN; ++i) {
      writer->Append(static_cast<uint32_t>(i % kPartitions), "k", "v", outcomes.For(i));
    }
    writer.reset();
    ASSERT_TRUE(outcomes.WaitAll(0ms));  // all ran before the destructor returned
    EXPECT_TRUE(outcomes.EachOnce());
    for (size_t i = 0; i < kN; ++i) EXPECT_TRUE(outcomes.Get(i).status.ok());
  }
  // Every broker down: what is in flight fails, each once.
  {
    LogOptions o = Options();
    o.append_timeout = 1500ms;
    auto writer = Writer(o);
    ASSERT_NE(writer, nullptr);
    std::string why;
    for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerDown(b, &why)) << why;
    constexpr size_t kN = 100;
    Outcomes outcomes;
    outcomes.Expect(kN);
    for (size_t i = 0; i < kN; ++i) {
      writer->Append(static_cast<uint32_t>(i % kPartitions), "k", "v", outcomes.For(i));
    }
    const auto start = Clock::now();
    writer.reset();
    EXPECT_LT(Clock::now() - start, o.append_timeout + 5s);
    ASSERT_TRUE(outcomes.WaitAll(0ms));
    EXPECT_TRUE(outcomes.EachOnce());
    for (size_t i = 0; i < kN; ++i) {
      EXPECT_EQ(outcomes.Get(i).status.code(), Status::Code::kUnavailable);
    }
    for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerUp(b, &why)) << why;
  }
  // Every broker down since before the writer was opened: the appends wait
  // (held by the writer), and fail as not written.
  {
    std::string why;
    for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerDown(b, &why)) << why;
    LogOptions o = Options();
    o.append_timeout = 1s;
    auto writer = Writer(o);
    ASSERT_NE(writer, nullptr);
    constexpr size_t kN = 50;
    Outcomes outcomes;
    outcomes.Expect(kN);
    for (size_t i = 0; i < kN; ++i) {
      writer->Append(static_cast<uint32_t>(i % kPartitions), "k", "v", outcomes.For(i));
    }
    EXPECT_EQ(writer->stats().in_flight, kN);
    const auto start = Clock::now();
    writer.reset();
    EXPECT_LT(Clock::now() - start, o.append_timeout + 5s);
    ASSERT_TRUE(outcomes.WaitAll(0ms));
    EXPECT_TRUE(outcomes.EachOnce());
    for (size_t i = 0; i < kN; ++i) {
      EXPECT_EQ(outcomes.Get(i).status.code(), Status::Code::kUnavailable);
      EXPECT_FALSE(outcomes.Get(i).maybe_written);
    }
  }
}

TEST_F(LogTest, AnOffsetRetentionPassedIsSkippedToTheOldestHeld) {
  // The mock keeps about 5 MiB of each partition: seven entries of 900 KB
  // push the first ones out, so offset 0 of partition 0 is gone.
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  const std::string big(900'000, 'b');
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(AppendAndWait(*writer, 0, "k", big + std::to_string(i)).status.ok());
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(AppendAndWait(*writer, 1, "k", "small" + std::to_string(i)).status.ok());
  }

  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  const std::pair<uint32_t, int64_t> from[] = {{0, 0}, {1, 0}};
  ASSERT_TRUE(reader->Assign(from).ok());
  Driver d(reader.get());
  // Neither stops: partition 0 goes on from the oldest entry it holds.
  ASSERT_TRUE(d.WaitFor([&] {
    const std::optional<PartitionPosition> p0 = PositionOf(*reader, 0);
    const std::optional<PartitionPosition> p1 = PositionOf(*reader, 1);
    return p0 && p1 && p0->next == 7 && p1->next == 3;
  })) << "read " << d.read().size();
  const std::optional<PartitionPosition> p0 = PositionOf(*reader, 0);
  ASSERT_TRUE(p0.has_value());
  ASSERT_GT(p0->start, 0);  // retention passed offset 0
  std::vector<int64_t> offsets0;
  std::vector<int64_t> offsets1;
  for (const Read& r : d.read()) {
    if (r.partition == 0) {
      // The entry at each offset, once.
      EXPECT_EQ(r.value, big + std::to_string(r.offset));
      offsets0.push_back(r.offset);
    } else {
      EXPECT_EQ(r.value, "small" + std::to_string(r.offset));
      offsets1.push_back(r.offset);
    }
  }
  // The jump is visible: the first offset delivered is the oldest held, not
  // the one assigned; then each once, in order.
  ASSERT_FALSE(offsets0.empty());
  EXPECT_EQ(offsets0.front(), p0->start);
  for (size_t i = 1; i < offsets0.size(); ++i) EXPECT_EQ(offsets0[i], offsets0[i - 1] + 1);
  EXPECT_EQ(offsets0.back(), 6);
  EXPECT_EQ(offsets1, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(reader->positions().size(), 2u);
  EXPECT_TRUE(reader->health(5s).ok()) << reader->health(5s).ToString();
  // And it reads on.
  ASSERT_TRUE(AppendAndWait(*writer, 0, "k", big + "7").status.ok());
  ASSERT_TRUE(d.WaitFor([&] { return PositionOf(*reader, 0)->next == 8; }));
  EXPECT_EQ(d.read().back().offset, 7);
}

TEST_F(LogTest, AnOffsetPastTheLogsEndStartsOverFromTheOldestHeld) {
  // What a reader further along than the log's end meets when the topic is
  // truncated or made again (which the mock cannot do): a fetch refused as
  // OFFSET_OUT_OF_RANGE. It reads the log again from its oldest entry.
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(AppendAndWait(*writer, 1, "k", "p1-" + std::to_string(i)).status.ok());
  }
  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  // Partition 1 holds 0..2, partition 2 nothing.
  const std::pair<uint32_t, int64_t> from[] = {{1, 100}, {2, 50}};
  ASSERT_TRUE(reader->Assign(from).ok());
  EXPECT_EQ(PositionOf(*reader, 1)->next, 100);
  Driver d(reader.get());
  ASSERT_TRUE(d.WaitFor([&] {
    return PositionOf(*reader, 1)->next == 3 && PositionOf(*reader, 2)->next == 0;
  })) << PositionOf(*reader, 1)->next << " " << PositionOf(*reader, 2)->next;
  ASSERT_EQ(d.read().size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d.read()[i].partition, 1u);
    EXPECT_EQ(d.read()[i].offset, i);
    EXPECT_EQ(d.read()[i].value, "p1-" + std::to_string(i));
  }
  // Partition 2 did not stop either: what is appended next is read.
  const AppendOutcome o = AppendAndWait(*writer, 2, "k", "p2-0");
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  ASSERT_TRUE(d.ReadCount(4).ok());
  EXPECT_EQ(d.read()[3].partition, 2u);
  EXPECT_EQ(d.read()[3].offset, 0);
  EXPECT_EQ(reader->positions().size(), 2u);
  EXPECT_TRUE(reader->health(5s).ok()) << reader->health(5s).ToString();
}

TEST_F(LogTest, AFatalProducerErrorAtStartIsSurvived) {
  // The producer's InitProducerId refused for authorization: librdkafka's
  // idempotent producer raises a fatal error. The writer makes a new one.
  std::string why;
  ASSERT_TRUE(mock_->PushErrors("InitProducerId", "CLUSTER_AUTHORIZATION_FAILED", 1, &why)) << why;
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  constexpr size_t kN = 20;
  Outcomes outcomes;
  outcomes.Expect(kN);
  for (size_t i = 0; i < kN; ++i) {
    writer->Append(static_cast<uint32_t>(i % kPartitions), "k", "early" + std::to_string(i),
                   outcomes.For(i));
  }
  ASSERT_TRUE(outcomes.WaitAll());
  // Each either written (by the new producer) or failed as not written (the
  // failed producer never sent it).
  std::set<std::string> written;
  for (size_t i = 0; i < kN; ++i) {
    const AppendOutcome out = outcomes.Get(i);
    if (out.status.ok()) {
      written.insert("early" + std::to_string(i));
      continue;
    }
    EXPECT_EQ(out.status.code(), Status::Code::kUnavailable) << out.status.ToString();
    EXPECT_FALSE(out.maybe_written) << out.status.ToString();
  }
  const AppendOutcome after = AppendAndWait(*writer, 0, "k", "after");
  ASSERT_TRUE(after.status.ok()) << after.status.ToString();
  written.insert("after");

  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(reader->Assign(AllFrom(kFromBeginning)).ok());
  Driver d(reader.get());
  ASSERT_TRUE(d.ReadCount(written.size()).ok()) << d.read().size() << " of " << written.size();
  std::set<std::string> read;
  for (const Read& r : d.read()) EXPECT_TRUE(read.insert(r.value).second) << r.value;
  EXPECT_EQ(read, written);
  writer.reset();
  EXPECT_TRUE(outcomes.EachOnce());
}

TEST_F(LogTest, AFatalProducerErrorWithAppendsInFlightIsSurvived) {
  auto writer = Writer(Options());
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(AppendAndWait(*writer, 0, "k", "first").status.ok());
  // A produce request answered OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka's
  // idempotent producer cannot go on (fatal). Its batch may have been
  // written; the other appends in flight fail as maybe written, or were
  // answered in time.
  std::string why;
  ASSERT_TRUE(mock_->PushErrors("Produce", "OUT_OF_ORDER_SEQUENCE_NUMBER", 1, &why)) << why;
  constexpr size_t kN = 40;
  Outcomes outcomes;
  outcomes.Expect(kN);
  for (size_t i = 0; i < kN; ++i) {
    writer->Append(static_cast<uint32_t>(i % kPartitions), "k", "mid" + std::to_string(i),
                   outcomes.For(i));
  }
  ASSERT_TRUE(outcomes.WaitAll());
  std::map<std::string, std::pair<uint32_t, int64_t>> written;
  written["first"] = {0, 0};
  std::set<std::string> not_written;
  size_t maybe = 0;
  for (size_t i = 0; i < kN; ++i) {
    const AppendOutcome out = outcomes.Get(i);
    const std::string value = "mid" + std::to_string(i);
    if (out.status.ok()) {
      written[value] = {static_cast<uint32_t>(i % kPartitions), out.offset};
      continue;
    }
    EXPECT_EQ(out.status.code(), Status::Code::kUnavailable) << out.status.ToString();
    if (out.maybe_written) {
      ++maybe;
    } else {
      not_written.insert(value);
    }
  }
  EXPECT_GE(maybe, 1u);  // at least the batch answered with the fatal error
  EXPECT_GE(writer->stats().maybe_written, 1u);
  // A new producer takes the next appends.
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const AppendOutcome out = AppendAndWait(*writer, p, "k", "after" + std::to_string(p));
    ASSERT_TRUE(out.status.ok()) << out.status.ToString();
    written["after" + std::to_string(p)] = {p, out.offset};
  }
  writer.reset();
  EXPECT_TRUE(outcomes.EachOnce());

  // Every acknowledged entry is where its append said, none of those that
  // failed as not written is there, each partition in offset order.
  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(reader->Assign(AllFrom(kFromBeginning)).ok());
  Driver d(reader.get());
  ASSERT_TRUE(d.ReadUntil([&](const std::vector<Read>& r) {
    size_t found = 0;
    for (const Read& e : r) found += written.count(e.value);
    return found >= written.size();
  }).ok());
  std::map<uint32_t, int64_t> next;
  for (const Read& e : d.read()) {
    EXPECT_EQ(e.offset, next[e.partition]++) << e.value;
    EXPECT_EQ(not_written.count(e.value), 0u) << e.value << " failed as not written, yet is there";
    auto it = written.find(e.value);
    if (it != written.end()) {
      EXPECT_EQ(it->second.first, e.partition) << e.value;
      EXPECT_EQ(it->second.second, e.offset) << e.value;
    }
  }
}

TEST_F(LogTest, HealthIsUnavailableWhileEveryBrokerIsDown) {
  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(reader->Assign(AllFrom(kFromEnd)).ok());
  Driver d(reader.get());
  constexpr auto kStale = 500ms;
  // Fetching: healthy.
  ASSERT_TRUE(d.WaitFor([&] {
    for (const PartitionPosition& p : reader->positions()) {
      if (p.next < 0) return false;
    }
    return true;
  }));
  EXPECT_TRUE(reader->health(kStale).ok()) << reader->health(kStale).ToString();

  std::string why;
  for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerDown(b, &why)) << why;
  // Each partition goes stale in turn.
  ASSERT_TRUE(d.WaitFor([&] {
    return reader->health(kStale).message().find("4 of 4") != std::string_view::npos;
  })) << reader->health(kStale).ToString();
  EXPECT_EQ(reader->health(kStale).code(), Status::Code::kUnavailable);

  for (int b = 1; b <= 3; ++b) ASSERT_TRUE(mock_->BrokerUp(b, &why)) << why;
  ASSERT_TRUE(d.WaitFor([&] { return reader->health(kStale).ok(); }))
      << reader->health(kStale).ToString();
}

TEST_F(LogTest, HealthNamesAPartitionWhoseLeaderIsDown) {
  // Partition 3 alone on broker 3, which goes down and stays leader (the
  // mock does not move leaders): the others are fresh, partition 3 is not.
  LeadAllOn(1);
  std::string why;
  ASSERT_TRUE(mock_->SetLeader(3, 3, &why)) << why;
  auto reader = Reader(Options());
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(reader->Assign(AllFrom(kFromEnd)).ok());
  Driver d(reader.get());
  constexpr auto kStale = 1000ms;
  ASSERT_TRUE(d.WaitFor([&] { return PositionOf(*reader, 3)->next >= 0; }));
  ASSERT_TRUE(mock_->BrokerDown(3, &why)) << why;
  ASSERT_TRUE(d.WaitFor([&] { return !reader->health(kStale).ok(); }));
  const Status s = reader->health(kStale);
  EXPECT_NE(s.message().find("1 of 4"), std::string_view::npos) << s.ToString();
  EXPECT_NE(s.message().find("log partition 3 (leader broker 3)"), std::string_view::npos)
      << s.ToString();
  // Moved to a broker that is up: fresh again.
  ASSERT_TRUE(mock_->SetLeader(3, 1, &why)) << why;
  ASSERT_TRUE(d.WaitFor([&] { return reader->health(kStale).ok(); }))
      << reader->health(kStale).ToString();
}

TEST(KafkaLogTest, SegstoreSettingsComeFirst) {
  LogOptions o;
  o.brokers = "b:9092";
  o.append_timeout = 1234ms;
  const KafkaProperties w = KafkaWriterProperties(o);
  auto has = [](const KafkaProperties& ps, const std::string& k, const std::string& v) {
    for (const auto& [name, value] : ps) {
      if (name == k) return value == v;
    }
    return false;
  };
  EXPECT_TRUE(has(w, "bootstrap.servers", "b:9092"));
  EXPECT_TRUE(has(w, "enable.idempotence", "true"));
  EXPECT_TRUE(has(w, "acks", "all"));
  EXPECT_TRUE(has(w, "message.timeout.ms", "1234"));
  const KafkaProperties r = KafkaReaderProperties(o);
  EXPECT_TRUE(has(r, "auto.offset.reset", "earliest"));
  EXPECT_TRUE(has(r, "enable.auto.commit", "false"));
  EXPECT_TRUE(has(r, "fetch.min.bytes", "1"));
  // Every property segstore sets for its guarantees is refused from the
  // caller; the others may be overridden.
  for (const KafkaProperties* ps : {&w, &r}) {
    for (const auto& [name, value] : *ps) {
      const bool guarded = name == "enable.idempotence" || name == "acks" ||
                           name == "message.timeout.ms" || name == "group.id" ||
                           name == "enable.auto.commit" || name == "enable.auto.offset.store" ||
                           name == "auto.offset.reset" || name == "enable.partition.eof" ||
                           name == "isolation.level";
      EXPECT_EQ(CheckProperties({{name, value}}).ok(), !guarded) << name;
    }
  }
}

TEST(KafkaLogTest, CheckPropertiesRefusesWhatWouldBreakTheGuarantees) {
  for (const char* name :
       {"acks", "request.required.acks", "topic.acks", "enable.idempotence", "transactional.id",
        "message.timeout.ms", "delivery.timeout.ms", "topic.message.timeout.ms",
        "queuing.strategy", "enable.auto.commit", "auto.commit.enable", "enable.auto.offset.store",
        "auto.offset.reset", "group.id", "isolation.level", "enable.partition.eof",
        "client.rack"}) {
    const Status s = CheckProperties({{"socket.keepalive.enable", "true"}, {name, "1"}});
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(std::string("property ") + name + " "), std::string_view::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("segstore sets it"), std::string_view::npos) << s.ToString();
  }
  // What librdkafka refuses.
  Status s = CheckProperties({{"no.such.property", "1"}});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("no.such.property"), std::string_view::npos) << s.ToString();
  s = CheckProperties({{"socket.timeout.ms", "soon"}});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("socket.timeout.ms"), std::string_view::npos) << s.ToString();
  // What segstore leaves to the operator.
  EXPECT_TRUE(CheckProperties({}).ok());
  EXPECT_TRUE(CheckProperties({{"socket.keepalive.enable", "true"},
                               {"linger.ms", "5"},
                               {"fetch.wait.max.ms", "20"},
                               {"message.max.bytes", "2000000"}})
                  .ok());
}

}  // namespace
}  // namespace segstore::log
