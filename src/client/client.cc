#include "segstore/client.h"

#include <optional>
#include <utility>
#include <vector>

// After <utility>: Boost 1.74's Asio uses std::exchange without including it.
#include <boost/asio.hpp>

#include "client/connection.h"
#include "proto/wire.h"

namespace segstore::client {

namespace {

using internal::Completion;
using internal::Connection;
using proto::Op;

// A client trusts a server's sizes more than a server trusts a client's, but
// still decodes defensively: the wire decoders never crash on any input.
constexpr proto::DecodeLimits kResponseLimits{UINT32_MAX, UINT32_MAX, UINT32_MAX};

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// Decodes a response body of type `Wire` and hands `convert(wire)` to `done`.
template <typename Wire, typename T, typename Convert>
Completion Decoding(Op op, Callback<T> done, Convert convert) {
  return [op, done = std::move(done), convert = std::move(convert)](
             const Status& status, std::string_view body, const Connection& conn) {
    if (!status.ok()) {
      done(status);
      return;
    }
    Wire wire{};
    Status st = proto::Decode(body, kResponseLimits, &wire);
    if (!st.ok()) {
      done(Status::Corruption(conn.Context(static_cast<uint8_t>(op)) +
                              ": bad response body: " + st.ToString()));
      return;
    }
    done(convert(std::move(wire)));
  };
}

template <typename T>
auto Identity() {
  return [](T v) { return v; };
}

class AsyncClientImpl final : public AsyncClient {
 public:
  explicit AsyncClientImpl(std::shared_ptr<Connection> conn) : conn_(std::move(conn)) {}
  ~AsyncClientImpl() override { conn_->Close(); }

  const ServerInfo& server_info() const override { return conn_->server_info(); }
  size_t in_flight() const override { return conn_->in_flight(); }
  const std::string& server_address() const override { return conn_->address(); }
  bool is_open() const override { return conn_->is_open(); }

  void Hello(Callback<ServerInfo> done) override {
    proto::HelloRequest req;
    // The connection outlives every completion it runs; a new hello updates
    // the limits the client enforces.
    Connection* conn = conn_.get();
    Send(Op::kHello, req,
         Decoding<proto::HelloResponse>(Op::kHello, std::move(done), [conn](ServerInfo info) {
           conn->set_server_info(info);
           return info;
         }));
  }

  void Ping(Callback<std::monostate> done) override {
    // A ping's answer has no body worth reading.
    conn_->Send(
        Op::kPing, [](std::string*) {},
        [done = std::move(done)](const Status& status, std::string_view, const Connection&) {
          if (!status.ok()) {
            done(status);
          } else {
            done(std::monostate{});
          }
        });
  }

  void Stats(Callback<segstore::Stats> done) override {
    conn_->Send(
        Op::kStats, [](std::string*) {},
        Decoding<proto::StatsResponse>(Op::kStats, std::move(done), Identity<segstore::Stats>()));
  }

  void ClusterMap(Callback<segstore::ClusterMap> done) override {
    conn_->Send(
        Op::kClusterMap, [](std::string*) {},
        Decoding<segstore::ClusterMap>(Op::kClusterMap, std::move(done),
                                       Identity<segstore::ClusterMap>()));
  }

  void Get(std::string_view user, const GetOptions& options, Callback<GetResult> done) override {
    proto::GetRequest req{std::string(user), options};
    Connection* conn = conn_.get();
    Send(Op::kGet, req, Decoding<GetResult>(Op::kGet, std::move(done), [conn](GetResult r) {
           r.stale = (conn->answer_flags() & proto::kFlagStale) != 0;
           return r;
         }));
  }

  void BatchGet(std::span<const std::string> users, const GetOptions& options,
                Callback<BatchGetResult> done) override {
    proto::BatchGetRequest req{std::vector<std::string>(users.begin(), users.end()), options};
    Connection* conn = conn_.get();
    Send(Op::kBatchGet, req,
         Decoding<proto::BatchGetResponse>(Op::kBatchGet, std::move(done),
                                           [conn](BatchGetResult all) {
                                             if (conn->answer_flags() & proto::kFlagStale) {
                                               for (auto& r : all) {
                                                 if (r.ok()) r->stale = true;
                                               }
                                             }
                                             return all;
                                           }));
  }

  void Count(std::string_view user, uint64_t id_from, uint64_t id_to,
             Callback<uint32_t> done) override {
    proto::CountRequest req{std::string(user), id_from, id_to};
    Send(Op::kCount, req,
         Decoding<proto::CountResponse>(Op::kCount, std::move(done),
                                        [](proto::CountResponse r) { return r.count; }));
  }

