// libFuzzer target: the body of a trim request (proto::Decode into TrimRequest).
// The checks are request_harness.h's; seeds: proto/examples/trim*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::TrimRequest)
