#include "server/connection.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "proto/wire.h"

namespace segstore::server {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {
constexpr size_t kReadChunk = 64 * 1024;
// Before authentication a client may send only a hello: a frame announcing
// more than this closes the connection, so no one without the secret makes
// the server hold max_frame_bytes for them.
constexpr uint32_t kMaxUnauthenticatedBody = 64 * 1024;
// A deadline already past is looked at again this much later, not at once:
// a connection paused by backpressure must not spin its loop.
constexpr auto kRecheck = std::chrono::milliseconds(100);
// How long an error frame before a close may wait for a client that does
// not read it.
constexpr auto kCloseGrace = std::chrono::milliseconds(2000);
}  // namespace

Connection::Connection(Loop* loop, asio::ip::tcp::socket socket, const ServerOptions& options,
                       std::shared_ptr<const Credentials> credentials)
    : loop_(loop),
      credentials_(std::move(credentials)),
      options_(options),
      socket_(std::move(socket)),
      timer_(loop->io) {
  if (credentials_->tls() != nullptr) {
    tls_ =
        std::make_unique<asio::ssl::stream<asio::ip::tcp::socket&>>(socket_, *credentials_->tls());
    state_ = State::kHandshake;
  }
  authenticated_ = !credentials_->auth_required();
}

void Connection::Start() {
  error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  Touch();
  accepted_ = last_activity_;
  ArmTimer();
  if (state_ == State::kHandshake) {
    tls_->async_handshake(
        asio::ssl::stream_base::server,
        [self = shared_from_this()](const error_code& e) { self->OnHandshake(e); });
    return;
  }
  Pump();
}

void Connection::Pump() {
  if (pumping_ || state_ == State::kClosed) return;
  pumping_ = true;
  while (!Paused() && ServeNext()) {
  }
  StartWrite();
  StartRead();
  pumping_ = false;
  if (Finishing() && in_flight_ == 0 && out_.empty() && writing_.empty() && !input().Ready()) {
    Close();
  }
}

// ---- events ----

void Connection::OnHandshake(const error_code& ec) {
  if (state_ != State::kHandshake) return;  // closed, or drained, meanwhile
  if (ec) {
    // A plain-TCP client, an untrusted or missing client certificate, a
    // scanner: nothing can be sent back outside TLS. Counted, not logged
    // above debug (anyone can cause one).
    LoopCounters::Add(loop_->counters.tls_handshake_failures, 1);
    spdlog::debug("TLS handshake with {} failed: {}", Peer(), ec.message());
    Close();
    return;
  }
  state_ = State::kOpen;
  Touch();
  Pump();
}

void Connection::OnRead(const error_code& ec, size_t n) {
  reading_ = false;
  if (state_ != State::kOpen) {
    Pump();  // draining or failing: what came is not wanted
    return;
  }
  if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
    // The client finished sending (it may still read): every whole request
    // it sent is answered, then the connection closes; a partial frame at
    // the end can never complete and is dropped unanswered.
    state_ = State::kInputEnded;
    Pump();
    return;
  }
  if (ec) {
    // A reset or another error: requests in flight still complete (their
    // writes are not undone); their replies are dropped.
    Close();
    return;
  }
  const bool at_frame_start = input().empty();
  const uint64_t taken_before = input().taken();
  input().Commit(n);
  LoopCounters::Add(loop_->counters.bytes_in, n);
  Touch();
  Pump();
  // A request begun in this read: its clock starts now.
  if (at_frame_start || input().taken() != taken_before) frame_begun_ = last_activity_;
  // The timer looks at most every frame_timeout for a request left partial.
  if (frame_begun_ + options_.frame_timeout < timer_at_ && PartialRequest()) ArmTimer();
}

void Connection::OnWritten(const error_code& ec, size_t n) {
  if (state_ == State::kClosed) return;
  if (ec) {
    Close();
    return;
  }
  LoopCounters::Add(loop_->counters.bytes_out, n);
  Touch();
  writing_.clear();
  if (writing_.capacity() > 4 * kReadChunk) writing_.shrink_to_fit();
  Pump();
}

