// WriteEntry: a client's write as the cluster's log carries it (issue 18).
// An entry is deterministic: it holds the request as the client sent it and
// the time the producing node took it at, so every replica that applies it
// computes the same record, whatever its own clock and however late it
// applies it. Layout (integers little-endian unless said):
//
//   offset size  field
//   0      1     format (kEntryFormat, 1)
//   1      1     op: the proto::Op of the write (upsert, remove, trim, delete,
//                expire, link_step: one step of a link, unlink or group
//                delete, on the record of its user; field_set, field_del,
//                field_incr, field_max: on the record of its user, never
//                its master's: the node that took the write sent a linked
//                user's field write to its master's node, which logs it
//                under the master)
//   2      2     reserved, 0
//   4      4     now: Unix seconds; the time every replica applies it at
//   8      16    write ID: hi then lo, big-endian (as on the wire)
//   24     8     origin: the producing node's replicator (random per start)
//   32     8     ticket: which of its waiting clients the entry answers
//   40     ...   the request body in the wire protocol's encoding
//                (MessagePack, proto/PROTOCOL.md), user included, no write_id
//
// The log's record key is the user ID (for tools); the log partition is
// PartitionOf(user) mod the log's partition count. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "proto/protocol.h"
#include "proto/wire.h"
#include "segstore/routing.h"
#include "segstore/segments.h"

namespace segstore::replica {

inline constexpr uint8_t kEntryFormat = 1;
inline constexpr size_t kEntryHeaderSize = 40;

struct WriteEntry {
  UnixSeconds now = 0;
  WriteId write_id;
  // Who waits for the entry: the replicator that made it (its origin) and
  // the ticket of the waiting client there. The write ID says which write it
  // is; two entries of one write (a client's retry) have two tickets.
  uint64_t origin = 0;
  uint64_t ticket = 0;
  // Which write. Leave its own write_id empty: the header carries the
  // entry's (a decoded entry has it in both).
  std::variant<proto::UpsertRequest, proto::RemoveRequest, proto::TrimRequest, proto::DeleteRequest,
               proto::ExpireRequest, proto::LinkStepRequest, proto::FieldSetRequest,
               proto::FieldDeleteRequest, proto::FieldIncrementRequest, proto::FieldMaxRequest>
      request;

  proto::Op op() const;
  const std::string& user() const;
};

// Appends the entry's bytes to *out.
void EncodeEntry(const WriteEntry& entry, std::string* out);
// Reads an entry. InvalidArgument (saying what) for bytes that are not one:
// a format or op this build does not know, a header cut short, a body the
// wire decoder refuses under `limits`.
Status DecodeEntry(std::string_view bytes, const proto::DecodeLimits& limits, WriteEntry* entry);
// The header alone: what rebuilding the window of recent write IDs needs.
// InvalidArgument when the header is cut short or of an unknown format.
struct EntryHeader {
  proto::Op op = proto::Op::kUpsert;
  UnixSeconds now = 0;
  WriteId write_id;
  uint64_t origin = 0;
  uint64_t ticket = 0;
};
Result<EntryHeader> DecodeEntryHeader(std::string_view bytes);

// The log partition of `user` among `log_partitions` (a power of two that
// divides 4,096): routing partition mod log_partitions.
inline uint32_t LogPartitionOf(uint32_t partition, uint32_t log_partitions) {
  return partition % log_partitions;
}

}  // namespace segstore::replica
