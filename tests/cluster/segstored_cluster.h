// A cluster of real segstored processes for tests, all on loopback: one etcd
// member, optionally librdkafka's mock Kafka (in a process of its own) as the
// cluster's log, and N nodes, each a segstored child process in its own
// directory of a fresh temp directory, started with a config of its own and
// a stand-in for systemd's notify socket. Node i is "node-<i>" in rack
// "rack-<i>", keeps its data in <dir>/n<i>/data and writes its log to
// <dir>/n<i>/log. Only PIDs this harness started are ever signalled (each
// Daemon by its own PID; etcd and the mock Kafka by their harnesses).
//
// A second cluster may follow the first (options().follow): a passive
// cluster, a second datacenter, with its own nodes and etcd prefix on the
// first's etcd, applying the first's log.
//
// The functions that check with gtest's fatal assertions return void: call
// them inside ASSERT_NO_FATAL_FAILURE. Header-only: a test that includes it
// defines SEGSTORED_PATH and SEGCTL_PATH (integration/daemon.h) and links
// segstore_client, segstore_test_etcd and segstore_test_kafka.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "integration/daemon.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "storage/test_util.h"
#include "support/etcd_server.h"
#include "support/kafka_mock.h"
#include "support/wait_for.h"

namespace segstore::server::testing {

// support/wait_for.h, with a minute's patience and 20 ms polls by default.
inline bool WaitFor(const std::function<bool()>& done,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(60000),
                    std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  return segstore::testing::WaitFor(done, timeout, poll);
}

// A number from a node's stats, by its stats name; -1 when absent (or when
// the node does not answer).
inline double StatOf(client::Client& c, std::string_view name) {
  Result<Stats> s = c.Stats();
  if (!s.ok()) return -1;
  for (const StatEntry& e : s->entries) {
    if (e.name != name) continue;
    if (const auto* u = std::get_if<uint64_t>(&e.value)) return static_cast<double>(*u);
    if (const auto* d = std::get_if<double>(&e.value)) return *d;
  }
  return -1;
}

class SegstoredCluster;

struct SegstoredClusterOptions {
  int nodes = 3;
  // Nodes Start() starts (0..start_nodes-1; 0: all), also each node's
  // initial_nodes; the others join later (StartNode).
  int start_nodes = 0;

  // [server]: threads = N; 0 leaves the line out (segstored's default).
  int threads = 0;
  // [storage]
  std::string file_size = "64MiB";
  std::string write_block_size = "256KiB";
  // [cluster]
  std::string etcd_prefix = "/test-cluster";
  int replication = 0;  // 0 leaves the line out (segstored's default, 1)
  int lease_ttl_seconds = 10;
  int map_poll_ms = 50;
  // More [cluster] lines ("failure_grace_seconds = 3", ...), as written.
  std::vector<std::string> cluster_lines;

  // A log: the mock Kafka (`log_brokers` brokers, topic `log_topic` of
  // `log_partitions` partitions) and the [cluster_log] section pointing at it.
  bool log = false;
  int log_brokers = 3;
  std::string log_topic = "segstore";
  int log_partitions = 8;
  // More [cluster_log] lines ("append_timeout_ms = 3000", ...), as written.
  std::vector<std::string> log_lines;
  // checkpoint_interval_ms = N in [cluster_log]; 0 leaves the line out.
  int checkpoint_interval_ms = 0;
  // A passive cluster: its nodes use this (started, outliving this one)
  // cluster's etcd, under their own etcd_prefix, and apply its log (its
  // topic and log partitions, `log` and the log_* above aside) with
  // `passive = true`. This cluster then starts neither.
  SegstoredCluster* follow = nullptr;

  // How long a node is given to say READY=1 once spawned.
  std::chrono::milliseconds ready_timeout{30000};
  // How often the harness's own waits (WaitServing, AgreedMap) poll.
  std::chrono::milliseconds poll{20};
  // Each node also serves RESP (proto/RESP.md) on an ephemeral port
  // (resp_port(i)).
  bool resp = false;
  // Whether StartNode connects a direct Client to the node (direct(i)).
  // Without, AgreedMap connects afresh each time it asks.
  bool direct_clients = true;
  // What Routed(i) connects with; node.port is node i's.
  client::ClusterClientOptions routed;
};

class SegstoredCluster {
 public:
  explicit SegstoredCluster(SegstoredClusterOptions options)
      : options_(std::move(options)),
        notify_(static_cast<size_t>(options_.nodes)),
        daemons_(static_cast<size_t>(options_.nodes)),
        direct_(static_cast<size_t>(options_.nodes)),
        ports_(static_cast<size_t>(options_.nodes), 0),
        resp_ports_(static_cast<size_t>(options_.nodes), 0) {}
  // Kills (SIGKILL) and reaps the nodes still running, then ends the log and
  // etcd and removes the directory.
  ~SegstoredCluster() = default;
  SegstoredCluster(const SegstoredCluster&) = delete;
  SegstoredCluster& operator=(const SegstoredCluster&) = delete;

