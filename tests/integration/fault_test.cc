// The whole server in process on a FaultDevice (src/storage/fault_device.h),
// driven through the client library: device write errors, short writes,
// read errors and a full device must reach clients as clear errors, reads
// must go on where they can, writes must be refused while the device fails,
// and a restart must find everything that was acknowledged. Also a flood of
// connections past the limit.

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
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
    o.background_defrag = false;
    o.clock = &clock_;
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
  EXPECT_GE(std::get<uint64_t>(stats["server.errors.upsert.unavailable"]), 3u);

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
  EXPECT_GE(std::get<uint64_t>(StatsOf(c.get())["server.errors.get.io_error"]), 1u);

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

}  // namespace
}  // namespace segstore::server
