// segstored killed with SIGKILL at random moments under a commit-mode write
// load from several connections, then restarted on the same data: every
// acknowledged upsert is there, every acknowledged delete stays deleted (also
// once defragmentation has moved records around), nothing reads as corrupt,
// and recovery's time is reported.
//
// The same with links (profile bridging): every acknowledged link holds and
// every acknowledged unlink stays, and no link reads half-made.
//
// The same with counters (profile fields): every acknowledged increment
// counts once after a restart, none is lost and none is applied twice.
//
// 20 kill cycles by default (links and counters: 10); SEGSTORE_CRASH_CYCLES=N runs N (for example
// `SEGSTORE_CRASH_CYCLES=500 ./build/tests/integration/integration_test
// --gtest_filter='CrashTest.*'`). SEGSTORE_CRASH_SEED repeats a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration/daemon.h"
#include "segstore/client.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using std::chrono::milliseconds;
using testing::Daemon;
using testing::NotifySocket;
using testing::PortOf;
using testing::ReadFile;

constexpr int kWriters = 4;
constexpr int kUsers = 200;  // user u is written by writer u % kWriters only

std::string User(int u) { return "crash-user-" + std::to_string(u); }

// A connection, or null once the server is gone (no test failure: the kill
// may come first).
std::unique_ptr<client::Client> TryConnect(uint16_t port) {
  client::ClientOptions o;
  o.port = port;
  o.connect_timeout = milliseconds(10000);
  o.request_timeout = milliseconds(10000);
  auto c = client::Client::Connect(o);
  return c.ok() ? std::move(c).value() : nullptr;
}

// Counts a writer thread out when it ends, however it ends.
struct CountDown {
  std::atomic<int>& n;
  ~CountDown() { --n; }
};

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

// What a user's live segments may be after a crash: the acknowledged state,
// or that state with the one write in flight at the kill applied.
struct UserModel {
  std::set<uint64_t> acked;
  enum class Pending { kNone, kUpsert, kDelete } pending = Pending::kNone;
  std::vector<uint64_t> pending_ids;

  bool Allows(const std::set<uint64_t>& now) const {
    if (now == acked) return true;
    if (pending == Pending::kDelete) return now.empty();
    if (pending == Pending::kUpsert) {
      std::set<uint64_t> with = acked;
      with.insert(pending_ids.begin(), pending_ids.end());
      return now == with;
    }
    return false;
  }
};

// Stats by name, from one connection.
std::map<std::string, StatEntry> StatsOf(client::Client& c) {
  std::map<std::string, StatEntry> out;
  auto s = c.Stats();
  if (!s.ok()) return out;
  for (const StatEntry& e : s->entries) out[e.name] = e;
  return out;
}

uint64_t UintStat(const std::map<std::string, StatEntry>& stats, const std::string& name) {
  auto it = stats.find(name);
  if (it == stats.end() || !std::holds_alternative<uint64_t>(it->second.value)) return 0;
  return std::get<uint64_t>(it->second.value);
}

class CrashTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.File(name); }

  // A small device and small write blocks, so that a few seconds of writes
  // wrap it and defragmentation has to run.
  void WriteConfig() {
    std::ofstream f(Path("segstored.toml"));
    f << "[server]\nlisten = \"127.0.0.1:0\"\nthreads = 2\n"
      << "[storage]\npath = \"" << Path("segstore.dat") << "\"\n"
      << "file_size = \"24MiB\"\nwrite_block_size = \"64KiB\"\ndurability = \"commit\"\n"
      << "defrag_threshold = 0.5\ndefrag_blocks_per_second = 2000\n"
      << "rotate_blocks_per_second = 200\n"
      // ctest runs these a second time with every block read whole
      // (tests/integration/CMakeLists.txt).
      << "block_summaries = " << (EnvOr("SEGSTORE_TEST_BLOCK_SUMMARIES", 1) != 0 ? "true" : "false")
      << "\n[log]\nlevel = \"warn\"\n";
  }

  storage::testing::TempDir dir_;
};

