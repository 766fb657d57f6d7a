#include "replica/applier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>

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
      : a_(a),
        o_(a->options_),
        session_(std::move(session)),
        window_(o_.window_seconds, o_.window_max_ids),
        lanes_(o_.log_partitions) {
    limits_.max_key_bytes = o_.max_key_bytes;
    limits_.max_list = std::max<uint32_t>(o_.max_segments, 1);
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
      lane.checkpointed = c;
      for (const auto& [partition, next] : c.partitions) lane.partition_next[partition] = next;
      // From the window's start: the write IDs before `next` are noted, not applied.
      from.emplace_back(l, std::min(c.window_start, c.next));
      lane.read_from = from.back().second;
    }
    return a_->reader_->Assign(from);
  }

  void Run() {
    const int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
      spdlog::critical("replica: epoll_create1: {}", std::strerror(errno));
      return;
    }
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
        }
      }
      Turn();
    }
    Finish();
    close(epfd);
  }

 private:
  // An entry read and not yet applied.
  struct Queued {
    int64_t offset = 0;
    int64_t timestamp_ms = -1;
    std::string value;
  };
  struct Lane {
    int64_t next = 0;       // the next offset to apply
    int64_t read_from = 0;  // where reading started (window rebuild included)
    bool gap_checked = false;
    std::deque<Queued> queue;
    bool busy = false;  // the front entry is being applied
    SteadyClock::time_point retry_at{};  // after a failure to apply: not before
    bool failing = false;
    bool caught_up = false;
    bool lost = false;  // the reader stopped reading it: entries it needed are gone
    int64_t end = -1;
    Checkpoint checkpointed;  // as last written
    // Routing partitions applied past `next` (a checkpoint said so).
    std::unordered_map<uint32_t, int64_t> partition_next;
    // (entry time, first offset with it), one per second of entry time: where
    // the window of write IDs starts.
    std::deque<std::pair<uint32_t, int64_t>> marks;
    // (when, the log's end then), for ends not reached yet: the lag.
    std::deque<std::pair<SteadyClock::time_point, int64_t>> behind;
  };
  // At most this many marks of `behind` (ticks are 100 ms apart: minutes of
  // lag); past it the newest is replaced, so the oldest, the lag, stays.
  static constexpr size_t kMaxBehindMarks = 4096;

  void Turn() {
    session_->Poll();
    Read();
    for (uint32_t l = 0; l < lanes_.size(); ++l) Advance(l);
    session_->Poll();
    const auto now = SteadyClock::now();
    if (now >= next_tick_) {
      next_tick_ = now + std::chrono::milliseconds(100);
      Tick(now);
    }
  }

  // Takes what the reader fetched, up to the queue bound.
  void Read() {
    if (queued_ >= o_.max_queued) return;
    Result<size_t> got = a_->reader_->Poll(o_.max_queued - queued_, [this](const log::LogEntry& e) {
      if (e.partition >= lanes_.size()) return;
      lanes_[e.partition].queue.push_back(
          Queued{e.offset, e.timestamp_ms, std::string(e.value)});
      ++queued_;
    });
    if (!got.ok()) {
      // An offset the log no longer holds: this node cannot rebuild that part
      // of its copy from the log alone (it needs a copy from a peer).
      spdlog::error("replica: {}", got.status().ToString());
      ++stats_.lost_entries;
    }
  }

  bool Holds(uint32_t partition) {
    const uint64_t g = a_->board_->generation();
    if (g != view_generation_) {
      view_ = a_->board_->view();
      view_generation_ = g;
    }
    return view_ != nullptr && view_->held.test(partition);
  }

  // Applies the log partition's entries in order until one is in flight.
  void Advance(uint32_t l) {
    Lane& lane = lanes_[l];
    if (lane.busy || a_->stopping_.load(std::memory_order_relaxed)) return;
    if (lane.failing && SteadyClock::now() < lane.retry_at) return;
    while (!lane.busy && !lane.queue.empty()) {
      Queued& q = lane.queue.front();
      if (q.offset < lane.next) {
        // Before the checkpoint: only its write ID, for the window.
        if (Result<EntryHeader> h = DecodeEntryHeader(q.value); h.ok()) {
          Mark(lane, h->now, q.offset);
          window_.Add(h->write_id, h->now, h->op, nullptr);
        }
        Pop(lane);
        continue;
      }
      if (!lane.gap_checked) {
        lane.gap_checked = true;
        if (q.offset > lane.next) {
          spdlog::error(
              "replica: log partition {}: offsets {} to {} are no longer in the log; this "
              "node's copy of its partitions misses them (it needs a copy from a peer)",
              l, lane.next, q.offset - 1);
          stats_.lost_entries += static_cast<uint64_t>(q.offset - lane.next);
          lane.next = q.offset;
        }
      }
      WriteEntry entry;
      if (Status s = DecodeEntry(q.value, limits_, &entry); !s.ok()) {
        ++stats_.undecodable;
        spdlog::error("replica: log partition {} offset {}: skipped: {}", l, q.offset,
                      s.ToString());
        Done(lane, q.offset);
        continue;
      }
      Mark(lane, entry.now, q.offset);
      const uint32_t partition = PartitionOf(entry.user());
      auto ahead = lane.partition_next.find(partition);
      if (!Holds(partition) || (ahead != lane.partition_next.end() && q.offset < ahead->second)) {
        ++stats_.not_held;
        Done(lane, q.offset);
        continue;
      }
      WriteAnswer earlier;
      if (window_.Find(entry.write_id, &earlier)) {
        ++stats_.duplicates;
        a_->pending_->Complete(entry.write_id, earlier);
        Done(lane, q.offset);
        continue;
      }
      Apply(l, q.offset, std::move(entry));
    }
  }

  // Starts applying the front entry of lane `l`; Applied() ends it.
  void Apply(uint32_t l, int64_t offset, WriteEntry entry) {
    Lane& lane = lanes_[l];
    lane.busy = true;
    const profile::WriteContext w{entry.now, static_cast<uint64_t>(offset) + 1};
    auto at = std::make_shared<const WriteEntry>(std::move(entry));
    const auto finish = [this, l, offset, at](WriteAnswer answer) {
      Applied(l, offset, *at, std::move(answer));
    };
    switch (at->request.index()) {
      case 0: {
        const auto& r = std::get<proto::UpsertRequest>(at->request);
        session_->Upsert(w, r.user, r.segments, r.mode, [finish](Result<UpsertResult> x) {
          WriteAnswer a;
          if (x.ok()) a.upsert = *x; else a.status = x.status();
          finish(std::move(a));
        });
        break;
      }
      case 1: {
        const auto& r = std::get<proto::RemoveRequest>(at->request);
        session_->Remove(w, r.user, r.ids, [finish](Result<uint32_t> x) {
          WriteAnswer a;
          if (x.ok()) a.removed = *x; else a.status = x.status();
          finish(std::move(a));
        });
        break;
      }
      case 2: {
        const auto& r = std::get<proto::TrimRequest>(at->request);
        session_->Trim(w, r.user, r.before, [finish](Result<TrimResult> x) {
          WriteAnswer a;
          if (x.ok()) a.trim = *x; else a.status = x.status();
          finish(std::move(a));
        });
        break;
      }
      default: {
        const auto& r = std::get<proto::DeleteRequest>(at->request);
        session_->Delete(w, r.user, [finish](Result<bool> x) {
          WriteAnswer a;
          if (x.ok()) a.deleted = *x; else a.status = x.status();
          finish(std::move(a));
        });
        break;
      }
    }
  }

  void Applied(uint32_t l, int64_t offset, const WriteEntry& entry, WriteAnswer answer) {
    Lane& lane = lanes_[l];
    lane.busy = false;
    if (answer.status.code() == Status::Code::kConflict) {
      // Its user's record already holds this position or a later one: it
      // was applied before a restart. Its answer is not known any more.
      ++stats_.replayed;
      window_.Add(entry.write_id, entry.now, entry.op(), nullptr);
      WriteAnswer earlier;
      if (window_.Find(entry.write_id, &earlier)) a_->pending_->Complete(entry.write_id, earlier);
      lane.failing = false;
      Done(lane, offset);
      return;
    }
    if (!IsWritesOwnAnswer(answer.status)) {
      // This node's trouble: try the same entry again shortly; its reads are
      // stale meanwhile. Waiting clients get InDoubt at their deadline.
      ++stats_.apply_failures;
      if (!lane.failing) {
        spdlog::error("replica: log partition {} offset {}: cannot apply (retrying every second): {}",
                      l, offset, answer.status.ToString());
      }
      lane.failing = true;
      lane.retry_at = SteadyClock::now() + std::chrono::seconds(1);
      return;
    }
    lane.failing = false;
    ++stats_.applied;
    window_.Add(entry.write_id, entry.now, entry.op(), &answer);
    a_->pending_->Complete(entry.write_id, answer);
    Done(lane, offset);
  }

  // The front entry of `lane` (at `offset`) is done with.
  void Done(Lane& lane, int64_t offset) {
    lane.next = offset + 1;
    Pop(lane);
  }
  void Pop(Lane& lane) {
    lane.queue.pop_front();
    --queued_;
  }

  void Mark(Lane& lane, UnixSeconds at, int64_t offset) {
    if (lane.marks.empty() || at > lane.marks.back().first) lane.marks.emplace_back(at, offset);
  }

  // Where this lane's window of write IDs starts now: the first mark within
  // the window (entries before it have aged out).
  int64_t WindowStart(Lane& lane) {
    if (lane.marks.empty()) return lane.next;
    const uint32_t newest = lane.marks.back().first;
    const uint32_t horizon = newest > o_.window_seconds ? newest - o_.window_seconds : 0;
    while (lane.marks.size() > 1 && lane.marks[1].first <= horizon) lane.marks.pop_front();
    return std::min(lane.marks.front().second, lane.next);
  }

  // Housekeeping, ten times a second: lag and staleness, the window, waiters
  // past their deadline, checkpoints, the stats copy.
  void Tick(SteadyClock::time_point now) {
    window_.Expire();
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
    // A log partition the reader no longer reads lost entries this node
    // needed (retention passed them): its copy cannot be trusted.
    std::vector<bool> read(lanes_.size(), false);
    for (const log::PartitionPosition& p : a_->reader_->positions()) {
      if (p.partition >= lanes_.size()) continue;
      lanes_[p.partition].end = p.end;
      read[p.partition] = true;
    }
    for (uint32_t l = 0; l < lanes_.size(); ++l) {
      if (!read[l] && !lanes_[l].lost) {
        lanes_[l].lost = true;
        spdlog::error("replica: log partition {} is no longer read: this node's copy of its "
                      "partitions misses writes and stays marked stale",
                      l);
      }
    }
    const int64_t wall = WallMillis();
    bool all_caught_up = true;
    std::vector<LaneStats> lane_stats(lanes_.size());
    for (uint32_t l = 0; l < lanes_.size(); ++l) {
      Lane& lane = lanes_[l];
      if (!lane.caught_up && lane.end >= 0 && lane.next >= lane.end) {
        lane.caught_up = true;
      }
      all_caught_up = all_caught_up && lane.caught_up;
      // Lag, two ways, the larger: how long ago the log had an end this
      // lane has not reached yet (whether or not those entries were
      // fetched), and how old the oldest entry read and not applied is.
      if (lane.end > lane.next &&
          (lane.behind.empty() || lane.behind.back().second < lane.end)) {
        if (lane.behind.size() == kMaxBehindMarks) lane.behind.pop_back();
        lane.behind.emplace_back(now, lane.end);
      }
      while (!lane.behind.empty() && lane.next >= lane.behind.front().second) {
        lane.behind.pop_front();
      }
      double lag = 0;
      if (!lane.behind.empty()) {
        lag = std::chrono::duration<double>(now - lane.behind.front().first).count();
      }
      if (!lane.queue.empty() && lane.queue.front().offset >= lane.next &&
          lane.queue.front().timestamp_ms >= 0) {
        lag = std::max(lag, static_cast<double>(wall - lane.queue.front().timestamp_ms) / 1e3);
      }
      const bool stale = !lane.caught_up || lane.lost || !log_ok || !lease_ok || lane.failing ||
                         lag * 1e3 > static_cast<double>(o_.max_lag.count());
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
      a_->stats_.window_ids = window_.size();
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
                                   spdlog::error("replica: checkpoint of log partition {}: {}",
                                                 l, r.status().ToString());
                                 }
                                 if (--*remaining == 0) checkpoint_in_flight_ = false;
                               });
      }
      if (*remaining == 0) checkpoint_in_flight_ = false;
    });
  }

  // Stopping: lets the entries in flight finish, then a last checkpoint.
  void Finish() {
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
  std::unique_ptr<profile::ProfileSession> session_;
  proto::DecodeLimits limits_;
  WriteIdWindow window_;
  std::vector<Lane> lanes_;
  size_t queued_ = 0;
  uint64_t view_generation_ = 0;
  std::shared_ptr<const cluster::ClusterView> view_;
  bool checkpoint_in_flight_ = false;
  SteadyClock::time_point next_tick_{};
  SteadyClock::time_point next_checkpoint_{};
  ApplierStats stats_;
};

Applier::Applier(const ApplierOptions& options, profile::ProfileStore* profiles,
                 std::unique_ptr<log::LogReader> reader, const cluster::ViewBoard* board,
                 PendingWrites* pending)
    : options_(options),
      profiles_(profiles),
      reader_(std::move(reader)),
      board_(board),
      pending_(pending),
      stale_(new std::atomic<bool>[options.log_partitions]) {
  for (uint32_t l = 0; l < options.log_partitions; ++l) stale_[l].store(true);
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

void Applier::Run() {
  Result<std::unique_ptr<profile::ProfileSession>> session = profiles_->NewSession();
  if (!session.ok()) {
    spdlog::critical("replica: the applier cannot open a profile session: {}",
                     session.status().ToString());
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
    spdlog::critical("replica: the applier cannot start: {}", s.ToString());
    return;
  }
  loop.Run();
}

ApplierStats Applier::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

}  // namespace segstore::replica
