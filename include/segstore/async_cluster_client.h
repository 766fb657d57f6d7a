// AsyncClusterClient: the asynchronous client of a segstore cluster, or of a
// single server (proto/PROTOCOL.md, "Clusters"), on the caller's
// boost::asio::io_context, as AsyncClient is. Given any node's address, it
// asks that node for the partition map and sends each request to a node
// holding the user's partition, over a small pool of AsyncClient
// connections per node (at most `connections_per_node`, opened when
// requests first need them: another only while every open one has requests
// in flight). Batches are split by node, the parts sent side by side, and
// the answers put back in the caller's order. Requests are pipelined: many
// may be in flight at once.
//
// It decides exactly as ClusterClient does (include/segstore/cluster_client.h
// has the rules; both use src/client/routing_rules.h): the first replica of
// the user's partition, the next on each retry, at most `max_attempts` tries
// of a request (or of a batch entry); WrongNode fetches the map again and
// retries at once; Busy from a cluster node fetches the map again and
// retries after a pause (`retry_pause`, doubling; a timer, nothing blocks);
// a node that cannot be reached or did not answer is marked down and passed
// over, the request going at once to the next replica; in a cluster with a
// log (its map says `log`) every write carries a write ID made up here
// (random 64-bit prefix, then a counter) and is resent with it when its
// outcome is unknown (no answer, InDoubt) or the log refused it
// (LogUnavailable), and once out of attempts with the outcome unknown the
// caller gets InDoubt; without a log a write whose answer was lost is never
// resent, and its error is what the caller gets. A get answered stale asks
// the other replicas in turn for an answer that is not; batches and counts
// return what the node answered. Against a single server everything goes to
// it and nothing is retried but a connection that could not be made.
//
// The map is fetched again asynchronously, one fetch at a time. A request
// that needs a newer map than the one it was sent by goes on at once when
// the client has one already (another request's fetch brought it); else it
// waits for the next fetch, started once the one under way ends (unless
// that one brought a newer map), for every request then waiting. So many
// requests failing at once cost one or two fetches, and a map fetched
// before a request failed is never taken for the answer to it.
//
// Callbacks run exactly once, on the io_context's thread, never inside the
// call that started them, except that Close() and the destructor fail what
// is still in flight (Unavailable) from inside themselves. Callbacks must not
// throw; they may start new calls, and may Close() or destroy the client,
// except those run by Close() or the destructor.
//
// Threads: not thread-safe. Call it, and get its callbacks, only on the
// thread running its io_context (run that io_context on one thread). Destroy
// it before the io_context.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/cluster_map.h"

namespace segstore::client {

namespace internal {
class ClusterRouter;
}  // namespace internal

struct AsyncClusterClientOptions : ClusterClientOptions {
  // Connections to each node at most (at least 1), opened lazily.
  unsigned connections_per_node = 1;
};

class AsyncClusterClient {
 public:
  // Connects to options.node and fetches the map. `done` runs once, never
  // inside Connect: with the client, or with AsyncClient::Connect's error or
  // the cluster_map request's. A server from before clusters (Unsupported)
  // is a single server.
  static void Connect(boost::asio::io_context& io, const AsyncClusterClientOptions& options,
                      Callback<std::unique_ptr<AsyncClusterClient>> done);

  // Fails everything in flight with Unavailable (callbacks run inside).
  ~AsyncClusterClient();
  AsyncClusterClient(const AsyncClusterClient&) = delete;
  AsyncClusterClient& operator=(const AsyncClusterClient&) = delete;

  // The map in use (cluster false: a single server).
  const segstore::ClusterMap& map() const;
  // The hello answer of the node first asked (its limits: max_batch,
  // max_frame_bytes...); zeros if options.node.hello was off.
  const ServerInfo& server_info() const;
  // "host:port" of the node that holds `user` (its first replica) in the map
  // in use: where a request on it goes first.
  std::string NodeOf(std::string_view user) const;
  // A new write ID when the map says `log` (none otherwise): for callers
  // that name batch items themselves, to resend them with the same IDs.
  WriteId NewWriteId();
  // Calls whose callback has not run yet.
  size_t in_flight() const;
  // Requests (or batch entries) retried so far, and gets answered stale by
  // the first replica asked.
  uint64_t retries() const;
  uint64_t stale_reads() const;

  // Fetches the map again, keeping the newest revision seen; OK, or the last
  // node's error when none answered.
  void RefreshMap(Callback<std::monostate> done);

