// Defragmentation: blocks are really reclaimed, data matches a model across
// restarts, and no older version of a key ever comes back: not after a
// delete, not after a version that shortened the expiry, not after the
// blocks holding newer versions were reclaimed first.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <thread>

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

// Layout used below: with 64 KiB blocks and one sync commit write per 4 KiB
// sector, a block holds 14 or 15 records of 4000 bytes. The key under test
// goes first with fillers 0..39 after it; keeping fillers 0..9 keeps its
// first block above the defragmentation threshold, and overwriting every
// later filler empties the blocks written after it.
class DefragTest : public ::testing::Test {
 protected:
  // Fills blocks with filler records so that earlier ones are sealed.
  void Fill(Worker* w, int from, int count, int version) {
    for (int i = from; i < from + count; ++i) {
      ASSERT_TRUE(w->PutSync(Key(100000 + i), Body(i, version, 4000)).ok());
    }
  }
  // Rewrites blocks until every block older than now has gone.
  void RotateEverything(Store* store) {
    uint64_t now = store->stats().sequence;
    for (int i = 0; i < 1000 && store->stats().watermark <= now; ++i) {
      ASSERT_TRUE(store->DefragNow(/*rotate=*/true).ok());
    }
    ASSERT_GT(store->stats().watermark, now);
  }
  std::unique_ptr<Store> Reopen(std::unique_ptr<Store> store) {
    store.reset();
    return OpenOrDie(opts_);
  }

  TempDir dir_;
  ManualClock clock_{1'700'000'000};
  StoreOptions opts_ = SmallOptions(dir_.File("data"), &clock_);
};

TEST_F(DefragTest, DeletedKeyNeverComesBack) {
  auto store = OpenOrDie(opts_);
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("victim", Body(1, 1, 4000)).ok());  // block A, which stays
    Fill(w.get(), 0, 40, 1);
    ASSERT_TRUE(w->DeleteSync("victim").ok());  // the tombstone: block T
    Fill(w.get(), 40, 40, 1);
    Fill(w.get(), 10, 70, 2);  // empties T and its neighbours, not A
  }
  // T goes; its tombstone must be carried forward, since A still holds v1.
  ASSERT_TRUE(store->DefragNow(false).ok());
  EXPECT_GT(store->stats().defrag_blocks, 0u);
  EXPECT_EQ(store->stats().index_tombstones, 1u);
  store = Reopen(std::move(store));
  {
    auto w = WorkerOrDie(store.get());
    EXPECT_TRUE(w->GetSync("victim").status().IsNotFound());
  }
  // Rotate every block: the tombstone is reclaimed, and still nothing comes back.
  RotateEverything(store.get());
  ASSERT_TRUE(store->DefragNow(false).ok());
  EXPECT_GE(store->stats().tombstones_reclaimed, 1u);
  EXPECT_EQ(store->stats().index_tombstones, 0u);
  store = Reopen(std::move(store));
  auto w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("victim").status().IsNotFound());
  for (int i = 0; i < 80; ++i) {
    EXPECT_EQ(w->GetSync(Key(100000 + i))->body(), Body(i, i < 10 ? 1 : 2, 4000));
  }
}

TEST_F(DefragTest, TombstoneIsKeptWhileAnOlderVersionRemains) {
  auto store = OpenOrDie(opts_);
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("victim", Body(1, 1, 4000)).ok());
    Fill(w.get(), 0, 40, 1);  // keeps the victim's old block alive and full
    ASSERT_TRUE(w->DeleteSync("victim").ok());
    Fill(w.get(), 40, 60, 1);
    Fill(w.get(), 40, 60, 2);
  }
  // Without rotation the block holding the old version stays: so must the tombstone.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->DefragNow(false).ok());
  EXPECT_EQ(store->stats().index_tombstones, 1u);
  store = Reopen(std::move(store));
  EXPECT_EQ(store->recovery().tombstones, 1u);
  auto w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("victim").status().IsNotFound());
}

TEST_F(DefragTest, ShortenedExpiryNeverComesBack) {
  const UnixSeconds t0 = clock_.Now();
  auto store = OpenOrDie(opts_);
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("k", Body(1, 1, 4000), 0, t0 + 100000).ok());  // long-lived, in A
    Fill(w.get(), 0, 40, 1);
    ASSERT_TRUE(w->PutSync("k", Body(1, 2, 4000), 0, t0 + 10).ok());  // expires soon, in B
    Fill(w.get(), 40, 40, 1);
    Fill(w.get(), 10, 70, 2);  // empties B, not A
  }
  clock_.Advance(10);
  // B goes; the expired version must leave a tombstone behind, since A holds v1.
  ASSERT_TRUE(store->DefragNow(false).ok());
  EXPECT_GE(store->stats().expired_dropped, 1u);
  EXPECT_GT(store->stats().defrag_blocks, 0u);
  EXPECT_EQ(store->stats().index_tombstones, 1u);
  store = Reopen(std::move(store));
  {
    auto w = WorkerOrDie(store.get());
    EXPECT_TRUE(w->GetSync("k").status().IsNotFound());
  }
  RotateEverything(store.get());
  ASSERT_TRUE(store->DefragNow(false).ok());
  store = Reopen(std::move(store));
  auto w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("k").status().IsNotFound());
  EXPECT_EQ(store->stats().index_tombstones, 0u);
}

