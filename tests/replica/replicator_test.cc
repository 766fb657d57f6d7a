// The replica layer on a real engine and an in-memory log (tests/support/
// memory_log.h): writes through the log answered with what this node's
// applier made of them, exactly once per write ID, the same record on every
// replica whatever its clock, restarts that replay without applying twice,
// and what the applier does with entries it cannot or need not apply.
#include "replica/replicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "profile/codec.h"
#include "replica/checkpoint.h"
#include "replica/entry.h"
#include "replica_test_util.h"
#include "segstore/profile.h"
#include "segstore/routing.h"
#include "segstore/storage.h"
#include "support/memory_log.h"

namespace segstore::replica {
namespace {

TEST(EntryTest, RoundTripsEveryWrite) {
  proto::DecodeLimits lim;
  WriteEntry e;
  e.now = kStart;
  e.write_id = Id(7);
  e.origin = 0x1234;
  e.ticket = 99;
  proto::UpsertRequest u;
  u.user = "alice";
  u.mode = UpsertMode::kAdd;
  u.segments = {Ttl(5, 60), SegmentUpdate{9, kStart + 100, false, 3, {}}};
  u.replace_attrs = true;
  e.request = u;
  std::string bytes;
  EncodeEntry(e, &bytes);
  WriteEntry back;
  ASSERT_TRUE(DecodeEntry(bytes, lim, &back).ok());
  EXPECT_EQ(back.op(), proto::Op::kUpsert);
  EXPECT_EQ(back.now, kStart);
  EXPECT_EQ(back.write_id, Id(7));
  const auto& bu = std::get<proto::UpsertRequest>(back.request);
  EXPECT_EQ(bu.user, "alice");
  EXPECT_EQ(bu.mode, UpsertMode::kAdd);
  EXPECT_TRUE(bu.replace_attrs);
  ASSERT_EQ(bu.segments.size(), 2u);
  EXPECT_EQ(bu.segments[1].attr1, 3u);

  proto::RemoveRequest r{"bob", {1, 2, 3}, {}};
  proto::TrimRequest t{"carol", kStart + 5, {}};
  proto::DeleteRequest d{"dave", {}};
  proto::ExpireRequest x{"erin", {4, 2, 4}, 600, true, ExpireCondition::kLt, {}};
  for (auto req : std::vector<decltype(e.request)>{r, t, d, x}) {
    e.request = req;
    bytes.clear();
    EncodeEntry(e, &bytes);
    ASSERT_TRUE(DecodeEntry(bytes, lim, &back).ok());
    EXPECT_EQ(back.op(), e.op());
    EXPECT_EQ(back.user(), e.user());
    EXPECT_EQ(static_cast<uint8_t>(bytes[1]), static_cast<uint8_t>(e.op()));
    Result<EntryHeader> h = DecodeEntryHeader(bytes);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->op, e.op());
    EXPECT_EQ(h->write_id, Id(7));
    EXPECT_EQ(h->origin, 0x1234u);
    EXPECT_EQ(h->ticket, 99u);
  }
  EXPECT_EQ(back.op(), proto::Op::kExpire);
  const auto& bx = std::get<proto::ExpireRequest>(back.request);
  EXPECT_EQ(bx.ids, x.ids);
  EXPECT_EQ(bx.value, 600u);
  EXPECT_TRUE(bx.ttl);
  EXPECT_EQ(bx.condition, ExpireCondition::kLt);
  EXPECT_EQ(bx.write_id, Id(7));  // the header's
}

TEST(EntryTest, RoundTripsALinkStep) {
  proto::DecodeLimits lim;
  WriteEntry e;
  e.now = kStart;
  e.write_id = Id(8);
  proto::LinkStepRequest r;
  r.step.kind = LinkStep::Kind::kList;
  r.step.user = "home-pc";
  r.step.member = "phone";
  r.step.moving = {{"tablet", kStart + 60}};
  r.step.max_links = 64;
  e.request = r;
  std::string bytes;
  EncodeEntry(e, &bytes);
  WriteEntry back;
  ASSERT_TRUE(DecodeEntry(bytes, lim, &back).ok());
  EXPECT_EQ(back.op(), proto::Op::kLinkStep);
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), 0x31);
  EXPECT_EQ(back.user(), "home-pc");  // the log's key and partition: the step's record
  const auto& step = std::get<proto::LinkStepRequest>(back.request);
  EXPECT_EQ(step.step, r.step);
  EXPECT_EQ(step.write_id, Id(8));
}

TEST(EntryTest, RoundTripsFieldWrites) {
  proto::DecodeLimits lim;
  WriteEntry e;
  e.now = kStart;
  e.write_id = Id(9);
  proto::FieldSetRequest set;
  set.user = "alice";
  set.fields = {FieldUpdate{"country", FieldValue::String("FR"), 0, false},
                FieldUpdate{"seen", FieldValue::Time(kStart), 60, true},
                FieldUpdate{"score", FieldValue::Double(-0.5), kStart + 9, false}};
  proto::FieldIncrementRequest inc;
  inc.user = "bob";
  inc.increment.name = "cap:77";
  inc.increment.delta = -3;
  inc.increment.ttl = 86400;
  inc.increment.window = FieldIncrement::Window::kSliding;
  inc.increment.cap = -10;
  const proto::FieldDeleteRequest del{"carol", {"a", "b"}, {}};
  const proto::FieldMaxRequest max{"dave", FieldUpdate{"n", FieldValue::Int(7), 0, false}, {}};
  const proto::Op ops[] = {proto::Op::kFieldSet, proto::Op::kFieldIncrement,
                           proto::Op::kFieldDelete, proto::Op::kFieldMax};
  size_t k = 0;
  for (auto req : std::vector<decltype(e.request)>{set, inc, del, max}) {
    e.request = req;
    std::string bytes;
    EncodeEntry(e, &bytes);
    WriteEntry back;
    ASSERT_TRUE(DecodeEntry(bytes, lim, &back).ok());
    EXPECT_EQ(back.op(), ops[k++]);
    EXPECT_EQ(static_cast<uint8_t>(bytes[1]), static_cast<uint8_t>(back.op()));
    EXPECT_EQ(back.user(), e.user());
    std::string again;
    std::visit([](auto& r) { r.write_id = {}; }, back.request);
    EncodeEntry(back, &again);
    EXPECT_EQ(again, bytes);
  }
  e.request = inc;
  std::string bytes;
  EncodeEntry(e, &bytes);
  WriteEntry back;
  ASSERT_TRUE(DecodeEntry(bytes, lim, &back).ok());
  const auto& b = std::get<proto::FieldIncrementRequest>(back.request);
  EXPECT_EQ(b.increment.delta, -3);
  EXPECT_EQ(b.increment.window, FieldIncrement::Window::kSliding);
  EXPECT_EQ(b.increment.cap, -10);
  EXPECT_EQ(b.write_id, Id(9));
}