  void Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
              const UpsertOptions& how, const WriteId& write_id,
              Callback<UpsertResult> done) override {
    proto::UpsertRequest req{std::string(user),
                             std::vector<SegmentUpdate>(segments.begin(), segments.end()), how.mode,
                             write_id, how.replace_attrs};
    Send(Op::kUpsert, req,
         Decoding<UpsertResult>(Op::kUpsert, std::move(done), Identity<UpsertResult>()));
  }

  void BatchUpsert(std::span<const UpsertItem> items, Callback<BatchUpsertResult> done) override {
    proto::BatchUpsertRequest req{std::vector<UpsertItem>(items.begin(), items.end())};
    Send(Op::kBatchUpsert, req,
         Decoding<proto::BatchUpsertResponse>(Op::kBatchUpsert, std::move(done),
                                              Identity<BatchUpsertResult>()));
  }

  void Remove(std::string_view user, std::span<const uint64_t> ids, const WriteId& write_id,
              Callback<uint32_t> done) override {
    proto::RemoveRequest req{std::string(user), std::vector<uint64_t>(ids.begin(), ids.end()),
                             write_id};
    Send(Op::kRemove, req,
         Decoding<proto::RemoveResponse>(Op::kRemove, std::move(done),
                                         [](proto::RemoveResponse r) { return r.removed; }));
  }

  void Trim(std::string_view user, UnixSeconds before, const WriteId& write_id,
            Callback<TrimResult> done) override {
    proto::TrimRequest req{std::string(user), before, write_id};
    Send(Op::kTrim, req, Decoding<TrimResult>(Op::kTrim, std::move(done), Identity<TrimResult>()));
  }

  void Delete(std::string_view user, const WriteId& write_id, Callback<bool> done) override {
    proto::DeleteRequest req{std::string(user), write_id};
    Send(Op::kDelete, req,
         Decoding<proto::DeleteResponse>(Op::kDelete, std::move(done),
                                         [](proto::DeleteResponse r) { return r.deleted; }));
  }

  void Expire(std::string_view user, std::span<const uint64_t> ids, const ExpireSpec& expiry,
              const WriteId& write_id, Callback<ExpireResult> done) override {
    proto::ExpireRequest req{std::string(user), std::vector<uint64_t>(ids.begin(), ids.end()),
                             expiry.value,      expiry.ttl,
                             expiry.condition,  write_id};
    Send(Op::kExpire, req,
         Decoding<proto::ExpireResponse>(Op::kExpire, std::move(done), Identity<ExpireResult>()));
  }

  void Link(std::string_view user, std::string_view master, uint32_t ttl,
            Callback<LinkResult> done) override {
    proto::LinkRequest req{std::string(user), std::string(master), ttl, WriteId{}};
    Send(Op::kLink, req,
         Decoding<proto::LinkResponse>(Op::kLink, std::move(done), Identity<LinkResult>()));
  }

  void Unlink(std::string_view user, Callback<bool> done) override {
    proto::UnlinkRequest req{std::string(user), WriteId{}};
    Send(Op::kUnlink, req,
         Decoding<proto::UnlinkResponse>(Op::kUnlink, std::move(done),
                                         [](proto::UnlinkResponse r) { return r.unlinked; }));
  }

  void MasterOf(std::string_view user, Callback<std::string> done) override {
    proto::MasterOfRequest req{std::string(user)};
    Send(Op::kMasterOf, req,
         Decoding<proto::MasterOfResponse>(
             Op::kMasterOf, std::move(done),
             [](proto::MasterOfResponse r) { return std::move(r.master); }));
  }

  void Links(std::string_view user, std::string_view cursor, uint32_t limit,
             Callback<LinksPage> done) override {
    proto::LinksRequest req{std::string(user), std::string(cursor), limit};
    Send(Op::kLinks, req,
         Decoding<proto::LinksResponse>(Op::kLinks, std::move(done), Identity<LinksPage>()));
  }

  void Connected(std::string_view a, std::string_view b, Callback<bool> done) override {
    proto::ConnectedRequest req{std::string(a), std::string(b)};
    Send(
        Op::kConnected, req,
        Decoding<proto::ConnectedResponse>(Op::kConnected, std::move(done),
                                           [](proto::ConnectedResponse r) { return r.connected; }));
  }

