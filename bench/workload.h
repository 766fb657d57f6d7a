// The reference workload's deterministic pieces (../shared/workload.md),
// shared by every benchmark and data generator: user keys and the random
// streams derived from a user's index.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string>

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

}  // namespace segstore::bench
