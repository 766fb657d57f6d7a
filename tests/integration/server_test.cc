// The whole server in process: a real store on a temporary file, the profile
// layer, ProfileService and the Asio front end on an ephemeral loopback port,
// driven through the client library and through raw frames (proto/examples).
#include <gtest/gtest.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "common/clock.h"
#include "integration/daemon.h"
#include "integration/in_process.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "server/profile_service.h"
#include "server/raw_conn.h"
#include "server/server.h"
#include "storage/test_util.h"
#include "support/example_frames.h"

namespace segstore::server {
namespace {

using client::Client;
using client::ClientOptions;
using testing::Frame;
using testing::Has;
using testing::MakeFrame;
using testing::RawConn;
using testing::Segctl;

constexpr UnixSeconds kStart = 1'790'000'000;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void TearDown() override { Stop(); }

  void Start() {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_, 128u << 20);
    profile::ProfileOptions p;
    p.sweeper = false;
    p.max_segments = kMaxSegments;
    ProfileServiceOptions so;
    so.max_batch = 100;
    so.max_segments = kMaxSegments;
    so.max_fields = 9;
    so.max_field_bytes = 77;
    so.max_in_flight = server_options_.max_in_flight;
    so.max_frame_bytes = server_options_.max_frame_bytes;
    server_options_.threads = 2;
    served_.Start(o, nullptr, p, so, server_options_);
  }

  void Stop() { served_.Stop(); }

  std::unique_ptr<Client> Connect() { return served_.Connect(); }

  static constexpr uint32_t kMaxSegments = 2000;
  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  ServerOptions server_options_;
  testing::InProcessServer served_;
};

std::vector<SegmentUpdate> Segments(uint64_t first, uint64_t n, uint32_t ttl) {
  std::vector<SegmentUpdate> out;
  for (uint64_t i = 0; i < n; ++i) out.push_back({first + i, ttl, true, {}, {}});
  return out;
}

TEST_F(ServerTest, EveryOperationThroughTheClient) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->server_info().protocol, 1u);
  EXPECT_EQ(c->server_info().max_segments, kMaxSegments);
  EXPECT_EQ(c->server_info().max_batch, 100u);
  EXPECT_EQ(c->server_info().max_fields, 9u);
  EXPECT_EQ(c->server_info().max_field_bytes, 77u);
  ASSERT_TRUE(c->Ping().ok());

  std::vector<SegmentUpdate> up = {{5484, 3600, true, {}, {}},
                                   {100, kStart + 60, false, 3u, 9u},
                                   {8500, 0, false, {}, {}}};  // never expires
  auto r = c->Upsert("alice", up);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->inserted, 3u);
  EXPECT_EQ(r->count, 3u);

  auto got = c->Get("alice");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ(got->At(0), (Segment{100, kStart + 60, 3u, 9u}));
  EXPECT_EQ(got->At(1), (Segment{5484, kStart + 3600, {}, {}}));
  EXPECT_EQ(got->At(2), (Segment{8500, kNever, {}, {}}));

  GetOptions ids;
  ids.ids_only = true;
  ids.id_from = 1000;
  got = c->Get("alice", ids);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{5484, 8500}));
  EXPECT_TRUE(got->expires.empty());

  GetOptions window;  // "will not expire within the next two hours"
  window.expiry_from = kStart;
  window.expiry_to = kStart + 7200;
  window.outside_expiry_window = true;
  got = c->Get("alice", window);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{8500}));

  GetOptions limited;
  limited.limit = 1;
  got = c->Get("alice", limited);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->count, 3u);
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{100}));

  // "add 5 hours to segment 5484"
  std::vector<SegmentUpdate> add = {{5484, 5 * 3600, false, {}, {}}};
  ASSERT_TRUE(c->Upsert("alice", add, UpsertMode::kAdd).ok());
  EXPECT_EQ(c->Get("alice")->At(1).expires_at, kStart + 6 * 3600);
  // "segments in 8000-9000"
  EXPECT_EQ(*c->Count("alice", 8000, 9000), 1u);

  std::vector<std::string> users = {"alice", "nobody", "alice"};
  auto batch = c->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), 3u);
  EXPECT_EQ((*batch)[0]->count, 3u);
  EXPECT_TRUE((*batch)[1].status().IsNotFound());
  EXPECT_EQ((*batch)[2]->count, 3u);

  std::vector<UpsertItem> items = {{"bob", Segments(1, 10, 600), UpsertMode::kSet},
                                   {"carol", Segments(1, 5, 600), UpsertMode::kSet},
                                   {"dave", {{1, 1, false, {}, {}}}, UpsertMode::kSet}};
  auto bu = c->BatchUpsert(items);
  ASSERT_TRUE(bu.ok()) << bu.status().ToString();
  EXPECT_EQ((*bu)[0]->inserted, 10u);
  EXPECT_EQ((*bu)[1]->count, 5u);
  EXPECT_EQ((*bu)[2].status().code(), Status::Code::kInvalidArgument);  // expiry in the past

  // Time passes: segment 100 expires, invisible at once; trim removes it.
  clock_.Advance(60);
  EXPECT_EQ(c->Get("alice")->count, 2u);
  auto trim = c->Trim("alice");
  ASSERT_TRUE(trim.ok());
  EXPECT_EQ(trim->trimmed, 1u);
  EXPECT_EQ(trim->remaining, 2u);
  std::vector<uint64_t> rm = {8500, 1};
  EXPECT_EQ(*c->Remove("alice", rm), 1u);
  EXPECT_EQ(*c->Delete("alice"), true);
  EXPECT_TRUE(c->Get("alice").status().IsNotFound());
  EXPECT_EQ(*c->Delete("alice"), false);

  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok());
  std::map<std::string, StatEntry> by_name;
  for (const StatEntry& e : stats->entries) by_name[e.name] = e;
  ASSERT_TRUE(by_name.count("server.requests.get"));
  EXPECT_GE(std::get<uint64_t>(by_name["server.requests.get"].value), 7u);
  EXPECT_TRUE(by_name.count("storage.index_entries"));
  EXPECT_TRUE(by_name.count("sweeper.segments_removed"));
  EXPECT_TRUE(by_name.count("recovery.seconds"));
  // Errors by operation and status, and service times, as served.
  ASSERT_TRUE(by_name.count("server.responses.get.not_found"));
  EXPECT_GE(std::get<uint64_t>(by_name["server.responses.get.not_found"].value), 1u);
  ASSERT_TRUE(by_name.count("server.request_duration.get.count"));
  EXPECT_GE(std::get<uint64_t>(by_name["server.request_duration.get.count"].value), 7u);
  EXPECT_GE(std::get<uint64_t>(by_name["server.request_duration.get.max_us"].value),
            std::get<uint64_t>(by_name["server.request_duration.get.p50_us"].value));
  EXPECT_EQ(std::get<uint64_t>(by_name["storage.writes_refused"].value), 0u);
  // The process figures benchmarks divide by: this very process, in-process.
  ASSERT_TRUE(by_name.count("process.pid"));
  EXPECT_EQ(std::get<uint64_t>(by_name["process.pid"].value), static_cast<uint64_t>(::getpid()));
  EXPECT_GT(std::get<uint64_t>(by_name["process.resident_memory_bytes"].value), 0u);
  EXPECT_GT(std::get<double>(by_name["process.cpu_seconds.user"].value) +
                std::get<double>(by_name["process.cpu_seconds.system"].value),
            0.0);  // the test process has run: some CPU time is on the clock
}

