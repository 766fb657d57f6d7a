#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "storage/format.h"
#include "storage/index.h"
#include "storage/test_util.h"

namespace segstore::storage {
namespace {

using testing::Body;
using testing::Key;
using testing::OpenOrDie;
using testing::SmallOptions;
using testing::TempDir;
using testing::WorkerOrDie;

class StoreTest : public ::testing::Test {
 protected:
  TempDir dir_;
  ManualClock clock_{1'700'000'000};
  StoreOptions opts_ = SmallOptions(dir_.File("data"), &clock_);
};

// The places of up to 10 records whose sweep_at has passed, from one scan.
std::vector<RecordRef> DueNow(Store* store, UnixSeconds now) {
  std::vector<RecordRef> due;
  uint32_t cursor = 0;
  store->FindDue(now, 10, &cursor, &due);
  return due;
}

TEST_F(StoreTest, PutGetOverwriteDelete) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("alice").status().IsNotFound());

  auto put = w->PutSync("alice", "one");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->generation, 1u);
  auto got = w->GetSync("alice");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->body(), "one");
  EXPECT_EQ(got->key(), "alice");
  EXPECT_EQ(got->generation(), 1u);
  EXPECT_EQ(got->last_update(), clock_.Now());

  ASSERT_TRUE(w->PutSync("alice", "two").ok());
  got = w->GetSync("alice");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->body(), "two");
  EXPECT_EQ(got->generation(), 2u);

  auto del = w->DeleteSync("alice");
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->applied, Mutation::Kind::kDelete);
  EXPECT_TRUE(w->GetSync("alice").status().IsNotFound());
  // Deleting what is not there writes nothing.
  del = w->DeleteSync("alice");
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->applied, Mutation::Kind::kKeep);
}

TEST_F(StoreTest, RestartAfterCleanClose) {
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 500; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
    for (int i = 0; i < 500; i += 2) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 2)).ok());
    for (int i = 0; i < 500; i += 5) ASSERT_TRUE(w->DeleteSync(Key(i)).ok());
  }
  auto store = OpenOrDie(opts_);
  EXPECT_EQ(store->recovery().live_records, 400u);
  auto w = WorkerOrDie(store.get());
  for (int i = 0; i < 500; ++i) {
    auto got = w->GetSync(Key(i));
    if (i % 5 == 0) {
      EXPECT_TRUE(got.status().IsNotFound()) << i;
    } else {
      ASSERT_TRUE(got.ok()) << i << " " << got.status().ToString();
      EXPECT_EQ(got->body(), Body(i, i % 2 == 0 ? 2 : 1));
    }
  }
}

TEST_F(StoreTest, BadKeysAreRefusedBeforeAnythingIsWritten) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  std::string long_key(opts_.max_key_size + 1, 'k');
  auto put = w->PutSync(long_key, "x");
  EXPECT_EQ(put.status().code(), Status::Code::kInvalidArgument) << put.status().ToString();
  EXPECT_EQ(w->PutSync("", "x").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(w->GetSync(long_key).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(w->DeleteSync("").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store->stats().writes, 0u);
  // The longest allowed key works.
  std::string max_key(opts_.max_key_size, 'k');
  ASSERT_TRUE(w->PutSync(max_key, "x").ok());
  EXPECT_EQ(w->GetSync(max_key)->body(), "x");
}

TEST_F(StoreTest, OversizedBodyIsRefusedAndTheLargestFits) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("k", "old").ok());
  uint32_t max = store->max_body_size();
  EXPECT_EQ(max, opts_.write_block_size - 4096);
  auto put = w->PutSync("k", std::string(max + 1, 'b'));
  EXPECT_EQ(put.status().code(), Status::Code::kInvalidArgument) << put.status().ToString();
  EXPECT_EQ(w->GetSync("k")->body(), "old");  // untouched
  ASSERT_TRUE(w->PutSync("k", std::string(max, 'b')).ok());
  EXPECT_EQ(w->GetSync("k")->body().size(), max);
}

TEST_F(StoreTest, UnflushedRecordIsReadFromMemory) {
  opts_.durability = Durability::kBuffered;
  opts_.flush_interval = std::chrono::seconds(30);
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("k", "in memory").ok());
  auto got = w->GetSync("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->body(), "in memory");
  StoreStats st = store->stats();
  EXPECT_EQ(st.memory_reads, 1u);
  EXPECT_EQ(st.device_reads, 0u);
  EXPECT_EQ(st.flushes, 0u);
}

// Every operation that can end without waiting for the device (a record in
// memory, no record at all, an update that keeps, a buffered write, a place
// with nothing valid) still calls back only after the call that started it
// has returned: callers may start operations from inside a loop or a callback.
TEST_F(StoreTest, CallbacksNeverRunInsideTheCallThatStartedThem) {
  opts_.durability = Durability::kBuffered;
  opts_.flush_interval = std::chrono::seconds(30);
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("k", "in memory", clock_.Now(), 0).ok());
  std::vector<RecordRef> due = DueNow(store.get(), clock_.Now());
  ASSERT_EQ(due.size(), 1u);
  RecordRef nowhere = due[0];
  nowhere.block_salt ^= 1;
  auto keep = [](const Record*) -> Result<Mutation> { return Mutation::Keep(); };
  auto append = [](const Record* cur) -> Result<Mutation> {
    return Mutation::Put(std::string(cur ? cur->body() : "") + "+");
  };
  auto refuse = [](const Record*) -> Result<Mutation> { return Status::Conflict("no"); };

  int ran = 0;
  int expected = 0;
  auto start = [&](const char* what, auto call) {
    SCOPED_TRACE(what);
    const int before = ran;
    call();
    EXPECT_EQ(ran, before) << what << ": called back inside the call";
    ++expected;
  };
  auto got = [&ran](Result<Record>) { ++ran; };
  auto wrote = [&ran](Result<WriteOutcome>) { ++ran; };
  start("get from memory", [&] { w->Get("k", got); });
  start("get of an absent key", [&] { w->Get("absent", got); });
  start("get of a bad key", [&] { w->Get("", got); });
  start("update that keeps", [&] { w->Update("k", keep, wrote); });
  start("update refused by its function", [&] { w->Update("k", refuse, wrote); });
  start("buffered put", [&] { w->Put("k2", "v", 0, 0, wrote); });
  start("delete of an absent key", [&] { w->Delete("absent", wrote); });
  start("get at a place in memory", [&] { w->GetAt(due[0], got); });
  start("get at a place with nothing valid", [&] { w->GetAt(nowhere, got); });
  start("update at a place in memory", [&] { w->UpdateAt(due[0], append, wrote); });
  start("update at a place with nothing valid", [&] { w->UpdateAt(nowhere, append, wrote); });
  for (int i = 0; i < 1000 && ran < expected; ++i) w->Wait(std::chrono::milliseconds(10));
  EXPECT_EQ(ran, expected);
  EXPECT_EQ(w->GetSync("k")->body(), "in memory+");
}

