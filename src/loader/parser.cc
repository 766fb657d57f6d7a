#include "loader/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <system_error>

#include "loader/text.h"

namespace segstore::loader {

namespace {

constexpr size_t kMaxRowFields = 5;
constexpr size_t kQuoteLimit = 40;  // bytes of a bad field shown in a message

// `text` for a message: quoted, cut at kQuoteLimit bytes, control bytes escaped.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  const size_t n = std::min(text.size(), kQuoteLimit);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > n)
    out += fmt::format("...\" ({} bytes)", text.size());
  else
    out += '"';
  return out;
}

using text::Count;
using text::DelimiterName;
using text::Find;
using text::IsBlank;
using text::IsDigit;

// Digits only, no sign, no space: into *v. False on anything else or overflow.
template <typename T>
bool ParseUnsigned(std::string_view s, T* v, bool* overflow) {
  *overflow = false;
  if (s.empty() || !IsDigit(s.front())) return false;  // from_chars would take no '+', but be plain
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  if (ec == std::errc::result_out_of_range) {
    // Overflow only if everything else is digits.
    *overflow = std::all_of(s.begin(), s.end(), IsDigit);
    return false;
  }
  return ec == std::errc() && p == s.data() + s.size();
}

Status BadNumber(std::string_view what, std::string_view text, bool overflow, uint64_t max) {
  if (text.empty()) return Status::InvalidArgument(fmt::format("{} is empty", what));
  if (overflow) {
    return Status::InvalidArgument(
        fmt::format("{} {} is out of range (at most {})", what, Quote(text), max));
  }
  return Status::InvalidArgument(fmt::format("{} {} is not a number", what, Quote(text)));
}

Status ParseSegmentId(std::string_view text, uint64_t* id) {
  bool overflow;
  if (ParseUnsigned(text, id, &overflow)) return Status::OK();
  return BadNumber("segment ID", text, overflow, std::numeric_limits<uint64_t>::max());
}

// An attribute field: empty is absent.
Status ParseAttr(std::string_view what, std::string_view text, std::optional<uint32_t>* attr) {
  if (text.empty()) {
    attr->reset();
    return Status::OK();
  }
  uint32_t v;
  bool overflow;
  if (ParseUnsigned(text, &v, &overflow)) {
    *attr = v;
    return Status::OK();
  }
  return BadNumber(what, text, overflow, std::numeric_limits<uint32_t>::max());
}

Status CheckUser(std::string_view user, const ParseOptions& options) {
  if (user.empty()) return Status::InvalidArgument("user ID is empty");
  if (user.size() > options.max_key_bytes) {
    return Status::InvalidArgument(fmt::format("user ID of {} bytes is over the limit of {}",
                                               user.size(), options.max_key_bytes));
  }
  return Status::OK();
}

Status CheckTtl(std::string_view text, uint64_t ttl, const ParseOptions& options, uint32_t* value,
                bool* is_ttl) {
  if (ttl == 0) return Status::InvalidArgument(fmt::format("TTL {} is zero", Quote(text)));
  if (ttl + options.now > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument(fmt::format(
        "TTL {} is too long: it would expire after 2106 (past 32-bit Unix time)", Quote(text)));
  }
  *value = static_cast<uint32_t>(ttl);
  *is_ttl = true;
  return Status::OK();
}

Status CheckExpiry(std::string_view text, int64_t at, const ParseOptions& options, uint32_t* value,
                   bool* is_ttl) {
  if (at <= static_cast<int64_t>(options.now)) {
    return Status::InvalidArgument(
        fmt::format("expiry {} is in the past (now is {})", Quote(text), options.now));
  }
  if (at > static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
    return Status::InvalidArgument(
        fmt::format("expiry {} is after 2106 (past 32-bit Unix time)", Quote(text)));
  }
  *value = static_cast<uint32_t>(at);
  *is_ttl = false;
  return Status::OK();
}

// Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

unsigned DaysInMonth(int64_t y, unsigned m) {
  static constexpr unsigned kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// n digits at s[pos] into *v.
bool Digits(std::string_view s, size_t pos, size_t n, unsigned* v) {
  if (pos + n > s.size()) return false;
  unsigned r = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!IsDigit(s[i])) return false;
    r = r * 10 + static_cast<unsigned>(s[i] - '0');
  }
  *v = r;
  return true;
}

