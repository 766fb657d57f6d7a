#include "server/resp_commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <tuple>

#include "common/utf8.h"
#include "proto/wire.h"

namespace segstore::server {

namespace {

using K = RespKeys;

constexpr RespCommandDef kTable[] = {
    {RespCmd::kPing, "ping", -1, "fast", K::kNone, "connection",
     "The server answers PONG, or the message given.", "[message]"},
    {RespCmd::kEcho, "echo", 2, "fast", K::kNone, "connection", "Returns the message given.",
     "message"},
    {RespCmd::kHello, "hello", -1, "noauth fast", K::kNone, "connection",
     "Chooses RESP2 or RESP3, authenticates, names the connection; returns what the server is.",
     "[protover [AUTH username password] [SETNAME clientname]]"},
    {RespCmd::kAuth, "auth", -2, "noauth fast", K::kNone, "connection",
     "Gives the shared secret (the username, if given, must be \"default\").",
     "[username] password"},
    {RespCmd::kSelect, "select", 2, "fast", K::kNone, "connection",
     "Database 0 is the only one; any other index is an error.", "index"},
    {RespCmd::kClient, "client", -2, "", K::kNone, "connection",
     "SETNAME, GETNAME, ID, INFO, SETINFO and NO-EVICT/NO-TOUCH of this connection.",
     "subcommand [arguments]"},
    {RespCmd::kCommand, "command", -1, "", K::kNone, "server",
     "The commands this server answers: COMMAND, COUNT, LIST, INFO, DOCS, GETKEYS.",
     "[subcommand [arguments]]"},
    {RespCmd::kInfo, "info", -1, "", K::kNone, "server",
     "The server's figures, in sections: server, clients, stats, keyspace.", "[section ...]"},
    {RespCmd::kQuit, "quit", -1, "noauth fast", K::kNone, "connection",
     "Answers OK and closes the connection.", ""},
    {RespCmd::kReset, "reset", 1, "noauth fast", K::kNone, "connection",
     "Back to a new connection's state: RESP2, no name, not authenticated when a secret is "
     "required.",
     ""},
    {RespCmd::kDbsize, "dbsize", 1, "readonly fast", K::kNone, "server",
     "The number of profiles stored (records, as the storage engine counts them).", ""},
    {RespCmd::kType, "type", 2, "readonly fast", K::kFirst, "generic",
     "\"hash\" when the user has a profile with a live segment, else \"none\".", "key"},
    {RespCmd::kCluster, "cluster", -2, "", K::kNone, "cluster",
     "A cluster node's view: SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT (from the partition map).",
     "subcommand [arguments]"},
    {RespCmd::kReadonly, "readonly", 1, "fast", K::kNone, "cluster",
     "OK: every replica serves reads (a read may be marked stale only through SEG.GET).", ""},
    {RespCmd::kReadwrite, "readwrite", 1, "fast", K::kNone, "cluster", "OK.", ""},
    {RespCmd::kAsking, "asking", 1, "fast", K::kNone, "cluster",
     "OK: segstore never redirects with ASK.", ""},
    {RespCmd::kSegGet, "seg.get", -2, "readonly", K::kFirst, "segstore",
     "A user's live segments (its group's merged view), selected and projected as the binary "
     "protocol's get, and the profile fields asked for.",
     "user [WINDOW from to | NOTEXPIRING from to] [IDS lo hi] [COUNT] [LIMIT n] [IDSONLY] [OWN] "
     "[FIELDS numfields name [name ...] | ALLFIELDS | FIELDPREFIX prefix]"},
    {RespCmd::kSegMget, "seg.mget", -3, "readonly movablekeys", K::kCounted, "segstore",
     "Many users' segments (and fields) at once, as the binary protocol's batch_get.",
     "numusers user [user ...] [WINDOW from to | NOTEXPIRING from to] [IDS lo hi] [COUNT] "
     "[LIMIT n] [IDSONLY] [OWN] [FIELDS numfields name [name ...] | ALLFIELDS | FIELDPREFIX "
     "prefix]"},
    {RespCmd::kSegCount, "seg.count", -2, "readonly fast", K::kFirst, "segstore",
     "How many live segments a user has (in an ID range).", "user [IDS lo hi]"},
    {RespCmd::kSegUpsert, "seg.upsert", -4, "write", K::kFirst, "segstore",
     "Inserts or updates segments with their expiries and attributes.",
     "user [SET | EXTEND | ADD] [TTL] [WRITEID id] id value [ATTR1 n] [ATTR2 n] "
     "[id value [ATTR1 n] [ATTR2 n] ...]"},
    {RespCmd::kSegRemove, "seg.remove", -3, "write fast", K::kFirst, "segstore",
     "Removes segments by ID.", "user [WRITEID id] id [id ...]"},
    {RespCmd::kSegTrim, "seg.trim", -2, "write fast", K::kFirst, "segstore",
     "Removes segments that expired before a time (now by default).",
     "user [BEFORE unix-seconds] [WRITEID id]"},
    {RespCmd::kSegDel, "seg.del", -2, "write fast", K::kFirst, "segstore",
     "Deletes a user's whole profile.", "user [WRITEID id]"},
    {RespCmd::kSegLink, "seg.link", -3, "write", K::kFirst, "segstore",
     "Links a user into the group of a master: a get by any of them reads the group's merged "
     "view.",
     "user master [TTL seconds] [WRITEID id]"},
    {RespCmd::kSegUnlink, "seg.unlink", -2, "write fast", K::kFirst, "segstore",
     "Takes a user out of its group (a master's unlink dissolves it); 1 when it was linked.",
     "user [WRITEID id]"},
    {RespCmd::kSegMasterof, "seg.masterof", 2, "readonly fast", K::kFirst, "segstore",
     "The master of a user's group (the user itself for a master); null when in no group.", "user"},
    {RespCmd::kSegLinks, "seg.links", -2, "readonly", K::kFirst, "segstore",
     "The users linked to the master of a user's group, a page at a time.",
     "user [CURSOR cursor] [COUNT n]"},
    {RespCmd::kSegConnected, "seg.connected", 3, "readonly fast", K::kTwo, "segstore",
     "1 when two users share a group (or are the same user), else 0.", "user user"},
    {RespCmd::kSegFieldset, "seg.fieldset", -6, "write fast", K::kFirst, "segstore",
     "Sets profile fields: typed values (string by default), each with its expiry.",
     "user [WRITEID id] [TYPE int | double | string | bytes | time] [EX seconds | EXAT "
     "unix-time] FIELDS numfields name value [name value ...] [[TYPE type] [EX seconds | EXAT "
     "unix-time] FIELDS numfields name value [name value ...] ...]"},
    {RespCmd::kSegFielddel, "seg.fielddel", -5, "write fast", K::kFirst, "segstore",
     "Deletes profile fields; null when the user has no profile.",
     "user [WRITEID id] FIELDS numfields name [name ...]"},
    {RespCmd::kSegIncr, "seg.incr", -4, "write fast", K::kFirst, "segstore",
     "Adds to a counter field: its new value, or null when the cap refuses the increment.",
     "user name delta [TTL seconds] [SLIDING] [CAP n] [WRITEID id]"},
    {RespCmd::kSegFieldmax, "seg.fieldmax", -4, "write fast", K::kFirst, "segstore",
     "Keeps the larger of a field's value and the one given (int by default).",
     "user name value [TYPE int | double | time] [EX seconds | EXAT unix-time] [WRITEID id]"},
    {RespCmd::kDel, "del", -2, "write", K::kAll, "generic",
     "Deletes profiles; returns how many existed.", "key [key ...]"},
    {RespCmd::kUnlink, "unlink", -2, "write fast", K::kAll, "generic",
     "As DEL (every delete is already cheap).", "key [key ...]"},
    {RespCmd::kExists, "exists", -2, "readonly fast", K::kAll, "generic",
     "How many of the keys have a profile with a live segment (a key named twice counts twice).",
     "key [key ...]"},
    {RespCmd::kHget, "hget", 3, "readonly fast", K::kFirst, "hash",
     "A field's value: the segment's attributes.", "key field"},
    {RespCmd::kHmget, "hmget", -3, "readonly fast", K::kFirst, "hash",
     "Several fields' values, null for each one absent.", "key field [field ...]"},
    {RespCmd::kHgetall, "hgetall", 2, "readonly", K::kFirst, "hash",
     "Every live field and its value.", "key"},
    {RespCmd::kHkeys, "hkeys", 2, "readonly", K::kFirst, "hash", "Every live field.", "key"},
    {RespCmd::kHvals, "hvals", 2, "readonly", K::kFirst, "hash", "Every live field's value.",
     "key"},
    {RespCmd::kHlen, "hlen", 2, "readonly fast", K::kFirst, "hash", "How many live fields.", "key"},
    {RespCmd::kHexists, "hexists", 3, "readonly fast", K::kFirst, "hash",
     "1 when the field is live, else 0.", "key field"},
    {RespCmd::kHdel, "hdel", -3, "write fast", K::kFirst, "hash",
     "Removes fields; returns how many were live.", "key field [field ...]"},
    {RespCmd::kHset, "hset", -4, "write fast", K::kFirst, "hash",
     "Sets fields' values (attributes); each field set expires never. Returns how many fields "
     "were added.",
     "key field value [field value ...]"},
    {RespCmd::kHmset, "hmset", -4, "write fast", K::kFirst, "hash", "As HSET; answers OK.",
     "key field value [field value ...]"},
    {RespCmd::kHsetex, "hsetex", -6, "write fast", K::kFirst, "hash",
     "Sets fields' values and their expiry (none by default); answers 1.",
     "key [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds] "
     "FIELDS numfields field value [field value ...]"},
    {RespCmd::kHexpire, "hexpire", -6, "write fast", K::kFirst, "hash",
     "Sets fields' time to live in seconds; per field -2 absent, 0 condition not met, 1 set, 2 "
     "removed (a time of 0).",
     "key seconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"},
    {RespCmd::kHpexpire, "hpexpire", -6, "write fast", K::kFirst, "hash",
     "As HEXPIRE in milliseconds, rounded up to whole seconds.",
     "key milliseconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"},
    {RespCmd::kHexpireat, "hexpireat", -6, "write fast", K::kFirst, "hash",
     "As HEXPIRE with an absolute Unix time in seconds (not in the future: removed).",
     "key unix-time-seconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"},
    {RespCmd::kHpexpireat, "hpexpireat", -6, "write fast", K::kFirst, "hash",
     "As HEXPIREAT in Unix milliseconds, rounded up to whole seconds.",
     "key unix-time-milliseconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"},
    {RespCmd::kHpersist, "hpersist", -5, "write fast", K::kFirst, "hash",
     "Removes fields' expiry; per field -2 absent, -1 had none, 1 removed.",
     "key FIELDS numfields field [field ...]"},
    {RespCmd::kHgetex, "hgetex", -5, "write fast", K::kFirst, "hash",
     "Fields' values, then sets their expiry (two operations: not atomic).",
     "key [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds "
     "| PERSIST] FIELDS numfields field [field ...]"},
    {RespCmd::kHttl, "httl", -5, "readonly fast", K::kFirst, "hash",
     "Each field's time to live in seconds: -1 without one, -2 when absent.",
     "key FIELDS numfields field [field ...]"},
    {RespCmd::kHpttl, "hpttl", -5, "readonly fast", K::kFirst, "hash",
     "As HTTL, in milliseconds (whole seconds: segstore keeps expiries to the second).",
     "key FIELDS numfields field [field ...]"},
    {RespCmd::kHexpiretime, "hexpiretime", -5, "readonly fast", K::kFirst, "hash",
     "Each field's expiry in Unix seconds: -1 without one, -2 when absent.",
     "key FIELDS numfields field [field ...]"},
    {RespCmd::kHpexpiretime, "hpexpiretime", -5, "readonly fast", K::kFirst, "hash",
     "As HEXPIRETIME, in Unix milliseconds.", "key FIELDS numfields field [field ...]"},
};
static_assert(std::size(kTable) == kRespCommands, "one table entry per RespCmd");

constexpr bool TableInOrder() {
  for (size_t i = 0; i < std::size(kTable); ++i) {
    if (static_cast<size_t>(kTable[i].id) != i) return false;
  }
  return true;
}
static_assert(TableInOrder(), "kTable is in RespCmd order");

bool EqualsNoCase(std::string_view a, std::string_view b) { return RespEqualsNoCase(a, b); }

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "SEG.GET: " before an argument's error.
Status ArgError(RespArgs args, std::string_view message) {
  return Status::InvalidArgument(Upper(args[0]) + ": " + std::string(message));
}

Status ParseU32(RespArgs args, size_t i, std::string_view what, uint32_t* v) {
  uint64_t n = 0;
  if (i >= args.size()) return ArgError(args, std::string(what) + " is missing");
  Status s = ParseRespNumber(args[i], what, UINT32_MAX, &n);
  if (!s.ok()) return ArgError(args, s.message());
  *v = static_cast<uint32_t>(n);
  return Status::OK();
}

Status ParseU64(RespArgs args, size_t i, std::string_view what, uint64_t* v) {
  if (i >= args.size()) return ArgError(args, std::string(what) + " is missing");
  Status s = ParseRespNumber(args[i], what, UINT64_MAX, v);
  if (!s.ok()) return ArgError(args, s.message());
  return Status::OK();
}

bool IsNumber(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool RespEqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

proto::DecodeLimits RespAnswerLimits() {
  proto::DecodeLimits l;
  l.max_key_bytes = UINT32_MAX;
  l.max_batch = UINT32_MAX;
  l.max_list = UINT32_MAX;
  return l;
}

std::span<const RespCommandDef> RespCommandTable() { return kTable; }

const RespCommandDef& RespCommandOf(RespCmd id) { return kTable[static_cast<size_t>(id)]; }

const RespCommandDef* FindRespCommand(std::string_view name) {
  for (const RespCommandDef& def : kTable) {
    if (EqualsNoCase(def.name, name)) return &def;
  }
  return nullptr;
}

std::string_view RespSlotName(size_t slot) {
  return slot < kRespCommands ? kTable[slot].name : std::string_view("unknown");
}

Status RespKeyPositions(const RespCommandDef& def, RespArgs args, std::vector<size_t>* positions) {
  positions->clear();
  switch (def.keys) {
    case RespKeys::kNone:
      return Status::OK();
    case RespKeys::kFirst:
      if (args.size() > 1) positions->push_back(1);
      return Status::OK();
    case RespKeys::kAll:
      for (size_t i = 1; i < args.size(); ++i) positions->push_back(i);
      return Status::OK();
    case RespKeys::kCounted: {
      uint64_t n = 0;
      if (args.size() < 2) return ArgError(args, "numusers is missing");
      if (Status s = ParseRespNumber(args[1], "numusers", args.size() - 2, &n); !s.ok()) {
        return ArgError(args, s.message());
      }
      if (n == 0) return ArgError(args, "numusers must be at least 1");
      for (size_t i = 0; i < n; ++i) positions->push_back(2 + i);
      return Status::OK();
    }
    case RespKeys::kTwo:
      for (size_t i = 1; i < args.size() && i <= 2; ++i) positions->push_back(i);
      return Status::OK();
  }
  return Status::OK();
}

std::string_view RespErrorPrefix(Status::Code code) {
  using C = Status::Code;
  switch (code) {
    case C::kOk:
      return "OK";
    case C::kNotFound:
      return "NOTFOUND";
    case C::kInvalidArgument:
    case C::kUnsupported:
      return "ERR";
    case C::kCorruption:
      return "CORRUPTION";
    case C::kIOError:
      return "IOERR";
    case C::kDeviceFull:
      return "DEVICEFULL";
    case C::kConflict:
      return "CONFLICT";
    case C::kLimitExceeded:
      return "LIMIT";
    case C::kBusy:
      return "BUSY";
    case C::kUnavailable:
      return "UNAVAILABLE";
    case C::kInternal:
      return "INTERNAL";
    case C::kTimeout:
      return "TIMEOUT";
    case C::kUnauthenticated:
      return "NOAUTH";
    case C::kWrongNode:
      return "WRONGNODE";
    case C::kLogUnavailable:
      return "TRYAGAIN";
    case C::kInDoubt:
      return "INDOUBT";
    case C::kReadOnly:
      return "READONLY";
  }
  return "ERR";
}

// ---- arguments ----

Status ParseRespNumber(std::string_view text, std::string_view what, uint64_t max, uint64_t* v) {
  const auto bad = [&] {
    return Status::InvalidArgument(fmt::format(
        "{} must be a whole number from 0 to {} written without sign or leading zeros, not '{}'",
        what, max, text.substr(0, 64)));
  };
  if (!IsNumber(text) || (text.size() > 1 && text[0] == '0')) return bad();
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *v);
  if (ec != std::errc() || end != text.data() + text.size() || *v > max) return bad();
  return Status::OK();
}

Status ParseWriteId(std::string_view text, WriteId* id) {
  if (text.size() != 32) {
    return Status::InvalidArgument("WRITEID must be 32 hexadecimal digits");
  }
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return Status::InvalidArgument("WRITEID must be 32 hexadecimal digits");
    parts[i / 16] = (parts[i / 16] << 4) | static_cast<uint64_t>(d);
  }
  id->hi = parts[0];
  id->lo = parts[1];
  if (id->empty()) return Status::InvalidArgument("WRITEID must not be all zeros");
  return Status::OK();
}

namespace {

// A decimal int64: an optional '-', then digits without leading zeros
// ("0" alone; not "-0"), in range. Redis's INCRBY reads numbers so.
bool ParseI64(std::string_view text, int64_t* v) {
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  if (!IsNumber(digits) || (digits.size() > 1 && digits[0] == '0') ||
      (digits == "0" && digits.size() != text.size())) {
    return false;
  }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *v);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string_view TypeName(FieldValue::Type type) {
  switch (type) {
    case FieldValue::Type::kInt:
      return "int";
    case FieldValue::Type::kDouble:
      return "double";
    case FieldValue::Type::kString:
      return "string";
    case FieldValue::Type::kBytes:
      return "bytes";
    case FieldValue::Type::kTime:
      return "time";
  }
  return "int";
}

// args[at] as a field name: 1 to kMaxFieldNameBytes bytes.
Status ParseFieldName(RespArgs args, size_t at, std::string* name) {
  const std::string_view n = args[at];
  if (n.empty()) return ArgError(args, "a field name is empty (names are 1 to 64 bytes)");
  if (n.size() > proto::kMaxFieldNameBytes) {
    return ArgError(args, fmt::format("field name '{}...' is {} bytes; the limit is {}",
                                      n.substr(0, 16), n.size(), proto::kMaxFieldNameBytes));
  }
  name->assign(n);
  return Status::OK();
}

// "numfields" at args[at]: a number from 1 with at least `per_field` *
// numfields arguments after it (all of them, and no more, with `exact`).
Status ParseNumFields(RespArgs args, size_t at, size_t per_field, bool exact, size_t* n) {
  uint64_t v = 0;
  if (at >= args.size() || !ParseRespNumber(args[at], "numfields", UINT32_MAX, &v).ok() || v == 0) {
    return ArgError(args, "FIELDS needs numfields, a whole number greater than 0");
  }
  const size_t rest = args.size() - at - 1;
  if (v > rest / per_field || (exact && v * per_field != rest)) {
    return ArgError(args, fmt::format("FIELDS {}: the numfields parameter must match the number "
                                      "of {} that follow",
                                      v, per_field == 1 ? "names" : "name value pairs"));
  }
  *n = static_cast<size_t>(v);
  return Status::OK();
}

// EX seconds (from now, at least 1) or EXAT unix-time (0: never) at args[i]:
// into *expiry and *ttl.
Status ParseFieldExpiry(RespArgs args, size_t i, uint32_t* expiry, bool* ttl) {
  const bool ex = EqualsNoCase(args[i], "EX");
  SEGSTORE_RETURN_IF_ERROR(ParseU32(args, i + 1, ex ? "EX" : "EXAT", expiry));
  if (ex && *expiry == 0) return ArgError(args, "EX must be at least 1 (without EX: never)");
  *ttl = ex;
  return Status::OK();
}

// args[i] as a value of `type`, for field `name`.
Status ParseValueOf(RespArgs args, size_t i, std::string_view name, FieldValue::Type type,
                    FieldValue* v) {
  if (Status s = ParseTypedValue(args[i], type, v); !s.ok()) {
    return ArgError(args, fmt::format("field '{}': {}", name.substr(0, 64), s.message()));
  }
  return Status::OK();
}

}  // namespace

Status ParseGetOptions(RespArgs args, size_t first, GetOptions* o) {
  bool window = false;
  for (size_t i = first; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (EqualsNoCase(a, "WINDOW") || EqualsNoCase(a, "NOTEXPIRING")) {
      if (window) return ArgError(args, "give WINDOW or NOTEXPIRING once");
      window = true;
      o->outside_expiry_window = EqualsNoCase(a, "NOTEXPIRING");
      SEGSTORE_RETURN_IF_ERROR(ParseU32(args, i + 1, Upper(a) + " from", &o->expiry_from));
      SEGSTORE_RETURN_IF_ERROR(ParseU32(args, i + 2, Upper(a) + " to", &o->expiry_to));
      i += 2;
    } else if (EqualsNoCase(a, "IDS")) {
      SEGSTORE_RETURN_IF_ERROR(ParseU64(args, i + 1, "IDS lo", &o->id_from));
      SEGSTORE_RETURN_IF_ERROR(ParseU64(args, i + 2, "IDS hi", &o->id_to));
      i += 2;
    } else if (EqualsNoCase(a, "LIMIT")) {
      SEGSTORE_RETURN_IF_ERROR(ParseU32(args, i + 1, "LIMIT", &o->limit));
      i += 1;
    } else if (EqualsNoCase(a, "COUNT")) {
      o->count_only = true;
    } else if (EqualsNoCase(a, "IDSONLY")) {
      o->ids_only = true;
    } else if (EqualsNoCase(a, "OWN")) {
      o->own_only = true;
    } else if (EqualsNoCase(a, "FIELDS") || EqualsNoCase(a, "ALLFIELDS") ||
               EqualsNoCase(a, "FIELDPREFIX")) {
      using Mode = FieldSelection::Mode;
      if (o->fields.mode != Mode::kNone) {
        return ArgError(args, "give one of FIELDS, ALLFIELDS and FIELDPREFIX, once");
      }
      if (EqualsNoCase(a, "ALLFIELDS")) {
        o->fields.mode = Mode::kAll;
      } else if (EqualsNoCase(a, "FIELDPREFIX")) {
        if (i + 1 >= args.size()) return ArgError(args, "FIELDPREFIX is missing its prefix");
        if (args[i + 1].size() > proto::kMaxFieldNameBytes) {
          return ArgError(args, fmt::format("FIELDPREFIX is {} bytes; the limit is {}",
                                            args[i + 1].size(), proto::kMaxFieldNameBytes));
        }
        o->fields.mode = Mode::kPrefix;
        o->fields.prefix = std::string(args[i + 1]);
        i += 1;
      } else {
        size_t n = 0;
        SEGSTORE_RETURN_IF_ERROR(ParseNumFields(args, i + 1, 1, false, &n));
        o->fields.mode = Mode::kNames;
        o->fields.names.resize(n);
        for (size_t k = 0; k < n; ++k) {
          SEGSTORE_RETURN_IF_ERROR(ParseFieldName(args, i + 2 + k, &o->fields.names[k]));
        }
        i += 1 + n;
      }
    } else {
      return ArgError(args, fmt::format("unknown option '{}' (WINDOW, NOTEXPIRING, IDS, COUNT, "
                                        "LIMIT, IDSONLY, OWN, FIELDS, ALLFIELDS, FIELDPREFIX)",
                                        a.substr(0, 64)));
    }
  }
  return Status::OK();
}

namespace {

// [WRITEID id] at args[*i]: read and stepped over when there.
Status MaybeWriteId(RespArgs args, size_t* i, WriteId* id) {
  if (*i >= args.size() || !EqualsNoCase(args[*i], "WRITEID")) return Status::OK();
  if (*i + 1 >= args.size()) return ArgError(args, "WRITEID is missing its id");
  if (Status s = ParseWriteId(args[*i + 1], id); !s.ok()) return ArgError(args, s.message());
  *i += 2;
  return Status::OK();
}

}  // namespace

Status ParseUpsert(RespArgs args, proto::UpsertRequest* req) {
  req->user = std::string(args[1]);
  size_t i = 2;
  bool ttl = false;
  bool mode = false;
  for (; i < args.size() && !IsNumber(args[i]); ++i) {
    const std::string_view a = args[i];
    if (EqualsNoCase(a, "SET") || EqualsNoCase(a, "EXTEND") || EqualsNoCase(a, "ADD")) {
      if (mode) return ArgError(args, "give one mode: SET, EXTEND or ADD");
      mode = true;
      req->mode = EqualsNoCase(a, "SET")      ? UpsertMode::kSet
                  : EqualsNoCase(a, "EXTEND") ? UpsertMode::kExtend
                                              : UpsertMode::kAdd;
    } else if (EqualsNoCase(a, "TTL")) {
      ttl = true;
    } else if (EqualsNoCase(a, "WRITEID")) {
      SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, &req->write_id));
      --i;
    } else {
      return ArgError(args, fmt::format("unknown option '{}' (SET, EXTEND, ADD, TTL, WRITEID) "
                                        "before the first segment",
                                        a.substr(0, 64)));
    }
  }
  if (i >= args.size()) return ArgError(args, "no segment given: id value [ATTR1 n] [ATTR2 n] ...");
  while (i < args.size()) {
    SegmentUpdate u;
    u.ttl = ttl;
    SEGSTORE_RETURN_IF_ERROR(ParseU64(args, i, "segment id", &u.id));
    if (i + 1 >= args.size()) {
      return ArgError(args, fmt::format("segment {} has no value", u.id));
    }
    SEGSTORE_RETURN_IF_ERROR(
        ParseU32(args, i + 1, fmt::format("value of segment {}", u.id), &u.value));
    i += 2;
    while (i < args.size() && (EqualsNoCase(args[i], "ATTR1") || EqualsNoCase(args[i], "ATTR2"))) {
      const bool one = EqualsNoCase(args[i], "ATTR1");
      std::optional<uint32_t>& attr = one ? u.attr1 : u.attr2;
      if (attr)
        return ArgError(args, fmt::format("segment {}: {} given twice", u.id, Upper(args[i])));
      uint32_t v = 0;
      SEGSTORE_RETURN_IF_ERROR(
          ParseU32(args, i + 1, fmt::format("{} of segment {}", Upper(args[i]), u.id), &v));
      attr = v;
      i += 2;
    }
    req->segments.push_back(u);
  }
  return Status::OK();
}

