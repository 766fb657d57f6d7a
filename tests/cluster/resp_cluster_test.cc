// The RESP port of a three-node cluster (proto/RESP.md, "Clusters"): the
// partition map as Redis Cluster's CLUSTER SLOTS, SHARDS and NODES, MOVED for a key
// another node holds, CROSSSLOT for keys of several slots, and Debian's
// python3-redis RedisCluster and redis-cli -c routing themselves by it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cluster/segstored_cluster.h"
#include "segstore/routing.h"
#include "support/resp_conn.h"
#include "support/shell.h"

namespace segstore::server {
namespace {

using namespace std::chrono_literals;
using segstore::testing::RespConn;
using segstore::testing::Shell;

class RespClusterTest : public ::testing::Test {
 protected:
  static testing::SegstoredClusterOptions Options() {
    testing::SegstoredClusterOptions o;
    o.nodes = 3;
    o.file_size = "64MiB";
    o.etcd_prefix = "/test-resp-cluster";
    o.poll = 50ms;
    o.direct_clients = false;
    o.resp = true;
    return o;
  }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.Start());
    ASSERT_TRUE(cluster_.AgreedMap(&map_));
    // Every node's RESP address is in the map the nodes agree on.
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          if (!cluster_.AgreedMap(&map_)) return false;
          return std::all_of(map_.nodes.begin(), map_.nodes.end(),
                             [](const ClusterNode& n) { return !n.resp.empty(); });
        },
        60s, 50ms));
  }

  // The node (index into the harness) whose RESP port is `address`.
  int NodeOf(const std::string& address) const {
    for (int i = 0; i < 3; ++i) {
      if (address == "127.0.0.1:" + std::to_string(cluster_.resp_port(i))) return i;
    }
    return -1;
  }

  // The node holding `key`'s partition first.
  std::string OwnerOf(const std::string& key) const {
    return map_.nodes[map_.ReplicasOf(PartitionOf(key))[0]].resp;
  }

  testing::SegstoredCluster cluster_{Options()};
  ClusterMap map_;
};

