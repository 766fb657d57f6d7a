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
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "segstore/cluster_map.h"

namespace segstore::cluster {

struct ClusterView {
  ClusterMap map;  // cluster true; revision 0 until the controller wrote the first map
  std::bitset<kPartitions> held;  // partitions `map` gives this node
  // Partitions `map` is moving to this node (ClusterMap::incoming): it copies
  // them and follows the log for them, and serves none of them yet.
  std::bitset<kPartitions> incoming;
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

  // When etcd last acknowledged this node's lease (steady clock, ns since
  // its epoch; -1 never: not late), and the lease's TTL: the agent sets them. A node
  // whose lease was not acknowledged within the TTL may have lost its
  // partitions without knowing yet (a pause, a partition from etcd): its
  // reads say stale. Any thread; the request path reads one atomic and the
  // clock.
  void set_lease_ack(int64_t steady_ns) {
    lease_ack_ns_.store(steady_ns, std::memory_order_release);
  }
  void set_lease_ttl(std::chrono::nanoseconds ttl) { lease_ttl_ns_.store(ttl.count()); }
  bool LeaseLate() const {
    const int64_t ack = lease_ack_ns_.load(std::memory_order_acquire);
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    // Never acknowledged: no agent publishes here (a node serves only once
    // registered, which sets it).
    return ack >= 0 && now - ack > lease_ttl_ns_.load(std::memory_order_relaxed);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ClusterView> view_;
  std::atomic<uint64_t> generation_{1};
  std::atomic<int64_t> lease_ack_ns_{-1};
  std::atomic<int64_t> lease_ttl_ns_{10'000'000'000};
};

}  // namespace segstore::cluster