// The DRAM of write block images is counted while a worker writes; as each
// sealed block finishes its image is kept as the worker's one spare or
// unmapped; a spare unused for the bound given is unmapped; everything is
// counted out when the worker goes. Buffered writes seal blocks while their
// flushes are still out, as a busy server does.
TEST_F(StoreTest, WriteBlockImagesAreCountedInAndOut) {
  opts_.durability = Durability::kBuffered;
  auto store = OpenOrDie(opts_);
  EXPECT_EQ(store->stats().block_image_bytes, 0u);
  {
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 60; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 4000)).ok());
    const StoreStats s = store->stats();
    ASSERT_GE(s.blocks_total - s.blocks_free, 3u) << "the puts must fill and seal blocks";
    EXPECT_GE(s.block_image_bytes, s.block_size);
    // The open block and at most four flushing.
    EXPECT_LE(s.block_image_bytes, 5u * s.block_size);
    // Once every flush is done, the open block's image is left, and at most
    // one finished image kept as the worker's spare. (With io_uring a sealed
    // block's flush completes after the next block opened, so the spare is
    // there; where a flush completes inside the seal, as with the pread/pwrite
    // backend, the next block reuses that image at once and none is left.)
    ASSERT_TRUE(w->FlushSync().ok());
    const uint64_t settled = store->stats().block_image_bytes;
    EXPECT_GE(settled, s.block_size);
    EXPECT_LE(settled, 2u * s.block_size);
    // A spare in use within the bound stays; one past it is unmapped.
    EXPECT_EQ(store->ReleaseSpareImages(std::chrono::hours(1)), 0u);
    EXPECT_EQ(store->stats().block_image_bytes, settled);
    EXPECT_EQ(store->ReleaseSpareImages(std::chrono::seconds(0)), settled - s.block_size);
    EXPECT_EQ(store->stats().block_image_bytes, s.block_size);
    EXPECT_EQ(store->ReleaseSpareImages(std::chrono::seconds(0)), 0u);
    // Without a spare the next block maps a new image, and writes go on.
    for (int i = 60; i < 90; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 4000)).ok());
    ASSERT_TRUE(w->FlushSync().ok());
    EXPECT_GE(store->stats().block_image_bytes, s.block_size);
    EXPECT_LE(store->stats().block_image_bytes, 2u * s.block_size);
  }
  EXPECT_EQ(store->stats().block_image_bytes, 0u);
}

// A block filled from the spare image starts zeroed: the bytes a flush writes
// past the last record are zeros, not the records of the block the image
// held before (stale copies of old versions on the device), and a restart
// finds exactly what was written.
TEST_F(StoreTest, BlocksFilledFromTheSpareImageStartZeroed) {
  opts_.durability = Durability::kBuffered;
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    // Large records fill and seal blocks: their images become the spare.
    for (int i = 0; i < 60; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 4000)).ok());
    ASSERT_TRUE(w->FlushSync().ok());
    // Small records, flushed every few: each flush writes a partial sector of
    // a block whose image held large records before.
    for (int i = 60; i < 400; ++i) {
      ASSERT_TRUE(w->PutSync(Key(i), Body(i, 2, 100)).ok());
      if (i % 7 == 0) {
        ASSERT_TRUE(w->FlushSync().ok());
      }
    }
  }
  // Each large body is on the device once: in its own block, not again in
  // the tail of a flush from the reused image.
  const std::string file = testing::FileBytes(opts_.path);
  for (int i = 0; i < 60; ++i) {
    const std::string body = Body(i, 1, 4000);
    for (size_t at = 0; at + 64 <= body.size(); at += 512) {
      const std::string chunk = body.substr(at, 64);
      size_t copies = 0;
      for (size_t p = file.find(chunk); p != std::string::npos; p = file.find(chunk, p + 1)) {
        ++copies;
      }
      ASSERT_EQ(copies, 1u) << "record " << i << " at " << at;
    }
  }
  auto store = OpenOrDie(opts_);
  EXPECT_EQ(store->recovery().damaged_regions, 0u);
  EXPECT_EQ(store->recovery().live_records, 400u);
  auto w = WorkerOrDie(store.get());
  for (int i = 0; i < 400; ++i) {
    auto got = w->GetSync(Key(i));
    ASSERT_TRUE(got.ok()) << i << " " << got.status().ToString();
    EXPECT_EQ(got->body(), i < 60 ? Body(i, 1, 4000) : Body(i, 2, 100)) << i;
  }
}

TEST_F(StoreTest, BufferedWriteReachesTheDeviceWithinTheInterval) {
  opts_.durability = Durability::kBuffered;
  opts_.flush_interval = std::chrono::milliseconds(5);
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("k", "v").ok());  // acknowledged at once
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store->stats().flushes == 0 && std::chrono::steady_clock::now() < deadline) {
    w->Wait(std::chrono::milliseconds(5));
  }
  EXPECT_GE(store->stats().flushes, 1u);
}

