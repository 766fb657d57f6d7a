// libFuzzer target: the bytes a RESP client sends, read as the RESP front
// end reads a connection (src/server/resp_connection.cc) without the sockets.
// Byte 0 of the input picks the command size limit and the read size, byte 1
// the cut points; the rest is the stream. It goes through a
// proto::RespReader in reads cut there, and after each read every whole
// command is taken. What must hold:
// - Space() offers room; a command's arguments lie within the bytes its
//   Take() consumed; taken() only grows, by more than zero for a command;
//   Ready() agrees with Take(); kNeedMore leaves Ready() false;
// - a plain walk of those bytes finds the command again: a multibulk's
//   arguments are its bulk strings, in place; an unquoted inline line's
//   arguments are its words;
// - kBroken takes none of the bytes that broke the stream, carries a
//   "Protocol error: " message and stays, with the same message, whatever
//   comes after it, until Clear(); after Clear() a fresh command reads;
// - the commands, the final state and taken() are those of the same stream
//   given in one read (a cut changes nothing);
// - every argument written back as a bulk string array reads back the same,
//   and as a simple string or error stays on one line.
// Each command then goes through every parser of src/server/resp_commands.h
// (a refusal is InvalidArgument naming the command; what is accepted is
// consistent with the arguments: the profile field commands' names valid,
// SEG.INCR's delta its argument), and each argument through
// ParseRespNumber, ParseWriteId and ParseField against a plain
// reimplementation, ParseFieldValue (what it accepts, AppendFieldValue
// writes back alike) and ParseTypedValue as each type of profile field
// (what it accepts is the argument's own value).
//
// Seeds: fuzz_seeds writes RESP streams (multibulk, inline, quoted,
// pipelined, empty commands, each SEG.* command).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "proto/resp.h"
#include "server/resp_commands.h"

