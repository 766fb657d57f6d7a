// A scripted stand-in for a segstore server, for the client's tests: an Asio
// acceptor on 127.0.0.1 (an ephemeral port) with its own thread. It reads
// frames and hands each to the test's handler, which answers (or not, or
// later) through the FakeConn.
//
// Threads: the handler and everything passed to Post() run on the server's
// thread; received() and WaitForRequests() may be called from any thread.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// After <utility>: Boost 1.74's Asio uses std::exchange without including it.
#include <boost/asio.hpp>

#include "proto/protocol.h"
#include "proto/wire.h"

namespace segstore::client::testing {

struct Frame {
  proto::FrameHeader header;
  std::string body;
  uint8_t op() const { return header.op; }
  uint32_t id() const { return header.request_id; }
};

class FakeConn {
 public:
  explicit FakeConn(boost::asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}

  // Writes raw bytes (blocking; the client always reads).
  void Write(std::string_view bytes) {
    boost::system::error_code ec;
    boost::asio::write(socket_, boost::asio::buffer(bytes.data(), bytes.size()), ec);
  }
  // Answers `req` with status 0 and `response` as its body.
  template <typename M>
  void Reply(const Frame& req, const M& response) {
    std::string out;
    (void)proto::AppendFrame(&out, req.op(), req.id(), 0, UINT32_MAX,
                             [&](std::string* o) { proto::Encode(response, o); });
    Write(out);
  }
  // Answers `req` with an empty body.
  void ReplyEmpty(const Frame& req) {
    std::string out;
    (void)proto::AppendFrame(&out, req.op(), req.id(), 0, UINT32_MAX, [](std::string*) {});
    Write(out);
  }
  void ReplyError(const Frame& req, const Status& status) {
    std::string out;
    proto::AppendErrorFrame(&out, req.op(), req.id(), status);
    Write(out);
  }
  // Answers `req` with WrongNode and the revision of the map it went by.
  void ReplyWrongNode(const Frame& req, std::string_view message, uint64_t revision) {
    std::string out;
    proto::AppendWrongNodeFrame(&out, req.op(), req.id(), message, revision);
    Write(out);
  }
  void Close() {
    boost::system::error_code ec;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }
  boost::asio::ip::tcp::socket& socket() { return socket_; }

 private:
  boost::asio::ip::tcp::socket socket_;
};

class FakeServer {
 public:
  using Handler = std::function<void(FakeConn& conn, const Frame& frame)>;

  explicit FakeServer(Handler handler)
      : handler_(std::move(handler)),
        acceptor_(io_,
                  boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)),
        work_(boost::asio::make_work_guard(io_)) {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeServer() {
    Post([this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      for (auto& c : conns_) c->Close();
      work_.reset();
      io_.stop();
    });
    thread_.join();
  }

  uint16_t port() const { return acceptor_.local_endpoint().port(); }

  // Runs `fn` on the server's thread.
  void Post(std::function<void()> fn) { boost::asio::post(io_, std::move(fn)); }
  // Runs `fn` on the server's thread and waits for it.
  void Run(std::function<void()> fn) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Post([&] {
      fn();
      std::lock_guard lock(mu);
      done = true;
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }

  // Every request frame received so far, in order of arrival.
  std::vector<Frame> received() {
    std::lock_guard lock(mu_);
    return received_;
  }
  // Waits until `n` request frames have arrived (false after `timeout`).
  bool WaitForRequests(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return received_.size() >= n; });
  }
  int connections() {
    std::lock_guard lock(mu_);
    return accepted_;
  }
  // Closes every accepted connection (on the server's thread).
  void CloseConnections() {
    Run([this] {
      for (auto& c : conns_) c->Close();
    });
  }

 private:
  void Accept() {
    acceptor_.async_accept(
        [this](const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket) {
          if (ec) return;
          auto conn = std::make_shared<FakeConn>(std::move(socket));
          conns_.push_back(conn);
          {
            std::lock_guard lock(mu_);
            ++accepted_;
          }
          ReadHeader(conn);
          Accept();
        });
  }

  void ReadHeader(const std::shared_ptr<FakeConn>& conn) {
    auto header = std::make_shared<std::array<uint8_t, proto::kHeaderSize>>();
    boost::asio::async_read(conn->socket(), boost::asio::buffer(*header),
                            [this, conn, header](const boost::system::error_code& ec, size_t) {
                              if (ec) return;
                              auto f = std::make_shared<Frame>();
                              if (proto::DecodeHeader(header->data(), UINT32_MAX, &f->header) !=
                                  proto::HeaderCheck::kOk) {
                                conn->Close();
                                return;
                              }
                              f->body.resize(f->header.body_length);
                              ReadBody(conn, f);
                            });
  }

  void ReadBody(const std::shared_ptr<FakeConn>& conn, const std::shared_ptr<Frame>& f) {
    boost::asio::async_read(conn->socket(), boost::asio::buffer(f->body),
                            [this, conn, f](const boost::system::error_code& ec, size_t) {
                              if (ec) return;
                              {
                                std::lock_guard lock(mu_);
                                received_.push_back(*f);
                              }
                              cv_.notify_all();
                              handler_(*conn, *f);
                              ReadHeader(conn);
                            });
  }

  Handler handler_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::shared_ptr<FakeConn>> conns_;  // server thread only
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Frame> received_;
  int accepted_ = 0;
};

}  // namespace segstore::client::testing
