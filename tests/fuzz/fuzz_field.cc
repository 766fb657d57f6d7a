// libFuzzer target: the bodies of the profile field writes (field_set,
// field_del, field_incr, field_max; proto::Decode into each), where
// timestamps may stand as values. The first byte picks which (modulo 4),
// the rest is the body; one target rather than four keeps the fuzzing
// stage's time. The checks are request_harness.h's; seeds:
// proto/examples/field_*.request.hex.
#include "fuzz/request_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace f = ::segstore::fuzz;
  namespace p = ::segstore::proto;
  if (size == 0) return 0;
  switch (data[0] % 4) {
    case 0:
      return f::FuzzRequestBody<p::FieldSetRequest>(data + 1, size - 1);
    case 1:
      return f::FuzzRequestBody<p::FieldDeleteRequest>(data + 1, size - 1);
    case 2:
      return f::FuzzRequestBody<p::FieldIncrementRequest>(data + 1, size - 1);
    default:
      return f::FuzzRequestBody<p::FieldMaxRequest>(data + 1, size - 1);
  }
}
