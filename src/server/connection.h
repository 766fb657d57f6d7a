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
#include "proto/frame_buffer.h"
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
class AsioLoopPoster;

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
  std::weak_ptr<AsioLoopPoster> poster;  // what the handler posts answers through (server.cc)
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
  bool closed() const { return state_ == State::kClosed; }

 private:
  friend class Responder;  // Send is OnReply

  // Where the connection is in its life. It reads only while kOpen; the three
  // finishing states read nothing more and close once every request taken is
  // answered and its answer written.
  enum class State : uint8_t {
    kHandshake,   // the TLS handshake is under way
    kOpen,        // reading and serving requests
    kInputEnded,  // the client sent end of stream: its whole frames are served, then close
    kDraining,    // the server is stopping: frames not yet taken are dropped
    kFailing,     // an error frame for the connection was queued: close once it is written
    kClosed,
  };
  bool Finishing() const { return state_ >= State::kInputEnded && state_ != State::kClosed; }

  // Every event (a read, a write, a reply, a drain, the timer) changes what it
  // must and then calls Pump, which does all that can be done next, in order:
  // serve the whole frames read while under the limits, write what is
  // answered, read more while open and under the limits, and close once
  // finishing with nothing left to do. A reply given from inside Handle()
  // re-enters Pump, which then returns at once: the outer call goes on.
  void Pump();
  // Takes the frame at the front of in_ and serves it (or refuses it);
  // false when there is none or the connection is failing.
  bool ServeFrame();
  // Checks an unauthenticated connection's request: true to serve it (a
  // hello with the secret); false when refused (answered, or the connection
  // is failing).
  bool Authenticate(const proto::FrameHeader& h, std::string_view body);
  void StartRead();
  void OnRead(const boost::system::error_code& ec, size_t n);
  void StartWrite();
  void OnWritten(const boost::system::error_code& ec, size_t n);
  void OnHandshake(const boost::system::error_code& ec);
  void OnReply(std::string frame, std::chrono::steady_clock::time_point started);
  // Counts a response frame and queues it for writing.
  void Queue(std::string frame);
  // Queues an error frame for the whole connection, then closes once it is
  // written (or kCloseGrace passes).
  void Fail(uint8_t op, uint32_t request_id, const Status& status);
  // Hands this turn's requests to the handler as one burst (Handler::BeginBurst).
  void JoinBurst();
  bool Paused() const;
  // The handshake is done and (when asked for) the hello authenticated.
  bool Established() const { return state_ != State::kHandshake && authenticated_; }
  // The buffer holds the start of a frame and not all of it, and more may come.
  bool PartialFrame() const { return state_ == State::kOpen && !in_.empty() && !in_.Ready(); }
  void ArmTimer();
  void OnTimer(const boost::system::error_code& ec);
  std::string Peer() const;
  void Touch() { last_activity_ = std::chrono::steady_clock::now(); }

  Loop* loop_;
  boost::asio::ip::tcp::socket socket_;
  std::shared_ptr<const Credentials> credentials_;
  // Over socket_ when the port speaks TLS; null for plain TCP.
  std::unique_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
  boost::asio::steady_timer timer_;
  const ServerOptions& options_;
  State state_ = State::kOpen;
  bool authenticated_ = true;  // false until a hello with the secret, when one is required
  bool reading_ = false;       // an async read is outstanding (into in_.Space())
  bool pumping_ = false;       // Pump() is on the stack
  bool was_paused_ = false;    // the last StartRead found the connection paused (counted once)
  proto::FrameBuffer in_;
  std::string out_;         // answers waiting to be written
  std::string writing_;     // answers being written; non-empty while a write is outstanding
  uint32_t in_flight_ = 0;  // requests handed to the handler and not yet answered
  std::chrono::steady_clock::time_point accepted_;
  std::chrono::steady_clock::time_point last_activity_;
  // When the first bytes of the frame at the front of in_ arrived (PartialFrame()).
  std::chrono::steady_clock::time_point frame_begun_;
  std::chrono::steady_clock::time_point timer_at_;  // when timer_ fires
};

}  // namespace segstore::server