namespace segstore::fuzz {
namespace {

using proto::RespReader;
using proto::RespWriter;
using Next = RespReader::Next;
using server::RespArgs;

// Small limits put every refusal within a short input; the largest is above
// the inline limit (64 KiB) and small enough that a bulk promising it (the
// reader makes room for all of it) keeps the fuzzer fast.
constexpr uint32_t kLimits[] = {16, 40, 100, 300, 4096, 1 << 17};
constexpr size_t kReadSizes[] = {1, 3, 16, 4096};
constexpr size_t kKeepBytes = 1024;

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// A parser's refusal names the command first.
void CheckRefusal(const Status& s, RespArgs args) {
  if (s.ok()) return;
  FUZZ_CHECK(s.code() == Status::Code::kInvalidArgument);
  // Named by the command, or Redis's own words for a wrong count (HSET).
  FUZZ_CHECK(s.message().starts_with(Upper(args[0]) + ": ") ||
             s.message().starts_with("wrong number of arguments for '"));
}

bool IsDecimal(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// What ParseRespNumber must accept: digits without leading zeros, in range.
bool FitsU64(std::string_view s) {
  if (!IsDecimal(s) || (s.size() > 1 && s[0] == '0')) return false;
  return s.size() < 20 || (s.size() == 20 && s <= "18446744073709551615");
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void CheckArgument(std::string_view a) {
  uint64_t v = 0;
  const Status s64 = server::ParseRespNumber(a, "n", UINT64_MAX, &v);
  FUZZ_CHECK(s64.ok() == FitsU64(a));
  if (s64.ok()) {
    FUZZ_CHECK(std::to_string(v) == a);
  } else {
    FUZZ_CHECK(s64.code() == Status::Code::kInvalidArgument && !s64.message().empty());
  }
  const Status s32 = server::ParseRespNumber(a, "n", UINT32_MAX, &v);
  FUZZ_CHECK(s32.ok() == (s64.ok() && (a.size() < 10 || (a.size() == 10 && a <= "4294967295"))));
  if (s32.ok()) FUZZ_CHECK(v <= UINT32_MAX && std::to_string(v) == a);

  WriteId id;
  const Status w = server::ParseWriteId(a, &id);
  const bool hex =
      a.size() == 32 && std::all_of(a.begin(), a.end(), [](char c) { return Hex(c) >= 0; });
  const bool zero = hex && std::all_of(a.begin(), a.end(), [](char c) { return c == '0'; });
  FUZZ_CHECK(w.ok() == (hex && !zero));
  if (w.ok()) {
    for (size_t i = 0; i < 32; ++i) {
      const uint64_t part = i < 16 ? id.hi : id.lo;
      FUZZ_CHECK(static_cast<int>((part >> (4 * (15 - i % 16))) & 0xf) == Hex(a[i]));
    }
  } else {
    FUZZ_CHECK(w.code() == Status::Code::kInvalidArgument && !w.message().empty());
  }
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool IsFieldName(std::string_view n) { return !n.empty() && n.size() <= proto::kMaxFieldNameBytes; }

// An argument as a profile field's value of each type, against a plain
// reading of RESP.md's rule: what is accepted is the argument's own value.
void CheckTypedValue(std::string_view a) {
  using T = FieldValue::Type;
  FieldValue v;
  const Status i = server::ParseTypedValue(a, T::kInt, &v);
  FUZZ_CHECK(i.ok() || i.code() == Status::Code::kInvalidArgument);
  if (i.ok()) FUZZ_CHECK(v.type == T::kInt && std::to_string(v.i) == a);
  // Digits without leading zeros, an optional '-', not "-0": what to_string writes back.
  const std::string_view digits = a.starts_with('-') ? a.substr(1) : a;
  if (IsDecimal(digits) && digits.size() <= 18 && (digits.size() == 1 || digits[0] != '0') &&
      a != "-0") {
    FUZZ_CHECK(i.ok());
  }
  const Status d = server::ParseTypedValue(a, T::kDouble, &v);
  FUZZ_CHECK(d.ok() || d.code() == Status::Code::kInvalidArgument);
  if (d.ok()) {
    FUZZ_CHECK(v.type == T::kDouble && !std::isnan(v.d));
    FUZZ_CHECK(!a.empty() && !IsSpace(a.front()) && !IsSpace(a.back()));
  }
  if (i.ok()) FUZZ_CHECK(d.ok());  // every int reads as a double too
  const Status s = server::ParseTypedValue(a, T::kString, &v);
  if (s.ok()) FUZZ_CHECK(v.type == T::kString && v.s == a);
  if (std::all_of(a.begin(), a.end(), [](char c) { return (c & 0x80) == 0; })) FUZZ_CHECK(s.ok());
  FUZZ_CHECK(server::ParseTypedValue(a, T::kBytes, &v).ok() && v.type == T::kBytes && v.s == a);
  const Status t = server::ParseTypedValue(a, T::kTime, &v);
  FUZZ_CHECK(t.ok() == (FitsU64(a) && (a.size() < 10 || (a.size() == 10 && a <= "4294967295"))));
  if (t.ok()) FUZZ_CHECK(v.type == T::kTime && std::to_string(v.i) == a);
}

// The profile field commands' parsers: a refusal names the command; what
// is accepted has the user, valid names, and what RESP.md says of it.
void ParseFieldCommands(RespArgs args) {
  {
    proto::FieldSetRequest r;
    const Status s = server::ParseFieldSet(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1]);
      FUZZ_CHECK(!r.fields.empty() && r.fields.size() <= (args.size() - 2) / 2);
      for (const FieldUpdate& u : r.fields) {
        FUZZ_CHECK(IsFieldName(u.name));
        FUZZ_CHECK(!(u.ttl && u.expiry == 0));
      }
    }
  }
  {
    proto::FieldDeleteRequest r;
    const Status s = server::ParseFieldDelete(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1]);
      FUZZ_CHECK(r.names.size() + (r.write_id.empty() ? 4 : 6) == args.size());
      for (const std::string& n : r.names) FUZZ_CHECK(IsFieldName(n));
    }
  }
  if (args.size() < 4) return;  // SEG.INCR's and SEG.FIELDMAX's arity
  {
    proto::FieldIncrementRequest r;
    const Status s = server::ParseFieldIncrement(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1] && r.increment.name == args[2]);
      FUZZ_CHECK(std::to_string(r.increment.delta) == args[3]);
      FUZZ_CHECK(r.increment.window == FieldIncrement::Window::kFixed || r.increment.ttl > 0);
    }
  }
  {
    proto::FieldMaxRequest r;
    const Status s = server::ParseFieldMax(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1] && r.field.name == args[2]);
      FUZZ_CHECK(r.field.value.type != FieldValue::Type::kString &&
                 r.field.value.type != FieldValue::Type::kBytes);
      FUZZ_CHECK(!(r.field.ttl && r.field.expiry == 0));
    }
  }
}

