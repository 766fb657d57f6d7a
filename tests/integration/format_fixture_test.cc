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
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/coding.h"
#include "integration/daemon.h"
#include "profile/codec.h"
#include "profile/field_names.h"
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
const std::string kFixtureV3 = std::string(SEGSTORE_SOURCE_DIR) + "/tests/data/format-v3";
const std::string kFixtureV4 = std::string(SEGSTORE_SOURCE_DIR) + "/tests/data/format-v4";

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

constexpr const char* kFormatV1Sha256 =
    "7a0fbd82b3820c9cf3ff103d680d85e16aa82fb00130812c158116f2e1d98dd0";

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

// segstored of this build serving a fixture's data file as a single server
// (no cluster sections), and a client of it once Connect() returned.
struct Served {
  Served(const storage::testing::TempDir& dir, const std::string& data)
      : notify(dir.File("notify.sock")),
        log(dir.File("segstored.log")),
        daemon(dir.File(""), {"--listen", "127.0.0.1:0", "--data", data, "--threads", "2"}, log,
               {"NOTIFY_SOCKET=" + notify.path()}) {}

  // Waits until it is ready, and connects `client`.
  void Connect() {
    const std::string ready = notify.WaitFor("READY=1");
    ASSERT_FALSE(ready.empty()) << ReadFile(log);
    client = testing::Connect(PortOf(ready));
    ASSERT_NE(client, nullptr);
  }

  // Disconnects and stops it with SIGTERM: it exits 0. Returns its log.
  std::string Stop() {
    client.reset();
    daemon.Signal(SIGTERM);
    EXPECT_EQ(daemon.Wait(), 0) << ReadFile(log);
    return ReadFile(log);
  }

  NotifySocket notify;
  const std::string log;
  Daemon daemon;
  std::unique_ptr<client::Client> client;
};

// Opens the file at `quiet` (defragmentation off) and closes it with no
// worker: a file of an older version is upgraded when it opens, before
// anything can write, and only its superblock's version and checksum change.
// Returns the file's bytes after.
std::string ExpectUpgradeChangesOnlyTheSuperblock(const storage::StoreOptions& quiet) {
  const std::string before = storage::testing::FileBytes(quiet.path);
  {
    auto store = storage::Store::Open(quiet);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (store.ok()) {
      EXPECT_EQ((*store)->recovery().damaged_regions, 0u);
      EXPECT_EQ(storage::testing::SuperblockVersion(quiet.path), storage::kFormatVersion);
    }
  }  // closed without a worker: nothing else written
  const std::string upgraded = storage::testing::FileBytes(quiet.path);
  EXPECT_EQ(upgraded.size(), before.size());
  size_t changed = 0;
  for (size_t i = 0; i < std::min(before.size(), upgraded.size()); ++i) {
    if (before[i] == upgraded[i]) continue;
    ++changed;
    EXPECT_TRUE(i < 4 || i == 12 || i == 13) << "byte " << i << " changed";
  }
  EXPECT_GT(changed, 0u);
  EXPECT_EQ(storage::testing::SuperblockVersion(quiet.path), storage::kFormatVersion);
  if (upgraded.size() >= storage::kSuperblockEncodedSize) {
    Result<storage::Superblock> sb =
        storage::DecodeSuperblock(reinterpret_cast<const uint8_t*>(upgraded.data()));
    EXPECT_TRUE(sb.ok()) << sb.status().ToString();
    if (sb.ok()) {
      EXPECT_EQ(sb->version, storage::kFormatVersion);
    }
  }
  return upgraded;
}

// A data file's store, its profile layer and a session; closed in the
// reverse order, the session first.
struct Opened {
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<profile::ProfileStore> profiles;
  std::unique_ptr<profile::ProfileSession> session;
};

// Opens the store at o.path into `opened`.
void OpenStore(const storage::StoreOptions& o, Opened* opened) {
  auto store = storage::Store::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  opened->store = std::move(*store);
}

// Opens the profile layer on opened->store with `options`, and a session.
void OpenProfiles(Opened* opened, const profile::ProfileOptions& options) {
  auto profiles = profile::ProfileStore::Open(opened->store.get(), options);
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  opened->profiles = std::move(*profiles);
  auto session = opened->profiles->NewSession();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  opened->session = std::move(*session);
}

// Both.
void OpenAll(const storage::StoreOptions& o, const profile::ProfileOptions& options,
             Opened* opened) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(o, opened));
  ASSERT_NO_FATAL_FAILURE(OpenProfiles(opened, options));
}

profile::ProfileOptions NoSweeper() {
  profile::ProfileOptions o;
  o.sweeper = false;
  return o;
}

// What recovery finds in a fixture, as its README says.
struct ExpectedRecovery {
  uint32_t blocks_in_use;
  uint64_t records_scanned;
  uint64_t live_records;
  uint64_t tombstones;
  uint64_t index_references;  // records naming their masters (record kind 3)
};

void ExpectRecovery(storage::Store& store, const ExpectedRecovery& e) {
  const storage::RecoveryStats& rec = store.recovery();
  EXPECT_EQ(rec.damaged_regions, 0u);
  EXPECT_EQ(rec.blocks_in_use, e.blocks_in_use);
  EXPECT_EQ(rec.records_scanned, e.records_scanned);
  EXPECT_EQ(rec.live_records, e.live_records);
  EXPECT_EQ(rec.tombstones, e.tombstones);
  EXPECT_EQ(store.stats().index_references, e.index_references);
}

// A fixture's data file (tests/data/format-vN/segstore.dat.gz), gunzipped
// afresh into a temporary directory for each test: data_.
class FixtureFileTest : public ::testing::Test {
 protected:
  explicit FixtureFileTest(std::string fixture) : fixture_(std::move(fixture)) {}

  void SetUp() override {
    const std::string gz = fixture_ + "/segstore.dat.gz";
    ASSERT_TRUE(std::filesystem::exists(gz))
        << "the fixture is missing: " << gz << " (its README.md; it is never regenerated)";
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

  // The fixture is the file its README describes, written in format
  // `version` (a fixture is never regenerated): 16 MiB of SHA-256 `sha256`,
  // as its segstore.dat.sha256 says where it has one (`sha256_file`), its
  // superblock saying `version`.
  void ExpectTheFileItsReadmeDescribes(const std::string& sha256, uint16_t version,
                                       bool sha256_file = true) {
    const std::string bytes = storage::testing::FileBytes(data_);
    EXPECT_EQ(bytes.size(), 16777216u);
    EXPECT_EQ(Sha256Hex(bytes), sha256);
    if (sha256_file) {
      EXPECT_EQ(ReadFile(fixture_ + "/segstore.dat.sha256"), sha256 + "  segstore.dat\n");
    }
    ASSERT_GE(bytes.size(), storage::kSuperblockEncodedSize);
    EXPECT_EQ(DecodeFixed16(bytes.data() + 12), version);
    Result<storage::Superblock> sb =
        storage::DecodeSuperblock(reinterpret_cast<const uint8_t*>(bytes.data()));
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    EXPECT_EQ(sb->version, version);
  }

  // (c) The fixture claiming the version after this build's is refused by
  // Store::Open and by segstored, naming both versions, and left untouched.
  void ExpectANewerVersionRefusedUntouched() {
    const uint16_t newer = storage::kFormatVersion + 1;
    ExpectRefusedUntouched(dir_.File(""), data_, newer, Status::Code::kUnsupported,
                           "Unsupported: data file format version " + std::to_string(newer) +
                               " is newer than this build reads (" +
                               std::to_string(storage::kOldestFormatVersion) + " to " +
                               std::to_string(storage::kFormatVersion) + ")");
  }

  // Put back to the `version` it was written in, it is the fixture again,
  // byte for byte.
  void PutBackToVersion(uint16_t version, const std::string& sha256) {
    storage::testing::SetSuperblockVersion(data_, version);
    EXPECT_EQ(Sha256Hex(storage::testing::FileBytes(data_)), sha256);
  }

  const std::string fixture_;
  storage::testing::TempDir dir_;
  const std::string data_ = dir_.File("segstore.dat");
};

// Every profile of `profiles` (each a user and its segments, by ascending
// id) answers exactly as stated through the profile layer; the users
// `not_found` are NotFound.
template <typename E>
void ExpectSegmentAnswers(profile::ProfileSession* s, const std::vector<E>& profiles,
                          const std::vector<std::string>& not_found, const std::string& when) {
  SCOPED_TRACE(when);
  for (const E& e : profiles) {
    Result<GetResult> got = s->GetSync(e.user);
    ASSERT_TRUE(got.ok()) << e.user << ": " << got.status().ToString();
    EXPECT_EQ(got->count, e.segments.size()) << e.user;
    EXPECT_TRUE(got->ToSegments() == e.segments) << e.user;
  }
  for (const std::string& user : not_found) {
    Result<GetResult> got = s->GetSync(user);
    EXPECT_TRUE(got.status().IsNotFound()) << user << ": " << got.status().ToString();
  }
}

// The same over the wire, one by one and all of them in one batch get
// (answers in the order asked).
template <typename E>
void ExpectSegmentAnswersOverTheWire(client::Client* c, const std::vector<E>& profiles,
                                     const std::vector<std::string>& not_found) {
  std::vector<std::string> users;
  for (const E& e : profiles) {
    Result<GetResult> got = c->Get(e.user);
    ASSERT_TRUE(got.ok()) << e.user << ": " << got.status().ToString();
    EXPECT_TRUE(got->ToSegments() == e.segments) << e.user;
    users.push_back(e.user);
  }
  for (const std::string& user : not_found) {
    EXPECT_TRUE(c->Get(user).status().IsNotFound()) << user;
    users.push_back(user);
  }
  Result<BatchGetResult> batch = c->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    const Result<GetResult>& r = (*batch)[i];
    if (i < profiles.size()) {
      ASSERT_TRUE(r.ok()) << users[i] << ": " << r.status().ToString();
      EXPECT_TRUE(r->ToSegments() == profiles[i].segments) << users[i];
    } else {
      EXPECT_TRUE(r.status().IsNotFound()) << users[i];
    }
  }
}

