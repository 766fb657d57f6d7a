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

// A node's registration as JSON ({"id", "address", "rack"}), and back.
std::string NodeToJson(const ClusterNode& node);
Result<ClusterNode> NodeFromJson(std::string_view json);

}  // namespace segstore::cluster