Status ParseRemove(RespArgs args, proto::RemoveRequest* req) {
  req->user = std::string(args[1]);
  size_t i = 2;
  SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, &req->write_id));
  if (i >= args.size()) return ArgError(args, "no segment id given");
  for (; i < args.size(); ++i) {
    uint64_t id = 0;
    SEGSTORE_RETURN_IF_ERROR(ParseU64(args, i, "segment id", &id));
    req->ids.push_back(id);
  }
  return Status::OK();
}

// The options from args[i] on: `name` u32 (into *value) and WRITEID, in any order.
Status ParseU32AndWriteId(RespArgs args, size_t i, std::string_view name, uint32_t* value,
                          WriteId* write_id) {
  while (i < args.size()) {
    if (EqualsNoCase(args[i], name)) {
      SEGSTORE_RETURN_IF_ERROR(ParseU32(args, i + 1, name, value));
      i += 2;
    } else if (EqualsNoCase(args[i], "WRITEID")) {
      SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, write_id));
    } else {
      return ArgError(
          args, fmt::format("unknown option '{}' ({}, WRITEID)", args[i].substr(0, 64), name));
    }
  }
  return Status::OK();
}

// The options from args[2] on: WRITEID alone.
Status ParseWriteIdOnly(RespArgs args, WriteId* write_id) {
  size_t i = 2;
  SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, write_id));
  if (i < args.size()) {
    return ArgError(args, fmt::format("unknown option '{}' (WRITEID)", args[i].substr(0, 64)));
  }
  return Status::OK();
}

