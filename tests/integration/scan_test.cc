// scan (proto/PROTOCOL.md, "scan"), in process: a single server answers
// every partition's profiles, decoded, page by page within the asked size;
// a cluster node answers the partitions it serves and WrongNode (with the
// map's revision) or Busy for the others; bad requests get their errors.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cluster/view.h"
#include "common/clock.h"
#include "integration/in_process.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "segstore/routing.h"
#include "server/raw_conn.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using testing::Frame;
using testing::MakeFrame;
using testing::RawConn;

constexpr UnixSeconds kStart = 1'790'000'000;

class ScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_, 128u << 20);
    profile::ProfileOptions p;
    p.sweeper = false;
    ProfileServiceOptions so;
    so.cluster = cluster_ ? &board_ : nullptr;
    ServerOptions server;
    server.threads = 2;
    if (max_frame_bytes_ != 0) {
      so.max_frame_bytes = max_frame_bytes_;
      server.max_frame_bytes = max_frame_bytes_;
    }
    served_.Start(o, nullptr, p, so, server);
  }
  void TearDown() override { served_.Stop(); }

  // Every page of `partition`, each at most `max_bytes` (0: the server's).
  Result<std::vector<ScannedProfile>> ScanAll(client::Client& c, uint32_t partition,
                                              uint32_t max_bytes, size_t* pages = nullptr) {
    std::vector<ScannedProfile> all;
    ScanRequest req{partition, 0, max_bytes};
    for (int i = 0; i < 100000; ++i) {
      Result<ScanResponse> page = c.Scan(req);
      if (!page.ok()) return page.status();
      if (pages != nullptr) ++*pages;
      if (max_bytes != 0 && page->profiles.size() > 1) {
        std::string body;
        proto::Encode(*page, &body);
        EXPECT_LE(body.size(), max_bytes);
      }
      EXPECT_GT(page->cursor, req.cursor);
      for (ScannedProfile& p : page->profiles) all.push_back(std::move(p));
      if (page->finished()) return all;
      req.cursor = page->cursor;
    }
    return Status::Internal("no end");
  }

  bool cluster_ = false;
  uint32_t max_frame_bytes_ = 0;  // 0: the default
  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  cluster::ViewBoard board_;
  testing::InProcessServer served_;
};

SegmentUpdate Seg(uint64_t id, uint32_t expires, std::optional<uint32_t> a1 = {},
                  std::optional<uint32_t> a2 = {}) {
  SegmentUpdate s;
  s.id = id;
  s.value = expires;
  s.attr1 = a1;
  s.attr2 = a2;
  return s;
}

TEST_F(ScanTest, EveryLiveProfileComesOnceDecodedWithItsFieldsAndLinks) {
  auto c = served_.Connect();
  ASSERT_NE(c, nullptr);
  // 200 users with segments; some with attributes, fields, links, an
  // expiring segment; one deleted; one whose only segment expires.
  std::map<std::string, ScannedProfile> want;
  for (int i = 0; i < 200; ++i) {
    const std::string user = "user-" + std::to_string(i);
    std::vector<SegmentUpdate> segs = {Seg(10 + i, kStart + 7200, i % 3 == 0 ? 5u : 0u),
                                       Seg(1000, 0, {}, i % 5 == 0 ? std::optional<uint32_t>(9)
                                                                   : std::nullopt),
                                       Seg(5, kStart + 100)};
    if (i % 3 != 0) segs[0].attr1.reset();
    ASSERT_TRUE(c->Upsert(user, segs).ok());
    ScannedProfile& p = want[user];
    p.user = user;
    p.segments = {Segment{10 + static_cast<uint64_t>(i), kStart + 7200, segs[0].attr1, {}},
                  Segment{1000, kNever, {}, segs[1].attr2}};
    if (i < 5) {  // segment 5 expires below, except... it expires for all
    }
    if (i % 4 == 0) {
      std::vector<FieldUpdate> f = {{"cap:1", FieldValue::Int(-3), 0, false},
                                    {"country", FieldValue::String("FR"), kStart + 9000, false},
                                    {"seen", FieldValue::Time(kStart - 10), 0, false},
                                    {"score", FieldValue::Double(0.5), 0, false},
                                    {"raw", FieldValue::Bytes(std::string("\x00\xff", 2)), 0,
                                     false}};
      ASSERT_TRUE(c->FieldSet(user, f).ok());
      p.fields = {{"cap:1", FieldValue::Int(-3), kNever},
                  {"country", FieldValue::String("FR"), kStart + 9000},
                  {"raw", FieldValue::Bytes(std::string("\x00\xff", 2)), kNever},
                  {"score", FieldValue::Double(0.5), kNever},
                  {"seen", FieldValue::Time(kStart - 10), kNever}};
    }
  }
  // Links: user-1 and user-2 are members of user-0's group.
  ASSERT_TRUE(c->Link("user-1", "user-0", 0).ok());
  ASSERT_TRUE(c->Link("user-2", "user-0", 3600).ok());
  want["user-1"].master = "user-0";
  want["user-2"].master = "user-0";
  want["user-2"].link_expires = kStart + 3600;
  want["user-0"].members = {{"user-1", kNever}, {"user-2", kStart + 3600}};
  // A user of fields alone, one deleted, one whose segments all expire.
  ASSERT_TRUE(c->FieldSet("fields-only", std::vector<FieldUpdate>{{"n", FieldValue::Int(1), 0, false}})
                  .ok());
  want["fields-only"] = ScannedProfile{"fields-only", {}, {{"n", FieldValue::Int(1), kNever}}};
  ASSERT_TRUE(c->Upsert("gone", std::vector<SegmentUpdate>{Seg(1, 0)}).ok());
  ASSERT_TRUE(c->Delete("gone").ok());
  ASSERT_TRUE(c->Upsert("expiring", std::vector<SegmentUpdate>{Seg(1, kStart + 50)}).ok());
  clock_.Advance(200);  // segment 5 of every user and "expiring" are expired now

  std::map<std::string, ScannedProfile> got;
  size_t pages = 0;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    Result<std::vector<ScannedProfile>> all = ScanAll(*c, p, 600, &pages);
    ASSERT_TRUE(all.ok()) << p << ": " << all.status().ToString();
    for (ScannedProfile& s : *all) {
      EXPECT_EQ(PartitionOf(s.user), p) << s.user;
      EXPECT_FALSE(got.contains(s.user)) << s.user << " twice";
      got[s.user] = std::move(s);
    }
  }
  EXPECT_GE(pages, kPartitions);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [user, p] : want) {
    ASSERT_TRUE(got.contains(user)) << user;
    EXPECT_EQ(got[user], p) << user;
  }
}

