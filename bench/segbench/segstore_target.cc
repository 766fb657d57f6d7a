#include "bench/segbench/segstore_target.h"

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
// clang-format off
#include <utility>

#include <boost/asio.hpp>
// clang-format on

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include "segstore/async_cluster_client.h"

namespace segstore::bench {
namespace {

Outcome Failed(const Status& s) { return Outcome{false, s.ToString(), 0, 0}; }

FieldValue ValueOf(const ReferenceField& f) {
  switch (f.type) {
    case ReferenceField::Type::kInt:
      return FieldValue::Int(f.i);
    case ReferenceField::Type::kDouble:
      return FieldValue::Double(f.d);
    case ReferenceField::Type::kString:
      return FieldValue::String(f.s);
    case ReferenceField::Type::kTime:
      return FieldValue::Time(static_cast<UnixSeconds>(f.i));
  }
  return FieldValue::Int(f.i);
}

// One segbench connection over `Client`: an AsyncClient to a single server,
// or an AsyncClusterClient routing to a cluster's nodes (one connection to
// each). Both take the same calls; a single server's runs are the same code
// as before clusters.
template <typename Client>
class SegstoreConnection final : public Connection {
 public:
  SegstoreConnection(boost::asio::io_context& io, std::unique_ptr<Client> c, const GetOptions& get)
      : io_(io), client_(std::move(c)), get_(get), get_fields_(get) {}
  ~SegstoreConnection() override { Deliver(*unsupported_); }

  void Get(const std::string& user, Done done) override {
    client_->Get(user, get_, [done = std::move(done)](Result<GetResult> r) {
      if (r.ok()) return done(Outcome{true, {}, r->count, 0, r->profiles});
      if (r.status().IsNotFound()) return done(Outcome{true, {}, 0, 1});
      done(Failed(r.status()));
    });
  }

  void GetFields(const std::string& user, const std::string& prefix, Done done) override {
    if (get_fields_.fields.mode != FieldSelection::Mode::kPrefix ||
        get_fields_.fields.prefix != prefix) {
      get_fields_.fields = FieldSelection{FieldSelection::Mode::kPrefix, {}, prefix};
    }
    client_->Get(user, get_fields_, [done = std::move(done)](Result<GetResult> r) {
      if (r.ok()) {
        Outcome o{true, {}, r->count, 0, r->profiles};
        o.fields = static_cast<uint32_t>(r->fields.size());
        return done(std::move(o));
      }
      if (r.status().IsNotFound()) return done(Outcome{true, {}, 0, 1});
      done(Failed(r.status()));
    });
  }

  void BatchGet(std::span<const std::string> users, Done done) override {
    client_->BatchGet(users, get_, [done = std::move(done)](Result<BatchGetResult> r) {
      if (!r.ok()) return done(Failed(r.status()));
      Outcome o;
      for (const Result<GetResult>& one : *r) {
        if (one.ok()) {
          o.segments += one->count;
          o.profiles += one->profiles;
        } else if (one.status().IsNotFound()) {
          ++o.missing;
        } else if (o.ok) {
          o = Failed(one.status());
        }
      }
      done(std::move(o));
    });
  }

  void Upsert(const std::string& user, std::span<const Assignment> segments, Done done) override {
    std::vector<SegmentUpdate> updates;
    updates.reserve(segments.size());
    for (const Assignment& a : segments) updates.push_back({a.id, a.expires, false, {}, {}});
    client_->Upsert(user, updates, UpsertMode::kSet,
                    [done = std::move(done)](Result<UpsertResult> r) {
                      if (!r.ok()) return done(Failed(r.status()));
                      done(Outcome{true, {}, r->trimmed, 0});
                    });
  }

  void Trim(const std::string& user, Done done) override {
    client_->Trim(user, 0, [done = std::move(done)](Result<TrimResult> r) {
      // A user without a profile has nothing to trim (Redis's answer too).
      if (r.status().IsNotFound()) return done(Outcome{true, {}, 0, 0});
      if (!r.ok()) return done(Failed(r.status()));
      done(Outcome{true, {}, r->trimmed, 0});
    });
  }

