// libFuzzer target: the body of a batch_upsert request (proto::Decode into BatchUpsertRequest).
// The checks are request_harness.h's; seeds: proto/examples/batch_upsert*.request.hex.
#include "fuzz/request_harness.h"

SEGSTORE_FUZZ_REQUEST_BODY(segstore::proto::BatchUpsertRequest)
