// A second datacenter, active-passive: a first cluster of three nodes
// (replication 2) writing through the log, and a passive cluster of two
// nodes (replication 1, its own etcd prefix and map) applying the first's
// log. The passive cluster refuses every write with ReadOnly, whichever node
// and however it is sent, and converges on the first's data: what was
// written before it started (replayed from the log) and what is written
// while it runs, adds, removes, trims and deletes included.
#include <gtest/gtest.h>

#include <atomic>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cluster/segstored_cluster.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"

namespace segstore::server {
namespace {

using namespace std::chrono_literals;
using testing::SegstoredCluster;
using testing::WaitFor;

constexpr UnixSeconds kFar = 4'000'000'000u;  // an expiry in 2096
constexpr int kUsers = 120;

SegmentUpdate At(uint64_t id, UnixSeconds expiry) {
  return SegmentUpdate{id, expiry, false, {}, {}};
}
SegmentUpdate Add(uint64_t id, uint32_t seconds) {
  return SegmentUpdate{id, seconds, false, {}, {}};
}

testing::SegstoredClusterOptions FirstOptions() {
  testing::SegstoredClusterOptions o;
  o.nodes = 3;
  o.threads = 2;
  o.etcd_prefix = "/dc-1";
  o.replication = 2;
  o.log = true;
  o.log_partitions = 8;
  o.log_topic = "dc-1-writes";
  o.log_lines = {"append_timeout_ms = 3000", "apply_timeout_ms = 6000"};
  o.routed.node.request_timeout = 10s;
  o.routed.max_attempts = 6;
  return o;
}

testing::SegstoredClusterOptions SecondOptions(SegstoredCluster* first) {
  testing::SegstoredClusterOptions o;
  o.nodes = 2;
  o.threads = 2;
  o.etcd_prefix = "/dc-2";
  o.replication = 1;
  o.follow = first;
  o.routed.node.request_timeout = 10s;
  o.routed.max_attempts = 6;
  return o;
}

std::string User(int u) { return "person-" + std::to_string(u); }

std::string Show(const Result<GetResult>& r) {
  if (!r.ok()) return r.status().ToString();
  std::string out = r->stale ? "(stale)" : "";
  for (size_t i = 0; i < r->ids.size(); ++i) {
    out += " " + std::to_string(r->ids[i]) + "@" +
           std::to_string(r->expires.empty() ? 0 : r->expires[i]);
  }
  return out;
}

// The same profile, segment by segment (the stale flag aside).
bool Same(const Result<GetResult>& a, const Result<GetResult>& b) {
  if (a.ok() != b.ok()) return false;
  if (!a.ok()) return a.status().code() == b.status().code();
  return a->ids == b->ids && a->expires == b->expires && a->attr1 == b->attr1 &&
         a->attr2 == b->attr2;
}

class SecondDatacenterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(first_.Start());
    ASSERT_NO_FATAL_FAILURE(first_.WaitAllServing());
    ClusterMap map;
    ASSERT_TRUE(first_.AgreedMap(&map));
    writer_ = first_.Routed(0);
    ASSERT_NE(writer_, nullptr);
  }

  void StartSecond() {
    ASSERT_NO_FATAL_FAILURE(second_.Start());
    ASSERT_NO_FATAL_FAILURE(second_.WaitAllServing());
    ClusterMap map;
    ASSERT_TRUE(second_.AgreedMap(&map));
    EXPECT_TRUE(map.passive);
    EXPECT_TRUE(map.log);
    EXPECT_EQ(map.nodes.size(), 2u);
    EXPECT_EQ(map.replication, 1u);
  }

  // Every user reads the same through the first cluster and the second
  // (bounded: the second applies the log a little later).
  void ExpectConverged(client::ClusterClient& second) {
    std::string differing;
    const bool converged = WaitFor(
        [&] {
          for (int u = 0; u < kUsers; ++u) {
            const Result<GetResult> a = writer_->Get(User(u));
            const Result<GetResult> b = second.Get(User(u));
            if (!Same(a, b)) {
              differing = User(u) + ": first cluster " + Show(a) + "; second " + Show(b);
              return false;
            }
          }
          return true;
        },
        std::chrono::milliseconds(120000), std::chrono::milliseconds(50));
    EXPECT_TRUE(converged) << differing;
  }

  SegstoredCluster first_{FirstOptions()};
  SegstoredCluster second_{SecondOptions(&first_)};
  std::unique_ptr<client::ClusterClient> writer_;
};

