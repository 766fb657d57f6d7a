// A cluster node's request path, in process, with the cluster view published
// by the test instead of etcd: WrongNode (with the map's revision) for a user
// the node does not hold, batches split by entry, Busy while the node serves
// nothing, and the cluster_map answer; and a single server's cluster_map.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cluster/view.h"
#include "common/clock.h"
#include "integration/in_process.h"
#include "profile/codec.h"
#include "profile/field_codec.h"
#include "profile/field_names.h"
#include "proto/wire.h"
#include "replica/replicator.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/routing.h"
#include "server/peer_links.h"
#include "server/raw_conn.h"
#include "storage/test_util.h"
#include "support/memory_log.h"
#include "support/wait_for.h"

namespace segstore::server {
namespace {

using testing::Frame;
using testing::MakeFrame;
using testing::RawConn;

constexpr UnixSeconds kStart = 1'790'000'000;

// Two nodes, "a" and "b": "a" holds the even partitions, "b" the odd ones.
ClusterMap TwoNodeMap(uint64_t revision) {
  ClusterMap m;
  m.cluster = true;
  m.revision = revision;
  m.replication = 1;
  m.nodes = {{"a", "127.0.0.1:7001", "r1"}, {"b", "127.0.0.1:7002", "r2"}};
  for (uint32_t p = 0; p < kPartitions; ++p) m.replicas.push_back(p % 2);
  return m;
}

std::shared_ptr<const cluster::ClusterView> ViewOf(const ClusterMap& map, bool serving,
                                                   bool hold_all = false) {
  auto v = std::make_shared<cluster::ClusterView>();
  v->map = map;
  v->map.self = "a";
  v->serving = serving;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    if (hold_all || p % 2 == 0) v->held.set(p);
  }
  return v;
}

// A user ID whose partition is even (held by "a") or odd.
std::string UserIn(bool even, int n) {
  for (int i = 0;; ++i) {
    std::string u = "user-" + std::to_string(n) + "-" + std::to_string(i);
    if ((PartitionOf(u) % 2 == 0) == even) return u;
  }
}

class ClusterServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    ProfileServiceOptions so;
    so.cluster = &board_;
    ServerOptions server;
    server.threads = 2;
    served_.Start(o, nullptr, p, so, server);
  }
  void TearDown() override { served_.Stop(); }

  std::vector<SegmentUpdate> One() {
    SegmentUpdate s;
    s.id = 7;
    s.value = 3600;
    s.ttl = true;
    return {s};
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  cluster::ViewBoard board_;
  testing::InProcessServer served_;
};

TEST_F(ClusterServiceTest, ANodeServingNothingAnswersBusyAndStillItsMap) {
  auto c = served_.Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_TRUE(c->Hello().ok());
  Result<ClusterMap> m = c->ClusterMap();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->cluster);
  EXPECT_EQ(m->revision, 0u);
  EXPECT_TRUE(m->nodes.empty());
  const std::string user = UserIn(true, 1);
  Result<GetResult> g = c->Get(user);
  EXPECT_EQ(g.status().code(), Status::Code::kBusy) << g.status().ToString();
  EXPECT_NE(g.status().message().find("joining"), std::string::npos) << g.status().ToString();
  EXPECT_EQ(c->Upsert(user, One()).status().code(), Status::Code::kBusy);
  std::vector<std::string> users = {user};
  EXPECT_EQ(c->BatchGet(users).status().code(), Status::Code::kBusy);
  // Registered, but the cluster has no map yet.
  auto v = std::make_shared<cluster::ClusterView>();
  v->map.cluster = true;
  v->serving = true;
  board_.Publish(v);
  g = c->Get(user);
  EXPECT_EQ(g.status().code(), Status::Code::kBusy);
  EXPECT_NE(g.status().message().find("no partition map"), std::string::npos);
}