  void FieldSet(std::string_view user, std::span<const FieldUpdate> fields, const WriteId& write_id,
                Callback<FieldWriteResult> done) override {
    proto::FieldSetRequest req{std::string(user),
                               std::vector<FieldUpdate>(fields.begin(), fields.end()), write_id};
    Send(Op::kFieldSet, req,
         Decoding<proto::FieldWriteResponse>(Op::kFieldSet, std::move(done),
                                             Identity<FieldWriteResult>()));
  }

  void FieldDelete(std::string_view user, std::span<const std::string> names,
                   const WriteId& write_id, Callback<FieldWriteResult> done) override {
    proto::FieldDeleteRequest req{std::string(user),
                                  std::vector<std::string>(names.begin(), names.end()), write_id};
    Send(Op::kFieldDelete, req,
         Decoding<proto::FieldWriteResponse>(Op::kFieldDelete, std::move(done),
                                             Identity<FieldWriteResult>()));
  }

  void FieldIncrement(std::string_view user, const segstore::FieldIncrement& increment,
                      const WriteId& write_id, Callback<IncrementResult> done) override {
    proto::FieldIncrementRequest req{std::string(user), increment, write_id};
    Send(Op::kFieldIncrement, req,
         Decoding<proto::FieldIncrementResponse>(Op::kFieldIncrement, std::move(done),
                                                 Identity<IncrementResult>()));
  }

  void FieldMax(std::string_view user, const FieldUpdate& field, const WriteId& write_id,
                Callback<FieldMaxResult> done) override {
    proto::FieldMaxRequest req{std::string(user), field, write_id};
    Send(Op::kFieldMax, req,
         Decoding<proto::FieldMaxResponse>(Op::kFieldMax, std::move(done),
                                           Identity<FieldMaxResult>()));
  }

  void SendLinkStep(const LinkStep& step, const WriteId& write_id,
                    Callback<LinkStepResult> done) override {
    proto::LinkStepRequest req{step, write_id};
    Send(Op::kLinkStep, req,
         Decoding<proto::LinkStepResponse>(Op::kLinkStep, std::move(done),
                                           Identity<LinkStepResult>()));
  }

  void ReadRecords(std::span<const std::string> users,
                   Callback<std::vector<Result<StoredRecord>>> done) override {
    proto::ReadRecordsRequest req{std::vector<std::string>(users.begin(), users.end())};
    Send(Op::kReadRecords, req,
         Decoding<proto::ReadRecordsResponse>(Op::kReadRecords, std::move(done),
                                              Identity<proto::ReadRecordsResponse>()));
  }

  void CopyPartition(const CopyPartitionRequest& request,
                     Callback<CopyPartitionResponse> done) override {
    Send(Op::kCopyPartition, request,
         Decoding<CopyPartitionResponse>(Op::kCopyPartition, std::move(done),
                                         Identity<CopyPartitionResponse>()));
  }

  void Scan(const ScanRequest& request, Callback<ScanResponse> done) override {
    Connection* conn = conn_.get();
    Send(Op::kScan, request, Decoding<ScanResponse>(Op::kScan, std::move(done), [conn](ScanResponse r) {
           r.stale = (conn->answer_flags() & proto::kFlagStale) != 0;
           return r;
         }));
  }

  void Close() override { conn_->Close(); }

 private:
  template <typename Request>
  void Send(Op op, const Request& req, Completion complete) {
    conn_->Send(
        op, [&req](std::string* out) { proto::Encode(req, out); }, std::move(complete));
  }

  std::shared_ptr<Connection> conn_;
};

}  // namespace

// ---- addresses ----

Status ParseServerAddress(std::string_view text, ClientOptions* options) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("server address \"" + std::string(text) + "\": " +
                                   std::string(why) + " (expected host:port or [v6]:port)");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("no ']' after an IPv6 address");
    host = text.substr(1, close - 1);
    if (host.empty()) return bad("empty host");
    for (char c : host) {
      const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!hex && c != ':' && c != '.') return bad("not an IPv6 address");
    }
    if (host.find(':') == std::string_view::npos) return bad("not an IPv6 address");
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("no port");
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.empty()) return bad("empty host");
    if (host.find(':') != std::string_view::npos) return bad("an IPv6 address needs [brackets]");
    for (char c : host) {
      if (!IsHostChar(c)) return bad("bad character in host");
    }
  }
  if (port.empty()) return bad("no port");
  if (port.size() > 5) return bad("port out of range");
  uint32_t value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad("port is not a number");
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value == 0 || value > 65535) return bad("port out of range");
  options->host = std::string(host);
  options->port = static_cast<uint16_t>(value);
  return Status::OK();
}

