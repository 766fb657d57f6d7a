#include "server/config.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace segstore::server {

namespace {

// One key of the file: applies a TOML value to the config.
using Setter = std::function<Status(const toml::node&, Config*)>;

Status Bad(const toml::node& n, std::string_view what) {
  return Status::InvalidArgument(fmt::format("line {}: {}", n.source().begin.line, what));
}

Result<int64_t> Int(const toml::node& n, int64_t min, int64_t max) {
  auto v = n.value<int64_t>();
  if (!n.is_integer() || !v) return Bad(n, "expected an integer");
  if (*v < min || *v > max) return Bad(n, fmt::format("{} is out of range [{}, {}]", *v, min, max));
  return *v;
}

Result<uint64_t> Size(const toml::node& n, uint64_t min, uint64_t max) {
  uint64_t bytes = 0;
  if (n.is_integer()) {
    auto v = Int(n, 0, INT64_MAX);
    if (!v.ok()) return v.status();
    bytes = static_cast<uint64_t>(*v);
  } else if (n.is_string()) {
    Status s = ParseBytes(*n.value<std::string>(), &bytes);
    if (!s.ok()) return Bad(n, s.message());
  } else {
    return Bad(n, "expected a byte size (an integer or a string like \"4GiB\")");
  }
  if (bytes < min || bytes > max) {
    return Bad(n, fmt::format("{} bytes is out of range [{}, {}]", bytes, min, max));
  }
  return bytes;
}

Result<double> Float(const toml::node& n, double min, double max) {
  auto v = n.value<double>();  // integers convert too
  if (!(n.is_floating_point() || n.is_integer()) || !v) return Bad(n, "expected a number");
  if (!(*v >= min && *v <= max))
    return Bad(n, fmt::format("{} is out of range [{}, {}]", *v, min, max));
  return *v;
}

Result<bool> Bool(const toml::node& n) {
  if (!n.is_boolean()) return Bad(n, "expected true or false");
  return *n.value<bool>();
}

Result<std::string> Text(const toml::node& n) {
  if (!n.is_string()) return Bad(n, "expected a string");
  return *n.value<std::string>();
}

// Setter builders.
Setter IntSetter(int64_t min, int64_t max, std::function<void(Config*, int64_t)> set) {
  return [=](const toml::node& n, Config* c) -> Status {
    auto v = Int(n, min, max);
    if (!v.ok()) return v.status();
    set(c, *v);
    return Status::OK();
  };
}
Setter SizeSetter(uint64_t min, uint64_t max, std::function<void(Config*, uint64_t)> set) {
  return [=](const toml::node& n, Config* c) -> Status {
    auto v = Size(n, min, max);
    if (!v.ok()) return v.status();
    set(c, *v);
    return Status::OK();
  };
}
Setter BoolSetter(std::function<void(Config*, bool)> set) {
  return [=](const toml::node& n, Config* c) -> Status {
    auto v = Bool(n);
    if (!v.ok()) return v.status();
    set(c, *v);
    return Status::OK();
  };
}
Setter FloatSetter(double min, double max, std::function<void(Config*, double)> set) {
  return [=](const toml::node& n, Config* c) -> Status {
    auto v = Float(n, min, max);
    if (!v.ok()) return v.status();
    set(c, *v);
    return Status::OK();
  };
}
Setter TextSetter(std::function<Status(Config*, const std::string&)> set) {
  return [=](const toml::node& n, Config* c) -> Status {
    auto v = Text(n);
    if (!v.ok()) return v.status();
    Status s = set(c, *v);
    return s.ok() ? s : Bad(n, s.message());
  };
}

// An address a node gives its peers (cluster.advertise, resp.advertise):
// host:port with both, into *out.
Status ParseAdvertise(const std::string& v, std::string* out) {
  std::string host;
  uint16_t port = 0;
  SEGSTORE_RETURN_IF_ERROR(ParseListen(v, &host, &port));
  if (host.empty() || port == 0) {
    return Status::InvalidArgument("advertise \"" + v + "\": expected host:port");
  }
  *out = v;
  return Status::OK();
}

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::map<std::string, std::map<std::string, Setter>>& Schema() {
  static const auto* schema = new std::map<std::string, std::map<std::string, Setter>>{
      {"server",
       {
           {"listen", TextSetter([](Config* c, const std::string& v) {
              return ParseListen(v, &c->server);
            })},
           {"threads", IntSetter(0, 1024, [](Config* c, int64_t v) {
              c->server.threads = static_cast<unsigned>(v);
            })},
           {"max_connections", IntSetter(1, 1'000'000, [](Config* c, int64_t v) {
              c->server.max_connections = static_cast<uint32_t>(v);
            })},
           {"idle_timeout_seconds", IntSetter(1, 86'400 * 7, [](Config* c, int64_t v) {
              c->server.idle_timeout = seconds(v);
            })},
           {"frame_timeout_seconds", IntSetter(1, 3600, [](Config* c, int64_t v) {
              c->server.frame_timeout = seconds(v);
            })},
           {"max_frame_bytes", SizeSetter(4096, 256u << 20, [](Config* c, uint64_t v) {
              c->server.max_frame_bytes = static_cast<uint32_t>(v);
            })},
           {"max_in_flight", IntSetter(1, 65'536, [](Config* c, int64_t v) {
              c->server.max_in_flight = static_cast<uint32_t>(v);
            })},
           {"max_pending_bytes", SizeSetter(64 * 1024, 1u << 30, [](Config* c, uint64_t v) {
              c->server.max_pending_bytes = static_cast<uint32_t>(v);
            })},
           {"max_batch", IntSetter(1, 100'000, [](Config* c, int64_t v) {
              c->max_batch = static_cast<uint32_t>(v);
            })},
           {"shutdown_timeout_seconds", IntSetter(0, 3600, [](Config* c, int64_t v) {
              c->server.shutdown_timeout = seconds(v);
            })},
           {"heap_trim_seconds", IntSetter(0, 3600, [](Config* c, int64_t v) {
              c->heap_trim_interval = seconds(v);
            })},
           {"auth_secret_file", TextSetter([](Config* c, const std::string& v) {
              c->server.auth_secret_file = v;
              return Status::OK();
            })},
       }},
      {"tls",
       {
           {"cert_file", TextSetter([](Config* c, const std::string& v) {
              c->server.tls.cert_file = v;
              return Status::OK();
            })},
           {"key_file", TextSetter([](Config* c, const std::string& v) {
              c->server.tls.key_file = v;
              return Status::OK();
            })},
           {"client_ca_file", TextSetter([](Config* c, const std::string& v) {
              c->server.tls.client_ca_file = v;
              return Status::OK();
            })},
           {"min_version", TextSetter([](Config* c, const std::string& v) {
              if (v != "1.2" && v != "1.3") {
                return Status::InvalidArgument("min_version \"" + v + "\" is not one of 1.2, 1.3");
              }
              c->server.tls.min_version = v;
              return Status::OK();
            })},
       }},
      {"cluster",
       {
           {"etcd_endpoints",
            [](const toml::node& n, Config* c) -> Status {
              const toml::array* a = n.as_array();
              if (a == nullptr || a->empty()) {
                return Bad(n, "expected a list of \"http://host:port\" strings");
              }
              c->cluster.etcd.endpoints.clear();
              for (const toml::node& e : *a) {
                if (!e.is_string()) return Bad(e, "expected a string \"http://host:port\"");
                c->cluster.etcd.endpoints.push_back(*e.value<std::string>());
              }
              c->cluster_enabled = true;
              return Status::OK();
            }},
           {"etcd_prefix", TextSetter([](Config* c, const std::string& v) {
              c->cluster.prefix = v;
              return Status::OK();
            })},
           {"etcd_timeout_ms", IntSetter(100, 60'000, [](Config* c, int64_t v) {
              c->cluster.etcd.timeout = milliseconds(v);
            })},
           {"node_id", TextSetter([](Config* c, const std::string& v) {
              if (v.empty() || v.size() > 128 || v.find('/') != std::string::npos) {
                return Status::InvalidArgument("node_id must be 1 to 128 bytes without '/'");
              }
              c->cluster.self.id = v;
              return Status::OK();
            })},
           {"advertise", TextSetter([](Config* c, const std::string& v) {
              return ParseAdvertise(v, &c->cluster.self.address);
            })},
           {"rack", TextSetter([](Config* c, const std::string& v) {
              c->cluster.self.rack = v;
              return Status::OK();
            })},
           {"replication", IntSetter(1, 16, [](Config* c, int64_t v) {
              c->cluster.replication = static_cast<uint32_t>(v);
            })},
           {"initial_nodes", IntSetter(1, 65'535, [](Config* c, int64_t v) {
              c->cluster.initial_nodes = static_cast<uint32_t>(v);
            })},
           {"lease_ttl_seconds", IntSetter(2, 3600, [](Config* c, int64_t v) {
              c->cluster.lease_ttl = seconds(v);
            })},
           {"map_poll_ms", IntSetter(10, 60'000, [](Config* c, int64_t v) {
              c->cluster.poll_interval = milliseconds(v);
            })},
           {"failure_grace_seconds", IntSetter(1, 86'400, [](Config* c, int64_t v) {
              c->cluster.failure_grace = seconds(v);
            })},
       }},
      {"cluster_log",
       {
           {"brokers", TextSetter([](Config* c, const std::string& v) {
              if (v.empty()) return Status::InvalidArgument("brokers is empty");
              c->replica.log.brokers = v;
              c->cluster_log_enabled = true;
              return Status::OK();
            })},
           {"topic", TextSetter([](Config* c, const std::string& v) {
              if (v.empty() || v.size() > 249) {
                return Status::InvalidArgument("topic must be 1 to 249 characters");
              }
              c->replica.log.topic = v;
              return Status::OK();
            })},
           {"partitions", IntSetter(1, 4096, [](Config* c, int64_t v) {
              c->replica.log.partitions = static_cast<uint32_t>(v);
            })},
           {"append_timeout_ms", IntSetter(100, 600'000, [](Config* c, int64_t v) {
              c->replica.log.append_timeout = milliseconds(v);
            })},
           {"apply_timeout_ms", IntSetter(100, 600'000, [](Config* c, int64_t v) {
              c->replica.apply_timeout = milliseconds(v);
            })},
           {"max_lag_ms", IntSetter(10, 3'600'000, [](Config* c, int64_t v) {
              c->replica.applier.max_lag = milliseconds(v);
            })},
           {"write_id_window_seconds", IntSetter(1, 86'400, [](Config* c, int64_t v) {
              c->replica.applier.window_seconds = static_cast<uint32_t>(v);
            })},
           {"write_id_window_max", IntSetter(1000, 100'000'000, [](Config* c, int64_t v) {
              c->replica.applier.window_max_ids = static_cast<size_t>(v);
            })},
           {"checkpoint_interval_ms", IntSetter(10, 600'000, [](Config* c, int64_t v) {
              c->replica.applier.checkpoint_interval = milliseconds(v);
            })},
           {"expiry_grace_seconds", IntSetter(0, 30 * 86'400, [](Config* c, int64_t v) {
              c->log_grace_seconds = static_cast<uint32_t>(v);
            })},
           {"passive", BoolSetter([](Config* c, bool v) { c->replica.passive = v; })},
           {"properties",
            [](const toml::node& n, Config* c) -> Status {
              const toml::table* t = n.as_table();
              if (t == nullptr) return Bad(n, "expected a table of \"name\" = \"value\" strings");
              c->replica.log.properties.clear();
              for (auto&& [k, v] : *t) {
                if (!v.is_string()) return Bad(v, "expected a string value");
                c->replica.log.properties.emplace_back(std::string(k.str()),
                                                       *v.value<std::string>());
              }
              // Those segstored's guarantees rest on, and any librdkafka
              // refuses, are refused here, before anything starts.
              return log::CheckProperties(c->replica.log.properties);
            }},
       }},
      {"admin",
       {
           {"listen", TextSetter([](Config* c, const std::string& v) {
              return ParseAdminListen(v, &c->admin);
            })},
       }},
      {"resp",
       {
           {"listen", TextSetter([](Config* c, const std::string& v) {
              return ParseRespListen(v, &c->server);
            })},
           {"advertise", TextSetter([](Config* c, const std::string& v) {
              return ParseAdvertise(v, &c->cluster.self.resp);
            })},
       }},
      {"storage",
       {
           {"path", TextSetter([](Config* c, const std::string& v) {
              if (v.empty()) return Status::InvalidArgument("path is empty");
              c->storage.path = v;
              return Status::OK();
            })},
           {"file_size", SizeSetter(16u << 20, uint64_t{16} << 40, [](Config* c, uint64_t v) {
              c->storage.file_size = v;
            })},
           {"write_block_size", SizeSetter(64 * 1024, 8u << 20, [](Config* c, uint64_t v) {
              c->storage.write_block_size = static_cast<uint32_t>(v);
            })},
           {"durability", TextSetter([](Config* c, const std::string& v) {
              return ParseDurability(v, &c->storage.durability);
            })},
           {"flush_interval_us", IntSetter(10, 10'000'000, [](Config* c, int64_t v) {
              c->storage.flush_interval = std::chrono::microseconds(v);
            })},
           {"align_records",
            BoolSetter([](Config* c, bool v) { c->storage.align_records = v; })},
           {"io_backend", TextSetter([](Config* c, const std::string& v) {
              if (v == "auto") {
                c->storage.io_backend = storage::IoBackend::kAuto;
              } else if (v == "io_uring") {
                c->storage.io_backend = storage::IoBackend::kIoUring;
              } else if (v == "sync") {
                c->storage.io_backend = storage::IoBackend::kSync;
              } else {
                return Status::InvalidArgument("io_backend \"" + v +
                                               "\" is not one of auto, io_uring, sync");
              }
              return Status::OK();
            })},
           {"queue_depth", IntSetter(8, 32'768, [](Config* c, int64_t v) {
              c->storage.queue_depth = static_cast<uint32_t>(v);
            })},
           {"max_key_bytes", IntSetter(1, 4096, [](Config* c, int64_t v) {
              c->storage.max_key_size = static_cast<uint32_t>(v);
            })},
           {"background_defrag",
            BoolSetter([](Config* c, bool v) { c->storage.background_defrag = v; })},
           {"defrag_threshold", FloatSetter(0.0, 0.95, [](Config* c, double v) {
              c->storage.defrag_threshold = v;
            })},
           {"defrag_blocks_per_second", IntSetter(1, 100'000, [](Config* c, int64_t v) {
              c->storage.defrag_blocks_per_second = static_cast<uint32_t>(v);
            })},
           {"rotate_blocks_per_second", IntSetter(1, 100'000, [](Config* c, int64_t v) {
              c->storage.rotate_blocks_per_second = static_cast<uint32_t>(v);
            })},
           {"block_summaries",
            BoolSetter([](Config* c, bool v) { c->storage.block_summaries = v; })},
           {"index_checkpoint", TextSetter([](Config* c, const std::string& v) {
              if (v.empty()) {
                return Status::InvalidArgument(
                    "index_checkpoint is empty: \"auto\", \"off\" or a file path");
              }
              c->index_checkpoint = v;
              return Status::OK();
            })},
       }},
      {"profile",
       {
           {"max_segments", IntSetter(1, 1'000'000, [](Config* c, int64_t v) {
              c->profile.max_segments = static_cast<uint32_t>(v);
            })},
           {"max_links", IntSetter(1, 10'000, [](Config* c, int64_t v) {
              c->profile.max_links = static_cast<uint32_t>(v);
            })},
           // At most a body's map (proto::kMaxMapEntries): a get answers them in one.
           {"max_fields", IntSetter(1, 4096, [](Config* c, int64_t v) {
              c->profile.max_fields = static_cast<uint32_t>(v);
            })},
           {"max_field_bytes", IntSetter(1, 65'536, [](Config* c, int64_t v) {
              c->profile.max_field_bytes = static_cast<uint32_t>(v);
            })},
           {"max_field_names", IntSetter(0, 1 << 20, [](Config* c, int64_t v) {
              c->profile.max_field_names = static_cast<uint32_t>(v);
            })},
           {"sweeper", BoolSetter([](Config* c, bool v) { c->profile.sweeper = v; })},
           {"sweep_records_per_second", IntSetter(1, 10'000'000, [](Config* c, int64_t v) {
              c->profile.sweep_records_per_second = static_cast<uint32_t>(v);
            })},
           {"sweep_share", FloatSetter(0.01, 1.0, [](Config* c, double v) {
              c->profile.sweep_share = v;
            })},
           {"sweep_interval_ms", IntSetter(1, 60'000, [](Config* c, int64_t v) {
              c->profile.sweep_interval = milliseconds(v);
            })},
           {"sweep_flush_interval_ms", IntSetter(1, 600'000, [](Config* c, int64_t v) {
              c->profile.sweep_flush_interval = milliseconds(v);
            })},
       }},
      {"log",
       {
           {"level", TextSetter([](Config* c, const std::string& v) {
              static const char* kLevels[] = {"trace", "debug", "info",    "warn",
                                              "error", "critical", "off"};
              for (const char* l : kLevels) {
                if (v == l) {
                  c->log_level = v;
                  return Status::OK();
                }
              }
              return Status::InvalidArgument(
                  "level \"" + v + "\" is not one of trace, debug, info, warn, error, critical, off");
            })},
       }},
  };
  return *schema;
}