Status ParseTrim(RespArgs args, proto::TrimRequest* req) {
  req->user = std::string(args[1]);
  return ParseU32AndWriteId(args, 2, "BEFORE", &req->before, &req->write_id);
}

Status ParseDelete(RespArgs args, proto::DeleteRequest* req) {
  req->user = std::string(args[1]);
  return ParseWriteIdOnly(args, &req->write_id);
}

Status ParseCount(RespArgs args, proto::CountRequest* req) {
  req->user = std::string(args[1]);
  if (args.size() == 2) return Status::OK();
  if (args.size() != 5 || !EqualsNoCase(args[2], "IDS")) {
    return ArgError(args, "the only option is IDS lo hi");
  }
  SEGSTORE_RETURN_IF_ERROR(ParseU64(args, 3, "IDS lo", &req->id_from));
  return ParseU64(args, 4, "IDS hi", &req->id_to);
}

Status ParseLink(RespArgs args, proto::LinkRequest* req) {
  req->user = std::string(args[1]);
  req->master = std::string(args[2]);
  return ParseU32AndWriteId(args, 3, "TTL", &req->ttl, &req->write_id);
}

Status ParseUnlink(RespArgs args, proto::UnlinkRequest* req) {
  req->user = std::string(args[1]);
  return ParseWriteIdOnly(args, &req->write_id);
}