TEST(WriteIdWindowTest, AFieldWritesRetryGetsTheFirstAnswer) {
  WriteIdWindow w(60, 100);
  WriteAnswer a;
  ASSERT_FALSE(w.Admit(Id(1), "u", kStart, proto::Op::kFieldIncrement, &a));
  WriteAnswer first;
  first.increment = IncrementResult{-5'000'000'000ll, true, false};
  w.Answered(first);
  ASSERT_TRUE(w.Admit(Id(1), "u", kStart + 1, proto::Op::kFieldIncrement, &a));
  EXPECT_TRUE(a.duplicate);
  EXPECT_EQ(a.increment.value, -5'000'000'000ll);
  EXPECT_TRUE(a.increment.capped);
  ASSERT_FALSE(w.Admit(Id(2), "u", kStart, proto::Op::kFieldSet, &a));
  first.field_write = FieldWriteResult{3, 9, false};
  w.Answered(first);
  ASSERT_TRUE(w.Admit(Id(2), "u", kStart, proto::Op::kFieldSet, &a));
  EXPECT_EQ(a.field_write.changed, 3u);
  EXPECT_EQ(a.field_write.count, 9u);
  // field_max: an int, double or time value is kept; a string is not.
  const FieldValue kept[] = {FieldValue::Int(-7), FieldValue::Double(2.5), FieldValue::Time(kStart),
                             FieldValue::String("zz")};
  for (uint64_t i = 0; i < std::size(kept); ++i) {
    ASSERT_FALSE(w.Admit(Id(10 + i), "u", kStart, proto::Op::kFieldMax, &a));
    first.field_max = FieldMaxResult{kept[i], true, false};
    w.Answered(first);
    ASSERT_TRUE(w.Admit(Id(10 + i), "u", kStart, proto::Op::kFieldMax, &a));
    EXPECT_TRUE(a.field_max.duplicate);
    EXPECT_TRUE(a.field_max.replaced);
    EXPECT_EQ(a.field_max.value, i < 3 ? kept[i] : FieldValue::Int(0)) << i;
  }
}

TEST(EntryTest, RefusesWhatIsNotAnEntry) {
  proto::DecodeLimits lim;
  WriteEntry back;
  EXPECT_EQ(DecodeEntry("", lim, &back).code(), Status::Code::kInvalidArgument);
  std::string bytes(kEntryHeaderSize, '\0');
  bytes[0] = 2;  // a format this build does not know
  EXPECT_EQ(DecodeEntry(bytes, lim, &back).code(), Status::Code::kInvalidArgument);
  bytes[0] = static_cast<char>(kEntryFormat);
  bytes[1] = static_cast<char>(proto::Op::kGet);  // not a write
  EXPECT_EQ(DecodeEntry(bytes, lim, &back).code(), Status::Code::kInvalidArgument);
  bytes[1] = static_cast<char>(proto::Op::kUpsert);
  bytes += "\xc1";  // not MessagePack
  EXPECT_EQ(DecodeEntry(bytes, lim, &back).code(), Status::Code::kInvalidArgument);
}

TEST(CheckpointTest, RoundTripsAndRefusesDamage) {
  Checkpoint c{123456789, 120000, {{7, 123456800}, {4095, 1}}};
  const std::string bytes = EncodeCheckpoint(c);
  Checkpoint back;
  ASSERT_TRUE(DecodeCheckpoint(bytes, &back).ok());
  EXPECT_EQ(back, c);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeCheckpoint(bytes.substr(0, n), &back).code(), Status::Code::kCorruption) << n;
  }
  EXPECT_EQ(DecodeCheckpoint(bytes + "x", &back).code(), Status::Code::kCorruption);
  Checkpoint window_past_next{5, 6, {}};
  EXPECT_EQ(DecodeCheckpoint(EncodeCheckpoint(window_past_next), &back).code(),
            Status::Code::kCorruption);
  EXPECT_TRUE(IsReservedKey(CheckpointKey(3)));
  EXPECT_FALSE(IsReservedKey("alice"));
  EXPECT_FALSE(IsReservedKey(std::string("\xff", 1)));
  EXPECT_TRUE(IsReservedKey(std::string("\xff\x00x", 3)));  // any FF 00 prefix
  EXPECT_FALSE(IsReservedKey(std::string("\xff\x01", 2)));
  EXPECT_EQ(CheckpointKey(12), std::string("\xff\x00segstore:applied:12", 21));
}

