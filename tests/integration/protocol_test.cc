// Every case proto/PROTOCOL.md defines that a client can meet, held against
// the real server: a store on a temporary file, the profile layer and the
// front end in this process, with a clock the test moves. Each test names the
// section of PROTOCOL.md it holds; the client library is used where a case
// is about meaning, raw frames where it is about bytes.
#include <gtest/gtest.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "integration/in_process.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "server/raw_conn.h"
#include "storage/test_util.h"
#include "support/msgpack_builder.h"

namespace segstore::server {
namespace {

using client::Client;
using proto::Op;
using segstore::testing::Mp;
using testing::Frame;
using testing::MakeFrame;
using testing::RawConn;

constexpr UnixSeconds kStart = 1'790'000'000;
constexpr UnixSeconds kMaxTime = UINT32_MAX;

SegmentUpdate At(uint64_t id, UnixSeconds expires_at) { return {id, expires_at, false, {}, {}}; }
SegmentUpdate Ttl(uint64_t id, uint32_t seconds) { return {id, seconds, true, {}, {}}; }

class ProtocolTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kMaxSegments = 50;
  static constexpr uint32_t kMaxBatch = 10;

  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    p.max_segments = kMaxSegments;
    ServerOptions server;
    server.threads = 1;
    ProfileServiceOptions so;
    so.max_batch = kMaxBatch;
    so.max_segments = kMaxSegments;
    so.max_in_flight = server.max_in_flight;
    so.max_frame_bytes = server.max_frame_bytes;
    served_.Start(o, nullptr, p, so, server);
    ASSERT_FALSE(HasFatalFailure());
    client_ = served_.Connect();
    ASSERT_NE(client_, nullptr);
    ASSERT_TRUE(raw_.Connect(served_.server->port()));
  }

  void TearDown() override {
    client_.reset();
    raw_.Close();
    served_.Stop();
  }

  // One request on the raw connection; its answer must carry `status`.
  Frame Call(Op op, std::string_view body, Status::Code status) {
    const uint32_t id = ++next_id_;
    Frame f;
    EXPECT_TRUE(raw_.Write(MakeFrame(static_cast<uint8_t>(op), id, body)));
    EXPECT_TRUE(raw_.Expect(id, status, &f)) << proto::OpName(static_cast<uint8_t>(op));
    return f;
  }

  // Record versions the store has written (puts and deletes).
  uint64_t Writes() const { return served_.store->stats().writes; }

  void Upsert(std::string_view user, std::vector<SegmentUpdate> segments) {
    auto r = client_->Upsert(user, segments);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  testing::InProcessServer served_;
  std::unique_ptr<Client> client_;
  RawConn raw_;
  uint32_t next_id_ = 0;
};

// ---- Status codes: NotFound ----

// A user with no live segment has no profile: get, count, remove and trim
// answer NotFound and write nothing; delete answers deleted: false.
TEST_F(ProtocolTest, AUserWithoutAProfileIsNotFoundForReadsAndPartialWrites) {
  const uint64_t writes = Writes();
  EXPECT_TRUE(client_->Get("nobody").status().IsNotFound());
  EXPECT_TRUE(client_->Count("nobody").status().IsNotFound());
  const std::vector<uint64_t> ids = {1, 2};
  auto removed = client_->Remove("nobody", ids);
  EXPECT_TRUE(removed.status().IsNotFound()) << removed.status().ToString();
  auto trimmed = client_->Trim("nobody");
  EXPECT_TRUE(trimmed.status().IsNotFound()) << trimmed.status().ToString();
  auto deleted = client_->Delete("nobody");
  ASSERT_TRUE(deleted.ok());
  EXPECT_FALSE(*deleted);
  EXPECT_EQ(Writes(), writes);
  const std::vector<std::string> users = {"nobody"};
  auto batch = client_->BatchGet(users);
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE((*batch)[0].status().IsNotFound());
  // The message of the frame says why.
  Frame f = Call(Op::kCount, Mp().Map(1).Str("user").Str("nobody"), Status::Code::kNotFound);
  EXPECT_EQ(proto::DecodeError(f.body), "the user has no profile");
}

// A profile whose segments have all expired is no profile: the same answers,
// and deleting it says false (nothing of it can be read again).
TEST_F(ProtocolTest, AProfileWhoseSegmentsAllExpiredIsNotFound) {
  Upsert("u", {At(1, kStart + 10), At(2, kStart + 20)});
  clock_.Set(kStart + 20);
  const uint64_t writes = Writes();
  EXPECT_TRUE(client_->Get("u").status().IsNotFound());
  EXPECT_TRUE(client_->Count("u").status().IsNotFound());
  EXPECT_TRUE(client_->Trim("u").status().IsNotFound());
  EXPECT_TRUE(client_->Remove("u", std::vector<uint64_t>{1}).status().IsNotFound());
  auto deleted = client_->Delete("u");
  ASSERT_TRUE(deleted.ok());
  EXPECT_FALSE(*deleted);
  EXPECT_EQ(Writes(), writes);
  // An upsert starts a new profile; the old one is gone, so nothing of it
  // counts as trimmed.
  std::vector<SegmentUpdate> again = {Ttl(3, 60), Ttl(1, 60)};
  auto r = client_->Upsert("u", again);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->inserted, 2u);
  EXPECT_EQ(r->trimmed, 0u);
  EXPECT_EQ(r->count, 2u);
}