class FormatFixtureTest : public FixtureFileTest {
 protected:
  FormatFixtureTest() : FixtureFileTest(kFixtureV1) {}

  // Every profile answers exactly as stated; the rest are NotFound.
  static void ExpectV1Answers(profile::ProfileSession* s, const std::string& when) {
    ExpectSegmentAnswers(s, FormatV1Profiles(), FormatV1NotFound(), when);
  }
};

// The fixture is the file its README describes, written in format version 1:
// a fixture is never regenerated.
// (format-v1 has no segstore.dat.sha256.)
TEST_F(FormatFixtureTest, V1FixtureIsTheFileItsReadmeDescribes) {
  ExpectTheFileItsReadmeDescribes(kFormatV1Sha256, 1, /*sha256_file=*/false);
}

// (a0) Opening the version-1 fixture upgrades it (FORMAT.md, "Versions":
// O <= v < W): before anything can write, the superblock says this build's
// version; that is the only change (its version and checksum); the
// version-1 records stay as they are and answer as stated after a reopen.
TEST_F(FormatFixtureTest, V1IsUpgradedOnOpenAndOnlyItsSuperblockChanges) {
  static_assert(storage::kFormatVersion == 4 && storage::kOldestFormatVersion == 1);
  ASSERT_EQ(DecodeFixed16(storage::testing::FileBytes(data_).data() + 12), 1u);
  // Defragmentation off: on its own schedule it rewrites the fixture's
  // superseded versions, which is not what this compares.
  storage::StoreOptions quiet = StoreOptionsFor(data_);
  quiet.background_defrag = false;
  ASSERT_NO_FATAL_FAILURE(ExpectUpgradeChangesOnlyTheSuperblock(quiet));

  // Reopened (no upgrade again): the version-1 records answer as stated.
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenAll(StoreOptionsFor(data_), {}, &opened));
  ExpectV1Answers(opened.session.get(), "reopened after the upgrade");
}

// (a) The storage and profile layers of this build, in process: every
// profile as stated, with options too; again after the expiry sweeper
// rewrote what it wanted; again after a restart on what this build wrote.
TEST_F(FormatFixtureTest, V1OpensAndEveryProfileAnswersAsStated) {
  for (int round = 0; round < 2; ++round) {
    Opened opened;
    ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptionsFor(data_), &opened));
    EXPECT_EQ(opened.store->recovery().damaged_regions, 0u);
    // Upgraded by the first open, before this build wrote anything.
    EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
    ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, {}));
    profile::ProfileSession* s = opened.session.get();
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
      ASSERT_TRUE(opened.profiles->SweepNow().ok());
      ExpectV1Answers(s, "after the sweeper ran");
    }
  }
}

// (b) The daemon of this build on the fixture, over the wire.
TEST_F(FormatFixtureTest, V1ServedByTheDaemonAnswersOverTheWire) {
  Served served(dir_, data_);
  ASSERT_NO_FATAL_FAILURE(served.Connect());
  ASSERT_NO_FATAL_FAILURE(
      ExpectSegmentAnswersOverTheWire(served.client.get(), FormatV1Profiles(), FormatV1NotFound()));
  const std::string log = served.Stop();
  // The daemon upgraded the file, and said so.
  EXPECT_TRUE(Has(log, "data file " + data_ + ": format version 1 upgraded to " +
                           std::to_string(storage::kFormatVersion)))
      << log;
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
}

TEST_F(FormatFixtureTest, NewerVersionIsRefusedNamingBothVersionsAndLeftUntouched) {
  static_assert(storage::kOldestFormatVersion < storage::kFormatVersion);
  ExpectANewerVersionRefusedUntouched();
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
  ExpectANewerVersionRefusedUntouched();
  PutBackToVersion(1, kFormatV1Sha256);
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenAll(StoreOptionsFor(data_), {}, &opened));
  ExpectV1Answers(opened.session.get(), "after the refusal");
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

// The checkpoint records of a fixture's four log partitions: next[l], the
// entries of log partition l; window 0.
std::vector<ExpectedCheckpoint> CheckpointsWithNext(const std::array<int64_t, 4>& next) {
  std::vector<ExpectedCheckpoint> out;
  for (uint32_t l = 0; l < 4; ++l) {
    replica::Checkpoint c;
    c.next = next[l];
    c.window_start = 0;
    out.push_back({CheckpointKeyAsWritten(l), c});
  }
  return out;
}

// Each log partition's checkpoint record decodes to the stated values, and
// there are four log partitions: no checkpoint past them.
void ExpectCheckpoints(storage::Worker& w, const std::vector<ExpectedCheckpoint>& checkpoints) {
  for (const ExpectedCheckpoint& e : checkpoints) {
    Result<storage::Record> r = w.GetSync(e.key);
    ASSERT_TRUE(r.ok()) << "checkpoint " << e.key.substr(2) << ": " << r.status().ToString();
    replica::Checkpoint c;
    ASSERT_TRUE(replica::DecodeCheckpoint(r->body(), &c).ok()) << e.key.substr(2);
    EXPECT_EQ(c.next, e.checkpoint.next) << e.key.substr(2);
    EXPECT_EQ(c.window_start, e.checkpoint.window_start) << e.key.substr(2);
    EXPECT_TRUE(c.partitions.empty()) << e.key.substr(2);
  }
  for (uint32_t l : {4u, 5u, 63u}) {
    EXPECT_TRUE(w.GetSync(CheckpointKeyAsWritten(l)).status().IsNotFound()) << l;
  }
}

std::vector<ExpectedCheckpoint> FormatV2Checkpoints() {
  return CheckpointsWithNext({4, 3, 2, 5});  // the entries of each log partition
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

class FormatFixtureV2Test : public FixtureFileTest {
 protected:
  FormatFixtureV2Test() : FixtureFileTest(kFixtureV2) {}

  // Every profile answers exactly as stated through the profile layer; the
  // rest are NotFound.
  static void ExpectV2Answers(profile::ProfileSession* s, const std::string& when) {
    ExpectSegmentAnswers(s, FormatV2Profiles(), FormatV2NotFound(), when);
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
    ExpectCheckpoints(w, FormatV2Checkpoints());
  }
};

// The fixture is the file its README describes, written in format version 2:
// a fixture is never regenerated.
TEST_F(FormatFixtureV2Test, V2FixtureIsTheFileItsReadmeDescribes) {
  ExpectTheFileItsReadmeDescribes(kFormatV2Sha256, 2);
}

// (a0) Version 2 is older than this build's (O <= v < W): opening it
// upgrades the superblock and changes nothing else (its version and
// checksum); reads through every layer with the sweeper off then leave the
// file as the upgrade did, byte for byte.
TEST_F(FormatFixtureV2Test, V2IsUpgradedOnOpenAndReadsRewriteNothing) {
  static_assert(storage::kFormatVersion == 4);
  // Defragmentation off: on its own schedule it rewrites the fixture's
  // superseded versions, which is not what this compares.
  storage::StoreOptions quiet = StoreOptionsFor(data_);
  quiet.background_defrag = false;
  const std::string upgraded = ExpectUpgradeChangesOnlyTheSuperblock(quiet);
  {
    Opened opened;
    ASSERT_NO_FATAL_FAILURE(OpenAll(quiet, NoSweeper(), &opened));
    ExpectV2Answers(opened.session.get(), "read only");
    ExpectV2Records(opened.session->worker(), "read only");
  }
  EXPECT_TRUE(storage::testing::FileBytes(data_) == upgraded) << "reading changed the file";
}

// (a) The storage and profile layers of this build, in process: every
// profile as stated, every record with its log position, every checkpoint;
// again after the expiry sweeper rewrote what it wanted (fading keeps its
// position); again after a restart on what this build wrote.
TEST_F(FormatFixtureV2Test, V2EveryProfileAnswersAsStatedWithItsLogPosition) {
  for (int round = 0; round < 2; ++round) {
    Opened opened;
    ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptionsFor(data_), &opened));
    EXPECT_EQ(opened.store->recovery().damaged_regions, 0u);
    EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
    ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, {}));
    profile::ProfileSession* s = opened.session.get();
    const std::string when = round == 0 ? "as opened" : "reopened after this build wrote to it";
    ExpectV2Answers(s, when);
    ExpectV2Records(s->worker(), when);

    if (round == 0) {
      // The expiry sweeper rewrites what is due (fading: two of its four
      // segments expired); nothing a reader sees changes, and the rewritten
      // body keeps its log position.
      ASSERT_TRUE(opened.profiles->SweepNow().ok());
      ExpectV2Answers(s, "after the sweeper ran");
      ExpectV2Records(s->worker(), "after the sweeper ran");
      Result<storage::Record> fading = s->worker().GetSync("fading");
      ASSERT_TRUE(fading.ok()) << fading.status().ToString();
      std::vector<Segment> all;
      ASSERT_TRUE(profile::DecodeSegments(fading->body(), &all).ok());
      EXPECT_EQ(all.size(), 2u) << "the expired segments stay after a sweep";
    }
  }
}

// The partly-expired record as written: its two expired segments are still
// in the body (the sweeper was off), hidden from reads.
TEST_F(FormatFixtureV2Test, V2ExpiredSegmentsAreInTheBodyAndHidden) {
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptionsFor(data_), &opened));
  auto worker = opened.store->NewWorker();
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

  ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, NoSweeper()));
  Result<GetResult> got = opened.session->GetSync("fading");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->ToSegments() == (std::vector<Segment>{Seg(10, kNever), Seg(20, 4000000000)}));
}

// (b) The daemon of this build on the fixture as a single server (no
// cluster sections): every profile over the wire, one by one and in one
// batch; the upgrade logged; and what it leaves still carries every log
// position.
TEST_F(FormatFixtureV2Test, V2ServedByTheDaemonAnswersOverTheWire) {
  Served served(dir_, data_);
  ASSERT_NO_FATAL_FAILURE(served.Connect());
  ASSERT_NO_FATAL_FAILURE(
      ExpectSegmentAnswersOverTheWire(served.client.get(), FormatV2Profiles(), FormatV2NotFound()));
  const std::string log = served.Stop();
  EXPECT_TRUE(Has(log, "format version 2 upgraded to 4")) << log;
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);

  // What the single server left: the same answers, the same positions.
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenAll(StoreOptionsFor(data_), {}, &opened));
  ExpectV2Answers(opened.session.get(), "after the daemon");
  ExpectV2Records(opened.session->worker(), "after the daemon");
}

