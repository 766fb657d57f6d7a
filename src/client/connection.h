// The client's connection internals: one TCP connection to a server, the
// requests in flight on it and their deadlines. AsyncClient
// (include/segstore/client.h) is a thin facade over this.
//
// Ownership: a Connection is held by shared_ptr: by its facade, and by each
// Asio operation it has started (so a callback may destroy the facade while
// the read loop is still on the stack). Closing it cancels those operations;
// the last one to finish frees it.
//
// Threads: not thread-safe; everything runs on the thread running the
// io_context. Completions run on that thread: from the read loop, the
// deadline timer, Close(), or (for a call on a closed connection or a request
// refused locally) a handler posted to the io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// After <utility>: Boost 1.74's Asio uses std::exchange without including it.
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "proto/frame_buffer.h"
#include "proto/protocol.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "segstore/status.h"

namespace segstore::client::internal {

class Connection;

// Runs once per request: with OK and the response body, or with the failure
// (and an empty body). `conn` is the connection that ran it.
using Completion =
    std::function<void(const Status& status, std::string_view body, const Connection& conn)>;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::io_context& io, const ClientOptions& options);
  ~Connection();
  // The flags of the answer whose Completion is running (proto::kFlag*); 0
  // for a failure the client made itself.
  uint8_t answer_flags() const { return answer_flags_; }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Resolves, connects and (with options.hello) says hello, all within
  // connect_timeout (0: no limit). `done` runs once, never inside Start; on
  // failure the connection is closed first.
  void Start(std::function<void(const Status&)> done);

  // Sends one request whose body `encode` appends to a string; `complete`
  // runs exactly once.
  template <typename Encode>
  void Send(proto::Op op, Encode&& encode, Completion complete) {
    const auto code = static_cast<uint8_t>(op);
    if (closed_) {
      PostFailure(std::move(complete), Status::Unavailable(Context(code) + ": " + close_reason_));
      return;
    }
    const uint32_t id = NextId();
    const uint32_t max_body =
        server_info_.max_frame_bytes != 0 ? server_info_.max_frame_bytes : UINT32_MAX;
    if (!proto::AppendFrame(&out_, code, id, 0, max_body, std::forward<Encode>(encode))) {
      PostFailure(
          std::move(complete),
          Status::LimitExceeded(Context(code) + ": request body over the server's limit of " +
                                std::to_string(max_body) + " bytes"));
      return;
    }
    Track(id, code, std::move(complete));
    Flush();
  }

  // Fails every request in flight with Unavailable and closes. Idempotent.
  void Close() {
    Shutdown(static_cast<uint8_t>(Status::Code::kUnavailable), "connection closed by the client");
  }

  bool is_open() const { return !closed_ && connected_; }
  size_t in_flight() const { return pending_.size(); }
  const ServerInfo& server_info() const { return server_info_; }
  void set_server_info(ServerInfo info) { server_info_ = std::move(info); }
  const std::string& address() const { return address_; }
  boost::asio::io_context& io() { return io_; }

  // "get to 127.0.0.1:7700": how errors of a request of `op` start.
  std::string Context(uint8_t op) const;

 private:
  struct Pending {
    uint8_t op = 0;
    Completion complete;
  };
  using Clock = std::chrono::steady_clock;

  void FinishStart(const Status& status);
  void OnResolved(const boost::system::error_code& ec,
                  const boost::asio::ip::tcp::resolver::results_type& endpoints);
  void OnConnected(const boost::system::error_code& ec);
  void OnHandshake(const boost::system::error_code& ec);
  // Reading starts; then hello, or done.
  void Established();
  void OnConnectTimer(const boost::system::error_code& ec);

  uint32_t NextId();
  void Track(uint32_t id, uint8_t op, Completion complete);
  void PostFailure(Completion complete, Status status);
  void Flush();
  void StartRead();
  void OnRead(const boost::system::error_code& ec, size_t n);
  // Handles every complete frame in the read buffer; false once closed.
  bool ParseFrames();
  void HandleFrame(const proto::FrameHeader& h, std::string_view body);
  void ArmTimer();
  void OnTimer(const boost::system::error_code& ec);
  void RememberTimedOut(uint32_t id);

  // The stream cannot be trusted any more: fail everything, close.
  void Break(std::string_view why);
  // Closes; every request in flight fails with `code` and
  // "<op> to <address>: <why>".
  void Shutdown(uint8_t code, std::string why);

  boost::asio::io_context& io_;
  const ClientOptions options_;
  const std::string address_;  // "host:port"
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::ip::tcp::socket socket_;
  // With options.tls: the context and the stream over socket_ every read
  // and write goes through.
  std::unique_ptr<boost::asio::ssl::context> tls_context_;
  std::unique_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
  boost::asio::steady_timer connect_timer_;
  boost::asio::steady_timer timer_;  // the earliest request deadline
  std::function<void(const Status&)> start_done_;

  bool connected_ = false;
  bool closed_ = false;
  uint8_t answer_flags_ = 0;  // of the answer being completed
  std::string close_reason_;
  ServerInfo server_info_;

  uint32_t next_id_ = 1;
  std::unordered_map<uint32_t, Pending> pending_;
  // Deadlines in the order sent, which (with one request_timeout for all) is
  // deadline order; entries of answered requests are dropped lazily.
  std::deque<std::pair<Clock::time_point, uint32_t>> deadlines_;
  bool timer_armed_ = false;
  // Requests that timed out and whose answer may still come (then dropped).
  // Bounded: the oldest are forgotten, and a still later answer to one of
  // them breaks the connection.
  std::unordered_set<uint32_t> timed_out_;
  std::deque<uint32_t> timed_out_order_;

  // Writes: calls append frames to out_; one async_write of writing_ at a time.
  std::string out_;
  std::string writing_;
  bool write_in_progress_ = false;

  // Reads: received bytes, cut into answer frames.
  proto::FrameBuffer in_;
};

}  // namespace segstore::client::internal
