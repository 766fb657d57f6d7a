// segbench's Redis target against a real Redis 7 (Debian's redis-tools: its
// server binary is redis-check-rdb run as "redis-server"), started per test
// on an ephemeral loopback port with no persistence, and stopped (SIGTERM)
// after it. The io_context is driven by the test thread; nothing here
// depends on timing beyond generous deadlines.
#include "bench/segbench/redis_target.h"

#include <gtest/gtest.h>

#include "support/redis_server.h"

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace segstore::bench {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

uint32_t UnixNow() {
  return static_cast<uint32_t>(
      std::chrono::duration_cast<seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

using segstore::testing::FreePort;
using segstore::testing::RedisServer;
using segstore::testing::SyncClient;

class RedisTargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(server_.Start(&why)) << why;
  }

  void TearDown() override {
    server_.Stop();
    std::error_code ec;
    std::filesystem::remove_all(server_.dir(), ec);
  }

  RedisOptions Options(bool whole_profiles = false) {
    RedisOptions o;
    o.port = server_.port();
    o.whole_profiles = whole_profiles;
    return o;
  }

  std::unique_ptr<Target> MakeTarget(const RedisOptions& options) {
    auto target = NewRedisTarget(options);
    EXPECT_TRUE(target.ok()) << target.status().ToString();
    return target.ok() ? std::move(target.value()) : nullptr;
  }

  // Runs io_ until `done()` or 20 s; false on the deadline.
  bool RunUntil(const std::function<bool()>& done) {
    const auto deadline = Clock::now() + seconds(20);
    while (!done()) {
      if (Clock::now() >= deadline) return false;
      io_.restart();
      io_.run_for(milliseconds(10));
    }
    return true;
  }

  // Opens a connection; checks `done` is not called inside Open. (Callback
  // state is shared, not on this stack: a late callback after a failed
  // check must not write into a finished frame.)
  Result<std::unique_ptr<Connection>> Open(Target& target) {
    struct Slot {
      int calls = 0;
      std::optional<Result<std::unique_ptr<Connection>>> got;
    };
    auto slot = std::make_shared<Slot>();
    target.Open(io_, [slot](Result<std::unique_ptr<Connection>> r) {
      ++slot->calls;
      slot->got.emplace(std::move(r));
    });
    EXPECT_EQ(slot->calls, 0) << "Open ran its callback inside the call";
    EXPECT_TRUE(RunUntil([&] { return slot->calls > 0; })) << "Open never called back";
    EXPECT_EQ(slot->calls, 1);
    if (!slot->got) return Status::Timeout("no open callback");
    return std::move(*slot->got);
  }

  std::unique_ptr<Connection> MustOpen(Target& target) {
    auto c = Open(target);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c.value()) : nullptr;
  }

  // Starts one operation with `start` and waits for its one callback.
  Outcome Call(const std::function<void(Done)>& start) {
    struct Slot {
      int calls = 0;
      std::optional<Outcome> got;
    };
    auto slot = std::make_shared<Slot>();
    start([slot](Outcome o) {
      ++slot->calls;
      slot->got = std::move(o);
    });
    EXPECT_EQ(slot->calls, 0) << "callback ran inside the call";
    EXPECT_TRUE(RunUntil([&] { return slot->calls > 0; })) << "no callback";
    io_.restart();
    io_.poll();  // a second callback, if any, would come now
    EXPECT_EQ(slot->calls, 1);
    return slot->got.value_or(Outcome{false, "no callback", 0, 0});
  }

  Outcome Get(Connection& c, const std::string& user) {
    return Call([&](Done d) { c.Get(user, std::move(d)); });
  }
  Outcome BatchGet(Connection& c, const std::vector<std::string>& users) {
    return Call([&](Done d) { c.BatchGet(users, std::move(d)); });
  }
  Outcome Upsert(Connection& c, const std::string& user, const std::vector<Assignment>& segs) {
    return Call([&](Done d) { c.Upsert(user, segs, std::move(d)); });
  }
  Outcome Trim(Connection& c, const std::string& user) {
    return Call([&](Done d) { c.Trim(user, std::move(d)); });
  }
  Outcome Replace(Connection& c, const std::vector<std::string>& users,
                  const std::vector<std::vector<Assignment>>& profiles) {
    return Call([&](Done d) { c.Replace(users, profiles, std::move(d)); });
  }

  // user-a: 5 live, 3 expired; user-b: 2 live; user-dead: 2 expired.
  void LoadSample(Connection& c) {
    const uint32_t now = UnixNow();
    const uint32_t live = now + 3600;
    const uint32_t dead = now - 100;
    const Outcome o = Replace(c, {"user-a", "user-b", "user-dead"},
                              {{{1, live},
                                {2, live},
                                {3, dead},
                                {4, live},
                                {5, dead},
                                {6, live},
                                {7, dead},
                                {8, live + 7200}},
                               {{10, live}, {11, live}},
                               {{20, dead}, {21, dead}}});
    ASSERT_TRUE(o.ok) << o.error;
  }

  boost::asio::io_context io_;  // declared first: outlives every connection
  RedisServer server_;
};

