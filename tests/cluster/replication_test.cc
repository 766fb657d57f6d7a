// A replicated cluster of real processes on loopback: three segstored nodes,
// one etcd, and librdkafka's mock Kafka cluster (three brokers, in a process
// of its own) as the cluster's log. Writes go through the log and are read
// back from every replica; an add is never applied twice, through a SIGKILL
// and a restart; a node killed under load loses no acknowledged write while
// its partitions stay readable on their other replica; trouble with the log
// refuses writes, marks reads stale, and both come back.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

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

constexpr int kNodes = 3;
constexpr int kLogPartitions = 8;
constexpr UnixSeconds kFar = 4'000'000'000u;  // an expiry in 2096

SegmentUpdate At(uint64_t id, UnixSeconds expiry) { return SegmentUpdate{id, expiry, false, {}, {}}; }
SegmentUpdate Add(uint64_t id, uint32_t seconds) { return SegmentUpdate{id, seconds, false, {}, {}}; }

// Three nodes writing through the log, replication 2, checkpoints every
// `checkpoint_ms`.
testing::SegstoredClusterOptions Options(int checkpoint_ms) {
  testing::SegstoredClusterOptions o;
  o.nodes = kNodes;
  o.threads = 2;
  o.file_size = "64MiB";
  o.etcd_prefix = "/replication-test";
  o.replication = 2;
  o.log = true;
  o.log_partitions = kLogPartitions;
  o.log_lines = {"append_timeout_ms = 3000", "apply_timeout_ms = 6000", "max_lag_ms = 2000"};
  o.checkpoint_interval_ms = checkpoint_ms;
  o.routed.node.request_timeout = 10s;
  o.routed.node.connect_timeout = 2s;
  o.routed.max_attempts = 6;
  return o;
}

// Stops and joins the test's client threads however the test ends (a fatal
// assertion returns early).
struct Joined {
  std::atomic<bool>& stop;
  std::vector<std::thread>& threads;
  ~Joined() {
    stop = true;
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

class ReplicationTest : public ::testing::Test {
 protected:
  explicit ReplicationTest(int checkpoint_ms = 200) : cluster_(Options(checkpoint_ms)) {}

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.Start());
    ASSERT_NO_FATAL_FAILURE(cluster_.WaitAllServing());
    EXPECT_TRUE(cluster_.AgreedMap(&map_));
    ASSERT_TRUE(map_.has_map());
  }

  client::Client& direct(int i) { return cluster_.direct(i); }
  std::unique_ptr<client::ClusterClient> Routed(int node) { return cluster_.Routed(node); }

  // The node index (in the map, which is the order the nodes registered in
  // this test: node-i is map index i once sorted by ID) of each replica.
  std::vector<int> ReplicasOf(const std::string& user) const {
    std::vector<int> out;
    for (uint16_t n : map_.ReplicasOf(PartitionOf(user))) {
      out.push_back(SegstoredCluster::NodeIndex(map_, n));
    }
    return out;
  }

  // Users whose partitions `node` holds (as_holder) or does not.
  std::vector<std::string> UsersOn(int node, size_t n, bool held = true) const {
    std::vector<std::string> out;
    for (int u = 0; out.size() < n; ++u) {
      std::string user = "user-" + std::to_string(u);
      const std::vector<int> r = ReplicasOf(user);
      if ((std::find(r.begin(), r.end(), node) != r.end()) == held) out.push_back(user);
    }
    return out;
  }

  SegstoredCluster cluster_;
  ClusterMap map_;
};