  // Starts etcd, the log (with options().log) and every node (StartNode),
  // without waiting for them to serve. Call it from the test's main thread
  // (SetUp): the mock Kafka's process dies with the thread that started it.
  void Start() {
    std::string why;
    if (options_.follow != nullptr) {
      for (int i = 0; i < initial_nodes(); ++i) ASSERT_NO_FATAL_FAILURE(StartNode(i));
      return;
    }
    ASSERT_TRUE(etcd_.Start(&why)) << why;
    if (options_.log) {
      kafka_.emplace(segstore::testing::KafkaMockOptions{options_.log_brokers, options_.log_topic,
                                                         options_.log_partitions});
      ASSERT_TRUE(kafka_->Start(&why)) << why;
    }
    for (int i = 0; i < initial_nodes(); ++i) ASSERT_NO_FATAL_FAILURE(StartNode(i));
  }

  // Writes node i's config and starts it (again, after StopNode: same ID and
  // data dir, another port), waits for READY=1, reads its port and (with
  // options().direct_clients) connects a direct client.
  void StartNode(int i) {
    std::filesystem::create_directories(NodeDir(i));
    const std::string config = NodeDir(i) + "/segstored.toml";
    {
      std::ofstream f(config);
      f << "[server]\nlisten = \"127.0.0.1:0\"\n";
      if (options_.threads > 0) f << "threads = " << options_.threads << "\n";
      if (options_.resp) f << "[resp]\nlisten = \"127.0.0.1:0\"\n";
      f << "[storage]\npath = \"" << NodeDir(i) << "/data\"\nfile_size = \"" << options_.file_size
        << "\"\nwrite_block_size = \"" << options_.write_block_size << "\"\n"
        << "[cluster]\netcd_endpoints = [\"" << etcd().endpoint(0) << "\"]\n"
        << "etcd_prefix = \"" << options_.etcd_prefix << "\"\n"
        << "node_id = \"node-" << i << "\"\nrack = \"rack-" << i << "\"\n"
        << "initial_nodes = " << initial_nodes() << "\n";
      if (options_.replication > 0) f << "replication = " << options_.replication << "\n";
      f << "lease_ttl_seconds = " << options_.lease_ttl_seconds << "\n"
        << "map_poll_ms = " << options_.map_poll_ms << "\n";
      for (const std::string& line : options_.cluster_lines) f << line << "\n";
      if (options_.follow != nullptr) {
        const SegstoredClusterOptions& first = options_.follow->options();
        f << "[cluster_log]\nbrokers = \"" << kafka().bootstrap() << "\"\n"
          << "topic = \"" << first.log_topic << "\"\npartitions = " << first.log_partitions
          << "\npassive = true\n";
      } else if (options_.log) {
        f << "[cluster_log]\nbrokers = \"" << kafka().bootstrap() << "\"\n"
          << "topic = \"" << options_.log_topic << "\"\npartitions = " << options_.log_partitions
          << "\n";
      }
      if (has_log()) {
        for (const std::string& line : options_.log_lines) f << line << "\n";
        if (options_.checkpoint_interval_ms > 0) {
          f << "checkpoint_interval_ms = " << options_.checkpoint_interval_ms << "\n";
        }
      }
    }
    const size_t n = Index(i);
    direct_[n].reset();
    notify_[n] =
        std::make_unique<NotifySocket>(NodeDir(i) + "/notify.sock." + std::to_string(++runs_));
    daemons_[n] =
        std::make_unique<Daemon>(NodeDir(i), std::vector<std::string>{"-c", config}, NodeLog(i),
                                 std::vector<std::string>{"NOTIFY_SOCKET=" + notify_[n]->path()});
    const std::string ready = notify_[n]->WaitFor("READY=1", options_.ready_timeout);
    ASSERT_FALSE(ready.empty()) << ReadFile(NodeLog(i));
    ports_[n] = PortOf(ready);
    ASSERT_NE(ports_[n], 0) << ready;
    if (options_.resp) {
      const std::string key = "resp on 127.0.0.1:";
      const size_t at = ready.find(key);
      ASSERT_NE(at, std::string::npos) << ready;
      resp_ports_[n] = static_cast<uint16_t>(std::stoi(ready.substr(at + key.size())));
    }
    if (options_.direct_clients) {
      direct_[n] = Connect(ports_[n]);
      ASSERT_NE(direct_[n], nullptr);
    }
  }

  // Until node i serves (bounded, 60 s): registered in etcd (a node killed
  // waits out its old lease first) and, with a log, caught up with it.
  // Needs a direct client.
  void WaitServing(int i) {
    ASSERT_NE(direct_[Index(i)], nullptr) << "node " << i << " has no direct client";
    client::Client& c = *direct_[Index(i)];
    ASSERT_TRUE(WaitFor(
        [&] {
          if (StatOf(c, "cluster.registered") != 1) return false;
          return !has_log() || StatOf(c, "replica.caught_up") == 1;
        },
        std::chrono::milliseconds(60000), options_.poll))
        << "node " << i << " never served\n"
        << ReadFile(NodeLog(i));
  }
  // Every node running.
  void WaitAllServing() {
    for (int i = 0; i < size(); ++i) {
      if (daemons_[Index(i)] == nullptr) continue;
      ASSERT_NO_FATAL_FAILURE(WaitServing(i));
    }
  }