// ---- Types: liveness ----

// A segment is live while now < expires_at: at the second it expires it is
// gone from every read.
TEST_F(ProtocolTest, ASegmentIsExpiredFromTheSecondOfItsExpiry) {
  Upsert("u", {At(1, kStart + 100), At(2, kStart + 101), At(3, kNever)});
  clock_.Set(kStart + 99);
  EXPECT_EQ(client_->Get("u")->count, 3u);
  clock_.Set(kStart + 100);
  auto got = client_->Get("u");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(*client_->Count("u", 1, 1), 0u);
  // An upsert's expiry must be in the future: now itself is not.
  std::vector<SegmentUpdate> now = {At(9, kStart + 100)};
  auto r = client_->Upsert("u", now);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  std::vector<SegmentUpdate> next = {At(9, kStart + 101)};
  EXPECT_TRUE(client_->Upsert("u", next).ok());
}

// ---- get: the expiry window ----

// expiry_to 2^32-1 (the default) has no upper bound: never-expiring segments
// are inside; any smaller expiry_to, 2^32-2 included, leaves them out.
TEST_F(ProtocolTest, OnlyTheLargestExpiryToIncludesNeverExpiringSegments) {
  Upsert("u", {At(1, kStart + 60), At(2, kMaxTime - 1), At(3, kNever)});
  GetOptions o;
  EXPECT_EQ(client_->Get("u", o)->ids, (std::vector<uint64_t>{1, 2, 3}));
  o.expiry_to = kMaxTime;
  EXPECT_EQ(client_->Get("u", o)->ids, (std::vector<uint64_t>{1, 2, 3}));
  o.expiry_to = kMaxTime - 1;
  EXPECT_EQ(client_->Get("u", o)->ids, (std::vector<uint64_t>{1, 2}));
  o.expiry_from = kStart + 61;
  EXPECT_EQ(client_->Get("u", o)->ids, (std::vector<uint64_t>{2}));
  o.outside_expiry_window = true;  // outside [kStart+61, 2^32-2]: 1 and never
  EXPECT_EQ(client_->Get("u", o)->ids, (std::vector<uint64_t>{1, 3}));
  GetOptions later;
  later.expiry_from = kMaxTime;  // only "never" expires at or after 2^32-1
  EXPECT_EQ(client_->Get("u", later)->ids, (std::vector<uint64_t>{3}));
  // An empty range matches nothing: OK with count 0, not NotFound...
  GetOptions empty;
  empty.id_from = 10;
  empty.id_to = 5;
  auto got = client_->Get("u", empty);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->count, 0u);
  EXPECT_TRUE(got->ids.empty());
  // ...so outside an empty expiry window lies every segment.
  GetOptions outside_empty;
  outside_empty.expiry_from = kStart + 100;
  outside_empty.expiry_to = kStart + 50;
  outside_empty.outside_expiry_window = true;
  EXPECT_EQ(client_->Get("u", outside_empty)->ids, (std::vector<uint64_t>{1, 2, 3}));
}

// ---- trim ----

