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
// The unit is the coarsest that loses nothing (all expiries whole hours:
// hours), so expiries stay exact to the second. Decoding is safe on any bytes:
// truncated or hostile input is Corruption, never an over-read. Thread-safe
// (pure functions).
//
// These bytes are part of the data file format (src/storage/FORMAT.md,
// "Versions"): codec version 1 is what data file format version 1 holds;
// data file format version 2 holds codec versions 1 and 2. A change here is
// a new data file format version, with its fixture under tests/data; the
// version byte only tells the decoder which it is reading.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/profile.h"
#include "segstore/result.h"

namespace segstore::profile {

// The newest codec version this build writes (and reads): 2, written only
// for a body with a log position; without one it writes version 1.
inline constexpr uint8_t kCodecVersion = 2;

// Replaces `out` with the encoding of `segments`, which must be sorted by id
// with no id twice: version 1 (no log position), byte for byte what every
// earlier build wrote.
void EncodeSegments(std::span<const Segment> segments, std::string* out);
// The same, remembering `log_position`, the position of the last cluster log
// entry applied to the record: version 2 when log_position != 0, version 1
// (exactly the overload above) when it is 0.
void EncodeSegments(std::span<const Segment> segments, uint64_t log_position, std::string* out);

// The log position a body remembers, reading only its header: 0 for a
// version-1 body. Corruption when the body is neither version (or its
// position is missing, truncated or 0). The rest of the body is not
// validated: a body this accepts may still fail DecodeColumns.
Result<uint64_t> DecodeLogPosition(std::string_view body);

// A decoded body, column by column: what the read path filters. Reusing one
// across calls keeps its capacity.
struct Columns {
  uint64_t log_position = 0;  // the body's (version 2); 0 when it has none (version 1)
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

// Decodes every segment of `body` (expired ones too), and its log position
// into out->log_position (0 for a version-1 body). Corruption when the bytes
// are not a valid encoding of version 1 or 2; `out` is then unspecified.
Status DecodeColumns(std::string_view body, Columns* out);
Status DecodeSegments(std::string_view body, std::vector<Segment>* out);

// The get path: decodes `body` and selects its live segments matching `o` at
// `now` in one pass over the expiries, with no column of them in between:
// into *out exactly what DecodeColumns and Select would give, and the same
// count of live segments (0: the profile does not exist for readers).
// `scratch` holds the decoded ids (and everything, for a body with
// attributes) and the body's log_position. Corruption as DecodeColumns.
Result<uint32_t> DecodeSelect(std::string_view body, UnixSeconds now, const GetOptions& o,
                              Columns* scratch, GetResult* out);

}  // namespace segstore::profile