TEST_F(StoreTest, CommitWritesShareFlushes) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  int done = 0;
  for (int i = 0; i < 64; ++i) {
    w->Put(Key(i), Body(i, 1), 0, 0, [&](Result<WriteOutcome> r) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      ++done;
    });
  }
  while (done < 64) w->Wait(std::chrono::milliseconds(100));
  // Group commit: far fewer flushes than writes.
  EXPECT_LT(store->stats().flushes, 16u);
}

TEST_F(StoreTest, VoidAtHidesTheRecordAndItStaysGone) {
  UnixSeconds t0 = clock_.Now();
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("short", "s", 0, t0 + 10).ok());
    ASSERT_TRUE(w->PutSync("long", "l", 0, t0 + 1000).ok());
    ASSERT_TRUE(w->PutSync("never", "n").ok());
    EXPECT_TRUE(w->GetSync("short").ok());
    clock_.Advance(10);
    EXPECT_TRUE(w->GetSync("short").status().IsNotFound());
    EXPECT_TRUE(w->GetSync("long").ok());
    // An update sees an expired record as absent, and starts a new life.
    auto up = w->UpdateSync("short", [](const Record* cur) -> Result<Mutation> {
      EXPECT_EQ(cur, nullptr);
      return Mutation::Keep();
    });
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE(store->DefragNow(false).ok());
    EXPECT_EQ(store->stats().expired_dropped, 1u);
  }
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("short").status().IsNotFound());
  EXPECT_EQ(w->GetSync("long")->body(), "l");
  EXPECT_EQ(w->GetSync("never")->body(), "n");
  clock_.Advance(1000);
  EXPECT_TRUE(w->GetSync("long").status().IsNotFound());
}

// With a void grace (a cluster node applying a log), a record past its
// void_at reads as absent at once but stays for that long: an update as of
// an earlier time still finds it alive, and only then is it dropped
// (the index sweep, defragmentation, recovery).
TEST_F(StoreTest, AVoidGraceKeepsDeadRecordsForUpdatesAsOfEarlierTimes) {
  const UnixSeconds t0 = clock_.Now();
  opts_.void_grace_seconds = 100;
  auto as_of = [](Worker* w, std::string_view key, UnixSeconds at) {
    std::optional<bool> alive;
    std::optional<Result<WriteOutcome>> out;
    w->UpdateAsOf(
        key, at,
        [&](const Record* cur) -> Result<Mutation> {
          alive = cur != nullptr;
          return Mutation::Keep();
        },
        [&](Result<WriteOutcome> r) { out.emplace(std::move(r)); });
    while (!out) w->Wait(std::chrono::milliseconds(10));
    EXPECT_TRUE(out->ok()) << out->status().ToString();
    return alive.value_or(false);
  };
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("k", "body", 0, t0 + 10).ok());
    clock_.Advance(50);                                  // 40 s past its void_at
    EXPECT_TRUE(w->GetSync("k").status().IsNotFound());  // reads: gone at once
    EXPECT_TRUE(as_of(w.get(), "k", t0 + 5));            // alive at t0 + 5
    EXPECT_FALSE(as_of(w.get(), "k", t0 + 10));          // not at its void_at
    ASSERT_TRUE(store->DefragNow(false).ok());
    EXPECT_EQ(store->stats().expired_dropped, 0u);  // within the grace: kept
  }
  {
    auto store = OpenOrDie(opts_);  // recovery keeps it too
    auto w = WorkerOrDie(store.get());
    EXPECT_TRUE(as_of(w.get(), "k", t0 + 5));
    clock_.Advance(61);  // now past void_at + grace
    ASSERT_TRUE(store->DefragNow(false).ok());
    EXPECT_EQ(store->stats().expired_dropped, 1u);
    EXPECT_FALSE(as_of(w.get(), "k", t0 + 5));  // dropped: nothing to find
  }
  // Without a grace, as before: dropped at its void_at.
  opts_.void_grace_seconds = 0;
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("j", "body", 0, clock_.Now() + 10).ok());
  clock_.Advance(11);
  ASSERT_TRUE(store->DefragNow(false).ok());
  EXPECT_EQ(store->stats().expired_dropped, 1u);
}

TEST_F(StoreTest, UpdateSeesTheCurrentVersionAndMayRefuse) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  const UnixSeconds t = clock_.Now();
  ASSERT_TRUE(w->PutSync("k", "1", t + 7, t + 9).ok());
  auto up = w->UpdateSync("k", [&](const Record* cur) -> Result<Mutation> {
    if (cur == nullptr) return Status::Internal("no current version");
    EXPECT_EQ(cur->body(), "1");
    EXPECT_EQ(cur->sweep_at(), t + 7);
    EXPECT_EQ(cur->void_at(), t + 9);
    return Mutation::Put(std::string(cur->body()) + "2");
  });
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->generation, 2u);
  EXPECT_EQ(w->GetSync("k")->body(), "12");
  uint64_t writes = store->stats().writes;
  auto refused = w->UpdateSync("k", [](const Record*) -> Result<Mutation> {
    return Status::LimitExceeded("too many segments");
  });
  EXPECT_EQ(refused.status().code(), Status::Code::kLimitExceeded);
  auto kept =
      w->UpdateSync("k", [](const Record*) -> Result<Mutation> { return Mutation::Keep(); });
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->applied, Mutation::Kind::kKeep);
  EXPECT_EQ(store->stats().writes, writes);
}

TEST_F(StoreTest, CompareAndSetOnGeneration) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("k", "a").ok());
  auto cas = [&](uint32_t expected, std::string body) {
    return w->UpdateSync("k", [=](const Record* cur) -> Result<Mutation> {
      if (cur == nullptr || cur->generation() != expected) {
        return Status::Conflict("generation moved");
      }
      return Mutation::Put(body);
    });
  };
  auto ok = cas(1, "b");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->generation, 2u);
  EXPECT_EQ(cas(1, "c").status().code(), Status::Code::kConflict);
  EXPECT_EQ(w->GetSync("k")->body(), "b");
}

