// One client connection and the event loop that owns it. Internal to the
// front end (server.cc); the only place sockets are read and written.
//
// A Connection lives on its loop's thread from accept to close: every member
// is touched only there. It reads requests ahead (pipelining) while fewer
// than max_in_flight are being served and fewer than max_pending_bytes of
// responses wait to be sent; otherwise it stops reading, and the client
// feels TCP backpressure.
//
// With TLS the connection first completes the handshake; with a shared
// secret the client must give it before anything else is served. Both
// together must be done within frame_timeout of the accept, or the
// connection is closed.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
// clang-format off
#include <utility>
#include <boost/asio.hpp>
#include <boost/asio/ssl/stream.hpp>
// clang-format on

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
#include "server/resp_commands.h"
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
  // The RESP port's commands by command slot (resp_commands.h): replies
  // sent, error replies among them, and microseconds from the command being
  // read to its reply being complete.
  std::atomic<uint64_t> resp_commands[kRespCommandSlots] = {};
  std::atomic<uint64_t> resp_errors[kRespCommandSlots] = {};
  AtomicHistogram resp_latency_us[kRespCommandSlots];

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

// A client connection, whichever protocol it speaks: the socket (and TLS
// over it), the bytes read and those waiting to be written, backpressure,
// deadlines and the connection's life. What a request is and how it is
// answered belongs to the protocol: FrameConnection (below) speaks segstore's
// binary protocol, RespConnection (resp_connection.h) RESP.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;

  // Begins reading. Call once, on the loop's thread, after registering.
  void Start();
  // Stop reading new requests; close once those in flight are answered and
  // sent. Used by a graceful shutdown.
  void Drain();
  // Closes now; pending replies are dropped when they arrive.
  void Close();
  bool closed() const { return state_ == State::kClosed; }

 protected:
  Connection(Loop* loop, boost::asio::ip::tcp::socket socket, const ServerOptions& options,
             std::shared_ptr<const Credentials> credentials);

  // ---- what the protocol supplies ----
  // The buffer the socket is read into.
  virtual proto::InputBuffer& input() = 0;
  // Serves the request at the front of input() if it is whole (or refuses
  // it); false when there is none, or when the connection is now failing.
  virtual bool ServeNext() = 0;
  // The answer to a request handed to the handler (Responder::Send), on the
  // loop's thread. The connection may be closed by then.
  virtual void OnReply(std::string frame, std::chrono::steady_clock::time_point started) = 0;
  // A read's outcome as a value (Responder::SendValue), for a connection that
  // makes its responders take_values(); the others never get one.
  virtual void OnValue(uint32_t request_id, uint8_t flags, ReadValue value);
  // Appends the error that ends the connection (Fail) in the protocol's form.
  virtual void AppendFailure(const Status& status, std::string* out) = 0;

  // ---- for the protocol ----
  // Every event (a read, a write, a reply, a drain, the timer) changes what it
  // must and then calls Pump, which does all that can be done next, in order:
  // serve the whole requests read while under the limits, write what is
  // answered, read more while open and under the limits, and close once
  // finishing with nothing left to do. A reply given from inside Handle()
  // re-enters Pump, which then returns at once: the outer call goes on.
  void Pump();
  // Queues bytes for writing.
  void Queue(std::string bytes);
  // Queues the error ending the connection (AppendFailure's, or `bytes`),
  // then closes once it is written (or kCloseGrace passes).
  void Fail(const Status& status);
  void FailWith(const Status& status, std::string bytes);
  // Hands this turn's requests to the handler as one burst (Handler::BeginBurst).
  void JoinBurst();
  // A handler bug, never a client's doing: aborts.
  [[noreturn]] static void AnsweredTwice();
  std::string Peer() const;

  // Where the connection is in its life. It reads only while kOpen; the three
  // finishing states read nothing more and close once every request taken is
  // answered and its answer written.
  enum class State : uint8_t {
    kHandshake,   // the TLS handshake is under way
    kOpen,        // reading and serving requests
    kInputEnded,  // the client sent end of stream: its whole requests are served, then close
    kDraining,    // the server is stopping: requests not yet taken are dropped
    kFailing,     // an error for the connection was queued: close once it is written
    kClosed,
  };

  Loop* loop_;
  std::shared_ptr<const Credentials> credentials_;
  const ServerOptions& options_;
  State state_ = State::kOpen;
  bool authenticated_ = true;  // false until the secret was given, when one is required
  // Requests taken and not yet answered whole. Past max_in_flight nothing
  // more is read or served.
  uint32_t in_flight_ = 0;

 private:
  friend class Responder;  // Send is OnReply

  bool Finishing() const { return state_ >= State::kInputEnded && state_ != State::kClosed; }
  void StartRead();
  void OnRead(const boost::system::error_code& ec, size_t n);
  void StartWrite();
  void OnWritten(const boost::system::error_code& ec, size_t n);
  void OnHandshake(const boost::system::error_code& ec);
  bool Paused() const;
  // The handshake is done and (when asked for) the secret given.
  bool Established() const { return state_ != State::kHandshake && authenticated_; }
  // The buffer holds the start of a request and not all of it, and more may come.
  bool PartialRequest() { return state_ == State::kOpen && !input().empty() && !input().Ready(); }
  void ArmTimer();
  void OnTimer(const boost::system::error_code& ec);
  void Touch() { last_activity_ = std::chrono::steady_clock::now(); }

  boost::asio::ip::tcp::socket socket_;
  // Over socket_ when the port speaks TLS; null for plain TCP.
  std::unique_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
  boost::asio::steady_timer timer_;
  bool reading_ = false;     // an async read is outstanding (into input().Space())
  bool pumping_ = false;     // Pump() is on the stack
  bool was_paused_ = false;  // the last StartRead found the connection paused (counted once)
  std::string out_;          // answers waiting to be written
  std::string writing_;      // answers being written; non-empty while a write is outstanding
  std::chrono::steady_clock::time_point accepted_;
  std::chrono::steady_clock::time_point last_activity_;
  // When the first bytes of the request at the front of the input arrived.
  std::chrono::steady_clock::time_point frame_begun_;
  std::chrono::steady_clock::time_point timer_at_;  // when timer_ fires
};

// A connection speaking segstore's binary protocol (proto/PROTOCOL.md):
// frames are handed to the loop's Handler as they are; answers go out in the
// order they complete (clients match request IDs). With a shared secret,
// every request but a hello carrying it is answered Unauthenticated (a wrong
// secret closes the connection).
class FrameConnection final : public Connection {
 public:
  FrameConnection(Loop* loop, boost::asio::ip::tcp::socket socket, const ServerOptions& options,
                  std::shared_ptr<const Credentials> credentials);

 private:
  proto::InputBuffer& input() override { return in_; }
  bool ServeNext() override;
  void OnReply(std::string frame, std::chrono::steady_clock::time_point started) override;
  void AppendFailure(const Status& status, std::string* out) override;
  // Checks an unauthenticated connection's request: true to serve it (a
  // hello with the secret); false when refused (answered, or the connection
  // is failing).
  bool Authenticate(const proto::FrameHeader& h, std::string_view body);
  // Counts a response frame by operation and status (and queues it).
  void CountFrame(const std::string& frame);
  void QueueFrame(std::string frame);

  proto::FrameBuffer in_;
};

}  // namespace segstore::server