TEST_F(ServerTest, LimitsAreRefusedAndNothingIsWritten) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto over = c->Upsert("u", Segments(0, kMaxSegments + 1, 600));
  EXPECT_EQ(over.status().code(), Status::Code::kLimitExceeded) << over.status().ToString();
  EXPECT_TRUE(c->Get("u").status().IsNotFound());
  std::vector<std::string> many(101, "x");
  EXPECT_EQ(c->BatchGet(many).status().code(), Status::Code::kLimitExceeded);
  EXPECT_EQ(c->Get(std::string(300, 'k')).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c->Get("").status().code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(c->Ping().ok());  // the connection is still fine
}

// Every example request in proto/examples, sent as its raw bytes, is answered
// with the same op and request ID and a body of the documented shape.
TEST_F(ServerTest, ExampleRequestFramesAreAnswered) {
  RawConn conn;
  ASSERT_TRUE(conn.Connect(served_.server->port()));
  const auto all = proto::examples::All();
  for (const proto::examples::Example& e : all) {
    if (e.file.find(".request.") == std::string::npos) continue;
    SCOPED_TRACE(e.file);
    // Its response example, when it shows a refusal (not a NotFound that
    // depends on what is stored), is exactly what the server answers.
    const proto::examples::Example* refusal = nullptr;
    for (const proto::examples::Example& r : all) {
      if (r.file.find(".response.") != std::string::npos && r.op == e.op &&
          r.request_id == e.request_id && r.status != Status::Code::kOk &&
          r.status != Status::Code::kNotFound) {
        refusal = &r;
      }
    }
    ASSERT_TRUE(conn.Write(proto::examples::EncodeFrame(e)));
    Frame f;
    ASSERT_EQ(conn.ReadFrame(&f), RawConn::ReadResult::kFrame);
    EXPECT_EQ(f.op(), static_cast<uint8_t>(e.op));
    EXPECT_EQ(f.id(), e.request_id);
    if (refusal != nullptr) {
      EXPECT_EQ(f.status(), refusal->status);
      EXPECT_EQ(proto::DecodeError(f.body),
                std::get<proto::examples::ErrorBody>(refusal->body).message);
      continue;
    }
    // Upserts in the examples use dates in 2030, so they succeed; reads of
    // users not yet written may be NotFound.
    EXPECT_TRUE(f.status() == Status::Code::kOk || f.status() == Status::Code::kNotFound)
        << proto::DecodeError(f.body);
    if (f.status() != Status::Code::kOk) {
      EXPECT_FALSE(proto::DecodeError(f.body).empty());
    }
  }
}