TEST_F(StoreTest, DeviceFullFailsCleanlyReadsGoOnAndDeletesMakeRoom) {
  opts_.file_size = 16 * opts_.write_block_size;  // 15 usable blocks
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  std::vector<int> stored;
  Status full;
  for (int i = 0; i < 10000; ++i) {
    auto put = w->PutSync(Key(i), Body(i, 1, 8000));
    if (!put.ok()) {
      full = put.status();
      break;
    }
    stored.push_back(i);
  }
  ASSERT_EQ(full.code(), Status::Code::kDeviceFull) << full.ToString();
  EXPECT_NE(full.ToString().find("device full"), std::string::npos);
  ASSERT_GT(stored.size(), 20u);
  for (int i : stored) {
    auto got = w->GetSync(Key(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->body(), Body(i, 1, 8000));
  }
  // Deletes have their own reserve; issued together, they share flushes.
  int deleted = 0;
  for (size_t j = 0; j < stored.size(); j += 2) {
    w->Delete(Key(stored[j]), [&](Result<WriteOutcome> r) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      ++deleted;
    });
  }
  while (deleted < static_cast<int>((stored.size() + 1) / 2))
    w->Wait(std::chrono::milliseconds(100));
  Status defrag = store->DefragNow(false);
  ASSERT_TRUE(defrag.ok()) << defrag.ToString();
  EXPECT_GT(store->stats().defrag_blocks, 0u);
  auto after = w->PutSync("after", Body(1, 2, 8000));
  ASSERT_TRUE(after.ok()) << after.status().ToString() << " free=" << store->stats().blocks_free
                          << " live=" << store->stats().live_bytes;
  for (size_t j = 1; j < stored.size(); j += 2) {
    EXPECT_EQ(w->GetSync(Key(stored[j]))->body(), Body(stored[j], 1, 8000));
  }
}

// Overwrites the first occurrence of `needle` in the file with `replacement`.
void PatchFile(const std::string& path, const std::string& needle, const std::string& replacement) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = data.find(needle);
  ASSERT_NE(at, std::string::npos);
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, replacement.data(), replacement.size(), static_cast<off_t>(at)),
            static_cast<ssize_t>(replacement.size()));
  ::close(fd);
}

// A record damaged on the device while the store was down. A start that
// reads its block whole skips it and counts the damage; one that takes the
// block's summary indexes it and reads it as Corruption, as a running store
// does (so neither brings an older version back). Its neighbours survive
// either way.
TEST_F(StoreTest, DamagedRecordIsReportedAndItsNeighboursSurvive) {
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
  }
  PatchFile(opts_.path, Body(7, 1), "XXXXXXXX");
  for (const bool summaries : {false, true}) {
    SCOPED_TRACE(summaries ? "from the summaries" : "blocks read whole");
    opts_.block_summaries = summaries;
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    if (summaries) {
      ASSERT_GT(store->recovery().blocks_from_summaries, 0u) << "the puts must seal a block";
      EXPECT_EQ(store->recovery().damaged_regions, 0u);
      EXPECT_EQ(store->recovery().live_records, 20u);
      EXPECT_EQ(w->GetSync(Key(7)).status().code(), Status::Code::kCorruption);
    } else {
      EXPECT_EQ(store->recovery().damaged_regions, 1u);
      EXPECT_EQ(store->recovery().live_records, 19u);
      EXPECT_TRUE(w->GetSync(Key(7)).status().IsNotFound());
    }
    for (int i = 0; i < 20; ++i) {
      if (i == 7) continue;
      EXPECT_EQ(w->GetSync(Key(i))->body(), Body(i, 1)) << i;
    }
  }
}

TEST_F(StoreTest, RecordDamagedUnderARunningStoreReadsAsCorruption) {
  auto store = OpenOrDie(opts_);
  {
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
  }  // the worker's block is sealed: reads now go to the device
  PatchFile(opts_.path, Body(3, 1), "XXXXXXXX");
  auto w = WorkerOrDie(store.get());
  auto got = w->GetSync(Key(3));
  EXPECT_EQ(got.status().code(), Status::Code::kCorruption) << got.status().ToString();
  EXPECT_EQ(store->stats().corruptions, 1u);
  EXPECT_EQ(w->GetSync(Key(4))->body(), Body(4, 1));
  // The key can still be written, and then reads well.
  ASSERT_TRUE(w->PutSync(Key(3), "fresh").ok());
  EXPECT_EQ(w->GetSync(Key(3))->body(), "fresh");
  // And a damaged key can be deleted for good.
  PatchFile(opts_.path, Body(5, 1), "XXXXXXXX");
  ASSERT_TRUE(w->DeleteSync(Key(5)).ok());
  EXPECT_TRUE(w->GetSync(Key(5)).status().IsNotFound());
}

TEST_F(StoreTest, NotASegstoreDeviceIsRefusedNotFormatted) {
  {
    std::ofstream f(opts_.path, std::ios::binary);
    std::string junk(1 << 20, 'j');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto s = Store::Open(opts_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kCorruption) << s.status().ToString();
  std::ifstream in(opts_.path, std::ios::binary);
  char c;
  in.read(&c, 1);
  EXPECT_EQ(c, 'j');  // untouched
}

// A data file of a later format version (FORMAT.md, "Versions"): refused
// with Unsupported naming both versions, and not one byte written; the same
// file opens again once it says this build's version.
TEST_F(StoreTest, NewerFormatVersionIsRefusedNamingBothAndNothingIsWritten) {
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
  }
  testing::SetSuperblockVersion(opts_.path, kFormatVersion + 1);
  const std::string before = testing::FileBytes(opts_.path);
  auto s = Store::Open(opts_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kUnsupported) << s.status().ToString();
  const std::string want = "data file format version " + std::to_string(kFormatVersion + 1) +
                           " is newer than this build reads (" +
                           std::to_string(kOldestFormatVersion) + " to " +
                           std::to_string(kFormatVersion) + ")";
  static_assert(kOldestFormatVersion < kFormatVersion, "the message above names a range");
  EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("nothing was written"), std::string::npos)
      << s.status().ToString();
  EXPECT_TRUE(testing::FileBytes(opts_.path) == before) << "the refused file was changed";

  testing::SetSuperblockVersion(opts_.path, kFormatVersion);
  auto store = OpenOrDie(opts_);
  ASSERT_NE(store, nullptr);
  auto w = WorkerOrDie(store.get());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(w->GetSync(Key(i))->body(), Body(i, 1)) << i;
}

