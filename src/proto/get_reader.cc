#include "proto/get_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "common/utf8.h"

namespace segstore::proto::internal {
namespace {

// A forward cursor over the MessagePack forms a get answer is made of. Every
// read checks the bytes left; a form it does not expect reads as false.
class Cursor {
 public:
  explicit Cursor(std::string_view b) : p_(b.data()), end_(b.data() + b.size()) {}

  bool at_end() const { return p_ == end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

  bool MapHeader(uint32_t* n) { return Header(0x80, 0xde, n); }
  bool ArrayHeader(uint32_t* n) { return Header(0x90, 0xdc, n); }

  bool Str(std::string_view* s) {
    if (at_end()) return false;
    const auto b = static_cast<uint8_t>(*p_);
    uint64_t n = 0;
    if ((b & 0xe0) == 0xa0) {
      n = b & 0x1f;
      ++p_;
    } else if (b == 0xd9 || b == 0xda || b == 0xdb) {
      if (!BigEndianAfterTag(b == 0xd9 ? 1 : b == 0xda ? 2 : 4, &n)) return false;
    } else {
      return false;
    }
    if (n > left()) return false;
    *s = std::string_view(p_, n);
    p_ += n;
    return true;
  }

  // A bin, in any of its three forms.
  bool Bin(std::string_view* s) {
    if (at_end()) return false;
    const auto b = static_cast<uint8_t>(*p_);
    uint64_t n = 0;
    if (b != 0xc4 && b != 0xc5 && b != 0xc6) return false;
    if (!BigEndianAfterTag(b == 0xc4 ? 1 : b == 0xc5 ? 2 : 4, &n)) return false;
    if (n > left()) return false;
    *s = std::string_view(p_, n);
    p_ += n;
    return true;
  }

  // An unsigned integer in one of the unsigned forms, at most `max`.
  bool Uint(uint64_t max, uint64_t* v) {
    if (at_end()) return false;
    const auto b = static_cast<uint8_t>(*p_);
    if (b < 0x80) {
      *v = b;
      ++p_;
    } else if (b >= 0xcc && b <= 0xcf) {
      if (!BigEndianAfterTag(1 << (b - 0xcc), v)) return false;
    } else {
      return false;
    }
    return *v <= max;
  }

  // A signed 64-bit integer in any integer form.
  bool Int64(int64_t* v) {
    if (at_end()) return false;
    const auto b = static_cast<uint8_t>(*p_);
    if (b >= 0xe0) {  // negative fixint
      *v = static_cast<int8_t>(b);
      ++p_;
      return true;
    }
    if (b >= 0xd0 && b <= 0xd3) {
      const int bytes = 1 << (b - 0xd0);
      uint64_t x = 0;
      if (!BigEndianAfterTag(bytes, &x)) return false;
      if (bytes < 8) {  // sign-extend
        const uint64_t sign = uint64_t{1} << (8 * bytes - 1);
        x = (x ^ sign) - sign;
      }
      *v = static_cast<int64_t>(x);
      return true;
    }
    uint64_t u = 0;
    if (!Uint(static_cast<uint64_t>(INT64_MAX), &u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }

  // A float 64.
  bool Float64(double* d) {
    if (at_end() || static_cast<uint8_t>(*p_) != 0xcb) return false;
    uint64_t x = 0;
    if (!BigEndianAfterTag(8, &x)) return false;
    std::memcpy(d, &x, sizeof x);
    return true;
  }

  // A timestamp in its 32-bit form (fixext 4, type -1): the seconds.
  bool Timestamp32(uint64_t* seconds) {
    if (left() < 2 || static_cast<uint8_t>(p_[0]) != 0xd6 || static_cast<uint8_t>(p_[1]) != 0xff) {
      return false;
    }
    ++p_;  // the tag; BigEndianAfterTag steps over the type
    return BigEndianAfterTag(4, seconds);
  }

  uint8_t Peek() const { return static_cast<uint8_t>(*p_); }

  bool Nil() {
    if (at_end() || static_cast<uint8_t>(*p_) != 0xc0) return false;
    ++p_;
    return true;
  }

 private:
  // fix forms at `fix` (low 4 bits the count), 16- and 32-bit at `wide`, wide + 1.
  bool Header(uint8_t fix, uint8_t wide, uint32_t* n) {
    if (at_end()) return false;
    const auto b = static_cast<uint8_t>(*p_);
    uint64_t v = 0;
    if ((b & 0xf0) == fix) {
      v = b & 0x0f;
      ++p_;
    } else if (b == wide || b == wide + 1) {
      if (!BigEndianAfterTag(b == wide ? 2 : 4, &v)) return false;
    } else {
      return false;
    }
    *n = static_cast<uint32_t>(v);
    return true;
  }

  bool BigEndianAfterTag(int bytes, uint64_t* v) {
    if (left() < 1 + static_cast<size_t>(bytes)) return false;
    ++p_;
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x = (x << 8) | static_cast<uint8_t>(p_[i]);
    p_ += bytes;
    *v = x;
    return true;
  }

  const char* p_;
  const char* end_;
};

// The fields of one answer map the general path reads; a repeated key, a
// key it would ignore, or a nil would make the two paths' readings differ in
// ways not worth copying, so they fall back.
class AnswerReader {
 public:
  AnswerReader(Cursor& in, const DecodeLimits& limits) : in_(in), limits_(limits) {}

  // A map of a get answer's fields, plus `status` and `message` when
  // `in_batch`. *status is 0 for a plain answer.
  bool Read(bool in_batch, GetResult* m, uint8_t* status, std::string* message) {
    uint32_t n = 0;
    if (!in_.MapHeader(&n) || n > in_.left()) return false;
    bool seen_status = false, seen_count = false, seen_ids = false, seen_expires = false;
    bool seen_attr1 = false, seen_attr2 = false, seen_message = false;
    bool seen_master = false, seen_profiles = false, seen_fields = false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view key;
      if (!in_.Str(&key)) return false;
      bool ok = false;
      if (key == "ids") {
        ok = Once(&seen_ids) && Column(UINT64_MAX, &m->ids);
      } else if (key == "expires") {
        ok = Once(&seen_expires) && Column(UINT32_MAX, &m->expires);
      } else if (key == "count") {
        uint64_t v = 0;
        ok = Once(&seen_count) && in_.Uint(UINT32_MAX, &v);
        m->count = static_cast<uint32_t>(v);
      } else if (key == "attr1") {
        ok = Once(&seen_attr1) && Attrs(&m->attr1);
      } else if (key == "attr2") {
        ok = Once(&seen_attr2) && Attrs(&m->attr2);
      } else if (key == "master") {
        // A linked user's merged view: a bin holding a user ID, as the
        // server writes it (a str, or an ID the general path refuses, falls back).
        std::string_view s;
        ok = Once(&seen_master) && in_.Bin(&s) && !s.empty() && s.size() <= limits_.max_key_bytes;
        if (ok) m->master.assign(s);
      } else if (key == "profiles") {
        uint64_t v = 0;
        ok = Once(&seen_profiles) && in_.Uint(UINT32_MAX, &v);
        m->profiles = static_cast<uint32_t>(v);
      } else if (key == "fields") {
        ok = Once(&seen_fields) && Fields(&m->fields);
        m->fields_asked = true;
      } else if (in_batch && key == "status") {
        uint64_t v = 0;
        ok = Once(&seen_status) && in_.Uint(UINT8_MAX, &v);
        *status = static_cast<uint8_t>(v);
      } else if (in_batch && key == "message") {
        std::string_view s;
        ok = Once(&seen_message) && in_.Str(&s);
        message->assign(s);
      }
      if (!ok) return false;
    }
    if (in_batch && !seen_status) return false;
    // An error answer: its other keys do not count (but a timestamp among
    // them, which the general path refuses anywhere but in a value it reads).
    if (in_batch && *status != 0) return !seen_fields;
    if (m->master.empty()) m->profiles = 0;  // as the general path: only beside a master
    const uint64_t rows = m->ids.size();
    return seen_count && seen_ids && (!seen_expires || m->expires.size() == rows) &&
           (!seen_attr1 || m->attr1.size() == rows) && (!seen_attr2 || m->attr2.size() == rows);
  }

 private:
  static bool Once(bool* seen) {
    if (*seen) return false;
    *seen = true;
    return true;
  }

  // Room for `n` elements: no more than the bytes left could hold (each
  // takes one at least), as the general path's shape check requires.
  bool Fits(uint32_t n) const { return n <= in_.left(); }

  template <typename T>
  bool Column(uint64_t max, std::vector<T>* out) {
    uint32_t n = 0;
    if (!in_.ArrayHeader(&n) || !Fits(n)) return false;
    out->resize(n);
    T* dst = out->data();
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t v = 0;
      if (!in_.Uint(max, &v)) return false;
      dst[i] = static_cast<T>(v);
    }
    return true;
  }

  bool Attrs(std::vector<std::optional<uint32_t>>* out) {
    uint32_t n = 0;
    if (!in_.ArrayHeader(&n) || !Fits(n)) return false;
    out->assign(n, std::nullopt);
    for (uint32_t i = 0; i < n; ++i) {
      if (in_.Nil()) continue;
      uint64_t v = 0;
      if (!in_.Uint(UINT32_MAX, &v)) return false;
      (*out)[i] = static_cast<uint32_t>(v);
    }
    return true;
  }

  // {name: [value, expires_at]...}: names str or bin, 1 to
  // kMaxFieldNameBytes bytes, in strictly increasing bytewise order; values
  // in the forms the server writes (an int, a float 64, a str of UTF-8, a
  // bin, a 32-bit timestamp).
  bool Fields(std::vector<Field>* out) {
    uint32_t n = 0;
    if (!in_.MapHeader(&n) || n > kMaxMapEntries || !Fits(n)) return false;
    out->clear();
    out->reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view name;
      if (in_.at_end()) return false;
      const uint8_t tag = in_.Peek();
      if (!(tag == 0xc4 || tag == 0xc5 || tag == 0xc6 ? in_.Bin(&name) : in_.Str(&name))) {
        return false;
      }
      if (name.empty() || name.size() > kMaxFieldNameBytes) return false;
      if (!out->empty() && !(std::string_view(out->back().name) < name)) return false;
      uint32_t pair = 0;
      if (!in_.ArrayHeader(&pair) || pair != 2) return false;
      Field f;
      f.name.assign(name);
      if (!Value(&f.value)) return false;
      uint64_t e = 0;
      if (!in_.Uint(UINT32_MAX, &e)) return false;
      f.expires_at = static_cast<UnixSeconds>(e);
      out->push_back(std::move(f));
    }
    return true;
  }

