// The commands the RESP front end answers (proto/RESP.md), in one table read
// by the dispatcher, COMMAND / COMMAND DOCS / COMMAND GETKEYS, and the
// metrics by command; and the I/O-free pieces of the translation: reading
// a command's arguments into a request of the binary protocol, and writing
// an answer as the command's reply. The connection (resp_connection.cc)
// joins them.
//
// Immutable table; the functions are pure. Any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/resp.h"
#include "proto/wire.h"
#include "segstore/status.h"

namespace segstore::server {

using RespArgs = std::span<const std::string_view>;

enum class RespCmd : uint8_t {
  // the connection and the server
  kPing,
  kEcho,
  kHello,
  kAuth,
  kSelect,
  kClient,
  kCommand,
  kInfo,
  kQuit,
  kReset,
  kDbsize,
  kType,
  kCluster,
  kReadonly,
  kReadwrite,
  kAsking,
  // segstore's own
  kSegGet,
  kSegMget,
  kSegCount,
  kSegUpsert,
  kSegRemove,
  kSegTrim,
  kSegDel,
  kSegLink,
  kSegUnlink,
  kSegMasterof,
  kSegLinks,
  kSegConnected,
  kSegFieldset,
  kSegFielddel,
  kSegIncr,
  kSegFieldmax,
  // keys
  kDel,
  kUnlink,
  kExists,
  // hashes: a key is a user, a field a segment ID, a value its attributes
  kHget,
  kHmget,
  kHgetall,
  kHkeys,
  kHvals,
  kHlen,
  kHexists,
  kHdel,
  kHset,
  kHmset,
  kHsetex,
  kHexpire,
  kHpexpire,
  kHexpireat,
  kHpexpireat,
  kHpersist,
  kHgetex,
  kHttl,
  kHpttl,
  kHexpiretime,
  kHpexpiretime,
  kCount,  // not a command: the number of commands
};
inline constexpr size_t kRespCommands = static_cast<size_t>(RespCmd::kCount);
// Metrics by command: one slot per command and the last for unknown names.
inline constexpr size_t kRespCommandSlots = kRespCommands + 1;

// How a command's keys (users) are found among its arguments.
enum class RespKeys : uint8_t {
  kNone,
  kFirst,    // argument 1 only
  kAll,      // arguments 1 to the last
  kCounted,  // argument 1 is how many keys follow (SEG.MGET)
  kTwo       // arguments 1 and 2 (SEG.CONNECTED)
};

struct RespCommandDef {
  RespCmd id;
  std::string_view name;  // lower case, as COMMAND reports it
  // Redis's arity: n, exactly n arguments (the name included); -n, at least n.
  int arity;
  std::string_view flags;  // COMMAND's flags, space separated ("write", "readonly", "fast", ...)
  RespKeys keys;
  std::string_view group;    // COMMAND DOCS's group: "connection", "server", "generic", "segstore"
  std::string_view summary;  // one line, COMMAND DOCS
  std::string_view syntax;   // the arguments after the name, as RESP.md writes them
};

std::span<const RespCommandDef> RespCommandTable();
const RespCommandDef& RespCommandOf(RespCmd id);
// A command by name, whatever its case; null when unknown.
const RespCommandDef* FindRespCommand(std::string_view name);
// The metrics slot of a command (kRespCommands: unknown).
inline size_t RespSlot(const RespCommandDef* def) {
  return def == nullptr ? kRespCommands : static_cast<size_t>(def->id);
}
// "seg.get", or "unknown" for the last slot: the metrics' label.
std::string_view RespSlotName(size_t slot);

// Command names and keywords are matched without regard to case.
bool RespEqualsNoCase(std::string_view a, std::string_view b);
// What the RESP port decodes the binary answers it asked for with: no
// request limit (a batch answer has as many entries as its request).
proto::DecodeLimits RespAnswerLimits();

// The positions of a command's keys among `args` (args[0] the name);
// InvalidArgument when the arguments cannot say (a bad count).
Status RespKeyPositions(const RespCommandDef& def, RespArgs args, std::vector<size_t>* positions);

// "ERR", "NOTFOUND", "BUSY", ...: the error prefix of a status (RESP.md's
// table). WrongNode's is "MOVED" only with a slot and an address, which the
// caller writes itself; without, "WRONGNODE".
std::string_view RespErrorPrefix(Status::Code code);

// ---- arguments ----
// Each fails with InvalidArgument naming the argument.

// A decimal number without sign or leading zeros, in [0, max].
Status ParseRespNumber(std::string_view text, std::string_view what, uint64_t max, uint64_t* v);
// A write ID: 32 hexadecimal digits, not all zero.
Status ParseWriteId(std::string_view text, WriteId* id);

// SEG.GET user [options], from args[first] on (the options): WINDOW from to,
// NOTEXPIRING from to, IDS lo hi, COUNT, LIMIT n, IDSONLY, OWN, and the
// profile fields to return: FIELDS numfields name ..., ALLFIELDS or
// FIELDPREFIX prefix (one of the three).
Status ParseGetOptions(RespArgs args, size_t first, GetOptions* o);
// SEG.UPSERT user [SET|EXTEND|ADD] [TTL] [WRITEID id] id value [ATTR1 n]
// [ATTR2 n] [id value ...].
Status ParseUpsert(RespArgs args, proto::UpsertRequest* req);
// SEG.REMOVE user [WRITEID id] id [id ...].
Status ParseRemove(RespArgs args, proto::RemoveRequest* req);
// SEG.TRIM user [BEFORE unix-seconds] [WRITEID id].
Status ParseTrim(RespArgs args, proto::TrimRequest* req);
// SEG.DEL user [WRITEID id].
Status ParseDelete(RespArgs args, proto::DeleteRequest* req);
// SEG.COUNT user [IDS lo hi].
Status ParseCount(RespArgs args, proto::CountRequest* req);
// SEG.LINK user master [TTL seconds] [WRITEID id].
Status ParseLink(RespArgs args, proto::LinkRequest* req);
// SEG.UNLINK user [WRITEID id].
Status ParseUnlink(RespArgs args, proto::UnlinkRequest* req);
// SEG.LINKS user [CURSOR cursor] [COUNT n]: COUNT at least 1 (none: the
// server's default); CURSOR "" is the start.
Status ParseLinks(RespArgs args, proto::LinksRequest* req);

// ---- profile fields ----
// proto/RESP.md, "Profile fields". RESP carries only strings: a value's type
// is the one TYPE states, else the command's default (SEG.FIELDSET:
// string; SEG.FIELDMAX: int). Field names are counted (FIELDS numfields) or
// stand at a fixed place, so a name is never taken for a keyword.

// "int", "double", "string", "bytes" or "time", whatever its case.
Status ParseValueType(RespArgs args, size_t at, FieldValue::Type* type);
// `text` as a value of `type`: int a decimal int64 without '+' or leading
// zeros; double a decimal or exponent number, inf or -inf (not nan); string
// valid UTF-8; bytes anything; time Unix seconds (a u32, as ParseRespNumber).
// InvalidArgument (without the command's name) when it is not one.
Status ParseTypedValue(std::string_view text, FieldValue::Type type, FieldValue* v);
// SEG.FIELDSET user [WRITEID id] [TYPE type] [EX seconds | EXAT unix-time]
// FIELDS numfields name value [name value ...], the part from TYPE on
// repeated for fields of other types or expiries; one field_set.
Status ParseFieldSet(RespArgs args, proto::FieldSetRequest* req);
// SEG.FIELDDEL user [WRITEID id] FIELDS numfields name [name ...].
Status ParseFieldDelete(RespArgs args, proto::FieldDeleteRequest* req);
// SEG.INCR user name delta [TTL seconds] [SLIDING] [CAP n] [WRITEID id].
Status ParseFieldIncrement(RespArgs args, proto::FieldIncrementRequest* req);
// SEG.FIELDMAX user name value [TYPE int | double | time] [EX seconds |
// EXAT unix-time] [WRITEID id].
Status ParseFieldMax(RespArgs args, proto::FieldMaxRequest* req);

// ---- hashes ----
// A hash's field is a segment ID (ParseRespNumber's form, any u64); its
// value is the segment's attributes as text: "" (none), "7" (attr1), "7:9"
// (both) or ":9" (attr2 only), numbers written as ParseRespNumber reads.

// args[at] as a field of command args[0].
Status ParseField(RespArgs args, size_t at, uint64_t* id);
// "FIELDS numfields field [field ...]" from args[at] to the end.
Status ParseFieldsClause(RespArgs args, size_t at, std::vector<uint64_t>* ids);
// A field's value as the attributes it stands for; false when it is not
// of the form above.
bool ParseFieldValue(std::string_view text, std::optional<uint32_t>* attr1,
                     std::optional<uint32_t>* attr2);
// HSET/HMSET key field value [field value ...] (from args[2]) and HSETEX
// key [EX s | PX ms | EXAT t | PXAT ms] FIELDS n field value ...: an upsert
// in mode set, with replace_attrs, of each field (a field named twice: its
// last value) expiring never (HSET) or as HSETEX says; PX and PXAT are
// rounded up to whole seconds. `now` is the clock PXAT/EXAT are checked
// against (a time not in the future is refused, as Redis refuses it).
Status ParseHashSet(RespArgs args, UnixSeconds now, proto::UpsertRequest* req);
// HEXPIRE/HPEXPIRE/HEXPIREAT/HPEXPIREAT key time [NX | XX | GT | LT] FIELDS
// numfields field ... and HPERSIST key FIELDS numfields field ...: one
// expire. Milliseconds are rounded up to whole seconds; an absolute time of
// 0 is the past (the fields go), as Redis reads it.
Status ParseHashExpire(RespArgs args, proto::ExpireRequest* req);
// HGETEX key [EX s | PX ms | EXAT t | PXAT ms | PERSIST] FIELDS numfields
// field ...: the fields, and the expire to make after reading them (false
// in *expire without an option).
Status ParseHashGetEx(RespArgs args, std::vector<uint64_t>* ids, bool* expire,
                      proto::ExpireRequest* req);
// Appends the value of a segment with these attributes to *out.
void AppendFieldValue(std::optional<uint32_t> attr1, std::optional<uint32_t> attr2,
                      std::string* out);

// ---- replies ----

// A get's result as SEG.GET answers it: a map of count, stale and the
// segments in columns (ids, expires, attr1, attr2; ids alone for IDSONLY,
// none for COUNT), then master and profiles for a merged view (a linked
// user's read: r.master not empty) and only then, then fields (name to
// [type, value, expires_at]) when fields were asked (r.fields_asked).
void WriteGetReply(const GetResult& r, const GetOptions& o, bool stale, proto::RespWriter* w);
void WriteUpsertReply(const UpsertResult& r, proto::RespWriter* w);
void WriteTrimReply(const TrimResult& r, proto::RespWriter* w);
// SEG.LINK's: a map of master, members, moved.
void WriteLinkReply(const LinkResult& r, proto::RespWriter* w);
// SEG.LINKS's: a map of master, links ([user, expires_at] pairs) and next
// ("" at the end).
void WriteLinksReply(const LinksPage& page, proto::RespWriter* w);
// A profile field's value as its type reads in RESP: int and time an
// integer, double a double (RESP2: a bulk string), string and bytes a bulk
// string.
void WriteFieldValue(const FieldValue& v, proto::RespWriter* w);
// SEG.FIELDSET's and SEG.FIELDDEL's: a map of changed, count, duplicate.
void WriteFieldWriteReply(const FieldWriteResult& r, proto::RespWriter* w);
// SEG.FIELDMAX's: a map of value, replaced, duplicate.
void WriteFieldMaxReply(const FieldMaxResult& r, proto::RespWriter* w);

// COMMAND's entry for one command, and COMMAND DOCS's.
void WriteCommandInfo(const RespCommandDef& def, proto::RespWriter* w);
void WriteCommandDocs(const RespCommandDef& def, proto::RespWriter* w);

}  // namespace segstore::server
