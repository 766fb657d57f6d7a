// A fake segstore cluster for the routing clients' tests (AsyncClusterClient,
// ClusterClient): N FakeServers (fake_server.h) sharing one cluster map that
// names the fake servers themselves. Each node answers hello and
// cluster_map itself and every other request as the test's script says;
// AnswerAsHolder is the script of a well-behaved node.
//
// Threads: scripts run on the nodes' threads, one at a time, under the
// cluster's mutex; the other members may be called from any thread.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/fake_server.h"
#include "proto/wire.h"
#include "segstore/cluster_map.h"
#include "segstore/routing.h"

namespace segstore::client::testing {

using proto::Op;

inline constexpr proto::DecodeLimits kLimits{UINT32_MAX, UINT32_MAX, UINT32_MAX};

inline ServerInfo FakeInfo() {
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

inline std::vector<std::string> Users(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("user-" + std::to_string(i));
  return out;
}

// N fake nodes sharing one map (which the test may change). Each answers
// hello and cluster_map itself, and every other request as `script` says.
// Scripts run on the nodes' threads, one at a time (under the cluster's
// mutex), and may read map_locked().
class FakeCluster {
 public:
  using Script = std::function<void(FakeCluster& cluster, int node, FakeConn& c, const Frame& f)>;

  FakeCluster(int nodes, Script script) : script_(std::move(script)) {
    for (int i = 0; i < nodes; ++i) {
      servers_.push_back(std::make_unique<FakeServer>(
          [this, i](FakeConn& c, const Frame& f) { Handle(i, c, f); }));
    }
  }
  ~FakeCluster() { servers_.clear(); }

  uint16_t port(int i) const { return servers_[i]->port(); }
  std::string address(int i) const { return "127.0.0.1:" + std::to_string(port(i)); }
  FakeServer& server(int i) { return *servers_[i]; }

  // A map of these nodes (node i at address(i), unless `addresses` says),
  // replicas of partition p: place(p) (node indices).
  ClusterMap MakeMap(uint64_t revision, uint32_t replication, bool log,
                     const std::function<std::vector<uint16_t>(uint32_t)>& place,
                     std::vector<std::string> addresses = {}) const {
    ClusterMap m;
    m.cluster = true;
    m.revision = revision;
    m.replication = replication;
    m.log = log;
    for (size_t i = 0; i < servers_.size(); ++i) {
      m.nodes.push_back({"node-" + std::to_string(i),
                         i < addresses.size() ? addresses[i] : address(static_cast<int>(i)), ""});
    }
    for (uint32_t p = 0; p < kPartitions; ++p) {
      for (uint16_t n : place(p)) m.replicas.push_back(n);
    }
    EXPECT_TRUE(m.Check().ok()) << m.Check().ToString();
    return m;
  }
  // Replicas of partition p: p mod N, then the following nodes.
  ClusterMap SpreadMap(uint64_t revision, uint32_t replication, bool log) const {
    const auto n = static_cast<uint16_t>(servers_.size());
    return MakeMap(revision, replication, log, [n, replication](uint32_t p) {
      std::vector<uint16_t> r;
      for (uint32_t k = 0; k < replication; ++k) r.push_back(static_cast<uint16_t>((p + k) % n));
      return r;
    });
  }

  void SetScript(Script script) {
    std::lock_guard lock(mu_);
    script_ = std::move(script);
  }
  void SetMap(ClusterMap m) {
    std::lock_guard lock(mu_);
    map_ = std::move(m);
  }
  // The replicas of `user` in the map in force.
  std::vector<uint16_t> ReplicasOf(const std::string& user) {
    std::lock_guard lock(mu_);
    std::span<const uint16_t> r = map_.ReplicasOf(PartitionOf(user));
    return {r.begin(), r.end()};
  }
  int map_requests() {
    std::lock_guard lock(mu_);
    return map_requests_;
  }
  // Requests of `op` that node `node` received, in order.
  std::vector<Frame> Received(int node, Op op) {
    std::vector<Frame> out;
    for (const Frame& f : servers_[node]->received()) {
      if (f.op() == static_cast<uint8_t>(op)) out.push_back(f);
    }
    return out;
  }

  // For scripts: the map in force (the cluster's mutex is held).
  const ClusterMap& map_locked() const { return map_; }
  // Whether node `node` holds `user` in the map in force (mutex held).
  bool Holds(int node, std::string_view user) const {
    if (!map_.cluster) return true;
    for (uint16_t n : map_.ReplicasOf(PartitionOf(user))) {
      if (n == node) return true;
    }
    return false;
  }

 private:
  void Handle(int node, FakeConn& c, const Frame& f) {
    std::lock_guard lock(mu_);
    switch (static_cast<Op>(f.op())) {
      case Op::kHello:
        c.Reply(f, FakeInfo());
        return;
      case Op::kClusterMap: {
        ++map_requests_;
        ClusterMap m = map_;
        if (m.cluster) m.self = "node-" + std::to_string(node);
        c.Reply(f, m);
        return;
      }
      default:
        script_(*this, node, c, f);
    }
  }

  Script script_;
  std::mutex mu_;
  ClusterMap map_;
  int map_requests_ = 0;
  std::vector<std::unique_ptr<FakeServer>> servers_;
};

// `r` with, when `options` ask for fields, one field: "node", node `node`.
inline GetResult WithFields(GetResult r, const GetOptions& options, int node) {
  if (options.fields.mode == FieldSelection::Mode::kNone) return r;
  r.fields_asked = true;
  r.fields = {Field{"node", FieldValue::Int(node), kNever}};
  return r;
}

// Answers as a node of the map would: a request on a user it holds with
// `answer` (GetResult ids {node} and WithFields, or UpsertResult inserted =
// node + 1, ...; the field writes: count node + 1, an increment's value
// node + delta, field_max's value node), one it does not hold with
// WrongNode, per entry in batches.
inline void AnswerAsHolder(FakeCluster& cluster, int node, FakeConn& c, const Frame& f) {
  const auto wrong = [&](std::string_view user) {
    return Status::WrongNode("node-" + std::to_string(node) + " does not hold " +
                             std::string(user));
  };
  const auto wrong_frame = [&](std::string_view user) {
    std::string out;
    proto::AppendWrongNodeFrame(&out, f.op(), f.id(), wrong(user).message(),
                                cluster.map_locked().revision);
    c.Write(out);
  };
  GetResult got;
  got.ids = {static_cast<uint64_t>(node)};
  got.expires = {0};
  got.count = 1;
  const UpsertResult upserted{static_cast<uint32_t>(node + 1), 0, 0, 1};
  switch (static_cast<Op>(f.op())) {
    case Op::kGet: {
      proto::GetRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      if (!cluster.Holds(node, req.user)) return wrong_frame(req.user);
      c.Reply(f, WithFields(got, req.options, node));
      return;
    }
    case Op::kBatchGet: {
      proto::BatchGetRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      got = WithFields(got, req.options, node);
      BatchGetResult all;
      for (const std::string& u : req.users) {
        if (cluster.Holds(node, u)) {
          all.emplace_back(got);
        } else {
          all.emplace_back(wrong(u));
        }
      }
      c.Reply(f, all);
      return;
    }
    case Op::kUpsert: {
      proto::UpsertRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      if (!cluster.Holds(node, req.user)) return wrong_frame(req.user);
      c.Reply(f, upserted);
      return;
    }
    case Op::kBatchUpsert: {
      proto::BatchUpsertRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      BatchUpsertResult all;
      for (const UpsertItem& item : req.items) {
        if (cluster.Holds(node, item.user)) {
          all.emplace_back(upserted);
        } else {
          all.emplace_back(wrong(item.user));
        }
      }
      c.Reply(f, all);
      return;
    }
    case Op::kCount:
      c.Reply(f, proto::CountResponse{static_cast<uint32_t>(node)});
      return;
    case Op::kRemove:
      c.Reply(f, proto::RemoveResponse{static_cast<uint32_t>(node)});
      return;
    case Op::kTrim:
      c.Reply(f, TrimResult{static_cast<uint32_t>(node), 0});
      return;
    case Op::kDelete:
      c.Reply(f, proto::DeleteResponse{true});
      return;
    case Op::kExpire: {
      proto::ExpireRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      if (!cluster.Holds(node, req.user)) return wrong_frame(req.user);
      ExpireResult r;
      r.results.assign(req.ids.size(), ExpireOutcome::kSet);
      r.count = static_cast<uint32_t>(node);
      c.Reply(f, r);
      return;
    }
    case Op::kFieldSet: {
      proto::FieldSetRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      if (!cluster.Holds(node, req.user)) return wrong_frame(req.user);
      c.Reply(f, FieldWriteResult{static_cast<uint32_t>(req.fields.size()),
                                  static_cast<uint32_t>(node + 1), false});
      return;
    }
    case Op::kFieldDelete: {
      proto::FieldDeleteRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      if (!cluster.Holds(node, req.user)) return wrong_frame(req.user);
      c.Reply(f, FieldWriteResult{static_cast<uint32_t>(req.names.size()),
                                  static_cast<uint32_t>(node + 1), false});
      return;
    }
    case Op::kFieldIncrement: {
      proto::FieldIncrementRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      if (!cluster.Holds(node, req.user)) return wrong_frame(req.user);
      c.Reply(f, IncrementResult{node + req.increment.delta, false, false});
      return;
    }
    case Op::kFieldMax: {
      proto::FieldMaxRequest req;
      ASSERT_TRUE(proto::Decode(f.body, kLimits, &req).ok());
      if (!cluster.Holds(node, req.user)) return wrong_frame(req.user);
      c.Reply(f, FieldMaxResult{FieldValue::Int(node), true, false});
      return;
    }
    default:
      c.ReplyError(f, Status::Unsupported("not scripted"));
  }
}

// The user of a request frame on one user, and its write ID.
inline std::pair<std::string, WriteId> UserAndId(const Frame& f) {
  switch (static_cast<Op>(f.op())) {
    case Op::kUpsert: {
      proto::UpsertRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, r.write_id};
    }
    case Op::kDelete: {
      proto::DeleteRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, r.write_id};
    }
    case Op::kGet: {
      proto::GetRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, {}};
    }
    case Op::kExpire: {
      proto::ExpireRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, r.write_id};
    }
    case Op::kFieldSet: {
      proto::FieldSetRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, r.write_id};
    }
    case Op::kFieldDelete: {
      proto::FieldDeleteRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, r.write_id};
    }
    case Op::kFieldIncrement: {
      proto::FieldIncrementRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, r.write_id};
    }
    case Op::kFieldMax: {
      proto::FieldMaxRequest r;
      EXPECT_TRUE(proto::Decode(f.body, kLimits, &r).ok());
      return {r.user, r.write_id};
    }
    default:
      ADD_FAILURE() << "op " << int{f.op()};
      return {};
  }
}

}  // namespace segstore::client::testing
