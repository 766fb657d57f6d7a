// The client library against a scripted fake server (fake_server.h): address
// parsing, hello, every op's request and response bodies, pipelining and
// out-of-order answers, server errors, timeouts and late answers, and every
// way a connection can break.
#include "segstore/client.h"

#include <gtest/gtest.h>

#include <utility>

// After <utility>: Boost 1.74's Asio uses std::exchange without including it.
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "client/fake_server.h"
#include "proto/wire.h"

namespace segstore::client {
namespace {

using namespace std::chrono_literals;
using proto::Op;
using testing::FakeConn;
using testing::FakeServer;
using testing::Frame;

constexpr auto kGenerous = 5000ms;  // for anything that should succeed

uint8_t OpCode(Op op) { return static_cast<uint8_t>(op); }

ServerInfo FakeInfo() {
  ServerInfo info;
  info.protocol = 1;
  info.server = "fake 0.0";
  info.max_frame_bytes = 1 << 20;
  info.max_batch = 1000;
  info.max_key_bytes = 256;
  info.max_segments = 10000;
  info.max_in_flight = 256;
  return info;
}

GetResult FakeGet() {
  GetResult r;
  r.ids = {1, 2};
  r.expires = {100, kNever};
  r.attr1 = {7u, std::nullopt};
  r.count = 2;
  return r;
}

CopyPartitionResponse FakePage() {
  CopyPartitionResponse r;
  r.next = 1234;
  r.cursor = 3000000000;
  r.records = {{"foo", std::string("\x02\xd1\x09", 3), 1896134400, 0},
               {std::string("\xff\x01", 2), "", 0, 1893456000}};
  return r;
}

// Answers every op with a fixed response.
void Standard(FakeConn& c, const Frame& f) {
  switch (static_cast<Op>(f.op())) {
    case Op::kHello:
      c.Reply(f, FakeInfo());
      return;
    case Op::kPing:
      c.ReplyEmpty(f);
      return;
    case Op::kStats: {
      segstore::Stats s;
      s.entries = {{"server.requests", uint64_t{42}}, {"load", 0.5}, {"version", std::string("x")}};
      c.Reply(f, s);
      return;
    }
    case Op::kClusterMap:
      c.Reply(f, segstore::ClusterMap{});
      return;
    case Op::kGet:
      c.Reply(f, FakeGet());
      return;
    case Op::kBatchGet: {
      BatchGetResult r;
      r.emplace_back(FakeGet());
      r.emplace_back(Status::NotFound("no such user"));
      c.Reply(f, r);
      return;
    }
    case Op::kCount:
      c.Reply(f, proto::CountResponse{3});
      return;
    case Op::kUpsert:
      c.Reply(f, UpsertResult{1, 2, 3, 4});
      return;
    case Op::kBatchUpsert: {
      BatchUpsertResult r;
      r.emplace_back(UpsertResult{5, 6, 7, 8});
      r.emplace_back(Status::InvalidArgument("empty user"));
      c.Reply(f, r);
      return;
    }
    case Op::kRemove:
      c.Reply(f, proto::RemoveResponse{5});
      return;
    case Op::kTrim:
      c.Reply(f, TrimResult{6, 7});
      return;
    case Op::kDelete:
      c.Reply(f, proto::DeleteResponse{true});
      return;
    case Op::kExpire:
      c.Reply(f, ExpireResult{{ExpireOutcome::kSet, ExpireOutcome::kRemoved,
                               ExpireOutcome::kUnchanged, ExpireOutcome::kMissing},
                              9});
      return;
    case Op::kCopyPartition:
      c.Reply(f, FakePage());
      return;
    case Op::kLink:
      c.Reply(f, LinkResult{"master-1", 3, 1});
      return;
    case Op::kUnlink:
      c.Reply(f, proto::UnlinkResponse{true});
      return;
    case Op::kMasterOf:
      c.Reply(f, proto::MasterOfResponse{"master-1"});
      return;
    case Op::kLinks:
      c.Reply(f, LinksPage{"master-1", {{"a", 0}, {"b", 1900000000}}, "b"});
      return;
    case Op::kConnected:
      c.Reply(f, proto::ConnectedResponse{true});
      return;
    case Op::kLinkStep:
      c.Reply(f, LinkStepResult{true, false, 2, false});
      return;
    case Op::kReadRecords: {
      proto::ReadRecordsResponse r;
      r.push_back(StoredRecord{"body", "master-1"});
      r.push_back(Status::NotFound("the user has no record"));
      c.Reply(f, r);
      return;
    }
    case Op::kFieldSet:
      c.Reply(f, FieldWriteResult{2, 5, false});
      return;
    case Op::kFieldDelete:
      c.Reply(f, FieldWriteResult{1, 4, false});
      return;
    case Op::kFieldIncrement:
      c.Reply(f, IncrementResult{3, true, false});
      return;
    case Op::kFieldMax:
      c.Reply(f, FieldMaxResult{FieldValue::Time(1'900'000'000), false, false});
      return;
    case Op::kScan:
      c.Reply(f, ScanResponse{kScanFinished, {}});
      return;
  }
  c.ReplyError(f, Status::Unsupported("unknown op"));
}

ClientOptions Options(const FakeServer& server) {
  ClientOptions o;
  o.port = server.port();
  o.connect_timeout = kGenerous;
  o.request_timeout = kGenerous;
  return o;
}

// Runs `io` until `pred` holds; false after `timeout`.
bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& pred,
              std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.restart();
    io.run_one_for(100ms);
  }
  return true;
}

std::unique_ptr<AsyncClient> ConnectAsync(boost::asio::io_context& io,
                                          const ClientOptions& options) {
  std::optional<Result<std::unique_ptr<AsyncClient>>> r;
  AsyncClient::Connect(
      io, options, [&](Result<std::unique_ptr<AsyncClient>> res) { r.emplace(std::move(res)); });
  EXPECT_FALSE(r.has_value()) << "Connect ran its callback inside the call";
  if (!RunUntil(io, [&] { return r.has_value(); })) return nullptr;
  EXPECT_TRUE(r->ok()) << r->status().ToString();
  if (!r->ok()) return nullptr;
  return std::move(*r).value();
}

// A free port nobody listens on (bound once, then released).
uint16_t ClosedPort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// ---- addresses ----

TEST(ParseServerAddressTest, Good) {
  ClientOptions o;
  ASSERT_TRUE(ParseServerAddress("10.1.2.3:7701", &o).ok());
  EXPECT_EQ(o.host, "10.1.2.3");
  EXPECT_EQ(o.port, 7701);
  ASSERT_TRUE(ParseServerAddress("seg-store_1.example.com:1", &o).ok());
  EXPECT_EQ(o.host, "seg-store_1.example.com");
  EXPECT_EQ(o.port, 1);
  ASSERT_TRUE(ParseServerAddress("[::1]:65535", &o).ok());
  EXPECT_EQ(o.host, "::1");
  EXPECT_EQ(o.port, 65535);
  ASSERT_TRUE(ParseServerAddress("[fe80::1:2]:80", &o).ok());
  EXPECT_EQ(o.host, "fe80::1:2");
  EXPECT_EQ(o.port, 80);
  ASSERT_TRUE(ParseServerAddress("localhost:07700", &o).ok());
  EXPECT_EQ(o.host, "localhost");
  EXPECT_EQ(o.port, 7700);
}

TEST(ParseServerAddressTest, Bad) {
  for (std::string_view bad : {"",
                               ":",
                               "host",
                               "host:",
                               ":7700",
                               "host:0",
                               "host:65536",
                               "host:123456",
                               "host:77a",
                               "host:-1",
                               "host: 7700",
                               "ho st:7700",
                               "::1:7700",
                               "[::1]",
                               "[::1]7700",
                               "[::1:7700",
                               "[]:7700",
                               "[zz::1]:7700",
                               "[127.0.0.1]:7700",
                               "host:7700:",
                               "a/b:80"}) {
    ClientOptions o;
    o.host = "unchanged";
    o.port = 1234;
    Status s = ParseServerAddress(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << "\"" << bad << "\"";
    EXPECT_EQ(o.host, "unchanged") << bad;
    EXPECT_EQ(o.port, 1234) << bad;
  }
}

TEST(ParseServerAddressTest, FormatRoundTrips) {
  EXPECT_EQ(FormatServerAddress("127.0.0.1", 7700), "127.0.0.1:7700");
  EXPECT_EQ(FormatServerAddress("::1", 80), "[::1]:80");
  ClientOptions o;
  ASSERT_TRUE(ParseServerAddress(FormatServerAddress("::1", 80), &o).ok());
  EXPECT_EQ(o.host, "::1");
}

// ---- connecting ----

TEST(ClientTest, HelloOnConnectFillsServerInfo) {
  FakeServer server(Standard);
  ClientOptions o = Options(server);
  o.client_name = "client-test";
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const ServerInfo& info = (*c)->server_info();
  EXPECT_EQ(info.protocol, 1u);
  EXPECT_EQ(info.server, "fake 0.0");
  EXPECT_EQ(info.max_frame_bytes, 1u << 20);
  EXPECT_EQ(info.max_batch, 1000u);
  EXPECT_EQ(info.max_key_bytes, 256u);
  EXPECT_EQ(info.max_segments, 10000u);
  EXPECT_EQ(info.max_in_flight, 256u);
  EXPECT_EQ((*c)->server_address(), "127.0.0.1:" + std::to_string(server.port()));

  auto frames = server.received();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].op(), OpCode(Op::kHello));
  EXPECT_EQ(frames[0].id(), 1u);  // ids start at 1
  EXPECT_EQ(frames[0].header.version, proto::kVersion);
  EXPECT_EQ(frames[0].header.status, 0);
  proto::HelloRequest hello;
  ASSERT_TRUE(proto::Decode(frames[0].body, {}, &hello).ok());
  EXPECT_EQ(hello.client, "client-test");
}

TEST(ClientTest, NoHelloLeavesServerInfoZero) {
  FakeServer server(Standard);
  ClientOptions o = Options(server);
  o.hello = false;
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->server_info().protocol, 0u);
  EXPECT_EQ((*c)->server_info().max_frame_bytes, 0u);
  ASSERT_TRUE((*c)->Ping().ok());
  auto frames = server.received();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].op(), OpCode(Op::kPing));
  EXPECT_EQ(frames[0].id(), 1u);
  // An explicit hello fills it.
  auto info = (*c)->Hello();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->server, "fake 0.0");
  EXPECT_EQ((*c)->server_info().max_batch, 1000u);
}

