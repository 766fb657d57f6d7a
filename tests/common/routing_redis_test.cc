// The routing function against Redis itself: a real Redis 7 from Debian, in
// cluster mode on a loopback port, answers CLUSTER KEYSLOT for IDs of every
// shape (UUIDs, hash tags, braces in odd places, binary bytes), and segstore's
// SlotOf must agree with every answer.
#include <gtest/gtest.h>

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
                                  std::string("\0\xff{\x01}", 5)};
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

TEST(RoutingRedisTest, SlotsAreRedisClusterKeySlots) {
  RedisServer redis({"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"});
  std::string why;
  ASSERT_TRUE(redis.Start(&why)) << why;
  SyncClient client(redis.port());
  ASSERT_TRUE(client.ok());
  for (const std::string& id : Ids()) {
    const long long slot = client.Integer({"CLUSTER", "KEYSLOT", id});  // NOLINT: hiredis's type
    ASSERT_GE(slot, 0) << "Redis did not answer for an ID of " << id.size() << " bytes";
    EXPECT_EQ(SlotOf(id), static_cast<uint32_t>(slot)) << id;
    EXPECT_EQ(PartitionOf(id), static_cast<uint32_t>(slot) / 4) << id;
  }
  redis.Stop();
}

}  // namespace
}  // namespace segstore
