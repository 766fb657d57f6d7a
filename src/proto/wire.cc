#include "proto/wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <msgpack.hpp>
#include <string>

#include "common/utf8.h"
#include "proto/get_reader.h"

namespace segstore::proto {

std::string_view OpName(uint8_t op) {
  switch (static_cast<Op>(op)) {
    case Op::kHello:
      return "hello";
    case Op::kPing:
      return "ping";
    case Op::kStats:
      return "stats";
    case Op::kClusterMap:
      return "cluster_map";
    case Op::kGet:
      return "get";
    case Op::kBatchGet:
      return "batch_get";
    case Op::kCount:
      return "count";
    case Op::kMasterOf:
      return "master_of";
    case Op::kLinks:
      return "links";
    case Op::kConnected:
      return "connected";
    case Op::kScan:
      return "scan";
    case Op::kUpsert:
      return "upsert";
    case Op::kBatchUpsert:
      return "batch_upsert";
    case Op::kRemove:
      return "remove";
    case Op::kTrim:
      return "trim";
    case Op::kDelete:
      return "delete";
    case Op::kExpire:
      return "expire";
    case Op::kLink:
      return "link";
    case Op::kUnlink:
      return "unlink";
    case Op::kFieldSet:
      return "field_set";
    case Op::kFieldDelete:
      return "field_del";
    case Op::kFieldIncrement:
      return "field_incr";
    case Op::kFieldMax:
      return "field_max";
    case Op::kLinkStep:
      return "link_step";
    case Op::kReadRecords:
      return "read_records";
    case Op::kCopyPartition:
      return "copy_partition";
  }
  return "unknown";
}

bool IsKnownOp(uint8_t op) { return OpName(op) != "unknown"; }

namespace {

using msgpack::object;
namespace mt = msgpack::type;

// ---- encoding ----

struct Sink {
  std::string* s;
  void write(const char* p, size_t n) { s->append(p, n); }
};
using Packer = msgpack::packer<Sink>;

void Str(Packer& pk, std::string_view v) {
  pk.pack_str(static_cast<uint32_t>(v.size()));
  pk.pack_str_body(v.data(), static_cast<uint32_t>(v.size()));
}

void Bin(Packer& pk, std::string_view v) {
  pk.pack_bin(static_cast<uint32_t>(v.size()));
  pk.pack_bin_body(v.data(), static_cast<uint32_t>(v.size()));
}

void Bool(Packer& pk, bool v) {
  if (v) {
    pk.pack_true();
  } else {
    pk.pack_false();
  }
}

void OptU32(Packer& pk, const std::optional<uint32_t>& v) {
  if (v) {
    pk.pack_uint32(*v);
  } else {
    pk.pack_nil();
  }
}

// "write_id": a bin of 16 bytes, big-endian hi then lo; omitted when empty.
uint32_t WriteIdFields(const WriteId& id) { return id.empty() ? 0 : 1; }
void WriteIdField(Packer& pk, const WriteId& id) {
  if (id.empty()) return;
  Str(pk, "write_id");
  char b[16];
  for (int i = 0; i < 8; ++i) {
    b[i] = static_cast<char>(id.hi >> (56 - 8 * i));
    b[8 + i] = static_cast<char>(id.lo >> (56 - 8 * i));
  }
  pk.pack_bin(16);
  pk.pack_bin_body(b, 16);
}

// "duplicate": true, only when set.
void DuplicateField(Packer& pk, bool duplicate) {
  if (!duplicate) return;
  Str(pk, "duplicate");
  Bool(pk, true);
}

// A float 64 (0xcb) whatever the value: msgpack-c's pack_double writes
// whole values as integers, and a double must keep its type.
void Float64(std::string* out, double d) {
  const auto bits = std::bit_cast<uint64_t>(d);
  char buf[9];
  buf[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  out->append(buf, sizeof buf);
}

// A profile field's name: a str when it is UTF-8 text (as names usually
// are), else a bin (names are bytes).
void FieldName(Packer& pk, std::string_view name) {
  if (IsUtf8(name)) {
    Str(pk, name);
  } else {
    Bin(pk, name);
  }
}

// A profile field's value, typed by its MessagePack form: int, float 64,
// str, bin, or a time as the timestamp extension's 32-bit form (fixext 4,
// type -1, the seconds big-endian).
void FieldValueOf(Packer& pk, std::string* out, const FieldValue& v) {
  switch (v.type) {
    case FieldValue::Type::kInt:
      pk.pack_int64(v.i);
      return;
    case FieldValue::Type::kDouble:
      Float64(out, v.d);
      return;
    case FieldValue::Type::kString:
      Str(pk, v.s);
      return;
    case FieldValue::Type::kBytes:
      Bin(pk, v.s);
      return;
    case FieldValue::Type::kTime: {
      const auto t = static_cast<uint32_t>(v.i);
      const char b[4] = {static_cast<char>(t >> 24), static_cast<char>(t >> 16),
                         static_cast<char>(t >> 8), static_cast<char>(t)};
      pk.pack_ext(4, -1);
      pk.pack_ext_body(b, 4);
      return;
    }
  }
}

std::string_view ModeName(UpsertMode m) {
  switch (m) {
    case UpsertMode::kSet:
      return "set";
    case UpsertMode::kExtend:
      return "extend";
    case UpsertMode::kAdd:
      return "add";
  }
  return "set";
}

std::string_view ConditionName(ExpireCondition c) {
  switch (c) {
    case ExpireCondition::kNone:
      return "";
    case ExpireCondition::kNx:
      return "nx";
    case ExpireCondition::kXx:
      return "xx";
    case ExpireCondition::kGt:
      return "gt";
    case ExpireCondition::kLt:
      return "lt";
  }
  return "";
}

// The get options as map entries; returns how many it wrote when `pk` is
// null (a dry run to size the map).
uint32_t OptionFields(Packer* pk, const GetOptions& o) {
  const GetOptions d;
  uint32_t n = 0;
  auto u64 = [&](std::string_view k, uint64_t v, uint64_t def) {
    if (v == def) return;
    ++n;
    if (pk != nullptr) {
      Str(*pk, k);
      pk->pack_uint64(v);
    }
  };
  auto flag = [&](std::string_view k, bool v) {
    if (!v) return;
    ++n;
    if (pk != nullptr) {
      Str(*pk, k);
      pk->pack_true();
    }
  };
  if (o.ids_only) {
    ++n;
    if (pk != nullptr) {
      Str(*pk, "projection");
      Str(*pk, "ids");
    }
  }
  u64("expiry_from", o.expiry_from, d.expiry_from);
  u64("expiry_to", o.expiry_to, d.expiry_to);
  flag("outside_expiry", o.outside_expiry_window);
  u64("id_from", o.id_from, d.id_from);
  u64("id_to", o.id_to, d.id_to);
  flag("count_only", o.count_only);
  u64("limit", o.limit, d.limit);
  flag("own", o.own_only);
  switch (o.fields.mode) {
    case FieldSelection::Mode::kNone:
      break;
    case FieldSelection::Mode::kAll:
      flag("fields", true);
      break;
    case FieldSelection::Mode::kNames:
      ++n;
      if (pk != nullptr) {
        Str(*pk, "fields");
        pk->pack_array(static_cast<uint32_t>(o.fields.names.size()));
        for (const std::string& name : o.fields.names) FieldName(*pk, name);
      }
      break;
    case FieldSelection::Mode::kPrefix:
      ++n;
      if (pk != nullptr) {
        Str(*pk, "field_prefix");
        FieldName(*pk, o.fields.prefix);
      }
      break;
  }
  return n;
}

void SegmentList(Packer& pk, const std::vector<SegmentUpdate>& segs) {
  pk.pack_array(static_cast<uint32_t>(segs.size()));
  for (const SegmentUpdate& s : segs) {
    const uint32_t len = s.attr2 ? 5 : s.attr1 ? 4 : s.ttl ? 3 : 2;
    pk.pack_array(len);
    pk.pack_uint64(s.id);
    pk.pack_uint32(s.value);
    if (len >= 3) Bool(pk, s.ttl);
    if (len >= 4) OptU32(pk, s.attr1);
    if (len >= 5) OptU32(pk, s.attr2);
  }
}

// The values [v, end) each in MessagePack's smallest unsigned form, at `p`
// (9 bytes of room a value); returns the end. Values of one form come in
// runs (a get's ids are sorted, and its expiries nearly all take 4 bytes),
// and each run is written by a loop of its own form: a compare, a store of
// the marker and of the value's bytes. A byte-by-byte writer choosing the
// form for every value took three times as long.
template <typename T>
char* PutUints(char* p, const T* v, const T* end) {
  auto big_endian = [](char* at, auto x) {
    if constexpr (sizeof x == 2) x = __builtin_bswap16(x);
    if constexpr (sizeof x == 4) x = __builtin_bswap32(x);
    if constexpr (sizeof x == 8) x = __builtin_bswap64(x);
    std::memcpy(at, &x, sizeof x);
  };
  // Whether `x` lies in [lo, hi], in one compare.
  auto in = [](uint64_t x, uint64_t lo, uint64_t hi) { return x - lo <= hi - lo; };
  while (v != end) {
    const uint64_t x = *v;
    if (x < 0x80) {  // positive fixint
      do {
        *p++ = static_cast<char>(*v);
      } while (++v != end && uint64_t{*v} < 0x80);
    } else if (x <= 0xff) {
      do {
        p[0] = static_cast<char>(0xcc);
        p[1] = static_cast<char>(*v);
        p += 2;
      } while (++v != end && in(*v, 0x80, 0xff));
    } else if (x <= 0xffff) {
      do {
        p[0] = static_cast<char>(0xcd);
        big_endian(p + 1, static_cast<uint16_t>(*v));
        p += 3;
      } while (++v != end && in(*v, 0x100, 0xffff));
    } else if (x <= 0xffffffff) {
      do {
        p[0] = static_cast<char>(0xce);
        big_endian(p + 1, static_cast<uint32_t>(*v));
        p += 5;
      } while (++v != end && in(*v, 0x10000, 0xffffffff));
    } else {
      do {
        p[0] = static_cast<char>(0xcf);
        big_endian(p + 1, static_cast<uint64_t>(*v));
        p += 9;
      } while (++v != end && uint64_t{*v} > 0xffffffff);
    }
  }
  return p;
}

// An array of unsigned integers, each in its smallest form: the bytes
// msgpack's packer writes, without its per-value append (a get answer holds
// thousands; this is the hot path of every read). Written through a buffer
// on the stack, appended 4 KiB at a time: growing `out` by the largest form
// first would zero twice the bytes the array takes.
template <typename T>
void UintArray(Packer& pk, std::string* out, const std::vector<T>& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  constexpr size_t kRows = 455;  // 4,095 bytes at most
  char buf[kRows * 9];
  for (size_t i = 0; i < v.size(); i += kRows) {
    const size_t rows = std::min(kRows, v.size() - i);
    const char* const end = PutUints(buf, v.data() + i, v.data() + i + rows);
    out->append(buf, static_cast<size_t>(end - buf));
  }
}

// Bytes GetFields may write at most (9 an integer, its largest form):
// reserved up front, a batch answer of 20 profiles is built without the
// string growing (perf had a fifth of a batch get's CPU in that growth).
size_t GetFieldsBound(const GetResult& m) {
  size_t fields = 0;
  for (const Field& f : m.fields) fields += 24 + f.name.size() + f.value.s.size();
  return 96 + m.master.size() + 9 * (m.ids.size() + m.expires.size()) +
         5 * (m.attr1.size() + m.attr2.size()) + fields;
}

void GetFields(Packer& pk, std::string* out, const GetResult& m, bool with_status) {
  const bool attr1 = !m.attr1.empty();
  const bool attr2 = !m.attr2.empty();
  const bool expires = !m.expires.empty();
  const bool merged = !m.master.empty();  // a linked user's merged view: "master", "profiles"
  pk.pack_map(2 + (with_status ? 1 : 0) + (expires ? 1 : 0) + (attr1 ? 1 : 0) + (attr2 ? 1 : 0) +
              (merged ? 2 : 0) + (m.fields_asked ? 1 : 0));
  if (with_status) {
    Str(pk, "status");
    pk.pack_uint8(0);
  }
  Str(pk, "count");
  pk.pack_uint32(m.count);
  Str(pk, "ids");
  UintArray(pk, out, m.ids);
  if (expires) {
    Str(pk, "expires");
    UintArray(pk, out, m.expires);
  }
  if (attr1) {
    Str(pk, "attr1");
    pk.pack_array(static_cast<uint32_t>(m.attr1.size()));
    for (const auto& a : m.attr1) OptU32(pk, a);
  }
  if (attr2) {
    Str(pk, "attr2");
    pk.pack_array(static_cast<uint32_t>(m.attr2.size()));
    for (const auto& a : m.attr2) OptU32(pk, a);
  }
  if (merged) {
    Str(pk, "master");
    Bin(pk, m.master);
    Str(pk, "profiles");
    pk.pack_uint32(m.profiles);
  }
  if (m.fields_asked) {  // {name: [value, expires_at]...}, names in bytewise order
    Str(pk, "fields");
    pk.pack_map(static_cast<uint32_t>(m.fields.size()));
    for (const Field& f : m.fields) {
      FieldName(pk, f.name);
      pk.pack_array(2);
      FieldValueOf(pk, out, f.value);
      pk.pack_uint32(f.expires_at);
    }
  }
}

void UpsertFields(Packer& pk, const UpsertResult& m, bool with_status) {
  pk.pack_map((with_status ? 5 : 4) + (m.duplicate ? 1 : 0));
  if (with_status) {
    Str(pk, "status");
    pk.pack_uint8(0);
  }
  Str(pk, "inserted");
  pk.pack_uint32(m.inserted);
  Str(pk, "updated");
  pk.pack_uint32(m.updated);
  Str(pk, "trimmed");
  pk.pack_uint32(m.trimmed);
  Str(pk, "count");
  pk.pack_uint32(m.count);
  DuplicateField(pk, m.duplicate);
}

void ErrorFields(Packer& pk, const Status& s) {
  pk.pack_map(2);
  Str(pk, "status");
  pk.pack_uint8(static_cast<uint8_t>(s.code()));
  Str(pk, "message");
  Str(pk, s.message());
}

// ---- decoding ----

std::string_view TypeName(mt::object_type t) {
  switch (t) {
    case mt::NIL:
      return "nil";
    case mt::BOOLEAN:
      return "a boolean";
    case mt::POSITIVE_INTEGER:
      return "an unsigned integer";
    case mt::NEGATIVE_INTEGER:
      return "a negative integer";
    case mt::FLOAT32:
    case mt::FLOAT64:
      return "a float";
    case mt::STR:
      return "a string";
    case mt::BIN:
      return "binary";
    case mt::ARRAY:
      return "an array";
    case mt::MAP:
      return "a map";
    case mt::EXT:
      return "an extension";
  }
  return "an unknown type";
}

Status Bad(std::string_view field, std::string_view what) {
  return Status::InvalidArgument(std::string(field) + ": " + std::string(what));
}

Status WrongType(std::string_view field, std::string_view want, const object& got) {
  return Bad(field, "expected " + std::string(want) + ", got " + std::string(TypeName(got.type)));
}

constexpr int kMaxDepth = 8;  // containers nested in a body, at most

// Walks the MessagePack value at the start of `body` without building it,
// and gives its length. Each container must claim no more elements than the
// bytes left could hold (every element takes at least one byte), so the
// parser below never reserves room for elements the body does not have,
// whatever a header claims: what it builds is at most one object (24 bytes)
// for each byte of the body. At most kMaxDepth containers nest, a map has at
// most kMaxMapEntries entries, and extension types and the unused byte 0xc1
// are refused, except, when `timestamps` is not null, the timestamp
// extension (type -1) in its 32- and 64-bit forms, counted in *timestamps
// (the body's reader then takes each one as a profile field's value, or
// refuses the body).
Status CheckShape(std::string_view body, size_t* length, size_t* timestamps) {
  const auto* const begin = reinterpret_cast<const uint8_t*>(body.data());
  const auto* p = begin;
  const auto* const end = begin + body.size();
  uint64_t left_at[kMaxDepth];  // elements still to read in each open container
  int depth = 0;
  uint64_t expected = 1;  // values still to read, at every level
  auto big_endian = [&](size_t bytes, uint64_t* v) {
    if (static_cast<size_t>(end - p) < 1 + bytes) return false;
    uint64_t x = 0;
    for (size_t i = 1; i <= bytes; ++i) x = (x << 8) | p[i];
    *v = x;
    return true;
  };
  const auto truncated = Status::InvalidArgument("body is not valid MessagePack: it ends early");
  while (expected > 0) {
    if (p == end) return truncated;
    const uint8_t b = *p;
    uint64_t head = 1, payload = 0, children = 0, n = 0;
    bool container = false;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
      // fixint, nil, false, true
    } else if (b <= 0x8f) {
      container = true;
      children = 2 * uint64_t{b & 0x0fu};
    } else if (b <= 0x9f) {
      container = true;
      children = b & 0x0fu;
    } else if (b <= 0xbf) {
      payload = b & 0x1fu;
    } else if (b == 0xc4 || b == 0xc5 || b == 0xc6 || b == 0xd9 || b == 0xda || b == 0xdb) {
      const size_t w = (b == 0xc4 || b == 0xd9) ? 1 : (b == 0xc5 || b == 0xda) ? 2 : 4;
      if (!big_endian(w, &n)) return truncated;
      head += w;
      payload = n;
    } else if (b == 0xca || b == 0xcb || (b >= 0xcc && b <= 0xd3)) {
      payload = b == 0xca ? 4 : b == 0xcb ? 8 : size_t{1} << ((b - 0xcc) & 3);
    } else if (b == 0xdc || b == 0xdd || b == 0xde || b == 0xdf) {
      const size_t w = (b == 0xdc || b == 0xde) ? 2 : 4;
      if (!big_endian(w, &n)) return truncated;
      head += w;
      container = true;
      if (b >= 0xde && n > kMaxMapEntries) {
        return Status::InvalidArgument("body: a map of " + std::to_string(n) +
                                       " entries; at most " + std::to_string(kMaxMapEntries));
      }
      children = b >= 0xde ? 2 * n : n;
    } else if (b == 0xc1) {
      return Status::InvalidArgument("body is not valid MessagePack: byte 0xc1 at offset " +
                                     std::to_string(p - begin));
    } else if (timestamps != nullptr && (b == 0xd6 || b == 0xd7) && (end - p < 2 || p[1] == 0xff)) {
      head = 2;  // fixext 4 or 8 of type -1: a timestamp of 32 or 64 bits
      payload = b == 0xd6 ? 4 : 8;
      ++*timestamps;
    } else if (timestamps != nullptr) {
      return Status::InvalidArgument(
          "body: MessagePack extension types are not accepted, but for a timestamp (type -1, "
          "32 or 64 bits) as a profile field's value");
    } else {
      return Status::InvalidArgument("body: MessagePack extension types are not accepted");
    }
    if (head + payload > static_cast<uint64_t>(end - p)) return truncated;
    p += head + payload;
    --expected;
    if (depth > 0) --left_at[depth - 1];
    if (container && depth == kMaxDepth) {  // an empty one too
      return Status::InvalidArgument("body: more than " + std::to_string(kMaxDepth) +
                                     " levels of nested arrays and maps");
    }
    if (children > 0) {
      expected += children;
      if (expected > static_cast<uint64_t>(end - p)) {
        return Status::InvalidArgument(
            "body is not valid MessagePack: a list or map claims more elements than the body "
            "holds");
      }
      left_at[depth++] = children;
    }
    while (depth > 0 && left_at[depth - 1] == 0) --depth;
  }
  *length = static_cast<size_t>(p - begin);
  return Status::OK();
}

// Parses `body` into a tree of objects owned by *oh. An empty body is an
// empty map. `timestamps`: as CheckShape's.
Status Parse(std::string_view body, msgpack::object_handle* oh, const object** root,
             size_t* timestamps = nullptr) {
  static const object kEmptyMap = [] {
    object o;
    o.type = mt::MAP;
    o.via.map.size = 0;
    o.via.map.ptr = nullptr;
    return o;
  }();
  if (body.empty()) {
    *root = &kEmptyMap;
    return Status::OK();
  }
  // The shape first, so the parser can be given limits no smaller than any
  // list a valid body holds: a list over its field's limit is then refused by
  // the field's check, naming it (and, in a batch, failing only its item).
  size_t length = 0;
  SEGSTORE_RETURN_IF_ERROR(CheckShape(body, &length, timestamps));
  if (length != body.size()) {
    return Status::InvalidArgument("body: " + std::to_string(body.size() - length) +
                                   " trailing bytes after the MessagePack value");
  }
  try {
    size_t off = 0;
    *oh = msgpack::unpack(body.data(), body.size(), off, nullptr, nullptr,
                          msgpack::unpack_limit(body.size(), body.size(), body.size(), body.size(),
                                                /*ext=*/timestamps != nullptr ? 9 : 0,
                                                kMaxDepth + 1));  // CheckShape decided
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("body is not valid MessagePack: ") + e.what());
  }
  *root = &oh->get();
  return Status::OK();
}

// A map key for a message: printable ASCII as is, other bytes as \xNN, at
// most 64 bytes of it (messages travel as MessagePack str, so valid UTF-8).
std::string Printable(std::string_view key) {
  std::string out;
  for (size_t i = 0; i < key.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (key.size() > 64) out += "...";
  return out;
}

std::string_view KeyOf(const msgpack::object_kv& kv) {
  return {kv.key.via.str.ptr, kv.key.via.str.size};
}

// Every key of `map` is a string and none appears twice (PROTOCOL.md,
// "Frames"): a body is a map with string keys, and a field given twice would
// leave its value to the reader's choice.
Status CheckKeys(const object& map, std::string_view what) {
  const uint32_t n = map.via.map.size;
  const msgpack::object_kv* kv = map.via.map.ptr;
  for (uint32_t i = 0; i < n; ++i) {
    if (kv[i].key.type != mt::STR) {
      return Bad(what, "map key " + std::to_string(i) + " is " +
                           std::string(TypeName(kv[i].key.type)) + "; keys must be strings");
    }
  }
  auto twice = [&](std::string_view key) {
    return Bad(what, "key \"" + Printable(key) + "\" appears twice");
  };
  if (n <= 16) {  // request maps are small: no allocation
    for (uint32_t i = 1; i < n; ++i) {
      for (uint32_t j = 0; j < i; ++j) {
        if (KeyOf(kv[i]) == KeyOf(kv[j])) return twice(KeyOf(kv[i]));
      }
    }
    return Status::OK();
  }
  std::vector<std::string_view> keys;
  keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) keys.push_back(KeyOf(kv[i]));
  std::sort(keys.begin(), keys.end());
  if (auto dup = std::adjacent_find(keys.begin(), keys.end()); dup != keys.end())
    return twice(*dup);
  return Status::OK();
}

// A MessagePack map read field by field. Unknown keys are ignored.
class Fields {
 public:
  // `o` as a map with string keys, each once; `what` names it in errors.
  static Status Of(const object& o, std::string_view what, const std::string& prefix,
                   std::optional<Fields>* out) {
    if (o.type != mt::MAP) return WrongType(what, "a map", o);
    SEGSTORE_RETURN_IF_ERROR(CheckKeys(o, what));
    out->emplace(Fields(o, prefix));
    return Status::OK();
  }

