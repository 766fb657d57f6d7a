// The data file format fixtures (src/storage/FORMAT.md, "Versions"): a data
// file written by the first release of each format version, under
// tests/data/format-vN, that every later release must open and answer the
// same from, in process and as the daemon; and the same file claiming a
// newer version (or version 0) is refused, naming both versions, untouched.
//
// What each profile must answer is written out here from the fixture's
// README ("What a get must answer"), and ref-1000's segments are drawn by
// the same generator as its writer (reference_profile.py): never read back
// from the fixture.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <signal.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/coding.h"
#include "integration/daemon.h"
#include "profile/codec.h"
#include "replica/checkpoint.h"
#include "segstore/client.h"
#include "segstore/profile.h"
#include "segstore/routing.h"
#include "segstore/storage.h"
#include "storage/format.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using std::chrono::milliseconds;
using testing::Daemon;
using testing::Has;
using testing::NotifySocket;
using testing::PortOf;
using testing::ReadFile;

const std::string kFixtureV1 = std::string(SEGSTORE_SOURCE_DIR) + "/tests/data/format-v1";
const std::string kFixtureV2 = std::string(SEGSTORE_SOURCE_DIR) + "/tests/data/format-v2";

// ---- What format-v1/README.md says every get must answer.

Segment Seg(uint64_t id, UnixSeconds expires, std::optional<uint32_t> a1 = std::nullopt,
            std::optional<uint32_t> a2 = std::nullopt) {
  return Segment{id, expires, a1, a2};
}

// reference_profile.py, step for step: splitmix64 seeded with 16; each draw
// takes two values, id = next % 82000 and hour = next % 720; an id drawn
// before is skipped; until 1,000 distinct ids; expiry 4000003200 + 3600 * hour.
std::vector<Segment> ReferenceProfile() {
  uint64_t state = 16;
  auto next = [&state] {
    state += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  std::set<uint64_t> seen;
  std::vector<Segment> out;
  while (out.size() < 1000) {
    const uint64_t id = next() % 82000;
    const uint64_t hour = next() % 720;
    if (!seen.insert(id).second) continue;
    out.push_back(Seg(id, static_cast<UnixSeconds>(4000003200 + 3600 * hour)));
  }
  std::sort(out.begin(), out.end(), [](const Segment& a, const Segment& b) { return a.id < b.id; });
  return out;
}

const std::string kBinaryKey(
    "\xff\xfe\x80"
    "bin\x01\xc3\x28\x7f",
    10);
std::string Key256() {
  std::string k;
  for (int i = 0; i < 16; ++i) k += "0123456789abcdef";
  return k;
}

struct Expected {
  std::string user;
  std::vector<Segment> segments;  // by ascending id
};

std::vector<Expected> FormatV1Profiles() {
  constexpr UnixSeconds kNeverExpires = kNever;
  return {
      {"ref-1000", ReferenceProfile()},
      {"seconds",
       {Seg(0, 4000000001), Seg(1, 4000000002), Seg(2, 4000000059), Seg(7, 4000012345),
        Seg(1000, 4123456789), Seg(81999, kNeverExpires), Seg(9007199254740993ULL, 4000000003),
        Seg(18446744073709551615ULL, 4294967295U)}},
      {"attrs",
       {Seg(100, 4000060800, 7u), Seg(200, 4000147200, std::nullopt, 65535u),
        Seg(300, 4000233600, 0u, 4294967295U), Seg(400, 4000060800),
        Seg(500, kNeverExpires, 123456u)}},
      {kBinaryKey, {Seg(1, 4000003200), Seg(2, kNeverExpires)}},
      {"6f1c2a7e-3b5d-4c8e-9a0f-1d2e3f405162", {Seg(42, 4000003260), Seg(43, 4000003320)}},
      {Key256(), {Seg(65535, 4000000000)}},
      {"overwritten", {Seg(1, 4000014400, 5u), Seg(3, kNeverExpires), Seg(4, 4000010800)}},
      {"resurrected", {Seg(11, 4000000000)}},
      {"partly-expired", {Seg(10, kNeverExpires), Seg(20, 4000000000)}},
  };
}

std::vector<std::string> FormatV1NotFound() {
  return {"deleted", "all-expired",           "nobody",
          "ref-100", kBinaryKey.substr(0, 9), Key256().substr(0, 255)};
}

// The README's own checks of ref-1000, so a slip in the generator above
// cannot pass unnoticed.
TEST(FormatFixtureGeneratorTest, ReferenceProfileIsTheOneTheReadmeStates) {
  const std::vector<Segment> ref = ReferenceProfile();
  ASSERT_EQ(ref.size(), 1000u);
  EXPECT_EQ(ref[0], Seg(241, 4002141600));
  EXPECT_EQ(ref[1], Seg(242, 4001331600));
  EXPECT_EQ(ref[2], Seg(326, 4000341600));
  EXPECT_EQ(ref.back(), Seg(81855, 4000953600));
  uint64_t ids = 0, expiries = 0;
  UnixSeconds lo = UINT32_MAX, hi = 0;
  for (const Segment& s : ref) {
    ids += s.id;
    expiries += s.expires_at;
    lo = std::min(lo, s.expires_at);
    hi = std::max(hi, s.expires_at);
  }
  EXPECT_EQ(ids, 41003862u);
  EXPECT_EQ(expiries, 4001316681600u);
  EXPECT_EQ(lo, 4000003200u);
  EXPECT_EQ(hi, 4002591600u);
}

// ---- The fixture, decompressed into a temp dir.

std::string Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

std::string Sha256Hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex;
  char two[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(two, sizeof two, "%02x", md[i]);
    hex += two;
  }
  return hex;
}

class FormatFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string bytes = Gunzip(kFixtureV1 + "/segstore.dat.gz");
    ASSERT_EQ(bytes.size(), 16u << 20) << kFixtureV1 << "/segstore.dat.gz";
    FILE* f = std::fopen(data_.c_str(), "wb");
    ASSERT_NE(f, nullptr) << data_;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    ASSERT_EQ(std::fclose(f), 0);
  }

  storage::StoreOptions StoreOptionsFor(const std::string& path) const {
    storage::StoreOptions o;  // what segstored uses, but the path
    o.path = path;
    return o;
  }

  // Every profile answers exactly as stated; the rest are NotFound.
  static void ExpectV1Answers(profile::ProfileSession* s, const std::string& when) {
    SCOPED_TRACE(when);
    for (const Expected& e : FormatV1Profiles()) {
      Result<GetResult> got = s->GetSync(e.user);
      ASSERT_TRUE(got.ok()) << e.user << ": " << got.status().ToString();
      EXPECT_EQ(got->count, e.segments.size()) << e.user;
      EXPECT_TRUE(got->ToSegments() == e.segments) << e.user;
    }
    for (const std::string& user : FormatV1NotFound()) {
      Result<GetResult> got = s->GetSync(user);
      EXPECT_TRUE(got.status().IsNotFound()) << user << ": " << got.status().ToString();
    }
  }

  storage::testing::TempDir dir_;
  const std::string data_ = dir_.File("segstore.dat");
};

// The fixture is the file its README describes, written in format version 1:
// a fixture is never regenerated.
TEST_F(FormatFixtureTest, V1FixtureIsTheFileItsReadmeDescribes) {
  const std::string bytes = storage::testing::FileBytes(data_);
  EXPECT_EQ(Sha256Hex(bytes), "7a0fbd82b3820c9cf3ff103d680d85e16aa82fb00130812c158116f2e1d98dd0");
  ASSERT_GE(bytes.size(), storage::kSuperblockEncodedSize);
  EXPECT_EQ(DecodeFixed16(bytes.data() + 12), 1u);
}

// (a0) Opening the version-1 fixture upgrades it (FORMAT.md, "Versions":
// O <= v < W): before anything can write, the superblock says this build's
// version; that is the only change (its version and checksum); the
// version-1 records stay as they are and answer as stated after a reopen.
TEST_F(FormatFixtureTest, V1IsUpgradedOnOpenAndOnlyItsSuperblockChanges) {
  static_assert(storage::kFormatVersion == 3 && storage::kOldestFormatVersion == 1);
  const std::string v1 = storage::testing::FileBytes(data_);
  ASSERT_EQ(DecodeFixed16(v1.data() + 12), 1u);
  // Defragmentation off: on its own schedule it rewrites the fixture's
  // superseded versions, which is not what this compares.
  storage::StoreOptions quiet = StoreOptionsFor(data_);
  quiet.background_defrag = false;
  {
    auto store = storage::Store::Open(quiet);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->recovery().damaged_regions, 0u);
    EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
  }  // closed without a worker: nothing else written
  const std::string upgraded = storage::testing::FileBytes(data_);
  ASSERT_EQ(upgraded.size(), v1.size());
  size_t changed = 0;
  for (size_t i = 0; i < v1.size(); ++i) {
    if (v1[i] == upgraded[i]) continue;
    ++changed;
    EXPECT_TRUE(i < 4 || i == 12 || i == 13) << "byte " << i << " changed";
  }
  EXPECT_GT(changed, 0u);
  Result<storage::Superblock> sb =
      storage::DecodeSuperblock(reinterpret_cast<const uint8_t*>(upgraded.data()));
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->version, storage::kFormatVersion);

  // Reopened (no upgrade again): the version-1 records answer as stated.
  auto store = storage::Store::Open(StoreOptionsFor(data_));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto profiles = profile::ProfileStore::Open(store->get(), profile::ProfileOptions{});
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  auto session = (*profiles)->NewSession();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ExpectV1Answers(session->get(), "reopened after the upgrade");
  session->reset();
  profiles->reset();
  store->reset();
}

