// The profile layer on a real engine, against a simple model (std::map and a
// fake clock): every operation, time moving, the store reopened in between,
// the sweeper, concurrent writers on one user.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "profile/test_util.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::profile {
namespace {

constexpr UnixSeconds kStart = testing::kTestStart;

using testing::TempDir;

using ProfileStoreTest = testing::ProfileStoreFixture;

TEST_F(ProfileStoreTest, EveryOperationOnOneUser) {
  Open();
  ProfileSession& s = *session_;
  EXPECT_TRUE(s.GetSync("alice").status().IsNotFound());
  std::vector<SegmentUpdate> up = {
      {5484, 3600, true, {}, {}}, {100, kStart + 60, false, 3u, {}}, {8500, 7200, true, {}, {}}};
  auto r = s.UpsertSync("alice", up);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->inserted, 3u);
  EXPECT_EQ(r->count, 3u);
  auto got = s.GetSync("alice");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ(got->At(0), (Segment{100, kStart + 60, 3u, {}}));
  // "add 5 hours to segment 5484"
  std::vector<SegmentUpdate> add = {{5484, 5 * 3600, false, {}, {}}};
  ASSERT_TRUE(s.UpsertSync("alice", add, UpsertMode::kAdd).ok());
  EXPECT_EQ(s.GetSync("alice")->At(1).expires_at, kStart + 6 * 3600);
  // "segments in 8000-9000"
  EXPECT_EQ(*s.CountSync("alice", 8000, 9000), 1u);
  // Time passes: segment 100 expires and disappears from every read.
  clock_.Advance(60);
  EXPECT_EQ(s.GetSync("alice")->count, 2u);
  auto trim = s.TrimSync("alice");
  ASSERT_TRUE(trim.ok());
  EXPECT_EQ(trim->trimmed, 1u);
  EXPECT_EQ(trim->remaining, 2u);
  EXPECT_EQ(*s.RemoveSync("alice", std::vector<uint64_t>{8500, 1}), 1u);
  EXPECT_EQ(*s.DeleteSync("alice"), true);
  EXPECT_TRUE(s.GetSync("alice").status().IsNotFound());
  EXPECT_EQ(*s.DeleteSync("alice"), false);
  // A user without a profile: NotFound for every read and partial write.
  EXPECT_TRUE(s.CountSync("alice").status().IsNotFound());
  EXPECT_TRUE(s.RemoveSync("alice", std::vector<uint64_t>{1}).status().IsNotFound());
  EXPECT_TRUE(s.TrimSync("alice").status().IsNotFound());
}

// A clock that moves one second on the first read after Arm(): it puts the
// second at which a profile's last segment expires between the engine's
// liveness check (its one clock read of an operation) and the profile
// layer's.
class TickingClock final : public Clock {
 public:
  explicit TickingClock(UnixSeconds now) : now_(now) {}
  UnixSeconds Now() const override {
    if (armed_.exchange(false)) return now_.fetch_add(1);  // this read still sees the old second
    return now_.load();
  }
  void Arm() { armed_ = true; }

 private:
  mutable std::atomic<UnixSeconds> now_;
  mutable std::atomic<bool> armed_{false};
};