  std::string Name(std::string_view key) const { return prefix_ + std::string(key); }

  const object* Find(std::string_view key) const {
    for (uint32_t i = 0; i < map_.via.map.size; ++i) {
      if (KeyOf(map_.via.map.ptr[i]) == key) return &map_.via.map.ptr[i].val;
    }
    return nullptr;
  }

  Status Uint(std::string_view key, uint64_t max, uint64_t* v, bool required = false) const {
    const object* o = Find(key);
    if (o == nullptr || o->type == mt::NIL) {
      return required ? Bad(Name(key), "missing") : Status::OK();
    }
    return ReadUint(*o, Name(key), max, v);
  }

  template <typename T>
  Status UintAs(std::string_view key, T* v, bool required = false) const {
    uint64_t x = *v;
    SEGSTORE_RETURN_IF_ERROR(Uint(key, std::numeric_limits<T>::max(), &x, required));
    *v = static_cast<T>(x);
    return Status::OK();
  }

  Status Flag(std::string_view key, bool* v) const {
    const object* o = Find(key);
    if (o == nullptr || o->type == mt::NIL) return Status::OK();
    if (o->type != mt::BOOLEAN) return WrongType(Name(key), "a boolean", *o);
    *v = o->via.boolean;
    return Status::OK();
  }

  Status Text(std::string_view key, std::string* v, bool required = false) const {
    const object* o = Find(key);
    if (o == nullptr || o->type == mt::NIL) {
      return required ? Bad(Name(key), "missing") : Status::OK();
    }
    if (o->type != mt::STR) return WrongType(Name(key), "a string", *o);
    v->assign(o->via.str.ptr, o->via.str.size);
    return Status::OK();
  }

  // A str or a bin, as bytes.
  Status Blob(std::string_view key, std::string* v) const {
    const object* o = Find(key);
    if (o == nullptr || o->type == mt::NIL) return Status::OK();
    if (o->type == mt::STR) {
      v->assign(o->via.str.ptr, o->via.str.size);
    } else if (o->type == mt::BIN) {
      v->assign(o->via.bin.ptr, o->via.bin.size);
    } else {
      return WrongType(Name(key), "a string or bin", *o);
    }
    return Status::OK();
  }

  // "write_id": absent or nil, or a bin of exactly 16 bytes, not all zeros.
  Status Id(WriteId* v) const {
    const object* o = Find("write_id");
    if (o == nullptr || o->type == mt::NIL) return Status::OK();
    if (o->type != mt::BIN) return WrongType(Name("write_id"), "a bin of 16 bytes", *o);
    if (o->via.bin.size != 16) {
      return Bad(Name("write_id"),
                 std::to_string(o->via.bin.size) + " bytes; a write ID is a bin of 16 bytes");
    }
    const auto* b = reinterpret_cast<const uint8_t*>(o->via.bin.ptr);
    WriteId id;
    for (int i = 0; i < 8; ++i) {
      id.hi = (id.hi << 8) | b[i];
      id.lo = (id.lo << 8) | b[8 + i];
    }
    if (id.empty()) return Bad(Name("write_id"), "all zeros; a write ID must not be");
    *v = id;
    return Status::OK();
  }

  // A required user ID: "user", or another key that names one ("master",
  // "a", "b").
  Status User(const DecodeLimits& lim, std::string* v, std::string_view key = "user") const {
    const object* o = Find(key);
    if (o == nullptr) return Bad(Name(key), "missing");
    return ReadUser(*o, Name(key), lim, v);
  }

  // An optional user ID (links' "cursor" and "next"): absent, nil or empty
  // reads as empty; anything else is held to the rules of a user ID.
  Status OptUser(std::string_view key, const DecodeLimits& lim, std::string* v) const {
    const object* o = Find(key);
    if (o == nullptr || o->type == mt::NIL) return Status::OK();
    if ((o->type == mt::STR && o->via.str.size == 0) ||
        (o->type == mt::BIN && o->via.bin.size == 0)) {
      v->clear();
      return Status::OK();
    }
    return ReadUser(*o, Name(key), lim, v);
  }

  Status Array(std::string_view key, uint32_t max, const object** v, bool required) const {
    const object* o = Find(key);
    if (o == nullptr || o->type == mt::NIL) {
      *v = nullptr;
      return required ? Bad(Name(key), "missing") : Status::OK();
    }
    if (o->type != mt::ARRAY) return WrongType(Name(key), "an array", *o);
    if (o->via.array.size > max) {
      return Status::LimitExceeded(Name(key) + ": " + std::to_string(o->via.array.size) +
                                   " elements, the limit is " + std::to_string(max));
    }
    *v = o;
    return Status::OK();
  }