// (a) The storage and profile layers of this build, in process: every
// profile as stated, with options too; again after the expiry sweeper
// rewrote what it wanted; again after a restart on what this build wrote.
TEST_F(FormatFixtureTest, V1OpensAndEveryProfileAnswersAsStated) {
  for (int round = 0; round < 2; ++round) {
    auto store = storage::Store::Open(StoreOptionsFor(data_));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->recovery().damaged_regions, 0u);
    // Upgraded by the first open, before this build wrote anything.
    EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
    auto profiles = profile::ProfileStore::Open(store->get(), profile::ProfileOptions{});
    ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
    auto session = (*profiles)->NewSession();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    profile::ProfileSession* s = session->get();
    ExpectV1Answers(s, round == 0 ? "as opened" : "reopened after this build wrote to it");

    // ref-1000 with options: an id range, a limit, count only, an expiry window.
    const std::vector<Segment> ref = ReferenceProfile();
    GetOptions range;
    range.id_from = 20000;
    range.id_to = 40000;
    std::vector<Segment> in_range;
    for (const Segment& seg : ref) {
      if (seg.id >= 20000 && seg.id <= 40000) in_range.push_back(seg);
    }
    Result<GetResult> got = s->GetSync("ref-1000", range);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(got->ToSegments() == in_range);
    Result<uint32_t> count = s->CountSync("ref-1000", 20000, 40000);
    ASSERT_TRUE(count.ok()) << count.status().ToString();
    EXPECT_EQ(*count, in_range.size());

    GetOptions limit;
    limit.limit = 10;
    got = s->GetSync("ref-1000", limit);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->count, 1000u);
    EXPECT_TRUE(got->ToSegments() == std::vector<Segment>(ref.begin(), ref.begin() + 10));

    GetOptions window;
    window.expiry_from = 4000003200;
    window.expiry_to = 4000003200 + 24 * 3600;
    window.count_only = true;
    got = s->GetSync("ref-1000", window);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->count,
              static_cast<uint32_t>(std::count_if(ref.begin(), ref.end(), [&](const Segment& seg) {
                return seg.expires_at >= window.expiry_from && seg.expires_at <= window.expiry_to;
              })));

    // Never-expiring segments count as expiring at +infinity.
    GetOptions later;
    later.expiry_from = 4100000000;
    got = s->GetSync("seconds", later);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(got->ToSegments() ==
                (std::vector<Segment>{Seg(1000, 4123456789), Seg(81999, 0),
                                      Seg(18446744073709551615ULL, 4294967295U)}));

    if (round == 0) {
      // The expiry sweeper rewrites what is due (partly-expired) in this
      // build's encoding; nothing a reader sees changes.
      ASSERT_TRUE((*profiles)->SweepNow().ok());
      ExpectV1Answers(s, "after the sweeper ran");
    }
    session->reset();
    profiles->reset();
    store->reset();
  }
}

