// What the network front end serves: a Service makes one Handler per event
// loop thread, and the front end hands each well-formed request frame to the
// Handler of the thread that owns the connection. The front end knows only
// this interface, so it can be tested with a stub service; ProfileService
// (profile_service.h) is the real one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "proto/protocol.h"
#include "segstore/messages.h"
#include "segstore/result.h"

namespace segstore::proto {
struct GetRequest;
struct BatchGetRequest;
}  // namespace segstore::proto

namespace segstore::server {

class Connection;

// A read's result handed to the front end as it is, not encoded
// (Responder::SendValue): one of these, the status an error frame would carry.
using ReadValue = std::variant<Result<GetResult>, Result<BatchGetResult>>;

// Where one request's answer goes: back to the connection it came on. The
// front end hands one to Handler::Handle with each request; the handler
// carries it along with the work, then calls Send once with the whole
// response frame (header included), on the handler's thread. The connection
// may have closed meanwhile: the frame is then dropped. Copyable so that it
// fits in a std::function; only one copy may Send.
class Responder {
 public:
  Responder(std::shared_ptr<Connection> connection, std::chrono::steady_clock::time_point started,
            bool takes_values = false)
      : connection_(std::move(connection)), started_(started), takes_values_(takes_values) {}
  // Connection::OnReply: the answer is timed, counted and queued for writing.
  void Send(std::string frame);
  // The answer's header gets these flags (proto::kFlag*), whatever its body.
  void set_flags(uint8_t flags) { flags_ = flags; }
  // True for a front end that would only decode an encoded read answer to
  // write its own format (the RESP port): a read's outcome then goes by
  // SendValue instead of Send. Errors found before the read (a bad request,
  // a user this node does not serve) still go as frames.
  bool takes_values() const { return takes_values_; }
  // Connection::OnValue, with the flags set: instead of Send, once.
  void SendValue(uint32_t request_id, ReadValue value);

 private:
  std::shared_ptr<Connection> connection_;
  std::chrono::steady_clock::time_point started_;  // when the request was read
  uint8_t flags_ = 0;
  bool takes_values_ = false;
};

// Lives on one event loop thread: created, used and destroyed there.
class Handler {
 public:
  virtual ~Handler() = default;
  // One request. `header` passed the front end's checks (magic, version,
  // size, known op); `body` is valid only during the call.
  virtual void Handle(const proto::FrameHeader& header, std::string_view body,
                      Responder responder) = 0;
  // The reads, for a front end that has the request as a value (the RESP
  // port): the same checks, errors and answers as Handle's get and
  // batch_get, without encoding and decoding the request (and, for a
  // responder that takes_values(), the answer). `header` gives the op and
  // request ID. The default encodes the request and calls Handle.
  virtual void HandleGet(const proto::FrameHeader& header, proto::GetRequest request,
                         Responder responder);
  virtual void HandleBatchGet(const proto::FrameHeader& header, proto::BatchGetRequest request,
                              Responder responder);
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

// Runs tasks on one event loop's thread, from any thread: how work that
// completes elsewhere (a cluster's log, another node) gets back to the loop
// that owns the connection. A task posted once the loop has stopped is
// dropped unrun, on the posting thread.
class LoopPoster {
 public:
  virtual ~LoopPoster() = default;
  virtual void Post(std::function<void()> task) = 0;
};

class Service {
 public:
  virtual ~Service() = default;
  // Called once on each event loop thread, from that thread, before it serves.
  // `poster` reaches that same thread from any other.
  virtual Result<std::unique_ptr<Handler>> NewHandler(unsigned thread_index,
                                                      std::shared_ptr<LoopPoster> poster) = 0;
};

}  // namespace segstore::server