TEST(WriteIdWindowTest, ARetryWithinTheWindowGetsTheFirstAnswer) {
  WriteIdWindow w(60, 1000);
  WriteAnswer got;
  ASSERT_FALSE(w.Admit(Id(1), "u", kStart, proto::Op::kUpsert, &got));
  WriteAnswer a;
  a.upsert = UpsertResult{3, 1, 0, 4};
  w.Answered(a);
  ASSERT_FALSE(w.Admit(Id(2), "u", kStart + 30, proto::Op::kTrim, &got));
  WriteAnswer trimmed;
  trimmed.trim = TrimResult{2, 5};
  w.Answered(trimmed);
  ASSERT_FALSE(w.Admit(Id(3), "u", kStart + 30, proto::Op::kUpsert, &got));
  WriteAnswer failed;
  failed.status = Status::LimitExceeded("too many");
  w.Answered(failed);
  ASSERT_FALSE(w.Admit(Id(4), "u", kStart + 30, proto::Op::kDelete, &got));  // answer unknown

  ASSERT_TRUE(w.Admit(Id(1), "u", kStart + 60, proto::Op::kUpsert, &got));
  EXPECT_TRUE(got.duplicate);
  EXPECT_EQ(got.upsert.inserted, 3u);
  EXPECT_EQ(got.upsert.count, 4u);
  EXPECT_TRUE(got.upsert.duplicate);
  ASSERT_TRUE(w.Admit(Id(2), "u", kStart + 31, proto::Op::kTrim, &got));
  EXPECT_EQ(got.trim.trimmed, 2u);
  EXPECT_EQ(got.trim.remaining, 5u);
  ASSERT_TRUE(w.Admit(Id(3), "u", kStart + 31, proto::Op::kUpsert, &got));
  EXPECT_EQ(got.status.code(), Status::Code::kLimitExceeded);
  ASSERT_TRUE(w.Admit(Id(4), "u", kStart + 31, proto::Op::kDelete, &got));
  EXPECT_TRUE(got.status.ok());
  EXPECT_FALSE(got.deleted);
  // The same write ID for another user is another write.
  EXPECT_FALSE(w.Admit(Id(1), "v", kStart + 31, proto::Op::kUpsert, &got));
  // Longer than the window after the latest time the ID was seen: a new write.
  EXPECT_FALSE(w.Admit(Id(2), "u", kStart + 92, proto::Op::kTrim, &got));
}

TEST(WriteIdWindowTest, AnExpireRetryGetsTheFirstOutcomesWhenThereWereNotTooMany) {
  using EO = ExpireOutcome;
  WriteIdWindow w(60, 1000);
  WriteAnswer got;
  ASSERT_FALSE(w.Admit(Id(1), "u", kStart, proto::Op::kExpire, &got));
  WriteAnswer first;
  first.expire.results = {EO::kSet, EO::kMissing, EO::kRemoved, EO::kUnchanged, EO::kSet};
  first.expire.count = 4;
  w.Answered(first);
  // As many as are kept, and one more.
  for (size_t n : {WriteIdWindow::kKeptOutcomes, WriteIdWindow::kKeptOutcomes + 1}) {
    ASSERT_FALSE(w.Admit(Id(n), "u", kStart, proto::Op::kExpire, &got));
    WriteAnswer many;
    for (size_t i = 0; i < n; ++i) many.expire.results.push_back(static_cast<EO>(i % 4));
    many.expire.count = 9;
    w.Answered(many);
  }
  ASSERT_FALSE(w.Admit(Id(2), "u", kStart, proto::Op::kExpire, &got));  // answer unknown

  ASSERT_TRUE(w.Admit(Id(1), "u", kStart + 1, proto::Op::kExpire, &got));
  EXPECT_TRUE(got.duplicate);
  EXPECT_TRUE(got.expire.duplicate);
  EXPECT_EQ(got.expire.results, first.expire.results);
  EXPECT_EQ(got.expire.count, 4u);
  ASSERT_TRUE(w.Admit(Id(WriteIdWindow::kKeptOutcomes), "u", kStart + 1, proto::Op::kExpire, &got));
  ASSERT_EQ(got.expire.results.size(), WriteIdWindow::kKeptOutcomes);
  for (size_t i = 0; i < got.expire.results.size(); ++i) {
    EXPECT_EQ(got.expire.results[i], static_cast<EO>(i % 4)) << i;
  }
  // Too many to keep: the count, but no results.
  ASSERT_TRUE(
      w.Admit(Id(WriteIdWindow::kKeptOutcomes + 1), "u", kStart + 1, proto::Op::kExpire, &got));
  EXPECT_TRUE(got.expire.results.empty());
  EXPECT_EQ(got.expire.count, 9u);
  ASSERT_TRUE(w.Admit(Id(2), "u", kStart + 1, proto::Op::kExpire, &got));
  EXPECT_TRUE(got.expire.duplicate);
  EXPECT_TRUE(got.expire.results.empty());
  EXPECT_EQ(got.expire.count, 0u);
  // A failed expire's retry gets its code.
  ASSERT_FALSE(w.Admit(Id(3), "u", kStart + 2, proto::Op::kExpire, &got));
  WriteAnswer missing;
  missing.status = Status::NotFound("no live segments");
  w.Answered(missing);
  ASSERT_TRUE(w.Admit(Id(3), "u", kStart + 2, proto::Op::kExpire, &got));
  EXPECT_TRUE(got.status.IsNotFound());
}

TEST(WriteIdWindowTest, RemembersTheLastEntriesOfItsLogPartitionOnly) {
  WriteIdWindow w(3600, 10);
  WriteAnswer got;
  for (uint64_t i = 1; i <= 25; ++i)
    EXPECT_FALSE(w.Admit(Id(i), "u", kStart, proto::Op::kUpsert, &got));
  EXPECT_EQ(w.size(), 10u);
  EXPECT_FALSE(w.Admit(Id(15), "u", kStart, proto::Op::kUpsert, &got));  // 11 entries back
  EXPECT_TRUE(w.Admit(Id(25), "u", kStart, proto::Op::kUpsert, &got));
}

TEST(WriteIdWindowTest, TwoReplicasJudgeEveryEntryAlikeWhateverTheirClocks) {
  // The judgement is a function of the entries alone, in their order: two
  // windows fed the same entries (times skewed back and forth, repeated IDs,
  // the bound passed) agree on every one.
  WriteIdWindow a(60, 50), b(60, 50);
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    const WriteId id = Id(rng() % 80);
    const UnixSeconds at = kStart + static_cast<UnixSeconds>(i / 10) + rng() % 120 - 60;
    const std::string user = "u" + std::to_string(rng() % 3);
    WriteAnswer x, y;
    ASSERT_EQ(a.Admit(id, user, at, proto::Op::kUpsert, &x),
              b.Admit(id, user, at, proto::Op::kUpsert, &y))
        << i;
  }
}

