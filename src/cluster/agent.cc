#include "cluster/agent.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "cluster/placement.h"

namespace segstore::cluster {

using Clock = std::chrono::steady_clock;

namespace {
int64_t Nanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

Result<std::unique_ptr<ClusterAgent>> ClusterAgent::Start(const AgentOptions& options,
                                                          ViewBoard* board) {
  if (options.self.id.empty()) return Status::InvalidArgument("cluster: node_id is empty");
  if (options.self.id.find('/') != std::string::npos) {
    return Status::InvalidArgument("cluster: node_id " + options.self.id + " contains '/'");
  }
  if (options.self.address.empty()) {
    return Status::InvalidArgument("cluster: the node's advertised address is empty");
  }
  if (options.replication == 0) return Status::InvalidArgument("cluster: replication is 0");
  if (options.initial_nodes < options.replication) {
    return Status::InvalidArgument(
        "cluster: initial_nodes (" + std::to_string(options.initial_nodes) +
        ") is below replication (" + std::to_string(options.replication) + ")");
  }
  if (options.lease_ttl < std::chrono::seconds(2)) {
    return Status::InvalidArgument("cluster: lease_ttl_seconds must be at least 2");
  }
  if (options.poll_interval * 3 > options.lease_ttl ||
      options.etcd.timeout * 3 > options.lease_ttl) {
    return Status::InvalidArgument(
        "cluster: map_poll_ms and etcd_timeout_ms must each be at most a third of "
        "lease_ttl_seconds, so that the lease is renewed in time");
  }
  if (options.prefix.empty() || options.prefix.front() != '/' || options.prefix.back() == '/') {
    return Status::InvalidArgument("cluster: etcd_prefix " + options.prefix +
                                   " must start with '/' and not end with one");
  }
  Result<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create(options.etcd);
  if (!etcd.ok()) return etcd.status();
  std::unique_ptr<ClusterAgent> agent(new ClusterAgent(options, std::move(*etcd), board));
  board->set_lease_ttl(options.lease_ttl);
  agent->Publish();  // not serving yet, but cluster_map names this node
  agent->thread_ = std::thread([a = agent.get()] { a->Run(); });
  return agent;
}

bool EveryNodeHas(const ClusterMap& map, std::string_view feature, std::string* without) {
  for (const ClusterNode& n : map.nodes) {
    if (std::find(n.features.begin(), n.features.end(), feature) == n.features.end()) {
      if (without != nullptr) *without = n.id;
      return false;
    }
  }
  return true;
}

ClusterAgent::ClusterAgent(const AgentOptions& options, std::unique_ptr<EtcdClient> etcd,
                           ViewBoard* board)
    : options_(options), etcd_(std::move(etcd)), board_(board) {
  map_.cluster = true;
}

ClusterAgent::~ClusterAgent() { Stop(); }

void ClusterAgent::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lease_ != 0) {
    Status s = etcd_->Revoke(lease_);
    if (!s.ok()) spdlog::warn("cluster: leaving: revoking lease {:x}: {}", lease_, s.ToString());
    lease_ = 0;
    registered_ = false;
    controller_ = false;
    Publish();
  }
}

AgentStats ClusterAgent::stats() const {
  AgentStats s;
  s.registered = registered_.load();
  s.controller = controller_.load();
  std::shared_ptr<const ClusterView> v = board_->view();
  s.map_revision = v->map.revision;
  s.partitions_held = static_cast<uint32_t>(v->held.count());
  s.etcd_errors = etcd_errors_.load();
  s.lease_expirations = lease_expirations_.load();
  s.maps_written = maps_written_.load();
  s.register_attempts = register_attempts_.load();
  s.control_passes = control_passes_.load();
  const int64_t ack = lease_ack_ns_.load();
  s.seconds_since_lease_ack = ack < 0 ? -1 : (Nanos(Clock::now()) - ack) / 1e9;
  return s;
}

void ClusterAgent::Run() {
  for (;;) {
    try {
      Step();
    } catch (const std::exception& e) {
      // Nothing here should throw; if something does, the node goes on.
      ++etcd_errors_;
      spdlog::error("cluster: agent step failed: {}", e.what());
    }
    // Until the next poll, or the next keepalive if sooner.
    Clock::duration wait = options_.poll_interval;
    if (lease_ != 0) {
      wait = std::clamp<Clock::duration>(next_keepalive_ - Clock::now(), Clock::duration::zero(),
                                         wait);
    }
    std::unique_lock lock(mu_);
    if (wake_.wait_for(lock, wait, [this] { return stop_; })) return;
  }
}