// trim with `before` removes every segment not live at that time (expiring
// at or before it), live ones included; never-expiring ones stay; a time
// earlier than now is now.
TEST_F(ProtocolTest, TrimBeforeRemovesEverySegmentExpiringByThen) {
  const UnixSeconds t = kStart + 1000;
  Upsert("u", {At(1, kStart + 5), At(2, t - 1), At(3, t), At(4, t + 1), At(5, kNever)});
  clock_.Set(kStart + 5);  // segment 1 has expired
  auto r = client_->Trim("u", t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->trimmed, 3u);  // 1 (expired), 2 and 3 (live, but expiring by t)
  EXPECT_EQ(r->remaining, 2u);
  EXPECT_EQ(client_->Get("u")->ids, (std::vector<uint64_t>{4, 5}));
  // A `before` in the past is now: nothing expired, nothing trimmed.
  r = client_->Trim("u", kStart - 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->trimmed, 0u);
  EXPECT_EQ(r->remaining, 2u);
  // Trimming every segment removes the profile.
  Upsert("v", {At(1, t)});
  r = client_->Trim("v", t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->trimmed, 1u);
  EXPECT_EQ(r->remaining, 0u);
  EXPECT_TRUE(client_->Get("v").status().IsNotFound());
}

// ---- upsert: the modes at their edges ----

TEST_F(ProtocolTest, UpsertModesAtTheirEdges) {
  Upsert("u", {At(1, kStart + 100), At(2, kNever), At(3, kStart + 100), At(4, kMaxTime - 10)});
  // extend with 0 (never) makes a finite segment never expire: never is later.
  std::vector<SegmentUpdate> never = {At(1, kNever)};
  auto r = client_->Upsert("u", never, UpsertMode::kExtend);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->updated, 1u);
  // add to a never-expiring segment: it stays never; add saturates at 2^32-1.
  std::vector<SegmentUpdate> add = {Ttl(2, 3600), Ttl(4, 3600)};
  r = client_->Upsert("u", add, UpsertMode::kAdd);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->updated, 2u);
  // set and extend count every existing live segment they name as updated,
  // whether or not its expiry or attributes changed.
  std::vector<SegmentUpdate> same = {At(3, kStart + 100)};
  r = client_->Upsert("u", same, UpsertMode::kSet);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->updated, 1u);
  EXPECT_EQ(r->inserted, 0u);
  std::vector<SegmentUpdate> earlier = {At(3, kStart + 50)};
  r = client_->Upsert("u", earlier, UpsertMode::kExtend);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->updated, 1u);
  auto got = client_->Get("u");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ(got->At(0).expires_at, kNever);
  EXPECT_EQ(got->At(1).expires_at, kNever);
  EXPECT_EQ(got->At(2).expires_at, kStart + 100);  // extend kept the later
  EXPECT_EQ(got->At(3).expires_at, kMaxTime);
  // A segment named again after it expired is new: inserted, and its old
  // self trimmed.
  clock_.Set(kStart + 100);
  std::vector<SegmentUpdate> back = {Ttl(3, 60)};
  r = client_->Upsert("u", back);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->inserted, 1u);
  EXPECT_EQ(r->updated, 0u);
  EXPECT_EQ(r->trimmed, 1u);
  // add with 0 seconds, a TTL of 0, and a TTL or an add whose now + value
  // passes 2^32-1 are InvalidArgument; nothing is written.
  const uint64_t writes = Writes();
  std::vector<SegmentUpdate> far = {Ttl(2, kMaxTime - (kStart + 100) + 1)};
  EXPECT_EQ(client_->Upsert("u", far, UpsertMode::kAdd).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(client_->Upsert("u", far, UpsertMode::kSet).status().code(),
            Status::Code::kInvalidArgument);
  std::vector<SegmentUpdate> last = {Ttl(2, kMaxTime - (kStart + 100))};
  EXPECT_TRUE(client_->Upsert("u", last, UpsertMode::kAdd).ok());  // never stays never
  EXPECT_EQ(client_->Get("u")->At(1).expires_at, kNever);
  std::vector<SegmentUpdate> zero = {Ttl(5, 0)};
  EXPECT_EQ(client_->Upsert("u", zero, UpsertMode::kAdd).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(client_->Upsert("u", zero, UpsertMode::kSet).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Writes(), writes + 1);  // the one add that was accepted
}

// An empty segments list is OK: it trims the profile's expired segments and
// writes nothing when there are none.
TEST_F(ProtocolTest, AnEmptyUpsertOnlyTrims) {
  std::vector<SegmentUpdate> none;
  uint64_t writes = Writes();
  auto r = client_->Upsert("nobody", none);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->count, 0u);
  EXPECT_EQ(Writes(), writes);
  EXPECT_TRUE(client_->Get("nobody").status().IsNotFound());
  Upsert("u", {At(1, kStart + 10), At(2, kStart + 20)});
  writes = Writes();
  r = client_->Upsert("u", none);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->count, 2u);
  EXPECT_EQ(Writes(), writes);
  clock_.Set(kStart + 10);
  r = client_->Upsert("u", none);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->trimmed, 1u);
  EXPECT_EQ(r->count, 1u);
  EXPECT_EQ(Writes(), writes + 1);
}