// A second answer would leave the connection's count of requests in flight
// wrong for good.
void Connection::AnsweredTwice() {
  std::fputs("segstored: a request was answered twice\n", stderr);
  std::abort();
}

void Responder::Send(std::string frame) {
  std::shared_ptr<Connection> c = std::move(connection_);
  if (c == nullptr) Connection::AnsweredTwice();
  if (flags_ != 0 && frame.size() >= proto::kHeaderSize) frame[5] = static_cast<char>(flags_);
  c->OnReply(std::move(frame), started_);
}

void Responder::SendValue(uint32_t request_id, ReadValue value) {
  std::shared_ptr<Connection> c = std::move(connection_);
  if (c == nullptr) Connection::AnsweredTwice();
  c->OnValue(request_id, flags_, std::move(value));
}

void Connection::OnValue(uint32_t, uint8_t, ReadValue) {
  // Only a connection whose responders take_values() gets one: a bug.
  std::fputs("segstored: a read's value was sent to a connection that takes frames\n", stderr);
  std::abort();
}

void FrameConnection::OnReply(std::string frame, std::chrono::steady_clock::time_point started) {
  if (in_flight_ == 0) AnsweredTwice();  // through a copy of its Responder
  --in_flight_;
  if (frame.size() >= proto::kHeaderSize) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count();
    loop_->counters.latency_us[proto::OpSlot(static_cast<uint8_t>(frame[3]))].Record(
        static_cast<uint64_t>(std::max<int64_t>(us, 0)));
  }
  if (state_ == State::kClosed) return;
  QueueFrame(std::move(frame));
  Pump();
}

void Connection::Drain() {
  // A failing connection is already finishing, on a shorter deadline.
  if (state_ == State::kClosed || state_ == State::kFailing) return;
  state_ = State::kDraining;
  input().Clear();  // requests read but not taken are dropped: nothing was acknowledged
  error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_receive, ec);
  Pump();
}

// ---- the steps Pump takes ----

bool FrameConnection::ServeNext() {
  proto::FrameHeader h;
  std::string_view body;
  const uint32_t max_body = authenticated_
                                ? options_.max_frame_bytes
                                : std::min(options_.max_frame_bytes, kMaxUnauthenticatedBody);
  switch (in_.Take(max_body, &h, &body)) {
    case proto::FrameBuffer::Next::kNeedMore:
      return false;
    case proto::FrameBuffer::Next::kBadMagic:
      LoopCounters::Add(loop_->counters.broken_frames, 1);
      Fail(Status::InvalidArgument("bad frame magic: not a segstore frame"));
      return false;
    case proto::FrameBuffer::Next::kTooLarge: {
      LoopCounters::Add(loop_->counters.broken_frames, 1);
      const Status s = Status::LimitExceeded(
          "frame body of " + std::to_string(h.body_length) + " bytes is over the limit of " +
          std::to_string(max_body) + (authenticated_ ? "" : " before authentication"));
      std::string frame;
      proto::AppendErrorFrame(&frame, h.op, h.request_id, s);
      CountFrame(frame);
      FailWith(s, std::move(frame));
      return false;
    }
    case proto::FrameBuffer::Next::kFrame:
      break;
  }
  LoopCounters::Add(loop_->counters.requests, 1);
  LoopCounters::Add(loop_->counters.by_op[h.op], 1);

  Status refuse;
  if (h.version != proto::kVersion) {
    refuse = Status::Unsupported("protocol version " + std::to_string(h.version) +
                                 " is not supported; this server speaks " +
                                 std::to_string(proto::kVersion));
  } else if (!proto::IsKnownOp(h.op)) {
    refuse = Status::Unsupported("unknown operation code " + std::to_string(h.op));
  } else if (h.status != 0) {
    refuse = Status::InvalidArgument("a request must carry status 0");
  }
  if (!refuse.ok()) {
    std::string out;
    proto::AppendErrorFrame(&out, h.op, h.request_id, refuse);
    QueueFrame(std::move(out));
    return true;
  }
  if (!authenticated_ && !Authenticate(h, body)) return state_ != State::kFailing;
  ++in_flight_;
  JoinBurst();
  const auto started = std::chrono::steady_clock::now();
  loop_->handler->Handle(h, body, Responder(shared_from_this(), started));
  return true;
}