TEST_F(ClusterServiceTest, UsersOfOtherNodesGetWrongNodeWithTheRevision) {
  board_.Publish(ViewOf(TwoNodeMap(42), true));
  auto c = served_.Connect();
  const std::string mine = UserIn(true, 1), theirs = UserIn(false, 1);
  ASSERT_TRUE(c->Upsert(mine, One()).ok());
  EXPECT_EQ(c->Get(mine)->count, 1u);
  EXPECT_EQ(*c->Count(mine), 1u);

  const auto wrong = [](const Status& s) { return s.code() == Status::Code::kWrongNode; };
  EXPECT_TRUE(wrong(c->Upsert(theirs, One()).status()));
  EXPECT_TRUE(wrong(c->Get(theirs).status()));
  EXPECT_TRUE(wrong(c->Count(theirs).status()));
  const uint64_t ids[] = {7};
  EXPECT_TRUE(wrong(c->Remove(theirs, ids).status()));
  EXPECT_TRUE(wrong(c->Trim(theirs).status()));
  EXPECT_TRUE(wrong(c->Delete(theirs).status()));
  EXPECT_TRUE(wrong(c->Expire(theirs, ids, ExpireSpec{60, true}).status()));
  EXPECT_NE(c->Get(theirs).status().message().find(
                "partition " + std::to_string(PartitionOf(theirs)) + " is not held"),
            std::string::npos);

  // On the wire: status 14 and the map's revision in the body.
  RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  proto::GetRequest req{theirs, {}};
  std::string body;
  proto::Encode(req, &body);
  ASSERT_TRUE(raw.Write(MakeFrame(static_cast<uint8_t>(proto::Op::kGet), 77, body)));
  Frame f;
  ASSERT_EQ(raw.ReadFrame(&f), RawConn::ReadResult::kFrame);
  EXPECT_EQ(f.id(), 77u);
  EXPECT_EQ(f.status(), Status::Code::kWrongNode);
  EXPECT_EQ(proto::DecodeErrorRevision(f.body), 42u);
  EXPECT_NE(proto::DecodeError(f.body).find("get: partition"), std::string::npos)
      << proto::DecodeError(f.body);

  // Nothing was written for `theirs`: a view holding everything finds nothing.
  board_.Publish(ViewOf(TwoNodeMap(43), true, /*hold_all=*/true));
  EXPECT_TRUE(c->Get(theirs).status().IsNotFound());
  EXPECT_EQ(c->Get(mine)->count, 1u);
}

TEST_F(ClusterServiceTest, BatchesAreSplitByEntry) {
  board_.Publish(ViewOf(TwoNodeMap(5), true));
  auto c = served_.Connect();
  const std::string a1 = UserIn(true, 1), b1 = UserIn(false, 1), a2 = UserIn(true, 2);
  std::vector<UpsertItem> items(3);
  items[0].user = a1;
  items[1].user = b1;
  items[2].user = a2;
  for (auto& i : items) i.segments = One();
  Result<BatchUpsertResult> up = c->BatchUpsert(items);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  ASSERT_EQ(up->size(), 3u);
  EXPECT_TRUE((*up)[0].ok());
  EXPECT_EQ((*up)[1].status().code(), Status::Code::kWrongNode);
  EXPECT_TRUE((*up)[2].ok());
  std::vector<std::string> users = {b1, a1, "", a2, b1};
  Result<BatchGetResult> got = c->BatchGet(users);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 5u);
  EXPECT_EQ((*got)[0].status().code(), Status::Code::kWrongNode);
  EXPECT_EQ((*got)[1]->count, 1u);
  EXPECT_EQ((*got)[2].status().code(), Status::Code::kInvalidArgument);  // the empty ID
  EXPECT_EQ((*got)[3]->count, 1u);
  EXPECT_EQ((*got)[4].status().code(), Status::Code::kWrongNode);
  // Only users of other nodes: every entry WrongNode, the frame OK.
  std::vector<std::string> theirs = {b1, UserIn(false, 2)};
  got = c->BatchGet(theirs);
  ASSERT_TRUE(got.ok());
  for (const auto& r : *got) EXPECT_EQ(r.status().code(), Status::Code::kWrongNode);
}

TEST_F(ClusterServiceTest, ClusterMapAnswersTheViewAndALostLeaseStopsServingAtOnce) {
  board_.Publish(ViewOf(TwoNodeMap(9), true));
  auto c = served_.Connect();
  Result<ClusterMap> m = c->ClusterMap();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ClusterMap expected = TwoNodeMap(9);
  expected.self = "a";
  EXPECT_EQ(*m, expected);
  const std::string mine = UserIn(true, 3);
  ASSERT_TRUE(c->Upsert(mine, One()).ok());
  board_.Publish(ViewOf(TwoNodeMap(9), /*serving=*/false));
  EXPECT_EQ(c->Get(mine).status().code(), Status::Code::kBusy);
  board_.Publish(ViewOf(TwoNodeMap(9), true));
  EXPECT_EQ(c->Get(mine)->count, 1u);
}

// Links on a cluster node whose view the test publishes: refused until
// every node of the map registered the "links" feature, then made; the
// node-to-node operations answer for the users this node holds only.
class ClusterLinkServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    ProfileServiceOptions so;
    so.cluster = &board_;
    so.peers = &peers_;
    served_.Start(o, nullptr, p, so, ServerOptions{});
  }
  void TearDown() override { served_.Stop(); }
  static std::vector<SegmentUpdate> One() { return {SegmentUpdate{7, 3600, true, {}, {}}}; }
  // Nodes "a" (this one) and "b", with the features given.
  void Publish(std::vector<std::string> a, std::vector<std::string> b, bool hold_all) {
    ClusterMap m = TwoNodeMap(5);
    m.nodes[0].features = std::move(a);
    m.nodes[1].features = std::move(b);
    board_.Publish(ViewOf(m, true, hold_all));
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  cluster::ViewBoard board_;
  PeerLinks peers_{client::ClientOptions{}, &board_};
  testing::InProcessServer served_;
};

