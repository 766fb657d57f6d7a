// Concurrency: read-modify-writes of the same keys from many threads (and
// many in flight on each) never lose an update; readers racing writers and
// defragmentation only ever see whole versions.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "storage/test_util.h"

namespace segstore::storage {
namespace {

using testing::Body;
using testing::Key;
using testing::OpenOrDie;
using testing::SmallOptions;
using testing::TempDir;
using testing::WorkerOrDie;

// A counter in the body: "count:<n>", padded so that records are not tiny.
std::string CounterBody(uint64_t n) {
  std::string s = "count:" + std::to_string(n) + ":";
  s.resize(600, '.');
  return s;
}
uint64_t CounterOf(std::string_view body) {
  return std::stoull(std::string(body.substr(6, body.find(':', 6) - 6)));
}

TEST(ConcurrencyTest, ConcurrentUpdatesOfTheSameKeysLoseNothing) {
  TempDir dir;
  ManualClock clock(1'700'000'000);
  StoreOptions opts = SmallOptions(dir.File("data"), &clock);
  opts.file_size = 64u << 20;
  opts.durability = Durability::kBuffered;
  opts.background_defrag = true;
  opts.defrag_interval = std::chrono::milliseconds(5);
  auto store = OpenOrDie(opts);
  constexpr int kThreads = 4;
  constexpr int kKeys = 6;
  constexpr int kPerThread = 600;
  constexpr int kInFlight = 8;  // per thread: updates of one key overlap even on one thread
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto w = WorkerOrDie(store.get());
      int issued = 0, done = 0;
      while (done < kPerThread) {
        while (issued < kPerThread && issued - done < kInFlight) {
          std::string key = Key((t + issued) % kKeys);
          w->Update(
              key,
              [](const Record* cur) -> Result<Mutation> {
                uint64_t n = cur ? CounterOf(cur->body()) : 0;
                return Mutation::Put(CounterBody(n + 1));
              },
              [&](Result<WriteOutcome> r) {
                if (!r.ok()) ++failures;
                ++done;
              });
          ++issued;
        }
        w->Wait(std::chrono::milliseconds(1));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto w = WorkerOrDie(store.get());
  uint64_t total = 0;
  for (int k = 0; k < kKeys; ++k) {
    auto got = w->GetSync(Key(k));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    total += CounterOf(got->body());
  }
  EXPECT_EQ(total, uint64_t{kThreads} * kPerThread);
  // The test only means something if writers really collided.
  EXPECT_GT(store->stats().update_retries, 0u);
}

TEST(ConcurrencyTest, ReadersSeeWholeVersionsWhileWritersAndDefragmentationRun) {
  TempDir dir;
  ManualClock clock(1'700'000'000);
  StoreOptions opts = SmallOptions(dir.File("data"), &clock);
  opts.file_size = 8u << 20;  // small: defragmentation must keep up
  opts.background_defrag = true;
  opts.defrag_interval = std::chrono::milliseconds(2);
  opts.defrag_blocks_per_second = 10000;
  auto store = OpenOrDie(opts);
  constexpr int kKeys = 100;
  {
    auto w = WorkerOrDie(store.get());
    for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(w->PutSync(Key(k), Body(k, 0, 2000)).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<uint64_t> reads{0};
  std::thread writer([&] {
    auto w = WorkerOrDie(store.get());
    for (int v = 1; v < 40; ++v) {
      for (int k = 0; k < kKeys; ++k) {
        if (!w->PutSync(Key(k), Body(k, v, 2000)).ok()) ++bad;
      }
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      auto w = WorkerOrDie(store.get());
      int k = r;
      while (!stop) {
        k = (k + 7) % kKeys;
        auto got = w->GetSync(Key(k));
        ++reads;
        if (!got.ok()) {
          ++bad;
          continue;
        }
        // Whichever version, it must be a whole one of this key.
        std::string body(got->body());
        int v = std::stoi(body.substr(1, body.find(':') - 1));
        if (body != Body(k, v, 2000)) ++bad;
      }
    });
  }
  writer.join();
  for (auto& th : readers) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 100u);
  EXPECT_GT(store->stats().defrag_blocks, 0u);
}

}  // namespace
}  // namespace segstore::storage
