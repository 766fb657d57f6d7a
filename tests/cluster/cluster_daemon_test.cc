// A three-node cluster of real segstored processes on one real etcd, all on
// loopback: the map they agree on, routing by the client library and segctl
// (segctl load too), WrongNode from the nodes that do not hold a user, and a
// node that stops and comes back with its data.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>

#include "cluster/segstored_cluster.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/routing.h"

namespace segstore::server {
namespace {

using namespace std::chrono_literals;
using testing::Has;
using testing::Segctl;

// This file's waits poll every 50 ms.
bool WaitFor(const std::function<bool()>& done) { return testing::WaitFor(done, 60s, 50ms); }

class ClusterDaemonTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 3;

  // Three nodes without a log; no direct clients of the harness's.
  static testing::SegstoredClusterOptions Options() {
    testing::SegstoredClusterOptions o;
    o.nodes = kNodes;
    o.file_size = "64MiB";
    o.etcd_prefix = "/test-cluster";
    o.poll = 50ms;
    o.direct_clients = false;
    o.routed.node.request_timeout = 10s;
    o.routed.node.connect_timeout = 10s;
    return o;
  }

  void SetUp() override { ASSERT_NO_FATAL_FAILURE(cluster_.Start()); }

  uint16_t port(int i) const { return cluster_.port(i); }
  std::unique_ptr<client::ClusterClient> Routed(int node) { return cluster_.Routed(node); }

  // Until every node answers the same map with a placement.
  ClusterMap AgreedMap() {
    ClusterMap agreed;
    EXPECT_TRUE(cluster_.AgreedMap(&agreed));
    return agreed;
  }

  std::vector<SegmentUpdate> Segments(uint64_t id) {
    SegmentUpdate s;
    s.id = id;
    s.value = 86400;
    s.ttl = true;
    return {s};
  }

  testing::SegstoredCluster cluster_{Options()};
};

TEST_F(ClusterDaemonTest, RoutesEveryUserToItsNodeAndOthersSayWrongNode) {
  const ClusterMap map = AgreedMap();
  ASSERT_TRUE(map.has_map());
  ASSERT_EQ(map.nodes.size(), 3u);
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(map.nodes[i].address, "127.0.0.1:" + std::to_string(port(i)));
    EXPECT_EQ(map.nodes[i].rack, "rack-" + std::to_string(i));
  }