TEST_F(ScanTest, PagesKeepToTheirSizeAndTheCursorEnds) {
  auto c = served_.Connect();
  ASSERT_NE(c, nullptr);
  // Many users in one partition (a hash tag), each about 100 bytes decoded.
  std::vector<SegmentUpdate> segs;
  for (uint64_t id = 1; id <= 8; ++id) segs.push_back(Seg(id * 1000, 0));
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(c->Upsert("{t}" + std::to_string(i), segs).ok());
  }
  const uint32_t p = PartitionOf("{t}");
  size_t pages = 0;
  Result<std::vector<ScannedProfile>> all = ScanAll(*c, p, 1000, &pages);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), 300u);
  EXPECT_GE(pages, 20u);  // 300 profiles of ~100 bytes, 1000 bytes a page
  // A max_bytes smaller than one profile: one profile a page.
  pages = 0;
  all = ScanAll(*c, p, 1, &pages);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 300u);
  EXPECT_GE(pages, 300u);
  // The server's own page size: all in one page or a few.
  pages = 0;
  all = ScanAll(*c, p, 0, &pages);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 300u);
  EXPECT_LE(pages, 3u);
  // The end cursor: one empty, finished page. An empty partition: the same.
  Result<ScanResponse> end = c->Scan(ScanRequest{p, kScanFinished, 0});
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->finished());
  EXPECT_TRUE(end->profiles.empty());
  uint32_t empty = 0;
  while (empty == p) ++empty;
  end = c->Scan(ScanRequest{empty, 0, 0});
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->finished());
  EXPECT_TRUE(end->profiles.empty());
  EXPECT_FALSE(end->stale);
}

class SmallFrameScanTest : public ScanTest {
 protected:
  SmallFrameScanTest() { max_frame_bytes_ = 64u << 10; }
};

// A client's max_bytes never makes the server build a page over half its
// max_frame_bytes (PROTOCOL.md, "scan": the page cap).
TEST_F(SmallFrameScanTest, AMaxBytesOverTheCapIsReadAsTheCap) {
  auto c = served_.Connect();
  ASSERT_NE(c, nullptr);
  std::vector<SegmentUpdate> segs;
  for (uint64_t id = 1; id <= 100; ++id) segs.push_back(Seg((uint64_t{1} << 40) + id, 0));
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(c->Upsert("{t}" + std::to_string(i), segs).ok());
  }
  const uint32_t p = PartitionOf("{t}");
  constexpr uint32_t kCap = 32u << 10;
  for (const uint32_t asked : {uint32_t{16} << 20, uint32_t{0xffffffff}, uint32_t{0}}) {
    SCOPED_TRACE(asked);
    ScanRequest req{p, 0, asked};
    size_t users = 0, pages = 0;
    while (true) {
      Result<ScanResponse> page = c->Scan(req);
      ASSERT_TRUE(page.ok()) << page.status().ToString();
      ++pages;
      std::string body;
      proto::Encode(*page, &body);
      if (page->profiles.size() > 1) {
        EXPECT_LE(body.size(), kCap);
      }
      users += page->profiles.size();
      if (page->finished()) break;
      req.cursor = page->cursor;
    }
    EXPECT_EQ(users, 300u);
    EXPECT_GE(pages, 8u);  // 300 profiles of over 1 KB, 32 KiB a page
  }
}

