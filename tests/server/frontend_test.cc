// The network front end (Server, Connection) against a stub Service, driven
// by raw sockets: framing, pipelining, the protocol's error cases, the
// connection limits, backpressure and shutdown (proto/PROTOCOL.md).

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "proto/protocol.h"
#include "proto/wire.h"
#include "server/raw_conn.h"
#include "server/server.h"
#include "server/stub_service.h"
#include "support/resp_conn.h"

namespace segstore::server {
namespace {

using std::chrono::milliseconds;
using testing::IdFor;
using testing::kPatience;
using testing::MakeFrame;
using testing::MakeHeader;
using testing::RawConn;
using testing::SizeBody;
using testing::StubService;
using testing::WaitFor;
using Code = Status::Code;

constexpr auto kPing = static_cast<uint8_t>(proto::Op::kPing);
constexpr auto kStats = static_cast<uint8_t>(proto::Op::kStats);

class FrontendTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (server_ != nullptr) {
      service_.set_hold(false);
      service_.ReleaseHeld();
      server_->Stop();
    }
  }

  // Starts a server on an ephemeral port of 127.0.0.1.
  void StartServer(ServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    if (options.threads == 0) options.threads = 2;
    server_ = std::make_unique<Server>(options, &service_);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_NE(server_->port(), 0);
  }

  RawConn Connect(int rcvbuf = 0) {
    RawConn c;
    EXPECT_TRUE(c.Connect(server_->port(), rcvbuf)) << std::strerror(errno);
    return c;
  }

  // A ping answered on `c`, echoing its body.
  ::testing::AssertionResult Ping(RawConn& c, uint32_t id) {
    const std::string body = "ping " + std::to_string(id);
    auto w = c.Write(MakeFrame(kPing, id, body));
    if (!w) return w;
    testing::Frame f;
    auto r = c.Expect(id, Code::kOk, &f);
    if (!r) return r;
    if (f.body != body) return ::testing::AssertionFailure() << "body \"" << f.body << "\"";
    return ::testing::AssertionSuccess();
  }

  ServerCounters counters() const { return server_->counters(); }

  StubService service_;  // outlives server_
  std::unique_ptr<Server> server_;
};

TEST_F(FrontendTest, PipelinedRequestsAreAllAnsweredAndMatchedById) {
  StartServer();
  RawConn c = Connect();
  constexpr uint32_t kRequests = 5000;
  std::string burst;
  for (uint32_t i = 1; i <= kRequests; ++i) {
    burst += MakeFrame(kPing, IdFor(1, i), "body of " + std::to_string(i));
  }
  ASSERT_TRUE(c.Write(burst));  // all at once
  std::set<uint32_t> answered;
  for (uint32_t n = 0; n < kRequests; ++n) {
    testing::Frame f;
    ASSERT_EQ(c.ReadFrame(&f), RawConn::ReadResult::kFrame) << "after " << n << " responses";
    ASSERT_EQ(f.status(), Code::kOk);
    ASSERT_EQ(f.op(), kPing);
    const uint32_t seq = f.id() & 0xFFFFF;
    ASSERT_EQ(f.id(), IdFor(1, seq));
    ASSERT_EQ(f.body, "body of " + std::to_string(seq));
    ASSERT_TRUE(answered.insert(f.id()).second) << "request " << f.id() << " answered twice";
  }
  EXPECT_EQ(answered.size(), kRequests);
  EXPECT_TRUE(c.ExpectQuiet(milliseconds(50)));
  EXPECT_GE(counters().requests, kRequests);
  EXPECT_EQ(counters().requests_by_op[kPing], kRequests);
}

TEST_F(FrontendTest, FrameArrivingByteByByteIsServed) {
  StartServer();
  RawConn c = Connect();
  const std::string frame = MakeFrame(kPing, 7, "split across many writes");
  for (char b : frame) ASSERT_TRUE(c.Write(std::string_view(&b, 1)));
  testing::Frame f;
  ASSERT_TRUE(c.Expect(7, Code::kOk, &f));
  EXPECT_EQ(f.body, "split across many writes");
}