TEST(ClientTest, ConnectToClosedPortFailsFast) {
  ClientOptions o;
  o.port = ClosedPort();
  o.connect_timeout = kGenerous;
  const auto start = std::chrono::steady_clock::now();
  auto c = Client::Connect(o);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == Status::Code::kUnavailable ||
              c.status().code() == Status::Code::kIOError)
      << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "127.0.0.1:" + std::to_string(o.port)))
      << c.status().ToString();
  EXPECT_LT(took, 3s);  // refused at once, not after connect_timeout
}

TEST(ClientTest, ConnectTimesOutWithoutHelloAnswer) {
  FakeServer server([](FakeConn&, const Frame&) {});  // never answers
  ClientOptions o = Options(server);
  o.connect_timeout = 200ms;
  o.request_timeout = 0ms;
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kTimeout) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "hello")) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "within 200 ms")) << c.status().ToString();
}

TEST(ClientTest, HelloRefusedFailsConnect) {
  FakeServer server(
      [](FakeConn& c, const Frame& f) { c.ReplyError(f, Status::Unsupported("no v1 here")); });
  auto c = Client::Connect(Options(server));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kUnsupported) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "no v1 here")) << c.status().ToString();
}

TEST(ClientTest, UnresolvableHostFails) {
  ClientOptions o;
  o.host = "no-such-host.invalid";
  o.connect_timeout = kGenerous;
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "no-such-host.invalid:7700")) << c.status().ToString();
}

// ---- every op ----

void ExpectSameOptions(const GetOptions& a, const GetOptions& b) {
  EXPECT_EQ(a.expiry_from, b.expiry_from);
  EXPECT_EQ(a.expiry_to, b.expiry_to);
  EXPECT_EQ(a.outside_expiry_window, b.outside_expiry_window);
  EXPECT_EQ(a.id_from, b.id_from);
  EXPECT_EQ(a.id_to, b.id_to);
  EXPECT_EQ(a.count_only, b.count_only);
  EXPECT_EQ(a.limit, b.limit);
  EXPECT_EQ(a.ids_only, b.ids_only);
}

void ExpectSameUpdates(const std::vector<SegmentUpdate>& a, const std::vector<SegmentUpdate>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].value, b[i].value);
    EXPECT_EQ(a[i].ttl, b[i].ttl);
    EXPECT_EQ(a[i].attr1, b[i].attr1);
    EXPECT_EQ(a[i].attr2, b[i].attr2);
  }
}

class EveryOpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Client::Connect(Options(server_));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  // The last request the server got, checked to be of `op`, decoded.
  template <typename Request>
  Request Last(Op op) {
    auto frames = server_.received();
    Request req{};
    EXPECT_FALSE(frames.empty());
    if (frames.empty()) return req;
    EXPECT_EQ(frames.back().op(), OpCode(op));
    EXPECT_EQ(frames.back().header.status, 0);
    Status s = proto::Decode(frames.back().body, {}, &req);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return req;
  }

  FakeServer server_{Standard};
  std::unique_ptr<Client> client_;
};

TEST_F(EveryOpTest, Ping) {
  ASSERT_TRUE(client_->Ping().ok());
  EXPECT_EQ(server_.received().back().op(), OpCode(Op::kPing));
}

