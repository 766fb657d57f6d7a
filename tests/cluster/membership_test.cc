// Membership changes in a replicated cluster of real processes on loopback
// (segstored nodes, one etcd, librdkafka's mock Kafka as the log): a node
// added under a write load takes its share of the partitions by copying them
// from their replicas, and nothing acknowledged is lost; a node killed under
// load has its partitions copied to the others after the failure grace
// (replication restored), and takes its share back when it returns; a
// paused node that wakes after its partitions moved never answers a read of
// them from its old copy as if it were current.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cluster/segstored_cluster.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/routing.h"

namespace segstore::server {
namespace {

using namespace std::chrono_literals;
using testing::SegstoredCluster;
using testing::StatOf;
using testing::WaitFor;

constexpr UnixSeconds kFar = 4'000'000'000u;  // an expiry in 2096

SegmentUpdate At(uint64_t id) { return SegmentUpdate{id, kFar, false, {}, {}}; }

// `nodes` nodes of which `start` start with the cluster; replication 2, a
// short lease and failure grace so that moves begin within seconds.
testing::SegstoredClusterOptions Options(int nodes, int start) {
  testing::SegstoredClusterOptions o;
  o.nodes = nodes;
  o.start_nodes = start;
  o.threads = 2;
  o.file_size = "64MiB";
  o.etcd_prefix = "/membership-test";
  o.replication = 2;
  o.lease_ttl_seconds = 6;
  o.cluster_lines = {"failure_grace_seconds = 2", "etcd_timeout_ms = 1500"};
  o.log = true;
  o.log_partitions = 8;
  o.log_lines = {"append_timeout_ms = 3000", "apply_timeout_ms = 6000", "max_lag_ms = 2000"};
  o.checkpoint_interval_ms = 200;
  o.routed.node.request_timeout = 10s;
  o.routed.node.connect_timeout = 2s;
  o.routed.max_attempts = 8;
  return o;
}

// Clients writing segments to `users` (and reading them) through routing
// clients seeded with `seeds`, remembering what was acknowledged.
class Load {
 public:
  Load(SegstoredCluster* cluster, std::vector<std::string> users, std::vector<int> seeds)
      : users_(std::move(users)) {
    constexpr int kClients = 4;
    for (int t = 0; t < kClients; ++t) {
      threads_.emplace_back([this, cluster, seed = seeds[static_cast<size_t>(t) % seeds.size()],
                             t] {
        auto c = cluster->Routed(seed);
        if (c == nullptr) return;
        for (uint64_t k = 1; !stop_.load(); ++k) {
          const std::string& u = users_[(k * kClients + static_cast<uint64_t>(t)) % users_.size()];
          const uint64_t id = k * kClients + static_cast<uint64_t>(t);
          Result<UpsertResult> w = c->Upsert(u, std::vector{At(id)});
          if (w.ok()) {
            std::lock_guard lock(mu_);
            written_[u].push_back(id);
            ++writes_;
          } else {
            std::lock_guard lock(mu_);
            if (write_errors_.size() < 20) write_errors_.push_back(w.status().ToString());
          }
          Result<GetResult> g = c->Get(users_[k % users_.size()]);
          ++reads_;
          if (!g.ok() && !g.status().IsNotFound()) {
            std::lock_guard lock(mu_);
            read_errors_.push_back(g.status().ToString());
          }
        }
      });
    }
  }
  ~Load() { Stop(); }

  // Until `n` more writes and reads were acknowledged (bounded).
  bool More(int n) {
    const int w = writes_.load() + n, r = reads_.load() + n;
    return WaitFor([&] { return writes_.load() >= w && reads_.load() >= r; }, 60s);
  }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  const std::map<std::string, std::vector<uint64_t>>& written() const { return written_; }
  std::vector<std::string> write_errors() const { return write_errors_; }
  std::vector<std::string> read_errors() const { return read_errors_; }
  int reads() const { return reads_.load(); }

