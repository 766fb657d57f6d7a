#include "segstore/cluster_client.h"

#include <algorithm>
#include <thread>

#include "client/routing_rules.h"

namespace segstore::client {

using internal::GaveUp;
using internal::IsLost;
using internal::IsWrongNode;
using internal::Kind;

struct ClusterClient::Impl {
  ClusterClientOptions options;
  std::string seed;  // "host:port" of the node first asked
  segstore::ClusterMap map;
  std::map<std::string, std::unique_ptr<Client>> clients;  // by address
  uint64_t retries = 0;
  uint64_t stale_reads = 0;
  internal::WriteIds write_ids;
  internal::DownNodes down;

  WriteId NewWriteId() { return write_ids.Next(map.log); }

  // Whether an answer `s` to a request of `kind` is worth another attempt
  // (with the same write ID for a write).
  bool Retryable(const Status& s, Kind kind) const { return internal::Retryable(map, s, kind); }

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

  // Where `user` goes: a single server, or a replica of its partition, the
  // first on a first attempt and the next on each retry.
  std::string AddressOf(std::string_view user, int attempt = 0) const {
    return internal::AddressOf(map, seed, user, attempt, down);
  }

  // Notes how `address` answered (DownNodes::Heard); a connection that
  // broke is dropped.
  void Heard(const std::string& address, const Status& s) {
    if (IsLost(s)) clients.erase(address);
    down.Heard(address, s, map.cluster);
  }

  // Asks `address` for its map and keeps it when newer.
  Status AskMap(const std::string& address) {
    Result<Client*> c = ClientAt(address);
    if (!c.ok()) {
      Heard(address, c.status());
      return c.status();
    }
    Result<segstore::ClusterMap> m = (*c)->ClusterMap();
    Heard(address, m.status());
    return internal::TakeMap(&map, std::move(m));
  }

  // Fetches the map from `first` (if given), else from the nodes in turn.
  Status Refresh(const std::string& first = {}) {
    Status last = Status::Unavailable("no node to ask for the cluster map");
    const uint64_t before = map.revision;
    for (const std::string& a : internal::RefreshOrder(map, first, seed, down)) {
      last = AskMap(a);
      if (last.ok() && internal::RefreshFound(map, before)) return Status::OK();
    }
    return last.ok() ? Status::OK() : last;
  }

  void Pause(int attempt) {
    std::this_thread::sleep_for(internal::RetryPause(options.retry_pause, attempt));
  }

  // Runs `call` on a node of `user`, retrying as the header says.
  template <typename T, typename Call>
  Result<T> Routed(std::string_view user, Kind kind, Call call) {
    Status last;
    bool unknown = false;  // a write sent whose outcome is unknown
    const int attempts = std::max(1, options.max_attempts);
    int attempt = 0;
    for (; attempt < attempts; ++attempt) {
      const std::string address = AddressOf(user, attempt);
      Result<Client*> c = ClientAt(address);
      if (!c.ok()) {
        last = c.status();
        Heard(address, last);
      } else {
        Result<T> r = call(**c);
        Heard(address, r.status());
        if (r.ok() || !map.cluster) return r;
        last = r.status();
        if (internal::IsWrite(kind) && internal::IsUnknown(last)) unknown = true;
        if (!Retryable(last, kind)) return r;
      }
      if (!map.cluster && !IsLost(last)) return last;
      if (attempt + 1 >= attempts) break;
      ++retries;
      if (internal::RetryAtOnce(last, address, AddressOf(user, attempt + 1), down)) continue;
      if (!IsWrongNode(last)) Pause(attempt);
      const uint64_t revision = map.revision;
      (void)Refresh(IsWrongNode(last) ? address : std::string());
      // WrongNode from a node whose map is older than ours: no newer map to
      // go by yet, so give it a moment to catch up.
      if (IsWrongNode(last) && map.revision == revision) Pause(attempt);
    }
    return GaveUp(last, unknown, attempt + 1);
  }