std::string DurabilityName(storage::Durability d) {
  return d == storage::Durability::kCommit ? "commit" : "buffered";
}

std::string BackendName(storage::IoBackend b) {
  switch (b) {
    case storage::IoBackend::kAuto:
      return "auto";
    case storage::IoBackend::kIoUring:
      return "io_uring";
    case storage::IoBackend::kSync:
      return "sync";
  }
  return "auto";
}

}  // namespace

Config DefaultConfig() {
  Config c;
  c.cluster.replication = 0;  // decided by FinishClusterConfig: 2 with a log, else 1
  c.server.port = kDefaultPort;
  c.admin.port = kDefaultAdminPort;
  c.storage.path = "segstore-data/segstore.dat";
  return c;
}

Status LoadConfigText(std::string_view text, std::string_view origin, Config* config) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(
        fmt::format("{}: line {}: {}", origin, e.source().begin.line, e.description()));
  }
  const auto& schema = Schema();
  for (auto&& [section_name, section_node] : root) {
    const std::string section(section_name.str());
    auto it = schema.find(section);
    if (it == schema.end()) {
      return Status::InvalidArgument(fmt::format("{}: line {}: unknown section [{}]", origin,
                                                 section_node.source().begin.line, section));
    }
    const toml::table* table = section_node.as_table();
    if (table == nullptr) {
      return Status::InvalidArgument(fmt::format("{}: line {}: {} must be a [{}] table", origin,
                                                 section_node.source().begin.line, section,
                                                 section));
    }
    for (auto&& [key_name, value] : *table) {
      const std::string key(key_name.str());
      auto k = it->second.find(key);
      if (k == it->second.end()) {
        return Status::InvalidArgument(fmt::format("{}: line {}: unknown key {}.{}", origin,
                                                   value.source().begin.line, section, key));
      }
      Status s = k->second(value, config);
      if (!s.ok()) {
        return Status::InvalidArgument(
            fmt::format("{}: {}.{}: {}", origin, section, key, s.message()));
      }
    }
  }
  return Status::OK();
}

