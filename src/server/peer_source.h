// PeerSource: how segstored's bootstrapper reads a partition's pages from
// another node of its cluster (replica::PartitionSource): the client
// library's copy_partition over a connection kept per node, with the
// credentials the node's own client port uses (its TLS certificate as the
// client certificate, the first of its shared secrets).
//
// Thread-compatible: the bootstrapper's thread only.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "replica/bootstrap.h"
#include "segstore/client.h"

namespace segstore::server {

class PeerSource final : public replica::PartitionSource {
 public:
  // `base`: TLS and secret for every peer; host and port come from each node.
  explicit PeerSource(client::ClientOptions base) : base_(std::move(base)) {}
  Result<CopyPartitionResponse> Fetch(const ClusterNode& node,
                                      const CopyPartitionRequest& request) override;

 private:
  client::ClientOptions base_;
  std::map<std::string, std::unique_ptr<client::Client>> clients_;  // by address
};

}  // namespace segstore::server
