// Bootstrapping a partition on a real engine and an in-memory log
// (tests/support/memory_log.h): copy_partition's pages as a node serves them
// (ReadPartitionPage), a copy made by hand and followed from its offset
// (Applier::Follow) whether it is ahead of or behind the node's own place in
// the log, a follow the log can no longer serve or that is called off, and
// the Bootstrapper end to end against an in-process source.
#include "replica/bootstrap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "proto/wire.h"
#include "replica/checkpoint.h"
#include "replica/entry.h"
#include "replica_test_util.h"
#include "segstore/cluster_map.h"
#include "segstore/messages.h"
#include "segstore/routing.h"
#include "segstore/storage.h"
#include "support/memory_log.h"

namespace segstore::replica {
namespace {

// One page of `partition` from `cursor`, read on `worker` driven from this
// thread until the callback ran (bounded). `*ran_inside`: whether it ran
// inside the call (it must not).
Result<CopyPartitionResponse> ReadPage(storage::Store& store, storage::Worker& worker,
                                       uint32_t partition, uint64_t cursor, uint32_t max_bytes,
                                       bool* ran_inside = nullptr) {
  auto got = std::make_shared<std::optional<Result<CopyPartitionResponse>>>();
  ReadPartitionPage(store, nullptr, worker, partition, cursor, max_bytes,
                    [got](Result<CopyPartitionResponse> r) { got->emplace(std::move(r)); });
  if (ran_inside != nullptr) *ran_inside = got->has_value();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!got->has_value()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Timeout("ReadPartitionPage did not answer within 10 s");
    }
    worker.Wait(10ms);
  }
  return std::move(**got);
}

