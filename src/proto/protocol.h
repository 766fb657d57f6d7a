// The segstore wire protocol's constants: the frame header, the operation
// codes and the default limits. Both sides include this one table; the prose
// specification is proto/PROTOCOL.md, which is normative where the two differ.
// Status codes travel as segstore::Status::Code values (include/segstore/status.h).
//
// No dependencies beyond the standard library; I/O-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace segstore::proto {

// Every frame, request or response, starts with this 16-byte header. All
// integers are big-endian (network byte order).
//
//   offset size field
//   0      2    magic        0x53 0x47 ("SG")
//   2      1    version      kVersion (1)
//   3      1    op           operation code (Op); a response repeats its request's
//   4      1    status       0 in requests; a response's Status::Code
//   5      1    flags        0 in requests; in responses, kFlag* bits
//   6      2    reserved     0
//   8      4    request_id   chosen by the client, echoed in the response
//   12     4    body_length  bytes of MessagePack body that follow (0: no body)
inline constexpr size_t kHeaderSize = 16;
inline constexpr uint8_t kMagic0 = 0x53;  // 'S'
inline constexpr uint8_t kMagic1 = 0x47;  // 'G'
inline constexpr uint8_t kVersion = 1;
// Response flags. Stale: a cluster node answered a read from a copy that may
// be behind the cluster's log (proto/PROTOCOL.md, "Stale reads").
inline constexpr uint8_t kFlagStale = 0x01;

enum class Op : uint8_t {
  kHello = 0x01,
  kPing = 0x02,
  kStats = 0x03,
  kClusterMap = 0x04,
  kGet = 0x10,
  kBatchGet = 0x11,
  kCount = 0x12,
  kMasterOf = 0x13,
  kLinks = 0x14,
  kConnected = 0x15,
  // A partition's profiles, page by page (backups, exports).
  kScan = 0x16,
  kUpsert = 0x20,
  kBatchUpsert = 0x21,
  kRemove = 0x22,
  kTrim = 0x23,
  kDelete = 0x24,
  kExpire = 0x25,
  kLink = 0x26,
  kUnlink = 0x27,
  // Profile fields (proto/PROTOCOL.md, "Profile fields").
  kFieldSet = 0x28,
  kFieldDelete = 0x29,
  kFieldIncrement = 0x2A,
  kFieldMax = 0x2B,
  // Node to node (a cluster's own traffic; clients have no need of these).
  kCopyPartition = 0x30,
  kLinkStep = 0x31,
  kReadRecords = 0x32,
};

// Every operation in a fixed order. An operation's place in it (OpSlot)
// numbers per-operation counters; codes outside the table get kOpCount.
inline constexpr Op kOps[] = {
    Op::kHello,          Op::kPing,        Op::kStats,         Op::kClusterMap, Op::kGet,
    Op::kBatchGet,       Op::kCount,       Op::kMasterOf,      Op::kLinks,      Op::kConnected,
    Op::kUpsert,         Op::kBatchUpsert, Op::kRemove,        Op::kTrim,       Op::kDelete,
    Op::kExpire,         Op::kLink,        Op::kUnlink,        Op::kFieldSet,   Op::kFieldDelete,
    Op::kFieldIncrement, Op::kFieldMax,    Op::kCopyPartition, Op::kLinkStep,   Op::kReadRecords,
    Op::kScan};
inline constexpr size_t kOpCount = sizeof(kOps) / sizeof(kOps[0]);
constexpr size_t OpSlot(uint8_t op) {
  for (size_t i = 0; i < kOpCount; ++i) {
    if (static_cast<uint8_t>(kOps[i]) == op) return i;
  }
  return kOpCount;
}

// "get", "batch_get", ...; "unknown" for a code outside the table.
std::string_view OpName(uint8_t op);
bool IsKnownOp(uint8_t op);

// Limits a server announces in hello; these are its defaults.
inline constexpr uint32_t kDefaultMaxFrameBytes = 4u << 20;  // body bytes of one frame
inline constexpr uint32_t kDefaultMaxBatch = 1000;           // users in one batch request
inline constexpr uint32_t kDefaultMaxKeyBytes = 256;         // bytes of a user ID
inline constexpr uint32_t kDefaultMaxInFlight = 256;         // requests in flight per connection
// Responses are not bound by the request limit (a batch get of many full
// profiles is large); no response body is ever larger than this. A server
// answers LimitExceeded instead.
inline constexpr uint32_t kMaxResponseBytes = 64u << 20;
// A profile field's name is 1 to this many bytes (PROTOCOL.md, "Profile
// fields"), whatever the server. Here, in the table that needs nothing but
// the standard library, so tools parsing names (segctl) can hold theirs to it.
inline constexpr size_t kMaxFieldNameBytes = 64;

struct FrameHeader {
  uint8_t version = kVersion;
  uint8_t op = 0;
  uint8_t status = 0;
  uint8_t flags = 0;
  uint32_t request_id = 0;
  uint32_t body_length = 0;
};

// Writes `h` (with the magic) into out[0..16).
inline void EncodeHeader(const FrameHeader& h, uint8_t* out) {
  out[0] = kMagic0;
  out[1] = kMagic1;
  out[2] = h.version;
  out[3] = h.op;
  out[4] = h.status;
  out[5] = h.flags;
  out[6] = 0;
  out[7] = 0;
  for (int i = 0; i < 4; ++i) {
    out[8 + i] = static_cast<uint8_t>(h.request_id >> (24 - 8 * i));
    out[12 + i] = static_cast<uint8_t>(h.body_length >> (24 - 8 * i));
  }
}

enum class HeaderCheck : uint8_t {
  kOk,
  kBadMagic,    // not a segstore frame: the stream cannot be trusted; close it
  kTooLarge,    // body_length over the limit: the stream cannot be resynced; close it
  kBadVersion,  // a version this side does not speak: answer Unsupported, skip the body
};

// Reads a header from in[0..16). Fills `h` whenever the magic is right, so a
// kBadVersion frame can still be answered and skipped.
inline HeaderCheck DecodeHeader(const uint8_t* in, uint32_t max_body, FrameHeader* h) {
  if (in[0] != kMagic0 || in[1] != kMagic1) return HeaderCheck::kBadMagic;
  h->version = in[2];
  h->op = in[3];
  h->status = in[4];
  h->flags = in[5];
  h->request_id = 0;
  h->body_length = 0;
  for (int i = 0; i < 4; ++i) {
    h->request_id = (h->request_id << 8) | in[8 + i];
    h->body_length = (h->body_length << 8) | in[12 + i];
  }
  if (h->body_length > max_body) return HeaderCheck::kTooLarge;
  if (h->version != kVersion) return HeaderCheck::kBadVersion;
  return HeaderCheck::kOk;
}

}  // namespace segstore::proto