TEST_F(ServerTest, BadRequestsGetErrorsAndTheConnectionStaysUsable) {
  RawConn conn;
  ASSERT_TRUE(conn.Connect(served_.server->port()));
  const auto get = static_cast<uint8_t>(proto::Op::kGet);
  struct Case {
    std::string body;
    Status::Code code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"\xc1", Status::Code::kInvalidArgument, "not valid MessagePack"},
      {"\x93\x01\x02\x03", Status::Code::kInvalidArgument, "map"},   // an array
      {"\x80", Status::Code::kInvalidArgument, "user"},              // missing user
      {"\x81\xa4user\x07", Status::Code::kInvalidArgument, "user"},  // wrong type
      {"\x82\xa4user\xa1u\xa5limit\xa1x", Status::Code::kInvalidArgument, "limit"},
      {std::string("\x81\xa4user\xa1u\x00", 9), Status::Code::kInvalidArgument, "trailing"},
  };
  uint32_t id = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.needle);
    ASSERT_TRUE(conn.Write(MakeFrame(get, id, c.body)));
    Frame f;
    ASSERT_TRUE(conn.Expect(id, c.code, &f));
    EXPECT_NE(proto::DecodeError(f.body).find(c.needle), std::string::npos)
        << proto::DecodeError(f.body);
    ++id;
  }
  // A key too long, a batch too large.
  std::string body;
  proto::Encode(proto::GetRequest{std::string(257, 'k'), {}}, &body);
  ASSERT_TRUE(conn.Write(MakeFrame(get, id, body)));
  ASSERT_TRUE(conn.Expect(id++, Status::Code::kInvalidArgument));
  body.clear();
  proto::Encode(proto::BatchGetRequest{std::vector<std::string>(101, "u"), {}}, &body);
  ASSERT_TRUE(conn.Write(MakeFrame(static_cast<uint8_t>(proto::Op::kBatchGet), id, body)));
  ASSERT_TRUE(conn.Expect(id++, Status::Code::kLimitExceeded));
  // An unknown operation.
  ASSERT_TRUE(conn.Write(MakeFrame(0x7e, id, "")));
  ASSERT_TRUE(conn.Expect(id++, Status::Code::kUnsupported));
  // Still serving.
  ASSERT_TRUE(conn.Write(MakeFrame(static_cast<uint8_t>(proto::Op::kPing), id, "")));
  ASSERT_TRUE(conn.Expect(id++, Status::Code::kOk));
  // A broken frame closes only this connection.
  ASSERT_TRUE(conn.Write(std::string(16, 'Z')));
  Frame f;
  ASSERT_EQ(conn.ReadFrame(&f), RawConn::ReadResult::kFrame);
  EXPECT_EQ(f.status(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(conn.ExpectClosed());
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Ping().ok());
}

// Thousands of requests in flight on one connection, through the async client.
TEST_F(ServerTest, ThousandsOfPipelinedRequestsAllComplete) {
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    for (int u = 0; u < 50; ++u) {
      ASSERT_TRUE(c->Upsert("user" + std::to_string(u), Segments(u, 20, 3600)).ok());
    }
  }
  boost::asio::io_context io;
  ClientOptions o;
  o.port = served_.server->port();
  o.request_timeout = std::chrono::milliseconds(30000);
  std::unique_ptr<client::AsyncClient> ac;
  client::AsyncClient::Connect(io, o, [&](Result<std::unique_ptr<client::AsyncClient>> r) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ac = std::move(r).value();
  });
  io.run_one();
  while (!ac) io.run_one();
  constexpr int kRequests = 5000;
  int done = 0, wrong = 0;
  for (int i = 0; i < kRequests; ++i) {
    const int u = i % 60;  // 50 exist, 10 do not
    ac->Get("user" + std::to_string(u), {}, [&, u](Result<GetResult> r) {
      ++done;
      if (u < 50 ? !(r.ok() && r->count == 20 && r->ids.front() == uint64_t(u))
                 : !r.status().IsNotFound()) {
        ++wrong;
      }
    });
  }
  while (done < kRequests) io.run_one();
  EXPECT_EQ(wrong, 0);
  ac.reset();
}

// A client that sends many requests and reads nothing: the server stops
// reading it (bounded memory) and keeps serving everyone else; once the
// client reads, every answer arrives.
TEST_F(ServerTest, AClientThatStopsReadingGetsBackpressure) {
  // The server's socket send buffer, left to the kernel, may grow to
  // net.ipv4.tcp_wmem's maximum: where that is 32 MiB, the kernel could take
  // every answer and the server would never have to stop reading us. Set, it
  // holds a known 128 KiB.
  Stop();
  server_options_.socket_send_buffer = 64 * 1024;
  Start();
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Upsert("big", Segments(0, 1000, 3600)).ok());  // ~10 KiB a response
  }
  RawConn slow;
  ASSERT_TRUE(slow.Connect(served_.server->port(), /*rcvbuf=*/4096));
  std::string body;
  proto::Encode(proto::GetRequest{"big", {}}, &body);
  constexpr uint32_t kRequests = 3000;  // ~30 MiB of answers, far over 8 MiB pending
  std::string burst;
  for (uint32_t i = 1; i <= kRequests; ++i) {
    burst += MakeFrame(static_cast<uint8_t>(proto::Op::kGet), i, body);
  }
  // ~90 KB of requests fit in the socket buffers, so the write completes
  // without our reading anything.
  ASSERT_TRUE(slow.Write(burst, /*drain=*/false));
  ASSERT_TRUE(testing::WaitFor([&] { return served_.server->counters().backpressure_pauses > 0; }));
  // Everyone else is served meanwhile.
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Get("big").ok());
  const uint64_t served = served_.server->counters().requests_by_op[0x10];
  EXPECT_LT(served, kRequests);  // it stopped reading us
  // Now read: every request gets its answer.
  std::set<uint32_t> seen;
  Frame f;
  while (seen.size() < kRequests) {
    if (slow.ReadFrame(&f, std::chrono::milliseconds(10000)) != RawConn::ReadResult::kFrame) break;
    EXPECT_EQ(f.status(), Status::Code::kOk);
    seen.insert(f.id());
  }
  EXPECT_EQ(seen.size(), kRequests);
}

