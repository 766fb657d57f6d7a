#include "loader/field_parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loader/allocation_watch.h"

namespace segstore::loader {
namespace {

constexpr uint32_t kNow = 1767225600;  // 2026-01-01T00:00:00Z

using V = FieldValue;

// Parses lines in order (numbered from 1) with one parser.
class FieldParserTest : public ::testing::Test {
 protected:
  FieldParserTest() { options_.now = kNow; }

  Status Parse(std::string_view line) { return parser().Parse(line, ++line_number_, &out_); }

  // Parses `line` as line 2 of a fresh parser (never a header).
  Status ParseOne(std::string_view line) {
    parser_.emplace(options_);
    line_number_ = 1;
    return Parse(line);
  }

  // The value `text` parses to in a comma row of its own.
  V Value(std::string_view text) {
    Status s = ParseOne("u,f," + std::string(text));
    EXPECT_TRUE(s.ok()) << text << ": " << s.ToString();
    return out_.field.value;
  }

  // The reason of a refused line (fails the test if it was accepted).
  std::string Reason(std::string_view line) {
    Status s = ParseOne(line);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << line;
    EXPECT_TRUE(out_.user.empty()) << "a refused line left a user: " << line;
    return std::string(s.message());
  }
  std::string ValueReason(std::string_view text) { return Reason("u,f," + std::string(text)); }

  FieldParser& parser() {
    if (!parser_) parser_.emplace(options_);
    return *parser_;
  }

