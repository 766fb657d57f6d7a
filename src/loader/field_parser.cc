#include "loader/field_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <system_error>

#include "common/utf8.h"
#include "loader/parser.h"
#include "loader/text.h"
#include "segstore/result.h"

namespace segstore::loader {

namespace {

constexpr size_t kMaxRowFields = 4;

using text::DelimiterName;
using text::IsBlank;
using text::IsDigit;

// One field of a row: its text between the quotes (or all of it), and
// whether it holds doubled quotes to collapse.
struct Cell {
  std::string_view text;
  bool escaped = false;
};

// Cuts `line` at each `delimiter` outside quotes (RFC 4180) into cells, the
// first kMaxRowFields of them; *n gets how many there are.
Status SplitCells(std::string_view line, char delimiter, Cell* cells, size_t* n) {
  *n = 0;
  size_t pos = 0;
  for (;;) {
    Cell cell;
    size_t end;  // the delimiter after the field, or line.size()
    if (pos < line.size() && line[pos] == '"') {
      size_t from = pos + 1;
      for (;;) {
        const size_t q = line.find('"', from);
        if (q == std::string_view::npos) {
          return Status::InvalidArgument(
              fmt::format("field {} has an opening quote and no closing one", *n + 1));
        }
        if (q + 1 < line.size() && line[q + 1] == '"') {  // "" inside: one quote
          cell.escaped = true;
          from = q + 2;
          continue;
        }
        cell.text = line.substr(pos + 1, q - pos - 1);
        end = q + 1;
        break;
      }
      if (end < line.size() && line[end] != delimiter) {
        const size_t stop = line.find(delimiter, end);
        return Status::InvalidArgument(fmt::format("field {}: {} after its closing quote", *n + 1,
                                                   Quoted(line.substr(end, stop - end))));
      }
    } else {
      end = std::min(line.find(delimiter, pos), line.size());
      cell.text = line.substr(pos, end - pos);
    }
    if (*n < kMaxRowFields) cells[*n] = cell;
    ++*n;
    if (end == line.size()) return Status::OK();
    pos = end + 1;
  }
}

// A cell's text with "" collapsed, into *out (its capacity kept).
void Unescape(const Cell& cell, std::string* out) {
  if (!cell.escaped) {
    out->assign(cell.text);
    return;
  }
  out->clear();
  for (size_t i = 0; i < cell.text.size(); ++i) {
    out->push_back(cell.text[i]);
    if (cell.text[i] == '"') ++i;  // the second of a pair
  }
}

// The cell's text as a view: the cell itself, or `scratch` when it had "".
std::string_view Text(const Cell& cell, std::string* scratch) {
  if (!cell.escaped) return cell.text;
  Unescape(cell, scratch);
  return *scratch;
}

// Line 1 as a header: two fields or more, each one of the usual column
// names, in any case, quoted or not.
bool IsHeader(std::string_view line) {
  static constexpr std::string_view kNames[] = {"user",  "user_id",    "uid",       "id",    "name",
                                                "field", "field_name", "key",       "value", "type",
                                                "ttl",   "expiry",     "expires_at"};
  return text::IsHeaderLine(line, kNames, /*unquote=*/true);
}

// Whether `s` is a JSON number; *integral: without a fraction or an exponent.
bool IsJsonNumber(std::string_view s, bool* integral) {
  size_t i = 0;
  const size_t n = s.size();
  auto digits = [&] {
    const size_t from = i;
    while (i < n && IsDigit(s[i])) ++i;
    return i > from;
  };
  if (i < n && s[i] == '-') ++i;
  if (i < n && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  *integral = true;
  if (i < n && s[i] == '.') {
    ++i;
    if (!digits()) return false;
    *integral = false;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
    *integral = false;
  }
  return i == n;
}

// from_chars over the whole of `s`: OK, not a number, or out of range.
template <typename T>
std::errc FromChars(std::string_view s, T* v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  if (ec == std::errc() && p != s.data() + s.size()) return std::errc::invalid_argument;
  return ec;
}

Status ParseInt(std::string_view text, FieldValue* out) {
  int64_t v = 0;
  // An optional '-' and digits only: from_chars alone would take "-" + nothing else, no '+'.
  const size_t sign = !text.empty() && text.front() == '-' ? 1 : 0;
  const bool digits = text.size() > sign && std::all_of(text.begin() + sign, text.end(), IsDigit);
  const std::errc ec = digits ? FromChars(text, &v) : std::errc::invalid_argument;
  if (ec == std::errc::result_out_of_range) {
    return Status::InvalidArgument(
        fmt::format("int {} is out of range (-2^63 to 2^63-1)", Quoted(text)));
  }
  if (ec != std::errc()) {
    return Status::InvalidArgument(fmt::format("int {} is not a 64-bit integer", Quoted(text)));
  }
  out->type = FieldValue::Type::kInt;
  out->i = v;
  return Status::OK();
}

Status ParseDouble(std::string_view text, FieldValue* out) {
  double v = 0;
  // Decimal or exponent forms only: from_chars would take "inf", "nan" and hex too.
  const bool plain =
      !text.empty() && text.find_first_not_of("0123456789+-.eE") == std::string_view::npos;
  const std::errc ec = plain ? FromChars(text, &v) : std::errc::invalid_argument;
  if (ec == std::errc::result_out_of_range) {
    return Status::InvalidArgument(fmt::format("double {} is out of range", Quoted(text)));
  }
  if (ec != std::errc()) {
    return Status::InvalidArgument(
        fmt::format("double {} is not a number (like 0.5, -3 or 1e-3)", Quoted(text)));
  }
  out->type = FieldValue::Type::kDouble;
  out->d = v;
  return Status::OK();
}

Status TooLong(size_t size, uint32_t max_value_bytes) {
  return Status::InvalidArgument(
      fmt::format("value of {} bytes is over the limit of {}", size, max_value_bytes));
}

Status ParseString(std::string_view text, uint32_t max_value_bytes, FieldValue* out) {
  if (text.size() > max_value_bytes) return TooLong(text.size(), max_value_bytes);
  if (!IsUtf8(text)) {
    return Status::InvalidArgument(
        fmt::format("str {} is not valid UTF-8 (write bytes:HEX)", Quoted(text)));
  }
  out->type = FieldValue::Type::kString;
  out->s.assign(text);
  return Status::OK();
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Status ParseBytes(std::string_view text, uint32_t max_value_bytes, FieldValue* out) {
  if (text.size() % 2 != 0) {
    return Status::InvalidArgument(
        fmt::format("bytes {} has an odd number of hex digits", Quoted(text)));
  }
  if (text.size() / 2 > max_value_bytes) return TooLong(text.size() / 2, max_value_bytes);
  out->s.clear();
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = HexDigit(text[i]), lo = HexDigit(text[i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(fmt::format("bytes {} is not hex", Quoted(text)));
    }
    out->s.push_back(static_cast<char>(hi * 16 + lo));
  }
  out->type = FieldValue::Type::kBytes;
  return Status::OK();
}

Status ParseTime(std::string_view text, FieldValue* out) {
  int64_t t = 0;
  if (!text.empty() && std::all_of(text.begin(), text.end(), IsDigit)) {
    uint64_t v = 0;
    t = FromChars(text, &v) == std::errc() && v <= std::numeric_limits<uint32_t>::max()
            ? static_cast<int64_t>(v)
            : std::numeric_limits<int64_t>::max();
  } else if (!ParseIsoTime(text, &t)) {
    return Status::InvalidArgument(fmt::format(
        "time {} is not Unix seconds or an ISO-8601 time like 2026-12-01T00:00:00Z", Quoted(text)));
  }
  if (t < 0) return Status::InvalidArgument(fmt::format("time {} is before 1970", Quoted(text)));
  if (t > static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
    return Status::InvalidArgument(
        fmt::format("time {} is after 2106 (past 32-bit Unix time)", Quoted(text)));
  }
  out->type = FieldValue::Type::kTime;
  out->i = t;
  return Status::OK();
}

// A value with no prefix, by kAuto's rule: a JSON number, else a string.
Status ParseAuto(std::string_view text, uint32_t max_value_bytes, FieldValue* out) {
  bool integral = false;
  if (!IsJsonNumber(text, &integral)) return ParseString(text, max_value_bytes, out);
  Status s = integral ? ParseInt(text, out) : ParseDouble(text, out);
  if (s.ok()) return s;
  return Status::InvalidArgument(
      fmt::format("number {} is out of the {} range (write str:{} for text)", Quoted(text),
                  integral ? "64-bit int" : "double", text.substr(0, 20)));
}

Status ParseTyped(std::string_view text, FieldType type, uint32_t max_value_bytes,
                  FieldValue* out) {
  out->i = 0;
  out->d = 0;
  out->s.clear();  // its capacity kept
  switch (type) {
    case FieldType::kAuto:
      return ParseAuto(text, max_value_bytes, out);
    case FieldType::kInt:
      return ParseInt(text, out);
    case FieldType::kDouble:
      return ParseDouble(text, out);
    case FieldType::kString:
      return ParseString(text, max_value_bytes, out);
    case FieldType::kBytes:
      return ParseBytes(text, max_value_bytes, out);
    case FieldType::kTime:
      return ParseTime(text, out);
  }
  return Status::InvalidArgument("an unknown field type");
}

Status CheckUser(std::string_view user, const FieldParseOptions& options) {
  if (user.empty()) return Status::InvalidArgument("user ID is empty");
  if (user.size() > options.max_key_bytes) {
    return Status::InvalidArgument(fmt::format("user ID of {} bytes is over the limit of {}",
                                               user.size(), options.max_key_bytes));
  }
  return Status::OK();
}

Status CheckName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("field name is empty");
  if (name.size() > kMaxFieldNameBytes) {
    return Status::InvalidArgument(fmt::format("field name of {} bytes is over the limit of {}",
                                               name.size(), kMaxFieldNameBytes));
  }
  return Status::OK();
}

// The TTL field (empty: the default) into the field's expiry.
Status ParseExpiry(std::string_view text, const FieldParseOptions& options, FieldUpdate* f) {
  if (text.empty()) {
    if (!options.default_ttl) {
      f->expiry = kNever;
      f->ttl = false;
      return Status::OK();
    }
    if (*options.default_ttl == 0) return Status::InvalidArgument("--default-ttl is zero");
    if (uint64_t{*options.default_ttl} + options.now > std::numeric_limits<uint32_t>::max()) {
      return Status::InvalidArgument("--default-ttl is too long: past 32-bit Unix time");
    }
    f->expiry = *options.default_ttl;
    f->ttl = true;
    return Status::OK();
  }
  ParseOptions when;
  when.now = options.now;
  return ParseWhen(text, when, &f->expiry, &f->ttl);
}

}  // namespace

bool ParseFieldTypeName(std::string_view name, FieldType* type) {
  static constexpr std::pair<std::string_view, FieldType> kTypes[] = {
      {"auto", FieldType::kAuto},  {"int", FieldType::kInt},     {"double", FieldType::kDouble},
      {"str", FieldType::kString}, {"bytes", FieldType::kBytes}, {"time", FieldType::kTime}};
  for (const auto& [n, t] : kTypes) {
    if (n == name) {
      *type = t;
      return true;
    }
  }
  return false;
}

Status ParseFieldValue(std::string_view text, FieldType untyped, uint32_t max_value_bytes,
                       FieldValue* out) {
  FieldType type = untyped;
  const size_t colon = text.find(':');
  if (colon != std::string_view::npos && colon <= 6 &&
      ParseFieldTypeName(text.substr(0, colon), &type) && type != FieldType::kAuto) {
    text.remove_prefix(colon + 1);
  } else {
    type = untyped;
    if (text.empty()) return Status::InvalidArgument("value is empty (the empty string is str:)");
  }
  return ParseTyped(text, type, max_value_bytes, out);
}

FieldParser::FieldParser(const FieldParseOptions& options)
    : options_(options), delimiter_(options.delimiter) {}

Status FieldParser::Parse(std::string_view line, uint64_t line_number, FieldRow* out) {
  out->user.clear();
  out->header = false;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line_number == 1 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);  // UTF-8 BOM
  if (line.empty() || line.front() == '#' || IsBlank(line)) return Status::OK();
  if (line_number == 1 && IsHeader(line)) {
    out->header = true;
    return Status::OK();
  }