TEST_F(ClusterLinkServiceTest, LinksWaitForEveryNodeToHaveTheFeature) {
  Publish({"links"}, {}, /*hold_all=*/true);
  auto c = served_.Connect();
  const std::string a = UserIn(true, 1), b = UserIn(true, 2);
  ASSERT_TRUE(c->Upsert(a, One()).ok());
  ASSERT_TRUE(c->Upsert(b, One()).ok());
  auto refused = c->Link(a, b);
  EXPECT_EQ(refused.status().code(), Status::Code::kUnsupported) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("node b of the cluster runs a build without links"),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(c->MasterOf(a).status().code(), Status::Code::kUnsupported);
  EXPECT_EQ(c->Get(a)->master, "");  // nothing was written
  // Every node upgraded: the same link is made.
  Publish({"links"}, {"links", "later"}, true);
  auto linked = c->Link(a, b);
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->master, b);
  EXPECT_EQ(*c->MasterOf(a), b);
  EXPECT_EQ(c->Get(a)->profiles, 2u);
}

// Field writes, like links, wait for every node of the map to run a build
// that applies their log entries; in a cluster without a log they are then
// applied at once, a linked user's on its master's record.
TEST_F(ClusterLinkServiceTest, FieldWritesWaitForEveryNodeToHaveTheFeature) {
  Publish({"links", "fields"}, {"links"}, /*hold_all=*/true);
  auto c = served_.Connect();
  const std::string a = UserIn(true, 21), m = UserIn(false, 22);
  FieldIncrement inc;
  inc.name = "cap:1";
  auto refused = c->FieldIncrement(a, inc);
  EXPECT_EQ(refused.status().code(), Status::Code::kUnsupported) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("node b of the cluster runs a build without fields"),
            std::string::npos)
      << refused.status().ToString();
  const std::vector<FieldUpdate> one = {FieldUpdate{"x", FieldValue::Int(1), kNever, false}};
  EXPECT_EQ(c->FieldSet(a, one).status().code(), Status::Code::kUnsupported);
  EXPECT_EQ(c->FieldDelete(a, std::vector<std::string>{"x"}).status().code(),
            Status::Code::kUnsupported);
  EXPECT_EQ(c->FieldMax(a, one[0]).status().code(), Status::Code::kUnsupported);
  // A malformed one is InvalidArgument first.
  const std::vector<FieldUpdate> bad = {FieldUpdate{"", FieldValue::Int(1), kNever, false}};
  EXPECT_EQ(c->FieldSet(a, bad).status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(c->Get(a).status().IsNotFound());  // nothing was written

  Publish({"links", "fields"}, {"links", "fields"}, true);
  EXPECT_EQ(c->FieldIncrement(a, inc)->value, 1);
  ASSERT_TRUE(c->Upsert(m, One()).ok());
  ASSERT_TRUE(c->Link(a, m).ok());
  EXPECT_EQ(c->FieldIncrement(a, inc)->value, 1);  // the master's counter
  EXPECT_EQ(c->FieldIncrement(m, inc)->value, 2);
  GetOptions own;
  own.own_only = true;
  own.fields.mode = FieldSelection::Mode::kAll;
  ASSERT_EQ(c->Get(a, own)->fields.size(), 1u);
  EXPECT_EQ(c->Get(a, own)->fields[0].value, FieldValue::Int(1));  // its own, from before
  // A user this node does not hold: WrongNode.
  Publish({"links", "fields"}, {"links", "fields"}, false);
  EXPECT_EQ(c->FieldIncrement(UserIn(false, 23), inc).status().code(), Status::Code::kWrongNode);
}

TEST_F(ClusterLinkServiceTest, NodeToNodeOperationsAnswerForTheUsersHeldHere) {
  Publish({"links"}, {"links"}, /*hold_all=*/false);
  auto c = served_.Connect();
  const std::string mine = UserIn(true, 3), theirs = UserIn(false, 4), none = UserIn(true, 5);
  ASSERT_TRUE(c->Upsert(mine, One()).ok());
  const std::vector<std::string> users = {mine, theirs, none};
  auto records = c->ReadRecords(users);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 3u);
  ASSERT_TRUE((*records)[0].ok());
  EXPECT_FALSE((*records)[0]->body.empty());
  EXPECT_EQ((*records)[0]->reference, "");
  EXPECT_EQ((*records)[1].status().code(), Status::Code::kWrongNode);
  EXPECT_TRUE((*records)[2].status().IsNotFound());
  // A step on a record held here is made; on one held elsewhere, WrongNode.
  LinkStep list;
  list.kind = LinkStep::Kind::kList;
  list.user = mine;
  list.member = theirs;
  list.max_links = 64;
  auto r = c->SendLinkStep(list);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(r->members, 1u);
  list.user = theirs;
  list.member = mine;
  EXPECT_EQ(c->SendLinkStep(list).status().code(), Status::Code::kWrongNode);
  // A merged read needs the member's record from node b, which cannot be
  // reached: the get says so rather than answer a part of the group.
  auto got = c->Get(mine);
  EXPECT_EQ(got.status().code(), Status::Code::kUnavailable) << got.status().ToString();
  EXPECT_NE(got.status().message().find(theirs), std::string::npos) << got.status().ToString();
  // Its own profile still reads alone.
  GetOptions own;
  own.own_only = true;
  EXPECT_EQ(c->Get(mine, own)->count, 1u);
}

