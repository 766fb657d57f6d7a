// The expiry sweeper rewrites a record without its expired segments
// (ProfileSessionImpl::SweepAt); the rewrite must keep the log position the
// record remembers (codec version 2, src/profile/codec.h), or a restart that
// replays the cluster log would apply again an entry the record already holds.
// A record without a position stays version 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "profile/codec.h"
#include "profile/segment_ops.h"
#include "profile/test_util.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::profile {
namespace {

constexpr UnixSeconds kStart = 1'790'000'000;
constexpr UnixSeconds kHour = 3600;

using testing::TempDir;

// 8 segments expiring an hour apart from kStart + 1h, and 2 that never do.
std::vector<Segment> Profile() {
  std::vector<Segment> out;
  for (uint64_t i = 0; i < 8; ++i) {
    out.push_back(Segment{10 + i, static_cast<UnixSeconds>(kStart + kHour * (i + 1)), {}, {}});
  }
  out.push_back(Segment{100, kNever, 7u, {}});
  out.push_back(Segment{101, kNever, {}, {}});
  return out;
}

TEST(SweeperPositionTest, ASweptRecordKeepsItsLogPosition) {
  TempDir dir;
  ManualClock clock(kStart);
  storage::StoreOptions so;
  so.path = dir.File("data");
  so.file_size = 16u << 20;
  so.write_block_size = 64u << 10;
  so.background_defrag = false;
  so.clock = &clock;
  auto engine = storage::Store::Open(so);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ProfileOptions po;
  po.sweeper = false;  // passes run by SweepNow
  po.sweep_share = 0.25;
  auto profiles = ProfileStore::Open(engine->get(), po);
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();

  // Written as a cluster node writes them (a version-2 body), and one as a
  // single server does (version 1), straight through the engine.
  const std::vector<Segment> segments = Profile();
  const RecordTimes times = TimesFor(segments, po.sweep_share);
  ASSERT_NE(times.sweep_at, 0u);
  auto worker = (*engine)->NewWorker();
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  constexpr uint64_t kPosition = (uint64_t{1} << 40) + 17;
  std::string body;
  EncodeSegments(segments, kPosition, &body);
  ASSERT_EQ(body[0], char(2));
  ASSERT_TRUE((*worker)->PutSync("clustered", body, times.sweep_at, times.void_at).ok());
  EncodeSegments(segments, &body);
  ASSERT_TRUE((*worker)->PutSync("single", body, times.sweep_at, times.void_at).ok());

  // Three segments expire: past a quarter of them, both records are due.
  clock.Set(kStart + 3 * kHour);
  ASSERT_TRUE((*profiles)->SweepNow().ok());
  const SweeperStats st = (*profiles)->sweeper_stats();
  EXPECT_EQ(st.records_rewritten, 2u);
  EXPECT_EQ(st.segments_removed, 6u);

  const std::vector<Segment> live(segments.begin() + 3, segments.end());
  for (const char* user : {"clustered", "single"}) {
    SCOPED_TRACE(user);
    auto rec = (*worker)->GetSync(user);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    Columns c;
    ASSERT_TRUE(DecodeColumns(rec->body(), &c).ok());
    ASSERT_EQ(c.size(), live.size()) << "not rewritten";
    for (size_t i = 0; i < live.size(); ++i) EXPECT_EQ(c.At(i), live[i]) << i;
    const bool clustered = std::string(user) == "clustered";
    EXPECT_EQ(c.log_position, clustered ? kPosition : 0u);
    EXPECT_EQ(*DecodeLogPosition(rec->body()), clustered ? kPosition : 0u);
    EXPECT_EQ(rec->body()[0], clustered ? char(2) : char(1));
  }
  // What readers see is unchanged.
  auto session = (*profiles)->NewSession();
  ASSERT_TRUE(session.ok());
  auto got = (*session)->GetSync("clustered");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->ToSegments(), live);
  session->reset();
  worker->reset();
  profiles->reset();
}

}  // namespace
}  // namespace segstore::profile
