// segbench's pieces: the user picker, the reference profile fields, the run
// loop against a fake store (open loop must not hide a stall), and the whole
// tool against an in-process server: the driver's load, gets, expiry and
// trims, then the segbench binary's JSON report (profile bridging's link and
// linked gets, profile fields' load and workloads too). Last, segstored's
// RESP port as a subject: the RESP target's replies, and segbench through
// it, against a segstored process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <algorithm>
#include <boost/asio.hpp>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "bench/segbench/driver.h"
#include "bench/segbench/limits.h"
#include "bench/segbench/picker.h"
#include "bench/segbench/redis_target.h"
#include "bench/segbench/segstore_target.h"
#include "bench/workload.h"
#include "segstore/profile.h"
#include "server/profile_service.h"
#include "server/server.h"
#include "storage/test_util.h"
#include "support/whole_hours.h"

namespace segstore::bench {
namespace {

using segstore::testing::HourWatch;
using std::chrono::milliseconds;

// The most segments any of the reference users [0, users) holds with an
// expiry one whole hour ahead: what one profile can lose if a run crosses
// a whole hour.
uint64_t MostFirstHourSegments(uint64_t users) {
  uint64_t most = 0;
  for (uint64_t u = 0; u < users; ++u) {
    uint64_t n = 0;
    for (const ReferenceSegment& s : ReferenceSegments(u)) n += s.hours == 1;
    most = std::max(most, n);
  }
  return most;
}

// Runs `cmd` through the shell; its exit code and standard output.
std::pair<int, std::string> RunTool(const std::string& cmd) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "cannot run " + cmd};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

// A run's segments per op for `profiles` whole reference profiles of users
// [0, users): all of them, or, if the run crossed a whole hour, all but
// those that expired on it.
void ExpectWholeProfiles(double per_op, double profiles, uint64_t users, const HourWatch& hours) {
  if (!hours.Crossed()) {
    EXPECT_EQ(per_op, 1000.0 * profiles);
  } else {
    EXPECT_LE(per_op, 1000.0 * profiles);
    EXPECT_GE(per_op, (1000.0 - static_cast<double>(MostFirstHourSegments(users))) * profiles);
  }
}

TEST(UserPicker, UniformStaysInRange) {
  UserPicker p(1000, 0);
  EXPECT_FALSE(p.zipf());
  std::mt19937_64 rng(1);
  std::set<uint64_t> seen;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t u = p.Pick(rng);
    ASSERT_LT(u, 1000u);
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(UserPicker, ZipfDrawsTheHottestUserAsOften_AsTheLawSays) {
  constexpr uint64_t kUsers = 10000;
  constexpr double kExponent = 0.99;
  UserPicker p(kUsers, kExponent);
  ASSERT_TRUE(p.zipf());
  double harmonic = 0;
  for (uint64_t k = 1; k <= kUsers; ++k)
    harmonic += 1.0 / std::pow(static_cast<double>(k), kExponent);
  std::mt19937_64 rng(7);
  std::map<uint64_t, uint64_t> counts;
  constexpr int kDraws = 400000;
  for (int i = 0; i < kDraws; ++i) ++counts[p.Pick(rng)];
  // Rank 0 and rank 9 against 1/H and 1/(10^s H), within 5 %.
  const double top = static_cast<double>(counts[p.RankToUser(0)]) / kDraws;
  const double tenth = static_cast<double>(counts[p.RankToUser(9)]) / kDraws;
  EXPECT_NEAR(top, 1.0 / harmonic, 0.05 / harmonic);
  EXPECT_NEAR(tenth, 1.0 / (std::pow(10.0, kExponent) * harmonic),
              0.05 / (std::pow(10.0, kExponent) * harmonic) + 0.002);
  // The hot users are spread out, not users 0, 1, 2...
  EXPECT_NE(p.RankToUser(1), 1u);
}

TEST(UserPicker, RanksMapToDistinctUsers) {
  UserPicker p(1000, 0.99);
  std::set<uint64_t> users;
  for (uint64_t r = 0; r < 1000; ++r) users.insert(p.RankToUser(r));
  EXPECT_EQ(users.size(), 1000u);
}

// Whether a test crossed a UTC midnight: the reference cap counters expire
// at the end of the UTC day they were loaded in.
class DayWatch {
 public:
  DayWatch() : end_(EndOfUtcDay(Now())) {}
  bool Crossed() const { return Now() >= end_; }
  static uint32_t Now() { return static_cast<uint32_t>(std::time(nullptr)); }

 private:
  uint32_t end_;
};

// workload.md, "Profile fields": 20 counters named after 6-digit campaigns
// of 5,000, values in [0, 10], expiring at the end of the UTC day; then
// last_seen, country, score, device and consent as it says. Deterministic
// in the user: only the expiries follow the time given.
TEST(ReferenceFields, TheWorkloadsTwentyFiveFields) {
  constexpr uint32_t kNow = 1'790'000'000;
  std::set<uint32_t> numbers;
  for (uint32_t c = 0; c < kReferenceCampaigns; ++c) numbers.insert(CampaignNumber(c));
  EXPECT_EQ(numbers.size(), kReferenceCampaigns);
  EXPECT_GE(*numbers.begin(), 100000u);
  EXPECT_LE(*numbers.rbegin(), 999999u);
  const std::vector<std::string> names = ReferenceFieldNameList();
  EXPECT_EQ(names.size(), 5005u);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), 5005u);

  const std::set<std::string> all_names(names.begin(), names.end());
  std::set<uint32_t> campaigns_seen;
  for (uint64_t u = 0; u < 300; ++u) {
    const std::vector<ReferenceField> f = ReferenceFields(u, kNow);
    ASSERT_EQ(f.size(), 25u);
    const std::vector<uint32_t> campaigns = ReferenceCampaigns(u);
    ASSERT_EQ(campaigns.size(), 20u);
    EXPECT_EQ(std::set<uint32_t>(campaigns.begin(), campaigns.end()).size(), 20u);
    for (size_t i = 0; i < 20; ++i) {
      campaigns_seen.insert(campaigns[i]);
      EXPECT_EQ(f[i].name, CapName(campaigns[i]));
      EXPECT_EQ(f[i].name.size(), 10u);  // "cap:" and 6 digits
      EXPECT_EQ(f[i].type, ReferenceField::Type::kInt);
      EXPECT_GE(f[i].i, 0);
      EXPECT_LE(f[i].i, 10);
      EXPECT_EQ(f[i].expires_at, EndOfUtcDay(kNow));
    }
    for (const ReferenceField& one : f) EXPECT_TRUE(all_names.contains(one.name)) << one.name;
    EXPECT_EQ(f[20].name, "last_seen");
    EXPECT_EQ(f[20].type, ReferenceField::Type::kTime);
    EXPECT_LE(f[20].i, int64_t{kNow});
    EXPECT_GT(f[20].i, int64_t{kNow} - 30 * 86400);
    EXPECT_EQ(f[20].expires_at, 0u);
    EXPECT_EQ(f[21].name, "country");
    EXPECT_EQ(f[21].s.size(), 2u);
    EXPECT_EQ(f[21].expires_at, 0u);
    EXPECT_EQ(f[22].name, "score");
    EXPECT_EQ(f[22].type, ReferenceField::Type::kDouble);
    EXPECT_GE(f[22].d, 0.0);
    EXPECT_LT(f[22].d, 1.0);
    EXPECT_EQ(f[22].expires_at, kNow + 7 * 86400);
    EXPECT_EQ(f[23].name, "device");
    EXPECT_GE(f[23].s.size(), 8u);
    EXPECT_LE(f[23].s.size(), 16u);
    EXPECT_EQ(f[23].expires_at, 0u);
    EXPECT_EQ(f[24].name, "consent");
    EXPECT_EQ(f[24].s.size(), 120u);
    EXPECT_EQ(f[24].expires_at, kNow + 390 * 86400);
    EXPECT_EQ(StringBytes(f), 2 + f[23].s.size() + 120);
    // The same values a day later; only the expiries moved.
    const std::vector<ReferenceField> later = ReferenceFields(u, kNow + 86400);
    for (size_t i = 0; i < f.size(); ++i) {
      EXPECT_EQ(later[i].name, f[i].name);
      EXPECT_EQ(later[i].s, f[i].s);
      EXPECT_EQ(later[i].d, f[i].d);
      if (i != 20) {
        EXPECT_EQ(later[i].i, f[i].i);  // last_seen follows the time
      }
    }
  }
  EXPECT_GT(campaigns_seen.size(), 1000u);  // users count different campaigns
}