// Every parser and key lookup on one command, whatever its name.
void ParseCommand(RespArgs args) {
  const server::RespCommandDef* def = server::FindRespCommand(args[0]);
  FUZZ_CHECK(server::RespSlot(def) < server::kRespCommandSlots);
  if (def != nullptr) FUZZ_CHECK(Upper(def->name) == Upper(args[0]));
  for (const server::RespCommandDef& d : server::RespCommandTable()) {
    std::vector<size_t> positions = {12345};
    const Status s = server::RespKeyPositions(d, args, &positions);
    CheckRefusal(s, args);
    if (!s.ok()) continue;
    for (size_t i = 0; i < positions.size(); ++i) {
      FUZZ_CHECK(positions[i] >= 1 && positions[i] < args.size());
      FUZZ_CHECK(i == 0 || positions[i] > positions[i - 1]);
    }
    if (d.keys == server::RespKeys::kCounted) {
      // The options after the users, as SEG.MGET reads them.
      GetOptions o;
      CheckRefusal(server::ParseGetOptions(args, 2 + positions.size(), &o), args);
    }
  }
  for (std::string_view a : args) {
    CheckArgument(a);
    CheckTypedValue(a);
  }
  // Hashes: each argument as a field and as a field's value; FIELDS clauses
  // where HTTL and its kin have them, and around.
  for (size_t i = 0; i < args.size(); ++i) {
    uint64_t id = 0;
    const Status f = server::ParseField(args, i, &id);
    CheckRefusal(f, args);
    FUZZ_CHECK(f.ok() == FitsU64(args[i]));
    std::optional<uint32_t> attr1, attr2;
    if (server::ParseFieldValue(args[i], &attr1, &attr2)) {
      std::string back;
      server::AppendFieldValue(attr1, attr2, &back);
      FUZZ_CHECK(back == args[i]);
    }
  }
  for (size_t at = 1; at <= std::min<size_t>(args.size(), 3); ++at) {
    std::vector<uint64_t> ids;
    const Status s = server::ParseFieldsClause(args, at, &ids);
    CheckRefusal(s, args);
    if (s.ok()) FUZZ_CHECK(!ids.empty() && ids.size() == args.size() - at - 2);
  }
  // Each of these reads the user at args[1]: the arity check comes first.
  if (args.size() < 2) return;
  GetOptions o;
  CheckRefusal(server::ParseGetOptions(args, 2, &o), args);
  {
    proto::UpsertRequest r;
    const Status s = server::ParseUpsert(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1]);
      FUZZ_CHECK(!r.segments.empty() && r.segments.size() <= (args.size() - 2) / 2);
      FUZZ_CHECK(r.mode == UpsertMode::kSet || r.mode == UpsertMode::kExtend ||
                 r.mode == UpsertMode::kAdd);
    }
  }
  {
    proto::RemoveRequest r;
    const Status s = server::ParseRemove(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1]);
      FUZZ_CHECK(!r.ids.empty() && r.ids.size() <= args.size() - 2);
      FUZZ_CHECK(r.ids.size() + (r.write_id.empty() ? 0 : 2) == args.size() - 2);
    }
  }
  {
    proto::TrimRequest r;
    const Status s = server::ParseTrim(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) FUZZ_CHECK(r.user == args[1]);
  }
  {
    proto::DeleteRequest r;
    const Status s = server::ParseDelete(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1]);
      FUZZ_CHECK(args.size() == (r.write_id.empty() ? 2u : 4u));
    }
  }
  {
    proto::UpsertRequest r;
    const Status s = server::ParseHashSet(args, 1'790'000'000, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1] && r.replace_attrs && !r.segments.empty());
      for (const SegmentUpdate& u : r.segments) {
        FUZZ_CHECK(std::count_if(r.segments.begin(), r.segments.end(),
                                 [&](const SegmentUpdate& v) { return v.id == u.id; }) == 1);
      }
    }
  }
  {
    proto::ExpireRequest r;
    const Status s = server::ParseHashExpire(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) FUZZ_CHECK(r.user == args[1] && !r.ids.empty());
  }
  {
    proto::ExpireRequest r;
    std::vector<uint64_t> ids;
    bool expire = false;
    const Status s = server::ParseHashGetEx(args, &ids, &expire, &r);
    CheckRefusal(s, args);
    if (s.ok()) FUZZ_CHECK(r.user == args[1] && !ids.empty() && r.ids == ids);
  }
  {
    proto::CountRequest r;
    const Status s = server::ParseCount(args, &r);
    CheckRefusal(s, args);
    if (s.ok()) {
      FUZZ_CHECK(r.user == args[1]);
      FUZZ_CHECK(args.size() == 2 || args.size() == 5);
    }
  }
  if (o.fields.mode == FieldSelection::Mode::kNames) {
    FUZZ_CHECK(!o.fields.names.empty());
    for (const std::string& n : o.fields.names) FUZZ_CHECK(IsFieldName(n));
  }
  if (o.fields.mode == FieldSelection::Mode::kPrefix) {
    FUZZ_CHECK(o.fields.prefix.size() <= proto::kMaxFieldNameBytes);
  }
  ParseFieldCommands(args);
}

