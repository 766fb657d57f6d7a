// The whole server in this test process: a store (on its file, or on a
// device the test made, such as a FaultDevice), the profile layer,
// ProfileService and the front end on an ephemeral 127.0.0.1 port, with a
// client to reach it. Used by server_test.cc and fault_test.cc.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "common/clock.h"
#include "segstore/client.h"
#include "server/profile_service.h"
#include "server/server.h"

namespace segstore::server::testing {

// A store on a temporary file, small and quick to create, reading `clock`:
// what the in-process tests serve from.
inline storage::StoreOptions SmallStore(std::string path, Clock* clock,
                                        uint64_t file_size = 64u << 20) {
  storage::StoreOptions o;
  o.path = std::move(path);
  o.file_size = file_size;
  o.write_block_size = 256u << 10;
  o.clock = clock;
  return o;
}

struct InProcessServer {
  // Opens everything; a failure is a fatal test failure (check
  // HasFatalFailure()). `device` null: the store opens `store_options.path`.
  // `replicate`, when given, runs once the profile layer is open and before
  // the service is made: a cluster test starts its replicator there (kept in
  // `replicator`, stopped after the front end) and points the service at it.
  void Start(const storage::StoreOptions& store_options,
             std::shared_ptr<storage::Device> device,
             const profile::ProfileOptions& profile_options,
             ProfileServiceOptions service_options, ServerOptions server_options,
             const std::function<void(InProcessServer*, ProfileServiceOptions*)>& replicate = {}) {
    auto opened = device ? storage::Store::Open(store_options, std::move(device))
                         : storage::Store::Open(store_options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store = std::move(opened).value();
    auto p = profile::ProfileStore::Open(store.get(), profile_options);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    profiles = std::move(p).value();
    if (replicate) replicate(this, &service_options);
    service = std::make_unique<ProfileService>(store.get(), profiles.get(), service_options);
    server_options.host = "127.0.0.1";
    server_options.port = 0;
    if (server_options.clock == nullptr) server_options.clock = store_options.clock;
    server = std::make_unique<Server>(server_options, service.get());
    service->set_server_counters([s = server.get()](ServerCounters* c) { s->CountersInto(c); });
    Status s = server->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Front end first (it finishes what is in flight), then the layers below.
  void Stop() {
    if (server) server->Stop();
    server.reset();
    replicator.reset();
    service.reset();
    profiles.reset();
    store.reset();
  }

  std::unique_ptr<client::Client> Connect(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const {
    client::ClientOptions o;
    o.port = server->port();
    o.request_timeout = timeout;
    o.connect_timeout = timeout;
    auto c = client::Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  std::unique_ptr<storage::Store> store;
  std::unique_ptr<profile::ProfileStore> profiles;
  std::unique_ptr<replica::Replicator> replicator;
  std::unique_ptr<ProfileService> service;
  std::unique_ptr<Server> server;
};

}  // namespace segstore::server::testing