// ---- Format version 3 (tests/data/format-v3): one data file written first by
// segstored as a single server (groups made, moved, dissolved and deleted
// with link, unlink and delete: codec-3 bodies, members' records of kind 3
// naming their masters, links expired), then by segstored as a one-node
// cluster with a log (a group linked through link_step entries: codec-3
// bodies with log positions). What follows is format-v3/README.md's "What a
// get must answer", "Groups", "Records" and "Checkpoint records", written out.

// The links' expiries, from the run (README.md, "Links' expiries").
constexpr UnixSeconds kLinkA2 = 4042117819;  // member-a2: 2026-11-26T18:30:19Z + 26000 d
constexpr UnixSeconds kLinkO2 = 4042117820;  // member-o2: 2026-11-26T18:30:20Z + 26000 d
constexpr UnixSeconds kLinkC2 = 4042117843;  // member-c2: 2026-11-26T18:30:43Z + 26000 d
constexpr UnixSeconds kLapsed = 1795717840;  // lapsed-a, lapsed-g: 2026-11-26T18:30:20Z + 20 s

// A group as every get by one of its users answers it (the merged view) and
// as links lists it.
struct ExpectedGroupV3 {
  std::string master;
  std::vector<Segment> merged;    // by ascending id
  uint32_t profiles;              // merged, the master's included
  std::vector<LinkedUser> links;  // its counted members, by user
};

std::vector<ExpectedGroupV3> FormatV3Groups() {
  constexpr UnixSeconds kNeverExpires = kNever;
  return {
      {"master-a",
       {Seg(1, 4000007200, 11u), Seg(2, 4000003600), Seg(3, 4000000000), Seg(4, kNeverExpires, 13u),
        Seg(5, kNeverExpires, std::nullopt, 50u), Seg(6, 4000010800, 16u), Seg(7, kNeverExpires),
        Seg(8, 4000000000)},
       4,
       {{"member-a1", kNever}, {"member-a2", kLinkA2}, {"member-a3", kNever}}},
      {"master-new",
       {Seg(20, 4000000000), Seg(21, kNeverExpires), Seg(22, 4000000000, 22u)},
       4,
       {{"master-old", kNever}, {"member-o1", kNever}, {"member-o2", kLinkO2}}},
      {"master-c",
       {Seg(60, kNeverExpires, std::nullopt, 6u), Seg(80, 4000000000, 8u), Seg(81, kNeverExpires),
        Seg(82, 4000000000), Seg(83, 4000000000)},
       4,
       {{"member-c1", kNever}, {"member-c2", kLinkC2}, {"plain-joins", kNever}}},
  };
}

// Every user with a record: its own profile, the group it is in, and its
// record as stored.
struct ExpectedV3 {
  std::string user;
  std::vector<Segment> own;  // its own live segments, by id; empty: an own get is NotFound
  std::string master;        // its group's master; empty: in no group
  // The record: the codec version (its body's first byte), the log position
  // its body remembers (0: none), the master it names (record kind 3; empty:
  // kind 1, none) and its group section (codec 3; empty for codecs 1 and 2).
  uint8_t codec;
  uint64_t log_position;
  std::string reference;
  profile::Group section;
};

profile::Group MemberSection(UnixSeconds link_expires) {
  profile::Group g;
  g.member = true;
  g.link_expires = link_expires;
  return g;
}
profile::Group MasterSection(std::vector<profile::GroupMember> members) {
  profile::Group g;
  g.members = std::move(members);
  return g;
}

// `swept`: as the expiry sweeper of this build leaves the records once it
// ran (README.md, "The sweeper"): the two expired links are gone from
// master-a's list and from lapsed-a's and lapsed-g's records, which no
// longer name a master. Nothing a get answers changes.
std::vector<ExpectedV3> FormatV3Users(bool swept) {
  constexpr UnixSeconds kNeverExpires = kNever;
  const profile::Group none;
  std::vector<profile::GroupMember> master_a = {
      {"member-a1", kNever}, {"member-a2", kLinkA2}, {"member-a3", kNever}};
  if (!swept) master_a.insert(master_a.begin(), {"lapsed-a", kLapsed});
  return {
      // a. The single server's.
      {"plain", {Seg(50, 4000000000, 1u), Seg(51, kNeverExpires)}, "", 1, 0, "", none},
      {"master-a",
       {Seg(1, 4000000000, 10u), Seg(2, 4000003600), Seg(5, kNeverExpires, std::nullopt, 50u)},
       "master-a",
       3,
       0,
       "",
       MasterSection(master_a)},
      {"member-a1",  // written again after its link, and through the log in phase b
       {Seg(1, 4000007200, 11u), Seg(3, 4000000000), Seg(6, 4000010800, 16u),
        Seg(7, kNeverExpires)},
       "master-a",
       3,
       7,
       "master-a",
       MemberSection(kNever)},
      {"member-a2",
       {Seg(2, 4000003600, std::nullopt, 12u), Seg(4, kNeverExpires, 13u)},
       "master-a",
       3,
       0,
       "master-a",
       MemberSection(kLinkA2)},
      {"member-a3",
       {Seg(3, 4000000000, 33u), Seg(8, 4000000000)},
       "master-a",
       3,
       0,
       "master-a",
       MemberSection(kNever)},
      {"left-a", {Seg(9, kNeverExpires)}, "", 1, 0, "", none},
      {"lapsed-a",
       {Seg(1, 4100000000, 77u), Seg(11, 4000000000)},
       "",
       static_cast<uint8_t>(swept ? 1 : 3),
       0,
       swept ? "" : "master-a",
       swept ? none : MemberSection(kLapsed)},
      {"master-old",
       {Seg(20, 4000000000)},
       "master-new",
       3,
       0,
       "master-new",
       MemberSection(kNever)},
      {"member-o1",
       {Seg(21, kNeverExpires)},
       "master-new",
       3,
       0,
       "master-new",
       MemberSection(kNever)},
      {"member-o2",
       {Seg(22, 4000000000, 22u)},
       "master-new",
       3,
       0,
       "master-new",
       MemberSection(kLinkO2)},
      {"master-new",
       {},
       "master-new",
       3,
       0,
       "",
       MasterSection({{"master-old", kNever}, {"member-o1", kNever}, {"member-o2", kLinkO2}})},
      {"master-d", {Seg(40, kNeverExpires)}, "", 1, 0, "", none},
      {"member-d1", {Seg(41, kNeverExpires)}, "", 1, 0, "", none},
      {"lapsed-g",
       {Seg(33, kNeverExpires)},
       "",
       static_cast<uint8_t>(swept ? 1 : 3),
       0,
       swept ? "" : "master-gone",
       swept ? none : MemberSection(kLapsed)},
      // The single server's codec-1 profile, linked through the log in phase b.
      {"plain-joins",
       {Seg(60, kNeverExpires, std::nullopt, 6u)},
       "master-c",
       3,
       5,
       "master-c",
       MemberSection(kNever)},
      // b. Through the log.
      {"log-only", {Seg(70, 4000000000, std::nullopt, 7u)}, "", 2, 1, "", none},
      {"master-c",
       {Seg(80, 4000000000, 8u)},
       "master-c",
       3,
       10,
       "",
       MasterSection({{"member-c1", kNever}, {"member-c2", kLinkC2}, {"plain-joins", kNever}})},
      {"member-c1",
       {Seg(81, kNeverExpires), Seg(82, 4000000000)},
       "master-c",
       3,
       6,
       "master-c",
       MemberSection(kNever)},
      {"member-c2", {Seg(83, 4000000000)}, "master-c", 3, 4, "master-c", MemberSection(kLinkC2)},
      {"left-c", {Seg(84, kNeverExpires)}, "", 2, 3, "", none},
  };
}

// Tombstones (erased-a: a deleted member; master-gone, member-g1, member-g2:
// a master's delete and its group; erased-c: a member deleted through the
// log) and users never written.
std::vector<std::string> FormatV3NotFound() {
  return {"erased-a", "master-gone", "member-g1", "member-g2", "erased-c",
          "nobody",   "member-a",    "master-c1", "master-"};
}

// connected(a, b), as README.md states it.
struct ExpectedConnected {
  std::string a, b;
  bool connected;
};
std::vector<ExpectedConnected> FormatV3Connected() {
  return {
      {"member-a1", "member-a3", true},   {"member-a2", "master-a", true},
      {"master-a", "member-a3", true},    {"master-old", "member-o2", true},
      {"member-o1", "master-new", true},  {"plain-joins", "member-c2", true},
      {"master-c", "member-c1", true},    {"plain", "plain", true},
      {"nobody", "nobody", true},         {"member-a1", "member-c1", false},
      {"lapsed-a", "master-a", false},    {"lapsed-a", "member-a1", false},
      {"left-a", "master-a", false},      {"erased-a", "master-a", false},
      {"lapsed-g", "master-gone", false}, {"member-g1", "member-g2", false},
      {"member-d1", "master-d", false},   {"left-c", "master-c", false},
      {"erased-c", "member-c1", false},   {"master-old", "member-a1", false},
      {"plain", "log-only", false},       {"nobody", "master-a", false},
  };
}

constexpr const char* kFormatV3Sha256 =
    "d08ab8b4d5d8b5d3bada8ab448f1bb95ad1a88d99c307ed8873054ec05f99fac";

std::vector<ExpectedCheckpoint> FormatV3Checkpoints() {
  return CheckpointsWithNext({7, 1, 11, 3});  // the entries of each log partition
}

