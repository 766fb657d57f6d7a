// Restarts that read less than the device.
//
// The index checkpoint (src/storage/index_checkpoint.h): a clean close writes
// it, the next start loads it instead of scanning, and anything that does
// not match the device exactly (damage, truncation, another version or
// device, a write since) is refused and the device scanned, with nothing of
// the refused file left in the index.
//
// Block summaries (FORMAT.md, "Block summaries"): a start that scans reads
// each sealed block's list of records instead of the block, and rebuilds
// exactly what reading every block whole would; a summary that fails any
// check costs only a whole read of its block.
#include "storage/index_checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "storage/store_impl.h"
#include "storage/test_util.h"

namespace segstore::storage {
namespace {

using testing::Body;
using testing::FileBytes;
using testing::Key;
using testing::OpenOrDie;
using testing::SmallOptions;
using testing::TempDir;
using testing::WorkerOrDie;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Everything a start rebuilds, as one store holds it.
struct StoreView {
  using Words = std::array<uint32_t, 5>;
  // (partition, tag, offset) -> the entry's words and its reference.
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::pair<Words, std::string>> entries;
  std::map<uint32_t, int64_t> live_bytes;                    // blocks counting any
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> blocks;  // not free: seq, salt
  uint64_t sequence = 0;
};

StoreView ViewOf(Store* store) {
  auto* impl = static_cast<StoreImpl*>(store);
  StoreView v;
  std::map<uint32_t, int64_t> accounted;
  for (uint32_t p = 0; p < Index::kPartitions; ++p) {
    Index::Locked table = impl->index().Lock(p);
    table->ForEach([&](const IndexEntry& e) {
      v.entries[{p, e.tag(), e.offset()}] = {e.ToWords(), std::string(table->Reference(e))};
      accounted[impl->BlockOf(e.offset())] += AccountedBytes(e);
    });
  }
  BlockTable& blocks = impl->blocks();
  for (uint32_t b = 1; b < blocks.block_count(); ++b) {
    if (blocks.state(b) != BlockState::kFree) v.blocks[b] = {blocks.seq(b), blocks.salt(b)};
    if (blocks.live_bytes(b) != 0) v.live_bytes[b] = blocks.live_bytes(b);
  }
  // A block's live bytes are what its entries account for, whichever way
  // the index was rebuilt.
  std::erase_if(accounted, [](const auto& kv) { return kv.second == 0; });
  EXPECT_EQ(v.live_bytes, accounted);
  v.sequence = impl->CurrentSeq();
  return v;
}

// A loaded index against a scan of the same device. Entries alive at `now`
// must be the same, words and references. A dead one (tombstone, or past
// its void_at) that the scan keeps must be in the loaded index too; the
// loaded one may keep more: a scan drops those whose version lies below the
// watermark (nothing older of their key is left), which the running store's
// index sweep drops only later, and it stores a tombstone's own version
// where the sweep stored a bound of it.
void ExpectSameAsScan(const StoreView& loaded, const StoreView& scanned, uint32_t now) {
  auto alive = [now](const StoreView::Words& w) {
    std::optional<IndexEntry> e = IndexEntry::FromWords(w);
    return e && e->live() && !(e->void_at() != 0 && e->void_at() <= now);
  };
  size_t alive_count = 0;
  for (const auto& [where, entry] : scanned.entries) {
    auto it = loaded.entries.find(where);
    ASSERT_NE(it, loaded.entries.end()) << "partition " << std::get<0>(where) << " offset "
                                        << std::get<2>(where) << " missing after a load";
    if (alive(entry.first)) {
      ++alive_count;
      EXPECT_EQ(it->second, entry) << "offset " << std::get<2>(where);
    } else {
      EXPECT_FALSE(alive(it->second.first)) << "offset " << std::get<2>(where);
      EXPECT_EQ(IndexEntry::FromWords(it->second.first)->size(),
                IndexEntry::FromWords(entry.first)->size());
    }
  }
  for (const auto& [where, entry] : loaded.entries) {
    if (alive(entry.first)) {
      EXPECT_TRUE(scanned.entries.contains(where))
          << "offset " << std::get<2>(where) << " alive after a load, not after a scan";
    }
  }
  EXPECT_GT(alive_count, 0u);
  EXPECT_EQ(loaded.blocks, scanned.blocks);
  EXPECT_GE(loaded.sequence, scanned.sequence);
}

class IndexCheckpointTest : public ::testing::Test {
 protected:
  IndexCheckpointTest() {
    opts_.index_checkpoint = checkpoint_;
    opts_.file_size = 8u << 20;
  }

