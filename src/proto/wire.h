// The bodies of the wire protocol's frames: each request and response as a
// C++ struct, and its MessagePack encoding both ways (proto/PROTOCOL.md). The
// server decodes requests and encodes responses; the client does the reverse;
// tests do both against the example frames in proto/examples.
//
// I/O-free and thread-compatible. Decoders never trust their input: bytes that
// are not MessagePack, a map key that is not a string or appears twice, a
// wrong type, a missing field or a value out of range give InvalidArgument
// (LimitExceeded for a batch or list over the limits) with a message that
// names the field; they never throw or over-read. A body's shape is checked
// before it is built (no container claims more elements than the bytes left,
// at most 8 levels, maps of at most 4,096 entries, no extension types but a
// timestamp where a profile field's value may stand), so a
// decode holds at most one msgpack object (24 bytes) for each byte of the
// body, whatever its headers claim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/protocol.h"
#include "segstore/cluster_map.h"
#include "segstore/messages.h"
#include "segstore/result.h"
#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::proto {

// ---- requests ----

// The body of a request that takes no fields (ping, stats): empty, or a
// MessagePack map whose keys are all ignored.
struct EmptyRequest {};
struct HelloRequest {
  std::string client;  // free text naming the client, for the server's log
  std::string auth;    // the shared secret, when the server asks for one; empty: none sent
};
struct GetRequest {
  std::string user;
  GetOptions options;
};
// A batch fails as a whole only for what is wrong with the batch itself (its
// body, its list, its shared options); what is wrong with one of its users or
// items fails that one alone. `rejected` is empty when every entry decoded;
// otherwise it has one Status per entry, not OK for each entry that failed
// (that entry's other fields are then empty) and OK for the rest.
struct BatchGetRequest {
  std::vector<std::string> users;
  GetOptions options;
  std::vector<Status> rejected = {};
};
struct CountRequest {
  std::string user;
  uint64_t id_from = 0;
  uint64_t id_to = UINT64_MAX;
};
using UpsertRequest = UpsertItem;
struct BatchUpsertRequest {
  std::vector<UpsertRequest> items;   // each item carries its own mode
  std::vector<Status> rejected = {};  // as BatchGetRequest's
};
struct RemoveRequest {
  std::string user;
  std::vector<uint64_t> ids;
  WriteId write_id = {};  // empty: none
};
struct TrimRequest {
  std::string user;
  UnixSeconds before = 0;  // 0: the server's now
  WriteId write_id = {};
};
struct DeleteRequest {
  std::string user;
  WriteId write_id = {};
};
// expire: the expiry of each listed segment ID becomes `value` (absolute;
// with `ttl`, seconds from the server's now) where `condition` holds.
struct ExpireRequest {
  std::string user;
  std::vector<uint64_t> ids;  // 0 to max_segments (DecodeLimits::max_list)
  uint32_t value = 0;         // absolute Unix seconds (0: never), or with ttl seconds
  bool ttl = false;
  ExpireCondition condition = ExpireCondition::kNone;
  WriteId write_id = {};