// A single server (no cluster view), in process.
class SingleServerTest : public ::testing::Test {
 protected:
  void Start(const ServerOptions& server = {}) {
    profile::ProfileOptions p;
    p.sweeper = false;
    served_.Start(testing::SmallStore(dir_.File("data"), &clock_), nullptr, p, {}, server);
  }
  void TearDown() override { served_.Stop(); }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  testing::InProcessServer served_;
};

TEST_F(SingleServerTest, NodeToNodeLinkOperationsAreRefused) {
  Start();
  auto c = served_.Connect();
  LinkStep del;
  del.kind = LinkStep::Kind::kDelete;
  del.user = "u";
  auto r = c->SendLinkStep(del);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("node to node"), std::string::npos) << r.status().ToString();
  const std::vector<std::string> users = {"u"};
  EXPECT_EQ(c->ReadRecords(users).status().code(), Status::Code::kInvalidArgument);
}

// A single server keeps records of its own under FF 00 too (the field
// name table): it refuses those user IDs as a cluster node does.
TEST_F(SingleServerTest, UserIdsBeginningWithFF00AreRefused) {
  Start();
  auto c = served_.Connect();
  const std::string reserved = std::string("\xff\x00", 2) + "field-name:1";
  const std::vector<SegmentUpdate> seg = {{1, 60, true, {}, {}}};
  EXPECT_EQ(c->Get(reserved).status().code(), Status::Code::kInvalidArgument);
  Result<UpsertResult> up = c->Upsert(reserved, seg, UpsertMode::kSet);
  EXPECT_EQ(up.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(up.status().message().find("reserved"), std::string::npos) << up.status().ToString();
  EXPECT_EQ(c->Delete(reserved).status().code(), Status::Code::kInvalidArgument);
  std::vector<std::string> users = {"u", reserved};
  Result<BatchGetResult> b = c->BatchGet(users);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*b)[0].status().IsNotFound());
  EXPECT_EQ((*b)[1].status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(c->Upsert(std::string("\xff", 1), seg, UpsertMode::kSet).ok());
}

TEST_F(SingleServerTest, ClusterMapSaysNotACluster) {
  Start();
  auto c = served_.Connect();
  Result<ClusterMap> m = c->ClusterMap();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, ClusterMap{});
  EXPECT_FALSE(m->cluster);
}

// A connection the server closed while idle is replaced before a write is
// sent on it: the write is done, not reported as of unknown outcome.
TEST_F(SingleServerTest, ClusterClientReplacesAConnectionTheServerClosed) {
  ServerOptions so;
  so.idle_timeout = std::chrono::seconds(1);
  Start(so);
  client::ClusterClientOptions o;
  o.node.port = served_.server->port();
  auto c = client::ClusterClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  SegmentUpdate s;
  s.id = 1;
  s.value = 3600;
  s.ttl = true;
  const std::vector<SegmentUpdate> one = {s};
  ASSERT_TRUE((*c)->Upsert("alice", one).ok());
  Result<client::Client*> node = (*c)->NodeClient((*c)->NodeOf("alice"));
  ASSERT_TRUE(node.ok());
  client::Client* first = *node;
  // The server closes the connection after a second without requests; the
  // client sees it (is_open reads what arrived).
  ASSERT_TRUE(segstore::testing::WaitFor([&] { return !first->is_open(); },
                                         std::chrono::seconds(60), std::chrono::milliseconds(20)))
      << "the server did not close the idle connection within a minute (idle_timeout 1 s); "
         "connections closed idle: "
      << served_.server->counters().connections_idle_closed;
  Result<UpsertResult> again = (*c)->Upsert("alice", one);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*c)->Get("alice")->count, 1u);
}

