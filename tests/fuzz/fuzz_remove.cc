// libFuzzer target: the body of a remove request (proto::Decode into RemoveRequest).
// The checks are request_harness.h's; seeds: proto/examples/remove*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::RemoveRequest)
