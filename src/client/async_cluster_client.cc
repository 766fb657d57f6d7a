#include "segstore/async_cluster_client.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>

// After <utility>: Boost 1.74's Asio uses std::exchange without including it.
#include <boost/asio.hpp>

#include "client/routing_rules.h"

namespace segstore::client {
namespace internal {

namespace {

Status Closed() { return Status::Unavailable("cluster client closed"); }

}  // namespace

// An operation in flight through the router (a request on one user, a
// batch, a stale get's second asks): registered from start to finish, so
// that Close can end the ones waiting on a pause, a map or a connection.
class Op {
 public:
  virtual ~Op() = default;
  // Ends the operation now with `status`, unless it has ended.
  virtual void Abort(const Status& status) = 0;
};

// What the facade holds: the map, the connections per node, the map
// refreshes, the operations in flight. Held by shared_ptr, by the facade
// and by every operation and pending completion that needs it, so that a
// callback may destroy the facade while the router is still on the stack.
// Every member runs on the io_context's thread.
class ClusterRouter : public std::enable_shared_from_this<ClusterRouter> {
 public:
  using ClientCallback = std::function<void(Result<AsyncClient*>)>;
  using Then = std::function<void(const Status&)>;

  ClusterRouter(boost::asio::io_context& io, const AsyncClusterClientOptions& options)
      : io_(io),
        options_(options),
        seed_(FormatServerAddress(options.node.host, options.node.port)) {
    options_.connections_per_node = std::max(1u, options_.connections_per_node);
    options_.max_attempts = std::max(1, options_.max_attempts);
    down = DownNodes(options_.down_mark);
  }

  boost::asio::io_context& io() { return io_; }
  const ClusterMap& map() const { return map_; }
  ClusterMap* mutable_map() { return &map_; }
  const std::string& seed() const { return seed_; }
  bool closed() const { return closed_; }
  int max_attempts() const { return options_.max_attempts; }
  std::chrono::milliseconds Pause(int attempt) const {
    return RetryPause(options_.retry_pause, attempt);
  }

  // ---- connections ----

  // An open connection to `address` with the fewest requests in flight, now
  // (another is opened while fewer than connections_per_node are, and every
  // open one is busy); null when none is open.
  AsyncClient* Direct(const std::string& address) {
    if (closed_) return nullptr;
    Pool& p = pools_[address];
    AsyncClient* best = Pick(p);
    if (best != nullptr && best->in_flight() > 0 &&
        p.clients.size() + p.connecting < options_.connections_per_node &&
        std::chrono::steady_clock::now() >= p.grow_after) {
      StartConnect(address);
    }
    return best;
  }

  // Hands `cb` an open connection to `address`: at once when one is open,
  // else once one is (or with the failure to connect, never inside the call).
  void Acquire(const std::string& address, ClientCallback cb) {
    if (closed_) {
      boost::asio::post(io_, [cb = std::move(cb)] { cb(Closed()); });
      return;
    }
    if (AsyncClient* c = Direct(address)) {
      cb(c);
      return;
    }
    Pool& p = pools_[address];
    p.waiters.push_back(std::move(cb));
    if (p.connecting == 0) StartConnect(address);
  }

  // ---- the map ----

  // Fetches the map (from `first` if given, then every node, then the seed:
  // RefreshOrder) for a caller that went by revision `known`, and runs
  // `then` with OK, or the last failure when no node answered. A map newer
  // than `known` is the answer: when the router has one already, nothing is
  // fetched. One fetch at a time: a call during one waits for the next,
  // which starts once that one ended unless it brought a map newer than
  // `known`. `then` never runs inside the call.
  void Refresh(const std::string& first, uint64_t known, Then then) {
    if (closed_) {
      boost::asio::post(io_, [then = std::move(then)] { then(Closed()); });
      return;
    }
    if (map_.revision > known) {
      boost::asio::post(io_, [then = std::move(then)] { then(Status::OK()); });
      return;
    }
    if (refreshing_) {
      next_.push_back(Waiter{first, known, std::move(then)});
      return;
    }
    std::vector<Then> waiters;
    waiters.push_back(std::move(then));
    StartRefresh(first, std::move(waiters));
  }

  // ---- operations ----

  void Register(Op* op) { live_.insert(op); }
  void Unregister(Op* op) { live_.erase(op); }
  size_t in_flight() const { return live_.size() + direct_in_flight_; }

  // Wraps the callback of a request sent straight to a single server's
  // connection, counting it in flight.
  template <typename T>
  Callback<T> Counted(Callback<T> done) {
    ++direct_in_flight_;
    return [self = shared_from_this(), done = std::move(done)](Result<T> r) {
      --self->direct_in_flight_;
      done(std::move(r));
    };
  }