  ExpireSpec spec() const { return ExpireSpec{value, ttl, condition}; }
};
// copy_partition, node to node (include/segstore/messages.h).
using CopyPartitionRequest = segstore::CopyPartitionRequest;
// Profile bridging (proto/PROTOCOL.md, "Linked profiles").
struct LinkRequest {
  std::string user;
  std::string master;
  uint32_t ttl = 0;  // seconds the link lasts; 0: it never expires
  WriteId write_id = {};
};
struct UnlinkRequest {
  std::string user;
  WriteId write_id = {};
};
struct MasterOfRequest {
  std::string user;
};
struct LinksRequest {
  std::string user;
  std::string cursor;  // empty: from the start
  uint32_t limit = 0;  // 0: the server's default (100)
};
struct ConnectedRequest {
  std::string a;
  std::string b;
};
// Node to node, profile bridging in a cluster: one step of a link, unlink
// or group delete, applied by a node holding step.user's partition through
// the cluster's log (segments.h, LinkStep).
struct LinkStepRequest {
  LinkStep step;
  WriteId write_id = {};
  const std::string& user() const { return step.user; }
};
// Node to node: the records of `users` as stored, for a node gathering a
// group whose members it does not hold.
struct ReadRecordsRequest {
  std::vector<std::string> users;  // 1 to max_batch
};
// Entries of one map in a body, at most (PROTOCOL.md, "Frames").
inline constexpr uint64_t kMaxMapEntries = 4096;
// Profile fields (proto/PROTOCOL.md, "Profile fields"). Names are 1 to
// kMaxFieldNameBytes (protocol.h) bytes (str or bin on the wire); a value is
// typed by its MessagePack form (int, float 64, str of UTF-8, bin, timestamp).
// Names a get may list in its "fields" option, at most.
inline constexpr size_t kMaxFieldNamesAsked = 256;
// field_set: {"user", "fields": [[name, value, expiry?, ttl?]...], "write_id"?}.
struct FieldSetRequest {
  std::string user;
  std::vector<FieldUpdate> fields;  // 0 to max_list
  WriteId write_id = {};
};
// field_del: {"user", "names": [name...], "write_id"?}.
struct FieldDeleteRequest {
  std::string user;
  std::vector<std::string> names;  // 0 to max_list
  WriteId write_id = {};
};
// field_incr: {"user", "name", "delta"?, "ttl"?, "window"?, "cap"?, "write_id"?}.
struct FieldIncrementRequest {
  std::string user;
  FieldIncrement increment;
  WriteId write_id = {};
};
// field_max: {"user", "name", "value", "expiry"?, "ttl"?, "write_id"?}.
struct FieldMaxRequest {
  std::string user;
  FieldUpdate field;
  WriteId write_id = {};
};

// ---- responses ----

using HelloResponse = ServerInfo;
struct RemoveResponse {
  uint32_t removed = 0;
  bool duplicate = false;  // as UpsertResult's
};
struct CountResponse {
  uint32_t count = 0;
};
struct DeleteResponse {
  bool deleted = false;
  bool duplicate = false;  // as UpsertResult's
};
// {"results": [u8...], "count": u32, "duplicate"?}; Decode refuses an
// outcome outside 0..3.
using ExpireResponse = ExpireResult;
using StatsResponse = Stats;
using BatchGetResponse = BatchGetResult;
using BatchUpsertResponse = BatchUpsertResult;
using CopiedRecord = segstore::CopiedRecord;
using LinkResponse = LinkResult;  // {"master", "members", "moved"}
struct UnlinkResponse {
  bool unlinked = false;
};
struct MasterOfResponse {
  std::string master;
};
using LinksResponse = LinksPage;  // {"master", "links": [[user, expires_at]...], "next"}
struct ConnectedResponse {
  bool connected = false;
};
using CopyPartitionResponse = segstore::CopyPartitionResponse;
using LinkStepResponse = LinkStepResult;  // {"applied", "changed", "members", "duplicate"?}
using StoredRecord = segstore::StoredRecord;
// {"results": [{"status": 0, "body", "reference"} or {"status", "message"}]}:
// one per user asked, in order; NotFound for a user without a record,
// WrongNode for one the node does not serve.
using ReadRecordsResponse = std::vector<Result<StoredRecord>>;
// field_set and field_del: {"changed": u32, "count": u32, "duplicate"?}.
using FieldWriteResponse = FieldWriteResult;
// field_incr: {"value": int, "capped": bool, "duplicate"?}.
using FieldIncrementResponse = IncrementResult;
// field_max: {"value": int|float|timestamp, "replaced": bool, "duplicate"?}.
using FieldMaxResponse = FieldMaxResult;

// The bytes record `r` takes in a copy_partition answer's body (exact), and
// the most the rest of that body takes (its map, "next", "cursor" and the
// records' array header): a page of records whose CopiedRecordBytes sum to S
// encodes to at most kCopyPageOverhead + S bytes. A server fills a page while
// that stays within the request's max_bytes.
size_t CopiedRecordBytes(const CopiedRecord& r);
inline constexpr size_t kCopyPageOverhead = 44;

// What a decoder accepts (a server passes its configured limits).
struct DecodeLimits {
  uint32_t max_key_bytes = kDefaultMaxKeyBytes;
  uint32_t max_batch = kDefaultMaxBatch;
  uint32_t max_list = 1u << 20;  // elements of one list (segments, ids)
};

// ---- bodies ----
// Encode* appends the body to *out. Decode* reads exactly `body` (an empty
// body reads as an empty map) and fills *msg.

