// Loading and benchmarking a cluster through the asynchronous routing
// client (AsyncClusterClient): three segstored processes on one real etcd,
// without a log, and with one (librdkafka's mock Kafka in a process of its
// own, replication 2). `segctl load` pointed at one node puts every row
// where a get through any node finds it (and on every replica); a batch the
// client splits across the nodes comes back in the caller's order; segbench
// runs its workloads against the cluster and says what it ran against.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <set>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <boost/asio.hpp>
#include <nlohmann/json.hpp>
#include <utility>

#include "cluster/segstored_cluster.h"
#include "segstore/async_cluster_client.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/routing.h"
#include "support/whole_hours.h"

namespace segstore::server {
namespace {

using namespace std::chrono_literals;
using testing::Has;
using testing::Segctl;
using testing::SegstoredCluster;
using testing::StatOf;
using testing::WaitFor;

constexpr int kNodes = 3;
constexpr int kLogPartitions = 8;

// Three nodes, without a log or (replication 2) with one.
testing::SegstoredClusterOptions Options(bool log) {
  testing::SegstoredClusterOptions o;
  o.nodes = kNodes;
  o.threads = 1;
  o.file_size = "128MiB";
  o.etcd_prefix = "/load-test";
  o.ready_timeout = 60s;
  if (log) {
    o.replication = 2;
    o.log = true;
    o.log_partitions = kLogPartitions;
    o.log_lines = {"append_timeout_ms = 5000", "apply_timeout_ms = 10000", "max_lag_ms = 5000"};
  }
  o.routed.node.request_timeout = 15s;
  o.routed.node.connect_timeout = 10s;
  return o;
}

// Runs `io` until `pred` holds; false after `timeout`.
bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& pred,
              std::chrono::milliseconds timeout = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.restart();
    io.run_one_for(50ms);
  }
  return true;
}

// The parameter: whether the cluster writes through a log.
class ClusterLoadTest : public ::testing::TestWithParam<bool> {
 protected:
  ClusterLoadTest() : cluster_(Options(GetParam())) {}

  bool log() const { return GetParam(); }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.Start());
    ASSERT_NO_FATAL_FAILURE(cluster_.WaitAllServing());
    // Until every node answers the same map with a placement.
    ASSERT_TRUE(cluster_.AgreedMap(&map_));
    ASSERT_EQ(map_.log, log());
  }

  void TearDown() override { cluster_.StopAll(); }

  uint16_t port(int i) const { return cluster_.port(i); }
  std::unique_ptr<client::ClusterClient> Routed(int node) { return cluster_.Routed(node); }
  // The index of each node of the map (node-i was started as node i).
  int NodeIndex(uint16_t in_map) const { return SegstoredCluster::NodeIndex(map_, in_map); }

  SegstoredCluster cluster_;
  ClusterMap map_;
};

std::string Name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "WithALog" : "WithoutALog";
}

