// The segstore target of segbench: the client library speaking the wire
// protocol to a running segstored. A single server: one AsyncClient per
// connection. Any node of a cluster (its cluster_map says so): one
// AsyncClusterClient per connection, with one connection to every node, so
// that each request goes to a node holding its user; samples sum every
// node's figures.
#pragma once

#include <memory>

#include "bench/segbench/target.h"
#include "segstore/client.h"

namespace segstore::bench {

struct SegstoreOptions {
  client::ClientOptions client;  // the server's address; timeouts
  bool ids_only = false;         // gets ask for segment IDs only (the smallest answer)
};

// Samples the server once (a connection, hello, stats and cluster_map) to
// check it is there and is a segstored, and whether it is a cluster's node;
// Unavailable (also for a cluster with no map yet) or the server's error
// otherwise.
Result<std::unique_ptr<Target>> NewSegstoreTarget(const SegstoreOptions& options);

}  // namespace segstore::bench
