// libFuzzer target: the body of a hello request (proto::Decode into HelloRequest).
// The checks are request_harness.h's; seeds: proto/examples/hello*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::HelloRequest)
