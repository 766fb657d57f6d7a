// BitWriter and BitReader: the bit-level stream of the profile codec. Bits
// are packed least-significant first. The reader is safe on any bytes: it
// never reads past its input, and a read past the end sets overrun() and
// yields zeros, so a decoder checks once at the end instead of on every read.
// Not thread-safe; cheap to construct.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

namespace segstore::profile {

// Rice codes of gaps (the codec's sorted ids): g as q = g >> k ones and a
// zero, then the k low bits; q >= kEscapeRun: kEscapeRun ones, then g in 64
// bits.
inline constexpr unsigned kEscapeRun = 32;

// Bits a gap g takes with Rice parameter k.
inline uint64_t RiceBits(uint64_t g, unsigned k) {
  const uint64_t q = g >> k;
  return q >= kEscapeRun ? kEscapeRun + 64 : q + 1 + k;
}

class BitWriter {
 public:
  explicit BitWriter(std::string* out) : out_(out) {}
  // Appends the low `n` bits of `value` (n <= 57).
  void Write(uint64_t value, unsigned n) {
    acc_ |= (value & Mask(n)) << bits_;
    bits_ += n;
    if (bits_ >= 32) {
      char b[4];
      std::memcpy(b, &acc_, 4);  // little-endian host (checked in common/coding.h)
      out_->append(b, 4);
      acc_ >>= 32;
      bits_ -= 32;
    }
  }
  void Write64(uint64_t value) {
    Write(value & 0xffffffffu, 32);
    Write(value >> 32, 32);
  }
  // `q` ones then a zero (q < 57).
  void WriteUnary(unsigned q) { Write(Mask(q), q + 1); }
  // `g` Rice-coded with parameter k (k <= kEscapeRun).
  void WriteRice(uint64_t g, unsigned k) {
    const uint64_t q = g >> k;
    if (q >= kEscapeRun) {
      Write(Mask(kEscapeRun), kEscapeRun);
      Write64(g);
    } else {
      WriteUnary(static_cast<unsigned>(q));
      if (k > 0) Write(g, k);
    }
  }
  // Pads to a byte and hands everything to the output.
  void Finish() {
    while (bits_ > 0) {
      out_->push_back(static_cast<char>(acc_ & 0xff));
      acc_ >>= 8;
      bits_ = bits_ > 8 ? bits_ - 8 : 0;
    }
  }

 private:
  static uint64_t Mask(unsigned n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }
  std::string* out_;
  uint64_t acc_ = 0;
  unsigned bits_ = 0;
};

class BitReader {
 public:
  BitReader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}

  // The next `n` bits (n <= 56).
  uint64_t Read(unsigned n) {
    if (avail_ < n) {
      Refill();
      if (avail_ < n) return Overrun();
    }
    uint64_t v = buf_ & ((uint64_t{1} << n) - 1);
    buf_ >>= n;
    avail_ -= n;
    return v;
  }
  uint64_t Read64() {
    uint64_t lo = Read(32);
    return lo | (Read(32) << 32);
  }
  // Counts ones up to `limit` (< 56): returns the count and consumes the
  // zero after them; returns `limit` (consuming only the ones) when the run
  // is that long.
  unsigned ReadUnary(unsigned limit) {
    if (avail_ <= limit) Refill();
    unsigned ones = static_cast<unsigned>(std::countr_one(buf_));
    if (ones >= limit) {
      if (avail_ < limit) return static_cast<unsigned>(Overrun());
      buf_ >>= limit;
      avail_ -= limit;
      return limit;
    }
    if (avail_ < ones + 1) return static_cast<unsigned>(Overrun());
    buf_ >>= ones + 1;
    avail_ -= ones + 1;
    return ones;
  }
  // A gap WriteRice wrote with parameter k.
  uint64_t ReadRice(unsigned k) {
    const unsigned q = ReadUnary(kEscapeRun);
    if (q >= kEscapeRun) return Read64();
    return (uint64_t{q} << k) | (k > 0 ? Read(k) : 0);
  }
  bool overrun() const { return overrun_; }
  // Bits not yet read.
  uint64_t remaining_bits() const { return avail_ + 8 * static_cast<uint64_t>(end_ - p_); }

 private:
  // Tops the buffer up to at least 57 bits, or to the end of the input.
  void Refill() {
    if (end_ - p_ >= 8) {
      uint64_t w;
      std::memcpy(&w, p_, 8);
      buf_ |= w << avail_;  // bits above what is consumed below are the right ones anyway
      unsigned take = (63 - avail_) >> 3;
      p_ += take;
      avail_ += 8 * take;
      return;
    }
    while (avail_ <= 56 && p_ < end_) {
      buf_ |= uint64_t{*p_++} << avail_;
      avail_ += 8;
    }
  }
  uint64_t Overrun() {
    overrun_ = true;
    buf_ = 0;
    avail_ = 0;
    p_ = end_;
    return 0;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t buf_ = 0;
  unsigned avail_ = 0;
  bool overrun_ = false;
};

}  // namespace segstore::profile
