// References (Mutation::reference, RecordKind::kPutRef): a record naming
// another key, known to the index so a get reads both in one round trip. A
// reference must be exactly what the newest version of its key says, through
// every path that writes, moves or rebuilds an index entry: updates, deletes,
// defragmentation, the index sweep, recovery.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <string>

#include "storage/format.h"
#include "storage/test_util.h"

namespace segstore::storage {
namespace {

using testing::OpenOrDie;
using testing::SmallOptions;
using testing::TempDir;
using testing::WorkerOrDie;

class ReferenceTest : public ::testing::Test {
 protected:
  TempDir dir_;
  ManualClock clock_{1'700'000'000};
  StoreOptions opts_ = SmallOptions(dir_.File("data"), &clock_);
};

// Writes `body` under `key`, naming `reference` (nullopt: keep the current
// version's; empty: none).
Result<WriteOutcome> Write(Worker* w, const std::string& key, const std::string& body,
                           std::optional<std::string> reference, uint32_t void_at = 0) {
  return w->UpdateSync(key, [&](const Record*) -> Result<Mutation> {
    Mutation m = Mutation::Put(body, 0, void_at);
    m.reference = reference;
    return m;
  });
}

// What GetWithReference answers, as text: "body>referenced-body",
// "body>-" when it names none, "absent" when the key is absent.
std::string Pair(Worker* w, const std::string& key) {
  auto [record, referenced] = w->GetWithReferenceSync(key);
  if (record.status().IsNotFound()) return "absent";
  EXPECT_TRUE(record.ok()) << record.status().ToString();
  if (!record.ok()) return "error";
  std::string out(record->body());
  out += ">";
  if (record->reference().empty()) {
    EXPECT_TRUE(referenced.status().IsNotFound()) << referenced.status().ToString();
    return out + "-";
  }
  if (referenced.status().IsNotFound()) return out + "absent";
  EXPECT_TRUE(referenced.ok()) << referenced.status().ToString();
  if (!referenced.ok()) return out + "error";
  EXPECT_EQ(referenced->key(), record->reference());
  return out + std::string(referenced->body());
}

TEST_F(ReferenceTest, AGetReadsTheReferencedRecordWithTheKeysOwn) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(Write(w.get(), "master", "M", "").ok());
  ASSERT_TRUE(Write(w.get(), "member", "m", "master").ok());
  ASSERT_TRUE(Write(w.get(), "plain", "p", std::nullopt).ok());
  ASSERT_TRUE(Write(w.get(), "orphan", "o", "nobody").ok());

  EXPECT_EQ(Pair(w.get(), "member"), "m>M");
  EXPECT_EQ(Pair(w.get(), "master"), "M>-");
  EXPECT_EQ(Pair(w.get(), "plain"), "p>-");
  EXPECT_EQ(Pair(w.get(), "orphan"), "o>absent");
  EXPECT_EQ(Pair(w.get(), "nobody"), "absent");
  Result<Record> member = w->GetSync("member");
  ASSERT_TRUE(member.ok());
  EXPECT_EQ(member->reference(), "master");
  EXPECT_EQ(member->body(), "m");  // the reference is not part of the body

  // Bad keys fail as Get fails, and say so for both.
  auto [bad, bad_ref] = w->GetWithReferenceSync("");
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(bad_ref.status().IsNotFound());

  StoreStats stats = store->stats();
  EXPECT_EQ(stats.index_references, 2u);
  EXPECT_GT(stats.index_reference_bytes, 0u);
}

// Profile bridging's cost goal for a user in no group: a key that names
// none costs GetWithReference exactly what Get costs, one device read (the
// index entry's linked bit says there is nothing more to read); a key that
// names one costs two reads, issued together.
TEST_F(ReferenceTest, AKeyNamingNoneCostsOneDeviceReadAsGetDoes) {
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    ASSERT_TRUE(Write(w.get(), "master", "M", "").ok());
    ASSERT_TRUE(Write(w.get(), "member", "m", "master").ok());
    ASSERT_TRUE(Write(w.get(), "plain", "p", std::nullopt).ok());
  }
  // Reopened: no write block in memory, every read goes to the device.
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  auto reads_of = [&](auto read) {
    const uint64_t before = store->stats().device_reads;
    read();
    return store->stats().device_reads - before;
  };
  EXPECT_EQ(reads_of([&] { EXPECT_TRUE(w->GetSync("plain").ok()); }), 1u);
  EXPECT_EQ(reads_of([&] { EXPECT_EQ(Pair(w.get(), "plain"), "p>-"); }), 1u);
  EXPECT_EQ(reads_of([&] { EXPECT_EQ(Pair(w.get(), "master"), "M>-"); }), 1u);
  EXPECT_EQ(reads_of([&] { EXPECT_EQ(Pair(w.get(), "member"), "m>M"); }), 2u);
  EXPECT_EQ(reads_of([&] { EXPECT_EQ(Pair(w.get(), "nobody"), "absent"); }), 0u);
}

TEST_F(ReferenceTest, UpdatesKeepTheReferenceUnlessTheyChangeIt) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(Write(w.get(), "a", "A", "").ok());
  ASSERT_TRUE(Write(w.get(), "b", "B", "").ok());
  ASSERT_TRUE(Write(w.get(), "m", "1", "a").ok());
  ASSERT_TRUE(Write(w.get(), "m", "2", std::nullopt).ok());  // kept
  EXPECT_EQ(Pair(w.get(), "m"), "2>A");
  ASSERT_TRUE(Write(w.get(), "m", "3", "b").ok());  // changed
  EXPECT_EQ(Pair(w.get(), "m"), "3>B");
  ASSERT_TRUE(Write(w.get(), "m", "4", "").ok());  // dropped
  EXPECT_EQ(Pair(w.get(), "m"), "4>-");
  EXPECT_EQ(store->stats().index_references, 0u);
  ASSERT_TRUE(Write(w.get(), "m", "5", "a").ok());
  ASSERT_TRUE(w->PutSync("m", "6").ok());  // Put writes a whole new version: no reference
  EXPECT_EQ(Pair(w.get(), "m"), "6>-");
  ASSERT_TRUE(Write(w.get(), "m", "7", "a").ok());
  ASSERT_TRUE(w->DeleteSync("m").ok());
  EXPECT_EQ(Pair(w.get(), "m"), "absent");
  EXPECT_EQ(store->stats().index_references, 0u);
  // A new key after a delete names nothing until told to.
  ASSERT_TRUE(Write(w.get(), "m", "8", std::nullopt).ok());
  EXPECT_EQ(Pair(w.get(), "m"), "8>-");

