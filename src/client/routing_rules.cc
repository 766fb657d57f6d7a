#include "client/routing_rules.h"

#include <algorithm>
#include <random>

#include "segstore/routing.h"

namespace segstore::client::internal {

bool Retryable(const ClusterMap& map, const Status& s, Kind kind) {
  if (!map.cluster) return false;
  if (IsWrongNode(s) || IsBusy(s)) return true;
  // By whether the request carried a write ID, not by the map: a map that
  // changed since (a log turned on) says nothing of this request.
  if (IsLost(s)) return kind != Kind::kWrite;
  if (s.code() == Status::Code::kLogUnavailable) return IsWrite(kind);
  if (s.code() == Status::Code::kInDoubt) return kind == Kind::kNamedWrite;
  return false;
}

Status GaveUp(const Status& s, bool unknown, int attempts) {
  if (unknown) {
    return Status::InDoubt("the write's outcome is unknown after " + std::to_string(attempts) +
                           " attempts (last: " + s.ToString() + ")");
  }
  return s;
}

const std::string& AddressOf(const ClusterMap& map, const std::string& seed, std::string_view user,
                             int attempt) {
  if (!map.has_map()) return seed;
  std::span<const uint16_t> replicas = map.ReplicasOf(PartitionOf(user));
  return map.nodes[replicas[static_cast<size_t>(attempt) % replicas.size()]].address;
}

std::chrono::milliseconds RetryPause(std::chrono::milliseconds base, int attempt) {
  return base * (1 << std::min(attempt, 6));
}

Status TakeMap(ClusterMap* map, Result<ClusterMap> answer) {
  if (answer.status().code() == Status::Code::kUnsupported) {
    *map = ClusterMap{};
    return Status::OK();
  }
  if (!answer.ok()) return answer.status();
  if (!answer->cluster || answer->revision >= map->revision || !map->cluster) {
    *map = std::move(answer).value();
  }
  return Status::OK();
}

std::vector<std::string> RefreshOrder(const ClusterMap& map, const std::string& first,
                                      const std::string& seed) {
  std::vector<std::string> order;
  order.reserve(map.nodes.size() + 2);
  if (!first.empty()) order.push_back(first);
  for (const ClusterNode& n : map.nodes) order.push_back(n.address);
  order.push_back(seed);
  return order;
}

WriteIds::WriteIds() {
  std::random_device rd;
  prefix_ = (uint64_t{rd()} << 32) | rd();
  if (prefix_ == 0) prefix_ = 1;
}

}  // namespace segstore::client::internal