// A node of a cluster with a log (an in-memory one here): writes go through
// the log and are answered once applied; the answers say duplicate and stale
// as PROTOCOL.md defines them.
class ReplicatedServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ViewOf(TwoNodeMap(7), true), nullptr); }
  void Start(std::shared_ptr<const cluster::ClusterView> view, PeerLinks* peers) {
    board_.Publish(std::move(view));
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    ProfileServiceOptions so;
    so.cluster = &board_;
    so.peers = peers;
    ServerOptions server;
    server.threads = 2;
    served_.Start(o, nullptr, p, so, server,
                  [this](testing::InProcessServer* s, ProfileServiceOptions* options) {
                    replica::ReplicaOptions ro;
                    ro.log.partitions = 8;
                    ro.apply_timeout = std::chrono::seconds(5);
                    ro.applier.max_lag = std::chrono::milliseconds(500);
                    auto r = replica::Replicator::Start(ro, s->profiles.get(), &board_,
                                                        log_->NewWriter(), log_->NewReader());
                    ASSERT_TRUE(r.ok()) << r.status().ToString();
                    s->replicator = std::move(*r);
                    options->replicator = s->replicator.get();
                  });
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_TRUE(WaitFor([&] { return served_.replicator->caught_up(); }));
  }
  void TearDown() override { served_.Stop(); }

  template <typename Pred>
  static bool WaitFor(Pred done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  static std::vector<SegmentUpdate> Add(uint32_t seconds) {
    SegmentUpdate s;
    s.id = 7;
    s.value = seconds;
    return {s};
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  cluster::ViewBoard board_;
  std::shared_ptr<segstore::testing::MemoryLog> log_ = segstore::testing::MemoryLog::Make(8);
  testing::InProcessServer served_;
};

TEST_F(ReplicatedServiceTest, WritesGoThroughTheLogAndAreAnsweredOnceApplied) {
  auto c = served_.Connect();
  ASSERT_NE(c, nullptr);
  const std::string user = UserIn(true, 1);
  Result<UpsertResult> r = c->Upsert(user, Add(3600), UpsertMode::kAdd);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->inserted, 1u);
  EXPECT_FALSE(r->duplicate);
  size_t entries = 0;
  for (uint32_t l = 0; l < 8; ++l) entries += static_cast<size_t>(log_->End(l));
  EXPECT_EQ(entries, 1u);
  Result<GetResult> g = c->Get(user);  // applied before the answer: read your write
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->expires, std::vector<UnixSeconds>{kStart + 3600});
  EXPECT_FALSE(g->stale);
  // Every write, and the batch's items one entry each.
  std::vector<uint64_t> ids = {7};
  EXPECT_EQ(c->Remove(user, ids).value(), 1u);
  EXPECT_EQ(c->Remove(user, ids).status().code(), Status::Code::kNotFound);
  std::vector<UpsertItem> items = {{UserIn(true, 2), Add(60), UpsertMode::kAdd, {}},
                                   {UserIn(false, 2), Add(60), UpsertMode::kAdd, {}},
                                   {UserIn(true, 3), Add(60), UpsertMode::kAdd, {}}};
  Result<BatchUpsertResult> b = c->BatchUpsert(items);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE((*b)[0].ok());
  EXPECT_EQ((*b)[1].status().code(), Status::Code::kWrongNode);
  EXPECT_TRUE((*b)[2].ok());
  EXPECT_EQ(c->Trim(UserIn(true, 2), kStart + 3600).value().trimmed, 1u);
  EXPECT_FALSE(c->Delete(UserIn(true, 2)).value());  // trimmed away already
  EXPECT_TRUE(c->Delete(UserIn(true, 3)).value());
  // A bad request is answered at once and never reaches the log.
  entries = 0;
  for (uint32_t l = 0; l < 8; ++l) entries += static_cast<size_t>(log_->End(l));
  SegmentUpdate past;
  past.id = 1;
  past.value = kStart - 1;
  EXPECT_EQ(c->Upsert(user, std::vector{past}).status().code(), Status::Code::kInvalidArgument);
  size_t after = 0;
  for (uint32_t l = 0; l < 8; ++l) after += static_cast<size_t>(log_->End(l));
  EXPECT_EQ(after, entries);
  Result<ClusterMap> m = c->ClusterMap();
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->log);
}

TEST_F(ReplicatedServiceTest, AWriteIdIsAppliedOnceAndItsRetryIsMarkedDuplicate) {
  auto c = served_.Connect();
  const std::string user = UserIn(true, 4);
  const WriteId id{77, 1};
  Result<UpsertResult> first = c->Upsert(user, Add(60), UpsertMode::kAdd, id);
  Result<UpsertResult> again = c->Upsert(user, Add(60), UpsertMode::kAdd, id);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(first->duplicate);
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->inserted, 1u);
  EXPECT_EQ(c->Get(user)->expires, std::vector<UnixSeconds>{kStart + 60});
  const WriteId del{77, 2};
  EXPECT_TRUE(c->Delete(user, del).value());
  Result<bool> del_again = c->Delete(user, del);
  ASSERT_TRUE(del_again.ok());
  EXPECT_TRUE(*del_again);  // the first answer's
}