// The engine found the record alive; by the profile layer's read of the
// clock its last segment had expired. Remove, trim and expire must still answer
// NotFound and write nothing, as for any user without a profile.
TEST_F(ProfileStoreTest, RemoveTrimAndExpireAtTheSecondTheProfileExpiresAreNotFound) {
  TickingClock clock(kStart);
  storage::StoreOptions o;
  o.path = dir_.File("ticking");
  o.file_size = 64u << 20;
  o.write_block_size = 256u << 10;
  o.clock = &clock;
  auto engine = storage::Store::Open(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ProfileOptions p;
  p.sweeper = false;
  auto profiles = ProfileStore::Open(engine->get(), p);
  ASSERT_TRUE(profiles.ok());
  auto session = (*profiles)->NewSession();
  ASSERT_TRUE(session.ok());
  std::vector<SegmentUpdate> up = {{1, 1, true, {}, {}}};  // expires at kStart + 1
  ASSERT_TRUE((*session)->UpsertSync("u", up).ok());
  const uint64_t writes = (*engine)->stats().writes;
  clock.Arm();
  auto removed = (*session)->RemoveSync("u", std::vector<uint64_t>{7});
  EXPECT_TRUE(removed.status().IsNotFound()) << removed.status().ToString();
  EXPECT_EQ((*engine)->stats().writes, writes);

  std::vector<SegmentUpdate> again = {{1, 1, true, {}, {}}};  // expires at kStart + 2
  ASSERT_TRUE((*session)->UpsertSync("v", again).ok());
  const uint64_t writes2 = (*engine)->stats().writes;
  clock.Arm();
  auto trimmed = (*session)->TrimSync("v");
  EXPECT_TRUE(trimmed.status().IsNotFound()) << trimmed.status().ToString();
  EXPECT_EQ((*engine)->stats().writes, writes2);

  std::vector<SegmentUpdate> third = {{1, 1, true, {}, {}}};  // expires at kStart + 3
  ASSERT_TRUE((*session)->UpsertSync("w", third).ok());
  const uint64_t writes3 = (*engine)->stats().writes;
  clock.Arm();
  auto expired = (*session)->ExpireSync("w", std::vector<uint64_t>{1}, ExpireSpec{60, true});
  EXPECT_TRUE(expired.status().IsNotFound()) << expired.status().ToString();
  EXPECT_EQ((*engine)->stats().writes, writes3);
  session->reset();
  profiles->reset();
  engine->reset();
}

TEST_F(ProfileStoreTest, AProfileWithNothingLiveDoesNotExist) {
  Open();
  std::vector<SegmentUpdate> up = {{1, 10, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", up).ok());
  clock_.Advance(10);
  EXPECT_TRUE(session_->GetSync("u").status().IsNotFound());
  // Removing the last segment removes the profile.
  clock_.Set(kStart);
  Reopen();
  std::vector<SegmentUpdate> up2 = {{1, 100, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("v", up2).ok());
  EXPECT_EQ(*session_->RemoveSync("v", std::vector<uint64_t>{1}), 1u);
  EXPECT_TRUE(session_->GetSync("v").status().IsNotFound());
}

TEST_F(ProfileStoreTest, BadRequestsWriteNothing) {
  ProfileOptions o;
  o.max_segments = 5;
  Open(o);
  std::vector<SegmentUpdate> ok = {{1, 100, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", ok).ok());
  std::vector<SegmentUpdate> past = {{2, kStart - 1, false, {}, {}}};
  EXPECT_EQ(session_->UpsertSync("u", past).status().code(), Status::Code::kInvalidArgument);
  std::vector<SegmentUpdate> dup = {{2, 100, true, {}, {}}, {2, 200, true, {}, {}}};
  EXPECT_EQ(session_->UpsertSync("u", dup).status().code(), Status::Code::kInvalidArgument);
  std::vector<SegmentUpdate> many;
  for (uint64_t i = 10; i < 15; ++i) many.push_back({i, 100, true, {}, {}});
  auto over = session_->UpsertSync("u", many);
  EXPECT_EQ(over.status().code(), Status::Code::kLimitExceeded) << over.status().ToString();
  EXPECT_EQ(session_->UpsertSync(std::string(300, 'k'), ok).status().code(),
            Status::Code::kInvalidArgument);
  auto got = session_->GetSync("u");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->count, 1u);  // nothing of the refused writes
}

TEST_F(ProfileStoreTest, BatchGetReturnsEachUsersResultInOrder) {
  Open();
  std::vector<std::string> users;
  for (int i = 0; i < 20; ++i) {
    users.push_back("user-" + std::to_string(i));
    if (i % 4 == 3) continue;  // some have no profile
    std::vector<SegmentUpdate> up = {{uint64_t(i), 100, true, {}, {}}};
    ASSERT_TRUE(session_->UpsertSync(users.back(), up).ok());
  }
  Reopen();  // reads from the device, issued together
  auto r = session_->BatchGetSync(users);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), users.size());
  for (int i = 0; i < 20; ++i) {
    const Result<GetResult>& one = (*r)[i];
    if (i % 4 == 3) {
      EXPECT_TRUE(one.status().IsNotFound());
    } else {
      ASSERT_TRUE(one.ok()) << one.status().ToString();
      ASSERT_EQ(one->size(), 1u);
      EXPECT_EQ(one->ids[0], uint64_t(i));
    }
  }
  EXPECT_TRUE(session_->BatchGetSync({})->empty());
}

// ---- The model.

struct ModelSegment {
  UnixSeconds expires_at;
  std::optional<uint32_t> attr1, attr2;
};
using ModelProfile = std::map<uint64_t, ModelSegment>;
bool Alive(UnixSeconds e, UnixSeconds now) { return e == kNever || e > now; }

void ModelDropExpired(ModelProfile* p, UnixSeconds now) {
  for (auto it = p->begin(); it != p->end();) {
    it = Alive(it->second.expires_at, now) ? std::next(it) : p->erase(it);
  }
}

UpsertResult ModelUpsert(ModelProfile* p, const std::vector<SegmentUpdate>& ups, UpsertMode mode,
                         UnixSeconds now) {
  UpsertResult r;
  for (auto& [id, s] : *p) {
    if (!Alive(s.expires_at, now)) ++r.trimmed;
  }
  for (const SegmentUpdate& u : ups) {
    auto it = p->find(u.id);
    bool live = it != p->end() && Alive(it->second.expires_at, now);
    UnixSeconds given = u.ttl ? now + u.value : u.value;
    if (live) {
      ModelSegment& s = it->second;
      if (mode == UpsertMode::kSet) s.expires_at = given;
      if (mode == UpsertMode::kExtend) {
        s.expires_at =
            (s.expires_at == kNever || given == kNever) ? kNever : std::max(s.expires_at, given);
      }
      if (mode == UpsertMode::kAdd && s.expires_at != kNever) s.expires_at += u.value;
      if (u.attr1) s.attr1 = u.attr1;
      if (u.attr2) s.attr2 = u.attr2;
      ++r.updated;
    } else {
      (*p)[u.id] = ModelSegment{mode == UpsertMode::kAdd ? now + u.value : given, u.attr1, u.attr2};
      ++r.inserted;
    }
  }
  ModelDropExpired(p, now);
  r.count = static_cast<uint32_t>(p->size());
  return r;
}

struct ModelResult {
  std::vector<Segment> segments;
  uint32_t count = 0;
};

ModelResult ModelGet(const ModelProfile& p, UnixSeconds now, const GetOptions& o) {
  ModelResult r;
  for (const auto& [id, s] : p) {
    if (!Alive(s.expires_at, now) || id < o.id_from || id > o.id_to) continue;
    bool in = s.expires_at == kNever ? o.expiry_to == UINT32_MAX
                                     : s.expires_at >= o.expiry_from && s.expires_at <= o.expiry_to;
    bool windowed = o.expiry_from != 0 || o.expiry_to != UINT32_MAX || o.outside_expiry_window;
    if (windowed && in == o.outside_expiry_window) continue;
    ++r.count;
    if (!o.count_only && (o.limit == 0 || r.segments.size() < o.limit)) {
      r.segments.push_back(o.ids_only ? Segment{id, kNever, {}, {}}
                                      : Segment{id, s.expires_at, s.attr1, s.attr2});
    }
  }
  return r;
}

size_t LiveCount(const ModelProfile& p, UnixSeconds now) {
  size_t n = 0;
  for (const auto& [id, s] : p) n += Alive(s.expires_at, now);
  return n;
}

TEST_F(ProfileStoreTest, RandomOperationsMatchTheModelAcrossTimeAndRestarts) {
  Open();
  std::mt19937_64 rng(2026);
  std::map<std::string, ModelProfile> model;
  auto user = [&] { return "user-" + std::to_string(rng() % 20); };
  for (int op = 0; op < 4000; ++op) {
    const UnixSeconds now = clock_.Now();
    const std::string u = user();
    ModelProfile& m = model[u];
    switch (rng() % 10) {
      case 0:
      case 1:
      case 2: {  // upsert
        std::vector<SegmentUpdate> ups;
        std::set<uint64_t> ids;
        size_t n = 1 + rng() % 10;
        while (ids.size() < n) ids.insert(rng() % 200);
        auto mode = static_cast<UpsertMode>(rng() % 3);
        for (uint64_t id : ids) {
          SegmentUpdate s{id, 0, false, {}, {}};
          if (mode == UpsertMode::kAdd || rng() % 2) {
            s.value = 1 + static_cast<uint32_t>(rng() % (3 * 86400));
            s.ttl = mode != UpsertMode::kAdd;
          } else {
            s.value = rng() % 20 == 0 ? kNever : now + 1 + static_cast<uint32_t>(rng() % 86400);
          }
          if (rng() % 5 == 0) s.attr1 = static_cast<uint32_t>(rng());
          if (rng() % 7 == 0) s.attr2 = static_cast<uint32_t>(rng() % 16);
          ups.push_back(s);
        }
        auto got = session_->UpsertSync(u, ups, mode);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        UpsertResult want = ModelUpsert(&m, ups, mode, now);
        EXPECT_EQ(got->inserted, want.inserted) << op;
        EXPECT_EQ(got->updated, want.updated) << op;
        EXPECT_EQ(got->count, want.count) << op;
        break;
      }
      case 3: {  // remove (an ID listed twice counts once)
        std::vector<uint64_t> ids;
        for (int i = 0; i < 3; ++i) ids.push_back(rng() % 200);
        if (rng() % 4 == 0) ids.push_back(ids[0]);
        const std::vector<uint64_t> sent = ids;
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        if (LiveCount(m, now) == 0) {
          EXPECT_TRUE(session_->RemoveSync(u, sent).status().IsNotFound()) << op;
          m.clear();
          break;
        }
        uint32_t want = 0;
        for (uint64_t id : ids) {
          auto it = m.find(id);
          if (it != m.end() && Alive(it->second.expires_at, now)) {
            ++want;
            m.erase(it);
          }
        }
        auto got = session_->RemoveSync(u, sent);
        ASSERT_TRUE(got.ok());
        EXPECT_EQ(*got, want) << op;
        ModelDropExpired(&m, now);
        break;
      }
      case 4: {  // trim
        UnixSeconds before = rng() % 2 ? 0 : now + static_cast<UnixSeconds>(rng() % 86400);
        UnixSeconds at = std::max(before, now);
        if (LiveCount(m, now) == 0) {
          EXPECT_TRUE(session_->TrimSync(u, before).status().IsNotFound()) << op;
          m.clear();
          break;
        }
        size_t before_count = m.size();
        for (auto it = m.begin(); it != m.end();) {
          it = Alive(it->second.expires_at, at) ? std::next(it) : m.erase(it);
        }
        auto got = session_->TrimSync(u, before);
        ASSERT_TRUE(got.ok());
        EXPECT_EQ(got->remaining, m.size()) << op;
        EXPECT_LE(got->trimmed, before_count);
        break;
      }
      case 5: {  // delete
        bool had = LiveCount(m, now) > 0;
        auto got = session_->DeleteSync(u);
        ASSERT_TRUE(got.ok());
        EXPECT_EQ(*got, had) << op;
        m.clear();
        break;
      }
      default: {  // get, with random options
        GetOptions o;
        if (rng() % 3 == 0) {
          o.id_from = rng() % 100;
          o.id_to = o.id_from + rng() % 100;
        }
        if (rng() % 3 == 0) {
          o.expiry_from = now;
          o.expiry_to = now + static_cast<UnixSeconds>(rng() % 86400);
          o.outside_expiry_window = rng() % 2;
        }
        if (rng() % 4 == 0) o.limit = 1 + static_cast<uint32_t>(rng() % 5);
        o.count_only = rng() % 6 == 0;
        o.ids_only = rng() % 4 == 0;
        auto got = session_->GetSync(u, o);
        if (LiveCount(m, now) == 0) {
          EXPECT_TRUE(got.status().IsNotFound()) << op << " " << got.status().ToString();
          break;
        }
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        ModelResult want = ModelGet(m, now, o);
        EXPECT_EQ(got->count, want.count) << op;
        EXPECT_EQ(got->ToSegments(), want.segments) << op;
      }
    }
    if (rng() % 50 == 0) clock_.Advance(static_cast<uint32_t>(rng() % 86400));
    if (rng() % 300 == 0) {
      ASSERT_TRUE(profiles_->SweepNow().ok());
    }
    if (rng() % 500 == 0) Reopen();
  }
  // Everything once more after a last restart.
  Reopen();
  for (auto& [u, m] : model) {
    auto got = session_->GetSync(u);
    if (LiveCount(m, clock_.Now()) == 0) {
      EXPECT_TRUE(got.status().IsNotFound());
    } else {
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(got->ToSegments(), ModelGet(m, clock_.Now(), {}).segments);
    }
  }
}

TEST_F(ProfileStoreTest, ExpireSetsRemovesOrKeepsEachListedSegment) {
  using EO = ExpireOutcome;
  Open();
  ProfileSession& s = *session_;
  // 1 expires in an hour, 2 never, 3 in a day with attributes, 4 in 10 s.
  std::vector<SegmentUpdate> up = {{1, 3600, true, {}, {}},
                                   {2, kNever, false, {}, {}},
                                   {3, 86400, true, 7u, 8u},
                                   {4, 10, true, {}, {}}};
  ASSERT_TRUE(s.UpsertSync("alice", up).ok());
  // "HEXPIRE alice 600 FIELDS 1 2 3 9 1": every live one set, 9 missing.
  auto r = s.ExpireSync("alice", std::vector<uint64_t>{1, 2, 3, 9, 1}, ExpireSpec{600, true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kSet, EO::kSet, EO::kSet, EO::kMissing, EO::kSet}));
  EXPECT_EQ(r->count, 4u);
  EXPECT_FALSE(r->duplicate);
  auto got = s.GetSync("alice");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ToSegments(), (std::vector<Segment>{{1, kStart + 600, {}, {}},
                                                     {2, kStart + 600, {}, {}},
                                                     {3, kStart + 600, 7u, 8u},
                                                     {4, kStart + 10, {}, {}}}));
  // gt: only where later; lt: only where earlier.
  r = s.ExpireSync("alice", std::vector<uint64_t>{1, 4},
                   ExpireSpec{kStart + 300, false, ExpireCondition::kGt});
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kUnchanged, EO::kSet}));
  r = s.ExpireSync("alice", std::vector<uint64_t>{1, 4},
                   ExpireSpec{kStart + 400, false, ExpireCondition::kLt});
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kSet, EO::kUnchanged}));
  // HPERSIST: xx with an absolute 0; a second time it no longer holds.
  r = s.ExpireSync("alice", std::vector<uint64_t>{3},
                   ExpireSpec{kNever, false, ExpireCondition::kXx});
  EXPECT_EQ(r->results, std::vector<EO>{EO::kSet});
  r = s.ExpireSync("alice", std::vector<uint64_t>{3},
                   ExpireSpec{kNever, false, ExpireCondition::kXx});
  EXPECT_EQ(r->results, std::vector<EO>{EO::kUnchanged});
  // nx: only a segment that never expires.
  r = s.ExpireSync("alice", std::vector<uint64_t>{3, 1},
                   ExpireSpec{60, true, ExpireCondition::kNx});
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kSet, EO::kUnchanged}));
  got = s.GetSync("alice");
  EXPECT_EQ(got->ToSegments(), (std::vector<Segment>{{1, kStart + 400, {}, {}},
                                                     {2, kStart + 600, {}, {}},
                                                     {3, kStart + 60, 7u, 8u},
                                                     {4, kStart + 300, {}, {}}}));
  // A past time removes: the segment is gone for every read.
  r = s.ExpireSync("alice", std::vector<uint64_t>{2}, ExpireSpec{kStart - 1, false});
  EXPECT_EQ(r->results, std::vector<EO>{EO::kRemoved});
  EXPECT_EQ(r->count, 3u);
  EXPECT_EQ(s.GetSync("alice")->ids, (std::vector<uint64_t>{1, 3, 4}));
  // Survives a reopen.
  Reopen();
  EXPECT_EQ(session_->GetSync("alice")->ToSegments(),
            (std::vector<Segment>{
                {1, kStart + 400, {}, {}}, {3, kStart + 60, 7u, 8u}, {4, kStart + 300, {}, {}}}));
}

