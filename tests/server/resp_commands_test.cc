// The I/O-free half of the RESP front end (src/server/resp_commands.h): the
// command table's invariants and lookups, where each command's keys are, the
// error prefix of every status code, every argument parser's accepted and
// refused inputs (a refusal names the command and the argument), and the
// exact bytes of the replies in RESP2 and RESP3.
#include "server/resp_commands.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace segstore::server {
namespace {

using Args = std::vector<std::string_view>;

constexpr std::string_view kWriteId = "0123456789abcdef0123456789ABCDEF";
constexpr WriteId kWriteIdValue{0x0123456789abcdefull, 0x0123456789abcdefull};

// The message of an InvalidArgument refusal ("" and a failure otherwise).
std::string Refusal(const Status& s) {
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  return std::string(s.message());
}

std::string NotNumber(std::string_view what, uint64_t max, std::string_view text) {
  return std::string(what) + " must be a whole number from 0 to " + std::to_string(max) +
         " written without sign or leading zeros, not '" + std::string(text) + "'";
}

// ---- the table ----

TEST(RespCommandTableTest, NamesAreLowerCaseUniqueAndInIdOrder) {
  const auto table = RespCommandTable();
  ASSERT_EQ(table.size(), kRespCommands);
  std::set<std::string_view> names;
  for (size_t i = 0; i < table.size(); ++i) {
    const RespCommandDef& def = table[i];
    SCOPED_TRACE(def.name);
    EXPECT_EQ(static_cast<size_t>(def.id), i);
    EXPECT_EQ(&RespCommandOf(def.id), &def);
    ASSERT_FALSE(def.name.empty());
    EXPECT_TRUE(std::none_of(def.name.begin(), def.name.end(), [](char c) {
      return std::isupper(static_cast<unsigned char>(c)) ||
             std::isspace(static_cast<unsigned char>(c));
    }));
    EXPECT_TRUE(names.insert(def.name).second) << "named twice";
    EXPECT_FALSE(def.summary.empty());
    EXPECT_NE(def.arity, 0);
  }
}

TEST(RespCommandTableTest, FlagsAndGroupsAreFromTheKnownWords) {
  const std::set<std::string_view> flags = {"write", "readonly", "fast", "noauth", "movablekeys"};
  // Redis's groups, and segstore's own.
  const std::set<std::string_view> groups = {"connection", "server",  "generic", "cluster",
                                             "string",     "hash",    "list",    "set",
                                             "sorted-set", "segstore"};
  for (const RespCommandDef& def : RespCommandTable()) {
    SCOPED_TRACE(def.name);
    std::set<std::string_view> words;
    std::string_view rest = def.flags;
    while (!rest.empty()) {
      const size_t space = rest.find(' ');
      const std::string_view word = rest.substr(0, space);
      EXPECT_TRUE(flags.count(word)) << "flag '" << word << "'";
      EXPECT_TRUE(words.insert(word).second) << "flag '" << word << "' twice";
      rest.remove_prefix(space == std::string_view::npos ? rest.size() : space + 1);
    }
    EXPECT_FALSE(words.count("write") && words.count("readonly"));
    // Keys found by reading the arguments: movablekeys, as COMMAND says.
    EXPECT_EQ(words.count("movablekeys") == 1, def.keys == RespKeys::kCounted);
    EXPECT_TRUE(groups.count(def.group)) << def.group;
    EXPECT_EQ(def.group == "segstore", def.name.starts_with("seg."));
  }
}

// A command with keys has room for them in its arity: the fewest arguments it
// accepts give key positions within them, and at least one key.
TEST(RespCommandTableTest, EveryKeySpecFitsTheArity) {
  for (const RespCommandDef& def : RespCommandTable()) {
    SCOPED_TRACE(def.name);
    const size_t fewest = static_cast<size_t>(def.arity < 0 ? -def.arity : def.arity);
    switch (def.keys) {
      case RespKeys::kNone:
        break;
      case RespKeys::kFirst:
        EXPECT_GE(fewest, 2u);
        break;
      case RespKeys::kAll:
        EXPECT_LT(def.arity, 0) << "any number of keys";
        EXPECT_GE(fewest, 2u);
        break;
      case RespKeys::kCounted:
        EXPECT_LT(def.arity, 0) << "any number of keys";
        EXPECT_GE(fewest, 3u);
        break;
      case RespKeys::kTwo:
        EXPECT_GE(fewest, 3u);
        break;
    }
    Args args(fewest, "1");
    args[0] = def.name;
    std::vector<size_t> positions = {99};
    ASSERT_TRUE(RespKeyPositions(def, args, &positions).ok());
    EXPECT_EQ(positions.empty(), def.keys == RespKeys::kNone);
    for (size_t p : positions) {
      EXPECT_GE(p, 1u);
      EXPECT_LT(p, args.size());
    }
  }
}

TEST(RespCommandTableTest, FindIgnoresCase) {
  for (const RespCommandDef& def : RespCommandTable()) {
    std::string upper(def.name), mixed(def.name);
    for (size_t i = 0; i < upper.size(); ++i) {
      upper[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(upper[i])));
      if (i % 2 == 0) mixed[i] = upper[i];
    }
    EXPECT_EQ(FindRespCommand(def.name), &def);
    EXPECT_EQ(FindRespCommand(upper), &def) << upper;
    EXPECT_EQ(FindRespCommand(mixed), &def) << mixed;
    EXPECT_EQ(RespSlot(&def), static_cast<size_t>(def.id));
    EXPECT_EQ(RespSlotName(RespSlot(&def)), def.name);
  }
  EXPECT_EQ(FindRespCommand("SeG.uPsErT")->id, RespCmd::kSegUpsert);
  for (std::string_view unknown : {"", "pin", "pingg", "ping ", "seg", "seg.foo", "get", "set"}) {
    EXPECT_EQ(FindRespCommand(unknown), nullptr) << unknown;
  }
  EXPECT_EQ(RespSlot(nullptr), kRespCommands);
  EXPECT_EQ(RespSlotName(kRespCommands), "unknown");
  EXPECT_EQ(kRespCommandSlots, kRespCommands + 1);
}

// ---- keys ----

