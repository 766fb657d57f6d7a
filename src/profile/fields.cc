#include "profile/fields.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/utf8.h"
#include "profile/codec.h"
#include "profile/segment_ops.h"

namespace segstore::profile {
namespace {

bool ByName(const Field& a, const Field& b) { return a.name < b.name; }

}  // namespace

std::string QuotedFieldName(std::string_view name) {
  std::string out = "'";
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(ch);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out.push_back('\'');
  return out;
}

namespace {

// Fields sorted by name, resolved (every name written out): a section keeps
// numbered and inline names in two runs, so the same name in both is damage.
template <typename AnyField>
Status NoNameTwice(const std::vector<AnyField>& sorted) {
  const auto twice =
      std::adjacent_find(sorted.begin(), sorted.end(),
                         [](const AnyField& a, const AnyField& b) { return a.name == b.name; });
  if (twice != sorted.end()) return Status::Corruption("profile body: a field name twice");
  return Status::OK();
}

}  // namespace

Status ResolveFields(std::string_view section, const FieldNames& names, std::vector<Field>* out) {
  out->clear();
  if (section.empty()) return Status::OK();
  std::vector<StoredField> stored;
  SEGSTORE_RETURN_IF_ERROR(DecodeFieldSection(section, &stored));
  out->reserve(stored.size());
  for (StoredField& f : stored) {
    Field field;
    if (f.name_id == 0) {
      field.name = std::move(f.name);
    } else {
      const std::string_view name = names.Name(f.name_id);
      if (name.empty()) {
        return Status::Corruption(
            fmt::format("profile body: field name number {} is not in the name table", f.name_id));
      }
      field.name = name;
    }
    field.value = std::move(f.value);
    field.expires_at = f.expires_at;
    out->push_back(std::move(field));
  }
  std::sort(out->begin(), out->end(), ByName);
  return NoNameTwice(*out);
}

void EncodeFields(std::span<const Field> fields, const FieldNames& names, std::string* section,
                  std::vector<std::string>* unnumbered) {
  std::vector<StoredField> stored;
  stored.reserve(fields.size());
  for (const Field& f : fields) {
    StoredField s;
    s.name_id = names.Find(f.name);
    if (s.name_id == 0) {
      s.name = f.name;
      unnumbered->push_back(f.name);
    }
    s.value = f.value;
    s.expires_at = f.expires_at;
    stored.push_back(std::move(s));
  }
  std::sort(stored.begin(), stored.end(), StoredBefore);
  section->clear();
  EncodeFieldSection(stored, section);
}

Status PortableBody(std::string_view body, const FieldNames& names, std::string* out,
                    std::vector<uint32_t>* dropped) {
  if (!HasFieldSection(body)) {
    out->assign(body);
    return Status::OK();
  }
  BodyHead head;
  SEGSTORE_RETURN_IF_ERROR(DecodeHead(body, &head));
  std::vector<StoredField> fields;
  SEGSTORE_RETURN_IF_ERROR(DecodeFieldSection(head.fields, &fields));
  for (StoredField& f : fields) {
    if (f.name_id == 0) continue;
    const std::string_view name = names.Name(f.name_id);
    if (name.empty()) {
      if (dropped == nullptr) {
        return Status::Corruption(
            fmt::format("profile body: field name number {} is not in the name table", f.name_id));
      }
      dropped->push_back(f.name_id);
      continue;
    }
    f.name = name;
    f.name_id = 0;
  }
  if (dropped != nullptr) {
    std::erase_if(fields, [](const StoredField& f) { return f.name_id != 0; });
  }
  std::sort(fields.begin(), fields.end(), StoredBefore);
  SEGSTORE_RETURN_IF_ERROR(NoNameTwice(fields));
  std::string section;
  if (!fields.empty()) EncodeFieldSection(fields, &section);
  // The segments go as they are stored.
  EncodeProfileKeeping(head.segments, head.log_position, head.group, section, out);
  return Status::OK();
}

Result<uint32_t> SelectFields(std::string_view section, const FieldNames& names,
                              const FieldSelection& selection, UnixSeconds now,
                              std::vector<StoredField>* scratch, std::vector<Field>* out) {
  out->clear();
  if (section.empty()) return 0u;
  SEGSTORE_RETURN_IF_ERROR(DecodeFieldSection(section, scratch));
  uint32_t live = 0;
  for (StoredField& f : *scratch) {
    if (!Alive(f.expires_at, now)) continue;
    ++live;
    if (selection.mode == FieldSelection::Mode::kNone) continue;
    std::string_view name = f.name;
    if (f.name_id != 0) {
      name = names.Name(f.name_id);
      if (name.empty()) {
        return Status::Corruption(
            fmt::format("profile body: field name number {} is not in the name table", f.name_id));
      }
    }
    bool wanted = true;
    if (selection.mode == FieldSelection::Mode::kPrefix) {
      wanted = name.starts_with(selection.prefix);
    } else if (selection.mode == FieldSelection::Mode::kNames) {
      wanted =
          std::find(selection.names.begin(), selection.names.end(), name) != selection.names.end();
    }
    if (wanted) out->push_back(Field{std::string(name), std::move(f.value), f.expires_at});
  }
  std::sort(out->begin(), out->end(), ByName);
  return live;
}

Status AnswerFields(std::string_view section, const FieldNames& names,
                    const FieldSelection& selection, UnixSeconds now, uint32_t live_segments,
                    std::vector<StoredField>* scratch, std::vector<Field>* out, uint32_t* live) {
  *live = 0;
  if (section.empty()) return Status::OK();
  if (selection.mode == FieldSelection::Mode::kNone && live_segments > 0) return Status::OK();
  Result<uint32_t> n = SelectFields(section, names, selection, now, scratch, out);
  if (!n.ok()) return n.status();
  *live = *n;
  return Status::OK();
}

Status CheckFieldName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("a field name is empty");
  if (name.size() > kMaxFieldNameBytes) {
    return Status::InvalidArgument(fmt::format("field {}: a name of {} bytes (at most {})",
                                               QuotedFieldName(name.substr(0, 16)), name.size(),
                                               kMaxFieldNameBytes));
  }
  return Status::OK();
}