  // Fails everything in flight with Unavailable, from inside: requests on
  // the connections (closed here), callers waiting for a connection or a
  // map, operations pausing. Later calls fail (posted). Idempotent.
  void Close() {
    if (closed_) return;
    closed_ = true;
    auto guard = shared_from_this();
    std::map<std::string, Pool> pools = std::move(pools_);
    pools_.clear();
    std::vector<Then> current = std::move(current_);
    std::vector<Waiter> next = std::move(next_);
    current_.clear();
    next_.clear();
    for (auto& [address, p] : pools) {
      std::vector<ClientCallback> waiters = std::move(p.waiters);
      p.waiters.clear();
      for (ClientCallback& w : waiters) w(Closed());
    }
    pools.clear();  // each AsyncClient fails its requests as it goes
    for (Then& t : current) t(Closed());
    for (Waiter& w : next) w.then(Closed());
    const std::vector<Op*> ops(live_.begin(), live_.end());
    for (Op* op : ops) {
      if (live_.count(op) != 0) op->Abort(Closed());
    }
  }

  uint64_t retries = 0;
  uint64_t stale_reads = 0;
  WriteIds write_ids;
  DownNodes down;
  ServerInfo info;  // the seed's hello answer

  // Where `user` goes on `attempt` (AddressOf, passing over nodes down).
  const std::string& AddressFor(std::string_view user, int attempt) const {
    return AddressOf(map_, seed_, user, attempt, down);
  }
  // DownNodes::Heard, under the map in use.
  void Heard(const std::string& address, const Status& s) { down.Heard(address, s, map_.cluster); }

 private:
  // The connections to one node.
  struct Pool {
    std::vector<std::unique_ptr<AsyncClient>> clients;  // open when last looked at
    unsigned connecting = 0;
    std::vector<ClientCallback> waiters;  // for a connection, none being open
    // A connection beyond the first is not tried again for a second after
    // one failed (a server at its connection limit).
    std::chrono::steady_clock::time_point grow_after;
  };

  // Drops the connections that closed (the server's idle timeout, a break);
  // then the least busy open one, or null.
  static AsyncClient* Pick(Pool& p) {
    std::erase_if(p.clients, [](const std::unique_ptr<AsyncClient>& c) { return !c->is_open(); });
    AsyncClient* best = nullptr;
    for (const auto& c : p.clients) {
      if (best == nullptr || c->in_flight() < best->in_flight()) best = c.get();
    }
    return best;
  }

  void StartConnect(const std::string& address) {
    ++pools_[address].connecting;
    ClientOptions o = options_.node;
    Status parsed = ParseServerAddress(address, &o);
    auto self = shared_from_this();
    if (!parsed.ok()) {
      boost::asio::post(io_, [self, address, parsed] { self->Connected(address, parsed); });
      return;
    }
    AsyncClient::Connect(io_, o, [self, address](Result<std::unique_ptr<AsyncClient>> r) {
      self->Connected(address, std::move(r));
    });
  }

  void Connected(const std::string& address, Result<std::unique_ptr<AsyncClient>> r) {
    if (closed_) return;  // its waiters were failed; a new client is dropped here
    Pool& p = pools_[address];
    --p.connecting;
    Status failure = r.status();
    if (r.ok()) {
      p.clients.push_back(std::move(r).value());
    } else {
      p.grow_after = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
    std::vector<ClientCallback> waiters = std::move(p.waiters);
    p.waiters.clear();
    for (ClientCallback& w : waiters) {
      AsyncClient* c = closed_ ? nullptr : Pick(pools_[address]);
      if (c != nullptr) {
        w(c);
      } else {
        w(closed_ ? Closed() : !failure.ok() ? failure : Status::Unavailable(address + ": closed"));
      }
    }
  }

  void StartRefresh(const std::string& first, std::vector<Then> waiters) {
    refreshing_ = true;
    current_ = std::move(waiters);
    order_ = RefreshOrder(map_, first, seed_, down);
    position_ = 0;
    before_ = map_.revision;
    last_ = Status::Unavailable("no node to ask for the cluster map");
    AskNext();
  }

  void AskNext() {
    if (closed_) return;
    if (position_ >= order_.size()) {
      EndRefresh(last_.ok() ? Status::OK() : last_);
      return;
    }
    auto self = shared_from_this();
    const std::string address = order_[position_++];
    Acquire(address, [self, address](Result<AsyncClient*> c) {
      if (self->closed_) return;
      if (!c.ok()) {
        self->Heard(address, c.status());
        self->last_ = c.status();
        self->AskNext();
        return;
      }
      (*c)->ClusterMap([self, address](Result<ClusterMap> m) {
        if (self->closed_) return;
        self->Heard(address, m.status());
        self->last_ = TakeMap(&self->map_, std::move(m));
        if (self->last_.ok() && RefreshFound(self->map_, self->before_)) {
          self->EndRefresh(Status::OK());
        } else {
          self->AskNext();
        }
      });
    });
  }

  void EndRefresh(const Status& status) {
    refreshing_ = false;
    std::vector<Then> done = std::move(current_);
    current_.clear();
    // Whoever asked during this fetch and still has no newer map than the
    // one it went by gets the next fetch, started first; the others are done.
    std::vector<Then> waiting;
    std::string first;
    for (Waiter& w : next_) {
      if (map_.revision > w.known) {
        done.push_back(std::move(w.then));
      } else {
        if (waiting.empty()) first = w.first;
        waiting.push_back(std::move(w.then));
      }
    }
    next_.clear();
    if (!waiting.empty()) StartRefresh(first, std::move(waiting));
    for (Then& t : done) t(status);
  }

  boost::asio::io_context& io_;
  AsyncClusterClientOptions options_;
  const std::string seed_;  // "host:port" of the node first asked
  ClusterMap map_;
  bool closed_ = false;
  std::map<std::string, Pool> pools_;  // by address
  std::unordered_set<Op*> live_;
  size_t direct_in_flight_ = 0;

  // The map fetch under way, if refreshing_.
  bool refreshing_ = false;
  std::vector<Then> current_;  // run when it ends
  std::vector<std::string> order_;
  size_t position_ = 0;
  uint64_t before_ = 0;
  Status last_;
  // Waiting for the next fetch.
  struct Waiter {
    std::string first;
    uint64_t known = 0;
    Then then;
  };
  std::vector<Waiter> next_;
};

namespace {

// One request on one user, routed and retried as the header says
// (ClusterClient::Impl::Routed, asynchronously).
template <typename T>
class RoutedOp final : public Op, public std::enable_shared_from_this<RoutedOp<T>> {
 public:
  using Send = std::function<void(AsyncClient&, const std::string& user, Callback<T>)>;

