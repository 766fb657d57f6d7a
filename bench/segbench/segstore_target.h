// The segstore target of segbench: the client library's AsyncClient, one per
// connection, speaking the wire protocol to a running segstored.
#pragma once

#include <memory>

#include "bench/segbench/target.h"
#include "segstore/client.h"

namespace segstore::bench {

struct SegstoreOptions {
  client::ClientOptions client;  // the server's address; timeouts
  bool ids_only = false;         // gets ask for segment IDs only (the smallest answer)
};

// Samples the server once (a connection, hello and stats) to check it is
// there and is a segstored; Unavailable or the server's error otherwise.
Result<std::unique_ptr<Target>> NewSegstoreTarget(const SegstoreOptions& options);

}  // namespace segstore::bench