// "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" into Unix seconds (the
// fraction is dropped). False if `s` is not of that form or names no real time.
bool ParseIso8601(std::string_view s, int64_t* out) {
  unsigned y, mo, d, h, mi, sec;
  if (s.size() < 20 || !Digits(s, 0, 4, &y) || s[4] != '-' || !Digits(s, 5, 2, &mo) ||
      s[7] != '-' || !Digits(s, 8, 2, &d) || (s[10] != 'T' && s[10] != 't') ||
      !Digits(s, 11, 2, &h) || s[13] != ':' || !Digits(s, 14, 2, &mi) || s[16] != ':' ||
      !Digits(s, 17, 2, &sec)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo) || h > 23 || mi > 59 || sec > 59) {
    return false;
  }
  size_t pos = 19;
  if (s[pos] == '.') {
    ++pos;
    const size_t start = pos;
    while (pos < s.size() && IsDigit(s[pos])) ++pos;
    if (pos == start || pos - start > 9) return false;
  }
  int64_t offset = 0;
  const std::string_view zone = s.substr(pos);
  if (zone == "Z" || zone == "z") {
    offset = 0;
  } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':') {
    unsigned oh, om;
    if (!Digits(zone, 1, 2, &oh) || !Digits(zone, 4, 2, &om) || oh > 23 || om > 59) return false;
    offset = (zone[0] == '+' ? 1 : -1) * static_cast<int64_t>(oh * 3600 + om * 60);
  } else {
    return false;
  }
  *out = DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset;
  return true;
}

Status NotUnderstood(std::string_view text) {
  return Status::InvalidArgument(
      fmt::format("TTL or expiry {} is not understood (seconds, 30d/12h/15m/90s, @<unix seconds>, "
                  "2026-12-01T00:00:00Z or never)",
                  Quote(text)));
}

// A segment's expiry when its line gives none.
Status DefaultWhen(const ParseOptions& options, SegmentUpdate* u) {
  if (!options.default_ttl) {
    return Status::InvalidArgument("no TTL or expiry and no --default-ttl");
  }
  if (*options.default_ttl == 0) return Status::InvalidArgument("--default-ttl is zero");
  if (uint64_t{*options.default_ttl} + options.now > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("--default-ttl is too long: past 32-bit Unix time");
  }
  u->value = *options.default_ttl;
  u->ttl = true;
  return Status::OK();
}

// A header's field name: starts with a letter, '_' or a non-ASCII (UTF-8) byte.
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// A field that reads as a value of a data line: a number, "@unix", an ISO time, "never".
bool LooksLikeData(std::string_view field) {
  return !field.empty() && (IsDigit(field.front()) || field.front() == '@' || field == "never");
}

// Whether `line`, in `format` with `delimiter`, is recognisably a header: its
// segment field is a name and none of the fields after it reads as data (so
// "u1,x42,3600" is a data line with a bad segment ID, reported as such).
bool IsHeader(std::string_view line, Format format, char delimiter) {
  const bool grouped = format == Format::kGrouped;
  const size_t user_end = line.find(grouped ? '\t' : delimiter);
  if (user_end == std::string_view::npos) return false;
  const std::string_view separators =
      grouped ? std::string_view(",:") : std::string_view(&delimiter, 1);
  std::string_view rest = line.substr(user_end + 1);
  for (bool segment_field = true;; segment_field = false) {
    const size_t end = rest.find_first_of(separators);
    const std::string_view field = rest.substr(0, end);
    if (segment_field ? field.empty() || !IsNameStart(field.front()) : LooksLikeData(field)) {
      return false;
    }
    if (end == std::string_view::npos) return true;
    rest = rest.substr(end + 1);
  }
}

