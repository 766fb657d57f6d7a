// Whether bytes are text: the one UTF-8 check every layer uses (a
// MessagePack str on the wire, a profile's string field, a loaded file's
// str: value, a RESP value given TYPE string).
#pragma once

#include <cstddef>
#include <string_view>

namespace segstore {

// Whether `s` is well-formed UTF-8 (RFC 3629): no overlong forms, no
// surrogates (U+D800..U+DFFF), no code points past U+10FFFF, no sequence cut
// short. The empty string is.
inline bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // else overlong
      if (c == 0xED) hi = 0x9F;  // else a surrogate
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // else overlong
      if (c == 0xF4) hi = 0x8F;  // else past U+10FFFF
    } else {
      return false;  // a continuation byte first, C0/C1 (overlong), F5..FF
    }
    if (len > s.size() - i) return false;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < lo || second > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < 0x80 || b > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace segstore
