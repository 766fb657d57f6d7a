// EtcdClient: the few etcd v3 calls the cluster needs, through etcd's HTTP
// JSON gateway (POST /v3/kv/range and friends; etcd 3.4 serves it on its
// client URLs), over plain HTTP/1.1 with Boost.Beast.
//
// Blocking: each call sends one request and waits for its answer, at most
// `timeout` from connecting to the last byte (host names are resolved
// synchronously, outside that bound: give IP addresses, or names the system
// resolves at once, such as those in /etc/hosts). The client keeps one connection to one endpoint
// and moves to the next endpoint when a call fails for a reason of the connection (refused, reset,
// timed out); it does not retry a call itself, so a write whose outcome is unknown is reported as
// Unavailable and the caller decides. Keys and values are bytes (the gateway carries them in
// base64).
//
// Errors: Unavailable (no endpoint answered, or the connection broke),
// Timeout (no answer within `timeout`), NotFound (etcd says the lease does
// not exist), Internal (an answer this client cannot read), and etcd's own
// errors as Unavailable with its message.
//
// Thread-safety: every call takes the client's mutex; one call at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/result.h"

namespace segstore::cluster {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "http://host:port", tried in turn
  std::chrono::milliseconds timeout{2000};
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision when it answered
  std::vector<KeyValue> kvs;
};

// A condition of a transaction on one key: its create or mod revision, or
// the lease it is attached to.
struct Compare {
  enum class Target { kCreate, kMod, kLease };
  std::string key;
  Target target = Target::kMod;
  // Equal to this (a create revision of 0: the key is absent); for kLease,
  // the lease ID (0: no lease, or no key).
  int64_t revision = 0;
};

class EtcdClient {
 public:
  // Parses the endpoints (InvalidArgument on one that is not http://host:port);
  // connects lazily, on the first call.
  static Result<std::unique_ptr<EtcdClient>> Create(const EtcdOptions& options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // A new lease of `ttl_seconds`; its ID.
  Result<int64_t> Grant(int64_t ttl_seconds);
  // Renews the lease; its remaining TTL in seconds, or NotFound once it expired.
  Result<int64_t> KeepAlive(int64_t lease);
  // Ends the lease and deletes its keys. OK also when it had expired.
  Status Revoke(int64_t lease);

  // The value of `key`; with `prefix`, of every key starting with it. Only
  // keys modified at or after `min_mod_revision` (0: all) are returned.
  Result<RangeResult> Range(std::string_view key, bool prefix = false,
                            int64_t min_mod_revision = 0);
  // Sets `key` (attached to `lease` unless 0); the revision of the write.
  Result<int64_t> Put(std::string_view key, std::string_view value, int64_t lease = 0);
  // Deletes `key`; with `prefix`, every key starting with it.
  Status Delete(std::string_view key, bool prefix = false);
  // Puts `key` only if every compare holds. True when it did; false (and
  // nothing written) when a compare failed.
  Result<bool> PutIf(const std::vector<Compare>& compares, std::string_view key,
                     std::string_view value, int64_t lease = 0);
  // Deletes `key` only if every compare holds.
  Result<bool> DeleteIf(const std::vector<Compare>& compares, std::string_view key);

  // "http://host:port" of the endpoint the next call goes to.
  std::string endpoint() const;

  struct Impl;  // opaque: etcd_client.cc

 private:
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The first key after every key starting with `prefix` (etcd's range_end for
// a prefix).
std::string PrefixEnd(std::string_view prefix);

}  // namespace segstore::cluster
