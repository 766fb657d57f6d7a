// What the network front end serves: a Service makes one Handler per event
// loop thread, and the front end hands each well-formed request frame to the
// Handler of the thread that owns the connection. The front end knows only
// this interface, so it can be tested with a stub service; ProfileService
// (profile_service.h) is the real one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "proto/protocol.h"
#include "segstore/result.h"

namespace segstore::server {

class Connection;

// Where one request's answer goes: back to the connection it came on. The
// front end hands one to Handler::Handle with each request; the handler
// carries it along with the work, then calls Send once with the whole
// response frame (header included), on the handler's thread. The connection
// may have closed meanwhile: the frame is then dropped. Copyable so that it
// fits in a std::function; only one copy may Send.
class Responder {
 public:
  Responder(std::shared_ptr<Connection> connection, std::chrono::steady_clock::time_point started)
      : connection_(std::move(connection)), started_(started) {}
  // Connection::OnReply: the answer is timed, counted and queued for writing.
  void Send(std::string frame);

 private:
  std::shared_ptr<Connection> connection_;
  std::chrono::steady_clock::time_point started_;  // when the request was read
};

// Lives on one event loop thread: created, used and destroyed there.
class Handler {
 public:
  virtual ~Handler() = default;
  // One request. `header` passed the front end's checks (magic, version,
  // size, known op); `body` is valid only during the call.
  virtual void Handle(const proto::FrameHeader& header, std::string_view body,
                      Responder responder) = 0;
  // A descriptor the loop watches for this handler's own completions
  // (the storage worker's eventfd), or -1; OnEvent() runs when it is readable.
  virtual int event_fd() const { return -1; }
  virtual void OnEvent() {}
  // The loop brackets the requests it handles in one turn (all the sockets
  // that were ready) with these, so a handler can hand their device I/O to
  // the kernel together: one submission, one doorbell, for many requests.
  virtual void BeginBurst() {}
  virtual void EndBurst() {}
};

class Service {
 public:
  virtual ~Service() = default;
  // Called once on each event loop thread, from that thread, before it serves.
  virtual Result<std::unique_ptr<Handler>> NewHandler(unsigned thread_index) = 0;
};

}  // namespace segstore::server