TEST_F(FrontendTest, BodyOfExactlyMaxFrameBytesIsServed) {
  ServerOptions o;
  o.max_frame_bytes = 1 << 20;
  StartServer(o);
  RawConn c = Connect();
  std::string body(o.max_frame_bytes, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 131 % 251);
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 3, body)));
  testing::Frame f;
  ASSERT_TRUE(c.Expect(3, Code::kOk, &f));
  EXPECT_TRUE(f.body == body);
  EXPECT_TRUE(Ping(c, 4));
}

TEST_F(FrontendTest, BadMagicGetsOneInvalidArgumentFrameThenClose) {
  StartServer();
  RawConn c = Connect();
  ASSERT_TRUE(c.Write("GET / HTTP/1.1\r\n"));  // 16 bytes that are not a frame
  testing::Frame f;
  ASSERT_TRUE(c.Expect(0, Code::kInvalidArgument, &f));
  EXPECT_EQ(f.op(), 0);
  EXPECT_TRUE(c.ExpectClosed());
  EXPECT_TRUE(WaitFor([&] { return counters().broken_frames == 1; }));
  EXPECT_EQ(service_.handled(), 0u);
}

TEST_F(FrontendTest, BodyOverMaxFrameBytesGetsLimitExceededThenClose) {
  ServerOptions o;
  o.max_frame_bytes = 4096;
  StartServer(o);
  RawConn c = Connect();
  ASSERT_TRUE(c.Write(MakeHeader(kPing, 77, o.max_frame_bytes + 1)));
  testing::Frame f;
  ASSERT_TRUE(c.Expect(77, Code::kLimitExceeded, &f));
  EXPECT_EQ(f.op(), kPing);
  EXPECT_TRUE(c.ExpectClosed());
  EXPECT_TRUE(WaitFor([&] { return counters().broken_frames == 1; }));
  EXPECT_EQ(service_.handled(), 0u);
}

TEST_F(FrontendTest, UnknownOpGetsUnsupportedAndConnectionStaysUsable) {
  StartServer();
  RawConn c = Connect();
  ASSERT_TRUE(c.Write(MakeFrame(0x7f, 5, "whatever") + MakeFrame(kPing, 6, "next")));
  testing::Frame f;
  ASSERT_TRUE(c.Expect(5, Code::kUnsupported, &f));
  EXPECT_EQ(f.op(), 0x7f);
  ASSERT_TRUE(c.Expect(6, Code::kOk, &f));
  EXPECT_EQ(f.body, "next");
  EXPECT_TRUE(Ping(c, 8));
  EXPECT_EQ(service_.handled(), 2u);  // the unknown op never reached the handler
}

TEST_F(FrontendTest, OtherVersionGetsUnsupportedWithItsBodySkipped) {
  StartServer();
  RawConn c = Connect();
  // The version-2 frame's body is itself a valid version-1 frame: were the
  // body not skipped, request 99 would be answered.
  const std::string inner = MakeFrame(kPing, 99, "smuggled");
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 8, inner, /*version=*/2) + MakeFrame(kPing, 9, "after")));
  testing::Frame f;
  ASSERT_TRUE(c.Expect(8, Code::kUnsupported, &f));
  ASSERT_TRUE(c.Expect(9, Code::kOk, &f));
  EXPECT_EQ(f.body, "after");
  EXPECT_TRUE(Ping(c, 10));  // and nothing for 99 came before it
  EXPECT_TRUE(c.ExpectQuiet(milliseconds(50)));
}

TEST_F(FrontendTest, RequestWithNonZeroStatusGetsInvalidArgument) {
  StartServer();
  RawConn c = Connect();
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 11, "", proto::kVersion, /*status=*/3)));
  ASSERT_TRUE(c.Expect(11, Code::kInvalidArgument));
  EXPECT_TRUE(Ping(c, 12));
  EXPECT_EQ(service_.handled(), 1u);
  EXPECT_TRUE(WaitFor([&] { return counters().error_responses == 1; }));
}