TEST_F(ServerTest, ManyConnectionsUpsertingOneUserLoseNothing) {
  constexpr int kClients = 8, kEach = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = Connect();
      if (!c) {
        ++failures;
        return;
      }
      for (int i = 0; i < kEach; ++i) {
        std::vector<SegmentUpdate> one = {{uint64_t(t * 1000 + i), 3600, true, {}, {}}};
        if (!c->Upsert("shared", one).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto c = Connect();
  EXPECT_EQ(c->Get("shared")->count, uint32_t(kClients * kEach));
}

TEST_F(ServerTest, AcknowledgedWritesAndDeletesSurviveARestart) {
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    for (int u = 0; u < 200; ++u) {
      ASSERT_TRUE(c->Upsert("user" + std::to_string(u), Segments(u, 10, 3600)).ok());
    }
    for (int u = 0; u < 200; u += 10) ASSERT_TRUE(*c->Delete("user" + std::to_string(u)));
  }
  Stop();
  Start();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  for (int u = 0; u < 200; ++u) {
    auto got = c->Get("user" + std::to_string(u));
    if (u % 10 == 0) {
      EXPECT_TRUE(got.status().IsNotFound()) << u;
    } else {
      ASSERT_TRUE(got.ok()) << u << " " << got.status().ToString();
      EXPECT_EQ(got->count, 10u);
    }
  }
}

TEST_F(ServerTest, StopAnswersRequestsInFlightFirst) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Upsert("u", Segments(0, 100, 3600)).ok());
  RawConn conn;
  ASSERT_TRUE(conn.Connect(served_.server->port()));
  std::string body;
  proto::Encode(proto::GetRequest{"u", {}}, &body);
  std::string burst;
  for (uint32_t i = 1; i <= 100; ++i) burst += MakeFrame(0x10, i, body);
  ASSERT_TRUE(conn.Write(burst));
  // Wait until the server has read them all, then stop it.
  ASSERT_TRUE(
      testing::WaitFor([&] { return served_.server->counters().requests_by_op[0x10] >= 100; }));
  std::thread stopper([&] { served_.server->Stop(); });
  std::set<uint32_t> seen;
  Frame f;
  while (conn.ReadFrame(&f) == RawConn::ReadResult::kFrame) seen.insert(f.id());
  stopper.join();
  EXPECT_EQ(seen.size(), 100u);
}

TEST_F(ServerTest, SegctlDrivesEveryOperation) {
  const uint16_t port = served_.server->port();
  auto [rc, out] = Segctl(port, "ping");
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(Has(out, "pong from 127.0.0.1:")) << out;
  // The ManualClock says kStart; segctl's TTLs are relative to the server's
  // clock, absolute times are checked against it.
  std::tie(rc, out) = Segctl(port, "upsert alice 5484@+5h 8000@+30d,a1=7 8500@never");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "3 inserted, 0 updated")) << out;
  std::tie(rc, out) = Segctl(port, "get alice");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "alice: 3 matching live segments")) << out;
  EXPECT_TRUE(Has(out, "EXPIRES (UTC)")) << out;
  EXPECT_TRUE(Has(out, "never")) << out;
  std::tie(rc, out) = Segctl(port, "get alice --json");  // global flags after the command
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "{\"count\":3,\"segments\":[{\"id\":5484,\"expires_at\":" +
                           std::to_string(kStart + 5 * 3600) + "}"))
      << out;
  EXPECT_TRUE(Has(out, "\"attr1\":7")) << out;
  std::tie(rc, out) = Segctl(port, "--json get alice --ids-only");
  EXPECT_TRUE(Has(out, "{\"count\":3,\"ids\":[5484,8000,8500]}")) << out;
  std::tie(rc, out) = Segctl(port, "upsert alice 5484@+5h --mode add");
  EXPECT_TRUE(Has(out, "0 inserted, 1 updated")) << out;
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->Get("alice")->At(0).expires_at, kStart + 10 * 3600);
  }
  std::tie(rc, out) = Segctl(port, "count alice --id-from 8000 --id-to 9000");
  EXPECT_TRUE(Has(out, "segments in 8000-9000: 2")) << out;
  std::tie(rc, out) = Segctl(port, "remove alice 8500 1");
  EXPECT_TRUE(Has(out, "1 segments removed")) << out;
  std::tie(rc, out) = Segctl(port, "trim alice");
  EXPECT_TRUE(Has(out, "0 stale segments trimmed, 2 remaining")) << out;
  std::tie(rc, out) = Segctl(port, "stats");
  EXPECT_TRUE(Has(out, "operation")) << out;
  EXPECT_TRUE(Has(out, "\nupsert ")) << out;
  EXPECT_TRUE(Has(out, "\nstorage\n")) << out;
  std::tie(rc, out) = Segctl(port, "--json stats");
  EXPECT_TRUE(Has(out, "\"server.requests.upsert\":")) << out;
  std::tie(rc, out) = Segctl(port, "--json info");
  EXPECT_TRUE(Has(out, "\"max_segments\":2000")) << out;
  std::tie(rc, out) = Segctl(port, "delete alice");
  EXPECT_TRUE(Has(out, "profile of alice deleted")) << out;
  // A user without a profile: exit status 3 for every read and partial write.
  for (const char* command : {"get alice", "count alice", "remove alice 1", "trim alice"}) {
    std::tie(rc, out) = Segctl(port, command);
    EXPECT_EQ(rc, 3) << command;
    EXPECT_TRUE(Has(out, "alice has no profile")) << command << ": " << out;
  }
  std::tie(rc, out) = Segctl(port, "--json get alice");
  EXPECT_EQ(rc, 3);
  EXPECT_TRUE(Has(out, "{\"error\":{\"code\":\"NotFound\"")) << out;
  std::tie(rc, out) = Segctl(port, "delete alice");
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(Has(out, "alice had no profile")) << out;
}