TEST(RespKeyPositionsTest, EachKindOfKeySpec) {
  std::vector<size_t> p = {7, 8};
  ASSERT_TRUE(RespKeyPositions(RespCommandOf(RespCmd::kPing), Args{"ping", "a", "b"}, &p).ok());
  EXPECT_TRUE(p.empty());
  ASSERT_TRUE(
      RespKeyPositions(RespCommandOf(RespCmd::kSegGet), Args{"seg.get", "u", "IDS", "1", "2"}, &p)
          .ok());
  EXPECT_EQ(p, std::vector<size_t>({1}));
  ASSERT_TRUE(RespKeyPositions(RespCommandOf(RespCmd::kType), Args{"type"}, &p).ok());
  EXPECT_TRUE(p.empty());
  ASSERT_TRUE(RespKeyPositions(RespCommandOf(RespCmd::kDel), Args{"del", "a", "b", "c"}, &p).ok());
  EXPECT_EQ(p, std::vector<size_t>({1, 2, 3}));
  ASSERT_TRUE(RespKeyPositions(RespCommandOf(RespCmd::kSegMget),
                               Args{"seg.mget", "2", "a", "b", "IDS", "1", "2"}, &p)
                  .ok());
  EXPECT_EQ(p, std::vector<size_t>({2, 3}));
  ASSERT_TRUE(
      RespKeyPositions(RespCommandOf(RespCmd::kSegMget), Args{"SEG.MGET", "3", "a", "b", "c"}, &p)
          .ok());
  EXPECT_EQ(p, std::vector<size_t>({2, 3, 4}));
  // Links are a single server's: SEG.LINK routes by its user alone.
  ASSERT_TRUE(
      RespKeyPositions(RespCommandOf(RespCmd::kSegLink), Args{"seg.link", "u", "m", "TTL", "5"}, &p)
          .ok());
  EXPECT_EQ(p, std::vector<size_t>({1}));
  ASSERT_TRUE(
      RespKeyPositions(RespCommandOf(RespCmd::kSegConnected), Args{"seg.connected", "a", "b"}, &p)
          .ok());
  EXPECT_EQ(p, std::vector<size_t>({1, 2}));
  ASSERT_TRUE(
      RespKeyPositions(RespCommandOf(RespCmd::kSegConnected), Args{"seg.connected", "a"}, &p).ok());
  EXPECT_EQ(p, std::vector<size_t>({1}));
  for (RespCmd id : {RespCmd::kSegUnlink, RespCmd::kSegMasterof, RespCmd::kSegLinks}) {
    ASSERT_TRUE(RespKeyPositions(RespCommandOf(id), Args{"x", "u", "COUNT", "1"}, &p).ok());
    EXPECT_EQ(p, std::vector<size_t>({1}));
  }
}

TEST(RespKeyPositionsTest, ABadNumusersIsRefused) {
  const RespCommandDef& mget = RespCommandOf(RespCmd::kSegMget);
  std::vector<size_t> p = {1};
  EXPECT_EQ(Refusal(RespKeyPositions(mget, Args{"seg.mget"}, &p)), "SEG.MGET: numusers is missing");
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(Refusal(RespKeyPositions(mget, Args{"seg.mget", "0", "a"}, &p)),
            "SEG.MGET: numusers must be at least 1");
  EXPECT_EQ(Refusal(RespKeyPositions(mget, Args{"seg.mget", "3", "a", "b"}, &p)),
            "SEG.MGET: " + NotNumber("numusers", 2, "3"));
  for (std::string_view bad : {"x", "-1", "+1", "01", "", "1 "}) {
    EXPECT_EQ(Refusal(RespKeyPositions(mget, Args{"seg.mget", bad, "a", "b"}, &p)),
              "SEG.MGET: " + NotNumber("numusers", 2, bad));
  }
}

// ---- error prefixes ----

TEST(RespErrorPrefixTest, EveryStatusCode) {
  using C = Status::Code;
  const std::pair<C, std::string_view> want[] = {
      {C::kOk, "OK"},
      {C::kNotFound, "NOTFOUND"},
      {C::kInvalidArgument, "ERR"},
      {C::kCorruption, "CORRUPTION"},
      {C::kIOError, "IOERR"},
      {C::kDeviceFull, "DEVICEFULL"},
      {C::kConflict, "CONFLICT"},
      {C::kLimitExceeded, "LIMIT"},
      {C::kBusy, "BUSY"},
      {C::kUnavailable, "UNAVAILABLE"},
      {C::kInternal, "INTERNAL"},
      {C::kUnsupported, "ERR"},
      {C::kTimeout, "TIMEOUT"},
      {C::kUnauthenticated, "NOAUTH"},
      {C::kWrongNode, "WRONGNODE"},
      {C::kLogUnavailable, "TRYAGAIN"},
      {C::kInDoubt, "INDOUBT"},
      {C::kReadOnly, "READONLY"},
  };
  ASSERT_EQ(std::size(want), Status::kMaxCode + 1u) << "a code without a prefix";
  for (const auto& [code, prefix] : want) {
    EXPECT_EQ(RespErrorPrefix(code), prefix) << Status::CodeName(code);
  }
  // Each is one upper-case word, as a client's error parser expects.
  for (uint8_t c = 0; c <= Status::kMaxCode; ++c) {
    const std::string_view prefix = RespErrorPrefix(static_cast<C>(c));
    ASSERT_FALSE(prefix.empty());
    EXPECT_TRUE(std::all_of(prefix.begin(), prefix.end(), [](char ch) {
      return ch >= 'A' && ch <= 'Z';
    })) << prefix;
  }
}

// ---- numbers and write IDs ----

TEST(ParseRespNumberTest, AcceptsPlainDecimalsUpToTheMax) {
  uint64_t v = 99;
  ASSERT_TRUE(ParseRespNumber("0", "n", UINT64_MAX, &v).ok());
  EXPECT_EQ(v, 0u);
  ASSERT_TRUE(ParseRespNumber("42", "n", 42, &v).ok());
  EXPECT_EQ(v, 42u);
  ASSERT_TRUE(ParseRespNumber("4294967295", "n", UINT32_MAX, &v).ok());
  EXPECT_EQ(v, UINT32_MAX);
  ASSERT_TRUE(ParseRespNumber("18446744073709551615", "n", UINT64_MAX, &v).ok());
  EXPECT_EQ(v, UINT64_MAX);
}

TEST(ParseRespNumberTest, RefusesSignsLeadingZerosJunkAndOverRange) {
  uint64_t v = 0;
  for (std::string_view bad : {"", "-1", "+1", "-0", "00", "01", "007", " 1", "1 ", "1a", "0x10",
                               "1.5", "1e3", "\xd9\xa1"}) {
    EXPECT_EQ(Refusal(ParseRespNumber(bad, "LIMIT", UINT32_MAX, &v)),
              NotNumber("LIMIT", UINT32_MAX, bad))
        << bad;
  }
  EXPECT_EQ(Refusal(ParseRespNumber("43", "n", 42, &v)), NotNumber("n", 42, "43"));
  EXPECT_EQ(Refusal(ParseRespNumber("4294967296", "n", UINT32_MAX, &v)),
            NotNumber("n", UINT32_MAX, "4294967296"));
  EXPECT_EQ(Refusal(ParseRespNumber("18446744073709551616", "n", UINT64_MAX, &v)),
            NotNumber("n", UINT64_MAX, "18446744073709551616"));
  EXPECT_EQ(Refusal(ParseRespNumber("99999999999999999999999", "n", UINT64_MAX, &v)),
            NotNumber("n", UINT64_MAX, "99999999999999999999999"));
  // A long argument is quoted in part only.
  const std::string long_text(1000, 'z');
  EXPECT_EQ(Refusal(ParseRespNumber(long_text, "n", 1, &v)),
            NotNumber("n", 1, long_text.substr(0, 64)));
}