TEST_F(FrontendTest, ConnectionOverMaxConnectionsGetsBusyThenClose) {
  ServerOptions o;
  o.max_connections = 2;
  StartServer(o);
  RawConn c1 = Connect();
  RawConn c2 = Connect();
  ASSERT_TRUE(Ping(c1, 1));  // both registered with their loops
  ASSERT_TRUE(Ping(c2, 2));
  RawConn c3 = Connect();
  testing::Frame f;
  ASSERT_TRUE(c3.Expect(0, Code::kBusy, &f));
  EXPECT_EQ(f.op(), 0);
  EXPECT_TRUE(c3.ExpectClosed());
  EXPECT_EQ(counters().connections_refused, 1u);
  EXPECT_TRUE(Ping(c1, 3));  // the others are unaffected

  // A slot that frees up can be taken again.
  c1.Close();
  ASSERT_TRUE(WaitFor([&] { return counters().connections_open == 1; }));
  RawConn c4 = Connect();
  EXPECT_TRUE(Ping(c4, 4));
  EXPECT_EQ(counters().connections_refused, 1u);
}

// Connections accepted in a burst are counted against the limit too (the
// acceptor counts them, not the loops they are handed to).
TEST_F(FrontendTest, BurstOfConnectionsNeverExceedsMaxConnections) {
  ServerOptions o;
  o.max_connections = 2;
  StartServer(o);
  constexpr int kConns = 12;
  std::vector<RawConn> conns;
  for (int i = 0; i < kConns; ++i) conns.push_back(Connect());
  for (int i = 0; i < kConns; ++i) ASSERT_TRUE(conns[i].Write(MakeFrame(kPing, 100 + i, "x")));
  int served = 0, busy = 0;
  for (int i = 0; i < kConns; ++i) {
    testing::Frame f;
    ASSERT_EQ(conns[i].ReadFrame(&f), RawConn::ReadResult::kFrame) << "connection " << i;
    if (f.status() == Code::kBusy) ++busy;
    if (f.status() == Code::kOk) ++served;
  }
  EXPECT_LE(served, 2);
  EXPECT_EQ(served + busy, kConns);
  EXPECT_EQ(counters().connections_refused, static_cast<uint64_t>(busy));
}

TEST_F(FrontendTest, IdleConnectionIsClosed) {
  ServerOptions o;
  o.idle_timeout = milliseconds(200);
  StartServer(o);
  RawConn c = Connect();
  // Taken before the ping: the server's last activity (answering it) comes
  // after, so the close cannot come sooner than idle_timeout from here,
  // however late this thread sees the answer.
  const auto since = testing::Clock::now();
  ASSERT_TRUE(Ping(c, 1));
  EXPECT_TRUE(c.ExpectClosed());
  EXPECT_GE(testing::Clock::now() - since, o.idle_timeout);
  EXPECT_TRUE(WaitFor([&] { return counters().connections_idle_closed == 1; }));
  EXPECT_TRUE(WaitFor([&] { return counters().connections_open == 0; }));
}

// A client trickling a frame one byte at a time (a slow-loris) keeps bytes
// moving, so the idle timeout never ends it; the frame timeout does.
TEST_F(FrontendTest, FrameTricklingInPastTheFrameTimeoutClosesTheConnection) {
  ServerOptions o;
  o.frame_timeout = milliseconds(300);
  StartServer(o);
  RawConn other = Connect();
  RawConn slow = Connect();
  // Long enough that the trickle outlasts the timeout by far (a minute at
  // this pace), however late a busy machine runs the server's timer: the
  // loop below ends when the server answers.
  const std::string frame = MakeFrame(kPing, 7, std::string(1000, 't'));
  const auto begun = std::chrono::steady_clock::now();
  size_t sent = 0;
  testing::Frame f;
  RawConn::ReadResult r = RawConn::ReadResult::kTimeout;
  while (sent < frame.size() && r == RawConn::ReadResult::kTimeout) {
    ASSERT_TRUE(slow.Write(frame.substr(sent++, 1)));
    r = slow.ReadFrame(&f, milliseconds(60));               // one byte every 60 ms
    ASSERT_TRUE(Ping(other, static_cast<uint32_t>(sent)));  // others are served meanwhile
  }
  ASSERT_EQ(r, RawConn::ReadResult::kFrame) << "sent all " << sent << " bytes unanswered";
  EXPECT_LT(sent, frame.size());
  EXPECT_GE(std::chrono::steady_clock::now() - begun, o.frame_timeout);
  EXPECT_EQ(f.status(), Code::kLimitExceeded);
  EXPECT_EQ(f.id(), 0u);
  EXPECT_TRUE(slow.ExpectClosed());
  EXPECT_EQ(counters().connections_slow_closed, 1u);
  EXPECT_TRUE(Ping(other, 100));
}