// The README's statements about the users themselves: their routing
// partitions, so their log partitions (PartitionOf(user) % 4), and every
// log partition got entries.
TEST(FormatFixtureGeneratorTest, V3UsersAreInTheLogPartitionsTheReadmeStates) {
  const std::vector<std::pair<std::string, uint32_t>> partitions = {
      {"plain", 1785},      {"plain-joins", 1788}, {"master-a", 1062},  {"member-a1", 2124},
      {"member-a2", 1108},  {"member-a3", 92},     {"left-a", 1587},    {"erased-a", 2458},
      {"lapsed-a", 1007},   {"master-old", 3271},  {"member-o1", 143},  {"member-o2", 3223},
      {"master-new", 1849}, {"master-d", 15},      {"member-d1", 1969}, {"master-gone", 1963},
      {"member-g1", 741},   {"member-g2", 3837},   {"lapsed-g", 3038},  {"log-only", 3569},
      {"master-c", 3126},   {"member-c1", 468},    {"member-c2", 3532}, {"left-c", 3619},
      {"erased-c", 394},
  };
  for (const auto& [user, partition] : partitions) {
    EXPECT_EQ(PartitionOf(user), partition) << user;
  }
  // The log partitions of the records phase b wrote (README.md, "Records").
  const std::vector<std::pair<std::string, uint32_t>> logged = {
      {"member-a1", 0}, {"plain-joins", 0}, {"member-c1", 0}, {"member-c2", 0},
      {"log-only", 1},  {"master-c", 2},    {"erased-c", 2},  {"left-c", 3},
  };
  std::set<uint32_t> log_partitions;
  for (const auto& [user, l] : logged) {
    EXPECT_EQ(PartitionOf(user) % 4, l) << user;
    log_partitions.insert(l);
  }
  EXPECT_EQ(log_partitions.size(), 4u);
}

// What the readers of this test ask: the profile layer in process or a
// client over the wire, behind one face.
struct LinkReader {
  std::function<Result<GetResult>(const std::string&, const GetOptions&)> get;
  std::function<Result<std::vector<Result<GetResult>>>(const std::vector<std::string>&,
                                                       const GetOptions&)>
      batch_get;
  std::function<Result<uint32_t>(const std::string&)> count;
  std::function<Result<std::string>(const std::string&)> master_of;
  std::function<Result<LinksPage>(const std::string&, const std::string&, uint32_t)> links;
  std::function<Result<bool>(const std::string&, const std::string&)> connected;
};

LinkReader ReaderOf(profile::ProfileSession* s) {
  return {
      [s](const std::string& u, const GetOptions& o) { return s->GetSync(u, o); },
      [s](const std::vector<std::string>& users, const GetOptions& o) {
        return s->BatchGetSync(users, o);
      },
      [s](const std::string& u) { return s->CountSync(u); },
      [s](const std::string& u) { return s->MasterOfSync(u); },
      [s](const std::string& u, const std::string& cursor, uint32_t max) {
        return s->LinksSync(u, cursor, max);
      },
      [s](const std::string& a, const std::string& b) { return s->ConnectedSync(a, b); },
  };
}

LinkReader ReaderOf(client::Client* c) {
  return {
      [c](const std::string& u, const GetOptions& o) { return c->Get(u, o); },
      [c](const std::vector<std::string>& users,
          const GetOptions& o) -> Result<std::vector<Result<GetResult>>> {
        Result<BatchGetResult> r = c->BatchGet(users, o);
        if (!r.ok()) return r.status();
        return std::vector<Result<GetResult>>(r->begin(), r->end());
      },
      [c](const std::string& u) { return c->Count(u); },
      [c](const std::string& u) { return c->MasterOf(u); },
      [c](const std::string& u, const std::string& cursor, uint32_t max) {
        return c->Links(u, cursor, max);
      },
      [c](const std::string& a, const std::string& b) { return c->Connected(a, b); },
  };
}

// The group of `groups` whose master is `master`; nullptr: none.
template <typename G>
const G* GroupOf(const std::vector<G>& groups, const std::string& master) {
  for (const G& g : groups) {
    if (g.master == master) return &g;
  }
  return nullptr;
}

// What a get answers for `e` without options: its group's merged view, or
// its own profile alone (no master, no count of profiles).
template <typename E, typename G>
void ExpectGetAnswer(const Result<GetResult>& got, const E& e, const std::vector<G>& groups) {
  ASSERT_TRUE(got.ok()) << e.user << ": " << got.status().ToString();
  if (e.master.empty()) {
    EXPECT_TRUE(got->ToSegments() == e.own) << e.user;
    EXPECT_EQ(got->count, e.own.size()) << e.user;
    EXPECT_EQ(got->master, "") << e.user;
    EXPECT_EQ(got->profiles, 0u) << e.user;
    return;
  }
  const G* g = GroupOf(groups, e.master);
  ASSERT_NE(g, nullptr) << e.master;
  EXPECT_TRUE(got->ToSegments() == g->merged) << e.user;
  EXPECT_EQ(got->count, g->merged.size()) << e.user;
  EXPECT_EQ(got->master, g->master) << e.user;
  EXPECT_EQ(got->profiles, g->profiles) << e.user;
}

// What count, master_of and links answer for `e`: its group's merged count,
// its master and its group's whole list of links; or its own count, and it
// has no master and no links.
template <typename E, typename G>
void ExpectCountAndLinks(const LinkReader& r, const E& e, const std::vector<G>& groups) {
  Result<uint32_t> count = r.count(e.user);
  ASSERT_TRUE(count.ok()) << e.user << ": " << count.status().ToString();
  const G* g = e.master.empty() ? nullptr : GroupOf(groups, e.master);
  EXPECT_EQ(*count, g != nullptr ? g->merged.size() : e.own.size()) << e.user;

  Result<std::string> master = r.master_of(e.user);
  Result<LinksPage> links = r.links(e.user, "", 0);
  if (e.master.empty()) {
    EXPECT_TRUE(master.status().IsNotFound()) << e.user << ": " << master.status().ToString();
    EXPECT_TRUE(links.status().IsNotFound()) << e.user << ": " << links.status().ToString();
    return;
  }
  ASSERT_NE(g, nullptr) << e.master;
  ASSERT_TRUE(master.ok()) << e.user << ": " << master.status().ToString();
  EXPECT_EQ(*master, e.master) << e.user;
  ASSERT_TRUE(links.ok()) << e.user << ": " << links.status().ToString();
  EXPECT_EQ(links->master, e.master) << e.user;
  EXPECT_TRUE(links->links == g->links) << e.user;
  EXPECT_EQ(links->next, "") << e.user;
}

// The record `r` of `e` as stated: its codec (its body's first byte), the
// master it names, the log position its body remembers, its group section;
// and, no segment of the fixture having expired, exactly the user's own
// live segments. `columns`: the body's, decoded.
template <typename E>
void ExpectUserRecord(const storage::Record& r, const E& e, profile::Columns* columns) {
  ASSERT_FALSE(r.body().empty()) << e.user;
  EXPECT_EQ(static_cast<uint8_t>(r.body()[0]), e.codec) << e.user;
  EXPECT_EQ(r.reference(), e.reference) << e.user;
  Result<uint64_t> position = profile::DecodeLogPosition(r.body());
  ASSERT_TRUE(position.ok()) << e.user << ": " << position.status().ToString();
  EXPECT_EQ(*position, e.log_position) << e.user;
  ASSERT_TRUE(profile::DecodeColumns(r.body(), columns).ok()) << e.user;
  EXPECT_EQ(columns->log_position, e.log_position) << e.user;
  EXPECT_TRUE(columns->group == e.section) << e.user;
  EXPECT_EQ(profile::HasGroupSection(r.body()), !e.section.empty()) << e.user;
  std::vector<Segment> all;
  ASSERT_TRUE(profile::DecodeSegments(r.body(), &all).ok()) << e.user;
  EXPECT_TRUE(all == e.own) << e.user;
}

// Every statement of "What a get must answer" and "Groups", through `r`.
void ExpectV3Answers(const LinkReader& r, const std::string& when) {
  SCOPED_TRACE(when);
  const std::vector<ExpectedGroupV3> groups = FormatV3Groups();
  GetOptions own;
  own.own_only = true;
  for (const ExpectedV3& e : FormatV3Users(false)) {
    ExpectGetAnswer(r.get(e.user, {}), e, groups);
    // Its own profile alone: no master, no count of profiles.
    Result<GetResult> mine = r.get(e.user, own);
    if (e.own.empty()) {
      EXPECT_TRUE(mine.status().IsNotFound()) << e.user << ": " << mine.status().ToString();
    } else {
      ASSERT_TRUE(mine.ok()) << e.user << ": " << mine.status().ToString();
      EXPECT_TRUE(mine->ToSegments() == e.own) << e.user;
      EXPECT_EQ(mine->master, "") << e.user;
      EXPECT_EQ(mine->profiles, 0u) << e.user;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectCountAndLinks(r, e, groups));
  }
  for (const std::string& user : FormatV3NotFound()) {
    EXPECT_TRUE(r.get(user, {}).status().IsNotFound()) << user;
    EXPECT_TRUE(r.get(user, own).status().IsNotFound()) << user;
    EXPECT_TRUE(r.master_of(user).status().IsNotFound()) << user;
    EXPECT_TRUE(r.links(user, "", 0).status().IsNotFound()) << user;
  }
  for (const ExpectedConnected& c : FormatV3Connected()) {
    Result<bool> got = r.connected(c.a, c.b);
    ASSERT_TRUE(got.ok()) << c.a << ", " << c.b << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.connected) << c.a << ", " << c.b;
    got = r.connected(c.b, c.a);
    ASSERT_TRUE(got.ok()) << c.b << ", " << c.a << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.connected) << c.b << ", " << c.a;
  }

  // links in pages of 2: the first ends at member-a2, the second starts after it.
  Result<LinksPage> page = r.links("member-a3", "", 2);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->master, "master-a");
  EXPECT_TRUE(page->links ==
              (std::vector<LinkedUser>{{"member-a1", kNever}, {"member-a2", kLinkA2}}));
  EXPECT_EQ(page->next, "member-a2");
  page = r.links("member-a3", page->next, 2);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(page->links == (std::vector<LinkedUser>{{"member-a3", kNever}}));
  EXPECT_EQ(page->next, "");

  // Options apply to the merged view: an id range, a limit, count only.
  GetOptions range;
  range.id_from = 3;
  range.id_to = 6;
  Result<GetResult> got = r.get("member-a2", range);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->ToSegments() ==
              (std::vector<Segment>{Seg(3, 4000000000), Seg(4, kNever, 13u),
                                    Seg(5, kNever, std::nullopt, 50u), Seg(6, 4000010800, 16u)}));
  EXPECT_EQ(got->master, "master-a");
  GetOptions limit;
  limit.limit = 2;
  got = r.get("master-c", limit);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->count, 5u);
  EXPECT_TRUE(got->ToSegments() ==
              (std::vector<Segment>{Seg(60, kNever, std::nullopt, 6u), Seg(80, 4000000000, 8u)}));
  GetOptions count_only;
  count_only.count_only = true;
  got = r.get("member-o1", count_only);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->count, 3u);
  EXPECT_TRUE(got->ids.empty());

  // Every user in one batch get, answers in the order asked: merged views
  // without options, own profiles with own.
  std::vector<std::string> users;
  for (const ExpectedV3& e : FormatV3Users(false)) users.push_back(e.user);
  for (const std::string& user : FormatV3NotFound()) users.push_back(user);
  const std::vector<ExpectedV3> expected = FormatV3Users(false);
  Result<std::vector<Result<GetResult>>> batch = r.batch_get(users, {});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    if (i < expected.size()) {
      ExpectGetAnswer((*batch)[i], expected[i], groups);
    } else {
      EXPECT_TRUE((*batch)[i].status().IsNotFound()) << users[i];
    }
  }
  batch = r.batch_get(users, own);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    const Result<GetResult>& one = (*batch)[i];
    if (i >= expected.size() || expected[i].own.empty()) {
      EXPECT_TRUE(one.status().IsNotFound()) << users[i];
      continue;
    }
    ASSERT_TRUE(one.ok()) << users[i] << ": " << one.status().ToString();
    EXPECT_TRUE(one->ToSegments() == expected[i].own) << users[i];
    EXPECT_EQ(one->master, "") << users[i];
  }
}

