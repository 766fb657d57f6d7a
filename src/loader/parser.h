// Parsing DMP segment files, line by line: the two shapes a DMP exports.
//
//   rows:     user_id,segment_id[,ttl_or_expiry[,attr1[,attr2]]]   (comma or tab)
//   grouped:  user_id<TAB>seg[:ttl_or_expiry][,seg[:ttl_or_expiry]]...
//
// A TTL or expiry is seconds from now ("86400"), seconds with a unit ("30d",
// "12h", "15m", "90s"), an absolute Unix time ("@1767225600"; a bare number
// of 10 digits or more is read as absolute too), an ISO-8601 UTC time
// ("2026-12-01T00:00:00Z"; an offset, Z or +hh:mm, is required) or "never".
// Absent: ParseOptions::default_ttl, or the line is refused.
//
// Line 1 may be a header (user_id,segment_id,ttl): it is skipped, and
// ParsedLine::header says so, when its segment field is a name (starts with a
// letter, '_' or a non-ASCII byte) and no later field reads as data (starts
// with a digit or '@', or is "never"). "u1,x42,3600" is a bad row, not a header.
//
// I/O-free, allocation-free on the hot path (the user ID is a view into the
// line; segments go into a caller-owned vector that is reused). Thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::loader {

enum class Format : uint8_t {
  // Decided from the first data line: one tab with ',' or ':' after it is
  // grouped; two tabs or more, a tab-separated row; no tab, a comma-separated
  // row. "user<TAB>segment" reads the same both ways and leaves it to the next.
  kAuto,
  kRows,     // one assignment a line
  kGrouped,  // one user a line
};

struct ParseOptions {
  Format format = Format::kAuto;
  // Field separator of row files: ',' or '\t'; 0 detects it from the first line.
  char delimiter = 0;
  uint32_t max_key_bytes = 256;
  // Unix seconds "now": absolute expiries at or before it are refused.
  uint32_t now = 0;
  // TTL in seconds for a segment given without one; nullopt: such a line is refused.
  std::optional<uint32_t> default_ttl;
};

// One parsed line: a user and one (rows) or many (grouped) segment updates,
// each an absolute expiry (ttl=false) or a TTL (ttl=true), as the upsert takes them.
struct ParsedLine {
  std::string_view user;                // points into the line
  std::vector<SegmentUpdate> segments;  // cleared and refilled by each Parse()
  bool header = false;                  // the line was skipped as line 1's header
};

class LineParser {
 public:
  explicit LineParser(const ParseOptions& options);

  // Parses `line` (no trailing newline; a trailing '\r' is ignored). Returns:
  //   OK with out->segments non-empty: a data line;
  //   OK with out->segments empty: a line to skip (blank, a comment starting
  //     with '#', or line 1 as a header, as above: out->header is then true);
  //   InvalidArgument with the reason ("segment ID \"x\" is not a number",
  //     "user ID of 300 bytes is over the limit of 256", "expiry 1700000000 is
  //     in the past", "6 fields, at most 5", ...). Nothing of a refused line
  //     may be written: a grouped line with one bad segment is refused whole.
  // `line_number` is 1-based; only the first line can be a header.
  Status Parse(std::string_view line, uint64_t line_number, ParsedLine* out);

  // What Format::kAuto and delimiter 0 settled on (after the first data line
  // that decides it; kAuto while none has).
  Format format() const { return format_; }
  char delimiter() const { return delimiter_; }

 private:
  ParseOptions options_;
  Format format_;
  char delimiter_;
};

// A TTL or expiry as above into *value/*ttl (InvalidArgument quoting `text`
// if it is malformed, zero, in the past or beyond 32-bit Unix time).
Status ParseWhen(std::string_view text, const ParseOptions& options, uint32_t* value, bool* ttl);

// "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" into Unix seconds (the
// fraction dropped; before 1970 negative). False when `text` is not of that
// form or names no real time (a 13th month, a 31st of April).
bool ParseIsoTime(std::string_view text, int64_t* seconds);

// `text` for a reason: in double quotes, cut at 40 bytes (then its length
// follows), control bytes escaped as \xNN.
std::string Quoted(std::string_view text);

}  // namespace segstore::loader
