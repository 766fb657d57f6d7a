#include "server/server.h"

#include <spdlog/spdlog.h>

#include <future>
#include <mutex>
#include <thread>

#include "proto/wire.h"
#include "server/connection.h"
#include "server/listen.h"
#include "server/resp_connection.h"
#include "server/security.h"

namespace segstore::server {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// Posts to one loop's io_context until the loop has stopped; drops after.
class AsioLoopPoster final : public LoopPoster {
 public:
  explicit AsioLoopPoster(asio::io_context* io) : io_(io) {}
  void Post(std::function<void()> task) override {
    std::lock_guard lock(mu_);
    if (io_ != nullptr) asio::post(*io_, std::move(task));
  }
  void Close() {
    std::lock_guard lock(mu_);
    io_ = nullptr;
  }

 private:
  std::mutex mu_;
  asio::io_context* io_;  // guarded by mu_; null once the loop stopped
};

namespace {
int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

class Server::Impl {
 public:
  Impl(const ServerOptions& options, Service* service) : options_(options), service_(service) {}

  Status Start();
  void Stop();
  Status ReloadCredentials();
  std::shared_ptr<const Credentials> credentials() const {
    std::lock_guard lock(credentials_mu_);
    return credentials_;
  }
  // Adds every loop's counters into *c, a fresh ServerCounters.
  void Counters(ServerCounters* c) const;
  bool LoopsAlive(std::chrono::milliseconds within);

  ServerOptions options_;
  Service* service_;
  std::vector<std::unique_ptr<Loop>> loops_;
  // The binary port's acceptor and the RESP port's (null when off).
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::unique_ptr<tcp::acceptor> resp_acceptor_;
  // Each acceptor's: a failed accept is tried again 100 ms later.
  std::unique_ptr<asio::steady_timer> accept_retry_;
  std::unique_ptr<asio::steady_timer> resp_accept_retry_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> accepted_{0};  // handed to a loop (counted by the acceptor)
  unsigned next_loop_ = 0;
  // What new connections use; replaced by ReloadCredentials.
  mutable std::mutex credentials_mu_;
  std::shared_ptr<const Credentials> credentials_;
  uint16_t port_ = 0;
  uint16_t resp_port_ = 0;
  bool started_ = false;
  bool stopped_ = false;

 private:
  void RunLoop(Loop* loop, std::promise<Status>* ready);
  void ArmHandlerEvent(Loop* loop);
  // Accepts the next connection on `acceptor` (acceptor_ or
  // resp_acceptor_), the binary protocol's or RESP's.
  void Accept(tcp::acceptor* acceptor);
  uint64_t OpenConnections() const;
};

Status Server::Impl::Start() {
  if (started_) return Status::InvalidArgument("server already started");
  auto credentials = Credentials::Load(options_);
  if (!credentials.ok()) return credentials.status();
  credentials_ = std::move(*credentials);
  const unsigned threads =
      options_.threads != 0 ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) {
    loops_.push_back(std::make_unique<Loop>());
    loops_.back()->index = i;
  }
  acceptor_ = std::make_unique<tcp::acceptor>(loops_[0]->io);
  accept_retry_ = std::make_unique<asio::steady_timer>(loops_[0]->io);
  resp_accept_retry_ = std::make_unique<asio::steady_timer>(loops_[0]->io);
  Status listening = Listen(acceptor_.get(), options_.host, options_.port, "listen");
  if (listening.ok() && !options_.resp_host.empty()) {
    resp_acceptor_ = std::make_unique<tcp::acceptor>(loops_[0]->io);
    listening = Listen(resp_acceptor_.get(), options_.resp_host, options_.resp_port, "resp.listen");
  }
  if (!listening.ok()) {
    acceptor_.reset();
    resp_acceptor_.reset();
    accept_retry_.reset();  // its io_context goes with the loops
    resp_accept_retry_.reset();
    loops_.clear();
    return listening;
  }
  port_ = acceptor_->local_endpoint().port();
  if (resp_acceptor_) resp_port_ = resp_acceptor_->local_endpoint().port();

