// Parsing identity-graph link files for `segctl load --links`, line by line
// (proto/PROTOCOL.md, "Linked profiles"): the two shapes an identity graph
// exports.
//
//   rows:        id,master[,ttl]            (comma or tab): `id` links to `master`
//   components:  master<TAB>id[,id]...      each `id` links to `master` (the
//                                           output of a connected-components job)
//
// A TTL is one of the segment loader's TTL forms (ParseWhen, parser.h):
// seconds ("86400"), seconds with a unit ("90s", "15m", "12h", "30d"), or
// "never"; an absolute expiry is refused (a link takes a TTL on the wire).
// Absent or empty: LinkParseOptions::default_ttl, else the link never expires.
// A components line takes no TTL field: its links take the default.
//
// Detection (LinkFormat::kAuto), from the first data line: no tab, a comma
// row; two tabs or more, a tab row; one tab with a ',' after it, a components
// line. "A<TAB>B" reads both ways, and the two readings link opposite ways
// (A to B as a row, B to A as a components line), so it is never guessed:
// Parse flags it `undecided`, and the caller parses it again once format()
// has settled (or asks for --format when nothing settles it).
//
// Line 1 is skipped as a header (LinkLine::header) when it has two fields or
// more and each is a column name: id, ids, user, users, user_id, user_ids,
// member, members, member_id, member_ids, master, master_id or ttl, in any
// case ("id,master,ttl", "master<TAB>members"). Other lines that look like
// names are IDs: a header of other names must start with '#'.
//
// I/O-free; no allocation per line once LinkLine::members has grown (the IDs
// are views into the line). Thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "segstore/status.h"

namespace segstore::loader {

enum class LinkFormat : uint8_t {
  kAuto,        // decided by the first line that can decide it, as above
  kRows,        // id,master[,ttl]
  kComponents,  // master<TAB>id,id,...
};

struct LinkParseOptions {
  LinkFormat format = LinkFormat::kAuto;
  // Field separator of row files: ',' or '\t'; 0 detects it from the first
  // data line. An explicit ',' means rows (a components line needs a tab).
  char delimiter = 0;
  // The protocol's limit on a user ID (the server's hello says its own).
  uint32_t max_key_bytes = 256;
  // Unix seconds "now": a TTL whose expiry would pass 2^32-1 is refused.
  uint32_t now = 0;
  // TTL in seconds for a link given without one; nullopt: it never expires.
  std::optional<uint32_t> default_ttl;
};

// One parsed line: a master and the IDs that link to it (one for a row, one
// or more for a components line), all with the same TTL.
struct LinkLine {
  std::string_view master;                // points into the line
  std::vector<std::string_view> members;  // cleared and refilled by each Parse()
  uint32_t ttl = 0;                       // seconds; 0: never expires
  bool header = false;                    // skipped as line 1's header
  // "A<TAB>B" while the format is not settled: members is empty; parse the
  // line again once format() is not kAuto.
  bool undecided = false;
};

class LinkParser {
 public:
  explicit LinkParser(const LinkParseOptions& options);

  // Parses `line` (no trailing newline; a trailing '\r' is ignored). Returns:
  //   OK with out->members non-empty: a data line;
  //   OK with out->members empty: a line to skip (blank, a comment starting
  //     with '#', line 1 as a header: out->header), or one not yet decided
  //     (out->undecided, above);
  //   InvalidArgument with the reason ("ID and master are the same (\"x\"): a
  //     user cannot be linked to itself", "4 fields, at most 3
  //     (id,master[,ttl])", "no members after the tab", "member 2 is empty",
  //     "master ID of 300 bytes is over the limit of 256", ...). A refused
  //     line yields no link: a components line with one bad member is
  //     refused whole.
  // `line_number` is 1-based; only the first line can be a header.
  Status Parse(std::string_view line, uint64_t line_number, LinkLine* out);

  // What kAuto and delimiter 0 settled on (kAuto while no line has decided).
  LinkFormat format() const { return format_; }
  char delimiter() const { return delimiter_; }

 private:
  LinkParseOptions options_;
  LinkFormat format_;
  char delimiter_;
};

}  // namespace segstore::loader
