// The RESP port on a cluster node (proto/RESP.md, "Clusters"), members of
// RespConnection: Redis Cluster's view of the partition map, so that a
// cluster-aware Redis client routes each key itself. A partition is four
// Redis slots (segstore/routing.h: the user's slot is Redis Cluster's,
// CRC16 of the key or its hash tag); a shard is the partitions one ordered
// list of replicas holds, its first replica with a RESP port the master.
// The map comes from the service (the cluster_map operation) each time it
// is needed: nothing here keeps one.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "proto/wire.h"
#include "segstore/routing.h"
#include "server/resp_connection.h"

namespace segstore::server {

namespace {

// "host:port" or "[v6]:port" split; false when it is neither.
bool SplitAddress(const std::string& address, std::string* host, int64_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = std::atoll(address.c_str() + colon + 1);
  return *port > 0;
}

// The replicas of a partition that Redis clients can reach (a RESP port),
// in the map's order: the first is the master.
std::vector<uint16_t> RespReplicas(const ClusterMap& map, uint32_t partition) {
  std::vector<uint16_t> out;
  for (uint16_t r : map.ReplicasOf(partition)) {
    if (r < map.nodes.size() && !map.nodes[r].resp.empty()) out.push_back(r);
  }
  return out;
}

// Runs of partitions held by one list of replicas, in slot order: each
// [first slot, last slot] with its replicas.
struct SlotRange {
  uint32_t first = 0;
  uint32_t last = 0;
  std::vector<uint16_t> replicas;
};

std::vector<SlotRange> SlotRanges(const ClusterMap& map) {
  std::vector<SlotRange> ranges;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    std::vector<uint16_t> replicas = RespReplicas(map, p);
    if (replicas.empty()) continue;
    const uint32_t first = p * kSlotsPerPartition;
    if (!ranges.empty() && ranges.back().replicas == replicas && ranges.back().last + 1 == first) {
      ranges.back().last = first + kSlotsPerPartition - 1;
    } else {
      ranges.push_back({first, first + kSlotsPerPartition - 1, std::move(replicas)});
    }
  }
  return ranges;
}

// CLUSTER NODES: a line per node with a RESP port, each a master of the
// ranges whose first replica it is (where MOVED sends their keys). A node
// is a replica of many masters here, which Redis's format cannot say, so
// replicas are not listed: clients that read it (Lettuce, Redisson) route
// to masters, as MOVED does.
std::string NodesText(const ClusterMap& map, const std::vector<SlotRange>& ranges) {
  std::map<uint16_t, std::string> slots;  // node -> " first-last" ...
  for (const SlotRange& r : ranges) {
    slots[r.replicas[0]] +=
        r.first == r.last ? fmt::format(" {}", r.first) : fmt::format(" {}-{}", r.first, r.last);
  }
  // A node ID may hold blanks (config: any bytes but '/'); the line is split on them.
  const auto word = [](std::string id) {
    std::replace_if(
        id.begin(), id.end(),
        [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }, '_');
    return id;
  };
  std::string text;
  for (uint16_t i = 0; i < map.nodes.size(); ++i) {
    const ClusterNode& n = map.nodes[i];
    if (n.resp.empty()) continue;
    text += fmt::format("{} {}@0 {}master - 0 0 {} connected{}\n", word(n.id), n.resp,
                        n.id == map.self ? "myself," : "", map.revision, slots[i]);
  }
  return text;
}

}  // namespace

bool RespConnection::OneSlot(const RespCommandDef& def, RespArgs args, Pending& p) {
  std::vector<size_t> keys;
  if (!RespKeyPositions(def, args, &keys).ok() || keys.empty()) return true;  // its own error
  const uint32_t slot = SlotOf(args[keys[0]]);
  for (size_t at : keys) {
    if (SlotOf(args[at]) != slot) {
      ReplyError(p, "CROSSSLOT", "Keys in request don't hash to the same slot");
      return false;
    }
  }
  p.slot = static_cast<int32_t>(slot);
  return true;
}

void RespConnection::ReplyMoved(Pending& p, std::string message) {
  if (p.moving) return;
  p.moving = true;
  // What the reply is if the map cannot say better.
  ReplyError(p, "WRONGNODE", message);
  OnAnswer before = std::move(p.on_answer);
  Ask(p, proto::Op::kClusterMap, {},
      [this, before = std::move(before)](Pending& q, const proto::FrameHeader& h,
                                         std::string_view body) {
        if (h.op != static_cast<uint8_t>(proto::Op::kClusterMap)) {
          if (before) before(q, h, body);  // another answer of the same command
          return;
        }
        ClusterMap map;
        if (h.status != 0 || !proto::Decode(body, RespAnswerLimits(), &map).ok() ||
            !map.has_map()) {
          return;
        }
        const std::vector<uint16_t> replicas =
            RespReplicas(map, static_cast<uint32_t>(q.slot) / kSlotsPerPartition);
        if (replicas.empty()) return;
        ReplyError(q, "MOVED", fmt::format("{} {}", q.slot, map.nodes[replicas[0]].resp));
      });
}