  RoutedOp(std::shared_ptr<ClusterRouter> router, std::string user, Kind kind, Send send,
           Callback<T> done)
      : router_(std::move(router)),
        user_(std::move(user)),
        kind_(kind),
        send_(std::move(send)),
        done_(std::move(done)) {}

  void Start() {
    router_->Register(this);
    Attempt();
  }
  void Abort(const Status& status) override { Finish(status); }

 private:
  // A pause of the router's, then `then`; nothing once finished.
  void PauseThen(std::function<void()> then) {
    if (!timer_) timer_.emplace(router_->io());
    timer_->expires_after(router_->Pause(attempt_));
    timer_->async_wait([self = this->shared_from_this(),
                        then = std::move(then)](const boost::system::error_code&) {
      if (!self->finished_) then();
    });
  }

  void Attempt() {
    if (router_->closed()) return Finish(Closed());
    sent_revision_ = router_->map().revision;
    address_ = router_->AddressFor(user_, attempt_);
    if (AsyncClient* c = router_->Direct(address_)) {
      SendOn(*c);
      return;
    }
    router_->Acquire(address_, [self = this->shared_from_this()](Result<AsyncClient*> c) {
      if (self->finished_) return;
      if (!c.ok()) {
        self->last_ = c.status();
        if (!self->router_->closed()) self->router_->Heard(self->address_, self->last_);
        self->Failed();
        return;
      }
      self->SendOn(**c);
    });
  }

  void SendOn(AsyncClient& c) {
    send_(c, user_,
          [self = this->shared_from_this()](Result<T> r) { self->OnAnswer(std::move(r)); });
  }

  void OnAnswer(Result<T> r) {
    if (finished_) return;
    if (!router_->closed()) router_->Heard(address_, r.status());
    if (r.ok() || !router_->map().cluster || router_->closed()) {
      Finish(std::move(r));
      return;
    }
    last_ = r.status();
    if (internal::IsWrite(kind_) && internal::IsUnknown(last_)) unknown_ = true;
    if (!Retryable(router_->map(), last_, kind_)) {
      Finish(std::move(r));
      return;
    }
    Failed();
  }

  // The attempt failed on last_: give up, or pause, fetch the map and go on.
  void Failed() {
    if (router_->closed()) return Finish(Closed());
    if (!router_->map().cluster && !IsLost(last_)) return Finish(last_);
    if (attempt_ + 1 >= router_->max_attempts()) {
      return Finish(GaveUp(last_, unknown_, attempt_ + 1));
    }
    ++router_->retries;
    auto self = this->shared_from_this();
    if (RetryAtOnce(last_, address_, router_->AddressFor(user_, attempt_ + 1), router_->down)) {
      Next();
    } else if (IsWrongNode(last_)) {
      RefreshThenNext();
    } else {
      PauseThen([self] { self->RefreshThenNext(); });
    }
  }

  void RefreshThenNext() {
    auto self = this->shared_from_this();
    router_->Refresh(
        IsWrongNode(last_) ? address_ : std::string(), sent_revision_, [self](const Status&) {
          if (self->finished_) return;
          // WrongNode from a node whose map is older than ours:
          // give it a moment to catch up.
          if (IsWrongNode(self->last_) && self->router_->map().revision <= self->sent_revision_) {
            self->PauseThen([self] { self->Next(); });
          } else {
            self->Next();
          }
        });
  }

