// `segctl backup` and `segctl restore` against the whole server in process:
// a backup restores into an empty server to the same profiles (segments,
// fields, links); a damaged chunk is refused, naming it, and nothing is
// written; an interrupted backup (its file cut anywhere) is resumed from its
// last complete partition; a newer format version is refused; a restore
// into a live store merges as stated (later expiries, the backup's fields).
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "integration/daemon.h"
#include "integration/in_process.h"
#include "segstore/client.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using testing::Has;
using testing::ReadFile;
using testing::Segctl;

constexpr UnixSeconds kStart = 1'790'000'000;
// Three years after the real clock (the whole day), whenever the test runs:
// restore and the loader keep it (they refuse expiries in the past).
const UnixSeconds kLater = static_cast<UnixSeconds>((std::time(nullptr) / 86400 + 3 * 365) * 86400);

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class BackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      storage::StoreOptions o =
          testing::SmallStore(dir_.File("data" + std::to_string(i)), &clock_, 64u << 20);
      profile::ProfileOptions p;
      p.sweeper = false;
      ProfileServiceOptions so;
      ServerOptions server;
      server.threads = 2;
      served_[i].Start(o, nullptr, p, so, server);
    }
    c0_ = served_[0].Connect();
    c1_ = served_[1].Connect();
    ASSERT_NE(c0_, nullptr);
    ASSERT_NE(c1_, nullptr);
  }
  void TearDown() override {
    c0_.reset();
    c1_.reset();
    for (auto& s : served_) s.Stop();
  }
  uint16_t port(int i) const { return served_[i].server->port(); }

  // Server 1 again, empty (a new data file).
  void FreshServer1() {
    c1_.reset();
    served_[1].Stop();
    storage::StoreOptions o =
        testing::SmallStore(dir_.File("fresh" + std::to_string(fresh_++)), &clock_, 64u << 20);
    profile::ProfileOptions p;
    p.sweeper = false;
    ServerOptions server;
    server.threads = 2;
    served_[1].Start(o, nullptr, p, ProfileServiceOptions{}, server);
    c1_ = served_[1].Connect();
    ASSERT_NE(c1_, nullptr);
  }

  void Fill() {
    for (int i = 0; i < 400; ++i) {
      const std::string user = "user-" + std::to_string(i);
      std::vector<SegmentUpdate> segs;
      for (uint64_t k = 0; k < static_cast<uint64_t>(1 + i % 5); ++k) {
        SegmentUpdate s;
        s.id = 1000 * k + static_cast<uint64_t>(i);
        s.value = k == 0 ? kNever : kLater + static_cast<uint32_t>(k + i);
        if (k == 1) s.attr1 = static_cast<uint32_t>(i);
        if (k == 2) s.attr2 = 9;
        segs.push_back(s);
      }
      ASSERT_TRUE(c0_->Upsert(user, segs).ok());
      if (i % 3 == 0) {
        std::vector<FieldUpdate> f = {{"n", FieldValue::Int(i), 0, false},
                                      {"s", FieldValue::String("text"), kLater, false},
                                      {"t", FieldValue::Time(1234), 0, false}};
        ASSERT_TRUE(c0_->FieldSet(user, f).ok());
      }
    }
    ASSERT_TRUE(c0_->Link("user-1", "user-2", 0).ok());
    ASSERT_TRUE(c0_->Link("user-4", "user-2", 0).ok());
  }

  // Every user of Fill reads the same from both servers.
  void ExpectSame() {
    GetOptions o;
    o.own_only = true;
    o.fields.mode = FieldSelection::Mode::kAll;
    for (int i = 0; i < 400; ++i) {
      const std::string user = "user-" + std::to_string(i);
      Result<GetResult> a = c0_->Get(user, o), b = c1_->Get(user, o);
      ASSERT_TRUE(a.ok() && b.ok()) << user << " " << b.status().ToString();
      EXPECT_EQ(a->ToSegments(), b->ToSegments()) << user;
      EXPECT_EQ(a->fields, b->fields) << user;
    }
    EXPECT_EQ(*c1_->MasterOf("user-1"), "user-2");
    EXPECT_EQ(*c1_->MasterOf("user-4"), "user-2");
    EXPECT_TRUE(c1_->MasterOf("user-3").status().IsNotFound());
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  int fresh_ = 0;
  testing::InProcessServer served_[2];
  std::unique_ptr<client::Client> c0_, c1_;
};

TEST_F(BackupTest, ABackupRestoresIntoAnEmptyServer) {
  Fill();
  ASSERT_FALSE(HasFatalFailure());
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "backed up 400 users of 4096 partitions")) << out;
  std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "restored 400 users")) << out;
  EXPECT_TRUE(Has(out, "2 links")) << out;
  ExpectSame();
  // Again: the merge changes nothing.
  std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  ExpectSame();
}