Status CheckFieldValue(std::string_view name, const FieldValue& v, const FieldLimits& limits) {
  switch (v.type) {
    case FieldValue::Type::kString:
    case FieldValue::Type::kBytes:
      // A string is text: answers carry it as a MessagePack str, which
      // must be UTF-8 (other bytes are a bytes value). Checked first, as
      // the wire's decoder does before any limit.
      if (v.type == FieldValue::Type::kString && !IsUtf8(v.s)) {
        return Status::InvalidArgument(
            fmt::format("field {}: a string value that is not UTF-8 (store it as bytes)",
                        QuotedFieldName(name)));
      }
      if (v.s.size() > limits.max_value_bytes) {
        return Status::LimitExceeded(fmt::format("field {}: a value of {} bytes; the limit is {}",
                                                 QuotedFieldName(name), v.s.size(),
                                                 limits.max_value_bytes));
      }
      return Status::OK();
    case FieldValue::Type::kTime:
      if (v.i < 0 || v.i > UINT32_MAX) {
        return Status::InvalidArgument(
            fmt::format("field {}: time {} is outside 0..2^32-1", QuotedFieldName(name), v.i));
      }
      return Status::OK();
    case FieldValue::Type::kInt:
    case FieldValue::Type::kDouble:
      return Status::OK();
  }
  return Status::InvalidArgument(fmt::format("field {}: an unknown type", QuotedFieldName(name)));
}

UnixSeconds FieldExpiry(uint32_t expiry, bool ttl, UnixSeconds now) {
  // (A TTL checked against an earlier `now` may run past 2106 by the time
  // it is applied: it ends there.)
  return ttl ? static_cast<UnixSeconds>(std::min<uint64_t>(uint64_t{now} + expiry, UINT32_MAX))
             : expiry;
}

Status CheckFieldSet(std::span<const FieldUpdate> fields, UnixSeconds now,
                     const FieldLimits& limits) {
  if (fields.size() > limits.max_fields) {
    return Status::LimitExceeded(
        fmt::format("{} fields in one write; the limit is {}", fields.size(), limits.max_fields));
  }
  std::vector<std::string_view> names;
  names.reserve(fields.size());
  for (const FieldUpdate& f : fields) {
    SEGSTORE_RETURN_IF_ERROR(CheckFieldName(f.name));
    SEGSTORE_RETURN_IF_ERROR(CheckFieldValue(f.name, f.value, limits));
    if (f.ttl) {
      if (f.expiry == 0) {
        return Status::InvalidArgument(
            fmt::format("field {}: a TTL of 0 seconds", QuotedFieldName(f.name)));
      }
      if (uint64_t{now} + f.expiry > UINT32_MAX) {
        return Status::InvalidArgument(fmt::format("field {}: TTL of {} seconds runs past 2106",
                                                   QuotedFieldName(f.name), f.expiry));
      }
    } else if (f.expiry != kNever && f.expiry <= now) {
      return Status::InvalidArgument(
          fmt::format("field {}: expiry {} is not in the future (now is {})",
                      QuotedFieldName(f.name), f.expiry, now));
    }
    names.push_back(f.name);
  }
  std::sort(names.begin(), names.end());
  if (auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end()) {
    return Status::InvalidArgument(
        fmt::format("field {} appears twice in one write", QuotedFieldName(*dup)));
  }
  return Status::OK();
}

Field* FindField(std::vector<Field>& fields, std::string_view name) {
  auto it = std::lower_bound(fields.begin(), fields.end(), name,
                             [](const Field& f, std::string_view n) { return f.name < n; });
  return it != fields.end() && it->name == name ? &*it : nullptr;
}

void PutField(std::vector<Field>& fields, Field f) {
  auto it = std::lower_bound(fields.begin(), fields.end(), f.name,
                             [](const Field& x, const std::string& n) { return x.name < n; });
  if (it != fields.end() && it->name == f.name) {
    *it = std::move(f);
  } else {
    fields.insert(it, std::move(f));
  }
}

}  // namespace segstore::profile