TEST_F(RedisTargetTest, ReplaceThenLiveGetCountsOnlyLiveSegments) {
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(target->name(), "redis");
  EXPECT_EQ(target->address(), "127.0.0.1:" + std::to_string(server_.port()));
  EXPECT_GT(target->load_batch(), 0u);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);

  SyncClient sync(server_.port());
  EXPECT_EQ(sync.Integer({"HLEN", "user-a"}), 8);  // Replace wrote expired values too

  Outcome o = Get(*conn, "user-a");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 5u);
  EXPECT_EQ(o.missing, 0u);
  o = Get(*conn, "user-b");
  EXPECT_EQ(o.segments, 2u);
  EXPECT_EQ(o.missing, 0u);
  // A hash whose segments all expired is a profile with no live segment.
  o = Get(*conn, "user-dead");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 0u);
  EXPECT_EQ(o.missing, 0u);
  o = Get(*conn, "nobody");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 0u);
  EXPECT_EQ(o.missing, 1u);

  // Replace replaces: the old fields are gone.
  const uint32_t expiry = UnixNow() + 60;  // once: the clock may tick between two reads
  o = Replace(*conn, {"user-a"}, {{{100, expiry}}});
  ASSERT_TRUE(o.ok) << o.error;
  EXPECT_EQ(sync.HashOf("user-a"),
            (std::map<std::string, std::string>{{"100", std::to_string(expiry)}}));
  EXPECT_EQ(Get(*conn, "user-a").segments, 1u);
  EXPECT_EQ(conn->in_flight(), 0u);
}

TEST_F(RedisTargetTest, ExpiriesOfOtherLengthsCompareAsNumbers) {
  // The scripts compare 10-digit values as strings; others go through
  // tonumber(). Redis values are whatever was written: write them directly.
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  SyncClient sync(server_.port());
  const std::string live = std::to_string(UnixNow() + 3600);
  ASSERT_NE(sync.Run({"HSET", "user-odd", "1", "99999999999", "2", "7", "3", "123456789", "4", live,
                      "5", "0"}),
            nullptr);
  Outcome o = Get(*conn, "user-odd");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 2u);  // 1 (11 digits, far future) and 4
  o = Trim(*conn, "user-odd");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 3u);  // 2, 3 and 5
  EXPECT_EQ(sync.HashOf("user-odd"),
            (std::map<std::string, std::string>{{"1", "99999999999"}, {"4", live}}));
}

TEST_F(RedisTargetTest, WholeProfilesGetCountsExpiredSegmentsToo) {
  auto target = MakeTarget(Options(/*whole_profiles=*/true));
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);

  Outcome o = Get(*conn, "user-a");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 8u);
  EXPECT_EQ(o.missing, 0u);
  o = Get(*conn, "user-dead");
  EXPECT_EQ(o.segments, 2u);
  EXPECT_EQ(o.missing, 0u);
  o = Get(*conn, "nobody");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 0u);
  EXPECT_EQ(o.missing, 1u);
}

TEST_F(RedisTargetTest, BatchGetSumsSegmentsAndCountsMissingUsers) {
  auto live_target = MakeTarget(Options());
  auto whole_target = MakeTarget(Options(/*whole_profiles=*/true));
  ASSERT_NE(live_target, nullptr);
  ASSERT_NE(whole_target, nullptr);
  auto live = MustOpen(*live_target);
  auto whole = MustOpen(*whole_target);
  ASSERT_NE(live, nullptr);
  ASSERT_NE(whole, nullptr);
  LoadSample(*live);

  const std::vector<std::string> users = {"user-a", "user-b",    "nobody",
                                          "user-a", "user-dead", "nobody-else"};
  Outcome o = BatchGet(*live, users);
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 5u + 2 + 0 + 5 + 0 + 0);
  EXPECT_EQ(o.missing, 2u);
  o = BatchGet(*whole, users);
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 8u + 2 + 0 + 8 + 2 + 0);
  EXPECT_EQ(o.missing, 2u);

  // An empty batch completes at once (but not inside the call).
  o = BatchGet(*live, {});
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 0u);
  EXPECT_EQ(o.missing, 0u);
}