TEST_F(ServerTest, SegctlExpireSetsPersistsAndRemoves) {
  const uint16_t port = served_.server->port();
  auto [rc, out] = Segctl(port, "upsert bob 1@+1h 2@never 3@+2h");
  ASSERT_EQ(rc, 0) << out;
  // TTLs count from the server's clock; each ID's outcome, in order.
  std::tie(rc, out) = Segctl(port, "expire bob +3h 1 2 9 --condition gt");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "1 set\n2 unchanged\n9 missing\n3 live segments now")) << out;
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->Get("bob")->expires,
              (std::vector<UnixSeconds>{kStart + 3 * 3600, kNever, kStart + 2 * 3600}));
  }
  std::tie(rc, out) = Segctl(port, "--json expire bob never 1 2 --condition xx");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "{\"ids\":[1,2],\"results\":[\"set\",\"unchanged\"],\"count\":3}")) << out;
  std::tie(rc, out) = Segctl(port, "expire bob 2020-01-01T00:00:00Z 3");
  EXPECT_TRUE(Has(out, "3 removed\n2 live segments now")) << out;
  std::tie(rc, out) = Segctl(port, "expire bob +0 1 2");
  EXPECT_TRUE(Has(out, "1 removed\n2 removed\n0 live segments now")) << out;
  // No profile any more: exit status 3.
  std::tie(rc, out) = Segctl(port, "expire bob +1h 1");
  EXPECT_EQ(rc, 3) << out;
  EXPECT_TRUE(Has(out, "bob has no profile")) << out;
  // Bad input never reaches the server.
  const uint64_t before = served_.server->counters().requests;
  for (const char* bad : {"expire bob +1h 1 --condition sometimes", "expire bob soon 1",
                          "expire bob +1h x", "expire bob +1h"}) {
    std::tie(rc, out) = Segctl(port, bad);
    EXPECT_EQ(rc, 1) << bad << ": " << out;
  }
  EXPECT_EQ(served_.server->counters().requests, before);
}

TEST_F(ServerTest, SegctlRefusesBadInputBeforeSendingIt) {
  const uint16_t port = served_.server->port();
  const uint64_t before = served_.server->counters().requests;
  auto [rc, out] = Segctl(port, "upsert alice 5484");
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "expected ID@WHEN")) << out;
  std::tie(rc, out) = Segctl(port, "upsert alice x@+5h");
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "segment ID")) << out;
  std::tie(rc, out) = Segctl(port, "upsert alice 1@+5y");
  EXPECT_EQ(rc, 1);
  std::tie(rc, out) = Segctl(port, "upsert alice 1@2030-13-45T00:00:00Z");
  EXPECT_EQ(rc, 1);
  std::tie(rc, out) = Segctl(port, "upsert alice 1@+5h --mode sometimes");
  EXPECT_EQ(rc, 1);
  std::tie(rc, out) = Segctl(port, "remove alice 12abc");
  EXPECT_EQ(rc, 1);
  // Usage errors are errors: exit status 1 (CLI11's own codes are not used).
  std::tie(rc, out) = Segctl(port, "frobnicate alice");
  EXPECT_EQ(rc, 1) << out;
  std::tie(rc, out) = Segctl(port, "get");
  EXPECT_EQ(rc, 1) << out;
  std::tie(rc, out) = Segctl(port, "count alice --id-from");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(served_.server->counters().requests, before);
  // A server that is not there: a clear error, not a hang.
  std::tie(rc, out) = Segctl(1, "--timeout 2000 ping");
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "127.0.0.1:1")) << out;
}

// Random and mutated frames never take the server down: every connection
// either gets answers or is closed, and a fresh one is always served.
TEST_F(ServerTest, RandomAndMutatedFramesNeverTakeTheServerDown) {
  std::mt19937_64 rng(20261122);
  std::vector<std::string> examples;
  for (const proto::examples::Example& e : proto::examples::All()) {
    if (e.file.find(".request.") != std::string::npos) {
      examples.push_back(proto::examples::EncodeFrame(e));
    }
  }
  const uint8_t ops[] = {0x01, 0x02, 0x03, 0x10, 0x11, 0x12, 0x20, 0x21, 0x22, 0x23, 0x24, 0x7f};
  for (int round = 0; round < 20; ++round) {
    RawConn conn;
    ASSERT_TRUE(conn.Connect(served_.server->port()));
    std::string burst;
    for (int i = 0; i < 100; ++i) {
      std::string frame;
      switch (rng() % 3) {
        case 0: {  // an example with some bytes of its body flipped or cut
          frame = examples[rng() % examples.size()];
          const int flips = 1 + static_cast<int>(rng() % 4);
          for (int f = 0; f < flips && frame.size() > proto::kHeaderSize; ++f) {
            frame[proto::kHeaderSize + rng() % (frame.size() - proto::kHeaderSize)] =
                static_cast<char>(rng());
          }
          break;
        }
        case 1: {  // a well-framed random body
          std::string body(rng() % 64, '\0');
          for (char& c : body) c = static_cast<char>(rng());
          frame = MakeFrame(ops[rng() % sizeof ops], static_cast<uint32_t>(i + 1), body);
          break;
        }
        default: {  // a well-framed random MessagePack-ish map with random values
          std::string body = "\x82\xa4user";
          body += static_cast<char>(0xa0 | (rng() % 8));
          body.append(rng() % 8, 'u');
          for (int b = 0; b < 12; ++b) body += static_cast<char>(rng());
          frame = MakeFrame(ops[rng() % sizeof ops], static_cast<uint32_t>(i + 1), body);
        }
      }
      burst += frame;
    }
    // Round 19 ends with garbage: a broken frame closes that connection.
    if (round == 19) burst += std::string(16, '\xff');
    (void)conn.Write(burst);
    Frame f;
    // Read what comes back until a quiet spell (answers or not, we only
    // need the server to stay up).
    while (conn.ReadFrame(&f, std::chrono::milliseconds(300)) == RawConn::ReadResult::kFrame) {
    }
    auto c = Connect();
    ASSERT_NE(c, nullptr) << "round " << round;
    ASSERT_TRUE(c->Ping().ok()) << "round " << round;
  }
}

