#include "server/peer_links.h"

#include <boost/asio.hpp>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "segstore/async_cluster_client.h"

namespace segstore::server {

struct PeerLinks::Impl {
  client::ClientOptions base;
  const cluster::ViewBoard* board;
  boost::asio::io_context io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work{
      io.get_executor()};
  std::thread thread;

  // On the thread only.
  std::unique_ptr<client::AsyncClusterClient> client;
  bool connecting = false;
  // What waits for the client: called with it, or with null and the error.
  std::deque<std::function<void(client::AsyncClusterClient*, const Status&)>> waiting;

  // Runs `use` with a connected client (connecting first if needed).
  void WithClient(std::function<void(client::AsyncClusterClient*, const Status&)> use) {
    if (client != nullptr) return use(client.get(), Status::OK());
    waiting.push_back(std::move(use));
    if (connecting) return;
    const std::shared_ptr<const cluster::ClusterView> view = board->view();
    if (view == nullptr || view->map.nodes.empty()) {
      return FailWaiting(Status::Unavailable("this node has no partition map yet: no peer to ask"));
    }
    client::AsyncClusterClientOptions o;
    o.node = base;
    // Any node answers the map; this one's own entry is as good as another.
    if (Status s = client::ParseServerAddress(view->map.nodes.front().address, &o.node); !s.ok()) {
      return FailWaiting(s);
    }
    if (o.node.tls.enabled && o.node.tls.server_name.empty()) o.node.tls.server_name = o.node.host;
    o.connections_per_node = 2;
    connecting = true;
    client::AsyncClusterClient::Connect(
        io, o, [this](Result<std::unique_ptr<client::AsyncClusterClient>> c) {
          connecting = false;
          if (!c.ok()) return FailWaiting(c.status().WithContext("reaching the cluster's nodes"));
          client = std::move(*c);
          while (!waiting.empty()) {
            auto next = std::move(waiting.front());
            waiting.pop_front();
            next(client.get(), Status::OK());
          }
        });
  }

  void FailWaiting(const Status& s) {
    while (!waiting.empty()) {
      auto use = std::move(waiting.front());
      waiting.pop_front();
      use(nullptr, s);
    }
  }
};

PeerLinks::PeerLinks(client::ClientOptions base, const cluster::ViewBoard* board)
    : impl_(std::make_unique<Impl>()) {
  impl_->base = std::move(base);
  impl_->board = board;
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

PeerLinks::~PeerLinks() {
  boost::asio::post(impl_->io, [impl = impl_.get()] {
    impl->client.reset();  // fails what is in flight
    impl->FailWaiting(Status::Unavailable("shutting down"));
    impl->work.reset();
  });
  impl_->thread.join();
}

void PeerLinks::ReadRecords(std::vector<std::string> users,
                            std::function<void(Result<std::vector<Result<StoredRecord>>>)> done) {
  boost::asio::post(
      impl_->io, [impl = impl_.get(), users = std::move(users), done = std::move(done)]() mutable {
        impl->WithClient([users = std::move(users), done = std::move(done)](
                             client::AsyncClusterClient* c, const Status& s) mutable {
          if (c == nullptr) return done(s);
          c->ReadRecords(users, std::move(done));
        });
      });
}

void PeerLinks::SendLinkStep(LinkStep step, std::function<void(Result<LinkStepResult>)> done) {
  boost::asio::post(impl_->io,
                    [impl = impl_.get(), step = std::move(step), done = std::move(done)]() mutable {
                      impl->WithClient([step = std::move(step), done = std::move(done)](
                                           client::AsyncClusterClient* c, const Status& s) mutable {
                        if (c == nullptr) return done(s);
                        c->SendLinkStep(step, std::move(done));
                      });
                    });
}

template <typename T, typename SendFn>
void PeerLinks::Send(SendFn send, std::function<void(Result<T>)> done) {
  boost::asio::post(impl_->io,
                    [impl = impl_.get(), send = std::move(send), done = std::move(done)]() mutable {
                      impl->WithClient([send = std::move(send), done = std::move(done)](
                                           client::AsyncClusterClient* c, const Status& s) mutable {
                        if (c == nullptr) return done(s);
                        send(*c, std::move(done));
                      });
                    });
}

void PeerLinks::SendFieldSet(proto::FieldSetRequest req,
                             std::function<void(Result<FieldWriteResult>)> done) {
  Send<FieldWriteResult>(
      [req = std::move(req)](client::AsyncClusterClient& c, auto answered) {
        c.FieldSet(req.user, req.fields, req.write_id, std::move(answered));
      },
      std::move(done));
}

void PeerLinks::SendFieldDelete(proto::FieldDeleteRequest req,
                                std::function<void(Result<FieldWriteResult>)> done) {
  Send<FieldWriteResult>(
      [req = std::move(req)](client::AsyncClusterClient& c, auto answered) {
        c.FieldDelete(req.user, req.names, req.write_id, std::move(answered));
      },
      std::move(done));
}

void PeerLinks::SendFieldIncrement(proto::FieldIncrementRequest req,
                                   std::function<void(Result<IncrementResult>)> done) {
  Send<IncrementResult>(
      [req = std::move(req)](client::AsyncClusterClient& c, auto answered) {
        c.FieldIncrement(req.user, req.increment, req.write_id, std::move(answered));
      },
      std::move(done));
}

void PeerLinks::SendFieldMax(proto::FieldMaxRequest req,
                             std::function<void(Result<FieldMaxResult>)> done) {
  Send<FieldMaxResult>(
      [req = std::move(req)](client::AsyncClusterClient& c, auto answered) {
        c.FieldMax(req.user, req.field, req.write_id, std::move(answered));
      },
      std::move(done));
}

}  // namespace segstore::server