// Between calls to etcd the lease is renewed when due: each call takes at
// most the etcd timeout (a third of the TTL at most), and no more than two
// go between two looks at the lease.
void ClusterAgent::Step() {
  if (lease_ == 0) Register();
  KeepLease();
  UpdateRegistration();
  KeepLease();
  PollMap();
  KeepLease();
  if (lease_ != 0) Control();
}

void ClusterAgent::KeepLease() {
  if (lease_ != 0 && Clock::now() >= next_keepalive_) KeepAlive();
}

void ClusterAgent::Register() {
  ++register_attempts_;
  Result<int64_t> lease = etcd_->Grant(options_.lease_ttl.count());
  if (!lease.ok()) {
    ++etcd_errors_;
    if (Clock::now() >= next_register_log_) {
      spdlog::warn("cluster: cannot register node {}: {}", options_.self.id,
                   lease.status().ToString());
      next_register_log_ = Clock::now() + std::chrono::seconds(5);
    }
    return;
  }
  const std::string key = Key("nodes/" + options_.self.id);
  Registration registration{options_.self, {}, 0};
  {
    std::lock_guard lock(ready_mu_);
    registration.ready = ready_;
    registration.ready_revision = ready_revision_;
  }
  Result<bool> put = etcd_->PutIf({Compare{key, Compare::Target::kCreate, 0}}, key,
                                  RegistrationToJson(registration), *lease);
  if (!put.ok() || !*put) {
    if (!put.ok()) ++etcd_errors_;
    (void)etcd_->Revoke(*lease);
    if (Clock::now() >= next_register_log_) {
      if (put.ok()) {
        spdlog::warn(
            "cluster: node ID {} is registered already (another process with this ID, or this "
            "node's previous run whose lease has not expired yet); waiting for it to go",
            options_.self.id);
      } else {
        spdlog::warn("cluster: cannot register node {}: {}", options_.self.id,
                     put.status().ToString());
      }
      next_register_log_ = Clock::now() + std::chrono::seconds(5);
    }
    return;
  }
  lease_ = *lease;
  registered_ready_ = std::move(registration.ready);
  registered_ready_revision_ = registration.ready_revision;
  lease_ack_ns_ = Nanos(Clock::now());
  board_->set_lease_ack(lease_ack_ns_.load());
  next_keepalive_ = Clock::now() + options_.lease_ttl / 3;
  registered_ = true;
  spdlog::info("cluster: node {} registered at {} (rack '{}'), lease {:x} of {} s",
               options_.self.id, options_.self.address, options_.self.rack, lease_,
               options_.lease_ttl.count());
  Publish();
}

void ClusterAgent::SetReady(std::vector<uint16_t> ready, uint64_t revision) {
  std::sort(ready.begin(), ready.end());
  {
    std::lock_guard lock(ready_mu_);
    if (ready == ready_ && revision == ready_revision_) return;
    ready_ = std::move(ready);
    ready_revision_ = revision;
  }
  wake_.notify_all();
}

void ClusterAgent::UpdateRegistration() {
  if (lease_ == 0) return;
  Registration registration{options_.self, {}, 0};
  {
    std::lock_guard lock(ready_mu_);
    if (ready_ == registered_ready_ && ready_revision_ == registered_ready_revision_) return;
    registration.ready = ready_;
    registration.ready_revision = ready_revision_;
  }
  const std::string key = Key("nodes/" + options_.self.id);
  // Only over our own registration (its lease): never recreate it after the
  // lease went.
  Result<bool> put = etcd_->PutIf({Compare{key, Compare::Target::kLease, lease_}}, key,
                                  RegistrationToJson(registration), lease_);
  if (!put.ok()) {
    ++etcd_errors_;
    return;
  }
  if (*put) {
    registered_ready_ = std::move(registration.ready);
    registered_ready_revision_ = registration.ready_revision;
  }
}

