// The RESP port's hash commands against a real Redis 7.0 (Debian's
// redis-tools), command for command: random HSET, HMSET, HGET, HMGET,
// HGETALL, HKEYS, HVALS, HDEL, HLEN, HEXISTS, DEL, UNLINK, EXISTS and TYPE
// on a few keys, whose replies must be the same bytes (as sets where Redis
// lists a hash in its own order). Fields are segment IDs and values
// attributes, the part of Redis's hashes segstore maps (proto/RESP.md,
// "Hashes"); Redis 7.0 has no field expiry, so HEXPIRE and its kin are held
// to RESP.md in resp_test.cc instead.
//
// The seed is printed; SEGSTORE_SEED=<n> replays a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "integration/in_process.h"
#include "storage/test_util.h"
#include "support/redis_server.h"
#include "support/resp_conn.h"

namespace segstore::server {
namespace {

using segstore::testing::RespConn;

// The elements of a RESP2 array of bulk strings ("*n" then "$len" each),
// sorted; pairs (field, value) are kept together when `pairs`.
std::vector<std::string> SortedElements(const std::string& reply, bool pairs) {
  std::vector<std::string> items;
  size_t at = reply.find("\r\n");
  if (reply.empty() || reply[0] != '*' || at == std::string::npos) return {reply};
  at += 2;
  while (at < reply.size()) {
    const size_t eol = reply.find("\r\n", at);
    const size_t n = std::stoul(reply.substr(at + 1, eol - at - 1));
    items.push_back(reply.substr(eol + 2, n));
    at = eol + 2 + n + 2;
  }
  if (pairs) {
    std::vector<std::string> joined;
    for (size_t i = 0; i + 1 < items.size(); i += 2)
      joined.push_back(items[i] + "=" + items[i + 1]);
    items = std::move(joined);
  }
  std::sort(items.begin(), items.end());
  return items;
}

TEST(RespCompareTest, HashCommandsAnswerAsRedisDoes) {
  segstore::testing::RedisServer redis;
  std::string why;
  ASSERT_TRUE(redis.Start(&why)) << why;

  storage::testing::TempDir dir;
  testing::InProcessServer served;
  {
    storage::StoreOptions o = testing::SmallStore(dir.File("data"), Clock::System());
    profile::ProfileOptions p;
    p.sweeper = false;
    ServerOptions so;
    so.threads = 2;
    so.resp_host = "127.0.0.1";
    so.resp_port = 0;
    served.Start(o, nullptr, p, ProfileServiceOptions{}, so);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  RespConn ours;
  RespConn theirs;
  ASSERT_TRUE(ours.Connect(served.server->resp_port()));
  ASSERT_TRUE(theirs.Connect(redis.port()));

  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("SEGSTORE_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::printf("RespCompareTest seed %llu (SEGSTORE_SEED replays it)\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> keys = {"k1", "k2", "k3", "{tag}k4"};
  const std::vector<std::string> values = {
      "", "0", "7", "7:9", ":9", "4294967295", "12:4294967295"};
  const auto key = [&] { return keys[pick(keys.size())]; };
  const auto field = [&] { return std::to_string(pick(24)); };

  int compared = 0;
  for (int step = 0; step < 3000; ++step) {
    std::vector<std::string> cmd;
    bool as_set = false;
    bool pairs = false;
    switch (pick(14)) {
      case 0:
      case 1:
      case 2: {
        cmd = {pick(4) == 0 ? "HMSET" : "HSET", key()};
        for (size_t n = 1 + pick(4); n > 0; --n) {
          cmd.push_back(field());
          cmd.push_back(values[pick(values.size())]);
        }
        break;
      }
      case 3:
        cmd = {"HGET", key(), field()};
        break;
      case 4: {
        cmd = {"HMGET", key()};
        for (size_t n = 1 + pick(4); n > 0; --n) cmd.push_back(field());
        break;
      }
      case 5:
        cmd = {"HGETALL", key()};
        as_set = pairs = true;
        break;
      case 6:
        cmd = {"HKEYS", key()};
        as_set = true;
        break;
      case 7:
        cmd = {"HVALS", key()};
        as_set = true;
        break;
      case 8: {
        cmd = {"HDEL", key()};
        for (size_t n = 1 + pick(3); n > 0; --n) cmd.push_back(field());
        break;
      }
      case 9:
        cmd = {"HLEN", key()};
        break;
      case 10:
        cmd = {"HEXISTS", key(), field()};
        break;
      case 11:
        cmd = {pick(2) == 0 ? "DEL" : "UNLINK", key()};
        if (pick(2) == 0) cmd.push_back(key());
        if (pick(20) != 0) continue;  // rarely: let hashes grow
        break;
      case 12: {
        cmd = {"EXISTS", key()};
        for (size_t n = pick(3); n > 0; --n) cmd.push_back(key());
        break;
      }
      case 13:
        cmd = {"TYPE", key()};
        break;
    }
    const std::string a = ours.Call(cmd);
    const std::string b = theirs.Call(cmd);
    std::string line;
    for (const std::string& w : cmd) line += w + " ";
    ASSERT_FALSE(a.empty()) << "no reply from segstore to " << line;
    ASSERT_FALSE(b.empty()) << "no reply from Redis to " << line;
    if (as_set) {
      ASSERT_EQ(SortedElements(a, pairs), SortedElements(b, pairs))
          << "step " << step << ": " << line << "\nsegstore: " << a << "\nredis: " << b;
    } else {
      ASSERT_EQ(a, b) << "step " << step << ": " << line;
    }
    ++compared;
  }
  EXPECT_GT(compared, 2000);
  served.Stop();
  redis.Stop();
  std::filesystem::remove_all(redis.dir());
}

}  // namespace
}  // namespace segstore::server
