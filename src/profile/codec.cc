#include "profile/codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/coding.h"
#include "profile/bit_stream.h"
#include "profile/field_codec.h"
#include "profile/segment_ops.h"
#include "storage/format.h"

namespace segstore::profile {
namespace {

// A tripwire: the codec is part of the data file format (FORMAT.md,
// "Versions"). A new codec version comes with a new storage::kFormatVersion
// (and its fixture under tests/data), and this build must still decode every
// body of the format versions it reads: codec 1 (data file format 1, and
// later ones for bodies without a log position), codec 2 (data file format 2
// on, for bodies with one), codec 3 (data file format 3 on; written only for
// a profile in a group, beside the record kind format 3 adds,
// storage::RecordKind::kPutRef) and codec 4 (data file format 4; written
// only for a profile with fields).
static_assert(kCodecVersion == 4 && storage::kFormatVersion == 4 &&
                  storage::kOldestFormatVersion == 1,
              "the profile codec is part of the data file format: changing it is a new data "
              "file format version (src/storage/FORMAT.md, Versions)");

// The versions written: 1 without a log position (single servers' bodies,
// unchanged from data file format 1 and not a byte longer), 2 with one, 3
// for a profile in a group (with or without a position).
constexpr uint8_t kCodecNoPosition = 1;
constexpr uint8_t kCodecWithPosition = 2;
constexpr uint8_t kCodecWithGroup = 3;
constexpr uint8_t kCodecWithFields = 4;
static_assert(kCodecWithFields == kCodecVersion);

// Version 4's section flags: which sections follow the log position.
constexpr uint8_t kSectionGroup = 1 << 0;
constexpr uint8_t kSectionFields = 1 << 1;

// The group section (version 3).
constexpr uint8_t kGroupFlagMember = 1 << 0;  // a link expiry follows
constexpr uint64_t kMaxUserBytes = 65535;
// A member takes at least its length (1 byte), one byte of user and its
// expiry (1 byte): a count the body cannot hold is refused before allocating.
constexpr uint64_t kMinMemberBytes = 3;

constexpr uint32_t kUnits[4] = {1, 60, 3600, 86400};
constexpr uint8_t kFlagNever = 1 << 2;
constexpr uint8_t kFlagAttr1 = 1 << 3;
constexpr uint8_t kFlagAttr2 = 1 << 4;

unsigned BitWidth(uint64_t v) { return static_cast<unsigned>(std::bit_width(v)); }

// The Rice parameter that codes the gaps in the fewest bits, among the one
// their mean suggests and its two neighbours (ties: the suggested one, then
// the smaller). The three costs are summed in one pass over the gaps.
unsigned ChooseRiceParameter(std::span<const Segment> s) {
  if (s.size() < 2) return 0;
  uint64_t mean = (s.back().id - s.front().id - (s.size() - 1)) / (s.size() - 1);
  const unsigned guess = mean == 0 ? 0 : BitWidth(mean) - 1;
  const unsigned lower = guess > 0 ? guess - 1 : guess, upper = guess + 1;
  uint64_t at_guess = 0, at_lower = 0, at_upper = 0;
  for (size_t i = 1; i < s.size(); ++i) {
    const uint64_t g = s[i].id - s[i - 1].id - 1;
    at_guess += RiceBits(g, guess);
    at_lower += RiceBits(g, lower);
    if (upper <= kEscapeRun) at_upper += RiceBits(g, upper);  // (a shift by 64 is undefined)
  }
  unsigned best = guess;
  uint64_t best_cost = at_guess;
  if (lower != guess && lower <= kEscapeRun && at_lower < best_cost) {
    best_cost = at_lower;
    best = lower;
  }
  if (upper <= kEscapeRun && at_upper < best_cost) best = upper;
  return std::min(best, kEscapeRun);
}

// The refill and the rare paths of the id-gap decoder. The state (buffer,
// bits in it, bits consumed) is the caller's, in registers; only these
// out-of-line paths see it through pointers.
struct GapReader {
  const uint8_t* next;
  const uint8_t* limit;  // the real end; 16 bytes of zero padding follow

