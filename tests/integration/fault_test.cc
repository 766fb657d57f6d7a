// The whole server in process on a FaultDevice (src/storage/fault_device.h),
// driven through the client library: device write errors, short writes,
// read errors and a full device must reach clients as clear errors, reads
// must go on where they can, writes must be refused while the device fails,
// and a restart must find everything that was acknowledged. Also a flood of
// connections past the limit, and power cuts under a write load from several
// connections (with defragmentation running, or not).

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "common/clock.h"
#include "segstore/client.h"
#include "integration/in_process.h"
#include "server/profile_service.h"
#include "server/raw_conn.h"
#include "server/server.h"
#include "storage/fault_device.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using client::Client;
using storage::FaultDevice;
using Code = Status::Code;

constexpr UnixSeconds kStart = 1'790'000'000;
constexpr uint32_t kBlock = 64u << 10;

// The segments user `i` was last acknowledged with.
std::vector<SegmentUpdate> SegmentsOf(int i, int n = 40) {
  std::vector<SegmentUpdate> out;
  for (int k = 0; k < n; ++k) {
    out.push_back({static_cast<uint64_t>(i * 1000 + k * 7), 86400, true, {}, {}});
  }
  return out;
}

std::string User(int i) { return "user-" + std::to_string(i); }

class FaultTest : public ::testing::Test {
 protected:
  void TearDown() override { Stop(); }

  // Serves a store on `device` (recovering what it holds).
  void Start(std::shared_ptr<FaultDevice> device) {
    device_ = std::move(device);
    storage::StoreOptions o;
    o.path = "fault";
    o.file_size = device_->size();
    o.write_block_size = kBlock;
    o.background_defrag = defrag_;
    if (defrag_) {  // as often as it can: every pass may meet the power cut
      o.defrag_interval = std::chrono::milliseconds(1);
      o.defrag_blocks_per_second = 100000;
      o.rotate_blocks_per_second = 100000;
    }
    o.clock = &clock_;
    // ctest runs these a second time with every block read whole
    // (tests/integration/CMakeLists.txt).
    const char* summaries = std::getenv("SEGSTORE_TEST_BLOCK_SUMMARIES");
    o.block_summaries = summaries == nullptr || std::string_view(summaries) != "0";
    profile::ProfileOptions p;
    p.sweeper = false;
    server_options_.threads = 2;
    served_.Start(o, device_, p, ProfileServiceOptions{}, server_options_);
  }

  void Stop() { served_.Stop(); }

  // Stops, and serves again from what the device kept (faults cleared).
  void Restart() {
    Stop();
    Start(device_->Reboot());
  }

  std::unique_ptr<Client> Connect() { return served_.Connect(std::chrono::milliseconds(20000)); }

  // Upserts users [from, to); all must be acknowledged.
  void Fill(Client* c, int from, int to, int segments = 40) {
    for (int i = from; i < to; ++i) {
      auto r = c->Upsert(User(i), SegmentsOf(i, segments));
      ASSERT_TRUE(r.ok()) << User(i) << ": " << r.status().ToString();
    }
  }

  // Every user in [from, to) reads back exactly as acknowledged.
  void ExpectUsers(Client* c, int from, int to, int segments = 40) {
    for (int i = from; i < to; ++i) {
      auto got = c->Get(User(i));
      ASSERT_TRUE(got.ok()) << User(i) << ": " << got.status().ToString();
      ASSERT_EQ(got->count, static_cast<uint32_t>(segments)) << User(i);
      const std::vector<SegmentUpdate> want = SegmentsOf(i, segments);
      for (int k = 0; k < segments; ++k) ASSERT_EQ(got->At(k).id, want[k].id) << User(i);
    }
  }

  std::map<std::string, decltype(StatEntry::value)> StatsOf(Client* c) {
    std::map<std::string, decltype(StatEntry::value)> out;
    auto s = c->Stats();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) {
      for (const StatEntry& e : s->entries) out[e.name] = e.value;
    }
    return out;
  }

  ManualClock clock_{kStart};
  ServerOptions server_options_;
  bool defrag_ = false;
  std::shared_ptr<FaultDevice> device_;
  testing::InProcessServer served_;
};