// (b) The daemon of this build on the fixture, over the wire.
TEST_F(FormatFixtureTest, V1ServedByTheDaemonAnswersOverTheWire) {
  NotifySocket notify(dir_.File("notify.sock"));
  const std::string log = dir_.File("segstored.log");
  Daemon d(dir_.File(""), {"--listen", "127.0.0.1:0", "--data", data_, "--threads", "2"}, log,
           {"NOTIFY_SOCKET=" + notify.path()});
  const std::string ready = notify.WaitFor("READY=1");
  ASSERT_FALSE(ready.empty()) << ReadFile(log);
  auto c = testing::Connect(PortOf(ready));
  ASSERT_NE(c, nullptr);
  std::vector<std::string> users;
  for (const Expected& e : FormatV1Profiles()) {
    Result<GetResult> got = c->Get(e.user);
    ASSERT_TRUE(got.ok()) << e.user << ": " << got.status().ToString();
    EXPECT_TRUE(got->ToSegments() == e.segments) << e.user;
    users.push_back(e.user);
  }
  for (const std::string& user : FormatV1NotFound()) {
    EXPECT_TRUE(c->Get(user).status().IsNotFound()) << user;
    users.push_back(user);
  }
  // All of them in one batch get: answers in the order asked.
  Result<BatchGetResult> batch = c->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), users.size());
  const std::vector<Expected> expected = FormatV1Profiles();
  for (size_t i = 0; i < users.size(); ++i) {
    const Result<GetResult>& r = (*batch)[i];
    if (i < expected.size()) {
      ASSERT_TRUE(r.ok()) << users[i] << ": " << r.status().ToString();
      EXPECT_TRUE(r->ToSegments() == expected[i].segments) << users[i];
    } else {
      EXPECT_TRUE(r.status().IsNotFound()) << users[i];
    }
  }
  c.reset();
  d.Signal(SIGTERM);
  EXPECT_EQ(d.Wait(), 0) << ReadFile(log);
  // The daemon upgraded the file, and said so.
  EXPECT_TRUE(Has(ReadFile(log), "data file " + data_ + ": format version 1 upgraded to " +
                                    std::to_string(storage::kFormatVersion)))
      << ReadFile(log);
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
}

// (c) The fixture claiming `version`, checksum recomputed: Store::Open and
// segstored both refuse it with `code` and a message containing `want`,
// segstored exits non-zero, and the file is unchanged, byte for byte.
void ExpectRefusedUntouched(const std::string& dir, const std::string& data, uint16_t version,
                            Status::Code code, const std::string& want) {
  storage::testing::SetSuperblockVersion(data, version);
  const std::string before = storage::testing::FileBytes(data);

  storage::StoreOptions o;
  o.path = data;
  auto store = storage::Store::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), code) << store.status().ToString();
  EXPECT_TRUE(Has(store.status().ToString(), want)) << store.status().ToString();
  EXPECT_TRUE(storage::testing::FileBytes(data) == before) << "Store::Open changed the file";

  NotifySocket notify(dir + "/notify-" + std::to_string(version) + ".sock");
  const std::string log = dir + "/segstored-" + std::to_string(version) + ".log";
  Daemon d(dir, {"--listen", "127.0.0.1:0", "--data", data}, log,
           {"NOTIFY_SOCKET=" + notify.path()});
  EXPECT_EQ(d.Wait(), 1) << ReadFile(log);
  const std::string said = ReadFile(log);
  EXPECT_TRUE(Has(said, "critical cannot open the store at " + data + ": ")) << said;
  EXPECT_TRUE(Has(said, want)) << said;
  EXPECT_FALSE(Has(said, "serving on")) << said;
  // systemd's status line says why too.
  EXPECT_FALSE(notify.WaitFor("STATUS=cannot open the store", milliseconds(5000)).empty());
  EXPECT_TRUE(storage::testing::FileBytes(data) == before) << "segstored changed the file";
}

TEST_F(FormatFixtureTest, NewerVersionIsRefusedNamingBothVersionsAndLeftUntouched) {
  const uint16_t newer = storage::kFormatVersion + 1;
  static_assert(storage::kOldestFormatVersion < storage::kFormatVersion);
  ExpectRefusedUntouched(dir_.File(""), data_, newer, Status::Code::kUnsupported,
                         "Unsupported: data file format version " + std::to_string(newer) +
                             " is newer than this build reads (" +
                             std::to_string(storage::kOldestFormatVersion) + " to " +
                             std::to_string(storage::kFormatVersion) + ")");
  // Much newer, too: the whole u16.
  ExpectRefusedUntouched(dir_.File(""), data_, 0xFFFF, Status::Code::kUnsupported,
                         "Unsupported: data file format version 65535 is newer than this build "
                         "reads (");
}

TEST_F(FormatFixtureTest, VersionZeroIsRefusedAsDamageAndLeftUntouched) {
  ExpectRefusedUntouched(dir_.File(""), data_, 0, Status::Code::kCorruption,
                         "superblock says data file format version 0, which no release writes");
}

