// tests/support/memory_log.h against log.h's contract where it is the
// reference for the tests above the log: a reader whose offset the log no
// longer holds goes on from the oldest held (DropBefore: the offsets jump
// forward; Truncate, a topic truncated or made again, which librdkafka's
// mock cannot do: they go back), never stopping and never failing Poll.
#include "support/memory_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace segstore::testing {
namespace {

struct Read {
  uint32_t partition = 0;
  int64_t offset = 0;
  std::string value;
};

// Polls until a Poll returns fewer than asked for; every Poll must succeed.
std::vector<Read> PollAll(log::LogReader& reader) {
  std::vector<Read> out;
  for (;;) {
    Result<size_t> n = reader.Poll(2, [&](const log::LogEntry& e) {
      out.push_back(Read{e.partition, e.offset, std::string(e.value)});
    });
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok() || *n < 2) return out;
  }
}

std::optional<log::PartitionPosition> PositionOf(const log::LogReader& reader, uint32_t p) {
  for (const log::PartitionPosition& pos : reader.positions()) {
    if (pos.partition == p) return pos;
  }
  return std::nullopt;
}

TEST(MemoryLogTest, RetentionPassingAReaderMakesItGoOnFromTheOldestHeld) {
  auto log = MemoryLog::Make(2);
  for (int i = 0; i < 6; ++i) log->AppendRaw(0, "k", "a" + std::to_string(i));
  log->AppendRaw(1, "k", "b0");
  auto reader = log->NewReader();
  const std::pair<uint32_t, int64_t> from[] = {{0, 0}, {1, 0}};
  ASSERT_TRUE(reader->Assign(from).ok());
  // One Poll: the first two entries of partition 0.
  std::vector<Read> r;
  Result<size_t> n = reader->Poll(2, [&](const log::LogEntry& e) {
    r.push_back(Read{e.partition, e.offset, std::string(e.value)});
  });
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 2u);
  // Retention passes the reader: offsets 2 and 3 are gone before it reads
  // them.
  log->DropBefore(0, 4);
  std::vector<Read> more = PollAll(*reader);
  r.insert(r.end(), more.begin(), more.end());
  std::vector<int64_t> offsets0;
  std::vector<int64_t> offsets1;
  for (const Read& e : r) {
    if (e.partition == 0) {
      offsets0.push_back(e.offset);
      EXPECT_EQ(e.value, "a" + std::to_string(e.offset));
    } else {
      offsets1.push_back(e.offset);
    }
  }
  // The jump is visible (1, then 4), and nothing is read twice.
  EXPECT_EQ(offsets0, (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(offsets1, (std::vector<int64_t>{0}));
  // Still listed, caught up.
  const std::optional<log::PartitionPosition> p0 = PositionOf(*reader, 0);
  ASSERT_TRUE(p0.has_value());
  EXPECT_EQ(p0->next, 6);
  EXPECT_EQ(p0->start, 4);
  EXPECT_EQ(p0->end, 6);
  EXPECT_TRUE(reader->health(std::chrono::seconds(1)).ok());
}

TEST(MemoryLogTest, AnAssignedOffsetNoLongerHeldStartsAtTheOldestHeld) {
  auto log = MemoryLog::Make(1);
  for (int i = 0; i < 5; ++i) log->AppendRaw(0, "k", "v" + std::to_string(i));
  log->DropBefore(0, 3);
  auto reader = log->NewReader();
  const std::pair<uint32_t, int64_t> from[] = {{0, 1}};
  ASSERT_TRUE(reader->Assign(from).ok());
  EXPECT_EQ(PositionOf(*reader, 0)->next, 1);
  const std::vector<Read> r = PollAll(*reader);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].offset, 3);  // the jump, visible: 1 was asked for
  EXPECT_EQ(r[0].value, "v3");
  EXPECT_EQ(r[1].offset, 4);
  EXPECT_EQ(PositionOf(*reader, 0)->next, 5);
}

TEST(MemoryLogTest, TruncationPastAReaderMakesItStartOverFromTheOldestHeld) {
  auto log = MemoryLog::Make(2);
  for (int i = 0; i < 5; ++i) log->AppendRaw(0, "k", "old" + std::to_string(i));
  for (int i = 0; i < 2; ++i) log->AppendRaw(1, "k", "one" + std::to_string(i));
  auto reader = log->NewReader();
  const std::pair<uint32_t, int64_t> from[] = {{0, 0}, {1, 0}};
  ASSERT_TRUE(reader->Assign(from).ok());
  ASSERT_EQ(PollAll(*reader).size(), 7u);
  EXPECT_EQ(PositionOf(*reader, 0)->next, 5);

  // The topic is made again: partition 0 holds two new entries, at 0 and 1;
  // partition 1 is cut back to its end (the reader is not past it).
  log->Truncate(0, 0);
  log->Truncate(1, 2);
  EXPECT_EQ(log->End(0), 0);
  EXPECT_EQ(log->AppendRaw(0, "k", "new0"), 0);
  EXPECT_EQ(log->AppendRaw(0, "k", "new1"), 1);
  const std::vector<Read> r = PollAll(*reader);
  ASSERT_EQ(r.size(), 2u);
  // Backwards: 5 was next, 0 comes.
  EXPECT_EQ(r[0].partition, 0u);
  EXPECT_EQ(r[0].offset, 0);
  EXPECT_EQ(r[0].value, "new0");
  EXPECT_EQ(r[1].offset, 1);
  EXPECT_EQ(PositionOf(*reader, 0)->next, 2);
  EXPECT_EQ(PositionOf(*reader, 1)->next, 2);

  // Truncated below the oldest held (nothing held): it waits at the end.
  log->DropBefore(1, 2);
  log->Truncate(1, 1);
  EXPECT_EQ(log->Start(1), 1);
  EXPECT_TRUE(PollAll(*reader).empty());
  EXPECT_EQ(PositionOf(*reader, 1)->next, 1);
  EXPECT_EQ(log->AppendRaw(1, "k", "again"), 1);
  const std::vector<Read> again = PollAll(*reader);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].offset, 1);
  EXPECT_EQ(again[0].value, "again");
  EXPECT_EQ(reader->positions().size(), 2u);
}

}  // namespace
}  // namespace segstore::testing