TEST_F(FaultTest, WriteErrorsRefuseWritesServeReadsAndLoseNothingAcknowledged) {
  Start(FaultDevice::Create(64 * kBlock, 11));
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Fill(c.get(), 0, 200);

  device_->FailWritesAfter(0);
  // The write that meets the error is answered with it, never acknowledged.
  auto first = c->Upsert("doomed", SegmentsOf(9999));
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(first.status().code() == Code::kIOError ||
              first.status().code() == Code::kUnavailable)
      << first.status().ToString();
  // From then on every write is refused, saying why, until a restart.
  for (int i = 0; i < 3; ++i) {
    auto again = c->Upsert(User(i), SegmentsOf(i + 500));
    ASSERT_EQ(again.status().code(), Code::kUnavailable) << again.status().ToString();
    EXPECT_NE(again.status().message().find("refused after a device error"), std::string::npos)
        << again.status().ToString();
  }
  auto del = c->Delete(User(7));
  EXPECT_EQ(del.status().code(), Code::kUnavailable) << del.status().ToString();
  // Reads go on, with what was acknowledged (the refused writes changed nothing).
  ExpectUsers(c.get(), 0, 200);
  EXPECT_TRUE(c->Ping().ok());
  auto stats = StatsOf(c.get());
  EXPECT_EQ(std::get<uint64_t>(stats["storage.writes_refused"]), 1u);
  EXPECT_NE(std::get<std::string>(stats["storage.write_error"]).find("IOError"),
            std::string::npos);
  EXPECT_GE(std::get<uint64_t>(stats["server.responses.upsert.unavailable"]), 3u);

  c.reset();
  Restart();
  c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectUsers(c.get(), 0, 200);
  // Writes resume after the restart, on a device that takes them.
  ASSERT_TRUE(c->Upsert(User(7), SegmentsOf(7)).ok());
  ASSERT_TRUE(*c->Delete(User(8)));
  EXPECT_EQ(std::get<uint64_t>(StatsOf(c.get())["storage.writes_refused"]), 0u);
}

TEST_F(FaultTest, ShortWritesAreErrorsAndLoseNothingAcknowledged) {
  Start(FaultDevice::Create(64 * kBlock, 12));
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Fill(c.get(), 0, 100);
  device_->SetShortWrites(true);
  // A record of several sectors (ids far apart code long), so its flush is
  // cut to half.
  std::vector<SegmentUpdate> big;
  for (uint64_t k = 1; k <= 4000; ++k) big.push_back({k << 28, 86400, true, {}, {}});
  auto r = c->Upsert("short", big);
  ASSERT_FALSE(r.ok()) << "a short write was acknowledged";
  EXPECT_TRUE(r.status().code() == Code::kIOError || r.status().code() == Code::kUnavailable)
      << r.status().ToString();
  ExpectUsers(c.get(), 0, 100);
  c.reset();
  Restart();
  c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectUsers(c.get(), 0, 100);
}

TEST_F(FaultTest, ReadErrorsAreReportedAndServiceResumesWhenTheyStop) {
  Start(FaultDevice::Create(64 * kBlock, 13));
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Fill(c.get(), 0, 300);
  // After a restart nothing is in memory: every get reads the device.
  c.reset();
  Restart();
  c = Connect();
  ASSERT_NE(c, nullptr);

  device_->FailReadsAfter(0);
  auto got = c->Get(User(5));
  ASSERT_EQ(got.status().code(), Code::kIOError) << got.status().ToString();
  std::vector<std::string> users = {User(1), User(2), User(3)};
  auto batch = c->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();  // errors are per user
  for (const auto& one : *batch) EXPECT_EQ(one.status().code(), Code::kIOError);
  // An update must read first: it fails too, and writes nothing.
  auto up = c->Upsert(User(9), SegmentsOf(9 + 500));
  EXPECT_EQ(up.status().code(), Code::kIOError) << up.status().ToString();
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_GE(std::get<uint64_t>(StatsOf(c.get())["server.responses.get.io_error"]), 1u);

  device_->ClearFaults();
  ExpectUsers(c.get(), 0, 300);
  // A read error is not a write error: writes were never refused.
  ASSERT_TRUE(c->Upsert(User(9), SegmentsOf(9)).ok());
}