  void Replace(std::span<const std::string> users,
               std::span<const std::vector<Assignment>> profiles, Done done) override {
    std::vector<UpsertItem> items;
    items.reserve(users.size());
    for (size_t i = 0; i < users.size() && i < profiles.size(); ++i) {
      UpsertItem item{users[i], {}, UpsertMode::kSet};
      item.segments.reserve(profiles[i].size());
      for (const Assignment& a : profiles[i])
        item.segments.push_back({a.id, a.expires, false, {}, {}});
      items.push_back(std::move(item));
    }
    client_->BatchUpsert(items, [done = std::move(done)](Result<BatchUpsertResult> r) {
      if (!r.ok()) return done(Failed(r.status()));
      for (const Result<UpsertResult>& one : *r) {
        if (!one.ok()) return done(Failed(one.status()));
      }
      done(Outcome{});
    });
  }

  void Link(const std::string& user, const std::string& master, Done done) override {
    client_->Link(user, master, 0, [done = std::move(done)](Result<LinkResult> r) {
      if (!r.ok()) return done(Failed(r.status()));
      done(Outcome{});
    });
  }

  void SetFields(const std::string& user, std::span<const ReferenceField> fields,
                 Done done) override {
    if constexpr (!kFieldWrites) {
      return NotSupported("field_set", std::move(done));
    } else {
      std::vector<FieldUpdate> updates;
      updates.reserve(fields.size());
      for (const ReferenceField& f : fields) {
        updates.push_back(FieldUpdate{f.name, ValueOf(f), f.expires_at, false});
      }
      client_->FieldSet(user, updates, WriteId{},
                        [done = std::move(done)](Result<FieldWriteResult> r) {
                          if (!r.ok()) return done(Failed(r.status()));
                          done(Outcome{});
                        });
    }
  }

  void Increment(const std::string& user, const std::string& name, uint32_t ttl,
                 Done done) override {
    if constexpr (!kFieldWrites) {
      return NotSupported("field_incr", std::move(done));
    } else {
      segstore::FieldIncrement inc;
      inc.name = name;
      inc.delta = 1;
      inc.ttl = ttl;
      inc.window = segstore::FieldIncrement::Window::kFixed;
      client_->FieldIncrement(user, inc, WriteId{},
                              [done = std::move(done)](Result<IncrementResult> r) {
                                if (!r.ok()) return done(Failed(r.status()));
                                done(Outcome{});
                              });
    }
  }

  size_t in_flight() const override { return client_->in_flight() + unsupported_->size(); }

 private:
  // The field writes: AsyncClient's; a cluster's nodes refuse them for now
  // (their log does not carry fields), and AsyncClusterClient has none.
  static constexpr bool kFieldWrites = std::is_same_v<Client, client::AsyncClient>;
  using Refused = std::vector<std::pair<Done, Outcome>>;

  // Fails `what` from a posted handler, never inside the call; the
  // destructor fails those not yet delivered.
  void NotSupported(const char* what, Done done) {
    unsupported_->emplace_back(
        std::move(done),
        Outcome{false, std::string(what) + ": not supported by a cluster (profile fields)", 0, 0});
    if (unsupported_->size() > 1) return;
    boost::asio::post(io_, [refused = unsupported_] { Deliver(*refused); });
  }
  static void Deliver(Refused& refused) {
    Refused now = std::move(refused);
    refused.clear();
    for (auto& [done, outcome] : now) done(std::move(outcome));
  }