  void Refill(uint64_t* buf, unsigned* avail) {
    if (next > limit) {
      *avail = 64;  // nothing more to load: what follows is zeros
      return;
    }
    uint64_t w;
    std::memcpy(&w, next, 8);
    *buf |= w << *avail;
    next += (63 - *avail) >> 3;
    *avail |= 56;
  }
  uint64_t Take(unsigned count, uint64_t* buf, unsigned* avail, uint64_t* consumed) {
    if (*avail < count) Refill(buf, avail);
    uint64_t v = *buf & ((uint64_t{1} << count) - 1);
    *buf >>= count;
    *avail -= count;
    *consumed += count;
    return v;
  }
  // A gap the fast path cannot take: an escape (32 ones, then the raw 64-bit
  // gap, which may itself begin with ones), or one longer than the buffer.
  [[gnu::noinline]] uint64_t SlowGap(unsigned ones, unsigned k, uint64_t* buf, unsigned* avail,
                                     uint64_t* consumed) {
    if (ones >= kEscapeRun) {
      Take(kEscapeRun, buf, avail, consumed);
      uint64_t lo = Take(32, buf, avail, consumed);
      return lo | (Take(32, buf, avail, consumed) << 32);
    }
    Take(ones + 1, buf, avail, consumed);
    return (uint64_t{ones} << k) | Take(k, buf, avail, consumed);
  }
};

Status Corrupt(std::string_view what) {
  return Status::Corruption(fmt::format("profile body: {}", what));
}

}  // namespace

void EncodeSegments(std::span<const Segment> segments, std::string* out) {
  EncodeSegments(segments, 0, out);
}

namespace {

// Appends the part of a body every version shares, from the segment count on.
void EncodeSegmentColumns(std::span<const Segment> segments, std::string* out) {
  const size_t n = segments.size();
  PutVarint(out, n);
  if (n == 0) return;

  // Expiries: the coarsest unit that keeps every one exact. Each unit divides
  // the next, so the checks are by constants (multiplications, not divisions).
  bool never = false;
  bool finite = false;  // some segment has a finite expiry (which may be UINT32_MAX itself)
  bool days = true, hours = true, minutes = true;
  UnixSeconds min_exp = UINT32_MAX, max_exp = 0;
  bool attr1 = false, attr2 = false;
  uint32_t max_a1 = 0, max_a2 = 0;
  for (const Segment& s : segments) {
    if (s.expires_at == kNever) {
      never = true;
    } else {
      finite = true;
      days &= s.expires_at % kUnits[3] == 0;
      hours &= s.expires_at % kUnits[2] == 0;
      minutes &= s.expires_at % kUnits[1] == 0;
      min_exp = std::min(min_exp, s.expires_at);
      max_exp = std::max(max_exp, s.expires_at);
    }
    if (s.attr1) {
      attr1 = true;
      max_a1 = std::max(max_a1, *s.attr1);
    }
    if (s.attr2) {
      attr2 = true;
      max_a2 = std::max(max_a2, *s.attr2);
    }
  }
  const unsigned unit = days ? 3 : hours ? 2 : minutes ? 1 : 0;
  const uint32_t u = kUnits[unit];
  const uint64_t base = finite ? min_exp / u : 0;
  const uint64_t shift = never ? 1 : 0;
  const uint64_t max_value = finite ? max_exp / u - base + shift : 0;
  const unsigned width = BitWidth(max_value);
  const unsigned k = ChooseRiceParameter(segments);

  PutVarint(out, segments[0].id);
  out->push_back(static_cast<char>(k));
  out->push_back(static_cast<char>(unit | (never ? kFlagNever : 0) | (attr1 ? kFlagAttr1 : 0) |
                                   (attr2 ? kFlagAttr2 : 0)));
  PutVarint(out, base);
  out->push_back(static_cast<char>(width));
  const unsigned w1 = BitWidth(max_a1), w2 = BitWidth(max_a2);
  if (attr1) out->push_back(static_cast<char>(w1));
  if (attr2) out->push_back(static_cast<char>(w2));

  out->reserve(out->size() + (n * (k + 2 + width) + 7) / 8 + 16);
  BitWriter bits(out);
  for (size_t i = 1; i < n; ++i) bits.WriteRice(segments[i].id - segments[i - 1].id - 1, k);
  // One loop per unit, so that each divides by a constant.
  auto write_expiries = [&](auto unit_seconds) {
    for (const Segment& s : segments) {
      uint64_t v = s.expires_at == kNever ? 0 : s.expires_at / unit_seconds() - base + shift;
      bits.Write(v, width);
    }
  };
  switch (unit) {
    case 3:
      write_expiries([] { return kUnits[3]; });
      break;
    case 2:
      write_expiries([] { return kUnits[2]; });
      break;
    case 1:
      write_expiries([] { return kUnits[1]; });
      break;
    default:
      write_expiries([] { return kUnits[0]; });
      break;
  }
  auto write_attr = [&](bool present, unsigned w, auto get) {
    if (!present) return;
    for (const Segment& s : segments) bits.Write(get(s).has_value() ? 1 : 0, 1);
    for (const Segment& s : segments) {
      if (get(s)) bits.Write(*get(s), w);
    }
  };
  write_attr(attr1, w1, [](const Segment& s) { return s.attr1; });
  write_attr(attr2, w2, [](const Segment& s) { return s.attr2; });
  bits.Finish();
}

// A group EncodeProfile must not write: a caller's bug, so the process stops.
[[noreturn]] void BadGroup(std::string_view why, size_t i) {
  fmt::print(stderr, "segstore: EncodeProfile: a group with {} (member {})\n", why, i);
  std::abort();
}

}  // namespace

void EncodeSegments(std::span<const Segment> segments, uint64_t log_position, std::string* out) {
  out->clear();
  if (log_position == 0) {
    out->push_back(static_cast<char>(kCodecNoPosition));
  } else {
    out->push_back(static_cast<char>(kCodecWithPosition));
    PutVarint(out, log_position);
  }
  // From here on, every version is the same bytes.
  EncodeSegmentColumns(segments, out);
}

namespace {

// Appends the group section (versions 3 and 4), from its flags byte on.
void EncodeGroupSection(const Group& group, std::string* out) {
  out->push_back(static_cast<char>(group.member ? kGroupFlagMember : 0));
  if (group.member) PutVarint(out, group.link_expires);
  PutVarint(out, group.members.size());
  for (size_t i = 0; i < group.members.size(); ++i) {
    const GroupMember& m = group.members[i];
    if (m.user.empty() || m.user.size() > kMaxUserBytes) BadGroup("a user of bad length", i);
    if (i > 0 && !(std::string_view(group.members[i - 1].user) < std::string_view(m.user))) {
      BadGroup("members out of order or twice", i);
    }
    PutVarint(out, m.user.size());
    out->append(m.user);
    PutVarint(out, m.expires_at);
  }
}

}  // namespace

void EncodeProfile(std::span<const Segment> segments, uint64_t log_position, const Group& group,
                   std::string* out) {
  EncodeProfile(segments, log_position, group, std::string_view(), out);
}

void EncodeProfile(std::span<const Segment> segments, uint64_t log_position, const Group& group,
                   std::span<const StoredField> fields, std::string* out) {
  std::string section;
  if (!fields.empty()) EncodeFieldSection(fields, &section);
  EncodeProfile(segments, log_position, group, std::string_view(section), out);
}

namespace {

// Replaces *out with a body's head, up to its segment count: the version its
// sections call for (the lowest that holds them), then its log position and
// sections.
void EncodeHead(uint64_t log_position, const Group& group, std::string_view fields,
                std::string* out) {
  out->clear();
  if (!fields.empty()) {
    out->push_back(static_cast<char>(kCodecWithFields));
    PutVarint(out, log_position);
    out->push_back(static_cast<char>(kSectionFields | (group.empty() ? 0 : kSectionGroup)));
    if (!group.empty()) EncodeGroupSection(group, out);
    PutVarint(out, fields.size());
    out->append(fields);
  } else if (!group.empty()) {
    out->push_back(static_cast<char>(kCodecWithGroup));
    PutVarint(out, log_position);
    EncodeGroupSection(group, out);
  } else if (log_position == 0) {
    out->push_back(static_cast<char>(kCodecNoPosition));
  } else {
    out->push_back(static_cast<char>(kCodecWithPosition));
    PutVarint(out, log_position);
  }
}

}  // namespace

void EncodeProfile(std::span<const Segment> segments, uint64_t log_position, const Group& group,
                   std::string_view fields, std::string* out) {
  EncodeHead(log_position, group, fields, out);
  EncodeSegmentColumns(segments, out);
}

void EncodeProfileKeeping(std::string_view segments, uint64_t log_position, const Group& group,
                          std::string_view fields, std::string* out) {
  EncodeHead(log_position, group, fields, out);
  out->append(segments);
}

namespace {

// Where a body's expiries and attributes are, once its header is read and
// its ids decoded: what DecodeColumns and DecodeSelect share.
struct Layout {
  uint64_t n = 0;  // segments; 0: an empty profile, nothing more follows
  uint64_t base = 0;
  uint32_t unit = 1;
  unsigned width = 0;
  bool never = false;
  bool attr1 = false, attr2 = false;
  unsigned w1 = 0, w2 = 0;
  const uint8_t* bits = nullptr;  // the bit stream, zero padded (out->padded)
  uint64_t total = 0;             // real bits in it
  uint64_t pos = 0;               // the first expiry's bit
};

// Reads a version-3 body's group section into *group; *p is left on the
// segment count. Out of line: the get path of a version 1 or 2 body never
// comes here.
[[gnu::noinline]] Status DecodeGroup(const uint8_t*& p, const uint8_t* end, Group* group) {
  group->clear();
  if (p == end) return Corrupt("group flags");
  const uint8_t flags = *p++;
  if ((flags & ~kGroupFlagMember) != 0) return Corrupt(fmt::format("group flags {:#x}", flags));
  if (flags & kGroupFlagMember) {
    group->member = true;
    uint64_t expires;
    if (!GetVarint(p, end, &expires) || expires > UINT32_MAX) return Corrupt("link expiry");
    group->link_expires = static_cast<UnixSeconds>(expires);
  }
  uint64_t m;
  if (!GetVarint(p, end, &m)) return Corrupt("member count");
  if (m > static_cast<uint64_t>(end - p) / kMinMemberBytes) return Corrupt("member count");
  // Never written: a profile in no group is version 1 or 2.
  if (m == 0 && !group->member) return Corrupt("an empty group in a version-3 body");
  group->members.reserve(m);
  for (uint64_t i = 0; i < m; ++i) {
    uint64_t length, expires;
    if (!GetVarint(p, end, &length) || length == 0 || length > kMaxUserBytes) {
      return Corrupt("member user length");
    }
    if (length > static_cast<uint64_t>(end - p)) return Corrupt("truncated member");
    const std::string_view user(reinterpret_cast<const char*>(p), length);
    p += length;
    if (!GetVarint(p, end, &expires) || expires > UINT32_MAX) return Corrupt("member expiry");
    if (i > 0 && !(std::string_view(group->members.back().user) < user)) {
      return Corrupt("members out of order or twice");
    }
    group->members.push_back(GroupMember{std::string(user), static_cast<UnixSeconds>(expires)});
  }
  return Status::OK();
}

// Reads version 4's sections after its log position: the group section
// into *group when flagged (else emptied) and the fields section's bytes
// into *fields. Out of line, as DecodeGroup.
[[gnu::noinline]] Status DecodeSections(const uint8_t*& p, const uint8_t* end, Group* group,
                                        std::string* fields) {
  if (p == end) return Corrupt("section flags");
  const uint8_t flags = *p++;
  // Version 4 is written only with fields.
  if ((flags & ~(kSectionGroup | kSectionFields)) != 0 || (flags & kSectionFields) == 0) {
    return Corrupt(fmt::format("section flags {:#x}", flags));
  }
  if (flags & kSectionGroup) {
    SEGSTORE_RETURN_IF_ERROR(DecodeGroup(p, end, group));
  } else if (!group->empty()) {
    group->clear();
  }
  uint64_t length;
  if (!GetVarint(p, end, &length) || length == 0 || length > static_cast<uint64_t>(end - p)) {
    return Corrupt("fields section length");
  }
  fields->assign(reinterpret_cast<const char*>(p), length);
  p += length;
  return Status::OK();
}

// Reads the version byte, the log position (versions 2 to 4) and, when
// `group` is given, the group section (versions 3 and 4; `group` is emptied
// when the body has none) and the fields section's bytes into *fields
// (version 4; emptied when none): *p is then left on the segment count (the
// rest is the same in every version). Without `group`, a version-3 or 4
// body's *p is left after its log position, the rest unread.
Status DecodeVersionHeader(const uint8_t*& p, const uint8_t* end, uint64_t* log_position,
                           Group* group, std::string* fields) {
  if (p == end) return Corrupt("empty");
  const uint8_t version = *p++;
  auto no_sections = [&] {
    if (group != nullptr && !group->empty()) group->clear();
    if (fields != nullptr && !fields->empty()) fields->clear();
  };
  if (version == kCodecNoPosition) {
    *log_position = 0;
    no_sections();
    return Status::OK();
  }
  if (version != kCodecWithPosition && version != kCodecWithGroup && version != kCodecWithFields) {
    return Corrupt(fmt::format("codec version {}", version));
  }
  if (!GetVarint(p, end, log_position)) return Corrupt("log position");
  if (version == kCodecWithPosition) {
    // Never written: a body without a position is version 1.
    if (*log_position == 0) return Corrupt("log position 0 in a version-2 body");
    no_sections();
    return Status::OK();
  }
  if (group == nullptr) return Status::OK();
  if (version == kCodecWithFields) return DecodeSections(p, end, group, fields);
  if (!fields->empty()) fields->clear();
  return DecodeGroup(p, end, group);
}

// The segments' header, the same in every version from the segment count
// on, up to the attribute widths.
struct SegmentsHeader {
  uint64_t n = 0;  // 0: an empty profile, nothing follows
  uint64_t first_id = 0;
  uint64_t base = 0;
  unsigned k = 0;
  uint8_t flags = 0;
  unsigned width = 0;
};

// Reads it from *p, leaving *p on the attribute widths (or the end of an
// empty profile). Corruption when it is truncated or out of range.
Status ReadSegmentsHeader(const uint8_t*& p, const uint8_t* end, SegmentsHeader* h) {
  if (!GetVarint(p, end, &h->n)) return Corrupt("segment count");
  if (h->n == 0) return p == end ? Status::OK() : Corrupt("bytes after an empty profile");
  if (!GetVarint(p, end, &h->first_id) || end - p < 2) return Corrupt("header");
  h->k = *p++;
  h->flags = *p++;
  if (!GetVarint(p, end, &h->base) || p == end) return Corrupt("header");
  h->width = *p++;
  if (h->k > kEscapeRun || h->width > 32 || (h->flags & ~0x1fu) != 0 || h->base > UINT32_MAX) {
    return Corrupt("header fields");
  }
  return Status::OK();
}

// Reads the header and decodes the ids into out->ids (sized n; out->expires
// too, unfilled). Corruption when the bytes are not a valid encoding.
Status DecodeIds(std::string_view body, Columns* out, Layout* l) {
  const auto* p = reinterpret_cast<const uint8_t*>(body.data());
  const uint8_t* end = p + body.size();
  // ids and expires are only ever resized to the count below, never
  // cleared first: a reused Columns then initialises nothing but growth.
  out->attr1.clear();
  out->attr2.clear();
  out->attr_present.clear();
  out->has_attr1 = out->has_attr2 = false;
  out->log_position = 0;
  SEGSTORE_RETURN_IF_ERROR(
      DecodeVersionHeader(p, end, &out->log_position, &out->group, &out->fields));
  SegmentsHeader h;
  SEGSTORE_RETURN_IF_ERROR(ReadSegmentsHeader(p, end, &h));
  const uint64_t n = h.n;
  if (n == 0) {
    out->ids.clear();
    out->expires.clear();
    l->n = 0;
    return Status::OK();
  }
  const uint64_t first_id = h.first_id, base = h.base;
  const unsigned k = h.k, width = h.width;
  const uint8_t flags = h.flags;
  const bool attr1 = flags & kFlagAttr1, attr2 = flags & kFlagAttr2;
  unsigned w1 = 0, w2 = 0;
  if (attr1) {
    if (p == end) return Corrupt("header");
    w1 = *p++;
  }
  if (attr2) {
    if (p == end) return Corrupt("header");
    w2 = *p++;
  }
  if (w1 > 32 || w2 > 32) return Corrupt("attribute width");
  // Every segment takes at least one bit (its gap's terminating zero, or an
  // expiry bit): a count the body cannot hold is refused before allocating.
  const uint64_t body_bits = 8 * static_cast<uint64_t>(end - p);
  if (n - 1 > body_bits || n * width > body_bits) return Corrupt("segment count");

  out->ids.resize(n);
  out->expires.resize(n);
  // The bit stream, copied with 16 zero bytes after it, so that every load
  // below may read 8 bytes at any position up to the real end.
  constexpr size_t kPadding = 16;
  const size_t stream = static_cast<size_t>(end - p);
  out->padded.assign(reinterpret_cast<const char*>(p), stream);
  out->padded.append(kPadding, '\0');
  const uint8_t* const bits = reinterpret_cast<const uint8_t*>(out->padded.data());
  const uint64_t total = 8 * static_cast<uint64_t>(stream);

  // Id gaps: a 64-bit buffer kept in registers, refilled without branches on
  // the data. Past the real end the stream reads as zeros (the padding; the
  // load pointer stops there); whether a gap ran past the end is judged once,
  // by the bits consumed.
  GapReader r{bits, bits + stream};
  const uint64_t k_mask = (uint64_t{1} << k) - 1;
  uint64_t id = first_id;
  uint64_t* const ids = out->ids.data();
  ids[0] = id;
  uint64_t buf = 0, consumed = 0;
  unsigned avail = 0;
  for (uint64_t i = 1; i < n; ++i) {
    if (avail < 57) r.Refill(&buf, &avail);
    const unsigned ones = static_cast<unsigned>(std::countr_one(buf));
    uint64_t g;
    if (ones < kEscapeRun && ones + 1 + k <= avail) [[likely]] {
      const unsigned used = ones + 1 + k;
      g = (uint64_t{ones} << k) | ((buf >> (ones + 1)) & k_mask);
      buf = used == 64 ? 0 : buf >> used;
      avail -= used;
      consumed += used;
    } else {
      // Through copies: a pointer to the loop's own state would make the
      // compiler keep it in memory, and every gap would wait on a store.
      uint64_t b = buf, c = consumed;
      unsigned a = avail;
      g = r.SlowGap(ones, k, &b, &a, &c);
      buf = b;
      avail = a;
      consumed = c;
    }
    if (g >= std::numeric_limits<uint64_t>::max() - id) return Corrupt("segment id overflows");
    id += g + 1;
    ids[i] = id;
  }
  if (consumed > total) return Corrupt("truncated");
  // Expiries are fixed width: their whole extent is checked once, here.
  if (consumed + n * width > total) return Corrupt("truncated");
  l->n = n;
  l->base = base;
  l->unit = kUnits[flags & 3];
  l->width = width;
  l->never = flags & kFlagNever;
  l->attr1 = attr1;
  l->attr2 = attr2;
  l->w1 = w1;
  l->w2 = w2;
  l->bits = bits;
  l->total = total;
  l->pos = consumed;
  return Status::OK();
}

// Reads expiry `i` of a body laid out as `l`: the expiry in seconds (kNever
// for 0 when some segment never expires), or kBadExpiry when out of range.
// Positions are known, so the loads of a loop over i do not wait on each other.
constexpr uint64_t kBadExpiry = UINT64_MAX;
struct ExpiryReader {
  const uint8_t* bits;
  uint64_t pos, w_mask, base, max_units;
  unsigned width;
  uint32_t unit;
  bool never;