// ---- A data file of an older format version this build reads (FORMAT.md,
// "Versions": O <= v < W): opened and served; its superblock says W before
// anything is written; its older records stay readable.

// Records on the data file at `path`, by the format version each says.
std::map<int, int> RecordsByFormatVersion(const std::string& path) {
  const std::string bytes = testing::FileBytes(path);
  const auto* image = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint32_t block_size = DecodeFixed32(image + 40);
  std::map<int, int> out;
  for (uint64_t base = block_size; base + block_size <= bytes.size(); base += block_size) {
    Result<BlockHeader> h = DecodeBlockHeader(image + base);
    if (!h.ok()) continue;
    BlockScanner scan(image + base, block_size, h->salt());
    RecordView v;
    uint32_t off;
    while (scan.Next(&v, &off)) ++out[v.header.format_version];
  }
  return out;
}

// Offsets of the bytes that differ between two images of one size.
std::vector<size_t> ChangedBytes(const std::string& a, const std::string& b) {
  std::vector<size_t> out;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) out.push_back(i);
  }
  return out;
}

TEST_F(StoreTest, OlderFormatVersionOpensIsUpgradedAndKeepsItsRecords) {
  static_assert(kOldestFormatVersion < kFormatVersion);
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 300; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
    for (int i = 0; i < 300; i += 3) ASSERT_TRUE(w->DeleteSync(Key(i)).ok());
  }
  // What a release writing the oldest version would have written.
  ASSERT_EQ(testing::SetFileFormatVersionEverywhere(opts_.path, kOldestFormatVersion), 400);
  ASSERT_EQ(testing::SuperblockVersion(opts_.path), kOldestFormatVersion);
  EXPECT_EQ(RecordsByFormatVersion(opts_.path), (std::map<int, int>{{kOldestFormatVersion, 400}}));
  const std::string old_file = testing::FileBytes(opts_.path);

  auto check = [](Worker* w, int written) {
    for (int i = 0; i < written; ++i) {
      auto got = w->GetSync(Key(i));
      if (i < 300 && i % 3 == 0) {
        EXPECT_TRUE(got.status().IsNotFound()) << i << ": " << got.status().ToString();
      } else {
        ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
        EXPECT_EQ(got->body(), Body(i, i < 300 && i % 3 == 1 && written > 300 ? 2 : 1)) << i;
      }
    }
  };
  {
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->recovery().live_records, 200u);
    EXPECT_EQ(store->recovery().tombstones, 100u);
    EXPECT_EQ(store->recovery().damaged_regions, 0u);
    // Before a worker exists, the superblock already says this build's version.
    EXPECT_EQ(testing::SuperblockVersion(opts_.path), kFormatVersion);
    auto w = WorkerOrDie(store.get());
    check(w.get(), 300);
  }  // a worker that only read writes nothing
  // The open rewrote the superblock's version and checksum, and nothing else.
  const std::vector<size_t> changed = ChangedBytes(old_file, testing::FileBytes(opts_.path));
  EXPECT_FALSE(changed.empty());
  for (size_t at : changed) EXPECT_TRUE(at < 4 || at == 12 || at == 13) << "byte " << at;
  EXPECT_EQ(RecordsByFormatVersion(opts_.path), (std::map<int, int>{{kOldestFormatVersion, 400}}));

  // Reopened: the older records still read; new ones go in this build's
  // version beside them; after another restart both read.
  {
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->recovery().live_records, 200u);
    auto w = WorkerOrDie(store.get());
    check(w.get(), 300);
    for (int i = 1; i < 300; i += 3) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 2)).ok());
    for (int i = 300; i < 350; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
  }
  const std::map<int, int> versions = RecordsByFormatVersion(opts_.path);
  EXPECT_EQ(versions.at(kOldestFormatVersion), 400);
  EXPECT_EQ(versions.at(kFormatVersion), 150);
  auto store = OpenOrDie(opts_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovery().live_records, 250u);
  EXPECT_EQ(testing::SuperblockVersion(opts_.path), kFormatVersion);
  auto w = WorkerOrDie(store.get());
  check(w.get(), 350);
}

// The upgrade's write fails: Open fails, and the file still says its own
// version (a valid superblock), so it opens later, or under an older release.
TEST_F(StoreTest, FailedUpgradeFailsOpenAndLeavesTheFileAsItWas) {
  auto device = FaultDevice::Create(64 * opts_.write_block_size, 11);
  {
    auto store = OpenOrDie(opts_, device);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
  }
  std::vector<uint8_t> image = device->ReadImage(0, device->size());
  const std::vector<uint8_t> written = image;
  ASSERT_EQ(testing::SetFormatVersionEverywhere(image.data(), image.size(), kOldestFormatVersion),
            50);
  for (size_t i = 0; i < image.size(); ++i) {
    if (image[i] != written[i]) device->XorByte(i, image[i] ^ written[i]);
  }

  device->FailWritesAfter(0);
  auto refused = Store::Open(opts_, device);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kIOError) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("upgrade"), std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(device->ReadImage(0, device->size()) == image) << "the failed open changed the file";

  device->ClearFaults();
  auto store = OpenOrDie(opts_, device->Reboot());
  ASSERT_NE(store, nullptr);
  auto w = WorkerOrDie(store.get());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(w->GetSync(Key(i))->body(), Body(i, 1)) << i;
}

