// Linked profiles on a cluster (proto/PROTOCOL.md, "Linked profiles"):
// three segstored processes on a real etcd, without a log and with one
// (librdkafka's mock Kafka in a process of its own, replication 2). The
// users of one group live on different nodes: a link is sent to its user's
// node, which writes each step on the node holding that step's record
// (through the log when there is one), and a get by any of them gathers
// the group from the nodes holding its members; every replica answers the
// same; unlink and a master's delete take effect across the nodes. Profile
// fields likewise: a linked user's writes count on its master's node.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/segstored_cluster.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "segstore/routing.h"

namespace segstore::server {
namespace {

using namespace std::chrono_literals;
using testing::SegstoredCluster;

// Three nodes, without a log or (replication 2) with one.
testing::SegstoredClusterOptions Options(bool log) {
  testing::SegstoredClusterOptions o;
  o.nodes = 3;
  o.threads = 1;
  o.etcd_prefix = "/link-test";
  o.ready_timeout = 60s;
  if (log) {
    o.replication = 2;
    o.log = true;
    o.log_partitions = 8;
    o.log_lines = {"append_timeout_ms = 5000", "apply_timeout_ms = 10000", "max_lag_ms = 5000"};
  }
  o.routed.node.request_timeout = 15s;
  o.routed.node.connect_timeout = 10s;
  return o;
}

class ClusterLinkTest : public ::testing::TestWithParam<bool> {
 protected:
  ClusterLinkTest() : cluster_(Options(GetParam())) {}

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.Start());
    ASSERT_NO_FATAL_FAILURE(cluster_.WaitAllServing());
    ASSERT_TRUE(cluster_.AgreedMap(&map_));
    routed_ = cluster_.Routed(0);
    ASSERT_NE(routed_, nullptr);
  }
  void TearDown() override {
    routed_.reset();
    cluster_.StopAll();
  }

  // The first node (index in the map) holding `user`.
  uint16_t FirstReplica(const std::string& user) const {
    return map_.ReplicasOf(PartitionOf(user))[0];
  }
  // A user ID with `prefix` whose first replica is node `node` of the map.
  std::string UserOn(const std::string& prefix, uint16_t node) const {
    for (int i = 0;; ++i) {
      std::string u = prefix + std::to_string(i);
      if (FirstReplica(u) == node) return u;
    }
  }
  // The client of the node that holds `user` first: where a client sends
  // the user's requests.
  client::Client& NodeOf(const std::string& user) {
    Result<client::Client*> c = routed_->NodeClient(routed_->NodeOf(user));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return **c;
  }
  void Put(const std::string& user, uint64_t id) {
    const SegmentUpdate s{id, 86400, true, {}, {}};
    auto r = routed_->Upsert(user, std::span(&s, 1));
    ASSERT_TRUE(r.ok()) << user << ": " << r.status().ToString();
  }
  // What a get by `user` answers through `c`: "ids @master", or "absent".
  static std::string View(client::Client& c, const std::string& user) {
    auto r = c.Get(user);
    if (r.status().IsNotFound()) return "absent";
    EXPECT_TRUE(r.ok()) << user << ": " << r.status().ToString();
    if (!r.ok()) return "error";
    std::string out;
    for (uint64_t id : r->ids) out += (out.empty() ? "" : ",") + std::to_string(id);
    if (!r->master.empty()) out += " @" + r->master;
    return out;
  }
  // The same from every replica of the user's partition, once they agree
  // (a second replica applies the log a moment after the first).
  std::string ViewEverywhere(const std::string& user) {
    std::set<std::string> seen;
    const bool agreed = testing::WaitFor(
        [&] {
          seen.clear();
          for (uint16_t n : map_.ReplicasOf(PartitionOf(user))) {
            Result<client::Client*> c = routed_->NodeClient(map_.nodes[n].address);
            seen.insert(c.ok() ? View(**c, user) : c.status().ToString());
          }
          return seen.size() == 1;
        },
        10s, 10ms);
    EXPECT_TRUE(agreed) << user << ": the replicas disagree: " << *seen.begin() << " | "
                        << *seen.rbegin();
    return View(NodeOf(user), user);
  }
  std::string MasterOf(const std::string& user) {
    auto r = NodeOf(user).MasterOf(user);
    if (r.status().IsNotFound()) return "-";
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : "error";
  }

  SegstoredCluster cluster_;
  ClusterMap map_;
  std::unique_ptr<client::ClusterClient> routed_;
};