  // Writes a mix into the store: puts over several blocks, overwrites,
  // deletes, linked records (some naming a deleted key), hash-tagged keys
  // sharing a partition, records whose void_at then passes; defragments
  // (freeing blocks, which later writes reuse). Records each key's expected
  // GetWithReference answer in model_.
  void WriteMix(Store* store) {
    auto w = WorkerOrDie(store);
    auto put = [&](const std::string& key, const std::string& body,
                   std::optional<std::string> reference, uint32_t void_at = 0) {
      auto r = w->UpdateSync(key, [&](const Record*) -> Result<Mutation> {
        Mutation m = Mutation::Put(body, 0, void_at);
        m.reference = reference;
        return m;
      });
      ASSERT_TRUE(r.ok()) << key << ": " << r.status().ToString();
      model_[key] = body;
      references_[key] = reference.value_or("");
    };
    auto del = [&](const std::string& key) {
      ASSERT_TRUE(w->DeleteSync(key).ok()) << key;
      model_[key] = std::nullopt;
      references_[key] = "";
    };
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 150; ++i) {
        put(Key(i), Body(i, round, 200 + (i * 37) % 1800), std::nullopt);
      }
    }
    for (int i = 0; i < 150; i += 7) del(Key(i));
    for (int j = 0; j < 20; ++j) put("linked-" + std::to_string(j), Body(j, 9, 150), Key(j));
    put("{u1}.following", "a", std::nullopt);
    put("{u1}.followers", "b", "{u1}.following");
    const uint32_t now = clock_.Now();
    for (int j = 0; j < 10; ++j) put("void-" + std::to_string(j), Body(j, 5, 400), "", now + 50);
    put("void-later", "stays", "", now + 100000);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(store->DefragNow(i % 2 == 0).ok());
    for (int i = 150; i < 200; ++i) put(Key(i), Body(i, 7, 700), std::nullopt);
    del("linked-3");
    del("never-written");
    clock_.Advance(60);  // the void- records are dead from now on
    for (int j = 0; j < 10; ++j) model_["void-" + std::to_string(j)] = std::nullopt;
    // The index sweep turns them into tombstones in DRAM only, bounded by
    // the sequence's next value: the checkpoint must still load.
    ASSERT_TRUE(store->DefragNow(false).ok());
    ASSERT_GT(store->stats().defrag_blocks, 0u) << "nothing was freed: make the mix larger";
  }

  // Every key's answer matches the model.
  void ExpectModel(Store* store) {
    auto w = WorkerOrDie(store);
    for (const auto& [key, body] : model_) {
      auto [record, referenced] = w->GetWithReferenceSync(key);
      if (!body) {
        EXPECT_TRUE(record.status().IsNotFound()) << key << ": " << record.status().ToString();
        continue;
      }
      ASSERT_TRUE(record.ok()) << key << ": " << record.status().ToString();
      EXPECT_EQ(record->body(), *body) << key;
      EXPECT_EQ(record->reference(), references_[key]) << key;
      const std::string& ref = references_[key];
      if (!ref.empty() && model_[ref]) {
        ASSERT_TRUE(referenced.ok()) << key << ": " << referenced.status().ToString();
        EXPECT_EQ(referenced->body(), *model_[ref]) << key;
      }
    }
  }

  void WriteFile(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }

  TempDir dir_;
  ManualClock clock_{1'700'000'000};
  std::string checkpoint_ = dir_.File("data.index");
  StoreOptions opts_ = SmallOptions(dir_.File("data"), &clock_);
  std::map<std::string, std::optional<std::string>> model_;
  std::map<std::string, std::string> references_;
};

TEST_F(IndexCheckpointTest, ACleanRestartLoadsWhatAScanWouldRebuild) {
  StoreView at_close;
  {
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    EXPECT_FALSE(store->recovery().from_checkpoint);
    EXPECT_PRED2(Contains, store->recovery().scan_reason, "no such file");
    WriteMix(store.get());
    if (HasFatalFailure()) return;
    at_close = ViewOf(store.get());
  }
  ASSERT_TRUE(std::filesystem::exists(checkpoint_));
  EXPECT_FALSE(std::filesystem::exists(checkpoint_ + ".tmp"));

  StoreView loaded;
  {
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    const RecoveryStats& r = store->recovery();
    EXPECT_TRUE(r.from_checkpoint) << r.scan_reason;
    EXPECT_EQ(r.scan_reason, "");
    EXPECT_EQ(r.records_scanned, 0u);
    EXPECT_EQ(r.blocks_in_use, at_close.blocks.size());
    loaded = ViewOf(store.get());
    // Exactly the index, references, blocks and sequence it closed with.
    EXPECT_EQ(loaded.entries, at_close.entries);
    EXPECT_EQ(loaded.live_bytes, at_close.live_bytes);
    EXPECT_EQ(loaded.blocks, at_close.blocks);
    // One value past it: the close takes one, above every tombstone's bound.
    EXPECT_EQ(loaded.sequence, at_close.sequence + 1);
    ExpectModel(store.get());
  }

  // The same device scanned.
  ASSERT_TRUE(std::filesystem::remove(checkpoint_));
  auto store = OpenOrDie(opts_);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->recovery().from_checkpoint);
  EXPECT_GT(store->recovery().records_scanned + store->recovery().records_from_summaries, 0u);
  ExpectSameAsScan(loaded, ViewOf(store.get()), clock_.Now());
  ExpectModel(store.get());
}

TEST_F(IndexCheckpointTest, AnOldCheckpointPutBackIsRefusedAndNothingComesBack) {
  {
    auto store = OpenOrDie(opts_);
    WriteMix(store.get());
    if (HasFatalFailure()) return;
  }
  const std::string old = FileBytes(checkpoint_);
  {
    auto store = OpenOrDie(opts_);
    ASSERT_TRUE(store->recovery().from_checkpoint) << store->recovery().scan_reason;
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->DeleteSync(Key(1)).ok());
    ASSERT_TRUE(w->PutSync(Key(2), "newer").ok());
    model_[Key(1)] = std::nullopt;
    model_[Key(2)] = "newer";
  }
  WriteFile(checkpoint_, old);
  auto store = OpenOrDie(opts_);
  EXPECT_FALSE(store->recovery().from_checkpoint);
  EXPECT_PRED2(Contains, store->recovery().scan_reason, "written since");
  ExpectModel(store.get());
}

