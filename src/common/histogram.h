// Histogram: latency counts in log-linear buckets (HdrHistogram's layout):
// values below 64 are exact; above, every power of two is split into 32
// buckets, so any percentile is within ~3% of the truth, in fixed memory,
// whatever the range. Not thread-safe; merge per-thread histograms.
// AtomicHistogram (below) is the same layout for one writer thread and any
// number of readers: the server's per-loop latency histograms.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace segstore {

class Histogram {
 public:
  void Record(uint64_t value) {
    ++counts_[BucketOf(value)];
    ++total_;
    if (value > max_) max_ = value;
  }
  void Merge(const Histogram& other) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
    if (other.max_ > max_) max_ = other.max_;
  }
  uint64_t count() const { return total_; }
  uint64_t max() const { return max_; }
  // The value at quantile q (0..1): the upper bound of the bucket holding it.
  uint64_t Percentile(double q) const {
    if (total_ == 0) return 0;
    auto rank = static_cast<uint64_t>(q * static_cast<double>(total_ - 1)) + 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return UpperBound(i) < max_ ? UpperBound(i) : max_;
    }
    return max_;
  }
  // Values recorded that are <= `bound`: exact below 64, else it counts the
  // buckets whose upper bound is <= bound (within ~3% of it).
  uint64_t CountAtMost(uint64_t bound) const {
    uint64_t n = 0;
    for (size_t i = 0; i < kBuckets && UpperBound(i) <= bound; ++i) n += counts_[i];
    return n;
  }

  static constexpr unsigned kSubBits = 5;  // 32 buckets per power of two
  static constexpr size_t kExact = size_t{2} << kSubBits;
  static constexpr size_t kBuckets = kExact + (64 - kSubBits - 1) * (1u << kSubBits);

  static size_t BucketOf(uint64_t v) {
    if (v < kExact) return static_cast<size_t>(v);
    unsigned msb = 63 - static_cast<unsigned>(std::countl_zero(v));  // >= kSubBits + 1
    unsigned shift = msb - kSubBits;
    uint64_t sub = (v >> shift) & ((1u << kSubBits) - 1);
    return kExact + (msb - kSubBits - 1) * (1u << kSubBits) + static_cast<size_t>(sub);
  }
  static uint64_t UpperBound(size_t bucket) {
    if (bucket < kExact) return bucket;
    size_t i = bucket - kExact;
    unsigned msb = static_cast<unsigned>(i >> kSubBits) + kSubBits + 1;
    uint64_t sub = i & ((1u << kSubBits) - 1);
    unsigned shift = msb - kSubBits;
    return ((uint64_t{1} << msb) | (sub << shift)) + (uint64_t{1} << shift) - 1;
  }

  // Adds `n` values to bucket `i` (AtomicHistogram's snapshots).
  void AddToBucket(size_t i, uint64_t n, uint64_t max) {
    counts_[i] += n;
    total_ += n;
    if (max > max_) max_ = max;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0;
  uint64_t max_ = 0;
};

// Histogram's layout with relaxed atomic counts: Record() from one thread
// only, SnapshotInto() from any (it sees each count whole, the set of them
// approximately at one moment). Also keeps the sum of values recorded.
class AtomicHistogram {
 public:
  void Record(uint64_t value) {
    Bump(counts_[Histogram::BucketOf(value)], 1);
    Bump(sum_, value);
    if (value > max_.load(std::memory_order_relaxed)) {
      max_.store(value, std::memory_order_relaxed);
    }
  }
  // Merges the counts into *h; returns the sum of the values.
  uint64_t SnapshotInto(Histogram* h) const {
    const uint64_t max = max_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < Histogram::kBuckets; ++i) {
      const uint64_t n = counts_[i].load(std::memory_order_relaxed);
      if (n != 0) h->AddToBucket(i, n, max);
    }
    return sum_.load(std::memory_order_relaxed);
  }

 private:
  // Single writer: a load and a store, no locked read-modify-write.
  static void Bump(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::array<std::atomic<uint64_t>, Histogram::kBuckets> counts_{};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
};

}  // namespace segstore
