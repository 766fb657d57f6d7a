// AsyncClusterClient against scripted fake nodes (fake_cluster.h): a fake
// cluster whose map names the fake servers themselves, each answering as the
// test says. Routing by partition and batches gathered in order; WrongNode
// (one map fetch at a time), Busy and unreachable nodes (a pause, the next
// replica); write IDs in a cluster with a log, resent with the same ID when
// the outcome is unknown, never resent without one; stale gets; a single
// server; Close and the destructor; the profile field writes routed and
// resent as every write, and gets' field options carried to every node
// asked. The real thing, three segstored processes, is in
// tests/cluster/cluster_load_test.cc.
#include "segstore/async_cluster_client.h"

#include <gtest/gtest.h>

#include <utility>

// After <utility>: Boost 1.74's Asio uses std::exchange without including it.
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "client/fake_cluster.h"
#include "client/fake_server.h"
#include "proto/wire.h"
#include "segstore/routing.h"

namespace segstore::client {
namespace {

using namespace std::chrono_literals;
using proto::Op;
using testing::AnswerAsHolder;
using testing::FakeCluster;
using testing::FakeConn;
using testing::FakeServer;
using testing::Frame;
using testing::kLimits;
using testing::UserAndId;
using testing::Users;

// Runs `io` until `pred` holds; false after `timeout`.
bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& pred,
              std::chrono::milliseconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.restart();
    io.run_one_for(50ms);
  }
  return true;
}

// A free port nobody listens on (bound once, then released).
uint16_t ClosedPort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

class AsyncClusterClientTest : public ::testing::Test {
 protected:
  // Connects through node `seed` of `cluster` (or the port given); fails the
  // test when it does not.
  std::unique_ptr<AsyncClusterClient> ConnectTo(uint16_t port, unsigned per_node = 1,
                                                int max_attempts = 4,
                                                std::chrono::milliseconds pause = 20ms,
                                                std::chrono::milliseconds down_mark = 1000ms) {
    AsyncClusterClientOptions o;
    o.down_mark = down_mark;
    o.node.port = port;
    o.node.connect_timeout = 5s;
    o.node.request_timeout = 5s;
    o.connections_per_node = per_node;
    o.max_attempts = max_attempts;
    o.retry_pause = pause;
    std::optional<Result<std::unique_ptr<AsyncClusterClient>>> r;
    AsyncClusterClient::Connect(io_, o, [&](Result<std::unique_ptr<AsyncClusterClient>> res) {
      r.emplace(std::move(res));
    });
    EXPECT_FALSE(r.has_value()) << "Connect ran its callback inside the call";
    if (!RunUntil(io_, [&] { return r.has_value(); })) return nullptr;
    EXPECT_TRUE(r->ok()) << r->status().ToString();
    return r->ok() ? std::move(*r).value() : nullptr;
  }

  // Runs one call to its answer, checking that the callback does not run
  // inside the call.
  template <typename T, typename Start>
  Result<T> Wait(Start start) {
    std::optional<Result<T>> out;
    start([&out](Result<T> r) { out.emplace(std::move(r)); });
    EXPECT_FALSE(out.has_value()) << "the callback ran inside the call";
    if (!RunUntil(io_, [&] { return out.has_value(); })) return Status::Timeout("test: no answer");
    return std::move(*out);
  }

  std::vector<SegmentUpdate> One() { return {SegmentUpdate{7, 3600, true, {}, {}}}; }

  boost::asio::io_context io_;
};

TEST_F(AsyncClusterClientTest, ASingleServerGetsEverythingAndNothingIsRetried) {
  // Not a cluster: the one server answers every user; Busy for "busy".
  FakeCluster cluster(1, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (f.op() == static_cast<uint8_t>(Op::kGet) && UserAndId(f).first == "busy") {
      return c.ReplyError(f, Status::Busy("too much"));
    }
    AnswerAsHolder(fc, node, c, f);
  });
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->map().cluster);
  EXPECT_EQ(client->server_info().server, "fake 0.0");
  EXPECT_EQ(client->NodeOf("anyone"), cluster.address(0));
  EXPECT_TRUE(client->NewWriteId().empty());

  Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->ids, std::vector<uint64_t>{0});
  Result<GetResult> busy = Wait<GetResult>([&](auto cb) { client->Get("busy", {}, cb); });
  EXPECT_EQ(busy.status().code(), Status::Code::kBusy);
  Result<UpsertResult> u =
      Wait<UpsertResult>([&](auto cb) { client->Upsert("alice", One(), UpsertMode::kSet, cb); });
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  const std::vector<std::string> users = Users(5);
  Result<BatchGetResult> b =
      Wait<BatchGetResult>([&](auto cb) { client->BatchGet(users, {}, cb); });
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 5u);
  Result<BatchGetResult> none = Wait<BatchGetResult>(
      [&](auto cb) { client->BatchGet(std::span<const std::string>(), {}, cb); });
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(Wait<uint32_t>([&](auto cb) { client->Count("alice", 0, 9, cb); }).value(), 0u);
  EXPECT_TRUE(Wait<bool>([&](auto cb) { client->Delete("alice", cb); }).value());
  const std::vector<uint64_t> ids = {1};
  Result<ExpireResult> e = Wait<ExpireResult>([&](auto cb) {
    client->Expire("alice", ids, ExpireSpec{60, true}, cb);
  });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->results, std::vector<ExpireOutcome>{ExpireOutcome::kSet});

  EXPECT_EQ(client->retries(), 0u);
  EXPECT_EQ(client->in_flight(), 0u);
  EXPECT_EQ(cluster.map_requests(), 1);  // the one at Connect
  // No write IDs outside a cluster with a log.
  for (const Frame& f : cluster.Received(0, Op::kUpsert)) EXPECT_TRUE(UserAndId(f).second.empty());
}