  // Until every node running answers the same map (the same revision) with
  // a placement (bounded, 60 s): true then, with that map in `out`; false
  // after the deadline, with `out` as the last attempt left it.
  bool AgreedMap(ClusterMap* out) {
    return WaitFor(
        [&] {
          uint64_t revision = 0;
          bool first = true;
          for (int i = 0; i < size(); ++i) {
            if (daemons_[Index(i)] == nullptr || paused_.count(i) != 0) continue;
            std::unique_ptr<client::Client> fresh;
            client::Client* c = direct_[Index(i)].get();
            if (c == nullptr) {
              fresh = Connect(ports_[Index(i)]);
              if (fresh == nullptr) return false;
              c = fresh.get();
            }
            Result<ClusterMap> m = c->ClusterMap();
            if (!m.ok() || !m->has_map()) return false;
            if (!first && m->revision != revision) return false;
            first = false;
            revision = m->revision;
            *out = *m;
          }
          return true;
        },
        std::chrono::milliseconds(60000), options_.poll);
  }

  // A routing client seeded with node i (options().routed); null, with a
  // failed expectation, if it cannot connect.
  std::unique_ptr<client::ClusterClient> Routed(int i) const {
    client::ClusterClientOptions o = options_.routed;
    o.node.port = ports_[Index(i)];
    auto c = client::ClusterClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // The test's index of the node at `in_map` in `map` (node-i is node i).
  static int NodeIndex(const ClusterMap& map, uint16_t in_map) {
    return std::stoi(map.nodes[in_map].id.substr(5));
  }

  // Sends `sig` to node i and waits (bounded, 30 s) for it to exit: its exit
  // code (128 + the signal if one ended it), or -1 if it is still running.
  // Once it has exited, StopAll leaves it be (until StartNode starts it again).
  int StopNode(int i, int sig = SIGTERM) {
    std::unique_ptr<Daemon>& d = daemons_[Index(i)];
    if (d == nullptr) return -1;
    d->Signal(sig);
    const int rc = d->Wait();
    if (rc != -1) d.reset();
    return rc;
  }

  // SIGSTOP to node i: it stops answering, and AgreedMap leaves it out,
  // until Resume (SIGCONT).
  void Pause(int i) {
    daemons_[Index(i)]->Pause();
    paused_.insert(i);
  }
  void Resume(int i) {
    daemons_[Index(i)]->Signal(SIGCONT);
    paused_.erase(i);
  }

  // SIGTERM to each node still running; expects each to exit with 0 (within
  // 30 s), and prints the node's log otherwise.
  void StopAll() {
    for (int i = 0; i < size(); ++i) {
      if (daemons_[Index(i)] == nullptr) continue;
      EXPECT_EQ(StopNode(i, SIGTERM), 0) << "node " << i << "\n" << ReadFile(NodeLog(i));
    }
  }

  int size() const { return options_.nodes; }
  int initial_nodes() const {
    return options_.start_nodes > 0 ? options_.start_nodes : options_.nodes;
  }
  const SegstoredClusterOptions& options() const { return options_; }
  uint16_t port(int i) const { return ports_[Index(i)]; }
  uint16_t resp_port(int i) const { return resp_ports_[Index(i)]; }
  // Node i's direct client (options().direct_clients), connected as it started.
  client::Client& direct(int i) const { return *direct_[Index(i)]; }
  // Node i's process; null once StopNode saw it exit.
  Daemon* daemon(int i) const { return daemons_[Index(i)].get(); }
  // Its own, or the followed cluster's.
  segstore::testing::EtcdCluster& etcd() {
    return options_.follow != nullptr ? options_.follow->etcd() : etcd_;
  }
  // The log (options().log, once Start has started it; or the followed one).
  segstore::testing::KafkaMock& kafka() {
    return options_.follow != nullptr ? options_.follow->kafka() : *kafka_;
  }
  bool has_log() const { return options_.log || options_.follow != nullptr; }
  const storage::testing::TempDir& dir() const { return dir_; }
  std::string NodeDir(int i) const { return dir_.File("n" + std::to_string(i)); }
  std::string NodeLog(int i) const { return NodeDir(i) + "/log"; }

 private:
  size_t Index(int i) const { return static_cast<size_t>(i); }

  const SegstoredClusterOptions options_;
  // Destroyed in reverse: the nodes first (clients, then processes), then
  // the log and etcd, and the directory last.
  storage::testing::TempDir dir_;
  segstore::testing::EtcdCluster etcd_{1};
  std::optional<segstore::testing::KafkaMock> kafka_;
  std::vector<std::unique_ptr<NotifySocket>> notify_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
  std::vector<std::unique_ptr<client::Client>> direct_;
  std::vector<uint16_t> ports_;
  std::vector<uint16_t> resp_ports_;
  int runs_ = 0;
  std::set<int> paused_;  // nodes started, for a fresh notify socket each start
};

}  // namespace segstore::server::testing