// The arguments written back: as a multibulk they read back the same; as a
// simple string or an error they stay on one line.
void CheckWriteBack(const std::vector<std::string>& args) {
  std::string out;
  RespWriter w(&out, args.size() % 2 == 0);
  w.Array(args.size());
  for (const std::string& a : args) w.Bulk(a);
  RespReader in(4096, 4096, UINT32_MAX);
  std::string_view rest = out;
  while (!rest.empty()) {
    const auto s = in.Space();
    const size_t n = std::min(rest.size(), s.size);
    std::memcpy(s.data, rest.data(), n);
    in.Commit(n);
    rest.remove_prefix(n);
  }
  std::vector<std::string_view> back;
  std::string error;
  FUZZ_CHECK(in.Take(&back, &error) == Next::kCommand);
  FUZZ_CHECK(back.size() == args.size());
  for (size_t i = 0; i < args.size(); ++i) FUZZ_CHECK(back[i] == args[i]);
  FUZZ_CHECK(in.empty() && in.taken() == out.size());

  for (const std::string& a : args) {
    std::string simple, err;
    RespWriter(&simple, true).Simple(a);
    RespWriter(&err, false).Error("ERR", a);
    FUZZ_CHECK(simple.size() == a.size() + 3 && simple[0] == '+');
    FUZZ_CHECK(err.size() == (a.empty() ? 6 : a.size() + 7) && err.starts_with("-ERR"));
    FUZZ_CHECK(simple.find_first_of("\r\n") == simple.size() - 2 && simple.ends_with("\r\n"));
    FUZZ_CHECK(err.find_first_of("\r\n") == err.size() - 2 && err.ends_with("\r\n"));
  }
}

