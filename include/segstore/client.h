// The segstore client library: talks the wire protocol (proto/PROTOCOL.md) to
// a segstore server over one TCP connection.
//
// AsyncClient is the building block: one connection, asynchronous, driven by
// the caller's boost::asio::io_context. Every call sends its request at once
// (requests are pipelined; many may be in flight) and its callback runs
// exactly once, on the io_context's thread: with the answer, the server's
// error, Timeout after request_timeout, or Unavailable when the connection
// broke or was closed. Callbacks never run inside the call that started them,
// except that Close() and the destructor fail the requests still in flight
// from inside themselves. Callbacks must not throw; they may start new calls,
// Close() the client or destroy it.
//
// Client is the synchronous wrapper: it owns a private io_context and one
// AsyncClient, and each call blocks until its answer (or its timeout).
//
// Threads: an AsyncClient is not thread-safe. Call it, and get its callbacks,
// only on the thread running its io_context (run that io_context on one
// thread). Destroy it before the io_context. A Client is thread-compatible:
// one thread at a time.
//
// Errors name the operation and the server: "Timeout: get to
// 127.0.0.1:7700: no answer within 1000 ms". A server's error keeps its code
// and carries the server's message after that prefix.
//
// This header does not include Asio; the AsyncClient's user includes
// <boost/asio.hpp> to make an io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "segstore/cluster_map.h"
#include "segstore/messages.h"
#include "segstore/result.h"
#include "segstore/segments.h"
#include "segstore/status.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace segstore::client {

using segstore::BatchGetResult;
using segstore::BatchUpsertResult;
using segstore::CopiedRecord;
using segstore::CopyPartitionRequest;
using segstore::CopyPartitionResponse;
using segstore::ExpireCondition;
using segstore::ExpireOutcome;
using segstore::ExpireResult;
using segstore::ExpireSpec;
using segstore::Field;
using segstore::FieldIncrement;
using segstore::FieldMaxResult;
using segstore::FieldSelection;
using segstore::FieldUpdate;
using segstore::FieldValue;
using segstore::FieldWriteResult;
using segstore::GetOptions;
using segstore::GetResult;
using segstore::IncrementResult;
using segstore::SegmentUpdate;
using segstore::ScannedProfile;
using segstore::ScanRequest;
using segstore::ScanResponse;
using segstore::ServerInfo;
using segstore::TrimResult;
using segstore::UnixSeconds;
using segstore::UpsertItem;
using segstore::UpsertMode;
using segstore::UpsertOptions;
using segstore::UpsertResult;
using segstore::WriteId;

// TLS to a server that serves it (its [tls] settings). The server's
// certificate is verified against `ca_file` (or the system's trust store)
// and must name the host (or `server_name`).
struct TlsClientOptions {
  bool enabled = false;
  std::string ca_file;      // PEM CAs to trust; empty: the system's default trust store
  std::string cert_file;    // PEM client certificate, for a server that requires one
  std::string key_file;     // its private key (PEM, unencrypted)
  std::string server_name;  // the name the certificate must carry (and SNI); empty: the host
  bool verify = true;       // false: accept any certificate (encrypts, proves nothing)
};

struct ClientOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address, or a name to resolve
  uint16_t port = 7700;
  // Resolving, connecting and (with `hello`) the hello answer, together; 0: none.
  std::chrono::milliseconds connect_timeout{1000};
  // Per request, from the call to its answer; 0: none.
  std::chrono::milliseconds request_timeout{1000};
  // Say hello on connect and keep the server's ServerInfo (its limits). The
  // client then refuses, with LimitExceeded and without sending it, a request
  // whose body is over the server's max_frame_bytes (a server closes the
  // connection on one).
  bool hello = true;
  std::string client_name = "segstore-client";  // sent in hello, for the server's log
  TlsClientOptions tls;
  // The shared secret of a server that requires one, sent in hello (so a
  // secret makes the client say hello whatever `hello` says). Send it only
  // over TLS or a network you trust: it is not otherwise protected.
  std::string auth_secret;
};

// Parses "host:port" (an IPv4 address or a name, or "[v6 address]:port") into
// options->host and options->port. InvalidArgument, leaving *options alone,
// on anything else.
Status ParseServerAddress(std::string_view text, ClientOptions* options);

// "host:port" as ParseServerAddress reads it ("[::1]:7700" for IPv6).
std::string FormatServerAddress(std::string_view host, uint16_t port);

