// Crash safety: a child killed with SIGKILL mid-load, power loss on the fault
// device (with and without defragmentation running), torn and damaged blocks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>
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

// What a key may read as after a crash: its newest acknowledged state, or
// the state of any write that was issued but not acknowledged.
struct KeyModel {
  std::optional<std::string> acked;  // nullopt: absent (never written, or deleted)
  uint64_t acked_version = 0;
  std::set<std::optional<std::string>> unacked;
  // Every value acknowledged, with its version: one older than `acked` must
  // not come back (a newer write of the key was acknowledged after it).
  std::map<std::string, uint64_t> acked_values;
  int deletes_issued = 0;
  int deletes_acked = 0;

  bool Allows(const std::optional<std::string>& now) const {
    if (now == acked) return true;
    if (unacked.count(now) == 0) return false;
    // Absent: only through a delete never acknowledged (it may be the newest).
    if (!now) return deletes_issued > deletes_acked;
    auto it = acked_values.find(*now);
    return it == acked_values.end() || it->second >= acked_version;
  }
};

class PowerLossTest : public ::testing::TestWithParam<int> {
 protected:
  ManualClock clock_{1'700'000'000};
};

// Runs a random commit-mode load on a fault device, cuts the power at a
// random moment, and checks what a restart finds against the model.
void RunPowerLoss(uint64_t seed, bool background_defrag, ManualClock* clock) {
  constexpr int kKeys = 60;
  auto device = FaultDevice::Create(96 * 64 * 1024, seed);
  StoreOptions opts = SmallOptions("fault", clock);
  opts.background_defrag = background_defrag;
  opts.defrag_interval = std::chrono::milliseconds(1);
  opts.defrag_blocks_per_second = 100000;
  opts.rotate_blocks_per_second = 100000;
  std::mt19937_64 rng(seed);
  std::map<std::string, KeyModel> model;
  {
    auto store = OpenOrDie(opts, device);
    ASSERT_NE(store, nullptr);
    auto w = WorkerOrDie(store.get());
    std::atomic<bool> cut{false};
    std::thread cutter;
    int waves = 20 + static_cast<int>(rng() % 40);
    if (background_defrag) {
      // Cut from another thread at a random moment, defragmentation included.
      auto delay = std::chrono::microseconds(2000 + rng() % 60000);
      cutter = std::thread([&, delay] {
        std::this_thread::sleep_for(delay);
        device->PowerLoss();
        cut = true;
      });
      waves = 1000000;
    }
    int op = 0;
    for (int wave = 0; wave < waves && !cut; ++wave) {
      int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i, ++op) {
        std::string key = Key(static_cast<int>(rng() % kKeys));
        bool del = rng() % 7 == 0;
        std::optional<std::string> value;
        if (!del) value = Body(op, op, 200 + rng() % 3000);
        model[key].unacked.insert(value);
        if (del) ++model[key].deletes_issued;
        auto on_done = [&model, key, value](Result<WriteOutcome> r) {
          if (!r.ok()) return;  // not acknowledged: stays among the unacked
          KeyModel& m = model[key];
          if (value && r->applied == Mutation::Kind::kPut) m.acked_values[*value] = r->version;
          if (!value) ++m.deletes_acked;
          if (r->version > m.acked_version) {
            m.acked_version = r->version;
            m.acked = r->applied == Mutation::Kind::kPut ? value : std::nullopt;
          }
        };
        if (del) {
          w->Delete(key, on_done);
        } else {
          w->Put(key, *value, 0, 0, on_done);
        }
      }
      // Let a random share of the I/O complete.
      int polls = static_cast<int>(rng() % 4);
      for (int p = 0; p < polls; ++p) w->Wait(std::chrono::milliseconds(1));
      if (!background_defrag && rng() % 5 == 0) {
        while (w->pending() > 0) w->Wait(std::chrono::milliseconds(1));
        ASSERT_TRUE(store->DefragNow(rng() % 2 == 0).ok());
      }
    }
    if (!background_defrag) device->PowerLoss();
    if (cutter.joinable()) cutter.join();
    // The store sees every later I/O fail; closing it must not hang.
  }
  auto rebooted = device->Reboot();
  opts.background_defrag = false;
  auto store = OpenOrDie(opts, rebooted);
  ASSERT_NE(store, nullptr);
  auto w = WorkerOrDie(store.get());
  for (auto& [key, m] : model) {
    auto got = w->GetSync(key);
    ASSERT_TRUE(got.ok() || got.status().IsNotFound()) << key << ": " << got.status().ToString();
    std::optional<std::string> now;
    if (got.ok()) now = std::string(got->body());
    bool allowed = m.Allows(now);
    EXPECT_TRUE(allowed) << "seed " << seed << " key " << key << " reads "
                         << (now ? now->substr(0, 20) : "<absent>") << ", acknowledged "
                         << (m.acked ? m.acked->substr(0, 20) : "<absent>");
  }
  EXPECT_EQ(store->stats().corruptions, 0u);
}