TEST_P(ClusterLinkTest, AGroupAcrossTheNodesLinksReadsUnlinksAndDeletes) {
  // A master on node 0, members on nodes 1 and 2, a later master on node 1.
  const std::string home = UserOn("home-", 0);
  const std::string phone = UserOn("phone-", 1);
  const std::string tablet = UserOn("tablet-", 2);
  const std::string login = UserOn("login-", 1);
  Put(home, 1);
  Put(phone, 2);
  Put(tablet, 3);
  Put(login, 4);

  auto linked = NodeOf(phone).Link(phone, home);
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->master, home);
  EXPECT_EQ(linked->members, 1u);
  // Linking to a member links to its master: no chains.
  linked = NodeOf(tablet).Link(tablet, phone, 7776000);
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->master, home);
  EXPECT_EQ(linked->members, 2u);
  for (const std::string& u : {home, phone, tablet}) {
    EXPECT_EQ(MasterOf(u), home) << u;
    EXPECT_EQ(ViewEverywhere(u), "1,2,3 @" + home) << u;
  }
  auto links = NodeOf(tablet).Links(tablet);
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  EXPECT_EQ(links->master, home);
  EXPECT_EQ(links->links.size(), 2u);
  auto connected = NodeOf(phone).Connected(phone, tablet);
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  EXPECT_TRUE(*connected);
  EXPECT_FALSE(*NodeOf(phone).Connected(phone, login));
  // segctl, given any node, sends each to the node holding the user.
  for (int i = 0; i < 3; ++i) {
    auto [rc, out] = testing::Segctl(cluster_.port(i), "master-of " + tablet);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(testing::Has(out, home)) << out;
  }
  // A node that does not hold the user says so: the client asks the right one.
  const auto replicas = map_.ReplicasOf(PartitionOf(phone));
  for (uint16_t n = 0; n < map_.nodes.size(); ++n) {
    if (std::find(replicas.begin(), replicas.end(), n) != replicas.end()) continue;
    auto wrong = (*routed_->NodeClient(map_.nodes[n].address))->MasterOf(phone);
    EXPECT_EQ(wrong.status().code(), Status::Code::kWrongNode) << wrong.status().ToString();
  }

  // The whole group moves under a master on another node.
  linked = NodeOf(home).Link(home, login);
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->master, login);
  EXPECT_EQ(linked->moved, 2u);
  for (const std::string& u : {home, phone, tablet, login}) {
    EXPECT_EQ(ViewEverywhere(u), "1,2,3,4 @" + login) << u;
  }

  // Unlink of one member removes exactly its contribution, at once.
  auto unlinked = NodeOf(phone).Unlink(phone);
  ASSERT_TRUE(unlinked.ok()) << unlinked.status().ToString();
  EXPECT_TRUE(*unlinked);
  EXPECT_EQ(ViewEverywhere(phone), "2");
  EXPECT_EQ(ViewEverywhere(tablet), "1,3,4 @" + login);

  // A master's delete deletes its group, on every node.
  auto deleted = routed_->Delete(login);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  for (const std::string& u : {login, home, tablet}) EXPECT_EQ(ViewEverywhere(u), "absent") << u;
  EXPECT_EQ(ViewEverywhere(phone), "2");
}