Status LoadConfigFile(const std::string& path, Config* config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return Status::NotFound("config file " + path + " does not exist");
    }
    return Status::IOError("cannot read config file " + path);
  }
  std::stringstream text;
  text << in.rdbuf();
  return LoadConfigText(text.str(), path, config);
}

Status ParseListen(std::string_view text, ServerOptions* server) {
  return ParseListen(text, &server->host, &server->port);
}

Status ParseRespListen(std::string_view text, ServerOptions* server) {
  if (text == "off" || text.empty()) {
    server->resp_host.clear();
    return Status::OK();
  }
  return ParseListen(text, &server->resp_host, &server->resp_port);
}

Status ParseAdminListen(std::string_view text, AdminOptions* admin) {
  if (text == "off") {
    admin->enabled = false;
    return Status::OK();
  }
  SEGSTORE_RETURN_IF_ERROR(ParseListen(text, &admin->host, &admin->port));
  admin->enabled = true;
  return Status::OK();
}

Status ParseListen(std::string_view text, std::string* host_out, uint16_t* port_out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return Status::InvalidArgument("listen \"" + std::string(text) +
                                   "\": expected host:port, [v6]:port or :port");
  }
  std::string_view host = text.substr(0, colon);
  std::string_view port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return Status::InvalidArgument("listen \"" + std::string(text) +
                                   "\": write an IPv6 address in brackets, [::1]:7700");
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return Status::InvalidArgument("listen \"" + std::string(text) + "\": bad port \"" +
                                   std::string(port) + "\"");
  }
  if (!host.empty()) *host_out = std::string(host);
  *port_out = static_cast<uint16_t>(value);
  return Status::OK();
}