TEST_F(EveryOpTest, Stats) {
  auto r = client_->Stats();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(server_.received().back().op(), OpCode(Op::kStats));
  ASSERT_EQ(r->entries.size(), 3u);
  EXPECT_EQ(r->entries[0], (StatEntry{"server.requests", uint64_t{42}}));
  EXPECT_EQ(r->entries[1], (StatEntry{"load", 0.5}));
  EXPECT_EQ(r->entries[2], (StatEntry{"version", std::string("x")}));
}

TEST_F(EveryOpTest, Get) {
  GetOptions opts;
  opts.expiry_from = 10;
  opts.expiry_to = 20;
  opts.outside_expiry_window = true;
  opts.id_from = 5;
  opts.id_to = 500;
  opts.limit = 9;
  opts.ids_only = true;
  auto r = client_->Get("alice", opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto req = Last<proto::GetRequest>(Op::kGet);
  EXPECT_EQ(req.user, "alice");
  ExpectSameOptions(req.options, opts);
  EXPECT_EQ(r->ids, FakeGet().ids);
  EXPECT_EQ(r->expires, FakeGet().expires);
  EXPECT_EQ(r->attr1, FakeGet().attr1);
  EXPECT_TRUE(r->attr2.empty());
  EXPECT_EQ(r->count, 2u);
}

TEST_F(EveryOpTest, BatchGet) {
  std::vector<std::string> users = {"a", "b"};
  GetOptions opts;
  opts.count_only = true;
  auto r = client_->BatchGet(users, opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto req = Last<proto::BatchGetRequest>(Op::kBatchGet);
  EXPECT_EQ(req.users, users);
  ExpectSameOptions(req.options, opts);
  ASSERT_EQ(r->size(), 2u);
  ASSERT_TRUE((*r)[0].ok());
  EXPECT_EQ((*r)[0]->ids, FakeGet().ids);
  EXPECT_EQ((*r)[1].status().code(), Status::Code::kNotFound);
  EXPECT_EQ((*r)[1].status().message(), "no such user");
}

TEST_F(EveryOpTest, Count) {
  auto r = client_->Count("bob", 10, 99);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 3u);
  auto req = Last<proto::CountRequest>(Op::kCount);
  EXPECT_EQ(req.user, "bob");
  EXPECT_EQ(req.id_from, 10u);
  EXPECT_EQ(req.id_to, 99u);
  // The defaults: every ID.
  ASSERT_TRUE(client_->Count("bob").ok());
  req = Last<proto::CountRequest>(Op::kCount);
  EXPECT_EQ(req.id_from, 0u);
  EXPECT_EQ(req.id_to, UINT64_MAX);
}

TEST_F(EveryOpTest, Upsert) {
  std::vector<SegmentUpdate> segs = {{1, 3600, true, 7, std::nullopt},
                                     {UINT64_MAX, 1'800'000'000, false, std::nullopt, 9}};
  auto r = client_->Upsert("carol", segs, UpsertMode::kExtend);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->inserted, 1u);
  EXPECT_EQ(r->updated, 2u);
  EXPECT_EQ(r->trimmed, 3u);
  EXPECT_EQ(r->count, 4u);
  auto req = Last<proto::UpsertRequest>(Op::kUpsert);
  EXPECT_EQ(req.user, "carol");
  EXPECT_EQ(req.mode, UpsertMode::kExtend);
  EXPECT_FALSE(req.replace_attrs);
  ExpectSameUpdates(req.segments, segs);
  // With options: attributes replaced, and a write ID.
  const WriteId id{3, 4};
  ASSERT_TRUE(client_->Upsert("carol", segs, UpsertOptions{UpsertMode::kAdd, true}, id).ok());
  req = Last<proto::UpsertRequest>(Op::kUpsert);
  EXPECT_EQ(req.mode, UpsertMode::kAdd);
  EXPECT_TRUE(req.replace_attrs);
  EXPECT_EQ(req.write_id, id);
  ExpectSameUpdates(req.segments, segs);
}

TEST_F(EveryOpTest, BatchUpsert) {
  std::vector<UpsertItem> items(2);
  items[0].user = "d";
  items[0].segments = {{1, 60, true, std::nullopt, std::nullopt}};
  items[0].mode = UpsertMode::kAdd;
  items[1].user = "e";
  items[1].replace_attrs = true;
  auto r = client_->BatchUpsert(items);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  ASSERT_TRUE((*r)[0].ok());
  EXPECT_EQ((*r)[0]->count, 8u);
  EXPECT_EQ((*r)[1].status().code(), Status::Code::kInvalidArgument);
  auto req = Last<proto::BatchUpsertRequest>(Op::kBatchUpsert);
  ASSERT_EQ(req.items.size(), 2u);
  EXPECT_EQ(req.items[0].user, "d");
  EXPECT_EQ(req.items[0].mode, UpsertMode::kAdd);
  ExpectSameUpdates(req.items[0].segments, items[0].segments);
  EXPECT_EQ(req.items[1].user, "e");
  EXPECT_TRUE(req.items[1].segments.empty());
  EXPECT_FALSE(req.items[0].replace_attrs);
  EXPECT_TRUE(req.items[1].replace_attrs);
}

TEST_F(EveryOpTest, Remove) {
  std::vector<uint64_t> ids = {3, 1, 4};
  auto r = client_->Remove("f", ids);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 5u);
  auto req = Last<proto::RemoveRequest>(Op::kRemove);
  EXPECT_EQ(req.user, "f");
  EXPECT_EQ(req.ids, ids);
}

TEST_F(EveryOpTest, Trim) {
  auto r = client_->Trim("g", 1234);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->trimmed, 6u);
  EXPECT_EQ(r->remaining, 7u);
  auto req = Last<proto::TrimRequest>(Op::kTrim);
  EXPECT_EQ(req.user, "g");
  EXPECT_EQ(req.before, 1234u);
}

TEST_F(EveryOpTest, Delete) {
  auto r = client_->Delete("h");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r);
  auto req = Last<proto::DeleteRequest>(Op::kDelete);
  EXPECT_EQ(req.user, "h");
}

TEST_F(EveryOpTest, Expire) {
  using EO = ExpireOutcome;
  std::vector<uint64_t> ids = {3, 1, 4, 1};
  auto r = client_->Expire("i", ids, ExpireSpec{3600, true, ExpireCondition::kLt});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kSet, EO::kRemoved, EO::kUnchanged, EO::kMissing}));
  EXPECT_EQ(r->count, 9u);
  EXPECT_FALSE(r->duplicate);
  auto req = Last<proto::ExpireRequest>(Op::kExpire);
  EXPECT_EQ(req.user, "i");
  EXPECT_EQ(req.ids, ids);
  EXPECT_EQ(req.value, 3600u);
  EXPECT_TRUE(req.ttl);
  EXPECT_EQ(req.condition, ExpireCondition::kLt);
  EXPECT_TRUE(req.write_id.empty());
  // HPERSIST: an absolute 0 under xx, with a write ID.
  const WriteId id{5, 6};
  ASSERT_TRUE(client_->Expire("i", ids, ExpireSpec{0, false, ExpireCondition::kXx}, id).ok());
  req = Last<proto::ExpireRequest>(Op::kExpire);
  EXPECT_EQ(req.value, 0u);
  EXPECT_FALSE(req.ttl);
  EXPECT_EQ(req.condition, ExpireCondition::kXx);
  EXPECT_EQ(req.write_id, id);
}