Status ParseLinks(RespArgs args, proto::LinksRequest* req) {
  req->user = std::string(args[1]);
  for (size_t i = 2; i < args.size();) {
    if (EqualsNoCase(args[i], "CURSOR")) {
      if (i + 1 >= args.size()) return ArgError(args, "CURSOR is missing");
      req->cursor = std::string(args[i + 1]);
      i += 2;
    } else if (EqualsNoCase(args[i], "COUNT")) {
      SEGSTORE_RETURN_IF_ERROR(ParseU32(args, i + 1, "COUNT", &req->limit));
      if (req->limit == 0) return ArgError(args, "COUNT must be at least 1");
      i += 2;
    } else {
      return ArgError(args,
                      fmt::format("unknown option '{}' (CURSOR, COUNT)", args[i].substr(0, 64)));
    }
  }
  return Status::OK();
}

// ---- profile fields ----

Status ParseValueType(RespArgs args, size_t at, FieldValue::Type* type) {
  if (at >= args.size()) return ArgError(args, "TYPE is missing its type");
  for (const auto t : {FieldValue::Type::kInt, FieldValue::Type::kDouble, FieldValue::Type::kString,
                       FieldValue::Type::kBytes, FieldValue::Type::kTime}) {
    if (EqualsNoCase(args[at], TypeName(t))) {
      *type = t;
      return Status::OK();
    }
  }
  return ArgError(args, fmt::format("unknown TYPE '{}' (int, double, string, bytes, time)",
                                    args[at].substr(0, 64)));
}

