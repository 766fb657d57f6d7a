// The fields section of a profile body (profile codec 4, codec.h): a
// profile's typed fields (segments.h, Field) as stored. Names are the costly
// part of a field (a counter's value is a byte or two), so a name is stored
// as its number in the store's name table (field_names.h) when it has one,
// and inline otherwise (a name not yet registered, or a body copied from
// another node, whose table numbers differently). Layout, after the
// section's length (a varint the version header reads, codec.h):
//
//   varint  t: fields named by table id; when t > 0:
//           varint first id (>= 1), u8 Rice parameter k (0..32)
//   varint  s: fields named inline; s times: u8 length (1..64), the bytes;
//           strictly increasing bytewise
//   varint  d: distinct expiries; when d > 0: varint the first (>= 1), then
//           d - 1 varint steps (>= 1) to the next: strictly increasing
//   bits, least significant first, padded to a byte:
//     t - 1 id gaps, Rice-coded as the segment ids are (codec.h)
//     per field (table-named by id, then inline by name): 3 bits its type
//     (FieldValue::Type), bit_width(d) bits its expiry (0: never, i: the
//     i-th distinct expiry)
//   per field in that order, its value: int zigzag varint; double 8 bytes
//   little-endian; string and bytes varint length, the bytes; time varint
//
// The workload's 25 fields (20 counters expiring together, five more) take
// under 100 bytes besides the bytes of their string values. Decoding is safe
// on any bytes (Corruption, never an over-read). Thread-safe (pure).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/result.h"
#include "segstore/segments.h"

namespace segstore::profile {

// A field's name is at most this many bytes (and at least one).
inline constexpr size_t kMaxFieldNameBytes = 64;

struct StoredField {
  uint32_t name_id = 0;  // its number in the store's name table; 0: named inline
  std::string name;      // the name, when name_id == 0 (empty otherwise)
  FieldValue value;
  UnixSeconds expires_at = kNever;
  bool operator==(const StoredField&) const = default;
};

// Whether `a` comes before `b` in a section: table-named fields by id, then
// inline-named ones by name.
bool StoredBefore(const StoredField& a, const StoredField& b);

// Appends the section of `fields` (at least one, in StoredBefore order, no
// name twice, names 1..64 bytes, times within 32 bits): the bytes
// EncodeProfile writes after the section's length. Fields breaking these
// rules are a caller's bug: the process aborts, naming it.
void EncodeFieldSection(std::span<const StoredField> fields, std::string* out);

// Decodes a section (its bytes after the length varint) into *out, replacing
// it. Corruption when the bytes are not a section EncodeFieldSection writes.
Status DecodeFieldSection(std::string_view section, std::vector<StoredField>* out);

}  // namespace segstore::profile