// A crash after a start that loaded the checkpoint: the file left behind
// describes the device as it was before the crashed process wrote, and the
// next start must not trust it; when that process wrote nothing, it still
// describes the device exactly, and loading it is right.
TEST_F(IndexCheckpointTest, ACrashAfterALoadedStartIsRecoveredRight) {
  {
    auto store = OpenOrDie(opts_);
    WriteMix(store.get());
    if (HasFatalFailure()) return;
  }
  for (bool writes : {false, true}) {
    SCOPED_TRACE(writes ? "the crashed process wrote" : "the crashed process only read");
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      auto store = Store::Open(opts_);
      if (!store.ok()) ::_exit(2);
      if (!(*store)->recovery().from_checkpoint) ::_exit(3);
      auto w = (*store)->NewWorker();
      if (!w.ok()) ::_exit(4);
      if (writes) {
        if (!(*w)->DeleteSync(Key(4)).ok()) ::_exit(5);
        if (!(*w)->PutSync(Key(5), "after the load").ok()) ::_exit(6);
      } else if (!(*w)->GetSync(Key(5)).ok()) {
        ::_exit(7);
      }
      // Acknowledged: tell the parent, then wait to be killed.
      if (::write(fds[1], "k", 1) != 1) ::_exit(8);
      while (true) ::pause();
    }
    ::close(fds[1]);
    char c;
    const bool told = ::read(fds[0], &c, 1) == 1;
    ::kill(pid, SIGKILL);
    int status;
    ::waitpid(pid, &status, 0);
    ::close(fds[0]);
    ASSERT_TRUE(told) << "the child exited with " << WEXITSTATUS(status);
    ASSERT_TRUE(WIFSIGNALED(status));
    if (writes) {
      model_[Key(4)] = std::nullopt;
      model_[Key(5)] = "after the load";
    }
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->recovery().from_checkpoint, !writes) << store->recovery().scan_reason;
    if (writes) {
      EXPECT_PRED2(Contains, store->recovery().scan_reason, "written since");
    }
    ExpectModel(store.get());
  }
}

// The same on the fault device: a start loads the checkpoint, writes and
// defragments, and the power goes with writes in flight. Every acknowledged
// write must be found. When the power loss failed a write, no checkpoint is
// written at close, and the file left from before must not be trusted; when
// every write had landed, the close writes a new one, which is right.
TEST_F(IndexCheckpointTest, PowerLossAfterALoadedStartLosesNoAcknowledgedWrite) {
  int old_file_left = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::filesystem::remove(checkpoint_);
    auto device = FaultDevice::Create(64 * 64 * 1024, seed);
    StoreOptions opts = SmallOptions("fault", &clock_);
    opts.index_checkpoint = checkpoint_;
    std::map<std::string, std::optional<std::string>> acked;
    {
      auto store = OpenOrDie(opts, device);
      auto w = WorkerOrDie(store.get());
      for (int i = 0; i < 60; ++i) {
        acked[Key(i)] = Body(i, 0, 300 + i * 40);
        ASSERT_TRUE(w->PutSync(Key(i), *acked[Key(i)]).ok());
      }
    }
    const std::string before = FileBytes(checkpoint_);
    ASSERT_FALSE(before.empty());
    device = device->Reboot();
    // Keys written while the power went: either state may be found.
    std::map<std::string, std::optional<std::string>> in_flight;
    {
      auto store = OpenOrDie(opts, device);
      ASSERT_TRUE(store->recovery().from_checkpoint) << store->recovery().scan_reason;
      auto w = WorkerOrDie(store.get());
      std::mt19937_64 rng(seed);
      const int ops = 1 + static_cast<int>(rng() % 40);
      for (int op = 0; op < ops; ++op) {
        const std::string key = Key(static_cast<int>(rng() % 60));
        if (rng() % 4 == 0) {
          ASSERT_TRUE(w->DeleteSync(key).ok());
          acked[key] = std::nullopt;
        } else {
          acked[key] = Body(op, static_cast<int>(seed), 200 + rng() % 3000);
          ASSERT_TRUE(w->PutSync(key, *acked[key]).ok());
        }
        if (rng() % 8 == 0) {
          ASSERT_TRUE(store->DefragNow(rng() % 2 == 0).ok());
        }
      }
      for (int j = 0; j < 5; ++j) {
        const std::string key = Key(j * 11);
        in_flight[key] = j % 2 == 0 ? std::optional<std::string>(Body(j, 99, 900)) : std::nullopt;
        if (in_flight[key]) {
          w->Put(key, *in_flight[key], 0, 0, [](Result<WriteOutcome>) {});
        } else {
          w->Delete(key, [](Result<WriteOutcome>) {});
        }
      }
      w->Poll();
      device->PowerLoss();
      while (w->pending() > 0) w->Wait(std::chrono::milliseconds(1));
    }
    const bool old_left = FileBytes(checkpoint_) == before;
    auto store = OpenOrDie(opts, device->Reboot());
    ASSERT_NE(store, nullptr);
    if (old_left) {
      ++old_file_left;
      EXPECT_FALSE(store->recovery().from_checkpoint);
      EXPECT_PRED2(Contains, store->recovery().scan_reason, "written since");
    }
    auto w = WorkerOrDie(store.get());
    for (const auto& [key, want] : acked) {
      auto got = w->GetSync(key);
      ASSERT_TRUE(got.ok() || got.status().IsNotFound()) << key << ": " << got.status().ToString();
      std::optional<std::string> now;
      if (got.ok()) now = std::string(got->body());
      const bool allowed = now == want || (in_flight.contains(key) && now == in_flight[key]);
      EXPECT_TRUE(allowed) << key << " reads " << (now ? now->substr(0, 12) : "<absent>")
                           << ", acknowledged " << (want ? want->substr(0, 12) : "<absent>");
    }
  }
  EXPECT_GT(old_file_left, 0) << "no seed failed a write: the stale file was never offered";
}