TEST_F(EveryOpTest, Link) {
  auto r = client_->Link("phone", "pc", 7776000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->master, "master-1");
  EXPECT_EQ(r->members, 3u);
  EXPECT_EQ(r->moved, 1u);
  auto req = Last<proto::LinkRequest>(Op::kLink);
  EXPECT_EQ(req.user, "phone");
  EXPECT_EQ(req.master, "pc");
  EXPECT_EQ(req.ttl, 7776000u);
  ASSERT_TRUE(client_->Link("phone", "pc").ok());
  EXPECT_EQ(Last<proto::LinkRequest>(Op::kLink).ttl, 0u);
}

// Node to node: a link's step on another node, and records read there.
TEST_F(EveryOpTest, LinkStepAndReadRecords) {
  LinkStep step;
  step.kind = LinkStep::Kind::kList;
  step.user = "pc";
  step.member = "phone";
  step.max_links = 64;
  const WriteId id{1, 2};
  auto r = client_->SendLinkStep(step, id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(r->members, 2u);
  auto req = Last<proto::LinkStepRequest>(Op::kLinkStep);
  EXPECT_EQ(req.step, step);
  EXPECT_EQ(req.write_id, id);
  const std::vector<std::string> users = {"phone", "nobody"};
  auto records = client_->ReadRecords(users);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 2u);
  ASSERT_TRUE((*records)[0].ok());
  EXPECT_EQ((*records)[0]->body, "body");
  EXPECT_EQ((*records)[0]->reference, "master-1");
  EXPECT_TRUE((*records)[1].status().IsNotFound());
  EXPECT_EQ(Last<proto::ReadRecordsRequest>(Op::kReadRecords).users, users);
}

TEST_F(EveryOpTest, UnlinkMasterOfLinksConnected) {
  auto u = client_->Unlink("phone");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(*u);
  EXPECT_EQ(Last<proto::UnlinkRequest>(Op::kUnlink).user, "phone");
  auto m = client_->MasterOf("phone");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, "master-1");
  EXPECT_EQ(Last<proto::MasterOfRequest>(Op::kMasterOf).user, "phone");
  auto page = client_->Links("phone", "a", 2);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->master, "master-1");
  EXPECT_EQ(page->links, (std::vector<LinkedUser>{{"a", 0}, {"b", 1900000000}}));
  EXPECT_EQ(page->next, "b");
  auto lr = Last<proto::LinksRequest>(Op::kLinks);
  EXPECT_EQ(lr.user, "phone");
  EXPECT_EQ(lr.cursor, "a");
  EXPECT_EQ(lr.limit, 2u);
  auto c = client_->Connected("x", "y");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(*c);
  auto cr = Last<proto::ConnectedRequest>(Op::kConnected);
  EXPECT_EQ(cr.a, "x");
  EXPECT_EQ(cr.b, "y");
}

TEST_F(EveryOpTest, ProfileFields) {
  const std::vector<FieldUpdate> set = {
      {"score", FieldValue::Double(0.5), 3600, true},
      {"consent", FieldValue::Bytes(std::string("\0\xff", 2)), 1'900'000'000, false},
      {"seen", FieldValue::Time(1'800'000'000), 0, false}};
  const WriteId id{7, 8};
  auto w = client_->FieldSet("u", set, id);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->changed, 2u);
  EXPECT_EQ(w->count, 5u);
  auto sr = Last<proto::FieldSetRequest>(Op::kFieldSet);
  EXPECT_EQ(sr.user, "u");
  ASSERT_EQ(sr.fields.size(), 3u);
  for (size_t i = 0; i < set.size(); ++i) {
    EXPECT_EQ(sr.fields[i].name, set[i].name);
    EXPECT_EQ(sr.fields[i].value, set[i].value);
    EXPECT_EQ(sr.fields[i].expiry, set[i].expiry);
    EXPECT_EQ(sr.fields[i].ttl, set[i].ttl);
  }
  EXPECT_EQ(sr.write_id, id);

  const std::vector<std::string> names = {"score", "cap:77"};
  w = client_->FieldDelete("u", names);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->changed, 1u);
  auto dr = Last<proto::FieldDeleteRequest>(Op::kFieldDelete);
  EXPECT_EQ(dr.names, names);
  EXPECT_TRUE(dr.write_id.empty());

  FieldIncrement inc;
  inc.name = "cap:77";
  inc.delta = -2;
  inc.ttl = 86400;
  inc.window = FieldIncrement::Window::kSliding;
  inc.cap = 0;
  auto i = client_->FieldIncrement("u", inc, id);
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  EXPECT_EQ(i->value, 3);
  EXPECT_TRUE(i->capped);
  auto ir = Last<proto::FieldIncrementRequest>(Op::kFieldIncrement);
  EXPECT_EQ(ir.increment.name, "cap:77");
  EXPECT_EQ(ir.increment.delta, -2);
  EXPECT_EQ(ir.increment.ttl, 86400u);
  EXPECT_EQ(ir.increment.window, FieldIncrement::Window::kSliding);
  EXPECT_EQ(ir.increment.cap, std::optional<int64_t>(0));
  EXPECT_EQ(ir.write_id, id);

  auto m = client_->FieldMax("u", {"seen", FieldValue::Time(1'800'000'000), 0, false});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->value, FieldValue::Time(1'900'000'000));
  EXPECT_FALSE(m->replaced);
  auto mr = Last<proto::FieldMaxRequest>(Op::kFieldMax);
  EXPECT_EQ(mr.field.name, "seen");
  EXPECT_EQ(mr.field.value, FieldValue::Time(1'800'000'000));
}

TEST_F(EveryOpTest, GetCarriesTheFieldOptions) {
  GetOptions opts;
  opts.fields.mode = FieldSelection::Mode::kNames;
  opts.fields.names = {"cap:77", "country"};
  ASSERT_TRUE(client_->Get("alice", opts).ok());
  EXPECT_EQ(Last<proto::GetRequest>(Op::kGet).options.fields, opts.fields);
  opts.fields = FieldSelection{FieldSelection::Mode::kPrefix, {}, "cap:"};
  std::vector<std::string> users = {"a"};
  ASSERT_TRUE(client_->BatchGet(users, opts).ok());
  EXPECT_EQ(Last<proto::BatchGetRequest>(Op::kBatchGet).options.fields, opts.fields);
}

TEST_F(EveryOpTest, CopyPartition) {
  auto r = client_->CopyPartition(
      CopyPartitionRequest{.partition = 3045, .cursor = 0, .min_next = 0, .max_bytes = 65536});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, FakePage());
  EXPECT_FALSE(r->finished());
  auto req = Last<proto::CopyPartitionRequest>(Op::kCopyPartition);
  EXPECT_EQ(req.partition, 3045u);
  EXPECT_EQ(req.cursor, 0u);
  EXPECT_EQ(req.min_next, 0u);
  EXPECT_EQ(req.max_bytes, 65536u);
  // A later page: the previous cursor, the first page's next as min_next.
  ASSERT_TRUE(client_
                  ->CopyPartition(CopyPartitionRequest{
                      .partition = 3045, .cursor = r->cursor, .min_next = r->next})
                  .ok());
  req = Last<proto::CopyPartitionRequest>(Op::kCopyPartition);
  EXPECT_EQ(req.cursor, 3000000000u);
  EXPECT_EQ(req.min_next, 1234u);
  EXPECT_EQ(req.max_bytes, 0u);
}

TEST_F(EveryOpTest, HelloAgain) {
  auto r = client_->Hello();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->server, "fake 0.0");
}

TEST_F(EveryOpTest, RequestIdsAreUnique) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client_->Ping().ok());
  auto frames = server_.received();
  for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(frames[i].id(), i + 1);
}

// ---- errors from the server ----

TEST(ClientTest, ServerErrorMapsToStatus) {
  FakeServer server([](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kGet)) {
      c.ReplyError(f, Status::NotFound("no profile for alice"));
    } else if (f.op() == OpCode(Op::kUpsert)) {
      c.ReplyError(f, Status::LimitExceeded("too many segments"));
    } else if (f.op() == OpCode(Op::kDelete)) {
      // A code this client does not know.
      std::string out;
      (void)proto::AppendFrame(&out, f.op(), f.id(), 200, UINT32_MAX,
                               [](std::string* o) { proto::EncodeError("new code", o); });
      c.Write(out);
    } else {
      Standard(c, f);
    }
  });
  auto c = Client::Connect(Options(server));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());

  auto g = (*c)->Get("alice");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(g.status().message(), "get to " + addr + ": no profile for alice");

  std::vector<SegmentUpdate> segs = {{1, 0, false, std::nullopt, std::nullopt}};
  auto u = (*c)->Upsert("alice", segs);
  EXPECT_EQ(u.status().code(), Status::Code::kLimitExceeded);
  EXPECT_TRUE(Contains(u.status().message(), "upsert to " + addr + ": too many segments"))
      << u.status().ToString();

  auto d = (*c)->Delete("alice");
  EXPECT_EQ(d.status().code(), Status::Code::kInternal) << d.status().ToString();
  EXPECT_TRUE(Contains(d.status().message(), "new code")) << d.status().ToString();

  // The connection is fine after errors.
  EXPECT_TRUE((*c)->Ping().ok());
}

