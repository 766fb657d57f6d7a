// ClusterClient: the synchronous client of a segstore cluster, or of a single
// server (proto/PROTOCOL.md, "Clusters"). Given any node's address, it asks
// for the partition map and sends each request to a node holding the user's
// partition, over one Client per node, connected when first needed. Batches
// are split by node and their answers put back in the caller's order.
//
// A request goes to the first replica of its user's partition, and each
// retry to the next. Retries, each bounded by `max_attempts` tries of a
// request (or of a batch entry):
// - WrongNode (the node does not hold the user): the map is fetched again,
//   from the node that said so or any other, keeping the newest, and the
//   request goes to a node the map names. Nothing was done, so writes retry
//   too.
// - Busy from a cluster node (it serves nothing at the moment): the map is
//   fetched again and, after a pause (`retry_pause`, doubling), the request
//   goes to the next replica.
// - A node that cannot be reached or did not answer is marked down: for
//   `down_mark` (a second), doubling with each failure in a row up to 16 s
//   (the requests in flight to it when it went count as one); an answer
//   clears the mark. A read (or a write that may be resent, below) that met it goes
//   at once to the next replica not marked down, and every request passes
//   over the node while the mark lasts; the first after it tries the node
//   again. When every replica is down, the request pauses and goes round as
//   on Busy. (So a dead node costs the requests in flight to it one retry,
//   and the rest nothing, long before the cluster moves its partitions.)
// - Writes, in a cluster that writes through a log (its map says `log`):
//   every write carries a write ID made up here (proto/PROTOCOL.md, "Writes
//   in a cluster"), and one whose outcome is unknown (no answer, InDoubt) or
//   that the log refused (LogUnavailable) is sent again with the same ID,
//   which the cluster applies at most once. Out of attempts with the outcome
//   of one that was sent still unknown, the caller gets InDoubt (a write
//   never sent, no node being reachable, gets the connection's error).
//   Without a log, a write whose answer never came is not sent twice: its
//   outcome is unknown, and the error (Unavailable or Timeout) is what the
//   caller gets.
// - A get answered from a copy that may be behind (marked stale) is asked of
//   the other replicas in turn; the first answer not marked stale is
//   returned, else the first one (its `stale` set). Batch gets and counts
//   return what the node answered.
// Every other answer is returned as it is. Against a single server (its map
// says it is not a cluster) every request goes to it and nothing is retried.
//
// Thread-compatible: one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/client.h"
#include "segstore/cluster_map.h"

namespace segstore::client {

struct ClusterClientOptions {
  // How to reach a node: host and port are those of the first node asked;
  // every other field (timeouts, TLS, secret) applies to every node.
  ClientOptions node;
  int max_attempts = 4;
  std::chrono::milliseconds retry_pause{50};
  // How long a node that could not be reached is passed over after a
  // first failure (doubling with failures in a row, up to 16 times this).
  std::chrono::milliseconds down_mark{1000};
};

class ClusterClient {
 public:
  // Connects to options.node and fetches the map. Fails as Client::Connect
  // does, or with the cluster_map request's error.
  static Result<std::unique_ptr<ClusterClient>> Connect(const ClusterClientOptions& options);
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  // The map in use (cluster false: a single server).
  const segstore::ClusterMap& map() const;
  // Fetches the map again from the nodes, keeping the newest revision seen.
  Status RefreshMap();
  // "host:port" of the node that holds `user` in the map in use.
  std::string NodeOf(std::string_view user) const;
  // Requests retried so far (WrongNode, Busy, unreachable node, unknown
  // write outcomes).
  uint64_t retries() const;
  // Gets answered stale by the first replica asked.
  uint64_t stale_reads() const;

  Result<GetResult> Get(std::string_view user, const GetOptions& options = {});
  Result<BatchGetResult> BatchGet(std::span<const std::string> users,
                                  const GetOptions& options = {});
  Result<uint32_t> Count(std::string_view user, uint64_t id_from = 0, uint64_t id_to = UINT64_MAX);
  Result<UpsertResult> Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                              UpsertMode mode = UpsertMode::kSet);
  Result<UpsertResult> Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                              const UpsertOptions& how);
  Result<BatchUpsertResult> BatchUpsert(std::span<const UpsertItem> items);
  Result<uint32_t> Remove(std::string_view user, std::span<const uint64_t> ids);
  Result<TrimResult> Trim(std::string_view user, UnixSeconds before = 0);
  Result<bool> Delete(std::string_view user);
  Result<ExpireResult> Expire(std::string_view user, std::span<const uint64_t> ids,
                              const ExpireSpec& expiry);
  // Profile fields' writes, as Client's (same requests, same answers), sent
  // to the node holding `user` and retried as every write above, with one
  // write ID per call in a cluster with a log. A node's refusal
  // (InvalidArgument, LimitExceeded: nothing written) is returned as it is,
  // never retried, and so is Unsupported from a cluster where a node runs a
  // build without fields. A request over the node's
  // max_frame_bytes (from its hello) is LimitExceeded, sent nowhere.
  Result<FieldWriteResult> FieldSet(std::string_view user, std::span<const FieldUpdate> fields);
  Result<FieldWriteResult> FieldDelete(std::string_view user, std::span<const std::string> names);
  Result<IncrementResult> FieldIncrement(std::string_view user,
                                         const segstore::FieldIncrement& increment);
  Result<FieldMaxResult> FieldMax(std::string_view user, const FieldUpdate& field);

  // The client of the node at `address` ("host:port"), connected if needed.
  Result<Client*> NodeClient(const std::string& address);

 private:
  struct Impl;
  explicit ClusterClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace segstore::client