// Writes `records` into `worker`'s store as the bootstrapper does (as
// stored: body, sweep_at and void_at), and flushes.
Status PutCopied(storage::Worker& worker, const std::vector<CopiedRecord>& records) {
  struct State {
    size_t pending = 0;
    Status failure;
  };
  auto state = std::make_shared<State>();
  for (const CopiedRecord& r : records) {
    ++state->pending;
    worker.Put(r.key, r.body, r.sweep_at, r.void_at, [state](Result<storage::WriteOutcome> w) {
      if (!w.ok() && state->failure.ok()) state->failure = w.status();
      --state->pending;
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (state->pending > 0) {
    if (std::chrono::steady_clock::now() > deadline) return Status::Timeout("puts not done");
    worker.Wait(10ms);
  }
  if (!state->failure.ok()) return state->failure;
  return worker.FlushSync();
}

// A user-visible comparison of `user` on two nodes: both absent, or the same
// segments, and the same record as stored (body, log position included, and
// expiry fields).
void ExpectSameUser(Node& a, Node& b, const std::string& user) {
  SCOPED_TRACE("user " + user);
  Result<GetResult> ga = a.Get(user);
  Result<GetResult> gb = b.Get(user);
  ASSERT_EQ(ga.ok(), gb.ok()) << ga.status().ToString() << " / " << gb.status().ToString();
  if (ga.ok()) {
    EXPECT_EQ(ga->ids, gb->ids);
    EXPECT_EQ(ga->expires, gb->expires);
    EXPECT_EQ(ga->attr1, gb->attr1);
    EXPECT_EQ(ga->attr2, gb->attr2);
  } else {
    EXPECT_EQ(ga.status().code(), gb.status().code());
  }
  Result<storage::Record> ra = a.Raw(user);
  Result<storage::Record> rb = b.Raw(user);
  ASSERT_EQ(ra.ok(), rb.ok()) << ra.status().ToString() << " / " << rb.status().ToString();
  if (ra.ok()) {
    EXPECT_EQ(ra->body(), rb->body());
    EXPECT_EQ(ra->sweep_at(), rb->sweep_at());
    EXPECT_EQ(ra->void_at(), rb->void_at());
  }
}

// A hash tag whose partition is in log partition `l` and none of `not_in`.
std::string TagInLogPartition(uint32_t l, const std::set<uint32_t>& not_in) {
  for (int i = 0;; ++i) {
    std::string tag = "{o" + std::to_string(i) + "}";
    const uint32_t p = PartitionOf(tag);
    if (LogPartitionOf(p, kLogPartitions) == l && not_in.count(p) == 0) return tag;
  }
}

// What a Follow answered, waited on from the test's thread.
class FollowDone {
 public:
  std::function<void(Status)> Callback() {
    return [this](Status s) {
      std::lock_guard lock(mu_);
      ++calls_;
      status_ = std::move(s);
    };
  }
  bool Wait() {
    return WaitFor([&] { return calls() > 0; }, 20s);
  }
  int calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  Status status() {
    std::lock_guard lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  int calls_ = 0;
  Status status_;
};

bool Lists(const std::vector<uint16_t>& partitions, uint32_t p) {
  return std::find(partitions.begin(), partitions.end(), static_cast<uint16_t>(p)) !=
         partitions.end();
}

// ---- ReadPartitionPage ----

class ReadPartitionPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions so;
    so.path = dir_.File("store");
    so.file_size = 64u << 20;
    so.write_block_size = 256u << 10;
    so.clock = &clock_;
    auto s = storage::Store::Open(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    auto w = store_->NewWorker();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    worker_ = std::move(*w);
  }
  void TearDown() override {
    worker_.reset();
    store_.reset();
  }

  void Put(const std::string& key, std::string body, UnixSeconds sweep_at = 0,
           UnixSeconds void_at = 0, std::string reference = {}) {
    if (reference.empty()) {
      ASSERT_TRUE(worker_->PutSync(key, body, sweep_at, void_at).ok()) << key;
      return;
    }
    storage::Mutation m = storage::Mutation::Put(std::move(body), sweep_at, void_at);
    m.reference = std::move(reference);
    auto r = worker_->UpdateSync(
        key, [&](const storage::Record*) -> Result<storage::Mutation> { return m; });
    ASSERT_TRUE(r.ok()) << key << ": " << r.status().ToString();
  }

  TempDir dir_;
  ManualClock clock_{kStart};
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<storage::Worker> worker_;
};

// Pages a partition through with `max_bytes`; every record sent, by key
// (none twice), and each page as it came. Fails the test on an error, a
// page that is empty but not the last, or a cursor that does not advance.
std::vector<CopyPartitionResponse> ReadAllPages(storage::Store& store, storage::Worker& worker,
                                                uint32_t p, uint32_t max_bytes,
                                                std::map<std::string, CopiedRecord>* got) {
  std::vector<CopyPartitionResponse> pages;
  uint64_t cursor = 0;
  for (;;) {
    if (pages.size() > 10000) {
      ADD_FAILURE() << "the cursor never finished";
      return pages;
    }
    bool inside = true;
    Result<CopyPartitionResponse> page = ReadPage(store, worker, p, cursor, max_bytes, &inside);
    if (!page.ok()) {
      ADD_FAILURE() << page.status().ToString();
      return pages;
    }
    EXPECT_FALSE(inside) << "done ran inside ReadPartitionPage";
    SCOPED_TRACE("page " + std::to_string(pages.size()) + " from cursor " + std::to_string(cursor));
    // Only the last page may be empty.
    if (!page->finished()) {
      EXPECT_FALSE(page->records.empty());
      EXPECT_GT(page->cursor, cursor);
      EXPECT_LT(page->cursor, kCopyFinished);
    }
    for (const CopiedRecord& r : page->records) {
      EXPECT_FALSE(IsReservedKey(r.key)) << "a reserved key was sent";
      EXPECT_EQ(PartitionOf(r.key), p) << r.key;
      EXPECT_TRUE(got->emplace(r.key, r).second) << r.key << " sent twice";
    }
    pages.push_back(std::move(*page));
    if (pages.back().finished()) return pages;
    cursor = pages.back().cursor;
  }
}

// The bytes `page` takes in its answer's body at most (wire.h).
size_t PageBytes(const CopyPartitionResponse& page) {
  size_t bytes = proto::kCopyPageOverhead;
  for (const CopiedRecord& r : page.records) bytes += proto::CopiedRecordBytes(r);
  return bytes;
}

std::string Describe(const CopyPartitionResponse& page) {
  std::string s = std::to_string(page.records.size()) + " records, " +
                  std::to_string(PageBytes(page)) + " bytes:";
  for (const CopiedRecord& r : page.records) {
    s += " " + r.key + " (" + std::to_string(proto::CopiedRecordBytes(r)) + ")";
  }
  return s;
}

TEST_F(ReadPartitionPageTest, PagesSendEveryRecordOnceAndNoReservedKey) {
  const uint32_t p = PartitionOf("{page}");
  std::map<std::string, CopiedRecord> want;
  for (int i = 0; i < 60; ++i) {
    CopiedRecord r;
    r.key = "{page}." + std::to_string(i);
    r.body = std::string(10 + (i * 37) % 150, static_cast<char>('a' + i % 26));
    r.sweep_at = i % 3 == 0 ? 0 : kStart + 100 + i;
    r.void_at = i % 4 == 0 ? 0 : kStart + 10000 + i;
    // Some name a master (linked profiles): the copy carries it.
    if (i % 5 == 0) r.reference = "master-" + std::to_string(i);
    Put(r.key, r.body, r.sweep_at, r.void_at, r.reference);
    want[r.key] = r;
  }
  // Larger than a page.
  CopiedRecord big{"{page}.big", std::string(3000, 'B'), 0, kStart + 50000};
  Put(big.key, big.body, big.sweep_at, big.void_at);
  want[big.key] = big;
  // The node's own keys in this partition (an FF 00 key's hash tag picks
  // its partition): never sent. Some of them large, so that a page's
  // listing can hold nothing but them.
  for (int i = 0; i < 30; ++i) {
    std::string key = std::string(kReservedPrefix) + "{page}.r" + std::to_string(i);
    ASSERT_EQ(PartitionOf(key), p);
    Put(key, std::string(i % 2 == 0 ? 500 : 20, 'R'));
  }
  // Deleted: not sent. Other partitions: not sent.
  Put("{page}.gone", "x");
  ASSERT_TRUE(worker_->DeleteSync("{page}.gone").ok());
  for (int i = 0; i < 20; ++i) Put("{elsewhere}." + std::to_string(i), "y");
  ASSERT_NE(PartitionOf("{elsewhere}"), p);
  ASSERT_TRUE(worker_->FlushSync().ok());

  std::map<std::string, CopiedRecord> got;
  std::vector<CopyPartitionResponse> pages = ReadAllPages(*store_, *worker_, p, 400, &got);
  ASSERT_FALSE(pages.empty());
  EXPECT_TRUE(pages.back().finished());
  EXPECT_GT(pages.size(), 10u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, r] : want) {
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << key << " never sent";
    EXPECT_EQ(it->second, r) << key;
  }
  // Each page's size: PagesStayWithinMaxBytes.
}

// A listing step of Store::ListPartition is every record of an index home
// slot, often two or three at the index's load; pages are cut at tag
// boundaries within a step (RecordRef::tag), so a page's body stays within
// max_bytes except for a single larger record, which comes alone
// (PROTOCOL.md, "copy_partition").
TEST_F(ReadPartitionPageTest, PagesStayWithinMaxBytesAndALargerRecordComesAlone) {
  constexpr uint32_t kMaxBytes = 300;
  const uint32_t p = PartitionOf("{budget}");
  // 80 records of about 170 bytes in a page (two of them and the page's
  // overhead exceed 300) and 40 larger than a page: with 120 records in the
  // partition's index, some home slots hold several.
  for (int i = 0; i < 120; ++i) {
    Put("{budget}." + std::to_string(i), std::string(i < 80 ? 150 : 1000, 'v'), 0, kStart + 10000);
  }
  ASSERT_TRUE(worker_->FlushSync().ok());
  std::map<std::string, CopiedRecord> got;
  std::vector<CopyPartitionResponse> pages = ReadAllPages(*store_, *worker_, p, kMaxBytes, &got);
  EXPECT_EQ(got.size(), 120u);
  int over = 0;
  std::string first_over;
  for (const CopyPartitionResponse& page : pages) {
    if (page.records.size() > 1 && PageBytes(page) > kMaxBytes) {
      if (over++ == 0) first_over = Describe(page);
    }
  }
  EXPECT_EQ(over, 0) << over << " of " << pages.size() << " pages hold several records and more "
                     << "than max_bytes (" << kMaxBytes << "); the first: " << first_over;
}

TEST_F(ReadPartitionPageTest, APartitionOfReservedKeysOnlyIsOneEmptyLastPage) {
  // A checkpoint record is all its partition holds.
  const std::string key = CheckpointKey(3);
  const uint32_t p = PartitionOf(key);
  Put(key, EncodeCheckpoint(Checkpoint{10, 0, {}}));
  std::string tag;
  for (int i = 0;; ++i) {
    tag = "t" + std::to_string(i);
    if (PartitionOf(tag) == p) break;
  }
  // More of the node's own keys there (crafted to land there: the hash tag
  // of an FF 00 key picks its partition), so the page reads on past several
  // listings of nothing to send.
  for (int i = 0; i < 20; ++i) {
    std::string k = std::string(kReservedPrefix) + "{" + tag + "}." + std::to_string(i);
    ASSERT_EQ(PartitionOf(k), p);
    Put(k, std::string(300, 'R'));
  }
  ASSERT_TRUE(worker_->FlushSync().ok());
  Result<CopyPartitionResponse> page = ReadPage(*store_, *worker_, p, 0, 400);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(page->records.empty());
  EXPECT_EQ(page->cursor, kCopyFinished);
  EXPECT_TRUE(page->finished());

  // A partition with nothing at all: the same.
  const uint32_t empty = (p + 1) % kPartitions;
  page = ReadPage(*store_, *worker_, empty, 0, 400);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(page->records.empty());
  EXPECT_TRUE(page->finished());
}

// ---- Applier::Follow, with a copy made by hand ----

class FollowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_ = PartitionOf("{copy}");
    l_ = LogPartitionOf(p_, kLogPartitions);
    q_tag_ = TagInLogPartition(l_, {p_});
    q_ = PartitionOf(q_tag_);
    r_tag_ = TagInLogPartition(l_, {p_, q_});
  }

  static std::string U(int i) { return "{copy}." + std::to_string(i); }

  // Opens `a` (the log's reader 0) and `b` (reader 1), `b` holding only q_
  // (a partition of l_ other than p_), and waits until both caught up.
  void OpenPair(Node& a, Node& b) {
    b.board().Publish(ViewHolding({q_}));
    a.Open();
    b.Open();
    ASSERT_TRUE(WaitFor([&] { return a.replicator().caught_up() && b.replicator().caught_up(); }));
  }

  // OpenPair, then five writes of U(1) through `a` (a set, then four adds:
  // offsets 0 to 4 of l_), passed by `b`.
  void OpenPairWithFiveWrites(Node& a, Node& b) {
    ASSERT_NO_FATAL_FAILURE(OpenPair(a, b));
    ASSERT_TRUE(a.Upsert(U(1), {Ttl(1, 3600)}).status.ok());
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(a.Upsert(U(1), {Ttl(1, 10)}, UpsertMode::kAdd).status.ok());
    }
    ASSERT_TRUE(Passed(b));
  }

  // Waits until `n` has applied (or passed) every entry of log partition l_.
  bool Passed(Node& n) {
    return WaitFor([&] { return n.applier().AppliedNext(l_) == log_->End(l_); }, 20s);
  }
  // Waits until `n`'s stats show every entry of l_ passed (its stats are a
  // snapshot taken ten times a second: this one is from after them).
  ApplierStats FreshStats(Node& n) {
    EXPECT_TRUE(WaitFor([&] { return n.Stats().lanes[l_].next == log_->End(l_); }, 20s));
    return n.Stats();
  }

  // Copies partition p_ from `from` into `to`'s store, page by page, as a
  // bootstrapper does (every record as stored); how many records.
  size_t CopyByHand(Node& from, Node& to, uint32_t page_bytes = 256) {
    auto session = from.profiles().NewSession();
    EXPECT_TRUE(session.ok());
    auto to_worker = to.store().NewWorker();
    EXPECT_TRUE(to_worker.ok());
    size_t records = 0;
    uint64_t cursor = 0;
    for (int pages = 0; pages < 10000; ++pages) {
      Result<CopyPartitionResponse> page =
          ReadPage(from.store(), (*session)->worker(), p_, cursor, page_bytes);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok()) return records;
      Status s = PutCopied(**to_worker, page->records);
      EXPECT_TRUE(s.ok()) << s.ToString();
      records += page->records.size();
      if (page->finished()) return records;
      cursor = page->cursor;
    }
    ADD_FAILURE() << "the copy never finished";
    return records;
  }

  // Writes of partition p_ before the copy's offset: sets, an add and its
  // retry (one write ID, applied once), a user made and deleted, and a write
  // of another partition of the same log partition.
  void WriteHistory(Node& a) {
    ASSERT_TRUE(a.Upsert(U(1), {Ttl(1, 3600), Ttl(2, 7200)}).status.ok());
    ASSERT_TRUE(a.Upsert(U(2), {Ttl(5, 600)}).status.ok());
    WriteAnswer first = a.Upsert(U(1), {Ttl(1, 100)}, UpsertMode::kAdd, Id(1));
    ASSERT_TRUE(first.status.ok());
    EXPECT_FALSE(first.duplicate);
    WriteAnswer again = a.Upsert(U(1), {Ttl(1, 100)}, UpsertMode::kAdd, Id(1));
    ASSERT_TRUE(again.status.ok());
    EXPECT_TRUE(again.duplicate);
    ASSERT_TRUE(a.Upsert(U(3), {Ttl(9, 3600)}).status.ok());
    ASSERT_TRUE(a.Write(proto::DeleteRequest{U(3), {}}).status.ok());
    ASSERT_TRUE(a.Upsert(q_tag_ + ".1", {Ttl(1, 3600)}).status.ok());
    ASSERT_TRUE(a.Upsert(U(4), {Ttl(7, 3600)}).status.ok());
  }

  void ExpectSameUsers(Node& a, Node& b, int users) {
    for (int i = 1; i <= users; ++i) ExpectSameUser(a, b, U(i));
  }

  TempDir dir_;
  std::shared_ptr<testing::MemoryLog> log_ = testing::MemoryLog::Make(kLogPartitions);
  uint32_t p_ = 0;     // the partition copied
  uint32_t l_ = 0;     // its log partition
  std::string q_tag_;  // a partition of l_ the second node holds
  uint32_t q_ = 0;
  std::string r_tag_;  // a partition of l_ neither copied nor held there
};