Status ParseTypedValue(std::string_view text, FieldValue::Type type, FieldValue* v) {
  const std::string_view shown = text.substr(0, 64);
  switch (type) {
    case FieldValue::Type::kInt: {
      int64_t i = 0;
      if (!ParseI64(text, &i)) {
        return Status::InvalidArgument(
            fmt::format("'{}' is not an int: a whole number from -9223372036854775808 to "
                        "9223372036854775807 without '+' or leading zeros",
                        shown));
      }
      *v = FieldValue::Int(i);
      return Status::OK();
    }
    case FieldValue::Type::kDouble: {
      // Decimal or exponent form, inf, -inf (and a '+' before a number, as
      // Redis's "+inf"); no spaces, no hexadecimal, no nan.
      std::string_view t = text;
      if (t.size() > 1 && t[0] == '+' && t[1] != '-' && t[1] != '+') t.remove_prefix(1);
      double d = 0;
      const auto [end, ec] =
          std::from_chars(t.data(), t.data() + t.size(), d, std::chars_format::general);
      if (t.empty() || ec != std::errc() || end != t.data() + t.size() || std::isnan(d)) {
        return Status::InvalidArgument(
            fmt::format("'{}' is not a double: a decimal number (3.5, -1e-3), inf or -inf", shown));
      }
      *v = FieldValue::Double(d);
      return Status::OK();
    }
    case FieldValue::Type::kString:
      if (!IsUtf8(text)) {
        return Status::InvalidArgument(
            "the value is not UTF-8 text: give TYPE bytes for a value of any bytes");
      }
      *v = FieldValue::String(std::string(text));
      return Status::OK();
    case FieldValue::Type::kBytes:
      *v = FieldValue::Bytes(std::string(text));
      return Status::OK();
    case FieldValue::Type::kTime: {
      uint64_t t = 0;
      if (!ParseRespNumber(text, "time", UINT32_MAX, &t).ok()) {
        return Status::InvalidArgument(fmt::format(
            "'{}' is not a time: Unix seconds from 0 to 4294967295 without sign or leading zeros",
            shown));
      }
      *v = FieldValue::Time(static_cast<UnixSeconds>(t));
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown value type");
}

Status ParseFieldSet(RespArgs args, proto::FieldSetRequest* req) {
  req->user = std::string(args[1]);
  bool write_id = false;
  // What the next FIELDS takes: TYPE and EX/EXAT given since the last one.
  std::optional<FieldValue::Type> type;
  std::optional<std::pair<uint32_t, bool>> expiry;
  bool group = false;
  for (size_t i = 2; i < args.size();) {
    const std::string_view a = args[i];
    if (EqualsNoCase(a, "WRITEID")) {
      if (write_id) return ArgError(args, "WRITEID given twice");
      write_id = true;
      SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, &req->write_id));
    } else if (EqualsNoCase(a, "TYPE")) {
      if (type) return ArgError(args, "TYPE given twice before one FIELDS");
      FieldValue::Type t = FieldValue::Type::kString;
      SEGSTORE_RETURN_IF_ERROR(ParseValueType(args, i + 1, &t));
      type = t;
      i += 2;
    } else if (EqualsNoCase(a, "EX") || EqualsNoCase(a, "EXAT")) {
      if (expiry) return ArgError(args, "give one of EX and EXAT, once, before one FIELDS");
      uint32_t e = kNever;
      bool ttl = false;
      SEGSTORE_RETURN_IF_ERROR(ParseFieldExpiry(args, i, &e, &ttl));
      expiry.emplace(e, ttl);
      i += 2;
    } else if (EqualsNoCase(a, "FIELDS")) {
      size_t n = 0;
      SEGSTORE_RETURN_IF_ERROR(ParseNumFields(args, i + 1, 2, false, &n));
      i += 2;
      for (size_t k = 0; k < n; ++k, i += 2) {
        FieldUpdate u;
        SEGSTORE_RETURN_IF_ERROR(ParseFieldName(args, i, &u.name));
        SEGSTORE_RETURN_IF_ERROR(
            ParseValueOf(args, i + 1, u.name, type.value_or(FieldValue::Type::kString), &u.value));
        if (expiry) std::tie(u.expiry, u.ttl) = *expiry;
        req->fields.push_back(std::move(u));
      }
      type.reset();
      expiry.reset();
      group = true;
    } else {
      return ArgError(args, fmt::format("unknown option '{}' (WRITEID, TYPE, EX, EXAT, FIELDS)",
                                        a.substr(0, 64)));
    }
  }
  if (type || expiry) return ArgError(args, "TYPE, EX and EXAT must come before a FIELDS");
  if (!group) return ArgError(args, "FIELDS numfields name value [name value ...] is missing");
  return Status::OK();
}