TEST_F(ReplicatedServiceTest, AnExpireGoesThroughTheLogOnceAndItsRetryGetsTheFirstOutcomes) {
  using EO = ExpireOutcome;
  auto c = served_.Connect();
  const std::string user = UserIn(true, 6);
  ASSERT_TRUE(c->Upsert(user, Add(600), UpsertMode::kAdd).ok());
  size_t entries = 0;
  for (uint32_t l = 0; l < 8; ++l) entries += static_cast<size_t>(log_->End(l));
  const std::vector<uint64_t> ids = {7, 8};
  const WriteId id{78, 1};
  Result<ExpireResult> first = c->Expire(user, ids, ExpireSpec{3600, true}, id);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->results, (std::vector<EO>{EO::kSet, EO::kMissing}));
  EXPECT_EQ(first->count, 1u);
  EXPECT_FALSE(first->duplicate);
  clock_.Advance(5);
  Result<ExpireResult> again = c->Expire(user, ids, ExpireSpec{3600, true}, id);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->results, first->results);
  EXPECT_EQ(again->count, 1u);
  EXPECT_EQ(c->Get(user)->expires, std::vector<UnixSeconds>{kStart + 3600});  // applied once
  // A bad request is answered at once and never reaches the log.
  size_t after = 0;
  for (uint32_t l = 0; l < 8; ++l) after += static_cast<size_t>(log_->End(l));
  EXPECT_EQ(after, entries + 2);
  EXPECT_EQ(c->Expire(user, ids, ExpireSpec{UINT32_MAX, true}).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(c->Expire(UserIn(true, 99), ids, ExpireSpec{60, true}).status().code(),
            Status::Code::kNotFound);
  size_t last = 0;
  for (uint32_t l = 0; l < 8; ++l) last += static_cast<size_t>(log_->End(l));
  EXPECT_EQ(last, after + 1);  // NotFound is the applier's answer: logged
}

TEST_F(ReplicatedServiceTest, ALogThatRefusesWritesIsSaidAndReadsAreMarkedStale) {
  auto c = served_.Connect();
  const std::string user = UserIn(true, 5);
  ASSERT_TRUE(c->Upsert(user, Add(3600), UpsertMode::kAdd).ok());
  log_->SetDown(true);
  Result<UpsertResult> refused = c->Upsert(user, Add(60), UpsertMode::kAdd);
  EXPECT_EQ(refused.status().code(), Status::Code::kLogUnavailable) << refused.status().ToString();
  // The stale bit, in the frame's header: flags 0x01.
  RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  ASSERT_TRUE(WaitFor([&] {
    proto::GetRequest req{user, {}};
    std::string body;
    proto::Encode(req, &body);
    if (!raw.Write(MakeFrame(static_cast<uint8_t>(proto::Op::kGet), 9, body))) return false;
    Frame f;
    if (raw.ReadFrame(&f) != RawConn::ReadResult::kFrame) return false;
    return f.status() == Status::Code::kOk && f.header.flags == proto::kFlagStale;
  }));
  Result<GetResult> g = c->Get(user);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->stale);
  EXPECT_EQ(g->expires, std::vector<UnixSeconds>{kStart + 3600});  // the refused add was not made
  // A scan of the user's partition says so too, and still answers the copy.
  Result<ScanResponse> page = c->Scan(ScanRequest{PartitionOf(user), 0, 0});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(page->stale);
  ASSERT_EQ(page->profiles.size(), 1u);
  EXPECT_EQ(page->profiles[0].user, user);
  log_->SetDown(false);
  ASSERT_TRUE(WaitFor([&] {
    Result<GetResult> r = c->Get(user);
    return r.ok() && !r->stale;
  }));
  page = c->Scan(ScanRequest{PartitionOf(user), 0, 0});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_FALSE(page->stale);
  EXPECT_TRUE(c->Upsert(user, Add(60), UpsertMode::kAdd).ok());
}

TEST_F(ReplicatedServiceTest, TheClusterClientRetriesAWriteInDoubtWithItsWriteId) {
  // The node's map names this very server, so the client routes to it.
  ClusterMap map = TwoNodeMap(8);
  map.nodes[0].address = "127.0.0.1:" + std::to_string(served_.server->port());
  board_.Publish(ViewOf(map, true));
  client::ClusterClientOptions o;
  o.node.port = served_.server->port();
  o.node.request_timeout = std::chrono::seconds(10);
  auto c = client::ClusterClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->map().log);
  const std::string user = UserIn(true, 6);
  // The log takes the first append but its acknowledgement is lost: the node
  // answers InDoubt, the client sends the write again with the same ID, and
  // the node answers it from what it applied.
  log_->FailNextMaybeWritten(1, /*write=*/true);
  Result<UpsertResult> r = (*c)->Upsert(user, Add(60), UpsertMode::kAdd);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->duplicate);
  EXPECT_GE((*c)->retries(), 1u);
  EXPECT_EQ((*c)->Get(user)->expires, std::vector<UnixSeconds>{kStart + 60});  // added once
  // Not taken at all: the retry makes it.
  log_->FailNextMaybeWritten(1, /*write=*/false);
  r = (*c)->Upsert(user, Add(60), UpsertMode::kAdd);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->duplicate);
  EXPECT_EQ((*c)->Get(user)->expires, std::vector<UnixSeconds>{kStart + 120});
}