TEST_P(ClusterLoadTest, SegctlLoadPutsEveryRowWhereAGetThroughAnyNodeFindsIt) {
  // 600 users in rows (three segments each, in an order that is not the
  // users'), and 60 more as grouped lines.
  constexpr int kUsers = 600;
  const std::string rows = cluster_.dir().File("rows.csv");
  {
    std::ofstream f(rows);
    f << "user_id,segment_id,ttl\n";
    for (int s = 0; s < 3; ++s) {
      for (int u = 0; u < kUsers; ++u) {
        f << "u" << u << "," << (s * 100000 + u) << "," << (s == 2 ? "never" : "30d") << "\n";
      }
    }
  }
  const std::string grouped = cluster_.dir().File("grouped.tsv");
  {
    std::ofstream f(grouped);
    for (int u = 0; u < 60; ++u) f << "g" << u << "\t7:12h,8:12h\n";
  }
  // Small batches, so that every node gets many.
  auto [rc, out] = Segctl(port(1), "load --no-progress --json --batch-users 25 --connections 2 " +
                                       rows + " " + grouped);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"rows\":" + std::to_string(3 * kUsers + 60) + ",\"users\":660")) << out;
  EXPECT_TRUE(Has(out, "\"failed_users\":0")) << out;
  EXPECT_TRUE(Has(out, "\"upserts_per_user\":1.00")) << out;

  std::vector<std::string> users;
  for (int u = 0; u < kUsers; ++u) users.push_back("u" + std::to_string(u));
  const auto expected = [](int u) {
    return std::vector<uint64_t>{static_cast<uint64_t>(u), 100000u + u, 200000u + u};
  };
  // Through routing from every node: the first replica answers (the one
  // that took the write), so at once.
  for (int i = 0; i < kNodes; ++i) {
    auto c = Routed(i);
    ASSERT_NE(c, nullptr);
    Result<BatchGetResult> back = c->BatchGet(users);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    for (int u = 0; u < kUsers; ++u) {
      ASSERT_TRUE((*back)[u].ok())
          << users[u] << " via node " << i << ": " << (*back)[u].status().ToString();
      EXPECT_EQ((*back)[u]->ids, expected(u)) << users[u] << " via node " << i;
    }
    for (int u = 0; u < 60; u += 7) {
      Result<GetResult> g = c->Get("g" + std::to_string(u));
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      EXPECT_EQ(g->ids, (std::vector<uint64_t>{7, 8}));
    }
  }
  // On every replica of each user (another replica applies the log a
  // moment later), and nowhere else.
  for (int u = 0; u < kUsers; u += 13) {
    std::vector<int> holders;
    for (uint16_t n : map_.ReplicasOf(PartitionOf(users[u]))) holders.push_back(NodeIndex(n));
    for (int i = 0; i < kNodes; ++i) {
      const bool holds = std::find(holders.begin(), holders.end(), i) != holders.end();
      Result<GetResult> g = Status::Internal("not asked");
      if (holds) {
        ASSERT_TRUE(WaitFor([&] {
          g = cluster_.direct(i).Get(users[u]);
          return g.ok() && g->ids == expected(u);
        })) << users[u]
            << " on node " << i << ": " << g.status().ToString();
      } else {
        g = cluster_.direct(i).Get(users[u]);
        EXPECT_EQ(g.status().code(), Status::Code::kWrongNode) << g.status().ToString();
      }
    }
  }
  // And through segctl on another node.
  std::tie(rc, out) = Segctl(port(2), "get u42 --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "{\"id\":100042,")) << out;

  // Loading the same file again, through another node, leaves the same
  // segments.
  std::tie(rc, out) = Segctl(port(0), "load --no-progress --json " + rows);
  ASSERT_EQ(rc, 0) << out;
  auto c = Routed(0);
  ASSERT_NE(c, nullptr);
  Result<BatchGetResult> again = c->BatchGet(users);
  ASSERT_TRUE(again.ok());
  for (int u = 0; u < kUsers; ++u) EXPECT_EQ((*again)[u]->ids, expected(u)) << users[u];

  // Profile fields: each user's field_set goes to its node (and, with a
  // log, to every replica), read back through any node.
  const std::string fields = cluster_.dir().File("fields.csv");
  {
    std::ofstream f(fields);
    for (int u = 0; u < kUsers; u += 3) {
      f << "u" << u << ",cap:7," << u << ",1d\n";
      f << "u" << u << ",country,str:FR\n";
    }
  }
  std::tie(rc, out) = Segctl(port(2), "load --fields --no-progress --json " + fields);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"fields_set\":" + std::to_string(2 * (kUsers / 3)))) << out;
  GetOptions with_fields;
  with_fields.fields.mode = FieldSelection::Mode::kAll;
  for (int u = 0; u < kUsers; u += 3 * 11) {
    Result<GetResult> g = c->Get(users[u], with_fields);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_EQ(g->fields.size(), 2u) << users[u];
    EXPECT_EQ(g->fields[0].name, "cap:7");
    EXPECT_EQ(g->fields[0].value, FieldValue::Int(u));
    EXPECT_EQ(g->fields[1].value, FieldValue::String("FR"));
  }
}

