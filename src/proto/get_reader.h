#pragma once

// Get answers read in one pass over the bytes, without msgpack's tree of
// objects. A get answer carries two integer columns of thousands of rows;
// building an object for each row took half of a client's CPU (perf, segbench
// get). Decode(GetResult) and Decode(BatchGetResponse) try this first and
// fall back to the general path, which names whatever is wrong.

#include <string_view>

#include "proto/wire.h"

namespace segstore::proto::internal {

// True when `body` is a get answer (or a batch of them) in the forms the
// server writes: the result in *m is then exactly what the general path
// gives. False for anything else, including every malformed body; *m is then
// unspecified and the caller takes the general path.
bool ReadGetAnswer(std::string_view body, const DecodeLimits& limits, GetResult* m);
bool ReadGetAnswer(std::string_view body, const DecodeLimits& limits, BatchGetResponse* m);

// The general path alone (msgpack's object tree), for tests that hold the
// two to the same answers.
Status DecodeGeneral(std::string_view body, const DecodeLimits& limits, GetResult* m);
Status DecodeGeneral(std::string_view body, const DecodeLimits& limits, BatchGetResponse* m);

}  // namespace segstore::proto::internal