TEST_F(FaultTest, AFullDeviceRefusesWritesClearlyAndKeepsEverythingAcknowledged) {
  Start(FaultDevice::Create(12 * kBlock, 14));
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  int acked = 0;
  Status full;
  for (; acked < 100000; ++acked) {
    auto r = c->Upsert(User(acked), SegmentsOf(acked, 400));
    if (!r.ok()) {
      full = r.status();
      break;
    }
  }
  ASSERT_EQ(full.code(), Code::kDeviceFull) << full.ToString();
  EXPECT_NE(full.message().find("device full"), std::string::npos) << full.ToString();
  ASSERT_GT(acked, 50);
  // Full is not broken: reads go on, and the next write is refused the same way.
  ExpectUsers(c.get(), 0, acked, 400);
  EXPECT_EQ(c->Upsert("another", SegmentsOf(77777, 400)).status().code(), Code::kDeviceFull);
  EXPECT_EQ(std::get<uint64_t>(StatsOf(c.get())["storage.writes_refused"]), 0u);
  c.reset();
  Restart();
  c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectUsers(c.get(), 0, acked, 400);
}

TEST_F(FaultTest, AConnectionFloodPastTheLimitIsRefusedWhileClientsAreServed) {
  server_options_.max_connections = 8;
  Start(FaultDevice::Create(64 * kBlock, 15));
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  Fill(clients[0].get(), 0, 10);
  // 200 more connections: each gets one Busy frame and is closed.
  int busy = 0;
  for (int i = 0; i < 200; ++i) {
    testing::RawConn raw;
    ASSERT_TRUE(raw.Connect(served_.server->port()));
    testing::Frame f;
    if (raw.ReadFrame(&f) == testing::RawConn::ReadResult::kFrame &&
        f.status() == Code::kBusy) {
      ++busy;
    }
    EXPECT_TRUE(raw.ExpectClosed());
    if (i % 20 == 0) ExpectUsers(clients[i % 8].get(), 0, 10);  // served throughout
  }
  EXPECT_EQ(busy, 200);
  EXPECT_EQ(served_.server->counters().connections_refused, 200u);
  // Room again once clients leave.
  clients.resize(4);
  ASSERT_TRUE(testing::WaitFor([&] { return served_.server->counters().connections_open == 4; }));
  auto late = Connect();
  ASSERT_NE(late, nullptr);
  ExpectUsers(late.get(), 0, 10);
}

// What one key of the power-cut load may read after the cut: the state its
// last acknowledged write left, or (when a write was in flight) that write's.
struct KeyModel {
  std::set<uint64_t> acked;                  // segment IDs; empty: no profile
  std::optional<std::set<uint64_t>> inflight;  // the state if the unacked write landed
  bool deleted_acked = false;                  // an acknowledged delete is the last word so far
};

// Several connections write (upserts adding new segments, deletes) to keys
// of their own, so each key's writes are in order; the power is cut once a
// random number were acknowledged, at whatever moment that is. Then the
// server stops (its flushes fail), serves again from what the device kept,
// and every key must read as acknowledged: acknowledged deletes stay
// deleted, including after defragmentation moved the blocks around them.