// The raw records: each user's codec, log position, reference and group
// section, its segments as stored; tombstones and never-written users have
// no record; each log partition's checkpoint record decodes as stated.
void ExpectV3Records(storage::Worker& w, bool swept, const std::string& when) {
  SCOPED_TRACE(when);
  for (const ExpectedV3& e : FormatV3Users(swept)) {
    Result<storage::Record> r = w.GetSync(e.user);
    ASSERT_TRUE(r.ok()) << e.user << ": " << r.status().ToString();
    profile::Columns columns;
    ASSERT_NO_FATAL_FAILURE(ExpectUserRecord(*r, e, &columns));
  }
  for (const std::string& user : FormatV3NotFound()) {
    Result<storage::Record> r = w.GetSync(user);
    EXPECT_TRUE(r.status().IsNotFound()) << user << ": " << r.status().ToString();
  }
  ExpectCheckpoints(w, FormatV3Checkpoints());
}

class FormatFixtureV3Test : public FixtureFileTest {
 protected:
  FormatFixtureV3Test() : FixtureFileTest(kFixtureV3) {}
};

// The fixture is the file its README describes, written in format version 3:
// a fixture is never regenerated.
TEST_F(FormatFixtureV3Test, V3FixtureIsTheFileItsReadmeDescribes) {
  ExpectTheFileItsReadmeDescribes(kFormatV3Sha256, 3);
}

// (a0) Version 3 is older than this build's (O <= v < W): opening it
// upgrades the superblock and changes nothing else; recovery finds what the
// README says; and reads through every layer with the sweeper and
// defragmentation off leave the file as the upgrade did, byte for byte.
TEST_F(FormatFixtureV3Test, V3IsUpgradedOnOpenAndReadsRewriteNothing) {
  static_assert(storage::kFormatVersion == 4);
  storage::StoreOptions quiet = StoreOptionsFor(data_);
  quiet.background_defrag = false;
  const std::string before = ExpectUpgradeChangesOnlyTheSuperblock(quiet);
  {
    Opened opened;
    ASSERT_NO_FATAL_FAILURE(OpenStore(quiet, &opened));
    // The members' records name their masters (record kind 3).
    ExpectRecovery(*opened.store, {.blocks_in_use = 6,
                                   .records_scanned = 89,
                                   .live_records = 24,
                                   .tombstones = 5,
                                   .index_references = 11});
    ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, NoSweeper()));
    ExpectV3Answers(ReaderOf(opened.session.get()), "read only");
    ExpectV3Records(opened.session->worker(), /*swept=*/false, "read only");
  }
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);
  EXPECT_TRUE(storage::testing::FileBytes(data_) == before) << "reading changed the file";
}

// (a) The storage and profile layers of this build, in process: every
// answer and every record as stated; again after the expiry sweeper
// dropped the expired links (nothing a reader sees changes); again after a
// restart on what this build wrote.
TEST_F(FormatFixtureV3Test, V3EveryUserAnswersAsStatedWithItsRecord) {
  for (int round = 0; round < 2; ++round) {
    Opened opened;
    ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptionsFor(data_), &opened));
    EXPECT_EQ(opened.store->recovery().damaged_regions, 0u);
    ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, NoSweeper()));  // swept by hand below
    profile::ProfileSession* s = opened.session.get();
    const std::string when = round == 0 ? "as opened" : "reopened after this build wrote to it";
    ExpectV3Answers(ReaderOf(s), when);
    ExpectV3Records(s->worker(), /*swept=*/round == 1, when);

    if (round == 0) {
      // The sweeper drops the two expired links: master-a lists lapsed-a no
      // more, and lapsed-a and lapsed-g name no master (codec 1, kind 1).
      ASSERT_TRUE(opened.profiles->SweepNow().ok());
      EXPECT_EQ(opened.profiles->sweeper_stats().records_rewritten, 3u);
      EXPECT_EQ(opened.profiles->sweeper_stats().records_deleted, 0u);
      ExpectV3Answers(ReaderOf(s), "after the sweeper ran");
      ExpectV3Records(s->worker(), /*swept=*/true, "after the sweeper ran");
    }
  }
}

// The expired links as written: still in master-a's list and in lapsed-a's
// and lapsed-g's records (lapsed-g's naming master-gone, a tombstone), and
// ignored by every read.
TEST_F(FormatFixtureV3Test, V3ExpiredLinksAreInTheRecordsAndIgnored) {
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptionsFor(data_), &opened));
  {
    auto worker = opened.store->NewWorker();
    ASSERT_TRUE(worker.ok()) << worker.status().ToString();
    auto [lapsed, master] = (*worker)->GetWithReferenceSync("lapsed-a");
    ASSERT_TRUE(lapsed.ok()) << lapsed.status().ToString();
    ASSERT_TRUE(master.ok()) << master.status().ToString();
    EXPECT_EQ(lapsed->reference(), "master-a");
    EXPECT_EQ(master->key(), "master-a");
    profile::Columns c;
    ASSERT_TRUE(profile::DecodeColumns(lapsed->body(), &c).ok());
    EXPECT_TRUE(c.group == MemberSection(kLapsed));
    ASSERT_TRUE(profile::DecodeColumns(master->body(), &c).ok());
    ASSERT_FALSE(c.group.members.empty());
    EXPECT_EQ(c.group.members[0], (profile::GroupMember{"lapsed-a", kLapsed}));

    auto [orphan, gone] = (*worker)->GetWithReferenceSync("lapsed-g");
    ASSERT_TRUE(orphan.ok()) << orphan.status().ToString();
    EXPECT_EQ(orphan->reference(), "master-gone");
    EXPECT_TRUE(gone.status().IsNotFound()) << gone.status().ToString();
    worker->reset();
  }
  ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, NoSweeper()));
  profile::ProfileSession* s = opened.session.get();
  Result<GetResult> got = s->GetSync("lapsed-a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->ToSegments() ==
              (std::vector<Segment>{Seg(1, 4100000000, 77u), Seg(11, 4000000000)}));
  EXPECT_EQ(got->master, "");
  // Had lapsed-a's link counted, segment 1 would read 4100000000 a1=77 by master-a.
  got = s->GetSync("master-a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_FALSE(got->ToSegments().empty());
  EXPECT_EQ(got->ToSegments()[0], Seg(1, 4000007200, 11u));
  EXPECT_EQ(got->profiles, 4u);
  EXPECT_TRUE(s->MasterOfSync("lapsed-g").status().IsNotFound());
  Result<bool> connected = s->ConnectedSync("lapsed-a", "master-a");
  ASSERT_TRUE(connected.ok());
  EXPECT_FALSE(*connected);
}

// (b) The daemon of this build on the fixture as a single server (no
// cluster sections): every answer over the wire (gets, own gets, batch
// gets, counts, master_of, links, connected); the file upgraded; and what
// it leaves, once swept, is the records as stated.
TEST_F(FormatFixtureV3Test, V3ServedByTheDaemonAnswersOverTheWire) {
  Served served(dir_, data_);
  ASSERT_NO_FATAL_FAILURE(served.Connect());
  client::Client* c = served.client.get();
  ExpectV3Answers(ReaderOf(c), "over the wire");
  const std::string log = served.Stop();
  EXPECT_TRUE(Has(log, "format version 3 upgraded to 4")) << log;
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), storage::kFormatVersion);

  // What the single server left (its sweeper may have run): once swept, the
  // same answers and the records as stated.
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenAll(StoreOptionsFor(data_), NoSweeper(), &opened));
  ASSERT_TRUE(opened.profiles->SweepNow().ok());
  ExpectV3Answers(ReaderOf(opened.session.get()), "after the daemon");
  ExpectV3Records(opened.session->worker(), /*swept=*/true, "after the daemon");
}