  static Status ReadUint(const object& o, const std::string& name, uint64_t max, uint64_t* v) {
    if (o.type == mt::NEGATIVE_INTEGER) return Bad(name, "must not be negative");
    if (o.type != mt::POSITIVE_INTEGER) return WrongType(name, "an unsigned integer", o);
    if (o.via.u64 > max) return Bad(name, std::to_string(o.via.u64) + " is out of range");
    *v = o.via.u64;
    return Status::OK();
  }

  static Status CheckUser(std::string_view user, std::string_view name, const DecodeLimits& lim) {
    if (user.empty()) return Bad(name, "empty user ID");
    if (user.size() > lim.max_key_bytes) {
      return Bad(name, "user ID of " + std::to_string(user.size()) + " bytes, the limit is " +
                           std::to_string(lim.max_key_bytes));
    }
    return Status::OK();
  }

  static Status ReadUser(const object& o, const std::string& name, const DecodeLimits& lim,
                         std::string* v) {
    const char* p = nullptr;
    uint32_t n = 0;
    if (o.type == mt::STR) {
      p = o.via.str.ptr;
      n = o.via.str.size;
    } else if (o.type == mt::BIN) {
      p = o.via.bin.ptr;
      n = o.via.bin.size;
    } else {
      return WrongType(name, "a string or binary user ID", o);
    }
    SEGSTORE_RETURN_IF_ERROR(CheckUser(std::string_view(p, n), name, lim));
    v->assign(p, n);
    return Status::OK();
  }

 private:
  // Only through Of(): Find reads every key as a string.
  Fields(const object& map, std::string prefix) : map_(map), prefix_(std::move(prefix)) {}

  const object& map_;
  std::string prefix_;
};

// The common case of an element of a long list, without building its name:
// a non-negative integer in range. Otherwise the caller takes the slow path,
// which names the element in its error.
inline bool FastUint(const object& o, uint64_t max, uint64_t* v) {
  if (o.type != mt::POSITIVE_INTEGER || o.via.u64 > max) return false;
  *v = o.via.u64;
  return true;
}

Status ReadMode(const Fields& f, UpsertMode* mode) {
  std::string name;
  SEGSTORE_RETURN_IF_ERROR(f.Text("mode", &name));
  if (name.empty()) return Status::OK();
  if (name == "set") {
    *mode = UpsertMode::kSet;
  } else if (name == "extend") {
    *mode = UpsertMode::kExtend;
  } else if (name == "add") {
    *mode = UpsertMode::kAdd;
  } else {
    return Bad(f.Name("mode"), "\"" + Printable(name) + "\" is not one of set, extend, add");
  }
  return Status::OK();
}

// "condition" of expire: absent or nil for none, else one of its names.
Status ReadCondition(const Fields& f, ExpireCondition* condition) {
  *condition = ExpireCondition::kNone;
  const object* o = f.Find("condition");
  if (o == nullptr || o->type == mt::NIL) return Status::OK();
  if (o->type != mt::STR) return WrongType(f.Name("condition"), "a string", *o);
  const std::string_view name(o->via.str.ptr, o->via.str.size);
  for (ExpireCondition c :
       {ExpireCondition::kNx, ExpireCondition::kXx, ExpireCondition::kGt, ExpireCondition::kLt}) {
    if (name == ConditionName(c)) {
      *condition = c;
      return Status::OK();
    }
  }
  return Bad(f.Name("condition"), "\"" + Printable(name) + "\" is not one of nx, xx, gt, lt");
}

// A list of segment IDs: "ids" of remove and expire.
Status ReadIds(const Fields& f, const DecodeLimits& lim, std::vector<uint64_t>* ids) {
  const object* arr = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f.Array("ids", lim.max_list, &arr, true));
  ids->clear();
  ids->reserve(arr->via.array.size);
  for (uint32_t i = 0; i < arr->via.array.size; ++i) {
    uint64_t id = 0;
    if (!FastUint(arr->via.array.ptr[i], UINT64_MAX, &id)) {
      SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(
          arr->via.array.ptr[i], f.Name("ids") + "[" + std::to_string(i) + "]", UINT64_MAX, &id));
    }
    ids->push_back(id);
  }
  return Status::OK();
}

// A profile field's name, `bytes`, held to 1 to kMaxFieldNameBytes bytes;
// `where` names it in the refusal. The one rule for names decoded and for
// names that arrive as values (CheckSelection).
Status CheckFieldName(std::string_view bytes, const std::string& where) {
  if (bytes.empty()) return Bad(where, "an empty field name");
  if (bytes.size() > kMaxFieldNameBytes) {
    return Bad(where, "a field name of " + std::to_string(bytes.size()) + " bytes, the limit is " +
                          std::to_string(kMaxFieldNameBytes));
  }
  return Status::OK();
}

// A profile field's name: a str or bin of 1 to kMaxFieldNameBytes bytes.
Status ReadFieldName(const object& o, const std::string& name, std::string* v) {
  if (o.type != mt::STR && o.type != mt::BIN)
    return WrongType(name, "a field name (str or bin)", o);
  const std::string_view bytes = o.type == mt::STR
                                     ? std::string_view(o.via.str.ptr, o.via.str.size)
                                     : std::string_view(o.via.bin.ptr, o.via.bin.size);
  SEGSTORE_RETURN_IF_ERROR(CheckFieldName(bytes, name));
  v->assign(bytes);
  return Status::OK();
}

// What a get's field options may hold: at most kMaxFieldNamesAsked names,
// each a field name; a prefix of at most kMaxFieldNameBytes bytes. For a
// selection decoded, and for one that arrives as a value (Check).
Status CheckSelection(const FieldSelection& s) {
  if (s.mode == FieldSelection::Mode::kNames) {
    if (s.names.size() > kMaxFieldNamesAsked) {
      return Status::LimitExceeded("fields: " + std::to_string(s.names.size()) +
                                   " names, the limit is " + std::to_string(kMaxFieldNamesAsked));
    }
    for (size_t i = 0; i < s.names.size(); ++i) {
      SEGSTORE_RETURN_IF_ERROR(CheckFieldName(s.names[i], "fields[" + std::to_string(i) + "]"));
    }
  }
  if (s.mode == FieldSelection::Mode::kPrefix && s.prefix.size() > kMaxFieldNameBytes) {
    return Bad("field_prefix", "a prefix of " + std::to_string(s.prefix.size()) +
                                   " bytes, the limit is " + std::to_string(kMaxFieldNameBytes));
  }
  return Status::OK();
}

// A get's "fields" (true: all; false: none; an array of names) or
// "field_prefix" (a str or bin), not both. "fields": false is the default
// (none), as nil is: it asks for nothing, so it may stand beside a prefix.
Status ReadFieldSelection(const Fields& f, FieldSelection* sel) {
  *sel = FieldSelection{};
  const object* fields = f.Find("fields");
  const object* prefix = f.Find("field_prefix");
  if (fields != nullptr &&
      (fields->type == mt::NIL || (fields->type == mt::BOOLEAN && !fields->via.boolean))) {
    fields = nullptr;
  }
  if (prefix != nullptr && prefix->type == mt::NIL) prefix = nullptr;
  if (fields != nullptr && prefix != nullptr) {
    return Bad(f.Name("fields"), "given with field_prefix; a get takes one or the other");
  }
  if (prefix != nullptr) {
    if (prefix->type == mt::STR) {
      sel->prefix.assign(prefix->via.str.ptr, prefix->via.str.size);
    } else if (prefix->type == mt::BIN) {
      sel->prefix.assign(prefix->via.bin.ptr, prefix->via.bin.size);
    } else {
      return WrongType(f.Name("field_prefix"), "a str or bin", *prefix);
    }
    sel->mode = FieldSelection::Mode::kPrefix;
    return CheckSelection(*sel);
  }
  if (fields == nullptr) return Status::OK();
  if (fields->type == mt::BOOLEAN) {  // true: false was read as absent
    sel->mode = FieldSelection::Mode::kAll;
    return Status::OK();
  }
  if (fields->type != mt::ARRAY) {
    return WrongType(f.Name("fields"), "true or an array of field names", *fields);
  }
  const uint32_t n = fields->via.array.size;
  if (n > kMaxFieldNamesAsked) {
    return Status::LimitExceeded(f.Name("fields") + ": " + std::to_string(n) +
                                 " names, the limit is " + std::to_string(kMaxFieldNamesAsked));
  }
  sel->mode = FieldSelection::Mode::kNames;
  sel->names.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    SEGSTORE_RETURN_IF_ERROR(ReadFieldName(fields->via.array.ptr[i],
                                           f.Name("fields") + "[" + std::to_string(i) + "]",
                                           &sel->names[i]));
  }
  return Status::OK();
}

// A signed 64-bit integer in any MessagePack integer form.
Status ReadInt64(const object& o, const std::string& name, int64_t* v) {
  if (o.type == mt::NEGATIVE_INTEGER) {
    *v = o.via.i64;
    return Status::OK();
  }
  if (o.type != mt::POSITIVE_INTEGER) return WrongType(name, "an integer", o);
  if (o.via.u64 > static_cast<uint64_t>(INT64_MAX)) {
    return Bad(name, std::to_string(o.via.u64) + " is past the largest 64-bit signed integer");
  }
  *v = static_cast<int64_t>(o.via.u64);
  return Status::OK();
}

// A profile field's value as its MessagePack form types it: an integer
// (int64), a float (32 or 64 bits: a double), a str, a bin, or a timestamp
// (a time: the 32-bit form, or the 64-bit form with 0 nanoseconds, within
// 32 bits of seconds). Each timestamp read counts in *timestamps.
Status ReadFieldValue(const object& o, const std::string& name, size_t* timestamps, FieldValue* v) {
  switch (o.type) {
    case mt::POSITIVE_INTEGER:
    case mt::NEGATIVE_INTEGER: {
      int64_t i = 0;
      SEGSTORE_RETURN_IF_ERROR(ReadInt64(o, name, &i));
      *v = FieldValue::Int(i);
      return Status::OK();
    }
    case mt::FLOAT32:
    case mt::FLOAT64:
      *v = FieldValue::Double(o.via.f64);
      return Status::OK();
    case mt::STR: {
      // Text: a str that is not UTF-8 would go back out as one, which
      // strict decoders refuse (and with it the whole answer).
      const std::string_view text(o.via.str.ptr, o.via.str.size);
      if (!IsUtf8(text)) return Bad(name, "a str that is not UTF-8; send bytes as a bin");
      *v = FieldValue::String(std::string(text));
      return Status::OK();
    }
    case mt::BIN:
      *v = FieldValue::Bytes(std::string(o.via.bin.ptr, o.via.bin.size));
      return Status::OK();
    case mt::EXT: {
      if (o.via.ext.type() != -1 || (o.via.ext.size != 4 && o.via.ext.size != 8)) {
        return Bad(name, "an extension that is not a timestamp of 32 or 64 bits");
      }
      const auto* b = reinterpret_cast<const uint8_t*>(o.via.ext.data());
      uint64_t x = 0;
      for (uint32_t i = 0; i < o.via.ext.size; ++i) x = (x << 8) | b[i];
      if (o.via.ext.size == 8) {  // 30 bits of nanoseconds, 34 of seconds
        if ((x >> 34) != 0)
          return Bad(name, "a timestamp with nanoseconds; times are whole seconds");
        if (x > UINT32_MAX) {
          return Bad(name, "time " + std::to_string(x) + " is past 2^32-1 (2106)");
        }
      }
      ++*timestamps;
      *v = FieldValue::Time(static_cast<UnixSeconds>(x));
      return Status::OK();
    }
    default:
      return WrongType(name, "a field value (an integer, a float, a str, a bin or a timestamp)", o);
  }
}

// An optional expiry (u32; absent or nil: 0) and TTL flag of a field.
Status ReadFieldExpiry(const object* expiry, const object* ttl, const std::string& expiry_name,
                       const std::string& ttl_name, FieldUpdate* u) {
  u->expiry = kNever;
  u->ttl = false;
  if (expiry != nullptr && expiry->type != mt::NIL) {
    uint64_t e = 0;
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(*expiry, expiry_name, UINT32_MAX, &e));
    u->expiry = static_cast<uint32_t>(e);
  }
  if (ttl != nullptr && ttl->type != mt::NIL) {
    if (ttl->type != mt::BOOLEAN) return WrongType(ttl_name, "a boolean", *ttl);
    u->ttl = ttl->via.boolean;
  }
  return Status::OK();
}

Status ReadOptions(const Fields& f, GetOptions* o) {
  std::string projection;
  SEGSTORE_RETURN_IF_ERROR(f.Text("projection", &projection));
  if (projection == "ids") {
    o->ids_only = true;
  } else if (projection.empty() || projection == "full") {
    o->ids_only = false;
  } else {
    return Bad(f.Name("projection"), "\"" + Printable(projection) + "\" is not one of ids, full");
  }
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("expiry_from", &o->expiry_from));
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("expiry_to", &o->expiry_to));
  SEGSTORE_RETURN_IF_ERROR(f.Flag("outside_expiry", &o->outside_expiry_window));
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("id_from", &o->id_from));
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("id_to", &o->id_to));
  SEGSTORE_RETURN_IF_ERROR(f.Flag("count_only", &o->count_only));
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("limit", &o->limit));
  SEGSTORE_RETURN_IF_ERROR(f.Flag("own", &o->own_only));
  return ReadFieldSelection(f, &o->fields);
}

Status ReadOptU32(const object& o, const std::string& name, std::optional<uint32_t>* v) {
  if (o.type == mt::NIL) {
    v->reset();
    return Status::OK();
  }
  uint64_t x = 0;
  SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(o, name, UINT32_MAX, &x));
  *v = static_cast<uint32_t>(x);
  return Status::OK();
}