TEST_F(CrashTest, SigkillUnderLoadLosesNoAcknowledgedWriteAndNoDeleteComesBack) {
  const uint64_t cycles = EnvOr("SEGSTORE_CRASH_CYCLES", 20);
  const uint64_t seed = EnvOr("SEGSTORE_CRASH_SEED", std::random_device{}());
  SCOPED_TRACE("SEGSTORE_CRASH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  WriteConfig();
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  std::vector<UserModel> model(kUsers);
  uint64_t next_id = 1;  // segment IDs, unique over the whole run
  uint64_t acked_writes = 0, acked_deletes = 0, defrag_blocks = 0;
  double max_recovery_seconds = 0;

  for (uint64_t cycle = 0; cycle <= cycles; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    Daemon d(dir_.File(""), {"--config", Path("segstored.toml")}, log,
             {"NOTIFY_SOCKET=" + notify.path()});
    const std::string ready = notify.WaitFor("READY=1");
    ASSERT_FALSE(ready.empty()) << ReadFile(log);
    const uint16_t port = PortOf(ready);
    ASSERT_NE(port, 0u) << ready;

    // Check every user against the model, then take what was found as the
    // new acknowledged state (the write in flight at the kill either landed
    // or did not).
    {
      auto c = testing::Connect(port);
      ASSERT_NE(c, nullptr);
      for (int u = 0; u < kUsers; ++u) {
        auto got = c->Get(User(u));
        std::set<uint64_t> now;
        if (got.ok()) {
          now.insert(got->ids.begin(), got->ids.end());
        } else {
          ASSERT_TRUE(got.status().IsNotFound()) << User(u) << ": " << got.status().ToString();
        }
        UserModel& m = model[static_cast<size_t>(u)];
        ASSERT_TRUE(m.Allows(now)) << User(u) << " has " << now.size() << " segments, "
                                   << m.acked.size() << " acknowledged";
        m.acked = now;
        m.pending = UserModel::Pending::kNone;
        m.pending_ids.clear();
      }
      const auto stats = StatsOf(*c);
      EXPECT_EQ(UintStat(stats, "storage.corruptions"), 0u);
      auto rs = stats.find("recovery.seconds");
      if (rs != stats.end() && std::holds_alternative<double>(rs->second.value)) {
        max_recovery_seconds = std::max(max_recovery_seconds, std::get<double>(rs->second.value));
      }
    }
    if (cycle == cycles) break;  // the last start only checks

    // Writers: each owns its users and keeps one request in flight.
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> ids{next_id};
    std::atomic<uint64_t> writes{0}, deletes{0};
    std::atomic<int> writing{kWriters};  // writers still going
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w, wseed = rng()] {
        CountDown done{writing};
        std::mt19937_64 r(wseed);
        auto c = TryConnect(port);
        if (c == nullptr) return;
        while (!stop.load()) {
          const int u = w + kWriters * static_cast<int>(r() % (kUsers / kWriters));
          UserModel& m = model[static_cast<size_t>(u)];
          if (r() % 10 == 0) {
            m.pending = UserModel::Pending::kDelete;
            if (!c->Delete(User(u)).ok()) return;  // killed: the delete stays pending
            m.acked.clear();
            ++deletes;
          } else {
            std::vector<SegmentUpdate> up;
            m.pending = UserModel::Pending::kUpsert;
            m.pending_ids.clear();
            for (uint64_t k = 1 + r() % 3; k > 0; --k) {
              up.push_back({ids++, 30 * 86400, true, {}, {}});
              m.pending_ids.push_back(up.back().id);
            }
            if (!c->Upsert(User(u), up).ok()) return;  // killed: stays pending
            m.acked.insert(m.pending_ids.begin(), m.pending_ids.end());
            ++writes;
          }
          m.pending = UserModel::Pending::kNone;
          m.pending_ids.clear();
        }
      });
    }
    // Let the load run to a random number of acknowledged writes, noting
    // what defragmentation did half way, and kill. A count, not a time: a
    // slow machine (or a sanitizer build) takes longer but writes as much,
    // so the device wraps and defragmentation runs as it does elsewhere.
    // (120 s guards against a hang.)
    const uint64_t target = 50 + rng() % 2500;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto load_until = [&](uint64_t acked) {
      while (writes.load() + deletes.load() < acked && writing.load() > 0 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(1));
      }
    };
    load_until(target / 2);
    if (auto c = TryConnect(port)) defrag_blocks += UintStat(StatsOf(*c), "storage.defrag_blocks");
    load_until(target);
    EXPECT_EQ(writing.load(), kWriters) << "a writer stopped before the kill";
    EXPECT_GE(writes.load() + deletes.load(), target) << "the load stalled";
    d.Signal(SIGKILL);
    EXPECT_EQ(d.Wait(), 128 + SIGKILL);
    stop = true;
    for (auto& t : writers) t.join();
    next_id = ids.load();
    acked_writes += writes.load();
    acked_deletes += deletes.load();
  }
  std::printf(
      "crash test: %llu kill cycles, %llu acknowledged upserts and %llu deletes checked, "
      "%llu write blocks defragmented, longest recovery %.3f s\n",
      static_cast<unsigned long long>(cycles), static_cast<unsigned long long>(acked_writes),
      static_cast<unsigned long long>(acked_deletes),
      static_cast<unsigned long long>(defrag_blocks), max_recovery_seconds);
  EXPECT_GT(acked_writes, cycles);
  EXPECT_GT(acked_deletes, 0u);
  EXPECT_GT(defrag_blocks, 0u) << "defragmentation never ran: deletes were not checked across it";
}