void ClusterAgent::KeepAlive() {
  Result<int64_t> ttl = etcd_->KeepAlive(lease_);
  if (ttl.ok()) {
    lease_ack_ns_ = Nanos(Clock::now());
    board_->set_lease_ack(lease_ack_ns_.load());
    next_keepalive_ = Clock::now() + options_.lease_ttl / 3;
    return;
  }
  if (ttl.status().IsNotFound()) {
    LostLease();
    return;
  }
  ++etcd_errors_;
  // Unreachable: keep serving on the map we have, and try again soon.
  next_keepalive_ =
      Clock::now() + std::min<Clock::duration>(options_.lease_ttl / 6, std::chrono::seconds(1));
  spdlog::warn("cluster: keeping lease {:x} alive: {}", lease_, ttl.status().ToString());
}

void ClusterAgent::LostLease() {
  spdlog::error(
      "cluster: etcd reports lease {:x} of node {} expired: no longer serving; "
      "registering again",
      lease_, options_.self.id);
  ++lease_expirations_;
  lease_ = 0;
  registered_ = false;
  controller_ = false;
  controller_revision_ = 0;
  Publish();
  Register();
}

void ClusterAgent::PollMap() {
  Result<RangeResult> r = etcd_->Range(Key("map"), false, map_mod_revision_ + 1);
  if (!r.ok()) {
    ++etcd_errors_;
    return;
  }
  if (r->kvs.empty()) return;
  const KeyValue& kv = r->kvs.front();
  Result<ClusterMap> map = MapFromJson(kv.value);
  if (!map.ok()) {
    ++etcd_errors_;
    spdlog::error("cluster: the partition map at revision {} cannot be read: {}", kv.mod_revision,
                  map.status().ToString());
    map_mod_revision_ = kv.mod_revision;  // not again until it changes
    map_unreadable_ = true;               // and no map written over it
    return;
  }
  map->revision = static_cast<uint64_t>(kv.mod_revision);
  map_mod_revision_ = kv.mod_revision;
  map_unreadable_ = false;
  map_ = std::move(*map);
  spdlog::info("cluster: partition map revision {}: {} nodes, replication {}", map_.revision,
               map_.nodes.size(), map_.replication);
  Publish();
}

void ClusterAgent::Publish() {
  auto v = std::make_shared<ClusterView>();
  v->map = map_;
  v->map.self = options_.self.id;
  v->serving = lease_ != 0;
  if (map_.has_map()) {
    auto self = std::find_if(map_.nodes.begin(), map_.nodes.end(),
                             [&](const ClusterNode& n) { return n.id == options_.self.id; });
    if (self != map_.nodes.end()) {
      const auto index = static_cast<uint16_t>(self - map_.nodes.begin());
      for (uint32_t p = 0; p < kPartitions; ++p) {
        std::span<const uint16_t> r = map_.ReplicasOf(p);
        if (std::find(r.begin(), r.end(), index) != r.end()) v->held.set(p);
      }
      for (const IncomingReplica& in : map_.incoming) {
        if (in.node == index) v->incoming.set(in.partition);
      }
    }
  }
  board_->Publish(std::move(v));
}

