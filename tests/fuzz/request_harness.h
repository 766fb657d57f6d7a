// The one harness behind every request-body target (fuzz_hello.cc,
// fuzz_get.cc, ...): decode the input as that request's MessagePack body
// (src/proto/wire.h) under small limits, so the over-limit paths are near.
//
// A refusal must be InvalidArgument or LimitExceeded with a message. A body
// that decodes must respect the limits (checked per request type below), and
// its re-encoding must decode to the same value and re-encode to the same
// bytes. ASan, UBSan and LeakSanitizer watch everything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/wire_compare.h"
#include "proto/wire.h"

namespace segstore::fuzz {

// Small, so that inputs of a few hundred bytes reach every limit.
inline proto::DecodeLimits BodyLimits() {
  proto::DecodeLimits l;
  l.max_key_bytes = 24;
  l.max_batch = 8;
  l.max_list = 32;
  return l;
}

inline void CheckUser(const std::string& user, const proto::DecodeLimits& l) {
  FUZZ_CHECK(!user.empty());
  FUZZ_CHECK(user.size() <= l.max_key_bytes);
}

inline void CheckDecoded(const proto::HelloRequest&, const proto::DecodeLimits&) {}
inline void CheckDecoded(const proto::EmptyRequest&, const proto::DecodeLimits&) {}
inline void CheckDecoded(const proto::GetRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  FUZZ_CHECK(proto::Check(l, m).ok());  // the field options too
}
// An entry of a batch that failed alone: a clean refusal, its fields empty.
// Returns whether entry i was accepted.
inline bool Accepted(const std::vector<Status>& rejected, size_t n, size_t i) {
  FUZZ_CHECK(rejected.empty() || rejected.size() == n);
  if (rejected.empty() || rejected[i].ok()) return true;
  FUZZ_CHECK(IsCleanRefusal(rejected[i]));
  return false;
}

inline void CheckDecoded(const proto::BatchGetRequest& m, const proto::DecodeLimits& l) {
  FUZZ_CHECK(m.users.size() <= l.max_batch);
  for (size_t i = 0; i < m.users.size(); ++i) {
    if (Accepted(m.rejected, m.users.size(), i)) {
      CheckUser(m.users[i], l);
    } else {
      FUZZ_CHECK(m.users[i].empty());
    }
  }
}
inline void CheckDecoded(const proto::CountRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
}
inline void CheckDecoded(const proto::UpsertRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  FUZZ_CHECK(m.segments.size() <= l.max_list);
  FUZZ_CHECK(m.mode == UpsertMode::kSet || m.mode == UpsertMode::kExtend ||
             m.mode == UpsertMode::kAdd);
}
inline void CheckDecoded(const proto::BatchUpsertRequest& m, const proto::DecodeLimits& l) {
  FUZZ_CHECK(m.items.size() <= l.max_batch);
  for (size_t i = 0; i < m.items.size(); ++i) {
    if (Accepted(m.rejected, m.items.size(), i)) {
      CheckDecoded(m.items[i], l);
    } else {
      FUZZ_CHECK(m.items[i].user.empty() && m.items[i].segments.empty());
    }
  }
}

// What a client would send of a decoded request: a batch without the
// entries that failed alone (the others must read back as they are).
template <typename Request>
Request Sendable(const Request& m) {
  return m;
}
inline proto::BatchGetRequest Sendable(const proto::BatchGetRequest& m) {
  proto::BatchGetRequest out;
  out.options = m.options;
  for (size_t i = 0; i < m.users.size(); ++i) {
    if (m.rejected.empty() || m.rejected[i].ok()) out.users.push_back(m.users[i]);
  }
  return out;
}
inline proto::BatchUpsertRequest Sendable(const proto::BatchUpsertRequest& m) {
  proto::BatchUpsertRequest out;
  for (size_t i = 0; i < m.items.size(); ++i) {
    if (m.rejected.empty() || m.rejected[i].ok()) out.items.push_back(m.items[i]);
  }
  return out;
}
inline void CheckDecoded(const proto::RemoveRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  FUZZ_CHECK(m.ids.size() <= l.max_list);
}
inline void CheckDecoded(const proto::TrimRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
}
inline void CheckDecoded(const proto::DeleteRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
}
inline void CheckDecoded(const proto::ExpireRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  FUZZ_CHECK(m.ids.size() <= l.max_list);
  FUZZ_CHECK(m.condition == ExpireCondition::kNone || m.condition == ExpireCondition::kNx ||
             m.condition == ExpireCondition::kXx || m.condition == ExpireCondition::kGt ||
             m.condition == ExpireCondition::kLt);
}
inline void CheckDecoded(const proto::LinkRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  CheckUser(m.master, l);
}
inline void CheckDecoded(const proto::UnlinkRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
}
inline void CheckDecoded(const proto::MasterOfRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
}
inline void CheckDecoded(const proto::LinksRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  if (!m.cursor.empty()) CheckUser(m.cursor, l);  // empty: from the start
}
inline void CheckDecoded(const proto::ConnectedRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.a, l);
  CheckUser(m.b, l);
}
inline void CheckDecoded(const proto::LinkStepRequest& m, const proto::DecodeLimits& l) {
  const LinkStep& s = m.step;
  CheckUser(s.user, l);
  for (const std::string* u : {&s.master, &s.member, &s.expect}) {
    if (!u->empty()) CheckUser(*u, l);
  }
  FUZZ_CHECK(s.moving.size() <= l.max_batch && s.listed.size() <= l.max_batch);
  for (const LinkedUser& u : s.moving) CheckUser(u.user, l);
  for (const std::string& u : s.listed) CheckUser(u, l);
  FUZZ_CHECK(s.kind >= LinkStep::Kind::kList && s.kind <= LinkStep::Kind::kDelete);
  if (s.kind == LinkStep::Kind::kList) FUZZ_CHECK(!s.member.empty() && s.max_links != 0);
}
inline void CheckDecoded(const proto::ReadRecordsRequest& m, const proto::DecodeLimits& l) {
  FUZZ_CHECK(!m.users.empty() && m.users.size() <= l.max_batch);
  for (const std::string& u : m.users) CheckUser(u, l);
}
inline void CheckFieldName(const std::string& name) {
  FUZZ_CHECK(!name.empty() && name.size() <= proto::kMaxFieldNameBytes);
}
inline void CheckDecoded(const proto::FieldSetRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  FUZZ_CHECK(m.fields.size() <= l.max_list);
  for (const FieldUpdate& u : m.fields) {
    CheckFieldName(u.name);
    if (u.value.type == FieldValue::Type::kTime)
      FUZZ_CHECK(u.value.i >= 0 && u.value.i <= UINT32_MAX);
  }
}
inline void CheckDecoded(const proto::FieldDeleteRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  FUZZ_CHECK(m.names.size() <= l.max_list);
  for (const std::string& n : m.names) CheckFieldName(n);
}
inline void CheckDecoded(const proto::FieldIncrementRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  CheckFieldName(m.increment.name);
  FUZZ_CHECK(m.increment.window == FieldIncrement::Window::kFixed ||
             m.increment.window == FieldIncrement::Window::kSliding);
}
inline void CheckDecoded(const proto::FieldMaxRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
  CheckFieldName(m.field.name);
  FUZZ_CHECK(m.field.value.type == FieldValue::Type::kInt ||
             m.field.value.type == FieldValue::Type::kDouble ||
             m.field.value.type == FieldValue::Type::kTime);
}
inline void CheckDecoded(const proto::CopyPartitionRequest& m, const proto::DecodeLimits&) {
  FUZZ_CHECK(m.partition < kPartitions);
  FUZZ_CHECK(m.cursor <= kCopyFinished);
}
inline void CheckDecoded(const proto::ScanRequest& m, const proto::DecodeLimits&) {
  FUZZ_CHECK(m.partition < kPartitions);
  FUZZ_CHECK(m.cursor <= kCopyFinished);
}

template <typename Request>
int FuzzRequestBody(const uint8_t* data, size_t size) {
  const proto::DecodeLimits limits = BodyLimits();
  Request m;
  const Status s = proto::Decode(AsChars(data, size), limits, &m);
  if (!s.ok()) {
    FUZZ_CHECK(IsCleanRefusal(s));
    return 0;
  }
  CheckDecoded(m, limits);

  // What the client library would send for this value reads back as it.
  const Request sent = Sendable(m);
  std::string again;
  proto::Encode(sent, &again);
  Request back;
  const Status s2 = proto::Decode(again, limits, &back);
  FUZZ_CHECK(s2.ok());
  FUZZ_CHECK(Same(sent, back));
  std::string third;
  proto::Encode(back, &third);
  FUZZ_CHECK(third == again);
  return 0;
}

}  // namespace segstore::fuzz

// One line per target: the libFuzzer entry point for `Request`.
#define SEGSTORE_FUZZ_REQUEST_BODY(Request)                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    return ::segstore::fuzz::FuzzRequestBody<Request>(data, size);          \
  }
