// The small text helpers the parsers of src/loader share (parser.cc for
// segment files, link_parser.cc for link files, field_parser.cc for field
// files): finding and counting a byte, blank lines, header lines, and
// cutting a row into its fields.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "segstore/result.h"
#include "segstore/status.h"

namespace segstore::loader::text {

inline const char* Find(std::string_view s, char c) {
  return static_cast<const char*>(std::memchr(s.data(), c, s.size()));
}

inline size_t Count(std::string_view s, char c) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), c));
}

inline bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; });
}

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Line 1 as a header: two fields or more (split at ',' and tabs), each one
// of `names` (lowercase, at most 10 bytes), compared without case;
// `unquote`: a field in double quotes counts without them.
inline bool IsHeaderLine(std::string_view line, std::span<const std::string_view> names,
                         bool unquote) {
  auto is_name = [&](std::string_view field) {
    if (unquote && field.size() >= 2 && field.front() == '"' && field.back() == '"') {
      field = field.substr(1, field.size() - 2);
    }
    if (field.empty() || field.size() > 10) return false;
    char lower[10];
    for (size_t i = 0; i < field.size(); ++i) {
      const char c = field[i];
      lower[i] = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    }
    return std::find(names.begin(), names.end(), std::string_view(lower, field.size())) !=
           names.end();
  };
  size_t fields = 0;
  for (;;) {
    const size_t end = line.find_first_of(",\t");
    if (!is_name(line.substr(0, end))) return false;
    ++fields;
    if (end == std::string_view::npos) return fields >= 2;
    line.remove_prefix(end + 1);
  }
}

// "tab", or the delimiter quoted: for messages.
inline std::string DelimiterName(char d) {
  if (d == '\t') return "tab";
  return fmt::format("'{}'", d);
}

// Cuts `line` at each `delimiter` into fields (pointing into the line), at
// most fields.size() of them: *n gets how many. InvalidArgument for more
// ("6 fields, at most 5<shape>"); fewer than 2 is the caller's to refuse.
inline Status SplitRow(std::string_view line, char delimiter, std::span<std::string_view> fields,
                       std::string_view shape, size_t* n) {
  *n = 0;
  size_t pos = 0;
  for (;;) {
    const char* p = Find(line.substr(pos), delimiter);
    const size_t end = p == nullptr ? line.size() : static_cast<size_t>(p - line.data());
    if (*n == fields.size()) {
      return Status::InvalidArgument(fmt::format(
          "{} fields, at most {}{}", fields.size() + 1 + Count(line.substr(pos), delimiter),
          fields.size(), shape));
    }
    fields[(*n)++] = line.substr(pos, end - pos);
    if (p == nullptr) return Status::OK();
    pos = end + 1;
  }
}

}  // namespace segstore::loader::text