TEST_F(ProfileStoreTest, ExpireWritesOnlyWhatChangedAndTrimsTheExpired) {
  using EO = ExpireOutcome;
  Open();
  std::vector<SegmentUpdate> up = {{1, 3600, true, {}, {}}, {2, 10, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", up).ok());
  // Nothing holds and nothing expired: nothing is written.
  uint64_t writes = engine_->stats().writes;
  auto r = session_->ExpireSync("u", std::vector<uint64_t>{1, 5},
                                ExpireSpec{0, false, ExpireCondition::kNx});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kUnchanged, EO::kMissing}));
  EXPECT_EQ(engine_->stats().writes, writes);
  r = session_->ExpireSync("u", std::vector<uint64_t>{}, ExpireSpec{60, true});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->results.empty());
  EXPECT_EQ(r->count, 2u);
  EXPECT_EQ(engine_->stats().writes, writes);
  // Segment 2 expires: the same request now writes, without it; the
  // expired one listed is missing.
  clock_.Advance(10);
  r = session_->ExpireSync("u", std::vector<uint64_t>{1, 2},
                           ExpireSpec{0, false, ExpireCondition::kNx});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kUnchanged, EO::kMissing}));
  EXPECT_EQ(r->count, 1u);
  EXPECT_EQ(engine_->stats().writes, writes + 1);
}