Status ParseDurability(std::string_view text, storage::Durability* d) {
  if (text == "commit") {
    *d = storage::Durability::kCommit;
  } else if (text == "buffered") {
    *d = storage::Durability::kBuffered;
  } else {
    return Status::InvalidArgument("durability \"" + std::string(text) +
                                   "\" is not one of commit, buffered");
  }
  return Status::OK();
}

Status ParseBytes(std::string_view text, uint64_t* bytes) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) {
    return Status::InvalidArgument("\"" + std::string(text) + "\" is not a byte size");
  }
  std::string_view unit(end, text.data() + text.size() - end);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  int shift = 0;
  if (unit.empty() || unit == "B") {
    shift = 0;
  } else if (unit == "KiB" || unit == "K") {
    shift = 10;
  } else if (unit == "MiB" || unit == "M") {
    shift = 20;
  } else if (unit == "GiB" || unit == "G") {
    shift = 30;
  } else if (unit == "TiB" || unit == "T") {
    shift = 40;
  } else {
    return Status::InvalidArgument("\"" + std::string(text) +
                                   "\": unknown unit; use B, KiB, MiB, GiB or TiB");
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    return Status::InvalidArgument("\"" + std::string(text) + "\" is too large");
  }
  *bytes = value << shift;
  return Status::OK();
}