// A member's own fields (written before its link) must never reach its
// master's record through a field write of the member: restoring twice (the
// second time into a store where the links exist) leaves the master's fields
// as they were.
TEST_F(BackupTest, RestoringTwiceNeverWritesAMembersFieldsIntoItsMaster) {
  const std::vector<SegmentUpdate> seg = {SegmentUpdate{1, 0, false, {}, {}}};
  for (const char* u : {"m", "a", "b"}) ASSERT_TRUE(c0_->Upsert(u, seg).ok());
  ASSERT_TRUE(c0_->FieldSet("m", std::vector<FieldUpdate>{{"f", FieldValue::Int(1), 0, false},
                                                          {"g", FieldValue::Int(2), 0, false}})
                  .ok());
  ASSERT_TRUE(c0_->FieldSet("a", std::vector<FieldUpdate>{{"f", FieldValue::Int(10), 0, false},
                                                          {"h", FieldValue::Int(11), 0, false}})
                  .ok());
  ASSERT_TRUE(
      c0_->FieldSet("b", std::vector<FieldUpdate>{{"g", FieldValue::Int(20), 0, false}}).ok());
  ASSERT_TRUE(c0_->Link("a", "m", 0).ok());
  ASSERT_TRUE(c0_->Link("b", "m", 0).ok());
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  GetOptions own;
  own.own_only = true;
  own.fields.mode = FieldSelection::Mode::kAll;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(*c1_->MasterOf("a"), "m");
    EXPECT_EQ(*c1_->MasterOf("b"), "m");
    if (round == 1) {
      EXPECT_TRUE(Has(out, "left out 3 fields of users the store has as linked members")) << out;
    }
    for (const char* u : {"m", "a", "b"}) {
      Result<GetResult> want = c0_->Get(u, own), got = c1_->Get(u, own);
      ASSERT_TRUE(want.ok() && got.ok()) << u;
      EXPECT_EQ(got->fields, want->fields) << u;
    }
    Result<GetResult> m = c1_->Get("m", own);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m->fields.size(), 2u);
    EXPECT_EQ(m->fields[0], (Field{"f", FieldValue::Int(1), kNever}));
    EXPECT_EQ(m->fields[1], (Field{"g", FieldValue::Int(2), kNever}));
  }
}

// Users of many segments: restore cuts its batches by bytes under the
// server's max_frame_bytes (100 such users in one batch_upsert would be far
// over it and refused whole), and a user over the frame alone is refused
// alone, reported, while the others are restored.
TEST_F(BackupTest, BigUsersAreRestoredInBatchesUnderTheServersFrameLimit) {
  constexpr int kUsers = 40;
  constexpr uint32_t kFrame = 64u << 10;
  for (int i = 0; i <= kUsers; ++i) {
    std::vector<SegmentUpdate> segs;
    const int n = i == kUsers ? 8000 : 1500;  // the last: over the frame alone
    for (int k = 0; k < n; ++k) {
      segs.push_back(
          SegmentUpdate{(uint64_t{1} << 33) + static_cast<uint64_t>(k) * 7, 0, false, {}, {}});
    }
    ASSERT_TRUE(c0_->Upsert("big-" + std::to_string(i), segs).ok());
  }
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;

  testing::InProcessServer small;
  storage::StoreOptions so = testing::SmallStore(dir_.File("data-small"), &clock_, 64u << 20);
  profile::ProfileOptions p;
  p.sweeper = false;
  ProfileServiceOptions svc;
  svc.max_frame_bytes = kFrame;
  ServerOptions server;
  server.threads = 2;
  server.max_frame_bytes = kFrame;
  small.Start(so, nullptr, p, svc, server);
  ASSERT_FALSE(HasFatalFailure());
  std::tie(rc, out) = Segctl(small.server->port(), "restore --no-progress " + file);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "restored 41 users")) << out;
  EXPECT_TRUE(Has(out, "refused 1 users or links")) << out;
  EXPECT_TRUE(Has(out, "big-40")) << out;
  std::unique_ptr<client::Client> cs = small.Connect();
  ASSERT_NE(cs, nullptr);
  for (int i = 0; i < kUsers; ++i) {
    Result<uint32_t> n = cs->Count("big-" + std::to_string(i));
    ASSERT_TRUE(n.ok()) << i << " " << n.status().ToString();
    EXPECT_EQ(*n, 1500u) << i;
  }
  EXPECT_TRUE(cs->Count("big-40").status().IsNotFound());
  cs.reset();
  small.Stop();
}

TEST_F(BackupTest, ADamagedChunkIsRefusedNamingItAndNothingIsWritten) {
  Fill();
  ASSERT_FALSE(HasFatalFailure());
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  std::string bytes = ReadFile(file);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() / 2] ^= 0x40;
  WriteBytes(file, bytes);
  std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "Corruption")) << out;
  EXPECT_TRUE(Has(out, ": chunk ")) << out;
  EXPECT_TRUE(Has(out, "damaged")) << out;
  for (int i = 0; i < 400; i += 37) {
    EXPECT_TRUE(c1_->Get("user-" + std::to_string(i)).status().IsNotFound());
  }
}