  void Next() {
    ++attempt_;
    Attempt();
  }

  void Finish(Result<T> r) {
    if (finished_) return;
    finished_ = true;
    auto self = this->shared_from_this();  // the callback may drop the last other owner
    router_->Unregister(this);
    if (timer_) timer_->cancel();
    Callback<T> done = std::move(done_);
    done(std::move(r));
  }

  std::shared_ptr<ClusterRouter> router_;
  const std::string user_;
  const Kind kind_;
  Send send_;
  Callback<T> done_;
  int attempt_ = 0;
  std::string address_;         // of the current attempt
  uint64_t sent_revision_ = 0;  // of the map it went by
  Status last_;                 // the latest failure
  bool unknown_ = false;        // a write sent whose outcome is unknown
  std::optional<boost::asio::steady_timer> timer_;
  bool finished_ = false;
};

// A get answered stale: the other replicas in turn, for an answer that is
// not (or NotFound); the first answer when every one is stale or fails
// (ClusterClient::Impl::FreshGet's second half).
class FreshGetOp final : public Op, public std::enable_shared_from_this<FreshGetOp> {
 public:
  FreshGetOp(std::shared_ptr<ClusterRouter> router, std::string user, const GetOptions& options,
             GetResult first, Callback<GetResult> done)
      : router_(std::move(router)),
        user_(std::move(user)),
        options_(options),
        first_(std::move(first)),
        done_(std::move(done)) {}

  void Start() {
    router_->Register(this);
    order_ = FreshOrder(router_->map(), user_, router_->down);
    Ask();
  }
  void Abort(const Status& status) override { Finish(status); }

 private:
  void Ask() {
    const ClusterMap& map = router_->map();
    if (router_->closed() || !map.has_map() || k_ >= order_.size()) {
      Finish(std::move(first_));
      return;
    }
    const std::string address = order_[k_];
    auto self = shared_from_this();
    router_->Acquire(address, [self](Result<AsyncClient*> c) {
      if (self->finished_) return;
      if (!c.ok()) {
        ++self->k_;
        self->Ask();
        return;
      }
      (*c)->Get(self->user_, self->options_, [self](Result<GetResult> r) {
        if (self->finished_) return;
        if (r.ok() && !r->stale) {
          self->Finish(std::move(r));
          return;
        }
        ++self->k_;
        self->Ask();
      });
    });
  }

  void Finish(Result<GetResult> r) {
    if (finished_) return;
    finished_ = true;
    auto self = shared_from_this();
    router_->Unregister(this);
    Callback<GetResult> done = std::move(done_);
    done(std::move(r));
  }

  std::shared_ptr<ClusterRouter> router_;
  const std::string user_;
  const GetOptions options_;
  GetResult first_;
  Callback<GetResult> done_;
  std::vector<std::string> order_;  // the replicas to ask (FreshOrder)
  size_t k_ = 0;                    // the one asked next
  bool finished_ = false;
};

// A batch: entries grouped by node, each group one request, the groups side
// by side; the entries to retry (WrongNode and the rest, as Retryable says)
// go round again with a fresh map (ClusterClient::Impl::Scattered,
// asynchronously).
template <typename R, typename Entry>
class BatchOp final : public Op, public std::enable_shared_from_this<BatchOp<R, Entry>> {
 public:
  using Results = std::vector<Result<R>>;
  using Send = std::function<void(AsyncClient&, std::span<const Entry>, Callback<Results>)>;
  using UserOf = std::string_view (*)(const Entry&);

  BatchOp(std::shared_ptr<ClusterRouter> router, std::vector<Entry> entries, Kind kind,
          UserOf user_of, Send send, Callback<Results> done)
      : router_(std::move(router)),
        entries_(std::move(entries)),
        kind_(kind),
        user_of_(user_of),
        send_(std::move(send)),
        done_(std::move(done)),
        out_(entries_.size(), Result<R>(Status::Internal("not sent"))),
        unknown_(entries_.size(), false) {}

  void Start() {
    router_->Register(this);
    pending_.resize(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) pending_[i] = i;
    Round();
  }
  void Abort(const Status& status) override { Finish(status); }

 private:
  void PauseThen(std::function<void()> then) {
    if (!timer_) timer_.emplace(router_->io());
    timer_->expires_after(router_->Pause(attempt_));
    timer_->async_wait([self = this->shared_from_this(),
                        then = std::move(then)](const boost::system::error_code&) {
      if (!self->finished_) then();
    });
  }

  // Entries of one request, by their index in entries_.
  struct Group {
    std::string address;
    std::vector<size_t> indices;
  };

  void Round() {
    if (router_->closed()) return Finish(Closed());
    sent_revision_ = router_->map().revision;
    std::map<std::string, std::vector<size_t>> by_node;
    for (size_t i : pending_) {
      by_node[router_->AddressFor(user_of_(entries_[i]), attempt_)].push_back(i);
    }
    again_.clear();
    retry_reason_ = Status::OK();
    wrong_at_.clear();
    at_once_ = true;
    outstanding_ = by_node.size();
    // No group is answered inside this loop: connections answer later.
    for (auto& [address, indices] : by_node) {
      SendGroup(std::make_shared<Group>(Group{address, std::move(indices)}));
    }
  }