TEST_F(RedisTargetTest, UpsertSetsSegmentsAndDropsExpiredOnes) {
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  const uint32_t now = UnixNow();
  ASSERT_TRUE(
      Replace(*conn, {"user-a"}, {{{1, now + 100}, {2, now - 10}, {3, now - 20}, {4, now + 200}}})
          .ok);

  // Overwrites 1, adds 5, drops the two expired ones.
  Outcome o = Upsert(*conn, "user-a", {{1, now + 5000}, {5, now + 6000}});
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 2u);
  SyncClient sync(server_.port());
  EXPECT_EQ(sync.HashOf("user-a"),
            (std::map<std::string, std::string>{{"1", std::to_string(now + 5000)},
                                                {"4", std::to_string(now + 200)},
                                                {"5", std::to_string(now + 6000)}}));

  // Creates a profile that did not exist.
  o = Upsert(*conn, "user-new", {{7, now + 700}});
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 0u);
  EXPECT_EQ(sync.HashOf("user-new"),
            (std::map<std::string, std::string>{{"7", std::to_string(now + 700)}}));

  // A segment written already expired is set, then dropped with the rest.
  o = Upsert(*conn, "user-a", {{9, now - 5}, {1, now - 1}});
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 2u);
  EXPECT_EQ(sync.HashOf("user-a"),
            (std::map<std::string, std::string>{{"4", std::to_string(now + 200)},
                                                {"5", std::to_string(now + 6000)}}));

  // Many segments in one upsert (more than one HSET chunk in the script).
  std::vector<Assignment> many;
  for (uint64_t id = 0; id < 2500; ++id) many.push_back({1000000 + id, now + 3600});
  o = Upsert(*conn, "user-many", many);
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(sync.Integer({"HLEN", "user-many"}), 2500);
}

TEST_F(RedisTargetTest, TrimDropsExpiredSegmentsAndReportsHowMany) {
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);
  SyncClient sync(server_.port());

  Outcome o = Trim(*conn, "user-a");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 3u);
  const auto left = sync.HashOf("user-a");
  EXPECT_EQ(left.size(), 5u);
  for (const char* id : {"1", "2", "4", "6", "8"}) EXPECT_EQ(left.count(id), 1u) << id;

  o = Trim(*conn, "user-a");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 0u);

  // Trimming every segment removes the key (Redis drops empty hashes).
  o = Trim(*conn, "user-dead");
  EXPECT_EQ(o.segments, 2u);
  EXPECT_EQ(sync.Integer({"EXISTS", "user-dead"}), 0);

  o = Trim(*conn, "nobody");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 0u);

  // Expired fields beyond one HDEL chunk of the script.
  std::vector<Assignment> stale;
  const uint32_t now = UnixNow();
  for (uint64_t id = 0; id < 4500; ++id) stale.push_back({id, id % 3 == 0 ? now + 60 : now - 60});
  ASSERT_TRUE(Replace(*conn, {"user-stale"}, {stale}).ok);
  o = Trim(*conn, "user-stale");
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.segments, 3000u);
  EXPECT_EQ(sync.Integer({"HLEN", "user-stale"}), 1500);
}

TEST_F(RedisTargetTest, LargeProfilesPipelinedOverSeveralConnections) {
  // 1,000-segment profiles (the reference workload): each reply spans
  // several socket reads; many requests are in flight on each connection.
  auto live_target = MakeTarget(Options());
  auto whole_target = MakeTarget(Options(/*whole_profiles=*/true));
  ASSERT_NE(live_target, nullptr);
  ASSERT_NE(whole_target, nullptr);
  const uint32_t now = UnixNow();
  std::vector<std::string> users;
  std::vector<std::vector<Assignment>> profiles;
  for (int u = 0; u < 20; ++u) {
    users.push_back("00000000-0000-0000-0000-0000000000" + std::to_string(10 + u));
    std::vector<Assignment> p;
    for (uint64_t s = 0; s < 1000; ++s) {
      p.push_back({s * 82 + u, s % 2 == 0 ? now + 3600 : now - 3600});
    }
    profiles.push_back(std::move(p));
  }
  {
    auto loader = MustOpen(*live_target);
    ASSERT_NE(loader, nullptr);
    ASSERT_TRUE(Replace(*loader, users, profiles).ok);
  }

  int done = 0;  // before the connections: they may call back as they close
  int bad = 0;
  std::vector<std::unique_ptr<Connection>> conns;
  for (int i = 0; i < 4; ++i) conns.push_back(MustOpen(i % 2 == 0 ? *live_target : *whole_target));
  for (const auto& c : conns) ASSERT_NE(c, nullptr);
  constexpr int kPerConnection = 40;
  for (int i = 0; i < 4; ++i) {
    const uint32_t expected = i % 2 == 0 ? 20 * 500 : 20 * 1000;
    for (int k = 0; k < kPerConnection; ++k) {
      conns[i]->BatchGet(users, [&, expected](Outcome o) {
        ++done;
        if (!o.ok || o.segments != expected || o.missing != 0) ++bad;
      });
      conns[i]->Get(users[k % 20], [&, expected](Outcome o) {
        ++done;
        if (!o.ok || o.segments != expected / 20) ++bad;
      });
    }
    EXPECT_EQ(conns[i]->in_flight(), 2u * kPerConnection);
  }
  ASSERT_TRUE(RunUntil([&] { return done == 4 * 2 * kPerConnection; }));
  EXPECT_EQ(bad, 0);
  for (const auto& c : conns) EXPECT_EQ(c->in_flight(), 0u);
}