// A write block of this device in a version newer than its superblock's:
// the superblock was put back after the upgrade (nothing is written in a
// newer version before the superblock says it). Refused, not treated as free
// blocks to write over, and nothing is written.
TEST_F(StoreTest, BlockNewerThanItsSuperblockIsRefusedAndNothingIsWritten) {
  static_assert(kOldestFormatVersion < kFormatVersion);
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
  }
  testing::SetSuperblockVersion(opts_.path, kOldestFormatVersion);
  const std::string before = testing::FileBytes(opts_.path);
  auto s = Store::Open(opts_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kCorruption) << s.status().ToString();
  const std::string want = "is in data file format version " + std::to_string(kFormatVersion) +
                           ", newer than its superblock's (" +
                           std::to_string(kOldestFormatVersion) + ")";
  EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().ToString();
  EXPECT_TRUE(testing::FileBytes(opts_.path) == before) << "the refused file was changed";
}

// Version 0 is never written: damage, refused as Corruption, never formatted over.
TEST_F(StoreTest, FormatVersionZeroIsRefusedAsCorruptionAndNothingIsWritten) {
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("k", "v").ok());
  }
  testing::SetSuperblockVersion(opts_.path, 0);
  const std::string before = testing::FileBytes(opts_.path);
  auto s = Store::Open(opts_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kCorruption) << s.status().ToString();
  EXPECT_NE(s.status().message().find("format version 0"), std::string::npos)
      << s.status().ToString();
  EXPECT_TRUE(testing::FileBytes(opts_.path) == before) << "the refused file was changed";
}

TEST_F(StoreTest, ExistingDeviceKeepsItsBlockSize) {
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("k", "v").ok());
  }
  opts_.write_block_size = 1u << 20;
  auto store = OpenOrDie(opts_);
  EXPECT_EQ(store->stats().block_size, 64u << 10);
  auto w = WorkerOrDie(store.get());
  EXPECT_EQ(w->GetSync("k")->body(), "v");
}

TEST_F(StoreTest, DefaultsServeFromADataFileUnderTheWorkingDirectory) {
  StoreOptions d;
  EXPECT_EQ(d.path, "segstore-data/segstore.dat");
  EXPECT_EQ(d.durability, Durability::kCommit);
  EXPECT_EQ(d.write_block_size, 1u << 20);
  d.path = dir_.File("nested/dir/data");  // parent directories are created
  d.file_size = 32u << 20;
  d.background_defrag = false;
  auto store = OpenOrDie(d);
  ASSERT_NE(store, nullptr);
  // A ThreadSanitizer build picks pread/pwrite: it cannot see io_uring's I/O.
  EXPECT_STREQ(store->stats().io_backend, kThreadSanitizer ? "sync" : "io_uring");
}

TEST_F(StoreTest, FindDueListsLiveRecordsWhoseSweepAtHasPassed) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  const UnixSeconds t = clock_.Now();
  for (int i = 0; i < 300; ++i) {
    // A third due now, a third later, a third never.
    UnixSeconds sweep = i % 3 == 0 ? t - 5 : (i % 3 == 1 ? t + 100 : 0);
    ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1), sweep, 0).ok());
  }
  ASSERT_TRUE(w->DeleteSync(Key(0)).ok());  // a tombstone is never due
  std::vector<RecordRef> due;
  uint32_t cursor = 0, scanned = 0;
  while (scanned < 4096) scanned += store->FindDue(t, 1000, &cursor, &due);
  EXPECT_EQ(due.size(), 99u);
  std::set<std::string> keys;
  for (const RecordRef& ref : due) {
    auto rec = w->GetAtSync(ref);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    keys.insert(std::string(rec->key()));
    EXPECT_LE(rec->sweep_at(), t);
  }
  EXPECT_EQ(keys.size(), 99u);
  EXPECT_EQ(keys.count(Key(0)), 0u);
  // Bounded: at most `max`, and the cursor moves on.
  std::vector<RecordRef> some;
  cursor = 0;
  scanned = store->FindDue(t, 10, &cursor, &some);
  EXPECT_GE(some.size(), 10u);
  EXPECT_LT(scanned, 4096u);
  EXPECT_EQ(cursor, scanned % 4096);
  // Later, the rest is due too.
  due.clear();
  cursor = 0;
  store->FindDue(t + 100, 1000, &cursor, &due);
  EXPECT_EQ(due.size(), 199u);
}

TEST_F(StoreTest, GetAtFindsNothingWhereNothingValidLies) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(w->PutSync("k", "v", clock_.Now(), 0).ok());
  std::vector<RecordRef> due = DueNow(store.get(), clock_.Now());
  ASSERT_EQ(due.size(), 1u);
  RecordRef wrong = due[0];
  wrong.block_salt ^= 1;
  EXPECT_TRUE(w->GetAtSync(wrong).status().IsNotFound());
  wrong = due[0];
  wrong.offset += 16;
  EXPECT_TRUE(w->GetAtSync(wrong).status().IsNotFound());
  EXPECT_EQ(w->GetAtSync(due[0])->body(), "v");
}

TEST_F(StoreTest, UpdateAtReadsOnceAndUpdatesTheCurrentVersion) {
  auto store = OpenOrDie(opts_);
  std::vector<RecordRef> due;
  {
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("a", "1", clock_.Now(), 0).ok());
    ASSERT_TRUE(w->PutSync("b", "1", clock_.Now(), 0).ok());
  }  // sealed: what follows reads the device
  due = DueNow(store.get(), clock_.Now());
  ASSERT_EQ(due.size(), 2u);
  auto w = WorkerOrDie(store.get());
  auto append = [](const Record* cur) -> Result<Mutation> {
    return Mutation::Put(std::string(cur ? cur->body() : "") + "+");
  };
  uint64_t reads = store->stats().device_reads;
  auto r = w->UpdateAtSync(due[0], append);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(store->stats().device_reads - reads, 1u);  // the copy read at the place served
  // The other key is rewritten meanwhile: UpdateAt goes by its key.
  std::string other = std::string(w->GetAtSync(due[1])->key());
  ASSERT_TRUE(w->PutSync(other, "2").ok());
  ASSERT_TRUE(w->UpdateAtSync(due[1], append).ok());
  EXPECT_EQ(w->GetSync(other)->body(), "2+");
  // Nothing valid at a place: NotFound, nothing written.
  RecordRef nowhere = due[0];
  nowhere.block_salt ^= 1;
  uint64_t writes = store->stats().writes;
  EXPECT_TRUE(w->UpdateAtSync(nowhere, append).status().IsNotFound());
  EXPECT_EQ(store->stats().writes, writes);
}