Status ParseFieldDelete(RespArgs args, proto::FieldDeleteRequest* req) {
  req->user = std::string(args[1]);
  size_t i = 2;
  SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, &req->write_id));
  if (i >= args.size() || !EqualsNoCase(args[i], "FIELDS")) {
    return ArgError(args,
                    fmt::format("expected FIELDS numfields name [name ...]{}",
                                i < args.size() ? fmt::format(", not '{}'", args[i].substr(0, 64))
                                                : std::string()));
  }
  size_t n = 0;
  SEGSTORE_RETURN_IF_ERROR(ParseNumFields(args, i + 1, 1, true, &n));
  req->names.resize(n);
  for (size_t k = 0; k < n; ++k) {
    SEGSTORE_RETURN_IF_ERROR(ParseFieldName(args, i + 2 + k, &req->names[k]));
  }
  return Status::OK();
}

Status ParseFieldIncrement(RespArgs args, proto::FieldIncrementRequest* req) {
  req->user = std::string(args[1]);
  FieldIncrement& inc = req->increment;
  SEGSTORE_RETURN_IF_ERROR(ParseFieldName(args, 2, &inc.name));
  if (!ParseI64(args[3], &inc.delta)) {
    return ArgError(args, fmt::format("delta must be a whole number from -9223372036854775808 "
                                      "to 9223372036854775807 without '+' or leading zeros, "
                                      "not '{}'",
                                      args[3].substr(0, 64)));
  }
  bool ttl = false;
  bool write_id = false;
  for (size_t i = 4; i < args.size();) {
    const std::string_view a = args[i];
    if (EqualsNoCase(a, "TTL")) {
      if (ttl) return ArgError(args, "TTL given twice");
      ttl = true;
      SEGSTORE_RETURN_IF_ERROR(ParseU32(args, i + 1, "TTL", &inc.ttl));
      i += 2;
    } else if (EqualsNoCase(a, "SLIDING")) {
      if (inc.window == FieldIncrement::Window::kSliding) {
        return ArgError(args, "SLIDING given twice");
      }
      inc.window = FieldIncrement::Window::kSliding;
      ++i;
    } else if (EqualsNoCase(a, "CAP")) {
      if (inc.cap) return ArgError(args, "CAP given twice");
      int64_t cap = 0;
      if (i + 1 >= args.size() || !ParseI64(args[i + 1], &cap)) {
        return ArgError(args, fmt::format("CAP must be a whole number from -9223372036854775808 "
                                          "to 9223372036854775807 without '+' or leading zeros{}",
                                          i + 1 < args.size()
                                              ? fmt::format(", not '{}'", args[i + 1].substr(0, 64))
                                              : std::string()));
      }
      inc.cap = cap;
      i += 2;
    } else if (EqualsNoCase(a, "WRITEID")) {
      if (write_id) return ArgError(args, "WRITEID given twice");
      write_id = true;
      SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, &req->write_id));
    } else {
      return ArgError(
          args, fmt::format("unknown option '{}' (TTL, SLIDING, CAP, WRITEID)", a.substr(0, 64)));
    }
  }
  if (inc.window == FieldIncrement::Window::kSliding && inc.ttl == 0) {
    return ArgError(args,
                    "SLIDING needs TTL seconds, at least 1: the window each increment "
                    "starts again");
  }
  return Status::OK();
}

Status ParseFieldMax(RespArgs args, proto::FieldMaxRequest* req) {
  req->user = std::string(args[1]);
  FieldUpdate& f = req->field;
  SEGSTORE_RETURN_IF_ERROR(ParseFieldName(args, 2, &f.name));
  std::optional<FieldValue::Type> type;
  bool expiry = false;
  bool write_id = false;
  for (size_t i = 4; i < args.size();) {
    const std::string_view a = args[i];
    if (EqualsNoCase(a, "TYPE")) {
      if (type) return ArgError(args, "TYPE given twice");
      FieldValue::Type t = FieldValue::Type::kInt;
      SEGSTORE_RETURN_IF_ERROR(ParseValueType(args, i + 1, &t));
      if (t == FieldValue::Type::kString || t == FieldValue::Type::kBytes) {
        return ArgError(args, "TYPE must be int, double or time: only numbers and times compare");
      }
      type = t;
      i += 2;
    } else if (EqualsNoCase(a, "EX") || EqualsNoCase(a, "EXAT")) {
      if (expiry) return ArgError(args, "give one of EX and EXAT, once");
      expiry = true;
      SEGSTORE_RETURN_IF_ERROR(ParseFieldExpiry(args, i, &f.expiry, &f.ttl));
      i += 2;
    } else if (EqualsNoCase(a, "WRITEID")) {
      if (write_id) return ArgError(args, "WRITEID given twice");
      write_id = true;
      SEGSTORE_RETURN_IF_ERROR(MaybeWriteId(args, &i, &req->write_id));
    } else {
      return ArgError(
          args, fmt::format("unknown option '{}' (TYPE, EX, EXAT, WRITEID)", a.substr(0, 64)));
    }
  }
  return ParseValueOf(args, 3, f.name, type.value_or(FieldValue::Type::kInt), &f.value);
}

// ---- hashes ----

Status ParseField(RespArgs args, size_t at, uint64_t* id) {
  if (ParseRespNumber(args[at], "field", UINT64_MAX, id).ok()) return Status::OK();
  return ArgError(args, fmt::format("field '{}' is not a segment ID: a hash field here is a "
                                    "decimal number from 0 to 18446744073709551615 written "
                                    "without sign or leading zeros (proto/RESP.md, \"Hashes\")",
                                    args[at].substr(0, 64)));
}

Status ParseFieldsClause(RespArgs args, size_t at, std::vector<uint64_t>* ids) {
  if (at >= args.size() || !EqualsNoCase(args[at], "FIELDS")) {
    return ArgError(args, "mandatory argument FIELDS is missing or not at the right position");
  }
  uint64_t n = 0;
  if (at + 1 >= args.size() || !ParseRespNumber(args[at + 1], "numfields", UINT32_MAX, &n).ok() ||
      n == 0) {
    return ArgError(args, "numfields must be a whole number greater than 0");
  }
  if (n != args.size() - at - 2) {
    return ArgError(args, "the numfields parameter must match the number of arguments");
  }
  ids->clear();
  for (size_t i = at + 2; i < args.size(); ++i) {
    uint64_t id = 0;
    SEGSTORE_RETURN_IF_ERROR(ParseField(args, i, &id));
    ids->push_back(id);
  }
  return Status::OK();
}

