// ClusterMap: which servers hold which of the 4,096 partitions
// (segstore/routing.h), as every server of a cluster answers the cluster_map
// operation (proto/PROTOCOL.md, "cluster_map"). A client routes a user to the
// replicas of PartitionOf(user). A plain value; thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "segstore/routing.h"
#include "segstore/status.h"

namespace segstore {

struct ClusterNode {
  std::string id;       // unique in the cluster, stable across restarts
  std::string address;  // "host:port" of its client port
  std::string rack;     // failure domain; empty when not labelled
  bool operator==(const ClusterNode&) const = default;
};

struct ClusterMap {
  // False: a single server, not in a cluster, holding every partition (and
  // the other fields are empty).
  bool cluster = false;
  // The map's revision: grows with every change. 0 while a cluster has no map
  // yet (it is forming): retry later.
  uint64_t revision = 0;
  uint32_t replication = 0;  // replicas of each partition
  std::vector<ClusterNode> nodes;
  // Partition-major: the replicas of partition p are the node indices
  // replicas[p * replication] to replicas[p * replication + replication - 1].
  std::vector<uint16_t> replicas;
  std::string self;  // the ID of the node that answered ("" outside a cluster)
  // The cluster writes through a log: each write_id is applied at most once,
  // so a write whose answer was lost may be sent again with the same one
  // (proto/PROTOCOL.md, "Writes in a cluster"). Said by the node that answered.
  bool log = false;

  bool has_map() const { return cluster && revision != 0; }
  std::span<const uint16_t> ReplicasOf(uint32_t partition) const {
    return {replicas.data() + size_t{partition} * replication, replication};
  }
  // OK when the fields agree: every partition has `replication` distinct
  // replicas among the nodes, node IDs are unique and non-empty.
  Status Check() const;
  bool operator==(const ClusterMap&) const = default;
};

}  // namespace segstore