// `n` keys of routing partition `p`: candidates `prefix`0, `prefix`1, ... kept
// when they fall in it.
std::vector<std::string> KeysOfPartition(uint32_t p, size_t n, const std::string& prefix) {
  std::vector<std::string> keys;
  for (uint64_t i = 0; keys.size() < n; ++i) {
    std::string k = prefix + std::to_string(i);
    if (Index::PartitionOf(k) == p) keys.push_back(std::move(k));
  }
  return keys;
}

// One page of partition `p` from `*from`, checked for its size and its next
// tag; each record listed is read back at once by GetAt. Returns the records.
std::vector<Record> ListedPage(Store* store, Worker* w, uint32_t p, uint64_t* from, size_t max) {
  std::vector<RecordRef> refs;
  uint64_t next = 0;
  store->ListPartition(p, *from, max, &refs, &next);
  EXPECT_GT(next, *from);
  EXPECT_LE(next, kPartitionListEnd);
  if (next != kPartitionListEnd) {
    EXPECT_GE(refs.size(), max) << "from " << *from;
  }
  *from = next;
  std::vector<Record> records;
  for (const RecordRef& ref : refs) {
    Result<Record> rec = w->GetAtSync(ref);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    if (rec.ok()) records.push_back(std::move(rec).value());
  }
  return records;
}

TEST_F(StoreTest, ListPartitionListsEveryKeyLiveThroughoutOnce) {
  opts_.durability = Durability::kBuffered;  // a thousand writes, none waiting for the device
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  constexpr uint32_t kP = 1234;
  const std::vector<std::string> keys = KeysOfPartition(kP, 450, "p-");
  // The first 300 are there from the start; the rest are added while listing.
  std::map<std::string, std::string> bodies;  // what each key holds now
  auto put = [&](const std::string& k, int version) {
    bodies[k] = Body(static_cast<int>(bodies.size()), version);
    ASSERT_TRUE(w->PutSync(k, bodies[k]).ok()) << k;
  };
  for (int i = 0; i < 300; ++i) put(keys[i], 1);
  // Neighbours in other partitions, the next ones above all.
  int others = 0;
  for (int i = 0; others < 300; ++i) {
    const std::string k = "o-" + std::to_string(i);
    if (Index::PartitionOf(k) == kP) continue;
    if (others < 200 || Index::PartitionOf(k) == kP + 1 || Index::PartitionOf(k) == kP - 1) {
      put(k, 1);
      ++others;
    }
  }
  // i % 10 == 0: deleted before (tombstones); 1..3: deleted while listing;
  // 4..6: overwritten while listing; the rest untouched.
  std::set<std::string> deleted_before, deleted_meanwhile, live_throughout;
  std::vector<std::string> to_delete, to_overwrite;
  for (int i = 0; i < 300; ++i) {
    const int kind = i % 10;
    if (kind == 0) {
      ASSERT_TRUE(w->DeleteSync(keys[i]).ok());
      bodies.erase(keys[i]);
      deleted_before.insert(keys[i]);
      continue;
    }
    if (kind <= 3) {
      to_delete.push_back(keys[i]);
      deleted_meanwhile.insert(keys[i]);
    } else {
      live_throughout.insert(keys[i]);
      if (kind <= 6) to_overwrite.push_back(keys[i]);
    }
  }
  std::mt19937 rng(41);
  std::shuffle(to_delete.begin(), to_delete.end(), rng);
  std::shuffle(to_overwrite.begin(), to_overwrite.end(), rng);

  std::map<std::string, int> listed;
  size_t added = 300, deletes = 0, overwrites = 0;
  uint64_t from = 0;
  int pages = 0;
  while (from != kPartitionListEnd) {
    for (const Record& rec : ListedPage(store.get(), w.get(), kP, &from, 5)) {
      const std::string k(rec.key());
      EXPECT_EQ(Index::PartitionOf(k), kP) << k;
      EXPECT_EQ(deleted_before.count(k), 0u) << "a tombstone was listed: " << k;
      ASSERT_EQ(bodies.count(k), 1u) << k;
      EXPECT_EQ(rec.body(), bodies[k]) << k;
      ++listed[k];
    }
    ASSERT_FALSE(HasFailure());
    ++pages;
    // Between pages: 2 deletes, 3 overwrites, 3 new keys; now and then a
    // defragmentation moves records.
    for (int i = 0; i < 2 && deletes < to_delete.size(); ++i) {
      ASSERT_TRUE(w->DeleteSync(to_delete[deletes]).ok());
      bodies.erase(to_delete[deletes++]);
    }
    for (int i = 0; i < 3 && overwrites < to_overwrite.size(); ++i) {
      put(to_overwrite[overwrites++], 2);
    }
    for (int i = 0; i < 3 && added < keys.size(); ++i) put(keys[added++], 1);
    if (pages % 4 == 0) {
      ASSERT_TRUE(w->FlushSync().ok());
      ASSERT_TRUE(store->DefragNow(pages % 8 == 0).ok());
    }
  }
  EXPECT_GT(pages, 20);
  EXPECT_GT(deletes, 20u);
  EXPECT_GT(overwrites, 20u);
  EXPECT_GT(store->stats().defrag_records_moved, 0u);  // records moved while listed
  for (const std::string& k : live_throughout) EXPECT_EQ(listed[k], 1) << k;
  for (const auto& [k, times] : listed) {
    EXPECT_EQ(times, 1) << k;  // a key's tag never changes: one page at most
  }
  // Listed again now that nothing moves: exactly what the partition holds.
  std::set<std::string> now_listed, now_held;
  for (uint64_t f = 0; f != kPartitionListEnd;) {
    for (const Record& rec : ListedPage(store.get(), w.get(), kP, &f, 1000)) {
      EXPECT_TRUE(now_listed.insert(std::string(rec.key())).second) << rec.key();
    }
  }
  for (const auto& [k, body] : bodies) {
    if (Index::PartitionOf(k) == kP) now_held.insert(k);
  }
  EXPECT_EQ(now_listed, now_held);
}