TEST_F(DefragTest, ReclaimingNewerVersionsFirstBringsNothingOlderBack) {
  auto store = OpenOrDie(opts_);
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("k", "v1").ok());  // block A, kept full by fillers
    Fill(w.get(), 0, 40, 1);
    ASSERT_TRUE(w->PutSync("k", "v2").ok());  // block B: emptied and reclaimed
    Fill(w.get(), 40, 40, 1);
    ASSERT_TRUE(w->PutSync("k", "v3").ok());  // block C: moved by defragmentation
    Fill(w.get(), 80, 40, 1);
    Fill(w.get(), 40, 80, 2);  // empties B and C
  }
  ASSERT_TRUE(store->DefragNow(false).ok());
  EXPECT_GT(store->stats().defrag_records_moved, 0u);
  store = Reopen(std::move(store));
  auto w = WorkerOrDie(store.get());
  EXPECT_EQ(w->GetSync("k")->body(), "v3");
  // And the same once the latest version is a delete.
  ASSERT_TRUE(w->DeleteSync("k").ok());
  Fill(w.get(), 40, 80, 3);
  ASSERT_TRUE(w->FlushSync().ok());
  ASSERT_TRUE(store->DefragNow(false).ok());
  w.reset();
  store = Reopen(std::move(store));
  w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("k").status().IsNotFound());
}

TEST_F(DefragTest, RandomWorkloadMatchesModelAndReclaimsBlocks) {
  // 48 blocks of 64 KiB (3 MiB): the load writes ~25 MiB, so without
  // reclamation the device would fill eight times over.
  opts_.file_size = 48 * opts_.write_block_size;
  opts_.background_defrag = true;
  opts_.defrag_interval = std::chrono::milliseconds(2);
  opts_.defrag_blocks_per_second = 5000;
  constexpr int kKeys = 150;
  std::map<std::string, std::optional<std::string>> model;
  std::mt19937 rng(42);
  auto store = OpenOrDie(opts_);
  uint64_t waits = 0;
  {
    auto w = WorkerOrDie(store.get());
    // The background thread reclaims blocks as the writer fills them, but on
    // a busy machine the writer may get ahead of it and find every block
    // full. DeviceFull writes nothing; such a write waits for the background
    // thread to free a block (30 s at most: a hang guard) and is tried again.
    auto write = [&](auto op) {
      Result<WriteOutcome> r = op();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (r.status().code() == Status::Code::kDeviceFull &&
             std::chrono::steady_clock::now() < deadline) {
        ++waits;
        while (store->stats().blocks_free == 0 && std::chrono::steady_clock::now() < deadline) {
          w->Wait(std::chrono::milliseconds(1));
        }
        r = op();
      }
      return r;
    };
    for (int op = 0; op < 12000; ++op) {
      std::string key = Key(static_cast<int>(rng() % kKeys));
      if (rng() % 10 == 0) {
        auto r = write([&] { return w->DeleteSync(key); });
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        model[key] = std::nullopt;
      } else {
        std::string body = Body(op, op, 200 + rng() % 3800);
        auto r = write([&] { return w->PutSync(key, body); });
        ASSERT_TRUE(r.ok()) << "op " << op << ": " << r.status().ToString();
        model[key] = body;
      }
      if (op % 997 == 0) {
        for (auto& [k, v] : model) {
          auto got = w->GetSync(k);
          if (v) {
            ASSERT_TRUE(got.ok()) << k << " " << got.status().ToString();
            ASSERT_EQ(got->body(), *v);
          } else {
            ASSERT_TRUE(got.status().IsNotFound()) << k;
          }
        }
      }
    }
  }
  StoreStats st = store->stats();
  RecordProperty("writes_that_waited_for_a_free_block", static_cast<int>(waits));
  EXPECT_GT(st.defrag_blocks, 50u);
  EXPECT_GT(st.defrag_records_moved, 0u);
  EXPECT_EQ(st.corruptions, 0u);
  for (int round = 0; round < 2; ++round) {
    store = Reopen(std::move(store));
    auto w = WorkerOrDie(store.get());
    for (auto& [k, v] : model) {
      auto got = w->GetSync(k);
      if (v) {
        ASSERT_TRUE(got.ok()) << k << " " << got.status().ToString();
        EXPECT_EQ(got->body(), *v);
      } else {
        EXPECT_TRUE(got.status().IsNotFound()) << k;
      }
    }
  }
}