  void SendGroup(std::shared_ptr<Group> g) {
    auto self = this->shared_from_this();
    auto send = [self, g](AsyncClient& c) {
      auto answered = [self, g](Result<Results> r) { self->OnGroup(*g, std::move(r)); };
      if (g->indices.size() == self->entries_.size()) {  // all of them, in order
        self->send_(c, std::span<const Entry>(self->entries_), std::move(answered));
        return;
      }
      std::vector<Entry> part;
      part.reserve(g->indices.size());
      for (size_t i : g->indices) part.push_back(self->entries_[i]);
      self->send_(c, std::span<const Entry>(part), std::move(answered));
    };
    if (AsyncClient* c = router_->Direct(g->address)) {
      send(*c);
      return;
    }
    router_->Acquire(g->address, [self, g, send](Result<AsyncClient*> c) {
      if (self->finished_) return;
      if (!c.ok()) {
        self->OnGroup(*g, c.status());
        return;
      }
      send(**c);
    });
  }

  void OnGroup(const Group& g, Result<Results> r) {
    if (finished_) return;
    if (r.ok() && r->size() != g.indices.size()) {
      r = Status::Internal("batch of " + std::to_string(g.indices.size()) + " to " + g.address +
                           ": " + std::to_string(r->size()) + " results");
    }
    const ClusterMap& map = router_->map();
    if (!router_->closed()) router_->Heard(g.address, r.status());
    if (!r.ok()) {
      const Status s = r.status();
      if (!map.cluster && !IsLost(s)) {
        Finish(s);
        return;
      }
      const bool retry = Retryable(map, s, kind_);
      if (internal::IsWrite(kind_) && internal::IsUnknown(s)) {
        for (size_t i : g.indices) unknown_[i] = true;
      }
      for (size_t i : g.indices) {
        if (retry) {
          again_.push_back(i);
          at_once_ =
              at_once_ &&
              RetryAtOnce(s, g.address, router_->AddressFor(user_of_(entries_[i]), attempt_ + 1),
                          router_->down);
        } else {
          out_[i] = s;
        }
      }
      if (retry) retry_reason_ = s;
    } else {
      for (size_t k = 0; k < g.indices.size(); ++k) {
        Result<R>& one = (*r)[k];
        if (!one.ok() && internal::IsWrite(kind_) && internal::IsUnknown(one.status())) {
          unknown_[g.indices[k]] = true;
        }
        if (!one.ok() && Retryable(map, one.status(), kind_)) {
          again_.push_back(g.indices[k]);
          retry_reason_ = one.status();
          wrong_at_ = g.address;
          at_once_ = false;
        } else {
          out_[g.indices[k]] = std::move(one);
        }
      }
    }
    if (--outstanding_ == 0) EndRound();
  }

  void EndRound() {
    if (again_.empty()) return Finish(std::move(out_));
    if (router_->closed()) {
      for (size_t i : again_) out_[i] = Closed();
      return Finish(std::move(out_));
    }
    if (attempt_ + 1 >= router_->max_attempts()) {
      for (size_t i : again_) out_[i] = GaveUp(retry_reason_, unknown_[i], attempt_ + 1);
      return Finish(std::move(out_));
    }
    router_->retries += again_.size();
    auto self = this->shared_from_this();
    if (at_once_) {
      Next();
    } else if (IsWrongNode(retry_reason_)) {
      RefreshThenNext();
    } else {
      PauseThen([self] { self->RefreshThenNext(); });
    }
  }

  void RefreshThenNext() {
    auto self = this->shared_from_this();
    router_->Refresh(wrong_at_, sent_revision_, [self](const Status&) {
      if (self->finished_) return;
      if (IsWrongNode(self->retry_reason_) &&
          self->router_->map().revision <= self->sent_revision_) {
        self->PauseThen([self] { self->Next(); });
      } else {
        self->Next();
      }
    });
  }

  void Next() {
    pending_ = std::move(again_);
    again_.clear();
    std::sort(pending_.begin(), pending_.end());
    ++attempt_;
    Round();
  }

  void Finish(Result<Results> r) {
    if (finished_) return;
    finished_ = true;
    auto self = this->shared_from_this();
    router_->Unregister(this);
    if (timer_) timer_->cancel();
    Callback<Results> done = std::move(done_);
    done(std::move(r));
  }