TEST_P(ClusterLoadTest, TheAsyncClientSplitsABatchAcrossTheNodesAndGathersItInOrder) {
  boost::asio::io_context io;
  client::AsyncClusterClientOptions o;
  o.node.port = port(2);
  o.node.request_timeout = 15s;
  o.node.connect_timeout = 10s;
  o.connections_per_node = 2;
  std::optional<Result<std::unique_ptr<client::AsyncClusterClient>>> connected;
  client::AsyncClusterClient::Connect(io, o, [&](auto r) { connected.emplace(std::move(r)); });
  ASSERT_TRUE(RunUntil(io, [&] { return connected.has_value(); }));
  ASSERT_TRUE(connected->ok()) << connected->status().ToString();
  std::unique_ptr<client::AsyncClusterClient> c = std::move(*connected).value();
  EXPECT_EQ(c->map().revision, map_.revision);
  EXPECT_EQ(c->map().log, log());

  // 400 users, each with its own segment, in one batch upsert.
  std::vector<UpsertItem> items;
  for (int u = 0; u < 400; ++u) {
    items.push_back(UpsertItem{"b" + std::to_string(u),
                               {SegmentUpdate{10u + u, 86400, true, {}, {}}},
                               UpsertMode::kSet,
                               {}});
  }
  std::optional<Result<BatchUpsertResult>> written;
  c->BatchUpsert(items, [&](Result<BatchUpsertResult> r) { written.emplace(std::move(r)); });
  ASSERT_TRUE(RunUntil(io, [&] { return written.has_value(); }));
  ASSERT_TRUE(written->ok()) << written->status().ToString();
  ASSERT_EQ((*written)->size(), items.size());
  for (size_t u = 0; u < items.size(); ++u) {
    ASSERT_TRUE((**written)[u].ok()) << items[u].user << ": " << (**written)[u].status().ToString();
    EXPECT_EQ((**written)[u]->inserted, 1u);
  }

  // A batch get in a shuffled order, with repeats and users never written:
  // every node holds some of them; each answer is where its user was asked.
  std::vector<std::string> asked;
  for (int u = 0; u < 400; ++u) asked.push_back("b" + std::to_string(u));
  for (int u = 0; u < 50; ++u) asked.push_back("b" + std::to_string(u * 7));
  for (int u = 0; u < 30; ++u) asked.push_back("nobody-" + std::to_string(u));
  std::shuffle(asked.begin(), asked.end(), std::mt19937(7));
  std::set<uint16_t> nodes;
  for (const std::string& u : asked) nodes.insert(map_.ReplicasOf(PartitionOf(u))[0]);
  EXPECT_EQ(nodes.size(), static_cast<size_t>(kNodes));
  std::optional<Result<BatchGetResult>> got;
  c->BatchGet(asked, {}, [&](Result<BatchGetResult> r) { got.emplace(std::move(r)); });
  ASSERT_TRUE(RunUntil(io, [&] { return got.has_value(); }));
  ASSERT_TRUE(got->ok()) << got->status().ToString();
  ASSERT_EQ((*got)->size(), asked.size());
  for (size_t i = 0; i < asked.size(); ++i) {
    const Result<GetResult>& one = (**got)[i];
    if (asked[i].rfind("nobody-", 0) == 0) {
      EXPECT_TRUE(one.status().IsNotFound()) << asked[i] << ": " << one.status().ToString();
      continue;
    }
    ASSERT_TRUE(one.ok()) << asked[i] << ": " << one.status().ToString();
    EXPECT_EQ(one->ids, std::vector<uint64_t>{10u + std::stoul(asked[i].substr(1))}) << asked[i];
  }

  // Single-user calls, many at once, each to its node.
  int answered = 0;
  for (int u = 0; u < 400; u += 3) {
    c->Get("b" + std::to_string(u), {}, [&answered, u](Result<GetResult> r) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) {
        EXPECT_EQ(r->ids, std::vector<uint64_t>{10u + u});
      }
      ++answered;
    });
  }
  const SegmentUpdate more{9, 86400, true, {}, {}};
  std::optional<Result<UpsertResult>> upserted;
  c->Upsert("b1", std::span(&more, 1), UpsertMode::kSet,
            [&](Result<UpsertResult> r) { upserted.emplace(std::move(r)); });
  std::optional<Result<bool>> deleted;
  c->Delete("b2", [&](Result<bool> r) { deleted.emplace(std::move(r)); });
  // A link goes to its user's node, which coordinates it.
  std::optional<Result<LinkResult>> linked;
  c->Link("b3", "b4", 0, [&](Result<LinkResult> r) { linked.emplace(std::move(r)); });
  ASSERT_TRUE(RunUntil(io, [&] {
    return answered == 134 && upserted.has_value() && deleted.has_value() && linked.has_value() &&
           c->in_flight() == 0;
  }));
  ASSERT_TRUE(upserted->ok()) << upserted->status().ToString();
  EXPECT_EQ((*upserted)->count, 2u);
  ASSERT_TRUE(deleted->ok()) << deleted->status().ToString();
  EXPECT_TRUE(**deleted);
  ASSERT_TRUE(linked->ok()) << linked->status().ToString();
  EXPECT_EQ((*linked)->master, "b4");
  EXPECT_EQ(c->retries(), 0u);

  // Through the synchronous router from another node: the same data.
  auto sync = Routed(0);
  ASSERT_NE(sync, nullptr);
  EXPECT_EQ(sync->Get("b1")->ids, (std::vector<uint64_t>{9, 11}));
  EXPECT_TRUE(sync->Get("b2").status().IsNotFound());
  c.reset();
}

