#include "bench/segbench/driver.h"

#include <sys/resource.h>
#include <unistd.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "bench/segbench/open_all.h"
#include "bench/segbench/picker.h"
#include "bench/workload.h"

namespace segstore::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

uint32_t NowSeconds() { return static_cast<uint32_t>(std::time(nullptr)); }

double ClientCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return s(u.ru_utime) + s(u.ru_stime);
}

std::vector<Assignment> ReferenceProfile(uint64_t user, uint32_t now) {
  std::vector<Assignment> out;
  out.reserve(1000);
  for (const ReferenceSegment& s : ReferenceSegments(user)) {
    out.push_back({s.id, WholeHourExpiry(now, s.hours)});
  }
  return out;
}

// Opens `n` connections to `target` on `io` (run by the calling thread).
Result<std::vector<std::unique_ptr<Connection>>> OpenTargets(Target& target,
                                                             boost::asio::io_context& io,
                                                             unsigned n) {
  return OpenAll<Connection>(io, n, [&target](boost::asio::io_context& ctx, auto done) {
    target.Open(ctx, std::move(done));
  });
}

// The measured window, set by the coordinating thread: steady-clock
// nanoseconds; `end` stays at the maximum until the window closes, and
// `stop` tells the workers to send nothing new.
struct Window {
  std::atomic<int64_t> start{INT64_MAX};
  std::atomic<int64_t> end{INT64_MAX};
  std::atomic<bool> stop{false};

  static int64_t Nanos(Clock::time_point t) {
    return std::chrono::duration_cast<nanoseconds>(t.time_since_epoch()).count();
  }
  bool Contains(Clock::time_point t) const {
    const int64_t n = Nanos(t);
    return n >= start.load(std::memory_order_acquire) && n < end.load(std::memory_order_acquire);
  }
  bool stopped() const { return stop.load(std::memory_order_acquire); }
};

// One client thread of a run: its io_context, its connections and its share
// of the requests; or, for kMixedBusy, the background load alone, on a
// thread of its own so that building and encoding whole profiles never
// delays the answers the foreground measures.
class Worker {
 public:
  Worker(Target& target, const RunSpec& spec, const UserPicker& picker, unsigned index,
         unsigned connections, bool background, const Window& window)
      : target_(target),
        spec_(spec),
        picker_(picker),
        uniform_(spec.users, 0),
        connections_(connections),
        background_(background),
        window_(window),
        rng_(spec.seed * 1000003 + index) {}

  // Opens the connections; false (and error()) on failure.
  bool Open() {
    auto conns = OpenTargets(target_, io_, background_ ? 1 : connections_);
    if (!conns.ok()) {
      error_ = conns.status().ToString();
      return false;
    }
    conns_ = std::move(conns).value();
    retired_.assign(conns_.size(), false);
    return true;
  }

  // Runs until the window is closed and everything sent is answered.
  void Run() {
    if (background_) {
      Background();
    } else if (spec_.rate > 0) {
      // This thread's share of the rate: its share of the connections.
      const double rate = spec_.rate * connections_ / spec_.connections;
      interval_ = nanoseconds(std::max<int64_t>(1, static_cast<int64_t>(1e9 / rate)));
      next_due_ = Clock::now();
      timer_.emplace(io_);
      Tick();
    } else {
      for (unsigned c = 0; c < conns_.size(); ++c) {
        for (unsigned d = 0; d < spec_.depth; ++d) Issue(c, Clock::now());
      }
    }
    while (!window_.stopped()) io_.run_for(std::chrono::milliseconds(20));
    if (timer_) timer_->cancel();
    // Open loop: requests still waiting for a slot go out as slots free up
    // (Completed sends them), and their wait counts.
    DrainAll(io_, conns_, std::chrono::seconds(60));
    conns_.clear();  // fails whatever is still in flight, here, on this thread
  }

  const std::string& error() const { return error_; }
  const RunResult& figures() const { return figures_; }

 private:
  // Open loop: issues every request now due, on a free connection or into
  // the backlog, then sleeps until the next one is due.
  void Tick() {
    if (window_.stopped()) return;
    const auto now = Clock::now();
    while (next_due_ <= now) {
      Dispatch(next_due_);
      next_due_ += interval_;
    }
    timer_->expires_at(next_due_);
    timer_->async_wait([this](const boost::system::error_code& ec) {
      if (!ec) Tick();
    });
  }