TEST_F(RespClusterTest, SlotsShardsAndMovedFollowThePartitionMap) {
  RespConn c;
  ASSERT_TRUE(c.Connect(cluster_.resp_port(0)));
  // Keys on each node: node 0 answers its own and redirects the others.
  int moved = 0;
  int served = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string key = "user-" + std::to_string(i);
    const std::string owner = OwnerOf(key);
    const std::string reply = c.Call({"HSET", key, std::to_string(i), "7"});
    if (NodeOf(owner) == 0) {
      EXPECT_EQ(reply, ":1\r\n") << key;
      ++served;
    } else {
      EXPECT_EQ(reply, "-MOVED " + std::to_string(SlotOf(key)) + " " + owner + "\r\n") << key;
      ++moved;
    }
  }
  EXPECT_GT(moved, 0);
  EXPECT_GT(served, 0);
  // Keys of two slots in one command; a hash tag keeps them together.
  EXPECT_EQ(c.Call({"DEL", "a", "b"}),
            "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
  const std::string tagged = c.Call({"EXISTS", "{u7}a", "{u7}b"});
  EXPECT_TRUE(tagged == ":0\r\n" || tagged.substr(0, 7) == "-MOVED ") << tagged;
  EXPECT_EQ(c.Call({"CLUSTER", "KEYSLOT", "{u7}a"}), ":" + std::to_string(SlotOf("u7")) + "\r\n");

  // CLUSTER SLOTS covers every slot once, each range on its partition's node.
  const std::string slots = c.Call({"CLUSTER", "SLOTS"});
  ASSERT_EQ(slots[0], '*') << slots;
  const std::string info = c.Call({"CLUSTER", "INFO"});
  EXPECT_NE(info.find("cluster_state:ok"), std::string::npos) << info;
  EXPECT_NE(info.find("cluster_slots_assigned:16384"), std::string::npos) << info;
  EXPECT_NE(info.find("cluster_known_nodes:3"), std::string::npos) << info;
  EXPECT_EQ(c.Call({"CLUSTER", "MYID"}), "$6\r\nnode-0\r\n");
  const std::string hello = c.Call({"HELLO", "3"});
  EXPECT_NE(hello.find("$4\r\nmode\r\n$7\r\ncluster\r\n"), std::string::npos) << hello;
  const std::string shards = c.Call({"CLUSTER", "SHARDS"});
  EXPECT_NE(shards.find("$5\r\nslots\r\n"), std::string::npos) << shards.substr(0, 200);
  EXPECT_EQ(c.Call({"READONLY"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"CLUSTER", "RESET"}).substr(0, 31), "-ERR unknown subcommand or wron");

  // CLUSTER NODES (RESP3 here: verbatim text): a line per node, each the
  // master of the ranges it holds first; together they cover every slot once.
  const std::string nodes = c.Call({"CLUSTER", "NODES"});
  ASSERT_EQ(nodes[0], '=') << nodes;
  const size_t text_at = nodes.find("txt:");
  ASSERT_NE(text_at, std::string::npos) << nodes;
  std::istringstream lines(nodes.substr(text_at + 4, nodes.size() - text_at - 6));
  std::vector<int> covered(kSlots, 0);
  std::set<std::string> ids;
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(words),
                               std::istream_iterator<std::string>()};
    ASSERT_GE(w.size(), 8u) << line;
    ids.insert(w[0]);
    const auto node = std::find_if(map_.nodes.begin(), map_.nodes.end(),
                                   [&](const ClusterNode& n) { return n.id == w[0]; });
    ASSERT_NE(node, map_.nodes.end()) << line;
    EXPECT_EQ(w[1], node->resp + "@0") << line;
    EXPECT_EQ(w[2], w[0] == "node-0" ? "myself,master" : "master") << line;
    EXPECT_EQ(w[3], "-") << line;
    EXPECT_EQ(w[7], "connected") << line;
    for (size_t i = 8; i < w.size(); ++i) {
      const size_t dash = w[i].find('-');
      const uint32_t first = std::stoul(w[i].substr(0, dash));
      const uint32_t last = dash == std::string::npos ? first : std::stoul(w[i].substr(dash + 1));
      ASSERT_LE(first, last) << line;
      ASSERT_LT(last, kSlots) << line;
      for (uint32_t slot = first; slot <= last; ++slot) {
        ++covered[slot];
        EXPECT_EQ(map_.nodes[map_.ReplicasOf(slot / kSlotsPerPartition)[0]].id, w[0])
            << "slot " << slot;
      }
    }
  }
  EXPECT_EQ(ids, (std::set<std::string>{"node-0", "node-1", "node-2"}));
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<long>(kSlots));
}

TEST_F(RespClusterTest, RedisClusterClientsRouteThemselves) {
  const std::string port = std::to_string(cluster_.resp_port(1));
  auto [status, out] =
      Shell("/usr/bin/python3 " SEGSTORE_SOURCE_DIR "/tests/cluster/resp_redis_cluster.py " + port);
  EXPECT_EQ(status, 0) << out;
  // CLUSTER NODES in RESP2: a bulk string, the asked node's line marked myself.
  auto [nodes_status, nodes] =
      Shell("redis-cli -p " + std::to_string(cluster_.resp_port(2)) + " CLUSTER NODES");
  EXPECT_EQ(nodes_status, 0) << nodes;
  EXPECT_NE(nodes.find("node-2 127.0.0.1:" + std::to_string(cluster_.resp_port(2)) +
                       "@0 myself,master - 0 0 "),
            std::string::npos)
      << nodes;
  EXPECT_NE(nodes.find(" master - 0 0 "), std::string::npos) << nodes;
  // redis-cli -c follows MOVED from whichever node it asked.
  for (int i = 0; i < 3; ++i) {
    auto [s, got] =
        Shell("redis-cli -c -p " + std::to_string(cluster_.resp_port(i)) + " HGET py-7 7");
    EXPECT_EQ(got, "1:2\n") << "from node " << i;
  }
}

}  // namespace
}  // namespace segstore::server