TEST_F(IndexCheckpointTest, DamagedCheckpointsAreRefusedWithNothingOfThemLeft) {
  {
    auto store = OpenOrDie(opts_);
    WriteMix(store.get());
    if (HasFatalFailure()) return;
  }
  const std::string good = FileBytes(checkpoint_);
  // One chunk per partition holding entries at this size: many chunks.
  ASSERT_GT(good.size(), 4000u);
  // What a scan rebuilds from this device, to compare each refusal with.
  StoreView scanned;
  {
    StoreOptions scan = opts_;
    scan.index_checkpoint.clear();
    auto store = OpenOrDie(scan);
    EXPECT_EQ(store->recovery().scan_reason, "no index checkpoint configured");
    scanned = ViewOf(store.get());
  }
  // Another device's checkpoint.
  std::string other_device;
  {
    StoreOptions other = opts_;
    other.path = dir_.File("other");
    other.index_checkpoint = dir_.File("other.index");
    auto store = OpenOrDie(other);
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("x", "y").ok());
  }
  other_device = FileBytes(dir_.File("other.index"));

  auto flip = [&](size_t at) {
    std::string b = good;
    b[at] = static_cast<char>(b[at] ^ 0x40);
    return b;
  };
  std::string newer = good;
  EncodeFixed16(newer.data() + 12, kCheckpointVersion + 1);
  EncodeFixed32(newer.data(), static_cast<uint32_t>(XXH3_64bits_withSeed(newer.data() + 4, 60, 0)));
  std::string wrong_magic = good;
  wrong_magic.replace(4, 8, "NOTINDEX");
  const size_t end_chunk = kCheckpointChunkHeaderSize + 16;
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"checksum byte flipped", flip(0), "header checksum mismatch"},
      {"device id byte flipped", flip(17), "header checksum mismatch"},
      {"first chunk byte flipped", flip(kCheckpointHeaderSize + 20),
       "checksum mismatch in chunk 0"},
      {"middle byte flipped", flip(good.size() / 2), "checksum mismatch in chunk"},
      {"last byte flipped", flip(good.size() - 1), "checksum mismatch in chunk"},
      {"empty", "", "truncated"},
      {"cut in the header", good.substr(0, 40), "truncated"},
      {"header only", good.substr(0, kCheckpointHeaderSize), "truncated"},
      {"cut in the middle", good.substr(0, good.size() / 2), "truncated"},
      {"last byte cut", good.substr(0, good.size() - 1), "truncated"},
      {"end chunk cut", good.substr(0, good.size() - end_chunk), "before its end"},
      {"a byte after the end", good + "x", "bytes follow its end"},
      {"newer checkpoint version", newer, "checkpoint version 2"},
      {"wrong magic", wrong_magic, "wrong magic"},
      {"another device's", other_device, "another device"},
  };
  for (const auto& [name, bytes, why] : cases) {
    SCOPED_TRACE(name);
    WriteFile(checkpoint_, bytes);
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    EXPECT_FALSE(store->recovery().from_checkpoint);
    EXPECT_PRED2(Contains, store->recovery().scan_reason, why);
    EXPECT_PRED2(Contains, store->recovery().scan_reason, checkpoint_);
    // Exactly a scan's: nothing of the refused file was kept.
    const StoreView v = ViewOf(store.get());
    EXPECT_EQ(v.entries, scanned.entries);
    EXPECT_EQ(v.live_bytes, scanned.live_bytes);
    EXPECT_EQ(v.blocks, scanned.blocks);
    EXPECT_EQ(v.sequence, scanned.sequence);
    ExpectModel(store.get());
  }
  // The intact file is still good for this device.
  WriteFile(checkpoint_, good);
  auto store = OpenOrDie(opts_);
  EXPECT_TRUE(store->recovery().from_checkpoint) << store->recovery().scan_reason;
  ExpectModel(store.get());
}