// A node copying a partition meets the answers of PROTOCOL.md's copy_partition:
// a page, WrongNode (with the map's revision), Busy, and a page that breaks
// the rules (empty before the end).
TEST(ClientTest, CopyPartitionAnswersPagesWrongNodeAndBusy) {
  FakeServer server([](FakeConn& c, const Frame& f) {
    if (f.op() != OpCode(Op::kCopyPartition)) return Standard(c, f);
    proto::CopyPartitionRequest req;
    ASSERT_TRUE(proto::Decode(f.body, {}, &req).ok());
    if (req.partition != 3045) {
      c.ReplyWrongNode(f,
                       "copy_partition: partition " + std::to_string(req.partition) +
                           " is not held by this node (map revision 42)",
                       42);
    } else if (req.min_next > 1234) {
      c.ReplyError(f, Status::Busy("copy_partition: log partition 37 is applied up to 1234, "
                                   "below min_next " +
                                   std::to_string(req.min_next) + "; retry shortly"));
    } else if (req.cursor == kCopyFinished) {
      c.Reply(f, CopyPartitionResponse{.next = 1240, .cursor = kCopyFinished, .records = {}});
    } else if (req.cursor == 7) {
      c.Reply(f, CopyPartitionResponse{.next = 1240, .cursor = 8, .records = {}});  // not allowed
    } else {
      c.Reply(f, FakePage());
    }
  });
  auto c = Client::Connect(Options(server));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());

  auto page = (*c)->CopyPartition(CopyPartitionRequest{.partition = 3045, .cursor = 0});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(*page, FakePage());

  auto done = (*c)->CopyPartition(
      CopyPartitionRequest{.partition = 3045, .cursor = kCopyFinished, .min_next = page->next});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->finished());
  EXPECT_TRUE(done->records.empty());

  auto wrong = (*c)->CopyPartition(CopyPartitionRequest{.partition = 17, .cursor = 0});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Status::Code::kWrongNode);
  EXPECT_EQ(wrong.status().message(),
            "copy_partition to " + addr +
                ": copy_partition: partition 17 is not held by this node (map revision 42)");

  auto busy = (*c)->CopyPartition(
      CopyPartitionRequest{.partition = 3045, .cursor = 3000000000, .min_next = 2000});
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), Status::Code::kBusy);
  EXPECT_TRUE(Contains(busy.status().message(), "copy_partition to " + addr + ": "))
      << busy.status().ToString();
  EXPECT_TRUE(Contains(busy.status().message(), "below min_next 2000; retry shortly"))
      << busy.status().ToString();

  auto broken = (*c)->CopyPartition(CopyPartitionRequest{.partition = 3045, .cursor = 7});
  EXPECT_EQ(broken.status().code(), Status::Code::kCorruption) << broken.status().ToString();
  EXPECT_TRUE(Contains(broken.status().message(), "records: empty")) << broken.status().ToString();

  // The connection is fine after each.
  EXPECT_TRUE((*c)->Ping().ok());
  EXPECT_TRUE((*c)->CopyPartition(CopyPartitionRequest{.partition = 3045, .cursor = 0}).ok());
}