// Frames that each arrive in pieces, but whole within the frame timeout, are
// served however long the connection lives.
TEST_F(FrontendTest, FramesArrivingInPiecesWithinTheFrameTimeoutAreServed) {
  ServerOptions o;
  o.frame_timeout = milliseconds(1500);
  StartServer(o);
  RawConn c = Connect();
  for (uint32_t id = 1; id <= 6; ++id) {
    const std::string frame = MakeFrame(kPing, id, "ping " + std::to_string(id));
    ASSERT_TRUE(c.Write(frame.substr(0, 5)));
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE(c.Write(frame.substr(5)));
    ASSERT_TRUE(c.Expect(id, Code::kOk));
  }
  EXPECT_EQ(counters().connections_slow_closed, 0u);
}

TEST_F(FrontendTest, ConnectionWithRequestInFlightIsNotIdleClosed) {
  ServerOptions o;
  o.idle_timeout = milliseconds(200);
  StartServer(o);
  service_.set_hold(true);
  RawConn c = Connect();
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 1, "held")));
  ASSERT_TRUE(WaitFor([&] { return service_.held() == 1; }));
  EXPECT_TRUE(c.ExpectQuiet(milliseconds(700)));  // several idle timeouts
  EXPECT_EQ(counters().connections_idle_closed, 0u);

  service_.ReleaseHeld();
  testing::Frame f;
  ASSERT_TRUE(c.Expect(1, Code::kOk, &f));
  EXPECT_EQ(f.body, "held");
  // Idle from now on.
  EXPECT_TRUE(c.ExpectClosed());
  EXPECT_TRUE(WaitFor([&] { return counters().connections_idle_closed == 1; }));
}

// A loop thread does not spin while a request outlives the idle timeout.
TEST_F(FrontendTest, RequestOutlivingIdleTimeoutDoesNotSpinTheLoop) {
  ServerOptions o;
  o.idle_timeout = milliseconds(100);
  o.threads = 1;
  StartServer(o);
  service_.set_hold(true);
  RawConn c = Connect();
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 1, "held")));
  ASSERT_TRUE(WaitFor([&] { return service_.held() == 1; }));
  auto cpu = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  };
  const auto before = cpu();
  EXPECT_TRUE(c.ExpectQuiet(milliseconds(1000)));
  const auto used = std::chrono::duration_cast<milliseconds>(cpu() - before);
  EXPECT_LT(used.count(), 300) << "the process burnt " << used.count()
                               << " ms of CPU in 1000 ms while idle";
  service_.ReleaseHeld();
  EXPECT_TRUE(c.Expect(1, Code::kOk));
}

TEST_F(FrontendTest, MaxInFlightBoundsRequestsOutstandingPerConnection) {
  ServerOptions o;
  o.max_in_flight = 8;
  StartServer(o);
  service_.set_hold(true);
  constexpr uint32_t kPerConn = 40;
  RawConn conns[2] = {Connect(), Connect()};
  for (uint32_t t = 0; t < 2; ++t) {
    std::string burst;
    for (uint32_t i = 1; i <= kPerConn; ++i) burst += MakeFrame(kPing, IdFor(t + 1, i), "x");
    ASSERT_TRUE(conns[t].Write(burst));
  }
  // Each round the handler holds 8 requests of each connection (fewer at the
  // end) and no more; releasing them lets the next ones in.
  uint32_t released = 0;
  while (released < kPerConn) {
    const uint32_t expect = std::min(8u, kPerConn - released);
    // (Counted by `seen`, which only grows once the previous round's
    // release has run; `held` alone would still show that round.)
    auto round_held = [&](uint32_t tag) {
      const auto s = service_.tag(tag);
      return s.seen == released + expect && s.outstanding == expect;
    };
    ASSERT_TRUE(WaitFor([&] { return round_held(1) && round_held(2); }))
        << "after " << released << " released: seen " << service_.tag(1).seen << " and "
        << service_.tag(2).seen;
    EXPECT_EQ(service_.held(), 2 * expect);
    released += expect;
    service_.ReleaseHeld();
  }
  for (uint32_t t = 0; t < 2; ++t) {
    std::set<uint32_t> ids;
    for (uint32_t i = 0; i < kPerConn; ++i) {
      testing::Frame f;
      ASSERT_EQ(conns[t].ReadFrame(&f), RawConn::ReadResult::kFrame)
          << "connection " << t << " after " << i << " responses; held " << service_.held()
          << ", outstanding " << service_.tag(t + 1).outstanding << ", seen "
          << service_.tag(t + 1).seen;
      ASSERT_EQ(f.status(), Code::kOk);
      ids.insert(f.id());
    }
    EXPECT_EQ(ids.size(), kPerConn);
    EXPECT_EQ(*ids.begin(), IdFor(t + 1, 1));
    EXPECT_EQ(*ids.rbegin(), IdFor(t + 1, kPerConn));
    EXPECT_EQ(service_.tag(t + 1).max_outstanding, 8u);
    EXPECT_EQ(service_.tag(t + 1).seen, kPerConn);
  }
}