std::string FormatServerAddress(std::string_view host, uint16_t port) {
  std::string s;
  if (host.find(':') != std::string_view::npos) {
    s = "[" + std::string(host) + "]";
  } else {
    s = std::string(host);
  }
  s += ":";
  s += std::to_string(port);
  return s;
}

// ---- AsyncClient ----

void AsyncClient::Connect(boost::asio::io_context& io, const ClientOptions& options,
                          Callback<std::unique_ptr<AsyncClient>> done) {
  auto conn = std::make_shared<Connection>(io, options);
  // The connection holds `done` until it runs, so the lambda must not hold
  // the connection (a cycle if the io_context is destroyed first); the
  // connection runs it, so it is alive then.
  Connection* raw = conn.get();
  conn->Start([raw, done = std::move(done)](const Status& status) {
    if (!status.ok()) {
      done(status);
      return;
    }
    done(std::unique_ptr<AsyncClient>(new AsyncClientImpl(raw->shared_from_this())));
  });
}

// ---- Client ----

struct Client::Impl {
  boost::asio::io_context io;
  std::unique_ptr<AsyncClient> async;  // declared after io: destroyed before it

  // Starts an operation through `start(callback)` and runs the io_context
  // until its callback has run.
  template <typename T, typename Start>
  Result<T> Wait(Start&& start) {
    std::optional<Result<T>> out;
    start([&out](Result<T> r) { out.emplace(std::move(r)); });
    io.restart();
    while (!out) {
      // Something is always pending while a callback is owed: a read, a
      // timer or a posted failure.
      if (io.run_one() == 0 && !out) {
        return Status::Internal("client: io_context ran out of work before an answer");
      }
    }
    return std::move(*out);
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  boost::asio::io_context& io = impl->io;
  Result<std::unique_ptr<AsyncClient>> r =
      impl->Wait<std::unique_ptr<AsyncClient>>([&](Callback<std::unique_ptr<AsyncClient>> cb) {
        AsyncClient::Connect(io, options, std::move(cb));
      });
  if (!r.ok()) return r.status();
  impl->async = std::move(r).value();
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const ServerInfo& Client::server_info() const { return impl_->async->server_info(); }
const std::string& Client::server_address() const { return impl_->async->server_address(); }
bool Client::is_open() const {
  // The connection's reads run only inside calls: let a close the server
  // made since the last call be seen first.
  impl_->io.restart();
  impl_->io.poll();
  return impl_->async->is_open();
}

Result<ServerInfo> Client::Hello() {
  return impl_->Wait<ServerInfo>([&](Callback<ServerInfo> cb) { impl_->async->Hello(cb); });
}

Status Client::Ping() {
  return impl_->Wait<std::monostate>([&](Callback<std::monostate> cb) { impl_->async->Ping(cb); })
      .status();
}

Result<segstore::Stats> Client::Stats() {
  return impl_->Wait<segstore::Stats>(
      [&](Callback<segstore::Stats> cb) { impl_->async->Stats(cb); });
}

Result<segstore::ClusterMap> Client::ClusterMap() {
  return impl_->Wait<segstore::ClusterMap>(
      [&](Callback<segstore::ClusterMap> cb) { impl_->async->ClusterMap(cb); });
}

Result<GetResult> Client::Get(std::string_view user, const GetOptions& options) {
  return impl_->Wait<GetResult>(
      [&](Callback<GetResult> cb) { impl_->async->Get(user, options, cb); });
}

Result<BatchGetResult> Client::BatchGet(std::span<const std::string> users,
                                        const GetOptions& options) {
  return impl_->Wait<BatchGetResult>(
      [&](Callback<BatchGetResult> cb) { impl_->async->BatchGet(users, options, cb); });
}

Result<uint32_t> Client::Count(std::string_view user, uint64_t id_from, uint64_t id_to) {
  return impl_->Wait<uint32_t>(
      [&](Callback<uint32_t> cb) { impl_->async->Count(user, id_from, id_to, cb); });
}

Result<UpsertResult> Client::Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                                    UpsertMode mode, const WriteId& write_id) {
  return Upsert(user, segments, UpsertOptions{mode}, write_id);
}

Result<UpsertResult> Client::Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                                    const UpsertOptions& how, const WriteId& write_id) {
  return impl_->Wait<UpsertResult>(
      [&](Callback<UpsertResult> cb) { impl_->async->Upsert(user, segments, how, write_id, cb); });
}

Result<BatchUpsertResult> Client::BatchUpsert(std::span<const UpsertItem> items) {
  return impl_->Wait<BatchUpsertResult>(
      [&](Callback<BatchUpsertResult> cb) { impl_->async->BatchUpsert(items, cb); });
}

