// Field-by-field equality of the wire's decoded messages, which the structs
// of src/proto/wire.h and include/segstore do not define themselves: how the
// fuzz targets compare a decoded value with its re-decoded encoding.
#pragma once

#include "proto/wire.h"
#include "segstore/messages.h"
#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::fuzz {

inline bool Same(const GetOptions& a, const GetOptions& b) {
  return a.expiry_from == b.expiry_from && a.expiry_to == b.expiry_to &&
         a.outside_expiry_window == b.outside_expiry_window && a.id_from == b.id_from &&
         a.id_to == b.id_to && a.count_only == b.count_only && a.limit == b.limit &&
         a.ids_only == b.ids_only && a.own_only == b.own_only && a.fields == b.fields;
}

inline bool Same(const SegmentUpdate& a, const SegmentUpdate& b) {
  return a.id == b.id && a.value == b.value && a.ttl == b.ttl && a.attr1 == b.attr1 &&
         a.attr2 == b.attr2;
}

inline bool Same(const UpsertItem& a, const UpsertItem& b) {
  if (a.user != b.user || a.mode != b.mode || a.replace_attrs != b.replace_attrs ||
      a.segments.size() != b.segments.size()) {
    return false;
  }
  for (size_t i = 0; i < a.segments.size(); ++i) {
    if (!Same(a.segments[i], b.segments[i])) return false;
  }
  return true;
}

inline bool Same(const proto::HelloRequest& a, const proto::HelloRequest& b) {
  return a.client == b.client;
}
inline bool Same(const proto::GetRequest& a, const proto::GetRequest& b) {
  return a.user == b.user && Same(a.options, b.options);
}
inline bool Same(const proto::BatchGetRequest& a, const proto::BatchGetRequest& b) {
  return a.users == b.users && Same(a.options, b.options);
}
inline bool Same(const proto::CountRequest& a, const proto::CountRequest& b) {
  return a.user == b.user && a.id_from == b.id_from && a.id_to == b.id_to;
}
inline bool Same(const proto::BatchUpsertRequest& a, const proto::BatchUpsertRequest& b) {
  if (a.items.size() != b.items.size()) return false;
  for (size_t i = 0; i < a.items.size(); ++i) {
    if (!Same(a.items[i], b.items[i])) return false;
  }
  return true;
}
inline bool Same(const proto::RemoveRequest& a, const proto::RemoveRequest& b) {
  return a.user == b.user && a.ids == b.ids;
}
inline bool Same(const proto::TrimRequest& a, const proto::TrimRequest& b) {
  return a.user == b.user && a.before == b.before;
}
inline bool Same(const proto::DeleteRequest& a, const proto::DeleteRequest& b) {
  return a.user == b.user;
}
inline bool Same(const proto::ExpireRequest& a, const proto::ExpireRequest& b) {
  return a.user == b.user && a.ids == b.ids && a.value == b.value && a.ttl == b.ttl &&
         a.condition == b.condition && a.write_id == b.write_id;
}
inline bool Same(const proto::LinkRequest& a, const proto::LinkRequest& b) {
  return a.user == b.user && a.master == b.master && a.ttl == b.ttl && a.write_id == b.write_id;
}
inline bool Same(const proto::UnlinkRequest& a, const proto::UnlinkRequest& b) {
  return a.user == b.user && a.write_id == b.write_id;
}
inline bool Same(const proto::MasterOfRequest& a, const proto::MasterOfRequest& b) {
  return a.user == b.user;
}
inline bool Same(const proto::LinksRequest& a, const proto::LinksRequest& b) {
  return a.user == b.user && a.cursor == b.cursor && a.limit == b.limit;
}
inline bool Same(const proto::ConnectedRequest& a, const proto::ConnectedRequest& b) {
  return a.a == b.a && a.b == b.b;
}
inline bool Same(const proto::LinkStepRequest& a, const proto::LinkStepRequest& b) {
  return a.step == b.step && a.write_id == b.write_id;
}
inline bool Same(const proto::ReadRecordsRequest& a, const proto::ReadRecordsRequest& b) {
  return a.users == b.users;
}
inline bool Same(const proto::CopyPartitionRequest& a, const proto::CopyPartitionRequest& b) {
  return a.partition == b.partition && a.cursor == b.cursor && a.min_next == b.min_next &&
         a.max_bytes == b.max_bytes;
}

inline bool Same(const FieldUpdate& a, const FieldUpdate& b) {
  return a.name == b.name && a.value == b.value && a.expiry == b.expiry && a.ttl == b.ttl;
}
inline bool Same(const proto::FieldSetRequest& a, const proto::FieldSetRequest& b) {
  if (a.user != b.user || a.write_id != b.write_id || a.fields.size() != b.fields.size()) {
    return false;
  }
  for (size_t i = 0; i < a.fields.size(); ++i) {
    if (!Same(a.fields[i], b.fields[i])) return false;
  }
  return true;
}
inline bool Same(const proto::FieldDeleteRequest& a, const proto::FieldDeleteRequest& b) {
  return a.user == b.user && a.names == b.names && a.write_id == b.write_id;
}
inline bool Same(const proto::FieldIncrementRequest& a, const proto::FieldIncrementRequest& b) {
  const FieldIncrement &x = a.increment, &y = b.increment;
  return a.user == b.user && x.name == y.name && x.delta == y.delta && x.ttl == y.ttl &&
         x.window == y.window && x.cap == y.cap && a.write_id == b.write_id;
}
inline bool Same(const proto::FieldMaxRequest& a, const proto::FieldMaxRequest& b) {
  return a.user == b.user && Same(a.field, b.field) && a.write_id == b.write_id;
}

inline bool Same(const GetResult& a, const GetResult& b) {
  return a.count == b.count && a.ids == b.ids && a.expires == b.expires && a.attr1 == b.attr1 &&
         a.attr2 == b.attr2 && a.master == b.master && a.profiles == b.profiles &&
         a.fields_asked == b.fields_asked && a.fields == b.fields;
}
inline bool Same(const Status& a, const Status& b) {
  return a.code() == b.code() && a.message() == b.message();
}
inline bool Same(const proto::BatchGetResponse& a, const proto::BatchGetResponse& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].ok() != b[i].ok()) return false;
    if (a[i].ok() ? !Same(*a[i], *b[i]) : !Same(a[i].status(), b[i].status())) return false;
  }
  return true;
}

}  // namespace segstore::fuzz
