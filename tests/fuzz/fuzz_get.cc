// libFuzzer target: the body of a get request (proto::Decode into GetRequest).
// The checks are request_harness.h's; seeds: proto/examples/get*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::GetRequest)