class PowerCutTest : public FaultTest {
 public:
  void Run(uint64_t seed, bool defrag) {
    defrag_ = defrag;
    // With defragmentation the device is small enough to need it.
    Start(FaultDevice::Create((defrag ? 24 : 256) * kBlock, seed));
    if (HasFatalFailure()) return;
    constexpr int kThreads = 3;
    constexpr int kKeysPerThread = 12;
    std::mt19937_64 rng(seed);
    const uint64_t cut_after = 150 + rng() % 450;
    std::atomic<uint64_t> acked{0};
    std::vector<std::map<std::string, KeyModel>> models(kThreads);
    std::vector<std::thread> writers;
    std::atomic<int> connect_failures{0};
    std::atomic<bool> cut{false};
    std::atomic<int> finished{0};
    std::mutex errors_mu;
    std::vector<std::string> errors_before_cut;
    for (int t = 0; t < kThreads; ++t) {
      writers.emplace_back([&, t] {
        auto c = Connect();
        if (c == nullptr) {
          ++connect_failures;
          ++finished;
          return;
        }
        std::mt19937_64 r(seed * 31 + static_cast<uint64_t>(t));
        auto& model = models[static_cast<size_t>(t)];
        for (uint64_t op = 0;; ++op) {
          const std::string key =
              "pc-" + std::to_string(t) + "-" + std::to_string(r() % kKeysPerThread);
          KeyModel& m = model[key];
          std::set<uint64_t> next = m.acked;
          Status status;
          if (r() % 6 == 0) {
            next.clear();
            m.inflight = next;
            status = c->Delete(key).status();
          } else {
            // Two new segments, and sometimes a third that keeps the record
            // larger than one sector.
            std::vector<SegmentUpdate> segs;
            const uint64_t base = (static_cast<uint64_t>(t) << 32) | (op * 4);
            for (uint64_t k = 0; k < 2 + r() % 2; ++k) {
              segs.push_back({base + k, 86400, true, {}, {}});
              next.insert(base + k);
            }
            m.inflight = next;
            status = c->Upsert(key, segs).status();
          }
          if (!status.ok()) {  // this write stays in doubt
            if (!cut.load()) {
              std::lock_guard lock(errors_mu);
              errors_before_cut.push_back(key + ": " + status.ToString());
            }
            ++finished;
            return;
          }
          m.acked = std::move(next);
          m.deleted_acked = m.acked.empty();
          m.inflight.reset();
          ++acked;
        }
      });
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (acked.load() < cut_after && std::chrono::steady_clock::now() < deadline &&
           finished.load() == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const uint64_t defragged = served_.store->stats().defrag_blocks;
    cut = true;
    device_->PowerLoss();
    for (auto& w : writers) w.join();
    ASSERT_EQ(connect_failures.load(), 0);
    ASSERT_TRUE(errors_before_cut.empty()) << "before the cut: " << errors_before_cut.front();
    ASSERT_GE(acked.load(), cut_after) << "the load did not get going";
    defrag_blocks_ += defragged;

    // Stop (every flush fails: it must not hang), then serve what survived.
    Stop();
    defrag_ = false;
    Start(device_->Reboot());
    if (HasFatalFailure()) return;
    recovery_seconds_.push_back(served_.store->recovery().seconds);
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    for (const auto& model : models) {
      for (const auto& [key, m] : model) {
        auto got = c->Get(key);
        ASSERT_TRUE(got.ok() || got.status().code() == Code::kNotFound)
            << key << ": " << got.status().ToString();
        std::set<uint64_t> now;
        if (got.ok()) now.insert(got->ids.begin(), got->ids.end());
        const bool as_acked = now == m.acked;
        const bool as_inflight = m.inflight && now == *m.inflight;
        EXPECT_TRUE(as_acked || as_inflight)
            << "seed " << seed << " key " << key << " reads " << now.size()
            << " segments; acknowledged " << m.acked.size()
            << (m.deleted_acked ? " (an acknowledged delete)" : "")
            << (m.inflight ? ", in flight " + std::to_string(m.inflight->size()) : "");
      }
    }
    EXPECT_EQ(served_.store->stats().corruptions, 0u) << "seed " << seed;
    Stop();
  }

  uint64_t defrag_blocks_ = 0;
  std::vector<double> recovery_seconds_;
};

TEST_F(PowerCutTest, EveryAcknowledgedWriteAndDeleteSurvivesAPowerCut) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Run(seed, false);
    if (HasFatalFailure()) return;
  }
}

TEST_F(PowerCutTest, EveryAcknowledgedWriteAndDeleteSurvivesAPowerCutDuringDefragmentation) {
  for (uint64_t seed = 101; seed <= 104; ++seed) {
    Run(seed, true);
    if (HasFatalFailure()) return;
  }
  // The cuts met a store that had been defragmenting.
  EXPECT_GT(defrag_blocks_, 0u);
  double longest = 0;
  for (double s : recovery_seconds_) longest = std::max(longest, s);
  RecordProperty("longest_recovery_ms", std::to_string(static_cast<int>(longest * 1000)));
}

}  // namespace
}  // namespace segstore::server
