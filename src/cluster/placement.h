// Placement: which nodes hold each partition, and the map's form in etcd.
//
// Place() is rendezvous hashing (highest random weight): each (partition,
// node) pair gets a weight from a fixed hash of both, and a partition's
// replicas are its R heaviest nodes, taken from distinct racks first. It
// depends only on the set of nodes, so every controller computes the same
// map, and a node that joins or leaves moves only the partitions it gains or
// loses. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/cluster_map.h"
#include "segstore/result.h"

namespace segstore::cluster {

// The map of `nodes` (sorted by ID in the result) with `replication`
// replicas per partition. InvalidArgument when there are fewer nodes than
// replicas, or a node ID is empty or repeated.
Result<ClusterMap> Place(std::vector<ClusterNode> nodes, uint32_t replication);

// The weight of `node_id` for `partition` (exposed for tests).
uint64_t RendezvousWeight(uint32_t partition, std::string_view node_id);

// The map as JSON (what the controller stores in etcd; revision and self are
// not part of it), and back. FromJson checks the map (ClusterMap::Check) and
// gives InvalidArgument, naming what is wrong, for anything else.
std::string MapToJson(const ClusterMap& map);
Result<ClusterMap> MapFromJson(std::string_view json);

// A node's registration as JSON ({"id", "address", "rack", "ready",
// "ready_revision"}), and back. `ready`: the partitions the map of
// `ready_revision` has moving to this node (incoming) that it has copied and
// caught up with, so the controller may make it a replica of them while the
// map is still that one. NodeToJson/NodeFromJson: without them.
struct Registration {
  ClusterNode node;
  std::vector<uint16_t> ready;
  uint64_t ready_revision = 0;
};
std::string RegistrationToJson(const Registration& r);
Result<Registration> RegistrationFromJson(std::string_view json);
std::string NodeToJson(const ClusterNode& node);
Result<ClusterNode> NodeFromJson(std::string_view json);

// The controller's next step from `current` towards the placement of
// `members` (the nodes that should hold partitions: registered, or gone for
// less than the failure grace), as Place() computes it. For each partition
// whose replicas differ from the target's, the target's nodes that do not
// hold it yet become incoming replicas; once every one of them is `ready`
// (by node ID) for the partition, the partition's replicas become the
// target's (the nodes it leaves stop serving it). Nodes no replica or
// incoming replica names any more leave the map. The result's revision is
// the current one's; compare with SamePlacement to see if anything changed.
// InvalidArgument when `members` cannot hold the replication (fewer nodes).
Result<ClusterMap> NextMap(const ClusterMap& current, std::vector<ClusterNode> members,
                           const std::map<std::string, std::set<uint16_t>>& ready);
bool SamePlacement(const ClusterMap& a, const ClusterMap& b);

}  // namespace segstore::cluster