TEST(PendingWritesTest, EachWaiterSettlesOnce) {
  PendingWrites p;
  int first = 0, second = 0, other = 0;
  const auto far = PendingWrites::Clock::now() + 1h;
  const uint64_t t1 = p.Add(far, [&](const WriteAnswer&) { ++first; });
  const uint64_t t2 = p.Add(far, [&](const WriteAnswer& a) {
    ++second;
    EXPECT_TRUE(a.duplicate);
  });
  p.Add(PendingWrites::Clock::now(), [&](const WriteAnswer& a) {
    ++other;
    EXPECT_EQ(a.status.code(), Status::Code::kInDoubt);
  });
  EXPECT_NE(t1, 0u);
  EXPECT_NE(t1, t2);
  EXPECT_EQ(p.size(), 3u);
  p.Settle(t1, WriteAnswer{});
  p.Settle(t1, WriteAnswer{});  // already settled: nothing
  WriteAnswer dup;
  dup.duplicate = true;
  p.Settle(t2, dup);
  WriteAnswer late;
  late.status = Status::InDoubt("late");
  EXPECT_EQ(p.Expire(PendingWrites::Clock::now(), late), 1u);
  EXPECT_EQ(p.Expire(PendingWrites::Clock::now(), late), 0u);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
  EXPECT_EQ(other, 1);
  EXPECT_EQ(p.size(), 0u);
}

class ReplicatorTest : public ::testing::Test {
 protected:
  TempDir dir_;
  std::shared_ptr<testing::MemoryLog> log_ = testing::MemoryLog::Make(kLogPartitions);
};

TEST_F(ReplicatorTest, AWriteIsAnsweredOnceAppliedHereAndIsInItsLogPartition) {
  Node n(dir_.File("a"), log_, kStart);
  n.Open();
  WriteAnswer a = n.Upsert("alice", {Ttl(1, 3600), Ttl(2, 7200)});
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  EXPECT_EQ(a.upsert.inserted, 2u);
  EXPECT_EQ(a.upsert.count, 2u);
  EXPECT_FALSE(a.duplicate);
  // Read your write: applied before the answer.
  Result<GetResult> got = n.Get("alice");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->count, 2u);
  const uint32_t l = LogPartitionOf(PartitionOf("alice"), kLogPartitions);
  ASSERT_EQ(log_->End(l), 1);
  EXPECT_EQ(log_->Entries(l)[0].key, "alice");

  // The write's own errors come back as they are, decided by the applier.
  proto::RemoveRequest missing{"nobody", {1}, {}};
  EXPECT_EQ(n.Write(missing).status.code(), Status::Code::kNotFound);
  a = n.Write(proto::TrimRequest{"alice", kStart + 3600, {}});
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.trim.trimmed, 1u);
  EXPECT_EQ(a.trim.remaining, 1u);
  a = n.Write(proto::DeleteRequest{"alice", {}});
  ASSERT_TRUE(a.status.ok());
  EXPECT_TRUE(a.deleted);
  EXPECT_TRUE(n.Get("alice").status().IsNotFound());
}

TEST_F(ReplicatorTest, AWriteIdIsAppliedOnce) {
  Node n(dir_.File("a"), log_, kStart);
  n.Open();
  ASSERT_TRUE(n.Upsert("bob", {Ttl(7, 3600)}).status.ok());
  // An add sent twice with one write ID (a client's retry after a lost answer).
  WriteAnswer first = n.Upsert("bob", {Ttl(7, 600)}, UpsertMode::kAdd, Id(42));
  WriteAnswer again = n.Upsert("bob", {Ttl(7, 600)}, UpsertMode::kAdd, Id(42));
  ASSERT_TRUE(first.status.ok());
  ASSERT_TRUE(again.status.ok());
  EXPECT_FALSE(first.duplicate);
  EXPECT_TRUE(again.duplicate);
  EXPECT_TRUE(again.upsert.duplicate);
  EXPECT_EQ(again.upsert.updated, first.upsert.updated);
  EXPECT_EQ(again.upsert.count, first.upsert.count);
  Result<GetResult> got = n.Get("bob");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->expires[0], kStart + 3600 + 600);  // added once
  EXPECT_TRUE(WaitFor([&] { return n.Stats().duplicates == 1; }));
}

