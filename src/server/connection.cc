#include "server/connection.h"

#include <spdlog/spdlog.h>

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
}

Connection::Connection(Loop* loop, asio::ip::tcp::socket socket, const ServerOptions& options,
                       std::shared_ptr<const Credentials> credentials)
    : loop_(loop),
      socket_(std::move(socket)),
      credentials_(std::move(credentials)),
      idle_timer_(loop->io),
      options_(options) {
  if (credentials_->tls() != nullptr) {
    tls_ = std::make_unique<asio::ssl::stream<asio::ip::tcp::socket&>>(socket_,
                                                                        *credentials_->tls());
    handshake_done_ = false;
  }
  authenticated_ = !credentials_->auth_required();
}

void Connection::Start() {
  error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  Touch();
  accepted_ = last_activity_;
  ArmIdleTimer();
  if (tls_) {
    tls_->async_handshake(asio::ssl::stream_base::server,
                          [self = shared_from_this()](const error_code& e) {
                            self->OnHandshake(e);
                          });
    return;
  }
  Read();
}

void Connection::OnHandshake(const error_code& ec) {
  if (closed_) return;
  if (ec) {
    // A plain-TCP client, an untrusted or missing client certificate, a
    // scanner: nothing can be sent back outside TLS. Counted, not logged
    // above debug (anyone can cause one).
    LoopCounters::Add(loop_->counters.tls_handshake_failures, 1);
    spdlog::debug("TLS handshake with {} failed: {}", Peer(), ec.message());
    Close();
    return;
  }
  handshake_done_ = true;
  Touch();
  if (draining_) {
    MaybeFinish();
    return;
  }
  Read();
}

std::string Connection::Peer() const {
  error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

bool Connection::Paused() const {
  return in_flight_ >= options_.max_in_flight ||
         out_.size() + writing_.size() >= options_.max_pending_bytes;
}

void Connection::Read() {
  if (reading_ || closed_ || draining_ || close_after_write_ || input_ended_ || !handshake_done_) {
    return;
  }
  if (Paused()) {
    if (!was_paused_) {
      was_paused_ = true;
      LoopCounters::Add(loop_->counters.pauses, 1);
    }
    return;
  }
  was_paused_ = false;
  // Room for the next chunk, or for the rest of a large frame already begun.
  if (start_ == end_) start_ = end_ = 0;
  size_t want = kReadChunk;
  if (end_ - start_ >= proto::kHeaderSize) {
    proto::FrameHeader h;
    if (proto::DecodeHeader(reinterpret_cast<const uint8_t*>(in_.data() + start_), UINT32_MAX,
                            &h) != proto::HeaderCheck::kBadMagic) {
      const size_t frame = proto::kHeaderSize + size_t{h.body_length};
      if (frame > end_ - start_) want = std::max(want, frame - (end_ - start_));
    }
  }
  if (in_.size() - end_ < want) {
    if (start_ > 0) {
      std::memmove(in_.data(), in_.data() + start_, end_ - start_);
      end_ -= start_;
      start_ = 0;
    }
    if (in_.size() - end_ < want) in_.resize(end_ + want);
  }
  reading_ = true;
  auto on_read = [self = shared_from_this()](const error_code& ec, size_t n) {
    self->OnRead(ec, n);
  };
  const auto buffer = asio::buffer(in_.data() + end_, in_.size() - end_);
  if (tls_) {
    tls_->async_read_some(buffer, std::move(on_read));
  } else {
    socket_.async_read_some(buffer, std::move(on_read));
  }
}

void Connection::OnRead(const error_code& ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  if (draining_) {
    MaybeFinish();
    return;
  }
  if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
    // The client finished sending (it may still read): every whole request
    // it sent is answered, then the connection closes; a partial frame at
    // the end can never complete and is dropped unanswered.
    input_ended_ = true;
    ProcessInput();
    return;
  }
  if (ec) {
    // A reset or another error: requests in flight still complete (their
    // writes are not undone); their replies are dropped.
    Close();
    return;
  }
  const bool at_frame_start = start_ == end_;
  const size_t start_before = start_;
  end_ += n;
  LoopCounters::Add(loop_->counters.bytes_in, n);
  Touch();
  ProcessInput();
  // A frame begun in this read: its clock starts now.
  if (at_frame_start || start_ != start_before) frame_begun_ = last_activity_;
  // The timer looks at most every frame_timeout for a frame left partial.
  if (frame_begun_ + options_.frame_timeout < timer_at_ && PartialFrame()) ArmIdleTimer();
  Read();
  // A large idle read buffer goes back to the allocator.
  if (start_ == end_ && in_.size() > 4 * kReadChunk && !reading_) in_ = std::vector<char>();
}

