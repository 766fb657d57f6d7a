// The small text helpers both parsers of src/loader use (parser.cc for
// segment files, link_parser.cc for link files): finding and counting a
// byte, blank lines, and cutting a row into its fields.
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