TEST_F(FrontendTest, SlowReaderIsPausedWhileOtherConnectionsAreServed) {
  ServerOptions o;
  o.threads = 1;  // the slow reader shares the loop with the other connection
  o.max_pending_bytes = 1 << 20;
  // Both ends' socket buffers small (by default the server's grows up to
  // net.ipv4.tcp_wmem's maximum, megabytes): together they hold less than
  // one answer, so while the client reads nothing no answer is ever written
  // whole, and once max_pending_bytes of answers wait the connection is
  // paused for good. Its first pause is its last.
  o.socket_send_buffer = 4096;
  StartServer(o);
  constexpr uint32_t kRequests = 400;
  constexpr uint32_t kResponseBytes = 256 * 1024;
  RawConn slow = Connect(/*rcvbuf=*/16 * 1024);
  std::string burst;
  for (uint32_t i = 1; i <= kRequests; ++i) {
    burst += MakeFrame(kStats, IdFor(1, i), SizeBody(kResponseBytes));
  }
  ASSERT_TRUE(slow.Write(burst, /*drain=*/false));  // and read nothing

  // The handler stops being given the slow reader's requests.
  ASSERT_TRUE(WaitFor([&] { return counters().backpressure_pauses > 0; }));
  const uint64_t seen = service_.tag(1).seen;
  EXPECT_LT(seen, kRequests / 4) << "the server kept serving a client that does not read";

  // Meanwhile another connection on the same loop is served.
  RawConn other = Connect();
  for (uint32_t i = 1; i <= 20; ++i) ASSERT_TRUE(Ping(other, IdFor(2, i)));
  EXPECT_EQ(service_.tag(1).seen, seen);

  // Once the client reads, everything is answered.
  std::set<uint32_t> ids;
  for (uint32_t i = 0; i < kRequests; ++i) {
    testing::Frame f;
    ASSERT_EQ(slow.ReadFrame(&f), RawConn::ReadResult::kFrame) << "after " << i << " responses";
    ASSERT_EQ(f.status(), Code::kOk);
    ASSERT_EQ(f.body.size(), kResponseBytes);
    ids.insert(f.id());
  }
  EXPECT_EQ(ids.size(), kRequests);
  EXPECT_EQ(service_.tag(1).seen, kRequests);
  EXPECT_TRUE(slow.ExpectQuiet(milliseconds(50)));
}

TEST_F(FrontendTest, StopSendsHeldReplyBeforeClosing) {
  ServerOptions o;
  o.threads = 1;
  StartServer(o);
  service_.set_hold(true);
  RawConn c = Connect();
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 1, "in flight at stop")));
  ASSERT_TRUE(WaitFor([&] { return service_.held() == 1; }));

  auto stopped = std::async(std::launch::async, [&] { server_->Stop(); });
  // Stop() has begun once the port refuses connections.
  ASSERT_TRUE(WaitFor([&] {
    RawConn probe;
    return !probe.Connect(server_->port());
  }));
  EXPECT_TRUE(c.ExpectQuiet(milliseconds(50)));  // still waiting for the reply
  EXPECT_EQ(stopped.wait_for(milliseconds(0)), std::future_status::timeout);

  service_.ReleaseHeld();
  testing::Frame f;
  ASSERT_TRUE(c.Expect(1, Code::kOk, &f));
  EXPECT_EQ(f.body, "in flight at stop");
  EXPECT_TRUE(c.ExpectClosed());
  ASSERT_EQ(stopped.wait_for(kPatience), std::future_status::ready) << "Stop() did not return";
}