void Connection::ProcessInput() {
  if (processing_) return;  // a reply arrived from inside Handle(): the outer loop goes on
  processing_ = true;
  while (!closed_ && !close_after_write_ && !Paused() && end_ - start_ >= proto::kHeaderSize) {
    if (!HandleFrame()) break;
  }
  processing_ = false;
  MaybeFinish();
}

bool Connection::HandleFrame() {
  const auto* head = reinterpret_cast<const uint8_t*>(in_.data() + start_);
  proto::FrameHeader h;
  const uint32_t max_body = authenticated_
                                ? options_.max_frame_bytes
                                : std::min(options_.max_frame_bytes, kMaxUnauthenticatedBody);
  switch (proto::DecodeHeader(head, max_body, &h)) {
    case proto::HeaderCheck::kBadMagic:
      LoopCounters::Add(loop_->counters.broken_frames, 1);
      FailConnection(0, 0, Status::InvalidArgument("bad frame magic: not a segstore frame"));
      return false;
    case proto::HeaderCheck::kTooLarge:
      LoopCounters::Add(loop_->counters.broken_frames, 1);
      FailConnection(h.op, h.request_id,
                     Status::LimitExceeded("frame body of " + std::to_string(h.body_length) +
                                           " bytes is over the limit of " +
                                           std::to_string(max_body) +
                                           (authenticated_ ? "" : " before authentication")));
      return false;
    case proto::HeaderCheck::kBadVersion:
    case proto::HeaderCheck::kOk:
      break;
  }
  const size_t frame = proto::kHeaderSize + size_t{h.body_length};
  if (end_ - start_ < frame) return false;  // the rest is still to come
  const std::string_view body(in_.data() + start_ + proto::kHeaderSize, h.body_length);
  start_ += frame;
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
    Send(std::move(out));
    return true;
  }
  if (!authenticated_) {
    bool close = false;
    if (!Authenticate(h, body, &close)) return !close;
  }
  ++in_flight_;
  if (!loop_->in_burst) {
    // Posted work runs after the handlers already due in this turn of the
    // loop: every request read in this turn joins one submission.
    loop_->in_burst = true;
    loop_->handler->BeginBurst();
    boost::asio::post(loop_->io, [loop = loop_] {
      loop->in_burst = false;
      loop->handler->EndBurst();
    });
  }
  const auto started = std::chrono::steady_clock::now();
  loop_->handler->Handle(h, body, [self = shared_from_this(), started](std::string reply) {
    self->OnReply(std::move(reply), started);
  });
  return true;
}

bool Connection::Authenticate(const proto::FrameHeader& h, std::string_view body, bool* close) {
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
    *close = true;
    FailConnection(h.op, h.request_id, Status::Unauthenticated("hello: wrong shared secret"));
    return false;
  } else {
    authenticated_ = true;
    return true;
  }
  std::string out;
  proto::AppendErrorFrame(&out, h.op, h.request_id, refuse);
  Send(std::move(out));
  return false;
}

void Connection::OnReply(std::string frame, std::chrono::steady_clock::time_point started) {
  --in_flight_;
  if (frame.size() >= proto::kHeaderSize) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count();
    loop_->counters.latency_us[proto::OpSlot(static_cast<uint8_t>(frame[3]))].Record(
        static_cast<uint64_t>(std::max<int64_t>(us, 0)));
  }
  if (closed_) return;
  Send(std::move(frame));
  if (!processing_) {
    ProcessInput();  // frames already buffered may now be served
    Read();
  }
}

void Connection::Send(std::string frame) {
  if (closed_) return;
  // Every frame sent is one response: count it by operation and status.
  if (frame.size() >= proto::kHeaderSize) {
    const auto status = static_cast<uint8_t>(frame[4]);
    LoopCounters::Add(loop_->counters.responses[proto::OpSlot(static_cast<uint8_t>(frame[3]))]
                                               [std::min<size_t>(status, kStatusCodes - 1)],
                      1);
    if (status != 0) LoopCounters::Add(loop_->counters.error_responses, 1);
  }
  // Usually nothing is queued: the frame becomes the output without a copy.
  if (out_.empty()) {
    out_.swap(frame);
  } else {
    out_.append(frame);
  }
  Write();
}

void Connection::Write() {
  if (writing_now_ || out_.empty() || closed_) return;
  writing_now_ = true;
  writing_.swap(out_);
  out_.clear();
  auto on_written = [self = shared_from_this()](const error_code& ec, size_t n) {
                      self->writing_now_ = false;
                      if (self->closed_) return;
                      if (ec) {
                        self->Close();
                        return;
                      }
                      LoopCounters::Add(self->loop_->counters.bytes_out, n);
                      self->Touch();
                      self->writing_.clear();
                      if (self->writing_.capacity() > 4 * kReadChunk) self->writing_.shrink_to_fit();
                      self->Write();
                      if (!self->processing_) {
                        self->ProcessInput();
                        self->Read();
                      }
                      self->MaybeFinish();
  };
  if (tls_) {
    asio::async_write(*tls_, asio::buffer(writing_), std::move(on_written));
  } else {
    asio::async_write(socket_, asio::buffer(writing_), std::move(on_written));
  }
}

