#include "common/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace segstore {
namespace {

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 0; v < 64; ++v) h.Record(v);
  EXPECT_EQ(h.count(), 64u);
  EXPECT_EQ(h.Percentile(0.5), 31u);
  EXPECT_EQ(h.Percentile(1.0), 63u);
  EXPECT_EQ(h.max(), 63u);
}

TEST(HistogramTest, PercentilesAreWithinThreePercentOverAWideRange) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> dist(6.0, 2.0);
  std::vector<uint64_t> values;
  Histogram h;
  for (int i = 0; i < 200000; ++i) {
    auto v = static_cast<uint64_t>(dist(rng));
    values.push_back(v);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    double truth = static_cast<double>(values[static_cast<size_t>(q * (values.size() - 1))]);
    double got = static_cast<double>(h.Percentile(q));
    EXPECT_GE(got, truth) << q;
    EXPECT_LE(got, truth * 1.035 + 1) << q;
  }
  EXPECT_EQ(h.max(), values.back());
  EXPECT_EQ(h.Percentile(1.0), values.back());
}

TEST(HistogramTest, MergeAddsCounts) {
  Histogram a, b;
  a.Record(10);
  b.Record(1000000);
  a.Merge(b);
  EXPECT_EQ(a.count(), 2u);
  EXPECT_EQ(a.max(), 1000000u);
  EXPECT_EQ(a.Percentile(0.0), 10u);
}

TEST(HistogramTest, HugeValuesDoNotOverflowTheBuckets) {
  Histogram h;
  h.Record(UINT64_MAX);
  h.Record(uint64_t{1} << 62);
  EXPECT_EQ(h.max(), UINT64_MAX);
  EXPECT_EQ(h.Percentile(1.0), UINT64_MAX);
}

TEST(HistogramTest, CountAtMostIsExactOnBucketEdgesAndCloseBetween) {
  Histogram h;
  for (uint64_t v = 0; v < 10000; ++v) h.Record(v);
  EXPECT_EQ(h.CountAtMost(0), 1u);
  EXPECT_EQ(h.CountAtMost(50), 51u);
  EXPECT_EQ(h.CountAtMost(UINT64_MAX), 10000u);
  for (uint64_t bound : {100u, 250u, 1000u, 2500u, 5000u}) {
    const double got = static_cast<double>(h.CountAtMost(bound));
    EXPECT_NEAR(got, static_cast<double>(bound + 1), 0.03 * static_cast<double>(bound)) << bound;
    EXPECT_LE(got, static_cast<double>(bound + 1)) << bound;  // never counts a larger value
  }
}

TEST(HistogramTest, AtomicHistogramSnapshotsWhatWasRecorded) {
  AtomicHistogram a;
  Histogram plain;
  uint64_t sum = 0;
  for (uint64_t v : {0u, 1u, 63u, 64u, 1000u, 123456u, 5u, 5u}) {
    a.Record(v);
    plain.Record(v);
    sum += v;
  }
  Histogram snap;
  EXPECT_EQ(a.SnapshotInto(&snap), sum);
  EXPECT_EQ(snap.count(), plain.count());
  EXPECT_EQ(snap.max(), plain.max());
  for (double q : {0.1, 0.5, 0.9, 0.99, 1.0}) EXPECT_EQ(snap.Percentile(q), plain.Percentile(q));
  // Snapshots merge: twice into one histogram counts everything twice.
  a.SnapshotInto(&snap);
  EXPECT_EQ(snap.count(), 2 * plain.count());
}

}  // namespace
}  // namespace segstore