// A link's steps through the log: every replica applies them alike, a
// step resent with its write ID is answered with the first answer, and a
// replay of the whole log after an unlink leaves the link unmade.
TEST_F(ReplicatorTest, LinkStepsApplyOnEveryReplicaOnceAndStayUndoneAfterAReplay) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart + 5);
  a.Open();
  b.Open();
  ASSERT_TRUE(a.Upsert("home-pc", {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(a.Upsert("phone", {Ttl(2, 3600)}).status.ok());
  auto step = [](LinkStep::Kind kind, std::string user, std::string other) {
    proto::LinkStepRequest r;
    r.step.kind = kind;
    r.step.user = std::move(user);
    if (kind == LinkStep::Kind::kList || kind == LinkStep::Kind::kDrop) {
      r.step.member = std::move(other);
      r.step.max_links = 64;
    } else {
      r.step.master = std::move(other);
    }
    return r;
  };
  WriteAnswer list = a.Write(step(LinkStep::Kind::kList, "home-pc", "phone"), Id(1));
  ASSERT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_TRUE(list.step.applied);
  EXPECT_EQ(list.step.members, 1u);
  WriteAnswer again = a.Write(step(LinkStep::Kind::kList, "home-pc", "phone"), Id(1));
  ASSERT_TRUE(again.status.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_TRUE(again.step.duplicate);
  EXPECT_EQ(again.step.members, 1u);
  ASSERT_TRUE(a.Write(step(LinkStep::Kind::kName, "phone", "home-pc"), Id(2)).status.ok());
  for (Node* n : {&a, &b}) {
    ASSERT_TRUE(WaitFor([&] {
      auto got = n->Get("phone");
      return got.ok() && got->master == "home-pc";
    })) << "replica "
        << (n == &a ? "a" : "b");
    auto s = n->profiles().NewSession();
    ASSERT_TRUE(s.ok());
    auto master = (*s)->MasterOfSync("phone");
    ASSERT_TRUE(master.ok()) << master.status().ToString();
    EXPECT_EQ(*master, "home-pc");
    EXPECT_EQ((*s)->GetSync("home-pc")->count, 2u);  // the merged view
  }
  // Unlinked through the log, then the whole log replayed on b.
  ASSERT_TRUE(a.Write(step(LinkStep::Kind::kDrop, "home-pc", "phone"), Id(3)).status.ok());
  ASSERT_TRUE(a.Write(step(LinkStep::Kind::kClear, "phone", "home-pc"), Id(4)).status.ok());
  ASSERT_TRUE(b.WaitApplied(6));
  b.ForgetCheckpoints();
  b.Close();
  b.Open();
  ASSERT_TRUE(WaitFor([&] { return b.replicator().caught_up(); }));
  auto s = b.profiles().NewSession();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->MasterOfSync("phone").status().IsNotFound());
  EXPECT_EQ((*s)->GetSync("phone")->count, 1u);
  EXPECT_EQ((*s)->GetSync("home-pc")->count, 1u);
}

TEST_F(ReplicatorTest, ARetryOnAnotherReplicaIsMarkedDuplicateEvenBeforeItAppliedTheFirst) {
  // The retry reaches the second node while that node has not applied the
  // first entry yet: its own entry, not the first, answers it.
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  a.Open();
  b.Open();
  log_->HoldReads(1, true);  // b reads nothing for now
  WriteAnswer first = a.Upsert("may", {Ttl(1, 60)}, UpsertMode::kAdd, Id(5));
  ASSERT_TRUE(first.status.ok());
  EXPECT_FALSE(first.duplicate);
  WriteEntry e;
  e.now = kStart;
  e.write_id = Id(5);
  e.request = proto::UpsertRequest{"may", {Ttl(1, 60)}, UpsertMode::kAdd, {}};
  auto answer = std::make_shared<std::promise<WriteAnswer>>();
  auto got = answer->get_future();
  b.replicator().Submit(std::move(e), [answer](const WriteAnswer& x) { answer->set_value(x); });
  log_->HoldReads(1, false);
  ASSERT_EQ(got.wait_for(20s), std::future_status::ready);
  const WriteAnswer again = got.get();
  ASSERT_TRUE(again.status.ok()) << again.status.ToString();
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.upsert.inserted, 1u);
  ASSERT_TRUE(b.WaitApplied(1));
  EXPECT_EQ(b.Get("may")->expires, std::vector<UnixSeconds>{kStart + 60});
}

TEST_F(ReplicatorTest, EveryReplicaComputesTheSameRecordWhateverItsClock) {
  // Two replicas whose clocks disagree by an hour, applying the same log:
  // each applies every entry at the time its producer took it.
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart + 3600);
  a.Open();
  b.Open();
  ASSERT_TRUE(a.Upsert("u", {Ttl(1, 1800), Ttl(2, 7200)}).status.ok());
  ASSERT_TRUE(a.Upsert("u", {Ttl(2, 100)}, UpsertMode::kAdd).status.ok());
  a.clock().Advance(2000);  // segment 1 has expired at a's clock: trimmed by the next write
  ASSERT_TRUE(a.Upsert("u", {Ttl(3, 50)}).status.ok());
  ASSERT_TRUE(b.WaitApplied(3));
  Result<storage::Record> ra = a.Raw("u");
  Result<storage::Record> rb = b.Raw("u");
  ASSERT_TRUE(ra.ok());
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(ra->body(), rb->body());  // byte for byte, log position included
  EXPECT_EQ(ra->sweep_at(), rb->sweep_at());
  EXPECT_EQ(ra->void_at(), rb->void_at());
}

TEST_F(ReplicatorTest, AReplicaApplyingLateStillSeesWhatWasAliveWhenTheWriteWasMade) {
  // b's clock is past the segment's expiry when it applies the add that was
  // made while the segment lived: it must still add to it, as a did.
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart + 20);
  a.Open();
  b.Open();
  SegmentUpdate seg{1, kStart + 10, false, 77, {}};
  ASSERT_TRUE(a.Upsert("nora", {seg}).status.ok());
  a.clock().Advance(5);
  WriteAnswer added = a.Upsert("nora", {Ttl(1, 100)}, UpsertMode::kAdd);
  ASSERT_TRUE(added.status.ok());
  EXPECT_EQ(added.upsert.updated, 1u);
  ASSERT_TRUE(b.WaitApplied(2));
  Result<storage::Record> ra = a.Raw("nora");
  Result<storage::Record> rb = b.Raw("nora");
  ASSERT_TRUE(ra.ok());
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(ra->body(), rb->body());
  Result<GetResult> got = b.Get("nora");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->expires, std::vector<UnixSeconds>{kStart + 110});
  EXPECT_EQ(got->attr1, std::vector<std::optional<uint32_t>>{77});
}

TEST_F(ReplicatorTest, AnUpsertReplacingAttributesReplacesThemOnEveryReplica) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart);
  a.Open();
  b.Open();
  ASSERT_TRUE(a.Upsert("rita", {SegmentUpdate{1, 3600, true, 7, 8}}).status.ok());
  proto::UpsertRequest replace;
  replace.user = "rita";
  replace.segments = {SegmentUpdate{1, 3600, true, {}, 9}};
  replace.replace_attrs = true;
  WriteAnswer a1 = a.Write(replace);
  ASSERT_TRUE(a1.status.ok()) << a1.status.ToString();
  EXPECT_EQ(a1.upsert.updated, 1u);
  ASSERT_TRUE(b.WaitApplied(2));
  for (Node* n : {&a, &b}) {
    Result<GetResult> got = n->Get("rita");
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(got->attr1.empty());  // cleared: not given
    EXPECT_EQ(got->attr2, std::vector<std::optional<uint32_t>>{9});
  }
}