template <typename T>
using Callback = std::function<void(Result<T>)>;

class AsyncClient {
 public:
  // Resolves, connects (TCP_NODELAY), with options.tls does the TLS
  // handshake and, with options.hello or a secret, says hello. `done` runs
  // once on the io_context's thread, never inside Connect: with the client,
  // or Unavailable (refused, unreachable, no such host, TLS handshake or
  // certificate check failed), InvalidArgument (an unreadable CA,
  // certificate or key file), Timeout (connect_timeout passed) or the
  // hello's error (Unauthenticated for a missing or wrong secret).
  static void Connect(boost::asio::io_context& io, const ClientOptions& options,
                      Callback<std::unique_ptr<AsyncClient>> done);

  // Fails the requests in flight with Unavailable (their callbacks run inside
  // the destructor) and closes the connection.
  virtual ~AsyncClient() = default;

  // The server's hello answer (the latest one); zeros if none was asked for.
  virtual const ServerInfo& server_info() const = 0;
  // Requests sent whose callback has not run yet.
  virtual size_t in_flight() const = 0;
  // "host:port" of the server.
  virtual const std::string& server_address() const = 0;
  // False once the connection broke or was closed: every call then fails
  // with Unavailable.
  virtual bool is_open() const = 0;

  virtual void Hello(Callback<ServerInfo> done) = 0;
  virtual void Ping(Callback<std::monostate> done) = 0;
  virtual void Stats(Callback<segstore::Stats> done) = 0;
  // Which servers hold which partitions (cluster false from a single server).
  virtual void ClusterMap(Callback<segstore::ClusterMap> done) = 0;
  virtual void Get(std::string_view user, const GetOptions& options, Callback<GetResult> done) = 0;
  virtual void BatchGet(std::span<const std::string> users, const GetOptions& options,
                        Callback<BatchGetResult> done) = 0;
  // Live segments of `user` with IDs in [id_from, id_to]. NotFound when the
  // user has no profile (no live segment), as for Get.
  virtual void Count(std::string_view user, uint64_t id_from, uint64_t id_to,
                     Callback<uint32_t> done) = 0;
  // The writes. `write_id` (empty: none) names the write so that a cluster
  // applies it at most once, however often it is sent (proto/PROTOCOL.md,
  // "Writes in a cluster"); send the same one when sending it again.
  // `how`: the mode, and whether each named segment's attributes become
  // exactly the given ones (replace_attrs) instead of absent keeping them.
  virtual void Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                      const UpsertOptions& how, const WriteId& write_id,
                      Callback<UpsertResult> done) = 0;
  // Each item carries its own write_id.
  virtual void BatchUpsert(std::span<const UpsertItem> items, Callback<BatchUpsertResult> done) = 0;
  // Gives how many of `ids` the profile held live (an ID listed twice counts
  // once). NotFound, writing nothing, when the user has no profile.
  virtual void Remove(std::string_view user, std::span<const uint64_t> ids, const WriteId& write_id,
                      Callback<uint32_t> done) = 0;
  // Drops every segment not live at `before` (expiring at or before it, live
  // ones included); 0 or any earlier time is the server's now. NotFound,
  // writing nothing, when the user has no profile.
  virtual void Trim(std::string_view user, UnixSeconds before, const WriteId& write_id,
                    Callback<TrimResult> done) = 0;
  // Gives whether there was a profile to delete.
  virtual void Delete(std::string_view user, const WriteId& write_id, Callback<bool> done) = 0;
  // Sets the expiry of these segments to `expiry`'s (value, ttl) where its
  // condition holds, each judged against the profile as it was: one
  // outcome per listed ID, in order (missing, set, removed: the new expiry
  // was not in the future, unchanged: the condition did not hold), and the
  // live segments after. NotFound, writing nothing, when the user has no
  // profile; LimitExceeded for more than the server's max_segments IDs;
  // InvalidArgument for a TTL past 2^32-1 (proto/PROTOCOL.md, "expire").
  virtual void Expire(std::string_view user, std::span<const uint64_t> ids,
                      const ExpireSpec& expiry, const WriteId& write_id,
                      Callback<ExpireResult> done) = 0;
  // Profile bridging (proto/PROTOCOL.md, "Linked profiles"). `user` joins
  // the group of `master` (of master's master when master is a member; a
  // master's whole group moves with it), its link lasting `ttl` seconds (0:
  // never). LimitExceeded past the server's max_links; InvalidArgument for
  // user == master. Unsupported from a cluster where a node runs a build
  // without links.
  virtual void Link(std::string_view user, std::string_view master, uint32_t ttl,
                    Callback<LinkResult> done) = 0;
  // Gives whether `user` was linked; a master's unlink dissolves its group.
  virtual void Unlink(std::string_view user, Callback<bool> done) = 0;
  // The master of user's group (user itself for a master); NotFound when
  // it is in no group.
  virtual void MasterOf(std::string_view user, Callback<std::string> done) = 0;
  // The users linked to the master of user's group, after `cursor`, at
  // most `limit` (0: the server's 100); LinksPage::next continues.
  virtual void Links(std::string_view user, std::string_view cursor, uint32_t limit,
                     Callback<LinksPage> done) = 0;
  // Whether `a` and `b` share a master (or are the same ID).
  virtual void Connected(std::string_view a, std::string_view b, Callback<bool> done) = 0;
  // Profile fields (proto/PROTOCOL.md, "Profile fields"): typed values
  // beside the segments, each with its own expiry; a get returns them when
  // GetOptions::fields asks. Each is one read-modify-write of the user's
  // record. InvalidArgument for a name empty or over 64 bytes, a name twice,
  // an expiry not in the future, a type that does not fit; LimitExceeded
  // past the server's max_fields or max_field_bytes: nothing is written
  // then. Unsupported from a cluster where a node runs a build without
  // fields.
  //
  // Sets these fields, each whole (value, type and expiry): `changed` is
  // how many, `count` the live fields after.
  virtual void FieldSet(std::string_view user, std::span<const FieldUpdate> fields,
                        const WriteId& write_id, Callback<FieldWriteResult> done) = 0;
  // Deletes these fields: `changed` counts the live ones among them.
  // NotFound, writing nothing, when the user has no profile.
  virtual void FieldDelete(std::string_view user, std::span<const std::string> names,
                           const WriteId& write_id, Callback<FieldWriteResult> done) = 0;
  // Adds increment.delta to an int field (a counter; absent or expired: 0),
  // atomically. With a cap that the sum would pass, nothing is written and
  // the result says `capped` with the current value: not an error.
  virtual void FieldIncrement(std::string_view user, const segstore::FieldIncrement& increment,
                              const WriteId& write_id, Callback<IncrementResult> done) = 0;
  // Keeps the larger of the field's live value and field.value (an int, a
  // double or a time, of the field's type), the given expiry with it.
  virtual void FieldMax(std::string_view user, const FieldUpdate& field, const WriteId& write_id,
                        Callback<FieldMaxResult> done) = 0;
  // One page of a routing partition's profiles, decoded: each user's own
  // live segments, live fields and its record's side of a link
  // (proto/PROTOCOL.md, "scan"). Start at cursor 0 and send each answer's
  // cursor back until ScanResponse::finished(); a page may be empty before
  // the last. A cursor means something only to the server that gave it.
  // WrongNode from a cluster node that does not serve the partition; Busy
  // from one serving nothing yet; the answer says `stale` as a get's does.
  virtual void Scan(const ScanRequest& request, Callback<ScanResponse> done) = 0;
  // Node to node: one page of a routing partition's records, from a cluster
  // node that serves the partition, for a node copying it to itself
  // (proto/PROTOCOL.md, "copy_partition"; clients have no need of it).
  // WrongNode when the node does not serve the partition; Busy when it has
  // not applied the log up to request.min_next or is not caught up with the
  // log (retry shortly); InvalidArgument from a node that is not a cluster
  // node writing through a log.
  virtual void CopyPartition(const CopyPartitionRequest& request,
                             Callback<CopyPartitionResponse> done) = 0;
  // Node to node, profile bridging in a cluster (proto/PROTOCOL.md,
  // "link_step", "read_records"; clients have no need of them): one step of
  // a link on the node holding step.user, written through its log with
  // `write_id` (empty: none); and the records of `users` as stored, one
  // result per user (NotFound: no record; WrongNode: not served there).
  virtual void SendLinkStep(const LinkStep& step, const WriteId& write_id,
                            Callback<LinkStepResult> done) = 0;
  virtual void ReadRecords(std::span<const std::string> users,
                           Callback<std::vector<Result<StoredRecord>>> done) = 0;

  // The same with a mode alone, and without a write ID.
  void Upsert(std::string_view user, std::span<const SegmentUpdate> segments, UpsertMode mode,
              const WriteId& write_id, Callback<UpsertResult> done) {
    Upsert(user, segments, UpsertOptions{mode}, write_id, std::move(done));
  }
  void Upsert(std::string_view user, std::span<const SegmentUpdate> segments, UpsertMode mode,
              Callback<UpsertResult> done) {
    Upsert(user, segments, UpsertOptions{mode}, WriteId{}, std::move(done));
  }
  void Remove(std::string_view user, std::span<const uint64_t> ids, Callback<uint32_t> done) {
    Remove(user, ids, WriteId{}, std::move(done));
  }
  void Trim(std::string_view user, UnixSeconds before, Callback<TrimResult> done) {
    Trim(user, before, WriteId{}, std::move(done));
  }
  void Delete(std::string_view user, Callback<bool> done) {
    Delete(user, WriteId{}, std::move(done));
  }
  void Expire(std::string_view user, std::span<const uint64_t> ids, const ExpireSpec& expiry,
              Callback<ExpireResult> done) {
    Expire(user, ids, expiry, WriteId{}, std::move(done));
  }

  // Fails the requests in flight with Unavailable (their callbacks run inside
  // Close) and closes the connection. Idempotent.
  virtual void Close() = 0;

 protected:
  AsyncClient() = default;
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ServerInfo& server_info() const;
  const std::string& server_address() const;
  // False once the connection broke or was closed (the server's idle
  // timeout, a restart): every call then fails at once with Unavailable,
  // sending nothing. Connect again.
  bool is_open() const;

  Result<ServerInfo> Hello();
  Status Ping();
  Result<segstore::Stats> Stats();
  Result<segstore::ClusterMap> ClusterMap();
  Result<GetResult> Get(std::string_view user, const GetOptions& options = {});
  Result<BatchGetResult> BatchGet(std::span<const std::string> users,
                                  const GetOptions& options = {});
  Result<uint32_t> Count(std::string_view user, uint64_t id_from = 0, uint64_t id_to = UINT64_MAX);
  Result<UpsertResult> Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                              UpsertMode mode = UpsertMode::kSet, const WriteId& write_id = {});
  Result<UpsertResult> Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                              const UpsertOptions& how, const WriteId& write_id = {});
  Result<BatchUpsertResult> BatchUpsert(std::span<const UpsertItem> items);
  Result<uint32_t> Remove(std::string_view user, std::span<const uint64_t> ids,
                          const WriteId& write_id = {});
  Result<TrimResult> Trim(std::string_view user, UnixSeconds before = 0,
                          const WriteId& write_id = {});
  Result<bool> Delete(std::string_view user, const WriteId& write_id = {});
  // As AsyncClient::Expire.
  Result<ExpireResult> Expire(std::string_view user, std::span<const uint64_t> ids,
                              const ExpireSpec& expiry, const WriteId& write_id = {});
  // As AsyncClient::Scan.
  Result<ScanResponse> Scan(const ScanRequest& request);
  // As AsyncClient::CopyPartition, SendLinkStep and ReadRecords (node to node).
  Result<CopyPartitionResponse> CopyPartition(const CopyPartitionRequest& request);
  Result<LinkStepResult> SendLinkStep(const LinkStep& step, const WriteId& write_id = {});
  Result<std::vector<Result<StoredRecord>>> ReadRecords(std::span<const std::string> users);
  // Profile fields, as AsyncClient's.
  Result<FieldWriteResult> FieldSet(std::string_view user, std::span<const FieldUpdate> fields,
                                    const WriteId& write_id = {});
  Result<FieldWriteResult> FieldDelete(std::string_view user, std::span<const std::string> names,
                                       const WriteId& write_id = {});
  Result<IncrementResult> FieldIncrement(std::string_view user,
                                         const segstore::FieldIncrement& increment,
                                         const WriteId& write_id = {});
  Result<FieldMaxResult> FieldMax(std::string_view user, const FieldUpdate& field,
                                  const WriteId& write_id = {});
  // Profile bridging, as AsyncClient's.
  Result<LinkResult> Link(std::string_view user, std::string_view master, uint32_t ttl = 0);
  Result<bool> Unlink(std::string_view user);
  Result<std::string> MasterOf(std::string_view user);
  Result<LinksPage> Links(std::string_view user, std::string_view cursor = {}, uint32_t limit = 0);
  Result<bool> Connected(std::string_view a, std::string_view b);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace segstore::client
