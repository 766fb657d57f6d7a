#include "server/admin.h"

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <optional>
#include <thread>

#include "segstore/result.h"
#include "server/listen.h"

namespace segstore::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
constexpr size_t kMaxHeaderBytes = 8 * 1024;
constexpr size_t kMaxBodyBytes = 1024;  // requests carry none; a little is tolerated
}  // namespace

class AdminServer::Impl {
 public:
  Impl(const AdminOptions& options, AdminHandlers handlers)
      : options_(options), handlers_(std::move(handlers)) {}

  Status Start();
  void Stop();
  void Accept();
  http::response<http::string_body> Respond(const http::request<http::string_body>& req) const;

  AdminOptions options_;
  AdminHandlers handlers_;
  int sessions_ = 0;  // open sessions; admin thread only (declared before io_: outlives it)
  uint16_t port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
  asio::io_context io_{1};
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::thread thread_;
};

namespace {

// One HTTP connection: read a request, answer it, and again while the client
// keeps the connection alive. Runs on the admin thread only.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(AdminServer::Impl* server, tcp::socket socket)
      : server_(server), stream_(std::move(socket)), buffer_(kMaxHeaderBytes) {
    ++server_->sessions_;
  }
  ~Session() { --server_->sessions_; }

  void Read() {
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(kMaxBodyBytes);
    stream_.expires_after(server_->options_.io_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](const error_code& ec, size_t) {
                       self->OnRead(ec);
                     });
  }

 private:
  void OnRead(const error_code& ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::eof ||
        ec == asio::error::connection_reset) {
      Close();
      return;
    }
    if (ec) {
      // Malformed or oversize: say so, then close.
      res_ = {};
      res_.result(ec == http::error::header_limit || ec == http::error::body_limit
                      ? http::status::payload_too_large
                      : http::status::bad_request);
      res_.version(11);
      res_.set(http::field::content_type, "text/plain; charset=utf-8");
      res_.body() = "bad request: " + ec.message() + "\n";
      res_.keep_alive(false);
      res_.prepare_payload();
      Write();
      return;
    }
    const http::request<http::string_body>& req = parser_->get();
    res_ = server_->Respond(req);
    Write();
  }

  void Write() {
    stream_.expires_after(server_->options_.io_timeout);
    http::async_write(stream_, res_, [self = shared_from_this()](const error_code& ec, size_t) {
      if (ec || !self->res_.keep_alive()) {
        self->Close();
        return;
      }
      self->Read();
    });
  }

  void Close() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  AdminServer::Impl* server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
};

}  // namespace

http::response<http::string_body> AdminServer::Impl::Respond(
    const http::request<http::string_body>& req) const {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(req.keep_alive());
  res.set(http::field::server, "segstored");
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.set(http::field::cache_control, "no-store");
  const bool head = req.method() == http::verb::head;
  const beast::string_view target = req.target();
  const beast::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics" && path != "/health" && path != "/ready") {
    res.result(http::status::not_found);
    res.body() = "not found; try /metrics, /health or /ready\n";
  } else if (req.method() != http::verb::get && !head) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET, HEAD");
    res.body() = "only GET and HEAD\n";
  } else if (path == "/metrics") {
    res.result(http::status::ok);
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = handlers_.metrics ? handlers_.metrics() : std::string();
  } else if (path == "/health") {
    const bool live = !handlers_.live || handlers_.live();
    res.result(live ? http::status::ok : http::status::service_unavailable);
    res.body() = live ? "ok\n" : "an event loop is stuck\n";
  } else {
    const std::string why = handlers_.not_ready ? handlers_.not_ready() : std::string();
    res.result(why.empty() ? http::status::ok : http::status::service_unavailable);
    res.body() = why.empty() ? std::string("ready\n") : why + "\n";
  }
  res.prepare_payload();
  if (head) res.body().clear();  // Content-Length stays that of the GET answer
  return res;
}

Status AdminServer::Impl::Start() {
  if (started_) return Status::InvalidArgument("admin server already started");
  acceptor_ = std::make_unique<tcp::acceptor>(io_);
  SEGSTORE_RETURN_IF_ERROR(Listen(acceptor_.get(), options_.host, options_.port, "admin listen"));
  port_ = acceptor_->local_endpoint().port();
  started_ = true;
  Accept();
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "segstore-admin");
    io_.run();
  });
  return Status::OK();
}

void AdminServer::Impl::Accept() {
  acceptor_->async_accept([this](const error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
    if (!ec) {
      if (sessions_ >= options_.max_connections) {
        error_code ignored;
        socket.close(ignored);  // a scraper or probe retries; nothing is lost
      } else {
        std::make_shared<Session>(this, std::move(socket))->Read();
      }
    } else {
      spdlog::warn("admin endpoint: accept failed: {}", ec.message());
    }
    Accept();
  });
}

void AdminServer::Impl::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  asio::post(io_, [this] {
    error_code ignored;
    acceptor_->close(ignored);
    io_.stop();
  });
  thread_.join();
}

AdminServer::AdminServer(const AdminOptions& options, AdminHandlers handlers)
    : impl_(std::make_unique<Impl>(options, std::move(handlers))) {}
AdminServer::~AdminServer() { Stop(); }
Status AdminServer::Start() { return impl_->Start(); }
void AdminServer::Stop() { impl_->Stop(); }
uint16_t AdminServer::port() const { return impl_->port_; }
std::string AdminServer::endpoint() const {
  return impl_->options_.host + ":" + std::to_string(impl_->port_);
}

}  // namespace segstore::server