  std::shared_ptr<ClusterRouter> router_;
  const std::vector<Entry> entries_;
  const Kind kind_;
  const UserOf user_of_;
  Send send_;
  Callback<Results> done_;
  Results out_;
  std::vector<bool> unknown_;    // per entry: a write sent whose outcome is unknown
  bool at_once_ = true;          // every entry to retry lost its node and has another up
  std::vector<size_t> pending_;  // this round's entries
  std::vector<size_t> again_;    // to send again after it
  size_t outstanding_ = 0;       // groups of this round not answered yet
  Status retry_reason_;
  std::string wrong_at_;        // a node that answered WrongNode for some entry
  uint64_t sent_revision_ = 0;  // of the map this round went by
  int attempt_ = 0;
  std::optional<boost::asio::steady_timer> timer_;
  bool finished_ = false;
};

std::string_view UserOfName(const std::string& user) { return user; }
std::string_view UserOfItem(const UpsertItem& item) { return item.user; }

template <typename T>
void PostFailure(boost::asio::io_context& io, Callback<T> done, Status status) {
  boost::asio::post(io, [done = std::move(done), status = std::move(status)] { done(status); });
}

// A single server's batch answer, as Scattered gives it: a lost connection
// fails each entry; an answer of the wrong length is Internal.
template <typename R>
Callback<std::vector<Result<R>>> AsScattered(size_t n, std::string address,
                                             Callback<std::vector<Result<R>>> done) {
  return
      [n, address = std::move(address), done = std::move(done)](Result<std::vector<Result<R>>> r) {
        if (r.ok() && r->size() != n) {
          r = Status::Internal("batch of " + std::to_string(n) + " to " + address + ": " +
                               std::to_string(r->size()) + " results");
        }
        if (!r.ok() && IsLost(r.status())) {
          r = std::vector<Result<R>>(n, Result<R>(r.status()));
        }
        done(std::move(r));
      };
}

}  // namespace
}  // namespace internal

using internal::BatchOp;
using internal::ClusterRouter;
using internal::FreshGetOp;
using internal::Kind;
using internal::PostFailure;
using internal::RoutedOp;

AsyncClusterClient::AsyncClusterClient(std::shared_ptr<ClusterRouter> router)
    : router_(std::move(router)) {}

AsyncClusterClient::~AsyncClusterClient() {
  if (router_) router_->Close();
}

void AsyncClusterClient::Connect(boost::asio::io_context& io,
                                 const AsyncClusterClientOptions& options,
                                 Callback<std::unique_ptr<AsyncClusterClient>> done) {
  auto router = std::make_shared<ClusterRouter>(io, options);
  router->Acquire(router->seed(), [router, done = std::move(done)](Result<AsyncClient*> c) {
    if (!c.ok()) {
      router->Close();
      done(c.status());
      return;
    }
    router->info = (*c)->server_info();
    (*c)->ClusterMap([router, done](Result<ClusterMap> m) {
      Status s = internal::TakeMap(router->mutable_map(), std::move(m));
      if (!s.ok()) {
        router->Close();
        done(s);
        return;
      }
      done(std::unique_ptr<AsyncClusterClient>(new AsyncClusterClient(router)));
    });
  });
}

const ClusterMap& AsyncClusterClient::map() const { return router_->map(); }
const ServerInfo& AsyncClusterClient::server_info() const { return router_->info; }
std::string AsyncClusterClient::NodeOf(std::string_view user) const {
  return router_->AddressFor(user, 0);
}
WriteId AsyncClusterClient::NewWriteId() { return router_->write_ids.Next(router_->map().log); }
size_t AsyncClusterClient::in_flight() const { return router_->in_flight(); }
uint64_t AsyncClusterClient::retries() const { return router_->retries; }
uint64_t AsyncClusterClient::stale_reads() const { return router_->stale_reads; }

void AsyncClusterClient::RefreshMap(Callback<std::monostate> done) {
  // Known: none yet, so that a fetch is made (after the one under way).
  router_->Refresh({}, UINT64_MAX, [done = std::move(done)](const Status& s) {
    if (s.ok()) {
      done(std::monostate{});
    } else {
      done(s);
    }
  });
}

void AsyncClusterClient::Close() { router_->Close(); }

// Each call: a closed client fails at once (posted); a single server's
// request goes straight to an open connection when there is one (nothing to
// route, retry or copy); anything else becomes an operation.

void AsyncClusterClient::Get(std::string_view user, const GetOptions& options,
                             Callback<GetResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed()))
      return c->Get(user, options, r.Counted(std::move(done)));
  }
  // Then, an answer marked stale: the other replicas (FreshGet).
  auto fresh = [router = router_, user = std::string(user), options,
                done = std::move(done)](Result<GetResult> first) mutable {
    if (!first.ok() || !first->stale || !router->map().has_map() || router->closed()) {
      done(std::move(first));
      return;
    }
    ++router->stale_reads;
    std::make_shared<FreshGetOp>(router, std::move(user), options, std::move(first).value(),
                                 std::move(done))
        ->Start();
  };
  std::make_shared<RoutedOp<GetResult>>(
      router_, std::string(user), Kind::kRead,
      [options](AsyncClient& c, const std::string& u, Callback<GetResult> cb) {
        c.Get(u, options, std::move(cb));
      },
      std::move(fresh))
      ->Start();
}