  boost::asio::io_context& io_;
  std::unique_ptr<Client> client_;
  GetOptions get_;
  GetOptions get_fields_;  // get_, asking for the fields of a prefix
  std::shared_ptr<Refused> unsupported_ = std::make_shared<Refused>();
};

// A server's figures, from its stats.
ServerSample SampleOf(segstore::Stats stats) {
  std::map<std::string, decltype(StatEntry::value)> by_name;
  for (StatEntry& e : stats.entries) by_name[e.name] = std::move(e.value);
  auto number = [&](const char* name) -> uint64_t {
    auto it = by_name.find(name);
    if (it == by_name.end()) return 0;
    if (const auto* u = std::get_if<uint64_t>(&it->second)) return *u;
    if (const auto* d = std::get_if<double>(&it->second)) return static_cast<uint64_t>(*d);
    return 0;
  };
  auto text = [&](const char* name) -> std::string {
    auto it = by_name.find(name);
    if (it == by_name.end()) return "";
    if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
    return "";
  };
  ServerSample s;
  s.pid = static_cast<int64_t>(number("process.pid"));
  s.memory_bytes = number("process.resident_memory_bytes");
  s.device_bytes_used = (number("storage.write_blocks") - number("storage.write_blocks_free")) *
                        number("storage.write_block_bytes");
  s.live_bytes = number("storage.live_bytes");
  s.records = number("storage.index_entries");
  s.sweeper_segments_removed = number("sweeper.segments_removed");
  s.sweeper_records_rewritten = number("sweeper.records_rewritten");
  s.defrag_blocks = number("storage.defrag_blocks");
  s.index_bytes = number("storage.index_bytes");
  s.index_references = number("storage.index_references");
  s.index_reference_bytes = number("storage.index_reference_bytes");
  s.index_references_known = by_name.count("storage.index_references") != 0 &&
                             by_name.count("storage.index_reference_bytes") != 0;
  s.durability = text("config.storage.durability");
  s.device = text("config.storage.path");
  return s;
}

Result<ServerSample> SampleAt(const client::ClientOptions& options) {
  auto c = client::Client::Connect(options);
  if (!c.ok()) return c.status();
  auto stats = (*c)->Stats();
  if (!stats.ok()) return stats.status();
  return SampleOf(std::move(*stats));
}

// A single server: one AsyncClient per connection, as before clusters.
class SegstoreTarget final : public Target {
 public:
  explicit SegstoreTarget(const SegstoreOptions& options) : options_(options) {
    get_.ids_only = options.ids_only;
  }

  std::string name() const override { return "segstore"; }
  std::string address() const override {
    return client::FormatServerAddress(options_.client.host, options_.client.port);
  }

  void Open(boost::asio::io_context& io,
            std::function<void(Result<std::unique_ptr<Connection>>)> done) override {
    client::AsyncClient::Connect(
        io, options_.client,
        [this, &io, done = std::move(done)](Result<std::unique_ptr<client::AsyncClient>> r) {
          if (!r.ok()) return done(r.status());
          done(std::unique_ptr<Connection>(
              new SegstoreConnection<client::AsyncClient>(io, std::move(*r), get_)));
        });
  }

  Result<ServerSample> Sample() override { return SampleAt(options_.client); }

  size_t load_batch() const override { return 20; }

  bool fields_supported() const override { return true; }

  Result<uint64_t> RegisterFieldNames(std::span<const std::string> names,
                                      double timeout_seconds) override {
    auto c = client::Client::Connect(options_.client);
    if (!c.ok()) return c.status();
    auto records = [&c]() -> Result<uint64_t> {
      auto stats = (*c)->Stats();
      if (!stats.ok()) return stats.status();
      return SampleOf(std::move(*stats)).records;
    };
    const Result<uint64_t> before = records();
    if (!before.ok()) return before.status();
    // A scratch profile may hold at most profile.max_fields fields.
    const size_t per_user = std::max<size_t>(1, std::min<size_t>(200, MaxFields(**c)));
    size_t users = 0;  // scratch users: each leaves a tombstone, a record too
    for (size_t first = 0, k = 0; first < names.size(); first += per_user, ++k, ++users) {
      std::vector<FieldUpdate> fields;
      for (size_t i = first; i < std::min(names.size(), first + per_user); ++i) {
        fields.push_back(FieldUpdate{names[i], FieldValue::Int(0), kNever, false});
      }
      const std::string user = "segbench-field-names-" + std::to_string(k);
      if (auto set = (*c)->FieldSet(user, fields); !set.ok()) {
        return set.status().WithContext("registering field names: " + user);
      }
      if (auto del = (*c)->Delete(user); !del.ok()) {
        return del.status().WithContext("registering field names: deleting " + user);
      }
    }
    // The server writes the table's records in batches, each once the one
    // before is on the device: wait for all of them (a fresh server), or
    // until none has appeared for two seconds (a server that numbered some
    // names before).
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    auto last_change = start;
    uint64_t grown = 0;
    while (grown < names.size() + users) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const Result<uint64_t> now = records();
      if (!now.ok()) return now.status();
      const uint64_t g = *now > *before ? *now - *before : 0;
      const auto t = Clock::now();
      if (g != grown) {
        grown = g;
        last_change = t;
      } else if (t - last_change > std::chrono::seconds(2) ||
                 t - start > std::chrono::duration<double>(timeout_seconds)) {
        break;
      }
    }
    return grown > users ? grown - users : 0;
  }

