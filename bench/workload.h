// The reference workload's deterministic pieces (../shared/workload.md),
// shared by every benchmark and data generator: user keys and the random
// streams derived from a user's index.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace segstore::bench {

// User i's key: the 128-bit XXH3 hash of i, as a 36-character lower-case
// UUID string (8-4-4-4-12).
inline std::string UserKey(uint64_t i) {
  XXH128_hash_t h = XXH3_128bits(&i, sizeof i);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key(36, '-');
  // Hex digits of high64 then low64, most significant first, around the dashes.
  int pos = 0;
  for (int word = 0; word < 2; ++word) {
    uint64_t v = word == 0 ? h.high64 : h.low64;
    for (int shift = 60; shift >= 0; shift -= 4) {
      if (pos == 8 || pos == 13 || pos == 18 || pos == 23) ++pos;
      key[pos++] = kHex[(v >> shift) & 0xf];
    }
  }
  return key;
}

// One of a user's segments: its ID and how many whole hours (1 to 720) ahead
// of the current hour it expires.
struct ReferenceSegment {
  uint64_t id;
  uint32_t hours;
};

// User i's segments: 1,000 distinct IDs uniform in [0, 82000), ascending.
// Deterministic in i; every load generator uses this one.
inline std::vector<ReferenceSegment> ReferenceSegments(uint64_t user) {
  std::mt19937_64 rng(user * 0x9E3779B97F4A7C15ull + 1);
  std::set<uint64_t> ids;
  while (ids.size() < 1000) ids.insert(rng() % 82000);
  std::vector<ReferenceSegment> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) out.push_back({id, static_cast<uint32_t>(1 + rng() % 720)});
  return out;
}

// Unix seconds of an expiry `hours` whole hours after the hour holding `now`.
inline uint32_t WholeHourExpiry(uint32_t now, uint32_t hours) {
  return static_cast<uint32_t>((uint64_t{now} / 3600 + hours) * 3600);
}

}  // namespace segstore::bench