TEST_F(ScanTest, BadRequestsAreRefusedAndTheConnectionStaysUsable) {
  RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  const auto send = [&](const std::string& body) {
    EXPECT_TRUE(raw.Write(MakeFrame(static_cast<uint8_t>(proto::Op::kScan), 9, body)));
    Frame f;
    EXPECT_EQ(raw.ReadFrame(&f), RawConn::ReadResult::kFrame);
    return std::make_pair(f.status(), proto::DecodeError(f.body));
  };
  std::string body;
  proto::Encode(ScanRequest{4096, 0, 0}, &body);
  auto [code, message] = send(body);
  EXPECT_EQ(code, Status::Code::kInvalidArgument);
  EXPECT_EQ(message, "scan: partition: 4096 is not a partition (0 to 4095)");
  body.clear();
  proto::Encode(ScanRequest{1, kScanFinished + 1, 0}, &body);
  std::tie(code, message) = send(body);
  EXPECT_EQ(code, Status::Code::kInvalidArgument);
  EXPECT_EQ(message, "scan: cursor: 4294967297 is past the end of a partition (2^32)");
  std::tie(code, message) = send("");  // no partition
  EXPECT_EQ(code, Status::Code::kInvalidArgument);
  EXPECT_EQ(message, "scan: partition: missing");
  std::tie(code, message) = send("\x81\xa9partition\x01");  // no cursor
  EXPECT_EQ(code, Status::Code::kInvalidArgument);
  EXPECT_EQ(message, "scan: cursor: missing");
  std::tie(code, message) = send("\x82\xa9partition\x01\xa6" "cursor\xff");  // negative
  EXPECT_EQ(code, Status::Code::kInvalidArgument);
  EXPECT_EQ(message, "scan: cursor: must not be negative");
  body.clear();
  proto::Encode(ScanRequest{1, 0, 0}, &body);
  std::tie(code, message) = send(body);
  EXPECT_EQ(code, Status::Code::kOk);
}

class ClusterScanTest : public ScanTest {
 protected:
  void SetUp() override {
    cluster_ = true;
    ScanTest::SetUp();
  }
};

TEST_F(ClusterScanTest, ANodeScansThePartitionsItServesOnly) {
  auto c = served_.Connect();
  ASSERT_NE(c, nullptr);
  // Serving nothing yet: Busy.
  Result<ScanResponse> r = c->Scan(ScanRequest{0, 0, 0});
  EXPECT_EQ(r.status().code(), Status::Code::kBusy) << r.status().ToString();
  // "a" holds the even partitions.
  ClusterMap m;
  m.cluster = true;
  m.revision = 42;
  m.replication = 1;
  m.nodes = {{"a", "127.0.0.1:7001", "r1"}, {"b", "127.0.0.1:7002", "r2"}};
  for (uint32_t p = 0; p < kPartitions; ++p) m.replicas.push_back(p % 2);
  auto v = std::make_shared<cluster::ClusterView>();
  v->map = m;
  v->map.self = "a";
  v->serving = true;
  for (uint32_t p = 0; p < kPartitions; p += 2) v->held.set(p);
  board_.Publish(v);
  std::string mine;
  for (int i = 0; mine.empty(); ++i) {
    const std::string u = "u" + std::to_string(i);
    if (PartitionOf(u) % 2 == 0) mine = u;
  }
  ASSERT_TRUE(c->Upsert(mine, std::vector<SegmentUpdate>{Seg(3, 0)}).ok());
  Result<std::vector<ScannedProfile>> all = ScanAll(*c, PartitionOf(mine), 0);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].user, mine);
  r = c->Scan(ScanRequest{PartitionOf(mine) + 1, 0, 0});
  EXPECT_EQ(r.status().code(), Status::Code::kWrongNode) << r.status().ToString();
  EXPECT_NE(r.status().message().find("scan: partition " + std::to_string(PartitionOf(mine) + 1) +
                                      " is not held by this node (map revision 42); ask "
                                      "cluster_map"),
            std::string::npos)
      << r.status().ToString();
  // On the wire: the revision in the body.
  RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  std::string body;
  proto::Encode(ScanRequest{1, 0, 0}, &body);
  ASSERT_TRUE(raw.Write(MakeFrame(static_cast<uint8_t>(proto::Op::kScan), 5, body)));
  Frame f;
  ASSERT_EQ(raw.ReadFrame(&f), RawConn::ReadResult::kFrame);
  EXPECT_EQ(f.status(), Status::Code::kWrongNode);
  EXPECT_EQ(proto::DecodeErrorRevision(f.body), 42u);
}

}  // namespace
}  // namespace segstore::server