Status ParseRow(std::string_view line, char delimiter, const ParseOptions& options,
                ParsedLine* out) {
  std::string_view fields[kMaxRowFields];
  size_t n = 0;
  SEGSTORE_RETURN_IF_ERROR(text::SplitRow(line, delimiter, fields, "", &n));
  if (n < 2) {
    return Status::InvalidArgument(fmt::format("1 field, at least 2 (user,segment separated by {})",
                                               DelimiterName(delimiter)));
  }
  if (Status s = CheckUser(fields[0], options); !s.ok()) return s;
  SegmentUpdate u;
  if (Status s = ParseSegmentId(fields[1], &u.id); !s.ok()) return s;
  if (n > 2 && !fields[2].empty()) {
    if (Status s = ParseWhen(fields[2], options, &u.value, &u.ttl); !s.ok()) return s;
  } else if (Status s = DefaultWhen(options, &u); !s.ok()) {
    return s;
  }
  if (n > 3) {
    if (Status s = ParseAttr("attr1", fields[3], &u.attr1); !s.ok()) return s;
  }
  if (n > 4) {
    if (Status s = ParseAttr("attr2", fields[4], &u.attr2); !s.ok()) return s;
  }
  out->user = fields[0];
  out->segments.push_back(u);
  return Status::OK();
}

Status Duplicate(uint64_t id) {
  return Status::InvalidArgument(fmt::format("segment ID {} appears twice in the line", id));
}

Status CheckDuplicates(const std::vector<SegmentUpdate>& segments) {
  if (segments.size() <= 16) {
    for (size_t i = 1; i < segments.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (segments[i].id == segments[j].id) return Duplicate(segments[i].id);
      }
    }
    return Status::OK();
  }
  // Reused across lines: no allocation once it has grown.
  thread_local std::vector<uint64_t> scratch;
  scratch.clear();
  for (const SegmentUpdate& u : segments) scratch.push_back(u.id);
  std::sort(scratch.begin(), scratch.end());
  const auto dup = std::adjacent_find(scratch.begin(), scratch.end());
  if (dup != scratch.end()) return Duplicate(*dup);
  return Status::OK();
}

Status ParseGrouped(std::string_view line, const ParseOptions& options, ParsedLine* out) {
  const char* tab = Find(line, '\t');
  if (tab == nullptr) {
    return Status::InvalidArgument("no tab after the user ID (grouped: user<TAB>seg[:ttl],...)");
  }
  const std::string_view user = line.substr(0, static_cast<size_t>(tab - line.data()));
  if (Status s = CheckUser(user, options); !s.ok()) return s;
  const std::string_view list = line.substr(user.size() + 1);
  if (list.empty()) return Status::InvalidArgument("no segments after the tab");
  if (Find(list, '\t') != nullptr) {
    return Status::InvalidArgument(fmt::format(
        "{} tabs, a grouped line has one (user<TAB>seg[:ttl],...)", 1 + Count(list, '\t')));
  }

  // Segment IDs in increasing order (the usual export) need no duplicate search.
  bool increasing = true;
  size_t pos = 0;
  for (size_t i = 1;; ++i) {
    const char* comma = Find(list.substr(pos), ',');
    const size_t end = comma == nullptr ? list.size() : static_cast<size_t>(comma - list.data());
    const std::string_view item = list.substr(pos, end - pos);
    const size_t colon = item.find(':');
    SegmentUpdate u;
    Status s = item.empty() ? Status::InvalidArgument("empty (two commas, or one at an end)")
                            : ParseSegmentId(item.substr(0, colon), &u.id);
    if (s.ok()) {
      s = colon == std::string_view::npos
              ? DefaultWhen(options, &u)
              : ParseWhen(item.substr(colon + 1), options, &u.value, &u.ttl);
    }
    if (!s.ok()) {
      return Status::InvalidArgument(fmt::format("segment {} of the line: {}", i, s.message()));
    }
    if (!out->segments.empty() && u.id <= out->segments.back().id) increasing = false;
    out->segments.push_back(u);
    if (comma == nullptr) break;
    pos = end + 1;
  }
  if (!increasing) {
    if (Status s = CheckDuplicates(out->segments); !s.ok()) return s;
  }
  out->user = user;
  return Status::OK();
}

}  // namespace

std::string Quoted(std::string_view text) { return Quote(text); }

bool ParseIsoTime(std::string_view text, int64_t* seconds) { return ParseIso8601(text, seconds); }

