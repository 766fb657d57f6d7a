// The profile codec: how a profile's segments become a record body on the
// device. MessagePack is the wire format; this is the storage format, built
// to spend close to the information content of the reference workload (2.2
// bytes a segment). Layout (version 1):
//
//   u8      version (1)
//   varint  n: segment count; nothing follows when 0
//   varint  first id
//   u8      k: Rice parameter of the id gaps (0..32)
//   u8      flags: bits 0-1 expiry unit (0 s, 1 min, 2 h, 3 day), bit 2 some
//           segment never expires, bit 3 attr1 present, bit 4 attr2 present
//   varint  expiry base, in units
//   u8      expiry width, bits (0..32)
//   u8      attr1 width (if present), u8 attr2 width (if present)
//   bits, least significant first:
//     n-1 id gaps, Rice-coded: g = gap-1; q = g >> k as q ones and a zero,
//         then the k low bits; q >= 32: 32 ones, then g in 64 bits
//     n expiries, each `width` bits: v = expires/unit - base (+1 if some
//         segment never expires, 0 meaning never)
//     per present attribute: n presence bits, then each present value in
//         its width
//
// Layout (version 2): the record remembers the log position of the last
// cluster log entry applied to it (issue 18: a restart that replays the log
// skips an entry the record already holds):
//
//   u8      version (2)
//   varint  log position (>= 1; 0 is never written: that body is version 1)
//   ...     exactly the version-1 layout from `varint n` on
//
// Version 1 is still what a body without a position is written in: single
// servers (no cluster, no log) keep writing their bodies exactly as before,
// and a body without a position costs not one byte more. Version 2 is
// written only with a position (cluster nodes). Both are read.
//
// Layout (version 3): the record also holds its group section, for a profile
// linked to others (profile bridging). A member names its master, whose key
// the storage layer keeps, not the body; its body keeps when its own link
// expires. A master's body lists its members, each with its link's expiry:
//
//   u8      version (3)
//   varint  log position (0 = none; unlike version 2, 0 is allowed here)
//   u8      flags: bit 0 member (a link expiry follows); bits 1-7 are 0
//   varint  link expiry, only when a member (0: never expires)
//   varint  m: members (0 when not a master)
//   m times: varint user length (1..65535), the user's bytes, varint
//           expires_at (0: never); users strictly increasing in byte order
//   ...     exactly the version-1 layout from `varint n` on
//
// Version 3 is written only for a profile in a group (never with an empty
// group section: that body is version 1 or 2), so a profile outside every
// group keeps the bytes and the size of versions 1 and 2.
//
// Layout (version 4): the record also holds the profile's fields (issue 21:
// typed values beside the segments; field_codec.h has the section):
//
//   u8      version (4)
//   varint  log position (0 = none)
//   u8      sections: bit 0 a group section follows, bit 1 a fields section
//           follows (always set); bits 2-7 are 0
//   ...     the group section as version 3 has it, from its flags on, when
//           bit 0 is set
//   varint  the fields section's length in bytes (>= 1), then its bytes
//   ...     exactly the version-1 layout from `varint n` on
//
// Version 4 is written only for a profile with fields, so a profile without
// any keeps the bytes of versions 1 to 3; a get that asks for no field steps
// over the section by its length. All four are read.
//
// The unit is the coarsest that loses nothing (all expiries whole hours:
// hours), so expiries stay exact to the second. Decoding is safe on any bytes:
// truncated or hostile input is Corruption, never an over-read. Thread-safe
// (pure functions).
//
// These bytes are part of the data file format (src/storage/FORMAT.md,
// "Versions"): codec version 1 is what data file format version 1 holds;
// data file format version 2 holds codec versions 1 and 2, version 3 holds
// codec versions 1 to 3, and version 4 holds 1 to 4. A change here is a new data file format
// version, with its fixture under tests/data; the version byte only tells
// the decoder which it is reading.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "profile/field_codec.h"
#include "segstore/profile.h"
#include "segstore/result.h"

