#include "client/connection.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

namespace segstore::client::internal {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr size_t kReadSize = 64 << 10;
constexpr size_t kKeepReadBuffer = 1 << 20;  // an idle read buffer over this is given back
constexpr size_t kMaxRememberedTimeouts = 1 << 16;

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

// The context of one TLS connection; InvalidArgument naming a file that
// cannot be used.
Status MakeTlsContext(const TlsClientOptions& o, std::unique_ptr<asio::ssl::context>* out) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  if (o.ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
    if (ec) return Status::InvalidArgument("TLS: the system's trust store: " + ec.message());
  } else if (ctx->load_verify_file(o.ca_file, ec); ec) {
    return Status::InvalidArgument("TLS CA file " + o.ca_file + ": " + ec.message());
  }
  if (!o.cert_file.empty() || !o.key_file.empty()) {
    if (o.cert_file.empty() || o.key_file.empty()) {
      return Status::InvalidArgument("TLS: a client certificate needs both its file and its key");
    }
    if (ctx->use_certificate_chain_file(o.cert_file, ec); ec) {
      return Status::InvalidArgument("TLS certificate file " + o.cert_file + ": " + ec.message());
    }
    if (ctx->use_private_key_file(o.key_file, asio::ssl::context::pem, ec); ec) {
      return Status::InvalidArgument("TLS key file " + o.key_file + ": " + ec.message());
    }
  }
  ctx->set_verify_mode(o.verify ? asio::ssl::verify_peer : asio::ssl::verify_none);
  *out = std::move(ctx);
  return Status::OK();
}

}  // namespace

Connection::Connection(asio::io_context& io, const ClientOptions& options)
    : io_(io),
      options_(options),
      address_(FormatServerAddress(options.host, options.port)),
      resolver_(io),
      socket_(io),
      connect_timer_(io),
      timer_(io),
      in_(kReadSize, kKeepReadBuffer, proto::kMaxResponseBytes) {}

Connection::~Connection() = default;

std::string Connection::Context(uint8_t op) const {
  std::string s(proto::OpName(op));
  s += " to ";
  s += address_;
  return s;
}

// ---- connecting ----

void Connection::Start(std::function<void(const Status&)> done) {
  start_done_ = std::move(done);
  auto self = shared_from_this();
  const TlsClientOptions& tls = options_.tls;
  if (!tls.enabled && (!tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty() ||
                       !tls.server_name.empty())) {
    // Never fall back to plain TCP when TLS was meant.
    asio::post(io_, [self] {
      self->FinishStart(Status::InvalidArgument("connect to " + self->address_ +
                                                ": TLS files or a server name are set but "
                                                "tls.enabled is false"));
    });
    return;
  }
  if (options_.connect_timeout.count() > 0) {
    connect_timer_.expires_after(options_.connect_timeout);
    connect_timer_.async_wait(
        [self](const boost::system::error_code& ec) { self->OnConnectTimer(ec); });
  }
  resolver_.async_resolve(
      options_.host, std::to_string(options_.port),
      [self](const boost::system::error_code& ec, const tcp::resolver::results_type& endpoints) {
        self->OnResolved(ec, endpoints);
      });
}

void Connection::FinishStart(const Status& status) {
  if (!start_done_) return;
  auto done = std::move(start_done_);
  start_done_ = nullptr;
  connect_timer_.cancel();
  if (!status.ok()) Shutdown(static_cast<uint8_t>(Status::Code::kUnavailable), "connect failed");
  done(status);
}

void Connection::OnConnectTimer(const boost::system::error_code& ec) {
  if (ec == asio::error::operation_aborted || !start_done_) return;
  FinishStart(Status::Timeout("connect to " + address_ + ": " +
                              (connected_ ? "no hello answer" : "no connection") + " within " +
                              Ms(options_.connect_timeout)));
}

void Connection::OnResolved(const boost::system::error_code& ec,
                            const tcp::resolver::results_type& endpoints) {
  if (!start_done_ || closed_) return;
  if (ec) {
    FinishStart(
        Status::Unavailable("connect to " + address_ + ": cannot resolve host: " + ec.message()));
    return;
  }
  auto self = shared_from_this();
  asio::async_connect(socket_, endpoints,
                      [self](const boost::system::error_code& cec, const tcp::endpoint&) {
                        self->OnConnected(cec);
                      });
}