  // Open loop: a request due at `due` goes to a connection with a free slot,
  // or waits in the backlog for one.
  void Dispatch(Clock::time_point due) {
    for (unsigned i = 0; i < conns_.size(); ++i) {
      const unsigned c = (next_conn_ + i) % static_cast<unsigned>(conns_.size());
      if (!retired_[c] && conns_[c]->in_flight() < spec_.depth) {
        next_conn_ = c + 1;
        Issue(c, due);
        return;
      }
    }
    backlog_.push_back(due);
    figures_.backlog_max = std::max<uint64_t>(figures_.backlog_max, backlog_.size());
  }

  OpKind NextKind() {
    switch (spec_.workload) {
      case Workload::kBatchGet:
        return OpKind::kBatchGet;
      case Workload::kUpsert:
        return OpKind::kUpsert;
      case Workload::kTrim:
        return OpKind::kTrim;
      case Workload::kGetFields:
        return OpKind::kGetFields;
      case Workload::kIncrement:
        return OpKind::kIncrement;
      case Workload::kUpsertOne:
        return OpKind::kUpsert;
      case Workload::kMixed: {
        const uint64_t r = rng_() % 100;
        return r < 90 ? OpKind::kGet : r < 99 ? OpKind::kUpsert : OpKind::kTrim;
      }
      case Workload::kGet:
      case Workload::kMixedBusy:
        break;
    }
    return OpKind::kGet;
  }

  // Sends one request on connection `c`; latency counts from `due`.
  void Issue(unsigned c, Clock::time_point due) {
    const OpKind kind = NextKind();
    auto done = [this, c, due, kind](Outcome o) { Completed(c, due, kind, std::move(o)); };
    Connection& conn = *conns_[c];
    switch (kind) {
      case OpKind::kGet:
        conn.Get(UserKey(spec_.first_user + picker_.Pick(rng_)), std::move(done));
        break;
      case OpKind::kBatchGet: {
        std::vector<std::string> users;
        users.reserve(spec_.batch);
        for (unsigned i = 0; i < spec_.batch; ++i) {
          users.push_back(UserKey(spec_.first_user + picker_.Pick(rng_)));
        }
        conn.BatchGet(users, std::move(done));
        break;
      }
      case OpKind::kGetFields:
        conn.GetFields(UserKey(spec_.first_user + picker_.Pick(rng_)), kCapPrefix, std::move(done));
        break;
      case OpKind::kIncrement: {
        // One of the user's 20 counters, in a window to the end of the UTC
        // day (a loaded counter keeps the expiry it has).
        const uint64_t u = spec_.first_user + uniform_.Pick(rng_);
        const std::vector<uint32_t> campaigns = ReferenceCampaigns(u);
        const uint32_t now = NowSeconds();
        conn.Increment(UserKey(u), CapName(campaigns[rng_() % campaigns.size()]),
                       EndOfUtcDay(now) - now, std::move(done));
        break;
      }
      case OpKind::kUpsert: {
        // 1 to 10 distinct segments (upsert-1: one), each expiring 1 to 720
        // whole hours ahead.
        const unsigned n =
            spec_.workload == Workload::kUpsertOne ? 1 : 1 + static_cast<unsigned>(rng_() % 10);
        const uint32_t now = NowSeconds();
        std::vector<Assignment> segs;
        segs.reserve(n);
        while (segs.size() < n) {
          const uint64_t id = rng_() % 82000;
          bool dup = false;
          for (const Assignment& a : segs) dup = dup || a.id == id;
          if (!dup)
            segs.push_back({id, WholeHourExpiry(now, 1 + static_cast<uint32_t>(rng_() % 720))});
        }
        conn.Upsert(UserKey(spec_.first_user + uniform_.Pick(rng_)), segs, std::move(done));
        break;
      }
      case OpKind::kTrim:
        conn.Trim(UserKey(spec_.first_user + uniform_.Pick(rng_)), std::move(done));
        break;
      case OpKind::kCount:
        break;
    }
  }