// Refused, then put back as it was written: it opens and answers again.
TEST_F(FormatFixtureTest, RefusedFileOpensAgainOnceItsVersionIsOneThisBuildReads) {
  ExpectRefusedUntouched(dir_.File(""), data_, storage::kFormatVersion + 1,
                         Status::Code::kUnsupported, "is newer than this build reads");
  storage::testing::SetSuperblockVersion(data_, 1);
  EXPECT_EQ(Sha256Hex(storage::testing::FileBytes(data_)),
            "7a0fbd82b3820c9cf3ff103d680d85e16aa82fb00130812c158116f2e1d98dd0");
  auto store = storage::Store::Open(StoreOptionsFor(data_));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto profiles = profile::ProfileStore::Open(store->get(), profile::ProfileOptions{});
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  auto session = (*profiles)->NewSession();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ExpectV1Answers(session->get(), "after the refusal");
  session->reset();
  profiles->reset();
  store->reset();
}

// ---- Format version 2 (tests/data/format-v2): one data file written first by
// segstored as a single server (codec-1 bodies), then by segstored as a
// one-node cluster with a log (codec-2 bodies, which remember the log
// position of the last log entry that changed them, and one checkpoint
// record per log partition). What follows is format-v2/README.md's "What a
// get must answer", "Log positions" and "Checkpoint records", written out.

struct ExpectedV2 {
  std::string user;
  std::vector<Segment> segments;  // by ascending id
  uint64_t log_position;          // 0: a codec-1 body (written by the single server only)
  uint32_t log_partition;         // PartitionOf(user) % 4
};

std::vector<ExpectedV2> FormatV2Profiles() {
  constexpr UnixSeconds kNeverExpires = kNever;
  return {
      // Phase a only: a single server's codec-1 body.
      {"single-only",
       {Seg(0, 4000000001), Seg(1, 4000000002, 7u), Seg(7, 4000012345, std::nullopt, 65535u),
        Seg(1000, kNeverExpires, 0u, 4294967295U), Seg(18446744073709551615ULL, 4294967295U)},
       0,
       2},
      // Through the log (phase b).
      {"early-bird", {Seg(1, 4000000000)}, 1, 0},
      {"handed-over",
       {Seg(2, 4000010800, 1u), Seg(3, kNeverExpires), Seg(4, 4000014400, std::nullopt, 9u)},
       3,
       0},
      {"reborn", {Seg(2, 4000000000, 5u)}, 3, 1},
      {"fading", {Seg(10, kNeverExpires), Seg(20, 4000000000)}, 2, 2},
      {"counted", {Seg(7, 4000007200), Seg(8, kNeverExpires, 3u)}, 4, 3},
      {"set-trimmed", {Seg(100, 4000060800, 7u), Seg(300, kNeverExpires, 0u, 4294967295U)}, 5, 3},
  };
}

// Tombstones (single-deleted: the single server's; dropped-by-log: the log's)
// and users never written.
std::vector<std::string> FormatV2NotFound() {
  return {"single-deleted", "dropped-by-log", "nobody", "early-bir", "handed-over2"};
}

// The checkpoint record of each log partition, under its key as the README
// spells it (not as this build's CheckpointKey derives it).
struct ExpectedCheckpoint {
  std::string key;
  replica::Checkpoint checkpoint;
};

std::string CheckpointKeyAsWritten(uint32_t log_partition) {
  return std::string("\xff\x00segstore:applied:", 19) + std::to_string(log_partition);
}

std::vector<ExpectedCheckpoint> FormatV2Checkpoints() {
  std::vector<ExpectedCheckpoint> out;
  const int64_t next[] = {4, 3, 2, 5};  // the entries of each log partition
  for (uint32_t l = 0; l < 4; ++l) {
    replica::Checkpoint c;
    c.next = next[l];
    c.window_start = 0;
    out.push_back({CheckpointKeyAsWritten(l), c});
  }
  return out;
}

constexpr const char* kFormatV2Sha256 =
    "2a2ac8f651970998e609983606e573f7eafaa5643a02a2e1b9d90cc82e4497e5";

