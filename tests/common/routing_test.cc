// The public routing function: CRC-16/XMODEM, Redis Cluster's hash tags,
// slots and partitions, held to the vectors proto/PROTOCOL.md publishes.
#include "segstore/routing.h"

#include <gtest/gtest.h>

#include <string>

namespace segstore {
namespace {

TEST(RoutingTest, Crc16IsXmodem) {
  EXPECT_EQ(Crc16Xmodem("123456789"), 0x31C3);  // the standard check value
  EXPECT_EQ(Crc16Xmodem(""), 0);
  EXPECT_EQ(Crc16Xmodem(std::string(1, '\0')), 0);
  EXPECT_EQ(Crc16Xmodem("A"), 0x58E5);
  EXPECT_EQ(Crc16Xmodem("\xff"), 0x1EF0);  // bytes above 0x7F are unsigned
  EXPECT_EQ(Crc16Xmodem("\x80"), 0x9188);
}

TEST(RoutingTest, HashTagsAsRedisDefinesThem) {
  EXPECT_EQ(HashTag("user42"), "user42");             // no tag
  EXPECT_EQ(HashTag("{user42}.cookie"), "user42");    // the first {...}
  EXPECT_EQ(HashTag("a{user42}b{other}"), "user42");  // only the first pair
  EXPECT_EQ(HashTag("foo{}{bar}"), "foo{}{bar}");     // empty first pair: the whole ID
  EXPECT_EQ(HashTag("foo{{bar}}zap"), "{bar");        // up to the first } after the first {
  EXPECT_EQ(HashTag("foo{bar"), "foo{bar");           // no closing brace
  EXPECT_EQ(HashTag("foo}bar{"), "foo}bar{");         // } before { does not count
  EXPECT_EQ(HashTag("{"), "{");
  EXPECT_EQ(HashTag(""), "");
}

// The vectors of PROTOCOL.md, "Partitions": any client must give these.
TEST(RoutingTest, PublishedVectors) {
  struct Vector {
    const char* id;
    uint32_t slot, partition;
  };
  const Vector vectors[] = {
      {"foo", 12182, 3045},
      {"bar", 5061, 1265},
      {"hello", 866, 216},
      {"123456789", 12739, 3184},
      {"{user1000}.following", 3443, 860},
      {"{user1000}.followers", 3443, 860},
      {"foo{}{bar}", 8363, 2090},
      {"foo{{bar}}zap", 4015, 1003},
      {"\xff", 7920, 1980},
  };
  for (const Vector& v : vectors) {
    EXPECT_EQ(SlotOf(v.id), v.slot) << v.id;
    EXPECT_EQ(PartitionOf(v.id), v.partition) << v.id;
  }
}

}  // namespace
}  // namespace segstore