void Connection::OnConnected(const boost::system::error_code& ec) {
  if (!start_done_ || closed_) return;
  if (ec) {
    FinishStart(Status::Unavailable("connect to " + address_ + ": " + ec.message()));
    return;
  }
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  if (!options_.tls.enabled) {
    Established();
    return;
  }
  if (Status s = MakeTlsContext(options_.tls, &tls_context_); !s.ok()) {
    FinishStart(s.WithContext("connect to " + address_));
    return;
  }
  tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, *tls_context_);
  const std::string& name =
      options_.tls.server_name.empty() ? options_.host : options_.tls.server_name;
  if (options_.tls.verify) tls_->set_verify_callback(asio::ssl::host_name_verification(name));
  boost::system::error_code not_ip;
  (void)asio::ip::make_address(name, not_ip);
  if (not_ip) {  // SNI carries names only (SSL_set_tlsext_host_name, without its C cast)
    SSL_ctrl(tls_->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(name.c_str()));
  }
  tls_->async_handshake(asio::ssl::stream_base::client,
                        [self = shared_from_this()](const boost::system::error_code& hec) {
                          self->OnHandshake(hec);
                        });
}

void Connection::OnHandshake(const boost::system::error_code& ec) {
  if (!start_done_ || closed_) return;
  if (ec) {
    std::string why = ec.message();
    if (tls_) {
      const long verify = SSL_get_verify_result(tls_->native_handle());
      if (verify != X509_V_OK) {
        why += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
      }
    }
    FinishStart(Status::Unavailable("connect to " + address_ + ": TLS handshake failed: " + why));
    return;
  }
  Established();
}

void Connection::Established() {
  connected_ = true;
  StartRead();
  if (!options_.hello && options_.auth_secret.empty()) {
    FinishStart(Status::OK());
    return;
  }
  proto::HelloRequest hello{options_.client_name, options_.auth_secret};
  Send(
      proto::Op::kHello, [&](std::string* out) { proto::Encode(hello, out); },
      // The connection runs this completion itself, so `this` is alive.
      [this](const Status& status, std::string_view body, const Connection&) {
        if (!status.ok()) {
          FinishStart(status);
          return;
        }
        ServerInfo info;
        const proto::DecodeLimits limits{UINT32_MAX, UINT32_MAX, UINT32_MAX};
        Status st = proto::Decode(body, limits, &info);
        if (!st.ok()) {
          FinishStart(Status::Corruption(Context(static_cast<uint8_t>(proto::Op::kHello)) +
                                         ": bad response body: " + st.ToString()));
          return;
        }
        server_info_ = std::move(info);
        FinishStart(Status::OK());
      });
}

// ---- sending ----

uint32_t Connection::NextId() {
  for (;;) {
    const uint32_t id = next_id_++;
    if (next_id_ == 0) next_id_ = 1;  // 0 is the server's, for connection-level errors
    if (id != 0 && !pending_.contains(id) && !timed_out_.contains(id)) return id;
  }
}

void Connection::Track(uint32_t id, uint8_t op, Completion complete) {
  pending_.emplace(id, Pending{op, std::move(complete)});
  if (options_.request_timeout.count() > 0) {
    deadlines_.emplace_back(Clock::now() + options_.request_timeout, id);
    ArmTimer();
  }
}

void Connection::PostFailure(Completion complete, Status status) {
  asio::post(io_, [self = shared_from_this(), complete = std::move(complete),
                   status = std::move(status)]() { complete(status, {}, *self); });
}

void Connection::Flush() {
  if (write_in_progress_ || out_.empty() || closed_) return;
  write_in_progress_ = true;
  std::swap(out_, writing_);
  auto on_written = [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                      self->write_in_progress_ = false;
                      if (self->closed_) return;
                      if (ec) {
                        self->Break("write failed: " + ec.message());
                        return;
                      }
                      self->writing_.clear();
                      self->Flush();
  };
  if (tls_) {
    asio::async_write(*tls_, asio::buffer(writing_), std::move(on_written));
  } else {
    asio::async_write(socket_, asio::buffer(writing_), std::move(on_written));
  }
}

// ---- receiving ----

void Connection::StartRead() {
  auto on_read = [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
    self->OnRead(ec, n);
  };
  in_.Shrink();
  const auto space = in_.Space();
  const auto buffer = asio::buffer(space.data, space.size);
  if (tls_) {
    tls_->async_read_some(buffer, std::move(on_read));
  } else {
    socket_.async_read_some(buffer, std::move(on_read));
  }
}

void Connection::OnRead(const boost::system::error_code& ec, size_t n) {
  if (closed_) return;
  if (ec) {
    // A server closes TLS connections without a close_notify: the same as EOF.
    const bool closed = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
    Break(closed ? std::string("closed by the server") : "read failed: " + ec.message());
    return;
  }
  in_.Commit(n);
  if (!ParseFrames()) return;
  StartRead();
}