  auto c = Routed(1);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> users;
  for (int u = 0; u < 300; ++u) users.push_back("user-" + std::to_string(u));
  for (size_t u = 0; u < users.size(); ++u) {
    Result<UpsertResult> r = c->Upsert(users[u], Segments(u + 1));
    ASSERT_TRUE(r.ok()) << users[u] << ": " << r.status().ToString();
  }
  // Every user read back through the router, and from each node directly:
  // its holder answers, the two others say WrongNode.
  std::unique_ptr<client::Client> direct[kNodes];
  for (int i = 0; i < kNodes; ++i) direct[i] = testing::Connect(port(i));
  int held[kNodes] = {};
  for (size_t u = 0; u < users.size(); ++u) {
    Result<GetResult> g = c->Get(users[u]);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->ids, std::vector<uint64_t>{u + 1});
    const uint16_t holder = map.ReplicasOf(PartitionOf(users[u]))[0];
    ++held[holder];
    for (int i = 0; i < kNodes; ++i) {
      Result<GetResult> d = direct[i]->Get(users[u]);
      if (i == holder) {
        EXPECT_TRUE(d.ok()) << d.status().ToString();
      } else {
        EXPECT_EQ(d.status().code(), Status::Code::kWrongNode) << d.status().ToString();
      }
    }
  }
  for (int i = 0; i < kNodes; ++i) EXPECT_GT(held[i], 50) << "node " << i;
  EXPECT_EQ(c->retries(), 0u);

  // A batch split by node and gathered in order.
  Result<BatchGetResult> all = c->BatchGet(users);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (size_t u = 0; u < users.size(); ++u) {
    ASSERT_TRUE((*all)[u].ok()) << users[u] << ": " << (*all)[u].status().ToString();
    EXPECT_EQ((*all)[u]->ids, std::vector<uint64_t>{u + 1});
  }

  // segctl routes from any node, and shows the cluster.
  auto [rc, out] = Segctl(port(2), "get user-7 --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "{\"id\":8,")) << out;
  std::tie(rc, out) = Segctl(port(0), "cluster");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "replication 1, 3 nodes; asked node node-0")) << out;
  EXPECT_TRUE(Has(out, "node-2")) << out;
  std::tie(rc, out) = Segctl(port(0), "cluster --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"partitions\":")) << out;
  // segctl load routes each user to its node: every row is found through
  // routing, from any node.
  const std::string rows = cluster_.dir().File("rows.csv");
  {
    std::ofstream f(rows);
    for (int u = 0; u < 200; ++u) {
      f << "load-" << u << "," << 1000 + u << ",3600\n"
        << "load-" << u << "," << 5000 + u << ",never\n";
    }
    f << "user-1,5,3600\n";  // merged into what user-1 holds
  }
  std::tie(rc, out) = Segctl(port(0), "load --no-progress --json " + rows);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"rows\":401,\"users\":201")) << out;
  EXPECT_TRUE(Has(out, "\"failed_users\":0")) << out;
  std::vector<std::string> loaded;
  for (int u = 0; u < 200; ++u) loaded.push_back("load-" + std::to_string(u));
  for (int i = 0; i < kNodes; ++i) {
    auto via = Routed(i);
    ASSERT_NE(via, nullptr);
    Result<BatchGetResult> back = via->BatchGet(loaded);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    for (size_t u = 0; u < loaded.size(); ++u) {
      ASSERT_TRUE((*back)[u].ok())
          << loaded[u] << " via node " << i << ": " << (*back)[u].status().ToString();
      EXPECT_EQ((*back)[u]->ids, (std::vector<uint64_t>{1000 + u, 5000 + u})) << loaded[u];
    }
    EXPECT_EQ(via->Get("user-1")->ids, (std::vector<uint64_t>{2, 5})) << "via node " << i;
  }
  std::tie(rc, out) = Segctl(port(1), "get load-7 --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "{\"id\":1007,")) << out;

  // Each node reports its part in its statistics.
  std::tie(rc, out) = Segctl(port(1), "stats --json");
  EXPECT_EQ(rc, 0) << out;
  const auto partitions_of_1 = std::count(map.replicas.begin(), map.replicas.end(), 1);
  EXPECT_TRUE(Has(out, "\"cluster.partitions_held\":" + std::to_string(partitions_of_1))) << out;
  EXPECT_TRUE(Has(out, "\"cluster.registered\":1")) << out;
  EXPECT_TRUE(Has(out, "\"cluster.map_revision\":" + std::to_string(map.revision))) << out;
  EXPECT_TRUE(Has(out, "\"server.responses.get.wrong_node\":")) << out;
}

TEST_F(ClusterDaemonTest, ANodeThatStopsAndComesBackServesItsDataAgain) {
  const ClusterMap map = AgreedMap();
  ASSERT_TRUE(map.has_map());
  auto c = Routed(0);
  ASSERT_NE(c, nullptr);
  // Users held by node 2.
  std::vector<std::string> users;
  for (int u = 0; users.size() < 20; ++u) {
    std::string user = "user-" + std::to_string(u);
    if (map.ReplicasOf(PartitionOf(user))[0] == 2) users.push_back(user);
  }
  for (size_t u = 0; u < users.size(); ++u) ASSERT_TRUE(c->Upsert(users[u], Segments(u)).ok());

  ASSERT_EQ(cluster_.StopNode(2), 0);
  // Its partitions are not served meanwhile (one replica, static placement):
  // the router gives up after its bounded retries with the connection error.
  Result<GetResult> gone = c->Get(users[0]);
  EXPECT_EQ(gone.status().code(), Status::Code::kUnavailable) << gone.status().ToString();
  EXPECT_GT(c->retries(), 0u);

  ASSERT_NO_FATAL_FAILURE(cluster_.StartNode(2));  // same ID and data; another port
  ASSERT_TRUE(WaitFor([&] {
    if (!c->RefreshMap().ok()) return false;
    for (const ClusterNode& n : c->map().nodes) {
      if (n.id == "node-2") return n.address == "127.0.0.1:" + std::to_string(port(2));
    }
    return false;
  }));
  EXPECT_GT(c->map().revision, map.revision);
  EXPECT_EQ(c->map().replicas, map.replicas);  // the same placement
  for (size_t u = 0; u < users.size(); ++u) {
    Result<GetResult> g = Status::Internal("not asked");
    ASSERT_TRUE(WaitFor([&] {
      g = c->Get(users[u]);
      return g.ok();
    })) << users[u]
        << ": " << g.status().ToString();
    EXPECT_EQ(g->ids, std::vector<uint64_t>{u});
  }
  cluster_.StopAll();
}

}  // namespace
}  // namespace segstore::server
