#include "profile/field_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/coding.h"
#include "profile/bit_stream.h"

namespace segstore::profile {
namespace {

constexpr unsigned kTypeBits = 3;
constexpr uint8_t kLastType = static_cast<uint8_t>(FieldValue::Type::kTime);
// Every field's value takes at least a byte: a count the section cannot
// hold is refused before allocating.
constexpr uint64_t kMinValueBytes = 1;

[[noreturn]] void BadFields(std::string_view why, size_t i) {
  fmt::print(stderr, "segstore: EncodeFieldSection: fields with {} (field {})\n", why, i);
  std::abort();
}

Status Corrupt(std::string_view what) {
  return Status::Corruption(fmt::format("profile body: fields: {}", what));
}

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// The Rice parameter that codes the table ids' gaps in the fewest bits (a
// profile holds a few dozen fields: every parameter is tried).
unsigned ChooseParameter(std::span<const StoredField> fields, size_t t) {
  unsigned best = 0;
  uint64_t best_bits = UINT64_MAX;
  for (unsigned k = 0; k <= kEscapeRun; ++k) {
    uint64_t bits = 0;
    for (size_t i = 1; i < t; ++i)
      bits += RiceBits(fields[i].name_id - fields[i - 1].name_id - 1, k);
    if (bits < best_bits) {
      best_bits = bits;
      best = k;
    }
  }
  return best;
}

}  // namespace

bool StoredBefore(const StoredField& a, const StoredField& b) {
  if ((a.name_id == 0) != (b.name_id == 0)) return a.name_id != 0;
  if (a.name_id != 0) return a.name_id < b.name_id;
  return a.name < b.name;
}

void EncodeFieldSection(std::span<const StoredField> fields, std::string* out) {
  if (fields.empty()) BadFields("none", 0);
  size_t t = 0;
  while (t < fields.size() && fields[t].name_id != 0) ++t;
  std::vector<UnixSeconds> expiries;
  for (size_t i = 0; i < fields.size(); ++i) {
    const StoredField& f = fields[i];
    if (i > 0 && !StoredBefore(fields[i - 1], f)) BadFields("names out of order or twice", i);
    if (f.name_id == 0 && (f.name.empty() || f.name.size() > kMaxFieldNameBytes)) {
      BadFields("an inline name of bad length", i);
    }
    if (f.name_id != 0 && !f.name.empty()) BadFields("a table id and an inline name", i);
    if (static_cast<uint8_t>(f.value.type) > kLastType) BadFields("an unknown type", i);
    if (f.value.type == FieldValue::Type::kTime && (f.value.i < 0 || f.value.i > UINT32_MAX)) {
      BadFields("a time out of range", i);
    }
    if (f.expires_at != kNever) expiries.push_back(f.expires_at);
  }
  std::sort(expiries.begin(), expiries.end());
  expiries.erase(std::unique(expiries.begin(), expiries.end()), expiries.end());
  const unsigned expiry_bits = static_cast<unsigned>(std::bit_width(expiries.size()));

  std::string& section = *out;
  PutVarint(&section, t);
  const unsigned k = ChooseParameter(fields, t);
  if (t > 0) {
    PutVarint(&section, fields[0].name_id);
    section.push_back(static_cast<char>(k));
  }
  PutVarint(&section, fields.size() - t);
  for (size_t i = t; i < fields.size(); ++i) {
    section.push_back(static_cast<char>(fields[i].name.size()));
    section.append(fields[i].name);
  }
  PutVarint(&section, expiries.size());
  for (size_t i = 0; i < expiries.size(); ++i) {
    PutVarint(&section, i == 0 ? expiries[0] : expiries[i] - expiries[i - 1]);
  }
  BitWriter bits(&section);
  for (size_t i = 1; i < t; ++i) bits.WriteRice(fields[i].name_id - fields[i - 1].name_id - 1, k);
  for (const StoredField& f : fields) {
    bits.Write(static_cast<uint8_t>(f.value.type), kTypeBits);
    uint64_t e = 0;
    if (f.expires_at != kNever) {
      e = 1 +
          static_cast<uint64_t>(std::lower_bound(expiries.begin(), expiries.end(), f.expires_at) -
                                expiries.begin());
    }
    bits.Write(e, expiry_bits);
  }
  bits.Finish();
  for (const StoredField& f : fields) {
    const FieldValue& v = f.value;
    switch (v.type) {
      case FieldValue::Type::kInt:
        PutVarint(&section, ZigZag(v.i));
        break;
      case FieldValue::Type::kDouble: {
        char b[8];
        EncodeFixed64(b, std::bit_cast<uint64_t>(v.d));
        section.append(b, 8);
        break;
      }
      case FieldValue::Type::kString:
      case FieldValue::Type::kBytes:
        PutVarint(&section, v.s.size());
        section.append(v.s);
        break;
      case FieldValue::Type::kTime:
        PutVarint(&section, static_cast<uint64_t>(v.i));
        break;
    }
  }
}

Status DecodeFieldSection(std::string_view section, std::vector<StoredField>* out) {
  out->clear();
  const auto* p = reinterpret_cast<const uint8_t*>(section.data());
  const uint8_t* const end = p + section.size();
  uint64_t t, s, d, first_id = 0;
  unsigned k = 0;
  if (!GetVarint(p, end, &t) || t > static_cast<uint64_t>(end - p) / kMinValueBytes) {
    return Corrupt("table-named count");
  }
  if (t > 0) {
    if (!GetVarint(p, end, &first_id) || first_id == 0 || first_id > UINT32_MAX || p == end) {
      return Corrupt("first name id");
    }
    k = *p++;
    if (k > kEscapeRun) return Corrupt("Rice parameter");
  }
  if (!GetVarint(p, end, &s) || s > static_cast<uint64_t>(end - p) / (2 + kMinValueBytes)) {
    return Corrupt("inline-named count");
  }
  if (t + s == 0) return Corrupt("no fields");  // never written: the body has no section then
  out->resize(t + s);
  for (uint64_t i = t; i < t + s; ++i) {
    if (p == end) return Corrupt("truncated name");
    const uint8_t length = *p++;
    if (length == 0 || length > kMaxFieldNameBytes || length > end - p)
      return Corrupt("name length");
    std::string& name = (*out)[i].name;
    name.assign(reinterpret_cast<const char*>(p), length);
    p += length;
    if (i > t && !((*out)[i - 1].name < name)) return Corrupt("names out of order or twice");
  }
  if (!GetVarint(p, end, &d) || d > t + s) return Corrupt("expiry count");
  UnixSeconds expiries[256];  // d <= t + s, and bounded just below
  std::vector<UnixSeconds> many;
  UnixSeconds* dict = expiries;
  if (d > std::size(expiries)) {
    many.resize(d);
    dict = many.data();
  }
  uint64_t at = 0;
  for (uint64_t i = 0; i < d; ++i) {
    uint64_t v;
    if (!GetVarint(p, end, &v) || v == 0 || v > UINT32_MAX - at) return Corrupt("expiry");
    at += v;
    dict[i] = static_cast<UnixSeconds>(at);
  }
  const unsigned expiry_bits = static_cast<unsigned>(std::bit_width(d));
  BitReader bits(p, static_cast<size_t>(end - p));
  uint64_t id = first_id;
  for (uint64_t i = 0; i < t; ++i) {
    if (i > 0) {
      const uint64_t g = bits.ReadRice(k);
      if (bits.overrun() || g >= UINT32_MAX - id) return Corrupt("name id");
      id += g + 1;
    }
    (*out)[i].name_id = static_cast<uint32_t>(id);
  }
  for (StoredField& f : *out) {
    const uint64_t type = bits.Read(kTypeBits);
    const uint64_t e = bits.Read(expiry_bits);
    if (bits.overrun()) return Corrupt("truncated types");
    if (type > kLastType) return Corrupt(fmt::format("type {}", type));
    if (e > d) return Corrupt("expiry index");
    f.value = FieldValue{};
    f.value.type = static_cast<FieldValue::Type>(type);
    f.expires_at = e == 0 ? kNever : dict[e - 1];
  }
  // The values start at the next byte.
  p = end - (bits.remaining_bits() / 8);
  for (StoredField& f : *out) {
    FieldValue& v = f.value;
    uint64_t x;
    switch (v.type) {
      case FieldValue::Type::kInt:
        if (!GetVarint(p, end, &x)) return Corrupt("int value");
        v.i = UnZigZag(x);
        break;
      case FieldValue::Type::kDouble:
        if (end - p < 8) return Corrupt("double value");
        v.d = std::bit_cast<double>(DecodeFixed64(p));
        p += 8;
        break;
      case FieldValue::Type::kString:
      case FieldValue::Type::kBytes:
        if (!GetVarint(p, end, &x) || x > static_cast<uint64_t>(end - p)) {
          return Corrupt("string value");
        }
        v.s.assign(reinterpret_cast<const char*>(p), x);
        p += x;
        break;
      case FieldValue::Type::kTime:
        if (!GetVarint(p, end, &x) || x > UINT32_MAX) return Corrupt("time value");
        v.i = static_cast<int64_t>(x);
        break;
    }
  }
  if (p != end) return Corrupt("trailing bytes");
  return Status::OK();
}

}  // namespace segstore::profile