#ifdef SEGBENCH_PATH
// segbench against the cluster: every workload it has for a cluster, through
// any node; its report says what it ran against.
TEST_P(ClusterLoadTest, SegbenchRunsItsWorkloadsAgainstTheCluster) {
  const segstore::testing::HourWatch hours;
  const std::string json_file = cluster_.dir().File("segbench.json");
  const std::string cmd = std::string(SEGBENCH_PATH) +
                          " --segstore 127.0.0.1:" + std::to_string(port(1)) +
                          " --users 30 --connections 2 --seconds 0.3 --warmup 0.05 --batch 4"
                          " --load-connections 2 --json-file " +
                          json_file + " load get batch-get upsert mixed trim 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  ASSERT_EQ(WEXITSTATUS(status), 0) << out;
  const std::string topology =
      std::string("cluster of 3 nodes, replication ") + (log() ? "2, writes through a log" : "1");
  EXPECT_TRUE(Has(out, "segstore at 127.0.0.1:" + std::to_string(port(1)) + ": " + topology))
      << out;
  std::ifstream in(json_file);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["servers"].size(), 1u);
  EXPECT_EQ(j["servers"][0]["topology"], topology);
  std::set<std::string> workloads;
  for (const auto& run : j["runs"]) {
    workloads.insert(run["workload"].get<std::string>());
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_GT(run["ops"].get<uint64_t>(), 0u) << run.dump();
    // Whole reference profiles, but for the segments that expired on a
    // whole hour the run crossed (support/whole_hours.h).
    const double profiles = run["workload"] == "batch-get" ? 4 : 1;
    if (run["workload"] == "get" || run["workload"] == "batch-get") {
      if (!hours.Crossed()) {
        EXPECT_EQ(run["segments_per_op"].get<double>(), 1000.0 * profiles);
      } else {
        EXPECT_LE(run["segments_per_op"].get<double>(), 1000.0 * profiles);
        EXPECT_GE(run["segments_per_op"].get<double>(), 990.0 * profiles);
      }
    }
  }
  EXPECT_EQ(workloads, (std::set<std::string>{"get", "batch-get", "upsert", "mixed", "trim"}));
  // Every user was loaded onto its nodes: each node's records sum to the
  // users times the replication (plus a log's checkpoint records).
  uint64_t records = 0;
  for (int i = 0; i < kNodes; ++i) {
    records += static_cast<uint64_t>(StatOf(cluster_.direct(i), "storage.index_entries"));
  }
  EXPECT_GE(records, 30u * map_.replication);
}
#endif

INSTANTIATE_TEST_SUITE_P(Cluster, ClusterLoadTest, ::testing::Bool(), Name);

}  // namespace
}  // namespace segstore::server