void Connection::FailConnection(uint8_t op, uint32_t request_id, const Status& status) {
  spdlog::warn("closing connection from {}: {}", Peer(), status.ToString());
  std::string out;
  proto::AppendErrorFrame(&out, op, request_id, status);
  Send(std::move(out));
  close_after_write_ = true;
  start_ = end_ = 0;
  MaybeFinish();
  // A client that does not read its error frame is not waited for.
  if (!closed_) ArmIdleTimer();
}

void Connection::Drain() {
  draining_ = true;
  start_ = end_ = 0;  // frames read but not started are dropped: nothing was acknowledged
  error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_receive, ec);
  MaybeFinish();
}

void Connection::MaybeFinish() {
  if (closed_) return;
  const bool done_reading = draining_ || close_after_write_ || (input_ended_ && !WholeFrame());
  if (done_reading && in_flight_ == 0 && out_.empty() && !writing_now_) Close();
}

bool Connection::WholeFrame() const {
  if (end_ - start_ < proto::kHeaderSize) return false;
  proto::FrameHeader h;
  if (proto::DecodeHeader(reinterpret_cast<const uint8_t*>(in_.data() + start_), UINT32_MAX, &h) ==
      proto::HeaderCheck::kBadMagic) {
    return true;  // answered as a broken frame, whatever follows
  }
  return end_ - start_ >= proto::kHeaderSize + size_t{h.body_length};
}

bool Connection::PartialFrame() const {
  if (end_ == start_ || closed_ || close_after_write_ || draining_ || input_ended_) return false;
  return !WholeFrame();
}

void Connection::ArmIdleTimer() {
  // While a request is being served the connection is not idle, whatever the
  // last byte's time: look again a whole timeout from now, not from then.
  const auto now = std::chrono::steady_clock::now();
  const auto from = in_flight_ > 0 ? std::max(last_activity_, now) : last_activity_;
  auto at = from + options_.idle_timeout;
  // A frame trickling in: look when its time is up (again a little later if
  // the check finds a whole frame waiting on backpressure instead).
  if (PartialFrame()) {
    at = std::min(at, std::max(frame_begun_ + options_.frame_timeout, now + kRecheck));
  }
  // Not yet through the handshake and hello: that has its own deadline.
  if (!Established()) {
    at = std::min(at, std::max(accepted_ + options_.frame_timeout, now + kRecheck));
  }
  if (close_after_write_) at = std::min(at, now + kCloseGrace);
  timer_at_ = at;
  idle_timer_.expires_at(at);  // a wait already pending ends with operation_aborted
  idle_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->closed_) return;
    if (self->close_after_write_) {
      self->Close();  // its error frame was not taken in time
      return;
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(self->options_.frame_timeout);
    if (!self->Established() &&
        std::chrono::steady_clock::now() - self->accepted_ >= self->options_.frame_timeout) {
      LoopCounters::Add(self->loop_->counters.slow_closed, 1);
      if (!self->handshake_done_) {
        LoopCounters::Add(self->loop_->counters.tls_handshake_failures, 1);
        self->Close();  // nothing can be said outside TLS
        return;
      }
      self->FailConnection(0, 0,
                           Status::Unauthenticated("not authenticated within " +
                                                   std::to_string(ms.count()) + " ms"));
      return;
    }
    if (self->PartialFrame() && !self->Paused() &&
        std::chrono::steady_clock::now() - self->frame_begun_ >= self->options_.frame_timeout) {
      LoopCounters::Add(self->loop_->counters.slow_closed, 1);
      self->FailConnection(0, 0,
                           Status::LimitExceeded("a request frame did not arrive whole within " +
                                                 std::to_string(ms.count()) + " ms"));
      return;
    }
    // Idle: nothing read or written for the whole timeout, and nothing being
    // served (a reader that stopped reading counts: its writes do not move).
    if (self->in_flight_ == 0 &&
        std::chrono::steady_clock::now() - self->last_activity_ >= self->options_.idle_timeout) {
      LoopCounters::Add(self->loop_->counters.idle_closed, 1);
      self->Close();
      return;
    }
    self->ArmIdleTimer();
  });
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  idle_timer_.cancel();
  out_.clear();
  LoopCounters::Add(loop_->counters.closed, 1);
  // Drop the loop's reference last: `this` may go with it.
  loop_->connections.erase(shared_from_this());
}

}  // namespace segstore::server