bool ParseFieldValue(std::string_view text, std::optional<uint32_t>* attr1,
                     std::optional<uint32_t>* attr2) {
  attr1->reset();
  attr2->reset();
  const auto number = [](std::string_view t, std::optional<uint32_t>* out) {
    uint64_t v = 0;
    if (!ParseRespNumber(t, "value", UINT32_MAX, &v).ok()) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return text.empty() || number(text, attr1);
  const std::string_view first = text.substr(0, colon);
  return (first.empty() || number(first, attr1)) && number(text.substr(colon + 1), attr2);
}

Status ParseHashSet(RespArgs args, UnixSeconds now, proto::UpsertRequest* req) {
  if (args.size() < 4) return ArgError(args, "wrong number of arguments");
  req->user = std::string(args[1]);
  req->mode = UpsertMode::kSet;
  req->replace_attrs = true;
  uint32_t value = kNever;
  bool ttl = false;
  size_t first = 2;  // the first field
  if (EqualsNoCase(args[0], "HSETEX")) {
    size_t i = 2;
    bool expiry = false;
    for (; i < args.size() && !EqualsNoCase(args[i], "FIELDS"); ++i) {
      const std::string_view a = args[i];
      if (EqualsNoCase(a, "FNX") || EqualsNoCase(a, "FXX") || EqualsNoCase(a, "KEEPTTL")) {
        return ArgError(args, fmt::format("{} is not supported: segstore sets fields with one "
                                          "upsert, which has no condition on the fields "
                                          "already there and no 'keep the expiry' (proto/RESP.md)",
                                          Upper(a)));
      }
      const bool ex = EqualsNoCase(a, "EX");
      const bool px = EqualsNoCase(a, "PX");
      const bool exat = EqualsNoCase(a, "EXAT");
      const bool pxat = EqualsNoCase(a, "PXAT");
      if (!ex && !px && !exat && !pxat) {
        return ArgError(
            args, fmt::format("unknown option '{}' (EX, PX, EXAT, PXAT, FIELDS)", a.substr(0, 64)));
      }
      if (expiry) return ArgError(args, "give one of EX, PX, EXAT and PXAT");
      expiry = true;
      uint64_t n = 0;
      if (i + 1 >= args.size() || !ParseRespNumber(args[i + 1], "time", UINT64_MAX / 2, &n).ok()) {
        return ArgError(args, fmt::format("{} needs a whole number", Upper(a)));
      }
      ++i;
      if (px || pxat) n = (n + 999) / 1000;  // whole seconds, rounded up
      if ((ex || px) && n == 0) return ArgError(args, "invalid expire time: 0");
      if ((exat || pxat) && n <= now) {
        return ArgError(args, "invalid expire time: not in the future");
      }
      if (n > UINT32_MAX) {
        return ArgError(args, "invalid expire time: past 2106 (expiries are 32-bit Unix seconds)");
      }
      value = static_cast<uint32_t>(n);
      ttl = ex || px;
    }
    std::vector<uint64_t> unused;
    uint64_t n = 0;
    if (i >= args.size()) {
      return ArgError(args, "mandatory argument FIELDS is missing or not at the right position");
    }
    if (i + 1 >= args.size() || !ParseRespNumber(args[i + 1], "numfields", UINT32_MAX, &n).ok() ||
        n == 0) {
      return ArgError(args, "numfields must be a whole number greater than 0");
    }
    if (2 * n != args.size() - i - 2) {
      return ArgError(args, "the numfields parameter must match the number of arguments");
    }
    first = i + 2;
  } else if ((args.size() - 2) % 2 != 0) {
    return Status::InvalidArgument(
        fmt::format("wrong number of arguments for '{}' command", Lower(args[0])));
  }
  // One segment per field; a field named again replaces its earlier value.
  for (size_t i = first; i + 1 < args.size(); i += 2) {
    SegmentUpdate u;
    SEGSTORE_RETURN_IF_ERROR(ParseField(args, i, &u.id));
    u.value = value;
    u.ttl = ttl;
    if (!ParseFieldValue(args[i + 1], &u.attr1, &u.attr2)) {
      return ArgError(
          args, fmt::format("the value of field {} must be a segment's attributes: \"\", "
                            "\"attr1\", \"attr1:attr2\" or \":attr2\", each a number from 0 to "
                            "4294967295 without sign or leading zeros, not '{}' "
                            "(proto/RESP.md, \"Hashes\")",
                            u.id, args[i + 1].substr(0, 64)));
    }
    auto same = std::find_if(req->segments.begin(), req->segments.end(),
                             [&](const SegmentUpdate& s) { return s.id == u.id; });
    if (same != req->segments.end()) {
      *same = u;
    } else {
      req->segments.push_back(u);
    }
  }
  return Status::OK();
}

namespace {

// A time argument of an expiry command: `n` as read, `millis` when in
// milliseconds, `absolute` when a Unix time. Sets req->value and req->ttl.
Status SetExpiryTime(RespArgs args, uint64_t n, bool millis, bool absolute,
                     proto::ExpireRequest* req) {
  if (millis) n = n / 1000 + (n % 1000 != 0 ? 1 : 0);  // whole seconds, rounded up
  if (n > UINT32_MAX) {
    return ArgError(args, "invalid expire time: past 2106 (expiries are 32-bit Unix seconds)");
  }
  // An absolute 0 is the past; expire's absolute 0 means never, so ask for
  // "now + 0", which removes the fields as Redis does.
  req->ttl = !absolute || n == 0;
  req->value = static_cast<uint32_t>(n);
  return Status::OK();
}

}  // namespace

Status ParseHashExpire(RespArgs args, proto::ExpireRequest* req) {
  if (args.size() < 5) return ArgError(args, "wrong number of arguments");
  req->user = std::string(args[1]);
  size_t at = 2;
  if (EqualsNoCase(args[0], "HPERSIST")) {
    req->value = kNever;
    req->ttl = false;
    req->condition = ExpireCondition::kXx;
  } else {
    const std::string name = Lower(args[0]);
    const bool millis = name == "hpexpire" || name == "hpexpireat";
    const bool absolute = name == "hexpireat" || name == "hpexpireat";
    uint64_t n = 0;
    if (!ParseRespNumber(args[2], "time", UINT64_MAX, &n).ok()) {
      return ArgError(args,
                      fmt::format("invalid expire time '{}': a whole number of {} from 0",
                                  args[2].substr(0, 64), millis ? "milliseconds" : "seconds"));
    }
    SEGSTORE_RETURN_IF_ERROR(SetExpiryTime(args, n, millis, absolute, req));
    at = 3;
    const std::string_view c = args[3];
    if (EqualsNoCase(c, "NX")) req->condition = ExpireCondition::kNx;
    if (EqualsNoCase(c, "XX")) req->condition = ExpireCondition::kXx;
    if (EqualsNoCase(c, "GT")) req->condition = ExpireCondition::kGt;
    if (EqualsNoCase(c, "LT")) req->condition = ExpireCondition::kLt;
    if (req->condition != ExpireCondition::kNone) at = 4;
  }
  return ParseFieldsClause(args, at, &req->ids);
}

Status ParseHashGetEx(RespArgs args, std::vector<uint64_t>* ids, bool* expire,
                      proto::ExpireRequest* req) {
  if (args.size() < 5) return ArgError(args, "wrong number of arguments");
  req->user = std::string(args[1]);
  *expire = false;
  size_t at = 2;
  const std::string_view o = args[2];
  if (EqualsNoCase(o, "PERSIST")) {
    *expire = true;
    req->value = kNever;
    req->ttl = false;
    at = 3;
  } else if (EqualsNoCase(o, "EX") || EqualsNoCase(o, "PX") || EqualsNoCase(o, "EXAT") ||
             EqualsNoCase(o, "PXAT")) {
    const bool millis = EqualsNoCase(o, "PX") || EqualsNoCase(o, "PXAT");
    const bool absolute = EqualsNoCase(o, "EXAT") || EqualsNoCase(o, "PXAT");
    uint64_t n = 0;
    if (args.size() < 4 || !ParseRespNumber(args[3], "time", UINT64_MAX, &n).ok()) {
      return ArgError(args, fmt::format("{} needs a whole number", Upper(o)));
    }
    if (!absolute && n == 0) return ArgError(args, "invalid expire time: 0");
    *expire = true;
    SEGSTORE_RETURN_IF_ERROR(SetExpiryTime(args, n, millis, absolute, req));
    at = 4;
  }
  SEGSTORE_RETURN_IF_ERROR(ParseFieldsClause(args, at, ids));
  req->ids = *ids;
  return Status::OK();
}

void AppendFieldValue(std::optional<uint32_t> attr1, std::optional<uint32_t> attr2,
                      std::string* out) {
  if (attr1) out->append(std::to_string(*attr1));
  if (attr2) {
    out->push_back(':');
    out->append(std::to_string(*attr2));
  }
}

// ---- replies ----

namespace {

// The last pairs of SEG.GET's map: master and profiles for a merged view,
// then fields when fields were asked; none for any other read, so a read
// of a user in no group that asks for no field is answered as before
// groups and fields were.
void WriteLastPairs(const GetResult& r, proto::RespWriter* w) {
  if (!r.master.empty()) {
    w->Bulk("master");
    w->Bulk(r.master);
    w->Bulk("profiles");
    w->Integer(r.profiles);
  }
  if (!r.fields_asked) return;
  w->Bulk("fields");
  w->Map(r.fields.size());
  for (const Field& f : r.fields) {
    w->Bulk(f.name);
    w->Array(3);
    w->Bulk(TypeName(f.value.type));
    WriteFieldValue(f.value, w);
    w->Integer(f.expires_at);
  }
}

}  // namespace

void WriteGetReply(const GetResult& r, const GetOptions& o, bool stale, proto::RespWriter* w) {
  // Columns, as the binary protocol's answer: two elements a segment, where
  // an array per segment took five (the reply is built, sent and read in
  // about half the time).
  const bool expires = !o.ids_only && !r.expires.empty();
  const bool attr1 = expires && !r.attr1.empty();
  const bool attr2 = expires && !r.attr2.empty();
  w->Reserve(64 + r.size() * (expires ? 28 : 14) + (attr1 ? 8 * r.size() : 0) +
             (attr2 ? 8 * r.size() : 0));
  const bool merged = !r.master.empty();
  w->Map(3 + (expires ? 1 : 0) + (attr1 ? 1 : 0) + (attr2 ? 1 : 0) + (merged ? 2 : 0) +
         (r.fields_asked ? 1 : 0));
  w->Bulk("count");
  w->Integer(r.count);
  w->Bulk("stale");
  w->Boolean(stale);
  w->Bulk("ids");
  w->Array(r.size());
  w->BulkNumbers(r.ids);
  if (!expires) return WriteLastPairs(r, w);
  w->Bulk("expires");
  w->Array(r.size());
  w->Integers(r.expires);
  const auto column = [&](std::string_view name, const std::vector<std::optional<uint32_t>>& c) {
    w->Bulk(name);
    w->Array(c.size());
    for (const std::optional<uint32_t>& a : c) {
      if (a) {
        w->Integer(*a);
      } else {
        w->Null();
      }
    }
  };
  if (attr1) column("attr1", r.attr1);
  if (attr2) column("attr2", r.attr2);
  WriteLastPairs(r, w);
}

void WriteUpsertReply(const UpsertResult& r, proto::RespWriter* w) {
  w->Map(5);
  w->Bulk("inserted");
  w->Integer(r.inserted);
  w->Bulk("updated");
  w->Integer(r.updated);
  w->Bulk("trimmed");
  w->Integer(r.trimmed);
  w->Bulk("count");
  w->Integer(r.count);
  w->Bulk("duplicate");
  w->Boolean(r.duplicate);
}

void WriteTrimReply(const TrimResult& r, proto::RespWriter* w) {
  w->Map(3);
  w->Bulk("trimmed");
  w->Integer(r.trimmed);
  w->Bulk("remaining");
  w->Integer(r.remaining);
  w->Bulk("duplicate");
  w->Boolean(r.duplicate);
}

void WriteLinkReply(const LinkResult& r, proto::RespWriter* w) {
  w->Map(3);
  w->Bulk("master");
  w->Bulk(r.master);
  w->Bulk("members");
  w->Integer(r.members);
  w->Bulk("moved");
  w->Integer(r.moved);
}

void WriteLinksReply(const LinksPage& page, proto::RespWriter* w) {
  w->Map(3);
  w->Bulk("master");
  w->Bulk(page.master);
  w->Bulk("links");
  w->Array(page.links.size());
  for (const LinkedUser& l : page.links) {
    w->Array(2);
    w->Bulk(l.user);
    w->Integer(l.expires_at);
  }
  w->Bulk("next");
  w->Bulk(page.next);
}

void WriteFieldValue(const FieldValue& v, proto::RespWriter* w) {
  switch (v.type) {
    case FieldValue::Type::kInt:
    case FieldValue::Type::kTime:
      return w->Integer(v.i);
    case FieldValue::Type::kDouble:
      return w->Double(v.d);
    case FieldValue::Type::kString:
    case FieldValue::Type::kBytes:
      return w->Bulk(v.s);
  }
}

void WriteFieldWriteReply(const FieldWriteResult& r, proto::RespWriter* w) {
  w->Map(3);
  w->Bulk("changed");
  w->Integer(r.changed);
  w->Bulk("count");
  w->Integer(r.count);
  w->Bulk("duplicate");
  w->Boolean(r.duplicate);
}

void WriteFieldMaxReply(const FieldMaxResult& r, proto::RespWriter* w) {
  w->Map(3);
  w->Bulk("value");
  WriteFieldValue(r.value, w);
  w->Bulk("replaced");
  w->Boolean(r.replaced);
  w->Bulk("duplicate");
  w->Boolean(r.duplicate);
}

namespace {

size_t CountWords(std::string_view s) {
  size_t n = 0;
  bool in = false;
  for (char c : s) {
    if (c == ' ') {
      in = false;
    } else if (!in) {
      in = true;
      ++n;
    }
  }
  return n;
}

template <typename F>
void ForEachWord(std::string_view s, F f) {
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) f(s.substr(i, j - i));
    i = j;
  }
}

}  // namespace