bool FrameConnection::Authenticate(const proto::FrameHeader& h, std::string_view body) {
  Status refuse;
  proto::HelloRequest hello;
  if (h.op != static_cast<uint8_t>(proto::Op::kHello)) {
    refuse = Status::Unauthenticated(
        "this server requires authentication: send hello with the shared secret (auth) first");
  } else if (Status s = proto::Decode(body, proto::DecodeLimits{}, &hello); !s.ok()) {
    refuse = s.WithContext("hello");
  } else if (hello.auth.empty()) {
    refuse = Status::Unauthenticated("hello: this server requires the shared secret (auth)");
  } else if (!credentials_->Authenticate(hello.auth)) {
    LoopCounters::Add(loop_->counters.auth_failures, 1);
    const Status wrong = Status::Unauthenticated("hello: wrong shared secret");
    std::string frame;
    proto::AppendErrorFrame(&frame, h.op, h.request_id, wrong);
    CountFrame(frame);
    FailWith(wrong, std::move(frame));
    return false;
  } else {
    authenticated_ = true;
    return true;
  }
  std::string out;
  proto::AppendErrorFrame(&out, h.op, h.request_id, refuse);
  QueueFrame(std::move(out));
  return false;
}

void Connection::JoinBurst() {
  if (loop_->in_burst) return;
  // Posted work runs after the handlers already due in this turn of the
  // loop: every request read in this turn joins one submission.
  loop_->in_burst = true;
  loop_->handler->BeginBurst();
  asio::post(loop_->io, [loop = loop_] {
    loop->in_burst = false;
    loop->handler->EndBurst();
  });
}

bool Connection::Paused() const {
  return in_flight_ >= options_.max_in_flight ||
         out_.size() + writing_.size() >= options_.max_pending_bytes;
}

void Connection::StartRead() {
  if (reading_ || state_ != State::kOpen) return;
  if (Paused()) {
    if (!was_paused_) {
      was_paused_ = true;
      LoopCounters::Add(loop_->counters.pauses, 1);
    }
    return;
  }
  was_paused_ = false;
  input().Shrink();  // a large buffer left by a large request goes back to the allocator
  const auto space = input().Space();
  reading_ = true;
  auto on_read = [self = shared_from_this()](const error_code& ec, size_t n) {
    self->OnRead(ec, n);
  };
  if (tls_) {
    tls_->async_read_some(asio::buffer(space.data, space.size), std::move(on_read));
  } else {
    socket_.async_read_some(asio::buffer(space.data, space.size), std::move(on_read));
  }
}

void Connection::StartWrite() {
  if (!writing_.empty() || out_.empty() || state_ == State::kClosed) return;
  writing_.swap(out_);  // out_ takes writing_'s empty buffer
  auto on_written = [self = shared_from_this()](const error_code& ec, size_t n) {
    self->OnWritten(ec, n);
  };
  if (tls_) {
    asio::async_write(*tls_, asio::buffer(writing_), std::move(on_written));
  } else {
    asio::async_write(socket_, asio::buffer(writing_), std::move(on_written));
  }
}

void Connection::Queue(std::string bytes) {
  if (state_ == State::kClosed) return;
  // Usually nothing is queued: the answer becomes the output without a copy.
  if (out_.empty()) {
    out_.swap(bytes);
  } else {
    out_.append(bytes);
  }
}

void Connection::Fail(const Status& status) {
  std::string bytes;
  AppendFailure(status, &bytes);
  FailWith(status, std::move(bytes));
}

void Connection::FailWith(const Status& status, std::string bytes) {
  spdlog::warn("closing connection from {}: {}", Peer(), status.ToString());
  Queue(std::move(bytes));
  state_ = State::kFailing;
  input().Clear();
  ArmTimer();  // a client that does not read its error is not waited for
  Pump();
}

