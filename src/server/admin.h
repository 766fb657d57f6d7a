// The admin endpoint: a small HTTP/1.1 server (Boost.Beast) on its own port
// and its own thread, apart from the client port, for Prometheus and for
// load balancers and Kubernetes probes:
//
//   GET /metrics  Prometheus text format 0.0.4
//   GET /health   liveness: 200 "ok" while the process serves; 503 when an
//                 event loop is stuck
//   GET /ready    readiness: 200 "ready"; 503 with the reason while it should
//                 get no traffic (stopping, writes refused after a device
//                 error, an event loop stuck)
//
// HEAD works wherever GET does; any other method is 405, any other path 404.
// Requests are small and bounded (8 KiB of header, no body), a connection
// that sends nothing for 10 s is closed, and at most 64 are open at once
// (AdminOptions), so the endpoint cannot be used to exhaust the server. It knows nothing of
// segstore: the handlers below are its whole view.
//
// Start() and Stop() are called from one controlling thread; the handlers
// run on the admin thread and must be safe to call from it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "segstore/status.h"

namespace segstore::server {

struct AdminOptions {
  bool enabled = true;
  std::string host = "127.0.0.1";
  uint16_t port = 7701;  // 0: an ephemeral port (see AdminServer::port())
  // A connection that neither completes a request nor takes its answer for
  // this long is closed.
  std::chrono::milliseconds io_timeout{10'000};
  // Connections past this many open are closed at once.
  int max_connections = 64;
};

struct AdminHandlers {
  std::function<std::string()> metrics;    // the body of /metrics
  std::function<bool()> live;              // false: /health answers 503
  std::function<std::string()> not_ready;  // empty: ready; else why not (/ready 503)
};

class AdminServer {
 public:
  AdminServer(const AdminOptions& options, AdminHandlers handlers);
  ~AdminServer();  // Stop()s
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds and starts the thread; returns once the port accepts.
  // InvalidArgument for a bad address, IOError when the bind fails.
  Status Start();
  // Closes the port and every connection, joins the thread. Idempotent.
  void Stop();
  uint16_t port() const;
  std::string endpoint() const;  // "host:port"

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace segstore::server
