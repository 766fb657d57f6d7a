#include "cluster/etcd_client.h"

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <openssl/evp.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

namespace segstore::cluster {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;
using Json = nlohmann::json;

namespace {

constexpr size_t kMaxAnswerBytes = 64 << 20;

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> FromBase64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() >= 2 && text[text.size() - 2] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

// The gateway writes 64-bit integers as strings and leaves out zero values.
int64_t Int(const Json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) return std::stoll(it->get<std::string>());
  throw std::runtime_error(std::string(name) + " is not an integer");
}

std::string Bytes(const Json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  std::optional<std::string> b = FromBase64(it->get<std::string>());
  if (!b) throw std::runtime_error(std::string(name) + " is not base64");
  return *b;
}

KeyValue ReadKeyValue(const Json& j) {
  KeyValue kv;
  kv.key = Bytes(j, "key");
  kv.value = Bytes(j, "value");
  kv.create_revision = Int(j, "create_revision");
  kv.mod_revision = Int(j, "mod_revision");
  kv.lease = Int(j, "lease");
  return kv;
}

Json CompareJson(const Compare& c) {
  Json j;
  j["key"] = Base64(c.key);
  j["result"] = "EQUAL";
  if (c.target == Compare::Target::kCreate) {
    j["target"] = "CREATE";
    j["create_revision"] = std::to_string(c.revision);
  } else if (c.target == Compare::Target::kLease) {
    j["target"] = "LEASE";
    j["lease"] = std::to_string(c.revision);
  } else {
    j["target"] = "MOD";
    j["mod_revision"] = std::to_string(c.revision);
  }
  return j;
}

struct Endpoint {
  std::string host;
  std::string port;
  std::string text;
};

}  // namespace

struct EtcdClient::Impl {
  EtcdOptions options;
  std::vector<Endpoint> endpoints;
  size_t current = 0;
  std::mutex mu;
  // Replaced after an exception, so that handlers it left queued are
  // destroyed unrun (they would write into a finished call's locals).
  std::unique_ptr<asio::io_context> io = std::make_unique<asio::io_context>();
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  // POSTs `body` to `path` and parses the JSON answer.
  Result<Json> Call(const std::string& path, const Json& body);
  Result<Json> CallLocked(const std::string& path, const Json& body);
  Result<Json> CallOnce(const std::string& path, const std::string& body,
                        std::chrono::steady_clock::time_point deadline);
  // Each phase of a call (connect, write, read) ends by `deadline`.
  Status Connect(std::chrono::steady_clock::time_point deadline);
  void Disconnect() {
    if (stream) {
      error_code ignored;
      stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream.reset();
    }
    buffer.clear();
  }
  void NextEndpoint() {
    Disconnect();
    current = (current + 1) % endpoints.size();
  }
  // Runs the io_context until the operation started sets `done`. Every
  // operation on the stream is bounded by its expiry (expires_at), which
  // completes it with beast::error::timeout, so this always returns, and no
  // handler is ever left behind holding the caller's locals.
  void RunUntilDone(const bool& done) {
    io->restart();
    while (!done) io->run_one();
  }
};

Status EtcdClient::Impl::Connect(std::chrono::steady_clock::time_point deadline) {
  if (stream) return Status::OK();
  const Endpoint& e = endpoints[current];
  // Synchronous: endpoints are addresses or names in /etc/hosts in practice,
  // and this thread is the agent's, never the request path.
  tcp::resolver resolver(*io);
  error_code ec;
  tcp::resolver::results_type addresses = resolver.resolve(e.host, e.port, ec);
  if (ec) return Status::Unavailable("etcd " + e.text + ": " + ec.message());
  stream.emplace(*io);
  stream->expires_at(deadline);
  bool done = false;
  stream->async_connect(addresses, [&](error_code cec, const tcp::endpoint&) {
    ec = cec;
    done = true;
  });
  RunUntilDone(done);
  if (ec) {
    stream.reset();
    if (ec == beast::error::timeout) {
      return Status::Timeout("etcd " + e.text + ": no connection in time");
    }
    return Status::Unavailable("etcd " + e.text + ": " + ec.message());
  }
  stream->socket().set_option(tcp::no_delay(true), ec);
  return Status::OK();
}