// A file whose checksums are all right but whose contents are impossible:
// written by a bug, or by hand. Each is refused by what it says, not by a
// checksum, and leaves nothing behind.
TEST_F(IndexCheckpointTest, ImpossibleContentsUnderGoodChecksumsAreRefused) {
  {
    auto store = OpenOrDie(opts_);
    WriteMix(store.get());
    if (HasFatalFailure()) return;
  }
  const std::string good = FileBytes(checkpoint_);
  StoreView scanned;
  {
    StoreOptions scan = opts_;
    scan.index_checkpoint.clear();
    scanned = ViewOf(OpenOrDie(scan).get());
  }
  // The first chunk of entries: where it starts, and its ordinal (the
  // checksum's seed).
  size_t at = kCheckpointHeaderSize;
  uint32_t ordinal = 0;
  while (static_cast<uint8_t>(good[at + 4]) != static_cast<uint8_t>(CheckpointChunk::kEntries)) {
    at += kCheckpointChunkHeaderSize + DecodeFixed32(good.data() + at + 8);
    ++ordinal;
    ASSERT_LT(at, good.size());
  }
  const uint32_t length = DecodeFixed32(good.data() + at + 8);
  const uint32_t count = DecodeFixed32(good.data() + at + 12);
  ASSERT_GT(count, 0u);
  const size_t payload = at + kCheckpointChunkHeaderSize;
  // The chunk rebuilt with a new payload and count, checksum and all.
  auto with = [&](std::string new_payload, uint32_t new_count) {
    std::string b = good.substr(0, at + kCheckpointChunkHeaderSize);
    EncodeFixed32(b.data() + at + 8, static_cast<uint32_t>(new_payload.size()));
    EncodeFixed32(b.data() + at + 12, new_count);
    b += new_payload;
    EncodeFixed32(b.data() + at, static_cast<uint32_t>(XXH3_64bits_withSeed(
                                     b.data() + at + 4, b.size() - at - 4, ordinal)));
    return b + good.substr(payload + length);
  };
  const std::string entries = good.substr(payload, length);
  // The first entry with its reference, if it has one.
  const bool linked = (DecodeFixed32(entries.data() + 8) & (1u << 30)) != 0;
  const size_t first = 20 + (linked ? 2 + DecodeFixed16(entries.data() + 20) : 0);
  std::string past_device = entries;
  EncodeFixed32(past_device.data() + 4, 0xFFFFFFF0u);  // offset / 16, low half
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"an entry listed twice", with(entries.substr(0, first) + entries, count + 1),
       "listed twice"},
      {"a count beyond the chunk's bytes", with(entries, 0xFFFFFFFFu), "counts 4294967295 entries"},
      {"an entry past the device", with(past_device, count), "outside the blocks listed"},
  };
  for (const auto& [name, bytes, why] : cases) {
    SCOPED_TRACE(name);
    WriteFile(checkpoint_, bytes);
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    EXPECT_FALSE(store->recovery().from_checkpoint);
    EXPECT_PRED2(Contains, store->recovery().scan_reason, why);
    const StoreView v = ViewOf(store.get());
    EXPECT_EQ(v.entries, scanned.entries);
    EXPECT_EQ(v.live_bytes, scanned.live_bytes);
    EXPECT_EQ(v.blocks, scanned.blocks);
    ExpectModel(store.get());
  }
}

TEST_F(IndexCheckpointTest, NoneIsWrittenAfterADeviceWriteError) {
  auto device = FaultDevice::Create(32 * 64 * 1024, 3);
  StoreOptions opts = SmallOptions("fault", &clock_);
  opts.index_checkpoint = checkpoint_;
  {
    auto store = OpenOrDie(opts, device);
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("before", "ok").ok());
    device->FailWritesAfter(0);
    EXPECT_FALSE(w->PutSync("k", "v").ok());
    w.reset();
    EXPECT_EQ(static_cast<StoreImpl*>(store.get())->CheckpointIndex().code(),
              Status::Code::kUnavailable);
  }
  EXPECT_FALSE(std::filesystem::exists(checkpoint_));
  EXPECT_FALSE(std::filesystem::exists(checkpoint_ + ".tmp"));
  auto store = OpenOrDie(opts, device->Reboot());
  EXPECT_FALSE(store->recovery().from_checkpoint);
  EXPECT_EQ(WorkerOrDie(store.get())->GetSync("before")->body(), "ok");
}

TEST_F(IndexCheckpointTest, NoneIsWrittenWhileWorkersAreOpen) {
  opts_.background_defrag = true;
  {
    auto store = OpenOrDie(opts_);
    auto* impl = static_cast<StoreImpl*>(store.get());
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(w->PutSync("k", "v").ok());
    // Its own worker, and the defragmentation thread's.
    EXPECT_EQ(impl->CheckpointIndex().code(), Status::Code::kUnavailable);
    w.reset();
    EXPECT_EQ(impl->CheckpointIndex().code(), Status::Code::kUnavailable);
    EXPECT_FALSE(std::filesystem::exists(checkpoint_));
  }
  // Closed: the thread stopped first, then the checkpoint was written.
  ASSERT_TRUE(std::filesystem::exists(checkpoint_));
  auto store = OpenOrDie(opts_);
  EXPECT_TRUE(store->recovery().from_checkpoint) << store->recovery().scan_reason;
  EXPECT_EQ(WorkerOrDie(store.get())->GetSync("k")->body(), "v");
}

// An empty store's checkpoint lists no block; the first write after loading
// it adds one, so it no longer matches.
TEST_F(IndexCheckpointTest, AnEmptyStoresCheckpointLoadsAndGoesStaleOnTheFirstWrite) {
  { auto store = OpenOrDie(opts_); }
  const std::string empty = FileBytes(checkpoint_);
  {
    auto store = OpenOrDie(opts_);
    EXPECT_TRUE(store->recovery().from_checkpoint) << store->recovery().scan_reason;
    EXPECT_EQ(store->recovery().blocks_in_use, 0u);
    ASSERT_TRUE(WorkerOrDie(store.get())->PutSync("k", "v").ok());
  }
  WriteFile(checkpoint_, empty);
  auto store = OpenOrDie(opts_);
  EXPECT_FALSE(store->recovery().from_checkpoint);
  EXPECT_PRED2(Contains, store->recovery().scan_reason, "which the checkpoint does not list");
  EXPECT_EQ(WorkerOrDie(store.get())->GetSync("k")->body(), "v");
}

