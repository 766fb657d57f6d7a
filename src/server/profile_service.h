// ProfileService: the real Service behind segstored. Each event loop thread
// gets a handler wrapping that thread's ProfileSession (and so its storage
// worker); a handler decodes a request body (src/proto/wire.h), runs the
// profile operation, and encodes the answer or the error. I/O-free apart from
// what the profile layer does: sockets stay in the front end.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/agent.h"
#include "cluster/view.h"
#include "replica/replicator.h"
#include "segstore/messages.h"
#include "segstore/profile.h"
#include "segstore/storage.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/service.h"

namespace segstore::server {

class PeerLinks;

struct ProfileServiceOptions {
  std::string server_name = "segstored";  // with the version, in hello and stats
  uint32_t max_batch = proto::kDefaultMaxBatch;
  // Announced in hello (the front end enforces them).
  uint32_t max_frame_bytes = proto::kDefaultMaxFrameBytes;
  uint32_t max_in_flight = proto::kDefaultMaxInFlight;
  uint32_t max_segments = 10000;  // as the profile store was opened with
  uint32_t max_fields = 256;      // likewise
  uint32_t max_field_bytes = 1024;
  // Settings reported by the stats operation, as "config.<name>".
  std::vector<StatEntry> config;
  // In a cluster: where the node's view of it is published (it must outlive
  // the service). A user whose partition the view does not give this node
  // gets WrongNode; while the node serves nothing (joining, no map yet, its
  // lease lost) every user gets Busy. Null: a single server, holding all.
  const cluster::ViewBoard* cluster = nullptr;
  // In a cluster with a log: writes go through it (the node answers once it
  // applied them itself), and reads of partitions the replicator judges
  // possibly behind are marked stale. Null: writes are made here directly.
  replica::Replicator* replicator = nullptr;
  // In a cluster: how handlers reach the other nodes for profile bridging
  // (it must outlive the service). Null: links are refused (Unsupported).
  PeerLinks* peers = nullptr;
};

class ProfileService : public Service {
 public:
  // `store` and `profiles` must outlive the service and its handlers.
  ProfileService(storage::Store* store, profile::ProfileStore* profiles,
                 const ProfileServiceOptions& options);

  // Fills a fresh ServerCounters with the front end's counters (set once,
  // before the server starts).
  void set_server_counters(std::function<void(ServerCounters*)> counters) {
    server_counters_ = std::move(counters);
  }

  // In a cluster: the agent's figures, for the metrics. Set once, before the
  // server starts (the stats operation reads it from every loop thread).
  void set_cluster_stats(std::function<cluster::AgentStats()> stats) {
    cluster_stats_ = std::move(stats);
  }

  // In a cluster with a log: the bootstrapper's figures. Set once, before
  // the stats operation can be asked (any loop thread reads it).
  void set_bootstrap_stats(std::function<replica::BootstrapStats()> stats) {
    bootstrap_stats_ = std::move(stats);
  }

  Result<std::unique_ptr<Handler>> NewHandler(unsigned thread_index,
                                              std::shared_ptr<LoopPoster> poster) override;

  // Everything the server reports, gathered now.
  MetricsSnapshot Snapshot() const;
  // Every statistic, as the stats operation returns it.
  Stats CollectStats() const;
  // The same for Prometheus (the admin endpoint's /metrics).
  std::string PrometheusText() const;

 private:
  friend class ProfileHandler;
  storage::Store* store_;
  profile::ProfileStore* profiles_;
  ProfileServiceOptions options_;
  std::function<void(ServerCounters*)> server_counters_;
  std::function<cluster::AgentStats()> cluster_stats_;
  std::function<replica::BootstrapStats()> bootstrap_stats_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace segstore::server