TEST_P(ClusterLinkTest, HostileLinksAreRefusedAndWriteNothing) {
  const std::string a = UserOn("a-", 0);
  const std::string b = UserOn("b-", 1);
  Put(a, 1);
  Put(b, 2);
  EXPECT_EQ(NodeOf(a).Link(a, a).status().code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(NodeOf(b).Link(b, a).ok());
  // A cycle attempted: the master linked to its own member stays the master.
  auto cycle = NodeOf(a).Link(a, b);
  ASSERT_TRUE(cycle.ok()) << cycle.status().ToString();
  EXPECT_EQ(cycle->master, a);
  EXPECT_EQ(ViewEverywhere(b), "1,2 @" + a);
}

// Profile fields (proto/PROTOCOL.md, "Profile fields", "Clusters"): each
// write is applied on every replica of its record; a linked user's goes to
// its master's node and counts there; a merged get gathers the master's
// fields from its node by name (each node numbers names its own way: node
// 1 numbers another name first); a retry with the same write ID is applied
// once.
TEST_P(ClusterLinkTest, FieldWritesReachEveryReplicaAndALinkedUsersCountOnItsMaster) {
  const std::string home = UserOn("home-", 0);
  const std::string phone = UserOn("phone-", 1);
  const std::string other = UserOn("other-", 1);
  const std::vector<FieldUpdate> first = {
      FieldUpdate{"country", FieldValue::String("FR"), kNever, false}};
  ASSERT_TRUE(NodeOf(other).FieldSet(other, first).ok());
  Put(phone, 2);
  FieldIncrement inc;
  inc.name = "cap:77";
  inc.ttl = 86400;
  inc.cap = 10;
  // The first increment writes the new name inline and queues its
  // registration (profile/field_names.h); once every replica of home's
  // record numbered it (storage.field_names counts it: 1 name, 2 where
  // "country" was numbered first), the next increments name it by number.
  const auto home_replicas = map_.ReplicasOf(PartitionOf(home));
  const auto other_replicas = map_.ReplicasOf(PartitionOf(other));
  auto names_numbered = [&](uint16_t n) {
    Result<client::Client*> c = routed_->NodeClient(map_.nodes[n].address);
    return c.ok() ? testing::StatOf(**c, "storage.field_names") : -1;
  };
  auto names_wanted = [&](uint16_t n) {
    return std::count(other_replicas.begin(), other_replicas.end(), n) ? 2.0 : 1.0;
  };
  for (int i = 1; i <= 3; ++i) {
    auto r = NodeOf(home).FieldIncrement(home, inc);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->value, i);
    if (i != 1) continue;
    for (uint16_t n : home_replicas) {
      ASSERT_TRUE(testing::WaitFor([&] { return names_numbered(n) >= names_wanted(n); }))
          << "node " << n << " did not number \"" << inc.name << "\" within a minute: "
          << "storage.field_names is " << names_numbered(n) << ", want " << names_wanted(n);
    }
  }
  // What a get asking every field answers from each replica, once they agree.
  auto fields_everywhere = [&](const std::string& user) {
    std::set<std::string> seen;
    testing::WaitFor(
        [&] {
          seen.clear();
          for (uint16_t n : map_.ReplicasOf(PartitionOf(user))) {
            Result<client::Client*> c = routed_->NodeClient(map_.nodes[n].address);
            if (!c.ok()) {
              seen.insert(c.status().ToString());
              continue;
            }
            GetOptions o;
            o.fields.mode = FieldSelection::Mode::kAll;
            auto r = (*c)->Get(user, o);
            std::string out = r.ok() ? "" : r.status().ToString();
            if (r.ok()) {
              for (const Field& f : r->fields) {
                out += f.name + "=" +
                       (f.value.type == FieldValue::Type::kInt ? std::to_string(f.value.i)
                                                               : f.value.s) +
                       ";";
              }
            }
            seen.insert(out);
          }
          return seen.size() == 1;
        },
        10s, 10ms);
    EXPECT_EQ(seen.size(), 1u) << user << ": the replicas disagree: " << *seen.begin() << " | "
                               << *seen.rbegin();
    return *seen.begin();
  };
  EXPECT_EQ(fields_everywhere(home), "cap:77=3;");

  ASSERT_TRUE(NodeOf(phone).Link(phone, home).ok());
  // Through the member, on node 1: the master's counter, on node 0.
  const WriteId id{4242, 1};
  auto r = NodeOf(phone).FieldIncrement(phone, inc, id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->value, 4);
  if (GetParam()) {  // with a log: the retry is the same write, applied once
    auto again = NodeOf(phone).FieldIncrement(phone, inc, id);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_TRUE(again->duplicate);
    EXPECT_EQ(again->value, 4);
  }
  EXPECT_EQ(fields_everywhere(home), "cap:77=4;");
  // The member's get, on node 1, answers the master's fields by name.
  EXPECT_EQ(fields_everywhere(phone), "cap:77=4;");
  EXPECT_EQ(fields_everywhere(other), "country=FR;");
  const std::vector<FieldUpdate> more = {
      FieldUpdate{"device", FieldValue::String("ios"), kNever, false}};
  ASSERT_TRUE(NodeOf(phone).FieldSet(phone, more).ok());
  EXPECT_EQ(fields_everywhere(phone), "cap:77=4;device=ios;");
  // Unlinked, the member's fields are its own again (it had none).
  ASSERT_TRUE(NodeOf(phone).Unlink(phone).ok());
  EXPECT_EQ(fields_everywhere(phone), "");
  EXPECT_EQ(fields_everywhere(home), "cap:77=4;device=ios;");
}

std::string Name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "WithALog" : "WithoutALog";
}

INSTANTIATE_TEST_SUITE_P(Cluster, ClusterLinkTest, ::testing::Bool(), Name);

}  // namespace
}  // namespace segstore::server