Status ParseWhen(std::string_view text, const ParseOptions& options, uint32_t* value, bool* ttl) {
  if (text.empty()) return Status::InvalidArgument("TTL or expiry is empty");
  if (text == "never") {
    *value = kNever;
    *ttl = false;
    return Status::OK();
  }
  bool overflow;
  if (text.front() == '@') {
    uint64_t at;
    if (!ParseUnsigned(text.substr(1), &at, &overflow)) {
      if (overflow)
        at = std::numeric_limits<uint64_t>::max();
      else
        return NotUnderstood(text);
    }
    return CheckExpiry(text, static_cast<int64_t>(std::min<uint64_t>(at, INT64_MAX)), options,
                       value, ttl);
  }
  if (!IsDigit(text.front())) return NotUnderstood(text);

  // Leading digits, then maybe a unit or an ISO-8601 time.
  size_t n = 0;
  while (n < text.size() && IsDigit(text[n])) ++n;
  if (n == text.size()) {
    uint64_t v;
    const bool fits = ParseUnsigned(text, &v, &overflow);
    if (n >= 10) {  // absolute Unix seconds
      return CheckExpiry(text,
                         fits ? static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)) : INT64_MAX,
                         options, value, ttl);
    }
    return CheckTtl(text, v, options, value, ttl);
  }
  if (n + 1 == text.size()) {
    uint64_t mult;
    switch (text[n]) {
      case 's':
        mult = 1;
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
        return NotUnderstood(text);
    }
    uint64_t v;
    if (!ParseUnsigned(text.substr(0, n), &v, &overflow) ||
        v > std::numeric_limits<uint32_t>::max()) {
      v = std::numeric_limits<uint32_t>::max();  // too long either way
    }
    return CheckTtl(text, v * mult, options, value, ttl);
  }
  if (n == 4 && text[4] == '-') {
    int64_t at;
    if (!ParseIso8601(text, &at)) {
      return Status::InvalidArgument(fmt::format(
          "expiry {} is not a valid ISO-8601 UTC time (like 2026-12-01T00:00:00Z)", Quote(text)));
    }
    return CheckExpiry(text, at, options, value, ttl);
  }
  return NotUnderstood(text);
}

LineParser::LineParser(const ParseOptions& options)
    : options_(options), format_(options.format), delimiter_(options.delimiter) {
  // An explicit delimiter other than a tab can only mean a row file.
  if (format_ == Format::kAuto && delimiter_ != 0 && delimiter_ != '\t') format_ = Format::kRows;
  if (format_ == Format::kGrouped) delimiter_ = '\t';
}

Status LineParser::Parse(std::string_view line, uint64_t line_number, ParsedLine* out) {
  out->segments.clear();
  out->user = {};
  out->header = false;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line_number == 1 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);  // UTF-8 BOM
  if (line.empty() || line.front() == '#' || IsBlank(line)) return Status::OK();

  // The shape of this line: settled, or detected from it.
  Format format = format_;
  char delimiter = delimiter_;
  bool settles = false;  // this line decides format_/delimiter_ if it parses
  if (format == Format::kAuto) {
    const char* tab = Find(line, '\t');
    if (tab == nullptr) {
      format = Format::kRows;
      delimiter = delimiter_ == '\t' ? '\t' : ',';
      settles = true;
    } else {
      const std::string_view rest = line.substr(static_cast<size_t>(tab - line.data()) + 1);
      if (Find(rest, '\t') != nullptr) {  // two tabs or more: a tab-separated row
        format = Format::kRows;
        delimiter = '\t';
        settles = true;
      } else if (rest.find_first_of(",:") != std::string_view::npos) {
        format = Format::kGrouped;
        delimiter = '\t';
        settles = true;
      } else {
        // "user<TAB>segment": the same in both formats; the next line decides.
        format = Format::kRows;
        delimiter = '\t';
      }
    }
  } else if (format == Format::kRows && delimiter == 0) {
    delimiter = Find(line, '\t') != nullptr ? '\t' : ',';
    settles = true;
  }

  if (line_number == 1 && IsHeader(line, format, delimiter)) {
    out->header = true;
    return Status::OK();
  }

  Status s;
  if (format == Format::kGrouped) {
    s = ParseGrouped(line, options_, out);
  } else {
    s = ParseRow(line, delimiter, options_, out);
  }
  if (!s.ok()) {
    out->segments.clear();
    return s;
  }
  if (settles) {
    format_ = format;
    delimiter_ = delimiter;
  }
  return Status::OK();
}

}  // namespace segstore::loader
