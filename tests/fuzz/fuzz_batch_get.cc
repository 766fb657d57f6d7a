// libFuzzer target: the body of a batch_get request (proto::Decode into BatchGetRequest).
// The checks are request_harness.h's; seeds: proto/examples/batch_get*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::BatchGetRequest)