TEST_F(ProfileStoreTest, ExpireOfTheLastSegmentRemovesTheProfile) {
  using EO = ExpireOutcome;
  Open();
  std::vector<SegmentUpdate> up = {{1, 3600, true, {}, {}}, {2, kNever, false, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", up).ok());
  auto r = session_->ExpireSync("u", std::vector<uint64_t>{2, 1, 2}, ExpireSpec{0, true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->results, (std::vector<EO>{EO::kRemoved, EO::kRemoved, EO::kRemoved}));
  EXPECT_EQ(r->count, 0u);
  EXPECT_TRUE(session_->GetSync("u").status().IsNotFound());
  Reopen();
  EXPECT_TRUE(session_->GetSync("u").status().IsNotFound());
}

TEST_F(ProfileStoreTest, ExpireRefusalsWriteNothing) {
  ProfileOptions o;
  o.max_segments = 3;
  Open(o);
  std::vector<SegmentUpdate> up = {{1, 3600, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", up).ok());
  // A user without a profile: never written, or every segment expired.
  EXPECT_TRUE(session_->ExpireSync("nobody", std::vector<uint64_t>{1}, ExpireSpec{60, true})
                  .status()
                  .IsNotFound());
  std::vector<SegmentUpdate> brief = {{1, 5, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("gone", brief).ok());
  const uint64_t writes_gone = engine_->stats().writes;
  clock_.Advance(5);
  EXPECT_TRUE(session_->ExpireSync("gone", std::vector<uint64_t>{1}, ExpireSpec{60, true})
                  .status()
                  .IsNotFound());
  EXPECT_EQ(engine_->stats().writes, writes_gone);
  const uint64_t writes = engine_->stats().writes;
  // More IDs than a profile may hold (an ID twice counts twice).
  auto many = session_->ExpireSync("u", std::vector<uint64_t>{1, 1, 2, 3}, ExpireSpec{60, true});
  EXPECT_EQ(many.status().code(), Status::Code::kLimitExceeded) << many.status().ToString();
  // A TTL past 2^32-1.
  const uint32_t too_far = UINT32_MAX - clock_.Now() + 1;
  EXPECT_EQ(session_->ExpireSync("u", std::vector<uint64_t>{1}, ExpireSpec{too_far, true})
                .status()
                .code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(engine_->stats().writes, writes);
  EXPECT_EQ(session_->GetSync("u")->At(0).expires_at, kStart + 3600);
  // At the limit, and a TTL that reaches exactly 2^32-1: fine.
  EXPECT_TRUE(session_->ExpireSync("u", std::vector<uint64_t>{1, 1, 2}, ExpireSpec{60, true}).ok());
  EXPECT_TRUE(
      session_->ExpireSync("u", std::vector<uint64_t>{1}, ExpireSpec{too_far - 1, true}).ok());
  EXPECT_EQ(session_->GetSync("u")->At(0).expires_at, UINT32_MAX);
}

TEST_F(ProfileStoreTest, UpsertReplacingAttributesClearsTheOnesNotGiven) {
  Open();
  std::vector<SegmentUpdate> up = {{1, 3600, true, 7u, 8u}, {2, 3600, true, 5u, 6u}};
  ASSERT_TRUE(session_->UpsertSync("u", up).ok());
  std::vector<SegmentUpdate> replace = {{1, 3600, true, {}, 9u}};
  auto r = session_->UpsertSync("u", replace, UpsertOptions{UpsertMode::kSet, true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->updated, 1u);
  auto got = session_->GetSync("u");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->At(0), (Segment{1, kStart + 3600, {}, 9u}));
  EXPECT_EQ(got->At(1), (Segment{2, kStart + 3600, 5u, 6u}));  // not named: kept
  // Neither given: both cleared (HSET of a field to an empty value).
  std::vector<SegmentUpdate> clear = {{2, 60, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", clear, UpsertOptions{UpsertMode::kExtend, true}).ok());
  got = session_->GetSync("u");
  EXPECT_EQ(got->At(1), (Segment{2, kStart + 3600, {}, {}}));
  EXPECT_TRUE(got->attr1.empty());
}

TEST_F(ProfileStoreTest, ExpiriesAtTheEndOfTimeStayReadable) {
  Open();
  // An absolute expiry of UINT32_MAX, and an add that saturates there.
  std::vector<SegmentUpdate> up = {{1, UINT32_MAX, false, {}, {}}, {2, 3600, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", up).ok());
  std::vector<SegmentUpdate> add = {{2, UINT32_MAX - kStart - 100, false, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("u", add, UpsertMode::kAdd).ok());
  auto got = session_->GetSync("u");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ(got->At(0).expires_at, UINT32_MAX);
  EXPECT_EQ(got->At(1).expires_at, UINT32_MAX);
  // A TTL reaching exactly UINT32_MAX is accepted and kept exact.
  std::vector<SegmentUpdate> ttl = {{3, UINT32_MAX - kStart, true, {}, {}}};
  ASSERT_TRUE(session_->UpsertSync("v", ttl).ok());
  EXPECT_EQ(session_->GetSync("v")->At(0).expires_at, UINT32_MAX);
}

TEST_F(ProfileStoreTest, SweeperSkipsWhollyExpiredRecords) {
  Open();
  for (int u = 0; u < 20; ++u) {
    std::vector<SegmentUpdate> ups = {{1, 60, true, {}, {}}, {2, 120, true, {}, {}}};
    ASSERT_TRUE(session_->UpsertSync("u" + std::to_string(u), ups).ok());
  }
  clock_.Advance(3600);  // every segment expired: the records are void, not worth a read
  const uint64_t reads = engine_->stats().device_reads;
  ASSERT_TRUE(profiles_->SweepNow().ok());
  EXPECT_EQ(profiles_->sweeper_stats().records_visited, 0u);
  EXPECT_EQ(engine_->stats().device_reads, reads);
  EXPECT_TRUE(session_->GetSync("u3").status().IsNotFound());
}

TEST_F(ProfileStoreTest, SweeperRemovesExpiredSegmentsAndOnlyThose) {
  ProfileOptions o;
  o.sweep_share = 0.25;
  Open(o);
  // 100 users, each with 40 segments expiring one hour apart, and 10 forever.
  for (int u = 0; u < 100; ++u) {
    std::vector<SegmentUpdate> ups;
    for (uint64_t i = 0; i < 40; ++i) ups.push_back({i, uint32_t(3600 * (i + 1)), true, {}, {}});
    for (uint64_t i = 100; i < 110; ++i) ups.push_back({i, kNever, false, {}, {}});
    ASSERT_TRUE(session_->UpsertSync("u" + std::to_string(u), ups).ok());
  }
  // Nothing is due yet: a pass visits nothing.
  ASSERT_TRUE(profiles_->SweepNow().ok());
  EXPECT_EQ(profiles_->sweeper_stats().records_visited, 0u);
  // 13 of 50 segments expired: past a quarter, every record is due.
  clock_.Advance(13 * 3600);
  ASSERT_TRUE(profiles_->SweepNow().ok());
  SweeperStats st = profiles_->sweeper_stats();
  EXPECT_EQ(st.records_visited, 100u);
  EXPECT_EQ(st.records_rewritten, 100u);
  EXPECT_EQ(st.segments_removed, 1300u);
  EXPECT_GT(st.bytes_reclaimed, 0u);
  // Rewritten records are not due again until another quarter has gone.
  ASSERT_TRUE(profiles_->SweepNow().ok());
  EXPECT_EQ(profiles_->sweeper_stats().records_visited, 100u);
  Reopen();
  auto got = session_->GetSync("u7");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->count, 37u);  // 27 timed + 10 forever
}

TEST_F(ProfileStoreTest, BackgroundSweeperRunsAtItsRate) {
  ProfileOptions o;
  Open(o);
  for (int u = 0; u < 50; ++u) {
    std::vector<SegmentUpdate> ups = {
        {1, 10, true, {}, {}}, {2, 20, true, {}, {}}, {3, 100000, true, {}, {}}};
    ASSERT_TRUE(session_->UpsertSync("u" + std::to_string(u), ups).ok());
  }
  clock_.Advance(30);
  // A store with the sweeper thread on, same engine.
  o.sweeper = true;
  o.sweep_interval = std::chrono::milliseconds(10);
  o.sweep_records_per_second = 1000;
  auto bg = ProfileStore::Open(engine_.get(), o);
  ASSERT_TRUE(bg.ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*bg)->sweeper_stats().records_rewritten < 50 &&
         std::chrono::steady_clock::now() < deadline) {
    session_->Wait(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*bg)->sweeper_stats().records_rewritten, 50u);
  EXPECT_EQ((*bg)->sweeper_stats().segments_removed, 100u);
  bg->reset();
}

// The engine, seen through workers whose first update, once it has read
// its record, waits until the first update of `parties` workers has read
// theirs. When those are of one key, all of them read the same version and
// all but one must retry: a collision that does not depend on how the
// scheduler happens to run the threads. Everything else is passed through.
class RendezvousStore final : public storage::Store {
 public:
  RendezvousStore(storage::Store* store, int parties) : store_(store), parties_(parties) {}

  Result<std::unique_ptr<storage::Worker>> NewWorker(
      const storage::WorkerOptions& options) override {
    auto w = store_->NewWorker(options);
    if (!w.ok()) return w.status();
    return std::unique_ptr<storage::Worker>(std::make_unique<Worker>(this, std::move(w).value()));
  }
  storage::StoreStats stats() override { return store_->stats(); }
  const storage::RecoveryStats& recovery() const override { return store_->recovery(); }
  Clock& clock() override { return store_->clock(); }
  uint32_t FindDue(uint32_t now, size_t max, uint32_t* cursor,
                   std::vector<storage::RecordRef>* out) override {
    return store_->FindDue(now, max, cursor, out);
  }
  void ListPartition(uint32_t partition, uint64_t tag_from, size_t max,
                     std::vector<storage::RecordRef>* out, uint64_t* tag_next) override {
    store_->ListPartition(partition, tag_from, max, out, tag_next);
  }
  uint32_t max_key_size() const override { return store_->max_key_size(); }
  uint32_t max_body_size() const override { return store_->max_body_size(); }
  Status DefragNow(bool rotate) override { return store_->DefragNow(rotate); }
  uint64_t ReleaseSpareImages(std::chrono::steady_clock::duration unused_for) override {
    return store_->ReleaseSpareImages(unused_for);
  }

  int arrived() const { return arrived_.load(); }

 private:
  class Worker final : public storage::Worker {
   public:
    Worker(RendezvousStore* store, std::unique_ptr<storage::Worker> inner)
        : store_(store), inner_(std::move(inner)) {}
    void Get(std::string_view key, storage::GetCallback done) override {
      inner_->Get(key, std::move(done));
    }
    void GetWithReference(std::string_view key, storage::GetPairCallback done) override {
      inner_->GetWithReference(key, std::move(done));
    }
    void Update(std::string_view key, storage::UpdateFn fn, storage::WriteCallback done) override {
      if (!updated_) {
        updated_ = true;
        fn = [this, fn = std::move(fn)](const storage::Record* current) {
          if (!met_) {  // its first attempt; retries go straight on
            met_ = true;
            store_->Meet();
          }
          return fn(current);
        };
      }
      inner_->Update(key, std::move(fn), std::move(done));
    }
    void UpdateAsOf(std::string_view key, uint32_t as_of, storage::UpdateFn fn,
                    storage::WriteCallback done) override {
      inner_->UpdateAsOf(key, as_of, std::move(fn), std::move(done));
    }
    void Put(std::string_view key, std::string body, uint32_t sweep_at, uint32_t void_at,
             storage::WriteCallback done) override {
      inner_->Put(key, std::move(body), sweep_at, void_at, std::move(done));
    }
    void Delete(std::string_view key, storage::WriteCallback done) override {
      inner_->Delete(key, std::move(done));
    }
    void Flush(storage::FlushCallback done) override { inner_->Flush(std::move(done)); }
    void GetAt(const storage::RecordRef& ref, storage::GetCallback done) override {
      inner_->GetAt(ref, std::move(done));
    }
    void UpdateAt(const storage::RecordRef& ref, storage::UpdateFn fn,
                  storage::WriteCallback done) override {
      inner_->UpdateAt(ref, std::move(fn), std::move(done));
    }
    void Defer(std::function<void()> task) override { inner_->Defer(std::move(task)); }
    int event_fd() const override { return inner_->event_fd(); }
    void OnEvent() override { inner_->OnEvent(); }
    size_t Poll() override { return inner_->Poll(); }
    size_t Wait(std::chrono::milliseconds timeout) override { return inner_->Wait(timeout); }
    uint32_t pending() const override { return inner_->pending(); }

   protected:
    void BeginBatch() override { batches_.push_back(std::make_unique<Batch>(*inner_)); }
    void EndBatch() override { batches_.pop_back(); }

   private:
    RendezvousStore* store_;
    std::unique_ptr<storage::Worker> inner_;
    bool updated_ = false;  // its first update has been started
    bool met_ = false;      // and has been to the meeting
    std::vector<std::unique_ptr<Batch>> batches_;
  };

  // Waits (30 s at most: a hang guard) until `parties_` have arrived.
  void Meet() {
    ++arrived_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (arrived_.load() < parties_ && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  storage::Store* store_;
  const int parties_;
  std::atomic<int> arrived_{0};
};

TEST_F(ProfileStoreTest, ConcurrentUpsertsToOneUserLoseNoSegment) {
  Open();
  constexpr int kThreads = 3, kPerThread = 150;
  // The threads' sessions meet at their first upsert (see RendezvousStore).
  RendezvousStore meeting(engine_.get(), kThreads);
  ProfileOptions o = popts_;
  auto meeting_profiles = ProfileStore::Open(&meeting, o);
  ASSERT_TRUE(meeting_profiles.ok()) << meeting_profiles.status().ToString();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto s = (*meeting_profiles)->NewSession();
      ASSERT_TRUE(s.ok());
      int done = 0;
      for (int i = 0; i < kPerThread; ++i) {
        std::vector<SegmentUpdate> up = {{uint64_t(t * 1000 + i), 3600, true, {}, {}}};
        (*s)->Upsert("shared", up, UpsertMode::kSet, [&](Result<UpsertResult> r) {
          EXPECT_TRUE(r.ok()) << r.status().ToString();
          ++done;
        });
        if (i % 8 == 7) {
          while (done < i + 1) (*s)->Wait(std::chrono::milliseconds(1));
        }
      }
      while (done < kPerThread) (*s)->Wait(std::chrono::milliseconds(1));
    });
  }
  for (auto& th : threads) th.join();
  meeting_profiles->reset();
  EXPECT_EQ(*session_->CountSync("shared"), uint32_t(kThreads * kPerThread));
  // Writers did collide: at least at the meeting.
  EXPECT_EQ(meeting.arrived(), kThreads);
  EXPECT_GE(engine_->stats().update_retries, uint64_t{kThreads - 1});
}

// Profile fields: concurrent increments of one counter never lose one (each
// is a read-modify-write the engine runs again when another got in between).
TEST_F(ProfileStoreTest, ConcurrentIncrementsOfOneCounterLoseNone) {
  Open();
  constexpr int kThreads = 3, kPerThread = 150;
  RendezvousStore meeting(engine_.get(), kThreads);
  auto meeting_profiles = ProfileStore::Open(&meeting, popts_);
  ASSERT_TRUE(meeting_profiles.ok()) << meeting_profiles.status().ToString();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto s = (*meeting_profiles)->NewSession();
      ASSERT_TRUE(s.ok());
      segstore::FieldIncrement inc;
      inc.name = "cap:42";
      inc.ttl = 86400;
      int done = 0;
      for (int i = 0; i < kPerThread; ++i) {
        (*s)->FieldIncrement({}, "shared", inc, [&](Result<IncrementResult> r) {
          EXPECT_TRUE(r.ok()) << r.status().ToString();
          EXPECT_FALSE(r.ok() && r->capped);
          ++done;
        });
        if (i % 8 == 7) {
          while (done < i + 1) (*s)->Wait(std::chrono::milliseconds(1));
        }
      }
      while (done < kPerThread) (*s)->Wait(std::chrono::milliseconds(1));
    });
  }
  for (auto& th : threads) th.join();
  meeting_profiles->reset();
  // The counter's name was numbered by the other profile store's name
  // table (one per engine in a server): read it as a restart would.
  const uint64_t retries = engine_->stats().update_retries;
  Reopen();
  GetOptions o;
  o.fields.mode = FieldSelection::Mode::kAll;
  auto got = session_->GetSync("shared", o);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->fields.size(), 1u);
  EXPECT_EQ(got->fields[0].value, FieldValue::Int(kThreads * kPerThread));
  EXPECT_EQ(meeting.arrived(), kThreads);
  EXPECT_GE(retries, uint64_t{kThreads - 1});
}

}  // namespace
}  // namespace segstore::profile
