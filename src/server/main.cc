// segstored: reads the configuration, opens the store (recovering it),
// serves until SIGTERM or SIGINT, then shuts down cleanly. Everything else
// lives in the libraries; see ARCHITECTURE.md.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>

#include "common/secret_file.h"
#include "server/admin.h"
#include "server/config.h"
#include "server/heap.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/peer_links.h"
#include "server/peer_source.h"
#include "server/profile_service.h"
#include "server/server.h"

namespace {

using segstore::Status;
namespace server = segstore::server;

constexpr const char* kVersion = SEGSTORE_VERSION;

struct Overrides {
  std::string config;
  std::string listen;
  std::string admin_listen;
  std::string resp_listen;
  std::string data;
  std::string file_size;
  std::string durability;
  std::string log_level;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string auth_secret_file;
  std::optional<unsigned> threads;
  bool print_config = false;
  bool print_metrics_doc = false;
};

Status BuildConfig(const Overrides& o, server::Config* c) {
  *c = server::DefaultConfig();
  if (!o.config.empty()) SEGSTORE_RETURN_IF_ERROR(server::LoadConfigFile(o.config, c));
  const std::string cli = "command line: ";
  if (!o.listen.empty()) {
    Status s = server::ParseListen(o.listen, &c->server);
    if (!s.ok()) return s.WithContext("--listen");
  }
  if (!o.admin_listen.empty()) {
    Status s = server::ParseAdminListen(o.admin_listen, &c->admin);
    if (!s.ok()) return s.WithContext("--admin-listen");
  }
  if (!o.resp_listen.empty()) {
    Status s = server::ParseRespListen(o.resp_listen, &c->server);
    if (!s.ok()) return s.WithContext("--resp-listen");
  }
  if (!o.data.empty()) c->storage.path = o.data;
  if (!o.file_size.empty()) {
    Status s = server::ParseBytes(o.file_size, &c->storage.file_size);
    if (!s.ok()) return s.WithContext("--file-size");
  }
  if (!o.durability.empty()) {
    Status s = server::ParseDurability(o.durability, &c->storage.durability);
    if (!s.ok()) return s.WithContext("--durability");
  }
  if (!o.log_level.empty()) {
    if (spdlog::level::from_str(o.log_level) == spdlog::level::off && o.log_level != "off") {
      return Status::InvalidArgument("--log-level: \"" + o.log_level +
                                     "\" is not one of trace, debug, info, warn, error, "
                                     "critical, off");
    }
    c->log_level = o.log_level;
  }
  if (o.threads) c->server.threads = *o.threads;
  if (!o.tls_cert.empty()) c->server.tls.cert_file = o.tls_cert;
  if (!o.tls_key.empty()) c->server.tls.key_file = o.tls_key;
  if (!o.tls_client_ca.empty()) c->server.tls.client_ca_file = o.tls_client_ca;
  if (!o.auth_secret_file.empty()) c->server.auth_secret_file = o.auth_secret_file;
  SEGSTORE_RETURN_IF_ERROR(server::FinishClusterConfig(c));
  SEGSTORE_RETURN_IF_ERROR(server::FinishStorageConfig(c));
  return server::Validate(*c);
}

// What the admin endpoint's handlers see. They run on the admin thread,
// which starts before recovery (so probes answer while a large device is
// read) and stops last; `mu` keeps the objects from going away under them.
struct AdminState {
  std::mutex mu;
  std::string not_ready = "starting";  // empty once serving
  server::ProfileService* service = nullptr;
  server::Server* front = nullptr;
  const segstore::cluster::ViewBoard* cluster = nullptr;      // in a cluster
  const segstore::replica::Replicator* replicator = nullptr;  // in a cluster with a log
};

// A loop that has not run a posted task for this long counts as stuck.
constexpr std::chrono::milliseconds kStuckLoop{10'000};

server::AdminHandlers MakeAdminHandlers(AdminState* state) {
  server::AdminHandlers h;
  h.metrics = [state] {
    std::lock_guard lock(state->mu);
    return state->service != nullptr ? state->service->PrometheusText() : std::string();
  };
  h.live = [state] {
    std::lock_guard lock(state->mu);
    return state->front == nullptr || state->front->LoopsAlive(kStuckLoop);
  };
  h.not_ready = [state]() -> std::string {
    std::lock_guard lock(state->mu);
    if (!state->not_ready.empty()) return state->not_ready;
    if (!state->front->LoopsAlive(kStuckLoop)) return "an event loop is stuck";
    if (state->cluster != nullptr) {
      auto v = state->cluster->view();
      if (!v->serving) return "not registered in the cluster (etcd) yet";
      if (!v->map.has_map()) return "the cluster has no partition map yet";
    }
    if (state->replicator != nullptr && !state->replicator->caught_up()) {
      return "catching up with the cluster's log";
    }
    return std::string();
  };
  return h;
}

void SetNotReady(AdminState* state, std::string why) {
  std::lock_guard lock(state->mu);
  state->not_ready = std::move(why);
}

// An exposed port without TLS or without authentication is allowed (a
// private network may be trusted) but said out loud at every start.
void WarnIfExposed(const server::Config& config) {
  if (segstore::IsLoopbackHost(config.server.host)) return;
  const bool tls = config.server.tls.enabled();
  const bool auth = !config.server.auth_secret_file.empty();
  if (!tls) {
    spdlog::warn(
        "serving {} without TLS: requests, profiles{} cross the network in clear "
        "(set [tls] cert_file and key_file)",
        config.server.host, auth ? " and the shared secret" : "");
  }
  if (!auth && config.server.tls.client_ca_file.empty()) {
    spdlog::warn(
        "serving {} without authentication: anyone who reaches the port can read and "
        "delete profiles (set server.auth_secret_file or tls.client_ca_file)",
        config.server.host);
  }
}

// How this node connects to its peers (copying partitions): with TLS when
// its own port has it (its certificate as the client certificate, its client
// CAs, if any, as the CAs to trust), and the first of its shared secrets.
segstore::Result<segstore::client::ClientOptions> PeerClientOptions(const server::Config& config) {
  segstore::client::ClientOptions o;
  o.client_name = "segstored-" + config.cluster.self.id;
  o.connect_timeout = std::chrono::seconds(2);
  o.request_timeout = std::chrono::seconds(10);
  const server::TlsOptions& tls = config.server.tls;
  if (tls.enabled()) {
    o.tls.enabled = true;
    o.tls.cert_file = tls.cert_file;
    o.tls.key_file = tls.key_file;
    o.tls.ca_file = tls.client_ca_file;
  }
  if (!config.server.auth_secret_file.empty()) {
    segstore::Result<std::vector<std::string>> secrets =
        segstore::ReadSecretFile(config.server.auth_secret_file);
    if (!secrets.ok()) return secrets.status();
    o.auth_secret = secrets->front();
  }
  return o;
}

int Serve(const server::Config& config) {
  // Signals are taken synchronously by this thread; every thread started from
  // here on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reload the TLS files and auth secrets
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  AdminState admin_state;
  std::unique_ptr<server::AdminServer> admin;
  if (config.admin.enabled) {
    admin = std::make_unique<server::AdminServer>(config.admin, MakeAdminHandlers(&admin_state));
    if (Status s = admin->Start(); !s.ok()) {
      spdlog::critical("cannot start the admin endpoint: {}", s.ToString());
      return 1;
    }
    spdlog::info("admin endpoint on http://{} (/metrics, /health, /ready)", admin->endpoint());
  }

  server::Notify("STATUS=recovering " + config.storage.path);
  SetNotReady(&admin_state, "recovering " + config.storage.path);
  segstore::storage::StoreOptions store_options = config.storage;
  store_options.on_recovery_progress = [&admin_state](uint32_t done, uint32_t total) {
    SetNotReady(&admin_state, "recovering: " + std::to_string(done) + " of " +
                                  std::to_string(total) + " write blocks read");
    // A large device takes a while: keep systemd's start timeout ahead of us.
    server::Notify("STATUS=recovering: " + std::to_string(done) + " of " + std::to_string(total) +
                   " write blocks read\nEXTEND_TIMEOUT_USEC=30000000");
    spdlog::info("recovery: {} of {} write blocks read", done, total);
  };
  auto store = segstore::storage::Store::Open(store_options);
  if (!store.ok()) {
    // Said in full: a data file of a format version this build does not read
    // is refused here, and the message names both versions (FORMAT.md).
    spdlog::critical("cannot open the store at {}: {}", config.storage.path,
                     store.status().ToString());
    server::Notify("STATUS=cannot open the store at " + config.storage.path + ": " +
                   store.status().ToString());
    return 1;
  }
  // Recovery's scratch (the newest version of every key, block buffers) is
  // freed by now; under the raised trim threshold it would stay resident.
  server::TrimHeap();
  auto profiles = segstore::profile::ProfileStore::Open(store->get(), config.profile);
  if (!profiles.ok()) {
    spdlog::critical("cannot open the profile store: {}", profiles.status().ToString());
    return 1;
  }

  server::ProfileServiceOptions service_options;
  service_options.server_name = std::string("segstored ") + kVersion;
  service_options.max_batch = config.max_batch;
  service_options.max_frame_bytes = config.server.max_frame_bytes;
  service_options.max_in_flight = config.server.max_in_flight;
  service_options.max_segments = config.profile.max_segments;
  service_options.max_fields = config.profile.max_fields;
  service_options.max_field_bytes = config.profile.max_field_bytes;
  service_options.config = server::Describe(config);
  segstore::cluster::ViewBoard cluster_board;
  if (config.cluster_enabled) service_options.cluster = &cluster_board;
  // The agent starts once the port is bound; its figures are read through
  // this pointer from then on (the stats operation reads it on any loop).
  std::atomic<segstore::cluster::ClusterAgent*> cluster_agent{nullptr};
  // With a log, writes go through it: its applier follows the log from the
  // data file's checkpoints as soon as the node has a partition map.
  std::unique_ptr<segstore::replica::Replicator> replicator;
  if (config.cluster_log_enabled) {
    segstore::replica::ReplicaOptions ro = config.replica;
    ro.log.client_id = "segstored-" + config.cluster.self.id;
    ro.applier.lease_ttl_seconds = std::chrono::duration<double>(config.cluster.lease_ttl).count();
    ro.applier.lease_age_seconds = [&cluster_agent] {
      segstore::cluster::ClusterAgent* a = cluster_agent.load(std::memory_order_acquire);
      return a != nullptr ? a->stats().seconds_since_lease_ack : -1.0;
    };
    auto started = segstore::replica::Replicator::Start(ro, profiles->get(), &cluster_board);
    if (!started.ok()) {
      spdlog::critical("cannot start replication: {}", started.status().ToString());
      return 1;
    }
    replicator = std::move(*started);
    service_options.replicator = replicator.get();
    if (ro.passive) {
      spdlog::info(
          "cluster: passive: applies the log {} (topic {}, {} log partitions) and takes no writes",
          ro.log.brokers, ro.log.topic, ro.log.partitions);
    } else {
      spdlog::info("cluster: writes go through the log {} (topic {}, {} log partitions)",
                   ro.log.brokers, ro.log.topic, ro.log.partitions);
    }
  }
  // In a cluster, linked profiles reach the records and steps of other
  // nodes' users through PeerLinks (destroyed after the front end).
  std::unique_ptr<server::PeerLinks> peer_links;
  if (config.cluster_enabled) {
    segstore::Result<segstore::client::ClientOptions> peer_options = PeerClientOptions(config);
    if (!peer_options.ok()) {
      spdlog::critical("cluster: peers: {}", peer_options.status().ToString());
      return 1;
    }
    peer_links = std::make_unique<server::PeerLinks>(*peer_options, &cluster_board);
    service_options.peers = peer_links.get();
  }
  server::ProfileService service(store->get(), profiles->get(), service_options);
  if (config.cluster_enabled) {
    service.set_cluster_stats([&cluster_agent] {
      segstore::cluster::ClusterAgent* a = cluster_agent.load(std::memory_order_acquire);
      return a != nullptr ? a->stats() : segstore::cluster::AgentStats{};
    });
  }
  // The bootstrapper starts after the agent; read through this pointer.
  std::atomic<segstore::replica::Bootstrapper*> bootstrap_stats{nullptr};
  if (replicator) {
    service.set_bootstrap_stats([&bootstrap_stats] {
      segstore::replica::Bootstrapper* b = bootstrap_stats.load(std::memory_order_acquire);
      return b != nullptr ? b->stats() : segstore::replica::BootstrapStats{};
    });
  }
  server::ServerOptions front_options = config.server;
  front_options.cluster = config.cluster_enabled;
  server::Server front(front_options, &service);
  service.set_server_counters([&front](server::ServerCounters* c) { front.CountersInto(c); });
  if (Status s = front.Start(); !s.ok()) {
    spdlog::critical("cannot start serving: {}", s.ToString());
    return 1;
  }
  WarnIfExposed(config);

  // Joins the cluster once serving, so the address it advertises is bound.
  std::unique_ptr<segstore::cluster::ClusterAgent> agent;
  if (config.cluster_enabled) {
    segstore::cluster::AgentOptions agent_options = config.cluster;
    if (agent_options.self.address.empty()) {
      // front.endpoint() is host:port; an IPv6 host goes in brackets.
      const std::string& host = config.server.host;
      const std::string port = std::to_string(front.port());
      agent_options.self.address =
          host.find(':') != std::string::npos ? "[" + host + "]:" + port : host + ":" + port;
    }
    if (agent_options.self.resp.empty() && front.resp_port() != 0) {
      // The RESP port's address, as MOVED and CLUSTER SLOTS give it.
      const std::string& host = config.server.resp_host;
      const std::string port = std::to_string(front.resp_port());
      agent_options.self.resp =
          host.find(':') != std::string::npos ? "[" + host + "]:" + port : host + ":" + port;
    }
    agent_options.self.features = segstore::cluster::kNodeFeatures;
    auto started = segstore::cluster::ClusterAgent::Start(agent_options, &cluster_board);
    if (!started.ok()) {
      spdlog::critical("cannot join the cluster: {}", started.status().ToString());
      front.Stop();
      return 1;
    }
    agent = std::move(*started);
    cluster_agent.store(agent.get(), std::memory_order_release);
    spdlog::info("cluster: node {} joining through etcd {} under {}", agent_options.self.id,
                 agent_options.etcd.endpoints.front(), agent_options.prefix);
  }

  // With a log, partitions the map moves here are copied from their
  // replicas and caught up from the log (replica/bootstrap.h).
  std::unique_ptr<server::PeerSource> peers;
  std::unique_ptr<segstore::replica::Bootstrapper> bootstrapper;
  if (replicator && agent) {
    segstore::Result<segstore::client::ClientOptions> peer_options = PeerClientOptions(config);
    if (!peer_options.ok()) {
      spdlog::critical("cluster: peers: {}", peer_options.status().ToString());
      agent->Stop();
      front.Stop();
      return 1;
    }
    peers = std::make_unique<server::PeerSource>(*peer_options);
    auto started = segstore::replica::Bootstrapper::Start(
        segstore::replica::BootstrapOptions{}, profiles->get(), replicator->applier(),
        &cluster_board, peers.get(),
        [a = agent.get()](std::vector<uint16_t> ready, uint64_t revision) {
          a->SetReady(std::move(ready), revision);
        });
    if (!started.ok()) {
      spdlog::critical("cluster: cannot start bootstrapping: {}", started.status().ToString());
      agent->Stop();
      front.Stop();
      return 1;
    }
    bootstrapper = std::move(*started);
    bootstrap_stats.store(bootstrapper.get(), std::memory_order_release);
  }

  {
    std::lock_guard lock(admin_state.mu);
    admin_state.service = &service;
    admin_state.front = &front;
    admin_state.cluster = config.cluster_enabled ? &cluster_board : nullptr;
    admin_state.replicator = replicator.get();
    admin_state.not_ready.clear();
  }

  const segstore::storage::RecoveryStats& r = (*store)->recovery();
  const segstore::storage::StoreStats st = (*store)->stats();
  spdlog::info(
      "segstored {} serving on {} ({}) with {} threads, io {}; recovered {} live records from "
      "{} blocks in {:.2f} s ({} damaged regions); config: {}",
      kVersion, front.endpoint(), front.security(), front.threads(), st.io_backend, r.live_records,
      r.blocks_in_use, r.seconds, r.damaged_regions, server::DescribeLine(config));
  std::string resp_endpoint;
  if (front.resp_port() != 0) {
    resp_endpoint = config.server.resp_host + ":" + std::to_string(front.resp_port());
    spdlog::info("RESP (Redis protocol) on {}", resp_endpoint);
  }
  server::Notify("READY=1\nSTATUS=serving on " + front.endpoint() +
                 (admin ? ", admin on http://" + admin->endpoint() : std::string()) +
                 (resp_endpoint.empty() ? std::string() : ", resp on " + resp_endpoint));

  const auto watchdog = server::WatchdogInterval();
  const auto tick = watchdog ? std::chrono::duration_cast<std::chrono::milliseconds>(*watchdog / 2)
                             : std::chrono::milliseconds(1000);
  server::HeapTrimmer heap_trimmer(config.heap_trim_interval);
  int signal = 0;
  while (signal == 0) {
    // A worker's spare write block image saves its next block a page fault a
    // page while writes flow; after 5 s without a new block it goes back.
    (*store)->ReleaseSpareImages(std::chrono::seconds(5));
    heap_trimmer.Tick(std::chrono::steady_clock::now());
    timespec timeout{};
    timeout.tv_sec = tick.count() / 1000;
    timeout.tv_nsec = (tick.count() % 1000) * 1'000'000;
    const int got = sigtimedwait(&signals, nullptr, &timeout);
    if (got == SIGHUP) {
      if (Status s = front.ReloadCredentials(); s.ok()) {
        spdlog::info("SIGHUP: reloaded credentials for new connections: {}", front.security());
      } else {
        spdlog::error("SIGHUP: reload failed, keeping the credentials in force ({}): {}",
                      front.security(), s.ToString());
      }
    } else if (got > 0) {
      signal = got;
    } else if (watchdog) {
      // Ping only while every event loop is turning.
      if (front.LoopsAlive(std::chrono::duration_cast<std::chrono::milliseconds>(*watchdog))) {
        server::Notify("WATCHDOG=1");
      } else {
        spdlog::error("an event loop has not run for a watchdog interval; not pinging systemd");
      }
    }
  }

  spdlog::info("{}: stopping: finishing requests in flight", strsignal(signal));
  SetNotReady(&admin_state, "stopping");
  server::Notify("STOPPING=1\nSTATUS=stopping");
  // A copy in progress ends where it is (it starts over after a restart).
  if (bootstrapper) {
    bootstrap_stats.store(nullptr, std::memory_order_release);
    bootstrapper->Stop();
  }
  // Leaves the cluster first: its registration goes at once, not a TTL later.
  if (agent) {
    cluster_agent.store(nullptr, std::memory_order_release);
    agent->Stop();
  }
  front.Stop();  // handlers (and their storage workers) flush as they go
  if (admin) admin->Stop();
  // After the front: writes being drained wait for the applier. Its last
  // checkpoint goes to the device here.
  if (replicator) replicator->Stop();
  profiles->reset();
  store->reset();
  spdlog::info("stopped cleanly");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  server::TuneHeap();
  CLI::App app{"segstored: the segstore user-profile server"};
  Overrides o;
  app.add_option("-c,--config", o.config,
                 "TOML configuration file (config/segstored.toml documents every key)");
  app.add_option("--listen", o.listen,
                 "host:port to serve on; port 0 picks a free one (default 127.0.0.1:7700)");
  app.add_option("--admin-listen", o.admin_listen,
                 "host:port of the HTTP metrics and health endpoint, or off "
                 "(default 127.0.0.1:7701)");
  app.add_option("--resp-listen", o.resp_listen,
                 "host:port of the Redis-protocol (RESP) port, or off (default off; "
                 "proto/RESP.md)");
  app.add_option("--data", o.data,
                 "data file or block device (default segstore-data/segstore.dat)");
  app.add_option("--file-size", o.file_size, "size of a new data file, e.g. 4GiB");
  app.add_option("--durability", o.durability, "commit (default) or buffered");
  app.add_option("--threads", o.threads, "event loop threads (default: one per core)");
  app.add_option("--log-level", o.log_level, "trace, debug, info (default), warn, error, off");
  app.add_option("--tls-cert", o.tls_cert,
                 "PEM certificate chain: serve TLS only (with --tls-key; SIGHUP reloads)");
  app.add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", o.tls_client_ca,
                 "PEM CAs whose client certificates are required (mutual TLS)");
  app.add_option("--auth-secret-file", o.auth_secret_file,
                 "file of shared secrets, one per line: require one in hello (SIGHUP reloads)");
  app.add_flag("--print-config", o.print_config, "print the configuration in force and exit");
  app.add_flag("--print-metrics-doc", o.print_metrics_doc,
               "print docs/metrics.md (every metric, in Prometheus and stats) and exit");
  app.set_version_flag("--version", std::string("segstored ") + kVersion);
  CLI11_PARSE(app, argc, argv);
  if (o.print_metrics_doc) {
    std::fputs(server::MetricsDoc().c_str(), stdout);
    return 0;
  }

  server::Config config;
  if (Status s = BuildConfig(o, &config); !s.ok()) {
    std::fprintf(stderr, "segstored: %s\n", s.ToString().c_str());
    return 2;
  }
  if (o.print_config) {
    std::printf("%s\n", server::DescribeLine(config).c_str());
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  return Serve(config);
}