Status ReadSegments(const Fields& f, const DecodeLimits& lim, std::vector<SegmentUpdate>* out) {
  const object* arr = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f.Array("segments", lim.max_list, &arr, /*required=*/true));
  out->clear();
  out->reserve(arr->via.array.size);
  for (uint32_t i = 0; i < arr->via.array.size; ++i) {
    const object& s = arr->via.array.ptr[i];
    auto name = [&] { return f.Name("segments") + "[" + std::to_string(i) + "]"; };
    if (s.type != mt::ARRAY) {
      return WrongType(name(), "an array [id, value, ttl, attr1, attr2]", s);
    }
    const uint32_t n = s.via.array.size;
    if (n < 2 || n > 5) {
      return Bad(name(), "has " + std::to_string(n) + " elements, expected 2 to 5");
    }
    SegmentUpdate u;
    const object* e = s.via.array.ptr;
    if (!FastUint(e[0], UINT64_MAX, &u.id)) {
      SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(e[0], name() + ".id", UINT64_MAX, &u.id));
    }
    uint64_t value = 0;
    if (!FastUint(e[1], UINT32_MAX, &value)) {
      SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(e[1], name() + ".value", UINT32_MAX, &value));
    }
    u.value = static_cast<uint32_t>(value);
    if (n >= 3 && e[2].type != mt::NIL) {
      if (e[2].type != mt::BOOLEAN) return WrongType(name() + ".ttl", "a boolean", e[2]);
      u.ttl = e[2].via.boolean;
    }
    if (n >= 4) SEGSTORE_RETURN_IF_ERROR(ReadOptU32(e[3], name() + ".attr1", &u.attr1));
    if (n >= 5) SEGSTORE_RETURN_IF_ERROR(ReadOptU32(e[4], name() + ".attr2", &u.attr2));
    out->push_back(u);
  }
  return Status::OK();
}

Status ReadUpsertItem(const Fields& f, const DecodeLimits& lim, UpsertRequest* m) {
  SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
  SEGSTORE_RETURN_IF_ERROR(ReadMode(f, &m->mode));
  SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
  SEGSTORE_RETURN_IF_ERROR(f.Flag("replace_attrs", &m->replace_attrs));
  return ReadSegments(f, lim, &m->segments);
}

Status ReadU32Column(const Fields& f, std::string_view key, size_t rows,
                     std::vector<UnixSeconds>* out) {
  const object* arr = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f.Array(key, UINT32_MAX, &arr, false));
  out->clear();
  if (arr == nullptr) return Status::OK();
  if (arr->via.array.size != rows) return Bad(f.Name(key), "length differs from ids");
  out->reserve(rows);
  for (uint32_t i = 0; i < rows; ++i) {
    uint64_t v = 0;
    if (!FastUint(arr->via.array.ptr[i], UINT32_MAX, &v)) {
      SEGSTORE_RETURN_IF_ERROR(
          Fields::ReadUint(arr->via.array.ptr[i], f.Name(key), UINT32_MAX, &v));
    }
    out->push_back(static_cast<UnixSeconds>(v));
  }
  return Status::OK();
}

Status ReadAttrColumn(const Fields& f, std::string_view key, size_t rows,
                      std::vector<std::optional<uint32_t>>* out) {
  const object* arr = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f.Array(key, UINT32_MAX, &arr, false));
  out->clear();
  if (arr == nullptr) return Status::OK();
  if (arr->via.array.size != rows) return Bad(f.Name(key), "length differs from ids");
  out->resize(rows);
  for (uint32_t i = 0; i < rows; ++i) {
    const object& o = arr->via.array.ptr[i];
    if (o.type == mt::NIL) continue;
    uint64_t v = 0;
    if (FastUint(o, UINT32_MAX, &v)) {
      (*out)[i] = static_cast<uint32_t>(v);
      continue;
    }
    SEGSTORE_RETURN_IF_ERROR(ReadOptU32(o, f.Name(key), &(*out)[i]));
  }
  return Status::OK();
}

// A map of fields {name: [value, expires_at]...} (a get answer's, a scanned
// profile's), names (str or bin) in strictly increasing bytewise order.
Status ReadFieldMap(const object* map, const std::string& name, size_t* timestamps,
                    std::vector<Field>* fields);

// A get answer's "fields": {name: [value, expires_at]...}.
Status ReadAnswerFields(const Fields& f, size_t* timestamps, GetResult* m) {
  m->fields.clear();
  m->fields_asked = false;
  const object* map = f.Find("fields");
  if (map == nullptr || map->type == mt::NIL) return Status::OK();
  m->fields_asked = true;
  return ReadFieldMap(map, f.Name("fields"), timestamps, &m->fields);
}

Status ReadFieldMap(const object* map, const std::string& name, size_t* timestamps,
                    std::vector<Field>* fields) {
  if (map->type != mt::MAP) return WrongType(name, "a map of fields", *map);
  fields->reserve(map->via.map.size);
  for (uint32_t i = 0; i < map->via.map.size; ++i) {
    const msgpack::object_kv& kv = map->via.map.ptr[i];
    const std::string at = name + "[" + std::to_string(i) + "]";
    Field field;
    SEGSTORE_RETURN_IF_ERROR(ReadFieldName(kv.key, at + ".name", &field.name));
    if (!fields->empty() && !(fields->back().name < field.name)) {
      return Bad(at + ".name", "\"" + Printable(field.name) +
                                   "\" is out of order or twice (names come in bytewise order)");
    }
    if (kv.val.type != mt::ARRAY) return WrongType(at, "an array [value, expires_at]", kv.val);
    if (kv.val.via.array.size != 2) {
      return Bad(at, "has " + std::to_string(kv.val.via.array.size) +
                         " elements, expected 2 [value, expires_at]");
    }
    SEGSTORE_RETURN_IF_ERROR(
        ReadFieldValue(kv.val.via.array.ptr[0], at + ".value", timestamps, &field.value));
    uint64_t e = 0;
    SEGSTORE_RETURN_IF_ERROR(
        Fields::ReadUint(kv.val.via.array.ptr[1], at + ".expires_at", UINT32_MAX, &e));
    field.expires_at = static_cast<UnixSeconds>(e);
    fields->push_back(std::move(field));
  }
  return Status::OK();
}

Status ReadGetResult(const Fields& f, const DecodeLimits& lim, size_t* timestamps, GetResult* m) {
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("count", &m->count, true));
  const object* ids = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f.Array("ids", UINT32_MAX, &ids, true));
  m->ids.clear();
  m->ids.reserve(ids->via.array.size);
  for (uint32_t i = 0; i < ids->via.array.size; ++i) {
    uint64_t v = 0;
    if (!FastUint(ids->via.array.ptr[i], UINT64_MAX, &v)) {
      SEGSTORE_RETURN_IF_ERROR(
          Fields::ReadUint(ids->via.array.ptr[i], f.Name("ids"), UINT64_MAX, &v));
    }
    m->ids.push_back(v);
  }
  const size_t rows = m->ids.size();
  SEGSTORE_RETURN_IF_ERROR(ReadU32Column(f, "expires", rows, &m->expires));
  SEGSTORE_RETURN_IF_ERROR(ReadAttrColumn(f, "attr1", rows, &m->attr1));
  SEGSTORE_RETURN_IF_ERROR(ReadAttrColumn(f, "attr2", rows, &m->attr2));
  // A linked user's merged view (absent for a user in no group). "profiles"
  // counts only beside a master: the two are written together or not at all.
  if (const object* master = f.Find("master"); master != nullptr && master->type != mt::NIL) {
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(*master, f.Name("master"), lim, &m->master));
  }
  uint32_t profiles = 0;
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("profiles", &profiles));
  m->profiles = m->master.empty() ? 0 : profiles;
  return ReadAnswerFields(f, timestamps, m);
}

Status ReadUpsertResult(const Fields& f, UpsertResult* m) {
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("inserted", &m->inserted, true));
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("updated", &m->updated, true));
  SEGSTORE_RETURN_IF_ERROR(f.UintAs("trimmed", &m->trimmed, true));
  SEGSTORE_RETURN_IF_ERROR(f.Flag("duplicate", &m->duplicate));
  return f.UintAs("count", &m->count, true);
}

// An element of a batch response: {"status": 0, ...fields} or {"status": n, "message": s}.
template <typename T, typename ReadOk>
Status ReadResults(const Fields& f, ReadOk read_ok, std::vector<Result<T>>* out) {
  const object* arr = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f.Array("results", UINT32_MAX, &arr, true));
  out->clear();
  out->reserve(arr->via.array.size);
  for (uint32_t i = 0; i < arr->via.array.size; ++i) {
    std::optional<Fields> e;
    const std::string name = "results[" + std::to_string(i) + "]";
    SEGSTORE_RETURN_IF_ERROR(Fields::Of(arr->via.array.ptr[i], name, name + ".", &e));
    uint8_t code = 0;
    SEGSTORE_RETURN_IF_ERROR(e->UintAs("status", &code, true));
    if (code != 0) {
      std::string message;
      SEGSTORE_RETURN_IF_ERROR(e->Text("message", &message));
      out->push_back(Status::FromCode(code, message));
      continue;
    }
    T v;
    SEGSTORE_RETURN_IF_ERROR(read_ok(*e, &v));
    out->push_back(std::move(v));
  }
  return Status::OK();
}

// "cursor" of copy_partition, both ways: required, 0 to kCopyFinished.
Status ReadCopyCursor(const Fields& f, uint64_t* cursor) {
  SEGSTORE_RETURN_IF_ERROR(f.Uint("cursor", UINT64_MAX, cursor, true));
  if (*cursor > kCopyFinished) {
    return Bad("cursor", std::to_string(*cursor) + " is past the end of a partition (2^32)");
  }
  return Status::OK();
}

// A bin of a copied record (its key or body).
Status ReadBin(const object& o, const std::string& name, std::string* v) {
  if (o.type != mt::BIN) return WrongType(name, "binary", o);
  v->assign(o.via.bin.ptr, o.via.bin.size);
  return Status::OK();
}

// One element of copy_partition's "records": [key, body, sweep_at,
// void_at], and the user the record names when it names one (a fifth).
Status ReadCopiedRecord(const object& o, const std::string& name, const DecodeLimits& lim,
                        CopiedRecord* r) {
  if (o.type != mt::ARRAY) return WrongType(name, "an array [key, body, sweep_at, void_at]", o);
  if (o.via.array.size != 4 && o.via.array.size != 5) {
    return Bad(name, "has " + std::to_string(o.via.array.size) +
                         " elements, expected 4 [key, body, sweep_at, void_at] or 5 (with "
                         "the reference)");
  }
  const object* e = o.via.array.ptr;
  if (e[0].type != mt::BIN) return WrongType(name + ".key", "binary", e[0]);
  SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(e[0], name + ".key", lim, &r->key));
  if (r->key.size() >= 2 && r->key[0] == '\xff' && r->key[1] == '\0') {
    return Bad(name + ".key", "reserved (it begins FF 00): a node's own records are never copied");
  }
  SEGSTORE_RETURN_IF_ERROR(ReadBin(e[1], name + ".body", &r->body));
  uint64_t t = 0;
  SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(e[2], name + ".sweep_at", UINT32_MAX, &t));
  r->sweep_at = static_cast<UnixSeconds>(t);
  SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(e[3], name + ".void_at", UINT32_MAX, &t));
  r->void_at = static_cast<UnixSeconds>(t);
  if (o.via.array.size == 5) {
    if (e[4].type != mt::BIN) return WrongType(name + ".reference", "binary", e[4]);
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(e[4], name + ".reference", lim, &r->reference));
  }
  return Status::OK();
}

// Parses `body`, requires a map, and hands its fields to `read`.
template <typename Read>
Status DecodeMap(std::string_view body, Read read) {
  msgpack::object_handle oh;
  const object* root = nullptr;
  SEGSTORE_RETURN_IF_ERROR(Parse(body, &oh, &root));
  std::optional<Fields> f;
  SEGSTORE_RETURN_IF_ERROR(Fields::Of(*root, "body", "", &f));
  return read(*f);
}

// As DecodeMap, for a body where profile fields' values may stand: `read`
// also gets a count of the timestamps it took as values, which must be every
// timestamp of the body (anywhere else one is refused, as any extension).
template <typename Read>
Status DecodeMapWithValues(std::string_view body, Read read) {
  msgpack::object_handle oh;
  const object* root = nullptr;
  size_t present = 0;
  SEGSTORE_RETURN_IF_ERROR(Parse(body, &oh, &root, &present));
  std::optional<Fields> f;
  SEGSTORE_RETURN_IF_ERROR(Fields::Of(*root, "body", "", &f));
  size_t taken = 0;
  SEGSTORE_RETURN_IF_ERROR(read(*f, &taken));
  if (taken != present) {
    return Status::InvalidArgument(
        "body: a MessagePack timestamp where no profile field's value stands (a timestamp is "
        "accepted only as a field's value)");
  }
  return Status::OK();
}

template <typename Write>
void EncodeWith(std::string* out, Write write) {
  Sink sink{out};
  Packer pk(sink);
  write(pk);
}

}  // namespace

// ---- requests ----

void Encode(const HelloRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(m.auth.empty() ? 1 : 2);
    Str(pk, "client");
    Str(pk, m.client);
    if (!m.auth.empty()) {
      Str(pk, "auth");
      Str(pk, m.auth);
    }
  });
}

void Encode(const GetRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1 + OptionFields(nullptr, m.options));
    Str(pk, "user");
    Str(pk, m.user);
    OptionFields(&pk, m.options);
  });
}

void Encode(const BatchGetRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1 + OptionFields(nullptr, m.options));
    Str(pk, "users");
    pk.pack_array(static_cast<uint32_t>(m.users.size()));
    for (const std::string& u : m.users) Str(pk, u);
    OptionFields(&pk, m.options);
  });
}

