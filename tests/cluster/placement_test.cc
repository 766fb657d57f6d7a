// Placement: balanced, deterministic, racks apart, few moves when the set of
// nodes changes; the map's JSON form round-trips and rejects what is broken.
#include "cluster/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace segstore::cluster {
namespace {

std::vector<ClusterNode> Nodes(int n, int racks = 0) {
  std::vector<ClusterNode> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(ClusterNode{"node-" + std::to_string(i), "127.0.0.1:" + std::to_string(7000 + i),
                              racks > 0 ? "rack-" + std::to_string(i % racks) : ""});
  }
  return out;
}

TEST(PlacementTest, EveryPartitionGetsDistinctReplicasAndTheLoadIsEven) {
  for (uint32_t r : {1u, 2u, 3u}) {
    Result<ClusterMap> m = Place(Nodes(5), r);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE(m->Check().ok());
    std::map<uint16_t, int> held;
    for (uint16_t i : m->replicas) ++held[i];
    ASSERT_EQ(held.size(), 5u);
    for (const auto& [node, n] : held) {
      // 4096 * r / 5 each, within 10 %.
      EXPECT_NEAR(n, 4096.0 * r / 5, 4096.0 * r / 5 * 0.1) << "node " << node << " r " << r;
    }
  }
}

TEST(PlacementTest, TheSameNodesInAnyOrderGiveTheSameMap) {
  std::vector<ClusterNode> a = Nodes(4), b = Nodes(4);
  std::reverse(b.begin(), b.end());
  EXPECT_EQ(*Place(a, 2), *Place(b, 2));
}

TEST(PlacementTest, AddingANodeMovesOnlyWhatItTakes) {
  ClusterMap before = *Place(Nodes(4), 1);
  ClusterMap after = *Place(Nodes(5), 1);
  int moved = 0;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const std::string& was = before.nodes[before.ReplicasOf(p)[0]].id;
    const std::string& now = after.nodes[after.ReplicasOf(p)[0]].id;
    if (was != now) {
      ++moved;
      EXPECT_EQ(now, "node-4") << "partition " << p << " moved between old nodes";
    }
  }
  EXPECT_NEAR(moved, 4096 / 5, 4096 / 5 * 0.15);
}

TEST(PlacementTest, ReplicasGoToDistinctRacksWhenThereAreEnough) {
  ClusterMap m = *Place(Nodes(6, /*racks=*/3), 3);
  for (uint32_t p = 0; p < kPartitions; ++p) {
    std::set<std::string> racks;
    for (uint16_t i : m.ReplicasOf(p)) racks.insert(m.nodes[i].rack);
    ASSERT_EQ(racks.size(), 3u) << "partition " << p;
  }
  // Two racks for three replicas: both racks used, one twice.
  ClusterMap two = *Place(Nodes(4, /*racks=*/2), 3);
  for (uint32_t p = 0; p < kPartitions; ++p) {
    std::set<std::string> racks;
    for (uint16_t i : two.ReplicasOf(p)) racks.insert(two.nodes[i].rack);
    ASSERT_EQ(racks.size(), 2u) << "partition " << p;
  }
}

TEST(PlacementTest, RefusesImpossiblePlacements) {
  EXPECT_EQ(Place(Nodes(2), 3).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Place(Nodes(2), 0).status().code(), Status::Code::kInvalidArgument);
  std::vector<ClusterNode> twice = Nodes(2);
  twice[1].id = twice[0].id;
  EXPECT_EQ(Place(twice, 1).status().code(), Status::Code::kInvalidArgument);
  std::vector<ClusterNode> unnamed = Nodes(2);
  unnamed[0].id.clear();
  EXPECT_EQ(Place(unnamed, 1).status().code(), Status::Code::kInvalidArgument);
}