  // A read: as Routed, then, when the answer is marked stale, the other
  // replicas in turn, for an answer that is not; the first stale one when
  // every replica's is.
  Result<GetResult> FreshGet(std::string_view user, const GetOptions& get) {
    Result<GetResult> first =
        Routed<GetResult>(user, Kind::kRead, [&](Client& c) { return c.Get(user, get); });
    if (!first.ok() || !first->stale || !map.has_map()) return first;
    ++stale_reads;
    for (const std::string& address : internal::FreshOrder(map, user, down)) {
      Result<Client*> c = ClientAt(address);
      if (!c.ok()) continue;
      Result<GetResult> r = (*c)->Get(user, get);
      // Only an answer not marked stale beats the first: NotFound from a
      // replica catching up is no better (its stale flag is on an error
      // frame, which a Status does not carry).
      if (r.ok() && !r->stale) return r;
    }
    return first;
  }

  // A batch: entries grouped by node, each group one request; the entries a
  // node did not hold (WrongNode) go round again with a fresh map.
  template <typename R, typename Entry, typename UserOf, typename Send>
  Result<std::vector<Result<R>>> Scattered(std::span<const Entry> entries, Kind kind,
                                           UserOf user_of, Send send) {
    std::vector<Result<R>> out(entries.size(), Result<R>(Status::Internal("not sent")));
    std::vector<size_t> pending(entries.size());
    std::vector<bool> unknown(entries.size(), false);  // per entry: a write sent, outcome unknown
    for (size_t i = 0; i < entries.size(); ++i) pending[i] = i;
    for (int attempt = 0; !pending.empty(); ++attempt) {
      std::map<std::string, std::vector<size_t>> by_node;
      for (size_t i : pending) by_node[AddressOf(user_of(entries[i]), attempt)].push_back(i);
      std::vector<size_t> again;
      Status retry_reason;
      std::string wrong_at;
      // Whether every entry to retry lost its node and has another to go to.
      bool at_once = true;
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
        Heard(address, r.status());
        if (!r.ok()) {
          const bool retry = Retryable(r.status(), kind);
          if (internal::IsWrite(kind) && internal::IsUnknown(r.status())) {
            for (size_t i : indices) unknown[i] = true;
          }
          if (!map.cluster && !IsLost(r.status())) return r.status();
          for (size_t i : indices) {
            if (retry) {
              again.push_back(i);
              at_once = at_once &&
                        internal::RetryAtOnce(r.status(), address,
                                              AddressOf(user_of(entries[i]), attempt + 1), down);
            } else {
              out[i] = r.status();
            }
          }
          if (retry) retry_reason = r.status();
          continue;
        }
        for (size_t k = 0; k < indices.size(); ++k) {
          Result<R>& one = (*r)[k];
          if (!one.ok() && internal::IsWrite(kind) && internal::IsUnknown(one.status())) {
            unknown[indices[k]] = true;
          }
          if (!one.ok() && Retryable(one.status(), kind)) {
            again.push_back(indices[k]);
            retry_reason = one.status();
            wrong_at = address;
            at_once = false;
          } else {
            out[indices[k]] = std::move(one);
          }
        }
      }
      if (again.empty()) break;
      if (attempt + 1 >= std::max(1, options.max_attempts)) {
        for (size_t i : again) out[i] = GaveUp(retry_reason, unknown[i], attempt + 1);
        break;
      }
      retries += again.size();
      if (!at_once) {
        if (!IsWrongNode(retry_reason)) Pause(attempt);
        const uint64_t revision = map.revision;
        (void)Refresh(wrong_at);
        if (IsWrongNode(retry_reason) && map.revision == revision) Pause(attempt);
      }
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
  impl->down = internal::DownNodes(options.down_mark);
  SEGSTORE_RETURN_IF_ERROR(impl->AskMap(impl->seed));
  return std::unique_ptr<ClusterClient>(new ClusterClient(std::move(impl)));
}

const segstore::ClusterMap& ClusterClient::map() const { return impl_->map; }
Status ClusterClient::RefreshMap() { return impl_->Refresh(); }
std::string ClusterClient::NodeOf(std::string_view user) const { return impl_->AddressOf(user); }
uint64_t ClusterClient::retries() const { return impl_->retries; }
uint64_t ClusterClient::stale_reads() const { return impl_->stale_reads; }
Result<Client*> ClusterClient::NodeClient(const std::string& address) {
  return impl_->ClientAt(address);
}

Result<GetResult> ClusterClient::Get(std::string_view user, const GetOptions& options) {
  return impl_->FreshGet(user, options);
}

Result<BatchGetResult> ClusterClient::BatchGet(std::span<const std::string> users,
                                               const GetOptions& options) {
  return impl_->Scattered<GetResult, std::string>(
      users, Kind::kRead, [](const std::string& u) -> std::string_view { return u; },
      [&](Client& c, std::span<const std::string> group) { return c.BatchGet(group, options); });
}

Result<uint32_t> ClusterClient::Count(std::string_view user, uint64_t id_from, uint64_t id_to) {
  return impl_->Routed<uint32_t>(user, Kind::kRead,
                                 [&](Client& c) { return c.Count(user, id_from, id_to); });
}

Result<UpsertResult> ClusterClient::Upsert(std::string_view user,
                                           std::span<const SegmentUpdate> segments,
                                           UpsertMode mode) {
  return Upsert(user, segments, UpsertOptions{mode});
}

Result<UpsertResult> ClusterClient::Upsert(std::string_view user,
                                           std::span<const SegmentUpdate> segments,
                                           const UpsertOptions& how) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<UpsertResult>(user, internal::WriteKind(id),
                                     [&](Client& c) { return c.Upsert(user, segments, how, id); });
}

Result<BatchUpsertResult> ClusterClient::BatchUpsert(std::span<const UpsertItem> items) {
  std::vector<UpsertItem> named(items.begin(), items.end());
  Kind kind = Kind::kNamedWrite;
  for (UpsertItem& item : named) {
    if (item.write_id.empty()) item.write_id = impl_->NewWriteId();
    if (item.write_id.empty()) kind = Kind::kWrite;
  }
  return impl_->Scattered<UpsertResult, UpsertItem>(
      std::span<const UpsertItem>(named), kind,
      [](const UpsertItem& i) -> std::string_view { return i.user; },
      [&](Client& c, std::span<const UpsertItem> group) { return c.BatchUpsert(group); });
}

Result<uint32_t> ClusterClient::Remove(std::string_view user, std::span<const uint64_t> ids) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<uint32_t>(user, internal::WriteKind(id),
                                 [&](Client& c) { return c.Remove(user, ids, id); });
}