void RespConnection::Cluster(RespArgs args, Pending& p) {
  if (!options_.cluster) return ReplyError(p, "ERR", "This instance has cluster support disabled");
  const std::string_view sub = args[1];
  if (RespEqualsNoCase(sub, "KEYSLOT") && args.size() == 3) {
    return Writer(p).Integer(SlotOf(args[2]));
  }
  enum class What { kSlots, kShards, kNodes, kInfo, kMyId } what;
  if (RespEqualsNoCase(sub, "SLOTS") && args.size() == 2) {
    what = What::kSlots;
  } else if (RespEqualsNoCase(sub, "NODES") && args.size() == 2) {
    what = What::kNodes;
  } else if (RespEqualsNoCase(sub, "SHARDS") && args.size() == 2) {
    what = What::kShards;
  } else if (RespEqualsNoCase(sub, "INFO") && args.size() == 2) {
    what = What::kInfo;
  } else if (RespEqualsNoCase(sub, "MYID") && args.size() == 2) {
    what = What::kMyId;
  } else {
    return ReplyError(
        p, "ERR",
        fmt::format("unknown subcommand or wrong number of arguments for '{}'. segstore answers "
                    "CLUSTER SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT (proto/RESP.md)",
                    sub.substr(0, 64)));
  }
  Ask(p, proto::Op::kClusterMap, {},
      [this, what](Pending& q, const proto::FrameHeader& h, std::string_view body) {
        if (h.status != 0) return ReplyStatus(q, h, body);
        ClusterMap map;
        if (Status s = proto::Decode(body, RespAnswerLimits(), &map); !s.ok()) {
          return ReplyError(q, "ERR", s.message());
        }
        proto::RespWriter w = Writer(q);
        if (what == What::kMyId) return w.Bulk(map.self);
        const std::vector<SlotRange> ranges =
            map.has_map() ? SlotRanges(map) : std::vector<SlotRange>{};
        if (what == What::kInfo) {
          uint32_t slots = 0;
          std::set<uint16_t> masters;
          for (const SlotRange& r : ranges) {
            slots += r.last - r.first + 1;
            masters.insert(r.replicas[0]);
          }
          std::string text;
          text += fmt::format("cluster_state:{}\r\n", slots == kSlots ? "ok" : "fail");
          text += fmt::format("cluster_slots_assigned:{}\r\n", slots);
          text += fmt::format("cluster_slots_ok:{}\r\n", slots);
          text += "cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n";
          text += fmt::format("cluster_known_nodes:{}\r\n", map.nodes.size());
          text += fmt::format("cluster_size:{}\r\n", masters.size());
          text += fmt::format("cluster_current_epoch:{}\r\n", map.revision);
          text += fmt::format("cluster_my_epoch:{}", map.revision);
          return w.Verbatim(text);
        }
        const auto node = [&](uint16_t index) {
          std::string host;
          int64_t port = 0;
          SplitAddress(map.nodes[index].resp, &host, &port);
          return std::pair<std::string, int64_t>(host, port);
        };
        if (what == What::kNodes) return w.Verbatim(NodesText(map, ranges));
        if (what == What::kSlots) {
          w.Array(ranges.size());
          for (const SlotRange& r : ranges) {
            w.Array(2 + r.replicas.size());
            w.Integer(r.first);
            w.Integer(r.last);
            for (uint16_t index : r.replicas) {
              const auto [host, port] = node(index);
              w.Array(3);
              w.Bulk(host);
              w.Integer(port);
              w.Bulk(map.nodes[index].id);
            }
          }
          return;
        }
        // SHARDS: one per list of replicas, with every range it holds.
        std::map<std::vector<uint16_t>, std::vector<const SlotRange*>> shards;
        for (const SlotRange& r : ranges) shards[r.replicas].push_back(&r);
        w.Array(shards.size());
        for (const auto& [replicas, held] : shards) {
          w.Map(2);
          w.Bulk("slots");
          w.Array(2 * held.size());
          for (const SlotRange* r : held) {
            w.Integer(r->first);
            w.Integer(r->last);
          }
          w.Bulk("nodes");
          w.Array(replicas.size());
          for (size_t i = 0; i < replicas.size(); ++i) {
            const auto [host, port] = node(replicas[i]);
            w.Map(7);
            w.Bulk("id");
            w.Bulk(map.nodes[replicas[i]].id);
            w.Bulk("port");
            w.Integer(port);
            w.Bulk("ip");
            w.Bulk(host);
            w.Bulk("endpoint");
            w.Bulk(host);
            w.Bulk("role");
            w.Bulk(i == 0 ? "master" : "replica");
            w.Bulk("replication-offset");
            w.Integer(0);
            w.Bulk("health");
            w.Bulk("online");
          }
        }
      });
}

}  // namespace segstore::server
