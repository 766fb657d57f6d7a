// Checkpoints: how far a replica has applied each log partition, kept in the
// data file itself, one record per log partition, so a data file always
// carries its own resume point (src/storage/FORMAT.md, "Cluster records").
// A checkpoint is written only once everything it counts is on the device;
// it may lag what is applied (entries past it are replayed after a restart,
// and each is skipped where its user's record already holds its position:
// profile codec 2), never lead it.
//
// Key: kReservedPrefix + "segstore:applied:" + the log partition in decimal. User IDs
// starting with kReservedPrefix are refused by cluster nodes
// (proto/PROTOCOL.md), so no client can write over one. Body (integers as
// varints):
//
//   u8      version (1)
//   varint  next: the first offset not yet applied (0: none applied)
//   varint  window_start: where the window of recent write IDs begins, the
//           offset to read from after a restart to rebuild it (<= next)
//   varint  n, then n times: varint routing partition, varint next offset:
//           partitions of this log partition applied past `next` (one
//           copied from a replica whose copy was ahead of this node:
//           Applier::Follow); their entries before it are not applied
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "segstore/result.h"
#include "segstore/storage.h"

namespace segstore::replica {

// Every key starting with these two bytes is the node's own (PROTOCOL.md):
// checkpoints, and the profile layer's field name table.
inline constexpr std::string_view kReservedPrefix = storage::kReservedKeyPrefix;
using storage::IsReservedKey;
std::string CheckpointKey(uint32_t log_partition);

struct Checkpoint {
  int64_t next = 0;
  int64_t window_start = 0;
  std::vector<std::pair<uint32_t, int64_t>> partitions;  // (routing partition, next)
  bool operator==(const Checkpoint&) const = default;
};

std::string EncodeCheckpoint(const Checkpoint& c);
// Corruption for bytes that are not a checkpoint of a version this build reads.
Status DecodeCheckpoint(std::string_view body, Checkpoint* c);

}  // namespace segstore::replica
