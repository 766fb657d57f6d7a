#include "server/peer_source.h"

namespace segstore::server {

Result<CopyPartitionResponse> PeerSource::Fetch(const ClusterNode& node,
                                                const CopyPartitionRequest& request) {
  auto it = clients_.find(node.address);
  if (it == clients_.end()) {
    client::ClientOptions o = base_;
    SEGSTORE_RETURN_IF_ERROR(client::ParseServerAddress(node.address, &o));
    if (o.tls.enabled && o.tls.server_name.empty()) o.tls.server_name = o.host;
    Result<std::unique_ptr<client::Client>> c = client::Client::Connect(o);
    if (!c.ok()) return c.status().WithContext("connecting to node " + node.id);
    it = clients_.emplace(node.address, std::move(*c)).first;
  }
  Result<CopyPartitionResponse> page = it->second->CopyPartition(request);
  // Anything but an answer may have left the connection unusable: a new one next time.
  if (!page.ok() && page.status().code() != Status::Code::kBusy &&
      page.status().code() != Status::Code::kWrongNode) {
    clients_.erase(it);
  }
  return page;
}

}  // namespace segstore::server