void Encode(const HelloRequest& m, std::string* out);
void Encode(const GetRequest& m, std::string* out);
void Encode(const BatchGetRequest& m, std::string* out);
void Encode(const CountRequest& m, std::string* out);
void Encode(const UpsertRequest& m, std::string* out);
void Encode(const BatchUpsertRequest& m, std::string* out);
void Encode(const RemoveRequest& m, std::string* out);
void Encode(const TrimRequest& m, std::string* out);
void Encode(const DeleteRequest& m, std::string* out);
void Encode(const ExpireRequest& m, std::string* out);
void Encode(const CopyPartitionRequest& m, std::string* out);
void Encode(const LinkRequest& m, std::string* out);
void Encode(const UnlinkRequest& m, std::string* out);
void Encode(const MasterOfRequest& m, std::string* out);
void Encode(const LinksRequest& m, std::string* out);
void Encode(const ConnectedRequest& m, std::string* out);

// The checks Decode makes of a read's request, for one that arrives as a
// value instead (the RESP port's, Handler::HandleGet): its users' IDs and
// the batch's size against `limits`, with the same errors. A batch's users
// that fail alone are marked in `rejected`, as Decode marks them.
Status Check(const DecodeLimits& limits, const GetRequest& m);
Status Check(const DecodeLimits& limits, BatchGetRequest* m);

Status Decode(std::string_view body, const DecodeLimits& limits, EmptyRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, HelloRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, GetRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, BatchGetRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, CountRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, UpsertRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, BatchUpsertRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, RemoveRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, TrimRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, DeleteRequest* m);
// Requires "value"; "condition" is one of "nx", "xx", "gt", "lt" (absent or
// nil: none).
Status Decode(std::string_view body, const DecodeLimits& limits, ExpireRequest* m);
// Refuses a partition of 4096 or more and a cursor past kCopyFinished.
Status Decode(std::string_view body, const DecodeLimits& limits, CopyPartitionRequest* m);
// Users (user, master, a, b, a cursor that is not empty) are held to the
// rules of a user ID (limits.max_key_bytes).
Status Decode(std::string_view body, const DecodeLimits& limits, LinkRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, UnlinkRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, MasterOfRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, LinksRequest* m);
Status Decode(std::string_view body, const DecodeLimits& limits, ConnectedRequest* m);

void Encode(const HelloResponse& m, std::string* out);
void Encode(const GetResult& m, std::string* out);
void Encode(const BatchGetResponse& m, std::string* out);
void Encode(const UpsertResult& m, std::string* out);
void Encode(const BatchUpsertResponse& m, std::string* out);
void Encode(const RemoveResponse& m, std::string* out);
void Encode(const TrimResult& m, std::string* out);
void Encode(const CountResponse& m, std::string* out);
void Encode(const DeleteResponse& m, std::string* out);
void Encode(const ExpireResponse& m, std::string* out);
void Encode(const StatsResponse& m, std::string* out);
void Encode(const LinkResponse& m, std::string* out);
void Encode(const UnlinkResponse& m, std::string* out);
void Encode(const MasterOfResponse& m, std::string* out);
void Encode(const LinksResponse& m, std::string* out);
void Encode(const ConnectedResponse& m, std::string* out);