// Each writer owns kLinkPool users: the first two are masters, the rest link
// to one of them, unlink, and get segments, with a kill at a random moment.
// After each restart every member's master is its acknowledged one (or the
// op in flight at the kill applied), and every read agrees with the others:
// master_of, the get's master, and the master's list of links.
TEST_F(CrashTest, SigkillUnderLinksLosesNoAcknowledgedLinkAndLeavesNoHalfLink) {
  constexpr int kLinkPool = 12;
  const uint64_t cycles = EnvOr("SEGSTORE_CRASH_CYCLES", 10);
  const uint64_t seed = EnvOr("SEGSTORE_CRASH_SEED", std::random_device{}());
  SCOPED_TRACE("SEGSTORE_CRASH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  WriteConfig();
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  auto name = [](int w, int i) { return "link-" + std::to_string(w) + "-" + std::to_string(i); };
  // member -> acknowledged master ("" none), and the op in flight at the kill.
  struct Member {
    std::string acked;
    std::optional<std::string> pending;  // the master it may have now ("" for an unlink)
  };
  std::map<std::string, Member> members;
  std::atomic<uint64_t> acked_links{0}, acked_unlinks{0};

  for (uint64_t cycle = 0; cycle <= cycles; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    Daemon d(dir_.File(""), {"--config", Path("segstored.toml")}, log,
             {"NOTIFY_SOCKET=" + notify.path()});
    const std::string ready = notify.WaitFor("READY=1");
    ASSERT_FALSE(ready.empty()) << ReadFile(log);
    const uint16_t port = PortOf(ready);
    {
      auto c = testing::Connect(port);
      ASSERT_NE(c, nullptr);
      std::map<std::string, std::set<std::string>> listed;  // master -> its members, as read
      for (int w = 0; w < kWriters; ++w) {
        for (int m = 0; m < 2; ++m) {
          auto page = c->Links(name(w, m), "", 100);
          if (page.ok()) {
            ASSERT_EQ(page->master, name(w, m));
            for (const LinkedUser& l : page->links) listed[name(w, m)].insert(l.user);
          } else {
            ASSERT_TRUE(page.status().IsNotFound()) << page.status().ToString();
          }
        }
      }
      for (auto& [user, m] : members) {
        auto master = c->MasterOf(user);
        std::string now;
        if (master.ok()) {
          now = *master;
        } else {
          ASSERT_TRUE(master.status().IsNotFound()) << user << ": " << master.status().ToString();
        }
        ASSERT_TRUE(now == m.acked || (m.pending && now == *m.pending))
            << user << " has master '" << now << "', acknowledged '" << m.acked << "'";
        // Every read agrees: the merged get names the same master, and a
        // master lists the member exactly when the member says it.
        auto got = c->Get(user);
        ASSERT_TRUE(got.ok()) << user << ": " << got.status().ToString();
        EXPECT_EQ(got->master, now) << user;
        for (int k = 0; k < 2; ++k) {
          const std::string master_name = user.substr(0, user.rfind('-') + 1) + std::to_string(k);
          EXPECT_EQ(listed[master_name].count(user) == 1, now == master_name)
              << user << " and " << master_name;
        }
        m.acked = now;
        m.pending.reset();
      }
    }
    if (cycle == cycles) break;

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> done_ops{0};
    std::atomic<int> writing{kWriters};
    std::vector<std::thread> writers;
    // Each writer's members, created before the threads (the map does not change under them).
    for (int w = 0; w < kWriters; ++w) {
      for (int i = 2; i < kLinkPool; ++i) members.try_emplace(name(w, i));
    }
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w, wseed = rng()] {
        CountDown done{writing};
        std::mt19937_64 r(wseed);
        auto c = TryConnect(port);
        if (c == nullptr) return;
        // Every user has a segment, so a get by any of them finds a profile.
        for (int i = 0; i < kLinkPool; ++i) {
          std::vector<SegmentUpdate> up = {{static_cast<uint64_t>(i), 30 * 86400, true, {}, {}}};
          if (!c->Upsert(name(w, i), up).ok()) return;
        }
        while (!stop.load()) {
          const std::string user = name(w, 2 + static_cast<int>(r() % (kLinkPool - 2)));
          Member& m = members.at(user);  // its own: no other thread touches it
          if (r() % 4 == 0) {
            m.pending = "";
            auto u = c->Unlink(user);
            if (!u.ok()) return;  // killed: stays pending
            m.acked = "";
            ++acked_unlinks;
          } else {
            const std::string master = name(w, static_cast<int>(r() % 2));
            m.pending = master;
            auto l = c->Link(user, master);
            if (!l.ok()) return;
            m.acked = master;
            ++acked_links;
          }
          m.pending.reset();
          ++done_ops;
        }
      });
    }
    const uint64_t target = 20 + rng() % 400;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (done_ops.load() < target && writing.load() > 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    EXPECT_EQ(writing.load(), kWriters) << "a writer stopped before the kill";
    d.Signal(SIGKILL);
    EXPECT_EQ(d.Wait(), 128 + SIGKILL);
    stop = true;
    for (auto& t : writers) t.join();
  }
  std::printf("crash test (links): %llu kill cycles, %llu acknowledged links and %llu unlinks\n",
              static_cast<unsigned long long>(cycles),
              static_cast<unsigned long long>(acked_links.load()),
              static_cast<unsigned long long>(acked_unlinks.load()));
  EXPECT_GT(acked_links.load(), cycles);
}

