#include "cluster/placement.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace segstore::cluster {

using Json = nlohmann::json;

namespace {

// SplitMix64's finaliser: a fixed, well-mixed 64-bit permutation.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// FNV-1a 64 of the node ID.
uint64_t HashId(std::string_view id) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : id) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

}  // namespace

uint64_t RendezvousWeight(uint32_t partition, std::string_view node_id) {
  return Mix(HashId(node_id) ^ Mix(partition));
}

Result<ClusterMap> Place(std::vector<ClusterNode> nodes, uint32_t replication) {
  if (replication == 0) return Status::InvalidArgument("placement: replication 0");
  if (nodes.size() < replication) {
    return Status::InvalidArgument("placement: " + std::to_string(nodes.size()) +
                                   " nodes cannot hold " + std::to_string(replication) +
                                   " replicas of each partition");
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const ClusterNode& a, const ClusterNode& b) { return a.id < b.id; });
  ClusterMap map;
  map.cluster = true;
  map.revision = 1;  // a placement; etcd's revision replaces it when stored
  map.replication = replication;
  map.nodes = std::move(nodes);
  if (map.nodes.size() > 65535) return Status::InvalidArgument("placement: too many nodes");
  std::vector<uint64_t> id_hash(map.nodes.size());
  for (size_t i = 0; i < map.nodes.size(); ++i) id_hash[i] = HashId(map.nodes[i].id);
  map.replicas.resize(size_t{kPartitions} * replication);
  std::vector<std::pair<uint64_t, uint16_t>> order(map.nodes.size());
  std::vector<uint16_t> chosen;
  std::set<std::string_view> racks;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const uint64_t salt = Mix(p);
    for (size_t i = 0; i < map.nodes.size(); ++i) {
      order[i] = {Mix(id_hash[i] ^ salt), static_cast<uint16_t>(i)};
    }
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    chosen.clear();
    racks.clear();
    // Heaviest first, one per rack; then the heaviest left, whatever their rack.
    for (const auto& [weight, i] : order) {
      if (chosen.size() == replication) break;
      if (racks.insert(map.nodes[i].rack).second) chosen.push_back(i);
    }
    for (const auto& [weight, i] : order) {
      if (chosen.size() == replication) break;
      if (std::find(chosen.begin(), chosen.end(), i) == chosen.end()) chosen.push_back(i);
    }
    std::copy(chosen.begin(), chosen.end(), map.replicas.begin() + size_t{p} * replication);
  }
  SEGSTORE_RETURN_IF_ERROR(map.Check());
  return map;
}

std::string MapToJson(const ClusterMap& map) {
  Json j;
  j["format"] = 1;
  j["replication"] = map.replication;
  j["nodes"] = Json::array();
  for (const ClusterNode& n : map.nodes) {
    Json node{{"id", n.id}, {"address", n.address}, {"rack", n.rack}};
    if (!n.resp.empty()) node["resp"] = n.resp;
    if (!n.features.empty()) node["features"] = n.features;
    j["nodes"].push_back(std::move(node));
  }
  Json parts = Json::array();
  for (uint32_t p = 0; p < kPartitions && map.replication > 0; ++p) {
    std::span<const uint16_t> r = map.ReplicasOf(p);
    parts.push_back(Json(std::vector<uint16_t>(r.begin(), r.end())));
  }
  j["partitions"] = std::move(parts);
  if (!map.incoming.empty()) {
    Json incoming = Json::array();
    for (const IncomingReplica& in : map.incoming) incoming.push_back(Json{in.partition, in.node});
    j["incoming"] = std::move(incoming);
  }
  return j.dump();
}

namespace {
// An unsigned integer of the map, in [0, max]; JSON's other numbers (negative,
// fractional, too large) are refused rather than wrapped.
uint64_t Unsigned(const Json& j, uint64_t max, const char* what) {
  if (!j.is_number_unsigned() || j.get<uint64_t>() > max) {
    throw std::out_of_range(std::string(what) + " " + j.dump() + " is not an integer in [0, " +
                            std::to_string(max) + "]");
  }
  return j.get<uint64_t>();
}
}  // namespace

Result<ClusterMap> MapFromJson(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument("cluster map: not a JSON object");
  }
  ClusterMap map;
  map.cluster = true;
  map.revision = 1;
  try {
    if (!j.at("format").is_number_integer() || j.at("format").get<int64_t>() != 1) {
      return Status::InvalidArgument("cluster map: format " + j.at("format").dump() +
                                     " is not one this build reads (1)");
    }
    map.replication = static_cast<uint32_t>(Unsigned(j.at("replication"), 65535, "replication"));
    for (const Json& n : j.at("nodes")) {
      map.nodes.push_back(
          ClusterNode{n.at("id").get<std::string>(), n.at("address").get<std::string>(),
                      n.value("rack", std::string()), n.value("resp", std::string()),
                      n.value("features", std::vector<std::string>())});
    }
    const Json& parts = j.at("partitions");
    if (!parts.is_array() || parts.size() != kPartitions) {
      return Status::InvalidArgument("cluster map: partitions is not a list of 4096");
    }
    map.replicas.reserve(size_t{kPartitions} * map.replication);
    for (const Json& r : parts) {
      if (!r.is_array() || r.size() != map.replication) {
        return Status::InvalidArgument("cluster map: a partition without " +
                                       std::to_string(map.replication) + " replicas");
      }
      for (const Json& i : r) {
        map.replicas.push_back(static_cast<uint16_t>(Unsigned(i, 65535, "node index")));
      }
    }
    if (j.contains("incoming")) {
      for (const Json& in : j.at("incoming")) {
        if (!in.is_array() || in.size() != 2) {
          return Status::InvalidArgument(
              "cluster map: an incoming replica is not [partition, node]");
        }
        map.incoming.push_back(
            IncomingReplica{static_cast<uint16_t>(Unsigned(in[0], kPartitions - 1, "partition")),
                            static_cast<uint16_t>(Unsigned(in[1], 65535, "node index"))});
      }
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("cluster map: ") + e.what());
  }
  SEGSTORE_RETURN_IF_ERROR(map.Check());
  return map;
}