 private:
  std::vector<std::string> users_;
  std::mutex mu_;
  std::map<std::string, std::vector<uint64_t>> written_;
  std::vector<std::string> write_errors_, read_errors_;
  std::atomic<int> writes_{0}, reads_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

std::vector<std::string> Users(int n) {
  std::vector<std::string> out;
  for (int u = 0; u < n; ++u) out.push_back("user-" + std::to_string(u));
  return out;
}

// The test's indices of the replicas of `user` in `map`.
std::vector<int> ReplicasOf(const ClusterMap& map, std::string_view user) {
  std::vector<int> out;
  for (uint16_t n : map.ReplicasOf(PartitionOf(user))) {
    out.push_back(SegstoredCluster::NodeIndex(map, n));
  }
  return out;
}

class MembershipTest : public ::testing::Test {
 protected:
  MembershipTest(int nodes, int start) : cluster_(Options(nodes, start)) {}

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.Start());
    ASSERT_NO_FATAL_FAILURE(cluster_.WaitAllServing());
    ASSERT_TRUE(cluster_.AgreedMap(&map_));
  }

  // Until the nodes running agree on a map with no move in progress whose
  // nodes are exactly `nodes` (bounded, 240 s); that map in map_.
  bool Settled(const std::set<int>& nodes) {
    return WaitFor(
        [&] {
          ClusterMap m;
          if (!cluster_.AgreedMap(&m) || !m.incoming.empty()) return false;
          std::set<int> in_map;
          for (uint16_t i = 0; i < m.nodes.size(); ++i) {
            in_map.insert(SegstoredCluster::NodeIndex(m, i));
          }
          if (in_map != nodes) return false;
          map_ = m;
          return true;
        },
        240s, 100ms);
  }

  // Every acknowledged segment is on every replica `map_` names.
  void ExpectAllOnEveryReplica(const Load& load) {
    size_t checked = 0;
    for (const auto& written : load.written()) {
      // Named, not bound: lambdas may not capture structured bindings in clang 14.
      const auto& u = written.first;
      const auto& ids = written.second;
      for (int r : ReplicasOf(map_, u)) {
        Result<GetResult> g = Status::Internal("not asked");
        // The last writes may still be on their way to this replica.
        const bool all = WaitFor([&] {
          g = cluster_.direct(r).Get(u);
          return g.ok() && std::all_of(ids.begin(), ids.end(), [&](uint64_t id) {
                   return std::binary_search(g->ids.begin(), g->ids.end(), id);
                 });
        });
        ASSERT_TRUE(g.ok()) << u << " on node " << r << ": " << g.status().ToString();
        for (uint64_t id : ids) {
          EXPECT_TRUE(std::binary_search(g->ids.begin(), g->ids.end(), id))
              << u << " lost segment " << id << " on node " << r;
        }
        EXPECT_TRUE(all);
        checked += ids.size();
      }
    }
    EXPECT_GT(checked, 200u);
  }

  SegstoredCluster cluster_;
  ClusterMap map_;
};

class AddNodeTest : public MembershipTest {
 protected:
  AddNodeTest() : MembershipTest(4, 3) {}
};

TEST_F(AddNodeTest, ANodeAddedUnderLoadTakesItsShareAndNothingIsLost) {
  Load load(&cluster_, Users(300), {0, 1, 2});
  ASSERT_TRUE(load.More(200));
  ASSERT_NO_FATAL_FAILURE(cluster_.StartNode(3));
  ASSERT_TRUE(Settled({0, 1, 2, 3})) << "the new node never got its share";
  ASSERT_TRUE(load.More(200));
  load.Stop();
  // About a quarter of the replicas, each copied once.
  std::map<int, int> held;
  for (uint16_t i : map_.replicas) ++held[SegstoredCluster::NodeIndex(map_, i)];
  EXPECT_NEAR(held[3], 2048, 2048 * 0.15);
  EXPECT_EQ(StatOf(cluster_.direct(3), "replica.partitions_copied"), held[3]);
  EXPECT_GT(StatOf(cluster_.direct(3), "replica.records_copied"), 0);
  EXPECT_TRUE(load.read_errors().empty()) << load.read_errors().front();
  EXPECT_TRUE(load.write_errors().empty()) << load.write_errors().front();
  ASSERT_NO_FATAL_FAILURE(ExpectAllOnEveryReplica(load));
  // segctl cluster: no move left, the new node's share.
  auto [rc, out] = testing::Segctl(cluster_.port(0), "cluster --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(testing::Has(out, "\"moves\":0")) << out;
  EXPECT_TRUE(testing::Has(out, "\"id\":\"node-3\"")) << out;
  EXPECT_FALSE(testing::Has(out, "\"incoming\":1")) << out;
  // The nodes that gave partitions up drop their copies after a while.
  EXPECT_TRUE(WaitFor(
      [&] {
        double dropped = 0;
        for (int i = 0; i < 3; ++i) {
          dropped += std::max(0.0, StatOf(cluster_.direct(i), "replica.partitions_dropped"));
        }
        return dropped >= held[3];
      },
      60s, 200ms));
  cluster_.StopAll();
}

