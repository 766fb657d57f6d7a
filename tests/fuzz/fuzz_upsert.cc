// libFuzzer target: the body of a upsert request (proto::Decode into UpsertRequest).
// The checks are request_harness.h's; seeds: proto/examples/upsert*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::UpsertRequest)
