// ClusterClient (the synchronous routing client) against scripted fake
// nodes (fake_cluster.h), for the profile field writes and gets asking for
// fields: routed to the user's node, WrongNode followed and InDoubt resent
// with the write's one ID, a node's refusal returned as it is, a body over
// the frame limit sent nowhere. Its other routing rules are shared with
// AsyncClusterClient (src/client/routing_rules.h, async_cluster_client_test.cc)
// and run against real nodes in tests/cluster/.
#include "segstore/cluster_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "client/fake_cluster.h"
#include "client/fake_server.h"
#include "proto/wire.h"

namespace segstore::client {
namespace {

using namespace std::chrono_literals;
using proto::Op;
using testing::AnswerAsHolder;
using testing::FakeCluster;
using testing::FakeConn;
using testing::Frame;
using testing::kLimits;
using testing::UserAndId;
using testing::Users;

constexpr Op kFieldOps[] = {Op::kFieldSet, Op::kFieldDelete, Op::kFieldIncrement, Op::kFieldMax};

// One of each field write, as the tests send them.
struct FieldWrites {
  std::vector<FieldUpdate> set = {{"country", FieldValue::String("FR"), 0, false},
                                  {"seen", FieldValue::Time(1'800'000'000), 3600, true}};
  std::vector<std::string> names = {"country", "cap:77"};
  FieldIncrement inc{"cap:77", 10, 86400, FieldIncrement::Window::kFixed, 100};
  FieldUpdate max{"score", FieldValue::Double(0.5), 0, false};
};

// The codes of the four writes of `w` on `user`, in kFieldOps' order.
std::vector<Status::Code> WriteAll(ClusterClient& c, const std::string& user,
                                   const FieldWrites& w) {
  return {c.FieldSet(user, w.set).status().code(), c.FieldDelete(user, w.names).status().code(),
          c.FieldIncrement(user, w.inc).status().code(), c.FieldMax(user, w.max).status().code()};
}

std::unique_ptr<ClusterClient> ConnectTo(uint16_t port) {
  ClusterClientOptions o;
  o.node.port = port;
  o.node.connect_timeout = 5s;
  o.node.request_timeout = 5s;
  o.retry_pause = 5ms;
  Result<std::unique_ptr<ClusterClient>> c = ClusterClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(ClusterClientFieldsTest, FieldWritesGoToTheHolderOfTheirUserEachWithItsOwnWriteId) {
  FakeCluster cluster(3, AnswerAsHolder);
  cluster.SetMap(cluster.SpreadMap(5, 1, /*log=*/true));
  auto client = ConnectTo(cluster.port(2));
  ASSERT_NE(client, nullptr);
  const FieldWrites w;
  const std::vector<std::string> users = Users(12);
  for (const std::string& user : users) {
    const uint32_t holder = cluster.ReplicasOf(user)[0];
    Result<FieldWriteResult> s = client->FieldSet(user, w.set);
    ASSERT_TRUE(s.ok()) << user << ": " << s.status().ToString();
    EXPECT_EQ(s->changed, 2u);
    EXPECT_EQ(s->count, holder + 1) << user;
    Result<FieldWriteResult> d = client->FieldDelete(user, w.names);
    ASSERT_TRUE(d.ok()) << user << ": " << d.status().ToString();
    EXPECT_EQ(d->count, holder + 1) << user;
    Result<IncrementResult> i = client->FieldIncrement(user, w.inc);
    ASSERT_TRUE(i.ok()) << user << ": " << i.status().ToString();
    EXPECT_EQ(i->value, holder + 10) << user;
    Result<FieldMaxResult> m = client->FieldMax(user, w.max);
    ASSERT_TRUE(m.ok()) << user << ": " << m.status().ToString();
    EXPECT_EQ(m->value, FieldValue::Int(holder)) << user;
  }
  EXPECT_EQ(client->retries(), 0u);
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
  // The increment as sent (the others are the single-server Client's
  // encoding, tested in client_test.cc).
  proto::FieldIncrementRequest ir;
  const int first = cluster.ReplicasOf(users[0])[0];
  ASSERT_TRUE(
      proto::Decode(cluster.Received(first, Op::kFieldIncrement)[0].body, kLimits, &ir).ok());
  EXPECT_EQ(ir.user, users[0]);
  EXPECT_EQ(ir.increment.delta, 10);
  EXPECT_EQ(ir.increment.ttl, 86400u);
  EXPECT_EQ(ir.increment.cap, std::optional<int64_t>(100));
}

TEST(ClusterClientFieldsTest, AFieldWriteFollowsWrongNodeWithItsWriteId) {
  // Before each write the client's map puts every user on node 0; then the
  // cluster spreads them, and node 0 says WrongNode for a user it lost.
  FakeCluster cluster(3, AnswerAsHolder);
  const auto all_on_0 = [](uint32_t) { return std::vector<uint16_t>{0}; };
  cluster.SetMap(cluster.MakeMap(1, 1, true, all_on_0));
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  cluster.SetMap(cluster.SpreadMap(2, 1, true));
  std::string user;  // one that moves away from node 0
  for (const std::string& u : Users(50)) {
    if (cluster.ReplicasOf(u)[0] != 0) user = u;
  }
  ASSERT_FALSE(user.empty());
  const int holder = cluster.ReplicasOf(user)[0];
  uint64_t revision = 2;
  const auto moving = [&] {
    cluster.SetMap(cluster.MakeMap(++revision, 1, true, all_on_0));
    ASSERT_TRUE(client->RefreshMap().ok());
    ASSERT_EQ(client->NodeOf(user), cluster.address(0));
    cluster.SetMap(cluster.SpreadMap(++revision, 1, true));
  };
  const FieldWrites w;
  moving();
  Result<FieldWriteResult> s = client->FieldSet(user, w.set);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->count, holder + 1u);
  moving();
  Result<FieldWriteResult> d = client->FieldDelete(user, w.names);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->count, holder + 1u);
  moving();
  Result<IncrementResult> i = client->FieldIncrement(user, w.inc);
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  EXPECT_EQ(i->value, holder + 10);
  moving();
  Result<FieldMaxResult> m = client->FieldMax(user, w.max);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->value, FieldValue::Int(holder));
  EXPECT_EQ(client->retries(), 4u);
  for (Op op : kFieldOps) {
    const std::vector<Frame> wrong = cluster.Received(0, op);
    const std::vector<Frame> right = cluster.Received(holder, op);
    ASSERT_EQ(wrong.size(), 1u) << int{static_cast<uint8_t>(op)};
    ASSERT_EQ(right.size(), 1u) << int{static_cast<uint8_t>(op)};
    EXPECT_FALSE(UserAndId(wrong[0]).second.empty());
    EXPECT_EQ(UserAndId(wrong[0]).second, UserAndId(right[0]).second);
  }
}

TEST(ClusterClientFieldsTest, AFieldWriteInDoubtIsResentWithItsWriteIdAndARefusalIsNot) {
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
  Result<IncrementResult> i = client->FieldIncrement("doubt", w.inc);
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  EXPECT_EQ(i->value, 11);  // node 1's answer
  EXPECT_EQ(WriteAll(*client, "doubt", w), std::vector<Status::Code>(4, Status::Code::kOk));
  EXPECT_EQ(client->retries(), 5u);
  for (Op op : kFieldOps) {
    const std::vector<Frame> first = cluster.Received(0, op);
    const std::vector<Frame> second = cluster.Received(1, op);
    ASSERT_EQ(first.size(), second.size()) << int{static_cast<uint8_t>(op)};
    for (size_t k = 0; k < first.size(); ++k) {
      EXPECT_FALSE(UserAndId(first[k]).second.empty());
      EXPECT_EQ(UserAndId(first[k]).second, UserAndId(second[k]).second);
    }
  }

  // A node's refusal is the answer: never resent.
  EXPECT_EQ(WriteAll(*client, "old", w), std::vector<Status::Code>(4, Status::Code::kUnsupported));
  EXPECT_EQ(WriteAll(*client, "bad", w),
            std::vector<Status::Code>(4, Status::Code::kInvalidArgument));
  EXPECT_EQ(client->retries(), 5u);
  for (Op op : kFieldOps) {
    const size_t doubts = op == Op::kFieldIncrement ? 2 : 1;
    EXPECT_EQ(cluster.Received(0, op).size(), doubts + 2);
    EXPECT_EQ(cluster.Received(1, op).size(), doubts);
  }
}

TEST(ClusterClientFieldsTest, FieldWritesOverTheNodesFrameLimitAreRefusedAndSentNowhere) {
  // FakeInfo's max_frame_bytes is 1 MiB: each of these bodies is over it.
  FakeCluster cluster(2, AnswerAsHolder);
  cluster.SetMap(cluster.SpreadMap(1, 2, true));
  auto client = ConnectTo(cluster.port(0));
  ASSERT_NE(client, nullptr);
  const std::string big(2 << 20, 'x');
  FieldWrites w;
  w.set = {{"consent", FieldValue::Bytes(big), 0, false}};
  w.names = {big};
  w.inc.name = big;
  w.max.name = big;
  for (const std::string& user : Users(4)) {
    EXPECT_EQ(WriteAll(*client, user, w),
              std::vector<Status::Code>(4, Status::Code::kLimitExceeded));
  }
  for (int n = 0; n < 2; ++n) {
    for (Op op : kFieldOps) EXPECT_TRUE(cluster.Received(n, op).empty());
  }
  EXPECT_EQ(client->retries(), 0u);
  EXPECT_TRUE(client->FieldSet("alice", FieldWrites().set).ok());
}

TEST(ClusterClientFieldsTest, GetsCarryTheirFieldOptionsToEveryNodeAsked) {
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
  Result<GetResult> g = client->Get("alice", by_name);
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

  GetOptions all;
  all.fields.mode = FieldSelection::Mode::kAll;
  const std::vector<std::string> users = Users(5);
  Result<BatchGetResult> b = client->BatchGet(users, all);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->size(), users.size());
  for (const Result<GetResult>& one : *b) {
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_EQ(one->fields, (std::vector<Field>{{"node", FieldValue::Int(0), kNever}}));
  }
  const std::vector<Frame> batches = cluster.Received(0, Op::kBatchGet);
  ASSERT_EQ(batches.size(), 1u);
  proto::BatchGetRequest req;
  ASSERT_TRUE(proto::Decode(batches[0].body, kLimits, &req).ok());
  EXPECT_EQ(req.options.fields, all.fields);
}

}  // namespace
}  // namespace segstore::client