TEST(ParseWriteIdTest, ThirtyTwoHexDigitsNotAllZero) {
  WriteId id;
  ASSERT_TRUE(ParseWriteId(kWriteId, &id).ok());
  EXPECT_EQ(id, kWriteIdValue);
  ASSERT_TRUE(ParseWriteId("00000000000000000000000000000001", &id).ok());
  EXPECT_EQ(id, (WriteId{0, 1}));
  ASSERT_TRUE(ParseWriteId("ffffffffffffffff0000000000000000", &id).ok());
  EXPECT_EQ(id, (WriteId{UINT64_MAX, 0}));
  const std::string kDigits = "WRITEID must be 32 hexadecimal digits";
  for (std::string_view bad :
       {"", "0", "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0",
        "0123456789abcdef0123456789abcdeg", "0x23456789abcdef0123456789abcdef",
        " 123456789abcdef0123456789abcdef", "-123456789abcdef0123456789abcdef"}) {
    EXPECT_EQ(Refusal(ParseWriteId(bad, &id)), kDigits) << bad;
  }
  EXPECT_EQ(Refusal(ParseWriteId(std::string(32, '0'), &id)), "WRITEID must not be all zeros");
}

// ---- SEG.GET and SEG.MGET options ----

TEST(ParseGetOptionsTest, NoOptionsKeepsTheDefaults) {
  GetOptions o;
  ASSERT_TRUE(ParseGetOptions(Args{"seg.get", "u"}, 2, &o).ok());
  const GetOptions d;
  EXPECT_EQ(o.expiry_from, d.expiry_from);
  EXPECT_EQ(o.expiry_to, d.expiry_to);
  EXPECT_EQ(o.outside_expiry_window, d.outside_expiry_window);
  EXPECT_EQ(o.id_from, d.id_from);
  EXPECT_EQ(o.id_to, d.id_to);
  EXPECT_EQ(o.count_only, d.count_only);
  EXPECT_EQ(o.limit, d.limit);
  EXPECT_EQ(o.ids_only, d.ids_only);
}

TEST(ParseGetOptionsTest, EveryOptionInAnyOrderAndCase) {
  GetOptions o;
  ASSERT_TRUE(ParseGetOptions(Args{"seg.get", "u", "idsonly", "LIMIT", "10", "Ids", "5",
                                   "18446744073709551615", "count", "WINDOW", "100", "4294967295"},
                              2, &o)
                  .ok());
  EXPECT_TRUE(o.ids_only);
  EXPECT_EQ(o.limit, 10u);
  EXPECT_EQ(o.id_from, 5u);
  EXPECT_EQ(o.id_to, UINT64_MAX);
  EXPECT_TRUE(o.count_only);
  EXPECT_EQ(o.expiry_from, 100u);
  EXPECT_EQ(o.expiry_to, UINT32_MAX);
  EXPECT_FALSE(o.outside_expiry_window);

  GetOptions n;
  ASSERT_TRUE(ParseGetOptions(Args{"seg.get", "u", "notexpiring", "7", "8"}, 2, &n).ok());
  EXPECT_TRUE(n.outside_expiry_window);
  EXPECT_EQ(n.expiry_from, 7u);
  EXPECT_EQ(n.expiry_to, 8u);

  GetOptions own;
  ASSERT_TRUE(ParseGetOptions(Args{"seg.get", "u", "own"}, 2, &own).ok());
  EXPECT_TRUE(own.own_only);
  EXPECT_FALSE(GetOptions{}.own_only);
  EXPECT_FALSE(o.own_only);

  // SEG.MGET's options start after its users.
  GetOptions m;
  ASSERT_TRUE(ParseGetOptions(Args{"seg.mget", "2", "LIMIT", "COUNT", "LIMIT", "3"}, 4, &m).ok());
  EXPECT_EQ(m.limit, 3u);
  EXPECT_FALSE(m.count_only);
}

TEST(ParseGetOptionsTest, RefusalsNameTheCommandAndTheArgument) {
  const auto refusal = [](Args args) {
    GetOptions o;
    return Refusal(ParseGetOptions(args, 2, &o));
  };
  EXPECT_EQ(refusal({"seg.get", "u", "WINDOW", "1", "2", "WINDOW", "1", "2"}),
            "SEG.GET: give WINDOW or NOTEXPIRING once");
  EXPECT_EQ(refusal({"seg.get", "u", "NOTEXPIRING", "1", "2", "window", "1", "2"}),
            "SEG.GET: give WINDOW or NOTEXPIRING once");
  EXPECT_EQ(refusal({"seg.get", "u", "NOTEXPIRING", "1", "2", "NotExpiring", "1", "2"}),
            "SEG.GET: give WINDOW or NOTEXPIRING once");
  EXPECT_EQ(refusal({"seg.get", "u", "WINDOW"}), "SEG.GET: WINDOW from is missing");
  EXPECT_EQ(refusal({"seg.get", "u", "window", "1"}), "SEG.GET: WINDOW to is missing");
  EXPECT_EQ(refusal({"seg.get", "u", "WINDOW", "x", "1"}),
            "SEG.GET: " + NotNumber("WINDOW from", UINT32_MAX, "x"));
  EXPECT_EQ(refusal({"seg.get", "u", "notexpiring", "1", "4294967296"}),
            "SEG.GET: " + NotNumber("NOTEXPIRING to", UINT32_MAX, "4294967296"));
  EXPECT_EQ(refusal({"seg.get", "u", "IDS"}), "SEG.GET: IDS lo is missing");
  EXPECT_EQ(refusal({"seg.get", "u", "IDS", "1"}), "SEG.GET: IDS hi is missing");
  EXPECT_EQ(refusal({"seg.get", "u", "IDS", "-1", "2"}),
            "SEG.GET: " + NotNumber("IDS lo", UINT64_MAX, "-1"));
  EXPECT_EQ(refusal({"seg.get", "u", "IDS", "1", "18446744073709551616"}),
            "SEG.GET: " + NotNumber("IDS hi", UINT64_MAX, "18446744073709551616"));
  EXPECT_EQ(refusal({"seg.get", "u", "LIMIT"}), "SEG.GET: LIMIT is missing");
  EXPECT_EQ(refusal({"seg.get", "u", "LIMIT", "01"}),
            "SEG.GET: " + NotNumber("LIMIT", UINT32_MAX, "01"));
  EXPECT_EQ(refusal({"seg.get", "u", "COUNT", "FOO"}),
            "SEG.GET: unknown option 'FOO' (WINDOW, NOTEXPIRING, IDS, COUNT, LIMIT, IDSONLY, OWN, "
            "FIELDS, ALLFIELDS, FIELDPREFIX)");
  EXPECT_EQ(refusal({"seg.get", "u", "5"}),
            "SEG.GET: unknown option '5' (WINDOW, NOTEXPIRING, IDS, COUNT, LIMIT, IDSONLY, OWN, "
            "FIELDS, ALLFIELDS, FIELDPREFIX)");
  GetOptions o;
  EXPECT_EQ(Refusal(ParseGetOptions(Args{"Seg.MGet", "1", "u", "bogus"}, 3, &o)),
            "SEG.MGET: unknown option 'bogus' (WINDOW, NOTEXPIRING, IDS, COUNT, LIMIT, IDSONLY, "
            "OWN, FIELDS, ALLFIELDS, FIELDPREFIX)");
}

