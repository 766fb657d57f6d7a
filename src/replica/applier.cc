#include "replica/applier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bitset>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <set>
#include <unordered_map>

#include "replica/checkpoint.h"
#include "replica/entry.h"
#include "replica/write_ids.h"
#include "segstore/routing.h"

namespace segstore::replica {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t WallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Outcomes that are the write's own answer, the same on every replica. Any
// other failure is this node's trouble (its device), and the entry is tried
// again rather than skipped.
bool IsWritesOwnAnswer(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk:
    case Status::Code::kNotFound:
    case Status::Code::kInvalidArgument:
    case Status::Code::kLimitExceeded:
      return true;
    default:
      return false;
  }
}

}  // namespace

// The applier thread's state: everything here is touched by that thread only.
class Applier::Loop {
 public:
  Loop(Applier* a, std::unique_ptr<profile::ProfileSession> session)
      : a_(a), o_(a->options_), session_(std::move(session)) {
    const size_t per_lane = std::max<size_t>(1, o_.window_max_ids / o_.log_partitions);
    lanes_.reserve(o_.log_partitions);
    for (uint32_t l = 0; l < o_.log_partitions; ++l)
      lanes_.emplace_back(o_.window_seconds, per_lane);
    // Entries are decoded under generous limits, the same on every node: an
    // entry one node can read, every node reads. (What a node then refuses,
    // a profile over its max_segments say, is the write's answer.)
    limits_.max_key_bytes = 65535;
    limits_.max_list = 1u << 24;
  }

  // Reads every log partition's checkpoint and assigns the reader.
  Status Begin() {
    std::vector<std::pair<uint32_t, int64_t>> from;
    for (uint32_t l = 0; l < lanes_.size(); ++l) {
      Lane& lane = lanes_[l];
      Result<storage::Record> r = session_->worker().GetSync(CheckpointKey(l));
      Checkpoint c;
      if (r.ok()) {
        if (Status s = DecodeCheckpoint(r->body(), &c); !s.ok()) {
          spdlog::error("replica: log partition {}: {}; replaying it from the log's start", l,
                        s.ToString());
          c = Checkpoint{};
        }
      } else if (!r.status().IsNotFound()) {
        return r.status().WithContext(fmt::format("reading the checkpoint of log partition {}", l));
      }
      lane.next = c.next;
      a_->applied_next_[l].store(lane.next, std::memory_order_release);
      lane.checkpointed = c;
      for (const auto& [partition, next] : c.partitions) lane.partition_next[partition] = next;
      // From the window's start: the entries before `next` go through the
      // window of write IDs, not applied.
      lane.expected = WindowStart(lane);
      from.emplace_back(l, lane.expected);
    }
    return a_->reader_->Assign(from);
  }