TEST(GroupPlan, ConsecutiveGroupsWithinTheBoundsAndTheUsers) {
  const GroupPlan plan = PlanGroups(1000, 2, 10);
  ASSERT_FALSE(plan.sizes.empty());
  for (uint32_t k : plan.sizes) {
    EXPECT_GE(k, 2u);
    EXPECT_LE(k, 10u);
  }
  EXPECT_LE(plan.linked_users(), 1000u);
  EXPECT_GT(plan.linked_users(), 1000u - 2);  // only fewer than --group-min left out
  EXPECT_EQ(plan.links(), plan.linked_users() - plan.sizes.size());
  EXPECT_EQ(PlanGroups(1000, 2, 10).sizes, plan.sizes);  // the same groups every run
  const double mean = static_cast<double>(plan.linked_users()) / plan.sizes.size();
  EXPECT_NEAR(mean, 6.0, 1.0);
  EXPECT_GT(plan.profiles_per_get(), mean);  // larger groups hold more of the users

  const GroupPlan fixed = PlanGroups(11, 5, 5);
  EXPECT_EQ(fixed.sizes, (std::vector<uint32_t>{5, 5}));  // the 11th user stays out
  EXPECT_DOUBLE_EQ(fixed.profiles_per_get(), 5.0);
  // Whatever the users, only fewer than the smallest group are left out.
  for (auto [lo, hi] : {std::pair{2u, 10u}, std::pair{5u, 6u}, std::pair{3u, 3u}}) {
    for (uint64_t users = 0; users < 200; ++users) {
      const GroupPlan any = PlanGroups(users, lo, hi);
      for (uint32_t k : any.sizes) {
        EXPECT_GE(k, lo);
        EXPECT_LE(k, hi);
      }
      EXPECT_LE(any.linked_users(), users);
      EXPECT_LT(users - any.linked_users(), lo) << users << " in " << lo << " to " << hi;
    }
  }
  EXPECT_TRUE(PlanGroups(1, 2, 10).sizes.empty());
  EXPECT_TRUE(PlanGroups(100, 1, 10).sizes.empty());  // a group is two users at least
  EXPECT_TRUE(PlanGroups(100, 5, 4).sizes.empty());
}

TEST(ProcessCpu, OnlyReadsAStoreServersProcess) {
  EXPECT_FALSE(ProcessCpuSeconds(0).has_value());
  EXPECT_FALSE(ProcessCpuSeconds(-1).has_value());
  // This test binary is neither segstored nor redis.
  EXPECT_FALSE(ProcessCpuSeconds(::getpid()).has_value());
}

// A store that answers every request `delay` after it was sent, one at a time
// per connection (as a server busy with each request would), holding
// nothing: gets find 7 segments.
class SlowTarget final : public Target {
 public:
  explicit SlowTarget(milliseconds delay, bool fail = false) : delay_(delay), fail_(fail) {}

  class Conn final : public Connection {
   public:
    Conn(boost::asio::io_context& io, milliseconds delay, bool fail)
        : timer_(io), delay_(delay), fail_(fail) {}
    ~Conn() override {
      timer_.cancel();
      while (!queue_.empty()) {
        Done d = std::move(queue_.front());
        queue_.pop_front();
        d(Outcome{false, "closed", 0, 0});
      }
    }
    void Get(const std::string&, Done done) override { Push(std::move(done)); }
    void BatchGet(std::span<const std::string>, Done done) override { Push(std::move(done)); }
    void Upsert(const std::string&, std::span<const Assignment>, Done done) override {
      Push(std::move(done));
    }
    void Trim(const std::string&, Done done) override { Push(std::move(done)); }
    void Replace(std::span<const std::string>, std::span<const std::vector<Assignment>>,
                 Done done) override {
      Push(std::move(done));
    }
    void Link(const std::string&, const std::string&, Done done) override { Push(std::move(done)); }
    void SetFields(const std::string&, std::span<const ReferenceField>, Done done) override {
      Push(std::move(done));
    }
    void Increment(const std::string&, const std::string&, uint32_t, Done done) override {
      Push(std::move(done));
    }
    void GetFields(const std::string&, const std::string&, Done done) override {
      Push(std::move(done));
    }
    size_t in_flight() const override { return queue_.size(); }

   private:
    void Push(Done done) {
      queue_.push_back(std::move(done));
      if (queue_.size() == 1) Arm();
    }
    void Arm() {
      timer_.expires_after(delay_);
      timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec || queue_.empty()) return;
        Done d = std::move(queue_.front());
        queue_.pop_front();
        if (!queue_.empty()) Arm();
        d(fail_ ? Outcome{false, "refused", 0, 0} : Outcome{true, {}, 7, 0});
      });
    }
    boost::asio::steady_timer timer_;
    milliseconds delay_;
    bool fail_;
    std::deque<Done> queue_;
  };

  std::string name() const override { return "slow"; }
  std::string address() const override { return "nowhere"; }
  void Open(boost::asio::io_context& io,
            std::function<void(Result<std::unique_ptr<Connection>>)> done) override {
    boost::asio::post(io, [&io, this, done = std::move(done)] {
      done(std::unique_ptr<Connection>(new Conn(io, delay_, fail_)));
    });
  }
  Result<ServerSample> Sample() override { return ServerSample{}; }
  size_t load_batch() const override { return 1; }

 private:
  milliseconds delay_;
  bool fail_;
};

TEST(Run, ClosedLoopCountsEveryAnswer) {
  SlowTarget target(milliseconds(2));
  RunSpec spec;
  spec.users = 100;
  spec.connections = 3;
  spec.threads = 2;
  spec.warmup_seconds = 0.05;
  spec.seconds = 0.5;
  auto r = bench::Run(target, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->all.ops, 0u);
  EXPECT_EQ(r->all.errors, 0u);
  EXPECT_EQ(r->all.segments, 7 * r->all.latency.count());
  EXPECT_EQ(r->by_kind[static_cast<size_t>(OpKind::kGet)].ops, r->all.ops);
  // Each request takes at least the store's 2 ms.
  EXPECT_GE(r->all.latency.Percentile(0.5), 2'000'000u * 97 / 100);
}