Status FinishClusterConfig(Config* c) {
  cluster::AgentOptions& o = c->cluster;
  const bool any = !o.self.id.empty() || !o.self.address.empty() || !o.self.rack.empty();
  if (c->replica.passive && !c->cluster_log_enabled) {
    // Else the node would take writes, locally: the opposite of what was asked.
    return Status::InvalidArgument(
        "cluster_log.passive needs the log it applies (cluster_log.brokers)");
  }
  if (!c->cluster_enabled) {
    if (any)
      return Status::InvalidArgument("cluster: node_id, advertise and rack need etcd_endpoints");
    if (!o.self.resp.empty()) {
      return Status::InvalidArgument(
          "resp.advertise is the RESP address a cluster node gives its peers: it needs a "
          "[cluster] section (etcd_endpoints)");
    }
    if (c->cluster_log_enabled) {
      return Status::InvalidArgument("cluster_log needs a [cluster] section (etcd_endpoints)");
    }
    return Status::OK();
  }
  if (o.self.id.empty()) return Status::InvalidArgument("cluster: node_id is required");
  if (o.replication == 0)
    o.replication = c->cluster_log_enabled ? std::min(2u, o.initial_nodes) : 1;
  if (o.replication > 1 && !c->cluster_log_enabled) {
    return Status::InvalidArgument(
        "cluster.replication " + std::to_string(o.replication) +
        ": replicas need the cluster's log ([cluster_log] brokers); without one use 1");
  }
  const uint32_t lp = c->replica.log.partitions;
  if (c->cluster_log_enabled && (lp & (lp - 1)) != 0) {
    return Status::InvalidArgument("cluster_log.partitions " + std::to_string(lp) +
                                   " must be a power of two (it must divide 4096)");
  }
  o.moves = c->cluster_log_enabled;
  if (c->cluster_log_enabled) {
    // Expired data stays (hidden) that long, for entries applied late.
    c->storage.void_grace_seconds = c->log_grace_seconds;
    c->profile.log_grace_seconds = c->log_grace_seconds;
  }
  if (c->cluster_log_enabled && c->replica.apply_timeout <= c->replica.log.append_timeout) {
    return Status::InvalidArgument(
        "cluster_log.apply_timeout_ms must be longer than cluster_log.append_timeout_ms");
  }
  if (o.initial_nodes < o.replication) {
    return Status::InvalidArgument("cluster.initial_nodes must be at least cluster.replication");
  }
  if (o.poll_interval * 3 > o.lease_ttl || o.etcd.timeout * 3 > o.lease_ttl) {
    return Status::InvalidArgument(
        "cluster.map_poll_ms and cluster.etcd_timeout_ms must each be at most a third of "
        "cluster.lease_ttl_seconds (the lease must be renewed in time)");
  }
  if (o.prefix.empty() || o.prefix.front() != '/' || o.prefix.back() == '/') {
    return Status::InvalidArgument("cluster.etcd_prefix \"" + o.prefix +
                                   "\" must start with '/' and not end with one");
  }
  if (o.self.address.empty()) {
    const std::string& host = c->server.host;
    if (host.empty() || host == "0.0.0.0" || host == "::") {
      return Status::InvalidArgument(
          "cluster.advertise is required when server.listen names no single address (" + host +
          "): the address clients reach this node at");
    }
    // Left empty: segstored advertises the address it listens on once
    // bound (server.listen's port may be 0).
  }
  const std::string& resp_host = c->server.resp_host;
  if (!resp_host.empty() && o.self.resp.empty() && (resp_host == "0.0.0.0" || resp_host == "::")) {
    return Status::InvalidArgument(
        "resp.advertise is required when resp.listen names no single address (" + resp_host +
        "): the address Redis clients reach this node's RESP port at (MOVED, CLUSTER SLOTS)");
  }
  return Status::OK();
}

