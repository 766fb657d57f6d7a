// Target: the store under test, seen by segbench as the reference workload's
// operations (../shared/workload.md). segbench drives every store through
// this one interface, so segstore and Redis are measured by the same loop,
// the same histograms and the same clock.
//
// A Target is created on the main thread and shared by segbench's client
// threads: Open() may be called from any of them at once. Each Connection
// belongs to the thread whose io_context it was opened on: call it, and get
// its callbacks, only there. Callbacks run exactly once, never inside the
// call that started them, and may start new calls. A Connection's destructor
// fails what is still in flight (callbacks with ok == false) before it
// returns. Sample() is synchronous, opens its own connection, and is called
// from the main thread only, between runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "segstore/result.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace segstore::bench {

// One segment assignment: a segment ID and its expiry (Unix seconds, in the
// future when written).
struct Assignment {
  uint64_t id = 0;
  uint32_t expires = 0;
};

// What one operation did.
struct Outcome {
  bool ok = true;         // false: the store answered with an error, or none came
  std::string error;      // why, when !ok
  uint32_t segments = 0;  // segments returned (reads), removed as expired (upsert, trim)
  uint32_t missing = 0;   // users that had no profile (reads)
  // Reads of a linked user (profile bridging): how many profiles the merged
  // answer merged (the master's included); 0 for a user in no group.
  uint32_t profiles = 0;
  // Profile fields returned (a get asking for fields).
  uint32_t fields = 0;
};
using Done = std::function<void(Outcome)>;

// One connection to the store under test.
class Connection {
 public:
  virtual ~Connection() = default;

  // Reads `user`'s segments: only the live ones, unless the target was made
  // to read whole profiles (Redis's plain HGETALL).
  virtual void Get(const std::string& user, Done done) = 0;
  // Get for each of `users` in one request (segstore) or one pipelined burst
  // (Redis); done once every answer is in. `segments` and `missing` sum over
  // the users.
  virtual void BatchGet(std::span<const std::string> users, Done done) = 0;
  // Sets these segments' expiries in `user`'s profile, creating it if need
  // be, and drops the profile's expired segments on the way. `segments`:
  // how many expired segments it dropped.
  virtual void Upsert(const std::string& user, std::span<const Assignment> segments, Done done) = 0;
  // Drops `user`'s expired segments. `segments`: how many.
  virtual void Trim(const std::string& user, Done done) = 0;
  // Replaces each user's profile with exactly `profiles[i]` (users[i] gets
  // profiles[i]); done once all are stored. Used to load the data set.
  virtual void Replace(std::span<const std::string> users,
                       std::span<const std::vector<Assignment>> profiles, Done done) = 0;
  // Links `user` into the group of `master`, for good (profile bridging,
  // proto/PROTOCOL.md "Linked profiles"): from then on a Get by any user of
  // the group reads the group's merged view. segstore's binary protocol
  // only: other stores fail it (ok == false, "not supported", never inside
  // the call).
  virtual void Link(const std::string& user, const std::string& master, Done done) = 0;
  // Profile fields (proto/PROTOCOL.md, "Profile fields"), segstore's binary
  // protocol to a single server only: other stores, and a cluster, fail
  // these (ok == false, "not supported", never inside the call).
  // Sets these fields of `user` (one field_set), each with its absolute
  // expiry, creating the profile if need be. Used to load the data set.
  virtual void SetFields(const std::string& user, std::span<const ReferenceField> fields,
                         Done done) = 0;
  // Adds 1 to `user`'s counter `name` (one field_incr, no cap), in a fixed
  // window of `ttl` seconds: a counter made by it (absent or expired)
  // expires `ttl` seconds on, one that exists keeps its expiry.
  virtual void Increment(const std::string& user, const std::string& name, uint32_t ttl,
                         Done done) = 0;
  // Get, also asking for the live fields whose names start with `prefix`;
  // `fields` counts them.
  virtual void GetFields(const std::string& user, const std::string& prefix, Done done) = 0;
  // Requests sent whose callback has not run yet.
  virtual size_t in_flight() const = 0;
};

// A server's figures at one instant, for memory and CPU per operation.
struct ServerSample {
  int64_t pid = 0;                 // the server's process ID as it reports it (0: unknown)
  std::vector<int64_t> more_pids;  // a cluster's other nodes' (the sums below cover them all)
  uint64_t memory_bytes = 0;       // Redis: used_memory; segstore: resident set
  uint64_t device_bytes_used = 0;  // bytes of the data device in use, garbage included (0: none)
  // segstore: the bytes of the records its index points to
  // (storage.live_bytes: what the profiles take on the device, garbage not
  // included); 0 elsewhere.
  uint64_t live_bytes = 0;
  uint64_t records = 0;  // profiles (segstore) or keys (Redis) stored
  // Background work, cumulative (segstore only; 0 elsewhere).
  uint64_t sweeper_segments_removed = 0;
  uint64_t sweeper_records_rewritten = 0;
  uint64_t defrag_blocks = 0;
  // The index's DRAM (segstore only; 0 elsewhere): all of it, and of it the
  // references linked users keep (storage.index_reference_bytes) and how
  // many there are (storage.index_references, one a link).
  // index_references_known: the server reports those two at all.
  uint64_t index_bytes = 0;
  uint64_t index_references = 0;
  uint64_t index_reference_bytes = 0;
  bool index_references_known = false;
  std::string durability;  // segstore: its durability mode; Redis: its persistence
  std::string device;      // what the data lives on: "/var/lib/segstore/data (ext4)" or "memory"
};

class Target {
 public:
  virtual ~Target() = default;
  // "segstore", "segstore resp" (segstored's RESP port) or "redis".
  virtual std::string name() const = 0;
  // "host:port" (of the node asked, for a cluster).
  virtual std::string address() const = 0;
  // What the address leads to beyond one server: "cluster of 3 nodes,
  // replication 2"; empty for a single server.
  virtual std::string topology() const { return {}; }
  // Opens one connection on `io`; `done` runs on io's thread, never inside Open.
  virtual void Open(boost::asio::io_context& io,
                    std::function<void(Result<std::unique_ptr<Connection>>)> done) = 0;
  // The server's figures now.
  virtual Result<ServerSample> Sample() = 0;
  // Users per Replace call that suit this store when loading.
  virtual size_t load_batch() const = 0;
  // Whether Connection's profile field calls work here (segstore's binary
  // protocol to a single server).
  virtual bool fields_supported() const { return false; }
  // Profile fields: gives `names` numbers in the server's field name table
  // (src/profile/field_names.h), as a store that has served them a while
  // has them, so that the profiles loaded next name their fields by number
  // rather than inline: sets them on scratch users (the server numbers a
  // name once a write has stored it), deletes those, and waits until the
  // table's records stop appearing (at most `timeout_seconds`). Returns how
  // many records appeared (the names newly numbered). Unsupported where
  // !fields_supported().
  virtual Result<uint64_t> RegisterFieldNames(std::span<const std::string> /*names*/,
                                              double /*timeout_seconds*/) {
    return Status::Unsupported(name() + ": profile fields are not measured here");
  }
};

}  // namespace segstore::bench
