#include "loader/parser.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "loader/allocation_watch.h"

// ---- allocation watch ----
// Counts every operator new of this binary while a watch is on, so a test can
// show the parser allocates nothing per line once its vector has grown.

namespace {
std::atomic<bool> g_watching{false};
std::atomic<uint64_t> g_allocations{0};

void* Allocate(std::size_t n) {
  if (g_watching.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace segstore::loader::testing {
uint64_t AllocationsDuring(const std::function<void()>& run) {
  g_allocations = 0;
  g_watching = true;
  run();
  g_watching = false;
  return g_allocations.load();
}
}  // namespace segstore::loader::testing

namespace segstore::loader {
namespace {

constexpr uint32_t kNow = 1767225600;  // 2026-01-01T00:00:00Z

ParseOptions Options() {
  ParseOptions o;
  o.now = kNow;
  return o;
}

// Parses lines in order (numbered from 1) with one parser.
class ParserTest : public ::testing::Test {
 protected:
  Status Parse(std::string_view line) { return parser().Parse(line, ++line_number_, &out_); }

  // Parses `line` as line 2 of a fresh parser (never a header).
  Status ParseOne(std::string_view line, const ParseOptions& options) {
    parser_.emplace(options);
    line_number_ = 1;
    return Parse(line);
  }
  Status ParseOne(std::string_view line) { return ParseOne(line, options_); }

  // The reason of a refused line (fails the test if it was accepted).
  std::string Reason(std::string_view line) {
    Status s = ParseOne(line);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << line;
    EXPECT_TRUE(out_.segments.empty()) << "a refused line left segments: " << line;
    return std::string(s.message());
  }

  LineParser& parser() {
    if (!parser_) parser_.emplace(options_);
    return *parser_;
  }

  const SegmentUpdate& Only() {
    EXPECT_EQ(out_.segments.size(), 1u);
    return out_.segments.at(0);
  }

  ParseOptions options_ = Options();
  std::optional<LineParser> parser_;
  uint64_t line_number_ = 0;
  ParsedLine out_;
};

// ---- formats and detection ----

TEST_F(ParserTest, CommaRowWithUserAndSegmentUsesDefaultTtl) {
  options_.default_ttl = 3600;
  ASSERT_TRUE(Parse("user-1,42").ok());
  EXPECT_EQ(out_.user, "user-1");
  EXPECT_EQ(Only().id, 42u);
  EXPECT_EQ(Only().value, 3600u);
  EXPECT_TRUE(Only().ttl);
  EXPECT_FALSE(Only().attr1);
  EXPECT_FALSE(Only().attr2);
  EXPECT_EQ(parser().format(), Format::kRows);
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(ParserTest, CommaRowWithEveryField) {
  ASSERT_TRUE(Parse("u,18446744073709551615,30d,7,4294967295").ok());
  EXPECT_EQ(out_.user, "u");
  EXPECT_EQ(Only().id, UINT64_MAX);
  EXPECT_EQ(Only().value, 30u * 86400);
  EXPECT_TRUE(Only().ttl);
  EXPECT_EQ(Only().attr1, 7u);
  EXPECT_EQ(Only().attr2, UINT32_MAX);
}

TEST_F(ParserTest, EmptyAttributeFieldsAreAbsent) {
  ASSERT_TRUE(Parse("u,1,60,,9").ok());
  EXPECT_FALSE(Only().attr1);
  EXPECT_EQ(Only().attr2, 9u);
  ASSERT_TRUE(Parse("u,1,60,5,").ok());
  EXPECT_EQ(Only().attr1, 5u);
  EXPECT_FALSE(Only().attr2);
}

TEST_F(ParserTest, EmptyTtlFieldTakesTheDefault) {
  options_.default_ttl = 99;
  ASSERT_TRUE(Parse("u,1,,5").ok());
  EXPECT_EQ(Only().value, 99u);
  EXPECT_TRUE(Only().ttl);
  EXPECT_EQ(Only().attr1, 5u);
}

TEST_F(ParserTest, TabRowIsDetected) {
  ASSERT_TRUE(Parse("u\t5\t12h\t3").ok());
  EXPECT_EQ(out_.user, "u");
  EXPECT_EQ(Only().id, 5u);
  EXPECT_EQ(Only().value, 12u * 3600);
  EXPECT_EQ(Only().attr1, 3u);
  EXPECT_EQ(parser().format(), Format::kRows);
  EXPECT_EQ(parser().delimiter(), '\t');
}

TEST_F(ParserTest, TabRowWithIsoExpiryIsARowNotGrouped) {
  // A ':' after the tab, but two tabs: a row.
  ASSERT_TRUE(Parse("u\t5\t2026-12-01T00:00:00Z").ok());
  EXPECT_EQ(parser().format(), Format::kRows);
  EXPECT_EQ(Only().value, 1796083200u);
  EXPECT_FALSE(Only().ttl);
}

TEST_F(ParserTest, GroupedLineIsDetected) {
  options_.default_ttl = 60;
  ASSERT_TRUE(Parse("user-9\t1:30d,2,3:@1800000000").ok());
  EXPECT_EQ(parser().format(), Format::kGrouped);
  EXPECT_EQ(parser().delimiter(), '\t');
  EXPECT_EQ(out_.user, "user-9");
  ASSERT_EQ(out_.segments.size(), 3u);
  EXPECT_EQ(out_.segments[0].id, 1u);
  EXPECT_EQ(out_.segments[0].value, 30u * 86400);
  EXPECT_TRUE(out_.segments[0].ttl);
  EXPECT_EQ(out_.segments[1].id, 2u);
  EXPECT_EQ(out_.segments[1].value, 60u);
  EXPECT_TRUE(out_.segments[1].ttl);
  EXPECT_EQ(out_.segments[2].id, 3u);
  EXPECT_EQ(out_.segments[2].value, 1800000000u);
  EXPECT_FALSE(out_.segments[2].ttl);
}

TEST_F(ParserTest, GroupedLineWithOneSegmentAndTtlIsDetected) {
  ASSERT_TRUE(Parse("u\t7:86400").ok());
  EXPECT_EQ(parser().format(), Format::kGrouped);
  EXPECT_EQ(Only().id, 7u);
  EXPECT_EQ(Only().value, 86400u);
}

TEST_F(ParserTest, AmbiguousLinesLeaveTheChoiceToTheNextLine) {
  options_.default_ttl = 60;
  // "user<TAB>segment" reads the same as a tab row and as a grouped line.
  ASSERT_TRUE(Parse("a\t1").ok());
  EXPECT_EQ(Only().id, 1u);
  EXPECT_EQ(parser().format(), Format::kAuto);
  ASSERT_TRUE(Parse("b\t2,3,4").ok());
  EXPECT_EQ(out_.segments.size(), 3u);
  EXPECT_EQ(parser().format(), Format::kGrouped);

  parser_.reset();
  line_number_ = 0;
  ASSERT_TRUE(Parse("a\t1").ok());
  ASSERT_TRUE(Parse("b\t2\t30d").ok());
  EXPECT_EQ(parser().format(), Format::kRows);
  EXPECT_EQ(parser().delimiter(), '\t');
  EXPECT_EQ(Only().value, 30u * 86400);
}

TEST_F(ParserTest, DetectionSettlesOnTheFirstDataLine) {
  options_.default_ttl = 60;
  ASSERT_TRUE(Parse("u,1").ok());
  // A grouped line in a comma file is read as a comma row.
  Status s = Parse("x\t2:60,3:60");
  EXPECT_EQ(s.message(), "segment ID \"3:60\" is not a number");
  EXPECT_EQ(parser().format(), Format::kRows);
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(ParserTest, RefusedFirstLineDoesNotSettleDetection) {
  options_.default_ttl = 60;
  EXPECT_FALSE(Parse("u\t1:x,2").ok());
  EXPECT_EQ(parser().format(), Format::kAuto);
  ASSERT_TRUE(Parse("u,1").ok());
  EXPECT_EQ(parser().format(), Format::kRows);
}

TEST_F(ParserTest, ExplicitRowsFormatDetectsTheDelimiter) {
  options_.format = Format::kRows;
  ASSERT_TRUE(Parse("u\t1\t60").ok());
  EXPECT_EQ(parser().delimiter(), '\t');
  EXPECT_EQ(Only().value, 60u);
}

TEST_F(ParserTest, ExplicitRowsFormatReadsAmbiguousLinesAsRows) {
  options_.format = Format::kRows;
  options_.delimiter = '\t';
  ASSERT_TRUE(Parse("u\t1\t60").ok());
  EXPECT_EQ(Reason("u\t1:60,2"), "segment ID \"1:60,2\" is not a number");
}

TEST_F(ParserTest, ExplicitCommaDelimiterMeansRows) {
  options_.delimiter = ',';
  ASSERT_TRUE(Parse("u,1,60").ok());
  EXPECT_EQ(parser().format(), Format::kRows);
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(ParserTest, OtherDelimiterIsHonoured) {
  options_.delimiter = ';';
  ASSERT_TRUE(Parse("u;1;60;2").ok());
  EXPECT_EQ(Only().attr1, 2u);
}

TEST_F(ParserTest, ExplicitGroupedFormatTakesOneSegmentLines) {
  options_.format = Format::kGrouped;
  options_.default_ttl = 5;
  ASSERT_TRUE(Parse("u\t1").ok());
  EXPECT_EQ(Only().id, 1u);
  EXPECT_EQ(parser().format(), Format::kGrouped);
  EXPECT_EQ(Reason("u,1,60"), "no tab after the user ID (grouped: user<TAB>seg[:ttl],...)");
}

// ---- skipped lines ----

TEST_F(ParserTest, HeaderOnLineOneIsSkipped) {
  ASSERT_TRUE(Parse("user_id,segment_id,ttl,attr1,attr2").ok());
  EXPECT_TRUE(out_.segments.empty());
  EXPECT_TRUE(out_.header);
  ASSERT_TRUE(Parse("u,1,60").ok());
  EXPECT_EQ(Only().id, 1u);
  EXPECT_FALSE(out_.header);
}

TEST_F(ParserTest, HeadersOfEveryShapeAreRecognised) {
  for (std::string_view header :
       {"user,segment", "user,segment,ttl", "user,segment,expiry", "USER,Segment ID,Expires (UTC)",
        "user\tsegment\tttl", "user\tsegments", "user\tsegment:ttl,segment:ttl",
        "user,segment,,attr1", "_uid,_sid", "user,s\xC3\xA9gment", "\xEF\xBB\xBFuser,segment",
        "user,segment,ttl\r"}) {
    ParseOptions o = Options();
    LineParser p(o);
    ParsedLine out;
    ASSERT_TRUE(p.Parse(header, 1, &out).ok()) << header;
    EXPECT_TRUE(out.header) << header;
    EXPECT_TRUE(out.segments.empty()) << header;
  }
  options_.delimiter = ';';
  ASSERT_TRUE(Parse("user_id;segment_id;ttl").ok());
  EXPECT_TRUE(out_.header);
}

TEST_F(ParserTest, LineOneWithANameAndDataIsABadRowNotAHeader) {
  // A segment field that is a name, but a later field that is data: a typo
  // in the first data line, reported rather than skipped.
  for (std::string_view line : {"u1,x42,3600", "u1,x42,30d", "u1,x42,@1800000000", "u1,x42,never",
                                "u1,x42,2026-12-01T00:00:00Z", "u1,x42,,7", "u1\tx42\t3600",
                                "u1\tx42:3600", "u1\tx42,7:60"}) {
    ParseOptions o = Options();
    LineParser p(o);
    ParsedLine out;
    Status s = p.Parse(line, 1, &out);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << line;
    EXPECT_NE(s.message().find("segment ID \"x42"), std::string_view::npos) << s.message();
    EXPECT_FALSE(out.header) << line;
  }
  // A segment field that starts like no name: not a header either.
  for (std::string_view line : {"u,\"segment\",\"ttl\"", "u,(1),60", "u,.5,60", "u, segment"}) {
    ParseOptions o = Options();
    LineParser p(o);
    ParsedLine out;
    EXPECT_FALSE(p.Parse(line, 1, &out).ok()) << line;
    EXPECT_FALSE(out.header) << line;
  }
}

TEST_F(ParserTest, GroupedHeaderIsSkippedAndDetectionWaitsForData) {
  ASSERT_TRUE(Parse("user\tsegments").ok());
  EXPECT_TRUE(out_.segments.empty());
  EXPECT_EQ(parser().format(), Format::kAuto);
  ASSERT_TRUE(Parse("u\t1:60,2:60").ok());
  EXPECT_EQ(parser().format(), Format::kGrouped);
  EXPECT_EQ(out_.segments.size(), 2u);
}

TEST_F(ParserTest, HeaderAfterLineOneIsABadRow) {
  ASSERT_TRUE(Parse("u,1,60").ok());
  Status s = Parse("user_id,segment_id");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "segment ID \"segment_id\" is not a number");
}

TEST_F(ParserTest, LineOneWithABadNumberIsNotTakenForAHeader) {
  EXPECT_FALSE(Parse("u,-1,60").ok());
  line_number_ = 0;
  parser_.reset();
  EXPECT_FALSE(Parse("u,,60").ok());
}

TEST_F(ParserTest, ByteOrderMarkOnLineOneIsIgnored) {
  ASSERT_TRUE(Parse("\xEF\xBB\xBFu,1,60").ok());
  EXPECT_EQ(out_.user, "u");
}

TEST_F(ParserTest, CommentsAndBlankLinesAreSkipped) {
  for (std::string_view line : {"# exported 2026-01-01", "", "   ", "\t", "\r", "#u,1,60"}) {
    ASSERT_TRUE(Parse(line).ok()) << line;
    EXPECT_TRUE(out_.segments.empty()) << line;
    EXPECT_FALSE(out_.header) << line;
  }
  // A comment on line 1 is no header, and line 2 is not either.
  EXPECT_FALSE(Parse("user_id,segment_id").ok());
}

TEST_F(ParserTest, FieldsAreNeitherUnquotedNorTrimmed) {
  EXPECT_EQ(Reason("\"u\",\"1\",\"60\""), "segment ID \"\\\"1\\\"\" is not a number");
  EXPECT_EQ(Reason("u,1, 60"),
            "TTL or expiry \" 60\" is not understood (seconds, 30d/12h/15m/90s, @<unix seconds>, "
            "2026-12-01T00:00:00Z or never)");
  ASSERT_TRUE(ParseOne(" u ,1,60").ok());
  EXPECT_EQ(out_.user, " u ");
}

TEST_F(ParserTest, TrailingCarriageReturnIsIgnored) {
  ASSERT_TRUE(Parse("u,1,60,3\r").ok());
  EXPECT_EQ(Only().attr1, 3u);
  ASSERT_TRUE(ParseOne("u\t1:60,2:90\r").ok());
  EXPECT_EQ(out_.segments.back().value, 90u);
}

// ---- bad rows ----

TEST_F(ParserTest, TooManyFieldsIsRefused) {
  EXPECT_EQ(Reason("u,1,60,1,2,3"), "6 fields, at most 5");
  EXPECT_EQ(Reason("u,1,60,1,2,3,4,5"), "8 fields, at most 5");
}

TEST_F(ParserTest, OneFieldIsRefused) {
  options_.delimiter = ',';
  EXPECT_EQ(Reason("u"), "1 field, at least 2 (user,segment separated by ',')");
}

TEST_F(ParserTest, UserIdLengthIsChecked) {
  options_.max_key_bytes = 256;
  EXPECT_EQ(Reason(std::string(300, 'u') + ",1,60"),
            "user ID of 300 bytes is over the limit of 256");
  EXPECT_TRUE(ParseOne(std::string(256, 'u') + ",1,60").ok());
  EXPECT_EQ(out_.user.size(), 256u);
  EXPECT_EQ(Reason(",1,60"), "user ID is empty");
  EXPECT_EQ(Reason("\t1:60,2:60"), "user ID is empty");
}

TEST_F(ParserTest, SegmentIdMustBeAnUnsigned64BitNumber) {
  EXPECT_EQ(Reason("u,x,60"), "segment ID \"x\" is not a number");
  EXPECT_EQ(Reason("u,12a,60"), "segment ID \"12a\" is not a number");
  EXPECT_EQ(Reason("u,-5,60"), "segment ID \"-5\" is not a number");
  EXPECT_EQ(Reason("u,+5,60"), "segment ID \"+5\" is not a number");
  EXPECT_EQ(Reason("u, 5,60"), "segment ID \" 5\" is not a number");
  EXPECT_EQ(Reason("u,5 ,60"), "segment ID \"5 \" is not a number");
  EXPECT_EQ(Reason("u,1.5,60"), "segment ID \"1.5\" is not a number");
  EXPECT_EQ(Reason("u,,60"), "segment ID is empty");
  EXPECT_EQ(Reason("u,18446744073709551616,60"),
            "segment ID \"18446744073709551616\" is out of range (at most 18446744073709551615)");
}

TEST_F(ParserTest, AttributesMustBeUnsigned32BitNumbers) {
  EXPECT_EQ(Reason("u,1,60,x"), "attr1 \"x\" is not a number");
  EXPECT_EQ(Reason("u,1,60,-1"), "attr1 \"-1\" is not a number");
  EXPECT_EQ(Reason("u,1,60,4294967296"),
            "attr1 \"4294967296\" is out of range (at most 4294967295)");
  EXPECT_EQ(Reason("u,1,60,1,1e3"), "attr2 \"1e3\" is not a number");
}

TEST_F(ParserTest, LongBadTextIsCutInTheReason) {
  const std::string bad(100, 'x');
  EXPECT_EQ(Reason("u," + bad + ",60"),
            "segment ID \"" + std::string(40, 'x') + "...\" (100 bytes) is not a number");
}

TEST_F(ParserTest, ControlBytesAreEscapedInTheReason) {
  EXPECT_EQ(Reason(std::string("u,1\x01", 4)), "segment ID \"1\\x01\" is not a number");
}

TEST_F(ParserTest, MissingTtlWithoutDefaultIsRefused) {
  EXPECT_EQ(Reason("u,1"), "no TTL or expiry and no --default-ttl");
  EXPECT_EQ(Reason("u,1,,3"), "no TTL or expiry and no --default-ttl");
  EXPECT_EQ(Reason("u\t1:60,2"), "segment 2 of the line: no TTL or expiry and no --default-ttl");
}

TEST_F(ParserTest, BadTtlInARowIsRefused) {
  EXPECT_EQ(Reason("u,1,soon"),
            "TTL or expiry \"soon\" is not understood (seconds, 30d/12h/15m/90s, @<unix seconds>, "
            "2026-12-01T00:00:00Z or never)");
  EXPECT_EQ(Reason("u,1,1700000000"), "expiry \"1700000000\" is in the past (now is 1767225600)");
}

TEST_F(ParserTest, GroupedLineWithOneBadSegmentIsRefusedWhole) {
  EXPECT_EQ(Reason("u\t1:60,2:60,x:60,4:60"),
            "segment 3 of the line: segment ID \"x\" is not a number");
  EXPECT_EQ(Reason("u\t1:60,2:@1000,3:60"),
            "segment 2 of the line: expiry \"@1000\" is in the past (now is 1767225600)");
  EXPECT_EQ(Reason("u\t1:60,2:60,3:0"), "segment 3 of the line: TTL \"0\" is zero");
}

TEST_F(ParserTest, GroupedLineWithADuplicateSegmentIsRefused) {
  EXPECT_EQ(Reason("u\t5:60,3:60,5:90"), "segment ID 5 appears twice in the line");
  EXPECT_EQ(Reason("u\t5:60,5:60"), "segment ID 5 appears twice in the line");
  // Many segments, out of order: found through the sorted copy.
  std::string line = "u\t";
  for (int i = 100; i > 0; --i) line += std::to_string(i * 7) + ":60,";
  line += "350:60";
  EXPECT_EQ(Reason(line), "segment ID 350 appears twice in the line");
  // The same many, no duplicate: fine.
  line.resize(line.size() - 7);
  ASSERT_TRUE(ParseOne(line).ok());
  EXPECT_EQ(out_.segments.size(), 100u);
}

TEST_F(ParserTest, GroupedLineShapeErrors) {
  EXPECT_EQ(Reason("u\t1:60,,2:60"), "segment 2 of the line: empty (two commas, or one at an end)");
  EXPECT_EQ(Reason("u\t1:60,"), "segment 2 of the line: empty (two commas, or one at an end)");
  EXPECT_EQ(Reason("u\t1:"), "segment 1 of the line: TTL or expiry is empty");
  options_.format = Format::kGrouped;
  EXPECT_EQ(Reason("u\t"), "no segments after the tab");
  EXPECT_EQ(Reason("u\t1:60\t2:60"), "2 tabs, a grouped line has one (user<TAB>seg[:ttl],...)");
  EXPECT_EQ(Reason("u"), "no tab after the user ID (grouped: user<TAB>seg[:ttl],...)");
}

TEST_F(ParserTest, GroupedSegmentsKeepTheirOrder) {
  ASSERT_TRUE(Parse("u\t9:60,3:60,7:60").ok());
  ASSERT_EQ(out_.segments.size(), 3u);
  EXPECT_EQ(out_.segments[0].id, 9u);
  EXPECT_EQ(out_.segments[1].id, 3u);
  EXPECT_EQ(out_.segments[2].id, 7u);
}

TEST_F(ParserTest, UserIdIsAViewIntoTheLine) {
  const std::string line = "abc,1,60";
  ASSERT_TRUE(Parse(line).ok());
  EXPECT_EQ(out_.user.data(), line.data());
}

TEST_F(ParserTest, DataLinesAllocateNothingOnceWarm) {
  options_.default_ttl = 60;
  std::string grouped = "user-000000001\t";
  for (int i = 0; i < 1000; ++i) grouped += std::to_string(1000 - i) + ":30d,";
  grouped.pop_back();
  const std::vector<std::string> lines = {"u-1,123,30d,4,5", "u-2,124", "u-3\t125\t@1800000000",
                                          grouped};
  LineParser rows(options_);
  LineParser groups(options_);
  for (int warm = 0; warm < 2; ++warm) {
    ASSERT_TRUE(rows.Parse(lines[0], 2, &out_).ok());
    ASSERT_TRUE(groups.Parse(lines[3], 2, &out_).ok());
  }
  g_allocations = 0;
  g_watching = true;
  uint64_t n = 0;
  for (int i = 0; i < 100; ++i) {
    Status a = rows.Parse(lines[0], 3, &out_);
    Status b = rows.Parse(lines[1], 4, &out_);
    Status c = groups.Parse(lines[3], 5, &out_);
    n += a.ok() + b.ok() + c.ok();
  }
  g_watching = false;
  EXPECT_EQ(n, 300u);
  EXPECT_EQ(g_allocations.load(), 0u);

  // The watch itself sees allocations.
  g_watching = true;
  std::string s(100, 'x');
  g_watching = false;
  EXPECT_EQ(s.size(), 100u);
  EXPECT_GE(g_allocations.load(), 1u);
}

// ---- TTLs and expiries ----

struct When {
  uint32_t value;
  bool ttl;
};

When ParseOk(std::string_view text, ParseOptions options = Options()) {
  When w{12345, true};
  Status s = ParseWhen(text, options, &w.value, &w.ttl);
  EXPECT_TRUE(s.ok()) << text << ": " << s.ToString();
  return w;
}

std::string ParseBad(std::string_view text, ParseOptions options = Options()) {
  uint32_t value;
  bool ttl;
  Status s = ParseWhen(text, options, &value, &ttl);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << text;
  return std::string(s.message());
}

TEST(ParseWhenTest, BareSecondsAreATtl) {
  EXPECT_EQ(ParseOk("86400").value, 86400u);
  EXPECT_TRUE(ParseOk("86400").ttl);
  EXPECT_EQ(ParseOk("1").value, 1u);
  EXPECT_EQ(ParseOk("999999999").value, 999999999u);  // 9 digits: still a TTL
  EXPECT_TRUE(ParseOk("999999999").ttl);
}

TEST(ParseWhenTest, UnitsAreSecondsMinutesHoursDays) {
  EXPECT_EQ(ParseOk("90s").value, 90u);
  EXPECT_EQ(ParseOk("15m").value, 900u);
  EXPECT_EQ(ParseOk("12h").value, 43200u);
  EXPECT_EQ(ParseOk("30d").value, 2592000u);
  EXPECT_TRUE(ParseOk("30d").ttl);
  EXPECT_EQ(ParseBad("30w"),
            "TTL or expiry \"30w\" is not understood (seconds, 30d/12h/15m/90s, "
            "@<unix seconds>, 2026-12-01T00:00:00Z or never)");
  EXPECT_NE(ParseBad("30D").find("not understood"), std::string::npos);
  EXPECT_NE(ParseBad("d").find("not understood"), std::string::npos);
  EXPECT_NE(ParseBad("3 d").find("not understood"), std::string::npos);
}

TEST(ParseWhenTest, TenDigitsOrMoreAreAbsolute) {
  const When w = ParseOk("1800000000");
  EXPECT_EQ(w.value, 1800000000u);
  EXPECT_FALSE(w.ttl);
  EXPECT_EQ(ParseOk("4294967295").value, UINT32_MAX);
  EXPECT_EQ(ParseBad("4294967296"), "expiry \"4294967296\" is after 2106 (past 32-bit Unix time)");
  EXPECT_EQ(ParseBad("99999999999999999999999"),
            "expiry \"99999999999999999999999\" is after 2106 (past 32-bit Unix time)");
}

TEST(ParseWhenTest, AtPrefixIsAbsolute) {
  const When w = ParseOk("@1800000000");
  EXPECT_EQ(w.value, 1800000000u);
  EXPECT_FALSE(w.ttl);
  EXPECT_EQ(ParseOk("@1767225601").value, kNow + 1);
  EXPECT_NE(ParseBad("@").find("not understood"), std::string::npos);
  EXPECT_NE(ParseBad("@-5").find("not understood"), std::string::npos);
  EXPECT_NE(ParseBad("@12x").find("not understood"), std::string::npos);
  EXPECT_EQ(ParseBad("@5000000000"),
            "expiry \"@5000000000\" is after 2106 (past 32-bit Unix time)");
}

TEST(ParseWhenTest, Iso8601UtcIsAbsolute) {
  const When w = ParseOk("2026-12-01T00:00:00Z");
  EXPECT_EQ(w.value, 1796083200u);
  EXPECT_FALSE(w.ttl);
  EXPECT_EQ(ParseOk("2028-02-29T12:34:56Z").value, 1835440496u);  // a leap day
  EXPECT_EQ(ParseOk("2026-12-01T00:00:00.750Z").value, 1796083200u);
  EXPECT_EQ(ParseOk("2026-12-01T02:00:00+02:00").value, 1796083200u);
  EXPECT_EQ(ParseOk("2026-11-30T22:30:00-01:30").value, 1796083200u);
  EXPECT_EQ(ParseOk("2106-02-07T06:28:15Z").value, UINT32_MAX);
}

TEST(ParseWhenTest, MalformedIso8601IsRefused) {
  for (std::string_view bad :
       {"2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z",
        "2026-12-32T00:00:00Z", "2026-12-01T24:00:00Z", "2026-12-01T00:60:00Z",
        "2026-12-01T00:00:60Z", "2026-12-01 00:00:00Z", "2026-12-01T00:00:00", "2026-12-01",
        "2026-12-01T00:00:00+0200", "2026-1-01T00:00:00Z", "2026-12-01T00:00:00.Z"}) {
    EXPECT_EQ(ParseBad(bad), "expiry \"" + std::string(bad) +
                                 "\" is not a valid ISO-8601 UTC time (like 2026-12-01T00:00:00Z)")
        << bad;
  }
  EXPECT_EQ(ParseBad("2106-02-07T06:28:16Z"),
            "expiry \"2106-02-07T06:28:16Z\" is after 2106 (past 32-bit Unix time)");
}

TEST(ParseWhenTest, NeverIsAbsoluteZero) {
  const When w = ParseOk("never");
  EXPECT_EQ(w.value, kNever);
  EXPECT_FALSE(w.ttl);
  EXPECT_NE(ParseBad("Never").find("not understood"), std::string::npos);
}

TEST(ParseWhenTest, ZeroTtlIsRefused) {
  EXPECT_EQ(ParseBad("0"), "TTL \"0\" is zero");
  EXPECT_EQ(ParseBad("0d"), "TTL \"0d\" is zero");
  EXPECT_EQ(ParseBad("000"), "TTL \"000\" is zero");
}

TEST(ParseWhenTest, ExpiryAtOrBeforeNowIsInThePast) {
  EXPECT_EQ(ParseBad("1767225600"), "expiry \"1767225600\" is in the past (now is 1767225600)");
  EXPECT_EQ(ParseBad("@1700000000"), "expiry \"@1700000000\" is in the past (now is 1767225600)");
  EXPECT_EQ(ParseBad("2025-12-31T23:59:59Z"),
            "expiry \"2025-12-31T23:59:59Z\" is in the past (now is 1767225600)");
  EXPECT_EQ(ParseBad("1969-12-31T23:59:59Z"),
            "expiry \"1969-12-31T23:59:59Z\" is in the past (now is 1767225600)");
  EXPECT_EQ(ParseBad("@0"), "expiry \"@0\" is in the past (now is 1767225600)");
}

TEST(ParseWhenTest, TtlPastThe32BitClockIsRefused) {
  ParseOptions late = Options();
  late.now = UINT32_MAX - 100;
  EXPECT_EQ(ParseOk("100", late).value, 100u);
  EXPECT_EQ(ParseBad("101", late),
            "TTL \"101\" is too long: it would expire after 2106 (past 32-bit Unix time)");
  EXPECT_EQ(ParseBad("2m", late),
            "TTL \"2m\" is too long: it would expire after 2106 (past 32-bit Unix time)");
  EXPECT_NE(ParseBad("50000d").find("too long"), std::string::npos);
  EXPECT_NE(ParseBad("99999999999999999999999d").find("too long"), std::string::npos);
}

TEST(ParseWhenTest, OtherTextIsRefused) {
  for (std::string_view bad : {"", "-5", "+5", " 5", "5 ", "1.5", "1e9", "abc", "5dd"}) {
    EXPECT_FALSE(ParseBad(bad).empty()) << bad;
  }
  EXPECT_EQ(ParseBad(""), "TTL or expiry is empty");
}

TEST_F(ParserTest, DefaultTtlMustBeUsable) {
  options_.default_ttl = 0;
  EXPECT_EQ(Reason("u,1"), "--default-ttl is zero");
  options_.default_ttl = UINT32_MAX;
  EXPECT_EQ(Reason("u,1"), "--default-ttl is too long: past 32-bit Unix time");
}

}  // namespace
}  // namespace segstore::loader