// ---- remove ----

TEST_F(ProtocolTest, RemoveCountsEachLiveIdOnce) {
  Upsert("u", {At(5, kStart + 10), At(6, kNever), At(7, kNever)});
  clock_.Set(kStart + 10);  // 5 has expired: not live, not counted
  const std::vector<uint64_t> ids = {5, 6, 6, 99};
  auto removed = client_->Remove("u", ids);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u);
  EXPECT_EQ(client_->Get("u")->ids, (std::vector<uint64_t>{7}));
  // An empty list removes nothing and writes nothing.
  const uint64_t writes = Writes();
  removed = client_->Remove("u", std::vector<uint64_t>{});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 0u);
  EXPECT_EQ(Writes(), writes);
  // Removing the last live segment removes the profile.
  removed = client_->Remove("u", std::vector<uint64_t>{7});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u);
  EXPECT_TRUE(client_->Get("u").status().IsNotFound());
  // More IDs than max_segments: LimitExceeded.
  std::vector<uint64_t> many(kMaxSegments + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i;
  Upsert("w", {At(1, kNever)});
  EXPECT_EQ(client_->Remove("w", many).status().code(), Status::Code::kLimitExceeded);
}

// ---- expire ----

TEST_F(ProtocolTest, ExpireGivesEachListedIdItsOutcome) {
  using EO = ExpireOutcome;
  Upsert("u", {At(1, kStart + 100), At(2, kNever), At(3, kStart + 10), At(4, kStart + 5000)});
  clock_.Set(kStart + 10);  // 3 has expired: missing, and trimmed by the write
  const uint64_t writes = Writes();
  const std::vector<uint64_t> ids = {1, 2, 3, 9, 4, 1};
  auto r = client_->Expire("u", ids, ExpireSpec{1000, true, ExpireCondition::kGt});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kSet, EO::kUnchanged, EO::kMissing, EO::kMissing,
                                         EO::kUnchanged, EO::kSet}));
  EXPECT_EQ(r->count, 3u);
  EXPECT_FALSE(r->duplicate);
  EXPECT_EQ(Writes(), writes + 1);
  auto got = client_->Get("u");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 2, 4}));
  EXPECT_EQ(got->expires, (std::vector<UnixSeconds>{kStart + 1010, kNever, kStart + 5000}));
  // Nothing holds (nothing is later than never) and nothing expired: nothing written.
  r = client_->Expire("u", ids, ExpireSpec{kStart + 20, false, ExpireCondition::kGt});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kUnchanged, EO::kUnchanged, EO::kMissing, EO::kMissing,
                                         EO::kUnchanged, EO::kUnchanged}));
  EXPECT_EQ(Writes(), writes + 1);
  // A past time removes; removing the last segments removes the profile.
  r = client_->Expire("u", std::vector<uint64_t>{4}, ExpireSpec{kStart, false});
  EXPECT_EQ(r->results, std::vector<EO>{EO::kRemoved});
  EXPECT_EQ(r->count, 2u);
  r = client_->Expire("u", std::vector<uint64_t>{1, 2}, ExpireSpec{0, true});
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kRemoved, EO::kRemoved}));
  EXPECT_EQ(r->count, 0u);
  EXPECT_TRUE(client_->Get("u").status().IsNotFound());
}

