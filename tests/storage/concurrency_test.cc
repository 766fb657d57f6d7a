// Concurrency: read-modify-writes of the same keys from many threads (and
// many in flight on each) never lose an update; readers racing writers and
// defragmentation only ever see whole versions.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage/store_impl.h"
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
  // Whether writers collide on their own depends on how the scheduler runs
  // the threads (on a busy machine each may run its whole share alone). So
  // the first update of every thread is of key 0 and, having read it, waits
  // for the others to have read it too: all but one must then retry.
  std::atomic<int> at_rendezvous{0};
  auto rendezvous = [&] {
    ++at_rendezvous;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (at_rendezvous.load() < kThreads && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto w = WorkerOrDie(store.get());
      int issued = 0, done = 0;
      bool met = false;  // this thread's first update has been to the rendezvous
      while (done < kPerThread) {
        while (issued < kPerThread && issued - done < kInFlight) {
          const bool first = issued == 0;
          std::string key = Key(first ? 0 : (t + issued) % kKeys);
          w->Update(
              key,
              [&rendezvous, &met, first](const Record* cur) -> Result<Mutation> {
                uint64_t n = cur ? CounterOf(cur->body()) : 0;
                if (first && !met) {
                  met = true;
                  rendezvous();
                }
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
  // The test only means something if writers really collided: at least the
  // first updates did.
  EXPECT_EQ(at_rendezvous.load(), kThreads);
  EXPECT_GE(store->stats().update_retries, uint64_t{kThreads - 1});
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

// A read-modify-write whose key's block is freed and reused meanwhile, with
// a newer version landing at the very same offset, must see the change.
TEST(ConcurrencyTest, UpdateNoticesABlockReusedAtTheSameOffset) {
  ManualClock clock(1'700'000'000);
  auto device = FaultDevice::Create(32 * 64 * 1024, 5);
  StoreOptions opts = SmallOptions("fault", &clock);
  auto store = OpenOrDie(opts, device);
  auto* impl = static_cast<StoreImpl*>(store.get());
  const std::string k = "counter";
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync(k, "v1").ok());  // block X
  }
  uint64_t offset = 0;
  {
    Digest d = impl->DigestOf(k);
    Index::Locked t = impl->index().Lock(Index::PartitionOf(k));
    t->ForEachWithTag(Index::TagOf(d), [&](const IndexEntry& e) { offset = e.offset(); });
  }
  const uint32_t x = impl->BlockOf(offset);
  std::atomic<int> stage{0};
  std::optional<Result<WriteOutcome>> outcome;
  std::thread a([&] {
    auto wa = WorkerOrDie(store.get());
    outcome = wa->UpdateSync(k, [&](const Record* cur) -> Result<Mutation> {
      std::string base = cur ? std::string(cur->body()) : "";
      if (stage.load() == 0) {
        stage = 1;
        while (stage.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return Mutation::Put(base + "+A");
    });
  });
  while (stage.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync(k, "v2").ok());  // X is now garbage
  }
  ASSERT_TRUE(store->DefragNow(false).ok());
  ASSERT_EQ(impl->blocks().state(x), BlockState::kFree);
  // Cycle the FIFO free list so that X is handed out next.
  std::vector<uint32_t> taken;
  while (auto b = impl->blocks().Allocate(BlockTable::Purpose::kDefrag, impl->NextSeq(), 1)) {
    taken.push_back(*b);
  }
  impl->blocks().ReleaseUnwritten(x);
  for (uint32_t b : taken) {
    if (b != x) impl->blocks().ReleaseUnwritten(b);
  }
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync(k, "v3").ok());  // X again, at the same offset
  }
  stage = 2;
  a.join();
  ASSERT_TRUE(outcome && outcome->ok());
  EXPECT_GT((*outcome)->attempts, 1u);
  auto w = WorkerOrDie(store.get());
  EXPECT_EQ(w->GetSync(k)->body(), "v3+A");
}

}  // namespace
}  // namespace segstore::storage