void Encode(const CountRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(3);
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "id_from");
    pk.pack_uint64(m.id_from);
    Str(pk, "id_to");
    pk.pack_uint64(m.id_to);
  });
}

// An upsert request's map, or a batch_upsert item's: "replace_attrs" only
// when true.
void UpsertItemMap(Packer& pk, const UpsertRequest& m) {
  pk.pack_map(3 + (m.replace_attrs ? 1 : 0) + WriteIdFields(m.write_id));
  Str(pk, "user");
  Str(pk, m.user);
  Str(pk, "mode");
  Str(pk, ModeName(m.mode));
  Str(pk, "segments");
  SegmentList(pk, m.segments);
  if (m.replace_attrs) {
    Str(pk, "replace_attrs");
    pk.pack_true();
  }
  WriteIdField(pk, m.write_id);
}

void Encode(const UpsertRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) { UpsertItemMap(pk, m); });
}

void Encode(const BatchUpsertRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "items");
    pk.pack_array(static_cast<uint32_t>(m.items.size()));
    for (const UpsertRequest& item : m.items) UpsertItemMap(pk, item);
  });
}

void Encode(const RemoveRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "ids");
    pk.pack_array(static_cast<uint32_t>(m.ids.size()));
    for (uint64_t id : m.ids) pk.pack_uint64(id);
    WriteIdField(pk, m.write_id);
  });
}

void Encode(const TrimRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map((m.before != 0 ? 2 : 1) + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    if (m.before != 0) {
      Str(pk, "before");
      pk.pack_uint32(m.before);
    }
    WriteIdField(pk, m.write_id);
  });
}

void Encode(const DeleteRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1 + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    WriteIdField(pk, m.write_id);
  });
}

void Encode(const ExpireRequest& m, std::string* out) {
  const std::string_view condition = ConditionName(m.condition);
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(3 + (m.ttl ? 1 : 0) + (condition.empty() ? 0 : 1) + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "ids");
    pk.pack_array(static_cast<uint32_t>(m.ids.size()));
    for (uint64_t id : m.ids) pk.pack_uint64(id);
    Str(pk, "value");
    pk.pack_uint32(m.value);
    if (m.ttl) {
      Str(pk, "ttl");
      pk.pack_true();
    }
    if (!condition.empty()) {
      Str(pk, "condition");
      Str(pk, condition);
    }
    WriteIdField(pk, m.write_id);
  });
}

void Encode(const CopyPartitionRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + (m.min_next != 0 ? 1 : 0) + (m.max_bytes != 0 ? 1 : 0));
    Str(pk, "partition");
    pk.pack_uint32(m.partition);
    Str(pk, "cursor");
    pk.pack_uint64(m.cursor);
    if (m.min_next != 0) {
      Str(pk, "min_next");
      pk.pack_uint64(m.min_next);
    }
    if (m.max_bytes != 0) {
      Str(pk, "max_bytes");
      pk.pack_uint32(m.max_bytes);
    }
  });
}

void Encode(const LinkRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + (m.ttl != 0 ? 1 : 0) + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "master");
    Str(pk, m.master);
    if (m.ttl != 0) {
      Str(pk, "ttl");
      pk.pack_uint32(m.ttl);
    }
    WriteIdField(pk, m.write_id);
  });
}

void Encode(const UnlinkRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1 + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    WriteIdField(pk, m.write_id);
  });
}

void Encode(const MasterOfRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "user");
    Str(pk, m.user);
  });
}

void Encode(const LinksRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1 + (m.cursor.empty() ? 0 : 1) + (m.limit != 0 ? 1 : 0));
    Str(pk, "user");
    Str(pk, m.user);
    if (!m.cursor.empty()) {
      Str(pk, "cursor");
      Str(pk, m.cursor);
    }
    if (m.limit != 0) {
      Str(pk, "limit");
      pk.pack_uint32(m.limit);
    }
  });
}

void Encode(const ConnectedRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2);
    Str(pk, "a");
    Str(pk, m.a);
    Str(pk, "b");
    Str(pk, m.b);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, EmptyRequest* /*m*/) {
  return DecodeMap(body, [](const Fields&) { return Status::OK(); });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, HelloRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.Text("client", &m->client));
    return f.Blob("auth", &m->auth);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, GetRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    return ReadOptions(f, &m->options);
  });
}

// Marks entry `i` of a batch of `n` as failed alone.
void Reject(std::vector<Status>* rejected, size_t n, size_t i, Status s) {
  if (rejected->empty()) rejected->resize(n);
  (*rejected)[i] = std::move(s);
}

Status Decode(std::string_view body, const DecodeLimits& lim, BatchGetRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("users", lim.max_batch, &arr, true));
    SEGSTORE_RETURN_IF_ERROR(ReadOptions(f, &m->options));
    const uint32_t n = arr->via.array.size;
    m->users.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      Status s = Fields::ReadUser(arr->via.array.ptr[i], "users[" + std::to_string(i) + "]", lim,
                                  &m->users[i]);
      if (!s.ok()) Reject(&m->rejected, n, i, std::move(s));
    }
    return Status::OK();
  });
}

Status Check(const DecodeLimits& lim, const GetRequest& m) {
  SEGSTORE_RETURN_IF_ERROR(Fields::CheckUser(m.user, "user", lim));
  return CheckSelection(m.options.fields);
}

Status Check(const DecodeLimits& lim, BatchGetRequest* m) {
  SEGSTORE_RETURN_IF_ERROR(CheckSelection(m->options.fields));
  const size_t n = m->users.size();
  if (n > lim.max_batch) {
    return Status::LimitExceeded("users: " + std::to_string(n) + " elements, the limit is " +
                                 std::to_string(lim.max_batch));
  }
  m->rejected.clear();
  for (size_t i = 0; i < n; ++i) {
    Status s = Fields::CheckUser(m->users[i], "users[" + std::to_string(i) + "]", lim);
    if (!s.ok()) {
      Reject(&m->rejected, n, i, std::move(s));
      m->users[i].clear();  // as Decode leaves a rejected entry
    }
  }
  return Status::OK();
}

Status Decode(std::string_view body, const DecodeLimits& lim, CountRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("id_from", &m->id_from));
    return f.UintAs("id_to", &m->id_to);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, UpsertRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) { return ReadUpsertItem(f, lim, m); });
}

Status Decode(std::string_view body, const DecodeLimits& lim, BatchUpsertRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    UpsertMode mode = UpsertMode::kSet;
    SEGSTORE_RETURN_IF_ERROR(ReadMode(f, &mode));
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("items", lim.max_batch, &arr, true));
    const uint32_t n = arr->via.array.size;
    m->items.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      const std::string name = "items[" + std::to_string(i) + "]";
      std::optional<Fields> item;
      m->items[i].mode = mode;
      Status s = Fields::Of(arr->via.array.ptr[i], name, name + ".", &item);
      if (s.ok()) s = ReadUpsertItem(*item, lim, &m->items[i]);
      if (!s.ok()) {
        m->items[i] = UpsertRequest{};
        Reject(&m->rejected, n, i, std::move(s));
      }
    }
    return Status::OK();
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, RemoveRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
    return ReadIds(f, lim, &m->ids);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, ExpireRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
    SEGSTORE_RETURN_IF_ERROR(ReadIds(f, lim, &m->ids));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("value", &m->value, /*required=*/true));
    SEGSTORE_RETURN_IF_ERROR(f.Flag("ttl", &m->ttl));
    return ReadCondition(f, &m->condition);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, TrimRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
    return f.UintAs("before", &m->before);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, DeleteRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    return f.Id(&m->write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, CopyPartitionRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    uint64_t partition = 0;
    SEGSTORE_RETURN_IF_ERROR(f.Uint("partition", UINT64_MAX, &partition, true));
    if (partition >= kPartitions) {
      return Bad("partition", std::to_string(partition) + " is not a partition (0 to 4095)");
    }
    m->partition = static_cast<uint32_t>(partition);
    SEGSTORE_RETURN_IF_ERROR(ReadCopyCursor(f, &m->cursor));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("min_next", &m->min_next));
    return f.UintAs("max_bytes", &m->max_bytes);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, LinkRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->master, "master"));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("ttl", &m->ttl));
    return f.Id(&m->write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, UnlinkRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    return f.Id(&m->write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, MasterOfRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) { return f.User(lim, &m->user); });
}

Status Decode(std::string_view body, const DecodeLimits& lim, LinksRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.OptUser("cursor", lim, &m->cursor));
    return f.UintAs("limit", &m->limit);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, ConnectedRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->a, "a"));
    return f.User(lim, &m->b, "b");
  });
}

// ---- responses ----

void Encode(const HelloResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(9);
    Str(pk, "protocol");
    pk.pack_uint32(m.protocol);
    Str(pk, "server");
    Str(pk, m.server);
    Str(pk, "max_frame_bytes");
    pk.pack_uint32(m.max_frame_bytes);
    Str(pk, "max_batch");
    pk.pack_uint32(m.max_batch);
    Str(pk, "max_key_bytes");
    pk.pack_uint32(m.max_key_bytes);
    Str(pk, "max_segments");
    pk.pack_uint32(m.max_segments);
    Str(pk, "max_in_flight");
    pk.pack_uint32(m.max_in_flight);
    Str(pk, "max_fields");
    pk.pack_uint32(m.max_fields);
    Str(pk, "max_field_bytes");
    pk.pack_uint32(m.max_field_bytes);
  });
}

void Encode(const GetResult& m, std::string* out) {
  out->reserve(out->size() + GetFieldsBound(m));
  EncodeWith(out, [&](Packer& pk) { GetFields(pk, out, m, false); });
}

void Encode(const BatchGetResponse& m, std::string* out) {
  size_t bound = 32;
  for (const Result<GetResult>& r : m) {
    bound += r.ok() ? GetFieldsBound(*r) : 32 + r.status().message().size();
  }
  out->reserve(out->size() + bound);
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "results");
    pk.pack_array(static_cast<uint32_t>(m.size()));
    for (const Result<GetResult>& r : m) {
      if (r.ok()) {
        GetFields(pk, out, *r, true);
      } else {
        ErrorFields(pk, r.status());
      }
    }
  });
}

void Encode(const UpsertResult& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) { UpsertFields(pk, m, false); });
}

void Encode(const BatchUpsertResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "results");
    pk.pack_array(static_cast<uint32_t>(m.size()));
    for (const Result<UpsertResult>& r : m) {
      if (r.ok()) {
        UpsertFields(pk, *r, true);
      } else {
        ErrorFields(pk, r.status());
      }
    }
  });
}

void Encode(const RemoveResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(m.duplicate ? 2 : 1);
    Str(pk, "removed");
    pk.pack_uint32(m.removed);
    DuplicateField(pk, m.duplicate);
  });
}

void Encode(const TrimResult& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(m.duplicate ? 3 : 2);
    Str(pk, "trimmed");
    pk.pack_uint32(m.trimmed);
    Str(pk, "remaining");
    pk.pack_uint32(m.remaining);
    DuplicateField(pk, m.duplicate);
  });
}

void Encode(const CountResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "count");
    pk.pack_uint32(m.count);
  });
}

void Encode(const DeleteResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(m.duplicate ? 2 : 1);
    Str(pk, "deleted");
    Bool(pk, m.deleted);
    DuplicateField(pk, m.duplicate);
  });
}

void Encode(const ExpireResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(m.duplicate ? 3 : 2);
    Str(pk, "results");
    pk.pack_array(static_cast<uint32_t>(m.results.size()));
    for (ExpireOutcome o : m.results) pk.pack_uint8(static_cast<uint8_t>(o));
    Str(pk, "count");
    pk.pack_uint32(m.count);
    DuplicateField(pk, m.duplicate);
  });
}

void Encode(const StatsResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(static_cast<uint32_t>(m.entries.size()));
    for (const StatEntry& e : m.entries) {
      Str(pk, e.name);
      if (const auto* u = std::get_if<uint64_t>(&e.value)) {
        pk.pack_uint64(*u);
      } else if (const auto* d = std::get_if<double>(&e.value)) {
        Float64(out, *d);  // a gauge keeps its type
      } else {
        Str(pk, std::get<std::string>(e.value));
      }
    }
  });
}

void Encode(const LinkResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(3);
    Str(pk, "master");
    Bin(pk, m.master);
    Str(pk, "members");
    pk.pack_uint32(m.members);
    Str(pk, "moved");
    pk.pack_uint32(m.moved);
  });
}

void Encode(const UnlinkResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "unlinked");
    Bool(pk, m.unlinked);
  });
}

void Encode(const MasterOfResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "master");
    Bin(pk, m.master);
  });
}

void Encode(const LinksResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(m.next.empty() ? 2 : 3);
    Str(pk, "master");
    Bin(pk, m.master);
    Str(pk, "links");
    pk.pack_array(static_cast<uint32_t>(m.links.size()));
    for (const LinkedUser& l : m.links) {
      pk.pack_array(2);
      Bin(pk, l.user);
      pk.pack_uint32(l.expires_at);
    }
    if (!m.next.empty()) {
      Str(pk, "next");
      Bin(pk, m.next);
    }
  });
}

void Encode(const ConnectedResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "connected");
    Bool(pk, m.connected);
  });
}