Result<Json> EtcdClient::Impl::CallOnce(const std::string& path, const std::string& body,
                                        std::chrono::steady_clock::time_point deadline) {
  SEGSTORE_RETURN_IF_ERROR(Connect(deadline));
  const Endpoint& e = endpoints[current];
  http::request<http::string_body> req(http::verb::post, path, 11);
  req.set(http::field::host, e.host + ":" + e.port);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();

  error_code ec;
  bool done = false;
  stream->expires_at(deadline);
  http::async_write(*stream, req, [&](error_code wec, size_t) {
    ec = wec;
    done = true;
  });
  RunUntilDone(done);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxAnswerBytes);
  if (!ec) {
    done = false;
    stream->expires_at(deadline);
    http::async_read(*stream, buffer, parser, [&](error_code rec, size_t) {
      ec = rec;
      done = true;
    });
    RunUntilDone(done);
  }
  if (ec) {
    const bool timed_out = ec == beast::error::timeout;
    Disconnect();
    if (timed_out) return Status::Timeout("etcd " + e.text + path + ": no answer in time");
    return Status::Unavailable("etcd " + e.text + path + ": " + ec.message());
  }
  http::response<http::string_body> res = parser.release();
  if (!res.keep_alive()) Disconnect();
  Json j = Json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Internal("etcd " + e.text + path +
                            ": an answer that is not a JSON object (HTTP " +
                            std::to_string(res.result_int()) + ")");
  }
  // Unary calls put an error's text in "message" (and "error"); streaming
  // ones (lease keepalive) in {"error": {"grpc_code", "message", ...}}.
  const Json* error = nullptr;
  if (auto it = j.find("error"); it != j.end()) error = &*it;
  if (error != nullptr || res.result() != http::status::ok) {
    std::string message = "HTTP " + std::to_string(res.result_int());
    if (auto m = j.find("message"); m != j.end() && m->is_string()) {
      message = m->get<std::string>();
    } else if (error != nullptr && error->is_string()) {
      message = error->get<std::string>();
    } else if (error != nullptr && error->is_object()) {
      if (auto m2 = error->find("message"); m2 != error->end() && m2->is_string()) {
        message = m2->get<std::string>();
      }
    }
    if (message.find("requested lease not found") != std::string::npos) {
      return Status::NotFound("etcd: " + message);
    }
    return Status::Unavailable("etcd " + e.text + path + ": " + message);
  }
  return j;
}

Result<Json> EtcdClient::Impl::Call(const std::string& path, const Json& body) {
  std::lock_guard lock(mu);
  try {
    return CallLocked(path, body);
  } catch (const std::exception& e) {
    // Handlers may still be queued on the old io_context: drop them unrun.
    stream.reset();
    buffer.clear();
    io = std::make_unique<asio::io_context>();
    return Status::Internal(std::string("etcd ") + path + ": " + e.what());
  }
}

Result<Json> EtcdClient::Impl::CallLocked(const std::string& path, const Json& body) {
  const std::string text = body.dump();
  // A broken kept-alive connection (the endpoint restarted) is found only on
  // use: one fresh connection to the same endpoint before moving on.
  const bool had_connection = stream.has_value();
  // One deadline for the whole call, the retry below included.
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  Result<Json> r = CallOnce(path, text, deadline);
  if (!r.ok() && r.status().code() == Status::Code::kUnavailable && had_connection && !stream) {
    // The request may have reached etcd: only reads are repeated.
    if (path == "/v3/kv/range") r = CallOnce(path, text, deadline);
  }
  if (!r.ok() && (r.status().code() == Status::Code::kUnavailable ||
                  r.status().code() == Status::Code::kTimeout)) {
    if (!stream) NextEndpoint();
  }
  return r;
}

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(const EtcdOptions& options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd: no endpoint");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  for (const std::string& text : options.endpoints) {
    constexpr std::string_view kScheme = "http://";
    std::string_view rest = text;
    if (rest.substr(0, kScheme.size()) != kScheme) {
      return Status::InvalidArgument("etcd endpoint " + text +
                                     ": not http://host:port (https is not supported)");
    }
    rest.remove_prefix(kScheme.size());
    while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size()) {
      return Status::InvalidArgument("etcd endpoint " + text + ": not http://host:port");
    }
    std::string host(rest.substr(0, colon));
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    const std::string port(rest.substr(colon + 1));
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
        std::stoul(port) == 0 || std::stoul(port) > 65535) {
      return Status::InvalidArgument("etcd endpoint " + text + ": bad port");
    }
    impl->endpoints.push_back(Endpoint{host, port, std::string(rest)});
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

std::string EtcdClient::endpoint() const {
  std::lock_guard lock(impl_->mu);
  return "http://" + impl_->endpoints[impl_->current].text;
}