Result<TrimResult> ClusterClient::Trim(std::string_view user, UnixSeconds before) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<TrimResult>(user, internal::WriteKind(id),
                                   [&](Client& c) { return c.Trim(user, before, id); });
}

Result<ExpireResult> ClusterClient::Expire(std::string_view user, std::span<const uint64_t> ids,
                                           const ExpireSpec& expiry) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<ExpireResult>(user, internal::WriteKind(id),
                                     [&](Client& c) { return c.Expire(user, ids, expiry, id); });
}

Result<FieldWriteResult> ClusterClient::FieldSet(std::string_view user,
                                                 std::span<const FieldUpdate> fields) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<FieldWriteResult>(user, internal::WriteKind(id),
                                         [&](Client& c) { return c.FieldSet(user, fields, id); });
}

Result<FieldWriteResult> ClusterClient::FieldDelete(std::string_view user,
                                                    std::span<const std::string> names) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<FieldWriteResult>(user, internal::WriteKind(id),
                                         [&](Client& c) { return c.FieldDelete(user, names, id); });
}

Result<IncrementResult> ClusterClient::FieldIncrement(std::string_view user,
                                                      const segstore::FieldIncrement& increment) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<IncrementResult>(user, internal::WriteKind(id), [&](Client& c) {
    return c.FieldIncrement(user, increment, id);
  });
}

Result<FieldMaxResult> ClusterClient::FieldMax(std::string_view user, const FieldUpdate& field) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<FieldMaxResult>(user, internal::WriteKind(id),
                                       [&](Client& c) { return c.FieldMax(user, field, id); });
}

Result<bool> ClusterClient::Delete(std::string_view user) {
  const WriteId id = impl_->NewWriteId();
  return impl_->Routed<bool>(user, internal::WriteKind(id),
                             [&](Client& c) { return c.Delete(user, id); });
}

}  // namespace segstore::client