// Profile fields through the log: each write applied once per write ID (a
// retry answered with the first write's outcome), a linked user's writes on
// its master's record, and records leaving the node with their field names
// in full. The node holds every partition, and every node has the features.
class ReplicatedFieldTest : public ReplicatedServiceTest {
 protected:
  void SetUp() override {
    ClusterMap m = TwoNodeMap(8);
    m.nodes[0].features = {"links", "fields"};
    m.nodes[1].features = {"links", "fields"};
    Start(ViewOf(m, true, /*hold_all=*/true), &peers_);
  }
  static FieldUpdate Set(std::string name, FieldValue v) {
    return FieldUpdate{std::move(name), std::move(v), kNever, false};
  }
  std::map<std::string, FieldValue> FieldsOf(client::Client& c, const std::string& user,
                                             bool own = false) {
    GetOptions o;
    o.fields.mode = FieldSelection::Mode::kAll;
    o.own_only = own;
    std::map<std::string, FieldValue> out;
    auto got = c.Get(user, o);
    if (got.ok()) {
      for (const Field& f : got->fields) out.emplace(f.name, f.value);
    }
    return out;
  }
  uint64_t Applied() { return served_.replicator->stats().applier.applied; }

  PeerLinks peers_{client::ClientOptions{}, &board_};
};

TEST_F(ReplicatedFieldTest, EachFieldWriteGoesThroughTheLogOncePerWriteId) {
  auto c = served_.Connect();
  ASSERT_NE(c, nullptr);
  const std::string user = UserIn(true, 11);
  const uint64_t before = Applied();
  const std::vector<FieldUpdate> set = {Set("country", FieldValue::String("DE")),
                                        Set("score", FieldValue::Double(0.5))};
  auto w = c->FieldSet(user, set, WriteId{90, 1});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->count, 2u);
  auto again = c->FieldSet(user, set, WriteId{90, 1});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->changed, 2u);  // the first answer's
  EXPECT_EQ(again->count, 2u);

  FieldIncrement inc;
  inc.name = "cap:1";
  inc.delta = 5;
  inc.cap = 7;
  auto i1 = c->FieldIncrement(user, inc, WriteId{90, 2});
  ASSERT_TRUE(i1.ok()) << i1.status().ToString();
  EXPECT_EQ(i1->value, 5);
  auto i1_again = c->FieldIncrement(user, inc, WriteId{90, 2});
  ASSERT_TRUE(i1_again.ok());
  EXPECT_TRUE(i1_again->duplicate);
  EXPECT_EQ(i1_again->value, 5);  // not applied twice
  auto capped = c->FieldIncrement(user, inc, WriteId{90, 3});
  ASSERT_TRUE(capped.ok());
  EXPECT_TRUE(capped->capped);
  auto capped_again = c->FieldIncrement(user, inc, WriteId{90, 3});
  ASSERT_TRUE(capped_again.ok());
  EXPECT_TRUE(capped_again->duplicate && capped_again->capped);
  inc.delta = -9;
  inc.cap.reset();
  EXPECT_EQ(c->FieldIncrement(user, inc, WriteId{90, 4})->value, -4);
  EXPECT_EQ(c->FieldIncrement(user, inc, WriteId{90, 4})->value, -4);

  auto m = c->FieldMax(user, Set("seen", FieldValue::Time(kStart + 5)), WriteId{90, 5});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->replaced);
  auto m_again = c->FieldMax(user, Set("seen", FieldValue::Time(kStart + 5)), WriteId{90, 5});
  ASSERT_TRUE(m_again.ok());
  EXPECT_TRUE(m_again->duplicate && m_again->replaced);
  EXPECT_EQ(m_again->value, FieldValue::Time(kStart + 5));
  // A string is no value for field_max: refused before the log, as anywhere.
  auto refused = c->FieldMax(user, Set("name", FieldValue::String("b")), WriteId{90, 6});
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument) << refused.status().ToString();
  auto refused_again = c->FieldMax(user, Set("name", FieldValue::String("b")), WriteId{90, 6});
  EXPECT_EQ(refused_again.status().code(), Status::Code::kInvalidArgument);

  const std::vector<std::string> names = {"score", "nope"};
  auto d = c->FieldDelete(user, names, WriteId{90, 7});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->changed, 1u);
  auto d_again = c->FieldDelete(user, names, WriteId{90, 7});
  ASSERT_TRUE(d_again.ok());
  EXPECT_TRUE(d_again->duplicate);
  EXPECT_EQ(d_again->changed, 1u);

  const auto now = FieldsOf(*c, user);
  EXPECT_EQ(now.size(), 3u);
  EXPECT_EQ(now.at("cap:1"), FieldValue::Int(-4));
  EXPECT_EQ(now.at("country"), FieldValue::String("DE"));
  EXPECT_EQ(now.at("seen"), FieldValue::Time(kStart + 5));
  // Six writes applied (the capped one as a refusal); the retries were not
  // (the applier publishes its figures as it goes).
  EXPECT_TRUE(WaitFor([&] { return Applied() - before >= 6; })) << Applied() - before;
  EXPECT_EQ(Applied() - before, 6u);
  EXPECT_GE(served_.replicator->stats().applier.duplicates, 6u);
  // A write over a limit is refused before the log, writing nothing.
  const uint64_t submitted = served_.replicator->stats().submitted;
  const std::vector<FieldUpdate> bad = {Set("country", FieldValue::String(std::string(2000, 'x')))};
  EXPECT_EQ(c->FieldSet(user, bad).status().code(), Status::Code::kLimitExceeded);
  FieldIncrement past;
  past.name = "n";
  past.ttl = UINT32_MAX;
  EXPECT_EQ(c->FieldIncrement(user, past).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(served_.replicator->stats().submitted, submitted);
  EXPECT_EQ(FieldsOf(*c, user).at("country"), FieldValue::String("DE"));
}

