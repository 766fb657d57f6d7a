// libFuzzer target: the body of a count request (proto::Decode into CountRequest).
// The checks are request_harness.h's; seeds: proto/examples/count*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::CountRequest)
