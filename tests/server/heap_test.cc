#include "server/heap.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "server/glibc_heap.h"

namespace segstore::server {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Allocates `bytes` in 64 KiB blocks, touches them and frees all but every
// eighth: with segstored's thresholds the freed 7/8 stay resident, in free
// chunks between live ones that the heap top cannot give back.
class Fragments {
 public:
  explicit Fragments(size_t bytes) {
    constexpr size_t kBlock = 64 << 10;
    std::vector<std::unique_ptr<char[]>> all;
    for (size_t i = 0; i < bytes / kBlock; ++i) {
      all.push_back(std::make_unique<char[]>(kBlock));
      std::memset(all.back().get(), 1, kBlock);
    }
    for (size_t i = 0; i < all.size(); ++i) {
      if (i % 8 == 0) kept_.push_back(std::move(all[i]));
    }
  }

 private:
  std::vector<std::unique_ptr<char[]>> kept_;
};

constexpr size_t kFreed = size_t{64} << 20;

TEST(HeapTest, TrimGivesFreedMemoryBackAndCountsIt) {
  SKIP_UNLESS_ON_GLIBC_HEAP();
  TuneHeap();
  Fragments fragments(kFreed * 8 / 7);
  const HeapFigures before = ReadHeapFigures();
  EXPECT_GE(before.free_bytes, kFreed * 9 / 10);
  const HeapTrimCounts counts = ReadHeapTrimCounts();
  const uint64_t released = TrimHeap();
  EXPECT_GE(released, kFreed / 2);
  const HeapFigures after = ReadHeapFigures();
  EXPECT_LE(after.resident_bytes + kFreed / 2, before.resident_bytes);
  // Still in use: trimming frees nothing that is held.
  EXPECT_GE(after.in_use_bytes + (1 << 20), before.in_use_bytes);
  const HeapTrimCounts now = ReadHeapTrimCounts();
  EXPECT_EQ(now.trims, counts.trims + 1);
  EXPECT_EQ(now.released_bytes, counts.released_bytes + released);
}

TEST(HeapTest, TrimmerTrimsOncePerIntervalAndOnlyAfterMemoryWasFreed) {
  SKIP_UNLESS_ON_GLIBC_HEAP();
  TuneHeap();
  TrimHeap();
  HeapTrimmer trimmer(seconds(10));
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(trimmer.Tick(t0));  // the first tick only takes the measure
  const uint64_t trims = ReadHeapTrimCounts().trims;
  {
    Fragments fragments(kFreed * 8 / 7);
    // Not before the interval has passed.
    EXPECT_FALSE(trimmer.Tick(t0 + seconds(9)));
    EXPECT_TRUE(trimmer.Tick(t0 + seconds(10)));
    EXPECT_EQ(ReadHeapTrimCounts().trims, trims + 1);
    // Nothing freed since: no trim, however long it waits.
    EXPECT_FALSE(trimmer.Tick(t0 + seconds(20)));
    EXPECT_FALSE(trimmer.Tick(t0 + seconds(60)));
  }
  // The fragments' last eighth is freed now: the next interval trims again.
  EXPECT_FALSE(trimmer.Tick(t0 + seconds(65)));
  EXPECT_TRUE(trimmer.Tick(t0 + seconds(70)));
  EXPECT_EQ(ReadHeapTrimCounts().trims, trims + 2);
}

TEST(HeapTest, TrimmerWithNoIntervalNeverTrims) {
  HeapTrimmer trimmer(seconds(0));
  const Clock::time_point t0 = Clock::now();
  const uint64_t trims = ReadHeapTrimCounts().trims;
  for (int i = 0; i < 5; ++i) {
    Fragments fragments(4 << 20);
    EXPECT_FALSE(trimmer.Tick(t0 + seconds(3600) * i));
  }
  EXPECT_EQ(ReadHeapTrimCounts().trims, trims);
}

}  // namespace
}  // namespace segstore::server