// A checkpoint path naming the data file, under another spelling, or whose
// temporary file would be it, is refused before anything is written.
TEST_F(IndexCheckpointTest, ACheckpointThatWouldWriteOverTheDataFileIsRefused) {
  {
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    WriteMix(store.get());
    if (HasFatalFailure()) return;
  }
  const std::string before = FileBytes(opts_.path);
  const std::string dir = std::filesystem::path(opts_.path).parent_path().string();
  const std::string name = std::filesystem::path(opts_.path).filename().string();
  for (const std::string& bad : {dir + "/./" + name, dir + "//" + name}) {
    StoreOptions o = opts_;
    o.index_checkpoint = bad;
    Result<std::unique_ptr<Store>> s = Store::Open(o);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << s.status().ToString();
    EXPECT_PRED2(Contains, s.status().ToString(), "would write over the data file");
  }
  ASSERT_TRUE(std::filesystem::remove(opts_.path + ".index"));
  std::filesystem::rename(opts_.path, opts_.path + ".tmp");
  StoreOptions o = opts_;
  o.path = opts_.path + ".tmp";
  o.index_checkpoint = opts_.path;  // its .tmp is the data file
  Result<std::unique_ptr<Store>> s = Store::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << s.status().ToString();
  EXPECT_EQ(FileBytes(o.path), before);
}

// The index sweep turns a record past its void_at into a tombstone in DRAM,
// its version bounded by the sequence's next value, not yet taken. When
// nothing takes a value after it before the close, the checkpoint must still
// load, and the next write must take a version above that bound.
TEST_F(IndexCheckpointTest, ATombstoneTheSweepMadeLastStillLoads) {
  {
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    {
      auto w = WorkerOrDie(store.get());
      // A live body large enough that its block stays above the
      // defragmentation threshold once the small one is dead.
      auto put = [&](const std::string& key, const std::string& body, uint32_t void_at) {
        auto r = w->UpdateSync(key, [&](const Record*) -> Result<Mutation> {
          return Mutation::Put(body, 0, void_at);
        });
        ASSERT_TRUE(r.ok()) << key << ": " << r.status().ToString();
      };
      put("stays", Body(1, 1, 40000), 0);
      put("goes", Body(2, 1, 100), clock_.Now() + 10);
    }
    clock_.Advance(20);
    const uint64_t before = static_cast<StoreImpl*>(store.get())->CurrentSeq();
    ASSERT_TRUE(store->DefragNow(false).ok());
    ASSERT_EQ(static_cast<StoreImpl*>(store.get())->CurrentSeq(), before)
        << "the pass took a sequence value: this test no longer makes the case it is about";
    ASSERT_GT(store->stats().expired_dropped, 0u);
  }
  auto store = OpenOrDie(opts_);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->recovery().from_checkpoint) << store->recovery().scan_reason;
  auto w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("goes").status().IsNotFound());
  auto stays = w->GetSync("stays");
  ASSERT_TRUE(stays.ok()) << stays.status().ToString();
  EXPECT_EQ(stays->body(), Body(1, 1, 40000));
}


// ---- Block summaries.

class BlockSummaryTest : public IndexCheckpointTest {
 protected:
  BlockSummaryTest() {
    opts_.index_checkpoint.clear();
    opts_.block_summaries = true;  // whatever SEGSTORE_TEST_BLOCK_SUMMARIES says
  }

  // Opens the store as `opts_` says, with or without summaries: its view,
  // its recovery, and every key checked against the model.
  std::pair<StoreView, RecoveryStats> Reopen(bool summaries) {
    StoreOptions o = opts_;
    o.block_summaries = summaries;
    auto store = OpenOrDie(o);
    EXPECT_NE(store, nullptr);
    if (store == nullptr) return {};
    ExpectModel(store.get());
    return {ViewOf(store.get()), store->recovery()};
  }

  // A block of the data file holding a valid summary.
  struct Summarized {
    uint64_t base = 0;  // its offset in the file
    uint64_t salt = 0;
    SummaryTrailer trailer;
    uint32_t region = 0;  // bytes of the block's end the summary takes
  };
  std::vector<Summarized> SummarizedBlocks(const std::string& bytes) {
    std::vector<Summarized> out;
    const uint32_t bs = opts_.write_block_size;
    for (uint64_t base = bs; base + bs <= bytes.size(); base += bs) {
      const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + base);
      Result<BlockHeader> h = DecodeBlockHeader(p);
      if (!h.ok()) continue;
      Result<SummaryTrailer> t =
          DecodeSummaryTrailer(p + bs - kSummaryTrailerSize, h->salt(), h->seq, bs);
      if (t.ok()) out.push_back({base, h->salt(), *t, SummaryRegionSize(t->entry_bytes)});
    }
    return out;
  }
};

