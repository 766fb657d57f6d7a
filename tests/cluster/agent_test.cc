// The cluster layer against a real etcd (Debian's etcd-server, started by the
// test on loopback): the gateway client, node registration, the first map,
// the controller's election and hand-over, a lost lease, and etcd going away.
#include "cluster/agent.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/placement.h"
#include "support/etcd_server.h"
#include "support/redis_server.h"  // FreePort

namespace segstore::cluster {
namespace {

using namespace std::chrono_literals;
using segstore::testing::EtcdCluster;

// Polls `done` until it holds or `timeout` passes (generous: a busy 2-core
// machine runs etcd, the agents and the test).
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

std::unique_ptr<EtcdClient> ClientOf(const std::vector<std::string>& endpoints) {
  EtcdOptions o;
  o.endpoints = endpoints;
  o.timeout = 5s;
  auto c = EtcdClient::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(etcd_.Start(&why)) << why;
  }
  EtcdCluster etcd_{1};
};

TEST_F(EtcdTest, ClientPutsRangesAndTransacts) {
  auto c = ClientOf(etcd_.endpoints());
  Result<int64_t> rev = c->Put("/t/a", std::string("1\0x", 3));
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  ASSERT_TRUE(c->Put("/t/b", "2").ok());
  ASSERT_TRUE(c->Put("/u", "3").ok());
  Result<RangeResult> one = c->Range("/t/a");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->kvs.size(), 1u);
  EXPECT_EQ(one->kvs[0].value, std::string("1\0x", 3));  // bytes, not text
  EXPECT_EQ(one->kvs[0].mod_revision, *rev);
  Result<RangeResult> prefix = c->Range("/t/", true);
  ASSERT_TRUE(prefix.ok());
  ASSERT_EQ(prefix->kvs.size(), 2u);
  EXPECT_EQ(prefix->kvs[1].key, "/t/b");
  // Only what changed at or after a revision.
  EXPECT_TRUE(c->Range("/t/a", false, *rev + 1)->kvs.empty());
  EXPECT_TRUE(c->Range("/missing")->kvs.empty());

  // Create-if-absent, then compare-and-set on the mod revision.
  const Compare absent{"/t/c", Compare::Target::kCreate, 0};
  EXPECT_TRUE(*c->PutIf({absent}, "/t/c", "first"));
  EXPECT_FALSE(*c->PutIf({absent}, "/t/c", "second"));
  EXPECT_EQ(c->Range("/t/c")->kvs[0].value, "first");
  const int64_t mod = c->Range("/t/c")->kvs[0].mod_revision;
  EXPECT_FALSE(*c->PutIf({Compare{"/t/c", Compare::Target::kMod, mod - 1}}, "/t/c", "stale"));
  EXPECT_TRUE(*c->PutIf({Compare{"/t/c", Compare::Target::kMod, mod}}, "/t/c", "third"));
  EXPECT_EQ(c->Range("/t/c")->kvs[0].value, "third");
  EXPECT_TRUE(*c->DeleteIf(
      {Compare{"/t/c", Compare::Target::kCreate, c->Range("/t/c")->kvs[0].create_revision}},
      "/t/c"));
  EXPECT_TRUE(c->Range("/t/c")->kvs.empty());
  ASSERT_TRUE(c->Delete("/t/", true).ok());
  EXPECT_TRUE(c->Range("/t/", true)->kvs.empty());
  EXPECT_EQ(c->Range("/u")->kvs.size(), 1u);
}

TEST_F(EtcdTest, LeasesKeepKeysAndTheirEndDeletesThem) {
  auto c = ClientOf(etcd_.endpoints());
  Result<int64_t> lease = c->Grant(5);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(c->Put("/l/k", "v", *lease).ok());
  EXPECT_EQ(c->Range("/l/k")->kvs[0].lease, *lease);
  Result<int64_t> ttl = c->KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(c->Revoke(*lease).ok());
  EXPECT_TRUE(c->Range("/l/k")->kvs.empty());
  EXPECT_TRUE(c->KeepAlive(*lease).status().IsNotFound());
  EXPECT_TRUE(c->Revoke(*lease).ok());  // gone already: fine
}