// ---- segctl load ----

void WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

constexpr UnixSeconds kJan2030 = 1893456000;

TEST_F(ServerTest, LoadReadsEveryFormatGzipAndStdin) {
  const std::string rows = dir_.File("rows.csv");
  WriteFile(rows,
            "user_id,segment_id,expiry\n"  // a header line
            "r1,10,@" +
                std::to_string(kJan2030) +
                "\n"
                "r1,11,3600\n"
                "r2,12,30d,7,9\r\n");  // TTL with a unit, attributes, CRLF
  const std::string tabs = dir_.File("rows.tsv");
  WriteFile(tabs, "t1\t20\t2030-01-01T00:00:00Z\n# a comment\n\nt1\t21\tnever\n");
  const std::string grouped = dir_.File("grouped.tsv");
  WriteFile(grouped, "g1\t30:12h,31,32:@" + std::to_string(kJan2030) + "\n");
  const std::string gz = dir_.File("rows.csv.gz");
  {
    gzFile f = gzopen(gz.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string text = "z1,40,3600\nz1,41,3600\n";
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  }
  auto [rc, out] = Segctl(served_.server->port(), "load --no-progress --default-ttl 1h " + rows +
                                                      " " + tabs + " " + grouped + " " + gz);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "8 rows, 5 users")) << out;
  EXPECT_TRUE(Has(out, rows + ":1: skipped as a header line\n")) << out;
  EXPECT_FALSE(Has(out, tabs + ":1: skipped")) << out;
  std::tie(rc, out) = Segctl(served_.server->port(), "load --no-progress - < " + rows);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "-:1: skipped as a header line\n")) << out;

  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto r1 = c->Get("r1");
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(r1->At(0), (Segment{10, kJan2030, {}, {}}));
  EXPECT_EQ(r1->At(1).expires_at, kStart + 3600);  // TTLs count from the server's clock
  EXPECT_EQ(c->Get("r2")->At(0), (Segment{12, kStart + 30 * 86400, 7u, 9u}));
  auto t1 = c->Get("t1");
  ASSERT_TRUE(t1.ok());
  EXPECT_EQ(t1->At(0).expires_at, kJan2030);
  EXPECT_EQ(t1->At(1).expires_at, kNever);
  auto g1 = c->Get("g1");
  ASSERT_TRUE(g1.ok());
  EXPECT_EQ(g1->ids, (std::vector<uint64_t>{30, 31, 32}));
  EXPECT_EQ(g1->At(1).expires_at, kStart + 3600);  // --default-ttl
  EXPECT_EQ(c->Get("z1")->count, 2u);
}

TEST_F(ServerTest, LoadReportsBadRowsWithTheirLineAndWritesTheRest) {
  const std::string rows = dir_.File("bad.csv");
  WriteFile(rows,
            "u1,1,3600\n"
            "u1,x,3600\n"        // 2: bad segment ID
            "u1,2,3600,1,2,3\n"  // 3: too many fields
            "" + std::string(300, 'k') +
                ",3,3600\n"           // 4: user ID too long
                "u1,4,@1000000000\n"  // 5: expiry in the past
                "u1,5,3600\n");
  const std::string grouped = dir_.File("bad.tsv");
  WriteFile(grouped, "g1\t1:3600,oops:3600\n");  // refused whole
  auto [rc, out] = Segctl(served_.server->port(), "load --no-progress " + rows + " " + grouped);
  EXPECT_EQ(rc, 1) << out;
  for (int line : {2, 3, 4, 5}) {
    EXPECT_TRUE(Has(out, rows + ":" + std::to_string(line) + ":")) << line << "\n" << out;
  }
  EXPECT_TRUE(Has(out, grouped + ":1:")) << out;
  EXPECT_TRUE(Has(out, "5 bad rows")) << out;
  auto c = Connect();
  EXPECT_EQ(c->Get("u1")->ids, (std::vector<uint64_t>{1, 5}));
  EXPECT_TRUE(c->Get("g1").status().IsNotFound());

  // --max-errors stops the load, and says so in the exit status.
  std::tie(rc, out) = Segctl(served_.server->port(), "load --no-progress --max-errors 2 " + rows);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "--max-errors")) << out;
  // A dry run validates and writes nothing.
  WriteFile(dir_.File("new.csv"), "fresh,1,3600\n");
  std::tie(rc, out) =
      Segctl(served_.server->port(), "load --no-progress --dry-run " + dir_.File("new.csv"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "dry run")) << out;
  EXPECT_TRUE(c->Get("fresh").status().IsNotFound());
}

TEST_F(ServerTest, LoadPrintsTheFirstHundredErrorsAndCountsTheRest) {
  std::string text = "user,segment,ttl\n";  // a header: line 1 is not an error
  for (int i = 0; i < 250; ++i) text += "u,notanumber,3600\n";
  text += "u,1,3600\n";
  const std::string rows = dir_.File("many-bad.csv");
  WriteFile(rows, text);
  auto [rc, out] = Segctl(served_.server->port(), "load " + rows);  // progress on, not a terminal
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "progress: ")) << out;  // a line, not a bar, off a terminal
  EXPECT_TRUE(Has(out, "errors 250")) << out;
  EXPECT_TRUE(Has(out, rows + ":101:")) << out;  // lines 2 to 101: the first hundred
  EXPECT_FALSE(Has(out, rows + ":102:")) << out;
  EXPECT_TRUE(Has(out, "only counted")) << out;
  EXPECT_TRUE(Has(out, "250 bad rows")) << out;
  EXPECT_EQ(Connect()->Get("u")->count, 1u);
}

