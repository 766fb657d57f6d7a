// ClusterView: what a node knows of the cluster at one moment, as the request
// path reads it: the partition map, the partitions this node holds in it, and
// whether it may serve them. ViewBoard is where the agent (agent.h) publishes
// each new view and every event loop thread picks it up.
//
// Thread-safety: a published view is immutable. ViewBoard's methods may be
// called from any thread; a reader checks generation() (one atomic load) and
// calls view() only when it changed.
#pragma once

#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <mutex>

#include "segstore/cluster_map.h"

namespace segstore::cluster {

struct ClusterView {
  ClusterMap map;  // cluster true; revision 0 until the controller wrote the first map
  std::bitset<kPartitions> held;  // partitions `map` gives this node
  // Registered under a lease etcd has not reported expired. False: this node
  // serves no partition (it is joining, or its lease expired and it is
  // registering again).
  bool serving = false;

  bool Serves(uint32_t partition) const { return serving && held.test(partition); }
};

class ViewBoard {
 public:
  ViewBoard();
  // Makes `view` the current one and bumps the generation.
  void Publish(std::shared_ptr<const ClusterView> view);
  std::shared_ptr<const ClusterView> view() const;
  // Changes with every Publish. Read it before view(): a reader that saw
  // generation g and then read the view has a view at least as new as g's.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ClusterView> view_;
  std::atomic<uint64_t> generation_{1};
};

}  // namespace segstore::cluster