  explicit ExpiryReader(const Layout& l)
      : bits(l.bits),
        pos(l.pos),
        w_mask((uint64_t{1} << l.width) - 1),
        base(l.base),
        max_units(UINT32_MAX / l.unit),  // hoisted: a division per expiry dominated
        width(l.width),
        unit(l.unit),
        never(l.never) {}

  uint64_t operator()(uint64_t i) const {
    const uint64_t at = pos + i * width;
    uint64_t w;
    std::memcpy(&w, bits + (at >> 3), 8);
    const uint64_t v = (w >> (at & 7)) & w_mask;
    if (never && v == 0) return kNever;
    const uint64_t units = base + v - (never ? 1 : 0);  // v >= 1 here when never
    if (units > max_units || units == 0) return kBadExpiry;
    return units * unit;
  }
};

// The expiries into out->expires, then the attributes.
Status DecodeRest(const Layout& l, Columns* out) {
  const uint64_t n = l.n;
  const ExpiryReader expiry(l);
  UnixSeconds* expires = out->expires.data();
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t e = expiry(i);
    if (e == kBadExpiry) return Corrupt("expiry out of range");
    expires[i] = static_cast<UnixSeconds>(e);
  }
  uint64_t pos = l.pos + n * l.width;
  const uint8_t* const bits = l.bits;
  const uint64_t total = l.total;
  auto peek = [bits](uint64_t at) {
    uint64_t w;
    std::memcpy(&w, bits + (at >> 3), 8);
    return w >> (at & 7);
  };
  if (l.attr1 || l.attr2) {
    out->attr_present.assign(n, 0);
    auto read_attr = [&](bool present, unsigned w, uint8_t bit, std::vector<uint32_t>* values) {
      if (!present) return;
      values->assign(n, 0);
      const uint64_t mask = (uint64_t{1} << w) - 1;
      for (uint64_t i = 0; i < n && pos <= total; ++i) {
        if (peek(pos) & 1) out->attr_present[i] |= bit;
        pos += 1;
      }
      for (uint64_t i = 0; i < n && pos <= total; ++i) {
        if (out->attr_present[i] & bit) {
          (*values)[i] = static_cast<uint32_t>(peek(pos) & mask);
          pos += w;
        }
      }
    };
    read_attr(l.attr1, l.w1, 1, &out->attr1);
    read_attr(l.attr2, l.w2, 2, &out->attr2);
    out->has_attr1 = l.attr1;
    out->has_attr2 = l.attr2;
  }
  if (pos > total) return Corrupt("truncated");
  if (total - pos >= 8) return Corrupt("trailing bytes");
  return Status::OK();
}

}  // namespace