TEST_F(ProtocolTest, ExpireRefusalsWriteNothing) {
  Upsert("u", {At(1, kNever)});
  const uint64_t writes = Writes();
  // No profile.
  auto r = client_->Expire("nobody", std::vector<uint64_t>{1}, ExpireSpec{60, true});
  EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
  Frame f =
      Call(Op::kExpire, Mp().Map(3).Str("user").Str("nobody").Str("ids").Arr(0).Str("value").U(60),
           Status::Code::kNotFound);
  EXPECT_EQ(proto::DecodeError(f.body), "the user has no profile");
  // More IDs than max_segments.
  std::vector<uint64_t> many(kMaxSegments + 1, 1);
  EXPECT_EQ(client_->Expire("u", many, ExpireSpec{60, true}).status().code(),
            Status::Code::kLimitExceeded);
  // A TTL past 2^32-1, a malformed body naming the field.
  r = client_->Expire("u", std::vector<uint64_t>{1}, ExpireSpec{kMaxTime - kStart + 1, true});
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  f = Call(Op::kExpire,
           Mp().Map(4)
               .Str("user")
               .Str("u")
               .Str("ids")
               .Arr(0)
               .Str("value")
               .U(60)
               .Str("condition")
               .Str("sometimes"),
           Status::Code::kInvalidArgument);
  EXPECT_EQ(proto::DecodeError(f.body).rfind("expire: condition: ", 0), 0u)
      << proto::DecodeError(f.body);
  f = Call(Op::kExpire, Mp().Map(2).Str("user").Str("u").Str("ids").Arr(0),
           Status::Code::kInvalidArgument);
  EXPECT_EQ(proto::DecodeError(f.body), "expire: value: missing");
  EXPECT_EQ(Writes(), writes);
  EXPECT_EQ(client_->Get("u")->expires, std::vector<UnixSeconds>{kNever});
}