TEST_F(RedisTargetTest, SampleReportsTheServersFigures) {
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);

  auto sample = target->Sample();
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_EQ(sample->pid, server_.pid());
  EXPECT_GT(sample->memory_bytes, 0u);
  EXPECT_EQ(sample->records, 3u);
  EXPECT_EQ(sample->device_bytes_used, 0u);
  EXPECT_EQ(sample->durability, "appendonly no, save \"\"");
  EXPECT_EQ(sample->device, "memory");

  server_.Stop();
  sample = target->Sample();
  ASSERT_FALSE(sample.ok());
  EXPECT_EQ(sample.status().code(), Status::Code::kUnavailable);
}

TEST_F(RedisTargetTest, ConnectingToAClosedPortFailsClearly) {
  RedisOptions options = Options();
  options.port = FreePort();
  auto target = NewRedisTarget(options);
  ASSERT_FALSE(target.ok());
  EXPECT_EQ(target.status().code(), Status::Code::kUnavailable);
  const std::string message(target.status().message());
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(options.port)), std::string::npos)
      << message;
  EXPECT_NE(message.find("cannot connect"), std::string::npos) << message;

  options.port = 0;
  EXPECT_EQ(NewRedisTarget(options).status().code(), Status::Code::kInvalidArgument);

  // A target whose server went away: Open fails, from a callback.
  auto good = MakeTarget(Options());
  ASSERT_NE(good, nullptr);
  server_.Stop();
  auto conn = Open(*good);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(conn.status().message().find("cannot connect"), std::string_view::npos)
      << conn.status().ToString();
}

TEST_F(RedisTargetTest, ForgottenScriptsFailWithNoscriptAndKeepTheConnection) {
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);
  SyncClient sync(server_.port());
  ASSERT_NE(sync.Run({"SCRIPT", "FLUSH"}), nullptr);

  Outcome o = Get(*conn, "user-a");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("NOSCRIPT"), std::string::npos) << o.error;
  o = BatchGet(*conn, {"user-a", "user-b"});
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("NOSCRIPT"), std::string::npos) << o.error;
  o = Trim(*conn, "user-a");
  EXPECT_FALSE(o.ok);
  // An error reply fails only its request: the connection still works.
  o = Replace(*conn, {"user-c"}, {{{1, UnixNow() + 10}}});
  EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(sync.Integer({"HLEN", "user-c"}), 1);
}

TEST_F(RedisTargetTest, DestroyingAConnectionFailsEveryRequestInFlightOnce) {
  constexpr int kRequests = 100;
  std::vector<int> calls(kRequests + 3, 0);  // before the connection, which calls back as it goes
  std::vector<int> oks(kRequests + 3, 0);
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);

  auto record = [&](int i) {
    return [&, i](Outcome o) {
      ++calls[i];
      if (o.ok) ++oks[i];
      EXPECT_FALSE(o.error.empty() && !o.ok);
    };
  };
  for (int i = 0; i < kRequests; ++i) conn->Get("user-a", record(i));
  conn->BatchGet(std::vector<std::string>{"user-a", "user-b"}, record(kRequests));
  conn->Upsert("user-a", std::vector<Assignment>{{1, UnixNow() + 10}}, record(kRequests + 1));
  conn->BatchGet({}, record(kRequests + 2));  // decided already, delivered later
  EXPECT_EQ(conn->in_flight(), static_cast<size_t>(kRequests + 3));
  for (int c : calls) ASSERT_EQ(c, 0) << "a callback ran inside its call";

  conn.reset();  // nothing was answered yet: the io_context has not run
  for (int i = 0; i < kRequests + 3; ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    EXPECT_EQ(oks[i], 0) << i;
  }
  // And never again afterwards.
  io_.restart();
  io_.run_for(milliseconds(200));
  for (int i = 0; i < kRequests + 3; ++i) EXPECT_EQ(calls[i], 1) << i;
}