Status Decode(std::string_view body, const DecodeLimits& limits, HelloResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, GetResult* m);
Status Decode(std::string_view body, const DecodeLimits& limits, BatchGetResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, UpsertResult* m);
Status Decode(std::string_view body, const DecodeLimits& limits, BatchUpsertResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, RemoveResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, TrimResult* m);
Status Decode(std::string_view body, const DecodeLimits& limits, CountResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, DeleteResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, ExpireResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, StatsResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, LinkResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, UnlinkResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, MasterOfResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, LinksResponse* m);
Status Decode(std::string_view body, const DecodeLimits& limits, ConnectedResponse* m);
// cluster_map's answer. Decode also checks the map (ClusterMap::Check); what
// is wrong with `incoming` alone is named "incoming".
void Encode(const ClusterMap& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, ClusterMap* m);
// copy_partition's answer. Decode refuses a record whose key is empty, over
// limits.max_key_bytes or reserved (beginning FF 00: a node's own), a cursor
// past kCopyFinished, and an empty page that is not the last.
void Encode(const CopyPartitionResponse& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, CopyPartitionResponse* m);
// scan (proto/PROTOCOL.md, "scan"). Decode of a request refuses a partition
// of 4096 or more and a cursor past kScanFinished; of an answer, a cursor
// past kScanFinished, a profile whose user is empty, over
// limits.max_key_bytes or reserved (FF 00), segment ids not ascending,
// fields not in bytewise order of name, members not in bytewise order, and
// a "link_expires" without a "master". An empty page may come before the
// last (its records held nothing live).
using ScanRequest = segstore::ScanRequest;
using ScanResponse = segstore::ScanResponse;
using ScannedProfile = segstore::ScannedProfile;
void Encode(const ScanRequest& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, ScanRequest* m);
void Encode(const ScanResponse& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, ScanResponse* m);
// The bytes profile `p` takes in a scan answer's "profiles" (exact), and the
// most the rest of that body takes (its map, "cursor" and the array's
// header): a page of profiles whose ScannedProfileBytes sum to S encodes to
// at most kScanPageOverhead + S bytes.
size_t ScannedProfileBytes(const ScannedProfile& p);
inline constexpr size_t kScanPageOverhead = 32;
// link_step and read_records (node to node, profile bridging in a cluster).
// A step's users are held to the rules of user IDs, its lists to
// limits.max_batch entries, and its kind must be known and name what that
// kind needs (kList and kDrop a member; kName, kNameMoved and kDeleteMember
// a master).
void Encode(const LinkStepRequest& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, LinkStepRequest* m);
void Encode(const LinkStepResponse& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, LinkStepResponse* m);
void Encode(const ReadRecordsRequest& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, ReadRecordsRequest* m);
void Encode(const ReadRecordsResponse& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, ReadRecordsResponse* m);
// Profile fields. Decode holds names to 1..kMaxFieldNameBytes bytes, lists
// to limits.max_list, values to their MessagePack forms (a timestamp only in
// its 32-bit form or its 64-bit form with 0 nanoseconds, within 32 bits of
// seconds), "window" to "fixed" or "sliding", and field_max's value to an
// int, a float or a time. What the profile layer checks (a name twice, an
// expiry in the past, a value over max_field_bytes) it leaves to it.
void Encode(const FieldSetRequest& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, FieldSetRequest* m);
void Encode(const FieldDeleteRequest& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, FieldDeleteRequest* m);
void Encode(const FieldIncrementRequest& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, FieldIncrementRequest* m);
void Encode(const FieldMaxRequest& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, FieldMaxRequest* m);
void Encode(const FieldWriteResponse& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, FieldWriteResponse* m);
void Encode(const FieldIncrementResponse& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, FieldIncrementResponse* m);
void Encode(const FieldMaxResponse& m, std::string* out);
Status Decode(std::string_view body, const DecodeLimits& limits, FieldMaxResponse* m);

// The body of an error response: {"message": str}. DecodeError never fails:
// a body it cannot read gives a message saying so.
void EncodeError(std::string_view message, std::string* out);
std::string DecodeError(std::string_view body);
// A WrongNode error's body also carries the revision of the map the server
// went by: {"message": str, "revision": u64}. DecodeErrorRevision gives it,
// or 0 when the body has none (or cannot be read).
void EncodeWrongNode(std::string_view message, uint64_t revision, std::string* out);
uint64_t DecodeErrorRevision(std::string_view body);

// ---- frames ----

// Appends a whole frame to *out: the header, then whatever `encode_body`
// appends. Returns false (appending nothing) when the body came out larger
// than `max_body`; the caller then sends an error instead.
template <typename EncodeBody>
bool AppendFrame(std::string* out, uint8_t op, uint32_t request_id, uint8_t status,
                 uint32_t max_body, EncodeBody&& encode_body) {
  const size_t start = out->size();
  out->resize(start + kHeaderSize);
  encode_body(out);
  const size_t body = out->size() - start - kHeaderSize;
  if (body > max_body) {
    out->resize(start);
    return false;
  }
  FrameHeader h;
  h.op = op;
  h.status = status;
  h.request_id = request_id;
  h.body_length = static_cast<uint32_t>(body);
  EncodeHeader(h, reinterpret_cast<uint8_t*>(out->data() + start));
  return true;
}

// Appends an error response frame carrying `status` (not OK).
void AppendErrorFrame(std::string* out, uint8_t op, uint32_t request_id, const Status& status);
// A WrongNode error frame with the map's revision.
void AppendWrongNodeFrame(std::string* out, uint8_t op, uint32_t request_id,
                          std::string_view message, uint64_t revision);

}  // namespace segstore::proto