TEST(Run, OpenLoopCountsTheWaitOfRequestsAStallHeldBack) {
  // Capacity 20 requests/s (50 ms each, one at a time) asked for 100/s:
  // requests pile up in the client, and their latency runs from when they
  // were due. A closed-loop measure would report ~50 ms throughout. Every
  // request due in the window is measured, the last ones included, after
  // the window closes.
  SlowTarget target(milliseconds(50));
  RunSpec spec;
  spec.users = 100;
  spec.connections = 1;
  spec.depth = 1;
  spec.warmup_seconds = 0;
  spec.seconds = 1;
  spec.rate = 100;
  auto r = bench::Run(target, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->backlog_max, 10u);
  EXPECT_GE(r->all.latency.count(), 80u);  // ~100 due in the window
  EXPECT_LE(r->all.ops, 25u);              // ~20 answered inside it
  EXPECT_GT(r->all.latency.Percentile(0.5), 1'000'000'000u);
  EXPECT_GT(r->all.latency.max(), 3'000'000'000u);
}

TEST(Run, AFailingConnectionIsRetiredNotSpun) {
  SlowTarget target(milliseconds(0), /*fail=*/true);
  RunSpec spec;
  spec.users = 100;
  spec.connections = 4;
  spec.depth = 2;
  spec.warmup_seconds = 0;
  spec.seconds = 0.3;
  auto r = bench::Run(target, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->all.ops, 0u);
  EXPECT_EQ(r->all.latency.count(), 0u);
  EXPECT_LE(r->all.errors, 8u);  // at most what was in flight when each failed
  EXPECT_EQ(r->first_error, "refused");
  spec.rate = 1000;
  r = bench::Run(target, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LE(r->all.errors, 8u);
}

TEST(Run, MixedSpreadsItsRequestsOverTheKinds) {
  SlowTarget target(milliseconds(0));
  RunSpec spec;
  spec.workload = Workload::kMixed;
  spec.users = 100;
  spec.connections = 4;
  spec.warmup_seconds = 0;
  spec.seconds = 0.5;
  auto r = bench::Run(target, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& get = r->by_kind[static_cast<size_t>(OpKind::kGet)];
  const auto& upsert = r->by_kind[static_cast<size_t>(OpKind::kUpsert)];
  ASSERT_GT(r->all.ops, 1000u);
  EXPECT_NEAR(static_cast<double>(get.ops) / static_cast<double>(r->all.ops), 0.90, 0.03);
  EXPECT_NEAR(static_cast<double>(upsert.ops) / static_cast<double>(r->all.ops), 0.09, 0.03);
  EXPECT_GT(r->by_kind[static_cast<size_t>(OpKind::kTrim)].ops, 0u);
}

TEST(Run, RefusesNonsense) {
  SlowTarget target(milliseconds(0));
  RunSpec spec;
  spec.connections = 0;
  EXPECT_EQ(bench::Run(target, spec).status().code(), Status::Code::kInvalidArgument);
  spec.connections = 1;
  spec.rate = 0.5;
  EXPECT_EQ(bench::Run(target, spec).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Expire(target, 10, 0, 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Expire(target, 10, 1.5, 1).status().code(), Status::Code::kInvalidArgument);
}

// A real segstore server in this process, on the system clock, with the
// sweeper off (so expired segments wait for trims).
class SegbenchServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o;
    o.path = dir_.File("data");
    o.file_size = 256u << 20;
    o.write_block_size = 1u << 20;
    auto store = storage::Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    profile::ProfileOptions p;
    p.sweeper = false;
    auto profiles = profile::ProfileStore::Open(store_.get(), p);
    ASSERT_TRUE(profiles.ok());
    profiles_ = std::move(profiles).value();
    server::ProfileServiceOptions so;
    so.config = {{"config.storage.path", o.path},
                 {"config.storage.durability", std::string("commit")}};
    service_ = std::make_unique<server::ProfileService>(store_.get(), profiles_.get(), so);
    server::ServerOptions opts;
    opts.port = 0;
    opts.threads = 1;
    server_ = std::make_unique<server::Server>(opts, service_.get());
    service_->set_server_counters(
        [s = server_.get()](server::ServerCounters* c) { s->CountersInto(c); });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
    server_.reset();
    service_.reset();
    profiles_.reset();
    store_.reset();
  }

  std::unique_ptr<Target> NewTarget() {
    SegstoreOptions o;
    o.client.port = server_->port();
    o.client.request_timeout = milliseconds(30000);
    o.client.connect_timeout = milliseconds(10000);
    auto t = NewSegstoreTarget(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  storage::testing::TempDir dir_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<profile::ProfileStore> profiles_;
  std::unique_ptr<server::ProfileService> service_;
  std::unique_ptr<server::Server> server_;
};

TEST_F(SegbenchServerTest, LoadGetExpireAndTrim) {
  auto target = NewTarget();
  ASSERT_NE(target, nullptr);
  constexpr uint64_t kUsers = 60;
  const HourWatch hours;
  auto load = Load(*target, kUsers, 3);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->before.records, 0u);
  EXPECT_EQ(load->after.records, kUsers);
  EXPECT_GT(load->after.device_bytes_used, 0u);
  EXPECT_EQ(load->after.pid, ::getpid());
  EXPECT_EQ(load->after.durability, "commit");

  RunSpec spec;
  spec.users = kUsers;
  spec.connections = 2;
  spec.warmup_seconds = 0.05;
  spec.seconds = 0.3;
  auto get = bench::Run(*target, spec);
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  ASSERT_GT(get->all.ops, 0u);
  EXPECT_EQ(get->all.errors, 0u) << get->first_error;
  EXPECT_EQ(get->all.missing, 0u);
  // Every segment is live.
  ExpectWholeProfiles(get->all.segments_per_request(), 1, kUsers, hours);

  spec.workload = Workload::kBatchGet;
  spec.batch = 5;
  auto batch = bench::Run(*target, spec);
  ASSERT_TRUE(batch.ok());
  ExpectWholeProfiles(batch->all.segments_per_request(), 5, kUsers, hours);

  auto expired = Expire(*target, kUsers, 0.10, 2);
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  EXPECT_NEAR(static_cast<double>(expired->segments), kUsers * 100.0, kUsers * 100.0 * 0.15);

  spec.workload = Workload::kGet;
  auto after = bench::Run(*target, spec);
  ASSERT_TRUE(after.ok());
  const double live = after->all.segments_per_request();
  EXPECT_LT(live, 1000.0);
  EXPECT_NEAR(live, 900.0, 30.0);

  // Trimming every user once removes exactly what was made to expire (and,
  // if the run crossed a whole hour, what expired on it).
  {
    boost::asio::io_context io;
    std::unique_ptr<Connection> conn;
    target->Open(io, [&](Result<std::unique_ptr<Connection>> r) {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      conn = std::move(*r);
    });
    io.run_for(std::chrono::seconds(10));
    io.restart();
    ASSERT_NE(conn, nullptr);
    uint64_t trimmed = 0, answered = 0;
    for (uint64_t u = 0; u < kUsers; ++u) {
      conn->Trim(UserKey(u), [&](Outcome o) {
        EXPECT_TRUE(o.ok) << o.error;
        trimmed += o.segments;
        ++answered;
      });
    }
    while (answered < kUsers && io.run_one_for(std::chrono::seconds(10)) > 0) {
    }
    EXPECT_EQ(answered, kUsers);
    if (!hours.Crossed()) {
      EXPECT_EQ(trimmed, expired->segments);
    } else {
      EXPECT_GE(trimmed, expired->segments);
      EXPECT_LE(trimmed, expired->segments + kUsers * MostFirstHourSegments(kUsers));
    }
  }
  spec.workload = Workload::kTrim;
  auto trim = bench::Run(*target, spec);
  ASSERT_TRUE(trim.ok());
  EXPECT_GT(trim->all.ops, 0u);
  EXPECT_EQ(trim->all.errors, 0u) << trim->first_error;
  EXPECT_EQ(trim->all.segments, 0u);  // nothing left to trim

  spec.workload = Workload::kUpsert;
  spec.seconds = 0.3;
  auto upsert = bench::Run(*target, spec);
  ASSERT_TRUE(upsert.ok());
  EXPECT_GT(upsert->all.ops, 0u);
  EXPECT_EQ(upsert->all.errors, 0u) << upsert->first_error;

  spec.workload = Workload::kMixedBusy;
  spec.background_batch = 4;
  // The background load counts the batches it finished in the window: on a
  // starved machine a short window may hold none, so longer ones follow.
  Result<RunResult> busy = Status::Internal("not run");
  for (double seconds : {0.3, 1.0, 3.0, 10.0}) {
    spec.seconds = seconds;
    busy = bench::Run(*target, spec);
    if (!busy.ok() || busy->background_users > 0) break;
  }
  ASSERT_TRUE(busy.ok());
  EXPECT_EQ(busy->all.errors, 0u) << busy->first_error;
  EXPECT_GT(busy->background_users, 0u);
  EXPECT_EQ(busy->background_errors, 0u) << busy->first_error;
}

TEST_F(SegbenchServerTest, PingAndDeviceLimits) {
  client::ClientOptions o;
  o.port = server_->port();
  auto ping = MeasurePing(o, 3, 0.2);
  ASSERT_TRUE(ping.ok()) << ping.status().ToString();
  EXPECT_GT(ping->round_trip.count(), 0u);
  EXPECT_GT(ping->round_trips_per_second, 0);
  EXPECT_GT(ping->pings_per_second, 0);

  auto device = MeasureDevice(dir_.File(""), 8u << 20, 8, 0.2);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_GT(device->reads_per_second, 0);
  EXPECT_GT(device->latency.count(), 0u);
  EXPECT_GT(device->latency_depth1.count(), 0u);
  EXPECT_FALSE(std::filesystem::exists(device->file));  // the scratch file is gone
  EXPECT_EQ(MeasureDevice(dir_.File("no-such-dir"), 8u << 20, 8, 0.1).status().code(),
            Status::Code::kIOError);

  const Machine m = DescribeMachine(dir_.File("data"));
  EXPECT_GT(m.cores, 0u);
  EXPECT_GT(m.memory_bytes, 0u);
  EXPECT_FALSE(m.kernel.empty());
  EXPECT_FALSE(m.storage.empty());
}

// The segbench binary itself, every workload at a tiny scale, as JSON.
TEST_F(SegbenchServerTest, ToolReportsEveryWorkloadAsJson) {
  const HourWatch hours;
  const std::string cmd =
      std::string(SEGBENCH_PATH) + " --segstore 127.0.0.1:" + std::to_string(server_->port()) +
      " --users 40 --connections 2 --seconds 0.3 --warmup 0.05 --batch 4 --limits-file-mib 8"
      " --json load get get-zipf batch-get get-70 get-80 upsert mixed trim mixed-busy limits "
      "2>/dev/null";
  const auto [rc, out] = RunTool(cmd);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["users"], 40);
  ASSERT_EQ(j["servers"].size(), 1u);
  EXPECT_EQ(j["servers"][0]["name"], "segstore");
  EXPECT_GT(j["servers"][0]["disk_bytes_per_user"].get<double>(), 1000.0);
  // 40 users are within the resident set's noise: the growth may be negative,
  // and then the figure is absent and a note says why.
  const auto& mem = j["servers"][0]["memory_bytes_per_user"];
  if (mem.is_null()) {
    EXPECT_NE(j["servers"][0].value("note", "").find("memory shrank"), std::string::npos)
        << j["servers"][0].dump();
  } else {
    EXPECT_GE(mem.get<double>(), 0.0);
  }
  std::set<std::string> workloads;
  for (const auto& run : j["runs"]) {
    workloads.insert(run["workload"].get<std::string>());
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_GT(run["ops"].get<uint64_t>(), 0u) << run.dump();
    EXPECT_GT(run["latency"]["p99_us"].get<double>(), 0.0);
    // The in-process server is this test, not a segstored: no CPU figure.
    EXPECT_TRUE(run["server_cpu_us_per_op"].is_null());
  }
  EXPECT_EQ(workloads, (std::set<std::string>{"get", "get zipf 0.99", "batch-get", "get-70",
                                              "get-80", "upsert", "mixed", "trim", "mixed-busy"}));
  double get_rate = 0;
  for (const auto& run : j["runs"]) {
    if (run["workload"] == "get") get_rate = run["ops_per_second"].get<double>();
  }
  ASSERT_GT(get_rate, 0.0);
  for (const auto& run : j["runs"]) {
    if (run["workload"] == "get") {
      ExpectWholeProfiles(run["segments_per_op"].get<double>(), 1, 40, hours);
      EXPECT_EQ(run["mode"], "closed");
    }
    // The open-loop runs ask for their share of the closed-loop get rate.
    if (run["workload"] == "get-70") {
      EXPECT_EQ(run["mode"], "open");
      EXPECT_DOUBLE_EQ(run["target_rate"].get<double>(), 0.7 * get_rate);
    }
    if (run["workload"] == "get-80") {
      EXPECT_EQ(run["mode"], "open");
      EXPECT_DOUBLE_EQ(run["target_rate"].get<double>(), 0.8 * get_rate);
    }
    if (run["workload"] == "trim") {
      EXPECT_GT(run["expired_segments"].get<uint64_t>(), 0u);
    }
  }
  EXPECT_GT(j["limits"]["device"]["reads_per_second"].get<double>(), 0.0);
  EXPECT_GT(j["limits"]["ping"]["pings_per_second"].get<double>(), 0.0);
}

// Profile bridging's workloads: link makes the groups on the server (a
// master per group, its members naming it), get-linked reads merged views,
// get reads only the users left unlinked, and the report has the open-loop
// pair's p99 ratio, in the table and the JSON. Presence and sanity only,
// never speed.
TEST_F(SegbenchServerTest, ToolLinksUsersAndReadsTheirMergedViews) {
  constexpr uint64_t kUsers = 300;
  const HourWatch hours;
  const std::string json_file = dir_.File("link.json");
  const std::string cmd =
      std::string(SEGBENCH_PATH) + " --segstore 127.0.0.1:" + std::to_string(server_->port()) +
      " --users " + std::to_string(kUsers) +
      " --connections 2 --seconds 0.3 --warmup 0.05 --load-connections 2 --json-file " + json_file +
      " load link get get-linked get-50 get-linked-50 2>&1";
  const auto [rc, out] = RunTool(cmd);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("segstore get-linked-50 p99 / get-50 p99 = "), std::string::npos) << out;
  EXPECT_NE(out.find("(goal: at most 2x)"), std::string::npos) << out;
  EXPECT_NE(out.find("linked profiles (link)"), std::string::npos) << out;

  std::ifstream in(json_file);
  const auto j = nlohmann::json::parse(in);
  // The plan: the first half of the users, in groups of 2 to 10.
  const auto& link = j["link"];
  const uint64_t linked = link["linked_users"].get<uint64_t>();
  const uint64_t groups = link["groups"].get<uint64_t>();
  EXPECT_LE(linked, kUsers / 2);
  EXPECT_GT(linked, kUsers / 2 - 2);
  EXPECT_EQ(link["links"].get<uint64_t>(), linked - groups);
  EXPECT_GE(link["mean_group_size"].get<double>(), 2.0);
  EXPECT_LE(link["mean_group_size"].get<double>(), 10.0);
  EXPECT_EQ(link["unlinked_users_first"].get<uint64_t>(), linked);
  EXPECT_EQ(link["unlinked_users_count"].get<uint64_t>(), kUsers - linked);
  // What the server said after it.
  ASSERT_EQ(j["servers"].size(), 1u);
  const auto& made = j["servers"][0]["link"];
  EXPECT_EQ(made["links"].get<uint64_t>(), linked - groups);
  EXPECT_GT(made["links_per_second"].get<double>(), 0.0);
  EXPECT_GT(made["index_bytes_per_record"].get<double>(), 0.0);
  if (made["index_references_reported"].get<bool>()) {
    EXPECT_EQ(made["index_references"].get<uint64_t>(), linked - groups);
    EXPECT_GT(made["dram_bytes_per_link"].get<double>(), 0.0);
  } else {
    EXPECT_TRUE(made["dram_bytes_per_link"].is_null());
  }

  std::map<std::string, nlohmann::json> runs;
  for (const auto& run : j["runs"]) runs[run["workload"].get<std::string>()] = run;
  ASSERT_EQ(runs.size(), 4u) << j["runs"].dump();
  for (const auto& [w, run] : runs) {
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_EQ(run["missing"], 0) << run.dump();
    EXPECT_GT(run["ops"].get<uint64_t>(), 0u) << run.dump();
    EXPECT_GT(run["latency"]["p99_us"].get<double>(), 0.0) << run.dump();
    const bool by_linked = w.rfind("get-linked", 0) == 0;
    EXPECT_EQ(run["users_first"].get<uint64_t>(), by_linked ? 0 : linked) << w;
    EXPECT_EQ(run["users_count"].get<uint64_t>(), by_linked ? linked : kUsers - linked) << w;
    if (by_linked) {
      // Merged views: 2 to 10 profiles of 1,000 segments (drawn from
      // 82,000, so their union is nearly their sum).
      EXPECT_GE(run["profiles_per_op"].get<double>(), 2.0) << run.dump();
      EXPECT_LE(run["profiles_per_op"].get<double>(), 10.0) << run.dump();
      EXPECT_GT(run["segments_per_op"].get<double>(), 1500.0) << run.dump();
    } else {
      EXPECT_FALSE(run.contains("profiles_per_op")) << run.dump();
      ExpectWholeProfiles(run["segments_per_op"].get<double>(), 1, kUsers, hours);
    }
  }
  const double get_rate = runs["get"]["ops_per_second"].get<double>();
  for (const char* w : {"get-50", "get-linked-50"}) {
    EXPECT_EQ(runs[w]["mode"], "open");
    EXPECT_DOUBLE_EQ(runs[w]["target_rate"].get<double>(), 0.5 * get_rate);
  }
  ASSERT_EQ(j["linked_p99_goal"].size(), 1u);
  const auto& goal = j["linked_p99_goal"][0];
  EXPECT_EQ(goal["target"], "segstore");
  EXPECT_EQ(goal["get_50_p99_us"].get<double>(), runs["get-50"]["latency"]["p99_us"].get<double>());
  EXPECT_DOUBLE_EQ(goal["ratio"].get<double>(), goal["get_linked_50_p99_us"].get<double>() /
                                                    goal["get_50_p99_us"].get<double>());
  EXPECT_EQ(goal["goal_at_most"].get<double>(), 2.0);

  // On the server: each group's first user its master, the rest unlinked.
  client::ClientOptions o;
  o.port = server_->port();
  auto c = client::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (uint64_t u : {uint64_t{0}, uint64_t{1}}) {
    auto master = (*c)->MasterOf(UserKey(u));
    ASSERT_TRUE(master.ok()) << u << ": " << master.status().ToString();
    EXPECT_EQ(*master, UserKey(0)) << u;
  }
  EXPECT_TRUE((*c)->MasterOf(UserKey(kUsers - 1)).status().IsNotFound());
  EXPECT_TRUE((*c)->MasterOf(UserKey(linked)).status().IsNotFound());
}

// Profile fields' load and workloads: load --fields numbers the 5,005 names
// first, gives every user its 25 fields and reports their bytes on the
// device; get-fields answers the 20 counters, incr adds to the loaded ones
// (no field made), and the report holds incr against upsert-1. Presence and
// sanity only, never speed.
TEST_F(SegbenchServerTest, ToolLoadsFieldsAndRunsTheirWorkloads) {
  constexpr uint64_t kUsers = 30;
  const HourWatch hours;
  const DayWatch day;
  const std::string tool = std::string(SEGBENCH_PATH) +
                           " --segstore 127.0.0.1:" + std::to_string(server_->port()) +
                           " --users " + std::to_string(kUsers) +
                           " --connections 2 --seconds 0.3 --warmup 0.05 --load-connections 2 ";
  // The segments alone first: what the fields load then adds is the fields'.
  auto [rc, out] = RunTool(tool + "--json load 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out);
  const double segments_only = j["servers"][0]["live_bytes_per_user"].get<double>();
  EXPECT_GT(segments_only, 2000.0);
  EXPECT_FALSE(j["servers"][0]["load"]["fields"].get<bool>());
  const uint32_t loaded_at = DayWatch::Now();
  std::tie(rc, out) = RunTool(tool +
                              "--fields --json load get get-fields incr upsert-1 2>&1 "
                              ">" +
                              dir_.File("fields.json"));
  ASSERT_EQ(rc, 0) << out;
  std::ifstream in(dir_.File("fields.json"));
  j = nlohmann::json::parse(in);
  const auto& server = j["servers"][0];
  EXPECT_TRUE(server["load"]["fields"].get<bool>());
  EXPECT_EQ(server["load"]["field_names_registered"], 5005);
  // The table's records came before the load: its records are the users'.
  EXPECT_EQ(server["load"]["after"]["records"].get<uint64_t>(),
            server["load"]["before"]["records"].get<uint64_t>());
  const double strings = server["field_string_bytes_per_user"].get<double>();
  EXPECT_GE(strings, 130.0);
  EXPECT_LE(strings, 138.0);
  // Every user held its segments already: the records grew by their fields.
  const double grown = server["live_bytes_per_user"].get<double>();
  std::printf("reference fields: %.1f bytes a user on the device, %.1f of them string values\n",
              grown, strings);
  EXPECT_GT(grown, strings);
  EXPECT_LT(grown - strings, 200.0);

  std::map<std::string, nlohmann::json> runs;
  for (const auto& run : j["runs"]) runs[run["workload"].get<std::string>()] = run;
  ASSERT_EQ(runs.size(), 4u) << j["runs"].dump();
  for (const auto& [w, run] : runs) {
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_EQ(run["missing"], 0) << run.dump();
    EXPECT_GT(run["ops"].get<uint64_t>(), 0u) << run.dump();
    EXPECT_TRUE(run["server_cpu_us_per_op"].is_null());  // in-process: no CPU figure
  }
  ExpectWholeProfiles(runs["get"]["segments_per_op"].get<double>(), 1, kUsers, hours);
  EXPECT_FALSE(runs["get"].contains("fields_per_op"));
  ExpectWholeProfiles(runs["get-fields"]["segments_per_op"].get<double>(), 1, kUsers, hours);
  if (!day.Crossed()) {
    EXPECT_EQ(runs["get-fields"]["fields_per_op"].get<double>(), 20.0);
  }
  EXPECT_EQ(runs["get-fields"]["by_kind"]["get-fields"]["ops"], runs["get-fields"]["ops"]);
  EXPECT_EQ(runs["incr"]["by_kind"]["incr"]["ops"], runs["incr"]["ops"]);
  EXPECT_EQ(runs["upsert-1"]["by_kind"]["upsert"]["ops"], runs["upsert-1"]["ops"]);
  ASSERT_EQ(j["incr_vs_upsert_1"].size(), 1u);
  EXPECT_EQ(j["incr_vs_upsert_1"][0]["target"], "segstore");
  EXPECT_EQ(j["incr_vs_upsert_1"][0]["incr_ops_per_second"].get<double>(),
            runs["incr"]["ops_per_second"].get<double>());

  // On the server: every user's 25 fields, and the increments on its
  // loaded counters (at least one a request answered in the window).
  if (day.Crossed()) GTEST_SKIP() << "a UTC midnight passed: the counters expired";
  client::ClientOptions o;
  o.port = server_->port();
  auto c = client::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  GetOptions all;
  all.fields.mode = FieldSelection::Mode::kAll;
  int64_t loaded = 0, now = 0;
  for (uint64_t u = 0; u < kUsers; ++u) {
    auto got = (*c)->Get(UserKey(u), all);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->fields.size(), 25u) << u;
    for (const ReferenceField& f : ReferenceFields(u, loaded_at)) {
      const auto it = std::find_if(got->fields.begin(), got->fields.end(),
                                   [&f](const Field& g) { return g.name == f.name; });
      ASSERT_NE(it, got->fields.end()) << f.name;
      if (f.name.starts_with(kCapPrefix)) {
        loaded += f.i;
        now += it->value.i;
        EXPECT_EQ(it->expires_at, EndOfUtcDay(loaded_at)) << f.name;
      } else if (f.type == ReferenceField::Type::kString) {
        EXPECT_EQ(it->value.s, f.s) << f.name;
      }
    }
  }
  EXPECT_GE(now - loaded, runs["incr"]["ops"].get<int64_t>());
}

TEST_F(SegbenchServerTest, ToolWantsLinkBeforeTheLinkedGets) {
  const std::string cmd = std::string(SEGBENCH_PATH) +
                          " --segstore 127.0.0.1:" + std::to_string(server_->port()) +
                          " --users 10 --connections 1 --seconds 0.1 --warmup 0 get-linked 2>&1";
  const auto [rc, out] = RunTool(cmd);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("get-linked needs a link run before it"), std::string::npos) << out;
}

// A workload that fails part way still leaves the runs before it reported.
TEST_F(SegbenchServerTest, ToolReportsWhatItMeasuredBeforeAFailure) {
  const std::string cmd = std::string(SEGBENCH_PATH) +
                          " --segstore 127.0.0.1:" + std::to_string(server_->port()) +
                          " --users 10 --connections 2 --seconds 0.2 --warmup 0 --json"
                          " --limits-dir " +
                          dir_.File("no-such-dir") + " get limits 2>&1 >" + dir_.File("out.json");
  const auto [rc, err] = RunTool(cmd);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("limits"), std::string::npos) << err;
  std::ifstream in(dir_.File("out.json"));
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["workload"], "get");
}

