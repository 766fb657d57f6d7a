// libFuzzer target: the body of a delete request (proto::Decode into DeleteRequest).
// The checks are request_harness.h's; seeds: proto/examples/delete*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::DeleteRequest)