TEST_F(AsyncClusterClientTest, RoutesEachUserToItsNodeAndGathersBatchesInTheCallersOrder) {
  FakeCluster cluster(3, AnswerAsHolder);
  cluster.SetMap(cluster.SpreadMap(5, 1, false));
  auto client = ConnectTo(cluster.port(1), /*per_node=*/2);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->map().has_map());
  EXPECT_EQ(client->map().revision, 5u);

  // Many gets at once, each answered by its holder.
  const std::vector<std::string> users = Users(300);
  std::vector<std::optional<Result<GetResult>>> got(users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    client->Get(users[i], {}, [&got, i](Result<GetResult> r) { got[i].emplace(std::move(r)); });
  }
  EXPECT_EQ(client->in_flight(), users.size());
  ASSERT_TRUE(RunUntil(io_, [&] { return client->in_flight() == 0; }));
  int per_node[3] = {};
  for (size_t i = 0; i < users.size(); ++i) {
    ASSERT_TRUE(got[i].has_value() && got[i]->ok()) << users[i];
    const uint16_t holder = cluster.ReplicasOf(users[i])[0];
    EXPECT_EQ((*got[i])->ids, std::vector<uint64_t>{holder}) << users[i];
    EXPECT_EQ(client->NodeOf(users[i]), cluster.address(holder));
    ++per_node[holder];
  }
  for (int n = 0; n < 3; ++n) {
    EXPECT_GT(per_node[n], 50) << n;
    EXPECT_GE(cluster.server(n).connections(), 1) << n;
    EXPECT_LE(cluster.server(n).connections(), 2) << n;  // connections_per_node
  }

  // A batch get: one request per node, the answers in the order asked.
  Result<BatchGetResult> b =
      Wait<BatchGetResult>([&](auto cb) { client->BatchGet(users, {}, cb); });
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->size(), users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    ASSERT_TRUE((*b)[i].ok()) << users[i] << ": " << (*b)[i].status().ToString();
    EXPECT_EQ((*b)[i]->ids, std::vector<uint64_t>{cluster.ReplicasOf(users[i])[0]}) << users[i];
  }
  for (int n = 0; n < 3; ++n) {
    const std::vector<Frame> batches = cluster.Received(n, Op::kBatchGet);
    ASSERT_EQ(batches.size(), 1u) << n;
    proto::BatchGetRequest req;
    ASSERT_TRUE(proto::Decode(batches[0].body, kLimits, &req).ok());
    EXPECT_EQ(req.users.size(), static_cast<size_t>(per_node[n]));
    for (const std::string& u : req.users) EXPECT_EQ(cluster.ReplicasOf(u)[0], n) << u;
  }

  // A batch upsert likewise; its items keep their order.
  std::vector<UpsertItem> items;
  for (const std::string& u : users) items.push_back(UpsertItem{u, One(), UpsertMode::kSet, {}});
  Result<BatchUpsertResult> w =
      Wait<BatchUpsertResult>([&](auto cb) { client->BatchUpsert(items, cb); });
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    ASSERT_TRUE((*w)[i].ok()) << users[i];
    EXPECT_EQ((*w)[i]->inserted, cluster.ReplicasOf(users[i])[0] + 1u) << users[i];
  }
  EXPECT_EQ(client->retries(), 0u);
  EXPECT_EQ(cluster.map_requests(), 1);
}

TEST_F(AsyncClusterClientTest, WrongNodeFetchesTheMapOneFetchAtATimeAndRetriesWhereItSays) {
  // The client's map puts everything on node 0; then the cluster moves two
  // thirds of the partitions (revision 2), and node 0 says WrongNode for them.
  FakeCluster cluster(3, AnswerAsHolder);
  cluster.SetMap(cluster.MakeMap(1, 1, false, [](uint32_t) { return std::vector<uint16_t>{0}; }));
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  cluster.SetMap(cluster.SpreadMap(2, 1, false));

  const std::vector<std::string> users = Users(90);
  std::vector<std::optional<Result<GetResult>>> got(users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    client->Get(users[i], {}, [&got, i](Result<GetResult> r) { got[i].emplace(std::move(r)); });
  }
  ASSERT_TRUE(RunUntil(io_, [&] { return client->in_flight() == 0; }));
  uint64_t moved = 0;
  for (size_t i = 0; i < users.size(); ++i) {
    ASSERT_TRUE(got[i]->ok()) << users[i] << ": " << got[i]->status().ToString();
    const uint16_t holder = cluster.ReplicasOf(users[i])[0];
    EXPECT_EQ((**got[i]).ids, std::vector<uint64_t>{holder});
    moved += holder != 0 ? 1 : 0;
  }
  EXPECT_GT(moved, 40u);
  EXPECT_EQ(client->retries(), moved);  // each moved user once
  EXPECT_EQ(client->map().revision, 2u);
  // Sixty-odd requests needed a newer map; they shared one fetch, or two
  // (those answered while the first was under way wait for the next).
  EXPECT_LE(cluster.map_requests(), 1 + 2) << "fetches were not shared";

  // A batch sent by an older map: the entries a node does not hold go round
  // again, and the answers still come in the order asked.
  cluster.SetMap(cluster.MakeMap(3, 1, false, [](uint32_t p) {
    return std::vector<uint16_t>{static_cast<uint16_t>((p + 1) % 3)};
  }));
  Result<BatchGetResult> b =
      Wait<BatchGetResult>([&](auto cb) { client->BatchGet(users, {}, cb); });
  ASSERT_TRUE(b.ok());
  for (size_t i = 0; i < users.size(); ++i) {
    ASSERT_TRUE((*b)[i].ok()) << users[i] << ": " << (*b)[i].status().ToString();
    EXPECT_EQ((*b)[i]->ids, std::vector<uint64_t>{cluster.ReplicasOf(users[i])[0]});
  }
  EXPECT_EQ(client->map().revision, 3u);
  EXPECT_LE(cluster.map_requests(), 1 + 2 + 1);
}

TEST_F(AsyncClusterClientTest, WrongNodeFromANodeBehindPausesAndGivesUpAfterMaxAttempts) {
  // Node 0's copy says it does not hold anything, while every map says it
  // does: the client keeps its map, pauses, and gives up with WrongNode.
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node == 0) {
      std::string out;
      proto::AppendWrongNodeFrame(&out, f.op(), f.id(), "not here", 1);
      return c.Write(out);
    }
    AnswerAsHolder(fc, node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(4, 1, false, [](uint32_t) { return std::vector<uint16_t>{0}; }));
  auto client = ConnectTo(cluster.port(1), 1, /*max_attempts=*/3, /*pause=*/30ms);
  ASSERT_NE(client, nullptr);
  const auto start = std::chrono::steady_clock::now();
  Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
  EXPECT_EQ(g.status().code(), Status::Code::kWrongNode) << g.status().ToString();
  EXPECT_EQ(client->retries(), 2u);
  EXPECT_EQ(cluster.Received(0, Op::kGet).size(), 3u);
  // Two pauses: 30 ms, then 60 ms.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 90ms);
}