TEST(EtcdClientTest, RefusesBadEndpointsAndSaysWhenNothingAnswers) {
  EtcdOptions o;
  EXPECT_EQ(EtcdClient::Create(o).status().code(), Status::Code::kInvalidArgument);
  for (const char* bad : {"127.0.0.1:2379", "https://127.0.0.1:2379", "http://127.0.0.1",
                          "http://127.0.0.1:0", "http://127.0.0.1:99999", "http://:2379"}) {
    o.endpoints = {bad};
    EXPECT_EQ(EtcdClient::Create(o).status().code(), Status::Code::kInvalidArgument) << bad;
  }
  // A port nothing listens on.
  o.endpoints = {"http://127.0.0.1:" + std::to_string(segstore::testing::FreePort())};
  o.timeout = 2s;
  auto c = EtcdClient::Create(o);
  ASSERT_TRUE(c.ok());
  Result<RangeResult> r = (*c)->Range("/x");
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable) << r.status().ToString();
}

// A member that stops answering (SIGSTOP): a call ends with Timeout within
// its bound, and once the member is back the same client works again.
TEST_F(EtcdTest, ACallToAStalledMemberTimesOutAndTheClientRecovers) {
  EtcdOptions o;
  o.endpoints = etcd_.endpoints();
  o.timeout = 500ms;
  auto c = EtcdClient::Create(o);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Put("/s/k", "v").ok());
  ASSERT_TRUE(etcd_.Pause(0));
  const auto start = std::chrono::steady_clock::now();
  Result<RangeResult> r = (*c)->Range("/s/k");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status().code(), Status::Code::kTimeout) << r.status().ToString();
  EXPECT_LT(took, 5s);  // one timeout (and one retry of a read), not forever
  EXPECT_EQ((*c)->Put("/s/k", "w").status().code(), Status::Code::kTimeout);
  etcd_.Resume(0);
  EXPECT_TRUE(WaitFor([&] {
    Result<RangeResult> again = (*c)->Range("/s/k");
    return again.ok() && again->kvs.size() == 1;
  }));
}

TEST(EtcdClientTest, MovesToAnotherMemberWhenOneDies) {
  EtcdCluster etcd(3);
  std::string why;
  ASSERT_TRUE(etcd.Start(&why)) << why;
  auto c = ClientOf(etcd.endpoints());
  ASSERT_TRUE(c->Put("/k", "v").ok());
  const std::string first = c->endpoint();
  int member = -1;
  for (int i = 0; i < 3; ++i) {
    if (etcd.endpoint(i) == first) member = i;
  }
  ASSERT_GE(member, 0) << first;
  etcd.Kill(member);
  // One call may fail (it was on the dead member); the next ones go elsewhere.
  bool served = WaitFor([&] {
    Result<RangeResult> r = c->Range("/k");
    return r.ok() && r->kvs.size() == 1 && r->kvs[0].value == "v";
  });
  EXPECT_TRUE(served);
  EXPECT_NE(c->endpoint(), first);
}

// ---- the agent ----

class AgentTest : public EtcdTest {
 protected:
  AgentOptions Options(const std::string& id, uint32_t initial_nodes) {
    AgentOptions o;
    o.etcd.endpoints = etcd_.endpoints();
    o.etcd.timeout = 1s;
    o.prefix = "/segstore-test";
    o.self = ClusterNode{id, "127.0.0.1:" + std::to_string(7000 + id.back()), "rack-" + id};
    o.initial_nodes = initial_nodes;
    // Four etcd timeouts: slow answers on a busy machine cost no lease.
    o.lease_ttl = 4s;
    o.poll_interval = 50ms;
    return o;
  }

  struct Node {
    ViewBoard board;
    std::unique_ptr<ClusterAgent> agent;
  };

  std::unique_ptr<Node> StartNode(const AgentOptions& o) {
    auto n = std::make_unique<Node>();
    auto a = ClusterAgent::Start(o, &n->board);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (a.ok()) n->agent = std::move(*a);
    return n;
  }

  static bool Serving(const Node& n) {
    auto v = n.board.view();
    return v->serving && v->map.has_map();
  }
};

TEST_F(AgentTest, RefusesOptionsThatCannotWork) {
  ViewBoard board;
  AgentOptions o = Options("n1", 1);
  auto refused = [&](AgentOptions bad) {
    return ClusterAgent::Start(bad, &board).status().code() == Status::Code::kInvalidArgument;
  };
  AgentOptions x = o;
  x.self.id = "";
  EXPECT_TRUE(refused(x));
  x = o;
  x.self.id = "a/b";
  EXPECT_TRUE(refused(x));
  x = o;
  x.self.address = "";
  EXPECT_TRUE(refused(x));
  x = o;
  x.replication = 2;
  x.initial_nodes = 1;
  EXPECT_TRUE(refused(x));
  x = o;
  x.lease_ttl = 1s;
  EXPECT_TRUE(refused(x));
  x = o;
  x.poll_interval = 2s;  // over a third of the lease: keepalives could come late
  EXPECT_TRUE(refused(x));
  x = o;
  x.etcd.timeout = 2s;
  EXPECT_TRUE(refused(x));
  x = o;
  x.prefix = "segstore";
  EXPECT_TRUE(refused(x));
  x = o;
  x.etcd.endpoints = {"nope"};
  EXPECT_TRUE(refused(x));
}

