#include "loader/link_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <system_error>

#include "loader/parser.h"
#include "loader/text.h"
#include "segstore/result.h"

namespace segstore::loader {

namespace {

constexpr size_t kMaxRowFields = 3;

using text::Count;
using text::DelimiterName;
using text::Find;
using text::IsBlank;
using text::IsDigit;

// Line 1 as a header: two fields or more, each one of the usual column
// names, in any case.
bool IsHeader(std::string_view line) {
  static constexpr std::string_view kNames[] = {
      "id",      "ids",       "user",       "users",  "user_id",   "user_ids", "member",
      "members", "member_id", "member_ids", "master", "master_id", "ttl"};
  return text::IsHeaderLine(line, kNames, /*unquote=*/false);
}

Status CheckId(std::string_view what, std::string_view id, const LinkParseOptions& options) {
  if (id.empty()) return Status::InvalidArgument(fmt::format("{} is empty", what));
  if (id.size() > options.max_key_bytes) {
    return Status::InvalidArgument(fmt::format("{} of {} bytes is over the limit of {}", what,
                                               id.size(), options.max_key_bytes));
  }
  // Only a comma row's field can hold one: a components line, or a tab row,
  // in a comma file.
  if (Find(id, '\t') != nullptr) {
    return Status::InvalidArgument(fmt::format("{} {} contains a tab", what, Quoted(id)));
  }
  return Status::OK();
}

Status SelfLink(std::string_view what, std::string_view id) {
  return Status::InvalidArgument(
      fmt::format("{} ({}): a user cannot be linked to itself", what, Quoted(id)));
}

Status DefaultTtl(const LinkParseOptions& options, uint32_t* ttl) {
  const uint32_t v = options.default_ttl.value_or(0);
  if (uint64_t{v} + options.now > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("--default-ttl is too long: past 32-bit Unix time");
  }
  *ttl = v;
  return Status::OK();
}

// A link's TTL field: seconds, 90s/15m/12h/30d, never; empty: the default.
Status ParseTtl(std::string_view text, const LinkParseOptions& options, uint32_t* ttl) {
  if (text.empty()) return DefaultTtl(options, ttl);
  if (text == "never") {
    *ttl = 0;
    return Status::OK();
  }
  size_t n = 0;
  while (n < text.size() && IsDigit(text[n])) ++n;
  const bool absolute = text.front() == '@' || (n == text.size() && n >= 10) ||
                        (n == 4 && text.size() > 4 && text[4] == '-');
  if (absolute) {
    return Status::InvalidArgument(
        fmt::format("TTL {} is an absolute expiry: a link takes a TTL (86400, 90s, 15m, 12h, "
                    "30d) or never",
                    Quoted(text)));
  }
  uint64_t mult = 1;
  if (n == 0 || n + 1 < text.size()) {
    return Status::InvalidArgument(fmt::format(
        "TTL {} is not understood (seconds, 90s, 15m, 12h, 30d or never)", Quoted(text)));
  }
  if (n + 1 == text.size()) {
    switch (text[n]) {
      case 's':
        break;
      case 'm':
        mult = 60;
        break;
      case 'h':
        mult = 3600;
        break;
      case 'd':
        mult = 86400;
        break;
      default:
        return Status::InvalidArgument(fmt::format(
            "TTL {} is not understood (seconds, 90s, 15m, 12h, 30d or never)", Quoted(text)));
    }
  }
  uint64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + n, v);
  if (ec != std::errc() || v > std::numeric_limits<uint32_t>::max()) {
    v = std::numeric_limits<uint32_t>::max();  // too long either way
  }
  if (v == 0) {
    return Status::InvalidArgument(
        fmt::format("TTL {} is zero (a link that never expires: never)", Quoted(text)));
  }
  if (v * mult + options.now > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument(fmt::format(
        "TTL {} is too long: it would expire after 2106 (past 32-bit Unix time)", Quoted(text)));
  }
  *ttl = static_cast<uint32_t>(v * mult);
  return Status::OK();
}

Status ParseRow(std::string_view line, char delimiter, const LinkParseOptions& options,
                LinkLine* out) {
  std::string_view fields[kMaxRowFields];
  size_t n = 0;
  SEGSTORE_RETURN_IF_ERROR(text::SplitRow(line, delimiter, fields, " (id,master[,ttl])", &n));
  if (n < 2) {
    return Status::InvalidArgument(
        fmt::format("1 field, at least 2 (id,master separated by {})", DelimiterName(delimiter)));
  }
  SEGSTORE_RETURN_IF_ERROR(CheckId("ID", fields[0], options));
  SEGSTORE_RETURN_IF_ERROR(CheckId("master ID", fields[1], options));
  if (fields[0] == fields[1]) return SelfLink("ID and master are the same", fields[0]);
  SEGSTORE_RETURN_IF_ERROR(ParseTtl(n > 2 ? fields[2] : std::string_view(), options, &out->ttl));
  out->master = fields[1];
  out->members.push_back(fields[0]);
  return Status::OK();
}

Status CheckDuplicates(const std::vector<std::string_view>& members) {
  auto twice = [](std::string_view id) {
    return Status::InvalidArgument(fmt::format("member {} appears twice in the line", Quoted(id)));
  };
  if (members.size() <= 16) {
    for (size_t i = 1; i < members.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (members[i] == members[j]) return twice(members[i]);
      }
    }
    return Status::OK();
  }
  // Reused across lines: no allocation once it has grown.
  thread_local std::vector<std::string_view> scratch;
  scratch.assign(members.begin(), members.end());
  std::sort(scratch.begin(), scratch.end());
  const auto dup = std::adjacent_find(scratch.begin(), scratch.end());
  if (dup != scratch.end()) return twice(*dup);
  return Status::OK();
}