TEST_F(AsyncClusterClientTest, BusyNodesPauseAndUnreachableOnesArePassedForTheNextReplica) {
  // Two replicas of everything: node 0 first, then node 1. Node 0 is Busy.
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node == 0) return c.ReplyError(f, Status::Busy("serving nothing"));
    AnswerAsHolder(fc, node, c, f);
  });
  const auto first0 = [](uint32_t) { return std::vector<uint16_t>{0, 1}; };
  cluster.SetMap(cluster.MakeMap(1, 2, false, first0));
  auto client = ConnectTo(cluster.port(1), 1, 4, 40ms);
  ASSERT_NE(client, nullptr);
  auto start = std::chrono::steady_clock::now();
  Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->ids, std::vector<uint64_t>{1});
  EXPECT_GE(std::chrono::steady_clock::now() - start, 40ms);
  EXPECT_EQ(client->retries(), 1u);
  // Busy is retried for writes too: nothing was done.
  Result<UpsertResult> u =
      Wait<UpsertResult>([&](auto cb) { client->Upsert("alice", One(), UpsertMode::kSet, cb); });
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->inserted, 2u);

  // Node 0 at an address nobody listens on: reads go to node 1.
  cluster.SetScript(AnswerAsHolder);
  cluster.SetMap(cluster.MakeMap(
      2, 2, false, first0, {"127.0.0.1:" + std::to_string(ClosedPort()), cluster.address(1)}));
  auto moved = ConnectTo(cluster.port(1), 1, 4, 10ms);
  ASSERT_NE(moved, nullptr);
  const std::vector<std::string> users = Users(20);
  Result<BatchGetResult> b = Wait<BatchGetResult>([&](auto cb) { moved->BatchGet(users, {}, cb); });
  ASSERT_TRUE(b.ok());
  for (const Result<GetResult>& one : *b) {
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_EQ(one->ids, std::vector<uint64_t>{1});
  }
  g = Wait<GetResult>([&](auto cb) { moved->Get("bob", {}, cb); });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  // A write there (no log) is not sent twice, but it was never sent at
  // all: it goes to the next replica too.
  u = Wait<UpsertResult>([&](auto cb) { moved->Upsert("bob", One(), UpsertMode::kSet, cb); });
  ASSERT_TRUE(u.ok()) << u.status().ToString();
}

TEST_F(AsyncClusterClientTest, InALogClusterAWriteIsResentWithItsIdWhenItsOutcomeIsUnknown) {
  // Node 0, first replica of everything, answers each write's first attempt
  // InDoubt, LogUnavailable, or by closing the connection (the answer lost),
  // by the user's name; node 1 answers.
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node == 0 && f.op() != static_cast<uint8_t>(Op::kBatchUpsert)) {
      const std::string user = UserAndId(f).first;
      if (user == "doubt") return c.ReplyError(f, Status::InDoubt("apply timed out"));
      if (user == "refused") return c.ReplyError(f, Status::LogUnavailable("log down"));
      if (user == "lost") return c.Close();
    }
    if (node == 0 && f.op() == static_cast<uint8_t>(Op::kBatchUpsert)) {
      proto::BatchUpsertRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      BatchUpsertResult all;
      for (const UpsertItem& item : req.items) {
        if (item.user.rfind("doubt", 0) == 0) {
          all.emplace_back(Status::InDoubt("apply timed out"));
        } else {
          all.emplace_back(UpsertResult{1, 0, 0, 1});
        }
      }
      return c.Reply(f, all);
    }
    AnswerAsHolder(fc, node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(1, 2, true, [](uint32_t) { return std::vector<uint16_t>{0, 1}; }));
  auto client = ConnectTo(cluster.port(1));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->map().log);

  // "lost" comes last: a node that closed the connection is passed over for
  // a while (below), and the batch wants node 0 first.
  for (const std::string user : {"doubt", "refused"}) {
    Result<UpsertResult> u =
        Wait<UpsertResult>([&](auto cb) { client->Upsert(user, One(), UpsertMode::kSet, cb); });
    ASSERT_TRUE(u.ok()) << user << ": " << u.status().ToString();
    EXPECT_EQ(u->inserted, 2u) << user;  // node 1's answer
  }
  Result<bool> d = Wait<bool>([&](auto cb) { client->Delete("doubt", cb); });
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(client->retries(), 3u);

  // Batch items too: each carries its own ID, and the one in doubt is
  // resent with it while the others are not resent.
  std::vector<UpsertItem> items;
  for (const char* u : {"a", "doubt-1", "b", "doubt-2", "c"}) {
    items.push_back(UpsertItem{u, One(), UpsertMode::kSet, {}});
  }
  items[4].write_id = WriteId{42, 43};  // named by the caller: kept
  Result<BatchUpsertResult> w =
      Wait<BatchUpsertResult>([&](auto cb) { client->BatchUpsert(items, cb); });
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (size_t i = 0; i < items.size(); ++i) {
    ASSERT_TRUE((*w)[i].ok()) << items[i].user << ": " << (*w)[i].status().ToString();
    EXPECT_EQ((*w)[i]->inserted, items[i].user.rfind("doubt", 0) == 0 ? 2u : 1u) << items[i].user;
  }
  std::vector<Frame> first = cluster.Received(0, Op::kBatchUpsert);
  std::vector<Frame> second = cluster.Received(1, Op::kBatchUpsert);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  proto::BatchUpsertRequest r0, r1;
  ASSERT_TRUE(proto::Decode(first[0].body, kLimits, &r0).ok());
  ASSERT_TRUE(proto::Decode(second[0].body, kLimits, &r1).ok());
  ASSERT_EQ(r0.items.size(), 5u);
  ASSERT_EQ(r1.items.size(), 2u);
  EXPECT_EQ(r1.items[0].user, "doubt-1");
  EXPECT_EQ(r1.items[0].write_id, r0.items[1].write_id);
  EXPECT_EQ(r1.items[1].write_id, r0.items[3].write_id);
  EXPECT_EQ(r0.items[4].write_id, (WriteId{42, 43}));
  EXPECT_NE(r0.items[0].write_id, r0.items[1].write_id);

  Result<UpsertResult> lost =
      Wait<UpsertResult>([&](auto cb) { client->Upsert("lost", One(), UpsertMode::kSet, cb); });
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  EXPECT_EQ(lost->inserted, 2u);
  // Each write: one ID, on both nodes; every write its own.
  std::set<std::pair<uint64_t, uint64_t>> ids;
  std::map<std::string, std::vector<WriteId>> sent;
  for (int n = 0; n < 2; ++n) {
    for (Op op : {Op::kUpsert, Op::kDelete}) {
      for (const Frame& f : cluster.Received(n, op)) {
        auto [user, id] = UserAndId(f);
        EXPECT_FALSE(id.empty()) << user;
        sent[std::string(1, static_cast<char>(op)) + user].push_back(id);
      }
    }
  }
  for (const auto& [key, list] : sent) {
    ASSERT_EQ(list.size(), 2u) << key.substr(1);
    EXPECT_EQ(list[0], list[1]) << key.substr(1);
    ids.insert({list[0].hi, list[0].lo});
  }
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(client->retries(), 6u);  // 3, the batch's 2, and "lost"
}