TEST_F(ReplicatedFieldTest, ALinkedUsersFieldWritesChangeItsMastersRecord) {
  auto c = served_.Connect();
  const std::string member = UserIn(true, 12), master = UserIn(false, 13);
  const std::vector<SegmentUpdate> one = {SegmentUpdate{7, 3600, true, {}, {}}};
  ASSERT_TRUE(c->Upsert(member, one).ok());
  ASSERT_TRUE(c->Upsert(master, one).ok());
  auto linked = c->Link(member, master);
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  FieldIncrement inc;
  inc.name = "cap:9";
  for (int i = 0; i < 3; ++i) {
    auto r = c->FieldIncrement(member, inc, WriteId{91, static_cast<uint64_t>(i + 1)});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->value, i + 1);
  }
  ASSERT_TRUE(c->FieldIncrement(master, inc).ok());
  EXPECT_EQ(FieldsOf(*c, master).at("cap:9"), FieldValue::Int(4));
  EXPECT_EQ(FieldsOf(*c, member).at("cap:9"), FieldValue::Int(4));  // the master's, merged
  EXPECT_TRUE(FieldsOf(*c, member, /*own=*/true).empty());
  // Unlinked, the member's writes are its own again.
  ASSERT_TRUE(c->Unlink(member).ok());
  EXPECT_EQ(c->FieldIncrement(member, inc)->value, 1);
  EXPECT_EQ(FieldsOf(*c, master).at("cap:9"), FieldValue::Int(4));
}

TEST_F(ReplicatedFieldTest, RecordsSentToOtherNodesNameTheirFieldsInFull) {
  auto c = served_.Connect();
  const std::string user = UserIn(true, 14);
  FieldIncrement inc;
  inc.name = "cap:numbered";
  ASSERT_TRUE(c->FieldIncrement(user, inc).ok());
  const profile::FieldNames& names = profile::FieldNamesOf(*served_.profiles);
  ASSERT_TRUE(WaitFor([&] { return names.Find("cap:numbered") != 0; }));
  ASSERT_TRUE(c->FieldIncrement(user, inc).ok());  // now stored by number
  auto fields_of = [](std::string_view body) {
    profile::Columns columns;
    std::vector<profile::StoredField> out;
    EXPECT_TRUE(profile::DecodeColumns(body, &columns).ok());
    EXPECT_TRUE(profile::DecodeFieldSection(columns.fields, &out).ok());
    return out;
  };
  {
    auto w = served_.store->NewWorker();
    ASSERT_TRUE(w.ok());
    auto stored = (*w)->GetSync(user);
    ASSERT_TRUE(stored.ok());
    const auto here = fields_of(stored->body());
    ASSERT_EQ(here.size(), 1u);
    EXPECT_EQ(here[0].name_id, names.Find("cap:numbered"));
  }
  const std::vector<std::string> users = {user};
  auto records = c->ReadRecords(users);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_TRUE((*records)[0].ok());
  const auto sent = fields_of((*records)[0]->body);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].name_id, 0u);
  EXPECT_EQ(sent[0].name, "cap:numbered");
  // copy_partition's pages likewise.
  CopyPartitionRequest page_request;
  page_request.partition = PartitionOf(user);
  bool found = false;
  while (!found) {
    auto page = c->CopyPartition(page_request);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const CopiedRecord& r : page->records) {
      if (r.key != user) continue;
      found = true;
      const auto copied = fields_of(r.body);
      ASSERT_EQ(copied.size(), 1u);
      EXPECT_EQ(copied[0].name_id, 0u);
      EXPECT_EQ(copied[0].name, "cap:numbered");
    }
    if (page->cursor >= storage::kPartitionListEnd) break;
    page_request.cursor = page->cursor;
  }
  EXPECT_TRUE(found);
}

TEST_F(ReplicatedServiceTest, UserIdsBeginningWithFF00AreRefused) {
  auto c = served_.Connect();
  const std::string reserved("\xff\x00segstore:applied:0", 20);
  EXPECT_EQ(c->Get(reserved).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c->Upsert(reserved, Add(60), UpsertMode::kAdd).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(c->Delete(reserved).status().code(), Status::Code::kInvalidArgument);
  std::vector<std::string> users = {UserIn(true, 7), reserved};
  Result<BatchGetResult> b = c->BatchGet(users);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*b)[0].status().IsNotFound());
  EXPECT_EQ((*b)[1].status().code(), Status::Code::kInvalidArgument);
  // Just one byte of it is an ordinary user.
  EXPECT_TRUE(c->Get(std::string("\xff", 1)).status().code() != Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace segstore::server