TEST_F(ReplicatorTest, AnExpireIsAppliedOnceAndAlikeOnEveryReplica) {
  using EO = ExpireOutcome;
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart + 3600);  // its clock an hour ahead: the entry's time counts
  a.Open();
  b.Open();
  ASSERT_TRUE(a.Upsert("sam", {Ttl(1, 600), Ttl(2, 7200), SegmentUpdate{3, kNever, false, 4, {}}})
                  .status.ok());
  // "in 1800 s if that is later": 1 set, 2 unchanged, 3 unchanged (never is
  // later than anything), 9 missing.
  proto::ExpireRequest gt{"sam", {1, 2, 3, 9}, 1800, true, ExpireCondition::kGt, {}};
  WriteAnswer first = a.Write(gt, Id(21));
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  EXPECT_EQ(first.expire.results,
            (std::vector<EO>{EO::kSet, EO::kUnchanged, EO::kUnchanged, EO::kMissing}));
  EXPECT_EQ(first.expire.count, 3u);
  EXPECT_FALSE(first.duplicate);
  // Sent again with its write ID: the first answer, not applied again.
  a.clock().Advance(10);
  WriteAnswer again = a.Write(gt, Id(21));
  ASSERT_TRUE(again.status.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.expire.results, first.expire.results);
  EXPECT_EQ(again.expire.count, 3u);
  // HPERSIST of 2, and a past time removing 3 (its attribute with it).
  WriteAnswer persist =
      a.Write(proto::ExpireRequest{"sam", {2}, 0, false, ExpireCondition::kXx, {}});
  EXPECT_EQ(persist.expire.results, std::vector<EO>{EO::kSet});
  WriteAnswer removed = a.Write(proto::ExpireRequest{"sam", {3}, kStart - 1, false, {}, {}});
  EXPECT_EQ(removed.expire.results, std::vector<EO>{EO::kRemoved});
  EXPECT_EQ(removed.expire.count, 2u);
  ASSERT_TRUE(b.WaitApplied(4));
  Result<storage::Record> ra = a.Raw("sam");
  Result<storage::Record> rb = b.Raw("sam");
  ASSERT_TRUE(ra.ok());
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(ra->body(), rb->body());  // byte for byte, log position included
  Result<GetResult> got = a.Get("sam");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(got->expires, (std::vector<UnixSeconds>{kStart + 1800, kNever}));
  // The write's own errors come back as they are.
  EXPECT_EQ(a.Write(proto::ExpireRequest{"nobody", {1}, 60, true, {}, {}}).status.code(),
            Status::Code::kNotFound);
  // Emptying the profile removes it everywhere.
  WriteAnswer all = a.Write(proto::ExpireRequest{"sam", {1, 2}, 0, true, {}, {}});
  EXPECT_EQ(all.expire.count, 0u);
  EXPECT_TRUE(a.Get("sam").status().IsNotFound());
  ASSERT_TRUE(b.WaitApplied(6));
  EXPECT_TRUE(b.Get("sam").status().IsNotFound());
}

TEST_F(ReplicatorTest, AProfileALogEntryEmptiedKeepsItsPositionAcrossAReplay) {
  // max_segments 3: an upsert refused for going over it, then a remove that
  // empties the profile. Replayed from the start, the refused upsert must be
  // skipped, not applied to a profile that no longer remembers its place.
  {
    Node n(dir_.File("a"), log_, kStart, Node::Defaults(), 3);
    n.Open();
    ASSERT_TRUE(n.Upsert("olga", {Ttl(1, 3600), Ttl(2, 3600), Ttl(3, 3600)}).status.ok());
    EXPECT_EQ(n.Upsert("olga", {Ttl(4, 3600)}).status.code(), Status::Code::kLimitExceeded);
    WriteAnswer removed = n.Write(proto::RemoveRequest{"olga", {1, 2, 3}, {}});
    ASSERT_TRUE(removed.status.ok());
    EXPECT_EQ(removed.removed, 3u);
    EXPECT_TRUE(n.Get("olga").status().IsNotFound());
    n.ForgetCheckpoints();
  }
  Node n(dir_.File("a"), log_, kStart, Node::Defaults(), 3);
  n.Open();
  ASSERT_TRUE(WaitFor([&] { return n.replicator().caught_up(); }));
  EXPECT_TRUE(n.Get("olga").status().IsNotFound());  // segment 4 never appears
  EXPECT_EQ(n.Stats().replayed, 3u);
  // What holds the place: an empty record with the remove's position (the
  // third entry of its log partition), void an hour (log_grace) after it.
  Result<storage::Record> raw = n.Raw("olga");
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  Result<uint64_t> position = profile::DecodeLogPosition(raw->body());
  ASSERT_TRUE(position.ok());
  EXPECT_EQ(*position, 3u);
  EXPECT_EQ(raw->void_at(), kStart + 3600);
  std::vector<Segment> segments;
  ASSERT_TRUE(profile::DecodeSegments(raw->body(), &segments).ok());
  EXPECT_TRUE(segments.empty());
}