TEST_F(SecondDatacenterTest, APassiveClusterAppliesTheFirstsLogConvergesAndRefusesWrites) {
  // History the second cluster replays from the log when it starts.
  for (int u = 0; u < kUsers; ++u) {
    ASSERT_TRUE(writer_->Upsert(User(u), std::vector{At(1, kFar), At(2 + u % 5, kFar)}).ok());
    ASSERT_TRUE(writer_->Upsert(User(u), std::vector{Add(100, 3600)}, UpsertMode::kAdd).ok());
  }
  for (int u = 0; u < kUsers; u += 7) ASSERT_TRUE(writer_->Delete(User(u)).ok());
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  auto second = second_.Routed(1);
  ASSERT_NE(second, nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectConverged(*second));
  Result<GetResult> deleted = second->Get(User(7));
  EXPECT_EQ(deleted.status().code(), Status::Code::kNotFound) << deleted.status().ToString();

  // Every write to the second cluster is refused, through either node,
  // directly or routed, and changes nothing there or in the first.
  const std::string user = User(1);
  const Result<GetResult> before = writer_->Get(user);
  ASSERT_TRUE(before.ok());
  for (int node = 0; node < 2; ++node) {
    client::Client& c = second_.direct(node);
    EXPECT_EQ(c.Upsert(user, std::vector{At(9, kFar)}).status().code(), Status::Code::kReadOnly);
    EXPECT_EQ(c.BatchUpsert(std::vector{UpsertItem{user, {At(9, kFar)}}}).status().code(),
              Status::Code::kReadOnly);
    EXPECT_EQ(c.Remove(user, std::vector<uint64_t>{1}).status().code(), Status::Code::kReadOnly);
    EXPECT_EQ(c.Trim(user, kFar).status().code(), Status::Code::kReadOnly);
    EXPECT_EQ(c.Expire(user, std::vector<uint64_t>{1}, ExpireSpec{60, true}).status().code(),
              Status::Code::kReadOnly);
    Result<bool> del = c.Delete(user);
    EXPECT_EQ(del.status().code(), Status::Code::kReadOnly);
    EXPECT_TRUE(testing::Has(del.status().ToString(), "passive cluster"))
        << del.status().ToString();
  }
  EXPECT_EQ(second->Upsert(user, std::vector{At(9, kFar)}).status().code(),
            Status::Code::kReadOnly);
  EXPECT_EQ(second->Delete(user).status().code(), Status::Code::kReadOnly);
  EXPECT_TRUE(Same(writer_->Get(user), before));
  EXPECT_TRUE(Same(second->Get(user), before));

  // While the first cluster takes every kind of write, the second follows.
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread load([&] {
    auto c = first_.Routed(2);
    if (c == nullptr) return;
    for (int round = 0; !stop && round < 20; ++round) {
      for (int u = 0; u < kUsers && !stop; ++u) {
        const std::string name = User(u);
        bool ok = false;
        switch ((u + round) % 5) {
          case 0:
            ok = c->Upsert(name, std::vector{At(1000 + round, kFar)}).ok();
            break;
          case 1:
            ok = c->Upsert(name, std::vector{Add(100, 60)}, UpsertMode::kAdd).ok();
            break;
          case 2:
            ok =
                c->Remove(name, std::vector<uint64_t>{1, 999u + static_cast<uint64_t>(round)}).ok();
            break;
          case 3:
            ok = c->Trim(name, 0).ok();
            break;
          case 4:
            ok = u % 11 == 0 ? c->Delete(name).ok()
                             : c->Upsert(name, std::vector{At(2000 + round, kFar)}).ok();
            break;
        }
        if (ok) ++written;
      }
    }
  });
  // Reads of the second cluster go on meanwhile.
  int reads = 0;
  while (written < 3 * kUsers && reads < 100'000) {
    Result<GetResult> g = second->Get(User(reads++ % kUsers));
    EXPECT_TRUE(g.ok() || g.status().code() == Status::Code::kNotFound) << g.status().ToString();
  }
  stop = true;
  load.join();
  EXPECT_GE(written.load(), 3 * kUsers);
  ASSERT_NO_FATAL_FAILURE(ExpectConverged(*second));

  // segctl says which kind of cluster it asked, and writes through it fail
  // at once with the reason.
  auto [rc, out] = testing::Segctl(second_.port(0), "cluster");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(testing::Has(out, "passive: applies another cluster's log, takes no writes")) << out;
  std::tie(rc, out) = testing::Segctl(second_.port(0), "cluster --json");
  EXPECT_TRUE(testing::Has(out, "\"passive\":true")) << out;
  std::tie(rc, out) = testing::Segctl(first_.port(0), "cluster --json");
  EXPECT_TRUE(testing::Has(out, "\"passive\":false")) << out;
  const std::string rows = second_.dir().File("rows.csv");
  {
    std::ofstream f(rows);
    for (int u = 0; u < 50; ++u) f << "loaded-" << u << ",5,30d\n";
  }
  std::tie(rc, out) = testing::Segctl(second_.port(1), "load --no-progress " + rows);
  EXPECT_EQ(rc, 2) << out;  // stopped, not a row error per user
  EXPECT_TRUE(testing::Has(out, "failed after 1 attempts: ReadOnly")) << out;
  EXPECT_EQ(writer_->Get("loaded-0").status().code(), Status::Code::kNotFound);
}

// A passive node restarted resumes from its own checkpoints and catches up
// with what the first cluster wrote while it was down.
TEST_F(SecondDatacenterTest, APassiveNodeRestartedCatchesUpWithTheFirst) {
  ASSERT_NO_FATAL_FAILURE(StartSecond());
  for (int u = 0; u < kUsers; ++u) {
    ASSERT_TRUE(writer_->Upsert(User(u), std::vector{At(1, kFar)}).ok());
  }
  auto second = second_.Routed(0);
  ASSERT_NE(second, nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectConverged(*second));
  EXPECT_EQ(second_.StopNode(1, SIGKILL), 128 + SIGKILL);
  for (int u = 0; u < kUsers; ++u) {
    ASSERT_TRUE(writer_->Upsert(User(u), std::vector{Add(50, 600)}, UpsertMode::kAdd).ok());
  }
  ASSERT_NO_FATAL_FAILURE(second_.StartNode(1));
  ASSERT_NO_FATAL_FAILURE(second_.WaitServing(1));
  ASSERT_NO_FATAL_FAILURE(ExpectConverged(*second));
  // Each add was applied once: 600 s from the write, not 1,200.
  for (int u = 0; u < kUsers; ++u) {
    Result<GetResult> g = second->Get(User(u));
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_EQ(g->ids, (std::vector<uint64_t>{1, 50}));
    EXPECT_LE(g->expires[1], static_cast<UnixSeconds>(std::time(nullptr)) + 600);
  }
}

}  // namespace
}  // namespace segstore::server