Status FinishStorageConfig(Config* c) {
  const std::string& setting = c->index_checkpoint;
  if (setting == "off") {
    c->storage.index_checkpoint.clear();
    return Status::OK();
  }
  if (setting != "auto") {
    // Under any spelling (relative, "./", a symlinked directory).
    auto where = [](const std::string& p) {
      std::error_code ec;
      std::filesystem::path absolute = std::filesystem::absolute(p, ec);
      if (ec) return std::filesystem::path(p).lexically_normal();
      std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, ec);
      return ec ? absolute.lexically_normal() : canonical;
    };
    if (where(setting) == where(c->storage.path)) {
      return Status::InvalidArgument("storage.index_checkpoint names the data path itself");
    }
    c->storage.index_checkpoint = setting;
    return Status::OK();
  }
  std::error_code ec;
  if (std::filesystem::is_block_file(c->storage.path, ec)) {
    // Beside a raw device there is no file to put it in: the operator names one.
    c->storage.index_checkpoint.clear();
    spdlog::info(
        "storage.index_checkpoint is off: {} is a block device (set storage.index_checkpoint to "
        "a file on another filesystem to load the index from it after a clean restart)",
        c->storage.path);
    return Status::OK();
  }
  c->storage.index_checkpoint = c->storage.path + ".index";
  return Status::OK();
}