  // Throughput counts answers received inside the window; latency, errors
  // and segments count the requests sent (closed loop) or due (open loop)
  // inside it, whenever they were answered. A failed request retires its
  // connection for the rest of the run, so a broken connection cannot spin.
  void Completed(unsigned c, Clock::time_point due, OpKind kind, Outcome o) {
    const auto now = Clock::now();
    const bool answered_in_window = o.ok && window_.Contains(now);
    const bool due_in_window = window_.Contains(due);
    for (KindFigures* f : {&figures_.all, &figures_.by_kind[static_cast<size_t>(kind)]}) {
      if (answered_in_window) ++f->ops;
      if (!due_in_window) continue;
      if (!o.ok) {
        ++f->errors;
        continue;
      }
      f->latency.Record(
          static_cast<uint64_t>(std::chrono::duration_cast<nanoseconds>(now - due).count()));
      f->segments += o.segments;
      f->missing += o.missing;
      f->profiles += o.profiles;
      f->fields += o.fields;
    }
    if (!o.ok) {
      if (figures_.first_error.empty()) figures_.first_error = o.error;
      retired_[c] = true;
    }
    if (retired_[c]) return;
    if (spec_.rate > 0) {
      if (!backlog_.empty()) {
        const auto next = backlog_.front();
        backlog_.pop_front();
        Issue(c, next);
      }
    } else if (!window_.stopped()) {
      Issue(c, Clock::now());
    }
  }

  // kMixedBusy: whole reference profiles rewritten, one request at a time.
  void Background() {
    if (window_.stopped()) return;
    // Each user's own reference profile, so a rewrite replaces rather than
    // grows it (segstore's Replace merges).
    std::vector<std::string> users;
    std::vector<std::vector<Assignment>> profiles;
    const uint32_t now = NowSeconds();
    for (unsigned i = 0; i < spec_.background_batch; ++i) {
      const uint64_t u = spec_.first_user + uniform_.Pick(rng_);
      users.push_back(UserKey(u));
      profiles.push_back(ReferenceProfile(u, now));
    }
    const auto n = static_cast<uint64_t>(users.size());
    conns_[0]->Replace(users, profiles, [this, n](Outcome o) {
      if (window_.Contains(Clock::now())) {
        if (o.ok) {
          figures_.background_users += n;
        } else {
          ++figures_.background_errors;
        }
      }
      if (!o.ok) {
        if (figures_.first_error.empty()) figures_.first_error = "background load: " + o.error;
        return;  // the connection is retired
      }
      Background();
    });
  }

  Target& target_;
  const RunSpec& spec_;
  const UserPicker& picker_;
  const UserPicker uniform_;  // upserts and trims pick users uniformly
  const unsigned connections_;
  const bool background_;
  const Window& window_;
  std::mt19937_64 rng_;
  boost::asio::io_context io_;
  // Keeps io_ running between requests (a store whose connections hold no
  // pending I/O of their own would otherwise stop it).
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_ =
      boost::asio::make_work_guard(io_);
  std::vector<std::unique_ptr<Connection>> conns_;
  std::vector<bool> retired_;
  std::optional<boost::asio::steady_timer> timer_;
  Clock::time_point next_due_;
  nanoseconds interval_{0};
  std::deque<Clock::time_point> backlog_;
  unsigned next_conn_ = 0;
  RunResult figures_;
  std::string error_;
};

void MergeKind(KindFigures* into, const KindFigures& from) {
  into->ops += from.ops;
  into->errors += from.errors;
  into->segments += from.segments;
  into->missing += from.missing;
  into->profiles += from.profiles;
  into->fields += from.fields;
  into->latency.Merge(from.latency);
}

}  // namespace

const char* WorkloadName(Workload w) {
  switch (w) {
    case Workload::kGet:
      return "get";
    case Workload::kBatchGet:
      return "batch-get";
    case Workload::kUpsert:
      return "upsert";
    case Workload::kTrim:
      return "trim";
    case Workload::kMixed:
      return "mixed";
    case Workload::kMixedBusy:
      return "mixed-busy";
    case Workload::kGetFields:
      return "get-fields";
    case Workload::kIncrement:
      return "incr";
    case Workload::kUpsertOne:
      return "upsert-1";
  }
  return "?";
}

const char* OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kGet:
      return "get";
    case OpKind::kBatchGet:
      return "batch-get";
    case OpKind::kUpsert:
      return "upsert";
    case OpKind::kTrim:
      return "trim";
    case OpKind::kGetFields:
      return "get-fields";
    case OpKind::kIncrement:
      return "incr";
    case OpKind::kCount:
      break;
  }
  return "?";
}