  std::vector<std::promise<Status>> ready(threads);
  for (unsigned i = 0; i < threads; ++i) {
    Loop* loop = loops_[i].get();
    loop->heartbeat_ns = SteadyNanos();
    loop->thread = std::thread([this, loop, p = &ready[i]] { RunLoop(loop, p); });
  }
  Status first;
  for (auto& p : ready) {
    Status s = p.get_future().get();
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  started_ = true;
  if (!first.ok()) {
    Stop();
    return first;
  }
  asio::post(loops_[0]->io, [this] {
    Accept(acceptor_.get());
    if (resp_acceptor_) Accept(resp_acceptor_.get());
  });
  return Status::OK();
}

void Server::Impl::RunLoop(Loop* loop, std::promise<Status>* ready) {
  auto work = asio::make_work_guard(loop->io);
  auto poster = std::make_shared<AsioLoopPoster>(&loop->io);
  loop->poster = poster;
  Result<std::unique_ptr<Handler>> handler = service_->NewHandler(loop->index, poster);
  if (!handler.ok()) {
    poster->Close();
    ready->set_value(handler.status());
    return;
  }
  loop->handler = std::move(*handler);
  if (loop->handler->event_fd() >= 0) {
    loop->handler_event =
        std::make_unique<asio::posix::stream_descriptor>(loop->io, loop->handler->event_fd());
    ArmHandlerEvent(loop);
  }
  ready->set_value(Status::OK());
  loop->io.run();
  poster->Close();  // again: the loop ended without Stop (a handler's exception, say)
  // The descriptor belongs to the handler: stop watching it without closing it.
  if (loop->handler_event) {
    (void)loop->handler_event->release();
    loop->handler_event.reset();
  }
  // The handler (its storage worker) flushes and waits for its I/O here, on
  // its own thread; replies it still makes go to closed connections.
  loop->handler.reset();
}

void Server::Impl::ArmHandlerEvent(Loop* loop) {
  loop->handler_event->async_wait(asio::posix::stream_descriptor::wait_read,
                                  [this, loop](const error_code& ec) {
                                    if (ec) return;
                                    loop->handler->OnEvent();
                                    ArmHandlerEvent(loop);
                                  });
}

uint64_t Server::Impl::OpenConnections() const {
  uint64_t closed = 0;
  for (const auto& l : loops_) closed += l->counters.closed.load(std::memory_order_relaxed);
  const uint64_t accepted = accepted_.load(std::memory_order_relaxed);
  return accepted - std::min(accepted, closed);
}

void Server::Impl::Accept(tcp::acceptor* acceptor) {
  if (acceptor == nullptr || !acceptor->is_open()) return;
  const bool resp = acceptor == resp_acceptor_.get();
  Loop* target = loops_[next_loop_].get();
  next_loop_ = (next_loop_ + 1) % loops_.size();
  acceptor->async_accept(target->io, [this, acceptor, resp, target](const error_code& ec,
                                                                    tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      // Out of descriptors, say: log, wait a little, try again.
      spdlog::error("accept failed: {}", ec.message());
      asio::steady_timer& retry = resp ? *resp_accept_retry_ : *accept_retry_;
      retry.expires_after(std::chrono::milliseconds(100));
      retry.async_wait([this, acceptor](const error_code& e) {
        if (!e) Accept(acceptor);
      });
      return;
    }
    // Counted open here, on the accepting thread, so that a burst of
    // connections cannot pass the limit before their loops register them.
    if (OpenConnections() >= options_.max_connections) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      const std::string why =
          "too many connections (limit " + std::to_string(options_.max_connections) + ")";
      std::string frame;
      if (resp) {
        frame = "-ERR max number of clients reached: " + why + "\r\n";
      } else {
        proto::AppendErrorFrame(&frame, 0, 0, Status::Busy(why));
      }
      error_code ignored;
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(frame), ignored);
      socket.close(ignored);
    } else {
      accepted_.fetch_add(1, std::memory_order_relaxed);
      if (options_.socket_send_buffer > 0) {
        error_code ignored;
        socket.set_option(asio::socket_base::send_buffer_size(options_.socket_send_buffer),
                          ignored);
      }
      asio::post(target->io, [this, target, resp,
                              s = std::make_shared<tcp::socket>(std::move(socket)),
                              credentials = credentials()] {
        if (target->draining) {
          LoopCounters::Add(target->counters.closed, 1);
          return;
        }
        std::shared_ptr<Connection> conn;
        if (resp) {
          conn = std::make_shared<RespConnection>(target, std::move(*s), options_, credentials);
        } else {
          conn = std::make_shared<FrameConnection>(target, std::move(*s), options_, credentials);
        }
        target->connections.insert(conn);
        conn->Start();
      });
    }
    Accept(acceptor);
  });
}