// (c) The fixture claiming a newer version is refused by Store::Open and by
// segstored, naming both versions, and left untouched; put back to version
// 3, it is the fixture again, byte for byte, and answers as stated.
TEST_F(FormatFixtureV3Test, V3ClaimingANewerVersionIsRefusedUntouched) {
  ExpectANewerVersionRefusedUntouched();
  PutBackToVersion(3, kFormatV3Sha256);
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenAll(StoreOptionsFor(data_), NoSweeper(), &opened));
  ExpectV3Answers(ReaderOf(opened.session.get()), "after the refusal");
  ExpectV3Records(opened.session->worker(), /*swept=*/false, "after the refusal");
}

// ---- Format version 4 (tests/data/format-v4): one data file written first by
// segstored as a single server (profile fields: codec-4 bodies without a log
// position, fields of every type set, deleted, incremented, kept by
// field_max, on a group's master and a member; the field name table's
// records; fields expired in their records), then by segstored as a
// one-node cluster with a log (field writes as log entries: codec-4 bodies
// with log positions). What follows is format-v4/README.md's "What a get
// must answer", "Records" and "The field name table", written out.

// The fields' expiries, from the run (README.md, "Fields' expiries").
constexpr UnixSeconds kPromo = 4042153557;     // mixed's promo: 2026-11-27T04:25:57Z + 26000 d
constexpr UnixSeconds kFlash = 1795753578;     // mixed's flash: 2026-11-27T04:25:58Z + 20 s
constexpr UnixSeconds kDay = 1795753579;       // mixed's cap:day: 2026-11-27T04:25:59Z + 20 s
constexpr UnixSeconds kC77 = 4042153560;       // caps' cap:c77: made 2026-11-27T04:26:00Z, fixed
constexpr UnixSeconds kC78 = 4042153594;       // caps' cap:c78: sliding, last 2026-11-27T04:26:34Z
constexpr UnixSeconds kGroup = 4042153567;     // fmaster's cap:group: made 2026-11-27T04:26:07Z
constexpr UnixSeconds kLogC77 = 4042153597;    // log-seg's cap:c77: made 2026-11-27T04:26:37Z
constexpr UnixSeconds kLogFlash = 1795753621;  // log-fade's flash: 2026-11-27T04:26:41Z + 20 s

Field F(std::string name, FieldValue value, UnixSeconds expires = kNever) {
  return Field{std::move(name), std::move(value), expires};
}
// A field of a stored section named by its number in the name table.
profile::StoredField Numbered(uint32_t id, FieldValue value, UnixSeconds expires = kNever) {
  return profile::StoredField{id, "", std::move(value), expires};
}
// One named inline.
profile::StoredField Inline(std::string name, FieldValue value, UnixSeconds expires = kNever) {
  return profile::StoredField{0, std::move(name), std::move(value), expires};
}

const std::string kLongName = "long-name-01234567890123456789012345678901234567890123456789abcd";

// The name table as written: numbers 1 to 17 (max_field_names = 17).
std::vector<std::string> FormatV4Names() {
  return {"country",   kLongName, "nickname", "score", "visits",  "consent",
          "last_seen", "tier",    "promo",    "flash", "cap:day", "cap:c77",
          "cap:c78",   "cap:c79", "best",     "hits",  "own_note"};
}

// A group as every get by one of its users answers it (the merged view of
// segments, the master's fields) and as links lists it.
struct ExpectedGroupV4 {
  std::string master;
  std::vector<Segment> merged;    // by ascending id
  uint32_t profiles;              // merged, the master's included
  std::vector<LinkedUser> links;  // its members, by user
  std::vector<Field> fields;      // the master's live fields, by name
};

std::vector<Field> FmasterFields() {
  return {F("cap:group", FieldValue::Int(3), kGroup), F("country", FieldValue::String("ES")),
          F("segment_src", FieldValue::String("dmp"))};
}
std::vector<Field> MasterCfFields() {
  return {F("cap:c90", FieldValue::Int(1)), F("last_seen", FieldValue::Time(4000000300))};
}

std::vector<ExpectedGroupV4> FormatV4Groups() {
  return {
      {"fmaster",
       {Seg(100, 4000000000), Seg(101, kNever), Seg(102, 4000000000, std::nullopt, 2u)},
       3,
       {{"fmember1", kNever}, {"fmember2", kNever}},
       FmasterFields()},
      {"master-cf",
       {Seg(400, kNever), Seg(401, kNever)},
       2,
       {{"member-cf1", kNever}},
       MasterCfFields()},
  };
}

// Every user with a record: its own profile, its group, and its record.
struct ExpectedV4 {
  std::string user;
  std::vector<Segment> own;       // its own live segments, by id
  std::vector<Field> own_fields;  // its own live fields, by name
  std::string master;             // its group's master; empty: in no group
  // The record: the codec version, the log position its body remembers (0:
  // none), the master it names (empty: none), its group section, and its
  // fields section as stored (StoredBefore order, expired fields included;
  // empty: no section).
  uint8_t codec;
  uint64_t log_position;
  std::string reference;
  profile::Group section;
  std::vector<profile::StoredField> stored;
};

// `swept`: as the expiry sweeper of this build leaves the records once it
// ran (README.md, "The sweeper"): mixed's and log-fade's expired fields are
// gone from their records (log-fade's body, with no field left, is codec
// 2). Nothing a get answers changes.
std::vector<ExpectedV4> FormatV4Users(bool swept) {
  using V = FieldValue;
  const profile::Group none;
  std::vector<profile::StoredField> mixed = {Numbered(1, V::String("DE")),
                                             Numbered(4, V::Double(-1.5), 4000003600),
                                             Numbered(9, V::String("spring"), kPromo)};
  if (!swept) {
    mixed.push_back(Numbered(10, V::String("gone-soon"), kFlash));
    mixed.push_back(Inline("cap:day", V::Int(1), kDay));
  }
  std::vector<profile::StoredField> log_fade;
  if (!swept) log_fade.push_back(Numbered(10, V::String("gone-soon"), kLogFlash));
  return {
      // a. The single server's.
      {"plain", {Seg(50, 4000000000, 1u), Seg(51, kNever)}, {}, "", 1, 0, "", none, {}},
      {"solo",  // a profile of fields alone; written again through the log in phase b
       {},
       {F("consent", V::Bytes(std::string("\x00\xff\x10", 3))), F("country", V::String("FR")),
        F("last_seen", V::Time(4000000000)), F(kLongName, V::Int(64)), F("nickname", V::String("")),
        F("score", V::Double(0.75)), F("visits", V::Int(10))},
       "",
       4,
       3,
       "",
       none,
       {Numbered(1, V::String("FR")), Numbered(2, V::Int(64)), Numbered(3, V::String("")),
        Numbered(4, V::Double(0.75)), Numbered(5, V::Int(10)),
        Numbered(6, V::Bytes(std::string("\x00\xff\x10", 3))), Numbered(7, V::Time(4000000000))}},
      {"mixed",
       {Seg(1, 4000000000, 1u), Seg(2, kNever)},
       {F("country", V::String("DE")), F("promo", V::String("spring"), kPromo),
        F("score", V::Double(-1.5), 4000003600)},
       "",
       4,
       0,
       "",
       none,
       mixed},
      {"caps",
       {Seg(5, kNever)},
       {F("cap:c77", V::Int(2), kC77), F("cap:c78", V::Int(2), kC78), F("cap:c79", V::Int(-5))},
       "",
       4,
       0,
       "",
       none,
       {Numbered(12, V::Int(2), kC77), Numbered(13, V::Int(2), kC78), Numbered(14, V::Int(-5))}},
      {"seen",
       {Seg(9, 4000000000)},
       {F("best", V::Double(3.25)), F("hits", V::Int(7)),
        F("last_seen", V::Time(4000000200), 4000007200)},
       "",
       4,
       0,
       "",
       none,
       {Numbered(7, V::Time(4000000200), 4000007200), Numbered(15, V::Double(3.25)),
        Inline("hits", V::Int(7))}},
      {"fmaster",  // written through the log in phase b too (a member's increment)
       {Seg(100, 4000000000)},
       FmasterFields(),
       "fmaster",
       4,
       1,
       "",
       MasterSection({{"fmember1", kNever}, {"fmember2", kNever}}),
       {Numbered(1, V::String("ES")), Inline("cap:group", V::Int(3), kGroup),
        Inline("segment_src", V::String("dmp"))}},
      {"fmember1", {Seg(101, kNever)}, {}, "fmaster", 3, 0, "fmaster", MemberSection(kNever), {}},
      {"fmember2",
       {Seg(102, 4000000000, std::nullopt, 2u)},
       {F("own_note", V::String("mine"))},
       "fmaster",
       4,
       0,
       "fmaster",
       MemberSection(kNever),
       {Inline("own_note", V::String("mine"))}},
      // b. Through the log.
      {"log-only", {Seg(70, 4000000000, std::nullopt, 7u)}, {}, "", 2, 1, "", none, {}},
      {"log-fields",
       {},
       {F("country", V::String("IT")), F("region", V::String("north"))},
       "",
       4,
       3,
       "",
       none,
       {Numbered(1, V::String("IT")), Inline("region", V::String("north"))}},
      {"log-seg",
       {Seg(300, 4000000000)},
       {F("cap:c77", V::Int(1), kLogC77)},
       "",
       4,
       2,
       "",
       none,
       {Numbered(12, V::Int(1), kLogC77)}},
      {"master-cf",
       {Seg(400, kNever)},
       MasterCfFields(),
       "master-cf",
       4,
       7,
       "",
       MasterSection({{"member-cf1", kNever}}),
       {Numbered(7, V::Time(4000000300)), Inline("cap:c90", V::Int(1))}},
      {"member-cf1",
       {Seg(401, kNever)},
       {},
       "master-cf",
       3,
       3,
       "master-cf",
       MemberSection(kNever),
       {}},
      {"log-fade",
       {Seg(500, kNever)},
       {},
       "",
       static_cast<uint8_t>(swept ? 2 : 4),
       3,
       "",
       none,
       log_fade},
  };
}