TEST_F(FollowTest, ACopyAheadOfTheNodeSkipsTheEntriesItHoldsAndAppliesTheRest) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  ASSERT_NO_FATAL_FAILURE(OpenPair(a, b));
  log_->HoldReads(1, true);  // b falls behind
  WriteHistory(a);
  ASSERT_TRUE(Passed(a));
  const int64_t next = a.applier().AppliedNext(l_);  // before the first page
  ASSERT_EQ(next, 8);
  ASSERT_EQ(b.applier().AppliedNext(l_), 0);
  EXPECT_EQ(CopyByHand(a, b), 3u);  // users 1, 2 and 4
  ASSERT_TRUE(b.Get(U(1)).ok());    // the copy is readable before the follow

  FollowDone done;
  b.applier().Follow(p_, next, done.Callback());
  ASSERT_TRUE(WaitFor([&] { return Lists(b.applier().following(), p_); }));
  // After the copy's offset: an add and its retry, a new user.
  ASSERT_TRUE(a.Upsert(U(2), {Ttl(5, 60)}, UpsertMode::kAdd, Id(2)).status.ok());
  EXPECT_TRUE(a.Upsert(U(2), {Ttl(5, 60)}, UpsertMode::kAdd, Id(2)).duplicate);
  ASSERT_TRUE(a.Upsert(U(5), {Ttl(11, 3600)}).status.ok());
  EXPECT_EQ(done.calls(), 0);  // b is held before the copy's offset: not done
  log_->HoldReads(1, false);
  ASSERT_TRUE(done.Wait());
  EXPECT_TRUE(done.status().ok()) << done.status().ToString();
  EXPECT_EQ(done.calls(), 1);

  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 5);
  EXPECT_TRUE(b.Get(U(3)).status().IsNotFound());
  Result<GetResult> u2 = b.Get(U(2));
  ASSERT_TRUE(u2.ok());
  EXPECT_EQ(u2->expires, std::vector<UnixSeconds>{kStart + 660});  // the add once
  Result<GetResult> u1 = b.Get(U(1));
  ASSERT_TRUE(u1.ok());
  EXPECT_EQ(u1->expires, (std::vector<UnixSeconds>{kStart + 3700, kStart + 7200}));

  // Writes after the follow reach b too.
  ASSERT_TRUE(a.Upsert(U(1), {Ttl(2, 10)}, UpsertMode::kAdd).status.ok());
  ASSERT_TRUE(a.Upsert(U(6), {Ttl(3, 3600)}).status.ok());
  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 6);
  EXPECT_TRUE(Lists(b.applier().following(), p_));

  const ApplierStats s = FreshStats(b);
  EXPECT_EQ(s.rewinds, 0u);  // ahead: nothing read again
  EXPECT_EQ(s.replays, 0u);
  EXPECT_EQ(s.not_held, 7u);    // p_'s entries before the offset (the retry among them)
  EXPECT_EQ(s.duplicates, 1u);  // the retry after it
  EXPECT_EQ(s.applied, 5u);     // q's write; u2's add, u5; u1's add, u6
}

