// Histogram: latency counts in log-linear buckets (HdrHistogram's layout):
// values below 64 are exact; above, every power of two is split into 32
// buckets, so any percentile is within ~3% of the truth, in fixed memory,
// whatever the range. Not thread-safe; merge per-thread histograms.
#pragma once

#include <array>
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

 private:
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

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0;
  uint64_t max_ = 0;
};

}  // namespace segstore