Status Validate(const Config& c) {
  const uint32_t b = c.storage.write_block_size;
  if ((b & (b - 1)) != 0) {
    return Status::InvalidArgument("storage.write_block_size must be a power of two");
  }
  if (c.storage.file_size < 4ull * b) {
    return Status::InvalidArgument("storage.file_size must hold at least four write blocks");
  }
  if (c.server.max_pending_bytes < 64 * 1024) {
    return Status::InvalidArgument("server.max_pending_bytes must be at least 64 KiB");
  }
  const TlsOptions& tls = c.server.tls;
  if (tls.cert_file.empty() && (!tls.key_file.empty() || !tls.client_ca_file.empty())) {
    return Status::InvalidArgument(
        "tls.key_file and tls.client_ca_file need tls.cert_file (the server's certificate)");
  }
  if (!tls.cert_file.empty() && tls.key_file.empty()) {
    return Status::InvalidArgument("tls.cert_file needs tls.key_file (its private key)");
  }
  if (c.admin.enabled && c.admin.port != 0 && c.admin.port == c.server.port) {
    return Status::InvalidArgument("admin.listen must use another port than server.listen (" +
                                   std::to_string(c.server.port) + ")");
  }
  if (!c.server.resp_host.empty() && c.server.resp_port != 0) {
    if (c.server.resp_port == c.server.port) {
      return Status::InvalidArgument("resp.listen must use another port than server.listen (" +
                                     std::to_string(c.server.port) + ")");
    }
    if (c.admin.enabled && c.server.resp_port == c.admin.port) {
      return Status::InvalidArgument("resp.listen must use another port than admin.listen (" +
                                     std::to_string(c.admin.port) + ")");
    }
  }
  return Status::OK();
}