TEST(PlacementTest, MapJsonRoundTrips) {
  ClusterMap m = *Place(Nodes(3, 2), 2);
  Result<ClusterMap> back = MapFromJson(MapToJson(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
}

TEST(PlacementTest, BrokenMapJsonIsRefusedWithAReason) {
  const std::string good = MapToJson(*Place(Nodes(3), 1));
  auto refused = [](const std::string& text, const std::string& why) {
    Result<ClusterMap> r = MapFromJson(text);
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << text.substr(0, 80);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
  };
  refused("", "not a JSON object");
  refused("[1]", "not a JSON object");
  refused(R"({"format":2,"replication":1,"nodes":[],"partitions":[]})", "format 2");
  refused(R"({"format":1,"replication":1,"nodes":[{"id":"a","address":"x"}],"partitions":[[0]]})",
          "4096");
  // Numbers are unsigned integers in range, never wrapped or truncated.
  for (const char* n : {"65536", "-1", "1.5", "\"0\""}) {
    std::string bad = good;
    bad.replace(bad.find("[[") + 2, 1, n);
    refused(bad, "node index");
  }
  refused(R"({"format":1,"replication":-1,"nodes":[],"partitions":[]})", "replication");
  std::string bad_index = good;
  bad_index.replace(bad_index.find("[[") + 2, 1, "7");
  refused(bad_index, "names node 7");
  refused(R"({"format":1,"replication":1,"nodes":[{"address":"x"}],"partitions":[]})", "id");
}

TEST(PlacementTest, NodeJsonRoundTripsAndRefusesAnEmptyId) {
  ClusterNode n{"n1", "10.0.0.1:7700", "r1"};
  EXPECT_EQ(*NodeFromJson(NodeToJson(n)), n);
  EXPECT_FALSE(NodeFromJson(R"({"id":"","address":"x"})").ok());
  EXPECT_FALSE(NodeFromJson("nope").ok());
}

TEST(PlacementTest, WeightsAreFixed) {
  // The placement is part of what every node must agree on: a change to the
  // weight function moves partitions. These values pin it.
  EXPECT_EQ(RendezvousWeight(0, "node-0"), 8725054673556868023ULL);
  EXPECT_EQ(RendezvousWeight(1, "node-0"), 10826176509068000594ULL);
  EXPECT_EQ(RendezvousWeight(4095, "n1"), 3854577071502163621ULL);
}

// The ready sets NextMap reads: every incoming replica of `m`, ready.
std::map<std::string, std::set<uint16_t>> AllReady(const ClusterMap& m) {
  std::map<std::string, std::set<uint16_t>> ready;
  for (const IncomingReplica& in : m.incoming) ready[m.nodes[in.node].id].insert(in.partition);
  return ready;
}

std::set<std::string> HoldersOf(const ClusterMap& m, uint32_t p) {
  std::set<std::string> ids;
  for (uint16_t i : m.ReplicasOf(p)) ids.insert(m.nodes[i].id);
  return ids;
}

TEST(NextMapTest, UnchangedMembersChangeNothing) {
  ClusterMap m = *Place(Nodes(3), 2);
  Result<ClusterMap> next = NextMap(m, Nodes(3), {});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(SamePlacement(*next, m));
}

TEST(NextMapTest, ANewNodeGetsItsShareAsIncomingThenAsReplicaOnceReady) {
  ClusterMap m = *Place(Nodes(3), 2);
  ClusterMap target = *Place(Nodes(4), 2);
  ClusterMap moving = *NextMap(m, Nodes(4), {});
  ASSERT_TRUE(moving.Check().ok());
  // Nothing moved yet: the replicas are the old ones, the new node is incoming.
  for (uint32_t p = 0; p < kPartitions; ++p) EXPECT_EQ(HoldersOf(moving, p), HoldersOf(m, p));
  ASSERT_FALSE(moving.incoming.empty());
  for (const IncomingReplica& in : moving.incoming) {
    EXPECT_EQ(moving.nodes[in.node].id, "node-3");
    EXPECT_EQ(HoldersOf(target, in.partition).count("node-3"), 1u);
  }
  // About a quarter of the replicas move (4096 * 2 / 4), and no more.
  EXPECT_NEAR(static_cast<double>(moving.incoming.size()), 2048, 2048 * 0.15);
  // Asked again without readiness: the same map.
  EXPECT_TRUE(SamePlacement(*NextMap(moving, Nodes(4), {}), moving));
  // Half ready: those partitions switch, the others wait.
  std::map<std::string, std::set<uint16_t>> half;
  for (size_t i = 0; i < moving.incoming.size(); i += 2) {
    half["node-3"].insert(moving.incoming[i].partition);
  }
  ClusterMap partial = *NextMap(moving, Nodes(4), half);
  EXPECT_EQ(partial.incoming.size(), moving.incoming.size() - half["node-3"].size());
  ClusterMap done = *NextMap(partial, Nodes(4), AllReady(partial));
  EXPECT_TRUE(done.incoming.empty());
  for (uint32_t p = 0; p < kPartitions; ++p) EXPECT_EQ(HoldersOf(done, p), HoldersOf(target, p));
}

TEST(NextMapTest, AGoneNodesPartitionsMoveToTheOthersAndItLeavesTheMap) {
  ClusterMap m = *Place(Nodes(4), 2);
  std::vector<ClusterNode> three = Nodes(3);  // node-3 is gone
  ClusterMap moving = *NextMap(m, three, {});
  for (const IncomingReplica& in : moving.incoming) {
    EXPECT_EQ(HoldersOf(moving, in.partition).count("node-3"), 1u)
        << "only partitions node-3 held move";
  }
  ClusterMap done = *NextMap(moving, three, AllReady(moving));
  EXPECT_TRUE(done.incoming.empty());
  EXPECT_EQ(done.nodes.size(), 3u) << "node-3 holds nothing and leaves the map";
  EXPECT_EQ(done.replicas, Place(three, 2)->replicas);
}

TEST(NextMapTest, ANodeBackBeforeItsPartitionsMovedCancelsTheMoves) {
  ClusterMap m = *Place(Nodes(4), 2);
  ClusterMap moving = *NextMap(m, Nodes(3), {});
  ASSERT_FALSE(moving.incoming.empty());
  ClusterMap back = *NextMap(moving, Nodes(4), {});
  EXPECT_TRUE(back.incoming.empty());
  for (uint32_t p = 0; p < kPartitions; ++p) EXPECT_EQ(HoldersOf(back, p), HoldersOf(m, p));
}

TEST(NextMapTest, MovesKeepRacksApart) {
  ClusterMap m = *Place(Nodes(4, /*racks=*/2), 2);
  std::vector<ClusterNode> six = Nodes(6, /*racks=*/2);
  ClusterMap moving = *NextMap(m, six, {});
  ClusterMap done = *NextMap(moving, six, AllReady(moving));
  for (uint32_t p = 0; p < kPartitions; ++p) {
    std::span<const uint16_t> r = done.ReplicasOf(p);
    EXPECT_NE(done.nodes[r[0]].rack, done.nodes[r[1]].rack) << "partition " << p;
  }
}

TEST(NextMapTest, TooFewMembersIsRefusedAndTheMapStays) {
  ClusterMap m = *Place(Nodes(2), 2);
  Result<ClusterMap> next = NextMap(m, Nodes(1), {});
  EXPECT_EQ(next.status().code(), Status::Code::kInvalidArgument);
}

TEST(NextMapTest, IncomingRoundTripsThroughJsonAndRegistrationsCarryReady) {
  ClusterMap moving = *NextMap(*Place(Nodes(3), 2), Nodes(4), {});
  Result<ClusterMap> back = MapFromJson(MapToJson(moving));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SamePlacement(*back, moving));
  Registration r{Nodes(1)[0], {3, 17, 4095}, 42};
  Result<Registration> again = RegistrationFromJson(RegistrationToJson(r));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->node, r.node);
  EXPECT_EQ(again->ready, r.ready);
  EXPECT_EQ(again->ready_revision, 42u);
  EXPECT_FALSE(
      RegistrationFromJson(R"({"id":"a","address":"x:1","ready":[4096],"ready_revision":1})").ok());
  EXPECT_FALSE(RegistrationFromJson(R"({"id":"a","address":"x:1","ready":[1]})").ok())
      << "ready without the revision it is for";
  // An incoming replica on a node that already holds the partition is refused.
  ClusterMap bad = moving;
  bad.incoming = {IncomingReplica{0, bad.ReplicasOf(0)[0]}};
  EXPECT_FALSE(MapFromJson(MapToJson(bad)).ok());
}

}  // namespace
}  // namespace segstore::cluster