// "<integer>\r\n" at stream[*at], stepped over; false when not there.
bool ReadLineNumber(std::string_view stream, size_t* at, int64_t* v) {
  const size_t cr = stream.find("\r\n", *at);
  if (cr == std::string_view::npos) return false;
  const auto [p, ec] = std::from_chars(stream.data() + *at, stream.data() + cr, *v);
  if (ec != std::errc() || p != stream.data() + cr) return false;
  *at = cr + 2;
  return true;
}

// The command that Take() handed out from stream bytes [begin, end), read
// again from the stream by a plain walk: the empty commands first, then a
// multibulk whose arguments must be its bulk strings where they lie
// (`offset_of` maps an argument to its stream offset), or an inline line
// whose words, when it has no quotes, must be the arguments.
template <typename OffsetOf>
void CheckAgainstStream(std::string_view stream, size_t begin, size_t end,
                        const std::vector<std::string_view>& args, OffsetOf offset_of) {
  size_t at = begin;
  int64_t count = 0;
  for (;;) {
    FUZZ_CHECK(at < end);
    if (stream[at] == '*') {
      ++at;
      FUZZ_CHECK(ReadLineNumber(stream, &at, &count));
      if (count > 0) break;
      continue;
    }
    const size_t nl = stream.find('\n', at);
    FUZZ_CHECK(nl != std::string_view::npos && nl < end);
    const std::string_view line = stream.substr(at, nl - at);
    at = nl + 1;
    if (std::all_of(line.begin(), line.end(), IsSpace)) continue;
    // The last line taken, and not empty.
    FUZZ_CHECK(at == end);
    if (line.find_first_of("\"'") != std::string_view::npos) return;
    size_t word = 0;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && IsSpace(line[i])) ++i;
      size_t j = i;
      while (j < line.size() && !IsSpace(line[j])) ++j;
      if (j > i) {
        FUZZ_CHECK(word < args.size() && args[word] == line.substr(i, j - i));
        ++word;
      }
      i = j;
    }
    FUZZ_CHECK(word == args.size());
    return;
  }
  // A multibulk of args.size() bulk strings, ending at `end`.
  FUZZ_CHECK(static_cast<uint64_t>(count) == args.size());
  for (std::string_view a : args) {
    int64_t length = -1;
    FUZZ_CHECK(stream[at] == '$');
    ++at;
    FUZZ_CHECK(ReadLineNumber(stream, &at, &length));
    FUZZ_CHECK(static_cast<uint64_t>(length) == a.size() && offset_of(a) == at);
    FUZZ_CHECK(stream.substr(at, a.size()) == a);
    at += a.size();
    FUZZ_CHECK(stream.substr(at, 2) == "\r\n");
    at += 2;
  }
  FUZZ_CHECK(at == end);
}

struct Outcome {
  std::vector<std::vector<std::string>> commands;
  Next last = Next::kNeedMore;  // kNeedMore, or kBroken
  std::string error;
  uint64_t taken = 0;
};

// Copies up to `n` bytes of *rest into the reader's Space(): what Commit()
// got, and where the unread bytes before it now begin.
size_t ReadSome(RespReader* in, std::string_view* rest, size_t n, uint64_t unread,
                const char** front) {
  const auto space = in->Space();
  FUZZ_CHECK(space.data != nullptr && space.size > 0);
  n = std::min({n, space.size, rest->size()});
  std::memcpy(space.data, rest->data(), n);
  in->Commit(n);
  rest->remove_prefix(n);
  *front = space.data - unread;
  return n;
}