TEST_F(FrontendTest, StopGivesUpOnReplyThatNeverComesAfterShutdownTimeout) {
  ServerOptions o;
  o.shutdown_timeout = milliseconds(200);
  StartServer(o);
  service_.set_hold(true);
  RawConn c = Connect();
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 1, "never answered")));
  ASSERT_TRUE(WaitFor([&] { return service_.held() == 1; }));
  const auto start = testing::Clock::now();
  server_->Stop();
  const auto took = testing::Clock::now() - start;
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, kPatience);
  EXPECT_TRUE(c.ExpectClosed());
  EXPECT_EQ(service_.held(), 0u);  // the handler answered on its way out
}

TEST_F(FrontendTest, StopClosesIdleConnectionsAndIsIdempotent) {
  StartServer();
  RawConn c = Connect();
  ASSERT_TRUE(Ping(c, 1));
  server_->Stop();
  EXPECT_TRUE(c.ExpectClosed());
  server_->Stop();
  RawConn late;
  EXPECT_FALSE(late.Connect(server_->port()));
}

TEST_F(FrontendTest, ClientGoneWithRequestsInFlightDoesNotHurtTheServer) {
  ServerOptions o;
  o.threads = 1;
  StartServer(o);
  service_.set_hold(true);
  {
    RawConn orderly = Connect();
    RawConn reset = Connect();
    std::string burst1, burst2;
    for (uint32_t i = 1; i <= 5; ++i) {
      burst1 += MakeFrame(kStats, IdFor(1, i), SizeBody(100000));
      burst2 += MakeFrame(kPing, IdFor(2, i), "gone");
    }
    ASSERT_TRUE(orderly.Write(burst1));
    ASSERT_TRUE(reset.Write(burst2));
    ASSERT_TRUE(WaitFor([&] { return service_.held() == 10; }));
    orderly.Close();
    reset.Abort();
  }
  // The reset connection goes at once; the orderly one only ended its input
  // (the server cannot tell a close from a shutdown of sending), so it stays
  // to answer what it read (PROTOCOL.md, "End of stream").
  ASSERT_TRUE(WaitFor([&] { return counters().connections_open == 1; }));
  service_.set_hold(false);
  service_.ReleaseHeld();
  ASSERT_TRUE(WaitFor([&] { return counters().connections_open == 0; }));
  // Every reply was made (into a closed connection) and the loop lives on.
  EXPECT_TRUE(WaitFor(
      [&] { return service_.tag(1).outstanding == 0 && service_.tag(2).outstanding == 0; }));
  EXPECT_EQ(service_.held(), 0u);

  RawConn c = Connect();
  EXPECT_TRUE(Ping(c, IdFor(3, 1)));
  EXPECT_TRUE(server_->LoopsAlive(kPatience));
}

TEST_F(FrontendTest, CountersCountConnectionsAndBytes) {
  StartServer();
  {
    RawConn c = Connect();
    ASSERT_TRUE(Ping(c, 1));
    ASSERT_TRUE(Ping(c, 2));
  }
  ASSERT_TRUE(WaitFor([&] { return counters().connections_open == 0; }));
  const ServerCounters n = counters();
  EXPECT_EQ(n.connections_accepted, 1u);
  EXPECT_EQ(n.requests, 2u);
  EXPECT_EQ(n.requests_by_op[kPing], 2u);
  EXPECT_EQ(n.error_responses, 0u);
  const uint64_t frame_bytes = 2 * (proto::kHeaderSize + 6);  // "ping 1", "ping 2"
  EXPECT_EQ(n.bytes_in, frame_bytes);
  EXPECT_EQ(n.bytes_out, frame_bytes);
}