TEST_F(FollowTest, ACopyBehindTheNodeIsCaughtUpByReadingItsLogPartitionAgain) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  ASSERT_NO_FATAL_FAILURE(OpenPair(a, b));
  WriteHistory(a);
  ASSERT_TRUE(Passed(a));
  const int64_t next = a.applier().AppliedNext(l_);  // before the first page
  ASSERT_EQ(next, 8);
  // After the offset, before the copy is read: in the copy, and read again
  // by b. u2's add must not be applied twice (its record holds its
  // position); the retry of u1's add (first written before the offset) is
  // judged a duplicate.
  ASSERT_TRUE(a.Upsert(U(2), {Ttl(5, 60)}, UpsertMode::kAdd, Id(2)).status.ok());
  EXPECT_TRUE(a.Upsert(U(1), {Ttl(1, 100)}, UpsertMode::kAdd, Id(1)).duplicate);
  ASSERT_TRUE(Passed(a));
  EXPECT_EQ(CopyByHand(a, b), 3u);
  // After the copy, before the follow: only reading the log again brings
  // these to b. u4's add (and not its retry), a new user, and entries of
  // other partitions of the log partition.
  ASSERT_TRUE(a.Upsert(U(4), {Ttl(7, 50)}, UpsertMode::kAdd, Id(3)).status.ok());
  EXPECT_TRUE(a.Upsert(U(4), {Ttl(7, 50)}, UpsertMode::kAdd, Id(3)).duplicate);
  ASSERT_TRUE(a.Upsert(U(5), {Ttl(11, 3600)}).status.ok());
  ASSERT_TRUE(a.Upsert(q_tag_ + ".1", {Ttl(2, 3600)}, UpsertMode::kAdd).status.ok());
  ASSERT_TRUE(a.Upsert(r_tag_ + ".1", {Ttl(2, 3600)}).status.ok());
  ASSERT_TRUE(Passed(b));
  ASSERT_GT(b.applier().AppliedNext(l_), next);  // b is past the copy's offset
  EXPECT_TRUE(b.Get(U(4)).ok());
  EXPECT_EQ(b.Get(U(4))->expires, std::vector<UnixSeconds>{kStart + 3600});  // as copied
  EXPECT_TRUE(b.Get(U(5)).status().IsNotFound());
  const ApplierStats before = FreshStats(b);

  FollowDone done;
  b.applier().Follow(p_, next, done.Callback());
  ASSERT_TRUE(done.Wait());
  EXPECT_TRUE(done.status().ok()) << done.status().ToString();
  EXPECT_TRUE(Lists(b.applier().following(), p_));

  ExpectSameUsers(a, b, 5);
  EXPECT_TRUE(b.Get(U(3)).status().IsNotFound());
  Result<GetResult> u2 = b.Get(U(2));
  ASSERT_TRUE(u2.ok());
  EXPECT_EQ(u2->expires, std::vector<UnixSeconds>{kStart + 660});  // the add once
  Result<GetResult> u4 = b.Get(U(4));
  ASSERT_TRUE(u4.ok());
  EXPECT_EQ(u4->expires, std::vector<UnixSeconds>{kStart + 3650});  // the add once
  Result<GetResult> u1 = b.Get(U(1));
  ASSERT_TRUE(u1.ok());
  EXPECT_EQ(u1->expires, (std::vector<UnixSeconds>{kStart + 3700, kStart + 7200}));
  Result<GetResult> q1 = b.Get(q_tag_ + ".1");
  ASSERT_TRUE(q1.ok());
  EXPECT_EQ(q1->ids, (std::vector<uint64_t>{1, 2}));  // q's entries not applied again
  EXPECT_EQ(q1->expires, (std::vector<UnixSeconds>{kStart + 3600, kStart + 3600}));
  EXPECT_TRUE(b.Get(r_tag_ + ".1").status().IsNotFound());

  // Read again once: u2's add (found in the copy), u4's add and u5; the two
  // retries stay unapplied, the other partitions' entries untouched.
  ASSERT_TRUE(WaitFor([&] { return b.Stats().replays >= before.replays + 3; }));
  ApplierStats after = FreshStats(b);
  EXPECT_EQ(after.rewinds, before.rewinds + 1);
  EXPECT_EQ(after.replays, before.replays + 3);
  EXPECT_EQ(after.applied, before.applied);
  EXPECT_EQ(after.duplicates, before.duplicates);

  // Writes after the follow reach b too.
  ASSERT_TRUE(a.Upsert(U(4), {Ttl(7, 5)}, UpsertMode::kAdd).status.ok());
  ASSERT_TRUE(a.Upsert(U(6), {Ttl(3, 3600)}).status.ok());
  ASSERT_TRUE(a.Write(proto::DeleteRequest{U(5), {}}).status.ok());
  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 6);
  EXPECT_TRUE(b.Get(U(5)).status().IsNotFound());
  after = FreshStats(b);
  EXPECT_EQ(after.applied, before.applied + 3);
  EXPECT_EQ(after.rewinds, before.rewinds + 1);
}