// The README's statements about the users themselves: each logged user's
// log partition is PartitionOf(user) % 4, and every log partition got entries.
TEST(FormatFixtureGeneratorTest, V2UsersAreInTheLogPartitionsTheReadmeStates) {
  const std::vector<std::pair<std::string, uint32_t>> partitions = {
      {"single-only", 1314}, {"early-bird", 1236},     {"handed-over", 1448},
      {"reborn", 1337},      {"fading", 242},          {"counted", 2619},
      {"set-trimmed", 735},  {"single-deleted", 2807}, {"dropped-by-log", 2814},
  };
  for (const auto& [user, partition] : partitions) {
    EXPECT_EQ(PartitionOf(user), partition) << user;
  }
  std::set<uint32_t> log_partitions;
  for (const ExpectedV2& e : FormatV2Profiles()) {
    EXPECT_EQ(PartitionOf(e.user) % 4, e.log_partition) << e.user;
    if (e.log_position != 0) log_partitions.insert(e.log_partition);
  }
  EXPECT_EQ(log_partitions.size(), 4u);
  EXPECT_EQ(PartitionOf("dropped-by-log") % 4, 2u);
  for (uint32_t l = 0; l < 4; ++l) EXPECT_EQ(replica::CheckpointKey(l), CheckpointKeyAsWritten(l));
}

class FormatFixtureV2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string gz = kFixtureV2 + "/segstore.dat.gz";
    ASSERT_TRUE(std::filesystem::exists(gz))
        << "the format-v2 fixture is missing: " << gz
        << " (tests/data/format-v2/README.md; it is never regenerated)";
    const std::string bytes = Gunzip(gz);
    ASSERT_EQ(bytes.size(), 16u << 20) << gz << " does not gunzip to a 16 MiB data file";
    FILE* f = std::fopen(data_.c_str(), "wb");
    ASSERT_NE(f, nullptr) << data_;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    ASSERT_EQ(std::fclose(f), 0);
  }

  static storage::StoreOptions StoreOptionsFor(const std::string& path) {
    storage::StoreOptions o;  // what segstored uses, but the path
    o.path = path;
    return o;
  }

  // Every profile answers exactly as stated through the profile layer; the
  // rest are NotFound.
  static void ExpectV2Answers(profile::ProfileSession* s, const std::string& when) {
    SCOPED_TRACE(when);
    for (const ExpectedV2& e : FormatV2Profiles()) {
      Result<GetResult> got = s->GetSync(e.user);
      ASSERT_TRUE(got.ok()) << e.user << ": " << got.status().ToString();
      EXPECT_EQ(got->count, e.segments.size()) << e.user;
      EXPECT_TRUE(got->ToSegments() == e.segments) << e.user;
    }
    for (const std::string& user : FormatV2NotFound()) {
      Result<GetResult> got = s->GetSync(user);
      EXPECT_TRUE(got.status().IsNotFound()) << user << ": " << got.status().ToString();
    }
  }

  // The raw records: each user's body remembers the stated log position (a
  // codec-1 body none), tombstones and never-written users have no record,
  // and each log partition's checkpoint record decodes to the stated values.
  static void ExpectV2Records(storage::Worker& w, const std::string& when) {
    SCOPED_TRACE(when);
    for (const ExpectedV2& e : FormatV2Profiles()) {
      Result<storage::Record> r = w.GetSync(e.user);
      ASSERT_TRUE(r.ok()) << e.user << ": " << r.status().ToString();
      Result<uint64_t> position = profile::DecodeLogPosition(r->body());
      ASSERT_TRUE(position.ok()) << e.user << ": " << position.status().ToString();
      EXPECT_EQ(*position, e.log_position) << e.user;
      // The codec version byte: 1 without a position, 2 with one.
      ASSERT_FALSE(r->body().empty()) << e.user;
      EXPECT_EQ(static_cast<uint8_t>(r->body()[0]), e.log_position == 0 ? 1 : 2) << e.user;
      profile::Columns columns;
      ASSERT_TRUE(profile::DecodeColumns(r->body(), &columns).ok()) << e.user;
      EXPECT_EQ(columns.log_position, e.log_position) << e.user;
    }
    for (const std::string& user : FormatV2NotFound()) {
      Result<storage::Record> r = w.GetSync(user);
      EXPECT_TRUE(r.status().IsNotFound()) << user << ": " << r.status().ToString();
    }
    for (const ExpectedCheckpoint& e : FormatV2Checkpoints()) {
      Result<storage::Record> r = w.GetSync(e.key);
      ASSERT_TRUE(r.ok()) << "checkpoint " << e.key.substr(2) << ": " << r.status().ToString();
      replica::Checkpoint c;
      ASSERT_TRUE(replica::DecodeCheckpoint(r->body(), &c).ok()) << e.key.substr(2);
      EXPECT_EQ(c.next, e.checkpoint.next) << e.key.substr(2);
      EXPECT_EQ(c.window_start, e.checkpoint.window_start) << e.key.substr(2);
      EXPECT_TRUE(c.partitions.empty()) << e.key.substr(2);
    }
    // Four log partitions: no checkpoint past them.
    for (uint32_t l : {4u, 5u, 63u}) {
      EXPECT_TRUE(w.GetSync(CheckpointKeyAsWritten(l)).status().IsNotFound()) << l;
    }
  }

  storage::testing::TempDir dir_;
  const std::string data_ = dir_.File("segstore.dat");
};