std::optional<double> ProcessCpuSeconds(int64_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return std::nullopt;
  // "pid (comm) state ppid ... utime stime": comm may hold spaces, so split
  // at the last ')'.
  const size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  const std::string comm = text.substr(open + 1, close - open - 1);
  if (comm.rfind("segstored", 0) != 0 && comm.rfind("redis", 0) != 0) return std::nullopt;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // Fields 3..13 (state .. cmajflt), then utime (14) and stime (15).
  for (int i = 3; i <= 13 && rest >> field; ++i) {
  }
  if (!(rest >> utime >> stime)) return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

namespace {

// The CPU time of the sample's server process, and of a cluster's other
// nodes' too: all of them, or none when one is not visible here.
std::optional<double> ServerCpuSeconds(const ServerSample& s) {
  std::optional<double> total = ProcessCpuSeconds(s.pid);
  for (int64_t pid : s.more_pids) {
    const std::optional<double> one = ProcessCpuSeconds(pid);
    if (!one || !total) return std::nullopt;
    *total += *one;
  }
  return total;
}

}  // namespace

Result<RunResult> Run(Target& target, const RunSpec& spec) {
  if (spec.users == 0 || spec.connections == 0 || spec.depth == 0 || spec.threads == 0 ||
      spec.seconds <= 0 || spec.batch == 0 || spec.warmup_seconds < 0) {
    return Status::InvalidArgument(
        "users, connections, depth, threads, batch and seconds must be positive");
  }
  if (spec.rate != 0 && !(spec.rate >= 1)) {
    return Status::InvalidArgument("an open-loop rate must be at least 1 request a second");
  }
  if (spec.first_user > UINT64_MAX - spec.users) {
    return Status::InvalidArgument("the users' range passes 2^64");
  }
  if (spec.zipf > 0 && spec.users > (uint64_t{1} << 27)) {
    return Status::InvalidArgument("zipf draws need a table of 8 bytes a user: at most 2^27 users");
  }
  const unsigned threads = std::min(spec.threads, spec.connections);
  RunSpec s = spec;
  s.threads = threads;
  const UserPicker picker(spec.users, spec.zipf > 0 ? spec.zipf : 0);
  Window window;
  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned t = 0; t < threads; ++t) {
    const unsigned conns = spec.connections / threads + (t < spec.connections % threads ? 1 : 0);
    workers.push_back(std::make_unique<Worker>(target, s, picker, t, conns, false, window));
  }
  if (spec.workload == Workload::kMixedBusy) {
    workers.push_back(std::make_unique<Worker>(target, s, picker, threads, 0, true, window));
  }
  // Connections open on their own threads; the run starts once all are in.
  std::vector<std::thread> pool;
  std::atomic<size_t> opened{0};
  std::atomic<bool> failed{false}, go{false};
  for (auto& w : workers) {
    pool.emplace_back([&, wp = w.get()] {
      if (!wp->Open()) failed = true;
      ++opened;
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!failed.load()) wp->Run();
    });
  }
  while (opened.load() < workers.size()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (failed.load()) {
    window.stop = true;
    go = true;
    for (auto& t : pool) t.join();
    for (auto& w : workers) {
      if (!w->error().empty()) return Status::Unavailable("connecting: " + w->error());
    }
    return Status::Unavailable("connecting failed");
  }
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(spec.warmup_seconds));

  RunResult result;
  result.spec = s;
  Result<ServerSample> before = target.Sample();
  const std::optional<double> cpu0 = before.ok() ? ServerCpuSeconds(*before) : std::nullopt;
  const double client0 = ClientCpuSeconds();
  const auto m0 = Clock::now();
  window.start = Window::Nanos(m0);
  std::this_thread::sleep_for(std::chrono::duration<double>(spec.seconds));
  const auto m1 = Clock::now();
  window.end = Window::Nanos(m1);
  window.stop = true;
  result.seconds = std::chrono::duration<double>(m1 - m0).count();
  result.client_cpu_seconds = ClientCpuSeconds() - client0;
  const std::optional<double> cpu1 = before.ok() ? ServerCpuSeconds(*before) : std::nullopt;
  if (cpu0 && cpu1) result.server_cpu_seconds = *cpu1 - *cpu0;
  Result<ServerSample> after = target.Sample();
  for (auto& t : pool) t.join();
  if (!before.ok()) return before.status();
  if (!after.ok()) return after.status();
  result.before = *before;
  result.after = *after;
  for (auto& w : workers) {
    const RunResult& f = w->figures();
    MergeKind(&result.all, f.all);
    for (size_t k = 0; k < result.by_kind.size(); ++k) MergeKind(&result.by_kind[k], f.by_kind[k]);
    if (result.first_error.empty()) result.first_error = f.first_error;
    result.backlog_max = std::max(result.backlog_max, f.backlog_max);
    result.background_users += f.background_users;
    result.background_errors += f.background_errors;
  }
  return result;
}