TEST_F(DefragTest, OldOpenBlockOfAnIdleWorkerIsSealedForRotation) {
  opts_.durability = Durability::kBuffered;
  auto store = OpenOrDie(opts_);
  auto idle = WorkerOrDie(store.get());
  ASSERT_TRUE(idle->PutSync("idle", "x").ok());  // its open block is now the oldest
  ASSERT_TRUE(idle->FlushSync().ok());
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("gone", "y").ok());
    ASSERT_TRUE(w->DeleteSync("gone").ok());
  }
  uint64_t before = store->stats().watermark;
  ASSERT_TRUE(store->DefragNow(true).ok());
  idle->Poll();  // the idle worker's event loop wakes and seals its block
  ASSERT_TRUE(idle->FlushSync().ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store->DefragNow(true).ok());
  EXPECT_GT(store->stats().watermark, before);
  EXPECT_EQ(idle->GetSync("idle")->body(), "x");
}

// The index sweep turns expired records into tombstones bounded by the
// current sequence; a record written while a sweep is under way must not get
// a bound below its version, or its tombstone goes too early.
TEST_F(DefragTest, ExpiredRecordWrittenDuringASweepStaysGone) {
  auto device = FaultDevice::Create(32 * 64 * 1024, 5);
  auto store = OpenOrDie(opts_, device);
  auto* impl = static_cast<StoreImpl*>(store.get());
  auto partition = [&](const std::string& k) { return Index::PartitionOf(k); };
  const std::string k = "victim";
  ASSERT_NE(partition(k), 0u);
  std::vector<std::string> fillers;
  for (int i = 0; fillers.size() < 40; ++i) {
    if (partition(Key(i)) != 0) fillers.push_back(Key(i));
  }
  std::thread defrag;
  {
    Index::Locked hold = impl->index().Lock(0);  // the sweep waits here
    defrag = std::thread([&] { EXPECT_TRUE(store->DefragNow(false).ok()); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    impl->NextSeq();  // writes elsewhere go on meanwhile
    auto w1 = WorkerOrDie(store.get());
    ASSERT_TRUE(w1->PutSync(k, "old").ok());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(w1->PutSync(fillers[i], Body(i, 1, 4000)).ok());
    auto w2 = WorkerOrDie(store.get());
    ASSERT_TRUE(w2->PutSync(k, "expired", 0, clock_.Now()).ok());  // dead from now on
    for (int i = 10; i < 20; ++i) ASSERT_TRUE(w2->PutSync(fillers[i], Body(i, 1, 4000)).ok());
  }
  defrag.join();
  {
    auto w = WorkerOrDie(store.get());
    EXPECT_TRUE(w->GetSync(k).status().IsNotFound());
    for (int i = 10; i < 20; ++i) ASSERT_TRUE(w->PutSync(fillers[i], Body(i, 2, 4000)).ok());
  }
  ASSERT_TRUE(store->DefragNow(false).ok());  // empties the block of "expired"
  store.reset();
  store = OpenOrDie(opts_, device->Reboot());
  auto w = WorkerOrDie(store.get());
  auto got = w->GetSync(k);
  EXPECT_TRUE(got.status().IsNotFound())
      << "an older version came back: " << (got.ok() ? std::string(got->body()) : "");
}

// Live bytes per block always equal what the index says is there.
TEST_F(DefragTest, LiveBytesMatchTheIndexWhenAnEntryExpiresMidUpdate) {
  auto store = OpenOrDie(opts_);
  auto* impl = static_cast<StoreImpl*>(store.get());
  auto w = WorkerOrDie(store.get());
  const UnixSeconds t0 = clock_.Now();
  ASSERT_TRUE(w->PutSync("k", std::string(3000, 'x'), 0, t0 + 10).ok());
  bool first = true;
  auto r = w->UpdateSync("k", [&](const Record* cur) -> Result<Mutation> {
    if (first) {
      first = false;
      clock_.Set(t0 + 10);                        // void_at passes while deciding
      EXPECT_TRUE(store->DefragNow(false).ok());  // and the sweep turns it into a tombstone
    }
    return Mutation::Put(cur ? "read alive" : "read absent");
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::map<uint32_t, int64_t> indexed;
  for (uint32_t p = 0; p < Index::kPartitions; ++p) {
    Index::Locked t = impl->index().Lock(p);
    t->Sweep([&](IndexEntry& e) {
      indexed[impl->BlockOf(e.offset())] += AccountedBytes(e);
      return true;
    });
  }
  for (uint32_t b = 1; b < impl->blocks().block_count(); ++b) {
    EXPECT_EQ(impl->blocks().live_bytes(b), indexed[b]) << "block " << b;
  }
}

}  // namespace
}  // namespace segstore::storage