TEST_F(FollowTest, AFollowFromAnOffsetTheLogNoLongerHoldsAnswersNotFound) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  ASSERT_NO_FATAL_FAILURE(OpenPairWithFiveWrites(a, b));
  log_->DropBefore(l_, 3);  // retention passed offsets 0 to 2
  FollowDone done;
  b.applier().Follow(p_, 1, done.Callback());
  ASSERT_TRUE(done.Wait());
  EXPECT_EQ(done.status().code(), Status::Code::kNotFound) << done.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return !Lists(b.applier().following(), p_); }));
  // Nothing of it was applied, then or after.
  ASSERT_TRUE(a.Upsert(U(1), {Ttl(1, 10)}, UpsertMode::kAdd).status.ok());
  ASSERT_TRUE(Passed(b));
  EXPECT_TRUE(b.Get(U(1)).status().IsNotFound());
  EXPECT_EQ(done.calls(), 1);
}

// When the log holds nothing at all from `from` on (its retention passed
// every entry of the log partition: start == end), no entry comes to show
// the gap: the applier reads it from the reader's positions (the log's
// start) instead, so the follow is answered without waiting for a write.
TEST_F(FollowTest, AFollowFromAnOffsetTheLogNoLongerHoldsAnswersNotFoundOnAQuietLogPartition) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  ASSERT_NO_FATAL_FAILURE(OpenPairWithFiveWrites(a, b));
  log_->DropBefore(l_, log_->End(l_));  // retention passed every entry
  FollowDone done;
  b.applier().Follow(p_, 1, done.Callback());
  EXPECT_TRUE(WaitFor([&] { return done.calls() > 0; }, 5s))
      << "no answer while the log partition stays quiet";
  // One more entry of the log partition (another partition's) brings it.
  ASSERT_TRUE(a.Upsert(r_tag_ + ".1", {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(done.Wait());
  EXPECT_EQ(done.status().code(), Status::Code::kNotFound) << done.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return !Lists(b.applier().following(), p_); }));
}