void ClusterAgent::Control() {
  const std::string controller_key = Key("controller");
  if (controller_revision_ == 0) {
    Result<bool> won = etcd_->PutIf({Compare{controller_key, Compare::Target::kCreate, 0}},
                                    controller_key, options_.self.id, lease_);
    if (!won.ok()) {
      ++etcd_errors_;
      return;
    }
    // Not won: another node holds the key, or we do (a claim whose answer
    // was lost); the read below tells.
  }
  // Who holds the key, at which creation: our claim is good only while the
  // key we created (under our lease) is still there.
  Result<RangeResult> held = etcd_->Range(controller_key);
  if (!held.ok()) {
    ++etcd_errors_;
    return;
  }
  if (held->kvs.empty() || held->kvs.front().lease != lease_) {
    if (controller_revision_ != 0) spdlog::warn("cluster: no longer the controller");
    controller_revision_ = 0;
    controller_ = false;
    missing_since_.clear();
    return;
  }
  if (controller_revision_ == 0) {
    controller_revision_ = held->kvs.front().create_revision;
    controller_ = true;
    spdlog::info("cluster: node {} is the controller", options_.self.id);
  }

  ++control_passes_;
  if (map_unreadable_) return;  // never write over a map this node could not read
  KeepLease();
  if (lease_ == 0 || controller_revision_ == 0) return;  // the lease went meanwhile
  Result<RangeResult> registered = etcd_->Range(Key("nodes/"), true);
  if (!registered.ok()) {
    ++etcd_errors_;
    return;
  }
  std::map<std::string, ClusterNode> live;
  std::map<std::string, std::set<uint16_t>> ready;
  for (const KeyValue& kv : registered->kvs) {
    Result<Registration> n = RegistrationFromJson(kv.value);
    if (!n.ok()) {
      spdlog::warn("cluster: ignoring registration {}: {}", kv.key, n.status().ToString());
      continue;
    }
    // Readiness counts only for the map the node saw it under: reported for
    // an older map, a partition may have left the node and come back since.
    if (n->ready_revision == map_.revision) {
      ready[n->node.id].insert(n->ready.begin(), n->ready.end());
    }
    live[n->node.id] = n->node;
  }

  const std::string map_key = Key("map");
  const Compare still_controller{controller_key, Compare::Target::kCreate, controller_revision_};
  ClusterMap next;
  std::vector<Compare> guard = {still_controller};
  if (!map_.has_map()) {
    if (live.size() < options_.initial_nodes) return;
    std::vector<ClusterNode> nodes;
    for (const auto& [id, n] : live) nodes.push_back(n);
    Result<ClusterMap> placed = Place(std::move(nodes), options_.replication);
    if (!placed.ok()) {
      spdlog::error("cluster: placing partitions: {}", placed.status().ToString());
      return;
    }
    next = std::move(*placed);
    guard.push_back(Compare{map_key, Compare::Target::kCreate, 0});
  } else if (!options_.moves) {
    // Without a log there is nothing to copy a partition from: the map's
    // nodes stay; only a registered node's new address, rack or RESP
    // address changes it.
    next = map_;
    bool changed = false;
    for (ClusterNode& n : next.nodes) {
      auto it = live.find(n.id);
      if (it != live.end() && it->second != n) {
        spdlog::info("cluster: node {} now at {} (rack '{}', RESP '{}', features '{}')", n.id,
                     it->second.address, it->second.rack, it->second.resp,
                     fmt::join(it->second.features, ","));
        n = it->second;
        changed = true;
      }
    }
    if (!changed) return;
    guard.push_back(Compare{map_key, Compare::Target::kMod, map_mod_revision_});
  } else {
    // Members: the registered nodes, and the map's nodes gone for less than
    // the grace.
    const auto now = Clock::now();
    std::map<std::string, ClusterNode> members = live;
    for (const ClusterNode& n : map_.nodes) {
      if (live.count(n.id) != 0) {
        missing_since_.erase(n.id);
        continue;
      }
      auto [since, first] = missing_since_.emplace(n.id, now);
      if (first) {
        spdlog::warn("cluster: node {} is not registered; its partitions move after {} ms", n.id,
                     options_.failure_grace.count());
      }
      if (now - since->second < options_.failure_grace) members.emplace(n.id, n);
    }
    for (auto it = missing_since_.begin(); it != missing_since_.end();) {
      const bool in_map = std::any_of(map_.nodes.begin(), map_.nodes.end(),
                                      [&](const ClusterNode& n) { return n.id == it->first; });
      it = in_map ? std::next(it) : missing_since_.erase(it);
    }
    std::vector<ClusterNode> member_list;
    for (const auto& [id, n] : members) member_list.push_back(n);
    Result<ClusterMap> moved = NextMap(map_, std::move(member_list), ready);
    if (!moved.ok()) {
      // Fewer members than replicas: the map stays as it is.
      if (Clock::now() >= next_register_log_) {
        spdlog::warn("cluster: not moving partitions: {}", moved.status().ToString());
        next_register_log_ = Clock::now() + std::chrono::seconds(5);
      }
      return;
    }
    if (SamePlacement(*moved, map_)) return;
    next = std::move(*moved);
    guard.push_back(Compare{map_key, Compare::Target::kMod, map_mod_revision_});
  }
  KeepLease();
  if (lease_ == 0 || controller_revision_ == 0) return;
  Result<bool> wrote = etcd_->PutIf(guard, map_key, MapToJson(next));
  if (!wrote.ok()) {
    ++etcd_errors_;
    return;
  }
  if (*wrote) {
    ++maps_written_;
    spdlog::info("cluster: wrote the partition map: {} nodes, replication {}, {} moves in progress",
                 next.nodes.size(), next.replication, next.incoming.size());
    PollMap();
  }
}

}  // namespace segstore::cluster
