#include "segstore/cluster_client.h"

#include <algorithm>
#include <thread>

#include "segstore/routing.h"

namespace segstore::client {

namespace {

bool IsWrongNode(const Status& s) { return s.code() == Status::Code::kWrongNode; }
bool IsBusy(const Status& s) { return s.code() == Status::Code::kBusy; }
// The connection broke or no answer came: the request may or may not have
// been carried out.
bool IsLost(const Status& s) {
  return s.code() == Status::Code::kUnavailable || s.code() == Status::Code::kTimeout;
}

}  // namespace

struct ClusterClient::Impl {
  ClusterClientOptions options;
  std::string seed;  // "host:port" of the node first asked
  segstore::ClusterMap map;
  std::map<std::string, std::unique_ptr<Client>> clients;  // by address
  uint64_t retries = 0;

  Result<Client*> ClientAt(const std::string& address) {
    auto it = clients.find(address);
    // A connection that closed since (idle timeout, a restart) is replaced
    // before anything is sent on it.
    if (it != clients.end() && it->second->is_open()) return it->second.get();
    if (it != clients.end()) clients.erase(it);
    ClientOptions o = options.node;
    SEGSTORE_RETURN_IF_ERROR(ParseServerAddress(address, &o));
    Result<std::unique_ptr<Client>> c = Client::Connect(o);
    if (!c.ok()) return c.status();
    return (clients[address] = std::move(*c)).get();
  }

  // Where `user` goes: a single server, or the first replica of its partition.
  std::string AddressOf(std::string_view user) const {
    if (!map.has_map()) return seed;
    return map.nodes[map.ReplicasOf(PartitionOf(user))[0]].address;
  }

  // Asks `address` for its map and keeps it when newer.
  Status AskMap(const std::string& address) {
    Result<Client*> c = ClientAt(address);
    if (!c.ok()) return c.status();
    Result<segstore::ClusterMap> m = (*c)->ClusterMap();
    if (m.status().code() == Status::Code::kUnsupported) {
      // A server from before clusters: a single server.
      map = segstore::ClusterMap{};
      return Status::OK();
    }
    if (!m.ok()) {
      if (IsLost(m.status())) clients.erase(address);
      return m.status();
    }
    if (!m->cluster) {
      map = std::move(*m);
    } else if (m->revision >= map.revision || !map.cluster) {
      map = std::move(*m);
    }
    return Status::OK();
  }

  // Fetches the map from `first` (if given), else from the nodes in turn.
  Status Refresh(const std::string& first = {}) {
    Status last = Status::Unavailable("no node to ask for the cluster map");
    std::vector<std::string> order;
    if (!first.empty()) order.push_back(first);
    for (const ClusterNode& n : map.nodes) order.push_back(n.address);
    order.push_back(seed);
    const uint64_t before = map.revision;
    for (const std::string& a : order) {
      last = AskMap(a);
      if (last.ok() && (map.revision > before || !map.cluster)) return Status::OK();
    }
    return last.ok() ? Status::OK() : last;
  }

  void Pause(int attempt) {
    auto pause = options.retry_pause * (1 << std::min(attempt, 6));
    std::this_thread::sleep_for(pause);
  }

  // Runs `call` on the node of `user`, retrying as the header says. `write`:
  // a lost answer is not retried.
  template <typename T, typename Call>
  Result<T> Routed(std::string_view user, bool write, Call call) {
    Status last;
    for (int attempt = 0; attempt < std::max(1, options.max_attempts); ++attempt) {
      const std::string address = AddressOf(user);
      Result<Client*> c = ClientAt(address);
      if (!c.ok()) {
        last = c.status();
      } else {
        Result<T> r = call(**c);
        if (r.ok() || !map.cluster) return r;
        last = r.status();
        if (IsLost(last)) clients.erase(address);
        if (IsLost(last) && write) return r;
        if (!IsWrongNode(last) && !IsBusy(last) && !IsLost(last)) return r;
      }
      if (!map.cluster && !IsLost(last)) return last;
      if (attempt + 1 >= std::max(1, options.max_attempts)) break;
      ++retries;
      if (!IsWrongNode(last)) Pause(attempt);
      const uint64_t revision = map.revision;
      (void)Refresh(IsWrongNode(last) ? address : std::string());
      // WrongNode from a node whose map is older than ours: no newer map to
      // go by yet, so give it a moment to catch up.
      if (IsWrongNode(last) && map.revision == revision) Pause(attempt);
    }
    return last;
  }