TEST_F(FollowTest, UnfollowBeforeTheFollowIsDoneAnswersUnavailable) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  ASSERT_NO_FATAL_FAILURE(OpenPair(a, b));
  log_->HoldReads(1, true);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(a.Upsert(U(i), {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(Passed(a));
  const int64_t next = a.applier().AppliedNext(l_);
  EXPECT_EQ(CopyByHand(a, b), 3u);
  FollowDone done;
  b.applier().Follow(p_, next, done.Callback());
  ASSERT_TRUE(WaitFor([&] { return Lists(b.applier().following(), p_); }));
  EXPECT_EQ(done.calls(), 0);  // held before the offset
  b.applier().Unfollow(p_);
  ASSERT_TRUE(done.Wait());
  EXPECT_EQ(done.status().code(), Status::Code::kUnavailable) << done.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return !Lists(b.applier().following(), p_); }));
  // Unfollowed: later entries of the partition are not applied.
  log_->HoldReads(1, false);
  ASSERT_TRUE(a.Upsert(U(1), {Ttl(1, 10)}, UpsertMode::kAdd).status.ok());
  ASSERT_TRUE(Passed(b));
  EXPECT_EQ(b.Get(U(1))->expires, std::vector<UnixSeconds>{kStart + 3600});  // as copied
  EXPECT_EQ(done.calls(), 1);
  EXPECT_EQ(FreshStats(b).not_held, 4u);
}