  const char delimiter = delimiter_ != 0                     ? delimiter_
                         : text::Find(line, '\t') != nullptr ? '\t'
                                                             : ',';
  Cell cells[kMaxRowFields];
  size_t n = 0;
  Status s = SplitCells(line, delimiter, cells, &n);
  if (s.ok() && n < 3) {
    s =
        Status::InvalidArgument(fmt::format("{} field{}, at least 3 (user,name,value[,ttl] "
                                            "separated by {})",
                                            n, n == 1 ? "" : "s", DelimiterName(delimiter)));
  } else if (s.ok() && n > kMaxRowFields) {
    s = Status::InvalidArgument(
        fmt::format("{} fields, at most {} (user,name,value[,ttl])", n, kMaxRowFields));
  }
  if (s.ok()) {
    Unescape(cells[0], &out->user);
    s = CheckUser(out->user, options_);
  }
  if (s.ok()) {
    Unescape(cells[1], &out->field.name);
    s = CheckName(out->field.name);
  }
  if (s.ok()) {
    s = ParseFieldValue(Text(cells[2], &scratch_), options_.untyped, options_.max_value_bytes,
                        &out->field.value);
  }
  if (s.ok()) s = ParseExpiry(n > 3 ? Text(cells[3], &scratch_) : "", options_, &out->field);
  if (!s.ok()) {
    out->user.clear();
    return s;
  }
  delimiter_ = delimiter;
  return Status::OK();
}

}  // namespace segstore::loader