TEST_F(RedisTargetTest, DestroyingAConnectionFromItsOwnCallbackFailsTheRest) {
  constexpr int kRequests = 50;
  std::vector<int> calls(kRequests, 0);
  int oks = 0;
  int failures_before_reset_returned = 0;
  bool reset_done = false;
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);

  for (int i = 0; i < kRequests; ++i) {
    conn->Get("user-a", [&, i](Outcome o) {
      ++calls[i];
      if (o.ok) ++oks;
      if (!o.ok && !reset_done) ++failures_before_reset_returned;
      if (i == 0) {
        conn.reset();  // the rest fail inside this, before it returns
        reset_done = true;
      }
    });
  }
  ASSERT_TRUE(RunUntil([&] { return calls[0] == 1; }));
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(calls[i], 1) << i;
  EXPECT_EQ(oks, 1);
  EXPECT_EQ(failures_before_reset_returned, kRequests - 1);
  io_.restart();
  io_.run_for(milliseconds(200));
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(calls[i], 1) << i;
}

TEST_F(RedisTargetTest, ServerKilledMidRunFailsRequestsWithoutHanging) {
  // Closed loop: 8 chains of gets, each sending its next get when one
  // succeeds; the server is killed after 200 answers, in a callback.
  constexpr int kChains = 8;
  int answered = 0;
  int chains_ended = 0;
  int failures = 0;
  bool killed = false;
  std::string last_error;
  std::unique_ptr<Connection> conn;
  std::function<void(Outcome)> on_done = [&](Outcome o) {
    if (!o.ok) {
      ++failures;
      ++chains_ended;
      last_error = o.error;
      return;
    }
    if (++answered == 200 && !killed) {
      server_.Kill();
      killed = true;
    }
    conn->Get("user-a", on_done);
  };
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);
  for (int i = 0; i < kChains; ++i) conn->Get("user-a", on_done);
  ASSERT_TRUE(RunUntil([&] { return chains_ended == kChains; }))
      << "answered " << answered << ", ended " << chains_ended;
  EXPECT_TRUE(killed);
  EXPECT_EQ(failures, kChains);
  EXPECT_FALSE(last_error.empty());
  EXPECT_EQ(conn->in_flight(), 0u);

  // Later requests fail too, from a callback, not inside the call.
  Outcome o = Get(*conn, "user-a");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("connection lost"), std::string::npos) << o.error;
  o = Replace(*conn, {"user-a"}, {{{1, UnixNow()}}});
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(conn->in_flight(), 0u);

  // And no new connection opens.
  auto second = Open(*target);
  EXPECT_FALSE(second.ok());
}

TEST_F(RedisTargetTest, QueuedRequestsFailWhenTheServerDiesBeforeTheyAreSent) {
  constexpr int kRequests = 64;
  int calls = 0;
  int oks = 0;
  auto target = MakeTarget(Options());
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);
  LoadSample(*conn);

  for (int i = 0; i < kRequests; ++i) {
    conn->BatchGet(std::vector<std::string>{"user-a", "user-b"}, [&](Outcome o) {
      ++calls;
      if (o.ok) ++oks;
    });
  }
  server_.Kill();
  ASSERT_TRUE(RunUntil([&] { return calls == kRequests; })) << calls;
  EXPECT_EQ(oks, 0);
  EXPECT_EQ(conn->in_flight(), 0u);
}

TEST_F(RedisTargetTest, RequestsTimeOutWhenTheServerStopsAnswering) {
  RedisOptions options = Options();
  options.timeout = milliseconds(1000);
  auto target = MakeTarget(options);
  ASSERT_NE(target, nullptr);
  auto conn = MustOpen(*target);
  ASSERT_NE(conn, nullptr);

  ASSERT_TRUE(server_.Pause());  // SIGSTOP: the socket stays open, nothing answers
  Outcome o = Get(*conn, "user-a");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("no reply within 1000 ms"), std::string::npos) << o.error;
  // The connection was given up: later requests fail at once.
  o = Trim(*conn, "user-a");
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(conn->in_flight(), 0u);
  server_.Resume();
}

}  // namespace
}  // namespace segstore::bench