// ---- SEG.UPSERT ----

TEST(ParseUpsertTest, OneSegmentWithTheDefaults) {
  proto::UpsertRequest r;
  ASSERT_TRUE(ParseUpsert(Args{"seg.upsert", "user-1", "5", "100"}, &r).ok());
  EXPECT_EQ(r.user, "user-1");
  EXPECT_EQ(r.mode, UpsertMode::kSet);
  EXPECT_TRUE(r.write_id.empty());
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].id, 5u);
  EXPECT_EQ(r.segments[0].value, 100u);
  EXPECT_FALSE(r.segments[0].ttl);
  EXPECT_FALSE(r.segments[0].attr1);
  EXPECT_FALSE(r.segments[0].attr2);
}

TEST(ParseUpsertTest, ModesTtlWriteIdAndAttributesPerSegment) {
  const std::pair<std::string_view, UpsertMode> modes[] = {
      {"SET", UpsertMode::kSet}, {"extend", UpsertMode::kExtend}, {"Add", UpsertMode::kAdd}};
  for (const auto& [word, mode] : modes) {
    proto::UpsertRequest r;
    ASSERT_TRUE(ParseUpsert(Args{"seg.upsert", "u", word, "1", "2"}, &r).ok()) << word;
    EXPECT_EQ(r.mode, mode);
  }
  proto::UpsertRequest r;
  ASSERT_TRUE(ParseUpsert(Args{"SEG.UPSERT", "u", "ttl", "WRITEID", kWriteId, "ADD",
                               "18446744073709551615", "4294967295", "ATTR1", "7", "2", "20",
                               "attr2", "0", "Attr1", "4294967295", "3", "30"},
                          &r)
                  .ok());
  EXPECT_EQ(r.mode, UpsertMode::kAdd);
  EXPECT_EQ(r.write_id, kWriteIdValue);
  ASSERT_EQ(r.segments.size(), 3u);
  EXPECT_EQ(r.segments[0].id, UINT64_MAX);
  EXPECT_EQ(r.segments[0].value, UINT32_MAX);
  EXPECT_EQ(r.segments[0].attr1, 7u);
  EXPECT_FALSE(r.segments[0].attr2);
  EXPECT_EQ(r.segments[1].id, 2u);
  EXPECT_EQ(r.segments[1].value, 20u);
  EXPECT_EQ(r.segments[1].attr1, UINT32_MAX);
  EXPECT_EQ(r.segments[1].attr2, 0u);
  EXPECT_EQ(r.segments[2].id, 3u);
  EXPECT_FALSE(r.segments[2].attr1);
  EXPECT_FALSE(r.segments[2].attr2);
  for (const SegmentUpdate& u : r.segments) EXPECT_TRUE(u.ttl);
  // A write ID of digits only is still the write ID, not a segment.
  proto::UpsertRequest d;
  ASSERT_TRUE(
      ParseUpsert(Args{"seg.upsert", "u", "WRITEID", "00000000000000000000000000000002", "9", "1"},
                  &d)
          .ok());
  EXPECT_EQ(d.write_id, (WriteId{0, 2}));
  ASSERT_EQ(d.segments.size(), 1u);
  EXPECT_EQ(d.segments[0].id, 9u);
}

TEST(ParseUpsertTest, RefusalsNameTheCommandAndTheArgument) {
  const auto refusal = [](Args args) {
    proto::UpsertRequest req;
    return Refusal(ParseUpsert(args, &req));
  };
  const std::string u32 = std::to_string(UINT32_MAX);
  EXPECT_EQ(refusal({"seg.upsert", "u", "SET", "ADD", "1", "2"}),
            "SEG.UPSERT: give one mode: SET, EXTEND or ADD");
  EXPECT_EQ(refusal({"seg.upsert", "u", "set", "set", "1", "2"}),
            "SEG.UPSERT: give one mode: SET, EXTEND or ADD");
  EXPECT_EQ(refusal({"seg.upsert", "u", "FOO", "1", "2"}),
            "SEG.UPSERT: unknown option 'FOO' (SET, EXTEND, ADD, TTL, WRITEID) before the first "
            "segment");
  EXPECT_EQ(refusal({"seg.upsert", "u", "TTL"}),
            "SEG.UPSERT: no segment given: id value [ATTR1 n] [ATTR2 n] ...");
  EXPECT_EQ(refusal({"seg.upsert", "u", "WRITEID"}), "SEG.UPSERT: WRITEID is missing its id");
  EXPECT_EQ(refusal({"seg.upsert", "u", "WRITEID", "abc", "1", "2"}),
            "SEG.UPSERT: WRITEID must be 32 hexadecimal digits");
  EXPECT_EQ(refusal({"seg.upsert", "u", "WRITEID",
                     std::string_view("00000000000000000000000000000000"), "1", "2"}),
            "SEG.UPSERT: WRITEID must not be all zeros");
  EXPECT_EQ(refusal({"seg.upsert", "u", "5"}), "SEG.UPSERT: segment 5 has no value");
  EXPECT_EQ(refusal({"seg.upsert", "u", "1", "2", "6"}), "SEG.UPSERT: segment 6 has no value");
  EXPECT_EQ(refusal({"seg.upsert", "u", "01", "2"}),
            "SEG.UPSERT: " + NotNumber("segment id", UINT64_MAX, "01"));
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "x"}),
            "SEG.UPSERT: " + NotNumber("value of segment 5", UINT32_MAX, "x"));
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "4294967296"}),
            "SEG.UPSERT: " + NotNumber("value of segment 5", UINT32_MAX, "4294967296"));
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "1", "ATTR1", "1", "ATTR1", "2"}),
            "SEG.UPSERT: segment 5: ATTR1 given twice");
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "1", "attr2", "1", "ATTR1", "1", "Attr2", "2"}),
            "SEG.UPSERT: segment 5: ATTR2 given twice");
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "1", "ATTR1"}),
            "SEG.UPSERT: ATTR1 of segment 5 is missing");
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "1", "attr2", "-3"}),
            "SEG.UPSERT: " + NotNumber("ATTR2 of segment 5", UINT32_MAX, "-3"));
  // Options go before the first segment; after it, only segments.
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "1", "TTL"}),
            "SEG.UPSERT: " + NotNumber("segment id", UINT64_MAX, "TTL"));
  EXPECT_EQ(refusal({"seg.upsert", "u", "5", "1", "ATTR1", "2", "WRITEID", kWriteId}),
            "SEG.UPSERT: " + NotNumber("segment id", UINT64_MAX, "WRITEID"));
}