// Each writer owns kCounterUsers users and increments their counters (one
// with a cap it reaches), raises a "seen" time with field_max and adds a
// segment now and then, one request in flight, until a kill at a random
// moment. After each restart every counter holds its acknowledged value, or
// that value plus the one increment in flight at the kill: never less (an
// acknowledged increment lost) and never that increment twice.
TEST_F(CrashTest, SigkillUnderIncrementsLosesNoneAndAppliesNoneTwice) {
  constexpr int kCounterUsers = 8;
  constexpr int kCounters = 4;  // "cap:0".."cap:3"; "cap:3" has a cap
  constexpr int64_t kCap = 60;
  const uint64_t cycles = EnvOr("SEGSTORE_CRASH_CYCLES", 10);
  const uint64_t seed = EnvOr("SEGSTORE_CRASH_SEED", std::random_device{}());
  SCOPED_TRACE("SEGSTORE_CRASH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  WriteConfig();
  NotifySocket notify(Path("notify.sock"));
  const std::string log = Path("segstored.log");
  auto user = [](int w, int i) { return "ctr-" + std::to_string(w) + "-" + std::to_string(i); };
  auto counter = [](int k) { return "cap:" + std::to_string(k); };
  // A field's acknowledged value and the write in flight at the kill: for a
  // counter the delta it may have added, for "seen" the time it may have raised to.
  struct Value {
    int64_t acked = 0;
    std::optional<int64_t> pending;
  };
  struct User {
    Value counters[kCounters];
    Value seen;
  };
  std::map<std::string, User> users;
  for (int w = 0; w < kWriters; ++w) {
    for (int i = 0; i < kCounterUsers; ++i) users.try_emplace(user(w, i));
  }
  std::atomic<uint64_t> acked_increments{0}, capped{0};

  for (uint64_t cycle = 0; cycle <= cycles; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    Daemon d(dir_.File(""), {"--config", Path("segstored.toml")}, log,
             {"NOTIFY_SOCKET=" + notify.path()});
    const std::string ready = notify.WaitFor("READY=1");
    ASSERT_FALSE(ready.empty()) << ReadFile(log);
    const uint16_t port = PortOf(ready);
    {
      auto c = testing::Connect(port);
      ASSERT_NE(c, nullptr);
      GetOptions all;
      all.fields.mode = FieldSelection::Mode::kAll;
      for (auto& [name, u] : users) {
        auto got = c->Get(name, all);
        std::map<std::string, FieldValue> now;
        if (got.ok()) {
          for (const Field& f : got->fields) now[f.name] = f.value;
        } else {
          ASSERT_TRUE(got.status().IsNotFound()) << name << ": " << got.status().ToString();
        }
        for (int k = 0; k < kCounters; ++k) {
          Value& v = u.counters[k];
          const auto it = now.find(counter(k));
          int64_t found = 0;
          if (it != now.end()) {
            ASSERT_EQ(it->second.type, FieldValue::Type::kInt) << name;
            found = it->second.i;
          }
          ASSERT_TRUE(found == v.acked || (v.pending && found == v.acked + *v.pending))
              << name << " " << counter(k) << " is " << found << ", acknowledged " << v.acked
              << (v.pending ? ", one increment of " + std::to_string(*v.pending) + " in flight"
                            : std::string());
          if (k == kCounters - 1) {
            ASSERT_LE(found, kCap) << name;
          }
          v.acked = found;
          v.pending.reset();
        }
        const auto seen = now.find("seen");
        const int64_t found = seen == now.end() ? 0 : seen->second.i;
        ASSERT_TRUE(found == u.seen.acked ||
                    (u.seen.pending && found == std::max(u.seen.acked, *u.seen.pending)))
            << name << " seen " << found << ", acknowledged " << u.seen.acked;
        u.seen.acked = found;
        u.seen.pending.reset();
      }
      EXPECT_EQ(UintStat(StatsOf(*c), "storage.corruptions"), 0u);
    }
    if (cycle == cycles) break;

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> done_ops{0};
    std::atomic<int> writing{kWriters};
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w, wseed = rng()] {
        CountDown done{writing};
        std::mt19937_64 r(wseed);
        auto c = TryConnect(port);
        if (c == nullptr) return;
        while (!stop.load()) {
          const std::string name = user(w, static_cast<int>(r() % kCounterUsers));
          User& u = users.at(name);  // its own: no other thread touches it
          const uint64_t op = r() % 10;
          if (op == 0) {
            std::vector<SegmentUpdate> up = {{r() % 1000, 30 * 86400, true, {}, {}}};
            if (!c->Upsert(name, up).ok()) return;
          } else if (op == 1) {
            const auto t = static_cast<int64_t>(1700000000 + r() % 100000000);
            u.seen.pending = t;
            FieldUpdate f;
            f.name = "seen";
            f.value = FieldValue::Time(static_cast<UnixSeconds>(t));
            auto m = c->FieldMax(name, f);
            if (!m.ok()) return;  // killed: stays pending
            u.seen.acked = std::max(u.seen.acked, t);
            u.seen.pending.reset();
          } else {
            const int k = static_cast<int>(r() % kCounters);
            Value& v = u.counters[k];
            FieldIncrement inc;
            inc.name = counter(k);
            inc.delta = 1 + static_cast<int64_t>(r() % 5);
            if (k == kCounters - 1) inc.cap = kCap;
            if (k == 1) {  // a long window, sliding: it is set again by every increment
              inc.ttl = 30 * 86400;
              inc.window = FieldIncrement::Window::kSliding;
            }
            // A capped increment writes nothing: the model allows only what fits.
            if (!inc.cap || v.acked + inc.delta <= *inc.cap) v.pending = inc.delta;
            auto result = c->FieldIncrement(name, inc);
            if (!result.ok()) return;  // killed: stays pending
            if (result->capped) {
              EXPECT_GT(v.acked + inc.delta, kCap) << name;
              EXPECT_EQ(result->value, v.acked) << name;
              ++capped;
            } else {
              EXPECT_EQ(result->value, v.acked + inc.delta) << name << " " << inc.name;
              v.acked = result->value;
              ++acked_increments;
            }
            v.pending.reset();
          }
          ++done_ops;
        }
      });
    }
    const uint64_t target = 20 + rng() % 1500;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (done_ops.load() < target && writing.load() > 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    EXPECT_EQ(writing.load(), kWriters) << "a writer stopped before the kill";
    d.Signal(SIGKILL);
    EXPECT_EQ(d.Wait(), 128 + SIGKILL);
    stop = true;
    for (auto& t : writers) t.join();
  }
  std::printf(
      "crash test (counters): %llu kill cycles, %llu acknowledged increments, %llu capped\n",
      static_cast<unsigned long long>(cycles),
      static_cast<unsigned long long>(acked_increments.load()),
      static_cast<unsigned long long>(capped.load()));
  EXPECT_GT(acked_increments.load(), cycles);
}

}  // namespace
}  // namespace segstore::server