// A start that takes the summaries rebuilds exactly the index, references,
// block table and sequence that reading every block whole does, and reads
// a fraction of the bytes.
TEST_F(BlockSummaryTest, SummariesRebuildWhatReadingEveryBlockWholeWould) {
  {
    auto store = OpenOrDie(opts_);
    WriteMix(store.get());
    if (HasFatalFailure()) return;
  }
  const auto [whole, whole_stats] = Reopen(false);
  const auto [summed, summed_stats] = Reopen(true);
  EXPECT_EQ(summed.entries, whole.entries);
  EXPECT_EQ(summed.live_bytes, whole.live_bytes);
  EXPECT_EQ(summed.blocks, whole.blocks);
  EXPECT_EQ(summed.sequence, whole.sequence);
  EXPECT_EQ(whole_stats.blocks_from_summaries, 0u);
  EXPECT_EQ(whole_stats.blocks_read_whole, whole_stats.blocks_in_use);
  // Every block has a summary: a worker's open block gets one when it closes.
  EXPECT_GT(summed_stats.blocks_from_summaries, 0u);
  EXPECT_EQ(summed_stats.blocks_read_whole, 0u);
  EXPECT_EQ(summed_stats.records_scanned, 0u);
  EXPECT_EQ(summed_stats.blocks_from_summaries + summed_stats.blocks_read_whole,
            summed_stats.blocks_in_use);
  EXPECT_EQ(summed_stats.summaries_refused, 0u);
  EXPECT_EQ(summed_stats.live_records, whole_stats.live_records);
  EXPECT_EQ(summed_stats.tombstones, whole_stats.tombstones);
  EXPECT_EQ(summed_stats.max_seq, whole_stats.max_seq);
  // Past the headers both read: a sector or so a block, not the block.
  const uint64_t headers = uint64_t{whole_stats.blocks_scanned} * kSectorSize;
  EXPECT_EQ(whole_stats.bytes_read - headers,
            uint64_t{whole_stats.blocks_in_use} * opts_.write_block_size);
  EXPECT_LT((summed_stats.bytes_read - headers) * 8, whole_stats.bytes_read - headers);
}