bool Connection::ParseFrames() {
  for (;;) {
    proto::FrameHeader h;
    std::string_view body;
    switch (in_.Take(proto::kMaxResponseBytes, &h, &body)) {
      case proto::FrameBuffer::Next::kNeedMore:
        // A header of another version breaks the stream at once, without
        // waiting for its body.
        if (in_.unread().size() >= proto::kHeaderSize && h.version != proto::kVersion) break;
        return true;
      case proto::FrameBuffer::Next::kBadMagic: {
        const auto* p = reinterpret_cast<const uint8_t*>(in_.unread().data());
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x%02x", p[0], p[1]);
        Break(std::string("bad magic ") + hex + " in a response header");
        return false;
      }
      case proto::FrameBuffer::Next::kTooLarge:
        Break("response body of " + std::to_string(h.body_length) + " bytes, over the limit of " +
              std::to_string(proto::kMaxResponseBytes));
        return false;
      case proto::FrameBuffer::Next::kFrame:
        break;
    }
    if (h.version != proto::kVersion) {
      Break("response in protocol version " + std::to_string(h.version) + "; this client speaks " +
            std::to_string(proto::kVersion));
      return false;
    }
    // The frame is consumed before its completion runs, whatever that does.
    HandleFrame(h, body);
    // A completion may have closed the connection (or destroyed the facade;
    // the read handler still holds this alive). Nothing it can call reads
    // into in_, so the bodies stay where they are.
    if (closed_) return false;
  }
}

void Connection::HandleFrame(const proto::FrameHeader& h, std::string_view body) {
  if (h.request_id == 0) {
    // The server's connection-level error: it is closing the connection.
    if (h.status == 0) {
      Break("a frame for request id 0 without an error status");
      return;
    }
    Shutdown(h.status, "server closed the connection: " + proto::DecodeError(body));
    return;
  }
  auto it = pending_.find(h.request_id);
  if (it == pending_.end()) {
    if (timed_out_.erase(h.request_id) != 0) return;  // a late answer: its caller has moved on
    Break("an answer to request id " + std::to_string(h.request_id) + ", which is not in flight");
    return;
  }
  if (it->second.op != h.op) {
    Break("the answer to request id " + std::to_string(h.request_id) + " is for op " +
          std::string(proto::OpName(h.op)) + ", not " + std::string(proto::OpName(it->second.op)));
    return;
  }
  Completion complete = std::move(it->second.complete);
  pending_.erase(it);
  while (!deadlines_.empty() && !pending_.contains(deadlines_.front().second)) {
    deadlines_.pop_front();
  }
  answer_flags_ = h.flags;
  if (h.status == 0) {
    complete(Status::OK(), body, *this);
  } else {
    complete(Status::FromCode(h.status, Context(h.op) + ": " + proto::DecodeError(body)), {},
             *this);
  }
  answer_flags_ = 0;
}

// ---- deadlines ----

void Connection::ArmTimer() {
  if (timer_armed_ || deadlines_.empty() || closed_) return;
  timer_armed_ = true;
  timer_.expires_at(deadlines_.front().first);
  timer_.async_wait(
      [self = shared_from_this()](const boost::system::error_code& ec) { self->OnTimer(ec); });
}

void Connection::OnTimer(const boost::system::error_code&) {
  timer_armed_ = false;
  if (closed_) return;
  const auto now = Clock::now();
  while (!deadlines_.empty()) {
    const auto [when, id] = deadlines_.front();
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      deadlines_.pop_front();
      continue;
    }
    if (when > now) break;
    deadlines_.pop_front();
    Pending p = std::move(it->second);
    pending_.erase(it);
    RememberTimedOut(id);
    p.complete(
        Status::Timeout(Context(p.op) + ": no answer within " + Ms(options_.request_timeout)), {},
        *this);
    if (closed_) return;
  }
  ArmTimer();
}

void Connection::RememberTimedOut(uint32_t id) {
  timed_out_.insert(id);
  timed_out_order_.push_back(id);
  if (timed_out_order_.size() > kMaxRememberedTimeouts) {
    timed_out_.erase(timed_out_order_.front());
    timed_out_order_.pop_front();
  }
}

// ---- closing ----

void Connection::Break(std::string_view why) {
  Shutdown(static_cast<uint8_t>(Status::Code::kUnavailable),
           "connection broken: " + std::string(why));
}

void Connection::Shutdown(uint8_t code, std::string why) {
  if (closed_) return;
  closed_ = true;
  close_reason_ = why;
  boost::system::error_code ignored;
  resolver_.cancel();
  connect_timer_.cancel();
  timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  deadlines_.clear();
  timed_out_.clear();
  timed_out_order_.clear();
  out_.clear();

  // Fail in the order sent; a completion may start calls (they fail, posted)
  // or close again (a no-op).
  auto pending = std::move(pending_);
  pending_.clear();
  std::vector<std::pair<uint32_t, Pending>> order(std::make_move_iterator(pending.begin()),
                                                  std::make_move_iterator(pending.end()));
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [id, p] : order) {
    p.complete(Status::FromCode(code, Context(p.op) + ": " + why), {}, *this);
  }
}

}  // namespace segstore::client::internal
