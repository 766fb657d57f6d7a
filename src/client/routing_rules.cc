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

void DownNodes::Failed(const std::string& address, Clock::time_point now) {
  Mark& m = marks_[address];
  // Requests in flight to the node when it went fail together: one failure.
  if (m.failures > 0 && now < m.until) return;
  m.failures = std::min(m.failures + 1, 5);
  m.until = now + first_ * (1 << (m.failures - 1));  // 1, 2, 4, 8, 16 x first_
}

bool DownNodes::Down(const std::string& address, Clock::time_point now) const {
  if (marks_.empty()) return false;
  auto it = marks_.find(address);
  return it != marks_.end() && now < it->second.until;
}

const std::string& AddressOf(const ClusterMap& map, const std::string& seed, std::string_view user,
                             int attempt, const DownNodes& down) {
  if (!map.has_map()) return seed;
  std::span<const uint16_t> replicas = map.ReplicasOf(PartitionOf(user));
  const size_t first = static_cast<size_t>(attempt) % replicas.size();
  if (down.empty()) return map.nodes[replicas[first]].address;
  const auto now = DownNodes::Clock::now();
  for (size_t k = 0; k < replicas.size(); ++k) {
    const std::string& a = map.nodes[replicas[(first + k) % replicas.size()]].address;
    if (!down.Down(a, now)) return a;
  }
  return map.nodes[replicas[first]].address;
}

std::vector<std::string> FreshOrder(const ClusterMap& map, std::string_view user,
                                    const DownNodes& down) {
  std::vector<std::string> order;
  if (!map.has_map()) return order;
  const std::string& asked = AddressOf(map, std::string(), user, 0, down);
  const auto now = DownNodes::Clock::now();
  for (uint16_t r : map.ReplicasOf(PartitionOf(user))) {
    const std::string& a = map.nodes[r].address;
    if (a != asked && !down.Down(a, now)) order.push_back(a);
  }
  return order;
}

bool RetryAtOnce(const Status& last, const std::string& address, const std::string& next,
                 const DownNodes& down) {
  return IsLost(last) && next != address && !down.Down(next, DownNodes::Clock::now());
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
                                      const std::string& seed, const DownNodes& down) {
  std::vector<std::string> order;
  std::vector<std::string> last;
  order.reserve(map.nodes.size() + 2);
  if (!first.empty()) order.push_back(first);
  const auto now = DownNodes::Clock::now();
  for (const ClusterNode& n : map.nodes) {
    (down.Down(n.address, now) ? last : order).push_back(n.address);
  }
  order.push_back(seed);
  order.insert(order.end(), last.begin(), last.end());
  return order;
}

WriteIds::WriteIds() {
  std::random_device rd;
  prefix_ = (uint64_t{rd()} << 32) | rd();
  if (prefix_ == 0) prefix_ = 1;
}

}  // namespace segstore::client::internal
