#include "profile/scan.h"

#include <string>
#include <vector>

#include "profile/codec.h"
#include "profile/fields.h"

namespace segstore::profile {
namespace {

bool Live(UnixSeconds expires_at, UnixSeconds now) {
  return expires_at == kNever || now < expires_at;
}

}  // namespace

Result<bool> ScanRecord(std::string_view key, std::string_view body, std::string_view reference,
                        const FieldNames& names, UnixSeconds now, ScannedProfile* out) {
  Columns columns;
  SEGSTORE_RETURN_IF_ERROR(DecodeColumns(body, &columns));
  *out = ScannedProfile{};
  out->user.assign(key);
  for (size_t i = 0; i < columns.size(); ++i) {
    if (Live(columns.expires[i], now)) out->segments.push_back(columns.At(i));
  }
  std::vector<Field> fields;
  SEGSTORE_RETURN_IF_ERROR(ResolveFields(columns.fields, names, &fields));
  for (Field& f : fields) {
    if (Live(f.expires_at, now)) out->fields.push_back(std::move(f));
  }
  const Group& g = columns.group;
  if (g.member && !reference.empty() && Live(g.link_expires, now)) {
    out->master.assign(reference);
    out->link_expires = g.link_expires;
  }
  for (const GroupMember& m : g.members) {
    if (Live(m.expires_at, now)) out->members.push_back(LinkedUser{m.user, m.expires_at});
  }
  return !out->segments.empty() || !out->fields.empty() || !out->master.empty() ||
         !out->members.empty();
}

}  // namespace segstore::profile