Result<uint32_t> Client::Remove(std::string_view user, std::span<const uint64_t> ids,
                                const WriteId& write_id) {
  return impl_->Wait<uint32_t>(
      [&](Callback<uint32_t> cb) { impl_->async->Remove(user, ids, write_id, cb); });
}

Result<TrimResult> Client::Trim(std::string_view user, UnixSeconds before,
                                const WriteId& write_id) {
  return impl_->Wait<TrimResult>(
      [&](Callback<TrimResult> cb) { impl_->async->Trim(user, before, write_id, cb); });
}

Result<bool> Client::Delete(std::string_view user, const WriteId& write_id) {
  return impl_->Wait<bool>([&](Callback<bool> cb) { impl_->async->Delete(user, write_id, cb); });
}

Result<ExpireResult> Client::Expire(std::string_view user, std::span<const uint64_t> ids,
                                    const ExpireSpec& expiry, const WriteId& write_id) {
  return impl_->Wait<ExpireResult>(
      [&](Callback<ExpireResult> cb) { impl_->async->Expire(user, ids, expiry, write_id, cb); });
}

Result<CopyPartitionResponse> Client::CopyPartition(const CopyPartitionRequest& request) {
  return impl_->Wait<CopyPartitionResponse>(
      [&](Callback<CopyPartitionResponse> cb) { impl_->async->CopyPartition(request, cb); });
}

Result<ScanResponse> Client::Scan(const ScanRequest& request) {
  return impl_->Wait<ScanResponse>(
      [&](Callback<ScanResponse> cb) { impl_->async->Scan(request, cb); });
}

Result<LinkStepResult> Client::SendLinkStep(const LinkStep& step, const WriteId& write_id) {
  return impl_->Wait<LinkStepResult>(
      [&](Callback<LinkStepResult> cb) { impl_->async->SendLinkStep(step, write_id, cb); });
}

Result<std::vector<Result<StoredRecord>>> Client::ReadRecords(std::span<const std::string> users) {
  return impl_->Wait<std::vector<Result<StoredRecord>>>(
      [&](Callback<std::vector<Result<StoredRecord>>> cb) {
        impl_->async->ReadRecords(users, cb);
      });
}

Result<FieldWriteResult> Client::FieldSet(std::string_view user,
                                          std::span<const FieldUpdate> fields,
                                          const WriteId& write_id) {
  return impl_->Wait<FieldWriteResult>(
      [&](Callback<FieldWriteResult> cb) { impl_->async->FieldSet(user, fields, write_id, cb); });
}

Result<FieldWriteResult> Client::FieldDelete(std::string_view user,
                                             std::span<const std::string> names,
                                             const WriteId& write_id) {
  return impl_->Wait<FieldWriteResult>(
      [&](Callback<FieldWriteResult> cb) { impl_->async->FieldDelete(user, names, write_id, cb); });
}

Result<IncrementResult> Client::FieldIncrement(std::string_view user,
                                               const segstore::FieldIncrement& increment,
                                               const WriteId& write_id) {
  return impl_->Wait<IncrementResult>([&](Callback<IncrementResult> cb) {
    impl_->async->FieldIncrement(user, increment, write_id, cb);
  });
}

Result<FieldMaxResult> Client::FieldMax(std::string_view user, const FieldUpdate& field,
                                        const WriteId& write_id) {
  return impl_->Wait<FieldMaxResult>(
      [&](Callback<FieldMaxResult> cb) { impl_->async->FieldMax(user, field, write_id, cb); });
}

Result<LinkResult> Client::Link(std::string_view user, std::string_view master, uint32_t ttl) {
  return impl_->Wait<LinkResult>(
      [&](Callback<LinkResult> cb) { impl_->async->Link(user, master, ttl, cb); });
}

Result<bool> Client::Unlink(std::string_view user) {
  return impl_->Wait<bool>([&](Callback<bool> cb) { impl_->async->Unlink(user, cb); });
}

Result<std::string> Client::MasterOf(std::string_view user) {
  return impl_->Wait<std::string>(
      [&](Callback<std::string> cb) { impl_->async->MasterOf(user, cb); });
}

Result<LinksPage> Client::Links(std::string_view user, std::string_view cursor, uint32_t limit) {
  return impl_->Wait<LinksPage>(
      [&](Callback<LinksPage> cb) { impl_->async->Links(user, cursor, limit, cb); });
}

Result<bool> Client::Connected(std::string_view a, std::string_view b) {
  return impl_->Wait<bool>([&](Callback<bool> cb) { impl_->async->Connected(a, b, cb); });
}

}  // namespace segstore::client