void Encode(const ClusterMap& m, std::string* out) {
  out->reserve(out->size() + 64 + m.nodes.size() * 64 + m.replicas.size() * 2 + kPartitions);
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(6 + (m.log ? 1 : 0) + (m.passive ? 1 : 0) + (m.incoming.empty() ? 0 : 1));
    if (m.log) {
      Str(pk, "log");
      pk.pack_true();
    }
    if (m.passive) {
      Str(pk, "passive");
      pk.pack_true();
    }
    Str(pk, "cluster");
    if (m.cluster) {
      pk.pack_true();
    } else {
      pk.pack_false();
    }
    Str(pk, "revision");
    pk.pack_uint64(m.revision);
    Str(pk, "self");
    Str(pk, m.self);
    Str(pk, "replication");
    pk.pack_uint32(m.replication);
    Str(pk, "nodes");
    pk.pack_array(static_cast<uint32_t>(m.nodes.size()));
    for (const ClusterNode& n : m.nodes) {
      pk.pack_map(n.resp.empty() ? 3 : 4);
      Str(pk, "id");
      Str(pk, n.id);
      Str(pk, "address");
      Str(pk, n.address);
      Str(pk, "rack");
      Str(pk, n.rack);
      if (!n.resp.empty()) {
        Str(pk, "resp");
        Str(pk, n.resp);
      }
    }
    Str(pk, "partitions");
    const bool placed =
        m.replication > 0 && m.replicas.size() == size_t{kPartitions} * m.replication;
    pk.pack_array(placed ? kPartitions : 0);
    for (uint32_t p = 0; placed && p < kPartitions; ++p) {
      pk.pack_array(m.replication);
      for (uint16_t i : m.ReplicasOf(p)) pk.pack_uint16(i);
    }
    if (!m.incoming.empty()) {
      Str(pk, "incoming");
      pk.pack_array(static_cast<uint32_t>(m.incoming.size()));
      for (const IncomingReplica& in : m.incoming) {
        pk.pack_array(2);
        pk.pack_uint16(in.partition);
        pk.pack_uint16(in.node);
      }
    }
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, ClusterMap* m) {
  *m = {};
  Status read = DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.Flag("cluster", &m->cluster));
    SEGSTORE_RETURN_IF_ERROR(f.Flag("log", &m->log));
    SEGSTORE_RETURN_IF_ERROR(f.Flag("passive", &m->passive));
    SEGSTORE_RETURN_IF_ERROR(f.Uint("revision", UINT64_MAX, &m->revision));
    SEGSTORE_RETURN_IF_ERROR(f.Text("self", &m->self));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("replication", &m->replication));
    if (const object* nodes = f.Find("nodes"); nodes != nullptr && nodes->type != mt::NIL) {
      if (nodes->type != mt::ARRAY) return WrongType("nodes", "an array", *nodes);
      for (uint32_t i = 0; i < nodes->via.array.size; ++i) {
        const std::string name = "nodes[" + std::to_string(i) + "]";
        std::optional<Fields> nf;
        SEGSTORE_RETURN_IF_ERROR(Fields::Of(nodes->via.array.ptr[i], name, name + ".", &nf));
        ClusterNode n;
        SEGSTORE_RETURN_IF_ERROR(nf->Text("id", &n.id, true));
        SEGSTORE_RETURN_IF_ERROR(nf->Text("address", &n.address, true));
        SEGSTORE_RETURN_IF_ERROR(nf->Text("rack", &n.rack));
        SEGSTORE_RETURN_IF_ERROR(nf->Text("resp", &n.resp));
        m->nodes.push_back(std::move(n));
      }
    }
    if (const object* parts = f.Find("partitions"); parts != nullptr && parts->type != mt::NIL) {
      if (parts->type != mt::ARRAY) return WrongType("partitions", "an array", *parts);
      if (parts->via.array.size != 0 && parts->via.array.size != kPartitions) {
        return Bad("partitions",
                   "expected 0 or 4096 lists, got " + std::to_string(parts->via.array.size));
      }
      if (m->replication > m->nodes.size() || m->replication > 65535) {
        return Bad("replication", std::to_string(m->replication) + " is more than the " +
                                      std::to_string(m->nodes.size()) + " nodes");
      }
      m->replicas.reserve(size_t{parts->via.array.size} * m->replication);
      for (uint32_t p = 0; p < parts->via.array.size; ++p) {
        const object& r = parts->via.array.ptr[p];
        const std::string name = "partitions[" + std::to_string(p) + "]";
        if (r.type != mt::ARRAY) return WrongType(name, "an array", r);
        if (r.via.array.size != m->replication) {
          return Bad(name, "expected " + std::to_string(m->replication) + " replicas, got " +
                               std::to_string(r.via.array.size));
        }
        for (uint32_t k = 0; k < r.via.array.size; ++k) {
          uint64_t i = 0;
          SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(r.via.array.ptr[k], name, 65535, &i));
          m->replicas.push_back(static_cast<uint16_t>(i));
        }
      }
    }
    if (const object* in = f.Find("incoming"); in != nullptr && in->type != mt::NIL) {
      if (in->type != mt::ARRAY) return WrongType("incoming", "an array", *in);
      m->incoming.reserve(in->via.array.size);
      for (uint32_t i = 0; i < in->via.array.size; ++i) {
        const object& e = in->via.array.ptr[i];
        const std::string name = "incoming[" + std::to_string(i) + "]";
        if (e.type != mt::ARRAY) return WrongType(name, "an array [partition, node]", e);
        if (e.via.array.size != 2) {
          return Bad(name, "has " + std::to_string(e.via.array.size) +
                               " elements, expected 2 [partition, node]");
        }
        uint64_t partition = 0, node = 0;
        SEGSTORE_RETURN_IF_ERROR(
            Fields::ReadUint(e.via.array.ptr[0], name + ".partition", kPartitions - 1, &partition));
        SEGSTORE_RETURN_IF_ERROR(
            Fields::ReadUint(e.via.array.ptr[1], name + ".node", UINT64_MAX, &node));
        if (node >= m->nodes.size()) {
          return Bad(name + ".node", std::to_string(node) + " is past the " +
                                         std::to_string(m->nodes.size()) + " nodes");
        }
        m->incoming.push_back(
            IncomingReplica{static_cast<uint16_t>(partition), static_cast<uint16_t>(node)});
      }
    }
    return Status::OK();
  });
  if (!read.ok()) return read;
  Status checked = m->Check();
  if (checked.ok() || m->incoming.empty()) return checked;
  // Name the field when the moves alone are wrong (unsorted, repeated, a node
  // already holding its partition, or moves in a map that has no placement).
  std::vector<IncomingReplica> incoming = std::move(m->incoming);
  m->incoming.clear();
  const bool rest_ok = m->Check().ok();
  m->incoming = std::move(incoming);
  return rest_ok ? Bad("incoming", checked.message()) : checked;
}

size_t CopiedRecordBytes(const CopiedRecord& r) {
  auto bin = [](size_t n) { return (n <= 0xff ? 2 : n <= 0xffff ? 3 : 5) + n; };
  auto uint = [](uint32_t v) { return v < 0x80 ? 1 : v <= 0xff ? 2 : v <= 0xffff ? 3 : 5; };
  return 1 + bin(r.key.size()) + bin(r.body.size()) + uint(r.sweep_at) + uint(r.void_at) +
         (r.reference.empty() ? 0 : bin(r.reference.size()));
}

void Encode(const CopyPartitionResponse& m, std::string* out) {
  size_t bound = kCopyPageOverhead;
  for (const CopiedRecord& r : m.records) bound += CopiedRecordBytes(r);
  out->reserve(out->size() + bound);
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(3);
    Str(pk, "next");
    pk.pack_uint64(m.next);
    Str(pk, "cursor");
    pk.pack_uint64(m.cursor);
    Str(pk, "records");
    pk.pack_array(static_cast<uint32_t>(m.records.size()));
    for (const CopiedRecord& r : m.records) {
      pk.pack_array(r.reference.empty() ? 4 : 5);
      Bin(pk, r.key);
      Bin(pk, r.body);
      pk.pack_uint32(r.sweep_at);
      pk.pack_uint32(r.void_at);
      if (!r.reference.empty()) Bin(pk, r.reference);
    }
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, CopyPartitionResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.Uint("next", UINT64_MAX, &m->next, true));
    SEGSTORE_RETURN_IF_ERROR(ReadCopyCursor(f, &m->cursor));
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("records", UINT32_MAX, &arr, true));
    if (arr->via.array.size == 0 && m->cursor != kCopyFinished) {
      return Bad("records", "empty, but the partition is not finished (cursor " +
                                std::to_string(m->cursor) + ")");
    }
    // Grown as records are read, not sized from the count: a record's struct
    // is larger than the fewest bytes an (invalid) element takes.
    for (uint32_t i = 0; i < arr->via.array.size; ++i) {
      CopiedRecord r;
      SEGSTORE_RETURN_IF_ERROR(
          ReadCopiedRecord(arr->via.array.ptr[i], "records[" + std::to_string(i) + "]", lim, &r));
      m->records.push_back(std::move(r));
    }
    return Status::OK();
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, HelloResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("protocol", &m->protocol, true));
    SEGSTORE_RETURN_IF_ERROR(f.Text("server", &m->server));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("max_frame_bytes", &m->max_frame_bytes, true));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("max_batch", &m->max_batch, true));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("max_key_bytes", &m->max_key_bytes, true));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("max_segments", &m->max_segments, true));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("max_in_flight", &m->max_in_flight, true));
    // Optional: servers before profile fields do not send them.
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("max_fields", &m->max_fields));
    return f.UintAs("max_field_bytes", &m->max_field_bytes);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, GetResult* m) {
  if (internal::ReadGetAnswer(body, lim, m)) return Status::OK();
  return internal::DecodeGeneral(body, lim, m);
}

Status Decode(std::string_view body, const DecodeLimits& lim, BatchGetResponse* m) {
  if (internal::ReadGetAnswer(body, lim, m)) return Status::OK();
  return internal::DecodeGeneral(body, lim, m);
}

Status internal::DecodeGeneral(std::string_view body, const DecodeLimits& lim, GetResult* m) {
  *m = {};
  return DecodeMapWithValues(body, [&](const Fields& f, size_t* timestamps) {
    return ReadGetResult(f, lim, timestamps, m);
  });
}

Status internal::DecodeGeneral(std::string_view body, const DecodeLimits& lim,
                               BatchGetResponse* m) {
  *m = {};
  return DecodeMapWithValues(body, [&](const Fields& f, size_t* timestamps) {
    return ReadResults<GetResult>(
        f,
        [&lim, timestamps](const Fields& e, GetResult* r) {
          return ReadGetResult(e, lim, timestamps, r);
        },
        m);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, UpsertResult* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) { return ReadUpsertResult(f, m); });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, BatchUpsertResponse* m) {
  *m = {};
  return DecodeMap(
      body, [&](const Fields& f) { return ReadResults<UpsertResult>(f, ReadUpsertResult, m); });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, RemoveResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.Flag("duplicate", &m->duplicate));
    return f.UintAs("removed", &m->removed, true);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, TrimResult* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("trimmed", &m->trimmed, true));
    SEGSTORE_RETURN_IF_ERROR(f.Flag("duplicate", &m->duplicate));
    return f.UintAs("remaining", &m->remaining, true);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, CountResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) { return f.UintAs("count", &m->count, true); });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, DeleteResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    if (f.Find("deleted") == nullptr) return Bad("deleted", "missing");
    SEGSTORE_RETURN_IF_ERROR(f.Flag("duplicate", &m->duplicate));
    return f.Flag("deleted", &m->deleted);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, ExpireResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("results", UINT32_MAX, &arr, true));
    m->results.reserve(arr->via.array.size);
    for (uint32_t i = 0; i < arr->via.array.size; ++i) {
      uint64_t o = 0;
      if (!FastUint(arr->via.array.ptr[i], 3, &o)) {
        SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(
            arr->via.array.ptr[i], "results[" + std::to_string(i) + "]", UINT64_MAX, &o));
        return Bad("results[" + std::to_string(i) + "]",
                   std::to_string(o) + " is not an outcome (0 to 3)");
      }
      m->results.push_back(static_cast<ExpireOutcome>(o));
    }
    SEGSTORE_RETURN_IF_ERROR(f.Flag("duplicate", &m->duplicate));
    return f.UintAs("count", &m->count, true);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, StatsResponse* m) {
  *m = {};
  msgpack::object_handle oh;
  const object* root = nullptr;
  SEGSTORE_RETURN_IF_ERROR(Parse(body, &oh, &root));
  if (root->type != mt::MAP) return WrongType("body", "a map", *root);
  m->entries.clear();
  for (uint32_t i = 0; i < root->via.map.size; ++i) {
    const object& k = root->via.map.ptr[i].key;
    const object& v = root->via.map.ptr[i].val;
    if (k.type != mt::STR) return WrongType("stats key", "a string", k);
    StatEntry e;
    e.name.assign(k.via.str.ptr, k.via.str.size);
    if (v.type == mt::POSITIVE_INTEGER) {
      e.value = v.via.u64;
    } else if (v.type == mt::FLOAT32 || v.type == mt::FLOAT64) {
      e.value = v.via.f64;
    } else if (v.type == mt::STR) {
      e.value = std::string(v.via.str.ptr, v.via.str.size);
    } else {
      return WrongType(e.name, "a number or string", v);
    }
    m->entries.push_back(std::move(e));
  }
  return Status::OK();
}

Status Decode(std::string_view body, const DecodeLimits& lim, LinkResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->master, "master"));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("members", &m->members, true));
    return f.UintAs("moved", &m->moved, true);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, UnlinkResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    if (f.Find("unlinked") == nullptr) return Bad("unlinked", "missing");
    return f.Flag("unlinked", &m->unlinked);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, MasterOfResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) { return f.User(lim, &m->master, "master"); });
}

Status Decode(std::string_view body, const DecodeLimits& lim, LinksResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->master, "master"));
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("links", UINT32_MAX, &arr, true));
    // Grown as entries are read, not sized from the count (as copy_partition's records).
    for (uint32_t i = 0; i < arr->via.array.size; ++i) {
      const object& e = arr->via.array.ptr[i];
      const std::string name = "links[" + std::to_string(i) + "]";
      if (e.type != mt::ARRAY) return WrongType(name, "an array [user, expires_at]", e);
      if (e.via.array.size != 2) {
        return Bad(name, "has " + std::to_string(e.via.array.size) +
                             " elements, expected 2 [user, expires_at]");
      }
      LinkedUser l;
      SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(e.via.array.ptr[0], name + ".user", lim, &l.user));
      uint64_t expires_at = 0;
      SEGSTORE_RETURN_IF_ERROR(
          Fields::ReadUint(e.via.array.ptr[1], name + ".expires_at", UINT32_MAX, &expires_at));
      l.expires_at = static_cast<UnixSeconds>(expires_at);
      m->links.push_back(std::move(l));
    }
    return f.OptUser("next", lim, &m->next);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, ConnectedResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    if (f.Find("connected") == nullptr) return Bad("connected", "missing");
    return f.Flag("connected", &m->connected);
  });
}

