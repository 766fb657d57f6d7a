// One client connection and the event loop that owns it. Internal to the
// front end (server.cc); the only place sockets are read and written.
//
// A Connection lives on its loop's thread from accept to close: every member
// is touched only there. It reads frames ahead (pipelining) while fewer than
// max_in_flight requests are being served and fewer than max_pending_bytes of
// responses wait to be sent; otherwise it stops reading, and the client feels
// TCP backpressure. Responses go out in the order they complete, which may
// differ from the order of requests (clients match request IDs).
//
// With TLS the connection first completes the handshake; with a shared
// secret it answers every request but a hello carrying the secret with
// Unauthenticated (a wrong secret closes it). Both together must be done
// within frame_timeout of the accept, or the connection is closed.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/histogram.h"
#include "server/security.h"
#include "server/server.h"
#include "server/service.h"

namespace segstore::server {

class Connection;

// Counters of one loop: written by its thread only, read by any (relaxed).
struct alignas(64) LoopCounters {
  std::atomic<uint64_t> closed{0};
  std::atomic<uint64_t> idle_closed{0};
  std::atomic<uint64_t> slow_closed{0};
  std::atomic<uint64_t> tls_handshake_failures{0};
  std::atomic<uint64_t> auth_failures{0};
  std::atomic<uint64_t> broken_frames{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> error_responses{0};
  std::atomic<uint64_t> pauses{0};
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> by_op[256] = {};
  // Responses sent, by operation slot (proto::OpSlot) and status code.
  std::atomic<uint64_t> responses[kOpSlots][kStatusCodes] = {};
  // Microseconds from a request's whole frame being read to its answer being
  // handed back, by operation slot.
  AtomicHistogram latency_us[kOpSlots];

  static void Add(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

// One event loop thread: its io_context, handler, connections and counters.
struct Loop {
  unsigned index = 0;
  boost::asio::io_context io{1};
  std::unique_ptr<Handler> handler;
  std::unique_ptr<boost::asio::posix::stream_descriptor> handler_event;
  std::unordered_set<std::shared_ptr<Connection>> connections;
  LoopCounters counters;
  // Liveness (Server::LoopsAlive): steady clock of the last heartbeat task
  // posted to the loop, and of the last one run.
  std::atomic<int64_t> heartbeat_posted_ns{0};
  std::atomic<int64_t> heartbeat_ns{0};
  bool draining = false;
  bool in_burst = false;  // BeginBurst called; EndBurst posted to run after this turn
  std::thread thread;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Loop* loop, boost::asio::ip::tcp::socket socket, const ServerOptions& options,
             std::shared_ptr<const Credentials> credentials);

  // Begins reading. Call once, on the loop's thread, after registering.
  void Start();
  // Stop reading new requests; close once those in flight are answered and
  // sent. Used by a graceful shutdown.
  void Drain();
  // Closes now; pending replies are dropped when they arrive.
  void Close();
  bool closed() const { return closed_; }

 private:
  void OnHandshake(const boost::system::error_code& ec);
  // The handshake is done and (when asked for) the hello authenticated.
  bool Established() const { return handshake_done_ && authenticated_; }
  // Checks an unauthenticated connection's request: true to serve it (a
  // hello with the secret); false when answered or (returned in *close)
  // the connection must close.
  bool Authenticate(const proto::FrameHeader& h, std::string_view body, bool* close);
  std::string Peer() const;
  void Read();
  void OnRead(const boost::system::error_code& ec, size_t n);
  void ProcessInput();
  // Handles the complete frame at in_[start_..]; returns false when the
  // connection must close (a broken frame).
  bool HandleFrame();
  void OnReply(std::string frame, std::chrono::steady_clock::time_point started);
  void Send(std::string frame);
  void Write();
  // An error frame, then close once it is written.
  void FailConnection(uint8_t op, uint32_t request_id, const Status& status);
  bool Paused() const;
  void ArmIdleTimer();
  // The buffer holds the start of a frame and not all of it, and more may come.
  bool PartialFrame() const;
  // The buffer holds a whole frame to serve (or a broken one to answer).
  bool WholeFrame() const;
  void Touch() { last_activity_ = std::chrono::steady_clock::now(); }
  void MaybeFinish();

  Loop* loop_;
  boost::asio::ip::tcp::socket socket_;
  std::shared_ptr<const Credentials> credentials_;
  // Over socket_ when the port speaks TLS; null for plain TCP.
  std::unique_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
  boost::asio::steady_timer idle_timer_;
  const ServerOptions& options_;
  std::vector<char> in_;       // received bytes; frames parsed from start_ to end_
  size_t start_ = 0;
  size_t end_ = 0;
  std::string out_;            // responses waiting to be written
  std::string writing_;        // responses being written
  uint32_t in_flight_ = 0;     // requests handed to the handler and not yet answered
  bool reading_ = false;
  bool writing_now_ = false;
  bool processing_ = false;
  bool draining_ = false;      // read nothing more; close when idle
  bool input_ended_ = false;   // the client sent end of stream: answer what came, then close
  bool close_after_write_ = false;
  bool closed_ = false;
  bool was_paused_ = false;
  bool handshake_done_ = true;  // false until a TLS handshake completes
  bool authenticated_ = true;   // false until a hello with the secret, when one is required
  std::chrono::steady_clock::time_point accepted_;
  std::chrono::steady_clock::time_point last_activity_;
  // When the first bytes of the frame at start_ arrived (PartialFrame()).
  std::chrono::steady_clock::time_point frame_begun_;
  std::chrono::steady_clock::time_point timer_at_;  // when idle_timer_ fires
};

}  // namespace segstore::server