  Status Run() {
    const int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) return Status::IOError(fmt::format("epoll_create1: {}", std::strerror(errno)));
    for (int fd : {a_->reader_->event_fd(), session_->worker().event_fd(), a_->wake_fd_}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    }
    next_checkpoint_ = SteadyClock::now() + o_.checkpoint_interval;
    while (!a_->stopping_.load(std::memory_order_acquire)) {
      epoll_event events[4];
      const int n = epoll_wait(epfd, events, 4, 20);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == a_->wake_fd_) {
          uint64_t v;
          (void)!read(a_->wake_fd_, &v, sizeof v);
        } else if (events[i].data.fd == session_->worker().event_fd()) {
          session_->worker().OnEvent();  // clears its eventfd, runs what completed
        }
      }
      Turn();
    }
    Finish();
    close(epfd);
    return Status::OK();
  }

 private:
  // An entry read and not yet applied.
  struct Queued {
    int64_t offset = 0;
    int64_t timestamp_ms = -1;
    std::string value;
  };
  struct Lane {
    Lane(uint32_t window_seconds, size_t window_entries) : window(window_seconds, window_entries) {}
    int64_t next = 0;       // the next offset to apply
    int64_t expected = 0;   // the next offset the reader should deliver
    int64_t admitted = -1;  // entries up to this offset went through the window
    std::deque<Queued> queue;
    bool busy = false;                   // the front entry is being applied
    SteadyClock::time_point retry_at{};  // after a failure to apply: not before
    bool failing = false;
    // The log went back past this lane's position (recreated or truncated):
    // nothing it delivers can be trusted; nothing more is applied.
    bool broken = false;
    bool lost = false;  // entries this node needed were gone from the log
    // The partitions held when entries they needed were gone: stale until
    // copied afresh (Follow) or no longer held. A node that held none (one
    // joining, whose log partitions retention has passed the start of) is
    // not stale for it.
    std::set<uint32_t> lost_partitions;
    bool caught_up = false;
    int64_t target = -1;  // caught up once `next` reaches the first end heard of
    int64_t end = -1;
    Checkpoint checkpointed;  // as last written
    // Routing partitions applied past `next` (a checkpoint said so).
    std::unordered_map<uint32_t, int64_t> partition_next;
    WriteIdWindow window;
    // Offsets of entries the window judged duplicates, the last
    // kDuplicateMemory offsets' worth: a partition catching up by reading
    // the log again (Follow) skips them as every replica did.
    std::set<int64_t> duplicates;
    // Partitions reading entries before `next` again (Follow), by the
    // offset they read from.
    std::unordered_map<uint32_t, int64_t> catching;
    // (when, the log's end then), for ends not reached yet: the lag.
    std::deque<std::pair<SteadyClock::time_point, int64_t>> behind;
  };
  // At most this many marks of `behind` (ticks are 100 ms apart: minutes of
  // lag); past it the newest is replaced, so the oldest, the lag, stays.
  static constexpr size_t kMaxBehindMarks = 4096;
  static constexpr int64_t kDuplicateMemory = int64_t{1} << 22;

  void Turn() {
    session_->Poll();
    TakeFollowRequests();
    Read();
    for (uint32_t l = 0; l < lanes_.size(); ++l) Advance(l);
    FinishFollows();
    session_->Poll();
    const auto now = SteadyClock::now();
    if (now >= next_tick_) {
      next_tick_ = now + std::chrono::milliseconds(100);
      Tick(now);
    }
  }

  // Takes what the reader fetched, up to the queue bounds, checking that
  // each log partition's offsets follow on.
  void Read() {
    if (queued_ >= o_.max_queued || queued_bytes_ >= o_.max_queued_bytes) return;
    Result<size_t> got = a_->reader_->Poll(o_.max_queued - queued_, [this](const log::LogEntry& e) {
      if (e.partition >= lanes_.size()) return;
      const uint32_t l = e.partition;
      Lane& lane = lanes_[l];
      if (lane.broken) return;
      if (e.offset < lane.expected) {
        // Offsets went back: the log was truncated or made anew under this
        // node. Its positions mean nothing any more.
        spdlog::error(
            "replica: log partition {}: the log delivered offset {} where {} was due: it was "
            "truncated or recreated; this node applies nothing more of it and marks its "
            "partitions stale",
            l, e.offset, lane.expected);
        lane.broken = true;
        return;
      }
      if (e.offset > lane.expected && !lane.catching.empty()) {
        // A partition reading the log again needed entries it no longer holds.
        FailCatching(l, lane.expected, e.offset);
      }
      if (e.offset > lane.expected && e.offset > lane.next) {
        const int64_t from = std::max(lane.expected, lane.next);
        spdlog::error(
            "replica: log partition {}: offsets {} to {} are no longer in the log; this node's "
            "copy of its partitions misses them and is marked stale",
            l, from, e.offset - 1);
        stats_.lost_entries += static_cast<uint64_t>(e.offset - from);
        for (uint32_t q = l; q < kPartitions; q += o_.log_partitions) {
          if (Holds(q)) lane.lost_partitions.insert(q);
        }
        lane.lost = !lane.lost_partitions.empty();
        // The lost entries count as passed: what follows is applied.
        if (lane.next < e.offset) lane.next = e.offset;
      }
      lane.expected = e.offset + 1;
      lane.queue.push_back(Queued{e.offset, e.timestamp_ms, std::string(e.value)});
      ++queued_;
      queued_bytes_ += e.value.size();
    });
    if (!got.ok()) spdlog::error("replica: reading the log: {}", got.status().ToString());
  }

  bool Holds(uint32_t partition) {
    const uint64_t g = a_->board_->generation();
    if (g != view_generation_) {
      view_ = a_->board_->view();
      view_generation_ = g;
    }
    return (view_ != nullptr && view_->held.test(partition)) || following_.test(partition);
  }

  // Applies the log partition's entries in order until one is in flight.
  void Advance(uint32_t l) {
    Lane& lane = lanes_[l];
    if (lane.busy || a_->stopping_.load(std::memory_order_relaxed)) return;
    if (lane.failing && SteadyClock::now() < lane.retry_at) return;
    while (!lane.busy && !lane.queue.empty()) {
      Queued& q = lane.queue.front();
      WriteEntry entry;
      if (Status s = DecodeEntry(q.value, limits_, &entry); !s.ok()) {
        // Unreadable on every node alike: skipped everywhere.
        if (q.offset < lane.next) {
          Pop(lane);
          continue;
        }
        ++stats_.undecodable;
        spdlog::error("replica: log partition {} offset {}: skipped: {}", l, q.offset,
                      s.ToString());
        Done(lane, q.offset);
        continue;
      }
      // Every entry goes through the window once, in order, applied here or
      // not: every replica then judges retries alike.
      WriteAnswer earlier;
      bool duplicate = false;
      if (q.offset > lane.admitted) {
        lane.admitted = q.offset;
        duplicate =
            lane.window.Admit(entry.write_id, entry.user(), entry.now, entry.op(), &earlier);
        if (duplicate) lane.duplicates.insert(q.offset);
      }
      const uint32_t partition = PartitionOf(entry.user());
      if (q.offset < lane.next) {
        // Before `next`: applied already, but for a partition reading the
        // log again (Follow) from before it; otherwise the window only.
        auto c = lane.catching.find(partition);
        if (c != lane.catching.end() && q.offset >= c->second &&
            lane.duplicates.count(q.offset) == 0) {
          Apply(l, q.offset, std::move(entry), /*replay=*/true);
        } else {
          Pop(lane);
        }
        continue;
      }
      auto ahead = lane.partition_next.find(partition);
      if (!Holds(partition) || (ahead != lane.partition_next.end() && q.offset < ahead->second)) {
        ++stats_.not_held;
        Done(lane, q.offset);
        continue;
      }
      if (duplicate) {
        ++stats_.duplicates;
        Answer(entry, earlier);
        Done(lane, q.offset);
        continue;
      }
      Apply(l, q.offset, std::move(entry), /*replay=*/false);
    }
  }

  // Starts applying the front entry of lane `l`; Applied() ends it.
  void Apply(uint32_t l, int64_t offset, WriteEntry entry, bool replay) {
    Lane& lane = lanes_[l];
    lane.busy = true;
    const profile::WriteContext w{entry.now, static_cast<uint64_t>(offset) + 1};
    auto at = std::make_shared<const WriteEntry>(std::move(entry));
    // What the op gives, as a WriteAnswer field.
    const auto finish = [this, l, offset, at, replay](auto field) {
      return [this, l, offset, at, replay, field](auto result) {
        WriteAnswer a;
        if (result.ok()) {
          field(a, *result);
        } else {
          a.status = result.status();
        }
        if (replay) {
          Replayed(l, offset, a.status);
        } else {
          Applied(l, offset, *at, std::move(a));
        }
      };
    };
    std::visit(
        [&](const auto& r) {
          using R = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<R, proto::UpsertRequest>) {
            session_->Upsert(w, r.user, r.segments, r.options(),
                             finish([](WriteAnswer& a, const UpsertResult& v) { a.upsert = v; }));
          } else if constexpr (std::is_same_v<R, proto::RemoveRequest>) {
            session_->Remove(w, r.user, r.ids,
                             finish([](WriteAnswer& a, uint32_t v) { a.removed = v; }));
          } else if constexpr (std::is_same_v<R, proto::TrimRequest>) {
            session_->Trim(w, r.user, r.before,
                           finish([](WriteAnswer& a, const TrimResult& v) { a.trim = v; }));
          } else if constexpr (std::is_same_v<R, proto::LinkStepRequest>) {
            session_->ApplyLinkStep(
                w, r.step, finish([](WriteAnswer& a, const LinkStepResult& v) { a.step = v; }));
          } else if constexpr (std::is_same_v<R, proto::FieldSetRequest>) {
            session_->FieldSet(w, r.user, r.fields, finish([](WriteAnswer& a, FieldWriteResult v) {
                                 a.field_write = v;
                               }));
          } else if constexpr (std::is_same_v<R, proto::FieldDeleteRequest>) {
            session_->FieldDelete(
                w, r.user, r.names,
                finish([](WriteAnswer& a, FieldWriteResult v) { a.field_write = v; }));
          } else if constexpr (std::is_same_v<R, proto::FieldIncrementRequest>) {
            session_->FieldIncrement(
                w, r.user, r.increment,
                finish([](WriteAnswer& a, IncrementResult v) { a.increment = v; }));
          } else if constexpr (std::is_same_v<R, proto::FieldMaxRequest>) {
            session_->FieldMax(w, r.user, r.field, finish([](WriteAnswer& a, FieldMaxResult& v) {
                                 a.field_max = std::move(v);
                               }));
          } else if constexpr (std::is_same_v<R, proto::ExpireRequest>) {
            session_->Expire(
                w, r.user, r.ids, r.spec(),
                finish([](WriteAnswer& a, ExpireResult& v) { a.expire = std::move(v); }));
          } else {
            static_assert(std::is_same_v<R, proto::DeleteRequest>);
            session_->Delete(w, r.user, finish([](WriteAnswer& a, bool v) { a.deleted = v; }));
          }
        },
        at->request);
  }

  void Applied(uint32_t l, int64_t offset, const WriteEntry& entry, WriteAnswer answer) {
    Lane& lane = lanes_[l];
    lane.busy = false;
    if (answer.status.code() == Status::Code::kConflict) {
      // Its user's record already holds this position or a later one: it
      // was applied before a restart. Its answer is not known any more.
      ++stats_.replayed;
      WriteAnswer before;
      before.duplicate = true;
      Answer(entry, before);
      lane.failing = false;
      Done(lane, offset);
      return;
    }
    if (answer.status.IsCorruption()) {
      // The user's record is damaged here (counted and logged by the
      // engine): this copy of it cannot follow the log. Skipped, so the rest
      // of the log partition goes on; its reads answer Corruption anyway.
      ++stats_.apply_failures;
      spdlog::error("replica: log partition {} offset {}: not applied: {}", l, offset,
                    answer.status.ToString());
      Answer(entry, answer);
      Done(lane, offset);
      return;
    }
    if (!IsWritesOwnAnswer(answer.status)) {
      // This node's trouble (its device): try the same entry again shortly;
      // its reads are stale meanwhile. Waiting clients get InDoubt at their
      // deadline.
      ++stats_.apply_failures;
      if (!lane.failing) {
        spdlog::error(
            "replica: log partition {} offset {}: cannot apply (retrying every second): {}", l,
            offset, answer.status.ToString());
      }
      lane.failing = true;
      lane.retry_at = SteadyClock::now() + std::chrono::seconds(1);
      return;
    }
    lane.failing = false;
    ++stats_.applied;
    lane.window.Answered(answer);
    Answer(entry, answer);
    Done(lane, offset);
  }

  // An entry applied again for a partition catching up: nobody waits for it,
  // and the window has its answer already.
  void Replayed(uint32_t l, int64_t offset, const Status& status) {
    Lane& lane = lanes_[l];
    lane.busy = false;
    if (status.ok() || status.code() == Status::Code::kConflict || IsWritesOwnAnswer(status) ||
        status.IsCorruption()) {
      if (status.IsCorruption()) {
        ++stats_.apply_failures;
        spdlog::error("replica: log partition {} offset {}: not applied again: {}", l, offset,
                      status.ToString());
      }
      ++stats_.replays;
      lane.failing = false;
      Pop(lane);
      return;
    }
    ++stats_.apply_failures;
    if (!lane.failing) {
      spdlog::error("replica: log partition {} offset {}: cannot apply again (retrying): {}", l,
                    offset, status.ToString());
    }
    lane.failing = true;
    lane.retry_at = SteadyClock::now() + std::chrono::seconds(1);
  }

  // The client waiting here for `entry`, if it is this node's, gets `answer`.
  void Answer(const WriteEntry& entry, const WriteAnswer& answer) {
    if (entry.origin == o_.origin && o_.origin != 0) a_->pending_->Settle(entry.ticket, answer);
  }

  // The front entry of `lane` (at `offset`) is done with.
  void Done(Lane& lane, int64_t offset) {
    lane.next = offset + 1;
    a_->applied_next_[&lane - lanes_.data()].store(lane.next, std::memory_order_release);
    Pop(lane);
  }
  void Pop(Lane& lane) {
    queued_bytes_ -= lane.queue.front().value.size();
    lane.queue.pop_front();
    --queued_;
  }

  // Where a restart must read this lane from to rebuild its window of write
  // IDs: the window's entries before `next`.
  int64_t WindowStart(const Lane& lane) const {
    return std::max<int64_t>(0, lane.next - static_cast<int64_t>(lane.window.max_entries()));
  }

  // Housekeeping, ten times a second: lag and staleness, the window, waiters
  // past their deadline, checkpoints, the stats copy.
  void Tick(SteadyClock::time_point now) {
    WriteAnswer late;
    late.status = Status::InDoubt(
        "the write reached the cluster's log (or may have) but this node did not apply it in "
        "time; retry it with the same write_id to learn its outcome");
    stats_.expired_waiters += a_->pending_->Expire(now, late);

    const bool log_ok = a_->reader_->health(o_.max_lag).ok();
    bool lease_ok = true;
    if (o_.lease_age_seconds) {
      const double age = o_.lease_age_seconds();
      lease_ok = age >= 0 && age <= o_.lease_ttl_seconds;
    }
    for (const log::PartitionPosition& p : a_->reader_->positions()) {
      if (p.partition >= lanes_.size()) continue;
      Lane& lane = lanes_[p.partition];
      lane.end = p.end;
      // A partition reading the log again from an offset retention has
      // passed, on a log partition with nothing newer to deliver.
      if (p.start >= 0 && !lane.catching.empty()) {
        const bool gone = std::any_of(lane.catching.begin(), lane.catching.end(),
                                      [&](const auto& c) { return c.second < p.start; });
        if (gone) FailCatching(p.partition, lane.expected, p.start);
      }
    }
    const int64_t wall = WallMillis();
    bool all_caught_up = true;
    std::vector<LaneStats> lane_stats(lanes_.size());
    for (uint32_t l = 0; l < lanes_.size(); ++l) {
      Lane& lane = lanes_[l];
      if (lane.target < 0 && lane.end >= 0) lane.target = lane.end;  // the end at the start
      if (!lane.caught_up && lane.target >= 0 && lane.next >= lane.target) lane.caught_up = true;
      all_caught_up = all_caught_up && lane.caught_up;
      // Lag, two ways, the larger: how long ago the log had an end this
      // lane has not reached yet (whether or not those entries were
      // fetched), and how old the oldest entry read and not applied is.
      if (lane.end > lane.next && (lane.behind.empty() || lane.behind.back().second < lane.end)) {
        if (lane.behind.size() == kMaxBehindMarks) lane.behind.pop_back();
        lane.behind.emplace_back(now, lane.end);
      }
      while (!lane.behind.empty() && lane.next >= lane.behind.front().second) {
        lane.behind.pop_front();
      }
      lane.duplicates.erase(lane.duplicates.begin(),
                            lane.duplicates.lower_bound(lane.next - kDuplicateMemory));
      for (auto q = lane.lost_partitions.begin(); q != lane.lost_partitions.end();) {
        q = Holds(*q) ? std::next(q) : lane.lost_partitions.erase(q);
      }
      lane.lost = !lane.lost_partitions.empty();
      double lag = 0;
      if (!lane.behind.empty()) {
        lag = std::chrono::duration<double>(now - lane.behind.front().first).count();
      }
      if (!lane.queue.empty() && lane.queue.front().offset >= lane.next &&
          lane.queue.front().timestamp_ms >= 0) {
        lag = std::max(lag, static_cast<double>(wall - lane.queue.front().timestamp_ms) / 1e3);
      }
      const bool stale = !lane.caught_up || lane.lost || lane.broken || !log_ok || !lease_ok ||
                         lane.failing || lag * 1e3 > static_cast<double>(o_.max_lag.count());
      a_->stale_[l].store(stale, std::memory_order_relaxed);
      lane_stats[l] = LaneStats{lane.next, lane.end, lane.checkpointed.next, lag, stale};
    }
    if (now >= next_checkpoint_) {
      next_checkpoint_ = now + o_.checkpoint_interval;
      Checkpoints();
    }
    {
      std::lock_guard lock(a_->stats_mu_);
      a_->stats_ = stats_;
      a_->stats_.window_ids = 0;
      for (const Lane& lane : lanes_) a_->stats_.window_ids += lane.window.size();
      a_->stats_.caught_up = all_caught_up;
      a_->stats_.log_healthy = log_ok;
      a_->stats_.lanes = std::move(lane_stats);
    }
    // After the stats: whoever sees caught_up() sees the figures of then.
    if (all_caught_up && !a_->caught_up_.load(std::memory_order_relaxed)) {
      spdlog::info("replica: caught up with the log ({} log partitions)", lanes_.size());
      a_->caught_up_.store(true, std::memory_order_release);
    }
  }

  // Follow and Unfollow, in the order they came. A request for a lane whose
  // front entry is being applied waits for the next turn (a rewind drops
  // the lane's queue).
  void TakeFollowRequests() {
    std::vector<FollowRequest> requests;
    {
      std::lock_guard lock(a_->follow_mu_);
      if (a_->follow_requests_.empty()) return;
      requests.swap(a_->follow_requests_);
    }
    std::vector<FollowRequest> later;
    std::vector<uint32_t> rewound;
    std::vector<std::function<void(Status)>> unfollowed;  // answered once following() says so
    for (FollowRequest& r : requests) {
      const uint32_t l = r.partition % o_.log_partitions;
      Lane& lane = lanes_[l];
      if (lane.busy || !later.empty()) {
        later.push_back(std::move(r));
        continue;
      }
      if (!r.follow) {
        following_.reset(r.partition);
        lane.partition_next.erase(r.partition);
        lane.catching.erase(r.partition);
        for (auto it = follows_.begin(); it != follows_.end();) {
          if (it->partition != r.partition) {
            ++it;
            continue;
          }
          unfollowed.push_back(std::move(it->done));
          it = follows_.erase(it);
        }
        continue;
      }
      following_.set(r.partition);
      lane.catching.erase(r.partition);
      lane.partition_next.erase(r.partition);
      Follow f{r.partition, std::max(r.from, lane.next), std::move(r.done)};
      if (r.from >= lane.next) {
        // The copy is ahead of this node: its entries before `from` are in it.
        if (r.from > lane.next) lane.partition_next[r.partition] = r.from;
      } else {
        // The copy is behind: read the log again from `from` for it.
        lane.catching[r.partition] = r.from;
        // From where it is reading, if that is earlier: entries queued for
        // another partition catching up are read again too.
        const int64_t reading = lane.queue.empty() ? lane.expected : lane.queue.front().offset;
        if (r.from < lane.expected) {
          queued_ -= lane.queue.size();
          for (const Queued& q : lane.queue) queued_bytes_ -= q.value.size();
          lane.queue.clear();
          lane.expected = std::min(r.from, reading);
          rewound.push_back(l);
        }
      }
      follows_.push_back(std::move(f));
    }
    if (!rewound.empty()) {
      std::vector<std::pair<uint32_t, int64_t>> from;
      for (uint32_t l = 0; l < lanes_.size(); ++l) from.emplace_back(l, lanes_[l].expected);
      if (Status s = a_->reader_->Assign(from); !s.ok()) {
        spdlog::error("replica: reading the log again: {}", s.ToString());
      }
      stats_.rewinds += rewound.size();
    }
    if (!later.empty()) {
      std::lock_guard lock(a_->follow_mu_);
      a_->follow_requests_.insert(a_->follow_requests_.begin(),
                                  std::make_move_iterator(later.begin()),
                                  std::make_move_iterator(later.end()));
    }
    PublishFollowing();
    for (auto& done : unfollowed) done(Status::Unavailable("the partition was unfollowed"));
  }

  // A partition reading `lane` again needed offsets from `expected` to
  // `got` - 1, which the log no longer holds.
  void FailCatching(uint32_t l, int64_t expected, int64_t got) {
    Lane& lane = lanes_[l];
    std::vector<std::function<void(Status)>> failed;
    for (auto c = lane.catching.begin(); c != lane.catching.end();) {
      if (c->second >= got) {
        ++c;
        continue;
      }
      const uint32_t partition = c->first;
      spdlog::error(
          "replica: partition {}: the log no longer holds offsets {} to {} of log partition {}, "
          "which its copy needs: it must be copied again",
          partition, expected, got - 1, l);
      following_.reset(partition);
      c = lane.catching.erase(c);
      for (auto it = follows_.begin(); it != follows_.end();) {
        if (it->partition != partition) {
          ++it;
          continue;
        }
        failed.push_back(std::move(it->done));
        it = follows_.erase(it);
      }
    }
    PublishFollowing();
    for (auto& done : failed) {
      done(Status::NotFound("the log no longer holds the entries the copy needs"));
    }
  }

  // Follows whose partition has applied what it had to: flushed, then done.
  void FinishFollows() {
    for (auto it = follows_.begin(); it != follows_.end();) {
      const uint32_t l = it->partition % o_.log_partitions;
      const Lane& lane = lanes_[l];
      // Where the lane is reading: entries before it are done with.
      const int64_t reading = lane.queue.empty() ? lane.expected : lane.queue.front().offset;
      if (lane.next < it->until || reading < it->until || (lane.busy && reading < lane.next)) {
        ++it;
        continue;
      }
      lanes_[l].catching.erase(it->partition);
      lanes_[l].lost_partitions.erase(it->partition);  // a fresh copy
      auto done = std::make_shared<std::function<void(Status)>>(std::move(it->done));
      it = follows_.erase(it);
      session_->worker().Flush([done](Status s) {
        (*done)(s.ok() ? s : Status::Unavailable("flushing the copy: " + std::string(s.message())));
      });
    }
  }

  void PublishFollowing() {
    std::vector<uint16_t> list;
    for (uint32_t p = 0; p < kPartitions; ++p) {
      if (following_.test(p)) list.push_back(static_cast<uint16_t>(p));
    }
    std::lock_guard lock(a_->follow_mu_);
    a_->following_ = std::move(list);
  }

  // Records each lane's progress once everything applied so far is on the
  // device: flush first, then write what had been applied before the flush.
  void Checkpoints() {
    if (checkpoint_in_flight_) return;
    auto snapshot = std::make_shared<std::vector<Checkpoint>>();
    bool changed = false;
    for (Lane& lane : lanes_) {
      Checkpoint c;
      c.next = lane.next;
      c.window_start = WindowStart(lane);
      for (const auto& [partition, next] : lane.partition_next) {
        if (next > lane.next) c.partitions.emplace_back(partition, next);
      }
      std::sort(c.partitions.begin(), c.partitions.end());
      changed = changed || !(c == lane.checkpointed);
      snapshot->push_back(std::move(c));
    }
    if (!changed) return;
    checkpoint_in_flight_ = true;
    session_->worker().Flush([this, snapshot](Status s) {
      if (!s.ok()) {
        checkpoint_in_flight_ = false;
        spdlog::error("replica: flush before a checkpoint failed: {}", s.ToString());
        return;
      }
      auto remaining = std::make_shared<size_t>(0);
      for (uint32_t l = 0; l < lanes_.size(); ++l) {
        if ((*snapshot)[l] == lanes_[l].checkpointed) continue;
        ++*remaining;
        session_->worker().Put(CheckpointKey(l), EncodeCheckpoint((*snapshot)[l]), 0, 0,
                               [this, l, snapshot, remaining](Result<storage::WriteOutcome> r) {
                                 if (r.ok()) {
                                   lanes_[l].checkpointed = (*snapshot)[l];
                                   ++stats_.checkpoints;
                                 } else {
                                   spdlog::error("replica: checkpoint of log partition {}: {}", l,
                                                 r.status().ToString());
                                 }
                                 if (--*remaining == 0) checkpoint_in_flight_ = false;
                               });
      }
      if (*remaining == 0) checkpoint_in_flight_ = false;
    });
  }

  // Stopping: lets the entries in flight finish, then a last checkpoint.
  void Finish() {
    for (Follow& f : follows_) f.done(Status::Unavailable("the applier is stopping"));
    follows_.clear();
    a_->DropFollowRequests();
    const auto deadline = SteadyClock::now() + std::chrono::seconds(10);
    const auto busy = [this] {
      return checkpoint_in_flight_ ||
             std::any_of(lanes_.begin(), lanes_.end(), [](const Lane& l) { return l.busy; });
    };
    while (busy() && SteadyClock::now() < deadline) session_->Wait(std::chrono::milliseconds(10));
    Checkpoints();
    while (busy() && SteadyClock::now() < deadline) session_->Wait(std::chrono::milliseconds(10));
    (void)session_->worker().FlushSync();
  }

  Applier* const a_;
  const ApplierOptions& o_;
  proto::DecodeLimits limits_;
  std::vector<Lane> lanes_;
  size_t queued_ = 0;
  size_t queued_bytes_ = 0;
  uint64_t view_generation_ = 0;
  std::shared_ptr<const cluster::ClusterView> view_;
  bool checkpoint_in_flight_ = false;
  // Partitions applied although the map does not give them to this node.
  std::bitset<kPartitions> following_;
  struct Follow {
    uint32_t partition = 0;
    int64_t until = 0;  // done once applied up to here
    std::function<void(Status)> done;
  };
  std::vector<Follow> follows_;
  SteadyClock::time_point next_tick_{};
  SteadyClock::time_point next_checkpoint_{};
  ApplierStats stats_;
  // Last: destroyed first, while everything its callbacks touch still is
  // (its worker waits for the I/O in flight as it goes).
  std::unique_ptr<profile::ProfileSession> session_;
};

