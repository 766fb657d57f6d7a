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
inline void CheckDecoded(const proto::GetRequest& m, const proto::DecodeLimits& l) {
  CheckUser(m.user, l);
}
inline void CheckDecoded(const proto::BatchGetRequest& m, const proto::DecodeLimits& l) {
  FUZZ_CHECK(m.users.size() <= l.max_batch);
  for (const std::string& u : m.users) CheckUser(u, l);
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
  for (const proto::UpsertRequest& item : m.items) CheckDecoded(item, l);
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
  std::string again;
  proto::Encode(m, &again);
  Request back;
  const Status s2 = proto::Decode(again, limits, &back);
  FUZZ_CHECK(s2.ok());
  FUZZ_CHECK(Same(m, back));
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