// A client reading a partition meets the answers of PROTOCOL.md's scan: a
// page (marked stale or not), the last page, WrongNode with the map's
// revision, Busy, and a page that breaks the rules (ids not ascending).
TEST(ClientTest, ScanAnswersPagesStaleWrongNodeAndBusy) {
  ScanResponse page;
  page.cursor = 77;
  page.profiles.push_back(ScannedProfile{"alice",
                                         {Segment{1, 0, 3u, {}}, Segment{9, 1896134400, {}, 4u}},
                                         {{"n", FieldValue::Int(5), 0}},
                                         "master-1",
                                         1896134400,
                                         {}});
  FakeServer server([page](FakeConn& c, const Frame& f) {
    if (f.op() != OpCode(Op::kScan)) return Standard(c, f);
    proto::ScanRequest req;
    ASSERT_TRUE(proto::Decode(f.body, {}, &req).ok());
    if (req.partition == 17) {
      c.ReplyWrongNode(f, "scan: partition 17 is not held by this node (map revision 42)", 42);
    } else if (req.partition == 18) {
      c.ReplyError(f, Status::Busy("scan: the cluster has no partition map yet; retry later"));
    } else if (req.partition == 19) {  // ids out of order: not allowed
      std::string out;
      (void)proto::AppendFrame(&out, f.op(), f.id(), 0, UINT32_MAX, [](std::string* o) {
        proto::Encode(ScanResponse{kScanFinished,
                                   {ScannedProfile{"u", {Segment{5, 0, {}, {}}, Segment{5, 0, {}, {}}}}}},
                      o);
      });
      c.Write(out);
    } else if (req.cursor == 77) {
      c.Reply(f, ScanResponse{kScanFinished, {}});
    } else {  // the first page, from a copy that may be behind: stale
      std::string out;
      (void)proto::AppendFrame(&out, f.op(), f.id(), 0, UINT32_MAX,
                               [&](std::string* o) { proto::Encode(page, o); });
      out[5] = static_cast<char>(proto::kFlagStale);
      c.Write(out);
    }
  });
  auto c = Client::Connect(Options(server));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());

  auto first = (*c)->Scan(ScanRequest{3045, 0, 4096});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto req = proto::ScanRequest{};
  ASSERT_TRUE(proto::Decode(server.received().back().body, {}, &req).ok());
  EXPECT_EQ(req, (ScanRequest{3045, 0, 4096}));
  EXPECT_TRUE(first->stale);
  first->stale = false;
  EXPECT_EQ(*first, page);
  EXPECT_FALSE(first->finished());

  auto last = (*c)->Scan(ScanRequest{3045, first->cursor, 0});
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE(last->finished());
  EXPECT_FALSE(last->stale);
  EXPECT_TRUE(last->profiles.empty());

  auto wrong = (*c)->Scan(ScanRequest{17, 0, 0});
  EXPECT_EQ(wrong.status().code(), Status::Code::kWrongNode);
  EXPECT_EQ(wrong.status().message(),
            "scan to " + addr + ": scan: partition 17 is not held by this node (map revision 42)");
  auto busy = (*c)->Scan(ScanRequest{18, 0, 0});
  EXPECT_EQ(busy.status().code(), Status::Code::kBusy) << busy.status().ToString();
  auto broken = (*c)->Scan(ScanRequest{19, 0, 0});
  EXPECT_EQ(broken.status().code(), Status::Code::kCorruption) << broken.status().ToString();
  EXPECT_TRUE(Contains(broken.status().message(), "profiles[0].segments[1].id"))
      << broken.status().ToString();
  EXPECT_TRUE((*c)->Ping().ok());
}

TEST(ClientTest, BadResponseBodyFailsOnlyThatRequest) {
  FakeServer server([](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kGet)) {
      std::string out;
      (void)proto::AppendFrame(&out, f.op(), f.id(), 0, UINT32_MAX,
                               [](std::string* o) { o->append("\xc1\xc1\xc1"); });
      c.Write(out);
    } else if (f.op() == OpCode(Op::kCount)) {
      c.Reply(f, proto::RemoveResponse{1});  // the wrong body: no "count"
    } else {
      Standard(c, f);
    }
  });
  auto c = Client::Connect(Options(server));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto g = (*c)->Get("alice");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(g.status().message(), "get to 127.0.0.1:")) << g.status().ToString();
  EXPECT_TRUE(Contains(g.status().message(), "bad response body")) << g.status().ToString();
  auto n = (*c)->Count("alice");
  EXPECT_EQ(n.status().code(), Status::Code::kCorruption) << n.status().ToString();
  EXPECT_TRUE((*c)->Ping().ok());
}

TEST(ClientTest, RequestOverServerLimitIsRefusedLocally) {
  FakeServer server([](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kHello)) {
      ServerInfo info = FakeInfo();
      info.max_frame_bytes = 100;
      c.Reply(f, info);
    } else {
      Standard(c, f);
    }
  });
  auto c = Client::Connect(Options(server));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<SegmentUpdate> segs(100, SegmentUpdate{123456, 3600, true, 1, 2});
  auto u = (*c)->Upsert("alice", segs);
  EXPECT_EQ(u.status().code(), Status::Code::kLimitExceeded) << u.status().ToString();
  EXPECT_TRUE(Contains(u.status().message(), "100 bytes")) << u.status().ToString();
  ASSERT_TRUE((*c)->Ping().ok());
  for (const Frame& f : server.received()) EXPECT_NE(f.op(), OpCode(Op::kUpsert));
}

// ---- pipelining ----

// Count answers carry the number at the end of the user ("u17" -> 17).
uint32_t UserNumber(const Frame& f) {
  proto::CountRequest req;
  EXPECT_TRUE(proto::Decode(f.body, {}, &req).ok());
  return static_cast<uint32_t>(std::stoul(req.user.substr(1)));
}

TEST(AsyncClientTest, OutOfOrderAnswersAreMatchedById) {
  std::vector<Frame> held;  // server thread only
  FakeServer server([&held](FakeConn& c, const Frame& f) {
    if (f.op() != OpCode(Op::kCount)) return Standard(c, f);
    held.push_back(f);
    if (held.size() < 3) return;
    for (auto it = held.rbegin(); it != held.rend(); ++it) {
      c.Reply(*it, proto::CountResponse{UserNumber(*it) * 10});
    }
    held.clear();
  });
  boost::asio::io_context io;
  auto client = ConnectAsync(io, Options(server));
  ASSERT_NE(client, nullptr);
  std::vector<std::optional<Result<uint32_t>>> got(3);
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) {
    client->Count("u" + std::to_string(i), 0, UINT64_MAX, [&, i](Result<uint32_t> r) {
      got[i].emplace(std::move(r));
      order.push_back(i);
    });
  }
  EXPECT_EQ(client->in_flight(), 3u);
  ASSERT_TRUE(RunUntil(io, [&] { return order.size() == 3; }));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i]->ok()) << got[i]->status().ToString();
    EXPECT_EQ(**got[i], static_cast<uint32_t>(i * 10));
  }
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(client->in_flight(), 0u);
}

TEST(AsyncClientTest, ThousandsPipelinedOnOneConnection) {
  constexpr int kRequests = 2000;
  std::vector<Frame> held;  // server thread only
  FakeServer server([&held](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kHello)) return Standard(c, f);
    if (f.op() == OpCode(Op::kGet)) return c.Reply(f, FakeGet());
    // Counts are answered in reversed groups of 7.
    held.push_back(f);
    if (held.size() < 7) return;
    std::string out;
    for (auto it = held.rbegin(); it != held.rend(); ++it) {
      (void)proto::AppendFrame(&out, it->op(), it->id(), 0, UINT32_MAX, [&](std::string* o) {
        proto::Encode(proto::CountResponse{UserNumber(*it)}, o);
      });
    }
    c.Write(out);
    held.clear();
  });
  boost::asio::io_context io;
  ClientOptions o = Options(server);
  o.request_timeout = 30s;
  auto client = ConnectAsync(io, o);
  ASSERT_NE(client, nullptr);
  int done = 0;
  int failed = 0;
  int wrong = 0;
  // Issue them all before running the io_context once, so they pile up.
  const int counts = kRequests - kRequests % 7;  // the last partial group is gets
  for (int i = 0; i < kRequests; ++i) {
    if (i < counts) {
      client->Count("u" + std::to_string(i), 0, UINT64_MAX, [&, i](Result<uint32_t> r) {
        ++done;
        if (!r.ok()) {
          ++failed;
          ADD_FAILURE() << r.status().ToString();
        } else if (*r != static_cast<uint32_t>(i)) {
          ++wrong;
        }
      });
    } else {
      client->Get("g", {}, [&](Result<GetResult> r) {
        ++done;
        if (!r.ok()) ++failed;
      });
    }
  }
  EXPECT_EQ(client->in_flight(), static_cast<size_t>(kRequests));
  ASSERT_TRUE(RunUntil(
      io, [&] { return done == kRequests; }, 60s))
      << done << " done";
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(client->in_flight(), 0u);
  EXPECT_EQ(server.received().size(), static_cast<size_t>(kRequests + 1));
}