TEST_F(ReplicationTest, AWriteIsReadBackFromEveryReplicaAndAtOnceFromItsNode) {
  EXPECT_EQ(map_.replication, 2u);
  EXPECT_TRUE(map_.log);
  auto c = Routed(0);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> users;
  for (int u = 0; u < 120; ++u) users.push_back("user-" + std::to_string(u));
  for (size_t u = 0; u < users.size(); ++u) {
    Result<UpsertResult> r = c->Upsert(users[u], std::vector{At(u + 1, kFar)});
    ASSERT_TRUE(r.ok()) << users[u] << ": " << r.status().ToString();
    EXPECT_EQ(r->inserted, 1u);
  }
  // Every replica holds every user of its partitions; the third node says
  // WrongNode.
  for (size_t u = 0; u < users.size(); ++u) {
    const std::vector<int> replicas = ReplicasOf(users[u]);
    ASSERT_EQ(replicas.size(), 2u);
    EXPECT_NE(replicas[0], replicas[1]);
    for (int i = 0; i < kNodes; ++i) {
      const bool holds = std::find(replicas.begin(), replicas.end(), i) != replicas.end();
      Result<GetResult> g = Status::Internal("not asked");
      if (holds) {
        ASSERT_TRUE(WaitFor([&] {
          g = direct(i).Get(users[u]);
          return g.ok();
        })) << users[u] << " on node " << i << ": " << g.status().ToString();
        EXPECT_EQ(g->ids, std::vector<uint64_t>{u + 1});
      } else {
        g = direct(i).Get(users[u]);
        EXPECT_EQ(g.status().code(), Status::Code::kWrongNode) << g.status().ToString();
      }
    }
  }
  // Read your write: the node a write was sent to answers it from its copy
  // at once, whichever replica it is.
  for (int node = 0; node < kNodes; ++node) {
    for (const std::string& user : UsersOn(node, 5)) {
      Result<UpsertResult> w = direct(node).Upsert(user, std::vector{At(900 + node, kFar)});
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      Result<GetResult> g = direct(node).Get(user);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      EXPECT_TRUE(std::find(g->ids.begin(), g->ids.end(), 900u + node) != g->ids.end())
          << user << " on node " << node;
      EXPECT_FALSE(g->stale);
    }
  }
  // segctl cluster shows each node's part in the log. The figures are each
  // node's last housekeeping pass (ten a second), which may have seen the
  // log's end move before the last entry was applied: a lag of 0 comes.
  int rc = 0;
  std::string out;
  EXPECT_TRUE(WaitFor([&] {
    std::tie(rc, out) = testing::Segctl(cluster_.port(1), "cluster");
    return rc == 0 && testing::Has(out, "caught up; 0 stale; 0 entries");
  })) << out;
  EXPECT_TRUE(testing::Has(out, "replication 2, 3 nodes, writes through a log")) << out;
  std::tie(rc, out) = testing::Segctl(cluster_.port(1), "cluster --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(testing::Has(out, "\"log\":true")) << out;
  EXPECT_TRUE(testing::Has(out, "\"replica\":{\"caught_up\":true")) << out;
  // User IDs beginning with FF 00 are the cluster's own.
  const std::string reserved("\xff\x00segstore:applied:0", 20);
  EXPECT_EQ(direct(0).Get(reserved).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(direct(0).Upsert(reserved, std::vector{At(1, kFar)}).status().code(),
            Status::Code::kInvalidArgument);
  cluster_.StopAll();
}