// ---- SEG.REMOVE, SEG.TRIM, SEG.DEL, SEG.COUNT ----

TEST(ParseRemoveTest, AcceptedAndRefused) {
  proto::RemoveRequest r;
  ASSERT_TRUE(ParseRemove(Args{"seg.remove", "u", "1", "18446744073709551615", "1"}, &r).ok());
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.ids, std::vector<uint64_t>({1, UINT64_MAX, 1}));
  EXPECT_TRUE(r.write_id.empty());
  proto::RemoveRequest w;
  ASSERT_TRUE(ParseRemove(Args{"seg.remove", "u", "writeid", kWriteId, "3"}, &w).ok());
  EXPECT_EQ(w.write_id, kWriteIdValue);
  EXPECT_EQ(w.ids, std::vector<uint64_t>({3}));

  const auto refusal = [](Args args) {
    proto::RemoveRequest req;
    return Refusal(ParseRemove(args, &req));
  };
  EXPECT_EQ(refusal({"seg.remove", "u", "WRITEID", kWriteId}), "SEG.REMOVE: no segment id given");
  EXPECT_EQ(refusal({"seg.remove", "u", "WRITEID"}), "SEG.REMOVE: WRITEID is missing its id");
  EXPECT_EQ(refusal({"seg.remove", "u", "WRITEID", "12", "3"}),
            "SEG.REMOVE: WRITEID must be 32 hexadecimal digits");
  EXPECT_EQ(refusal({"seg.remove", "u", "1", "x"}),
            "SEG.REMOVE: " + NotNumber("segment id", UINT64_MAX, "x"));
  EXPECT_EQ(refusal({"seg.remove", "u", "1", "WRITEID", kWriteId}),
            "SEG.REMOVE: " + NotNumber("segment id", UINT64_MAX, "WRITEID"));
}

TEST(ParseTrimTest, AcceptedAndRefused) {
  proto::TrimRequest r;
  ASSERT_TRUE(ParseTrim(Args{"seg.trim", "u"}, &r).ok());
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.before, 0u);
  EXPECT_TRUE(r.write_id.empty());
  proto::TrimRequest b;
  ASSERT_TRUE(
      ParseTrim(Args{"seg.trim", "u", "WRITEID", kWriteId, "before", "4294967295"}, &b).ok());
  EXPECT_EQ(b.before, UINT32_MAX);
  EXPECT_EQ(b.write_id, kWriteIdValue);
  proto::TrimRequest c;
  ASSERT_TRUE(ParseTrim(Args{"seg.trim", "u", "BEFORE", "100", "writeid", kWriteId}, &c).ok());
  EXPECT_EQ(c.before, 100u);
  EXPECT_EQ(c.write_id, kWriteIdValue);

  const auto refusal = [](Args args) {
    proto::TrimRequest req;
    return Refusal(ParseTrim(args, &req));
  };
  EXPECT_EQ(refusal({"seg.trim", "u", "BEFORE"}), "SEG.TRIM: BEFORE is missing");
  EXPECT_EQ(refusal({"seg.trim", "u", "BEFORE", "-1"}),
            "SEG.TRIM: " + NotNumber("BEFORE", UINT32_MAX, "-1"));
  EXPECT_EQ(refusal({"seg.trim", "u", "BEFORE", "4294967296"}),
            "SEG.TRIM: " + NotNumber("BEFORE", UINT32_MAX, "4294967296"));
  EXPECT_EQ(refusal({"seg.trim", "u", "WRITEID"}), "SEG.TRIM: WRITEID is missing its id");
  EXPECT_EQ(refusal({"seg.trim", "u", "WRITEID", std::string(32, '0')}),
            "SEG.TRIM: WRITEID must not be all zeros");
  EXPECT_EQ(refusal({"seg.trim", "u", "NOW"}), "SEG.TRIM: unknown option 'NOW' (BEFORE, WRITEID)");
  EXPECT_EQ(refusal({"seg.trim", "u", "5"}), "SEG.TRIM: unknown option '5' (BEFORE, WRITEID)");
}

TEST(ParseDeleteTest, AcceptedAndRefused) {
  proto::DeleteRequest r;
  ASSERT_TRUE(ParseDelete(Args{"seg.del", "u"}, &r).ok());
  EXPECT_EQ(r.user, "u");
  EXPECT_TRUE(r.write_id.empty());
  proto::DeleteRequest w;
  ASSERT_TRUE(ParseDelete(Args{"seg.del", "u", "WriteId", kWriteId}, &w).ok());
  EXPECT_EQ(w.write_id, kWriteIdValue);

  const auto refusal = [](Args args) {
    proto::DeleteRequest req;
    return Refusal(ParseDelete(args, &req));
  };
  EXPECT_EQ(refusal({"seg.del", "u", "FOO"}), "SEG.DEL: unknown option 'FOO' (WRITEID)");
  EXPECT_EQ(refusal({"seg.del", "u", "WRITEID", kWriteId, "x"}),
            "SEG.DEL: unknown option 'x' (WRITEID)");
  EXPECT_EQ(refusal({"seg.del", "u", "WRITEID"}), "SEG.DEL: WRITEID is missing its id");
  EXPECT_EQ(refusal({"seg.del", "u", "WRITEID", "z"}),
            "SEG.DEL: WRITEID must be 32 hexadecimal digits");
}