// ---- node to node: link_step, read_records

namespace {

const char* StepKindName(LinkStep::Kind k) {
  switch (k) {
    case LinkStep::Kind::kList:
      return "list";
    case LinkStep::Kind::kName:
      return "name";
    case LinkStep::Kind::kNameMoved:
      return "name_moved";
    case LinkStep::Kind::kDrop:
      return "drop";
    case LinkStep::Kind::kClear:
      return "clear";
    case LinkStep::Kind::kDeleteMember:
      return "delete_member";
    case LinkStep::Kind::kDelete:
      return "delete";
  }
  return "unknown";
}

}  // namespace

void Encode(const LinkStepRequest& m, std::string* out) {
  const LinkStep& s = m.step;
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + !s.master.empty() + !s.member.empty() + !s.expect.empty() +
                (s.expires != kNever) + !s.moving.empty() + !s.listed.empty() + s.stale +
                s.members_too + (s.max_links != 0) + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, s.user);
    Str(pk, "kind");
    Str(pk, StepKindName(s.kind));
    if (!s.master.empty()) {
      Str(pk, "master");
      Str(pk, s.master);
    }
    if (!s.member.empty()) {
      Str(pk, "member");
      Str(pk, s.member);
    }
    if (!s.expect.empty()) {
      Str(pk, "expect");
      Str(pk, s.expect);
    }
    if (s.expires != kNever) {
      Str(pk, "expires");
      pk.pack_uint32(s.expires);
    }
    if (!s.moving.empty()) {
      Str(pk, "moving");
      pk.pack_array(static_cast<uint32_t>(s.moving.size()));
      for (const LinkedUser& u : s.moving) {
        pk.pack_array(2);
        Str(pk, u.user);
        pk.pack_uint32(u.expires_at);
      }
    }
    if (!s.listed.empty()) {
      Str(pk, "listed");
      pk.pack_array(static_cast<uint32_t>(s.listed.size()));
      for (const std::string& u : s.listed) Str(pk, u);
    }
    if (s.stale) {
      Str(pk, "stale");
      Bool(pk, true);
    }
    if (s.members_too) {
      Str(pk, "members_too");
      Bool(pk, true);
    }
    if (s.max_links != 0) {
      Str(pk, "max_links");
      pk.pack_uint32(s.max_links);
    }
    WriteIdField(pk, m.write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, LinkStepRequest* m) {
  *m = {};
  LinkStep& s = m->step;
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &s.user));
    std::string kind;
    SEGSTORE_RETURN_IF_ERROR(f.Text("kind", &kind, true));
    bool known = false;
    for (auto k : {LinkStep::Kind::kList, LinkStep::Kind::kName, LinkStep::Kind::kNameMoved,
                   LinkStep::Kind::kDrop, LinkStep::Kind::kClear, LinkStep::Kind::kDeleteMember,
                   LinkStep::Kind::kDelete}) {
      if (kind == StepKindName(k)) {
        s.kind = k;
        known = true;
      }
    }
    if (!known) {
      return Bad("kind", "\"" + Printable(kind) +
                             "\" is not one of list, name, name_moved, drop, clear, "
                             "delete_member, delete");
    }
    SEGSTORE_RETURN_IF_ERROR(f.OptUser("master", lim, &s.master));
    SEGSTORE_RETURN_IF_ERROR(f.OptUser("member", lim, &s.member));
    SEGSTORE_RETURN_IF_ERROR(f.OptUser("expect", lim, &s.expect));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("expires", &s.expires));
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("moving", lim.max_batch, &arr, false));
    for (uint32_t i = 0; arr != nullptr && i < arr->via.array.size; ++i) {
      const object& e = arr->via.array.ptr[i];
      const std::string name = "moving[" + std::to_string(i) + "]";
      if (e.type != mt::ARRAY || e.via.array.size != 2) {
        return WrongType(name, "an array [user, expires_at]", e);
      }
      LinkedUser u;
      SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(e.via.array.ptr[0], name + ".user", lim, &u.user));
      uint64_t t = 0;
      SEGSTORE_RETURN_IF_ERROR(
          Fields::ReadUint(e.via.array.ptr[1], name + ".expires_at", UINT32_MAX, &t));
      u.expires_at = static_cast<UnixSeconds>(t);
      s.moving.push_back(std::move(u));
    }
    SEGSTORE_RETURN_IF_ERROR(f.Array("listed", lim.max_batch, &arr, false));
    for (uint32_t i = 0; arr != nullptr && i < arr->via.array.size; ++i) {
      std::string u;
      SEGSTORE_RETURN_IF_ERROR(
          Fields::ReadUser(arr->via.array.ptr[i], "listed[" + std::to_string(i) + "]", lim, &u));
      s.listed.push_back(std::move(u));
    }
    SEGSTORE_RETURN_IF_ERROR(f.Flag("stale", &s.stale));
    SEGSTORE_RETURN_IF_ERROR(f.Flag("members_too", &s.members_too));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("max_links", &s.max_links));
    const bool needs_member = s.kind == LinkStep::Kind::kList || s.kind == LinkStep::Kind::kDrop;
    const bool needs_master = s.kind == LinkStep::Kind::kName ||
                              s.kind == LinkStep::Kind::kNameMoved ||
                              s.kind == LinkStep::Kind::kDeleteMember;
    if (needs_member && s.member.empty()) {
      return Bad("member", std::string("missing: a ") + StepKindName(s.kind) + " step needs one");
    }
    if (needs_master && s.master.empty()) {
      return Bad("master", std::string("missing: a ") + StepKindName(s.kind) + " step needs one");
    }
    if (s.kind == LinkStep::Kind::kList && s.max_links == 0) {
      return Bad("max_links", "missing: a list step needs the group's limit");
    }
    return f.Id(&m->write_id);
  });
}

void Encode(const LinkStepResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(3 + m.duplicate);
    Str(pk, "applied");
    Bool(pk, m.applied);
    Str(pk, "changed");
    Bool(pk, m.changed);
    Str(pk, "members");
    pk.pack_uint32(m.members);
    if (m.duplicate) {
      Str(pk, "duplicate");
      Bool(pk, true);
    }
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, LinkStepResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.Flag("applied", &m->applied));
    SEGSTORE_RETURN_IF_ERROR(f.Flag("changed", &m->changed));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("members", &m->members));
    return f.Flag("duplicate", &m->duplicate);
  });
}

void Encode(const ReadRecordsRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "users");
    pk.pack_array(static_cast<uint32_t>(m.users.size()));
    for (const std::string& u : m.users) Str(pk, u);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, ReadRecordsRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("users", lim.max_batch, &arr, true));
    if (arr->via.array.size == 0) return Bad("users", "empty");
    m->users.resize(arr->via.array.size);
    for (uint32_t i = 0; i < arr->via.array.size; ++i) {
      SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(
          arr->via.array.ptr[i], "users[" + std::to_string(i) + "]", lim, &m->users[i]));
    }
    return Status::OK();
  });
}

void Encode(const ReadRecordsResponse& m, std::string* out) {
  size_t bound = 16;
  for (const auto& r : m) {
    bound += r.ok() ? 40 + r->body.size() + r->reference.size() : 32 + r.status().message().size();
  }
  out->reserve(out->size() + bound);
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "results");
    pk.pack_array(static_cast<uint32_t>(m.size()));
    for (const auto& r : m) {
      if (!r.ok()) {
        ErrorFields(pk, r.status());
        continue;
      }
      pk.pack_map(3);
      Str(pk, "status");
      pk.pack_uint8(0);
      Str(pk, "body");
      Bin(pk, r->body);
      Str(pk, "reference");
      Bin(pk, r->reference);
    }
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, ReadRecordsResponse* m) {
  m->clear();
  return DecodeMap(body, [&](const Fields& f) {
    return ReadResults<StoredRecord>(
        f,
        [&](const Fields& e, StoredRecord* r) -> Status {
          const object* b = e.Find("body");
          if (b == nullptr) return Bad(e.Name("body"), "missing");
          SEGSTORE_RETURN_IF_ERROR(ReadBin(*b, e.Name("body"), &r->body));
          const object* ref = e.Find("reference");
          if (ref == nullptr) return Bad(e.Name("reference"), "missing");
          SEGSTORE_RETURN_IF_ERROR(ReadBin(*ref, e.Name("reference"), &r->reference));
          if (!r->reference.empty()) {
            SEGSTORE_RETURN_IF_ERROR(Fields::CheckUser(r->reference, e.Name("reference"), lim));
          }
          return Status::OK();
        },
        m);
  });
}

// ---- profile fields ----

void Encode(const FieldSetRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "fields");
    pk.pack_array(static_cast<uint32_t>(m.fields.size()));
    for (const FieldUpdate& u : m.fields) {  // [name, value, expiry?, ttl?]
      const uint32_t len = u.ttl ? 4 : u.expiry != kNever ? 3 : 2;
      pk.pack_array(len);
      FieldName(pk, u.name);
      FieldValueOf(pk, out, u.value);
      if (len >= 3) pk.pack_uint32(u.expiry);
      if (len >= 4) Bool(pk, u.ttl);
    }
    WriteIdField(pk, m.write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, FieldSetRequest* m) {
  *m = {};
  return DecodeMapWithValues(body, [&](const Fields& f, size_t* timestamps) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("fields", lim.max_list, &arr, /*required=*/true));
    m->fields.resize(arr->via.array.size);
    for (uint32_t i = 0; i < arr->via.array.size; ++i) {
      const object& e = arr->via.array.ptr[i];
      const std::string name = "fields[" + std::to_string(i) + "]";
      if (e.type != mt::ARRAY) return WrongType(name, "an array [name, value, expiry, ttl]", e);
      const uint32_t n = e.via.array.size;
      if (n < 2 || n > 4) {
        return Bad(name, "has " + std::to_string(n) + " elements, expected 2 to 4");
      }
      FieldUpdate& u = m->fields[i];
      const object* el = e.via.array.ptr;
      SEGSTORE_RETURN_IF_ERROR(ReadFieldName(el[0], name + ".name", &u.name));
      SEGSTORE_RETURN_IF_ERROR(ReadFieldValue(el[1], name + ".value", timestamps, &u.value));
      SEGSTORE_RETURN_IF_ERROR(ReadFieldExpiry(n >= 3 ? &el[2] : nullptr, n >= 4 ? &el[3] : nullptr,
                                               name + ".expiry", name + ".ttl", &u));
    }
    return Status::OK();
  });
}

void Encode(const FieldDeleteRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "names");
    pk.pack_array(static_cast<uint32_t>(m.names.size()));
    for (const std::string& name : m.names) FieldName(pk, name);
    WriteIdField(pk, m.write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, FieldDeleteRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("names", lim.max_list, &arr, /*required=*/true));
    m->names.resize(arr->via.array.size);
    for (uint32_t i = 0; i < arr->via.array.size; ++i) {
      SEGSTORE_RETURN_IF_ERROR(
          ReadFieldName(arr->via.array.ptr[i], "names[" + std::to_string(i) + "]", &m->names[i]));
    }
    return Status::OK();
  });
}

namespace {

// The "name" of field_incr and field_max: required.
Status ReadNameKey(const Fields& f, std::string* name) {
  const object* o = f.Find("name");
  if (o == nullptr || o->type == mt::NIL) return Bad(f.Name("name"), "missing");
  return ReadFieldName(*o, f.Name("name"), name);
}

}  // namespace

void Encode(const FieldIncrementRequest& m, std::string* out) {
  const FieldIncrement& inc = m.increment;
  const bool sliding = inc.window == FieldIncrement::Window::kSliding;
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(3 + (inc.ttl != 0 ? 1 : 0) + (sliding ? 1 : 0) + (inc.cap ? 1 : 0) +
                WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "name");
    FieldName(pk, inc.name);
    Str(pk, "delta");
    pk.pack_int64(inc.delta);
    if (inc.ttl != 0) {
      Str(pk, "ttl");
      pk.pack_uint32(inc.ttl);
    }
    if (sliding) {
      Str(pk, "window");
      Str(pk, "sliding");
    }
    if (inc.cap) {
      Str(pk, "cap");
      pk.pack_int64(*inc.cap);
    }
    WriteIdField(pk, m.write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, FieldIncrementRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    FieldIncrement& inc = m->increment;
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
    SEGSTORE_RETURN_IF_ERROR(ReadNameKey(f, &inc.name));
    if (const object* d = f.Find("delta"); d != nullptr && d->type != mt::NIL) {
      SEGSTORE_RETURN_IF_ERROR(ReadInt64(*d, f.Name("delta"), &inc.delta));
    }
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("ttl", &inc.ttl));
    // Absent or nil: fixed. Given, it names one of the two ("" names none).
    if (const object* w = f.Find("window"); w != nullptr && w->type != mt::NIL) {
      std::string window;
      SEGSTORE_RETURN_IF_ERROR(f.Text("window", &window));
      if (window == "sliding") {
        inc.window = FieldIncrement::Window::kSliding;
      } else if (window != "fixed") {
        return Bad(f.Name("window"), "\"" + Printable(window) + "\" is not one of fixed, sliding");
      }
    }
    if (const object* c = f.Find("cap"); c != nullptr && c->type != mt::NIL) {
      int64_t cap = 0;
      SEGSTORE_RETURN_IF_ERROR(ReadInt64(*c, f.Name("cap"), &cap));
      inc.cap = cap;
    }
    return Status::OK();
  });
}

