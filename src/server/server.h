// The network front end: a TCP acceptor and one Asio event loop per thread,
// each loop owning its connections and its Service Handler (and through it
// one storage worker, whose io_uring completions reach the same loop through
// an eventfd). No thread per connection and no lock on the request path: a
// connection lives on one loop from accept to close.
//
// Start() and Stop() are called from one controlling thread (main); counters()
// and LoopsAlive() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/histogram.h"
#include "proto/protocol.h"
#include "segstore/status.h"
#include "server/resp_commands.h"
#include "server/service.h"

namespace segstore::server {

// TLS on the client port (security.h loads it). With a certificate the port
// speaks TLS only.
struct TlsOptions {
  std::string cert_file;            // PEM: the server's certificate, then any intermediates
  std::string key_file;             // PEM: its private key (unencrypted)
  std::string client_ca_file;       // PEM CAs; set: clients must present a certificate they signed
  std::string min_version = "1.2";  // "1.2" or "1.3"
  bool enabled() const { return !cert_file.empty(); }
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7700;  // 0: an ephemeral port (see Server::port())
  // The RESP port (proto/RESP.md): off unless resp_host is set; port 0 is
  // ephemeral (Server::resp_port()). It shares every other option: the
  // loops, TLS, the shared secret, the limits and the timeouts.
  std::string resp_host;
  uint16_t resp_port = 6379;
  // A RESP read whose reply would be larger is answered LIMIT (the binary
  // protocol's largest response; tests lower it).
  uint32_t resp_max_reply_bytes = proto::kMaxResponseBytes;
  unsigned threads = 0;  // event loops; 0: one per core
  // Connections beyond this are answered Busy and closed.
  uint32_t max_connections = 4096;
  // A connection with no bytes moving either way for this long is closed.
  std::chrono::milliseconds idle_timeout{300'000};
  // A request frame begun must arrive whole within this; else its connection
  // gets a LimitExceeded error frame and is closed (a client trickling bytes
  // must not hold a connection slot forever).
  std::chrono::milliseconds frame_timeout{30'000};
  // Largest request body; a frame announcing more closes its connection.
  uint32_t max_frame_bytes = proto::kDefaultMaxFrameBytes;
  // Per connection: requests being served at once, and response bytes waiting
  // for the client to read them. Past either, the connection is not read
  // until it drops below (the client sees TCP backpressure).
  uint32_t max_in_flight = proto::kDefaultMaxInFlight;
  uint32_t max_pending_bytes = 8u << 20;
  // Stop() waits this long for requests in flight and unsent responses.
  std::chrono::milliseconds shutdown_timeout{10'000};
  TlsOptions tls;
  // A file of shared secrets, one per line; set: a connection is served only
  // after a hello carrying one of them (security.h). Empty: no authentication.
  std::string auth_secret_file;
  // A cluster node: the RESP port answers CLUSTER SLOTS and SHARDS, refuses
  // multi-key commands across slots (CROSSSLOT) and redirects with MOVED.
  bool cluster = false;
  // The clock the RESP port's TTL replies (HTTL, HEXPIRETIME, ...) count
  // from: the store's. Null: the system clock.
  const Clock* clock = nullptr;
  // Test hook, not a configuration key: SO_SNDBUF for each accepted socket
  // (the kernel doubles it). 0 keeps the kernel's own buffer, which grows up
  // to net.ipv4.tcp_wmem's maximum, so how much a client that does not read
  // can leave unsent depends on the machine; tests that need the server's
  // writes to stall after a known amount set it.
  int socket_send_buffer = 0;
};

// Per-operation counters are indexed by proto::OpSlot; the last slot holds
// frames with an operation code outside the table.
inline constexpr size_t kOpSlots = proto::kOpCount + 1;
inline constexpr size_t kStatusCodes = size_t{Status::kMaxCode} + 1;

// Totals since start, over every loop.
struct ServerCounters {
  uint64_t connections_open = 0;
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  // over max_connections
  uint64_t connections_idle_closed = 0;
  uint64_t connections_slow_closed = 0;  // a frame (or TLS handshake and hello) not in time
  uint64_t tls_handshake_failures = 0;
  uint64_t auth_failures = 0;  // hellos with a wrong secret (connection closed)
  // The server certificate's notAfter (Unix seconds); 0 without TLS.
  int64_t tls_certificate_not_after = 0;
  uint64_t broken_frames = 0;  // bad magic or impossible length: connection closed
  uint64_t requests = 0;
  uint64_t error_responses = 0;
  uint64_t backpressure_pauses = 0;  // times a connection stopped being read
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t requests_by_op[256] = {};
  // The RESP port's commands by slot (resp_commands.h), their error
  // replies, and their service times (read to reply complete).
  uint64_t resp_commands[kRespCommandSlots] = {};
  uint64_t resp_errors[kRespCommandSlots] = {};
  Histogram resp_latency_us[kRespCommandSlots];
  uint64_t resp_latency_sum_us[kRespCommandSlots] = {};
  // Responses sent by operation slot and status code (0: OK).
  uint64_t responses[kOpSlots][kStatusCodes] = {};
  // Service time in microseconds by operation slot: from the request's whole
  // frame being read to its answer being ready (socket queues not included),
  // and the sum of those times.
  Histogram latency_us[kOpSlots];
  uint64_t latency_sum_us[kOpSlots] = {};
};

class Server {
 public:
  // `service` must outlive the server.
  Server(const ServerOptions& options, Service* service);
  ~Server();  // Stop()s if running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Loads the TLS credentials and auth secrets, binds, starts the loops and
  // makes every handler; returns once the port accepts. InvalidArgument for a
  // bad address or unusable credentials, IOError when the bind fails, or the
  // first handler's error.
  Status Start();
  // Reads the TLS certificate, key, client CAs and auth secrets again (on
  // SIGHUP): new connections use them, open ones keep theirs. On an error
  // the ones in force stay and the error is returned.
  Status ReloadCredentials();
  // "plain TCP" or "TLS 1.2+, client certificates required", and ", shared
  // secret required" when auth is on: for the start log line.
  std::string security() const;
  // Stops accepting, lets every connection finish the requests it has read
  // and send their responses (up to shutdown_timeout), closes connections,
  // destroys the handlers on their threads and joins them. Idempotent.
  void Stop();

  uint16_t port() const;         // the bound port, once started
  uint16_t resp_port() const;    // the RESP port's, once started; 0 when it is off
  std::string endpoint() const;  // "host:port"
  unsigned threads() const;
  ServerCounters counters() const;
  // The same into *c, a fresh ServerCounters (it is large: no copy).
  void CountersInto(ServerCounters* c) const;
  // False when a task posted to some loop has waited more than `within`
  // without running: that loop is stuck (the systemd watchdog stops pinging,
  // the admin endpoint's /health answers 503). Each call posts the next task
  // to every loop whose last one ran.
  bool LoopsAlive(std::chrono::milliseconds within);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace segstore::server
