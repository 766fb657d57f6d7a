// The decisions both routing clients make, written once: ClusterClient
// (synchronous, cluster_client.cc) and AsyncClusterClient (on an Asio
// io_context, async_cluster_client.cc) differ in how they wait, never in
// what they decide. Which answers are worth another attempt, what the
// caller gets once the attempts ran out, which node a user goes to on each
// attempt, how long to pause, which map to keep, whom to ask for it, and
// the write IDs. The rules themselves are documented in
// include/segstore/cluster_client.h (and proto/PROTOCOL.md, "Clusters").
//
// Pure functions and a plain value type; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/cluster_map.h"
#include "segstore/result.h"
#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::client::internal {

// Whether a request only reads, or writes; a write whose outcome is unknown
// is resent only when it carries a write ID (kNamedWrite), which a cluster
// with a log applies at most once.
enum class Kind { kRead, kWrite, kNamedWrite };

// The kind of a write carrying `id` (empty: none).
inline Kind WriteKind(const WriteId& id) { return id.empty() ? Kind::kWrite : Kind::kNamedWrite; }
inline bool IsWrite(Kind k) { return k != Kind::kRead; }

inline bool IsWrongNode(const Status& s) { return s.code() == Status::Code::kWrongNode; }
inline bool IsBusy(const Status& s) { return s.code() == Status::Code::kBusy; }
// The connection broke or no answer came: the request may or may not have
// been carried out.
inline bool IsLost(const Status& s) {
  return s.code() == Status::Code::kUnavailable || s.code() == Status::Code::kTimeout;
}
// A write whose outcome the answer does not tell.
inline bool IsUnknown(const Status& s) { return IsLost(s) || s.code() == Status::Code::kInDoubt; }

// Whether an answer `s` to a request of `kind`, under `map`, is worth
// another attempt (with the same write ID for a write). Never outside a
// cluster.
bool Retryable(const ClusterMap& map, const Status& s, Kind kind);

// What the caller gets when `attempts` attempts ended on `s`: InDoubt when
// one of them was a write sent whose outcome is unknown (`unknown`), else `s`
// (a write never sent is no doubt).
Status GaveUp(const Status& s, bool unknown, int attempts);

// Nodes that could not be reached lately (no connection could be made, or
// it broke, or no answer came in time). While a node is marked down,
// requests that would go to it go to the next replica of their partition
// that is not, without a pause: `first` (a second) after a failure,
// doubling with each failure in a row up to 16 times that; failures while
// it is marked (the other requests that were in flight to it) count as
// one. After that, the next request that would go there tries the node
// again; an answer from it clears the mark.
class DownNodes {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DownNodes(std::chrono::milliseconds first = std::chrono::seconds(1)) : first_(first) {}
  void Failed(const std::string& address, Clock::time_point now = Clock::now());
  void Answered(const std::string& address) {
    if (!marks_.empty()) marks_.erase(address);
  }
  // What an attempt at `address` ended with, in a cluster or not (a single
  // server is never marked): Failed when nothing came back, else Answered.
  void Heard(const std::string& address, const Status& s, bool cluster) {
    if (!IsLost(s)) {
      Answered(address);
    } else if (cluster) {
      Failed(address);
    }
  }
  bool Down(const std::string& address, Clock::time_point now) const;
  bool empty() const { return marks_.empty(); }

 private:
  struct Mark {
    Clock::time_point until;
    int failures = 0;
  };
  std::chrono::milliseconds first_;
  std::map<std::string, Mark, std::less<>> marks_;
};

// Where `user` goes on attempt `attempt` (0 first): `seed` while the map
// places nothing (a single server, or a cluster still forming), else the
// replicas of its partition in turn, starting at the attempt's and passing
// over those `down` marks down (the attempt's own when all are).
const std::string& AddressOf(const ClusterMap& map, const std::string& seed, std::string_view user,
                             int attempt, const DownNodes& down);

// The replicas a get answered stale asks next, in turn: those of the user's
// partition but the one a first attempt goes to (AddressOf's, which
// answered), passing over those marked down. Empty without a map.
std::vector<std::string> FreshOrder(const ClusterMap& map, std::string_view user,
                                    const DownNodes& down);

// Whether a retry after `last` from `address` may go at once to `next`,
// without a pause or a fresh map: `address` could not be reached, and
// `next` is another node, not marked down.
bool RetryAtOnce(const Status& last, const std::string& address, const std::string& next,
                 const DownNodes& down);

// The pause before retry `attempt` (0 first): `base` doubling, at most 64x.
std::chrono::milliseconds RetryPause(std::chrono::milliseconds base, int attempt);

// Takes a node's cluster_map answer into *map: a single server's always, a
// cluster's when it is not older than *map (or *map is not a cluster's).
// Unsupported (a server from before clusters) counts as a single server.
// Any other failure is returned, leaving *map alone.
Status TakeMap(ClusterMap* map, Result<ClusterMap> answer);

// The nodes a refresh asks, in order: `first` (when given), every node of
// `map` not marked down, then `seed`, then the nodes marked down.
std::vector<std::string> RefreshOrder(const ClusterMap& map, const std::string& first,
                                      const std::string& seed, const DownNodes& down);

// Whether a refresh that started from revision `before` may stop asking:
// it found a newer map, or the server is a single one.
inline bool RefreshFound(const ClusterMap& map, uint64_t before) {
  return map.revision > before || !map.cluster;
}

// Write IDs: a random 64-bit prefix per client, then a counter
// (proto/PROTOCOL.md, "Types": write_id).
class WriteIds {
 public:
  WriteIds();
  // A new ID when the cluster writes through a log (`log`), else none.
  WriteId Next(bool log) { return log ? WriteId{prefix_, ++counter_} : WriteId{}; }

 private:
  uint64_t prefix_ = 0;
  uint64_t counter_ = 0;
};

}  // namespace segstore::client::internal
