// Helpers for the profile tests: reference-workload profiles.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "segstore/profile.h"

namespace segstore::profile::testing {

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "segstore-profile-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string File(const char* name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A profile shaped like the reference workload: `n` distinct ids uniform in
// [0, id_space), expiries on whole hours 1..720 hours after `now` (or, with
// `second_ttl`, now + uniform[3600, 2592000] seconds), no attributes.
inline std::vector<Segment> ReferenceProfile(uint64_t seed, UnixSeconds now, size_t n = 1000,
                                             uint64_t id_space = 82000, bool second_ttl = false) {
  std::mt19937_64 rng(seed);
  std::set<uint64_t> ids;
  while (ids.size() < n) ids.insert(rng() % id_space);
  std::vector<Segment> out;
  for (uint64_t id : ids) {
    Segment s;
    s.id = id;
    if (second_ttl) {
      s.expires_at = now + 3600 + static_cast<UnixSeconds>(rng() % (2592000 - 3600 + 1));
    } else {
      s.expires_at = static_cast<UnixSeconds>((now / 3600 + 1 + rng() % 720) * 3600);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace segstore::profile::testing
