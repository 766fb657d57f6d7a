#include "segstore/cluster_map.h"

#include <algorithm>
#include <set>

namespace segstore {

Status ClusterMap::Check() const {
  if (!cluster) {
    if (revision != 0 || replication != 0 || !nodes.empty() || !replicas.empty() ||
        !incoming.empty()) {
      return Status::InvalidArgument("cluster map: a single server's map carries no placement");
    }
    return Status::OK();
  }
  if (revision == 0) {
    if (!nodes.empty() || !replicas.empty() || !incoming.empty()) {
      return Status::InvalidArgument("cluster map: revision 0 with a placement");
    }
    return Status::OK();
  }
  if (replication == 0) return Status::InvalidArgument("cluster map: replication 0");
  if (nodes.size() < replication) {
    return Status::InvalidArgument("cluster map: " + std::to_string(nodes.size()) +
                                   " nodes for replication " + std::to_string(replication));
  }
  if (nodes.size() > 65535) return Status::InvalidArgument("cluster map: too many nodes");
  std::set<std::string> ids;
  for (const ClusterNode& n : nodes) {
    if (n.id.empty()) return Status::InvalidArgument("cluster map: a node without an ID");
    if (!ids.insert(n.id).second) {
      return Status::InvalidArgument("cluster map: node " + n.id + " twice");
    }
  }
  if (replicas.size() != size_t{kPartitions} * replication) {
    return Status::InvalidArgument("cluster map: " + std::to_string(replicas.size()) +
                                   " replica entries, not 4096 x " + std::to_string(replication));
  }
  for (uint32_t p = 0; p < kPartitions; ++p) {
    std::span<const uint16_t> r = ReplicasOf(p);
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i] >= nodes.size()) {
        return Status::InvalidArgument("cluster map: partition " + std::to_string(p) +
                                       " names node " + std::to_string(r[i]) + " of " +
                                       std::to_string(nodes.size()));
      }
      for (size_t k = 0; k < i; ++k) {
        if (r[k] == r[i]) {
          return Status::InvalidArgument("cluster map: partition " + std::to_string(p) +
                                         " has node " + nodes[r[i]].id + " twice");
        }
      }
    }
  }
  for (size_t i = 0; i < incoming.size(); ++i) {
    const IncomingReplica& in = incoming[i];
    const std::string where = "cluster map: incoming replica " + std::to_string(i);
    if (in.partition >= kPartitions) {
      return Status::InvalidArgument(where + ": partition " + std::to_string(in.partition));
    }
    if (in.node >= nodes.size()) {
      return Status::InvalidArgument(where + ": node " + std::to_string(in.node) + " of " +
                                     std::to_string(nodes.size()));
    }
    if (i > 0 && !(incoming[i - 1] < in)) {
      return Status::InvalidArgument(where + ": not sorted by (partition, node), or repeated");
    }
    std::span<const uint16_t> r = ReplicasOf(in.partition);
    if (std::find(r.begin(), r.end(), in.node) != r.end()) {
      return Status::InvalidArgument(where + ": node " + nodes[in.node].id +
                                     " already holds partition " +
                                     std::to_string(in.partition));
    }
  }
  return Status::OK();
}

}  // namespace segstore
