// libFuzzer target, differential: the client's one-pass get-answer reader
// (src/proto/get_reader.h, ReadGetAnswer) against the general msgpack
// decoder (DecodeGeneral), on every input, both as a get answer and as a
// batch_get answer.
//
// The reader may decline any body (it then says false and proto::Decode
// falls back), so "agree" means: when it accepts, the general decoder
// accepts too, with the same value; proto::Decode gives exactly what the
// general decoder gives; and whatever the general decoder accepts, encoded
// the way the server encodes it, the reader accepts with the same value (the
// fast path must cover what servers send). Decoded answers keep their column
// lengths equal.
//
// Seeds: the bodies of proto/examples/get*.response.hex and batch_get.response.hex.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "fuzz/wire_compare.h"
#include "proto/get_reader.h"
#include "proto/wire.h"

namespace segstore::fuzz {
namespace {

// Small, so that lists over the limit are a few hundred bytes away.
proto::DecodeLimits ReaderLimits() {
  proto::DecodeLimits l;
  l.max_batch = 8;
  l.max_list = 64;
  return l;
}

void CheckColumns(const GetResult& r) {
  FUZZ_CHECK(r.expires.empty() || r.expires.size() == r.ids.size());
  FUZZ_CHECK(r.attr1.empty() || r.attr1.size() == r.ids.size());
  FUZZ_CHECK(r.attr2.empty() || r.attr2.size() == r.ids.size());
}

void CheckColumns(const proto::BatchGetResponse& r) {
  for (const Result<GetResult>& one : r) {
    if (one.ok()) {
      CheckColumns(*one);
    } else {
      FUZZ_CHECK(!one.status().ok());
    }
  }
}

template <typename Answer>
void Differential(std::string_view body, const proto::DecodeLimits& l) {
  Answer fast;
  const bool fast_ok = proto::internal::ReadGetAnswer(body, l, &fast);
  Answer general;
  const Status general_status = proto::internal::DecodeGeneral(body, l, &general);
  FUZZ_CHECK(general_status.ok() || IsCleanRefusal(general_status));
  if (fast_ok) {
    FUZZ_CHECK(general_status.ok());
    FUZZ_CHECK(Same(fast, general));
  }
  Answer decoded;
  const Status decoded_status = proto::Decode(body, l, &decoded);
  FUZZ_CHECK(Same(decoded_status, general_status));
  if (!general_status.ok()) return;
  FUZZ_CHECK(Same(decoded, general));
  CheckColumns(general);

  // The server's encoding of the value: the reader must take it, and both
  // paths must read the value back.
  std::string again;
  proto::Encode(general, &again);
  Answer fast_again;
  FUZZ_CHECK(proto::internal::ReadGetAnswer(again, l, &fast_again));
  FUZZ_CHECK(Same(fast_again, general));
  Answer general_again;
  FUZZ_CHECK(proto::internal::DecodeGeneral(again, l, &general_again).ok());
  FUZZ_CHECK(Same(general_again, general));
}

}  // namespace
}  // namespace segstore::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace segstore;
  const std::string_view body = fuzz::AsChars(data, size);
  const proto::DecodeLimits limits = fuzz::ReaderLimits();
  fuzz::Differential<GetResult>(body, limits);
  fuzz::Differential<proto::BatchGetResponse>(body, limits);
  return 0;
}