TEST_F(AsyncClusterClientTest, ExpireGoesToTheHolderAndIsResentWithItsIdWhenInDoubt) {
  // Node 0, first replica of everything, answers an expire of "doubt" InDoubt.
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node == 0 && f.op() == static_cast<uint8_t>(Op::kExpire) && UserAndId(f).first == "doubt") {
      return c.ReplyError(f, Status::InDoubt("apply timed out"));
    }
    AnswerAsHolder(fc, node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(1, 2, true, [](uint32_t) { return std::vector<uint16_t>{0, 1}; }));
  auto client = ConnectTo(cluster.port(1));
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> ids = {5, 3, 5};
  const ExpireSpec gt{3600, true, ExpireCondition::kGt};
  Result<ExpireResult> r =
      Wait<ExpireResult>([&](auto cb) { client->Expire("alice", ids, gt, cb); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->count, 0u);  // node 0's answer
  EXPECT_EQ(r->results, std::vector<ExpireOutcome>(3, ExpireOutcome::kSet));
  r = Wait<ExpireResult>([&](auto cb) { client->Expire("doubt", ids, gt, cb); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->count, 1u);  // node 1's
  EXPECT_EQ(client->retries(), 1u);
  // The request as sent, and the one write ID on both nodes.
  const std::vector<Frame> first = cluster.Received(0, Op::kExpire);
  const std::vector<Frame> second = cluster.Received(1, Op::kExpire);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 1u);
  proto::ExpireRequest a, b;
  ASSERT_TRUE(proto::Decode(first[1].body, kLimits, &a).ok());
  ASSERT_TRUE(proto::Decode(second[0].body, kLimits, &b).ok());
  EXPECT_EQ(a.user, "doubt");
  EXPECT_EQ(a.ids, ids);
  EXPECT_EQ(a.value, 3600u);
  EXPECT_TRUE(a.ttl);
  EXPECT_EQ(a.condition, ExpireCondition::kGt);
  EXPECT_FALSE(a.write_id.empty());
  EXPECT_EQ(b.write_id, a.write_id);
  EXPECT_NE(UserAndId(first[0]).second, a.write_id);  // every write its own
}

TEST_F(AsyncClusterClientTest, ANodeThatCannotBeReachedIsPassedOverUntilItsMarkEnds) {
  // Node 0, first replica of everything, closes every connection while
  // `down` is set; node 1 answers.
  std::atomic<bool> down{true};
  FakeCluster cluster(2, [&down](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node == 0 && down && f.op() != static_cast<uint8_t>(Op::kClusterMap)) return c.Close();
    AnswerAsHolder(fc, node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(1, 2, true, [](uint32_t) { return std::vector<uint16_t>{0, 1}; }));
  // Marks of 3 s: the reads below are done long before, however slow the
  // machine (they only ask node 1, on loopback).
  auto client = ConnectTo(cluster.port(1), 1, 4, /*pause=*/20ms, /*down_mark=*/3000ms);
  ASSERT_NE(client, nullptr);
  const size_t maps = cluster.Received(1, Op::kClusterMap).size();
  // The first read finds node 0 gone and goes to node 1 at once; the next
  // ones go to node 1 first, and a batch too.
  for (int i = 0; i < 5; ++i) {
    Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
    EXPECT_TRUE(g.ok()) << g.status().ToString();
  }
  std::vector<std::string> users = {"a", "b", "c"};
  Result<BatchGetResult> b =
      Wait<BatchGetResult>([&](auto cb) { client->BatchGet(users, {}, cb); });
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // Straight to the next replica: no map fetched again (nor a pause).
  EXPECT_EQ(cluster.Received(1, Op::kClusterMap).size(), maps);
  EXPECT_TRUE(cluster.Received(0, Op::kClusterMap).empty());
  EXPECT_EQ(cluster.Received(0, Op::kGet).size(), 1u);
  EXPECT_EQ(cluster.Received(1, Op::kGet).size(), 5u);
  EXPECT_TRUE(cluster.Received(0, Op::kBatchGet).empty());
  EXPECT_EQ(client->retries(), 1u);
  // Back, and its mark over (the client routes "alice" to it again, asking
  // nothing): the next read tries it, and it is the first replica once more.
  down = false;
  ASSERT_TRUE(RunUntil(io_, [&] { return client->NodeOf("alice") == cluster.address(0); }));
  for (int i = 0; i < 2; ++i) {
    Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
    EXPECT_TRUE(g.ok()) << g.status().ToString();
  }
  EXPECT_EQ(cluster.Received(0, Op::kGet).size(), 3u);
  EXPECT_EQ(cluster.Received(1, Op::kGet).size(), 5u);
}

TEST_F(AsyncClusterClientTest, WithoutALogALostWriteIsNeverResentButAReadIs) {
  // Node 0 (first replica) drops the connection on every request.
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node == 0) return c.Close();
    AnswerAsHolder(fc, node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(1, 2, false, [](uint32_t) {
    return std::vector<uint16_t>{0, 1};
  }));
  auto client = ConnectTo(cluster.port(1));
  ASSERT_NE(client, nullptr);
  Result<UpsertResult> u =
      Wait<UpsertResult>([&](auto cb) { client->Upsert("alice", One(), UpsertMode::kSet, cb); });
  EXPECT_EQ(u.status().code(), Status::Code::kUnavailable) << u.status().ToString();
  EXPECT_TRUE(cluster.Received(1, Op::kUpsert).empty());
  for (const Frame& f : cluster.Received(0, Op::kUpsert)) EXPECT_TRUE(UserAndId(f).second.empty());
  // A fresh client: the first passes over node 0 for a while now.
  auto second = ConnectTo(cluster.port(1));
  ASSERT_NE(second, nullptr);
  std::vector<UpsertItem> items = {UpsertItem{"a", One(), UpsertMode::kSet, {}}};
  Result<BatchUpsertResult> w =
      Wait<BatchUpsertResult>([&](auto cb) { second->BatchUpsert(items, cb); });
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)[0].status().code(), Status::Code::kUnavailable);
  EXPECT_TRUE(cluster.Received(1, Op::kBatchUpsert).empty());

  Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->ids, std::vector<uint64_t>{1});
}