TEST_F(AgentTest, ThreeNodesShareOneMapAndEveryPartitionOnce) {
  std::vector<std::unique_ptr<Node>> nodes;
  for (const char* id : {"n1", "n2", "n3"}) nodes.push_back(StartNode(Options(id, 3)));
  // Registered, but no map until the third node is.
  ASSERT_TRUE(WaitFor([&] {
    for (auto& n : nodes) {
      if (!Serving(*n)) return false;
    }
    auto r0 = nodes[0]->board.view()->map.revision;
    for (auto& n : nodes) {
      if (n->board.view()->map.revision != r0) return false;
    }
    return true;
  }));
  const auto v0 = nodes[0]->board.view();
  EXPECT_EQ(v0->map.nodes.size(), 3u);
  EXPECT_EQ(v0->map.replication, 1u);
  // The stored map is the placement of the three registered nodes.
  std::vector<ClusterNode> registered;
  for (const char* id : {"n1", "n2", "n3"}) registered.push_back(Options(id, 3).self);
  ClusterMap expected = *Place(registered, 1);
  EXPECT_EQ(v0->map.replicas, expected.replicas);
  EXPECT_EQ(v0->map.nodes, expected.nodes);
  // Every partition held by exactly one node, each node's share near a third.
  size_t total = 0;
  for (auto& n : nodes) {
    auto v = n->board.view();
    total += v->held.count();
    EXPECT_GT(v->held.count(), 4096u / 3 - 200) << v->map.self;
    for (auto& other : nodes) {
      if (other != n) {
        EXPECT_TRUE((v->held & other->board.view()->held).none());
      }
    }
  }
  EXPECT_EQ(total, 4096u);
  int controllers = 0;
  for (auto& n : nodes) controllers += n->agent->stats().controller ? 1 : 0;
  EXPECT_EQ(controllers, 1);
  uint64_t written = 0;
  for (auto& n : nodes) written += n->agent->stats().maps_written;
  EXPECT_EQ(written, 1u);
}

TEST_F(AgentTest, NoMapUntilTheInitialNodesRegistered) {
  auto n1 = StartNode(Options("n1", 2));
  ASSERT_TRUE(WaitFor([&] { return n1->agent->stats().control_passes >= 5; }));
  // Five looks at the registrations as controller: still no map.
  EXPECT_FALSE(n1->board.view()->map.has_map());
  EXPECT_EQ(n1->board.view()->map.self, "n1");
  EXPECT_TRUE(n1->board.view()->serving);
  auto n2 = StartNode(Options("n2", 2));
  ASSERT_TRUE(WaitFor([&] { return Serving(*n1) && Serving(*n2); }));
}

TEST_F(AgentTest, AnotherNodeTakesOverAsControllerAndTheMapStays) {
  std::vector<std::unique_ptr<Node>> nodes;
  for (const char* id : {"n1", "n2", "n3"}) nodes.push_back(StartNode(Options(id, 3)));
  ASSERT_TRUE(
      WaitFor([&] { return Serving(*nodes[0]) && Serving(*nodes[1]) && Serving(*nodes[2]); }));
  size_t controller = 0;
  ASSERT_TRUE(WaitFor([&] {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i]->agent->stats().controller) {
        controller = i;
        return true;
      }
    }
    return false;
  }));
  const uint64_t revision = nodes[0]->board.view()->map.revision;
  const ClusterMap before = nodes[0]->board.view()->map;
  nodes[controller]->agent->Stop();  // leaves: its lease (and the controller key) go at once
  EXPECT_FALSE(nodes[controller]->board.view()->serving);
  ASSERT_TRUE(WaitFor([&] {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (i != controller && nodes[i]->agent->stats().controller) return true;
    }
    return false;
  }));
  // Static placement: the departed node keeps its partitions in the map,
  // however many times the new controller looks.
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i == controller || !nodes[i]->agent->stats().controller) continue;
    const uint64_t passes = nodes[i]->agent->stats().control_passes;
    ASSERT_TRUE(WaitFor([&] { return nodes[i]->agent->stats().control_passes >= passes + 3; }));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i == controller) continue;
    EXPECT_EQ(nodes[i]->board.view()->map.revision, revision);
    EXPECT_EQ(nodes[i]->board.view()->map.replicas, before.replicas);
  }
}