// A summary whose bytes are damaged, or which says something impossible
// under a checksum that holds, is refused by what is wrong with it, and its
// block is read whole: the start ends exactly as one reading every block
// whole. A trailer that does not validate is no summary at all.
TEST_F(BlockSummaryTest, BadSummariesCostOnlyAWholeReadOfTheirBlock) {
  {
    auto store = OpenOrDie(opts_);
    WriteMix(store.get());
    if (HasFatalFailure()) return;
  }
  const auto [whole, whole_stats] = Reopen(false);
  const std::string good = FileBytes(opts_.path);
  std::vector<Summarized> found = SummarizedBlocks(good);
  ASSERT_FALSE(found.empty());
  // A block of two entries or more whose first names no reference (the
  // cases below edit its fixed 44 bytes).
  const uint32_t block_size = opts_.write_block_size;
  auto it = std::find_if(found.begin(), found.end(), [&](const Summarized& s) {
    const char kind = good[s.base + block_size - s.region + 40];
    return s.trailer.count >= 2 && static_cast<RecordKind>(kind) != RecordKind::kPutRef;
  });
  ASSERT_NE(it, found.end());
  const Summarized b = *it;
  const uint32_t bs = opts_.write_block_size;
  const size_t entries_at = b.base + bs - b.region;
  const size_t trailer_at = b.base + bs - kSummaryTrailerSize;
  auto flip = [&](size_t at) {
    std::string f = good;
    f[at] = static_cast<char>(f[at] ^ 0x10);
    return f;
  };
  // The file with this block's trailer (and entries, when given) rewritten
  // and sealed again: checksums that hold.
  auto resealed = [&](SummaryTrailer t, std::string entries = {}) {
    std::string f = good;
    if (!entries.empty()) {
      f.replace(entries_at, entries.size(), entries);
      t.entries_sum = SummaryEntriesChecksum(reinterpret_cast<const uint8_t*>(entries.data()),
                                             entries.size(), b.salt);
    }
    EncodeSummaryTrailer(t, b.salt, reinterpret_cast<uint8_t*>(f.data() + trailer_at));
    return f;
  };
  const std::string entries = good.substr(entries_at, b.trailer.entry_bytes);
  std::string overlapping = entries;  // the second entry at the first one's offset
  std::memcpy(overlapping.data() + SummaryEntryBytes(0) + 24, entries.data() + 24, 4);
  std::string unknown_kind = entries;
  unknown_kind[40] = 9;
  SummaryTrailer other_seq = b.trailer;
  other_seq.seq += 1;
  SummaryTrailer short_records = b.trailer;
  short_records.records_end = kBlockHeaderSize;
  std::string newer = resealed(b.trailer);
  EncodeFixed16(newer.data() + trailer_at + 8, kSummaryVersion + 1);
  EncodeFixed32(newer.data() + trailer_at,
                static_cast<uint32_t>(XXH3_64bits_withSeed(newer.data() + trailer_at + 4,
                                                           kSummaryTrailerSize - 4, b.salt)));
  struct Case {
    std::string name;
    std::string bytes;
    std::string why;  // empty: no summary at all (nothing refused)
  };
  const std::vector<Case> cases = {
      {"an entry byte flipped", flip(entries_at + 20), "entries checksum mismatch"},
      {"a trailer byte flipped", flip(trailer_at + 30), ""},
      {"another block's seq", resealed(other_seq), "block summary of seq"},
      {"a newer summary version", newer, "block summary version 2"},
      {"records ending before its entries", resealed(short_records), "overlaps"},
      {"two entries at one offset", resealed(b.trailer, overlapping), "overlaps"},
      {"an entry of an unknown kind", resealed(b.trailer, unknown_kind), "unknown kind 9"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WriteFile(opts_.path, c.bytes);
    auto store = OpenOrDie(opts_);
    ASSERT_NE(store, nullptr);
    const RecoveryStats& r = store->recovery();
    EXPECT_EQ(r.summaries_refused, c.why.empty() ? 0u : 1u);
    EXPECT_GE(r.blocks_read_whole, 1u);
    EXPECT_EQ(r.blocks_from_summaries + r.blocks_read_whole, r.blocks_in_use);
    const StoreView v = ViewOf(store.get());
    EXPECT_EQ(v.entries, whole.entries);
    EXPECT_EQ(v.live_bytes, whole.live_bytes);
    EXPECT_EQ(v.blocks, whole.blocks);
    EXPECT_EQ(v.sequence, whole.sequence);
    ExpectModel(store.get());
    if (!c.why.empty()) {
      // The reason is in the log line; the count above says it was refused.
      const Result<SummaryTrailer> t = DecodeSummaryTrailer(
          reinterpret_cast<const uint8_t*>(c.bytes.data() + trailer_at), b.salt,
          b.trailer.seq, bs);
      std::string reason(t.status().message());
      if (t.ok()) {
        const Status st = ReadSummaryEntries(
            *t, reinterpret_cast<const uint8_t*>(c.bytes.data() + entries_at), b.salt,
            [](const SummaryEntry&) {});
        reason = std::string(st.message());
      }
      EXPECT_PRED2(Contains, reason, c.why);
    }
  }
  WriteFile(opts_.path, good);
  const auto [again, again_stats] = Reopen(true);
  EXPECT_EQ(again_stats.summaries_refused, 0u);
}

// A block's summary vouches for every record before it, so it must not
// reach the device before every earlier flush of its block did: here the
// block fills and seals while one flush is held, and its summary must wait
// until the held flush lands, then follow.
TEST_F(BlockSummaryTest, ASummaryWaitsForEveryEarlierFlushOfItsBlock) {
  auto device = FaultDevice::Create(32 * 64 * 1024, 21);
  StoreOptions opts = SmallOptions("fault", &clock_);
  opts.block_summaries = true;
  const uint32_t bs = opts.write_block_size;
  // The trailer of the device's first block, as the device holds it now.
  auto first_trailer = [&]() -> Result<SummaryTrailer> {
    std::vector<uint8_t> b = device->ReadImage(bs, bs);
    Result<BlockHeader> h = DecodeBlockHeader(b.data());
    if (!h.ok()) return h.status();
    return DecodeSummaryTrailer(b.data() + bs - kSummaryTrailerSize, h->salt(), h->seq, bs);
  };
  std::map<std::string, std::string> written;
  {
    auto store = OpenOrDie(opts, device);
    auto w = WorkerOrDie(store.get());
    struct Unhold {
      FaultDevice* device;
      ~Unhold() { device->ReleaseHeld(true); }
    } unhold{device.get()};
    ASSERT_TRUE(w->PutSync("before", "ok").ok());
    written["before"] = "ok";
    std::optional<Result<WriteOutcome>> held;
    device->HoldNextWrites(1);
    written["held"] = Body(1, 1, 1000);
    w->Put("held", written["held"], 0, 0,
           [&held](Result<WriteOutcome> r) { held = std::move(r); });
    for (int i = 0; i < 5; ++i) w->Poll();
    // Enough to fill the block and seal it: its later flushes land.
    int done = 0;
    for (int i = 0; i < 30; ++i) {
      written[Key(i)] = Body(i, 2, 3000);
      w->Put(Key(i), written[Key(i)], 0, 0, [&done](Result<WriteOutcome> r) {
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        ++done;
      });
      for (int p = 0; p < 3; ++p) w->Poll();
    }
    for (int i = 0; i < 20; ++i) w->Wait(std::chrono::milliseconds(2));
    EXPECT_FALSE(held.has_value());
    const StoreStats s = store->stats();
    ASSERT_GE(s.blocks_total - s.blocks_free, 2u) << "the first block must have sealed";
    EXPECT_TRUE(first_trailer().status().IsNotFound())
        << "a summary reached the device while a flush before it was out: "
        << first_trailer().status().ToString();
    device->ReleaseHeld(false);
    for (int i = 0; i < 200 && (!held || done < 30); ++i) w->Wait(std::chrono::milliseconds(5));
    ASSERT_TRUE(held.has_value());
    EXPECT_TRUE(held->ok()) << held->status().ToString();
    for (int i = 0; i < 200 && !first_trailer().ok(); ++i) w->Wait(std::chrono::milliseconds(5));
    Result<SummaryTrailer> t = first_trailer();
    ASSERT_TRUE(t.ok()) << "no summary once every flush landed: " << t.status().ToString();
    EXPECT_GE(t->count, 2u);
  }
  opts.block_summaries = true;
  auto store = OpenOrDie(opts, device->Reboot());
  ASSERT_NE(store, nullptr);
  EXPECT_GT(store->recovery().blocks_from_summaries, 0u);
  auto w = WorkerOrDie(store.get());
  for (const auto& [key, body] : written) {
    auto r = w->GetSync(key);
    ASSERT_TRUE(r.ok()) << key << ": " << r.status().ToString();
    EXPECT_EQ(r->body(), body) << key;
  }
  EXPECT_EQ(store->stats().corruptions, 0u);
}

}  // namespace
}  // namespace segstore::storage
