#include "loader/link_parser.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loader/allocation_watch.h"

namespace segstore::loader {
namespace {

constexpr uint32_t kNow = 1767225600;  // 2026-01-01T00:00:00Z

using Ids = std::vector<std::string_view>;

// Parses lines in order (numbered from 1) with one parser.
class LinkParserTest : public ::testing::Test {
 protected:
  LinkParserTest() { options_.now = kNow; }

  Status Parse(std::string_view line) { return parser().Parse(line, ++line_number_, &out_); }

  // Parses `line` as line 2 of a fresh parser (never a header).
  Status ParseOne(std::string_view line) {
    parser_.emplace(options_);
    line_number_ = 1;
    return Parse(line);
  }

  // The reason of a refused line (fails the test if it was accepted).
  std::string Reason(std::string_view line) {
    Status s = ParseOne(line);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << line;
    EXPECT_TRUE(out_.members.empty()) << "a refused line left members: " << line;
    return std::string(s.message());
  }
  std::string ComponentsReason(std::string_view line) {
    options_.format = LinkFormat::kComponents;
    std::string r = Reason(line);
    options_.format = LinkFormat::kAuto;
    return r;
  }

  LinkParser& parser() {
    if (!parser_) parser_.emplace(options_);
    return *parser_;
  }