// Tombstones (dropped-fields: its last field deleted; erased-fields: a
// delete; erased-cf: a delete through the log), a profile of fields that
// all expired (lapsed-fields: its record void, indexed as a tombstone) and
// users never written.
std::vector<std::string> FormatV4NotFound() {
  return {"dropped-fields", "erased-fields", "lapsed-fields", "erased-cf",
          "nobody",         "sol",           "fmaster-",      "log-field"};
}

constexpr const char* kFormatV4Sha256 =
    "0ac99c677e75ef08683ffb723f1a02ab369374d3e5689b8474f2ab85ef1d9d53";

std::vector<ExpectedCheckpoint> FormatV4Checkpoints() {
  return CheckpointsWithNext({6, 3, 7, 3});  // the entries of each log partition
}

// The key of name number `id` as the README spells it (not as this build's
// FieldNames::Key derives it).
std::string NameKeyAsWritten(uint32_t id) {
  return std::string("\xff\x00", 2) + "field-name:" + std::to_string(id);
}

// The README's statements about the users themselves: their routing
// partitions, so their log partitions, and every log partition got entries.
TEST(FormatFixtureGeneratorTest, V4UsersAreInTheLogPartitionsTheReadmeStates) {
  const std::vector<std::pair<std::string, uint32_t>> partitions = {
      {"plain", 1785},         {"solo", 3967},         {"mixed", 3797},         {"caps", 2622},
      {"seen", 1057},          {"fmaster", 480},       {"fmember1", 3885},      {"fmember2", 821},
      {"dropped-fields", 772}, {"erased-fields", 358}, {"lapsed-fields", 3334}, {"log-only", 3569},
      {"log-fields", 2278},    {"log-seg", 2203},      {"master-cf", 3118},     {"member-cf1", 700},
      {"erased-cf", 984},      {"log-fade", 3237},
  };
  for (const auto& [user, partition] : partitions) {
    EXPECT_EQ(PartitionOf(user), partition) << user;
  }
  // The log partitions of the records phase b wrote (README.md, "Records"):
  // a linked user's field write is logged under its master.
  const std::vector<std::pair<std::string, uint32_t>> logged = {
      {"fmaster", 0},    {"member-cf1", 0}, {"erased-cf", 0}, {"log-only", 1}, {"log-fade", 1},
      {"log-fields", 2}, {"master-cf", 2},  {"solo", 3},      {"log-seg", 3},
  };
  std::set<uint32_t> log_partitions;
  for (const auto& [user, l] : logged) {
    EXPECT_EQ(PartitionOf(user) % 4, l) << user;
    log_partitions.insert(l);
  }
  EXPECT_EQ(log_partitions.size(), 4u);
  for (uint32_t id : {1u, 17u}) {
    EXPECT_EQ(profile::FieldNames::Key(id), NameKeyAsWritten(id)) << id;
  }
}

GetOptions AllFields() {
  GetOptions o;
  o.fields.mode = FieldSelection::Mode::kAll;
  return o;
}
GetOptions FieldsNamed(std::vector<std::string> names) {
  GetOptions o;
  o.fields.mode = FieldSelection::Mode::kNames;
  o.fields.names = std::move(names);
  return o;
}
GetOptions FieldPrefix(std::string prefix) {
  GetOptions o;
  o.fields.mode = FieldSelection::Mode::kPrefix;
  o.fields.prefix = std::move(prefix);
  return o;
}

// What a get of `e` answers without `own`: its group's merged view and its
// master's fields, or its own profile alone; with `fields`, the fields
// (none otherwise).
void ExpectGetAnswerV4(const Result<GetResult>& got, const ExpectedV4& e,
                       const std::vector<ExpectedGroupV4>& groups, bool fields) {
  ASSERT_NO_FATAL_FAILURE(ExpectGetAnswer(got, e, groups));
  const ExpectedGroupV4* g = e.master.empty() ? nullptr : GroupOf(groups, e.master);
  const std::vector<Field>& live = g != nullptr ? g->fields : e.own_fields;
  EXPECT_TRUE(got->fields == (fields ? live : std::vector<Field>{})) << e.user;
}

// Every statement of "What a get must answer", through `r`.
void ExpectV4Answers(const LinkReader& r, const std::string& when) {
  SCOPED_TRACE(when);
  const std::vector<ExpectedGroupV4> groups = FormatV4Groups();
  GetOptions own = AllFields();
  own.own_only = true;
  for (const ExpectedV4& e : FormatV4Users(false)) {
    // Without fields: the answer of a release before fields; with them, the
    // live ones (a linked user's: its master's).
    ExpectGetAnswerV4(r.get(e.user, {}), e, groups, false);
    ExpectGetAnswerV4(r.get(e.user, AllFields()), e, groups, true);
    // Its own profile alone, its own fields.
    Result<GetResult> mine = r.get(e.user, own);
    ASSERT_TRUE(mine.ok()) << e.user << ": " << mine.status().ToString();
    EXPECT_TRUE(mine->ToSegments() == e.own) << e.user;
    EXPECT_EQ(mine->master, "") << e.user;
    EXPECT_TRUE(mine->fields == e.own_fields) << e.user;

    ASSERT_NO_FATAL_FAILURE(ExpectCountAndLinks(r, e, groups));
  }
  for (const std::string& user : FormatV4NotFound()) {
    EXPECT_TRUE(r.get(user, {}).status().IsNotFound()) << user;
    EXPECT_TRUE(r.get(user, AllFields()).status().IsNotFound()) << user;
    EXPECT_TRUE(r.get(user, own).status().IsNotFound()) << user;
    EXPECT_TRUE(r.master_of(user).status().IsNotFound()) << user;
  }
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"fmember1", "fmember2"}, {"fmaster", "fmember2"}, {"member-cf1", "master-cf"}}) {
    Result<bool> got = r.connected(a, b);
    ASSERT_TRUE(got.ok()) << a << ", " << b << ": " << got.status().ToString();
    EXPECT_TRUE(*got) << a << ", " << b;
  }
  Result<bool> apart = r.connected("fmember1", "member-cf1");
  ASSERT_TRUE(apart.ok()) << apart.status().ToString();
  EXPECT_FALSE(*apart);
  // The name table's records are no profiles: a get of their keys is refused.
  for (uint32_t id : {1u, 17u}) {
    Result<GetResult> refused = r.get(NameKeyAsWritten(id), AllFields());
    EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument)
        << id << ": " << refused.status().ToString();
  }

  using V = FieldValue;
  // Fields by name: the live ones among those named, each once.
  Result<GetResult> got = r.get("solo", FieldsNamed({"visits", "country", "absent", "country"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->count, 0u);
  EXPECT_TRUE(got->ids.empty());
  EXPECT_TRUE(got->fields ==
              (std::vector<Field>{F("country", V::String("FR")), F("visits", V::Int(10))}));
  // Expired fields are never answered, by name or by prefix.
  got = r.get("mixed", FieldsNamed({"flash", "cap:day", "score"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields == (std::vector<Field>{F("score", V::Double(-1.5), 4000003600)}));
  got = r.get("mixed", FieldPrefix("cap:"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields.empty());
  EXPECT_EQ(got->count, 2u);
  // A deleted field is no field.
  got = r.get("mixed", FieldsNamed({"tier"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields.empty());
  got = r.get("log-fields", FieldsNamed({"visits", "region"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields == (std::vector<Field>{F("region", V::String("north"))}));
  // A prefix: the counters.
  got = r.get("caps", FieldPrefix("cap:c7"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields ==
              (std::vector<Field>{F("cap:c77", V::Int(2), kC77), F("cap:c78", V::Int(2), kC78),
                                  F("cap:c79", V::Int(-5))}));
  got = r.get("caps", FieldPrefix("cap:c77"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields == (std::vector<Field>{F("cap:c77", V::Int(2), kC77)}));
  got = r.get("solo", FieldPrefix(""));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->fields.size(), 7u);
  // A linked user's fields are its master's: the group's counter, by any
  // of its users; its own only with own.
  for (const std::string user : {"fmaster", "fmember1", "fmember2"}) {
    got = r.get(user, FieldPrefix("cap:"));
    ASSERT_TRUE(got.ok()) << user << ": " << got.status().ToString();
    EXPECT_TRUE(got->fields == (std::vector<Field>{F("cap:group", V::Int(3), kGroup)})) << user;
  }
  got = r.get("fmember2", FieldsNamed({"own_note"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields.empty());
  GetOptions own_note = FieldsNamed({"own_note"});
  own_note.own_only = true;
  got = r.get("fmember2", own_note);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields == (std::vector<Field>{F("own_note", V::String("mine"))}));
  // The segment options do not apply to fields.
  GetOptions counted = AllFields();
  counted.count_only = true;
  got = r.get("member-cf1", counted);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->count, 2u);
  EXPECT_TRUE(got->ids.empty());
  EXPECT_TRUE(got->fields == MasterCfFields());
  GetOptions limited = AllFields();
  limited.limit = 1;
  limited.id_from = 101;
  got = r.get("fmember1", limited);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->count, 2u);
  EXPECT_TRUE(got->ToSegments() == (std::vector<Segment>{Seg(101, kNever)}));
  EXPECT_TRUE(got->fields == FmasterFields());

  // Every user in one batch get with fields, answers in the order asked.
  std::vector<std::string> users;
  const std::vector<ExpectedV4> expected = FormatV4Users(false);
  for (const ExpectedV4& e : expected) users.push_back(e.user);
  for (const std::string& user : FormatV4NotFound()) users.push_back(user);
  Result<std::vector<Result<GetResult>>> batch = r.batch_get(users, AllFields());
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    if (i < expected.size()) {
      ExpectGetAnswerV4((*batch)[i], expected[i], groups, true);
    } else {
      EXPECT_TRUE((*batch)[i].status().IsNotFound()) << users[i];
    }
  }
}

// The raw records: each user's codec, log position, reference, group
// section and fields section as stored, its segments; tombstones, the void
// record and never-written users have none; the name table's records and
// the checkpoint records as stated.
void ExpectV4Records(storage::Worker& w, bool swept, const std::string& when) {
  SCOPED_TRACE(when);
  for (const ExpectedV4& e : FormatV4Users(swept)) {
    Result<storage::Record> r = w.GetSync(e.user);
    ASSERT_TRUE(r.ok()) << e.user << ": " << r.status().ToString();
    profile::Columns columns;
    ASSERT_NO_FATAL_FAILURE(ExpectUserRecord(*r, e, &columns));
    EXPECT_EQ(profile::HasFieldSection(r->body()), !e.stored.empty()) << e.user;
    std::vector<profile::StoredField> stored;
    if (!e.stored.empty()) {
      ASSERT_TRUE(profile::DecodeFieldSection(columns.fields, &stored).ok()) << e.user;
    } else {
      EXPECT_TRUE(columns.fields.empty()) << e.user;
    }
    EXPECT_TRUE(stored == e.stored) << e.user;
  }
  for (const std::string& user : FormatV4NotFound()) {
    Result<storage::Record> r = w.GetSync(user);
    EXPECT_TRUE(r.status().IsNotFound()) << user << ": " << r.status().ToString();
  }
  const std::vector<std::string> names = FormatV4Names();
  for (uint32_t id = 1; id <= names.size(); ++id) {
    Result<storage::Record> r = w.GetSync(NameKeyAsWritten(id));
    ASSERT_TRUE(r.ok()) << "name " << id << ": " << r.status().ToString();
    EXPECT_EQ(r->body(), std::string(1, '\x01') + names[id - 1]) << "name " << id;
  }
  for (uint32_t id : {0u, 18u, 19u, 256u}) {
    EXPECT_TRUE(w.GetSync(NameKeyAsWritten(id)).status().IsNotFound()) << "name " << id;
  }
  ExpectCheckpoints(w, FormatV4Checkpoints());
}

// The name table a ProfileStore loaded from the fixture: the 17 names by
// number; the names past the table's limit have none.
void ExpectV4NameTable(const profile::ProfileStore& profiles) {
  const profile::FieldNames& table = profile::FieldNamesOf(profiles);
  const std::vector<std::string> names = FormatV4Names();
  EXPECT_EQ(table.size(), names.size());
  for (uint32_t id = 1; id <= names.size(); ++id) {
    EXPECT_EQ(table.Name(id), names[id - 1]) << id;
    EXPECT_EQ(table.Find(names[id - 1]), id) << names[id - 1];
  }
  for (const char* inline_only : {"cap:group", "segment_src", "region", "cap:c90"}) {
    EXPECT_EQ(table.Find(inline_only), 0u) << inline_only;
  }
}

class FormatFixtureV4Test : public FixtureFileTest {
 protected:
  FormatFixtureV4Test() : FixtureFileTest(kFixtureV4) {}
};

// The fixture is the file its README describes, written in format version 4:
// a fixture is never regenerated.
TEST_F(FormatFixtureV4Test, V4FixtureIsTheFileItsReadmeDescribes) {
  ExpectTheFileItsReadmeDescribes(kFormatV4Sha256, 4);
}

// (a0) Version 4 is this build's (v = W): it opens as it is, with no
// upgrade; recovery finds what the README says; and reads through every
// layer with the sweeper and defragmentation off leave every byte as it was.
// (A build writing version 5 upgrades it instead: then as V3's test.)
TEST_F(FormatFixtureV4Test, V4OpensAsItIsAndReadsRewriteNothing) {
  static_assert(storage::kFormatVersion == 4);
  storage::StoreOptions quiet = StoreOptionsFor(data_);
  quiet.background_defrag = false;
  {
    Opened opened;
    ASSERT_NO_FATAL_FAILURE(OpenStore(quiet, &opened));
    ExpectRecovery(*opened.store, {.blocks_in_use = 7,
                                   .records_scanned = 93,
                                   // 14 users' records, 17 names, 4 checkpoints; 3
                                   // tombstones and lapsed-fields' void record.
                                   .live_records = 35,
                                   .tombstones = 4,
                                   // fmember1, fmember2 and member-cf1 name their masters.
                                   .index_references = 3});
    ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, NoSweeper()));
    ExpectV4NameTable(*opened.profiles);
    ExpectV4Answers(ReaderOf(opened.session.get()), "read only");
    ExpectV4Records(opened.session->worker(), /*swept=*/false, "read only");
  }
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), 4u);
  EXPECT_EQ(Sha256Hex(storage::testing::FileBytes(data_)), kFormatV4Sha256)
      << "reading changed the file";
}

// (a) The storage and profile layers of this build, in process: every
// answer and every record as stated; again after the expiry sweeper
// rewrote what it wanted (nothing a reader sees changes); again after a
// restart on what this build wrote.
TEST_F(FormatFixtureV4Test, V4EveryUserAnswersAsStatedWithItsRecord) {
  for (int round = 0; round < 2; ++round) {
    Opened opened;
    ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptionsFor(data_), &opened));
    EXPECT_EQ(opened.store->recovery().damaged_regions, 0u);
    ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, NoSweeper()));  // swept by hand below
    profile::ProfileSession* s = opened.session.get();
    const std::string when = round == 0 ? "as opened" : "reopened after this build wrote to it";
    ExpectV4Answers(ReaderOf(s), when);
    ExpectV4Records(s->worker(), /*swept=*/round == 1, when);

    if (round == 0) {
      ExpectV4NameTable(*opened.profiles);
      // The sweeper drops the expired fields: mixed's two, log-fade's one.
      ASSERT_TRUE(opened.profiles->SweepNow().ok());
      EXPECT_EQ(opened.profiles->sweeper_stats().records_rewritten, 2u);
      EXPECT_EQ(opened.profiles->sweeper_stats().records_deleted, 0u);
      EXPECT_EQ(opened.profiles->sweeper_stats().fields_removed, 3u);
      ExpectV4Answers(ReaderOf(s), "after the sweeper ran");
      ExpectV4Records(s->worker(), /*swept=*/true, "after the sweeper ran");
    }
  }
}