TEST_F(BackupTest, AnInterruptedBackupIsResumedFromItsLastCompletePartition) {
  Fill();
  ASSERT_FALSE(HasFatalFailure());
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  const std::string whole = ReadFile(file);
  // Cut short anywhere (a crash mid-write): at 40% and inside the header.
  for (const size_t cut : {whole.size() * 2 / 5, size_t{40}, whole.size() - 1}) {
    SCOPED_TRACE(cut);
    WriteBytes(file, whole.substr(0, cut));
    std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_TRUE(Has(out, "incomplete") || Has(out, "chunk")) << out;
    std::tie(rc, out) = Segctl(port(0), "backup --no-progress --resume " + file);
    ASSERT_EQ(rc, 0) << out;
    if (cut == whole.size() * 2 / 5) {
      EXPECT_FALSE(Has(out, "(from partition 0)")) << out;
    }
    // Into an empty server: the resumed file alone holds everything.
    FreshServer1();
    ASSERT_FALSE(HasFatalFailure());
    std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_TRUE(Has(out, "restored 400 users")) << out;
    EXPECT_TRUE(Has(out, "2 links")) << out;
    ExpectSame();
  }
  // A complete file: nothing to do.
  std::tie(rc, out) = Segctl(port(0), "backup --no-progress --resume " + file);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "complete backup already")) << out;
}

// Resume cuts a torn end only: a file damaged before its last complete
// section is refused, naming the chunk, and left as it is.
TEST_F(BackupTest, ResumeRefusesAFileDamagedBeforeItsLastCompleteSection) {
  Fill();
  ASSERT_FALSE(HasFatalFailure());
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  const std::string whole = ReadFile(file);
  // Cut short at 60%, one byte flipped at 30%: a hole, not a torn end.
  std::string damaged = whole.substr(0, whole.size() * 3 / 5);
  damaged[whole.size() * 3 / 10] ^= 0x40;
  WriteBytes(file, damaged);
  std::tie(rc, out) = Segctl(port(0), "backup --no-progress --resume " + file);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "damaged before its last complete section")) << out;
  EXPECT_TRUE(Has(out, ": chunk ")) << out;
  EXPECT_EQ(ReadFile(file), damaged);
  // A torn end (garbage after the cut): cut and resumed.
  WriteBytes(file, whole.substr(0, whole.size() * 3 / 5) + std::string(100, '\x5a'));
  std::tie(rc, out) = Segctl(port(0), "backup --no-progress --resume " + file);
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "restored 400 users")) << out;
  ExpectSame();
}

TEST_F(BackupTest, ANewerFormatVersionIsRefused) {
  ASSERT_TRUE(c0_->Upsert("u", std::vector<SegmentUpdate>{SegmentUpdate{1, 0, false, {}, {}}}).ok());
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress --partitions 0-9 " + file);
  ASSERT_EQ(rc, 0) << out;
  std::string bytes = ReadFile(file);
  ASSERT_EQ(bytes.substr(0, 8), "SEGSTBAK");
  bytes[8] = 2;  // format version 2
  WriteBytes(file, bytes);
  std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "backup file format version 2 is newer than this segctl reads (1)")) << out;
  std::tie(rc, out) = Segctl(port(0), "backup --no-progress --resume " + file);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "version 2 is newer")) << out;
  WriteBytes(file, "not a backup at all, just some bytes");
  std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "not a segstore backup file")) << out;
}

TEST_F(BackupTest, ARestoreIntoALiveStoreMerges) {
  SegmentUpdate early{1, kLater, false, 5u, {}}, late{1, kLater + 100, false, {}, {}};
  ASSERT_TRUE(c0_->Upsert("u", std::vector<SegmentUpdate>{late}).ok());
  ASSERT_TRUE(c0_->FieldSet("u", std::vector<FieldUpdate>{{"f", FieldValue::Int(1), 0, false}}).ok());
  const std::string file = dir_.File("b.segbak");
  auto [rc, out] = Segctl(port(0), "backup --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  // The live store: segment 1 expiring earlier with an attribute, segment
  // 2, field f at 7 and field g.
  ASSERT_TRUE(c1_->Upsert("u", std::vector<SegmentUpdate>{early, {2, 0, false, {}, {}}}).ok());
  ASSERT_TRUE(c1_->FieldSet("u", std::vector<FieldUpdate>{{"f", FieldValue::Int(7), 0, false},
                                                          {"g", FieldValue::Int(8), 0, false}})
                  .ok());
  std::tie(rc, out) = Segctl(port(1), "restore --no-progress " + file);
  ASSERT_EQ(rc, 0) << out;
  GetOptions o;
  o.fields.mode = FieldSelection::Mode::kAll;
  Result<GetResult> g = c1_->Get("u", o);
  ASSERT_TRUE(g.ok());
  const std::vector<Segment> want = {Segment{1, kLater + 100, 5u, {}}, Segment{2, kNever, {}, {}}};
  EXPECT_EQ(g->ToSegments(), want);
  ASSERT_EQ(g->fields.size(), 2u);
  EXPECT_EQ(g->fields[0], (Field{"f", FieldValue::Int(1), kNever}));
  EXPECT_EQ(g->fields[1], (Field{"g", FieldValue::Int(8), kNever}));
}

}  // namespace
}  // namespace segstore::server
