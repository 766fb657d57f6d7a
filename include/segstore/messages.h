// Plain data types of the client API beyond the profile model's
// (include/segstore/segments.h): what a server announces, its statistics,
// and the items and results of batch operations. The wire protocol
// (proto/PROTOCOL.md) carries exactly these.
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
  uint32_t protocol = 0;    // the wire protocol version it speaks
  std::string server;       // "segstored 0.1.0"
  uint32_t max_frame_bytes = 0;  // largest request body it accepts
  uint32_t max_batch = 0;        // users in one batch request
  uint32_t max_key_bytes = 0;    // bytes of a user ID
  uint32_t max_segments = 0;     // segments one profile may hold
  uint32_t max_in_flight = 0;    // requests it reads ahead per connection
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
};

// Per-user outcomes of a batch, in the order asked.
using BatchGetResult = std::vector<Result<GetResult>>;
using BatchUpsertResult = std::vector<Result<UpsertResult>>;

}  // namespace segstore
