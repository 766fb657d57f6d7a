// libFuzzer target: the body of an expire request (proto::Decode into ExpireRequest).
// The checks are request_harness.h's; seeds: proto/examples/expire*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::ExpireRequest)