Result<uint64_t> DecodeLogPosition(std::string_view body) {
  const auto* p = reinterpret_cast<const uint8_t*>(body.data());
  uint64_t position = 0;
  SEGSTORE_RETURN_IF_ERROR(DecodeVersionHeader(p, p + body.size(), &position, nullptr, nullptr));
  return position;
}

bool HasGroupSection(std::string_view body) {
  if (body.empty()) return false;
  if (body[0] == kCodecWithGroup) return true;
  if (body[0] != kCodecWithFields) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(body.data()) + 1;
  const uint8_t* end = p + body.size() - 1;
  uint64_t position;
  return GetVarint(p, end, &position) && p != end && (*p & kSectionGroup) != 0;
}

Status DecodeHead(std::string_view body, BodyHead* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(body.data());
  const uint8_t* end = p + body.size();
  out->log_position = 0;
  SEGSTORE_RETURN_IF_ERROR(
      DecodeVersionHeader(p, end, &out->log_position, &out->group, &out->fields));
  out->segments = std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(end - p));
  out->earliest = kNever;
  SegmentsHeader h;
  SEGSTORE_RETURN_IF_ERROR(ReadSegmentsHeader(p, end, &h));
  out->count = h.n;
  if (h.n == 0) return Status::OK();
  // The expiry base is the earliest finite expiry in units
  // (EncodeSegmentColumns), and no segment has one when some never expires
  // and the width leaves room for no other.
  if ((h.flags & kFlagNever) != 0 && h.width == 0) return Status::OK();
  const uint64_t earliest = h.base * kUnits[h.flags & 3];
  // Past 2106: no finite expiry decodes (each is at least the base), so
  // whatever decodes never expires.
  if (earliest > UINT32_MAX) return Status::OK();
  // A base of 0 is never written (a finite expiry is at least one unit);
  // 1 stays below every finite expiry such a body may decode to.
  out->earliest = earliest == 0 ? 1 : static_cast<UnixSeconds>(earliest);
  return Status::OK();
}