TEST(ClientTest, LargeAnswerAndAnswersSplitIntoBytes) {
  constexpr size_t kIds = 300'000;  // some 4 MB: the read buffer grows, then shrinks
  FakeServer server([](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kGet)) {
      GetResult r;
      for (size_t i = 0; i < kIds; ++i) r.ids.push_back(UINT64_MAX - i);
      r.expires.assign(kIds, 1'800'000'000);
      r.count = kIds;
      c.Reply(f, r);
    } else if (f.op() == OpCode(Op::kCount)) {
      // One byte per write: the client sees headers and bodies in pieces.
      std::string out;
      (void)proto::AppendFrame(&out, f.op(), f.id(), 0, UINT32_MAX,
                               [](std::string* o) { proto::Encode(proto::CountResponse{77}, o); });
      boost::system::error_code ec;
      c.socket().set_option(boost::asio::ip::tcp::no_delay(true), ec);
      for (char ch : out) c.Write(std::string_view(&ch, 1));
    } else {
      Standard(c, f);
    }
  });
  auto c = Client::Connect(Options(server));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (int round = 0; round < 2; ++round) {
    auto g = (*c)->Get("big");
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_EQ(g->ids.size(), kIds);
    EXPECT_EQ(g->ids.back(), UINT64_MAX - (kIds - 1));
    EXPECT_EQ(g->count, kIds);
    auto n = (*c)->Count("split");
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 77u);
  }
}

// ---- timeouts ----

TEST(AsyncClientTest, TimeoutThenLateAnswerIsIgnored) {
  std::vector<Frame> held;  // server thread only
  std::atomic<int> late_sent{0};
  FakeServer server([&](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kCount)) {
      held.push_back(f);
      return;
    }
    if (f.op() == OpCode(Op::kPing)) {
      // The held counts' answers, late, just before the ping's.
      for (const Frame& h : held) {
        c.Reply(h, proto::CountResponse{1});
        ++late_sent;
      }
      held.clear();
    }
    Standard(c, f);
  });
  boost::asio::io_context io;
  ClientOptions o = Options(server);
  o.request_timeout = 200ms;
  auto client = ConnectAsync(io, o);
  ASSERT_NE(client, nullptr);

  std::optional<Result<uint32_t>> slow;
  std::optional<Result<GetResult>> fast;
  client->Count("u1", 0, UINT64_MAX, [&](Result<uint32_t> r) { slow.emplace(std::move(r)); });
  client->Get("alice", {}, [&](Result<GetResult> r) { fast.emplace(std::move(r)); });
  ASSERT_TRUE(RunUntil(io, [&] { return slow.has_value() && fast.has_value(); }));
  ASSERT_TRUE(fast->ok()) << fast->status().ToString();
  ASSERT_FALSE(slow->ok());
  EXPECT_EQ(slow->status().code(), Status::Code::kTimeout);
  EXPECT_EQ(slow->status().message(),
            "count to 127.0.0.1:" + std::to_string(server.port()) + ": no answer within 200 ms");
  EXPECT_EQ(client->in_flight(), 0u);

  std::optional<Status> ping;
  client->Ping([&](Result<std::monostate> r) { ping.emplace(r.status()); });
  ASSERT_TRUE(RunUntil(io, [&] { return ping.has_value(); }));
  EXPECT_TRUE(ping->ok()) << ping->ToString();
  EXPECT_EQ(late_sent.load(), 1);
  EXPECT_TRUE(client->is_open());

  std::optional<Result<GetResult>> again;
  client->Get("alice", {}, [&](Result<GetResult> r) { again.emplace(std::move(r)); });
  ASSERT_TRUE(RunUntil(io, [&] { return again.has_value(); }));
  EXPECT_TRUE(again->ok()) << again->status().ToString();
}

TEST(ClientTest, SyncTimeout) {
  FakeServer server([](FakeConn& c, const Frame& f) {
    if (f.op() != OpCode(Op::kDelete)) Standard(c, f);
  });
  ClientOptions o = Options(server);
  o.request_timeout = 100ms;
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto d = (*c)->Delete("x");
  EXPECT_EQ(d.status().code(), Status::Code::kTimeout) << d.status().ToString();
  EXPECT_TRUE((*c)->Ping().ok());
}

// ---- broken connections ----

// Sends three counts; the server reacts to the third with `on_third`.
struct BreakCase {
  std::function<void(FakeConn&, const Frame&)> on_third;
  std::vector<std::optional<Result<uint32_t>>> got =
      std::vector<std::optional<Result<uint32_t>>>(3);
};

void RunBreakCase(BreakCase& bc, bool* open_after) {
  FakeServer server([&](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kCount) && f.id() == 4) return bc.on_third(c, f);
    if (f.op() != OpCode(Op::kCount)) Standard(c, f);
  });
  boost::asio::io_context io;
  auto client = ConnectAsync(io, Options(server));
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 3; ++i) {
    client->Count("u" + std::to_string(i), 0, UINT64_MAX,
                  [&bc, i](Result<uint32_t> r) { bc.got[i].emplace(std::move(r)); });
  }
  ASSERT_TRUE(RunUntil(
      io, [&] { return bc.got[0].has_value() && bc.got[1].has_value() && bc.got[2].has_value(); }));
  *open_after = client->is_open();
  EXPECT_EQ(client->in_flight(), 0u);
  // A call on a broken connection fails, never inside the call.
  std::optional<Status> ping;
  client->Ping([&](Result<std::monostate> r) { ping.emplace(r.status()); });
  EXPECT_FALSE(ping.has_value());
  ASSERT_TRUE(RunUntil(io, [&] { return ping.has_value(); }));
  EXPECT_EQ(ping->code(), Status::Code::kUnavailable) << ping->ToString();
  EXPECT_TRUE(Contains(ping->message(), "ping to 127.0.0.1:")) << ping->ToString();
}

void ExpectAllFailed(const BreakCase& bc, Status::Code code, std::string_view words) {
  for (const auto& g : bc.got) {
    ASSERT_FALSE(g->ok());
    EXPECT_EQ(g->status().code(), code) << g->status().ToString();
    EXPECT_TRUE(Contains(g->status().message(), "count to 127.0.0.1:")) << g->status().ToString();
    EXPECT_TRUE(Contains(g->status().message(), words)) << g->status().ToString();
  }
}

