// `segctl export` against the whole server in process: the files it writes
// load (`segctl load`, `--fields`, `--links`) into an empty server, whose
// export is the same, byte for byte (segments, fields, links); grouped
// files; a partition range and a prefix; what a file cannot hold is left
// out and said (exit status 1); a server that is gone stops it (2).
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <vector>

#include "common/clock.h"
#include "integration/daemon.h"
#include "integration/in_process.h"
#include "segstore/client.h"
#include "segstore/routing.h"
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

class ExportTest : public ::testing::Test {
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
  }
  void TearDown() override {
    for (auto& s : served_) s.Stop();
  }
  uint16_t port(int i) const { return served_[i].server->port(); }

  // Users with segments (attributes, never-expiring), fields of every
  // type, users of fields alone, links; IDs with commas, quotes and bytes
  // that are not text.
  void Fill(client::Client& c, bool attrs) {
    for (int i = 0; i < 300; ++i) {
      const std::string user = (i % 7 == 0 ? "q\"u,ser-" : "user-") + std::to_string(i);
      std::vector<SegmentUpdate> segs;
      for (uint64_t k = 0; k < static_cast<uint64_t>(1 + i % 4); ++k) {
        SegmentUpdate s;
        s.id = 100 * k + static_cast<uint64_t>(i);
        s.value = k == 0 ? kNever : kLater + static_cast<uint32_t>(k * 3600 + i);
        if (attrs && k == 1) s.attr1 = static_cast<uint32_t>(i);
        if (attrs && k == 2) s.attr2 = 7;
        segs.push_back(s);
      }
      ASSERT_TRUE(c.Upsert(user, segs).ok());
      if (i % 5 == 0) {
        std::vector<FieldUpdate> f = {
            {"cap:7", FieldValue::Int(-42), kLater, false},
            {"country", FieldValue::String("F\"R\tx"), 0, false},
            {"raw", FieldValue::Bytes(std::string("\x00\xff\n", 3)), 0, false},
            {"score", FieldValue::Double(0.1), 0, false},
            {"big", FieldValue::Double(1e300), 0, false},
            {"seen", FieldValue::Time(1234567890), 0, false},
            {"#odd\tname", FieldValue::Int(1), 0, false}};
        ASSERT_TRUE(c.FieldSet(user, f).ok());
      }
    }
    ASSERT_TRUE(
        c.FieldSet(std::string("\xc3\x28") + "-fields-only",
                   std::vector<FieldUpdate>{{"n", FieldValue::Int(3), 0, false}})
            .ok());
    ASSERT_TRUE(c.Link("user-1", "user-2", 0).ok());
    ASSERT_TRUE(c.Link("user-3", "user-2", 0).ok());
    ASSERT_TRUE(c.Link("user-4", "user-5", 0).ok());
    ASSERT_TRUE(c.Link("link-only", "user-5", 0).ok());
  }

  std::string Export(int server, const std::string& dir, const std::string& more = "") {
    auto [rc, out] = Segctl(port(server), "export --no-progress --out " + dir + " " + more);
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
  void Load(int server, const std::string& args) {
    auto [rc, out] = Segctl(port(server), "load --no-progress " + args);
    EXPECT_EQ(rc, 0) << args << ": " << out;
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  testing::InProcessServer served_[2];
};

TEST_F(ExportTest, RowsExportLoadsIntoAnEmptyServerAndExportsTheSameBytes) {
  auto c = served_[0].Connect();
  ASSERT_NE(c, nullptr);
  Fill(*c, /*attrs=*/true);
  ASSERT_FALSE(HasFatalFailure());
  const std::string a = dir_.File("a"), b = dir_.File("b");
  const std::string out = Export(0, a);
  EXPECT_TRUE(Has(out, "exported 302 users")) << out;
  EXPECT_TRUE(Has(out, "4 links")) << out;
  Load(1, a + "/segments.tsv");
  Load(1, "--fields " + a + "/fields.tsv");
  Load(1, "--links " + a + "/links.tsv");
  Export(1, b);
  for (const char* file : {"/segments.tsv", "/fields.tsv", "/links.tsv"}) {
    SCOPED_TRACE(file);
    const std::string before = ReadFile(a + file), after = ReadFile(b + file);
    EXPECT_GT(before.size(), 60u);
    EXPECT_EQ(before, after);
  }
  // What the second server answers is the first's.
  auto c1 = served_[1].Connect();
  GetOptions all;
  all.fields.mode = FieldSelection::Mode::kAll;
  for (const std::string user : {"user-2", "user-10", "q\"u,ser-7", "user-1"}) {
    Result<GetResult> x = c->Get(user, all), y = c1->Get(user, all);
    ASSERT_TRUE(x.ok() && y.ok()) << user;
    EXPECT_EQ(x->ToSegments(), y->ToSegments()) << user;
    EXPECT_EQ(x->fields, y->fields) << user;
    EXPECT_EQ(x->master, y->master) << user;
  }
  EXPECT_EQ(*c1->MasterOf("link-only"), "user-5");
}

TEST_F(ExportTest, GroupedExportRoundTripsWithoutAttributesAndSaysWhenItDropsThem) {
  auto c = served_[0].Connect();
  ASSERT_NE(c, nullptr);
  Fill(*c, /*attrs=*/false);
  ASSERT_FALSE(HasFatalFailure());
  const std::string a = dir_.File("a"), b = dir_.File("b");
  Export(0, a, "--format grouped");
  Load(1, a + "/segments.tsv");
  Load(1, "--fields " + a + "/fields.tsv");
  Load(1, "--links " + a + "/links.tsv");
  Export(1, b, "--format grouped");
  EXPECT_EQ(ReadFile(a + "/segments.tsv"), ReadFile(b + "/segments.tsv"));
  EXPECT_EQ(ReadFile(a + "/fields.tsv"), ReadFile(b + "/fields.tsv"));
  EXPECT_EQ(ReadFile(a + "/links.tsv"), ReadFile(b + "/links.tsv"));
  // A segment with an attribute: left out of a grouped file, and said.
  SegmentUpdate s;
  s.id = 9;
  s.attr1 = 4;
  ASSERT_TRUE(c->Upsert("user-0", std::vector<SegmentUpdate>{s}).ok());
  auto [rc, out] = Segctl(port(0), "export --no-progress --format grouped --out " + dir_.File("g"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "1 segments' attributes were left out")) << out;
}

TEST_F(ExportTest, APartitionRangeAndAPrefixExportOnlyTheirUsers) {
  auto c = served_[0].Connect();
  ASSERT_NE(c, nullptr);
  Fill(*c, true);
  ASSERT_FALSE(HasFatalFailure());
  const uint32_t p = PartitionOf("user-2");
  const std::string a = dir_.File("a");
  const std::string out = Export(0, a, "--partitions " + std::to_string(p) + "-" +
                                           std::to_string(p) + " --prefix user-");
  const std::string segments = ReadFile(a + "/segments.tsv");
  EXPECT_TRUE(Has(segments, "user-2\t")) << segments;
  size_t lines = 0;
  for (size_t at = segments.find('\n'); at != std::string::npos && at + 1 < segments.size();
       at = segments.find('\n', at + 1)) {
    const std::string user = segments.substr(at + 1, segments.find('\t', at + 1) - at - 1);
    EXPECT_EQ(PartitionOf(user), p) << user;
    EXPECT_EQ(user.rfind("user-", 0), 0u) << user;
    ++lines;
  }
  EXPECT_GT(lines, 0u);
  auto [rc, bad] = Segctl(port(0), "export --out " + a + " --partitions 5-4096");
  EXPECT_EQ(rc, 2) << bad;
  EXPECT_TRUE(Has(bad, "--partitions 5-4096")) << bad;
}

TEST_F(ExportTest, WhatAFileCannotHoldIsLeftOutAndSaid) {
  auto c = served_[0].Connect();
  ASSERT_NE(c, nullptr);
  SegmentUpdate s;
  s.id = 1;
  ASSERT_TRUE(c->Upsert("ok", std::vector<SegmentUpdate>{s}).ok());
  ASSERT_TRUE(c->Upsert("tab\tuser", std::vector<SegmentUpdate>{s}).ok());
  ASSERT_TRUE(c->Upsert("#comment", std::vector<SegmentUpdate>{s}).ok());
  auto [rc, out] = Segctl(port(0), "export --no-progress --out " + dir_.File("a"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "2 users, fields or links could not be written")) << out;
  EXPECT_EQ(ReadFile(dir_.File("a") + "/segments.tsv").find("tab"), std::string::npos);
  EXPECT_TRUE(Has(ReadFile(dir_.File("a") + "/segments.tsv"), "ok\t1\tnever\n"));
  // A server that is not there: exit status 2.
  std::tie(rc, out) = Segctl(1, "--timeout 2000 export --out " + dir_.File("x"));
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace segstore::server