TEST_P(PowerLossTest, EveryAcknowledgedCommitWriteSurvives) {
  for (int i = 0; i < 10; ++i) RunPowerLoss(GetParam() * 100 + i, false, &clock_);
}

TEST_P(PowerLossTest, EveryAcknowledgedCommitWriteSurvivesDefragmentation) {
  for (int i = 0; i < 4; ++i) RunPowerLoss(GetParam() * 100 + 50 + i, true, &clock_);
}

INSTANTIATE_TEST_SUITE_P(Seeds, PowerLossTest, ::testing::Range(0, 4));

// The child's deterministic load: op i writes Key(i % 97), or deletes it
// every 13th op.
std::optional<std::string> StateAfter(int key, int ops) {
  std::optional<std::string> state;
  for (int i = key; i < ops; i += 97) {
    state = i % 13 == 0 ? std::nullopt : std::optional<std::string>(Body(key, i, 100 + i % 900));
  }
  return state;
}

TEST(CrashTest, SigkillMidLoadLosesNoAcknowledgedWrite) {
  TempDir dir;
  ManualClock clock(1'700'000'000);
  StoreOptions opts = SmallOptions(dir.File("data"), &clock);
  opts.file_size = 64u << 20;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto store = Store::Open(opts);
    if (!store.ok()) ::_exit(2);
    auto w = (*store)->NewWorker();
    if (!w.ok()) ::_exit(3);
    for (int i = 0;; ++i) {
      std::string key = Key(i % 97);
      auto r =
          i % 13 == 0 ? (*w)->DeleteSync(key) : (*w)->PutSync(key, Body(i % 97, i, 100 + i % 900));
      if (!r.ok()) ::_exit(4);
      // Acknowledged: tell the parent.
      if (::write(fds[1], &i, sizeof i) != sizeof i) ::_exit(5);
    }
  }
  ::close(fds[1]);
  // Kill once the child has acknowledged enough to test something, plus a
  // little more: a count, not a time window, so a slow machine (or a
  // sanitizer build) only takes longer.
  int last = -1;
  int value;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (last < 400 && std::chrono::steady_clock::now() < deadline &&
         ::read(fds[0], &value, sizeof value) == sizeof value) {
    last = value;
  }
  const auto more = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < more &&
         ::read(fds[0], &value, sizeof value) == sizeof value) {
    last = value;
  }
  ::kill(pid, SIGKILL);
  while (::read(fds[0], &value, sizeof value) == sizeof value) last = value;
  int status;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited on its own with " << WEXITSTATUS(status);
  ASSERT_GT(last, 200) << "the child acknowledged too little to test anything";

  auto store = OpenOrDie(opts);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovery().damaged_regions, 0u);
  auto w = WorkerOrDie(store.get());
  int acked_ops = last + 1;
  for (int k = 0; k < 97; ++k) {
    auto got = w->GetSync(Key(k));
    ASSERT_TRUE(got.ok() || got.status().IsNotFound()) << got.status().ToString();
    std::optional<std::string> now;
    if (got.ok()) now = std::string(got->body());
    // The op after the last acknowledged one may or may not have landed.
    bool ok = now == StateAfter(k, acked_ops) || now == StateAfter(k, acked_ops + 1);
    EXPECT_TRUE(ok) << "key " << k << " after " << acked_ops << " acknowledged ops";
  }
  EXPECT_EQ(store->stats().corruptions, 0u);
}