void WriteCommandInfo(const RespCommandDef& def, proto::RespWriter* w) {
  // Redis 7's ten fields: name, arity, flags, first key, last key, step, ACL
  // categories, tips, key specifications, subcommands.
  w->Array(10);
  w->Bulk(def.name);
  w->Integer(def.arity);
  w->Set(CountWords(def.flags));
  ForEachWord(def.flags, [&](std::string_view f) { w->Simple(f); });
  switch (def.keys) {
    case RespKeys::kNone:
    case RespKeys::kCounted:  // movablekeys: COMMAND GETKEYS says
      w->Integer(0);
      w->Integer(0);
      w->Integer(0);
      break;
    case RespKeys::kFirst:
      w->Integer(1);
      w->Integer(1);
      w->Integer(1);
      break;
    case RespKeys::kAll:
      w->Integer(1);
      w->Integer(-1);
      w->Integer(1);
      break;
    case RespKeys::kTwo:
      w->Integer(1);
      w->Integer(2);
      w->Integer(1);
      break;
  }
  w->Set(0);
  w->Set(0);
  w->Array(0);
  w->Array(0);
}

void WriteCommandDocs(const RespCommandDef& def, proto::RespWriter* w) {
  w->Map(4);
  w->Bulk("summary");
  w->Bulk(def.summary);
  w->Bulk("since");
  w->Bulk("0.1.0");
  w->Bulk("group");
  w->Bulk(def.group);
  w->Bulk("syntax");  // not Redis's: its "arguments" tree, flattened to RESP.md's line
  w->Bulk(def.syntax);
}

}  // namespace segstore::server