std::vector<StatEntry> Describe(const Config& c) {
  std::vector<StatEntry> out;
  auto add = [&](std::string name, auto v) {
    if constexpr (std::is_convertible_v<decltype(v), std::string>) {
      out.push_back({"config." + name, std::string(v)});
    } else if constexpr (std::is_floating_point_v<decltype(v)>) {
      out.push_back({"config." + name, static_cast<double>(v)});
    } else {
      out.push_back({"config." + name, static_cast<uint64_t>(v)});
    }
  };
  add("server.listen", c.server.host + ":" + std::to_string(c.server.port));
  add("server.threads", c.server.threads);
  add("server.max_connections", c.server.max_connections);
  add("server.idle_timeout_seconds",
      std::chrono::duration_cast<seconds>(c.server.idle_timeout).count());
  add("server.frame_timeout_seconds",
      std::chrono::duration_cast<seconds>(c.server.frame_timeout).count());
  add("server.max_frame_bytes", c.server.max_frame_bytes);
  add("server.max_in_flight", c.server.max_in_flight);
  add("server.max_pending_bytes", c.server.max_pending_bytes);
  add("server.max_batch", c.max_batch);
  add("server.shutdown_timeout_seconds",
      std::chrono::duration_cast<seconds>(c.server.shutdown_timeout).count());
  add("server.heap_trim_seconds", c.heap_trim_interval.count());
  // Paths only: never a secret or a key.
  add("server.auth_secret_file", c.server.auth_secret_file);
  add("tls.cert_file", c.server.tls.cert_file);
  add("tls.key_file", c.server.tls.key_file);
  add("tls.client_ca_file", c.server.tls.client_ca_file);
  add("tls.min_version", c.server.tls.min_version);
  if (c.cluster_enabled) {
    std::string endpoints;
    for (const std::string& e : c.cluster.etcd.endpoints) {
      endpoints += (endpoints.empty() ? "" : ",") + e;
    }
    add("cluster.etcd_endpoints", endpoints);
    add("cluster.etcd_prefix", c.cluster.prefix);
    add("cluster.node_id", c.cluster.self.id);
    add("cluster.advertise", c.cluster.self.address);
    add("cluster.rack", c.cluster.self.rack);
    add("cluster.replication", c.cluster.replication);
    add("cluster.initial_nodes", c.cluster.initial_nodes);
    add("cluster.lease_ttl_seconds", c.cluster.lease_ttl.count());
    add("cluster.etcd_timeout_ms", c.cluster.etcd.timeout.count());
    add("cluster.map_poll_ms", c.cluster.poll_interval.count());
    add("cluster.failure_grace_seconds",
        std::chrono::duration_cast<seconds>(c.cluster.failure_grace).count());
    add("resp.advertise", c.cluster.self.resp);
  }
  if (c.cluster_log_enabled) {
    const replica::ReplicaOptions& r = c.replica;
    add("cluster_log.brokers", r.log.brokers);
    add("cluster_log.topic", r.log.topic);
    add("cluster_log.partitions", r.log.partitions);
    add("cluster_log.append_timeout_ms", r.log.append_timeout.count());
    add("cluster_log.apply_timeout_ms", r.apply_timeout.count());
    add("cluster_log.max_lag_ms", r.applier.max_lag.count());
    add("cluster_log.write_id_window_seconds", r.applier.window_seconds);
    add("cluster_log.write_id_window_max", r.applier.window_max_ids);
    add("cluster_log.checkpoint_interval_ms", r.applier.checkpoint_interval.count());
    add("cluster_log.expiry_grace_seconds", c.log_grace_seconds);
    add("cluster_log.passive", r.passive ? 1 : 0);
    // Names only: property values may hold credentials.
    std::string names;
    for (const auto& [name, value] : r.log.properties) names += (names.empty() ? "" : ",") + name;
    add("cluster_log.properties", names);
  }
  add("admin.listen",
      c.admin.enabled ? c.admin.host + ":" + std::to_string(c.admin.port) : std::string("off"));
  add("resp.listen", c.server.resp_host.empty()
                         ? std::string("off")
                         : c.server.resp_host + ":" + std::to_string(c.server.resp_port));
  add("storage.path", c.storage.path);
  add("storage.file_size", c.storage.file_size);
  add("storage.write_block_size", c.storage.write_block_size);
  add("storage.durability", DurabilityName(c.storage.durability));
  add("storage.flush_interval_us", c.storage.flush_interval.count());
  add("storage.align_records", c.storage.align_records ? 1 : 0);
  add("storage.io_backend", BackendName(c.storage.io_backend));
  add("storage.queue_depth", c.storage.queue_depth);
  add("storage.max_key_bytes", c.storage.max_key_size);
  add("storage.background_defrag", c.storage.background_defrag ? 1 : 0);
  add("storage.defrag_threshold", c.storage.defrag_threshold);
  add("storage.defrag_blocks_per_second", c.storage.defrag_blocks_per_second);
  add("storage.rotate_blocks_per_second", c.storage.rotate_blocks_per_second);
  add("storage.block_summaries", c.storage.block_summaries ? 1 : 0);
  add("storage.index_checkpoint", c.index_checkpoint);
  add("profile.max_segments", c.profile.max_segments);
  add("profile.max_links", c.profile.max_links);
  add("profile.max_fields", c.profile.max_fields);
  add("profile.max_field_bytes", c.profile.max_field_bytes);
  add("profile.max_field_names", c.profile.max_field_names);
  add("profile.sweeper", c.profile.sweeper ? 1 : 0);
  add("profile.sweep_records_per_second", c.profile.sweep_records_per_second);
  add("profile.sweep_share", c.profile.sweep_share);
  add("profile.sweep_interval_ms", c.profile.sweep_interval.count());
  add("profile.sweep_flush_interval_ms", c.profile.sweep_flush_interval.count());
  add("log.level", c.log_level);
  return out;
}

std::string DescribeLine(const Config& c) {
  std::string line;
  for (const StatEntry& e : Describe(c)) {
    if (!line.empty()) line += ' ';
    line += e.name.substr(7);  // without "config."
    line += '=';
    if (const auto* u = std::get_if<uint64_t>(&e.value)) {
      line += std::to_string(*u);
    } else if (const auto* d = std::get_if<double>(&e.value)) {
      line += fmt::format("{}", *d);
    } else {
      line += std::get<std::string>(e.value);
    }
  }
  return line;
}

}  // namespace segstore::server