TEST(ParseCountTest, AcceptedAndRefused) {
  proto::CountRequest r;
  ASSERT_TRUE(ParseCount(Args{"seg.count", "u"}, &r).ok());
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.id_from, 0u);
  EXPECT_EQ(r.id_to, UINT64_MAX);
  proto::CountRequest i;
  ASSERT_TRUE(ParseCount(Args{"seg.count", "u", "ids", "3", "18446744073709551615"}, &i).ok());
  EXPECT_EQ(i.id_from, 3u);
  EXPECT_EQ(i.id_to, UINT64_MAX);

  const auto refusal = [](Args args) {
    proto::CountRequest req;
    return Refusal(ParseCount(args, &req));
  };
  EXPECT_EQ(refusal({"seg.count", "u", "IDS"}), "SEG.COUNT: the only option is IDS lo hi");
  EXPECT_EQ(refusal({"seg.count", "u", "IDS", "1"}), "SEG.COUNT: the only option is IDS lo hi");
  EXPECT_EQ(refusal({"seg.count", "u", "IDS", "1", "2", "3"}),
            "SEG.COUNT: the only option is IDS lo hi");
  EXPECT_EQ(refusal({"seg.count", "u", "LIMIT", "1", "2"}),
            "SEG.COUNT: the only option is IDS lo hi");
  EXPECT_EQ(refusal({"seg.count", "u", "IDS", "x", "2"}),
            "SEG.COUNT: " + NotNumber("IDS lo", UINT64_MAX, "x"));
  EXPECT_EQ(refusal({"seg.count", "u", "IDS", "1", "02"}),
            "SEG.COUNT: " + NotNumber("IDS hi", UINT64_MAX, "02"));
}

// ---- profile bridging ----

TEST(ParseLinkTest, AcceptedAndRefused) {
  proto::LinkRequest r;
  ASSERT_TRUE(ParseLink(Args{"seg.link", "work", "home"}, &r).ok());
  EXPECT_EQ(r.user, "work");
  EXPECT_EQ(r.master, "home");
  EXPECT_EQ(r.ttl, 0u);
  EXPECT_TRUE(r.write_id.empty());
  proto::LinkRequest t;
  ASSERT_TRUE(
      ParseLink(Args{"seg.link", "u", "m", "writeid", kWriteId, "ttl", "4294967295"}, &t).ok());
  EXPECT_EQ(t.ttl, UINT32_MAX);
  EXPECT_EQ(t.write_id, kWriteIdValue);
  proto::LinkRequest z;
  ASSERT_TRUE(ParseLink(Args{"seg.link", "u", "m", "TTL", "0"}, &z).ok());
  EXPECT_EQ(z.ttl, 0u);

  const auto refusal = [](Args args) {
    proto::LinkRequest req;
    return Refusal(ParseLink(args, &req));
  };
  EXPECT_EQ(refusal({"seg.link", "u", "m", "TTL"}), "SEG.LINK: TTL is missing");
  EXPECT_EQ(refusal({"seg.link", "u", "m", "TTL", "soon"}),
            "SEG.LINK: " + NotNumber("TTL", UINT32_MAX, "soon"));
  EXPECT_EQ(refusal({"seg.link", "u", "m", "TTL", "-5"}),
            "SEG.LINK: " + NotNumber("TTL", UINT32_MAX, "-5"));
  EXPECT_EQ(refusal({"seg.link", "u", "m", "TTL", "4294967296"}),
            "SEG.LINK: " + NotNumber("TTL", UINT32_MAX, "4294967296"));
  EXPECT_EQ(refusal({"Seg.Link", "u", "m", "EX", "5"}),
            "SEG.LINK: unknown option 'EX' (TTL, WRITEID)");
  EXPECT_EQ(refusal({"seg.link", "u", "m", "5"}), "SEG.LINK: unknown option '5' (TTL, WRITEID)");
  EXPECT_EQ(refusal({"seg.link", "u", "m", "WRITEID"}), "SEG.LINK: WRITEID is missing its id");
  EXPECT_EQ(refusal({"seg.link", "u", "m", "WRITEID", "z"}),
            "SEG.LINK: WRITEID must be 32 hexadecimal digits");
}

TEST(ParseUnlinkTest, AcceptedAndRefused) {
  proto::UnlinkRequest r;
  ASSERT_TRUE(ParseUnlink(Args{"seg.unlink", "u"}, &r).ok());
  EXPECT_EQ(r.user, "u");
  EXPECT_TRUE(r.write_id.empty());
  proto::UnlinkRequest w;
  ASSERT_TRUE(ParseUnlink(Args{"seg.unlink", "u", "WRITEID", kWriteId}, &w).ok());
  EXPECT_EQ(w.write_id, kWriteIdValue);

  const auto refusal = [](Args args) {
    proto::UnlinkRequest req;
    return Refusal(ParseUnlink(args, &req));
  };
  EXPECT_EQ(refusal({"seg.unlink", "u", "m"}), "SEG.UNLINK: unknown option 'm' (WRITEID)");
  EXPECT_EQ(refusal({"seg.unlink", "u", "WRITEID", kWriteId, "x"}),
            "SEG.UNLINK: unknown option 'x' (WRITEID)");
  EXPECT_EQ(refusal({"seg.unlink", "u", "WRITEID"}), "SEG.UNLINK: WRITEID is missing its id");
}

TEST(ParseLinksTest, AcceptedAndRefused) {
  proto::LinksRequest r;
  ASSERT_TRUE(ParseLinks(Args{"seg.links", "u"}, &r).ok());
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.cursor, "");
  EXPECT_EQ(r.limit, 0u);  // the server's default
  proto::LinksRequest c;
  ASSERT_TRUE(ParseLinks(Args{"seg.links", "u", "count", "2", "Cursor", "phone"}, &c).ok());
  EXPECT_EQ(c.cursor, "phone");
  EXPECT_EQ(c.limit, 2u);
  proto::LinksRequest e;
  ASSERT_TRUE(ParseLinks(Args{"seg.links", "u", "CURSOR", ""}, &e).ok());
  EXPECT_EQ(e.cursor, "");

  const auto refusal = [](Args args) {
    proto::LinksRequest req;
    return Refusal(ParseLinks(args, &req));
  };
  EXPECT_EQ(refusal({"seg.links", "u", "COUNT", "0"}), "SEG.LINKS: COUNT must be at least 1");
  EXPECT_EQ(refusal({"seg.links", "u", "COUNT", "-1"}),
            "SEG.LINKS: " + NotNumber("COUNT", UINT32_MAX, "-1"));
  EXPECT_EQ(refusal({"seg.links", "u", "COUNT"}), "SEG.LINKS: COUNT is missing");
  EXPECT_EQ(refusal({"seg.links", "u", "CURSOR"}), "SEG.LINKS: CURSOR is missing");
  EXPECT_EQ(refusal({"seg.links", "u", "MATCH", "*"}),
            "SEG.LINKS: unknown option 'MATCH' (CURSOR, COUNT)");
}

// ---- hashes ----

TEST(ParseFieldTest, AFieldIsASegmentId) {
  uint64_t id = 0;
  ASSERT_TRUE(ParseField(Args{"hget", "u", "18446744073709551615"}, 2, &id).ok());
  EXPECT_EQ(id, UINT64_MAX);
  for (std::string_view bad : {"", "x", "01", "-1", "18446744073709551616"}) {
    EXPECT_EQ(Refusal(ParseField(Args{"hget", "u", bad}, 2, &id)),
              "HGET: field '" + std::string(bad) +
                  "' is not a segment ID: a hash field here is a decimal number from 0 to "
                  "18446744073709551615 written without sign or leading zeros (proto/RESP.md, "
                  "\"Hashes\")");
  }
}