TEST_F(ServerTest, LoadingAFileWithAbsoluteExpiriesTwiceChangesNothing) {
  std::string text;
  for (int u = 0; u < 300; ++u) {
    for (int s = 0; s < 20; ++s) {
      text += "user" + std::to_string(u) + "," + std::to_string(s * 7 + u) + ",@" +
              std::to_string(kJan2030 + 3600 * s) + "\n";
    }
  }
  const std::string rows = dir_.File("abs.csv");
  WriteFile(rows, text);
  auto [rc, out] = Segctl(served_.server->port(), "load --no-progress --json " + rows);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"rows\":6000,\"users\":300")) << out;
  EXPECT_TRUE(Has(out, "\"upserts_per_user\":1.00")) << out;
  auto c = Connect();
  std::vector<GetResult> before;
  for (int u = 0; u < 300; ++u) before.push_back(*c->Get("user" + std::to_string(u)));
  std::tie(rc, out) = Segctl(served_.server->port(), "load --no-progress " + rows);
  EXPECT_EQ(rc, 0) << out;
  for (int u = 0; u < 300; ++u) {
    auto after = c->Get("user" + std::to_string(u));
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->ids, before[u].ids);
    EXPECT_EQ(after->expires, before[u].expires);
  }
}

TEST_F(ServerTest, LoadFailsClearlyWhenTheServerGoesAway) {
  std::string text;
  for (int u = 0; u < 20000; ++u) text += "user" + std::to_string(u) + "\t1:3600,2:3600\n";
  const std::string grouped = dir_.File("many.tsv");
  WriteFile(grouped, text);
  std::pair<int, std::string> result;
  std::thread loader([&] {
    // One user a batch, one batch at a time: the load takes a while.
    result = Segctl(served_.server->port(),
                    "load --no-progress --timeout 1000 --connections 1 "
                    "--batch-users 1 --memory-mib 1 " +
                        grouped);
  });
  ASSERT_TRUE(testing::WaitFor([&] { return served_.server->counters().requests_by_op[0x21] >= 5; },
                               std::chrono::milliseconds(30000)));
  served_.server->Stop();
  loader.join();
  EXPECT_EQ(result.first, 2) << result.second;
  EXPECT_TRUE(Has(result.second, "failed")) << result.second;
}

// What `segctl load --help` must tell: both formats, every TTL and expiry
// form, the lines skipped, and each exit status.
TEST_F(ServerTest, LoadHelpStatesTheFormatsEveryExpiryFormAndEachExitStatus) {
  auto [rc, out] = Segctl(served_.server->port(), "load --help");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "Usage: ")) << out;
  for (const char* needle : {
           // the formats, their separators, gzip and stdin
           "USER,SEGMENT[,WHEN[,ATTR1[,ATTR2]]]",
           "a comma or a tab between the fields",
           "USER<TAB>SEGMENT[:WHEN][,SEGMENT[:WHEN]]...",
           "exactly one tab, ',' between segments, ':' before",
           "plain or gzip (told from the bytes, not the name)",
           "'-' reads standard\ninput",
           // the lines skipped
           "blank lines, lines starting with '#', and line 1 when it is a\nheader",
           "\"FILE:1: skipped as a header line\"",
           // each form of WHEN, and what an absent one takes
           "  86400                 TTL in seconds",
           "  90s 15m 12h 30d       TTL in seconds, minutes, hours or days",
           "  @1767225600           expiry at this Unix time",
           "a bare number\n                        of 10 digits or more",
           "  2026-12-01T00:00:00Z  expiry, ISO-8601 with Z or an offset",
           "a time without either is refused, not taken as UTC",
           "  never                 never expires",
           "A TTL counts from when the server writes the segment",
           "takes --default-ttl; without it the row is bad",
           // each exit status
           "Exit status:\n",
           "\n  0  every row was written",
           "\n  1  the load ran to the end, but some rows were bad",
           "\n  2  the load stopped or never started",
       }) {
    EXPECT_TRUE(Has(out, needle)) << "missing: " << needle << "\n" << out;
  }

  // README's "Bulk loading" paragraph says the same in short.
  const std::string readme = testing::ReadFile(std::string(SEGSTORE_SOURCE_DIR) + "/README.md");
  const size_t from = readme.find("Bulk loading DMP files");
  ASSERT_NE(from, std::string::npos);
  const std::string paragraph = readme.substr(from, readme.find("```", from) - from);
  for (const char* needle :
       {"`user,segment[,when[,a1[,a2]]]` (comma or tab)", "`user<TAB>seg[:when][,seg[:when]]...`",
        "plain or gzip", "`-` for stdin", "lines starting with `#`",
        "saying `file:1: skipped as a header line`", "`86400`\n  seconds",
        "`90s` `15m` `12h` `30d`", "`@1767225600` Unix seconds", "`2026-12-01T00:00:00Z`",
        "not taken as UTC", "`never`", "`--default-ttl`", "**0** every row was written",
        "**1** the load ran to the end", "**2** the load stopped\n  or never started"}) {
    EXPECT_TRUE(Has(paragraph, needle)) << "README misses: " << needle << "\n" << paragraph;
  }
}