TEST_F(ReplicatorTest, ARestartReplaysTheLogWithoutApplyingAnythingTwice) {
  {
    Node n(dir_.File("a"), log_, kStart);
    n.Open();
    ASSERT_TRUE(n.Upsert("carol", {Ttl(1, 3600)}).status.ok());
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(n.Upsert("carol", {Ttl(1, 10)}, UpsertMode::kAdd).status.ok());
    }
    ASSERT_TRUE(n.Upsert("dave", {Ttl(1, 3600)}).status.ok());
    ASSERT_TRUE(n.Write(proto::DeleteRequest{"dave", {}}).status.ok());
    // As if the node crashed before any checkpoint reached the device: the
    // next start replays the whole log.
    n.ForgetCheckpoints();
  }
  Node n(dir_.File("a"), log_, kStart);
  n.Open();
  ASSERT_TRUE(WaitFor([&] { return n.replicator().caught_up(); }));
  Result<GetResult> got = n.Get("carol");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->expires[0], kStart + 3600 + 20 * 10);  // each add once
  EXPECT_TRUE(n.Get("dave").status().IsNotFound());     // deleted stays deleted
  const ApplierStats s = n.Stats();
  EXPECT_EQ(s.replayed, 21u);  // carol's 21 writes found in her record
  EXPECT_EQ(s.applied, 2u);    // dave's upsert and delete (his tombstone holds no position)

  // The checkpoints now say where to resume: a third start replays nothing.
  ASSERT_TRUE(WaitFor([&] {
    for (const LaneStats& l : n.Stats().lanes) {
      if (l.checkpointed != l.next) return false;
    }
    return true;
  }));
  n.Close();
  n.Open();
  ASSERT_TRUE(WaitFor([&] { return n.replicator().caught_up(); }));
  EXPECT_EQ(n.Stats().replayed, 0u);
  EXPECT_EQ(n.Stats().applied, 0u);
  got = n.Get("carol");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->expires[0], kStart + 3600 + 20 * 10);
}

// Counters through the log: every replica counts each increment once, a
// retry with its write ID is not counted again, and a restart that replays
// the whole log counts none twice.
TEST_F(ReplicatorTest, IncrementsCountOnceOnEveryReplicaAndAcrossAReplay) {
  Node a(dir_.File("a"), log_, kStart);
  Node b(dir_.File("b"), log_, kStart + 7);
  a.Open();
  b.Open();
  proto::FieldIncrementRequest inc;
  inc.user = "frank";
  inc.increment.name = "cap:1";
  inc.increment.delta = 2;
  inc.increment.ttl = 3600;
  for (uint64_t i = 1; i <= 5; ++i) {
    WriteAnswer w = a.Write(inc, Id(100 + i));
    ASSERT_TRUE(w.status.ok()) << w.status.ToString();
    EXPECT_EQ(w.increment.value, static_cast<int64_t>(2 * i));
  }
  WriteAnswer again = a.Write(inc, Id(103));
  ASSERT_TRUE(again.status.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.increment.value, 6);  // the third increment's answer
  proto::FieldSetRequest set{
      "frank", {FieldUpdate{"seen", FieldValue::Time(kStart), 0, false}}, {}};
  ASSERT_TRUE(a.Write(set, Id(110)).status.ok());
  auto fields = [](Node& n) {
    auto s = n.profiles().NewSession();
    EXPECT_TRUE(s.ok());
    GetOptions o;
    o.fields.mode = FieldSelection::Mode::kAll;
    auto got = (*s)->GetSync("frank", o);
    return got.ok() ? got->fields : std::vector<Field>{};
  };
  const std::vector<Field> want = {Field{"cap:1", FieldValue::Int(10), kStart + 3600},
                                   Field{"seen", FieldValue::Time(kStart), kNever}};
  EXPECT_EQ(fields(a), want);
  // b applies the entries at its own clock, 7 s later: the same record.
  ASSERT_TRUE(b.WaitApplied(6));  // the retry is not applied
  EXPECT_EQ(fields(b), want);
  // The whole log replayed on b: nothing counted twice.
  b.ForgetCheckpoints();
  b.Close();
  b.Open();
  ASSERT_TRUE(WaitFor([&] { return b.replicator().caught_up(); }));
  EXPECT_EQ(fields(b), want);
  EXPECT_EQ(b.Stats().applied, 0u);
  EXPECT_EQ(b.Stats().replayed, 6u);
}

TEST_F(ReplicatorTest, WriteIdsAppliedBeforeARestartAreStillRecognised) {
  {
    Node n(dir_.File("a"), log_, kStart);
    n.Open();
    ASSERT_TRUE(n.Upsert("erin", {Ttl(1, 3600)}, UpsertMode::kSet, Id(9)).status.ok());
  }
  Node n(dir_.File("a"), log_, kStart);
  n.Open();
  WriteAnswer again = n.Upsert("erin", {Ttl(1, 3600)}, UpsertMode::kSet, Id(9));
  ASSERT_TRUE(again.status.ok());
  EXPECT_TRUE(again.duplicate);  // rebuilt from the log behind the checkpoint
  EXPECT_EQ(n.Stats().applied, 0u);
}

TEST_F(ReplicatorTest, ALogThatDoesNotTakeTheWriteAnswersLogUnavailable) {
  Node n(dir_.File("a"), log_, kStart);
  n.Open();
  log_->SetDown(true);
  WriteAnswer a = n.Upsert("frank", {Ttl(1, 3600)});
  EXPECT_EQ(a.status.code(), Status::Code::kLogUnavailable) << a.status.ToString();
  EXPECT_TRUE(WaitFor([&] { return n.replicator().Stale(PartitionOf("frank")); }));
  log_->SetDown(false);
  EXPECT_TRUE(n.Get("frank").status().IsNotFound());
  EXPECT_TRUE(n.Upsert("frank", {Ttl(1, 3600)}).status.ok());
  EXPECT_EQ(n.replicator().stats().log_refused, 1u);  // counted before the answer
}