TEST(ParseFieldsClauseTest, AcceptedAndRefused) {
  std::vector<uint64_t> ids = {99};
  ASSERT_TRUE(ParseFieldsClause(Args{"httl", "u", "fields", "2", "5", "0"}, 2, &ids).ok());
  EXPECT_EQ(ids, std::vector<uint64_t>({5, 0}));
  const auto refusal = [](Args args) {
    std::vector<uint64_t> out;
    return Refusal(ParseFieldsClause(args, 2, &out));
  };
  const std::string missing =
      "HTTL: mandatory argument FIELDS is missing or not at the right position";
  const std::string numfields = "HTTL: numfields must be a whole number greater than 0";
  const std::string mismatch = "HTTL: the numfields parameter must match the number of arguments";
  EXPECT_EQ(refusal({"httl", "u"}), missing);
  EXPECT_EQ(refusal({"httl", "u", "1", "FIELDS", "1", "5"}), missing);
  EXPECT_EQ(refusal({"httl", "u", "FIELDS"}), numfields);
  EXPECT_EQ(refusal({"httl", "u", "FIELDS", "0"}), numfields);
  EXPECT_EQ(refusal({"httl", "u", "FIELDS", "x", "5"}), numfields);
  EXPECT_EQ(refusal({"httl", "u", "FIELDS", "4294967296", "5"}), numfields);
  EXPECT_EQ(refusal({"httl", "u", "FIELDS", "2", "5"}), mismatch);
  EXPECT_EQ(refusal({"httl", "u", "FIELDS", "1", "5", "6"}), mismatch);
  EXPECT_EQ(refusal({"httl", "u", "FIELDS", "1", "five"}),
            "HTTL: field 'five' is not a segment ID: a hash field here is a decimal number from 0 "
            "to 18446744073709551615 written without sign or leading zeros (proto/RESP.md, "
            "\"Hashes\")");
}

TEST(ParseFieldValueTest, AttributesAsTextReadAndWrittenAlike) {
  struct Case {
    std::string_view text;
    std::optional<uint32_t> attr1, attr2;
  };
  const Case good[] = {{"", {}, {}},
                       {"7", 7u, {}},
                       {"7:9", 7u, 9u},
                       {":9", {}, 9u},
                       {"4294967295:0", UINT32_MAX, 0u}};
  for (const Case& c : good) {
    SCOPED_TRACE(c.text);
    std::optional<uint32_t> a1 = 1u, a2 = 2u;
    ASSERT_TRUE(ParseFieldValue(c.text, &a1, &a2));
    EXPECT_EQ(a1, c.attr1);
    EXPECT_EQ(a2, c.attr2);
    std::string back = "x";
    AppendFieldValue(a1, a2, &back);
    EXPECT_EQ(back, "x" + std::string(c.text));
  }
  for (std::string_view bad : {":", "7:", "a", "07", "-1", "1:2:3", "4294967296", "1 ", " :1"}) {
    std::optional<uint32_t> a1, a2;
    EXPECT_FALSE(ParseFieldValue(bad, &a1, &a2)) << bad;
  }
}

// ---- replies ----

std::string Reply(bool resp3, const auto& write) {
  std::string out;
  proto::RespWriter w(&out, resp3);
  write(&w);
  return out;
}

TEST(RespRepliesTest, GetWithExpiriesAndAttributes) {
  GetResult r;
  r.ids = {5, UINT64_MAX};
  r.expires = {100, kNever};
  r.attr1 = {3u, std::nullopt};
  r.count = 9;
  const auto write = [&](proto::RespWriter* w) { WriteGetReply(r, GetOptions{}, false, w); };
  EXPECT_EQ(Reply(false, write),
            "*10\r\n$5\r\ncount\r\n:9\r\n$5\r\nstale\r\n:0\r\n"
            "$3\r\nids\r\n*2\r\n$1\r\n5\r\n$20\r\n18446744073709551615\r\n"
            "$7\r\nexpires\r\n*2\r\n:100\r\n:0\r\n$5\r\nattr1\r\n*2\r\n:3\r\n$-1\r\n");
  EXPECT_EQ(Reply(true, write),
            "%5\r\n$5\r\ncount\r\n:9\r\n$5\r\nstale\r\n#f\r\n"
            "$3\r\nids\r\n*2\r\n$1\r\n5\r\n$20\r\n18446744073709551615\r\n"
            "$7\r\nexpires\r\n*2\r\n:100\r\n:0\r\n$5\r\nattr1\r\n*2\r\n:3\r\n_\r\n");
}

TEST(RespRepliesTest, GetIdsOnlyCountOnlyAndStale) {
  GetResult ids;
  ids.ids = {1, 22};
  ids.count = 2;
  GetOptions ids_only;
  ids_only.ids_only = true;
  const auto write_ids = [&](proto::RespWriter* w) { WriteGetReply(ids, ids_only, true, w); };
  EXPECT_EQ(Reply(false, write_ids),
            "*6\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:1\r\n$3\r\nids\r\n*2\r\n"
            "$1\r\n1\r\n$2\r\n22\r\n");
  EXPECT_EQ(Reply(true, write_ids),
            "%3\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n#t\r\n$3\r\nids\r\n*2\r\n"
            "$1\r\n1\r\n$2\r\n22\r\n");
  // ids_only asked, expiries present all the same: ids only.
  ids.expires = {7, 8};
  EXPECT_EQ(Reply(true, write_ids),
            "%3\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n#t\r\n$3\r\nids\r\n*2\r\n"
            "$1\r\n1\r\n$2\r\n22\r\n");

  GetResult count;
  count.count = 4294967295u;
  GetOptions count_only;
  count_only.count_only = true;
  const auto write_count = [&](proto::RespWriter* w) {
    WriteGetReply(count, count_only, false, w);
  };
  EXPECT_EQ(Reply(false, write_count),
            "*6\r\n$5\r\ncount\r\n:4294967295\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n");
  EXPECT_EQ(Reply(true, write_count),
            "%3\r\n$5\r\ncount\r\n:4294967295\r\n$5\r\nstale\r\n#f\r\n$3\r\nids\r\n*0\r\n");
}