Status ParseComponents(std::string_view line, const LinkParseOptions& options, LinkLine* out) {
  const char* tab = Find(line, '\t');
  if (tab == nullptr) {
    return Status::InvalidArgument(
        "no tab after the master ID (components: master<TAB>id[,id]...)");
  }
  const std::string_view master = line.substr(0, static_cast<size_t>(tab - line.data()));
  SEGSTORE_RETURN_IF_ERROR(CheckId("master ID", master, options));
  const std::string_view list = line.substr(master.size() + 1);
  if (list.empty() || IsBlank(list)) return Status::InvalidArgument("no members after the tab");
  if (Find(list, '\t') != nullptr) {
    return Status::InvalidArgument(fmt::format(
        "{} tabs, a components line has one (master<TAB>id[,id]...)", 1 + Count(list, '\t')));
  }
  size_t pos = 0;
  for (size_t i = 1;; ++i) {
    const char* comma = Find(list.substr(pos), ',');
    const size_t end = comma == nullptr ? list.size() : static_cast<size_t>(comma - list.data());
    const std::string_view id = list.substr(pos, end - pos);
    if (id.empty()) {
      return Status::InvalidArgument(
          fmt::format("member {} is empty (two commas, or one at an end)", i));
    }
    if (id.size() > options.max_key_bytes) {  // formatted only then: no allocation per member
      return CheckId(fmt::format("member {}", i), id, options);
    }
    if (id == master) return SelfLink(fmt::format("member {} is the master itself", i), id);
    out->members.push_back(id);
    if (comma == nullptr) break;
    pos = end + 1;
  }
  SEGSTORE_RETURN_IF_ERROR(CheckDuplicates(out->members));
  SEGSTORE_RETURN_IF_ERROR(DefaultTtl(options, &out->ttl));
  out->master = master;
  return Status::OK();
}

// "A<TAB>B" before the format is known: checked as either reading would
// check it, with names that fit both.
Status CheckUndecided(std::string_view line, const LinkParseOptions& options) {
  const size_t tab = line.find('\t');
  const std::string_view first = line.substr(0, tab);
  const std::string_view second = line.substr(tab + 1);
  SEGSTORE_RETURN_IF_ERROR(CheckId("first ID", first, options));
  SEGSTORE_RETURN_IF_ERROR(CheckId("second ID", second, options));
  if (first == second) return SelfLink("the two IDs are the same", first);
  uint32_t ttl;
  return DefaultTtl(options, &ttl);
}

}  // namespace

LinkParser::LinkParser(const LinkParseOptions& options)
    : options_(options), format_(options.format), delimiter_(options.delimiter) {
  // An explicit delimiter other than a tab can only mean a row file.
  if (format_ == LinkFormat::kAuto && delimiter_ != 0 && delimiter_ != '\t') {
    format_ = LinkFormat::kRows;
  }
  if (format_ == LinkFormat::kComponents) delimiter_ = '\t';
}

Status LinkParser::Parse(std::string_view line, uint64_t line_number, LinkLine* out) {
  out->master = {};
  out->members.clear();
  out->ttl = 0;
  out->header = false;
  out->undecided = false;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line_number == 1 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);  // UTF-8 BOM
  if (line.empty() || line.front() == '#' || IsBlank(line)) return Status::OK();
  if (line_number == 1 && IsHeader(line)) {
    out->header = true;
    return Status::OK();
  }

  // The shape of this line: settled, or detected from it.
  LinkFormat format = format_;
  char delimiter = delimiter_;
  bool settles = false;  // this line decides format_/delimiter_ if it parses
  if (format == LinkFormat::kAuto) {
    const char* tab = Find(line, '\t');
    if (tab == nullptr) {
      format = LinkFormat::kRows;
      delimiter = delimiter_ == '\t' ? '\t' : ',';
      settles = true;
    } else {
      const std::string_view rest = line.substr(static_cast<size_t>(tab - line.data()) + 1);
      if (Find(rest, '\t') != nullptr) {  // two tabs or more: a tab-separated row
        format = LinkFormat::kRows;
        delimiter = '\t';
        settles = true;
      } else if (Find(rest, ',') != nullptr) {
        format = LinkFormat::kComponents;
        delimiter = '\t';
        settles = true;
      } else {
        SEGSTORE_RETURN_IF_ERROR(CheckUndecided(line, options_));
        out->undecided = true;
        return Status::OK();
      }
    }
  } else if (format == LinkFormat::kRows && delimiter == 0) {
    delimiter = Find(line, '\t') != nullptr ? '\t' : ',';
    settles = true;
  }

  Status s = format == LinkFormat::kComponents ? ParseComponents(line, options_, out)
                                               : ParseRow(line, delimiter, options_, out);
  if (!s.ok()) {
    out->members.clear();
    out->master = {};
    return s;
  }
  if (settles) {
    format_ = format;
    delimiter_ = delimiter;
  }
  return Status::OK();
}

}  // namespace segstore::loader