TEST_F(AsyncClusterClientTest, OutOfAttemptsAWriteOfUnknownOutcomeIsInDoubt) {
  FakeCluster cluster(2, [](FakeCluster&, int, FakeConn& c, const Frame& f) {
    c.ReplyError(f, Status::InDoubt("apply timed out"));
  });
  cluster.SetMap(cluster.SpreadMap(1, 2, true));
  auto client = ConnectTo(cluster.port(0), 1, 4, 5ms);
  ASSERT_NE(client, nullptr);
  Result<UpsertResult> u =
      Wait<UpsertResult>([&](auto cb) { client->Upsert("alice", One(), UpsertMode::kSet, cb); });
  EXPECT_EQ(u.status().code(), Status::Code::kInDoubt);
  EXPECT_NE(u.status().message().find("unknown after 4 attempts"), std::string_view::npos)
      << u.status().ToString();
  std::vector<WriteId> ids;
  for (int n = 0; n < 2; ++n) {
    for (const Frame& f : cluster.Received(n, Op::kUpsert)) ids.push_back(UserAndId(f).second);
  }
  ASSERT_EQ(ids.size(), 4u);  // two on each replica, in turn
  for (const WriteId& id : ids) EXPECT_EQ(id, ids[0]);
  EXPECT_EQ(client->retries(), 3u);
}

TEST_F(AsyncClusterClientTest, AStaleGetAsksTheOtherReplicasAndBatchesReturnWhatCame) {
  // A node's answer marked stale: ids {node}.
  const auto stale = [](int node, FakeConn& c, const Frame& f) {
    GetResult r;
    r.ids = {static_cast<uint64_t>(node)};
    r.count = 1;
    std::string out;
    if (f.op() == static_cast<uint8_t>(Op::kGet)) {
      (void)proto::AppendFrame(&out, f.op(), f.id(), 0, UINT32_MAX,
                               [&](std::string* o) { proto::Encode(r, o); });
    } else {
      BatchGetResult all;
      all.emplace_back(r);
      (void)proto::AppendFrame(&out, f.op(), f.id(), 0, UINT32_MAX,
                               [&](std::string* o) { proto::Encode(all, o); });
    }
    out[5] = static_cast<char>(proto::kFlagStale);
    c.Write(out);
  };
  // Node 0 (first replica) answers from a copy marked stale, node 1 not.
  FakeCluster cluster(2, [stale](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node == 1) return AnswerAsHolder(fc, node, c, f);
    stale(node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(1, 2, true, [](uint32_t) { return std::vector<uint16_t>{0, 1}; }));
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->ids, std::vector<uint64_t>{1});
  EXPECT_FALSE(g->stale);
  EXPECT_EQ(client->stale_reads(), 1u);
  const std::vector<std::string> one = {"alice"};
  Result<BatchGetResult> b = Wait<BatchGetResult>([&](auto cb) { client->BatchGet(one, {}, cb); });
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)[0].ok());
  EXPECT_TRUE((*b)[0]->stale);  // a batch returns what its node answered
  EXPECT_EQ((*b)[0]->ids, std::vector<uint64_t>{0});

  // Every replica stale.
  cluster.SetScript(
      [stale](FakeCluster&, int node, FakeConn& c, const Frame& f) { stale(node, c, f); });
  g = Wait<GetResult>([&](auto cb) { client->Get("alice", {}, cb); });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->stale);  // every replica's is: the first one
  EXPECT_EQ(g->ids, std::vector<uint64_t>{0});
  EXPECT_EQ(client->stale_reads(), 2u);
}

TEST_F(AsyncClusterClientTest, CloseAndTheDestructorFailEverythingInFlightFromInside) {
  // Node 0 never answers a get; node 1 is Busy (so requests pause).
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (f.op() == static_cast<uint8_t>(Op::kGet)) {
      if (node == 1) c.ReplyError(f, Status::Busy("busy"));
      return;
    }
    AnswerAsHolder(fc, node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(
      1, 1, false, [](uint32_t p) { return std::vector<uint16_t>{static_cast<uint16_t>(p % 2)}; }));
  auto client = ConnectTo(cluster.port(0), 1, 4, /*pause=*/10s);
  ASSERT_NE(client, nullptr);
  const std::vector<std::string> users = Users(20);
  int failed = 0;
  for (const std::string& u : users) {
    client->Get(u, {}, [&](Result<GetResult> r) {
      EXPECT_EQ(r.status().code(), Status::Code::kUnavailable) << r.status().ToString();
      ++failed;
    });
  }
  // Until node 1's users are pausing (Busy) and node 0's are sent.
  ASSERT_TRUE(RunUntil(io_, [&] { return client->retries() > 0; }));
  EXPECT_EQ(failed, 0);
  client->Close();
  EXPECT_EQ(failed, 20);
  EXPECT_EQ(client->in_flight(), 0u);
  // Later calls fail, never inside the call.
  Result<GetResult> late = Wait<GetResult>([&](auto cb) { client->Get("x", {}, cb); });
  EXPECT_EQ(late.status().code(), Status::Code::kUnavailable);

  // The destructor does the same; a callback may destroy the client.
  auto other = ConnectTo(cluster.port(0), 1, 4, 10s);
  ASSERT_NE(other, nullptr);
  failed = 0;
  for (const std::string& u : users) {
    other->Get(u, {}, [&](Result<GetResult> r) {
      EXPECT_FALSE(r.ok());
      ++failed;
    });
  }
  std::string held = users[0];
  for (const std::string& u : users) {
    if (cluster.ReplicasOf(u)[0] == 0) held = u;
  }
  other.reset();
  EXPECT_EQ(failed, 20);
  auto third = ConnectTo(cluster.port(0));
  ASSERT_NE(third, nullptr);
  bool ran = false;
  std::vector<UpsertItem> items = {UpsertItem{held, One(), UpsertMode::kSet, {}}};
  third->BatchUpsert(items, [&](Result<BatchUpsertResult> r) {
    EXPECT_TRUE(r.ok());
    third.reset();
    ran = true;
  });
  ASSERT_TRUE(RunUntil(io_, [&] { return ran; }));
}

TEST_F(AsyncClusterClientTest, ConnectFailsWithTheSeedsError) {
  AsyncClusterClientOptions o;
  o.node.port = ClosedPort();
  o.node.connect_timeout = 2s;
  std::optional<Result<std::unique_ptr<AsyncClusterClient>>> r;
  AsyncClusterClient::Connect(
      io_, o, [&](Result<std::unique_ptr<AsyncClusterClient>> res) { r.emplace(std::move(res)); });
  EXPECT_FALSE(r.has_value());
  ASSERT_TRUE(RunUntil(io_, [&] { return r.has_value(); }));
  EXPECT_EQ(r->status().code(), Status::Code::kUnavailable) << r->status().ToString();
  EXPECT_NE(r->status().message().find("127.0.0.1:" + std::to_string(o.node.port)),
            std::string_view::npos)
      << r->status().ToString();
}