  FieldParseOptions options_;
  std::optional<FieldParser> parser_;
  uint64_t line_number_ = 0;
  FieldRow out_;
};

// ---- row forms ----

TEST_F(FieldParserTest, CommaRowSetsOneFieldThatNeverExpires) {
  ASSERT_TRUE(Parse("user-42,country,FR").ok());
  EXPECT_EQ(out_.user, "user-42");
  EXPECT_EQ(out_.field.name, "country");
  EXPECT_EQ(out_.field.value, V::String("FR"));
  EXPECT_EQ(out_.field.expiry, kNever);
  EXPECT_FALSE(out_.field.ttl);
  EXPECT_FALSE(out_.header);
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(FieldParserTest, TabRowIsDetectedAndMayHoldCommasInTheValue) {
  ASSERT_TRUE(Parse("u1\tconsent\tCP,AB,CD\t30d").ok());
  EXPECT_EQ(parser().delimiter(), '\t');
  EXPECT_EQ(out_.user, "u1");
  EXPECT_EQ(out_.field.value, V::String("CP,AB,CD"));
  EXPECT_EQ(out_.field.expiry, 30u * 86400);
  EXPECT_TRUE(out_.field.ttl);
  // Settled: a later line without a tab is one field.
  EXPECT_EQ(Parse("u2,country,FR").message(),
            "1 field, at least 3 (user,name,value[,ttl] separated by tab)");
}

TEST_F(FieldParserTest, ExplicitDelimiterIsKept) {
  options_.delimiter = ',';
  ASSERT_TRUE(Parse("u\t1,note,a\tb").ok());
  EXPECT_EQ(out_.user, "u\t1");
  EXPECT_EQ(out_.field.value, V::String("a\tb"));
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(FieldParserTest, RefusedFirstLineDoesNotSettleTheDelimiter) {
  EXPECT_FALSE(Parse("u\tf").ok());
  EXPECT_EQ(parser().delimiter(), 0);
  ASSERT_TRUE(Parse("u,f,1").ok());
  EXPECT_EQ(parser().delimiter(), ',');
}

TEST_F(FieldParserTest, TtlTakesTheSegmentLoadersForms) {
  options_.default_ttl = 600;
  struct Case {
    std::string ttl;
    uint32_t expiry;
    bool is_ttl;
  };
  for (const Case& c : std::vector<Case>{{"86400", 86400, true},
                                         {"90s", 90, true},
                                         {"15m", 900, true},
                                         {"12h", 43200, true},
                                         {"30d", 30 * 86400, true},
                                         {"@1790000000", 1790000000, false},
                                         {"1790000000", 1790000000, false},
                                         {"2026-12-01T00:00:00Z", 1796083200, false},
                                         {"2026-12-01T02:00:00+02:00", 1796083200, false},
                                         {"never", kNever, false},
                                         {"", 600, true}}) {  // empty: --default-ttl
    ASSERT_TRUE(ParseOne("u,f,1," + c.ttl).ok()) << c.ttl;
    EXPECT_EQ(out_.field.expiry, c.expiry) << c.ttl;
    EXPECT_EQ(out_.field.ttl, c.is_ttl) << c.ttl;
  }
  ASSERT_TRUE(ParseOne("u,f,1").ok());  // absent: --default-ttl
  EXPECT_EQ(out_.field.expiry, 600u);
  EXPECT_TRUE(out_.field.ttl);
  options_.default_ttl.reset();
  ASSERT_TRUE(ParseOne("u,f,1,").ok());  // without one: never
  EXPECT_EQ(out_.field.expiry, kNever);
  EXPECT_FALSE(out_.field.ttl);
}

// ---- value types ----

TEST_F(FieldParserTest, TypePrefixesGiveEachType) {
  EXPECT_EQ(Value("int:-42"), V::Int(-42));
  EXPECT_EQ(Value("int:007"), V::Int(7));
  EXPECT_EQ(Value("int:9223372036854775807"), V::Int(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(Value("int:-9223372036854775808"), V::Int(std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(Value("double:0.5"), V::Double(0.5));
  EXPECT_EQ(Value("double:3"), V::Double(3));
  EXPECT_EQ(Value("double:-2.5e-3"), V::Double(-2.5e-3));
  EXPECT_EQ(Value("double:.5"), V::Double(0.5));
  EXPECT_EQ(Value("str:FR"), V::String("FR"));
  EXPECT_EQ(Value("str:42"), V::String("42"));
  EXPECT_EQ(Value("str:"), V::String(""));
  EXPECT_EQ(Value("str:int:3"), V::String("int:3"));
  EXPECT_EQ(Value("str:caf\xC3\xA9"), V::String("caf\xC3\xA9"));
  EXPECT_EQ(Value("bytes:00ffA0"), V::Bytes(std::string("\x00\xff\xa0", 3)));
  EXPECT_EQ(Value("bytes:"), V::Bytes(""));
  EXPECT_EQ(Value("time:1790000000"), V::Time(1790000000));
  EXPECT_EQ(Value("time:0"), V::Time(0));
  EXPECT_EQ(Value("time:4294967295"), V::Time(UINT32_MAX));
  EXPECT_EQ(Value("time:2026-12-01T00:00:00Z"), V::Time(1796083200));
  EXPECT_EQ(Value("time:2026-12-01T01:00:00.5+01:00"), V::Time(1796083200));
}

// Without a prefix: a JSON number is an int (no fraction, no exponent) or
// a double; anything else is text.
TEST_F(FieldParserTest, UntypedValuesAreJsonNumbersOrText) {
  EXPECT_EQ(Value("42"), V::Int(42));
  EXPECT_EQ(Value("-7"), V::Int(-7));
  EXPECT_EQ(Value("0"), V::Int(0));
  EXPECT_EQ(Value("-0"), V::Int(0));
  EXPECT_EQ(Value("0.5"), V::Double(0.5));
  EXPECT_EQ(Value("-2.5E-3"), V::Double(-2.5e-3));
  EXPECT_EQ(Value("1e3"), V::Double(1000));
  EXPECT_EQ(Value("1.0"), V::Double(1));
  for (const char* text :
       {"FR",          "01234", "+33", ".5",    "5.",     "1e",          "- 1",
        "0x10",        "inf",   "nan", "true",  "null",   "1790000000Z", "2026-12-01T00:00:00Z",
        "hello world", " 42",   "42 ", "Int:3", "auto:3", "foo:bar"}) {
    EXPECT_EQ(Value(text), V::String(text)) << text;
  }
}

TEST_F(FieldParserTest, FieldTypeOptionTypesValuesWithoutAPrefix) {
  options_.untyped = FieldType::kString;
  EXPECT_EQ(Value("42"), V::String("42"));
  EXPECT_EQ(Value("int:42"), V::Int(42));  // a prefix still wins
  options_.untyped = FieldType::kDouble;
  EXPECT_EQ(Value("1"), V::Double(1));
  EXPECT_EQ(ValueReason("high"), "double \"high\" is not a number (like 0.5, -3 or 1e-3)");
  options_.untyped = FieldType::kInt;
  EXPECT_EQ(Value("3"), V::Int(3));
  EXPECT_EQ(ValueReason("3.5"), "int \"3.5\" is not a 64-bit integer");
  options_.untyped = FieldType::kTime;
  EXPECT_EQ(Value("2026-12-01T00:00:00Z"), V::Time(1796083200));
  options_.untyped = FieldType::kBytes;
  EXPECT_EQ(Value("cafe"), V::Bytes("\xca\xfe"));
  EXPECT_EQ(ValueReason(""), "value is empty (the empty string is str:)");

  FieldType t = FieldType::kAuto;
  for (const auto& [name, type] :
       std::vector<std::pair<std::string, FieldType>>{{"auto", FieldType::kAuto},
                                                      {"int", FieldType::kInt},
                                                      {"double", FieldType::kDouble},
                                                      {"str", FieldType::kString},
                                                      {"bytes", FieldType::kBytes},
                                                      {"time", FieldType::kTime}}) {
    ASSERT_TRUE(ParseFieldTypeName(name, &t)) << name;
    EXPECT_EQ(t, type) << name;
  }
  EXPECT_FALSE(ParseFieldTypeName("string", &t));
  EXPECT_FALSE(ParseFieldTypeName("INT", &t));
}

TEST_F(FieldParserTest, AValueLeavesNothingOfTheLineBefore) {
  ASSERT_TRUE(Parse("u,f,str:long text").ok());
  ASSERT_TRUE(Parse("u,f,5").ok());
  EXPECT_EQ(out_.field.value, V::Int(5));  // no string left behind (FieldValue == compares it)
  ASSERT_TRUE(Parse("u,f,0.5").ok());
  EXPECT_EQ(out_.field.value, V::Double(0.5));
}

// ---- quoting ----

TEST_F(FieldParserTest, QuotedFieldsAreUnquotedAsInRfc4180) {
  ASSERT_TRUE(ParseOne("\"u,1\",\"consent\",\"CP,AB\",\"30d\"").ok());
  EXPECT_EQ(out_.user, "u,1");
  EXPECT_EQ(out_.field.name, "consent");
  EXPECT_EQ(out_.field.value, V::String("CP,AB"));
  EXPECT_EQ(out_.field.expiry, 30u * 86400);
  ASSERT_TRUE(ParseOne("u,quote,\"say \"\"hi\"\"\"").ok());
  EXPECT_EQ(out_.field.value, V::String("say \"hi\""));
  ASSERT_TRUE(ParseOne("\"u\"\"2\",\"a\"\"b\",\"\"\"\"").ok());
  EXPECT_EQ(out_.user, "u\"2");
  EXPECT_EQ(out_.field.name, "a\"b");
  EXPECT_EQ(out_.field.value, V::String("\""));
  // The quotes are CSV's, not a type.
  EXPECT_EQ(Value("\"42\""), V::Int(42));
  EXPECT_EQ(Value("\"str:42\""), V::String("42"));
  // A quote inside an unquoted field is taken as it is.
  EXPECT_EQ(Value("5\"6"), V::String("5\"6"));
  // In a tab file too.
  ASSERT_TRUE(ParseOne("u\tf\t\"a\tb\"").ok());
  EXPECT_EQ(out_.field.value, V::String("a\tb"));
}

TEST_F(FieldParserTest, BadQuotingIsABadRow) {
  EXPECT_EQ(Reason("u,f,\"open"), "field 3 has an opening quote and no closing one");
  EXPECT_EQ(Reason("\"u,f,1"), "field 1 has an opening quote and no closing one");
  EXPECT_EQ(Reason("u,f,\"a\"b,1h"), "field 3: \"b\" after its closing quote");
  EXPECT_EQ(Reason("u,\"f\" ,1"), "field 2: \" \" after its closing quote");
  EXPECT_EQ(Reason("u,f,\"\""), "value is empty (the empty string is str:)");
}

// ---- lines skipped ----

TEST_F(FieldParserTest, HeaderOfColumnNamesOnLineOneIsSkipped) {
  for (const char* header :
       {"user,name,value,ttl", "user_id,field,value", "USER_ID\tFIELD_NAME\tVALUE\tEXPIRY",
        "uid,key,value", "\"user\",\"name\",\"value\"", "id,name,type,expires_at"}) {
    parser_.reset();
    ASSERT_TRUE(parser().Parse(header, 1, &out_).ok()) << header;
    EXPECT_TRUE(out_.header) << header;
    EXPECT_TRUE(out_.user.empty()) << header;
    EXPECT_EQ(parser().delimiter(), 0) << header;
  }
  // Other names are data; so is a header on a later line.
  parser_.reset();
  ASSERT_TRUE(parser().Parse("alice,name,Alice", 1, &out_).ok());
  EXPECT_FALSE(out_.header);
  EXPECT_EQ(out_.user, "alice");
  ASSERT_TRUE(parser().Parse("user,name,value", 2, &out_).ok());
  EXPECT_FALSE(out_.header);
  EXPECT_EQ(out_.user, "user");
  EXPECT_EQ(out_.field.value, V::String("value"));
}

TEST_F(FieldParserTest, CommentsBlankLinesByteOrderMarkAndCarriageReturn) {
  for (const char* skipped : {"", "   ", "\t", "# user,name,value", "#u,f,1", "\r"}) {
    ASSERT_TRUE(Parse(skipped).ok()) << skipped;
    EXPECT_TRUE(out_.user.empty()) << skipped;
    EXPECT_FALSE(out_.header) << skipped;
  }
  parser_.reset();
  ASSERT_TRUE(parser()
                  .Parse("\xEF\xBB\xBF"
                         "u,f,1\r",
                         1, &out_)
                  .ok());
  EXPECT_EQ(out_.user, "u");
  EXPECT_EQ(out_.field.value, V::Int(1));
  // Only at the end: a '\r' inside is the value's.
  ASSERT_TRUE(ParseOne("u,f,a\rb").ok());
  EXPECT_EQ(out_.field.value, V::String("a\rb"));
}

TEST_F(FieldParserTest, FieldsAreTakenAsTheyAre) {
  ASSERT_TRUE(ParseOne(" u , f , x ").ok());
  EXPECT_EQ(out_.user, " u ");
  EXPECT_EQ(out_.field.name, " f ");
  EXPECT_EQ(out_.field.value, V::String(" x "));
}

// ---- bad rows ----

TEST_F(FieldParserTest, WrongNumberOfFieldsIsABadRow) {
  EXPECT_EQ(Reason("lonely"), "1 field, at least 3 (user,name,value[,ttl] separated by ',')");
  EXPECT_EQ(Reason("u,f"), "2 fields, at least 3 (user,name,value[,ttl] separated by ',')");
  EXPECT_EQ(Reason("u\tf"), "2 fields, at least 3 (user,name,value[,ttl] separated by tab)");
  EXPECT_EQ(Reason("u,f,1,1h,x"), "5 fields, at most 4 (user,name,value[,ttl])");
  EXPECT_EQ(Reason("u,consent,a,b,c,d"), "6 fields, at most 4 (user,name,value[,ttl])");
  EXPECT_EQ(Reason("u\tf\t1\t1h\tx"), "5 fields, at most 4 (user,name,value[,ttl])");
}

TEST_F(FieldParserTest, EmptyOrLongUsersAndNamesAreBadRows) {
  EXPECT_EQ(Reason(",f,1"), "user ID is empty");
  EXPECT_EQ(Reason(std::string(257, 'k') + ",f,1"),
            "user ID of 257 bytes is over the limit of 256");
  ASSERT_TRUE(ParseOne(std::string(256, 'k') + ",f,1").ok());
  options_.max_key_bytes = 8;  // the server's, from its hello
  EXPECT_EQ(Reason("123456789,f,1"), "user ID of 9 bytes is over the limit of 8");
  EXPECT_EQ(Reason("u,,1"), "field name is empty");
  EXPECT_EQ(Reason("u,\"\",1"), "field name is empty");
  EXPECT_EQ(Reason("u," + std::string(65, 'n') + ",1"),
            "field name of 65 bytes is over the limit of 64");
  ASSERT_TRUE(ParseOne("u," + std::string(64, 'n') + ",1").ok());
}

TEST_F(FieldParserTest, BadValuesAreBadRows) {
  EXPECT_EQ(ValueReason(""), "value is empty (the empty string is str:)");
  EXPECT_EQ(ValueReason("int:"), "int \"\" is not a 64-bit integer");
  EXPECT_EQ(ValueReason("int:x"), "int \"x\" is not a 64-bit integer");
  EXPECT_EQ(ValueReason("int:-"), "int \"-\" is not a 64-bit integer");
  EXPECT_EQ(ValueReason("int:+5"), "int \"+5\" is not a 64-bit integer");
  EXPECT_EQ(ValueReason("int:1.5"), "int \"1.5\" is not a 64-bit integer");
  EXPECT_EQ(ValueReason("int:9223372036854775808"),
            "int \"9223372036854775808\" is out of range (-2^63 to 2^63-1)");
  EXPECT_EQ(ValueReason("double:"), "double \"\" is not a number (like 0.5, -3 or 1e-3)");
  EXPECT_EQ(ValueReason("double:high"), "double \"high\" is not a number (like 0.5, -3 or 1e-3)");
  EXPECT_EQ(ValueReason("double:inf"), "double \"inf\" is not a number (like 0.5, -3 or 1e-3)");
  EXPECT_EQ(ValueReason("double:nan"), "double \"nan\" is not a number (like 0.5, -3 or 1e-3)");
  EXPECT_EQ(ValueReason("double:0x1p3"), "double \"0x1p3\" is not a number (like 0.5, -3 or 1e-3)");
  EXPECT_EQ(ValueReason("double:1.5.2"), "double \"1.5.2\" is not a number (like 0.5, -3 or 1e-3)");
  EXPECT_EQ(ValueReason("double:1e999"), "double \"1e999\" is out of range");
  EXPECT_EQ(ValueReason("bytes:abc"), "bytes \"abc\" has an odd number of hex digits");
  EXPECT_EQ(ValueReason("bytes:zz"), "bytes \"zz\" is not hex");
  EXPECT_EQ(ValueReason("time:soon"),
            "time \"soon\" is not Unix seconds or an ISO-8601 time like 2026-12-01T00:00:00Z");
  EXPECT_EQ(ValueReason("time:-1"),
            "time \"-1\" is not Unix seconds or an ISO-8601 time like 2026-12-01T00:00:00Z");
  EXPECT_EQ(ValueReason("time:2026-12-01T00:00:00"),
            "time \"2026-12-01T00:00:00\" is not Unix seconds or an ISO-8601 time like "
            "2026-12-01T00:00:00Z");
  EXPECT_EQ(ValueReason("time:4294967296"),
            "time \"4294967296\" is after 2106 (past 32-bit Unix time)");
  EXPECT_EQ(ValueReason("time:99999999999999999999999"),
            "time \"99999999999999999999999\" is after 2106 (past 32-bit Unix time)");
  EXPECT_EQ(ValueReason("time:1969-12-31T23:59:59Z"),
            "time \"1969-12-31T23:59:59Z\" is before 1970");
  EXPECT_EQ(ValueReason("str:\xff\xfe"), "str \"\xff\xfe\" is not valid UTF-8 (write bytes:HEX)");
  EXPECT_EQ(ValueReason("\xC0\xAF"), "str \"\xC0\xAF\" is not valid UTF-8 (write bytes:HEX)");
  EXPECT_EQ(ValueReason("\xED\xA0\x80"),  // a surrogate
            "str \"\xED\xA0\x80\" is not valid UTF-8 (write bytes:HEX)");
  // An untyped number past its type's range is refused, not taken as text.
  EXPECT_EQ(ValueReason("99999999999999999999"),
            "number \"99999999999999999999\" is out of the 64-bit int range (write "
            "str:99999999999999999999 for text)");
  EXPECT_EQ(ValueReason("1e999"),
            "number \"1e999\" is out of the double range (write str:1e999 for text)");
}

TEST_F(FieldParserTest, ValuesOverTheServersLimitAreBadRows) {
  EXPECT_EQ(ValueReason("str:" + std::string(1025, 'x')),
            "value of 1025 bytes is over the limit of 1024");
  EXPECT_EQ(ValueReason(std::string(1025, 'x')), "value of 1025 bytes is over the limit of 1024");
  EXPECT_EQ(ValueReason("bytes:" + std::string(2050, 'a')),
            "value of 1025 bytes is over the limit of 1024");
  EXPECT_EQ(Value(std::string(1024, 'x')), V::String(std::string(1024, 'x')));
  options_.max_value_bytes = 4;
  EXPECT_EQ(ValueReason("hello"), "value of 5 bytes is over the limit of 4");
  // Numbers and times have no size limit.
  EXPECT_EQ(Value("123456789"), V::Int(123456789));
}

TEST_F(FieldParserTest, BadTtlsAreBadRows) {
  EXPECT_EQ(Reason("u,f,1,soon"),
            "TTL or expiry \"soon\" is not understood (seconds, 30d/12h/15m/90s, @<unix seconds>, "
            "2026-12-01T00:00:00Z or never)");
  EXPECT_EQ(Reason("u,f,1,0"), "TTL \"0\" is zero");
  EXPECT_EQ(Reason("u,f,1,@1700000000"),
            "expiry \"@1700000000\" is in the past (now is 1767225600)");
  EXPECT_EQ(Reason("u,f,1,99999d"),
            "TTL \"99999d\" is too long: it would expire after 2106 (past 32-bit Unix time)");
  EXPECT_EQ(Reason("u,f,1,\"1h\"\"\""),
            "TTL or expiry \"1h\\\"\" is not understood (seconds, 30d/12h/15m/90s, @<unix "
            "seconds>, 2026-12-01T00:00:00Z or never)");
  options_.default_ttl = UINT32_MAX;
  EXPECT_EQ(Reason("u,f,1"), "--default-ttl is too long: past 32-bit Unix time");
}

TEST_F(FieldParserTest, ControlBytesAreEscapedAndLongTextCutInTheReason) {
  EXPECT_EQ(ValueReason("int:\x01"), "int \"\\x01\" is not a 64-bit integer");
  EXPECT_EQ(ValueReason("int:" + std::string(100, 'x')),
            "int \"" + std::string(40, 'x') + "...\" (100 bytes) is not a 64-bit integer");
}

TEST_F(FieldParserTest, DataLinesAllocateNothingOnceWarm) {
  FieldParser parser(options_);
  const std::string quoted = "\"user,1\",\"note\",\"say \"\"hi\"\", twice\",\"30d\"";
  const std::string text = "user-2,country,str:a country name of some length,90d";
  for (int warm = 0; warm < 2; ++warm) {
    ASSERT_TRUE(parser.Parse(quoted, 2, &out_).ok());
    ASSERT_TRUE(parser.Parse(text, 2, &out_).ok());
  }
  uint64_t ok = 0;
  const uint64_t allocations = testing::AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      ok += parser.Parse("user-1,visits,42,1h", 3, &out_).ok();
      ok += parser.Parse("user-1,score,0.75", 4, &out_).ok();
      ok += parser.Parse(text, 5, &out_).ok();
      ok += parser.Parse(quoted, 6, &out_).ok();
      ok += parser.Parse("user-1,seen,time:2026-12-01T00:00:00Z", 7, &out_).ok();
      ok += parser.Parse("user-1,blob,bytes:00ff00ff", 8, &out_).ok();
    }
  });
  EXPECT_EQ(ok, 600u);
  EXPECT_EQ(allocations, 0u);
}

}  // namespace
}  // namespace segstore::loader