TEST(RecoveryTest, TornLastFlushIsIgnoredAndEarlierRecordsKept) {
  ManualClock clock(1'700'000'000);
  auto device = FaultDevice::Create(32 * 64 * 1024, 7);
  StoreOptions opts = SmallOptions("fault", &clock);
  {
    auto store = OpenOrDie(opts, device);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 6000)).ok());
    // A multi-sector write in flight when the power goes.
    bool done = false;
    w->Put(Key(99), Body(99, 1, 20000), 0, 0, [&](Result<WriteOutcome>) { done = true; });
    w->Poll();  // submitted, not completed
    device->PowerLoss();
    while (!done) w->Wait(std::chrono::milliseconds(1));
  }
  auto store = OpenOrDie(opts, device->Reboot());
  auto w = WorkerOrDie(store.get());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(w->GetSync(Key(i))->body(), Body(i, 1, 6000));
  auto torn = w->GetSync(Key(99));
  if (torn.ok()) {
    EXPECT_EQ(torn->body(), Body(99, 1, 20000));  // whole, or not at all
  } else {
    EXPECT_TRUE(torn.status().IsNotFound()) << torn.status().ToString();
  }
  EXPECT_EQ(store->stats().corruptions, 0u);
}

// Recovery files each key under its routing partition (PROTOCOL.md,
// "Partitions"), as a write does, whatever the digest: hash-tagged keys share
// a partition, and every key is still found after a restart.
TEST(RecoveryTest, KeysComeBackInTheirRoutingPartitions) {
  ManualClock clock(1'700'000'000);
  auto device = FaultDevice::Create(32 * 64 * 1024, 7);
  StoreOptions opts = SmallOptions("fault", &clock);
  std::vector<std::string> keys = {"foo", "bar", "{user1000}.following", "{user1000}.followers"};
  for (int i = 0; i < 40; ++i) keys.push_back(Key(i));
  {
    auto store = OpenOrDie(opts, device);
    auto w = WorkerOrDie(store.get());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(w->PutSync(keys[i], Body(static_cast<int>(i), 1, 100)).ok());
    }
  }
  auto store = OpenOrDie(opts, device->Reboot());
  auto* impl = static_cast<StoreImpl*>(store.get());
  auto entries_in = [&](uint32_t partition, const std::string& key) {
    int n = 0;
    impl->index().Lock(partition)->ForEachWithTag(Index::TagOf(impl->DigestOf(key)),
                                                  [&](const IndexEntry&) { ++n; });
    return n;
  };
  for (const std::string& k : keys) {
    const uint32_t p = Index::PartitionOf(k);
    EXPECT_EQ(entries_in(p, k), 1) << k;
    EXPECT_EQ(entries_in((p + 1) % Index::kPartitions, k), 0) << k;
  }
  EXPECT_EQ(Index::PartitionOf("foo"), 3045u);
  const auto in_860 = std::count_if(
      keys.begin(), keys.end(), [](const std::string& k) { return Index::PartitionOf(k) == 860; });
  EXPECT_GE(in_860, 2);  // the two {user1000} keys
  EXPECT_EQ(impl->index().Lock(860)->size(), static_cast<uint32_t>(in_860));
  auto w = WorkerOrDie(store.get());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(w->GetSync(keys[i])->body(), Body(static_cast<int>(i), 1, 100)) << keys[i];
  }
}

TEST(RecoveryTest, DamagedBlockHeaderLosesOnlyThatBlock) {
  ManualClock clock(1'700'000'000);
  auto device = FaultDevice::Create(32 * 64 * 1024, 9);
  StoreOptions opts = SmallOptions("fault", &clock);
  {
    auto store = OpenOrDie(opts, device);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 5000)).ok());
  }
  // Block 1 holds the first records; damage its header.
  device->XorByte(64 * 1024 + 20, 0xff);
  auto store = OpenOrDie(opts, device->Reboot());
  auto w = WorkerOrDie(store.get());
  int found = 0;
  for (int i = 0; i < 40; ++i) {
    auto got = w->GetSync(Key(i));
    if (got.ok()) {
      EXPECT_EQ(got->body(), Body(i, 1, 5000));
      ++found;
    } else {
      EXPECT_TRUE(got.status().IsNotFound()) << got.status().ToString();
    }
  }
  EXPECT_GT(found, 0);
  EXPECT_LT(found, 40);
}