TEST_F(ReplicationTest, AWriteIdIsAppliedOnceWhicheverReplicaItIsSentTo) {
  const std::string user = UsersOn(0, 1)[0];
  const std::vector<int> replicas = ReplicasOf(user);
  ASSERT_TRUE(direct(replicas[0]).Upsert(user, std::vector{At(7, 2'000'000'000u)}).ok());
  const WriteId id{0x1234, 0x5678};
  Result<UpsertResult> first =
      direct(replicas[0]).Upsert(user, std::vector{Add(7, 60)}, UpsertMode::kAdd, id);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->duplicate);
  // The same write sent again, to the other replica: answered, not applied.
  Result<UpsertResult> again =
      direct(replicas[1]).Upsert(user, std::vector{Add(7, 60)}, UpsertMode::kAdd, id);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->updated, 1u);
  for (int r : replicas) {
    ASSERT_TRUE(WaitFor([&] {
      Result<GetResult> g = direct(r).Get(user);
      return g.ok() && g->expires == std::vector<UnixSeconds>{2'000'000'060u};
    })) << "node " << r;
  }
  cluster_.StopAll();
}

// Checkpoints only at a clean stop: a killed node replays everything it had
// applied since it started.
class ReplicationRestartTest : public ReplicationTest {
 protected:
  ReplicationRestartTest() : ReplicationTest(600'000) {}
};

TEST_F(ReplicationRestartTest, ARestartedNodeAppliesNoAddTwice) {
  // Two writers add to a few users while node 1 is killed and restarted
  // (without a clean stop its last checkpoint is behind what it applied: the
  // restart replays entries it had applied, and must skip them).
  auto c = Routed(0);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> users = UsersOn(1, 6);
  for (const std::string& u : users) ASSERT_TRUE(c->Upsert(u, std::vector{At(1, 2'000'000'000u)}).ok());
  std::mutex mu;
  std::map<std::string, int> acked, unknown;
  std::atomic<int> answered{0};  // adds acknowledged, all users
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  Joined joined{stop, writers};
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      auto mine = Routed(w == 0 ? 0 : 2);
      if (mine == nullptr) return;
      for (int k = 0; !stop.load(); ++k) {
        const std::string& u = users[static_cast<size_t>(k + w) % users.size()];
        Result<UpsertResult> r = mine->Upsert(u, std::vector{Add(1, 60)}, UpsertMode::kAdd);
        std::lock_guard lock(mu);
        if (r.ok()) {
          ++acked[u];
          ++answered;
        } else {
          ++unknown[u];  // InDoubt, or anything else: may or may not have been made
        }
      }
    });
  }
  // Adds acknowledged before the kill (node 1 applied them), during its
  // absence (the surviving replicas took them) and after it came back.
  const auto more_adds = [&](int n) {
    const int target = answered.load() + n;
    return WaitFor([&] { return answered.load() >= target; });
  };
  ASSERT_TRUE(more_adds(20));
  EXPECT_EQ(cluster_.StopNode(1, SIGKILL), 128 + SIGKILL);
  ASSERT_TRUE(more_adds(20));
  ASSERT_NO_FATAL_FAILURE(cluster_.StartNode(1));
  ASSERT_NO_FATAL_FAILURE(cluster_.WaitServing(1));
  ASSERT_TRUE(more_adds(10));
  stop = true;
  for (auto& t : writers) t.join();

  int total = 0;
  for (const std::string& u : users) {
    total += acked[u];
    for (int r : ReplicasOf(u)) {
      Result<GetResult> g = Status::Internal("not asked");
      ASSERT_TRUE(WaitFor([&] {
        g = direct(r).Get(u);
        if (!g.ok() || g->expires.size() != 1) return false;
        const uint64_t adds = (g->expires[0] - 2'000'000'000u) / 60;
        return adds >= static_cast<uint64_t>(acked[u]);
      })) << u << " on node " << r << ": " << g.status().ToString();
      const uint64_t adds = (g->expires[0] - 2'000'000'000u) / 60;
      EXPECT_LE(adds, static_cast<uint64_t>(acked[u] + unknown[u]))
          << u << " on node " << r << ": an add was applied twice";
    }
    // Both replicas agree to the second.
    const std::vector<int> r = ReplicasOf(u);
    EXPECT_EQ(direct(r[0]).Get(u)->expires, direct(r[1]).Get(u)->expires) << u;
  }
  EXPECT_GT(total, 20);
  EXPECT_GT(StatOf(direct(1), "replica.entries_replayed"), 0);
  cluster_.StopAll();
}

TEST_F(ReplicationTest, ANodeKilledUnderLoadLosesNoAcknowledgedWriteAndItsDataStaysReadable) {
  constexpr int kClients = 4;
  std::vector<std::string> users = UsersOn(2, 40);
  std::mutex mu;
  std::map<std::string, std::vector<uint64_t>> written;  // acknowledged segment IDs
  std::atomic<int> write_errors{0}, read_errors{0}, reads{0}, writes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  Joined joined{stop, threads};
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = Routed(t % 2);  // nodes 0 and 1 as seeds; node 2 holds the users too
      if (c == nullptr) return;
      for (uint64_t k = 1; !stop.load(); ++k) {
        const std::string& u = users[(k * kClients + static_cast<uint64_t>(t)) % users.size()];
        const uint64_t id = k * kClients + static_cast<uint64_t>(t);
        if (c->Upsert(u, std::vector{At(id, kFar)}).ok()) {
          std::lock_guard lock(mu);
          written[u].push_back(id);
          ++writes;
        } else {
          ++write_errors;
        }
        // And a read of a user written before.
        Result<GetResult> g = c->Get(users[k % users.size()]);
        ++reads;
        if (!g.ok() && !g.status().IsNotFound()) ++read_errors;
      }
    });
  }
  // Writes and reads acknowledged before the kill, and as many again after
  // it: served by the other replica of each partition.
  const auto more = [&](int n) {
    const int w = writes.load() + n, r = reads.load() + n;
    return WaitFor([&] { return writes.load() >= w && reads.load() >= r; });
  };
  ASSERT_TRUE(more(100));
  EXPECT_EQ(cluster_.StopNode(2, SIGKILL), 128 + SIGKILL);
  ASSERT_TRUE(more(200));
  stop = true;
  for (auto& t : threads) t.join();
  // The clients' retries kept errors to the requests caught in the kill.
  EXPECT_LE(write_errors.load(), kClients) << "of " << reads.load();
  EXPECT_EQ(read_errors.load(), 0) << "of " << reads.load();

  ASSERT_NO_FATAL_FAILURE(cluster_.StartNode(2));
  ASSERT_NO_FATAL_FAILURE(cluster_.WaitServing(2));
  size_t checked = 0;
  for (const auto& [u, ids] : written) {
    for (int r : ReplicasOf(u)) {
      Result<GetResult> g = direct(r).Get(u);
      ASSERT_TRUE(g.ok()) << u << " on node " << r << ": " << g.status().ToString();
      for (uint64_t id : ids) {
        EXPECT_TRUE(std::binary_search(g->ids.begin(), g->ids.end(), id))
            << u << " lost segment " << id << " on node " << r;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100u);
  cluster_.StopAll();
}

TEST_F(ReplicationTest, TroubleWithTheLogRefusesWritesMarksReadsStaleAndPasses) {
  const std::string user = UsersOn(0, 1)[0];
  ASSERT_TRUE(direct(0).Upsert(user, std::vector{At(1, kFar)}).ok());

  // The log refuses writes (too few in-sync replicas, as a real broker
  // would say): the write is answered LogUnavailable, nothing is written.
  ASSERT_TRUE(cluster_.kafka().PushErrors("Produce", "NOT_ENOUGH_REPLICAS", 100000));
  Result<UpsertResult> refused = direct(0).Upsert(user, std::vector{At(2, kFar)});
  EXPECT_EQ(refused.status().code(), Status::Code::kLogUnavailable) << refused.status().ToString();
  Result<GetResult> g = direct(0).Get(user);
  ASSERT_TRUE(g.ok()) << g.status().ToString();  // reads go on
  EXPECT_EQ(g->ids, std::vector<uint64_t>{1});
  ASSERT_TRUE(cluster_.kafka().ClearErrors());
  ASSERT_TRUE(WaitFor([&] { return direct(0).Upsert(user, std::vector{At(3, kFar)}).ok(); }));

  // Every broker down: writes fail, and once the nodes cannot tell how far
  // behind they are, reads are answered but marked stale.
  for (int b = 1; b <= 3; ++b) ASSERT_TRUE(cluster_.kafka().BrokerDown(b));
  Result<UpsertResult> down = direct(0).Upsert(user, std::vector{At(4, kFar)});
  EXPECT_TRUE(down.status().code() == Status::Code::kLogUnavailable ||
              down.status().code() == Status::Code::kInDoubt)
      << down.status().ToString();
  ASSERT_TRUE(WaitFor([&] {
    Result<GetResult> r = direct(0).Get(user);
    return r.ok() && r->stale;
  }));
  EXPECT_GT(StatOf(direct(0), "replica.log_partitions_stale"), 0);
  for (int b = 1; b <= 3; ++b) ASSERT_TRUE(cluster_.kafka().BrokerUp(b));
  ASSERT_TRUE(WaitFor([&] { return direct(0).Upsert(user, std::vector{At(5, kFar)}).ok(); }));
  ASSERT_TRUE(WaitFor([&] {
    Result<GetResult> r = direct(0).Get(user);
    return r.ok() && !r->stale;
  }));
  g = direct(0).Get(user);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(std::find(g->ids.begin(), g->ids.end(), 5u) != g->ids.end());
  EXPECT_TRUE(std::find(g->ids.begin(), g->ids.end(), 2u) == g->ids.end());  // refused: never made
  cluster_.StopAll();
}

}  // namespace
}  // namespace segstore::server