  bool Value(FieldValue* v) {
    if (in_.at_end()) return false;
    const uint8_t b = in_.Peek();
    std::string_view s;
    if (b == 0xcb) {
      double d = 0;
      if (!in_.Float64(&d)) return false;
      *v = FieldValue::Double(d);
    } else if ((b & 0xe0) == 0xa0 || b == 0xd9 || b == 0xda || b == 0xdb) {
      if (!in_.Str(&s) || !IsUtf8(s)) return false;  // the general decoder says why
      *v = FieldValue::String(std::string(s));
    } else if (b == 0xc4 || b == 0xc5 || b == 0xc6) {
      if (!in_.Bin(&s)) return false;
      *v = FieldValue::Bytes(std::string(s));
    } else if (b == 0xd6) {
      uint64_t t = 0;
      if (!in_.Timestamp32(&t)) return false;
      *v = FieldValue::Time(static_cast<UnixSeconds>(t));
    } else {
      int64_t i = 0;
      if (!in_.Int64(&i)) return false;
      *v = FieldValue::Int(i);
    }
    return true;
  }

  Cursor& in_;
  const DecodeLimits& limits_;
};

}  // namespace

bool ReadGetAnswer(std::string_view body, const DecodeLimits& limits, GetResult* m) {
  *m = {};  // a column the body lacks stays empty
  Cursor in(body);
  AnswerReader reader(in, limits);
  uint8_t status = 0;
  return reader.Read(false, m, &status, nullptr) && in.at_end();
}

bool ReadGetAnswer(std::string_view body, const DecodeLimits& limits, BatchGetResponse* m) {
  Cursor in(body);
  uint32_t fields = 0, n = 0;
  std::string_view key;
  if (!in.MapHeader(&fields) || fields != 1 || !in.Str(&key) || key != "results" ||
      !in.ArrayHeader(&n) || n > in.left()) {
    return false;
  }
  AnswerReader reader(in, limits);
  m->clear();
  m->reserve(n);
  std::string message;
  for (uint32_t i = 0; i < n; ++i) {
    GetResult one;
    uint8_t status = 0;
    message.clear();
    if (!reader.Read(true, &one, &status, &message)) return false;
    if (status != 0) {
      m->push_back(Status::FromCode(status, message));
    } else {
      m->push_back(std::move(one));
    }
  }
  return in.at_end();
}

}  // namespace segstore::proto::internal