 private:
  // The server's profile.max_fields (256 when it does not say).
  static uint64_t MaxFields(client::Client& c) {
    auto stats = c.Stats();
    if (!stats.ok()) return 256;
    for (const StatEntry& e : stats->entries) {
      if (e.name != "config.profile.max_fields") continue;
      if (const auto* u = std::get_if<uint64_t>(&e.value)) return *u;
    }
    return 256;
  }

  SegstoreOptions options_;
  GetOptions get_;
};

// A cluster, reached through any node: each connection is an
// AsyncClusterClient with one connection to each node, so N connections are
// N to each node. A sample sums every node's figures.
class SegstoreClusterTarget final : public Target {
 public:
  SegstoreClusterTarget(const SegstoreOptions& options, ClusterMap map)
      : options_(options), map_(std::move(map)) {
    get_.ids_only = options.ids_only;
  }

  std::string name() const override { return "segstore"; }
  std::string address() const override {
    return client::FormatServerAddress(options_.client.host, options_.client.port);
  }
  std::string topology() const override {
    return "cluster of " + std::to_string(map_.nodes.size()) + " nodes, replication " +
           std::to_string(map_.replication) + (map_.log ? ", writes through a log" : "");
  }

  void Open(boost::asio::io_context& io,
            std::function<void(Result<std::unique_ptr<Connection>>)> done) override {
    client::AsyncClusterClientOptions o;
    o.node = options_.client;
    o.connections_per_node = 1;
    client::AsyncClusterClient::Connect(
        io, o,
        [this, &io, done = std::move(done)](Result<std::unique_ptr<client::AsyncClusterClient>> r) {
          if (!r.ok()) return done(r.status());
          done(std::unique_ptr<Connection>(
              new SegstoreConnection<client::AsyncClusterClient>(io, std::move(*r), get_)));
        });
  }

  // Every node's figures summed (the pid and the settings are the node
  // asked's; the other nodes' pids follow it).
  Result<ServerSample> Sample() override {
    Result<ServerSample> total = SampleAt(options_.client);
    if (!total.ok()) return total;
    const std::string seed = address();
    for (const ClusterNode& n : map_.nodes) {
      if (n.address == seed) continue;
      client::ClientOptions o = options_.client;
      SEGSTORE_RETURN_IF_ERROR(client::ParseServerAddress(n.address, &o));
      Result<ServerSample> one = SampleAt(o);
      if (!one.ok()) return one.status().WithContext("node " + n.id + " at " + n.address);
      total->more_pids.push_back(one->pid);
      total->memory_bytes += one->memory_bytes;
      total->device_bytes_used += one->device_bytes_used;
      total->live_bytes += one->live_bytes;
      total->records += one->records;
      total->sweeper_segments_removed += one->sweeper_segments_removed;
      total->sweeper_records_rewritten += one->sweeper_records_rewritten;
      total->defrag_blocks += one->defrag_blocks;
      total->index_bytes += one->index_bytes;
      total->index_references += one->index_references;
      total->index_reference_bytes += one->index_reference_bytes;
      total->index_references_known = total->index_references_known && one->index_references_known;
    }
    return total;
  }

  size_t load_batch() const override { return 20; }

 private:
  SegstoreOptions options_;
  ClusterMap map_;
  GetOptions get_;
};

}  // namespace

Result<std::unique_ptr<Target>> NewSegstoreTarget(const SegstoreOptions& options) {
  auto c = client::Client::Connect(options.client);
  if (!c.ok()) return c.status();
  if (auto stats = (*c)->Stats(); !stats.ok()) return stats.status();
  // A cluster node's map says so; a server from before clusters does not
  // know the operation (a single server).
  Result<ClusterMap> map = (*c)->ClusterMap();
  if (!map.ok() && map.status().code() != Status::Code::kUnsupported) return map.status();
  if (map.ok() && map->cluster) {
    if (!map->has_map()) {
      return Status::Unavailable("the cluster has no partition map yet (it is forming)");
    }
    auto target = std::make_unique<SegstoreClusterTarget>(options, std::move(*map));
    Result<ServerSample> probe = target->Sample();
    if (!probe.ok()) return probe.status();
    return std::unique_ptr<Target>(std::move(target));
  }
  return std::unique_ptr<Target>(std::make_unique<SegstoreTarget>(options));
}

}  // namespace segstore::bench