// Reads `stream` cut by `seed` (0: all of it before the first Take()).
Outcome Read(std::string_view stream, size_t read_size, uint32_t limit, uint32_t seed) {
  RespReader in(read_size, kKeepBytes, limit);
  Outcome out;
  uint64_t fed = 0;
  uint32_t x = seed;
  std::string_view rest = stream;
  std::vector<std::string_view> args;
  std::string error;
  const char* front = nullptr;  // the first unread byte after the last read
  while (!rest.empty()) {
    do {
      size_t cut = rest.size();
      if (seed != 0) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        cut = 1 + x % (x % 4 == 0 ? 4096 : 24);
      }
      fed += ReadSome(&in, &rest, cut, fed - in.taken(), &front);
    } while (seed == 0 && !rest.empty());
    // Every unread byte is in [front, end).
    const uint64_t taken_at_front = in.taken();
    const char* const end = front + (fed - taken_at_front);
    for (;;) {
      const bool ready = in.Ready();
      const uint64_t before = in.taken();
      const Next next = in.Take(&args, &error);
      FUZZ_CHECK(in.taken() >= before);
      if (next == Next::kNeedMore) {
        FUZZ_CHECK(args.empty() && !in.Ready());
        break;
      }
      FUZZ_CHECK(ready);
      if (next == Next::kBroken) {
        // Empty commands before the broken bytes may have been taken; those not.
        const uint64_t broken_at = in.taken();
        FUZZ_CHECK(args.empty() && broken_at < fed);
        FUZZ_CHECK(error.starts_with("Protocol error: "));
        out.last = Next::kBroken;
        out.error = error;
        out.taken = broken_at;
        // It stays broken, whatever comes after.
        while (!rest.empty()) fed += ReadSome(&in, &rest, rest.size(), fed - in.taken(), &front);
        std::string again;
        FUZZ_CHECK(in.Ready());
        FUZZ_CHECK(in.Take(&args, &again) == Next::kBroken && again == error);
        FUZZ_CHECK(in.taken() == broken_at && !in.empty());
        // Clear() starts afresh.
        in.Clear();
        FUZZ_CHECK(in.empty() && !in.Ready() && in.taken() == broken_at);
        std::string_view ping = "*1\r\n$4\r\nPING\r\n";
        while (!ping.empty()) ReadSome(&in, &ping, ping.size(), 0, &front);
        FUZZ_CHECK(in.Take(&args, &again) == Next::kCommand);
        FUZZ_CHECK(args.size() == 1 && args[0] == "PING");
        return out;
      }
      FUZZ_CHECK(next == Next::kCommand);
      FUZZ_CHECK(!args.empty() && in.taken() > before);
      // The arguments lie within the bytes this Take() consumed.
      const char* const lo = front + (before - taken_at_front);
      const char* const hi = front + (in.taken() - taken_at_front);
      FUZZ_CHECK(hi <= end);
      std::vector<std::string> copy;
      for (std::string_view a : args) {
        FUZZ_CHECK(a.data() >= lo && a.data() + a.size() <= hi);
        copy.emplace_back(a);
      }
      CheckAgainstStream(stream, before, in.taken(), args, [&](std::string_view a) {
        return taken_at_front + static_cast<uint64_t>(a.data() - front);
      });
      ParseCommand(args);
      out.commands.push_back(std::move(copy));
    }
    if (in.empty()) in.Shrink();
  }
  out.taken = in.taken();
  return out;
}

}  // namespace
}  // namespace segstore::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace segstore::fuzz;
  if (size < 2) return 0;
  const uint32_t limit = kLimits[data[0] % std::size(kLimits)];
  const size_t read_size = kReadSizes[(data[0] / std::size(kLimits)) % std::size(kReadSizes)];
  const uint32_t seed = 1 + data[1] * 2654435761u % 0xfffffffe;
  const std::string_view stream = AsChars(data + 2, size - 2);

  const Outcome cut = Read(stream, read_size, limit, seed);
  const Outcome whole = Read(stream, read_size, limit, 0);
  FUZZ_CHECK(cut.commands == whole.commands);
  FUZZ_CHECK(cut.last == whole.last && cut.error == whole.error);
  FUZZ_CHECK(cut.taken == whole.taken);
  for (const auto& command : cut.commands) CheckWriteBack(command);
  return 0;
}