// Each answer is read inside a try: a field of the wrong type is an answer
// this client cannot read, not a crash.
#define SEGSTORE_ETCD_READ(expr)                                                                  \
  try {                                                                                           \
    expr;                                                                                         \
  } catch (const std::exception& e) {                                                             \
    return Status::Internal(std::string("etcd: an answer this client cannot read: ") + e.what()); \
  }

Result<int64_t> EtcdClient::Grant(int64_t ttl_seconds) {
  Json req;
  req["TTL"] = std::to_string(ttl_seconds);
  Result<Json> r = impl_->Call("/v3/lease/grant", req);
  if (!r.ok()) return r.status();
  const Json& j = *r;
  int64_t id = 0;
  SEGSTORE_ETCD_READ(id = Int(j, "ID"));
  if (id == 0) return Status::Internal("etcd: lease grant without an ID");
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  Json req;
  req["ID"] = std::to_string(lease);
  Result<Json> r = impl_->Call("/v3/lease/keepalive", req);
  if (!r.ok()) return r.status();
  const Json& j = *r;
  int64_t ttl = 0;
  SEGSTORE_ETCD_READ(ttl = Int(j.at("result"), "TTL"));
  if (ttl <= 0) return Status::NotFound("etcd: lease " + std::to_string(lease) + " expired");
  return ttl;
}

Status EtcdClient::Revoke(int64_t lease) {
  Json req;
  req["ID"] = std::to_string(lease);
  Result<Json> r = impl_->Call("/v3/lease/revoke", req);
  if (r.status().IsNotFound()) return Status::OK();
  return r.status();
}

Result<RangeResult> EtcdClient::Range(std::string_view key, bool prefix, int64_t min_mod_revision) {
  Json req;
  req["key"] = Base64(key);
  if (prefix) req["range_end"] = Base64(PrefixEnd(key));
  if (min_mod_revision > 0) req["min_mod_revision"] = std::to_string(min_mod_revision);
  Result<Json> r = impl_->Call("/v3/kv/range", req);
  if (!r.ok()) return r.status();
  const Json& j = *r;
  RangeResult out;
  SEGSTORE_ETCD_READ({
    out.revision = Int(j.at("header"), "revision");
    if (auto it = j.find("kvs"); it != j.end()) {
      for (const Json& kv : *it) out.kvs.push_back(ReadKeyValue(kv));
    }
  });
  return out;
}

Result<int64_t> EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  Json req;
  req["key"] = Base64(key);
  req["value"] = Base64(value);
  if (lease != 0) req["lease"] = std::to_string(lease);
  Result<Json> r = impl_->Call("/v3/kv/put", req);
  if (!r.ok()) return r.status();
  const Json& j = *r;
  int64_t revision = 0;
  SEGSTORE_ETCD_READ(revision = Int(j.at("header"), "revision"));
  return revision;
}

Status EtcdClient::Delete(std::string_view key, bool prefix) {
  Json req;
  req["key"] = Base64(key);
  if (prefix) req["range_end"] = Base64(PrefixEnd(key));
  return impl_->Call("/v3/kv/deleterange", req).status();
}

namespace {

// A transaction of `compares` and one request on success; whether it ran.
Result<bool> Txn(EtcdClient::Impl* impl, const std::vector<Compare>& compares, Json on_success) {
  Json req;
  req["compare"] = Json::array();
  for (const Compare& c : compares) req["compare"].push_back(CompareJson(c));
  req["success"] = Json::array({std::move(on_success)});
  Result<Json> r = impl->Call("/v3/kv/txn", req);
  if (!r.ok()) return r.status();
  bool succeeded = false;  // left out of the answer when false
  SEGSTORE_ETCD_READ({
    if (auto it = r->find("succeeded"); it != r->end()) succeeded = it->get<bool>();
  });
  return succeeded;
}

}  // namespace

Result<bool> EtcdClient::PutIf(const std::vector<Compare>& compares, std::string_view key,
                               std::string_view value, int64_t lease) {
  Json put;
  put["key"] = Base64(key);
  put["value"] = Base64(value);
  if (lease != 0) put["lease"] = std::to_string(lease);
  return Txn(impl_.get(), compares, Json{{"request_put", put}});
}

Result<bool> EtcdClient::DeleteIf(const std::vector<Compare>& compares, std::string_view key) {
  return Txn(impl_.get(), compares, Json{{"request_delete_range", Json{{"key", Base64(key)}}}});
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xFF) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key: etcd's "\0" range end
}

}  // namespace segstore::cluster
