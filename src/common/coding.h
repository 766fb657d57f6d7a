// Little-endian fixed-width encoding into and out of byte buffers. Every
// on-device and on-wire integer goes through these, so the byte order is
// explicit and no unaligned pointer is ever dereferenced.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace segstore {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "segstore assumes a little-endian host");

inline void EncodeFixed16(void* dst, uint16_t v) { std::memcpy(dst, &v, sizeof v); }
inline void EncodeFixed32(void* dst, uint32_t v) { std::memcpy(dst, &v, sizeof v); }
inline void EncodeFixed64(void* dst, uint64_t v) { std::memcpy(dst, &v, sizeof v); }

inline uint16_t DecodeFixed16(const void* src) {
  uint16_t v;
  std::memcpy(&v, src, sizeof v);
  return v;
}
inline uint32_t DecodeFixed32(const void* src) {
  uint32_t v;
  std::memcpy(&v, src, sizeof v);
  return v;
}
inline uint64_t DecodeFixed64(const void* src) {
  uint64_t v;
  std::memcpy(&v, src, sizeof v);
  return v;
}

// LEB128 varints (7 bits a byte, least significant first), as the profile
// codec stores its counts and expiries.
inline void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
// Reads one from [p, end), advancing p: false when it is truncated or holds
// more than 64 bits.
inline bool GetVarint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
  uint64_t result = 0;
  for (unsigned shift = 0; shift < 64 && p < end; shift += 7) {
    uint8_t b = *p++;
    result |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) {
      if (shift == 63 && b > 1) return false;  // more than 64 bits
      *v = result;
      return true;
    }
  }
  return false;
}

// Rounds `v` up or down to a multiple of `align`, which must be a power of two.
constexpr uint64_t AlignUp(uint64_t v, uint64_t align) { return (v + align - 1) & ~(align - 1); }
constexpr uint64_t AlignDown(uint64_t v, uint64_t align) { return v & ~(align - 1); }

}  // namespace segstore
