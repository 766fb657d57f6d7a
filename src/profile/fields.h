// Profile fields (segments.h, Field) between their stored form (a body's
// fields section, field_codec.h, names numbered by the store's table,
// field_names.h) and what reads and writes work on: fields by name. Pure
// functions of their arguments and the table; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "profile/field_codec.h"
#include "profile/field_names.h"
#include "segstore/result.h"
#include "segstore/segments.h"

namespace segstore::profile {

// Limits a write of fields is held to (ProfileOptions).
struct FieldLimits {
  uint32_t max_fields = 256;        // live fields in one profile
  uint32_t max_value_bytes = 1024;  // of a string or bytes value
};

// Every field of `section` (expired ones too), names resolved, sorted by
// name, into *out. Corruption when the section is damaged or names a number
// the table does not have.
Status ResolveFields(std::string_view section, const FieldNames& names, std::vector<Field>* out);

// The section of `fields` (sorted by name, no name twice, at least one):
// names the table numbers by number, the others inline, and appended to
// *unnumbered (for FieldNames::Register).
void EncodeFields(std::span<const Field> fields, const FieldNames& names, std::string* section,
                  std::vector<std::string>* unnumbered);

// The live fields at `now` of `section` that `selection` asks for, sorted by
// name, into *out; returns how many fields of the section are live (asked
// for or not). Nothing is resolved for Mode::kNone. Corruption as
// ResolveFields.
Result<uint32_t> SelectFields(std::string_view section, const FieldNames& names,
                              const FieldSelection& selection, UnixSeconds now,
                              std::vector<StoredField>* scratch, std::vector<Field>* out);

// A field's name for an error message: quoted, bytes outside printable
// ASCII as \xNN (names are bytes, not text).
std::string QuotedFieldName(std::string_view name);
// `body` (a record body of any codec version) as another node can read it:
// a body with fields gets every name inline, since numbers are this node's
// own (field_names.h); any other body is copied as it is. Corruption when
// the body's head, or its fields section, is damaged or names a number the
// table does not have (the segments' bytes are copied as they are); with `dropped`, such fields
// (their name record was lost: reads here say damaged) are left out instead, their numbers in
// *dropped.
Status PortableBody(std::string_view body, const FieldNames& names, std::string* out,
                    std::vector<uint32_t>* dropped = nullptr);

// A get's fields: those `selection` asks for of a body's fields `section`
// into *out, and in *live the section's count of live fields. Nothing is
// decoded when the section is empty, or when no field is asked and the
// profile has live segments (the count only tells whether a profile without
// live segments exists).
Status AnswerFields(std::string_view section, const FieldNames& names,
                    const FieldSelection& selection, UnixSeconds now, uint32_t live_segments,
                    std::vector<StoredField>* scratch, std::vector<Field>* out, uint32_t* live);

// InvalidArgument unless `name` is 1 to kMaxFieldNameBytes bytes.
Status CheckFieldName(std::string_view name);
// Checks a value to store: its size (LimitExceeded), a string's UTF-8, a
// time within 32 bits (InvalidArgument).
Status CheckFieldValue(std::string_view name, const FieldValue& v, const FieldLimits& limits);
// Checks a field_set request before anything is read (names, values, no
// name twice, expiries in the future or never, TTLs that fit):
// InvalidArgument or LimitExceeded naming the first offending field.
Status CheckFieldSet(std::span<const FieldUpdate> fields, UnixSeconds now,
                     const FieldLimits& limits);
// The expiry a FieldUpdate's (expiry, ttl) means at `now`.
UnixSeconds FieldExpiry(uint32_t expiry, bool ttl, UnixSeconds now);

// The field named `name` in `fields` (sorted by name), or null.
Field* FindField(std::vector<Field>& fields, std::string_view name);
// Sets `f` in `fields` (sorted by name), keeping them sorted.
void PutField(std::vector<Field>& fields, Field f);

}  // namespace segstore::profile
