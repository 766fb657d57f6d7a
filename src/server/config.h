// segstored's configuration: every setting of the daemon in one struct, read
// from a TOML file (config/segstored.toml documents every key) and then
// overridden from the command line. With no file at all the defaults serve:
// a data file under the working directory, listening on 127.0.0.1.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/agent.h"
#include "replica/replicator.h"
#include "segstore/messages.h"
#include "segstore/profile.h"
#include "segstore/status.h"
#include "segstore/storage.h"
#include "server/admin.h"
#include "server/server.h"

namespace segstore::server {

inline constexpr uint16_t kDefaultPort = 7700;
inline constexpr uint16_t kDefaultAdminPort = 7701;

struct Config {
  ServerOptions server;
  AdminOptions admin;  // the HTTP metrics and health endpoint (admin.h)
  uint32_t max_batch = proto::kDefaultMaxBatch;
  storage::StoreOptions storage;
  // storage.index_checkpoint as written: "auto" (<storage.path>.index for a
  // data file; off for a block device), "off", or a file path.
  // FinishStorageConfig turns it into storage.index_checkpoint.
  std::string index_checkpoint = "auto";
  profile::ProfileOptions profile;
  // How often memory the C heap holds free goes back to the kernel (heap.h);
  // 0: never.
  std::chrono::seconds heap_trim_interval{10};
  std::string log_level = "info";  // trace, debug, info, warn, error, critical, off
  // The [cluster] section: present, the node joins the cluster its etcd
  // holds; absent, segstored is a single server holding every partition.
  bool cluster_enabled = false;
  // etcd endpoints, prefix, the node (advertised address: server.listen's when
  // left empty), replication, initial nodes, lease TTL, map poll interval.
  cluster::AgentOptions cluster;
  // The [cluster_log] section: present, writes go through the cluster's
  // replicated log (Kafka protocol) and partitions may have replicas;
  // absent, a cluster node writes locally and replication is 1.
  bool cluster_log_enabled = false;
  replica::ReplicaOptions replica;
  // cluster_log.expiry_grace_seconds: how long expired segments and dead
  // records stay (hidden) for log entries applied late; with a log, it sets
  // storage.void_grace_seconds and profile.log_grace_seconds.
  uint32_t log_grace_seconds = 3600;
};

// The defaults: Config{} with the port and data path segstored uses.
Config DefaultConfig();

// Reads `path` over *config. InvalidArgument naming the file, line and key for
// a syntax error, an unknown key, a wrong type or a value out of range;
// NotFound when the file does not exist.
Status LoadConfigFile(const std::string& path, Config* config);
// The same from TOML text (`origin` names it in messages).
Status LoadConfigText(std::string_view text, std::string_view origin, Config* config);

// "host:port", "[v6]:port" or ":port" (host stays as it was).
Status ParseListen(std::string_view text, std::string* host, uint16_t* port);
Status ParseListen(std::string_view text, ServerOptions* server);
// [resp] listen: "HOST:PORT" turns the RESP port on; "off" (or empty) leaves it off.
Status ParseRespListen(std::string_view text, ServerOptions* server);
// The same, or "off" (no admin endpoint).
Status ParseAdminListen(std::string_view text, AdminOptions* admin);
// "commit" or "buffered".
Status ParseDurability(std::string_view text, storage::Durability* d);
// A byte size: "4294967296", "4GiB", "512MiB", "64KiB".
Status ParseBytes(std::string_view text, uint64_t* bytes);
// Checks the [cluster] settings against each other and server.listen.
// InvalidArgument naming the key.
Status FinishClusterConfig(Config* config);
// Sets storage.index_checkpoint from the index_checkpoint setting, once
// storage.path is final (command line included). "auto" on a block device
// turns it off, and logs that (the checkpoint is a file: name one on another
// filesystem to keep one). InvalidArgument when it names the data path.
Status FinishStorageConfig(Config* config);
// Checks values against each other (threads, sizes, limits).
Status Validate(const Config& config);

// The settings in force, for the start log line and the stats operation.
std::vector<StatEntry> Describe(const Config& config);
std::string DescribeLine(const Config& config);

}  // namespace segstore::server