TEST_F(ReplicatorTest, AnUnacknowledgedAppendIsInDoubtAndARetryLearnsTheOutcome) {
  Node n(dir_.File("a"), log_, kStart);
  n.Open();
  // Written, but the acknowledgement lost: the retry finds it applied.
  log_->FailNextMaybeWritten(1, /*write=*/true);
  WriteAnswer a = n.Upsert("gina", {Ttl(1, 60)}, UpsertMode::kAdd, Id(100));
  EXPECT_EQ(a.status.code(), Status::Code::kInDoubt);
  ASSERT_TRUE(n.WaitApplied(1));
  WriteAnswer retry = n.Upsert("gina", {Ttl(1, 60)}, UpsertMode::kAdd, Id(100));
  ASSERT_TRUE(retry.status.ok());
  EXPECT_TRUE(retry.duplicate);
  EXPECT_EQ(retry.upsert.inserted, 1u);
  // Not written: the retry applies it.
  log_->FailNextMaybeWritten(1, /*write=*/false);
  a = n.Upsert("gina", {Ttl(1, 60)}, UpsertMode::kAdd, Id(101));
  EXPECT_EQ(a.status.code(), Status::Code::kInDoubt);
  retry = n.Upsert("gina", {Ttl(1, 60)}, UpsertMode::kAdd, Id(101));
  ASSERT_TRUE(retry.status.ok());
  EXPECT_FALSE(retry.duplicate);
  Result<GetResult> got = n.Get("gina");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->expires[0], kStart + 120);  // two adds, each once
}

TEST_F(ReplicatorTest, EntriesOfOtherPartitionsAndUnreadableOnesAreSkipped) {
  Node n(dir_.File("a"), log_, kStart);
  n.board().Publish(ViewHolding({PartitionOf("held")}));
  n.Open();
  const uint32_t l_held = LogPartitionOf(PartitionOf("held"), kLogPartitions);
  log_->AppendRaw(l_held, "x", "not an entry");
  // Another node's write of a user this node does not hold.
  WriteEntry e;
  e.now = kStart;
  e.write_id = Id(1);
  e.request = proto::UpsertRequest{"elsewhere", {Ttl(1, 3600)}, UpsertMode::kSet, {}};
  std::string bytes;
  EncodeEntry(e, &bytes);
  log_->AppendRaw(LogPartitionOf(PartitionOf("elsewhere"), kLogPartitions), "elsewhere", bytes);
  WriteAnswer a = n.Upsert("held", {Ttl(1, 3600)});
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_TRUE(WaitFor([&] { return n.Stats().not_held == 1; }));
  EXPECT_EQ(n.Stats().undecodable, 1u);
  EXPECT_TRUE(n.Get("elsewhere").status().IsNotFound());
}

TEST_F(ReplicatorTest, AWriteThisNodeDoesNotApplyInTimeIsInDoubt) {
  ReplicaOptions o = Node::Defaults();
  o.apply_timeout = 200ms;
  Node n(dir_.File("a"), log_, kStart, o);
  n.board().Publish(ViewHolding({0}));  // not "ida"'s partition
  n.Open();
  WriteAnswer a = n.Upsert("ida", {Ttl(1, 3600)});
  EXPECT_EQ(a.status.code(), Status::Code::kInDoubt) << a.status.ToString();
}

TEST_F(ReplicatorTest, EntriesTheLogNoLongerHasAreReportedAndTheirPartitionsStale) {
  WriteEntry e;
  e.now = kStart;
  e.request = proto::UpsertRequest{"jack", {Ttl(1, 3600)}, UpsertMode::kSet, {}};
  const uint32_t l = LogPartitionOf(PartitionOf("jack"), kLogPartitions);
  for (uint64_t i = 1; i <= 5; ++i) {
    e.write_id = Id(i);
    std::string bytes;
    EncodeEntry(e, &bytes);
    log_->AppendRaw(l, "jack", bytes);
  }
  log_->DropBefore(l, 3);  // retention passed the first three
  Node n(dir_.File("a"), log_, kStart);
  n.Open();
  ASSERT_TRUE(WaitFor([&] { return n.Stats().lost_entries > 0; }));
  EXPECT_TRUE(n.replicator().Stale(PartitionOf("jack")));
}

TEST_F(ReplicatorTest, AReplicaLaggingThePastBoundSaysItsReadsAreStale) {
  ReplicaOptions o = Node::Defaults();
  o.applier.max_lag = 300ms;
  Node writer(dir_.File("w"), log_, kStart);
  Node lagging(dir_.File("l"), log_, kStart, o);
  writer.Open();
  lagging.Open();
  const uint32_t p = PartitionOf("lee");
  ASSERT_TRUE(WaitFor([&] { return !lagging.replicator().Stale(p); }));
  log_->HoldReads(1, true);  // the lagging node (the second reader) reads nothing more
  ASSERT_TRUE(writer.Upsert("lee", {Ttl(1, 3600)}).status.ok());
  ASSERT_TRUE(WaitFor([&] { return lagging.replicator().Stale(p); }));
  EXPECT_TRUE(lagging.Get("lee").status().IsNotFound());  // what a stale read would miss
  const uint32_t l = LogPartitionOf(p, kLogPartitions);
  EXPECT_GE(lagging.Stats().lanes[l].lag_seconds, 0.3);
  // Another log partition with nothing to apply is not behind.
  EXPECT_FALSE(lagging.replicator().Stale((p + 1) % 4096));
  log_->HoldReads(1, false);
  ASSERT_TRUE(WaitFor([&] { return !lagging.replicator().Stale(p); }));
  EXPECT_TRUE(lagging.Get("lee").ok());
}

TEST_F(ReplicatorTest, ReadsAreStaleUntilCaughtUpAndWhileTheLeaseIsOld) {
  std::atomic<double> lease_age{0};
  ReplicaOptions o = Node::Defaults();
  o.applier.lease_ttl_seconds = 10;
  o.applier.lease_age_seconds = [&lease_age] { return lease_age.load(); };
  Node n(dir_.File("a"), log_, kStart, o);
  n.Open();
  const uint32_t p = PartitionOf("kim");
  ASSERT_TRUE(WaitFor([&] { return n.replicator().caught_up() && !n.replicator().Stale(p); }));
  lease_age = 11;
  EXPECT_TRUE(WaitFor([&] { return n.replicator().Stale(p); }));
  lease_age = 1;
  EXPECT_TRUE(WaitFor([&] { return !n.replicator().Stale(p); }));
}

}  // namespace
}  // namespace segstore::replica