// The fixture is the file its README describes, written in format version 2:
// a fixture is never regenerated.
TEST_F(FormatFixtureV2Test, V2FixtureIsTheFileItsReadmeDescribes) {
  const std::string bytes = storage::testing::FileBytes(data_);
  EXPECT_EQ(bytes.size(), 16777216u);
  EXPECT_EQ(Sha256Hex(bytes), kFormatV2Sha256);
  EXPECT_EQ(ReadFile(kFixtureV2 + "/segstore.dat.sha256"),
            std::string(kFormatV2Sha256) + "  segstore.dat\n");
  ASSERT_GE(bytes.size(), storage::kSuperblockEncodedSize);
  EXPECT_EQ(DecodeFixed16(bytes.data() + 12), 2u);
  Result<storage::Superblock> sb =
      storage::DecodeSuperblock(reinterpret_cast<const uint8_t*>(bytes.data()));
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->version, 2u);
}

// (a0) Version 2 is older than this build's (O <= v < W): opening it
// upgrades the superblock and changes nothing else (its version and
// checksum); reads through every layer with the sweeper off then leave the
// file as the upgrade did, byte for byte.
TEST_F(FormatFixtureV2Test, V2IsUpgradedOnOpenAndReadsRewriteNothing) {
  static_assert(storage::kFormatVersion == 3);
  const std::string before = storage::testing::FileBytes(data_);
  // Defragmentation off: on its own schedule it rewrites the fixture's
  // superseded versions, which is not what this compares.
  storage::StoreOptions quiet = StoreOptionsFor(data_);
  quiet.background_defrag = false;
  {
    auto store = storage::Store::Open(quiet);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->recovery().damaged_regions, 0u);
  }  // closed without a worker
  const std::string upgraded = storage::testing::FileBytes(data_);
  ASSERT_EQ(upgraded.size(), before.size());
  size_t changed = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i] == upgraded[i]) continue;
    ++changed;
    EXPECT_TRUE(i < 4 || i == 12 || i == 13) << "byte " << i << " changed";
  }
  EXPECT_GT(changed, 0u);
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
  {
    auto store = storage::Store::Open(quiet);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    profile::ProfileOptions no_sweeper;
    no_sweeper.sweeper = false;
    auto profiles = profile::ProfileStore::Open(store->get(), no_sweeper);
    ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
    auto session = (*profiles)->NewSession();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    ExpectV2Answers(session->get(), "read only");
    ExpectV2Records((*session)->worker(), "read only");
    session->reset();
    profiles->reset();
    store->reset();
  }
  EXPECT_TRUE(storage::testing::FileBytes(data_) == upgraded) << "reading changed the file";
}

// (a) The storage and profile layers of this build, in process: every
// profile as stated, every record with its log position, every checkpoint;
// again after the expiry sweeper rewrote what it wanted (fading keeps its
// position); again after a restart on what this build wrote.
TEST_F(FormatFixtureV2Test, V2EveryProfileAnswersAsStatedWithItsLogPosition) {
  for (int round = 0; round < 2; ++round) {
    auto store = storage::Store::Open(StoreOptionsFor(data_));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->recovery().damaged_regions, 0u);
    EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
    auto profiles = profile::ProfileStore::Open(store->get(), profile::ProfileOptions{});
    ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
    auto session = (*profiles)->NewSession();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    profile::ProfileSession* s = session->get();
    const std::string when = round == 0 ? "as opened" : "reopened after this build wrote to it";
    ExpectV2Answers(s, when);
    ExpectV2Records(s->worker(), when);

    if (round == 0) {
      // The expiry sweeper rewrites what is due (fading: two of its four
      // segments expired); nothing a reader sees changes, and the rewritten
      // body keeps its log position.
      ASSERT_TRUE((*profiles)->SweepNow().ok());
      ExpectV2Answers(s, "after the sweeper ran");
      ExpectV2Records(s->worker(), "after the sweeper ran");
      Result<storage::Record> fading = s->worker().GetSync("fading");
      ASSERT_TRUE(fading.ok()) << fading.status().ToString();
      std::vector<Segment> all;
      ASSERT_TRUE(profile::DecodeSegments(fading->body(), &all).ok());
      EXPECT_EQ(all.size(), 2u) << "the expired segments stay after a sweep";
    }
    session->reset();
    profiles->reset();
    store->reset();
  }
}

