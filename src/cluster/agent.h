// ClusterAgent: a node's link to the cluster's etcd. One thread that
//
// - registers the node under a lease (<prefix>/nodes/<id> = {id, address,
//   rack}) and keeps the lease alive (every TTL/3);
// - follows the partition map (<prefix>/map), polling it, and publishes on
//   its ViewBoard what the request path needs (view.h);
// - takes part in the controller election (<prefix>/controller, created under
//   the node's lease by whoever gets there first) and, while controller,
//   writes the map: the first one once `initial_nodes` nodes registered
//   (placement.h), and later the new address or rack of a node that
//   registered again with another. Every controller write is a transaction on
//   the controller key's creation and the map's revision, so a controller
//   that lost its lease can never overwrite a newer map.
//
// Membership changes (as controller): the members are the registered nodes
// and the map's nodes gone for less than `failure_grace`; when they differ
// from the map's, the controller moves partitions towards their placement
// (NextMap, placement.h): the nodes gaining a partition get it as incoming,
// copy it and report it ready in their registration (SetReady), and the
// controller then makes them its replicas. A node that is gone longer than
// the grace loses its partitions that way; a node that joins gains its share.
//
// When etcd says the lease expired, the node stops serving at once and
// registers again. When etcd cannot be reached, the node keeps serving on
// the map it has (the map cannot change without etcd either).
//
// Thread-safety: Start, Stop and the destructor from one thread; board() and
// stats() from any.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "cluster/view.h"
#include "segstore/cluster_map.h"
#include "segstore/result.h"

namespace segstore::cluster {

// The features this build registers with (ClusterNode::features): "links",
// profile bridging's log entries (link_step), and "fields", profile fields'
// log entries (field_set, field_del, field_incr, field_max), which a build
// without them could not apply. A feature is used only once every node of
// the map has it.
inline const std::vector<std::string> kNodeFeatures = {"links", "fields"};
// Whether every node of `map` registered with `feature`; the first that did
// not in *without.
bool EveryNodeHas(const ClusterMap& map, std::string_view feature, std::string* without);

struct AgentOptions {
  EtcdOptions etcd;
  std::string prefix = "/segstore";  // the cluster's keys in etcd; one prefix per cluster
  ClusterNode self;
  uint32_t replication = 1;
  uint32_t initial_nodes = 1;  // nodes the first map waits for
  std::chrono::seconds lease_ttl{10};
  std::chrono::milliseconds poll_interval{500};
  // A map node not registered for this long is no longer a member: its
  // partitions move to others (the copies they make restore the replication).
  std::chrono::milliseconds failure_grace{30000};
  // Partitions move between nodes (membership changes, above) only in a
  // cluster that writes through a log, which new replicas catch up from.
  // False: the map's nodes are fixed once written (only their addresses and
  // racks follow their registrations).
  bool moves = false;
};

struct AgentStats {
  bool registered = false;
  bool controller = false;
  uint64_t map_revision = 0;
  uint32_t partitions_held = 0;
  uint64_t etcd_errors = 0;            // calls that failed, since the start
  uint64_t lease_expirations = 0;      // times etcd reported the lease gone
  uint64_t maps_written = 0;           // by this node as controller
  uint64_t register_attempts = 0;      // tries to register, successful or not
  uint64_t control_passes = 0;         // membership checks made as controller
  double seconds_since_lease_ack = 0;  // since etcd last acknowledged the lease (-1: never)
};

class ClusterAgent {
 public:
  // Checks the options and starts the thread, which registers the node.
  // InvalidArgument for options that cannot work (no endpoint, an empty node
  // ID or address, replication 0, initial_nodes below replication, a TTL
  // under 2 s, a poll interval or an etcd timeout over a third of the TTL:
  // the lease must be renewed in time even when etcd answers slowly).
  // The agent publishes on `board`, which must outlive it.
  static Result<std::unique_ptr<ClusterAgent>> Start(const AgentOptions& options, ViewBoard* board);
  // Stop().
  ~ClusterAgent();
  ClusterAgent(const ClusterAgent&) = delete;
  ClusterAgent& operator=(const ClusterAgent&) = delete;

  // Leaves: stops the thread and revokes the lease, so the registration (and
  // the controller key, if held) go at once. The map keeps the node. Idempotent.
  void Stop();

  AgentStats stats() const;

  // The incoming partitions this node has copied and caught up with, as of
  // the map of `revision` (the one the node last saw them incoming in): put
  // in its registration. The controller takes them only while that is still
  // the map's revision. Any thread; the agent updates etcd on its next step.
  void SetReady(std::vector<uint16_t> ready, uint64_t revision);

 private:
  ClusterAgent(const AgentOptions& options, std::unique_ptr<EtcdClient> etcd, ViewBoard* board);
  void Run();
  void Step();
  void Register();
  void KeepAlive();
  void PollMap();
  void Control();
  void Publish();
  void LostLease();
  // Puts the registration again if the ready partitions changed.
  void UpdateRegistration();
  // Renews the lease when it is due.
  void KeepLease();
  std::string Key(std::string_view name) const { return options_.prefix + "/" + std::string(name); }

  const AgentOptions options_;
  std::unique_ptr<EtcdClient> etcd_;
  ViewBoard* const board_;
  std::thread thread_;
  std::mutex mu_;  // guards stop_ for the condition variable
  std::condition_variable wake_;
  bool stop_ = false;

  // The agent thread's own state.
  int64_t lease_ = 0;
  std::chrono::steady_clock::time_point next_keepalive_{};
  std::chrono::steady_clock::time_point next_register_log_{};
  int64_t controller_revision_ = 0;  // the controller key's create revision while we hold it
  int64_t map_mod_revision_ = 0;
  bool map_unreadable_ = false;             // the map at map_mod_revision_ could not be read
  ClusterMap map_;                          // cluster true, revision 0 before the first
  std::vector<uint16_t> registered_ready_;  // as in etcd now
  uint64_t registered_ready_revision_ = 0;
  // As controller: when each map node was first seen unregistered.
  std::map<std::string, std::chrono::steady_clock::time_point> missing_since_;

  std::mutex ready_mu_;
  std::vector<uint16_t> ready_;  // guarded by ready_mu_
  uint64_t ready_revision_ = 0;  // guarded by ready_mu_

  // For stats(), written by the agent thread.
  std::atomic<bool> registered_{false};
  std::atomic<bool> controller_{false};
  std::atomic<uint64_t> etcd_errors_{0};
  std::atomic<uint64_t> lease_expirations_{0};
  std::atomic<uint64_t> maps_written_{0};
  std::atomic<uint64_t> register_attempts_{0};
  std::atomic<uint64_t> control_passes_{0};
  std::atomic<int64_t> lease_ack_ns_{-1};  // steady clock, ns since epoch
};

}  // namespace segstore::cluster
