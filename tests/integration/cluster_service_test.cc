// A cluster node's request path, in process, with the cluster view published
// by the test instead of etcd: WrongNode (with the map's revision) for a user
// the node does not hold, batches split by entry, Busy while the node serves
// nothing, and the cluster_map answer; and a single server's cluster_map.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster/view.h"
#include "common/clock.h"
#include "integration/in_process.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/routing.h"
#include "server/raw_conn.h"
#include "storage/test_util.h"

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
  // The server closes the connection after a second without requests.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (first->is_open() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(first->is_open());
  Result<UpsertResult> again = (*c)->Upsert("alice", one);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*c)->Get("alice")->count, 1u);
}

}  // namespace
}  // namespace segstore::server
