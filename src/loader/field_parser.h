// Parsing profile field files for `segctl load --fields`, line by line
// (proto/PROTOCOL.md, "Profile fields"): one field of one user a line.
//
//   user,name,value[,ttl]        (comma or tab between the fields)
//
// The value's type is its TYPE: prefix, when it starts with one of these
// five (lowercase):
//
//   int:-42              a 64-bit signed integer (an optional '-', digits)
//   double:0.5           a double (decimal or exponent form; no inf or nan)
//   str:FR               text, the rest as it is (valid UTF-8; may be empty)
//   bytes:00ff           bytes, in hex (an even number of digits)
//   time:1790000000      Unix seconds (0 to 2^32-1), or an ISO-8601 time
//   time:2026-12-01T00:00:00Z   with Z or an offset, as the segment loader's
//
// Without a prefix, FieldParseOptions::untyped decides; by default (kAuto) a
// value that is a JSON number is a number: an int without a fraction or an
// exponent ("42", "-7", "0"), a double with one ("0.5", "1e3", "-2.5E-3");
// anything else is a string ("FR", "01234", "+33", ".5", "1,5", "true").
// An empty value is refused: the empty string is "str:". A prefix always
// wins, so a string that starts with one is written "str:int:3".
//
// Fields may be quoted as in RFC 4180: a field starting with '"' ends at
// the next '"' that is not doubled ("" is one '"'), which must end the field;
// the quotes are CSV's, not a type ("42" is the int 42). A field not
// starting with '"' is taken as it is, a '"' inside included. Nothing is
// trimmed.
//
// The TTL is any of the segment loader's forms (ParseWhen, parser.h):
// seconds ("86400"), "90s" "15m" "12h" "30d", an absolute expiry
// ("@1767225600", a bare number of 10 digits or more, an ISO-8601 time) or
// "never". Empty or absent: FieldParseOptions::default_ttl, else never.
//
// Skipped (OK, out->user empty): blank lines, lines starting with '#', and
// line 1 when each of its fields (two or more) is a column name: user,
// user_id, uid, id, name, field, field_name, key, value, type, ttl, expiry
// or expires_at, in any case (out->header is then set). A UTF-8 BOM on line
// 1 and a '\r' before the end are dropped.
//
// The delimiter (FieldParseOptions::delimiter 0) is taken from the first
// data line that parses: a tab if it holds one, else a comma.
//
// I/O-free; no allocation per line once FieldRow's strings have grown.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::loader {

// A value's type when it has no TYPE: prefix.
enum class FieldType : uint8_t { kAuto, kInt, kDouble, kString, kBytes, kTime };

// The protocol's limit on a field name (proto/PROTOCOL.md, "Names"). The
// loader links nothing of the wire (segstore_common only), so it holds its
// own copy; segctl, which links both, asserts that it is proto's.
inline constexpr size_t kMaxFieldNameBytes = 64;

struct FieldParseOptions {
  // ',' or '\t'; 0: from the first data line, as above.
  char delimiter = 0;
  FieldType untyped = FieldType::kAuto;
  // The protocol's limit on a user ID (the server's hello says its own).
  uint32_t max_key_bytes = 256;
  // The server's max_field_bytes for a string or bytes value.
  uint32_t max_value_bytes = 1024;
  // Unix seconds "now": absolute expiries at or before it are refused.
  uint32_t now = 0;
  // TTL in seconds for a field given without one; nullopt: it never expires.
  std::optional<uint32_t> default_ttl;
};

// One parsed line. Both strings are refilled by each Parse (their capacity
// is kept).
struct FieldRow {
  std::string user;  // empty: a line to skip
  // name, value, and its expiry as field_set takes it: `ttl` true, seconds
  // from the server's now; false, absolute Unix seconds (kNever: never).
  FieldUpdate field;
  bool header = false;  // skipped as line 1's header
};

class FieldParser {
 public:
  explicit FieldParser(const FieldParseOptions& options);

  // Parses `line` (no trailing newline). Returns:
  //   OK with out->user non-empty: a data line;
  //   OK with out->user empty: a line to skip (blank, a '#' comment, line 1
  //     as a header: out->header);
  //   InvalidArgument with the reason ("2 fields, at least 3 (user,name,
  //     value[,ttl] separated by ',')", "field name of 70 bytes is over the
  //     limit of 64", "int \"x\" is not a 64-bit integer", "value is empty
  //     (the empty string is str:)", ...); out->user is then empty.
  // `line_number` is 1-based; only the first line can be a header.
  Status Parse(std::string_view line, uint64_t line_number, FieldRow* out);

  // What delimiter 0 settled on (0 while no data line has).
  char delimiter() const { return delimiter_; }

 private:
  FieldParseOptions options_;
  char delimiter_;
  std::string scratch_;  // a quoted value or TTL with "" collapsed
};

// A value field's text (its quotes already removed) into *out: by its TYPE:
// prefix, else as `untyped` says, as above. InvalidArgument with the reason;
// a string or bytes value over `max_value_bytes` is InvalidArgument too (a
// bad row), not LimitExceeded.
Status ParseFieldValue(std::string_view text, FieldType untyped, uint32_t max_value_bytes,
                       FieldValue* out);

// "int", "double", "str", "bytes", "time" (or "auto") into *type; false for
// anything else.
bool ParseFieldTypeName(std::string_view name, FieldType* type);

}  // namespace segstore::loader
