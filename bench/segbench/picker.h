// UserPicker: which user the next operation touches, uniform over [0, users)
// or Zipf-distributed (exponent s: user of rank k, 0-based, drawn with
// probability proportional to 1 / (k + 1)^s). The Zipf table is the
// cumulative distribution over every user, built once (8 bytes a user) and
// searched by bisection, so draws are exact rather than approximated.
// Immutable after construction: share one picker between threads, each with
// its own generator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace segstore::bench {

class UserPicker {
 public:
  // zipf_exponent 0: uniform. users: at most 2^32.
  UserPicker(uint64_t users, double zipf_exponent) : users_(users) {
    if (zipf_exponent <= 0 || users == 0) return;
    cdf_.resize(users);
    double sum = 0;
    for (uint64_t k = 0; k < users; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), zipf_exponent);
      cdf_[k] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }

  uint64_t users() const { return users_; }
  bool zipf() const { return !cdf_.empty(); }

  // A user index in [0, users). Zipf ranks are spread over the users by a
  // fixed odd multiplier, so the hot users are not users 0, 1, 2...
  uint64_t Pick(std::mt19937_64& rng) const {
    if (cdf_.empty()) return rng() % users_;
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const auto rank = static_cast<uint64_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) -
                                            cdf_.begin());
    return RankToUser(std::min(rank, users_ - 1));
  }

  // The user holding `rank` (0: the hottest). rank < users <= 2^32, so the
  // product fits in 64 bits.
  uint64_t RankToUser(uint64_t rank) const { return rank * kSpread % users_; }

 private:
  // Odd and prime: coprime with any user count not a multiple of it, so
  // RankToUser is a permutation for every realistic count.
  static constexpr uint64_t kSpread = 2654435761u;

  uint64_t users_;
  std::vector<double> cdf_;
};

}  // namespace segstore::bench
