// Helpers for the profile tests: reference-workload profiles.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::profile::testing {

// A temporary directory, removed with everything in it.
inline constexpr UnixSeconds kTestStart = 1'790'000'000;

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

// The profile layer on a real engine in a temporary file, its clock at
// kTestStart and manual; the sweeper off (tests run its passes). Open()
// (again after Close()) with the options given, Reopen() with the same.
class ProfileStoreFixture : public ::testing::Test {
 protected:
  void Open(ProfileOptions popts = {}) {
    popts.sweeper = false;  // passes are run explicitly
    popts_ = popts;
    storage::StoreOptions o;
    o.path = dir_.File("data");
    o.file_size = 64u << 20;
    o.write_block_size = 256u << 10;
    o.background_defrag = background_defrag_;
    o.clock = &clock_;
    auto s = storage::Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    engine_ = std::move(s).value();
    auto p = ProfileStore::Open(engine_.get(), popts);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    profiles_ = std::move(p).value();
    auto sess = profiles_->NewSession();
    ASSERT_TRUE(sess.ok());
    session_ = std::move(sess).value();
  }
  void Close() {
    session_.reset();
    profiles_.reset();
    engine_.reset();
  }
  void Reopen() {
    Close();
    Open(popts_);
  }
  void TearDown() override { Close(); }

  bool background_defrag_ = true;
  TempDir dir_;
  ManualClock clock_{kTestStart};
  ProfileOptions popts_;
  std::unique_ptr<storage::Store> engine_;
  std::unique_ptr<ProfileStore> profiles_;
  std::unique_ptr<ProfileSession> session_;
};

// A randomised test's seed: SEGSTORE_TEST_SEED's (to replay a failure),
// else a fresh one. Print it with the test's failures (SCOPED_TRACE).
inline uint64_t TestSeed() {
  const char* fixed = std::getenv("SEGSTORE_TEST_SEED");
  return fixed != nullptr ? std::stoull(fixed) : std::random_device{}();
}

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
