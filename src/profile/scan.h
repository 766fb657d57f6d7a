// A stored record as a scan answers it (proto/PROTOCOL.md, "scan"): the
// user's own live segments, live fields and live link, decoded from one
// version of its record, so that a client reading a whole partition needs
// no profile codec. Pure functions; thread-safe as the name table is.
#pragma once

#include <string_view>

#include "profile/field_names.h"
#include "segstore/messages.h"
#include "segstore/result.h"

namespace segstore::profile {

// Decodes the record of `key` (its `body` as stored here, with the key it
// names, `reference`) into *out: what is live at `now` (segments and fields
// expiring after it or never, a link expiring after it or never). Returns
// false when nothing is live (a record a reader would not find, or an
// emptied one keeping its log position): such a record is not scanned.
// Corruption when the body or its fields section is damaged, or names a
// field number `names` does not have; `out` is then unspecified.
Result<bool> ScanRecord(std::string_view key, std::string_view body, std::string_view reference,
                        const FieldNames& names, UnixSeconds now, ScannedProfile* out);

}  // namespace segstore::profile