TEST(RecoveryTest, DeviceErrorsSurfaceAndWritesAreRefusedAfterwards) {
  ManualClock clock(1'700'000'000);
  auto device = FaultDevice::Create(32 * 64 * 1024, 11);
  StoreOptions opts = SmallOptions("fault", &clock);
  auto store = OpenOrDie(opts, device);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("before", "ok").ok());
  device->FailWritesAfter(0);
  auto failed = w->PutSync("k", "v");
  EXPECT_EQ(failed.status().code(), Status::Code::kIOError) << failed.status().ToString();
  auto refused = w->PutSync("k2", "v");
  EXPECT_EQ(refused.status().code(), Status::Code::kUnavailable) << refused.status().ToString();
  // Reads go on.
  EXPECT_EQ(w->GetSync("before")->body(), "ok");
  device->FailReadsAfter(0);
  auto broken = w->GetSync("before");
  // Served from the device now that its block is no longer in memory? Either
  // from memory (ok) or an IOError: never garbage.
  EXPECT_TRUE(broken.ok() || broken.status().code() == Status::Code::kIOError)
      << broken.status().ToString();
}

// Flushes of one block overlap. A later flush that lands first acknowledges
// nothing until every earlier one has landed; when an earlier one fails,
// nothing after it is acknowledged, and the block's records stay readable
// from memory, also once the block is sealed.
TEST(RecoveryTest, ALaterFlushAcknowledgesNothingBeforeAnEarlierOneLands) {
  for (bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "the earlier flush fails" : "the earlier flush lands late");
    ManualClock clock(1'700'000'000);
    auto device = FaultDevice::Create(32 * 64 * 1024, 12);
    auto store = OpenOrDie(SmallOptions("fault", &clock), device);
    auto w = WorkerOrDie(store.get());
    // Whatever happens below, the worker's destructor must not wait forever
    // for a held write.
    struct Unhold {
      FaultDevice* device;
      ~Unhold() { device->ReleaseHeld(true); }
    } unhold{device.get()};
    ASSERT_TRUE(w->PutSync("before", "ok").ok());  // the block's header is on the device
    std::optional<Result<WriteOutcome>> a, b;
    device->HoldNextWrites(1);
    w->Put("a", "va", 0, 0, [&a](Result<WriteOutcome> r) { a = std::move(r); });
    for (int i = 0; i < 5; ++i) w->Poll();  // a's flush is issued, and held
    const uint64_t landed = device->writes_completed();
    w->Put("b", "vb", 0, 0, [&b](Result<WriteOutcome> r) { b = std::move(r); });
    for (int i = 0; i < 20 && device->writes_completed() == landed; ++i) w->Poll();
    ASSERT_GT(device->writes_completed(), landed) << "b's flush did not land";
    for (int i = 0; i < 5; ++i) w->Poll();
    EXPECT_FALSE(a.has_value());
    EXPECT_FALSE(b.has_value()) << "b was acknowledged before the flush ahead of it landed";

    device->ReleaseHeld(fail);
    for (int i = 0; i < 100 && (!a || !b); ++i) w->Wait(std::chrono::milliseconds(5));
    ASSERT_TRUE(a.has_value() && b.has_value());
    if (!fail) {
      EXPECT_TRUE(a->ok()) << a->status().ToString();
      EXPECT_TRUE(b->ok()) << b->status().ToString();
      continue;
    }
    EXPECT_EQ(a->status().code(), Status::Code::kIOError) << a->status().ToString();
    EXPECT_EQ(b->status().code(), Status::Code::kIOError) << b->status().ToString();
    (void)store->DefragNow(/*rotate=*/true);  // seals the block that failed
    for (int i = 0; i < 5; ++i) w->Poll();
    for (const auto& [key, value] : {std::pair{"a", "va"}, {"b", "vb"}, {"before", "ok"}}) {
      auto got = w->GetSync(key);
      ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
      EXPECT_EQ(got->body(), value);
    }
    EXPECT_EQ(store->stats().corruptions, 0u);
  }
}

bool AllZero(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == 0; });
}