namespace {

// Runs `work(conn, unit, done)` for units 0, 1, 2... < `units` over
// `connections` connections from this thread, one request in flight on
// each. `work` returns false when a unit needs no request (`done` unused).
// Stops at the first error.
using UnitWork = std::function<bool(Connection&, uint64_t, Done&)>;

Status DriveUnits(Target& target, unsigned connections, uint64_t units, const UnitWork& work) {
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  auto conns = OpenTargets(target, io, connections);
  if (!conns.ok()) return conns.status();
  uint64_t next = 0;
  Status first = Status::OK();
  std::function<void(unsigned)> step = [&](unsigned c) {
    while (next < units && first.ok()) {
      const uint64_t unit = next++;
      Done done = [&, c](Outcome o) {
        if (!o.ok && first.ok()) first = Status::IOError(o.error);
        step(c);
      };
      if (work(*(*conns)[c], unit, done)) return;
    }
  };
  for (unsigned c = 0; c < connections; ++c) step(c);
  DrainAll(io, *conns, std::chrono::hours(24));
  conns->clear();
  return first;
}

// DriveUnits between two samples of the server: fills r->before, r->after,
// r->seconds (the drive's) and r->server_cpu_seconds (when readable).
// `what` names the drive in its error.
template <typename R>
Status DriveMeasured(Target& target, unsigned connections, uint64_t units, const UnitWork& work,
                     const char* what, R* r) {
  Result<ServerSample> before = target.Sample();
  if (!before.ok()) return before.status();
  r->before = *before;
  const std::optional<double> cpu0 = ServerCpuSeconds(*before);
  const auto t0 = Clock::now();
  if (Status s = DriveUnits(target, connections, units, work); !s.ok()) {
    return s.WithContext(what);
  }
  r->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::optional<double> cpu1 = ServerCpuSeconds(*before);
  if (cpu0 && cpu1) r->server_cpu_seconds = *cpu1 - *cpu0;
  Result<ServerSample> after = target.Sample();
  if (!after.ok()) return after.status();
  r->after = *after;
  return Status::OK();
}

}  // namespace

Result<LoadResult> Load(Target& target, uint64_t users, unsigned connections, bool fields) {
  if (users == 0 || connections == 0) {
    return Status::InvalidArgument("users and connections must be positive");
  }
  LoadResult r;
  r.users = users;
  r.fields = fields;
  if (fields) {
    if (!target.fields_supported()) {
      return Status::Unsupported(target.name() + ": profile fields are not measured here");
    }
    const std::vector<std::string> names = ReferenceFieldNameList();
    Result<uint64_t> registered = target.RegisterFieldNames(names, 120);
    if (!registered.ok()) return registered.status();
    r.field_names_registered = *registered;
  }
  const uint64_t per = std::max<size_t>(1, target.load_batch());
  const uint64_t units = (users + per - 1) / per;
  auto load = [&](Connection& c, uint64_t unit, Done& done) {
    std::vector<std::string> keys;
    std::vector<std::vector<Assignment>> profiles;
    const uint32_t now = NowSeconds();
    const uint64_t first = unit * per;
    for (uint64_t u = first; u < std::min(users, (unit + 1) * per); ++u) {
      keys.push_back(UserKey(u));
      profiles.push_back(ReferenceProfile(u, now));
    }
    if (!fields) {
      c.Replace(keys, profiles, std::move(done));
      return true;
    }
    // Then each user's fields, one SetFields a user, all in flight at once;
    // done once the last is answered (with the first failure, if any).
    auto user_keys = std::make_shared<std::vector<std::string>>(std::move(keys));
    c.Replace(*user_keys, profiles, [&c, &r, first, user_keys, done = std::move(done)](Outcome o) {
      if (!o.ok) return done(std::move(o));
      struct Join {
        size_t remaining;
        Outcome first_failure;
        Done done;
      };
      auto join = std::make_shared<Join>(Join{user_keys->size(), Outcome{}, std::move(done)});
      const uint32_t at = NowSeconds();
      for (size_t i = 0; i < user_keys->size(); ++i) {
        const std::vector<ReferenceField> f = ReferenceFields(first + i, at);
        r.field_string_bytes += StringBytes(f);
        c.SetFields((*user_keys)[i], f, [join](Outcome one) {
          if (!one.ok && join->first_failure.ok) join->first_failure = std::move(one);
          if (--join->remaining == 0) join->done(std::move(join->first_failure));
        });
      }
    });
    return true;
  };
  SEGSTORE_RETURN_IF_ERROR(DriveMeasured(target, connections, units, load, "loading", &r));
  return r;
}