  // A reference longer than a key could be is refused before anything is written.
  Result<WriteOutcome> too_long =
      Write(w.get(), "m", "9", std::string(opts_.max_key_size + 1, 'x'));
  EXPECT_EQ(too_long.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Pair(w.get(), "m"), "8>-");
  // An empty body with a reference is a record like any other.
  ASSERT_TRUE(Write(w.get(), "e", "", "a").ok());
  EXPECT_EQ(Pair(w.get(), "e"), ">A");
}

TEST_F(ReferenceTest, ExpiryDropsTheReferenceWithTheRecord) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  ASSERT_TRUE(Write(w.get(), "a", "A", "").ok());
  ASSERT_TRUE(Write(w.get(), "m", "1", "a", clock_.Now() + 10).ok());
  EXPECT_EQ(store->stats().index_references, 1u);
  clock_.Advance(11);
  EXPECT_EQ(Pair(w.get(), "m"), "absent");
  // The index sweep turns it into a tombstone unread: the reference goes too.
  ASSERT_TRUE(store->DefragNow(false).ok());
  EXPECT_EQ(store->stats().index_references, 0u);
}

// The model: key -> (body, reference) of its newest version, or absent.
struct Model {
  std::map<std::string, std::pair<std::string, std::string>> live;
  void Check(Worker* w, Store* store, const std::string& when) {
    uint64_t references = 0;
    for (int i = 0; i < 60; ++i) {
      const std::string key = "k" + std::to_string(i);
      auto it = live.find(key);
      auto [record, referenced] = w->GetWithReferenceSync(key);
      if (it == live.end()) {
        ASSERT_TRUE(record.status().IsNotFound()) << key << " " << when;
        continue;
      }
      ASSERT_TRUE(record.ok()) << key << " " << when << ": " << record.status().ToString();
      ASSERT_EQ(record->body(), it->second.first) << key << " " << when;
      ASSERT_EQ(record->reference(), it->second.second) << key << " " << when;
      if (it->second.second.empty()) continue;
      ++references;
      auto target = live.find(it->second.second);
      if (target == live.end()) {
        ASSERT_TRUE(referenced.status().IsNotFound()) << key << " " << when;
      } else {
        ASSERT_TRUE(referenced.ok()) << key << " " << when;
        ASSERT_EQ(referenced->body(), target->second.first) << key << " " << when;
      }
    }
    ASSERT_EQ(store->stats().index_references, references) << when;
  }
};

// Random writes, reference changes and deletes, checked against the model
// after each step of defragmentation (rotation rewrites every block) and
// after every restart: the index's references are always the newest
// versions' (an unlinked or deleted key never gets its old reference back).
TEST_F(ReferenceTest, DefragmentationAndRestartsKeepExactlyTheNewestReferences) {
  std::mt19937 rng(26112026);
  Model model;
  for (int round = 0; round < 6; ++round) {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    model.Check(w.get(), store.get(), "after restart " + std::to_string(round));
    for (int op = 0; op < 400; ++op) {
      const std::string key = "k" + std::to_string(rng() % 60);
      const int what = static_cast<int>(rng() % 10);
      if (what == 0) {
        ASSERT_TRUE(w->DeleteSync(key).ok());
        model.live.erase(key);
        continue;
      }
      const std::string body = "b" + std::to_string(round) + "." + std::to_string(op);
      std::optional<std::string> ref;
      if (what < 4)
        ref = "k" + std::to_string(rng() % 60);  // may name itself: storage does not care
      if (what == 4) ref = "";
      ASSERT_TRUE(Write(w.get(), key, body, ref).ok());
      std::string& kept = model.live[key].second;
      if (ref) kept = *ref;
      model.live[key].first = body;
    }
    model.Check(w.get(), store.get(), "written, round " + std::to_string(round));
    if (round % 2 == 0) {
      ASSERT_TRUE(w->FlushSync().ok());
      for (int i = 0; i < 8; ++i) ASSERT_TRUE(store->DefragNow(/*rotate=*/true).ok());
      model.Check(w.get(), store.get(), "defragmented, round " + std::to_string(round));
    }
  }
}

}  // namespace
}  // namespace segstore::storage