TEST_F(AgentTest, ANodeBackAtAnotherAddressIsUpdatedInTheMap) {
  auto n1 = StartNode(Options("n1", 2));
  auto n2 = StartNode(Options("n2", 2));
  ASSERT_TRUE(WaitFor([&] { return Serving(*n1) && Serving(*n2); }));
  const uint64_t revision = n1->board.view()->map.revision;
  const auto held = n2->board.view()->held;
  n2->agent->Stop();
  AgentOptions moved = Options("n2", 2);
  moved.self.address = "127.0.0.1:9999";
  n2 = StartNode(moved);
  ASSERT_TRUE(WaitFor([&] {
    auto v = n1->board.view();
    for (const ClusterNode& n : v->map.nodes) {
      if (n.id == "n2") return n.address == "127.0.0.1:9999";
    }
    return false;
  }));
  EXPECT_GT(n1->board.view()->map.revision, revision);
  ASSERT_TRUE(WaitFor([&] { return Serving(*n2); }));
  EXPECT_EQ(n2->board.view()->held, held);  // the same partitions
}

TEST_F(AgentTest, ALostLeaseStopsServingAtOnceAndTheNodeRegistersAgain) {
  auto n1 = StartNode(Options("n1", 1));
  ASSERT_TRUE(WaitFor([&] { return Serving(*n1); }));
  // What etcd does when the lease runs out, done at once: the lease goes.
  auto c = ClientOf(etcd_.endpoints());
  Result<RangeResult> reg = c->Range("/segstore-test/nodes/n1");
  ASSERT_TRUE(reg.ok() && reg->kvs.size() == 1);
  const int64_t lease = reg->kvs[0].lease;
  const uint64_t generation = n1->board.generation();
  ASSERT_TRUE(c->Revoke(lease).ok());
  // The next keepalive (every TTL/3 = 1 s) finds it gone: not serving, then again.
  ASSERT_TRUE(WaitFor([&] { return n1->agent->stats().lease_expirations == 1; }));
  EXPECT_GT(n1->board.generation(), generation);
  ASSERT_TRUE(WaitFor([&] { return Serving(*n1); }));
  Result<RangeResult> again = c->Range("/segstore-test/nodes/n1");
  ASSERT_TRUE(again.ok() && again->kvs.size() == 1);
  EXPECT_NE(again->kvs[0].lease, lease);
}

TEST_F(AgentTest, ANodeIdInUseWaitsForTheOtherToGo) {
  auto first = StartNode(Options("n1", 1));
  ASSERT_TRUE(WaitFor([&] { return Serving(*first); }));
  auto second = StartNode(Options("n1", 1));
  ASSERT_TRUE(WaitFor([&] { return second->agent->stats().register_attempts >= 3; }));
  EXPECT_FALSE(second->agent->stats().registered);
  EXPECT_FALSE(second->board.view()->serving);
  first->agent->Stop();
  ASSERT_TRUE(WaitFor([&] { return Serving(*second); }));
}

TEST_F(AgentTest, WithoutEtcdTheNodeServesOnTheMapItHas) {
  auto n1 = StartNode(Options("n1", 1));
  ASSERT_TRUE(WaitFor([&] { return Serving(*n1); }));
  const uint64_t revision = n1->board.view()->map.revision;
  etcd_.Kill(0);
  // Past the lease TTL: etcd never said the lease expired, so the node serves on.
  // Until the last acknowledgement is older than the TTL (4 s), and the agent
  // has tried etcd again since: it had every chance to give up serving.
  ASSERT_TRUE(WaitFor([&] { return n1->agent->stats().seconds_since_lease_ack > 4.5; }));
  const uint64_t errors = n1->agent->stats().etcd_errors;
  ASSERT_TRUE(WaitFor([&] { return n1->agent->stats().etcd_errors > errors; }));
  EXPECT_TRUE(Serving(*n1));
  EXPECT_EQ(n1->board.view()->map.revision, revision);
  EXPECT_EQ(n1->agent->stats().lease_expirations, 0u);
}

}  // namespace
}  // namespace segstore::cluster