Result<ExpireResult> Expire(Target& target, uint64_t users, double share, unsigned connections,
                            uint64_t first_user) {
  if (!(share > 0 && share <= 1))
    return Status::InvalidArgument("the expiring share must be in (0, 1]");
  ExpireResult r;
  const auto t0 = Clock::now();
  const auto threshold = static_cast<uint64_t>(share * 1e6);
  uint32_t last_expiry = 0;
  Status s = DriveUnits(target, connections, users, [&](Connection& c, uint64_t unit, Done& done) {
    const uint64_t u = first_user + unit;
    // Three seconds ahead: in the future still when the store checks it.
    const uint32_t expires = NowSeconds() + 3;
    last_expiry = std::max(last_expiry, expires);
    std::vector<Assignment> segs;
    for (const ReferenceSegment& seg : ReferenceSegments(u)) {
      // A per-(user, segment) coin with the given bias, the same for every store.
      const uint64_t coin = XXH3_64bits_withSeed(&seg.id, sizeof seg.id, u) % 1000000;
      if (coin < threshold) segs.push_back({seg.id, expires});
    }
    r.segments += segs.size();
    if (segs.empty()) return false;
    c.Upsert(UserKey(u), segs, std::move(done));
    return true;
  });
  if (!s.ok()) return s.WithContext("expiring segments");
  while (NowSeconds() <= last_expiry) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

uint64_t GroupPlan::linked_users() const {
  uint64_t n = 0;
  for (uint32_t k : sizes) n += k;
  return n;
}

double GroupPlan::profiles_per_get() const {
  double sum = 0, squares = 0;
  for (uint32_t k : sizes) {
    sum += k;
    squares += static_cast<double>(k) * k;
  }
  return sum > 0 ? squares / sum : 0;
}

GroupPlan PlanGroups(uint64_t users, unsigned min_size, unsigned max_size, uint64_t seed) {
  GroupPlan plan;
  if (min_size < 2 || max_size < min_size) return plan;
  std::mt19937_64 rng(seed);
  uint64_t next = 0;
  while (users - next >= min_size) {
    const uint64_t k = min_size + rng() % (max_size - min_size + 1);
    plan.sizes.push_back(static_cast<uint32_t>(std::min(k, users - next)));
    next += plan.sizes.back();
  }
  return plan;
}

Result<LinkRunResult> LinkGroups(Target& target, const GroupPlan& plan, unsigned connections) {
  if (connections == 0) return Status::InvalidArgument("connections must be positive");
  // (member, master) pairs, the groups' first members first, then their
  // second ones...: links side by side are to different masters, but for
  // the few largest groups at the end.
  std::vector<std::pair<uint64_t, uint64_t>> links;
  links.reserve(plan.links());
  std::vector<uint64_t> masters;
  masters.reserve(plan.sizes.size());
  uint64_t first = 0;
  uint32_t largest = 0;
  for (uint32_t k : plan.sizes) {
    masters.push_back(first);
    first += k;
    largest = std::max(largest, k);
  }
  for (uint32_t rank = 1; rank < largest; ++rank) {
    for (size_t g = 0; g < plan.sizes.size(); ++g) {
      if (rank < plan.sizes[g]) links.emplace_back(masters[g] + rank, masters[g]);
    }
  }
  LinkRunResult r;
  r.groups = plan.sizes.size();
  r.linked_users = plan.linked_users();
  r.links = links.size();
  auto link = [&](Connection& c, uint64_t unit, Done& done) {
    c.Link(UserKey(links[unit].first), UserKey(links[unit].second), std::move(done));
    return true;
  };
  SEGSTORE_RETURN_IF_ERROR(DriveMeasured(target, connections, links.size(), link, "linking", &r));
  return r;
}

}  // namespace segstore::bench