TEST_F(SegbenchServerTest, ToolRefusesAnUnknownWorkloadAndAnAbsentServer) {
  const std::string base = std::string(SEGBENCH_PATH) + " --users 10 --seconds 0.1 ";
  const std::string cmd =
      base + "--segstore 127.0.0.1:" + std::to_string(server_->port()) + " frobnicate 2>&1";
  const auto [rc, out] = RunTool(cmd);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("no workload \"frobnicate\""), std::string::npos) << out;

  const auto [absent_rc, absent] = RunTool(base + "--segstore 127.0.0.1:1 get 2>&1");
  EXPECT_NE(absent_rc, 0);
  EXPECT_NE(absent.find("segstore at 127.0.0.1:1"), std::string::npos) << absent;
}

// --- segstored's RESP port ------------------------------------------------------

// A segstored process serving both protocols on ephemeral loopback ports,
// with its data file, config and log in `dir`; the sweeper off, so expired
// segments wait for upserts and trims to remove them. Stopped (SIGTERM,
// then SIGKILL after 10 s) by its PID.
class SegstoredProcess {
 public:
  explicit SegstoredProcess(const std::string& dir)
      : data_(dir + "/d.dat"), log_(dir + "/segstored.log") {
    std::filesystem::create_directories(dir);
    const std::string config = dir + "/segstored.toml";
    std::ofstream(config) << "[profile]\nsweeper = false\n";
    std::vector<std::string> args = {SEGSTORED_PATH, "--config",       config,  "--data",
                                     data_,          "--file-size",    "64MiB", "--listen",
                                     "127.0.0.1:0",  "--admin-listen", "off",   "--resp-listen",
                                     "127.0.0.1:0"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~SegstoredProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  // Waits (20 s at most) for the log to name both ports; false if it does
  // not, or the process ended.
  bool WaitReady() {
    for (int i = 0; i < 2000 && pid_ > 0; ++i) {
      const std::string log = Log();
      port_ = PortAfter(log, "serving on 127.0.0.1:");
      resp_port_ = PortAfter(log, "RESP (Redis protocol) on 127.0.0.1:");
      if (port_ != 0 && resp_port_ != 0) return true;
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  const std::string& data() const { return data_; }
  uint16_t port() const { return port_; }
  uint16_t resp_port() const { return resp_port_; }

 private:
  static uint16_t PortAfter(const std::string& log, const std::string& key) {
    const size_t at = log.find(key);
    if (at == std::string::npos) return 0;
    return static_cast<uint16_t>(std::atoi(log.c_str() + at + key.size()));
  }

  std::string data_;
  std::string log_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  uint16_t resp_port_ = 0;
};

class SegbenchRespTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.WaitReady()) << server_.Log(); }

  std::string Address(uint16_t port) const { return "127.0.0.1:" + std::to_string(port); }

  storage::testing::TempDir dir_;
  SegstoredProcess server_{dir_.File("segstored")};
};

// The RESP target's reading of SEG.* replies, operation by operation: counts
// from their place in the maps, nulls as missing users, and an error element
// of SEG.MGET failing its request.
TEST_F(SegbenchRespTest, TargetReadsSegstoresReplies) {
  RedisOptions o;
  o.port = server_.resp_port();
  o.dialect = RedisOptions::Dialect::kSegstore;
  auto target = NewRedisTarget(o);
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  EXPECT_EQ((*target)->name(), "segstore resp");
  auto first = (*target)->Sample();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_GT(first->pid, 0);
  EXPECT_GT(first->memory_bytes, 0u);
  EXPECT_EQ(first->records, 0u);
  EXPECT_EQ(first->durability, "commit");
  EXPECT_EQ(first->device, server_.data());

  boost::asio::io_context io;
  std::unique_ptr<Connection> conn;
  bool opened = false;
  (*target)->Open(io, [&](Result<std::unique_ptr<Connection>> r) {
    opened = true;
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    conn = std::move(*r);
  });
  while (!opened && io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  ASSERT_NE(conn, nullptr);
  auto call = [&](const std::function<void(Done)>& start) {
    std::optional<Outcome> got;
    start([&](Outcome out) { got = std::move(out); });
    io.restart();
    while (!got && io.run_one_for(std::chrono::seconds(10)) > 0) {
    }
    EXPECT_TRUE(got.has_value()) << "no answer";
    return got.value_or(Outcome{false, "no answer", 0, 0});
  };

  const uint32_t now = static_cast<uint32_t>(std::time(nullptr));
  const std::vector<std::string> users = {"u1", "u2"};
  const std::vector<std::vector<Assignment>> profiles = {
      {{100, now + 3600}, {200, now + 7200}, {300, now + 2}}, {{7, now + 3600}, {8, now + 2}}};
  Outcome o1 = call([&](Done d) { conn->Replace(users, profiles, std::move(d)); });
  ASSERT_TRUE(o1.ok) << o1.error;
  o1 = call([&](Done d) { conn->Get("u1", std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 3u);
  EXPECT_EQ(o1.missing, 0u);
  o1 = call([&](Done d) { conn->Get("nobody", std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 0u);
  EXPECT_EQ(o1.missing, 1u);
  const std::vector<std::string> batch = {"u1", "nobody", "u2"};
  o1 = call([&](Done d) { conn->BatchGet(batch, std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 5u);
  EXPECT_EQ(o1.missing, 1u);
  const std::vector<std::string> bad = {"u1", std::string(300, 'x')};  // over max_key_bytes
  o1 = call([&](Done d) { conn->BatchGet(bad, std::move(d)); });
  EXPECT_FALSE(o1.ok);
  EXPECT_NE(o1.error.find("users[1]"), std::string::npos) << o1.error;
  // The connection answers on after an error reply.
  o1 = call([&](Done d) { conn->Trim("nobody", std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 0u);

  // Segments 300 and 8 expire; an upsert and a trim count what they removed.
  while (static_cast<uint32_t>(std::time(nullptr)) <= now + 2) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  const std::vector<Assignment> more = {{400, now + 3600}};
  o1 = call([&](Done d) { conn->Upsert("u1", more, std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 1u);  // segment 300, trimmed on the way
  o1 = call([&](Done d) { conn->Trim("u1", std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 0u);
  o1 = call([&](Done d) { conn->Trim("u2", std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 1u);  // segment 8
  o1 = call([&](Done d) { conn->Get("u1", std::move(d)); });
  EXPECT_EQ(o1.segments, 3u);                              // 100, 200, 400
  const std::vector<Assignment> past = {{500, now - 10}};  // refused: not in the future
  o1 = call([&](Done d) { conn->Upsert("u1", past, std::move(d)); });
  EXPECT_FALSE(o1.ok);
  // Profile bridging is measured through the binary protocol alone.
  o1 = call([&](Done d) { conn->Link("u2", "u1", std::move(d)); });
  EXPECT_FALSE(o1.ok);
  EXPECT_NE(o1.error.find("not supported"), std::string::npos) << o1.error;
  // So are profile fields.
  const std::vector<ReferenceField> fields = ReferenceFields(1, now);
  for (const auto& start : std::vector<std::function<void(Done)>>{
           [&](Done d) { conn->SetFields("u1", fields, std::move(d)); },
           [&](Done d) { conn->Increment("u1", CapName(7), 3600, std::move(d)); },
           [&](Done d) { conn->GetFields("u1", kCapPrefix, std::move(d)); }}) {
    o1 = call(start);
    EXPECT_FALSE(o1.ok);
    EXPECT_NE(o1.error.find("not supported"), std::string::npos) << o1.error;
  }
  conn.reset();

  // whole_profiles: the same reads as HGETALL, the hash view of a profile.
  RedisOptions hash = o;
  hash.whole_profiles = true;
  auto hash_target = NewRedisTarget(hash);
  ASSERT_TRUE(hash_target.ok()) << hash_target.status().ToString();
  opened = false;
  (*hash_target)->Open(io, [&](Result<std::unique_ptr<Connection>> r) {
    opened = true;
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    conn = std::move(*r);
  });
  io.restart();
  while (!opened && io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  ASSERT_NE(conn, nullptr);
  o1 = call([&](Done d) { conn->Get("u1", std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 3u);
  o1 = call([&](Done d) { conn->Get("nobody", std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.missing, 1u);
  o1 = call([&](Done d) { conn->BatchGet(batch, std::move(d)); });
  EXPECT_TRUE(o1.ok) << o1.error;
  EXPECT_EQ(o1.segments, 4u);  // u1's 100, 200, 400 and u2's 7
  EXPECT_EQ(o1.missing, 1u);
  conn.reset();

  auto later = (*target)->Sample();
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(later->pid, first->pid);
  EXPECT_EQ(later->records, 2u);
  EXPECT_GT(later->device_bytes_used, 0u);

  RedisOptions wrong = o;
  wrong.port = server_.port();  // the binary protocol's port: not RESP
  wrong.timeout = milliseconds(500);
  EXPECT_EQ(NewRedisTarget(wrong).status().code(), Status::Code::kUnavailable);
  wrong = o;
  wrong.whole_profiles = true;
  wrong.ids_only = true;
  EXPECT_EQ(NewRedisTarget(wrong).status().code(), Status::Code::kInvalidArgument);
}

// segbench through the RESP port alone (load, get, batch-get, upsert,
// trim), then beside the binary protocol on the same server (gets of users
// half of whom were never loaded).
TEST_F(SegbenchRespTest, ToolMeasuresTheRespPort) {
  const std::string common = std::string(SEGBENCH_PATH) +
                             " --connections 2 --seconds 0.25 --warmup 0.05 --batch 4 --json ";
  const HourWatch hours;
  auto [rc, out] = RunTool(common + "--resp " + Address(server_.resp_port()) +
                           " --users 30 load get batch-get upsert trim 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["servers"].size(), 1u);
  EXPECT_EQ(j["servers"][0]["name"], "segstore resp");
  EXPECT_EQ(j["servers"][0]["durability"], "commit");
  EXPECT_EQ(j["servers"][0]["load"]["after"]["records"], 30);
  EXPECT_GT(j["servers"][0]["disk_bytes_per_user"].get<double>(), 1000.0);
  std::set<std::string> workloads;
  for (const auto& run : j["runs"]) {
    const std::string w = run["workload"];
    workloads.insert(w);
    EXPECT_EQ(run["target"], "segstore resp");
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_EQ(run["missing"], 0) << run.dump();
    EXPECT_GT(run["ops"].get<uint64_t>(), 0u) << run.dump();
    // A segstored process: its CPU time is read from /proc by the pid INFO gave.
    EXPECT_FALSE(run["server_cpu_us_per_op"].is_null()) << run.dump();
    if (w == "get") {
      ExpectWholeProfiles(run["segments_per_op"].get<double>(), 1, 30, hours);
    }
    if (w == "batch-get") {
      ExpectWholeProfiles(run["segments_per_op"].get<double>(), 4, 30, hours);
    }
    // (Which trims remove segments depends on the warm-up, which trims all
    // 30 users: TargetReadsSegstoresReplies counts them.)
    if (w == "trim") {
      EXPECT_GT(run["expired_segments"].get<uint64_t>(), 0u);
    }
  }
  EXPECT_EQ(workloads, (std::set<std::string>{"get", "batch-get", "upsert", "trim"}));

  std::tie(rc, out) =
      RunTool(common + "--segstore " + Address(server_.port()) + " --resp " +
              Address(server_.resp_port()) + " --users 60 get batch-get 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  j = nlohmann::json::parse(out);
  ASSERT_EQ(j["servers"].size(), 2u);
  std::map<std::string, double> missing_share;
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["errors"], 0) << run.dump();
    const double users = run["workload"] == "batch-get" ? 4.0 : 1.0;
    missing_share[run["target"].get<std::string>() + " " + run["workload"].get<std::string>()] =
        run["missing"].get<double>() / (users * run["requests_measured"].get<double>());
  }
  ASSERT_EQ(missing_share.size(), 4u);
  for (const auto& [row, share] : missing_share) EXPECT_NEAR(share, 0.5, 0.15) << row;

  // --resp-hgetall: the reads also as HGETALL, a subject of its own that
  // loads nothing (the 30 users loaded first are all there is).
  std::tie(rc, out) = RunTool(common + "--resp " + Address(server_.resp_port()) +
                              " --resp-hgetall --users 30 get 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  j = nlohmann::json::parse(out);
  ASSERT_EQ(j["servers"].size(), 1u);
  std::set<std::string> targets;
  for (const auto& run : j["runs"]) {
    targets.insert(run["target"].get<std::string>());
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_EQ(run["missing"], 0) << run.dump();
    // About 1,000: the upserts and trims above removed a few expired segments.
    EXPECT_GT(run["segments_per_op"].get<double>(), 900.0) << run.dump();
  }
  EXPECT_EQ(targets, (std::set<std::string>{"segstore resp", "segstore HGETALL"}));
  std::tie(rc, out) =
      RunTool(common + "--segstore " + Address(server_.port()) + " --resp-hgetall get 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--resp-hgetall"), std::string::npos) << out;
}

// link beside the RESP port: it links through the binary protocol and is
// skipped on the RESP subject, with a note; both subjects' gets then draw
// from the unlinked users only, and get-linked runs on segstore alone.
TEST_F(SegbenchRespTest, ToolLinksThroughTheBinaryProtocolOnly) {
  const HourWatch hours;
  auto [rc, out] = RunTool(std::string(SEGBENCH_PATH) +
                           " --connections 2 --seconds 0.2 --warmup 0.05 --json --segstore " +
                           Address(server_.port()) + " --resp " + Address(server_.resp_port()) +
                           " --users 40 --group-size 4 load link get get-linked 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["link"]["groups"], 5);  // 20 users in 4s
  EXPECT_EQ(j["link"]["linked_users"], 20);
  std::set<std::string> rows;
  for (const auto& run : j["runs"]) {
    rows.insert(run["target"].get<std::string>() + " " + run["workload"].get<std::string>());
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_EQ(run["missing"], 0) << run.dump();
    if (run["workload"] == "get") {
      EXPECT_EQ(run["users_first"], 20) << run.dump();
      ExpectWholeProfiles(run["segments_per_op"].get<double>(), 1, 40, hours);
    } else {
      EXPECT_DOUBLE_EQ(run["profiles_per_op"].get<double>(), 4.0) << run.dump();
    }
  }
  EXPECT_EQ(rows,
            (std::set<std::string>{"segstore get", "segstore resp get", "segstore get-linked"}));
  std::string notes;
  for (const auto& n : j["notes"]) notes += n.get<std::string>() + "\n";
  EXPECT_NE(notes.find("segstore resp link: skipped"), std::string::npos) << notes;
  EXPECT_NE(notes.find("segstore resp get-linked: skipped"), std::string::npos) << notes;
}

// The field workloads beside the RESP port: get-fields and incr skipped on
// the RESP subject with a note, upsert-1 run on both; a segstored process,
// so incr and upsert-1 have server CPU figures side by side. (No --fields:
// the increments make the counters; ToolLoadsFieldsAndRunsTheirWorkloads
// loads them, which takes the server a flush per name.)
TEST_F(SegbenchRespTest, ToolMeasuresFieldsThroughTheBinaryProtocolOnly) {
  auto [rc, out] = RunTool(std::string(SEGBENCH_PATH) +
                           " --connections 2 --seconds 0.3 --warmup 0.05 --json --segstore " +
                           Address(server_.port()) + " --resp " + Address(server_.resp_port()) +
                           " --users 20 load get-fields incr upsert-1 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  std::set<std::string> rows;
  for (const auto& run : j["runs"]) {
    rows.insert(run["target"].get<std::string>() + " " + run["workload"].get<std::string>());
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_FALSE(run["server_cpu_us_per_op"].is_null()) << run.dump();
  }
  EXPECT_EQ(rows, (std::set<std::string>{"segstore get-fields", "segstore incr",
                                         "segstore upsert-1", "segstore resp upsert-1"}));
  std::string notes;
  for (const auto& n : j["notes"]) notes += n.get<std::string>() + "\n";
  EXPECT_NE(notes.find("segstore resp get-fields: skipped"), std::string::npos) << notes;
  EXPECT_NE(notes.find("segstore resp incr: skipped"), std::string::npos) << notes;
  ASSERT_EQ(j["incr_vs_upsert_1"].size(), 1u);
  const auto& goal = j["incr_vs_upsert_1"][0];
  EXPECT_EQ(goal["target"], "segstore");
  EXPECT_GT(goal["incr_server_cpu_us_per_op"].get<double>(), 0.0);
  EXPECT_GT(goal["upsert_1_server_cpu_us_per_op"].get<double>(), 0.0);
}

}  // namespace
}  // namespace segstore::bench