void Encode(const FieldMaxRequest& m, std::string* out) {
  const FieldUpdate& u = m.field;
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(3 + (u.expiry != kNever ? 1 : 0) + (u.ttl ? 1 : 0) + WriteIdFields(m.write_id));
    Str(pk, "user");
    Str(pk, m.user);
    Str(pk, "name");
    FieldName(pk, u.name);
    Str(pk, "value");
    FieldValueOf(pk, out, u.value);
    if (u.expiry != kNever) {
      Str(pk, "expiry");
      pk.pack_uint32(u.expiry);
    }
    if (u.ttl) {
      Str(pk, "ttl");
      pk.pack_true();
    }
    WriteIdField(pk, m.write_id);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, FieldMaxRequest* m) {
  *m = {};
  return DecodeMapWithValues(body, [&](const Fields& f, size_t* timestamps) {
    FieldUpdate& u = m->field;
    SEGSTORE_RETURN_IF_ERROR(f.User(lim, &m->user));
    SEGSTORE_RETURN_IF_ERROR(f.Id(&m->write_id));
    SEGSTORE_RETURN_IF_ERROR(ReadNameKey(f, &u.name));
    const object* v = f.Find("value");
    if (v == nullptr || v->type == mt::NIL) return Bad(f.Name("value"), "missing");
    SEGSTORE_RETURN_IF_ERROR(ReadFieldValue(*v, f.Name("value"), timestamps, &u.value));
    if (u.value.type == FieldValue::Type::kString || u.value.type == FieldValue::Type::kBytes) {
      return Bad(f.Name("value"), "field_max takes an integer, a float or a timestamp");
    }
    return ReadFieldExpiry(f.Find("expiry"), f.Find("ttl"), f.Name("expiry"), f.Name("ttl"), &u);
  });
}

void Encode(const FieldWriteResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + (m.duplicate ? 1 : 0));
    Str(pk, "changed");
    pk.pack_uint32(m.changed);
    Str(pk, "count");
    pk.pack_uint32(m.count);
    DuplicateField(pk, m.duplicate);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, FieldWriteResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("changed", &m->changed, true));
    SEGSTORE_RETURN_IF_ERROR(f.UintAs("count", &m->count, true));
    return f.Flag("duplicate", &m->duplicate);
  });
}

void Encode(const FieldIncrementResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + (m.duplicate ? 1 : 0));
    Str(pk, "value");
    pk.pack_int64(m.value);
    Str(pk, "capped");
    Bool(pk, m.capped);
    DuplicateField(pk, m.duplicate);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, FieldIncrementResponse* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    const object* v = f.Find("value");
    if (v == nullptr || v->type == mt::NIL) return Bad("value", "missing");
    SEGSTORE_RETURN_IF_ERROR(ReadInt64(*v, "value", &m->value));
    if (f.Find("capped") == nullptr) return Bad("capped", "missing");
    SEGSTORE_RETURN_IF_ERROR(f.Flag("capped", &m->capped));
    return f.Flag("duplicate", &m->duplicate);
  });
}

void Encode(const FieldMaxResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + (m.duplicate ? 1 : 0));
    Str(pk, "value");
    FieldValueOf(pk, out, m.value);
    Str(pk, "replaced");
    Bool(pk, m.replaced);
    DuplicateField(pk, m.duplicate);
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, FieldMaxResponse* m) {
  *m = {};
  return DecodeMapWithValues(body, [&](const Fields& f, size_t* timestamps) {
    const object* v = f.Find("value");
    if (v == nullptr || v->type == mt::NIL) return Bad("value", "missing");
    SEGSTORE_RETURN_IF_ERROR(ReadFieldValue(*v, "value", timestamps, &m->value));
    if (f.Find("replaced") == nullptr) return Bad("replaced", "missing");
    SEGSTORE_RETURN_IF_ERROR(f.Flag("replaced", &m->replaced));
    return f.Flag("duplicate", &m->duplicate);
  });
}

void EncodeError(std::string_view message, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(1);
    Str(pk, "message");
    Str(pk, message);
  });
}

void EncodeWrongNode(std::string_view message, uint64_t revision, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2);
    Str(pk, "message");
    Str(pk, message);
    Str(pk, "revision");
    pk.pack_uint64(revision);
  });
}

uint64_t DecodeErrorRevision(std::string_view body) {
  uint64_t revision = 0;
  Status s =
      DecodeMap(body, [&](const Fields& f) { return f.Uint("revision", UINT64_MAX, &revision); });
  return s.ok() ? revision : 0;
}

void AppendWrongNodeFrame(std::string* out, uint8_t op, uint32_t request_id,
                          std::string_view message, uint64_t revision) {
  (void)AppendFrame(out, op, request_id, static_cast<uint8_t>(Status::Code::kWrongNode), UINT32_MAX,
                    [&](std::string* o) { EncodeWrongNode(message, revision, o); });
}

std::string DecodeError(std::string_view body) {
  std::string message;
  Status s = DecodeMap(body, [&](const Fields& f) { return f.Text("message", &message, true); });
  if (!s.ok()) return "(unreadable error body: " + s.ToString() + ")";
  return message;
}

void AppendErrorFrame(std::string* out, uint8_t op, uint32_t request_id, const Status& status) {
  // An error body is small; it always fits any sane limit.
  (void)AppendFrame(out, op, request_id, static_cast<uint8_t>(status.code()), UINT32_MAX,
                    [&](std::string* o) { EncodeError(status.message(), o); });
}

// ---- scan

namespace {

// One element of a scan answer's "profiles".
void EncodeScannedProfile(Packer& pk, std::string* out, const ScannedProfile& p) {
  const bool link = !p.master.empty();
  pk.pack_map(2 + (p.fields.empty() ? 0 : 1) + (link ? 2 : 0) + (p.members.empty() ? 0 : 1));
  Str(pk, "user");
  Bin(pk, p.user);
  Str(pk, "segments");
  pk.pack_array(static_cast<uint32_t>(p.segments.size()));
  for (const Segment& seg : p.segments) {
    pk.pack_array(seg.attr2 ? 4 : seg.attr1 ? 3 : 2);
    pk.pack_uint64(seg.id);
    pk.pack_uint32(seg.expires_at);
    if (seg.attr1 || seg.attr2) OptU32(pk, seg.attr1);
    if (seg.attr2) pk.pack_uint32(*seg.attr2);
  }
  if (!p.fields.empty()) {
    Str(pk, "fields");
    pk.pack_map(static_cast<uint32_t>(p.fields.size()));
    for (const Field& f : p.fields) {
      FieldName(pk, f.name);
      pk.pack_array(2);
      FieldValueOf(pk, out, f.value);
      pk.pack_uint32(f.expires_at);
    }
  }
  if (link) {
    Str(pk, "master");
    Bin(pk, p.master);
    Str(pk, "link_expires");
    pk.pack_uint32(p.link_expires);
  }
  if (!p.members.empty()) {
    Str(pk, "members");
    pk.pack_array(static_cast<uint32_t>(p.members.size()));
    for (const LinkedUser& l : p.members) {
      pk.pack_array(2);
      Bin(pk, l.user);
      pk.pack_uint32(l.expires_at);
    }
  }
}

bool IsReserved(std::string_view user) {
  return user.size() >= 2 && user[0] == '\xff' && user[1] == '\0';
}

Status ReadScannedProfile(const object& o, const std::string& name, const DecodeLimits& lim,
                          size_t* timestamps, ScannedProfile* p) {
  std::optional<Fields> f;
  SEGSTORE_RETURN_IF_ERROR(Fields::Of(o, name, name + ".", &f));
  SEGSTORE_RETURN_IF_ERROR(f->User(lim, &p->user));
  if (IsReserved(p->user)) {
    return Bad(name + ".user", "reserved (it begins FF 00): a server's own records are never scanned");
  }
  const object* segs = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f->Array("segments", UINT32_MAX, &segs, true));
  for (uint32_t i = 0; i < segs->via.array.size; ++i) {
    const object& e = segs->via.array.ptr[i];
    const std::string at = name + ".segments[" + std::to_string(i) + "]";
    if (e.type != mt::ARRAY) return WrongType(at, "an array [id, expires_at, attr1?, attr2?]", e);
    const uint32_t n = e.via.array.size;
    if (n < 2 || n > 4) {
      return Bad(at, "has " + std::to_string(n) +
                         " elements, expected 2 to 4 [id, expires_at, attr1?, attr2?]");
    }
    Segment seg;
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(e.via.array.ptr[0], at + ".id", UINT64_MAX, &seg.id));
    if (!p->segments.empty() && p->segments.back().id >= seg.id) {
      return Bad(at + ".id", std::to_string(seg.id) + " is out of order or twice (ids ascend)");
    }
    uint64_t t = 0;
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(e.via.array.ptr[1], at + ".expires_at", UINT32_MAX, &t));
    seg.expires_at = static_cast<UnixSeconds>(t);
    if (n >= 3) SEGSTORE_RETURN_IF_ERROR(ReadOptU32(e.via.array.ptr[2], at + ".attr1", &seg.attr1));
    if (n >= 4) {
      if (e.via.array.ptr[3].type == mt::NIL) return Bad(at + ".attr2", "nil (leave it out instead)");
      SEGSTORE_RETURN_IF_ERROR(ReadOptU32(e.via.array.ptr[3], at + ".attr2", &seg.attr2));
    }
    p->segments.push_back(seg);
  }
  if (const object* fields = f->Find("fields"); fields != nullptr && fields->type != mt::NIL) {
    SEGSTORE_RETURN_IF_ERROR(ReadFieldMap(fields, f->Name("fields"), timestamps, &p->fields));
  }
  if (const object* master = f->Find("master"); master != nullptr && master->type != mt::NIL) {
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(*master, f->Name("master"), lim, &p->master));
    SEGSTORE_RETURN_IF_ERROR(f->UintAs("link_expires", &p->link_expires, true));
  } else if (const object* e = f->Find("link_expires"); e != nullptr && e->type != mt::NIL) {
    return Bad(f->Name("link_expires"), "given without a master");
  }
  const object* members = nullptr;
  SEGSTORE_RETURN_IF_ERROR(f->Array("members", UINT32_MAX, &members, false));
  for (uint32_t i = 0; members != nullptr && i < members->via.array.size; ++i) {
    const object& e = members->via.array.ptr[i];
    const std::string at = name + ".members[" + std::to_string(i) + "]";
    if (e.type != mt::ARRAY) return WrongType(at, "an array [user, expires_at]", e);
    if (e.via.array.size != 2) {
      return Bad(at, "has " + std::to_string(e.via.array.size) +
                         " elements, expected 2 [user, expires_at]");
    }
    LinkedUser l;
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUser(e.via.array.ptr[0], at + ".user", lim, &l.user));
    if (!p->members.empty() && !(p->members.back().user < l.user)) {
      return Bad(at + ".user", "out of order or twice (members come in bytewise order)");
    }
    uint64_t t = 0;
    SEGSTORE_RETURN_IF_ERROR(Fields::ReadUint(e.via.array.ptr[1], at + ".expires_at", UINT32_MAX, &t));
    l.expires_at = static_cast<UnixSeconds>(t);
    p->members.push_back(std::move(l));
  }
  return Status::OK();
}

}  // namespace

void Encode(const ScanRequest& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2 + (m.max_bytes != 0 ? 1 : 0));
    Str(pk, "partition");
    pk.pack_uint32(m.partition);
    Str(pk, "cursor");
    pk.pack_uint64(m.cursor);
    if (m.max_bytes != 0) {
      Str(pk, "max_bytes");
      pk.pack_uint32(m.max_bytes);
    }
  });
}

Status Decode(std::string_view body, const DecodeLimits& /*lim*/, ScanRequest* m) {
  *m = {};
  return DecodeMap(body, [&](const Fields& f) {
    uint64_t partition = 0;
    SEGSTORE_RETURN_IF_ERROR(f.Uint("partition", UINT64_MAX, &partition, true));
    if (partition >= kPartitions) {
      return Bad("partition", std::to_string(partition) + " is not a partition (0 to 4095)");
    }
    m->partition = static_cast<uint32_t>(partition);
    SEGSTORE_RETURN_IF_ERROR(ReadCopyCursor(f, &m->cursor));
    return f.UintAs("max_bytes", &m->max_bytes);
  });
}

size_t ScannedProfileBytes(const ScannedProfile& p) {
  std::string scratch;
  Sink sink{&scratch};
  Packer pk(sink);
  EncodeScannedProfile(pk, &scratch, p);
  return scratch.size();
}

void Encode(const ScanResponse& m, std::string* out) {
  EncodeWith(out, [&](Packer& pk) {
    pk.pack_map(2);
    Str(pk, "cursor");
    pk.pack_uint64(m.cursor);
    Str(pk, "profiles");
    pk.pack_array(static_cast<uint32_t>(m.profiles.size()));
    for (const ScannedProfile& p : m.profiles) EncodeScannedProfile(pk, out, p);
  });
}

Status Decode(std::string_view body, const DecodeLimits& lim, ScanResponse* m) {
  *m = {};
  return DecodeMapWithValues(body, [&](const Fields& f, size_t* timestamps) {
    SEGSTORE_RETURN_IF_ERROR(ReadCopyCursor(f, &m->cursor));
    const object* arr = nullptr;
    SEGSTORE_RETURN_IF_ERROR(f.Array("profiles", UINT32_MAX, &arr, true));
    // Grown as profiles are read, not sized from the count (as copy_partition's records).
    for (uint32_t i = 0; i < arr->via.array.size; ++i) {
      ScannedProfile p;
      SEGSTORE_RETURN_IF_ERROR(ReadScannedProfile(
          arr->via.array.ptr[i], "profiles[" + std::to_string(i) + "]", lim, timestamps, &p));
      m->profiles.push_back(std::move(p));
    }
    return Status::OK();
  });
}

}  // namespace segstore::proto
