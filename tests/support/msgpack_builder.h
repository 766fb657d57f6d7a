// Mp: a MessagePack writer for hand-made bodies in tests. Independent of the
// library src/proto/wire.cc uses, so hostile and unusual encodings (negative
// numbers, binary users, wide forms of small numbers, non-string keys,
// truncated or lying headers) can be built. Header-only; no dependencies.
#pragma once

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace segstore::testing {

class Mp {
 public:
  Mp& Map(uint32_t n) { return Head(n, 0x80, 16, 0xde, 0xdf); }
  Mp& Arr(uint32_t n) { return Head(n, 0x90, 16, 0xdc, 0xdd); }
  Mp& Str(std::string_view s) {
    if (s.size() < 32) {
      Byte(0xa0 | s.size());
    } else if (s.size() < 256) {
      Byte(0xd9).Be(s.size(), 1);
    } else if (s.size() < 65536) {
      Byte(0xda).Be(s.size(), 2);
    } else {
      Byte(0xdb).Be(s.size(), 4);
    }
    b_.append(s);
    return *this;
  }
  Mp& Bin(std::string_view s) {
    if (s.size() < 256) {
      Byte(0xc4).Be(s.size(), 1);
    } else {
      Byte(0xc6).Be(s.size(), 4);
    }
    b_.append(s);
    return *this;
  }
  Mp& U(uint64_t v) {
    if (v < 128) return Byte(static_cast<uint8_t>(v));
    if (v < 256) return Byte(0xcc).Be(v, 1);
    if (v < 65536) return Byte(0xcd).Be(v, 2);
    if (v <= UINT32_MAX) return Byte(0xce).Be(v, 4);
    return Byte(0xcf).Be(v, 8);
  }
  Mp& U64(uint64_t v) { return Byte(0xcf).Be(v, 8); }  // the widest form, whatever v
  Mp& I8(int8_t v) { return Byte(0xd0).Byte(static_cast<uint8_t>(v)); }
  Mp& I(int64_t v) {  // v < 0
    if (v >= -32) return Byte(static_cast<uint8_t>(v));
    return Byte(0xd3).Be(static_cast<uint64_t>(v), 8);
  }
  Mp& F64(double v) { return Byte(0xcb).Be(std::bit_cast<uint64_t>(v), 8); }
  Mp& F32(float v) { return Byte(0xca).Be(std::bit_cast<uint32_t>(v), 4); }
  // The timestamp extension (type -1): 32-bit seconds; the 64-bit form's raw
  // 8 bytes (nanoseconds << 34 | seconds).
  Mp& Ts32(uint32_t seconds) { return Byte(0xd6).Byte(0xff).Be(seconds, 4); }
  Mp& Ts64(uint64_t raw) { return Byte(0xd7).Byte(0xff).Be(raw, 8); }
  Mp& Nil() { return Byte(0xc0); }
  Mp& Bool(bool v) { return Byte(v ? 0xc3 : 0xc2); }
  Mp& Raw(std::initializer_list<uint8_t> bytes) {
    for (uint8_t x : bytes) Byte(x);
    return *this;
  }
  Mp& Append(std::string_view bytes) {
    b_.append(bytes);
    return *this;
  }
  const std::string& str() const { return b_; }
  operator std::string_view() const { return b_; }  // NOLINT: implicit by design

 private:
  Mp& Byte(uint64_t x) {
    b_.push_back(static_cast<char>(static_cast<uint8_t>(x)));
    return *this;
  }
  Mp& Be(uint64_t v, int width) {
    for (int k = width - 1; k >= 0; --k) Byte(v >> (8 * k));
    return *this;
  }
  Mp& Head(uint32_t n, uint8_t fix, uint32_t fix_max, uint8_t b16, uint8_t b32) {
    if (n < fix_max) return Byte(fix | n);
    if (n < 65536) return Byte(b16).Be(n, 2);
    return Byte(b32).Be(n, 4);
  }
  std::string b_;
};

}  // namespace segstore::testing