// The partly-expired record as written: its two expired segments are still
// in the body (the sweeper was off), hidden from reads.
TEST_F(FormatFixtureV2Test, V2ExpiredSegmentsAreInTheBodyAndHidden) {
  auto store = storage::Store::Open(StoreOptionsFor(data_));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto worker = (*store)->NewWorker();
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  Result<storage::Record> fading = (*worker)->GetSync("fading");
  ASSERT_TRUE(fading.ok()) << fading.status().ToString();
  std::vector<Segment> all;
  ASSERT_TRUE(profile::DecodeSegments(fading->body(), &all).ok());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], Seg(10, kNever));
  // Written at 2026-11-25T22:09:13Z (the log entry's time) with a 2 s TTL.
  EXPECT_EQ(all[1], Seg(11, 1795644555));
  EXPECT_EQ(all[2], Seg(20, 4000000000));
  EXPECT_EQ(all[3], Seg(21, 1795644555, 9u));
  worker->reset();

  profile::ProfileOptions no_sweeper;
  no_sweeper.sweeper = false;
  auto profiles = profile::ProfileStore::Open(store->get(), no_sweeper);
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  auto session = (*profiles)->NewSession();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Result<GetResult> got = (*session)->GetSync("fading");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->ToSegments() == (std::vector<Segment>{Seg(10, kNever), Seg(20, 4000000000)}));
  session->reset();
  profiles->reset();
  store->reset();
}

// (b) The daemon of this build on the fixture as a single server (no
// cluster sections): every profile over the wire, one by one and in one
// batch; the upgrade logged; and what it leaves still carries every log
// position.
TEST_F(FormatFixtureV2Test, V2ServedByTheDaemonAnswersOverTheWire) {
  NotifySocket notify(dir_.File("notify.sock"));
  const std::string log = dir_.File("segstored.log");
  Daemon d(dir_.File(""), {"--listen", "127.0.0.1:0", "--data", data_, "--threads", "2"}, log,
           {"NOTIFY_SOCKET=" + notify.path()});
  const std::string ready = notify.WaitFor("READY=1");
  ASSERT_FALSE(ready.empty()) << ReadFile(log);
  auto c = testing::Connect(PortOf(ready));
  ASSERT_NE(c, nullptr);
  std::vector<std::string> users;
  for (const ExpectedV2& e : FormatV2Profiles()) {
    Result<GetResult> got = c->Get(e.user);
    ASSERT_TRUE(got.ok()) << e.user << ": " << got.status().ToString();
    EXPECT_TRUE(got->ToSegments() == e.segments) << e.user;
    users.push_back(e.user);
  }
  for (const std::string& user : FormatV2NotFound()) {
    EXPECT_TRUE(c->Get(user).status().IsNotFound()) << user;
    users.push_back(user);
  }
  Result<BatchGetResult> batch = c->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), users.size());
  const std::vector<ExpectedV2> expected = FormatV2Profiles();
  for (size_t i = 0; i < users.size(); ++i) {
    const Result<GetResult>& r = (*batch)[i];
    if (i < expected.size()) {
      ASSERT_TRUE(r.ok()) << users[i] << ": " << r.status().ToString();
      EXPECT_TRUE(r->ToSegments() == expected[i].segments) << users[i];
    } else {
      EXPECT_TRUE(r.status().IsNotFound()) << users[i];
    }
  }
  c.reset();
  d.Signal(SIGTERM);
  EXPECT_EQ(d.Wait(), 0) << ReadFile(log);
  EXPECT_TRUE(Has(ReadFile(log), "format version 2 upgraded to 3")) << ReadFile(log);
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);

  // What the single server left: the same answers, the same positions.
  auto store = storage::Store::Open(StoreOptionsFor(data_));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto profiles = profile::ProfileStore::Open(store->get(), profile::ProfileOptions{});
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  auto session = (*profiles)->NewSession();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ExpectV2Answers(session->get(), "after the daemon");
  ExpectV2Records((*session)->worker(), "after the daemon");
  session->reset();
  profiles->reset();
  store->reset();
}

}  // namespace
}  // namespace segstore::server