Status DecodeColumns(std::string_view body, Columns* out) {
  Layout l;
  SEGSTORE_RETURN_IF_ERROR(DecodeIds(body, out, &l));
  if (l.n == 0) return Status::OK();
  return DecodeRest(l, out);
}

// Aligned to a cache line: the loop below is a get's hottest code, and
// where it falls against 64-byte lines moved its cost by a fifth between two
// builds whose instructions for it were identical (bench/RESULTS.md,
// 2026-11-27, "a get's cost and code layout").
[[gnu::aligned(64)]] Result<uint32_t> DecodeSelect(std::string_view body, UnixSeconds now,
                                                   const GetOptions& o, Columns* scratch,
                                                   GetResult* out) {
  Layout l;
  SEGSTORE_RETURN_IF_ERROR(DecodeIds(body, scratch, &l));
  if (l.n == 0 || l.attr1 || l.attr2) {
    // Attributes (rare): the two steps, as they are.
    if (l.n != 0) SEGSTORE_RETURN_IF_ERROR(DecodeRest(l, scratch));
    return Select(*scratch, now, o, out);
  }
  // The rest of the body must be exactly the expiries, as DecodeRest checks.
  const uint64_t end = l.pos + l.n * l.width;
  if (l.total - end >= 8) return Corrupt("trailing bytes");

  const size_t n = l.n;
  const bool windowed = o.expiry_from != 0 || o.expiry_to != UINT32_MAX || o.outside_expiry_window;
  const bool list = !o.count_only;
  const bool with_expiries = list && !o.ids_only;
  const size_t cap = !list ? 0 : o.limit != 0 ? std::min<size_t>(o.limit, n) : n;
  // Every row is written, and kept by advancing past it: room for one more.
  out->ids.resize(cap + 1);
  out->expires.resize(with_expiries ? cap + 1 : 0);
  out->attr1.clear();
  out->attr2.clear();
  uint64_t* ids_out = out->ids.data();
  UnixSeconds* exp_out = with_expiries ? out->expires.data() : nullptr;
  const uint64_t* ids = scratch->ids.data();
  const ExpiryReader expiry(l);
  uint32_t live = 0, count = 0;
  size_t listed = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t raw = expiry(i);
    if (raw == kBadExpiry) return Corrupt("expiry out of range");
    const auto e = static_cast<UnixSeconds>(raw);
    if (!Alive(e, now)) continue;
    ++live;
    const uint64_t id = ids[i];
    if (id < o.id_from || id > o.id_to) continue;
    if (windowed && InWindow(e, o) == o.outside_expiry_window) continue;
    ++count;
    ids_out[listed] = id;
    if (exp_out != nullptr) exp_out[listed] = e;
    listed += listed < cap ? 1 : 0;
  }
  out->ids.resize(listed);
  if (with_expiries) out->expires.resize(listed);
  out->count = count;
  return live;
}

Status DecodeSegments(std::string_view body, std::vector<Segment>* out) {
  Columns c;
  SEGSTORE_RETURN_IF_ERROR(DecodeColumns(body, &c));
  out->resize(c.size());
  for (size_t i = 0; i < c.size(); ++i) c.CopyTo(i, &(*out)[i]);
  return Status::OK();
}

}  // namespace segstore::profile