TEST_F(StoreTest, ListPartitionOfAnEmptyPartitionEndsAtOnce) {
  opts_.durability = Durability::kBuffered;
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  std::vector<RecordRef> refs;
  uint64_t next = 0;
  store->ListPartition(7, 0, 10, &refs, &next);
  EXPECT_TRUE(refs.empty());
  EXPECT_EQ(next, kPartitionListEnd);
  // Keys elsewhere, and a partition holding only a tombstone.
  for (int i = 0; i < 200; ++i) {
    if (Index::PartitionOf(Key(i)) != 7) {
      ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
    }
  }
  const std::string gone = KeysOfPartition(7, 1, "gone-")[0];
  ASSERT_TRUE(w->PutSync(gone, "x").ok());
  ASSERT_TRUE(w->DeleteSync(gone).ok());
  for (size_t max : {size_t{0}, size_t{1}, size_t{10}}) {
    next = 0;
    store->ListPartition(7, 0, max, &refs, &next);
    EXPECT_TRUE(refs.empty());
    EXPECT_EQ(next, kPartitionListEnd);
  }
  // Out of range: nothing.
  const uint32_t used = Index::PartitionOf(Key(1));
  store->ListPartition(used, 0, 10, &refs, &next);
  EXPECT_EQ(refs.size(), 1u);
  refs.clear();
  store->ListPartition(used, kPartitionListEnd, 10, &refs, &next);
  EXPECT_TRUE(refs.empty());
  EXPECT_EQ(next, kPartitionListEnd);
  store->ListPartition(Index::kPartitions, 0, 10, &refs, &next);
  EXPECT_TRUE(refs.empty());
  EXPECT_EQ(next, kPartitionListEnd);
}

TEST_F(StoreTest, ListPartitionIncludesRecordsPastVoidAtUntilDropped) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  const std::vector<std::string> keys = KeysOfPartition(99, 2, "v-");
  ASSERT_TRUE(w->PutSync(keys[0], "lasting").ok());
  ASSERT_TRUE(w->PutSync(keys[1], "fleeting", 0, clock_.Now() + 10).ok());
  clock_.Advance(20);
  EXPECT_TRUE(w->GetSync(keys[1]).status().IsNotFound());
  std::vector<RecordRef> refs;
  uint64_t next = 0;
  store->ListPartition(99, 0, 10, &refs, &next);
  EXPECT_EQ(refs.size(), 2u);  // still indexed
  EXPECT_EQ(next, kPartitionListEnd);
  // The index sweep drops it (or leaves a tombstone): no longer listed.
  ASSERT_TRUE(w->FlushSync().ok());
  ASSERT_TRUE(store->DefragNow(false).ok());
  refs.clear();
  store->ListPartition(99, 0, 10, &refs, &next);
  ASSERT_EQ(refs.size(), 1u);
  Result<Record> rec = w->GetAtSync(refs[0]);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->key(), keys[0]);
}

// Scans every write block of a fault device's image; calls f(offset, view).
template <typename F>
void ForEachRecordOnImage(FaultDevice& dev, uint32_t block_size, F f) {
  for (uint64_t base = block_size; base < dev.size(); base += block_size) {
    std::vector<uint8_t> block = dev.ReadImage(base, block_size);
    auto h = DecodeBlockHeader(block.data());
    if (!h.ok()) continue;
    BlockScanner scan(block.data(), block_size, h->salt());
    RecordView v;
    uint32_t off;
    while (scan.Next(&v, &off)) f(off, v);
  }
}

TEST_F(StoreTest, AlignedRecordsNeverStraddleASectorAndPackedOnesDo) {
  for (bool align : {true, false}) {
    auto device = FaultDevice::Create(64 * opts_.write_block_size, 3);
    StoreOptions o = opts_;
    o.align_records = align;
    o.durability = Durability::kBuffered;
    {
      auto store = testing::OpenOrDie(o, device);
      auto w = WorkerOrDie(store.get());
      for (int i = 0; i < 200; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1, 1000 + i * 13)).ok());
    }
    int records = 0, straddling = 0;
    ForEachRecordOnImage(*device, o.write_block_size, [&](uint32_t off, const RecordView& v) {
      ++records;
      if (off / 4096 != (off + v.footprint - 1) / 4096) ++straddling;
    });
    EXPECT_EQ(records, 200);
    if (align) {
      EXPECT_EQ(straddling, 0);
    } else {
      EXPECT_GT(straddling, 50);
    }
    auto store = testing::OpenOrDie(o, device->Reboot());
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 200; ++i) EXPECT_EQ(w->GetSync(Key(i))->body(), Body(i, 1, 1000 + i * 13));
  }
}

// A device that claims to be larger than it is (only its first sectors are
// ever touched: a store refuses it before writing anything).
class HugeDevice final : public Device {
 public:
  HugeDevice(uint64_t claimed) : inner_(FaultDevice::Create(1 << 20, 1)), claimed_(claimed) {}
  uint64_t size() const override { return claimed_; }
  const std::string& name() const override { return inner_->name(); }
  const char* backend_name() const override { return "fault"; }
  Result<std::unique_ptr<IoQueue>> NewQueue(uint32_t depth) override {
    return inner_->NewQueue(depth);
  }

 private:
  std::shared_ptr<FaultDevice> inner_;
  uint64_t claimed_;
};

TEST_F(StoreTest, DeviceBeyondTheIndexReachIsRefused) {
  auto s = Store::Open(opts_, std::make_shared<HugeDevice>((uint64_t{16} << 40) + (1u << 20)));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << s.status().ToString();
  EXPECT_NE(s.status().ToString().find("16 TiB"), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace segstore::storage