// A first line with a name for its segment ID but data after it is a typo,
// not a header: reported, and the exit status says so. Gzip is told from the
// bytes, whatever the file's name.
TEST_F(ServerTest, LoadReportsATypoOnLineOneRatherThanSkippingIt) {
  const std::string rows = dir_.File("typo.csv");  // gzip, without .gz
  {
    gzFile f = gzopen(rows.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string text = "u1,x42,3600\nu1,43,3600\n";
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  }
  auto [rc, out] = Segctl(served_.server->port(), "load --no-progress " + rows);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, rows + ":1: segment ID \"x42\" is not a number")) << out;
  EXPECT_FALSE(Has(out, "skipped as a header")) << out;
  EXPECT_EQ(Connect()->Get("u1")->ids, (std::vector<uint64_t>{43}));
}

// Exit status 2: the load never started or stopped (--max-errors and a server
// gone for good are above; a refused TLS or secret is in daemon_test.cc).
TEST_F(ServerTest, LoadExitsWithTwoOnBadOptionsUnreadableInputOrNoServer) {
  const uint16_t port = served_.server->port();
  const std::string rows = dir_.File("good.csv");
  WriteFile(rows, "u,1,3600\n");
  const uint64_t before = served_.server->counters().requests;
  // Bad options, CLI11's usage errors among them.
  for (const std::string& args :
       {std::string("load --no-progress --format csv ") + rows, "load --delimiter ';' " + rows,
        "load --default-ttl 0 " + rows, "load --default-ttl @1800000000 " + rows,
        "load --mode add " + rows, "load --max-errors many " + rows, "load --no-such-flag " + rows,
        std::string("load")}) {
    auto [rc, out] = Segctl(port, args);
    EXPECT_EQ(rc, 2) << args << "\n" << out;
  }
  EXPECT_EQ(served_.server->counters().requests, before);  // none even connected

  // Files that cannot be read: missing, a directory, a cut or corrupt gzip stream.
  const std::string whole = dir_.File("whole.gz");
  {
    gzFile f = gzopen(whole.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::string text;
    for (int i = 0; i < 5000; ++i) text += "u" + std::to_string(i) + ",1,3600\n";
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  }
  std::string bytes = testing::ReadFile(whole);
  WriteFile(dir_.File("cut.gz"), bytes.substr(0, bytes.size() / 2));
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x55);
  WriteFile(dir_.File("corrupt.gz"), bytes);
  for (const auto& [file, says] : std::vector<std::pair<std::string, std::string>>{
           {dir_.File("missing.csv"), "NotFound"},
           {dir_.File(""), "IOError"},
           {dir_.File("cut.gz"), "truncated gzip stream"},
           {dir_.File("corrupt.gz"), "corrupt gzip data"}}) {
    auto [rc, out] = Segctl(port, "load --no-progress " + rows + " " + file);
    EXPECT_EQ(rc, 2) << file << "\n" << out;
    EXPECT_TRUE(Has(out, says)) << file << "\n" << out;
  }

  // No server.
  auto [rc, out] = Segctl(1, "--timeout 2000 load --no-progress " + rows);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "127.0.0.1:1")) << out;
}

// Exit status 1 when the server refuses a user: here one whose profile would
// go over the server's limit of 2000 segments. The other users go in.
TEST_F(ServerTest, LoadExitsWithOneWhenTheServerRefusesAUser) {
  std::string first = "big\t";
  for (int s = 0; s < 1500; ++s) first += std::to_string(s) + ":3600,";
  first.back() = '\n';
  WriteFile(dir_.File("first.tsv"), first);
  auto [rc, out] = Segctl(served_.server->port(), "load --no-progress " + dir_.File("first.tsv"));
  ASSERT_EQ(rc, 0) << out;
  std::string more = "big\t";
  for (int s = 1500; s < 2100; ++s) more += std::to_string(s) + ":3600,";
  more.back() = '\n';
  more += "small\t1:3600\n";
  WriteFile(dir_.File("more.tsv"), more);
  std::tie(rc, out) = Segctl(served_.server->port(), "load --no-progress " + dir_.File("more.tsv"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "user big: ")) << out;
  EXPECT_TRUE(Has(out, "1 users failed")) << out;
  auto c = Connect();
  EXPECT_EQ(c->Get("big")->count, 1500u);
  EXPECT_EQ(c->Get("small")->count, 1u);
}

// Exit status 1 when an absolute expiry, ahead when its row was read, has
// passed by the time it could be sent: the segment is dropped and counted.
TEST_F(ServerTest, LoadExitsWithOneWhenAnExpiryPassesBeforeSending) {
  const std::string fifo = dir_.File("slow.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    // Opening blocks until segctl opens the other end, which it does after
    // taking the load's start time: an expiry two seconds from now is ahead
    // of that start however slow the machine. The file then stays open (not
    // at its end) until the clock has passed that expiry.
    FILE* f = std::fopen(fifo.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const auto soon = static_cast<uint64_t>(std::time(nullptr)) + 2;
    std::fprintf(f, "soon,1,@%llu\nlater,2,3600\n", static_cast<unsigned long long>(soon));
    std::fflush(f);
    while (static_cast<uint64_t>(std::time(nullptr)) <= soon) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::fclose(f);
  });
  auto [rc, out] = Segctl(served_.server->port(), "load --no-progress " + fifo);
  writer.join();
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "0 bad rows, 1 expired before sending, 0 users failed")) << out;
  auto c = Connect();
  EXPECT_TRUE(c->Get("soon").status().IsNotFound());
  EXPECT_EQ(c->Get("later")->count, 1u);
}

}  // namespace
}  // namespace segstore::server
