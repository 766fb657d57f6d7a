// A three-node cluster of real segstored processes on one real etcd, all on
// loopback: the map they agree on, routing by the client library and segctl
// (segctl load too), WrongNode from the nodes that do not hold a user, and a
// node that stops and comes back with its data.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <thread>

#include "integration/daemon.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/routing.h"
#include "storage/test_util.h"
#include "support/etcd_server.h"

namespace segstore::server {
namespace {

using namespace std::chrono_literals;
using testing::Daemon;
using testing::Has;
using testing::NotifySocket;
using testing::Segctl;

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return done();
}

class ClusterDaemonTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 3;

  void SetUp() override {
    std::string why;
    ASSERT_TRUE(etcd_.Start(&why)) << why;
    for (int i = 0; i < kNodes; ++i) ASSERT_NO_FATAL_FAILURE(StartNode(i));
  }

  std::string Dir(int i) const { return dir_.File("n" + std::to_string(i)); }

  void StartNode(int i) {
    std::filesystem::create_directories(Dir(i));
    const std::string config = Dir(i) + "/segstored.toml";
    std::ofstream(config) << "[server]\nlisten = \"127.0.0.1:0\"\n"
                          << "[storage]\npath = \"" << Dir(i) << "/data\"\nfile_size = \"64MiB\"\n"
                          << "write_block_size = \"256KiB\"\n"
                          << "[cluster]\netcd_endpoints = [\"" << etcd_.endpoint(0) << "\"]\n"
                          << "etcd_prefix = \"/test-cluster\"\n"
                          << "node_id = \"node-" << i << "\"\nrack = \"rack-" << i << "\"\n"
                          << "initial_nodes = " << kNodes << "\nlease_ttl_seconds = 10\n"
                          << "map_poll_ms = 50\n";
    notify_[i] = std::make_unique<NotifySocket>(Dir(i) + "/notify.sock." + std::to_string(++runs_));
    daemons_[i] =
        std::make_unique<Daemon>(Dir(i), std::vector<std::string>{"-c", config}, Dir(i) + "/log",
                                 std::vector<std::string>{"NOTIFY_SOCKET=" + notify_[i]->path()});
    const std::string ready = notify_[i]->WaitFor("READY=1");
    ASSERT_FALSE(ready.empty()) << testing::ReadFile(Dir(i) + "/log");
    ports_[i] = testing::PortOf(ready);
    ASSERT_NE(ports_[i], 0) << ready;
  }

  std::unique_ptr<client::ClusterClient> Routed(int node) {
    client::ClusterClientOptions o;
    o.node.port = ports_[node];
    o.node.request_timeout = 10s;
    o.node.connect_timeout = 10s;
    auto c = client::ClusterClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Until every node answers the same map with a placement.
  ClusterMap AgreedMap() {
    ClusterMap agreed;
    EXPECT_TRUE(WaitFor([&] {
      uint64_t revision = 0;
      for (int i = 0; i < kNodes; ++i) {
        auto c = testing::Connect(ports_[i]);
        if (c == nullptr) return false;
        Result<ClusterMap> m = c->ClusterMap();
        if (!m.ok() || !m->has_map()) return false;
        if (i > 0 && m->revision != revision) return false;
        revision = m->revision;
        agreed = *m;
      }
      return true;
    }));
    return agreed;
  }

  std::vector<SegmentUpdate> Segments(uint64_t id) {
    SegmentUpdate s;
    s.id = id;
    s.value = 86400;
    s.ttl = true;
    return {s};
  }

  storage::testing::TempDir dir_;
  segstore::testing::EtcdCluster etcd_{1};
  std::unique_ptr<NotifySocket> notify_[kNodes];
  std::unique_ptr<Daemon> daemons_[kNodes];
  uint16_t ports_[kNodes] = {};
  int runs_ = 0;
};

TEST_F(ClusterDaemonTest, RoutesEveryUserToItsNodeAndOthersSayWrongNode) {
  const ClusterMap map = AgreedMap();
  ASSERT_TRUE(map.has_map());
  ASSERT_EQ(map.nodes.size(), 3u);
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(map.nodes[i].address, "127.0.0.1:" + std::to_string(ports_[i]));
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
  for (int i = 0; i < kNodes; ++i) direct[i] = testing::Connect(ports_[i]);
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
  auto [rc, out] = Segctl(ports_[2], "get user-7 --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "{\"id\":8,")) << out;
  std::tie(rc, out) = Segctl(ports_[0], "cluster");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "replication 1, 3 nodes; asked node node-0")) << out;
  EXPECT_TRUE(Has(out, "node-2")) << out;
  std::tie(rc, out) = Segctl(ports_[0], "cluster --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"partitions\":")) << out;
  // segctl load routes each user to its node: every row is found through
  // routing, from any node.
  const std::string rows = dir_.File("rows.csv");
  {
    std::ofstream f(rows);
    for (int u = 0; u < 200; ++u) {
      f << "load-" << u << "," << 1000 + u << ",3600\n"
        << "load-" << u << "," << 5000 + u << ",never\n";
    }
    f << "user-1,5,3600\n";  // merged into what user-1 holds
  }
  std::tie(rc, out) = Segctl(ports_[0], "load --no-progress --json " + rows);
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
  std::tie(rc, out) = Segctl(ports_[1], "get load-7 --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "{\"id\":1007,")) << out;

  // Each node reports its part in its statistics.
  std::tie(rc, out) = Segctl(ports_[1], "stats --json");
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

  daemons_[2]->Signal(SIGTERM);
  ASSERT_EQ(daemons_[2]->Wait(), 0);
  // Its partitions are not served meanwhile (one replica, static placement):
  // the router gives up after its bounded retries with the connection error.
  Result<GetResult> gone = c->Get(users[0]);
  EXPECT_EQ(gone.status().code(), Status::Code::kUnavailable) << gone.status().ToString();
  EXPECT_GT(c->retries(), 0u);

  ASSERT_NO_FATAL_FAILURE(StartNode(2));  // same ID and data; another port
  ASSERT_TRUE(WaitFor([&] {
    if (!c->RefreshMap().ok()) return false;
    for (const ClusterNode& n : c->map().nodes) {
      if (n.id == "node-2") return n.address == "127.0.0.1:" + std::to_string(ports_[2]);
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
  for (int i = 0; i < kNodes; ++i) {
    daemons_[i]->Signal(SIGTERM);
    EXPECT_EQ(daemons_[i]->Wait(), 0) << "node " << i;
  }
}

}  // namespace
}  // namespace segstore::server