// ---- the binary protocol ----

FrameConnection::FrameConnection(Loop* loop, asio::ip::tcp::socket socket,
                                 const ServerOptions& options,
                                 std::shared_ptr<const Credentials> credentials)
    : Connection(loop, std::move(socket), options, std::move(credentials)),
      in_(kReadChunk, 4 * kReadChunk, options.max_frame_bytes) {}

void FrameConnection::CountFrame(const std::string& frame) {
  // Every frame sent is one response: count it by operation and status.
  if (frame.size() < proto::kHeaderSize) return;
  const auto status = static_cast<uint8_t>(frame[4]);
  LoopCounters::Add(loop_->counters.responses[proto::OpSlot(static_cast<uint8_t>(frame[3]))]
                                             [std::min<size_t>(status, kStatusCodes - 1)],
                    1);
  if (status != 0) LoopCounters::Add(loop_->counters.error_responses, 1);
}

void FrameConnection::QueueFrame(std::string frame) {
  CountFrame(frame);
  Queue(std::move(frame));
}

void FrameConnection::AppendFailure(const Status& status, std::string* out) {
  proto::AppendErrorFrame(out, 0, 0, status);
  CountFrame(*out);
}

// ---- deadlines ----

void Connection::ArmTimer() {
  // While a request is being served the connection is not idle, whatever the
  // last byte's time: look again a whole timeout from now, not from then.
  const auto now = std::chrono::steady_clock::now();
  const auto from = in_flight_ > 0 ? std::max(last_activity_, now) : last_activity_;
  auto at = from + options_.idle_timeout;
  // A request trickling in: look when its time is up (again a little later
  // if the check finds a whole one waiting on backpressure instead).
  if (PartialRequest()) {
    at = std::min(at, std::max(frame_begun_ + options_.frame_timeout, now + kRecheck));
  }
  // Not yet through the handshake and hello: that has its own deadline.
  if (!Established()) {
    at = std::min(at, std::max(accepted_ + options_.frame_timeout, now + kRecheck));
  }
  if (state_ == State::kFailing) at = std::min(at, now + kCloseGrace);
  timer_at_ = at;
  timer_.expires_at(at);  // a wait already pending ends with operation_aborted
  timer_.async_wait([self = shared_from_this()](const error_code& ec) { self->OnTimer(ec); });
}

void Connection::OnTimer(const error_code& ec) {
  if (ec || state_ == State::kClosed) return;
  if (state_ == State::kFailing) {
    Close();  // its error frame was not taken in time
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(options_.frame_timeout);
  if (!Established() && now - accepted_ >= options_.frame_timeout) {
    LoopCounters::Add(loop_->counters.slow_closed, 1);
    if (state_ == State::kHandshake) {
      LoopCounters::Add(loop_->counters.tls_handshake_failures, 1);
      Close();  // nothing can be said outside TLS
      return;
    }
    Fail(Status::Unauthenticated("not authenticated within " + std::to_string(ms.count()) + " ms"));
    return;
  }
  if (PartialRequest() && !Paused() && now - frame_begun_ >= options_.frame_timeout) {
    LoopCounters::Add(loop_->counters.slow_closed, 1);
    Fail(Status::LimitExceeded("a request did not arrive whole within " +
                               std::to_string(ms.count()) + " ms"));
    return;
  }
  // Idle: nothing read or written for the whole timeout, and nothing being
  // served (a reader that stopped reading counts: its writes do not move).
  if (in_flight_ == 0 && now - last_activity_ >= options_.idle_timeout) {
    LoopCounters::Add(loop_->counters.idle_closed, 1);
    Close();
    return;
  }
  ArmTimer();
}

std::string Connection::Peer() const {
  error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

void Connection::Close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  timer_.cancel();
  out_.clear();
  LoopCounters::Add(loop_->counters.closed, 1);
  // Drop the loop's reference last: `this` may go with it.
  loop_->connections.erase(shared_from_this());
}

}  // namespace segstore::server