namespace segstore::profile {

// The newest codec version this build writes (and reads): 4, written only
// for a profile with fields; without fields, 3 for a profile in a group (a
// non-empty Group), else 2 for a body with a log position, 1 without one.
inline constexpr uint8_t kCodecVersion = 4;

// One member of a master's group: its user ID and when its link expires.
struct GroupMember {
  std::string user;
  UnixSeconds expires_at = kNever;  // kNever (0): the link never expires
  bool operator==(const GroupMember&) const = default;
};

// A body's group section (codec version 3); empty for version 1 and 2 bodies.
// A profile may be a member (of the master the storage layer names), a master
// (of `members`), or, as far as the codec is concerned, both.
struct Group {
  bool member = false;                // this profile is linked to a master
  UnixSeconds link_expires = kNever;  // when member: when its link expires (kNever: never)
  std::vector<GroupMember> members;   // when a master: sorted by user, unique
  bool empty() const { return !member && members.empty(); }
  void clear() {
    member = false;
    link_expires = kNever;
    members.clear();
  }
  bool operator==(const Group&) const = default;
};

// Replaces `out` with the encoding of `segments`, which must be sorted by id
// with no id twice: version 1 (no log position), byte for byte what every
// earlier build wrote.
void EncodeSegments(std::span<const Segment> segments, std::string* out);
// The same, remembering `log_position`, the position of the last cluster log
// entry applied to the record: version 2 when log_position != 0, version 1
// (exactly the overload above) when it is 0.
void EncodeSegments(std::span<const Segment> segments, uint64_t log_position, std::string* out);
// Replaces `out` with the encoding of `segments` and `group`: version 3 when
// !group.empty() (members must be sorted by user and unique, each user
// 1..65535 bytes), otherwise exactly EncodeSegments(segments, log_position,
// out) (version 1 or 2, byte for byte). group.link_expires is written only
// when group.member. A group breaking these rules is a caller's bug: the
// process aborts, naming it.
void EncodeProfile(std::span<const Segment> segments, uint64_t log_position, const Group& group,
                   std::string* out);
// The same with the profile's fields (in StoredBefore order, as
// EncodeFieldSection takes them): version 4 when there are any, otherwise
// exactly the overload above.
void EncodeProfile(std::span<const Segment> segments, uint64_t log_position, const Group& group,
                   std::span<const StoredField> fields, std::string* out);
// The same with the fields section already encoded (EncodeFieldSection's
// bytes; Columns::fields of a decoded body): empty for none.
void EncodeProfile(std::span<const Segment> segments, uint64_t log_position, const Group& group,
                   std::string_view fields, std::string* out);

// A body read up to its segments, which are left as they are: what a write
// that changes none of them (a write of fields) needs.
struct BodyHead {
  uint64_t log_position = 0;  // as Columns
  Group group;                // as Columns
  std::string fields;         // as Columns
  // The body's bytes from its segment count on: the same layout in every
  // version (version 1's), so any version's may follow any version's head.
  std::string_view segments;
  uint64_t count = 0;  // segments
  // The earliest finite expiry of a segment, read from the segments' header
  // (not their columns); kNever when none has one. For a body this codec
  // never writes, a bound below it, or a finite value when none has one:
  // kNever is always true, a finite value never later than the truth.
  UnixSeconds earliest = kNever;
};

// Reads `body`'s head, and the segments' header for `count` and `earliest`;
// out->segments points into `body`. Corruption when the head or that header
// is damaged; the segments' columns are not read (DecodeColumns checks them).
Status DecodeHead(std::string_view body, BodyHead* out);

// The body of the segments `segments` encodes (BodyHead::segments' bytes,
// copied as they are) with this log position, group and fields section: what
// EncodeProfile gives for those segments, byte for byte, whenever the bytes
// are what this codec writes (an encoding is canonical: decoding and encoding
// again gives the same bytes).
void EncodeProfileKeeping(std::string_view segments, uint64_t log_position, const Group& group,
                          std::string_view fields, std::string* out);

// Whether `body` has a group section (codec 3, or 4 with one): its first
// bytes only.
bool HasGroupSection(std::string_view body);
// Whether `body` has a fields section (is codec 4): its first byte only.
inline bool HasFieldSection(std::string_view body) { return !body.empty() && body[0] == 4; }

// The log position a body remembers, reading only its version byte and
// position: 0 for a version-1 body, and for a version-3 one without a
// position. Corruption when the body is none of versions 1-3 (or its
// position is missing or truncated, or 0 in a version-2 body). The rest of
// the body, the group section of version 3 included, is not read: a body this
// accepts may still fail DecodeColumns.
Result<uint64_t> DecodeLogPosition(std::string_view body);

// A decoded body, column by column: what the read path filters. Reusing one
// across calls keeps its capacity.
struct Columns {
  uint64_t log_position = 0;  // the body's (versions 2, 3); 0 when it has none
  Group group;                // the body's group section (versions 3, 4); empty when none
  std::string fields;         // the body's fields section (version 4), undecoded; empty when none
  std::vector<uint64_t> ids;
  std::vector<UnixSeconds> expires;
  bool has_attr1 = false;
  bool has_attr2 = false;
  std::vector<uint32_t> attr1;  // when has_attr1: per segment; absent ones flagged below
  std::vector<uint32_t> attr2;
  std::vector<uint8_t> attr_present;  // per segment: bit 0 attr1, bit 1 attr2
  std::string padded;                 // decoding scratch: the bit stream plus zero padding
  size_t size() const { return ids.size(); }
  Segment At(size_t i) const {
    Segment s;
    CopyTo(i, &s);
    return s;
  }
  // Segment i into *s, field by field: for the loops that copy a profile's
  // segments. `*s = At(i)` builds a Segment aside and copies it in whole,
  // and the compiler stores its parts and reloads them as one: a
  // store-forwarding stall a segment, most of Merge's time before.
  void CopyTo(size_t i, Segment* s) const {
    s->id = ids[i];
    s->expires_at = expires[i];
    s->attr1.reset();
    s->attr2.reset();
    if (has_attr1 && (attr_present[i] & 1)) s->attr1 = attr1[i];
    if (has_attr2 && (attr_present[i] & 2)) s->attr2 = attr2[i];
  }
};

// Decodes every segment of `body` (expired ones too), its log position
// into out->log_position (0 when it has none), its group section into
// out->group (versions 3, 4; emptied otherwise, at no cost when it already
// is) and its fields section's bytes into out->fields (version 4; for
// DecodeFieldSection). Corruption when the bytes are not a valid encoding of
// versions 1 to 4 (a version-3 body with an empty group section is not: it
// is never written); `out` is then unspecified. The fields section is only
// checked by DecodeFieldSection.
Status DecodeColumns(std::string_view body, Columns* out);
// The segments alone: the log position and the group section are dropped.
Status DecodeSegments(std::string_view body, std::vector<Segment>* out);

// The get path: decodes `body` and selects its live segments matching `o` at
// `now` in one pass over the expiries, with no column of them in between:
// into *out exactly what DecodeColumns and Select would give, and the same
// count of live segments (0: the profile does not exist for readers).
// `scratch` holds the decoded ids (and everything, for a body with
// attributes), the body's log_position and its group section, as
// DecodeColumns fills them. Corruption as DecodeColumns.
Result<uint32_t> DecodeSelect(std::string_view body, UnixSeconds now, const GetOptions& o,
                              Columns* scratch, GetResult* out);

}  // namespace segstore::profile