// A restart resumes the sequence after the highest value still on the device,
// so values can be handed out twice; the per-incarnation salt keeps records of
// an earlier incarnation of a block from validating in the next one.
TEST(RecoveryTest, RecordsOfALostIncarnationNeverComeBack) {
  ManualClock clock(1'700'000'000);
  constexpr uint32_t kBlock = 64 * 1024;
  int torn_cases = 0;
  for (uint64_t seed = 1; seed < 200 && torn_cases < 3; ++seed) {
    auto device = FaultDevice::Create(32 * kBlock, seed);
    StoreOptions opts = SmallOptions("fault", &clock);
    opts.durability = Durability::kBuffered;
    {
      auto store = OpenOrDie(opts, device);
      auto w = WorkerOrDie(store.get());
      for (const char* k : {"x1", "x2", "victim"}) {
        w->Put(k, Body(1, 1, 4000), 0, 0, [](Result<WriteOutcome>) {});
      }
      w->Poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      w->Poll();  // the flush timer fired: sectors 0..3 of block 1 are in flight
      device->PowerLoss();
    }
    // Wanted: the header sector lost, a later sector of the same flush kept.
    if (!AllZero(device->ReadImage(kBlock, 64)) ||
        AllZero(device->ReadImage(kBlock + 2 * 4096, 64))) {
      continue;
    }
    ++torn_cases;
    auto rebooted = device->Reboot();
    StoreOptions commit = SmallOptions("fault", &clock);
    {
      auto store = OpenOrDie(commit, rebooted);
      auto w = WorkerOrDie(store.get());
      ASSERT_TRUE(w->PutSync("victim", "new").ok());  // block 1 again, maybe the same seq
    }
    auto store = OpenOrDie(commit, rebooted->Reboot());
    auto w = WorkerOrDie(store.get());
    auto got = w->GetSync("victim");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->body(), "new") << "a record of the lost incarnation came back (seed " << seed
                                  << ")";
    EXPECT_TRUE(w->GetSync("x1").status().IsNotFound());
  }
  EXPECT_GT(torn_cases, 0) << "no seed tore the first flush as wanted";
}

TEST(RecoveryTest, EmptiedStoreRestartsWithoutResurrectingAnything) {
  ManualClock clock(1'700'000'000);
  auto device = FaultDevice::Create(32 * 64 * 1024, 11);
  StoreOptions opts = SmallOptions("fault", &clock);
  {
    auto store = OpenOrDie(opts, device);
    {
      auto w = WorkerOrDie(store.get());
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(w->PutSync(Key(i), "day one").ok());
      for (int i = 5; i < 40; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 4000)).ok());
      for (int i = 0; i < 40; ++i) ASSERT_TRUE(w->DeleteSync(Key(i)).ok());
    }
    for (int i = 0; i < 200 && store->stats().blocks_free < store->stats().blocks_total; ++i) {
      ASSERT_TRUE(store->DefragNow(true).ok());
    }
    ASSERT_EQ(store->stats().blocks_free, store->stats().blocks_total);
  }
  auto rebooted = device->Reboot();
  {
    auto store = OpenOrDie(opts, rebooted);  // the sequence starts over
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("z", "new").ok());  // block 1 again
  }
  auto store = OpenOrDie(opts, rebooted->Reboot());
  auto w = WorkerOrDie(store.get());
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(w->GetSync(Key(i)).status().IsNotFound()) << Key(i);
  EXPECT_EQ(w->GetSync("z")->body(), "new");
}

}  // namespace
}  // namespace segstore::storage

namespace segstore::storage {
namespace {

// Recovery reads every write block in use, but through a fixed few buffers:
// a fresh buffer for each block once left the heap grown by a block per block
// read (650 MB resident after recovering 2.8 GB).
TEST(RecoveryTest, ReadsAnyNumberOfBlocksThroughAFewBuffers) {
  ManualClock clock(1'700'000'000);
  TempDir dir;
  StoreOptions opts = SmallOptions(dir.File("data"), &clock);
  {
    auto store = OpenOrDie(opts);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 600; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 4000)).ok());
  }
  auto store = OpenOrDie(opts);
  const RecoveryStats& r = store->recovery();
  const uint64_t block_size = store->stats().block_size;
  ASSERT_GE(r.blocks_in_use, 30u);
  EXPECT_EQ(r.live_records, 600u);
  // Four whole blocks in flight, and 64 first sectors while finding them.
  EXPECT_LE(r.read_buffer_bytes, 4 * block_size + 64 * 4096) << r.blocks_in_use << " blocks";
}

}  // namespace
}  // namespace segstore::storage