Applier::Applier(const ApplierOptions& options, profile::ProfileStore* profiles,
                 std::unique_ptr<log::LogReader> reader, const cluster::ViewBoard* board,
                 PendingWrites* pending)
    : options_(options),
      profiles_(profiles),
      reader_(std::move(reader)),
      board_(board),
      pending_(pending),
      stale_(new std::atomic<bool>[options.log_partitions]),
      applied_next_(new std::atomic<int64_t>[options.log_partitions]) {
  for (uint32_t l = 0; l < options.log_partitions; ++l) {
    stale_[l].store(true);
    applied_next_[l].store(-1);
  }
}

void Applier::Follow(uint32_t partition, int64_t from, std::function<void(Status)> done) {
  if (from < 0) {
    done(Status::InvalidArgument("follow: offset " + std::to_string(from) + " is negative"));
    return;
  }
  if (failed_.load(std::memory_order_acquire) || stopping_.load(std::memory_order_acquire)) {
    done(Status::Unavailable("the applier has stopped"));
    return;
  }
  {
    std::lock_guard lock(follow_mu_);
    follow_requests_.push_back(FollowRequest{partition % kPartitions, true, from, std::move(done)});
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void Applier::DropFollowRequests() {
  std::vector<FollowRequest> requests;
  {
    std::lock_guard lock(follow_mu_);
    requests.swap(follow_requests_);
  }
  for (FollowRequest& r : requests) {
    if (r.done) r.done(Status::Unavailable("the applier is stopping"));
  }
}

void Applier::Unfollow(uint32_t partition) {
  {
    std::lock_guard lock(follow_mu_);
    follow_requests_.push_back(FollowRequest{partition % kPartitions, false, 0, nullptr});
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

std::vector<uint16_t> Applier::following() const {
  std::lock_guard lock(follow_mu_);
  return following_;
}

Result<std::unique_ptr<Applier>> Applier::Start(const ApplierOptions& options,
                                                profile::ProfileStore* profiles,
                                                std::unique_ptr<log::LogReader> reader,
                                                const cluster::ViewBoard* board,
                                                PendingWrites* pending) {
  if (options.log_partitions == 0 || 4096 % options.log_partitions != 0) {
    return Status::InvalidArgument(fmt::format(
        "{} log partitions: it must be a power of two that divides 4096", options.log_partitions));
  }
  if (reader == nullptr || reader->partitions() != options.log_partitions) {
    return Status::InvalidArgument("the log reader does not have the configured log partitions");
  }
  std::unique_ptr<Applier> a(new Applier(options, profiles, std::move(reader), board, pending));
  a->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (a->wake_fd_ < 0) return Status::IOError(fmt::format("eventfd: {}", std::strerror(errno)));
  a->thread_ = std::thread([p = a.get()] { p->Run(); });
  return a;
}

Applier::~Applier() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Applier::Stop() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void Applier::Fail(const Status& why) {
  spdlog::critical("replica: this node cannot apply the cluster's log: {}", why.ToString());
  DropFollowRequests();
  {
    std::lock_guard lock(stats_mu_);
    failure_ = why;
  }
  failed_.store(true, std::memory_order_release);
  WriteAnswer a;
  a.status = Status::Unavailable("this node cannot apply the cluster's log: " +
                                 std::string(why.message()));
  pending_->FailAll(a);
}

Status Applier::failure() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::OK();
  std::lock_guard lock(stats_mu_);
  return failure_;
}

void Applier::Run() {
  Result<std::unique_ptr<profile::ProfileSession>> session = profiles_->NewSession();
  if (!session.ok()) {
    Fail(session.status().WithContext("opening a profile session"));
    return;
  }
  // Entries are filtered by the partitions this node holds: wait for a map.
  while (!stopping_.load(std::memory_order_acquire)) {
    auto v = board_->view();
    if (v != nullptr && v->map.has_map()) break;
    (*session)->Wait(std::chrono::milliseconds(20));
  }
  if (stopping_.load(std::memory_order_acquire)) return;
  Loop loop(this, std::move(*session));
  if (Status s = loop.Begin(); !s.ok()) {
    Fail(s);
    return;
  }
  if (Status s = loop.Run(); !s.ok()) Fail(s);
}

ApplierStats Applier::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

}  // namespace segstore::replica