  LinkParseOptions options_;
  std::optional<LinkParser> parser_;
  uint64_t line_number_ = 0;
  LinkLine out_;
};

// ---- formats and detection ----

TEST_F(LinkParserTest, CommaRowLinksTheIdToItsMasterForever) {
  ASSERT_TRUE(Parse("cookie-1,person-9").ok());
  EXPECT_EQ(out_.master, "person-9");
  EXPECT_EQ(out_.members, (Ids{"cookie-1"}));
  EXPECT_EQ(out_.ttl, 0u);  // no TTL and no default: never expires
  EXPECT_FALSE(out_.undecided);
  EXPECT_EQ(parser().format(), LinkFormat::kRows);
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(LinkParserTest, RowTtlTakesTheSegmentLoadersTtlForms) {
  options_.default_ttl = 600;
  for (const auto& [ttl, seconds] :
       std::vector<std::pair<std::string, uint32_t>>{{"86400", 86400},
                                                     {"90s", 90},
                                                     {"15m", 900},
                                                     {"12h", 43200},
                                                     {"90d", 90 * 86400},
                                                     {"never", 0},
                                                     {"", 600}}) {  // empty: --default-ttl
    ASSERT_TRUE(ParseOne("a,m," + ttl).ok()) << ttl;
    EXPECT_EQ(out_.ttl, seconds) << ttl;
  }
  ASSERT_TRUE(ParseOne("a,m").ok());
  EXPECT_EQ(out_.ttl, 600u);
}

TEST_F(LinkParserTest, TabRowIsDetected) {
  ASSERT_TRUE(Parse("a\tm\t12h").ok());
  EXPECT_EQ(out_.master, "m");
  EXPECT_EQ(out_.members, (Ids{"a"}));
  EXPECT_EQ(out_.ttl, 12u * 3600);
  EXPECT_EQ(parser().format(), LinkFormat::kRows);
  EXPECT_EQ(parser().delimiter(), '\t');
  // Settled: a line with one tab is a row now.
  ASSERT_TRUE(Parse("b\tm").ok());
  EXPECT_FALSE(out_.undecided);
  EXPECT_EQ(out_.master, "m");
  EXPECT_EQ(out_.members, (Ids{"b"}));
  ASSERT_TRUE(Parse("c\tm\t").ok());  // an empty TTL field
  EXPECT_EQ(out_.ttl, 0u);
}

TEST_F(LinkParserTest, ComponentsLineIsDetected) {
  options_.default_ttl = 3600;
  ASSERT_TRUE(Parse("person-1\tcookie-1,device-2,login-3").ok());
  EXPECT_EQ(parser().format(), LinkFormat::kComponents);
  EXPECT_EQ(out_.master, "person-1");
  EXPECT_EQ(out_.members, (Ids{"cookie-1", "device-2", "login-3"}));
  EXPECT_EQ(out_.ttl, 3600u);  // a components line's links take the default
  // Settled: one member is a components line now.
  ASSERT_TRUE(Parse("person-2\tcookie-9").ok());
  EXPECT_FALSE(out_.undecided);
  EXPECT_EQ(out_.master, "person-2");
  EXPECT_EQ(out_.members, (Ids{"cookie-9"}));
}

// "A<TAB>B" links A to B as a row and B to A as a components line: it waits
// for a line that decides, and is then parsed again the way it settled.
TEST_F(LinkParserTest, TwoIdTabLinesWaitForALineThatDecides) {
  ASSERT_TRUE(Parse("a\tm").ok());
  EXPECT_TRUE(out_.undecided);
  EXPECT_TRUE(out_.members.empty());
  EXPECT_EQ(parser().format(), LinkFormat::kAuto);
  ASSERT_TRUE(Parse("m2\tx,y").ok());
  EXPECT_EQ(parser().format(), LinkFormat::kComponents);
  ASSERT_TRUE(parser().Parse("a\tm", 1, &out_).ok());
  EXPECT_EQ(out_.master, "a");
  EXPECT_EQ(out_.members, (Ids{"m"}));

  parser_.reset();
  line_number_ = 0;
  ASSERT_TRUE(Parse("a\tm").ok());
  EXPECT_TRUE(out_.undecided);
  ASSERT_TRUE(Parse("b\tm\t30d").ok());
  EXPECT_EQ(parser().format(), LinkFormat::kRows);
  ASSERT_TRUE(parser().Parse("a\tm", 1, &out_).ok());
  EXPECT_EQ(out_.master, "m");
  EXPECT_EQ(out_.members, (Ids{"a"}));
  EXPECT_EQ(out_.ttl, 0u);
}

TEST_F(LinkParserTest, ExplicitFormatDecidesTwoIdTabLines) {
  options_.format = LinkFormat::kRows;
  ASSERT_TRUE(ParseOne("a\tm").ok());
  EXPECT_EQ(out_.master, "m");
  EXPECT_EQ(parser().delimiter(), '\t');
  options_.format = LinkFormat::kComponents;
  ASSERT_TRUE(ParseOne("a\tm").ok());
  EXPECT_EQ(out_.master, "a");
  EXPECT_EQ(out_.members, (Ids{"m"}));
}

TEST_F(LinkParserTest, ExplicitRowsFormatDetectsTheDelimiter) {
  options_.format = LinkFormat::kRows;
  ASSERT_TRUE(Parse("a,m").ok());
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(LinkParserTest, ExplicitCommaDelimiterMeansRows) {
  options_.delimiter = ',';
  ASSERT_TRUE(Parse("a,m").ok());
  EXPECT_EQ(parser().format(), LinkFormat::kRows);
  // A tab is part of no field then: the ID holding one is refused.
  EXPECT_EQ(Parse("m\tb,c").message(), "ID \"m\\x09b\" contains a tab");
}

TEST_F(LinkParserTest, DetectionSettlesOnTheFirstDataLine) {
  ASSERT_TRUE(Parse("a,m").ok());
  // A components line in a comma file is a comma row with a tab in an ID.
  EXPECT_EQ(Parse("m\tb,c").message(), "ID \"m\\x09b\" contains a tab");
  EXPECT_EQ(parser().format(), LinkFormat::kRows);
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(LinkParserTest, RefusedFirstLineDoesNotSettleDetection) {
  EXPECT_FALSE(Parse("m\tb,,c").ok());
  EXPECT_EQ(parser().format(), LinkFormat::kAuto);
  ASSERT_TRUE(Parse("a,m").ok());
  EXPECT_EQ(parser().format(), LinkFormat::kRows);
}

// ---- lines skipped ----

TEST_F(LinkParserTest, HeaderOfColumnNamesOnLineOneIsSkipped) {
  for (const char* header : {"id,master,ttl", "user_id,master_id", "USER_ID\tMASTER_ID\tTTL",
                             "master\tmembers", "Master\tIDs", "member_id,master"}) {
    parser_.reset();
    ASSERT_TRUE(parser().Parse(header, 1, &out_).ok()) << header;
    EXPECT_TRUE(out_.header) << header;
    EXPECT_TRUE(out_.members.empty()) << header;
    EXPECT_EQ(parser().format(), LinkFormat::kAuto) << header;
  }
  // Other names are IDs; so is a header on a later line.
  parser_.reset();
  ASSERT_TRUE(parser().Parse("alice,bob", 1, &out_).ok());
  EXPECT_FALSE(out_.header);
  EXPECT_EQ(out_.master, "bob");
  ASSERT_TRUE(parser().Parse("id,master", 2, &out_).ok());
  EXPECT_FALSE(out_.header);
  EXPECT_EQ(out_.master, "master");
  // One column name alone is no header: a bad row.
  parser_.reset();
  EXPECT_FALSE(parser().Parse("master", 1, &out_).ok());
}

TEST_F(LinkParserTest, CommentsBlankLinesByteOrderMarkAndCarriageReturn) {
  for (const char* skipped : {"", "   ", "\t", "# a,b", "#m\ta,b", "\r"}) {
    ASSERT_TRUE(Parse(skipped).ok()) << skipped;
    EXPECT_TRUE(out_.members.empty()) << skipped;
    EXPECT_FALSE(out_.undecided) << skipped;
  }
  parser_.reset();
  ASSERT_TRUE(parser()
                  .Parse("\xEF\xBB\xBF"
                         "a,m\r",
                         1, &out_)
                  .ok());
  EXPECT_EQ(out_.members, (Ids{"a"}));
  EXPECT_EQ(out_.master, "m");
}

TEST_F(LinkParserTest, IdsAreViewsIntoTheLineTakenAsTheyAre) {
  const std::string line = " a , m ";
  ASSERT_TRUE(ParseOne(line).ok());
  EXPECT_EQ(out_.members, (Ids{" a "}));
  EXPECT_EQ(out_.master, " m ");
  EXPECT_EQ(out_.members[0].data(), line.data());
}

// ---- bad rows ----

TEST_F(LinkParserTest, SelfLinksAreBadRows) {
  EXPECT_EQ(Reason("a,a"), "ID and master are the same (\"a\"): a user cannot be linked to itself");
  EXPECT_EQ(Reason("a\ta\t1h"),
            "ID and master are the same (\"a\"): a user cannot be linked to itself");
  EXPECT_EQ(Reason("a\ta"), "the two IDs are the same (\"a\"): a user cannot be linked to itself");
  EXPECT_EQ(Reason("m\tx,m"),
            "member 2 is the master itself (\"m\"): a user cannot be linked to itself");
}

TEST_F(LinkParserTest, EmptyIdsAreBadRows) {
  EXPECT_EQ(Reason(",m"), "ID is empty");
  EXPECT_EQ(Reason("a,"), "master ID is empty");
  EXPECT_EQ(Reason("a,,1h"), "master ID is empty");
  EXPECT_EQ(Reason("\tm"), "first ID is empty");
  EXPECT_EQ(Reason("a\t"), "second ID is empty");
  EXPECT_EQ(Reason("\ta,b"), "master ID is empty");
  EXPECT_EQ(Reason("m\ta,,b"), "member 2 is empty (two commas, or one at an end)");
  EXPECT_EQ(Reason("m\ta,"), "member 2 is empty (two commas, or one at an end)");
  EXPECT_EQ(Reason("m\t,a"), "member 1 is empty (two commas, or one at an end)");
}

TEST_F(LinkParserTest, IdsOverTheKeyLimitAreBadRows) {
  const std::string long_id(257, 'k');
  EXPECT_EQ(Reason(long_id + ",m"), "ID of 257 bytes is over the limit of 256");
  EXPECT_EQ(Reason("a," + long_id), "master ID of 257 bytes is over the limit of 256");
  EXPECT_EQ(Reason("a\t" + long_id), "second ID of 257 bytes is over the limit of 256");
  EXPECT_EQ(Reason(long_id + "\ta,b"), "master ID of 257 bytes is over the limit of 256");
  EXPECT_EQ(Reason("m\ta,b," + long_id), "member 3 of 257 bytes is over the limit of 256");
  // 256 bytes is fine; the limit is the server's (its hello says it).
  ASSERT_TRUE(ParseOne(std::string(256, 'k') + ",m").ok());
  options_.max_key_bytes = 8;
  EXPECT_EQ(Reason("123456789,m"), "ID of 9 bytes is over the limit of 8");
}

TEST_F(LinkParserTest, WrongNumberOfFieldsIsABadRow) {
  EXPECT_EQ(Reason("a,m,1h,x"), "4 fields, at most 3 (id,master[,ttl])");
  EXPECT_EQ(Reason("a,m,1h,x,y,z"), "6 fields, at most 3 (id,master[,ttl])");
  EXPECT_EQ(Reason("a\tm\t1h\tx"), "4 fields, at most 3 (id,master[,ttl])");
  EXPECT_EQ(Reason("lonely"), "1 field, at least 2 (id,master separated by ',')");
  options_.delimiter = '\t';
  EXPECT_EQ(Reason("lonely"), "1 field, at least 2 (id,master separated by tab)");
}

TEST_F(LinkParserTest, BadTtlsAreBadRows) {
  const std::string understood = " is not understood (seconds, 90s, 15m, 12h, 30d or never)";
  EXPECT_EQ(Reason("a,m,soon"), "TTL \"soon\"" + understood);
  EXPECT_EQ(Reason("a,m,5y"), "TTL \"5y\"" + understood);
  EXPECT_EQ(Reason("a,m,1.5h"), "TTL \"1.5h\"" + understood);
  EXPECT_EQ(Reason("a,m,-5"), "TTL \"-5\"" + understood);
  EXPECT_EQ(Reason("a,m,0"), "TTL \"0\" is zero (a link that never expires: never)");
  EXPECT_EQ(Reason("a,m,0d"), "TTL \"0d\" is zero (a link that never expires: never)");
  const std::string absolute =
      " is an absolute expiry: a link takes a TTL (86400, 90s, 15m, 12h, 30d) or never";
  EXPECT_EQ(Reason("a,m,@1800000000"), "TTL \"@1800000000\"" + absolute);
  EXPECT_EQ(Reason("a,m,1800000000"), "TTL \"1800000000\"" + absolute);
  EXPECT_EQ(Reason("a,m,2027-01-01T00:00:00Z"), "TTL \"2027-01-01T00:00:00Z\"" + absolute);
  EXPECT_EQ(Reason("a,m,99999d"),
            "TTL \"99999d\" is too long: it would expire after 2106 (past 32-bit Unix time)");
  EXPECT_EQ(Reason("a,m,99999999999999999999d"),
            "TTL \"99999999999999999999d\" is too long: it would expire after 2106 (past "
            "32-bit Unix time)");
}

TEST_F(LinkParserTest, ComponentsLineShapeErrors) {
  EXPECT_EQ(ComponentsReason("m,a,b"),
            "no tab after the master ID (components: master<TAB>id[,id]...)");
  EXPECT_EQ(ComponentsReason("m\t"), "no members after the tab");
  EXPECT_EQ(ComponentsReason("m\t  "), "no members after the tab");
  EXPECT_EQ(ComponentsReason("m\ta,b\tc"),
            "2 tabs, a components line has one (master<TAB>id[,id]...)");
  EXPECT_EQ(ComponentsReason("m\ta\t1h"),
            "2 tabs, a components line has one (master<TAB>id[,id]...)");
}

TEST_F(LinkParserTest, ComponentsLineWithARepeatedMemberIsABadRow) {
  EXPECT_EQ(Reason("m\ta,b,a"), "member \"a\" appears twice in the line");
  std::string many = "m\t";
  for (int i = 0; i < 40; ++i) many += "id-" + std::to_string(i) + ",";
  many += "id-17";
  EXPECT_EQ(Reason(many), "member \"id-17\" appears twice in the line");
}

TEST_F(LinkParserTest, ControlBytesAreEscapedAndLongIdsCutInTheReason) {
  EXPECT_EQ(Reason("a\x01,a\x01"),
            "ID and master are the same (\"a\\x01\"): a user cannot be linked to itself");
  const std::string id(100, 'x');
  EXPECT_EQ(Reason(id + "," + id), "ID and master are the same (\"" + std::string(40, 'x') +
                                       "...\" (100 bytes)): a user cannot be linked to itself");
}

TEST_F(LinkParserTest, DefaultTtlMustFitThe32BitClock) {
  options_.default_ttl = UINT32_MAX;
  EXPECT_EQ(Reason("a,m"), "--default-ttl is too long: past 32-bit Unix time");
  EXPECT_EQ(Reason("m\ta,b"), "--default-ttl is too long: past 32-bit Unix time");
  EXPECT_EQ(Reason("a\tm"), "--default-ttl is too long: past 32-bit Unix time");
}

TEST_F(LinkParserTest, DataLinesAllocateNothingOnceWarm) {
  std::string component = "person-000000001\t";
  for (int i = 0; i < 64; ++i) component += "cookie-" + std::to_string(1000 - i) + ",";
  component.pop_back();
  LinkParser rows(options_);
  LinkParser components(options_);
  for (int warm = 0; warm < 2; ++warm) {
    ASSERT_TRUE(rows.Parse("cookie-1,person-1,30d", 2, &out_).ok());
    ASSERT_TRUE(components.Parse(component, 2, &out_).ok());
  }
  uint64_t ok = 0;
  const uint64_t allocations = testing::AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      ok += rows.Parse("cookie-1,person-1,30d", 3, &out_).ok();
      ok += rows.Parse("cookie-2,person-1", 4, &out_).ok();
      ok += components.Parse(component, 5, &out_).ok();
    }
  });
  EXPECT_EQ(ok, 300u);
  EXPECT_EQ(allocations, 0u);
}

}  // namespace
}  // namespace segstore::loader
