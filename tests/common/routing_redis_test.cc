// The routing function against Redis itself: a real Redis 7 from Debian, in
// cluster mode on a loopback port, answers CLUSTER KEYSLOT for IDs of every
// shape (UUIDs, hash tags, braces in odd places, binary bytes), and segstore's
// SlotOf must agree with every answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "segstore/routing.h"
#include "support/redis_server.h"

namespace segstore {
namespace {

using testing::RedisServer;
using testing::SyncClient;

std::vector<std::string> Ids() {
  std::vector<std::string> ids = {"foo",
                                  "bar",
                                  "hello",
                                  "123456789",
                                  "{user1000}.following",
                                  "{user1000}.followers",
                                  "foo{}{bar}",
                                  "foo{{bar}}zap",
                                  "foo{bar}{zap}",
                                  "{",
                                  "}",
                                  "{}",
                                  "a{b}c",
                                  std::string("\0\xff{\x01}", 5),
                                  "\xff",
                                  "\x80"};
  std::mt19937_64 rng(17);
  const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 1000; ++i) {  // UUID-shaped, as cookie and device IDs are
    std::string id;
    for (int c = 0; c < 36; ++c) {
      id.push_back(c == 8 || c == 13 || c == 18 || c == 23 ? '-' : hex[rng() % 16]);
    }
    ids.push_back(id);
  }
  const char alphabet[] = "{}ab\0\x80\xff";
  for (int i = 0; i < 1000; ++i) {  // short, brace-heavy and binary
    std::string id;
    const size_t n = rng() % 12;
    for (size_t c = 0; c < n; ++c) id.push_back(alphabet[rng() % (sizeof alphabet - 1)]);
    ids.push_back(id);
  }
  return ids;
}

// An ID as hex, for failure messages (IDs here may be binary).
std::string Hex(const std::string& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : id) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

TEST(RoutingRedisTest, SlotsAreRedisClusterKeySlots) {
  // In cluster mode Redis also listens on a bus port (by default its port +
  // 10,000, which may not exist): name a free one, and try again with others
  // if either was taken in between.
  std::unique_ptr<RedisServer> redis;
  std::string why;
  for (int attempt = 0; attempt < 5 && redis == nullptr; ++attempt) {
    auto r = std::make_unique<RedisServer>(
        std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                 "--cluster-port", std::to_string(testing::FreePort())});
    if (r->Start(&why)) {
      redis = std::move(r);
    } else {
      std::filesystem::remove_all(r->dir());
    }
  }
  ASSERT_NE(redis, nullptr) << why;
  SyncClient client(redis->port());
  ASSERT_TRUE(client.ok());
  for (const std::string& id : Ids()) {
    const long long slot = client.Integer({"CLUSTER", "KEYSLOT", id});  // NOLINT: hiredis's type
    ASSERT_GE(slot, 0) << "Redis did not answer for the ID " << Hex(id);
    EXPECT_EQ(SlotOf(id), static_cast<uint32_t>(slot)) << Hex(id);
    EXPECT_EQ(PartitionOf(id), static_cast<uint32_t>(slot) / 4) << Hex(id);
  }
  redis->Stop();
  std::filesystem::remove_all(redis->dir());
}

}  // namespace
}  // namespace segstore
