// Plain data types of the client API beyond the profile model's
// (include/segstore/segments.h): what a server announces, its statistics,
// the items and results of batch operations, and the pages in which a
// cluster node copies a partition from another (copy_partition). The wire
// protocol (proto/PROTOCOL.md) carries exactly these.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "segstore/result.h"
#include "segstore/segments.h"

namespace segstore {

// What a server announces in its hello response.
struct ServerInfo {
  uint32_t protocol = 0;         // the wire protocol version it speaks
  std::string server;            // "segstored 0.1.0"
  uint32_t max_frame_bytes = 0;  // largest request body it accepts
  uint32_t max_batch = 0;        // users in one batch request
  uint32_t max_key_bytes = 0;    // bytes of a user ID
  uint32_t max_segments = 0;     // segments one profile may hold
  uint32_t max_in_flight = 0;    // requests it reads ahead per connection
  // Profile fields: live fields one profile may hold, bytes of a string or
  // bytes value (0: a server older than fields did not say).
  uint32_t max_fields = 0;
  uint32_t max_field_bytes = 0;
};

// One counter, gauge or setting of a server.
struct StatEntry {
  std::string name;  // dotted: "server.requests.get", "storage.gets", ...
  std::variant<uint64_t, double, std::string> value;
  bool operator==(const StatEntry&) const = default;
};

struct Stats {
  std::vector<StatEntry> entries;  // in the server's order
};

// One user's part of an upsert.
struct UpsertItem {
  std::string user;
  std::vector<SegmentUpdate> segments;
  UpsertMode mode = UpsertMode::kSet;
  WriteId write_id = {};  // empty: none (a cluster then makes one up)
  // Each named segment's attributes become exactly the given ones (absent:
  // cleared) instead of absent keeping the current value (UpsertOptions).
  bool replace_attrs = false;

  UpsertOptions options() const { return UpsertOptions{mode, replace_attrs}; }
};

// Per-user outcomes of a batch, in the order asked.
using BatchGetResult = std::vector<Result<GetResult>>;
using BatchUpsertResult = std::vector<Result<UpsertResult>>;

// copy_partition, node to node: a new replica of a routing partition reads
// the partition's records from a node that serves it, page by page, then
// follows the cluster's log from the first page's `next`
// (proto/PROTOCOL.md, "copy_partition"). Clients have no need of it.
inline constexpr uint64_t kCopyFinished = uint64_t{1} << 32;  // the cursor after the last page

struct CopyPartitionRequest {
  uint32_t partition = 0;  // 0 to kPartitions - 1
  uint64_t cursor = 0;     // 0 for the first page; then the previous page's cursor
  // The lowest `next` the copier takes: a node that has not applied its log
  // partition up to here answers Busy. 0: any.
  uint64_t min_next = 0;
  // Most bytes of response body wanted (one record larger still comes
  // alone). 0: the server's own page size; the largest response body caps
  // it, and a server may cap it lower.
  uint32_t max_bytes = 0;
};

// One record as the storage engine keeps it.
struct CopiedRecord {
  std::string key;           // the user ID
  std::string body;          // the stored record body as is (the profile codec's bytes)
  UnixSeconds sweep_at = 0;  // 0: none
  UnixSeconds void_at = 0;   // 0: none
  // The user this record names (a linked profile's master); empty: none.
  std::string reference = {};
  bool operator==(const CopiedRecord&) const = default;
};

// One user's record as stored, as a node reads it from another (profile
// bridging in a cluster): its body (the profile codec's bytes) and the user
// it names (the engine's reference; empty: none).
struct StoredRecord {
  std::string body;
  std::string reference;
  bool operator==(const StoredRecord&) const = default;
};

// scan (proto/PROTOCOL.md, "scan"): a client reads every profile of a
// routing partition, page by page, decoded: what a backup or an export
// needs, from a single server or any replica of the partition.
inline constexpr uint64_t kScanFinished = kCopyFinished;  // the cursor after the last page

struct ScanRequest {
  uint32_t partition = 0;  // 0 to kPartitions - 1
  uint64_t cursor = 0;     // 0 for the first page; then the previous page's cursor
  // Most bytes of response body wanted (one profile larger still comes
  // alone). 0: the server's own page size; a server may cap it lower.
  uint32_t max_bytes = 0;
  bool operator==(const ScanRequest&) const = default;
};

// One user's record as a scan reads it: what was live in it at the
// server's clock when it was read, all of one version of the record.
struct ScannedProfile {
  std::string user = {};
  std::vector<Segment> segments = {};  // its own live segments, by id
  std::vector<Field> fields = {};      // its own live fields, by name (bytewise)
  // The master its record names with a live link (a member's side of a
  // link); empty: none. A link counts only while the master lists it too.
  std::string master = {};
  UnixSeconds link_expires = kNever;  // with `master`: when its link expires
  // The members its record lists with a live link (a master's side), by user.
  std::vector<LinkedUser> members = {};
  bool operator==(const ScannedProfile&) const = default;
};

struct ScanResponse {
  uint64_t cursor = 0;  // where the next page starts; kScanFinished after the last
  std::vector<ScannedProfile> profiles = {};  // by the server's order (not by user)
  // Set by the client library: the cluster node that answered read a copy
  // that may be behind the cluster's log (proto/PROTOCOL.md, "Stale reads").
  bool stale = false;
  bool finished() const { return cursor == kScanFinished; }
  bool operator==(const ScanResponse&) const = default;
};

struct CopyPartitionResponse {
  // The first offset of the partition's log partition the answering node had
  // not applied when it read this page. Keep the first page's: every page of
  // the copy reflects every entry before it; follow the log from there.
  uint64_t next = 0;
  uint64_t cursor = 0;                // where the next page starts; kCopyFinished after the last
  std::vector<CopiedRecord> records;  // at least one unless the partition is finished
  bool finished() const { return cursor == kCopyFinished; }
  bool operator==(const CopyPartitionResponse&) const = default;
};

}  // namespace segstore
