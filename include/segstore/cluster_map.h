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
  // "host:port" of its RESP port (proto/RESP.md); empty when it has none.
  std::string resp = {};
  // What its build can do that older builds cannot, as it registered
  // ("links": profile bridging's log entries): a feature is used in the
  // cluster only once every node of the map has it.
  std::vector<std::string> features = {};
  bool operator==(const ClusterNode&) const = default;
};

// A replica being added to a partition (a move in progress): `node` copies
// the partition from a node holding it, then follows the log; it joins
// ReplicasOf(partition) once it has caught up. It serves nothing of the
// partition meanwhile: clients never route to it.
struct IncomingReplica {
  uint16_t partition = 0;
  uint16_t node = 0;  // index into ClusterMap::nodes
  auto operator<=>(const IncomingReplica&) const = default;
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
  // Moves in progress, sorted by (partition, node); each node not already a
  // replica of its partition.
  std::vector<IncomingReplica> incoming;
  std::string self;  // the ID of the node that answered ("" outside a cluster)
  // The cluster writes through a log: each write_id is applied at most once,
  // so a write whose answer was lost may be sent again with the same one
  // (proto/PROTOCOL.md, "Writes in a cluster"). Said by the node that answered.
  bool log = false;
  // The cluster is passive (a second datacenter): it applies another
  // cluster's log and answers every write ReadOnly. Said by the node that
  // answered; only with `log`.
  bool passive = false;

  bool has_map() const { return cluster && revision != 0; }
  std::span<const uint16_t> ReplicasOf(uint32_t partition) const {
    return {replicas.data() + size_t{partition} * replication, replication};
  }
  // OK when the fields agree: every partition has `replication` distinct
  // replicas among the nodes, node IDs are unique and non-empty, and
  // `incoming` is sorted, without repeats, of nodes that are not replicas
  // of their partition yet.
  Status Check() const;
  bool operator==(const ClusterMap&) const = default;
};

}  // namespace segstore