void AsyncClusterClient::BatchGet(std::span<const std::string> users, const GetOptions& options,
                                  Callback<BatchGetResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (users.empty()) {
    boost::asio::post(r.io(), [done = std::move(done)] { done(BatchGetResult{}); });
    return;
  }
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->BatchGet(
          users, options,
          r.Counted(internal::AsScattered<GetResult>(users.size(), r.seed(), std::move(done))));
    }
  }
  std::make_shared<BatchOp<GetResult, std::string>>(
      router_, std::vector<std::string>(users.begin(), users.end()), Kind::kRead,
      internal::UserOfName,
      [options](AsyncClient& c, std::span<const std::string> part, Callback<BatchGetResult> cb) {
        c.BatchGet(part, options, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::Count(std::string_view user, uint64_t id_from, uint64_t id_to,
                               Callback<uint32_t> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->Count(user, id_from, id_to, r.Counted(std::move(done)));
    }
  }
  std::make_shared<RoutedOp<uint32_t>>(
      router_, std::string(user), Kind::kRead,
      [id_from, id_to](AsyncClient& c, const std::string& u, Callback<uint32_t> cb) {
        c.Count(u, id_from, id_to, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                                UpsertMode mode, Callback<UpsertResult> done) {
  Upsert(user, segments, UpsertOptions{mode}, std::move(done));
}

void AsyncClusterClient::Upsert(std::string_view user, std::span<const SegmentUpdate> segments,
                                const UpsertOptions& how, Callback<UpsertResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->Upsert(user, segments, how, WriteId{}, r.Counted(std::move(done)));
    }
  }
  const WriteId id = NewWriteId();
  std::make_shared<RoutedOp<UpsertResult>>(
      router_, std::string(user), internal::WriteKind(id),
      [segs = std::vector<SegmentUpdate>(segments.begin(), segments.end()), how, id](
          AsyncClient& c, const std::string& u, Callback<UpsertResult> cb) {
        c.Upsert(u, segs, how, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::BatchUpsert(std::span<const UpsertItem> items,
                                     Callback<BatchUpsertResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (items.empty()) {
    boost::asio::post(r.io(), [done = std::move(done)] { done(BatchUpsertResult{}); });
    return;
  }
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->BatchUpsert(items, r.Counted(internal::AsScattered<UpsertResult>(
                                       items.size(), r.seed(), std::move(done))));
    }
  }
  std::vector<UpsertItem> named(items.begin(), items.end());
  Kind kind = Kind::kNamedWrite;
  for (UpsertItem& item : named) {
    if (item.write_id.empty()) item.write_id = NewWriteId();
    if (item.write_id.empty()) kind = Kind::kWrite;
  }
  std::make_shared<BatchOp<UpsertResult, UpsertItem>>(
      router_, std::move(named), kind, internal::UserOfItem,
      [](AsyncClient& c, std::span<const UpsertItem> part, Callback<BatchUpsertResult> cb) {
        c.BatchUpsert(part, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::Remove(std::string_view user, std::span<const uint64_t> ids,
                                Callback<uint32_t> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->Remove(user, ids, WriteId{}, r.Counted(std::move(done)));
    }
  }
  const WriteId id = NewWriteId();
  std::make_shared<RoutedOp<uint32_t>>(
      router_, std::string(user), internal::WriteKind(id),
      [list = std::vector<uint64_t>(ids.begin(), ids.end()), id](
          AsyncClient& c, const std::string& u, Callback<uint32_t> cb) {
        c.Remove(u, list, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::Trim(std::string_view user, UnixSeconds before,
                              Callback<TrimResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->Trim(user, before, WriteId{}, r.Counted(std::move(done)));
    }
  }
  const WriteId id = NewWriteId();
  std::make_shared<RoutedOp<TrimResult>>(
      router_, std::string(user), internal::WriteKind(id),
      [before, id](AsyncClient& c, const std::string& u, Callback<TrimResult> cb) {
        c.Trim(u, before, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::Expire(std::string_view user, std::span<const uint64_t> ids,
                                const ExpireSpec& expiry, Callback<ExpireResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->Expire(user, ids, expiry, WriteId{}, r.Counted(std::move(done)));
    }
  }
  const WriteId id = NewWriteId();
  std::make_shared<RoutedOp<ExpireResult>>(
      router_, std::string(user), internal::WriteKind(id),
      [list = std::vector<uint64_t>(ids.begin(), ids.end()), expiry, id](
          AsyncClient& c, const std::string& u, Callback<ExpireResult> cb) {
        c.Expire(u, list, expiry, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::Delete(std::string_view user, Callback<bool> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->Delete(user, WriteId{}, r.Counted(std::move(done)));
    }
  }
  const WriteId id = NewWriteId();
  std::make_shared<RoutedOp<bool>>(
      router_, std::string(user), internal::WriteKind(id),
      [id](AsyncClient& c, const std::string& u, Callback<bool> cb) {
        c.Delete(u, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

// The field writes: each as Delete, one write ID per call (the caller's, or
// one made here), resent with it. Without a log nothing names a write: a
// caller's ID would make a lost answer's write be sent again and applied
// twice, so it is dropped.
namespace {
WriteId IdFor(ClusterRouter& r, const WriteId& given) {
  if (!r.map().log) return WriteId{};
  return given.empty() ? r.write_ids.Next(true) : given;
}
}  // namespace

void AsyncClusterClient::FieldSet(std::string_view user, std::span<const FieldUpdate> fields,
                                  const WriteId& write_id, Callback<FieldWriteResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->FieldSet(user, fields, write_id, r.Counted(std::move(done)));
    }
  }
  const WriteId id = IdFor(r, write_id);
  std::make_shared<RoutedOp<FieldWriteResult>>(
      router_, std::string(user), internal::WriteKind(id),
      [list = std::vector<FieldUpdate>(fields.begin(), fields.end()), id](
          AsyncClient& c, const std::string& u, Callback<FieldWriteResult> cb) {
        c.FieldSet(u, list, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::FieldDelete(std::string_view user, std::span<const std::string> names,
                                     const WriteId& write_id, Callback<FieldWriteResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->FieldDelete(user, names, write_id, r.Counted(std::move(done)));
    }
  }
  const WriteId id = IdFor(r, write_id);
  std::make_shared<RoutedOp<FieldWriteResult>>(
      router_, std::string(user), internal::WriteKind(id),
      [list = std::vector<std::string>(names.begin(), names.end()), id](
          AsyncClient& c, const std::string& u, Callback<FieldWriteResult> cb) {
        c.FieldDelete(u, list, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::FieldIncrement(std::string_view user,
                                        const segstore::FieldIncrement& increment,
                                        const WriteId& write_id, Callback<IncrementResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->FieldIncrement(user, increment, write_id, r.Counted(std::move(done)));
    }
  }
  const WriteId id = IdFor(r, write_id);
  std::make_shared<RoutedOp<IncrementResult>>(
      router_, std::string(user), internal::WriteKind(id),
      [increment, id](AsyncClient& c, const std::string& u, Callback<IncrementResult> cb) {
        c.FieldIncrement(u, increment, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::FieldMax(std::string_view user, const FieldUpdate& field,
                                  const WriteId& write_id, Callback<FieldMaxResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->FieldMax(user, field, write_id, r.Counted(std::move(done)));
    }
  }
  const WriteId id = IdFor(r, write_id);
  std::make_shared<RoutedOp<FieldMaxResult>>(
      router_, std::string(user), internal::WriteKind(id),
      [field, id](AsyncClient& c, const std::string& u, Callback<FieldMaxResult> cb) {
        c.FieldMax(u, field, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::SendLinkStep(const LinkStep& step, Callback<LinkStepResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->SendLinkStep(step, WriteId{}, r.Counted(std::move(done)));
    }
  }
  const WriteId id = NewWriteId();
  std::make_shared<RoutedOp<LinkStepResult>>(
      router_, step.user, internal::WriteKind(id),
      [step, id](AsyncClient& c, const std::string&, Callback<LinkStepResult> cb) {
        c.SendLinkStep(step, id, std::move(cb));
      },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::ReadRecords(std::span<const std::string> users,
                                     Callback<std::vector<Result<StoredRecord>>> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (users.empty()) {
    boost::asio::post(r.io(),
                      [done = std::move(done)] { done(std::vector<Result<StoredRecord>>()); });
    return;
  }
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed()))
      return c->ReadRecords(users, r.Counted(std::move(done)));
  }
  std::make_shared<BatchOp<StoredRecord, std::string>>(
      router_, std::vector<std::string>(users.begin(), users.end()), Kind::kRead,
      internal::UserOfName,
      [](AsyncClient& c, std::span<const std::string> part,
         Callback<std::vector<Result<StoredRecord>>> cb) { c.ReadRecords(part, std::move(cb)); },
      std::move(done))
      ->Start();
}

void AsyncClusterClient::Link(std::string_view user, std::string_view master, uint32_t ttl,
                              Callback<LinkResult> done) {
  ClusterRouter& r = *router_;
  if (r.closed()) return PostFailure(r.io(), std::move(done), internal::Closed());
  if (!r.map().cluster) {
    if (AsyncClient* c = r.Direct(r.seed())) {
      return c->Link(user, master, ttl, r.Counted(std::move(done)));
    }
  }
  std::make_shared<RoutedOp<LinkResult>>(
      router_, std::string(user), Kind::kWrite,
      [master = std::string(master), ttl](AsyncClient& c, const std::string& u,
                                          Callback<LinkResult> cb) {
        c.Link(u, master, ttl, std::move(cb));
      },
      std::move(done))
      ->Start();
}

}  // namespace segstore::client