std::string NodeToJson(const ClusterNode& node) { return RegistrationToJson({node, {}, 0}); }

Result<ClusterNode> NodeFromJson(std::string_view json) {
  Result<Registration> r = RegistrationFromJson(json);
  if (!r.ok()) return r.status();
  return r->node;
}

std::string RegistrationToJson(const Registration& r) {
  Json j{{"id", r.node.id}, {"address", r.node.address}, {"rack", r.node.rack}};
  if (!r.node.resp.empty()) j["resp"] = r.node.resp;
  if (!r.node.features.empty()) j["features"] = r.node.features;
  if (!r.ready.empty()) {
    j["ready"] = r.ready;
    j["ready_revision"] = r.ready_revision;
  }
  return j.dump();
}

Result<Registration> RegistrationFromJson(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument("node registration: not a JSON object");
  }
  try {
    Registration r;
    r.node = ClusterNode{j.at("id").get<std::string>(), j.at("address").get<std::string>(),
                         j.value("rack", std::string()), j.value("resp", std::string()),
                         j.value("features", std::vector<std::string>())};
    if (r.node.id.empty()) return Status::InvalidArgument("node registration: empty id");
    if (j.contains("ready")) {
      for (const Json& p : j.at("ready")) {
        r.ready.push_back(static_cast<uint16_t>(Unsigned(p, kPartitions - 1, "ready partition")));
      }
      r.ready_revision = Unsigned(j.at("ready_revision"), UINT64_MAX, "ready_revision");
    }
    return r;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("node registration: ") + e.what());
  }
}

Result<ClusterMap> NextMap(const ClusterMap& current, std::vector<ClusterNode> members,
                           const std::map<std::string, std::set<uint16_t>>& ready) {
  if (!current.has_map()) return Status::InvalidArgument("next map: no current map");
  Result<ClusterMap> target = Place(std::move(members), current.replication);
  if (!target.ok()) return target.status();
  const uint32_t r = current.replication;
  // The next map's nodes: the target's members (their current address and
  // rack), then the current map's nodes still named by a replica.
  ClusterMap next;
  next.cluster = true;
  next.revision = current.revision;
  next.replication = r;
  next.nodes = target->nodes;
  std::map<std::string, uint16_t> index;
  for (size_t i = 0; i < next.nodes.size(); ++i) index[next.nodes[i].id] = static_cast<uint16_t>(i);
  const auto index_of = [&](const ClusterNode& n) {
    auto [it, added] = index.emplace(n.id, static_cast<uint16_t>(next.nodes.size()));
    if (added) next.nodes.push_back(n);
    return it->second;
  };
  next.replicas.resize(current.replicas.size());
  for (uint32_t p = 0; p < kPartitions; ++p) {
    std::span<const uint16_t> now = current.ReplicasOf(p);
    std::span<const uint16_t> want = target->ReplicasOf(p);
    std::vector<uint16_t> missing;  // target nodes not holding p yet
    bool all_ready = true;
    for (uint16_t t : want) {
      const std::string& id = target->nodes[t].id;
      const bool holds = std::any_of(now.begin(), now.end(),
                                     [&](uint16_t c) { return current.nodes[c].id == id; });
      if (holds) continue;
      missing.push_back(index.at(id));
      auto it = ready.find(id);
      all_ready = all_ready && it != ready.end() && it->second.count(static_cast<uint16_t>(p)) > 0;
    }
    uint16_t* out = next.replicas.data() + size_t{p} * r;
    if (missing.empty() || all_ready) {
      for (uint32_t k = 0; k < r; ++k) out[k] = index.at(target->nodes[want[k]].id);
    } else {
      for (uint32_t k = 0; k < r; ++k) out[k] = index_of(current.nodes[now[k]]);
      for (uint16_t m : missing)
        next.incoming.push_back(IncomingReplica{static_cast<uint16_t>(p), m});
    }
  }
  // Nodes named by nothing any more leave the map.
  std::vector<bool> named(next.nodes.size(), false);
  for (uint16_t i : next.replicas) named[i] = true;
  for (const IncomingReplica& in : next.incoming) named[in.node] = true;
  std::vector<uint16_t> renumber(next.nodes.size(), 0);
  std::vector<ClusterNode> kept;
  for (size_t i = 0; i < next.nodes.size(); ++i) {
    if (!named[i]) continue;
    renumber[i] = static_cast<uint16_t>(kept.size());
    kept.push_back(next.nodes[i]);
  }
  next.nodes = std::move(kept);
  for (uint16_t& i : next.replicas) i = renumber[i];
  for (IncomingReplica& in : next.incoming) in.node = renumber[in.node];
  std::sort(next.incoming.begin(), next.incoming.end());
  SEGSTORE_RETURN_IF_ERROR(next.Check());
  return next;
}

bool SamePlacement(const ClusterMap& a, const ClusterMap& b) {
  if (a.replication != b.replication || a.nodes != b.nodes || a.replicas != b.replicas ||
      a.incoming != b.incoming) {
    return false;
  }
  return true;
}

}  // namespace segstore::cluster