class KillNodeTest : public MembershipTest {
 protected:
  KillNodeTest() : MembershipTest(3, 3) {}
};

TEST_F(KillNodeTest, AKilledNodesPartitionsGetTheirReplicasBackAndItTakesItsShareOnReturn) {
  Load load(&cluster_, Users(300), {0, 1});
  ASSERT_TRUE(load.More(200));
  EXPECT_EQ(cluster_.StopNode(2, SIGKILL), 128 + SIGKILL);
  // Reads and writes go on; after the grace, nodes 0 and 1 hold everything.
  ASSERT_TRUE(load.More(200));
  ASSERT_TRUE(Settled({0, 1})) << "replication never restored";
  for (uint32_t p = 0; p < kPartitions; ++p) {
    std::span<const uint16_t> r = map_.ReplicasOf(p);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_NE(r[0], r[1]);
  }
  ASSERT_TRUE(load.More(100));
  // Back: it copies its share again (its own copy is stale by now).
  ASSERT_NO_FATAL_FAILURE(cluster_.StartNode(2));
  ASSERT_TRUE(Settled({0, 1, 2})) << "the node never took its share back";
  ASSERT_TRUE(load.More(100));
  load.Stop();
  EXPECT_GT(StatOf(cluster_.direct(2), "replica.partitions_copied"), 0);
  // Only the requests caught in the kill may fail (the clients retry the rest).
  EXPECT_LE(load.write_errors().size(), 4u);
  EXPECT_TRUE(load.read_errors().empty()) << load.read_errors().front();
  ASSERT_NO_FATAL_FAILURE(ExpectAllOnEveryReplica(load));
  cluster_.StopAll();
}

TEST_F(KillNodeTest, APausedNodeWhosePartitionsMovedNeverServesItsOldCopyAsCurrent) {
  // Users whose partitions node 2 holds, written once.
  std::vector<std::string> users;
  for (const std::string& u : Users(400)) {
    const std::vector<int> r = ReplicasOf(map_, u);
    if (std::find(r.begin(), r.end(), 2) != r.end()) users.push_back(u);
    if (users.size() == 20) break;
  }
  ASSERT_EQ(users.size(), 20u);
  auto c = cluster_.Routed(0);
  ASSERT_NE(c, nullptr);
  for (const std::string& u : users) ASSERT_TRUE(c->Upsert(u, std::vector{At(1)}).ok());
  for (const std::string& u : users) {
    ASSERT_TRUE(WaitFor([&] { return cluster_.direct(2).Get(u).ok(); })) << u;
  }
  cluster_.Pause(2);
  ASSERT_TRUE(Settled({0, 1})) << "node 2's partitions never moved";
  // A second segment the paused node never saw.
  for (const std::string& u : users) ASSERT_TRUE(c->Upsert(u, std::vector{At(2)}).ok());
  cluster_.Resume(2);
  // From the moment it wakes: WrongNode or Busy, or an answer marked stale;
  // an answer not marked stale has the second segment.
  auto woken = client::Client::Connect([&] {
    client::ClientOptions o;
    o.port = cluster_.port(2);
    o.request_timeout = 10s;
    return o;
  }());
  ASSERT_TRUE(woken.ok()) << woken.status().ToString();
  int answered_stale = 0, refused = 0, current = 0;
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    for (const std::string& u : users) {
      Result<GetResult> g = (*woken)->Get(u);
      if (!g.ok()) {
        EXPECT_TRUE(g.status().code() == Status::Code::kWrongNode ||
                    g.status().code() == Status::Code::kBusy)
            << g.status().ToString();
        ++refused;
      } else if (g->stale) {
        ++answered_stale;
      } else {
        EXPECT_EQ(g->ids, (std::vector<uint64_t>{1, 2})) << u << ": an old copy served as current";
        ++current;
      }
    }
  }
  EXPECT_GT(refused + answered_stale + current, 0);
  ASSERT_TRUE(Settled({0, 1, 2}));
  cluster_.StopAll();
}

}  // namespace
}  // namespace segstore::server