TEST_F(FrontendTest, CountersCountResponsesByOperationAndStatusAndTimeThem) {
  StartServer();
  RawConn c = Connect();
  ASSERT_TRUE(Ping(c, 1));
  ASSERT_TRUE(Ping(c, 2));
  ASSERT_TRUE(c.Write(MakeFrame(kPing, 3, "", proto::kVersion + 1)));  // refused: version
  ASSERT_TRUE(c.Expect(3, Code::kUnsupported));
  ASSERT_TRUE(c.Write(MakeFrame(0x7f, 4, "")));  // refused: unknown operation
  ASSERT_TRUE(c.Expect(4, Code::kUnsupported));
  const ServerCounters n = counters();
  const size_t ping = proto::OpSlot(kPing);
  const size_t unknown = proto::kOpCount;
  const auto unsupported = static_cast<size_t>(Code::kUnsupported);
  EXPECT_EQ(n.responses[ping][0], 2u);
  EXPECT_EQ(n.responses[ping][unsupported], 1u);
  EXPECT_EQ(n.responses[unknown][unsupported], 1u);
  EXPECT_EQ(n.error_responses, 2u);
  // Only requests a handler served are timed.
  EXPECT_EQ(n.latency_us[ping].count(), 2u);
  EXPECT_EQ(n.latency_us[unknown].count(), 0u);
  EXPECT_EQ(n.latency_us[proto::OpSlot(kStats)].count(), 0u);
}

// A failed Start() leaves nothing behind on a destroyed io_context (run under
// AddressSanitizer to see the difference).
TEST_F(FrontendTest, StartFailsWhenThePortIsTaken) {
  StartServer();
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = server_->port();
  o.threads = 1;
  StubService other_service;
  Server other(o, &other_service);
  Status s = other.Start();
  EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
}

// A Service whose handler for one loop cannot be made.
class FailingService : public Service {
 public:
  explicit FailingService(unsigned failing_index) : failing_index_(failing_index) {}
  Result<std::unique_ptr<Handler>> NewHandler(unsigned thread_index,
                                              std::shared_ptr<LoopPoster> poster) override {
    if (thread_index == failing_index_) return Status::IOError("no storage for this loop");
    return stub_.NewHandler(thread_index, std::move(poster));
  }

 private:
  unsigned failing_index_;
  StubService stub_;
};

TEST(FrontendStartTest, StartReturnsTheHandlersErrorAndStopsCleanly) {
  for (unsigned failing : {0u, 1u}) {
    FailingService service(failing);
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.threads = 2;
    Server server(o, &service);
    Status s = server.Start();
    EXPECT_EQ(s.code(), Code::kIOError) << "handler " << failing << ": " << s.ToString();
    server.Stop();  // and the destructor: no hang, no crash
  }
}

// A handler that answers a request twice (the second time through a copy of
// its Responder, which a std::function callback may hold) would leave the
// connection's count of requests in flight wrong for good: the server stops
// loudly instead. A handler bug, never a client's doing.
class TwiceService : public Service {
 public:
  Result<std::unique_ptr<Handler>> NewHandler(unsigned /*thread_index*/,
                                              std::shared_ptr<LoopPoster> /*poster*/) override {
    struct Twice : Handler {
      void Handle(const proto::FrameHeader& h, std::string_view body, Responder to) override {
        Responder copy = to;
        const std::string frame = MakeFrame(h.op, h.request_id, body);
        to.Send(frame);
        copy.Send(frame);
      }
    };
    return std::unique_ptr<Handler>(new Twice);
  }
};