TEST(AsyncClientTest, ServerClosingFailsPendingWithUnavailable) {
  BreakCase bc{[](FakeConn& c, const Frame&) { c.Close(); }};
  bool open = true;
  RunBreakCase(bc, &open);
  EXPECT_FALSE(open);
  ExpectAllFailed(bc, Status::Code::kUnavailable, "connection broken: closed by the server");
}

TEST(AsyncClientTest, BadMagicBreaksConnection) {
  BreakCase bc{[](FakeConn& c, const Frame&) { c.Write("XXjunkjunkjunkjunkjunk"); }};
  bool open = true;
  RunBreakCase(bc, &open);
  EXPECT_FALSE(open);
  ExpectAllFailed(bc, Status::Code::kUnavailable, "broken: bad magic");
}

// Sends an answer's header alone, with `version` and `body_length`.
void WriteHeader(FakeConn& c, const Frame& f, uint8_t version, uint32_t body_length) {
  proto::FrameHeader h;
  h.version = version;
  h.op = f.op();
  h.request_id = f.id();
  h.body_length = body_length;
  uint8_t bytes[proto::kHeaderSize];
  proto::EncodeHeader(h, bytes);
  c.Write(std::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
}

TEST(AsyncClientTest, OversizedAnswerBreaksConnection) {
  BreakCase bc{[](FakeConn& c, const Frame& f) {
    WriteHeader(c, f, proto::kVersion, proto::kMaxResponseBytes + 1);
  }};
  bool open = true;
  RunBreakCase(bc, &open);
  EXPECT_FALSE(open);
  ExpectAllFailed(bc, Status::Code::kUnavailable, "over the limit");
}

// A header of another protocol version breaks the connection as soon as it
// has come: its body (here never sent) is not waited for.
TEST(AsyncClientTest, AnswerOfAnotherVersionBreaksConnectionAtItsHeader) {
  BreakCase bc{[](FakeConn& c, const Frame& f) { WriteHeader(c, f, proto::kVersion + 1, 1000); }};
  bool open = true;
  RunBreakCase(bc, &open);
  EXPECT_FALSE(open);
  ExpectAllFailed(bc, Status::Code::kUnavailable, "response in protocol version");
}

TEST(AsyncClientTest, AnswerToAnIdNeverSentBreaksConnection) {
  BreakCase bc{[](FakeConn& c, const Frame& f) {
    Frame other = f;
    other.header.request_id = 999;
    c.Reply(other, proto::CountResponse{1});
  }};
  bool open = true;
  RunBreakCase(bc, &open);
  EXPECT_FALSE(open);
  ExpectAllFailed(bc, Status::Code::kUnavailable, "request id 999, which is not in flight");
}

TEST(AsyncClientTest, AnswerWithTheWrongOpBreaksConnection) {
  BreakCase bc{[](FakeConn& c, const Frame& f) {
    Frame other = f;
    other.header.op = OpCode(Op::kRemove);
    c.Reply(other, proto::RemoveResponse{1});
  }};
  bool open = true;
  RunBreakCase(bc, &open);
  EXPECT_FALSE(open);
  ExpectAllFailed(bc, Status::Code::kUnavailable, "broken");
}

TEST(AsyncClientTest, ConnectionLevelErrorFailsAllWithItsStatus) {
  BreakCase bc{[](FakeConn& c, const Frame& f) {
    Frame zero = f;
    zero.header.request_id = 0;
    c.ReplyError(zero, Status::Busy("too many connections"));
    c.Close();
  }};
  bool open = true;
  RunBreakCase(bc, &open);
  EXPECT_FALSE(open);
  ExpectAllFailed(bc, Status::Code::kBusy, "server closed the connection: too many connections");
}

// ---- closing from the client's side ----

TEST(AsyncClientTest, DestroyingFailsPendingWithUnavailable) {
  FakeServer server([](FakeConn& c, const Frame& f) {
    if (f.op() == OpCode(Op::kHello)) Standard(c, f);  // nothing else is answered
  });
  boost::asio::io_context io;
  auto client = ConnectAsync(io, Options(server));
  ASSERT_NE(client, nullptr);
  std::vector<Status> got;
  for (int i = 0; i < 3; ++i) {
    client->Delete("x", [&](Result<bool> r) { got.push_back(r.status()); });
  }
  // The first goes out inside the call, the other two once its write is done.
  ASSERT_TRUE(RunUntil(io, [&] { return server.received().size() == 4; }));
  EXPECT_EQ(client->in_flight(), 3u);
  EXPECT_TRUE(got.empty());
  client.reset();
  ASSERT_EQ(got.size(), 3u);  // inside the destructor
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "delete to 127.0.0.1:")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "closed")) << s.ToString();
  }
  // Whatever is left in the io_context finishes without the client.
  io.restart();
  io.poll();
}

TEST(AsyncClientTest, CloseThenCallsFail) {
  FakeServer server(Standard);
  boost::asio::io_context io;
  auto client = ConnectAsync(io, Options(server));
  ASSERT_NE(client, nullptr);
  std::optional<Status> first;
  client->Get("x", {}, [&](Result<GetResult> r) { first.emplace(r.status()); });
  client->Close();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->code(), Status::Code::kUnavailable);
  client->Close();  // idempotent
  EXPECT_FALSE(client->is_open());
  std::optional<Status> second;
  client->Get("x", {}, [&](Result<GetResult> r) { second.emplace(r.status()); });
  EXPECT_FALSE(second.has_value());
  ASSERT_TRUE(RunUntil(io, [&] { return second.has_value(); }));
  EXPECT_EQ(second->code(), Status::Code::kUnavailable) << second->ToString();
}

TEST(AsyncClientTest, CallbackMayDestroyTheClient) {
  FakeServer server(Standard);
  boost::asio::io_context io;
  auto client = ConnectAsync(io, Options(server));
  ASSERT_NE(client, nullptr);
  std::vector<Status> got;
  // The server answers all three at once (one read); the first callback
  // destroys the client, which fails the other two from inside it.
  for (int i = 0; i < 3; ++i) {
    client->Ping([&](Result<std::monostate> r) {
      got.push_back(r.status());
      client.reset();
    });
  }
  ASSERT_TRUE(RunUntil(io, [&] { return got.size() == 3; }));
  EXPECT_TRUE(got[0].ok()) << got[0].ToString();
  EXPECT_EQ(client, nullptr);
  io.restart();
  io.poll();
}

TEST(AsyncClientTest, CallbackMayStartCalls) {
  FakeServer server(Standard);
  boost::asio::io_context io;
  auto client = ConnectAsync(io, Options(server));
  ASSERT_NE(client, nullptr);
  int chain = 0;
  std::function<void(Result<uint32_t>)> next = [&](Result<uint32_t> r) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (++chain < 50) client->Count("u", 0, UINT64_MAX, next);
  };
  client->Count("u", 0, UINT64_MAX, next);
  ASSERT_TRUE(RunUntil(io, [&] { return chain == 50; }));
}

}  // namespace
}  // namespace segstore::client