TEST_F(ProtocolTest, UpsertReplacingAttributesClearsTheOnesNotGiven) {
  Upsert("u", {{1, kNever, false, 7u, 8u}, {2, kNever, false, 5u, {}}});
  const std::vector<SegmentUpdate> replace = {{1, kNever, false, {}, 9u}};
  auto r = client_->Upsert("u", replace, UpsertOptions{UpsertMode::kSet, true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto got = client_->Get("u");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->attr1, (std::vector<std::optional<uint32_t>>{std::nullopt, 5u}));
  EXPECT_EQ(got->attr2, (std::vector<std::optional<uint32_t>>{9u, std::nullopt}));
  // In a batch, per item.
  std::vector<UpsertItem> items(2);
  items[0] = UpsertItem{"u", {{2, kNever, false, {}, {}}}, UpsertMode::kSet, {}, true};
  items[1] = UpsertItem{"v", {{2, kNever, false, 3u, {}}}, UpsertMode::kSet, {}, true};
  ASSERT_TRUE(client_->BatchUpsert(items).ok());
  got = client_->Get("u");
  EXPECT_EQ(got->attr1, (std::vector<std::optional<uint32_t>>{}));  // none left
  EXPECT_EQ(client_->Get("v")->attr1, (std::vector<std::optional<uint32_t>>{3u}));
}

// ---- Frames: bodies ----

// ping and stats take no fields, but their body is held to the rule of every
// body: empty, or a MessagePack map (its keys ignored).
TEST_F(ProtocolTest, PingAndStatsBodiesAreEmptyOrAMap) {
  for (Op op : {Op::kPing, Op::kStats}) {
    SCOPED_TRACE(proto::OpName(static_cast<uint8_t>(op)));
    Call(op, "", Status::Code::kOk);
    Call(op, Mp().Map(0), Status::Code::kOk);
    Call(op, Mp().Map(1).Str("later").U(1), Status::Code::kOk);
    Frame f = Call(op, "\xc1", Status::Code::kInvalidArgument);
    EXPECT_NE(proto::DecodeError(f.body).find("not valid MessagePack"), std::string::npos);
    Call(op, Mp().Arr(0), Status::Code::kInvalidArgument);
    Call(op, Mp().Map(0).str() + "x", Status::Code::kInvalidArgument);
  }
  Frame pong = Call(Op::kPing, "", Status::Code::kOk);
  EXPECT_EQ(pong.header.body_length, 0u);
}

// Map keys are strings, each once, in every map the server reads.
TEST_F(ProtocolTest, KeysThatAreNotStringsOrAppearTwiceAreInvalid) {
  Upsert("u", {At(1, kNever)});
  Frame f =
      Call(Op::kGet, Mp().Map(2).Str("user").Str("u").U(1).U(2), Status::Code::kInvalidArgument);
  EXPECT_NE(proto::DecodeError(f.body).find("keys must be strings"), std::string::npos);
  f = Call(Op::kGet, Mp().Map(2).Str("user").Str("u").Str("user").Str("v"),
           Status::Code::kInvalidArgument);
  EXPECT_NE(proto::DecodeError(f.body).find("\"user\" appears twice"), std::string::npos);
  // The connection stays usable.
  Call(Op::kGet, Mp().Map(1).Str("user").Str("u"), Status::Code::kOk);
}

// The same bytes as str or bin are the same user.
TEST_F(ProtocolTest, AUserIdIsItsBytesWhetherStrOrBin) {
  Upsert("alice", {At(1, kNever)});
  Call(Op::kGet, Mp().Map(1).Str("user").Bin("alice"), Status::Code::kOk);
  Call(Op::kGet, Mp().Map(1).Str("user").Str("Alice"), Status::Code::kNotFound);
}

// ---- Frames: the header ----

// flags and the reserved bytes: a server ignores them in requests and sends
// zeros in every response.
TEST_F(ProtocolTest, FlagsAndReservedBytesAreIgnored) {
  std::string frame = MakeFrame(static_cast<uint8_t>(Op::kPing), 41, "");
  frame[5] = '\xff';
  frame[6] = '\x12';
  frame[7] = '\x34';
  ASSERT_TRUE(raw_.Write(frame));
  Frame f;
  ASSERT_TRUE(raw_.Expect(41, Status::Code::kOk, &f));
  EXPECT_EQ(f.raw_header.substr(5, 3), std::string(3, '\0'));
}

// A bad magic: one InvalidArgument frame with op 0 and request_id 0, then
// the connection closes.
TEST_F(ProtocolTest, ABadMagicIsAnsweredWithOpAndRequestIdZero) {
  std::string frame = MakeFrame(static_cast<uint8_t>(Op::kGet), 77, Mp().Map(0));
  frame[0] = 'X';
  ASSERT_TRUE(raw_.Write(frame));
  Frame f;
  ASSERT_TRUE(raw_.Expect(0, Status::Code::kInvalidArgument, &f));
  EXPECT_EQ(f.op(), 0u);
  EXPECT_TRUE(raw_.ExpectClosed());
}

// ---- Transport: end of stream ----

// A client that ends its stream after whole requests gets every answer, then
// the server closes; a partial frame at the end is dropped unanswered.
TEST_F(ProtocolTest, EndOfStreamAnswersEveryWholeRequestFirst) {
  Upsert("u", {At(1, kNever)});
  std::string burst =
      MakeFrame(static_cast<uint8_t>(Op::kPing), 1, "") +
      MakeFrame(static_cast<uint8_t>(Op::kGet), 2, Mp().Map(1).Str("user").Str("u"));
  ASSERT_TRUE(raw_.Write(burst));
  raw_.ShutdownWrite();
  std::vector<uint32_t> answered;
  for (int i = 0; i < 2; ++i) {
    Frame f;
    ASSERT_EQ(raw_.ReadFrame(&f), RawConn::ReadResult::kFrame);
    EXPECT_EQ(f.status(), Status::Code::kOk);
    answered.push_back(f.id());
  }
  std::sort(answered.begin(), answered.end());
  EXPECT_EQ(answered, (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(raw_.ExpectClosed());

  RawConn partial;
  ASSERT_TRUE(partial.Connect(served_.server->port()));
  const std::string whole = MakeFrame(static_cast<uint8_t>(Op::kPing), 3, "");
  const std::string cut =
      MakeFrame(static_cast<uint8_t>(Op::kGet), 4, Mp().Map(1).Str("user").Str("u"));
  ASSERT_TRUE(partial.Write(whole + cut.substr(0, cut.size() - 2)));
  partial.ShutdownWrite();
  EXPECT_TRUE(partial.Expect(3, Status::Code::kOk));
  EXPECT_TRUE(partial.ExpectClosed());
  // A cut write is not carried out.
  RawConn cut_write;
  ASSERT_TRUE(cut_write.Connect(served_.server->port()));
  const std::string upsert =
      MakeFrame(static_cast<uint8_t>(Op::kUpsert), 5,
                Mp().Map(2).Str("user").Str("cut").Str("segments").Arr(1).Arr(2).U(1).U(0));
  const uint64_t writes = Writes();
  ASSERT_TRUE(cut_write.Write(upsert.substr(0, upsert.size() - 1)));
  cut_write.ShutdownWrite();
  EXPECT_TRUE(cut_write.ExpectClosed());
  EXPECT_EQ(Writes(), writes);
  EXPECT_TRUE(client_->Get("cut").status().IsNotFound());
  // A header cut short is dropped the same way.
  RawConn header;
  ASSERT_TRUE(header.Connect(served_.server->port()));
  ASSERT_TRUE(header.Write(whole.substr(0, 9)));
  header.ShutdownWrite();
  EXPECT_TRUE(header.ExpectClosed());
}

// More requests than a connection serves at once (max_in_flight), then end
// of stream: the server reads the rest as the first are answered, and
// answers every one before it closes.
TEST_F(ProtocolTest, EndOfStreamWithMoreRequestsThanServedAtOnce) {
  // Upserts: each answer waits for its write to reach the device, so many
  // are still pending when the end of stream is read.
  const uint32_t n = ServerOptions{}.max_in_flight + 44;
  std::string burst;
  for (uint32_t i = 1; i <= n; ++i) {
    burst += MakeFrame(static_cast<uint8_t>(Op::kUpsert), i,
                       Mp().Map(2)
                           .Str("user")
                           .Str("u" + std::to_string(i))
                           .Str("segments")
                           .Arr(1)
                           .Arr(2)
                           .U(1)
                           .U(0));
  }
  ASSERT_TRUE(raw_.Write(burst));
  raw_.ShutdownWrite();
  std::vector<bool> seen(n + 1, false);
  for (uint32_t k = 0; k < n; ++k) {
    Frame f;
    ASSERT_EQ(raw_.ReadFrame(&f), RawConn::ReadResult::kFrame) << k << " answers so far";
    ASSERT_EQ(f.status(), Status::Code::kOk);
    ASSERT_GE(f.id(), 1u);
    ASSERT_LE(f.id(), n);
    EXPECT_FALSE(seen[f.id()]) << f.id();
    seen[f.id()] = true;
  }
  EXPECT_TRUE(raw_.ExpectClosed());
  EXPECT_EQ(client_->Get("u" + std::to_string(n))->count, 1u);
}

// ---- batch_get ----

TEST_F(ProtocolTest, BatchGetOfNoUsersIsAnEmptyAnswer) {
  Frame f = Call(Op::kBatchGet, Mp().Map(1).Str("users").Arr(0), Status::Code::kOk);
  BatchGetResult results;
  ASSERT_TRUE(proto::Decode(f.body, {}, &results).ok());
  EXPECT_TRUE(results.empty());
}

// A bad user ID among good ones fails alone; a bad shared option fails all.
TEST_F(ProtocolTest, ABadUserIdInABatchGetFailsAlone) {
  Upsert("a", {At(1, kNever)});
  Upsert("c", {At(3, kNever)});
  Frame f = Call(Op::kBatchGet, Mp().Map(1).Str("users").Arr(4).Str("a").Str("").Str("c").U(7),
                 Status::Code::kOk);
  BatchGetResult results;
  ASSERT_TRUE(proto::Decode(f.body, {}, &results).ok());
  ASSERT_EQ(results.size(), 4u);
  ASSERT_TRUE(results[0].ok());
  EXPECT_EQ(results[0]->ids, std::vector<uint64_t>{1});
  EXPECT_EQ(results[1].status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(results[1].status().message().find("users[1]"), std::string::npos);
  ASSERT_TRUE(results[2].ok());
  EXPECT_EQ(results[2]->ids, std::vector<uint64_t>{3});
  EXPECT_EQ(results[3].status().code(), Status::Code::kInvalidArgument);
  Call(Op::kBatchGet, Mp().Map(2).Str("users").Arr(1).Str("a").Str("limit").Str("x"),
       Status::Code::kInvalidArgument);
  Mp over;
  over.Map(1).Str("users").Arr(kMaxBatch + 1);
  for (uint32_t i = 0; i <= kMaxBatch; ++i) over.Str("a");
  Call(Op::kBatchGet, over, Status::Code::kLimitExceeded);
}

// ---- batch_upsert: one rule for item and frame failures ----

TEST_F(ProtocolTest, ABadBatchUpsertItemFailsAloneWhateverIsWrongWithIt) {
  auto item = [](Mp& m, std::string_view user, uint32_t first, uint32_t n, UnixSeconds exp) {
    m.Map(2).Str("user").Str(user).Str("segments").Arr(n);
    for (uint32_t i = 0; i < n; ++i) m.Arr(2).U(first + i).U(exp);
  };
  Mp m;
  m.Map(1).Str("items").Arr(7);
  item(m, "ok-1", 1, 2, kNever);
  m.Map(2).Str("user").Str("bad-type").Str("segments").Str("x");  // malformed
  item(m, "too-many", 1, 3 * kMaxSegments, kNever);               // over max_segments
  item(m, "past", 1, 1, kStart - 1);                              // expiry not in the future
  m.Map(2).Str("user").Str("twice").Str("segments").Arr(2).Arr(2).U(1).U(0).Arr(2).U(1).U(0);
  m.Str("not a map");
  item(m, "ok-2", 5, 1, kNever);
  const uint64_t writes = Writes();
  Frame f = Call(Op::kBatchUpsert, m, Status::Code::kOk);
  BatchUpsertResult results;
  ASSERT_TRUE(proto::Decode(f.body, {}, &results).ok());
  ASSERT_EQ(results.size(), 7u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(results[1].status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(results[1].status().message().find("items[1].segments"), std::string::npos);
  EXPECT_EQ(results[2].status().code(), Status::Code::kLimitExceeded);
  EXPECT_EQ(results[3].status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(results[4].status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(results[5].status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(results[6].ok());
  EXPECT_EQ(Writes(), writes + 2);  // the two good items, nothing else
  EXPECT_EQ(client_->Get("ok-1")->count, 2u);
  EXPECT_EQ(client_->Get("ok-2")->count, 1u);
  for (const char* user : {"bad-type", "too-many", "past", "twice"}) {
    EXPECT_TRUE(client_->Get(user).status().IsNotFound()) << user;
  }
  // A result over max_segments once merged fails its item alone too.
  Upsert("full", {At(1000, kNever)});
  Mp grow;
  grow.Map(1).Str("items").Arr(2);
  item(grow, "full", 1, kMaxSegments, kNever);
  item(grow, "ok-3", 1, 1, kNever);
  f = Call(Op::kBatchUpsert, grow, Status::Code::kOk);
  ASSERT_TRUE(proto::Decode(f.body, {}, &results).ok());
  EXPECT_EQ(results[0].status().code(), Status::Code::kLimitExceeded);
  EXPECT_TRUE(results[1].ok());
  EXPECT_EQ(client_->Get("full")->count, 1u);
}

TEST_F(ProtocolTest, ABatchItemWithABadModeFailsAlone) {
  Frame f = Call(Op::kBatchUpsert,
                 Mp().Map(1)
                     .Str("items")
                     .Arr(2)
                     .Map(3)
                     .Str("user")
                     .Str("a")
                     .Str("mode")
                     .Str("sometimes")
                     .Str("segments")
                     .Arr(0)
                     .Map(2)
                     .Str("user")
                     .Str("b")
                     .Str("segments")
                     .Arr(1)
                     .Arr(2)
                     .U(1)
                     .U(0),
                 Status::Code::kOk);
  BatchUpsertResult results;
  ASSERT_TRUE(proto::Decode(f.body, {}, &results).ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(results[0].status().message().find("items[0].mode"), std::string::npos);
  EXPECT_TRUE(results[1].ok());
  EXPECT_EQ(client_->Get("b")->count, 1u);
}

TEST_F(ProtocolTest, WhatIsWrongWithTheBatchItselfFailsItWhole) {
  const uint64_t writes = Writes();
  Mp over;
  over.Map(1).Str("items").Arr(kMaxBatch + 1);
  for (uint32_t i = 0; i <= kMaxBatch; ++i) {
    over.Map(2).Str("user").Str("u" + std::to_string(i)).Str("segments").Arr(1).Arr(2).U(1).U(0);
  }
  Call(Op::kBatchUpsert, over, Status::Code::kLimitExceeded);
  Call(Op::kBatchUpsert, Mp().Map(1).Str("items").Str("x"), Status::Code::kInvalidArgument);
  Call(Op::kBatchUpsert, Mp().Map(0), Status::Code::kInvalidArgument);
  Call(Op::kBatchUpsert,
       Mp().Map(2)
           .Str("mode")
           .Str("sometimes")
           .Str("items")
           .Arr(1)
           .Map(2)
           .Str("user")
           .Str("a")
           .Str("segments")
           .Arr(0),
       Status::Code::kInvalidArgument);
  EXPECT_EQ(Writes(), writes);
  // An empty batch is OK and empty.
  Frame f = Call(Op::kBatchUpsert, Mp().Map(1).Str("items").Arr(0), Status::Code::kOk);
  BatchUpsertResult results;
  ASSERT_TRUE(proto::Decode(f.body, {}, &results).ok());
  EXPECT_TRUE(results.empty());
}

}  // namespace
}  // namespace segstore::server