// ---- profile fields ----

// One of each field write, as the tests below send them.
struct FieldWrites {
  std::vector<FieldUpdate> set = {{"country", FieldValue::String("FR"), 0, false},
                                  {"seen", FieldValue::Time(1'800'000'000), 3600, true}};
  std::vector<std::string> names = {"country", "cap:77"};
  FieldIncrement inc{"cap:77", 10, 86400, FieldIncrement::Window::kSliding, 100};
  FieldUpdate max{"score", FieldValue::Double(0.5), 1'900'000'000, false};
};

constexpr Op kFieldOps[] = {Op::kFieldSet, Op::kFieldDelete, Op::kFieldIncrement, Op::kFieldMax};

TEST_F(AsyncClusterClientTest, FieldWritesGoToTheHolderOfTheirUserEachWithItsOwnWriteId) {
  FakeCluster cluster(3, AnswerAsHolder);
  cluster.SetMap(cluster.SpreadMap(5, 1, /*log=*/true));
  auto client = ConnectTo(cluster.port(1));
  ASSERT_NE(client, nullptr);
  const FieldWrites w;
  const std::vector<std::string> users = Users(12);
  for (const std::string& user : users) {
    const uint32_t holder = cluster.ReplicasOf(user)[0];
    Result<FieldWriteResult> s =
        Wait<FieldWriteResult>([&](auto cb) { client->FieldSet(user, w.set, cb); });
    ASSERT_TRUE(s.ok()) << user << ": " << s.status().ToString();
    EXPECT_EQ(s->changed, 2u);
    EXPECT_EQ(s->count, holder + 1) << user;
    Result<FieldWriteResult> d =
        Wait<FieldWriteResult>([&](auto cb) { client->FieldDelete(user, w.names, cb); });
    ASSERT_TRUE(d.ok()) << user << ": " << d.status().ToString();
    EXPECT_EQ(d->count, holder + 1) << user;
    Result<IncrementResult> i =
        Wait<IncrementResult>([&](auto cb) { client->FieldIncrement(user, w.inc, cb); });
    ASSERT_TRUE(i.ok()) << user << ": " << i.status().ToString();
    EXPECT_EQ(i->value, holder + 10) << user;
    EXPECT_FALSE(i->capped);
    Result<FieldMaxResult> m =
        Wait<FieldMaxResult>([&](auto cb) { client->FieldMax(user, w.max, cb); });
    ASSERT_TRUE(m.ok()) << user << ": " << m.status().ToString();
    EXPECT_EQ(m->value, FieldValue::Int(holder)) << user;
    EXPECT_TRUE(m->replaced);
  }
  EXPECT_EQ(client->retries(), 0u);
  EXPECT_EQ(client->in_flight(), 0u);
  // Each write went to its user's node alone, with a write ID of its own.
  std::set<std::pair<uint64_t, uint64_t>> ids;
  size_t frames = 0;
  for (int n = 0; n < 3; ++n) {
    for (Op op : kFieldOps) {
      for (const Frame& f : cluster.Received(n, op)) {
        auto [user, id] = UserAndId(f);
        EXPECT_EQ(cluster.ReplicasOf(user)[0], n) << user;
        EXPECT_FALSE(id.empty()) << user;
        ids.insert({id.hi, id.lo});
        ++frames;
      }
    }
  }
  EXPECT_EQ(frames, 4 * users.size());
  EXPECT_EQ(ids.size(), 4 * users.size());
  // The requests as sent: the first user's, on its node.
  const int first = cluster.ReplicasOf(users[0])[0];
  proto::FieldSetRequest sr;
  ASSERT_TRUE(proto::Decode(cluster.Received(first, Op::kFieldSet)[0].body, kLimits, &sr).ok());
  EXPECT_EQ(sr.user, users[0]);
  ASSERT_EQ(sr.fields.size(), 2u);
  for (size_t k = 0; k < w.set.size(); ++k) {
    EXPECT_EQ(sr.fields[k].name, w.set[k].name);
    EXPECT_EQ(sr.fields[k].value, w.set[k].value);
    EXPECT_EQ(sr.fields[k].expiry, w.set[k].expiry);
    EXPECT_EQ(sr.fields[k].ttl, w.set[k].ttl);
  }
  proto::FieldDeleteRequest dr;
  ASSERT_TRUE(proto::Decode(cluster.Received(first, Op::kFieldDelete)[0].body, kLimits, &dr).ok());
  EXPECT_EQ(dr.names, w.names);
  proto::FieldIncrementRequest ir;
  ASSERT_TRUE(
      proto::Decode(cluster.Received(first, Op::kFieldIncrement)[0].body, kLimits, &ir).ok());
  EXPECT_EQ(ir.increment.name, "cap:77");
  EXPECT_EQ(ir.increment.delta, 10);
  EXPECT_EQ(ir.increment.ttl, 86400u);
  EXPECT_EQ(ir.increment.window, FieldIncrement::Window::kSliding);
  EXPECT_EQ(ir.increment.cap, std::optional<int64_t>(100));
  proto::FieldMaxRequest mr;
  ASSERT_TRUE(proto::Decode(cluster.Received(first, Op::kFieldMax)[0].body, kLimits, &mr).ok());
  EXPECT_EQ(mr.field.name, "score");
  EXPECT_EQ(mr.field.value, FieldValue::Double(0.5));
  EXPECT_EQ(mr.field.expiry, 1'900'000'000u);
}

// A caller's write ID (a node sending a linked user's write on to the
// master's node) goes as it is with a log; without one nothing names a
// write, so it is dropped (a lost answer's write would be applied twice).
TEST_F(AsyncClusterClientTest, AFieldWritesGivenWriteIdGoesOnlyWithALog) {
  for (bool log : {true, false}) {
    SCOPED_TRACE(log ? "with a log" : "without a log");
    FakeCluster cluster(3, AnswerAsHolder);
    cluster.SetMap(cluster.SpreadMap(5, 1, log));
    auto client = ConnectTo(cluster.port(0));
    ASSERT_NE(client, nullptr);
    const FieldWrites w;
    const std::string user = Users(1)[0];
    const WriteId given{0xabc, 42};
    ASSERT_TRUE(
        Wait<IncrementResult>([&](auto cb) { client->FieldIncrement(user, w.inc, given, cb); })
            .ok());
    const int holder = cluster.ReplicasOf(user)[0];
    ASSERT_EQ(cluster.Received(holder, Op::kFieldIncrement).size(), 1u);
    auto [who, id] = UserAndId(cluster.Received(holder, Op::kFieldIncrement)[0]);
    EXPECT_EQ(who, user);
    EXPECT_EQ(id, log ? given : WriteId{});
  }
}

TEST_F(AsyncClusterClientTest, AFieldWriteFollowsWrongNodeWithItsWriteId) {
  // Before each write the client's map puts every user on node 0; then the
  // cluster spreads them, and node 0 says WrongNode for a user it lost.
  FakeCluster cluster(3, AnswerAsHolder);
  const auto all_on_0 = [](uint32_t) { return std::vector<uint16_t>{0}; };
  cluster.SetMap(cluster.MakeMap(1, 1, true, all_on_0));
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  std::string user;  // one that moves away from node 0
  cluster.SetMap(cluster.SpreadMap(2, 1, true));
  for (const std::string& u : Users(50)) {
    if (cluster.ReplicasOf(u)[0] != 0) user = u;
  }
  ASSERT_FALSE(user.empty());
  const int holder = cluster.ReplicasOf(user)[0];
  const FieldWrites w;
  uint64_t revision = 2;
  const auto moving = [&] {
    cluster.SetMap(cluster.MakeMap(++revision, 1, true, all_on_0));
    std::optional<Result<std::monostate>> refreshed;
    client->RefreshMap([&](Result<std::monostate> r) { refreshed.emplace(std::move(r)); });
    EXPECT_TRUE(RunUntil(io_, [&] { return refreshed.has_value(); }));
    EXPECT_EQ(client->NodeOf(user), cluster.address(0));
    cluster.SetMap(cluster.SpreadMap(++revision, 1, true));
  };
  moving();
  Result<FieldWriteResult> s =
      Wait<FieldWriteResult>([&](auto cb) { client->FieldSet(user, w.set, cb); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->count, holder + 1u);
  moving();
  Result<FieldWriteResult> d =
      Wait<FieldWriteResult>([&](auto cb) { client->FieldDelete(user, w.names, cb); });
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->count, holder + 1u);
  moving();
  Result<IncrementResult> i =
      Wait<IncrementResult>([&](auto cb) { client->FieldIncrement(user, w.inc, cb); });
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  EXPECT_EQ(i->value, holder + 10);
  moving();
  Result<FieldMaxResult> m =
      Wait<FieldMaxResult>([&](auto cb) { client->FieldMax(user, w.max, cb); });
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->value, FieldValue::Int(holder));
  EXPECT_EQ(client->retries(), 4u);
  // Each: once to node 0, once to the holder, with one write ID.
  for (Op op : kFieldOps) {
    const std::vector<Frame> wrong = cluster.Received(0, op);
    const std::vector<Frame> right = cluster.Received(holder, op);
    ASSERT_EQ(wrong.size(), 1u) << int{static_cast<uint8_t>(op)};
    ASSERT_EQ(right.size(), 1u) << int{static_cast<uint8_t>(op)};
    EXPECT_FALSE(UserAndId(wrong[0]).second.empty());
    EXPECT_EQ(UserAndId(wrong[0]).second, UserAndId(right[0]).second);
  }
}

TEST_F(AsyncClusterClientTest, AFieldWriteInDoubtIsResentWithItsWriteIdAndARefusalIsNot) {
  // Node 0, first replica of everything, answers "doubt"'s field writes
  // InDoubt, "old"'s Unsupported (what nodes answer while fields are not
  // carried through the log) and "bad"'s InvalidArgument.
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    const auto op = static_cast<Op>(f.op());
    const bool field_write = op == Op::kFieldSet || op == Op::kFieldDelete ||
                             op == Op::kFieldIncrement || op == Op::kFieldMax;
    if (node == 0 && field_write) {
      const std::string user = UserAndId(f).first;
      if (user == "doubt") return c.ReplyError(f, Status::InDoubt("apply timed out"));
      if (user == "old") {
        return c.ReplyError(f, Status::Unsupported("profile fields are not yet replicated"));
      }
      if (user == "bad") return c.ReplyError(f, Status::InvalidArgument("a name twice"));
    }
    AnswerAsHolder(fc, node, c, f);
  });
  cluster.SetMap(cluster.MakeMap(1, 2, true, [](uint32_t) { return std::vector<uint16_t>{0, 1}; }));
  auto client = ConnectTo(cluster.port(1));
  ASSERT_NE(client, nullptr);
  const FieldWrites w;
  Result<FieldWriteResult> s =
      Wait<FieldWriteResult>([&](auto cb) { client->FieldSet("doubt", w.set, cb); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->count, 2u);  // node 1's answer
  Result<FieldWriteResult> d =
      Wait<FieldWriteResult>([&](auto cb) { client->FieldDelete("doubt", w.names, cb); });
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->count, 2u);
  Result<IncrementResult> i =
      Wait<IncrementResult>([&](auto cb) { client->FieldIncrement("doubt", w.inc, cb); });
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  EXPECT_EQ(i->value, 11);
  Result<FieldMaxResult> m =
      Wait<FieldMaxResult>([&](auto cb) { client->FieldMax("doubt", w.max, cb); });
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->value, FieldValue::Int(1));
  EXPECT_EQ(client->retries(), 4u);
  for (Op op : kFieldOps) {
    const std::vector<Frame> first = cluster.Received(0, op);
    const std::vector<Frame> second = cluster.Received(1, op);
    ASSERT_EQ(first.size(), 1u) << int{static_cast<uint8_t>(op)};
    ASSERT_EQ(second.size(), 1u) << int{static_cast<uint8_t>(op)};
    EXPECT_FALSE(UserAndId(first[0]).second.empty());
    EXPECT_EQ(UserAndId(first[0]).second, UserAndId(second[0]).second);
  }

  // A node's refusal is the answer: never resent.
  for (const std::string user : {"old", "bad"}) {
    const Status::Code code =
        user == "old" ? Status::Code::kUnsupported : Status::Code::kInvalidArgument;
    EXPECT_EQ(
        Wait<FieldWriteResult>([&](auto cb) { client->FieldSet(user, w.set, cb); }).status().code(),
        code);
    EXPECT_EQ(Wait<FieldWriteResult>([&](auto cb) { client->FieldDelete(user, w.names, cb); })
                  .status()
                  .code(),
              code);
    EXPECT_EQ(Wait<IncrementResult>([&](auto cb) { client->FieldIncrement(user, w.inc, cb); })
                  .status()
                  .code(),
              code);
    EXPECT_EQ(
        Wait<FieldMaxResult>([&](auto cb) { client->FieldMax(user, w.max, cb); }).status().code(),
        code);
  }
  EXPECT_EQ(client->retries(), 4u);
  for (Op op : kFieldOps) {
    EXPECT_EQ(cluster.Received(0, op).size(), 3u);  // doubt, old, bad
    EXPECT_EQ(cluster.Received(1, op).size(), 1u);  // doubt again
  }
}

TEST_F(AsyncClusterClientTest, FieldWritesOverTheNodesFrameLimitAreRefusedAndSentNowhere) {
  // FakeInfo's max_frame_bytes is 1 MiB: each of these bodies is over it.
  FakeCluster cluster(2, AnswerAsHolder);
  cluster.SetMap(cluster.SpreadMap(1, 2, true));
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  const std::string big(2 << 20, 'x');
  const std::vector<FieldUpdate> set = {{"consent", FieldValue::Bytes(big), 0, false}};
  const std::vector<std::string> names = {big};
  FieldIncrement inc;
  inc.name = big;
  const FieldUpdate max{big, FieldValue::Int(1), 0, false};
  for (const std::string& user : Users(4)) {
    Result<FieldWriteResult> s =
        Wait<FieldWriteResult>([&](auto cb) { client->FieldSet(user, set, cb); });
    EXPECT_EQ(s.status().code(), Status::Code::kLimitExceeded) << s.status().ToString();
    Result<FieldWriteResult> d =
        Wait<FieldWriteResult>([&](auto cb) { client->FieldDelete(user, names, cb); });
    EXPECT_EQ(d.status().code(), Status::Code::kLimitExceeded) << d.status().ToString();
    Result<IncrementResult> i =
        Wait<IncrementResult>([&](auto cb) { client->FieldIncrement(user, inc, cb); });
    EXPECT_EQ(i.status().code(), Status::Code::kLimitExceeded) << i.status().ToString();
    Result<FieldMaxResult> m =
        Wait<FieldMaxResult>([&](auto cb) { client->FieldMax(user, max, cb); });
    EXPECT_EQ(m.status().code(), Status::Code::kLimitExceeded) << m.status().ToString();
  }
  for (int n = 0; n < 2; ++n) {
    for (Op op : kFieldOps) EXPECT_TRUE(cluster.Received(n, op).empty());
  }
  EXPECT_EQ(client->retries(), 0u);
  // The nodes still answer what fits.
  Result<FieldWriteResult> s =
      Wait<FieldWriteResult>([&](auto cb) { client->FieldSet("alice", FieldWrites().set, cb); });
  EXPECT_TRUE(s.ok()) << s.status().ToString();
}

TEST_F(AsyncClusterClientTest, OnASingleServerFieldWritesGoToItWithoutWriteIds) {
  FakeCluster cluster(1, AnswerAsHolder);
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  ASSERT_FALSE(client->map().cluster);
  const FieldWrites w;
  EXPECT_EQ(Wait<FieldWriteResult>([&](auto cb) { client->FieldSet("alice", w.set, cb); })->count,
            1u);
  EXPECT_EQ(
      Wait<FieldWriteResult>([&](auto cb) { client->FieldDelete("alice", w.names, cb); })->changed,
      2u);
  EXPECT_EQ(
      Wait<IncrementResult>([&](auto cb) { client->FieldIncrement("alice", w.inc, cb); })->value,
      10);
  EXPECT_TRUE(
      Wait<FieldMaxResult>([&](auto cb) { client->FieldMax("alice", w.max, cb); })->replaced);
  for (Op op : kFieldOps) {
    const std::vector<Frame> sent = cluster.Received(0, op);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_TRUE(UserAndId(sent[0]).second.empty());
  }
  EXPECT_EQ(client->in_flight(), 0u);
}

TEST_F(AsyncClusterClientTest, GetsCarryTheirFieldOptionsToEveryNodeAsked) {
  // Node 0 (first replica) answers gets marked stale, so a get asks node 1
  // too; batches return what node 0 answered.
  FakeCluster cluster(2, [](FakeCluster& fc, int node, FakeConn& c, const Frame& f) {
    if (node != 0 || f.op() != static_cast<uint8_t>(Op::kGet)) {
      return AnswerAsHolder(fc, node, c, f);
    }
    proto::GetRequest req;
    ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
    GetResult r;
    r.ids = {0};
    r.count = 1;
    r = testing::WithFields(r, req.options, node);
    std::string out;
    (void)proto::AppendFrame(&out, f.op(), f.id(), 0, UINT32_MAX,
                             [&](std::string* o) { proto::Encode(r, o); });
    out[5] = static_cast<char>(proto::kFlagStale);
    c.Write(out);
  });
  cluster.SetMap(cluster.MakeMap(1, 2, true, [](uint32_t) { return std::vector<uint16_t>{0, 1}; }));
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  GetOptions by_name;
  by_name.fields.mode = FieldSelection::Mode::kNames;
  by_name.fields.names = {"cap:77", "country"};
  Result<GetResult> g = Wait<GetResult>([&](auto cb) { client->Get("alice", by_name, cb); });
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->stale);
  EXPECT_TRUE(g->fields_asked);
  EXPECT_EQ(g->fields, (std::vector<Field>{{"node", FieldValue::Int(1), kNever}}));
  for (int n = 0; n < 2; ++n) {
    const std::vector<Frame> sent = cluster.Received(n, Op::kGet);
    ASSERT_EQ(sent.size(), 1u) << n;
    proto::GetRequest req;
    ASSERT_TRUE(proto::Decode(sent[0].body, kLimits, &req).ok());
    EXPECT_EQ(req.options.fields, by_name.fields) << n;
  }

  GetOptions by_prefix;
  by_prefix.fields = FieldSelection{FieldSelection::Mode::kPrefix, {}, "cap:"};
  const std::vector<std::string> users = Users(5);
  Result<BatchGetResult> b =
      Wait<BatchGetResult>([&](auto cb) { client->BatchGet(users, by_prefix, cb); });
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->size(), users.size());
  for (const Result<GetResult>& one : *b) {
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_TRUE(one->fields_asked);
    EXPECT_EQ(one->fields, (std::vector<Field>{{"node", FieldValue::Int(0), kNever}}));
  }
  const std::vector<Frame> batches = cluster.Received(0, Op::kBatchGet);
  ASSERT_EQ(batches.size(), 1u);
  proto::BatchGetRequest req;
  ASSERT_TRUE(proto::Decode(batches[0].body, kLimits, &req).ok());
  EXPECT_EQ(req.options.fields, by_prefix.fields);
}

}  // namespace
}  // namespace segstore::client