// A merged view (a linked user's read) ends with its master and how many
// profiles it merged; any other read has neither pair.
TEST(RespRepliesTest, GetOfAMergedViewNamesItsMaster) {
  GetResult r;
  r.ids = {1, 2};
  r.expires = {kNever, 100};
  r.count = 2;
  r.master = "home";
  r.profiles = 3;
  const auto write = [&](proto::RespWriter* w) { WriteGetReply(r, GetOptions{}, false, w); };
  EXPECT_EQ(Reply(false, write),
            "*12\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:0\r\n"
            "$3\r\nids\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n$7\r\nexpires\r\n*2\r\n:0\r\n:100\r\n"
            "$6\r\nmaster\r\n$4\r\nhome\r\n$8\r\nprofiles\r\n:3\r\n");
  EXPECT_EQ(Reply(true, write),
            "%6\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n#f\r\n"
            "$3\r\nids\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n$7\r\nexpires\r\n*2\r\n:0\r\n:100\r\n"
            "$6\r\nmaster\r\n$4\r\nhome\r\n$8\r\nprofiles\r\n:3\r\n");
  GetOptions count_only;
  count_only.count_only = true;
  GetResult count;
  count.count = 7;
  count.master = "m";
  count.profiles = 2;
  EXPECT_EQ(Reply(true, [&](proto::RespWriter* w) { WriteGetReply(count, count_only, true, w); }),
            "%5\r\n$5\r\ncount\r\n:7\r\n$5\r\nstale\r\n#t\r\n$3\r\nids\r\n*0\r\n"
            "$6\r\nmaster\r\n$1\r\nm\r\n$8\r\nprofiles\r\n:2\r\n");
  // No master: as before groups were, whatever `profiles` says.
  r.master.clear();
  EXPECT_EQ(Reply(true, write),
            "%4\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n#f\r\n"
            "$3\r\nids\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n$7\r\nexpires\r\n*2\r\n:0\r\n:100\r\n");
}

TEST(RespRepliesTest, LinkAndLinks) {
  const LinkResult r{"home", 3, 1};
  const auto link = [&](proto::RespWriter* w) { WriteLinkReply(r, w); };
  EXPECT_EQ(Reply(false, link),
            "*6\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$7\r\nmembers\r\n:3\r\n"
            "$5\r\nmoved\r\n:1\r\n");
  EXPECT_EQ(Reply(true, link),
            "%3\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$7\r\nmembers\r\n:3\r\n"
            "$5\r\nmoved\r\n:1\r\n");

  LinksPage page;
  page.master = "home";
  page.links = {{"phone", 1790003600}, {"work", kNever}};
  page.next = "work";
  const auto links = [&](proto::RespWriter* w) { WriteLinksReply(page, w); };
  EXPECT_EQ(Reply(false, links),
            "*6\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$5\r\nlinks\r\n*2\r\n"
            "*2\r\n$5\r\nphone\r\n:1790003600\r\n*2\r\n$4\r\nwork\r\n:0\r\n"
            "$4\r\nnext\r\n$4\r\nwork\r\n");
  EXPECT_EQ(Reply(true, links),
            "%3\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$5\r\nlinks\r\n*2\r\n"
            "*2\r\n$5\r\nphone\r\n:1790003600\r\n*2\r\n$4\r\nwork\r\n:0\r\n"
            "$4\r\nnext\r\n$4\r\nwork\r\n");
  // The last page: an empty cursor.
  const LinksPage last{"home", {}, ""};
  EXPECT_EQ(Reply(true, [&](proto::RespWriter* w) { WriteLinksReply(last, w); }),
            "%3\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$5\r\nlinks\r\n*0\r\n"
            "$4\r\nnext\r\n$0\r\n\r\n");
}

TEST(RespRepliesTest, Upsert) {
  const UpsertResult r{1, 2, 3, 4, true};
  const auto write = [&](proto::RespWriter* w) { WriteUpsertReply(r, w); };
  EXPECT_EQ(Reply(false, write),
            "*10\r\n$8\r\ninserted\r\n:1\r\n$7\r\nupdated\r\n:2\r\n$7\r\ntrimmed\r\n:3\r\n"
            "$5\r\ncount\r\n:4\r\n$9\r\nduplicate\r\n:1\r\n");
  EXPECT_EQ(Reply(true, write),
            "%5\r\n$8\r\ninserted\r\n:1\r\n$7\r\nupdated\r\n:2\r\n$7\r\ntrimmed\r\n:3\r\n"
            "$5\r\ncount\r\n:4\r\n$9\r\nduplicate\r\n#t\r\n");
  const UpsertResult zero{};
  EXPECT_EQ(Reply(true, [&](proto::RespWriter* w) { WriteUpsertReply(zero, w); }),
            "%5\r\n$8\r\ninserted\r\n:0\r\n$7\r\nupdated\r\n:0\r\n$7\r\ntrimmed\r\n:0\r\n"
            "$5\r\ncount\r\n:0\r\n$9\r\nduplicate\r\n#f\r\n");
}

TEST(RespRepliesTest, Trim) {
  const TrimResult r{5, 6, false};
  const auto write = [&](proto::RespWriter* w) { WriteTrimReply(r, w); };
  EXPECT_EQ(Reply(false, write),
            "*6\r\n$7\r\ntrimmed\r\n:5\r\n$9\r\nremaining\r\n:6\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(Reply(true, write),
            "%3\r\n$7\r\ntrimmed\r\n:5\r\n$9\r\nremaining\r\n:6\r\n$9\r\nduplicate\r\n#f\r\n");
}

TEST(RespRepliesTest, CommandInfo) {
  const auto info = [](RespCmd id) {
    return [id](proto::RespWriter* w) { WriteCommandInfo(RespCommandOf(id), w); };
  };
  EXPECT_EQ(
      Reply(true, info(RespCmd::kPing)),
      "*10\r\n$4\r\nping\r\n:-1\r\n~1\r\n+fast\r\n:0\r\n:0\r\n:0\r\n~0\r\n~0\r\n*0\r\n*0\r\n");
  EXPECT_EQ(Reply(false, info(RespCmd::kSegGet)),
            "*10\r\n$7\r\nseg.get\r\n:-2\r\n*1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n"
            "*0\r\n");
  EXPECT_EQ(
      Reply(false, info(RespCmd::kDel)),
      "*10\r\n$3\r\ndel\r\n:-2\r\n*1\r\n+write\r\n:1\r\n:-1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n");
  EXPECT_EQ(Reply(true, info(RespCmd::kSegMget)),
            "*10\r\n$8\r\nseg.mget\r\n:-3\r\n~2\r\n+readonly\r\n+movablekeys\r\n:0\r\n:0\r\n:0\r\n"
            "~0\r\n~0\r\n*0\r\n*0\r\n");
  EXPECT_EQ(Reply(false, info(RespCmd::kSegConnected)),
            "*10\r\n$13\r\nseg.connected\r\n:3\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:2\r\n"
            ":1\r\n*0\r\n*0\r\n*0\r\n*0\r\n");
  EXPECT_EQ(Reply(false, info(RespCmd::kSegLink)),
            "*10\r\n$8\r\nseg.link\r\n:-3\r\n*1\r\n+write\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n"
            "*0\r\n*0\r\n");
}

}  // namespace
}  // namespace segstore::server