void Server::Impl::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  asio::post(loops_[0]->io, [this] {
    error_code ec;
    if (acceptor_) acceptor_->close(ec);
    if (resp_acceptor_) resp_acceptor_->close(ec);
    accept_retry_->cancel();
    resp_accept_retry_->cancel();
  });
  for (auto& l : loops_) {
    Loop* loop = l.get();
    asio::post(loop->io, [loop] {
      loop->draining = true;
      auto conns = loop->connections;  // Drain may close, which erases
      for (auto& c : conns) c->Drain();
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
  while (OpenConnections() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (OpenConnections() > 0) {
    spdlog::warn("shutdown: {} connections still busy after {} ms; closing them", OpenConnections(),
                 options_.shutdown_timeout.count());
  }
  for (auto& l : loops_) {
    Loop* loop = l.get();
    asio::post(loop->io, [loop] {
      auto conns = loop->connections;
      for (auto& c : conns) c->Close();
      // From here on tasks posted from other threads are dropped where
      // they are posted, not left in a stopped io_context.
      if (auto p = loop->poster.lock()) p->Close();
      loop->io.stop();
    });
  }
  for (auto& l : loops_) {
    if (l->thread.joinable()) l->thread.join();
  }
  acceptor_.reset();
  resp_acceptor_.reset();
  accept_retry_.reset();
  resp_accept_retry_.reset();
}

Status Server::Impl::ReloadCredentials() {
  auto loaded = Credentials::Load(options_);
  if (!loaded.ok()) return loaded.status();
  std::lock_guard lock(credentials_mu_);
  credentials_ = std::move(*loaded);
  return Status::OK();
}

void Server::Impl::Counters(ServerCounters* out) const {
  ServerCounters& c = *out;
  for (const auto& l : loops_) {
    const LoopCounters& lc = l->counters;
    auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    c.connections_idle_closed += get(lc.idle_closed);
    c.connections_slow_closed += get(lc.slow_closed);
    c.tls_handshake_failures += get(lc.tls_handshake_failures);
    c.auth_failures += get(lc.auth_failures);
    c.broken_frames += get(lc.broken_frames);
    c.requests += get(lc.requests);
    c.error_responses += get(lc.error_responses);
    c.backpressure_pauses += get(lc.pauses);
    c.bytes_in += get(lc.bytes_in);
    c.bytes_out += get(lc.bytes_out);
    for (int op = 0; op < 256; ++op) c.requests_by_op[op] += get(lc.by_op[op]);
    for (size_t slot = 0; slot < kRespCommandSlots; ++slot) {
      c.resp_commands[slot] += get(lc.resp_commands[slot]);
      c.resp_errors[slot] += get(lc.resp_errors[slot]);
      c.resp_latency_sum_us[slot] +=
          lc.resp_latency_us[slot].SnapshotInto(&c.resp_latency_us[slot]);
    }
    for (size_t slot = 0; slot < kOpSlots; ++slot) {
      for (size_t code = 0; code < kStatusCodes; ++code) {
        c.responses[slot][code] += get(lc.responses[slot][code]);
      }
      c.latency_sum_us[slot] += lc.latency_us[slot].SnapshotInto(&c.latency_us[slot]);
    }
  }
  c.connections_accepted = accepted_.load(std::memory_order_relaxed);
  c.connections_open = OpenConnections();
  c.connections_refused = refused_.load(std::memory_order_relaxed);
  if (auto creds = credentials()) c.tls_certificate_not_after = creds->certificate_not_after();
}

bool Server::Impl::LoopsAlive(std::chrono::milliseconds within) {
  const int64_t now = SteadyNanos();
  const int64_t limit = std::chrono::duration_cast<std::chrono::nanoseconds>(within).count();
  bool alive = true;
  for (auto& l : loops_) {
    Loop* loop = l.get();
    int64_t posted = loop->heartbeat_posted_ns.load(std::memory_order_acquire);
    const int64_t ran = loop->heartbeat_ns.load(std::memory_order_acquire);
    if (ran >= posted) {
      // The last heartbeat ran: post the next one (once, whoever asks).
      if (loop->heartbeat_posted_ns.compare_exchange_strong(posted, now)) {
        asio::post(loop->io, [loop] { loop->heartbeat_ns.store(SteadyNanos()); });
      }
    } else if (now - posted > limit) {
      alive = false;  // posted longer ago than `within` and still not run
    }
  }
  return alive;
}

Server::Server(const ServerOptions& options, Service* service)
    : impl_(std::make_unique<Impl>(options, service)) {}
Server::~Server() { Stop(); }
Status Server::Start() { return impl_->Start(); }
void Server::Stop() { impl_->Stop(); }
Status Server::ReloadCredentials() {
  if (!impl_->started_) return Status::InvalidArgument("server not started");
  return impl_->ReloadCredentials();
}
std::string Server::security() const {
  auto creds = impl_->credentials();
  return creds ? creds->Describe() : std::string("not started");
}
uint16_t Server::port() const { return impl_->port_; }
uint16_t Server::resp_port() const { return impl_->resp_port_; }
std::string Server::endpoint() const {
  return impl_->options_.host + ":" + std::to_string(impl_->port_);
}
unsigned Server::threads() const { return static_cast<unsigned>(impl_->loops_.size()); }
ServerCounters Server::counters() const {
  ServerCounters c;
  impl_->Counters(&c);
  return c;
}
void Server::CountersInto(ServerCounters* c) const { impl_->Counters(c); }
bool Server::LoopsAlive(std::chrono::milliseconds within) { return impl_->LoopsAlive(within); }

}  // namespace segstore::server
