// PeerLinks: how a cluster node's handlers reach the other nodes for
// profile bridging (proto/PROTOCOL.md, "Linked profiles"): the records of a
// group's members other nodes hold (read_records), and a link's steps on
// records other nodes hold (link_step, written through their log). One
// thread of its own runs an AsyncClusterClient (connected when first
// needed, to a node of the map the node's view has), which routes each user
// to a node holding it and retries as every client does; callbacks run on
// that thread, so a handler posts them back to its loop.
//
// Thread-safe: ReadRecords and SendLinkStep from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/view.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "segstore/messages.h"
#include "segstore/segments.h"

namespace segstore::server {

class PeerLinks {
 public:
  // `base`: TLS and secret for every node (as PeerSource's); the node to
  // ask first comes from `board`'s map. `board` outlives this.
  PeerLinks(client::ClientOptions base, const cluster::ViewBoard* board);
  ~PeerLinks();  // fails what is in flight (Unavailable), then stops the thread
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  void ReadRecords(std::vector<std::string> users,
                   std::function<void(Result<std::vector<Result<StoredRecord>>>)> done);
  void SendLinkStep(LinkStep step, std::function<void(Result<LinkStepResult>)> done);
  // A profile field write of a linked user's master, sent to the node
  // holding the master as the master's own write, with the client's write
  // ID (one is made when it has none), so a retry is applied once there.
  void SendFieldSet(proto::FieldSetRequest req, std::function<void(Result<FieldWriteResult>)> done);
  void SendFieldDelete(proto::FieldDeleteRequest req,
                       std::function<void(Result<FieldWriteResult>)> done);
  void SendFieldIncrement(proto::FieldIncrementRequest req,
                          std::function<void(Result<IncrementResult>)> done);
  void SendFieldMax(proto::FieldMaxRequest req, std::function<void(Result<FieldMaxResult>)> done);

 private:
  struct Impl;
  // Runs `send(client, done)` on the thread with a connected client.
  template <typename T, typename Send>
  void Send(Send send, std::function<void(Result<T>)> done);
  std::unique_ptr<Impl> impl_;
};

}  // namespace segstore::server