// A Service whose handler answers reads as frames only (Handler's default
// HandleGet and HandleBatchGet encode the request and call Handle), or, with
// `values`, as values (Responder::SendValue, as ProfileService does for the
// RESP port): either way the RESP port makes the same replies, the stale
// flag included.
class ReadsService : public Service {
 public:
  explicit ReadsService(bool values) : values_(values) {}
  Result<std::unique_ptr<Handler>> NewHandler(unsigned /*thread_index*/,
                                              std::shared_ptr<LoopPoster> /*poster*/) override {
    struct Reads : Handler {
      explicit Reads(bool as_values) : values(as_values) {}
      bool values;
      static Result<GetResult> Of(const std::string& user) {
        if (user != "u1") return Status::NotFound("the user has no profile");
        GetResult r;
        r.ids = {100, 200};
        r.expires = {1'790'003'600, 0};
        r.count = 2;
        return r;
      }
      static BatchGetResult AllOf(const std::vector<std::string>& users) {
        BatchGetResult all;
        for (const std::string& user : users) all.push_back(Of(user));
        return all;
      }
      void HandleGet(const proto::FrameHeader& h, proto::GetRequest req, Responder to) override {
        if (!values) return Handler::HandleGet(h, std::move(req), std::move(to));
        EXPECT_TRUE(to.takes_values());
        if (req.user == "u1") to.set_flags(proto::kFlagStale);
        to.SendValue(h.request_id, Of(req.user));
      }
      void HandleBatchGet(const proto::FrameHeader& h, proto::BatchGetRequest req,
                          Responder to) override {
        if (!values) return Handler::HandleBatchGet(h, std::move(req), std::move(to));
        to.SendValue(h.request_id, Result<BatchGetResult>(AllOf(req.users)));
      }
      void Handle(const proto::FrameHeader& h, std::string_view body, Responder to) override {
        std::string frame;
        const proto::DecodeLimits limits;
        if (h.op == static_cast<uint8_t>(proto::Op::kGet)) {
          proto::GetRequest req;
          EXPECT_TRUE(proto::Decode(body, limits, &req).ok());
          const Result<GetResult> r = Of(req.user);
          if (r.ok()) {
            proto::AppendFrame(&frame, h.op, h.request_id, 0, proto::kMaxResponseBytes,
                               [&](std::string* out) { proto::Encode(*r, out); });
            to.set_flags(proto::kFlagStale);
          } else {
            proto::AppendErrorFrame(&frame, h.op, h.request_id, r.status());
          }
        } else if (h.op == static_cast<uint8_t>(proto::Op::kBatchGet)) {
          proto::BatchGetRequest req;
          EXPECT_TRUE(proto::Decode(body, limits, &req).ok());
          proto::AppendFrame(&frame, h.op, h.request_id, 0, proto::kMaxResponseBytes,
                             [&](std::string* out) { proto::Encode(AllOf(req.users), out); });
        } else {
          proto::AppendErrorFrame(&frame, h.op, h.request_id, Status::Unavailable("not here"));
        }
        to.Send(std::move(frame));
      }
    };
    return std::unique_ptr<Handler>(new Reads(values_));
  }

 private:
  bool values_;
};

TEST(FrontendRespTest, ReadsAnsweredAsFramesOrAsValuesMakeTheSameReplies) {
  for (bool values : {false, true}) {
    SCOPED_TRACE(values ? "values" : "frames");
    ReadsService service(values);
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.resp_host = "127.0.0.1";
    o.resp_port = 0;
    o.threads = 1;
    Server server(o, &service);
    ASSERT_TRUE(server.Start().ok());
    segstore::testing::RespConn c;
    ASSERT_TRUE(c.Connect(server.resp_port()));
    const std::string u1 =
        "*8\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:1\r\n$3\r\nids\r\n*2\r\n"
        "$3\r\n100\r\n$3\r\n200\r\n$7\r\nexpires\r\n*2\r\n:1790003600\r\n:0\r\n";
    EXPECT_EQ(c.Call({"SEG.GET", "u1"}), u1);
    EXPECT_EQ(c.Call({"SEG.GET", "nobody"}), "$-1\r\n");
    EXPECT_EQ(c.Call({"HGET", "u1", "200"}), "$0\r\n\r\n");
    EXPECT_EQ(c.Call({"HGETALL", "u1"}), "*4\r\n$3\r\n100\r\n$0\r\n\r\n$3\r\n200\r\n$0\r\n\r\n");
    EXPECT_EQ(c.Call({"SEG.MGET", "2", "nobody", "u1"}),
              "*2\r\n$-1\r\n" + std::string(u1).replace(u1.find(":1\r\n"), 4, ":0\r\n"));
    EXPECT_EQ(c.Call({"EXISTS", "u1", "nobody"}), ":1\r\n");
    EXPECT_EQ(c.Call({"SEG.COUNT", "u1"}), "-UNAVAILABLE not here\r\n");
    server.Stop();
  }
}

TEST(ResponderDeathTest, ASecondAnswerToOneRequestAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        TwiceService service;
        ServerOptions o;
        o.host = "127.0.0.1";
        o.port = 0;
        o.threads = 1;
        Server server(o, &service);
        if (!server.Start().ok()) std::exit(3);
        RawConn c;
        if (!c.Connect(server.port())) std::exit(4);
        if (!c.Write(MakeFrame(static_cast<uint8_t>(proto::Op::kPing), 1, ""))) std::exit(5);
        c.WaitClosed();  // the server's abort ends this process before
        std::exit(6);
      },
      "answered twice");
}

}  // namespace
}  // namespace segstore::server