  // A batch: entries grouped by node, each group one request; the entries a
  // node did not hold (WrongNode) go round again with a fresh map.
  template <typename R, typename Entry, typename UserOf, typename Send>
  Result<std::vector<Result<R>>> Scattered(std::span<const Entry> entries, bool write,
                                           UserOf user_of, Send send) {
    std::vector<Result<R>> out(entries.size(), Result<R>(Status::Internal("not sent")));
    std::vector<size_t> pending(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) pending[i] = i;
    for (int attempt = 0; !pending.empty(); ++attempt) {
      std::map<std::string, std::vector<size_t>> by_node;
      for (size_t i : pending) by_node[AddressOf(user_of(entries[i]))].push_back(i);
      std::vector<size_t> again;
      Status retry_reason;
      std::string wrong_at;
      for (auto& [address, indices] : by_node) {
        std::vector<Entry> group;
        group.reserve(indices.size());
        for (size_t i : indices) group.push_back(entries[i]);
        Result<Client*> c = ClientAt(address);
        Result<std::vector<Result<R>>> r = c.ok() ? send(**c, std::span<const Entry>(group))
                                                  : Result<std::vector<Result<R>>>(c.status());
        if (r.ok() && r->size() != indices.size()) {
          r = Status::Internal("batch of " + std::to_string(indices.size()) + " to " + address +
                               ": " + std::to_string(r->size()) + " results");
        }
        if (!r.ok()) {
          if (IsLost(r.status())) clients.erase(address);
          const bool retry = map.cluster && (IsBusy(r.status()) || IsWrongNode(r.status()) ||
                                             (IsLost(r.status()) && !write));
          if (!map.cluster && !IsLost(r.status())) return r.status();
          for (size_t i : indices) {
            if (retry) {
              again.push_back(i);
            } else {
              out[i] = r.status();
            }
          }
          if (retry) retry_reason = r.status();
          continue;
        }
        for (size_t k = 0; k < indices.size(); ++k) {
          Result<R>& one = (*r)[k];
          if (map.cluster && IsWrongNode(one.status())) {
            again.push_back(indices[k]);
            retry_reason = one.status();
            wrong_at = address;
          } else {
            out[indices[k]] = std::move(one);
          }
        }
      }
      if (again.empty()) break;
      if (attempt + 1 >= std::max(1, options.max_attempts)) {
        for (size_t i : again) out[i] = retry_reason;
        break;
      }
      retries += again.size();
      if (!IsWrongNode(retry_reason)) Pause(attempt);
      const uint64_t revision = map.revision;
      (void)Refresh(wrong_at);
      if (IsWrongNode(retry_reason) && map.revision == revision) Pause(attempt);
      pending = std::move(again);
    }
    return out;
  }
};

ClusterClient::ClusterClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterClient::~ClusterClient() = default;

Result<std::unique_ptr<ClusterClient>> ClusterClient::Connect(const ClusterClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->seed = FormatServerAddress(options.node.host, options.node.port);
  SEGSTORE_RETURN_IF_ERROR(impl->AskMap(impl->seed));
  return std::unique_ptr<ClusterClient>(new ClusterClient(std::move(impl)));
}

const segstore::ClusterMap& ClusterClient::map() const { return impl_->map; }
Status ClusterClient::RefreshMap() { return impl_->Refresh(); }
std::string ClusterClient::NodeOf(std::string_view user) const { return impl_->AddressOf(user); }
uint64_t ClusterClient::retries() const { return impl_->retries; }
Result<Client*> ClusterClient::NodeClient(const std::string& address) {
  return impl_->ClientAt(address);
}

Result<GetResult> ClusterClient::Get(std::string_view user, const GetOptions& options) {
  return impl_->Routed<GetResult>(user, false, [&](Client& c) { return c.Get(user, options); });
}

Result<BatchGetResult> ClusterClient::BatchGet(std::span<const std::string> users,
                                               const GetOptions& options) {
  return impl_->Scattered<GetResult, std::string>(
      users, false, [](const std::string& u) -> std::string_view { return u; },
      [&](Client& c, std::span<const std::string> group) { return c.BatchGet(group, options); });
}

Result<uint32_t> ClusterClient::Count(std::string_view user, uint64_t id_from, uint64_t id_to) {
  return impl_->Routed<uint32_t>(user, false,
                                 [&](Client& c) { return c.Count(user, id_from, id_to); });
}

Result<UpsertResult> ClusterClient::Upsert(std::string_view user,
                                           std::span<const SegmentUpdate> segments,
                                           UpsertMode mode) {
  return impl_->Routed<UpsertResult>(user, true,
                                     [&](Client& c) { return c.Upsert(user, segments, mode); });
}

Result<BatchUpsertResult> ClusterClient::BatchUpsert(std::span<const UpsertItem> items) {
  return impl_->Scattered<UpsertResult, UpsertItem>(
      items, true, [](const UpsertItem& i) -> std::string_view { return i.user; },
      [&](Client& c, std::span<const UpsertItem> group) { return c.BatchUpsert(group); });
}

Result<uint32_t> ClusterClient::Remove(std::string_view user, std::span<const uint64_t> ids) {
  return impl_->Routed<uint32_t>(user, true, [&](Client& c) { return c.Remove(user, ids); });
}

Result<TrimResult> ClusterClient::Trim(std::string_view user, UnixSeconds before) {
  return impl_->Routed<TrimResult>(user, true, [&](Client& c) { return c.Trim(user, before); });
}

Result<bool> ClusterClient::Delete(std::string_view user) {
  return impl_->Routed<bool>(user, true, [&](Client& c) { return c.Delete(user); });
}

}  // namespace segstore::client