TEST_F(FollowTest, StoppingBeforeTheFollowIsDoneAnswersUnavailable) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  ASSERT_NO_FATAL_FAILURE(OpenPair(a, b));
  log_->HoldReads(1, true);
  ASSERT_TRUE(a.Upsert(U(1), {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(Passed(a));
  FollowDone done;
  b.applier().Follow(p_, a.applier().AppliedNext(l_), done.Callback());
  ASSERT_TRUE(WaitFor([&] { return Lists(b.applier().following(), p_); }));
  b.Close();
  EXPECT_EQ(done.calls(), 1);
  EXPECT_EQ(done.status().code(), Status::Code::kUnavailable) << done.status().ToString();
}

// ---- Bootstrapper ----

// A cluster of two nodes, "a" (index 0) and "b" (1), replication 1: every
// partition on a but `on_b` (on b), and `incoming` moving to b.
ClusterMap TwoNodeMap(uint64_t revision, const std::string& self, std::set<uint32_t> on_b,
                      std::set<uint32_t> incoming) {
  ClusterMap m;
  m.cluster = true;
  m.revision = revision;
  m.replication = 1;
  m.nodes = {ClusterNode{"a", "127.0.0.1:1", ""}, ClusterNode{"b", "127.0.0.1:2", ""}};
  m.replicas.assign(kPartitions, 0);
  for (uint32_t p : on_b) m.replicas[p] = 1;
  for (uint32_t p : incoming) m.incoming.push_back(IncomingReplica{static_cast<uint16_t>(p), 1});
  m.self = self;
  m.log = true;
  EXPECT_TRUE(m.Check().ok()) << m.Check().ToString();
  return m;
}

// The view the agent would publish for `map` on its `self`.
std::shared_ptr<const cluster::ClusterView> ViewOf(const ClusterMap& map) {
  auto v = std::make_shared<cluster::ClusterView>();
  v->map = map;
  v->serving = true;
  uint16_t self = 0;
  while (map.nodes[self].id != map.self) ++self;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    for (uint16_t r : map.ReplicasOf(p)) {
      if (r == self) v->held.set(p);
    }
  }
  for (const IncomingReplica& in : map.incoming) {
    if (in.node == self) v->incoming.set(in.partition);
  }
  return v;
}

// Pages from a node in process, as the server's copy_partition handler
// serves them: Busy while the node is not caught up or below min_next,
// `next` its applier's AppliedNext read before the page. Fails its first
// `fail_first` fetches (Unavailable: the node could not be reached). Called
// on the bootstrapper's thread (it opens its session there). failures():
// the answers that end a copy attempt (all but Busy, which the bootstrapper
// asks again).
class NodeSource : public PartitionSource {
 public:
  NodeSource(Node* node, std::string id, int fail_first = 0)
      : node_(node), id_(std::move(id)), fail_first_(fail_first) {}
  ~NodeSource() override { session_.reset(); }

  Result<CopyPartitionResponse> Fetch(const ClusterNode& n,
                                      const CopyPartitionRequest& request) override {
    ++fetches_;
    Result<CopyPartitionResponse> page = Serve(n, request);
    if (page.ok()) {
      ++pages_;
    } else if (page.status().code() != Status::Code::kBusy) {
      ++failures_;
    }
    return page;
  }

  int fetches() const { return fetches_.load(); }
  int pages() const { return pages_.load(); }
  int failures() const { return failures_.load(); }
  int wrong_source() const { return wrong_source_.load(); }

 private:
  Result<CopyPartitionResponse> Serve(const ClusterNode& n, const CopyPartitionRequest& request) {
    if (n.id != id_) {
      ++wrong_source_;
      return Status::Unavailable("no such node here: " + n.id);
    }
    if (fail_first_ > 0) {
      --fail_first_;
      return Status::Unavailable("injected: the node could not be reached");
    }
    if (session_ == nullptr) {
      auto s = node_->profiles().NewSession();
      if (!s.ok()) return s.status();
      session_ = std::move(*s);
    }
    const int64_t next = node_->applier().AppliedNext(request.partition);
    if (!node_->replicator().caught_up() || next < 0 ||
        node_->replicator().Stale(request.partition)) {
      return Status::Busy("not caught up with the log");
    }
    if (static_cast<uint64_t>(next) < request.min_next) return Status::Busy("below min_next");
    Result<CopyPartitionResponse> page = ReadPage(
        node_->store(), session_->worker(), request.partition, request.cursor, request.max_bytes);
    if (page.ok()) page->next = static_cast<uint64_t>(next);
    return page;
  }

  Node* const node_;
  const std::string id_;
  int fail_first_;  // the bootstrapper's thread only
  std::unique_ptr<profile::ProfileSession> session_;
  std::atomic<int> fetches_{0};
  std::atomic<int> pages_{0};
  std::atomic<int> failures_{0};
  std::atomic<int> wrong_source_{0};
};

// The ready lists a bootstrapper reported, with the map revision of each,
// in order.
class ReadyReports {
 public:
  struct Report {
    std::vector<uint16_t> ready;
    uint64_t revision = 0;
  };
  std::function<void(std::vector<uint16_t>, uint64_t)> Callback() {
    return [this](std::vector<uint16_t> ready, uint64_t revision) {
      std::lock_guard lock(mu_);
      reports_.push_back(Report{std::move(ready), revision});
    };
  }
  std::optional<Report> last() {
    std::lock_guard lock(mu_);
    if (reports_.empty()) return std::nullopt;
    return reports_.back();
  }
  // Whether any report listed a partition.
  bool any_ready() {
    std::lock_guard lock(mu_);
    return std::any_of(reports_.begin(), reports_.end(),
                       [](const Report& r) { return !r.ready.empty(); });
  }

 private:
  std::mutex mu_;
  std::vector<Report> reports_;
};

class BootstrapTest : public FollowTest {
 protected:
  // a holds every partition (and is the only replica of p_); b gets p_.
  void OpenNodes(Node& a, Node& b) {
    a.board().Publish(ViewOf(TwoNodeMap(1, "a", {}, {p_})));
    b.board().Publish(ViewOf(TwoNodeMap(1, "b", {}, {p_})));
    a.Open();
    b.Open();
    ASSERT_TRUE(WaitFor([&] { return a.replicator().caught_up() && b.replicator().caught_up(); }));
  }
  void WaitServable(Node& a) {
    ASSERT_TRUE(
        WaitFor([&] { return a.replicator().caught_up() && !a.replicator().Stale(p_); }, 20s));
  }
  bool WaitReady(ReadyReports& ready) {
    return WaitFor(
        [&] {
          auto r = ready.last();
          return r.has_value() && Lists(r->ready, p_);
        },
        30s);
  }
  static BootstrapOptions Options() {
    BootstrapOptions o;
    o.page_bytes = 100;  // a record or two a page
    o.retry_interval = 50ms;
    o.drop_after = 200ms;
    return o;
  }
};

TEST_F(BootstrapTest, AnIncomingPartitionIsCopiedFollowedReportedReadyAndDroppedOnceGone) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  OpenNodes(a, b);
  WriteHistory(a);
  for (int i = 5; i <= 12; ++i) {
    ASSERT_TRUE(a.Upsert(U(i), {Ttl(i, 3600), Ttl(100 + i, 60)}).status.ok());
  }
  // U(6) linked to U(5) (its record names U(5)): the copy keeps the link.
  proto::LinkStepRequest list, name;
  list.step.kind = LinkStep::Kind::kList;
  list.step.user = U(5);
  list.step.member = U(6);
  list.step.max_links = 64;
  name.step.kind = LinkStep::Kind::kName;
  name.step.user = U(6);
  name.step.master = U(5);
  ASSERT_TRUE(a.Write(list).status.ok());
  ASSERT_TRUE(a.Write(name).status.ok());
  ASSERT_EQ(a.Get(U(6))->master, U(5));
  // What b still has of p_ from an earlier time: the copy replaces it.
  Result<storage::Record> old = a.Raw(U(1));
  ASSERT_TRUE(old.ok());
  {
    auto w = b.store().NewWorker();
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->PutSync("{copy}.old", std::string(old->body()), 0, 0).ok());
  }
  ASSERT_TRUE(b.Get("{copy}.old").ok());
  WaitServable(a);

  NodeSource source(&a, "a");
  ReadyReports ready;
  auto started = Bootstrapper::Start(Options(), &b.profiles(), &b.applier(), &b.board(), &source,
                                     ready.Callback());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<Bootstrapper> bootstrapper = std::move(*started);
  ASSERT_TRUE(WaitReady(ready));
  EXPECT_EQ(ready.last()->ready, std::vector<uint16_t>{static_cast<uint16_t>(p_)});
  EXPECT_EQ(ready.last()->revision, 1u);  // the map p_ is incoming in

  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 12);
  EXPECT_TRUE(b.Get(U(3)).status().IsNotFound());          // deleted on a
  EXPECT_TRUE(b.Get("{copy}.old").status().IsNotFound());  // dropped before the copy
  Result<GetResult> u1 = b.Get(U(1));
  ASSERT_TRUE(u1.ok());
  EXPECT_EQ(u1->expires, (std::vector<UnixSeconds>{kStart + 3700, kStart + 7200}));
  EXPECT_EQ(b.Raw(U(6))->reference(), U(5));
  Result<GetResult> linked = b.Get(U(6));
  ASSERT_TRUE(linked.ok());
  EXPECT_EQ(linked->master, U(5));
  EXPECT_EQ(linked->profiles, 2u);
  // Counted just after the report.
  EXPECT_TRUE(WaitFor([&] { return bootstrapper->stats().ready == 1; }));
  BootstrapStats s = bootstrapper->stats();
  EXPECT_EQ(s.partitions_copied, 1u);
  EXPECT_EQ(s.records_copied, 11u);  // users 1, 2 and 4 to 12
  EXPECT_EQ(s.copy_failures, static_cast<uint64_t>(source.failures()));
  EXPECT_EQ(s.incoming, 1u);
  EXPECT_GT(source.pages(), 3);
  EXPECT_EQ(source.wrong_source(), 0);
  EXPECT_TRUE(Lists(b.applier().following(), p_));

  // Written after it is ready: b applies them (it follows p_).
  ASSERT_TRUE(a.Upsert(U(2), {Ttl(5, 60)}, UpsertMode::kAdd, Id(7)).status.ok());
  ASSERT_TRUE(a.Upsert(U(13), {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 13);

  // The map makes b p_'s replica: no longer incoming, held (the ready list
  // empties), and b goes on applying it.
  b.board().Publish(ViewOf(TwoNodeMap(2, "b", {p_}, {})));
  ASSERT_TRUE(WaitFor([&] {
    auto r = ready.last();
    return r.has_value() && r->ready.empty() && r->revision == 2;
  }));
  ASSERT_TRUE(a.Upsert(U(13), {Ttl(2, 3600)}).status.ok());
  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 13);
  EXPECT_EQ(bootstrapper->stats().partitions_dropped, 0u);

  // p_ moves away again: b neither holds nor gets it, and drops its copy
  // after drop_after.
  const auto gone_at = std::chrono::steady_clock::now();
  b.board().Publish(ViewOf(TwoNodeMap(3, "b", {}, {})));
  ASSERT_TRUE(WaitFor([&] { return bootstrapper->stats().partitions_dropped == 1; }, 20s));
  EXPECT_GE(std::chrono::steady_clock::now() - gone_at, Options().drop_after);
  s = bootstrapper->stats();
  EXPECT_EQ(s.records_dropped, 12u);  // users 1, 2 and 4 to 13
  for (int i = 1; i <= 13; ++i) EXPECT_TRUE(b.Get(U(i)).status().IsNotFound()) << U(i);
  EXPECT_FALSE(Lists(b.applier().following(), p_));
  // Nor does it apply p_'s entries any more.
  ASSERT_TRUE(a.Upsert(U(14), {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(Passed(b));
  EXPECT_TRUE(b.Get(U(14)).status().IsNotFound());
  EXPECT_TRUE(b.Get(q_tag_ + ".1").status().IsNotFound());  // another partition: never b's
}

TEST_F(BootstrapTest, WhatTheNodeHasOfAPartitionItNeitherHoldsNorGetsIsDroppedAfterAWhile) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  a.board().Publish(ViewOf(TwoNodeMap(1, "a", {}, {})));
  b.board().Publish(ViewOf(TwoNodeMap(1, "b", {q_}, {})));  // b holds q_ only
  a.Open();
  b.Open();
  ASSERT_TRUE(WaitFor([&] { return a.replicator().caught_up() && b.replicator().caught_up(); }));
  // b applies its own partition; what it has of p_ (from an earlier time
  // it held it) goes.
  ASSERT_TRUE(a.Upsert(q_tag_ + ".1", {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(a.Upsert(U(1), {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(Passed(b));
  Result<storage::Record> old = a.Raw(U(1));
  ASSERT_TRUE(old.ok());
  {
    auto w = b.store().NewWorker();
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->PutSync(U(1), std::string(old->body()), 0, 0).ok());
    ASSERT_TRUE((*w)->PutSync(U(2), std::string(old->body()), 0, 0).ok());
  }
  NodeSource source(&a, "a");
  ReadyReports ready;
  const auto started_at = std::chrono::steady_clock::now();
  auto started = Bootstrapper::Start(Options(), &b.profiles(), &b.applier(), &b.board(), &source,
                                     ready.Callback());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<Bootstrapper> bootstrapper = std::move(*started);
  ASSERT_TRUE(WaitFor([&] { return bootstrapper->stats().partitions_dropped == 1; }, 20s));
  EXPECT_GE(std::chrono::steady_clock::now() - started_at, Options().drop_after);
  EXPECT_EQ(bootstrapper->stats().records_dropped, 2u);
  EXPECT_TRUE(b.Get(U(1)).status().IsNotFound());
  EXPECT_TRUE(b.Get(U(2)).status().IsNotFound());
  EXPECT_TRUE(b.Get(q_tag_ + ".1").ok());  // held: kept
  EXPECT_EQ(source.fetches(), 0);          // nothing incoming
  EXPECT_FALSE(ready.any_ready());
}

TEST_F(BootstrapTest, ACopyWhoseSourceFailsIsRetriedAndCounted) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  OpenNodes(a, b);
  WriteHistory(a);
  WaitServable(a);

  NodeSource source(&a, "a", /*fail_first=*/2);
  ReadyReports ready;
  auto started = Bootstrapper::Start(Options(), &b.profiles(), &b.applier(), &b.board(), &source,
                                     ready.Callback());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<Bootstrapper> bootstrapper = std::move(*started);
  ASSERT_TRUE(WaitReady(ready));
  const BootstrapStats s = bootstrapper->stats();
  EXPECT_GE(source.failures(), 2);
  EXPECT_EQ(s.copy_failures, static_cast<uint64_t>(source.failures()));
  EXPECT_EQ(s.partitions_copied, 1u);
  EXPECT_EQ(s.records_copied, 3u);
  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 4);
  ASSERT_TRUE(a.Upsert(U(5), {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(Passed(b));
  ExpectSameUsers(a, b, 5);
}

}  // namespace
}  // namespace segstore::replica
