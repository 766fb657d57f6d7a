// The routing clients' shared decisions (src/client/routing_rules.h): which
// replica a request goes to while a node is marked down, how long the mark
// lasts, whom a map refresh asks first, and when a retry needs no pause.
#include "client/routing_rules.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "segstore/routing.h"

namespace segstore::client::internal {
namespace {

using namespace std::chrono_literals;
using Clock = DownNodes::Clock;

// Three nodes a, b, c; every partition on a then b.
ClusterMap TwoReplicaMap() {
  ClusterMap m;
  m.cluster = true;
  m.revision = 3;
  m.replication = 2;
  m.nodes = {{"a", "10.0.0.1:7700", ""}, {"b", "10.0.0.2:7700", ""}, {"c", "10.0.0.3:7700", ""}};
  m.replicas.resize(size_t{kPartitions} * 2);
  for (uint32_t p = 0; p < kPartitions; ++p) {
    m.replicas[2 * p] = 0;
    m.replicas[2 * p + 1] = 1;
  }
  return m;
}

TEST(DownNodesTest, AMarkLastsASecondAndDoublesWithFailuresInARowUpTo16s) {
  DownNodes down;
  const std::string a = "10.0.0.1:7700";
  Clock::time_point t = Clock::now();
  EXPECT_TRUE(down.empty());
  EXPECT_FALSE(down.Down(a, t));
  down.Failed(a, t);
  EXPECT_TRUE(down.Down(a, t + 999ms));
  EXPECT_FALSE(down.Down(a, t + 1s));
  EXPECT_FALSE(down.Down("10.0.0.2:7700", t));
  // Failures while marked (requests that were in flight) count as one.
  down.Failed(a, t + 10ms);
  down.Failed(a, t + 500ms);
  EXPECT_FALSE(down.Down(a, t + 1s));
  // Tried again after the mark and failed: the second in a row, 2 s.
  t += 1s;
  down.Failed(a, t);
  EXPECT_TRUE(down.Down(a, t + 1999ms));
  EXPECT_FALSE(down.Down(a, t + 2s));
  for (int i = 0; i < 10; ++i) {
    t += 20s;
    down.Failed(a, t);
  }
  EXPECT_TRUE(down.Down(a, t + 15s));
  EXPECT_FALSE(down.Down(a, t + 16s));  // at most 16 s
  // An answer clears it, and the count: the next failure marks a second.
  down.Answered(a);
  EXPECT_TRUE(down.empty());
  down.Failed(a, t);
  EXPECT_FALSE(down.Down(a, t + 1s));
  // Another first mark.
  DownNodes longer(5s);
  longer.Failed(a, t);
  EXPECT_TRUE(longer.Down(a, t + 4s));
  EXPECT_FALSE(longer.Down(a, t + 5s));
}

TEST(DownNodesTest, RequestsPassOverANodeMarkedDownUnlessEveryReplicaIs) {
  const ClusterMap map = TwoReplicaMap();
  const std::string seed = "seed:1";
  DownNodes down;
  EXPECT_EQ(AddressOf(map, seed, "alice", 0, down), "10.0.0.1:7700");
  EXPECT_EQ(AddressOf(map, seed, "alice", 1, down), "10.0.0.2:7700");
  down.Failed("10.0.0.1:7700");
  EXPECT_EQ(AddressOf(map, seed, "alice", 0, down), "10.0.0.2:7700");
  EXPECT_EQ(AddressOf(map, seed, "alice", 1, down), "10.0.0.2:7700");
  // Both down: the attempt's own replica, as without marks.
  down.Failed("10.0.0.2:7700");
  EXPECT_EQ(AddressOf(map, seed, "alice", 0, down), "10.0.0.1:7700");
  EXPECT_EQ(AddressOf(map, seed, "alice", 1, down), "10.0.0.2:7700");
  // No map: the seed, whatever is marked.
  EXPECT_EQ(AddressOf(ClusterMap{}, seed, "alice", 0, down), seed);
}

TEST(DownNodesTest, ALostNodeIsRetriedElsewhereAtOnceAndAskedForTheMapLast) {
  const ClusterMap map = TwoReplicaMap();
  DownNodes down;
  const std::string a = "10.0.0.1:7700", b = "10.0.0.2:7700";
  const Status lost = Status::Unavailable("connection reset");
  down.Failed(a);
  EXPECT_TRUE(RetryAtOnce(lost, a, b, down));
  EXPECT_TRUE(RetryAtOnce(Status::Timeout("no answer"), a, b, down));
  EXPECT_FALSE(RetryAtOnce(lost, a, a, down));  // nowhere else to go
  EXPECT_FALSE(RetryAtOnce(Status::Busy("busy"), a, b, down));
  EXPECT_FALSE(RetryAtOnce(Status::WrongNode("moved"), a, b, down));
  down.Failed(b);
  EXPECT_FALSE(RetryAtOnce(lost, a, b, down));  // the other is down too
  down.Answered(b);
  EXPECT_EQ(RefreshOrder(map, "", "seed:1", down),
            (std::vector<std::string>{b, "10.0.0.3:7700", "seed:1", a}));
  EXPECT_EQ(RefreshOrder(map, b, "seed:1", down),
            (std::vector<std::string>{b, b, "10.0.0.3:7700", "seed:1", a}));
}

}  // namespace
}  // namespace segstore::client::internal