  void Get(std::string_view user, const GetOptions& options, Callback<GetResult> done);
  void BatchGet(std::span<const std::string> users, const GetOptions& options,
                Callback<BatchGetResult> done);
  void Count(std::string_view user, uint64_t id_from, uint64_t id_to, Callback<uint32_t> done);
  void Upsert(std::string_view user, std::span<const SegmentUpdate> segments, UpsertMode mode,
              Callback<UpsertResult> done);
  void Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
              const UpsertOptions& how, Callback<UpsertResult> done);
  // Items without a write_id get one (in a cluster with a log).
  void BatchUpsert(std::span<const UpsertItem> items, Callback<BatchUpsertResult> done);
  void Remove(std::string_view user, std::span<const uint64_t> ids, Callback<uint32_t> done);
  void Trim(std::string_view user, UnixSeconds before, Callback<TrimResult> done);
  void Delete(std::string_view user, Callback<bool> done);
  void Expire(std::string_view user, std::span<const uint64_t> ids, const ExpireSpec& expiry,
              Callback<ExpireResult> done);
  // Profile fields' writes (AsyncClient::FieldSet, FieldDelete,
  // FieldIncrement, FieldMax: same requests, same answers), sent to the node
  // holding `user` and retried as every write, with one write ID per call in
  // a cluster with a log. What the caller gets besides: the node's refusal
  // as it is (InvalidArgument, LimitExceeded: nothing written, never
  // retried), and Unsupported (not retried) from a cluster where a node
  // runs a build without fields. A request over the node's
  // max_frame_bytes (from its hello) is LimitExceeded, sent nowhere.
  // `write_id`: the write's ID (empty: one is made), for a caller that
  // resends a write of its own (a node sending a linked user's write on).
  void FieldSet(std::string_view user, std::span<const FieldUpdate> fields, const WriteId& write_id,
                Callback<FieldWriteResult> done);
  void FieldDelete(std::string_view user, std::span<const std::string> names,
                   const WriteId& write_id, Callback<FieldWriteResult> done);
  void FieldIncrement(std::string_view user, const segstore::FieldIncrement& increment,
                      const WriteId& write_id, Callback<IncrementResult> done);
  void FieldMax(std::string_view user, const FieldUpdate& field, const WriteId& write_id,
                Callback<FieldMaxResult> done);
  void FieldSet(std::string_view user, std::span<const FieldUpdate> fields,
                Callback<FieldWriteResult> done) {
    FieldSet(user, fields, WriteId{}, std::move(done));
  }
  void FieldDelete(std::string_view user, std::span<const std::string> names,
                   Callback<FieldWriteResult> done) {
    FieldDelete(user, names, WriteId{}, std::move(done));
  }
  void FieldIncrement(std::string_view user, const segstore::FieldIncrement& increment,
                      Callback<IncrementResult> done) {
    FieldIncrement(user, increment, WriteId{}, std::move(done));
  }
  void FieldMax(std::string_view user, const FieldUpdate& field, Callback<FieldMaxResult> done) {
    FieldMax(user, field, WriteId{}, std::move(done));
  }
  // Profile bridging's link (AsyncClient::Link: `user` joins `master`'s
  // group for `ttl` seconds, 0: never), sent to the node holding `user`,
  // which coordinates it, as Delete is. Unsupported (not retried) from a
  // cluster where a node runs a build without links. It carries no write
  // ID: an answer lost is not resent, and its error is what the caller
  // gets (a link is idempotent: the caller may send it again).
  void Link(std::string_view user, std::string_view master, uint32_t ttl,
            Callback<LinkResult> done);
  // Node to node (AsyncClient::SendLinkStep, ReadRecords): a step goes to
  // the node holding step.user, with a write ID in a cluster with a log
  // (resent with it when its outcome is unknown, as every write); the
  // records' users are split by node, as a batch get's.
  void SendLinkStep(const LinkStep& step, Callback<LinkStepResult> done);
  void ReadRecords(std::span<const std::string> users,
                   Callback<std::vector<Result<StoredRecord>>> done);

  // Fails everything in flight with Unavailable (callbacks run inside Close),
  // closes every connection; later calls fail with Unavailable. Idempotent.
  void Close();

 private:
  explicit AsyncClusterClient(std::shared_ptr<internal::ClusterRouter> router);
  std::shared_ptr<internal::ClusterRouter> router_;
};

}  // namespace segstore::client