// The expired fields as written: still in mixed's and log-fade's records,
// with their expiries, and never answered; lapsed-fields, whose every field
// expired, is no profile and its record is void.
TEST_F(FormatFixtureV4Test, V4ExpiredFieldsAreInTheRecordsAndHidden) {
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptionsFor(data_), &opened));
  {
    auto worker = opened.store->NewWorker();
    ASSERT_TRUE(worker.ok()) << worker.status().ToString();
    for (const auto& [user, expired] :
         std::vector<std::pair<std::string, std::vector<profile::StoredField>>>{
             {"mixed",
              {Numbered(10, FieldValue::String("gone-soon"), kFlash),
               Inline("cap:day", FieldValue::Int(1), kDay)}},
             {"log-fade", {Numbered(10, FieldValue::String("gone-soon"), kLogFlash)}}}) {
      Result<storage::Record> r = (*worker)->GetSync(user);
      ASSERT_TRUE(r.ok()) << user << ": " << r.status().ToString();
      profile::Columns c;
      ASSERT_TRUE(profile::DecodeColumns(r->body(), &c).ok()) << user;
      std::vector<profile::StoredField> stored;
      ASSERT_TRUE(profile::DecodeFieldSection(c.fields, &stored).ok()) << user;
      for (const profile::StoredField& f : expired) {
        EXPECT_NE(std::find(stored.begin(), stored.end(), f), stored.end()) << user;
      }
    }
    EXPECT_TRUE((*worker)->GetSync("lapsed-fields").status().IsNotFound());
    worker->reset();
  }
  ASSERT_NO_FATAL_FAILURE(OpenProfiles(&opened, NoSweeper()));
  profile::ProfileSession* s = opened.session.get();
  Result<GetResult> got = s->GetSync("mixed", FieldsNamed({"flash", "cap:day"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields.empty());
  got = s->GetSync("log-fade", AllFields());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields.empty());
  EXPECT_TRUE(got->ToSegments() == (std::vector<Segment>{Seg(500, kNever)}));
  EXPECT_TRUE(s->GetSync("lapsed-fields", AllFields()).status().IsNotFound());
  EXPECT_TRUE(s->CountSync("lapsed-fields").status().IsNotFound());
}

// (b) The daemon of this build on the fixture as a single server (no
// cluster sections): every answer over the wire, fields typed as written;
// nothing to upgrade; and what it leaves, once swept, is the records as
// stated.
TEST_F(FormatFixtureV4Test, V4ServedByTheDaemonAnswersOverTheWire) {
  Served served(dir_, data_);
  ASSERT_NO_FATAL_FAILURE(served.Connect());
  client::Client* c = served.client.get();
  ExpectV4Answers(ReaderOf(c), "over the wire");
  // The wire answer says fields were asked, even when none is live.
  Result<GetResult> got = c->Get("log-fade", AllFields());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fields_asked);
  EXPECT_TRUE(got->fields.empty());
  got = c->Get("solo");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->fields_asked);
  const std::string log = served.Stop();
  EXPECT_FALSE(Has(log, "upgraded")) << log;
  EXPECT_EQ(storage::testing::SuperblockVersion(data_), 4u);

  // What the single server left (its sweeper may have run): once swept, the
  // same answers and the records as stated.
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenAll(StoreOptionsFor(data_), NoSweeper(), &opened));
  ASSERT_TRUE(opened.profiles->SweepNow().ok());
  ExpectV4Answers(ReaderOf(opened.session.get()), "after the daemon");
  ExpectV4Records(opened.session->worker(), /*swept=*/true, "after the daemon");
}

// (c) The fixture claiming a newer version is refused by Store::Open and by
// segstored, naming both versions, and left untouched; put back to version
// 4, it is the fixture again, byte for byte, and answers as stated.
TEST_F(FormatFixtureV4Test, V4ClaimingANewerVersionIsRefusedUntouched) {
  ExpectANewerVersionRefusedUntouched();
  PutBackToVersion(4, kFormatV4Sha256);
  Opened opened;
  ASSERT_NO_FATAL_FAILURE(OpenAll(StoreOptionsFor(data_), NoSweeper(), &opened));
  ExpectV4Answers(ReaderOf(opened.session.get()), "after the refusal");
  ExpectV4Records(opened.session->worker(), /*swept=*/false, "after the refusal");
}

}  // namespace
}  // namespace segstore::server
