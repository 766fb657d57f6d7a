// The table of example frames in proto/examples/*.hex: for each file, the
// frame's header fields and the body as the C++ struct it encodes. Shared by
// the generator (tests/proto/gen_examples.cc, which writes the files from this table) and
// tests/proto/wire_test.cc (which checks that the files, the encoders and the
// decoders agree, both ways). Change an example here, then regenerate:
//
//   make proto_examples_gen && ./tests/proto/proto_examples_gen ../proto/examples
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "proto/protocol.h"
#include "proto/wire.h"
#include "segstore/cluster_map.h"
#include "segstore/messages.h"
#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::proto::examples {

// A frame without a body (body_length 0): ping both ways, the stats request.
struct EmptyBody {};
// The body of an error response (header status not 0): {"message": str}.
struct ErrorBody {
  std::string message;
};
// The body of a WrongNode error response (status 14): {"message": str,
// "revision": u64}, the revision of the cluster map the server went by.
struct WrongNodeBody {
  std::string message;
  uint64_t revision = 0;
};
// Bytes sent as they are: a request body a server must refuse.
struct RawBody {
  std::string bytes;
};

using Body =
    std::variant<EmptyBody, ErrorBody, WrongNodeBody, HelloRequest, GetRequest, BatchGetRequest,
                 CountRequest, UpsertRequest, BatchUpsertRequest, RemoveRequest, TrimRequest,
                 DeleteRequest, ExpireRequest, LinkRequest, UnlinkRequest, MasterOfRequest,
                 LinksRequest, ConnectedRequest, HelloResponse, GetResult, BatchGetResponse,
                 UpsertResult, BatchUpsertResponse, RemoveResponse, TrimResult, CountResponse,
                 DeleteResponse, ExpireResponse, StatsResponse, ClusterMap, LinkResponse,
                 UnlinkResponse, MasterOfResponse, LinksResponse, ConnectedResponse, RawBody,
                 FieldSetRequest, FieldDeleteRequest, FieldIncrementRequest, FieldMaxRequest,
                 FieldWriteResponse, FieldIncrementResponse, FieldMaxResponse, ScanRequest,
                 ScanResponse>;

// One example file: a frame, described. `BodyOf` is the variant of the
// bodies its table uses (this table's Body; node_example_frames.h has its own).
template <typename BodyOf>
struct ExampleOf {
  std::string file;                // "get.request.hex"
  std::string title;               // one line: what the frame is
  std::vector<std::string> notes;  // what a client author should know about it
  Op op;
  uint32_t request_id;
  Status::Code status;  // the header's status byte (kOk in every request)
  BodyOf body;
  uint8_t flags = 0;  // the header's flags byte (kFlagStale; 0 in every request)
};
using Example = ExampleOf<Body>;

// Appends the body's MessagePack encoding (nothing for EmptyBody), for
// either table's variant of bodies.
template <typename BodyOf>
inline void EncodeBody(const BodyOf& body, std::string* out) {
  std::visit(
      [out](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, EmptyBody>) {
          // no body
        } else if constexpr (std::is_same_v<T, ErrorBody>) {
          EncodeError(m.message, out);
        } else if constexpr (std::is_same_v<T, WrongNodeBody>) {
          EncodeWrongNode(m.message, m.revision, out);
        } else if constexpr (std::is_same_v<T, RawBody>) {
          out->append(m.bytes);
        } else {
          Encode(m, out);
        }
      },
      body);
}

// The whole frame: header, then body.
template <typename BodyOf>
inline std::string EncodeFrame(const ExampleOf<BodyOf>& e) {
  std::string out;
  const bool fits =
      AppendFrame(&out, static_cast<uint8_t>(e.op), e.request_id, static_cast<uint8_t>(e.status),
                  kMaxResponseBytes, [&](std::string* o) { EncodeBody(e.body, o); });
  (void)fits;  // examples are small
  out[5] = static_cast<char>(e.flags);
  return out;
}

inline constexpr UnixSeconds kJan2030 = 1893456000;  // 2030-01-01T00:00:00Z
inline constexpr UnixSeconds kFeb2030 = 1896134400;  // 2030-02-01T00:00:00Z

// A segment of an upsert: [id, value, ttl, attr1, attr2].
inline SegmentUpdate Seg(uint64_t id, uint32_t value, bool ttl = false,
                         std::optional<uint32_t> attr1 = std::nullopt,
                         std::optional<uint32_t> attr2 = std::nullopt) {
  SegmentUpdate s;
  s.id = id;
  s.value = value;
  s.ttl = ttl;
  s.attr1 = attr1;
  s.attr2 = attr2;
  return s;
}

// A get result of projection "ids".
inline GetResult IdsOnly(std::vector<uint64_t> ids, uint32_t count) {
  GetResult r;
  r.ids = std::move(ids);
  r.count = count;
  return r;
}

inline std::vector<Example> All() {
  std::vector<Example> v;
  const auto ok = Status::Code::kOk;

  // ---- hello ----
  v.push_back({"hello.request.hex",
               "hello request: the client introduces itself",
               {"\"client\" is free text for the server's log; the body may also be empty."},
               Op::kHello,
               1,
               ok,
               HelloRequest{"segstore-py 0.1.0", ""}});
  v.push_back({"hello.response.hex",
               "hello response: the server's protocol version and limits",
               {"Every field is an unsigned integer except \"server\" (free text).",
                "max_frame_bytes bounds a request's body; max_batch the users (or items) of one",
                "batch request; max_key_bytes the bytes of a user ID; max_segments the segments",
                "one profile may hold; max_in_flight the requests read ahead per connection;",
                "max_fields the live profile fields one profile may hold; max_field_bytes the",
                "bytes of one string or bytes field value (both absent from servers older than",
                "profile fields)."},
               Op::kHello,
               1,
               ok,
               HelloResponse{.protocol = 1,
                             .server = "segstored 0.1.0",
                             .max_frame_bytes = kDefaultMaxFrameBytes,
                             .max_batch = kDefaultMaxBatch,
                             .max_key_bytes = kDefaultMaxKeyBytes,
                             .max_segments = 10000,
                             .max_in_flight = kDefaultMaxInFlight,
                             .max_fields = 256,
                             .max_field_bytes = 1024}});

  // ---- ping ----
  v.push_back({"ping.request.hex",
               "ping request: no body",
               {"body_length is 0: the frame is the header alone."},
               Op::kPing,
               2,
               ok,
               EmptyBody{}});
  v.push_back({"ping.response.hex",
               "ping response: no body",
               {"body_length is 0: the frame is the header alone."},
               Op::kPing,
               2,
               ok,
               EmptyBody{}});

  // ---- stats ----
  v.push_back({"stats.request.hex",
               "stats request: no body",
               {"body_length is 0: the frame is the header alone."},
               Op::kStats,
               3,
               ok,
               EmptyBody{}});
  v.push_back({"stats.response.hex",
               "stats response: one map entry per counter, gauge or setting",
               {"Keys are dotted names, in the server's order; a value is an unsigned integer,",
                "a float64 or a string. Names and their number vary by server version:",
                "read the ones you know, skip the rest. Every name: docs/metrics.md."},
               Op::kStats,
               3,
               ok,
               StatsResponse{{{"server.version", std::string("segstored 0.1.0")},
                              {"server.uptime_seconds", 86400.5},
                              {"server.requests.get", uint64_t{12345}},
                              {"storage.write_blocks_free", uint64_t{3900}}}}});

  // ---- cluster_map ----
  v.push_back({"cluster_map.request.hex",
               "cluster_map request: no body",
               {"body_length is 0: the frame is the header alone (as with ping and stats, any",
                "map is also accepted and its keys ignored)."},
               Op::kClusterMap,
               19,
               ok,
               EmptyBody{}});
  v.push_back({"cluster_map.response.hex",
               "cluster_map response of a single server, not in a cluster",
               {"A single server (holding every partition) answers so. A cluster node answers",
                "cluster true, its map's revision (0: no map yet, retry later), self (its node",
                "ID), replication, nodes [{\"id\", \"address\", \"rack\"}, ...] and partitions:",
                "4096 arrays, each the indices in nodes of that partition's replicas; with a",
                "log, \"log\": true, and a passive cluster's node also \"passive\": true."},
               Op::kClusterMap,
               19,
               ok,
               ClusterMap{}});

  // ---- get ----
  GetRequest get_ids{.user = "user-42", .options = {}};
  get_ids.options.ids_only = true;
  v.push_back({"get.request.hex",
               "get request: one user's live segment IDs only (projection \"ids\")",
               {"Only \"user\" is required (a string, or binary for non-UTF-8 IDs). Every other",
                "key is optional and omitted at its default: \"projection\" (\"full\" | \"ids\"),",
                "\"expiry_from\" (0), \"expiry_to\" (4294967295), \"outside_expiry\" (false),",
                "\"id_from\" (0), \"id_to\" (2^64-1), \"count_only\" (false), \"limit\" (0: all).",
                "A server ignores keys it does not know."},
               Op::kGet,
               4,
               ok,
               get_ids});
  v.push_back({"get.response.hex",
               "get response to projection \"ids\": the count and the IDs, no other columns",
               {"\"count\" is every live segment matching the options (whatever \"limit\");",
                "\"ids\" ascending. With projection \"ids\" there is no \"expires\" column.",
                "A user without segments is an error response with status 1 (NotFound)."},
               Op::kGet,
               4,
               ok,
               IdsOnly({101, 205, 70000}, 3)});

  GetRequest get_full{.user = "user-42", .options = {}};
  get_full.options.id_from = 100;
  get_full.options.id_to = 100000;
  get_full.options.expiry_from = kJan2030;
  get_full.options.limit = 50;
  v.push_back({"get_full.request.hex",
               "get request: full segments (the default projection), with ID, expiry, limit",
               {"Segments with IDs in [100, 100000] expiring at or after 2030-01-01 (a segment",
                "that never expires counts as expiring at +infinity), at most 50, lowest IDs",
                "first. No \"projection\" key: \"full\" is the default."},
               Op::kGet,
               5,
               ok,
               get_full});
  v.push_back({"get_full.response.hex",
               "get response, full projection: parallel columns, one row per segment",
               {"Row i is ids[i], expires[i], attr1[i], attr2[i]. expires 0: never expires.",
                "\"attr1\"/\"attr2\" are present only when some returned segment has that",
                "attribute; nil marks a row without it. Here 101 never expires and has attr1 7,",
                "205 expires 2030-02-01 and has attr2 3, 70000 has neither attribute."},
               Op::kGet,
               5,
               ok,
               GetResult{.ids = {101, 205, 70000},
                         .expires = {kNever, kFeb2030, kFeb2030 + 3600},
                         .attr1 = {7u, std::nullopt, std::nullopt},
                         .attr2 = {std::nullopt, 3u, std::nullopt},
                         .count = 3,
                         .master = {},
                         .profiles = 0,
                         .fields = {}}});

  // ---- get of a linked user (profile bridging) ----
  v.push_back({"get_linked.request.hex",
               "get request by a linked user: the merged view of its group",
               {"cookie-77 is linked to the master user-42 (see link.request). A get by any",
                "user of a group answers the group's merged view; the request is an ordinary",
                "get (here the full projection, no option)."},
               Op::kGet,
               29,
               ok,
               GetRequest{.user = "cookie-77", .options = {}}});
  v.push_back({"get_linked.response.hex",
               "get response of a merged view: the usual columns, then master and profiles",
               {"The union of the live segments of the master and every linked profile; for",
                "a segment in several, the latest expiry wins (0, never, is the latest of",
                "all), with the attributes of the profile that gave it. \"master\" (bin): the",
                "group's master; \"profiles\": how many profiles were merged, the master's",
                "included. Both are present only in a merged view: a user in no group, or a",
                "get with \"own\": true, gets exactly the answer it got before bridging."},
               Op::kGet,
               29,
               ok,
               GetResult{.ids = {101, 205, 5484},
                         .expires = {kNever, kFeb2030, kJan2030 + 86400},
                         .attr1 = {7u, std::nullopt, std::nullopt},
                         .attr2 = {},
                         .count = 3,
                         .master = "user-42",
                         .profiles = 4,
                         .fields = {}}});
  GetRequest get_own{.user = "cookie-77", .options = {}};
  get_own.options.ids_only = true;
  get_own.options.own_only = true;
  v.push_back(
      {"get_own.request.hex",
       "get request by a linked user for its own profile only (\"own\": true)",
       {"\"own\" (bool, default false; also in batch_get) answers the user's own",
        "profile alone, as if it were in no group. For a user in no group it changes", "nothing."},
       Op::kGet,
       30,
       ok,
       get_own});
  v.push_back({"get_own.response.hex",
               "get response to \"own\": the user's own segments, no master, no profiles",
               {"Only cookie-77's own segment: a plain get answer. NotFound when the user's",
                "own profile has no live segment, even if its group has some."},
               Op::kGet,
               30,
               ok,
               IdsOnly({5484}, 1)});

  // ---- batch_get ----
  BatchGetRequest batch_get{.users = {"user-42", "user-43", "nobody"}, .options = {}};
  batch_get.options.ids_only = true;
  v.push_back({"batch_get.request.hex",
               "batch_get request: three users, IDs only",
               {"\"users\": 0 to max_batch user IDs; the get options (as in get) apply to all."},
               Op::kBatchGet,
               6,
               ok,
               batch_get});
  BatchGetResponse batch_get_results;
  batch_get_results.push_back(IdsOnly({101, 205, 70000}, 3));
  batch_get_results.push_back(IdsOnly({7}, 1));
  batch_get_results.push_back(Status::NotFound("no profile for user nobody"));
  v.push_back({"batch_get.response.hex",
               "batch_get response: one result per user, in the order asked",
               {"The header status is 0 even when some users failed: each element of \"results\"",
                "carries its own \"status\" (0: a get result as in the get response; otherwise",
                "an error code with a \"message\"). Here the third user has no profile:",
                "status 1 (NotFound)."},
               Op::kBatchGet,
               6,
               ok,
               batch_get_results});

  BatchGetRequest batch_get_bad{.users = {"user-42", "", "nobody"}, .options = {}};
  batch_get_bad.options.ids_only = true;
  v.push_back({"batch_get_bad_user.request.hex",
               "batch_get request with an empty user ID among good ones",
               {"An entry that is wrong fails alone: the frame is answered with status 0 and",
                "the second result carries the error (see batch_get_bad_user.response).",
                "What is wrong with the batch itself (\"users\" not an array, more than",
                "max_batch users, a bad option) fails the whole frame instead."},
               Op::kBatchGet,
               16,
               ok,
               batch_get_bad});
  BatchGetResponse batch_get_bad_results;
  batch_get_bad_results.push_back(IdsOnly({101, 205, 70000}, 3));
  batch_get_bad_results.push_back(Status::InvalidArgument("users[1]: empty user ID"));
  batch_get_bad_results.push_back(Status::NotFound("no live segments"));
  v.push_back({"batch_get_bad_user.response.hex",
               "batch_get response: the bad user ID failed alone",
               {"users[1] was empty: status 2 (InvalidArgument), the message naming it. The",
                "others were read as usual (the third has no profile: status 1)."},
               Op::kBatchGet,
               16,
               ok,
               batch_get_bad_results});

  // ---- count ----
  v.push_back({"count.request.hex",
               "count request: live segments with IDs in [id_from, id_to]",
               {"\"id_from\" (default 0) and \"id_to\" (default 2^64-1) are optional; this",
                "encoder always sends both. 2^64-1 takes the uint64 form (cf + 8 bytes)."},
               Op::kCount,
               7,
               ok,
               CountRequest{.user = "user-42", .id_from = 200, .id_to = UINT64_MAX}});
  v.push_back({"count.response.hex", "count response", {}, Op::kCount, 7, ok, CountResponse{2}});
  v.push_back({"count_missing.request.hex",
               "count request for a user who has no profile",
               {"As get, count answers NotFound for a user with no live segment (never",
                "written, deleted, or every segment expired): see count_missing.response."},
               Op::kCount,
               15,
               ok,
               CountRequest{.user = "nobody", .id_from = 0, .id_to = UINT64_MAX}});
  v.push_back({"count_missing.response.hex",
               "count response for a user who has no profile: status 1 (NotFound)",
               {"get, count, remove, trim and expire all answer so, and write nothing;",
                "delete answers {\"deleted\": false} instead; batch_get gives it per user."},
               Op::kCount,
               15,
               Status::Code::kNotFound,
               ErrorBody{"the user has no profile"}});

  // ---- master_of, links, connected (profile bridging) ----
  v.push_back({"master_of.request.hex",
               "master_of request: the master of a user's group",
               {},
               Op::kMasterOf,
               31,
               ok,
               MasterOfRequest{"device-3"}});
  v.push_back({"master_of.response.hex",
               "master_of response: the group's master, as bin",
               {"A master gets itself. A user in no group gets NotFound (status 1)."},
               Op::kMasterOf,
               31,
               ok,
               MasterOfResponse{"user-42"}});
  v.push_back(
      {"links.request.hex",
       "links request: the users linked to the master of a user's group, a page",
       {"\"cursor\" (str/bin, optional): the \"next\" of the previous page; absent",
        "or empty: from the start. \"limit\" (optional; absent or 0: 100): the most",
        "users in one page. Any user of the group may be asked: a member or the", "master."},
       Op::kLinks,
       32,
       ok,
       LinksRequest{.user = "cookie-77", .cursor = "", .limit = 2}});
  v.push_back({"links.response.hex",
               "links response: a page of the group's members, with their links' expiries",
               {"\"links\": [user (bin), expires_at (u32; 0: never)] pairs, sorted by user",
                "(bytewise), the master not among them. \"next\" (bin): present only when",
                "there are more; send it as \"cursor\" for the next page. The group here has",
                "a third member, email-9, on the next page. NotFound for a user in no group."},
               Op::kLinks,
               32,
               ok,
               LinksResponse{.master = "user-42",
                             .links = {{"cookie-77", kFeb2030}, {"device-3", kNever}},
                             .next = "device-3"}});
  v.push_back({"connected.request.hex",
               "connected request: are two users in the same group?",
               {"\"a\" and \"b\": two user IDs, both required."},
               Op::kConnected,
               33,
               ok,
               ConnectedRequest{.a = "cookie-77", .b = "device-3"}});
  v.push_back({"connected.response.hex",
               "connected response",
               {"true when a and b are the same ID or share a master; false otherwise (users",
                "without profiles too: never NotFound)."},
               Op::kConnected,
               33,
               ok,
               ConnectedResponse{true}});

  // ---- scan ----
  v.push_back({"scan.request.hex",
               "scan request: the first page of a partition's profiles, at most 64 KiB",
               {"\"partition\" (0 to 4095) and \"cursor\" (0 for the first page; then the",
                "previous answer's) are required; \"max_bytes\" (default 1 MiB, at most 16 MiB)",
                "is not. A single server answers every partition; a cluster node those it",
                "serves (WrongNode otherwise)."},
               Op::kScan,
               44,
               ok,
               ScanRequest{3045, 0, 65536}});
  {
    ScanResponse page;
    page.cursor = 3000000000;
    ScannedProfile master;
    master.user = "foo";
    master.segments = {Segment{5484, kNever, {}, {}}, Segment{5485, kFeb2030, 7u, {}}};
    master.fields = {{"cap:77", FieldValue::Int(2), kFeb2030},
                     {"country", FieldValue::String("FR"), kNever}};
    master.members = {{"{foo}.cookie", kFeb2030}};
    page.profiles.push_back(master);
    ScannedProfile member;
    member.user = "{foo}.cookie";
    member.segments = {Segment{12, kJan2030, {}, 3u}};
    member.master = "foo";
    member.link_expires = kFeb2030;
    page.profiles.push_back(member);
    v.push_back(
        {"scan.response.hex",
         "scan response: a page of two profiles, a master and its linked member",
         {"Each profile: \"user\" (bin); \"segments\", its own live segments by id, each",
          "[id, expires_at] with attr1 (or nil) and attr2 after them when it has them;",
          "\"fields\" (only when it has live ones) as a get's; \"master\" and",
          "\"link_expires\" when its record names a master with a live link; \"members\"",
          "when its record lists members with live links. \"cursor\": send it back for",
          "the next page; 4294967296 (2^32) after the last. A page may be empty before",
          "the last."},
         Op::kScan,
         44,
         ok,
         page});
  }

  // ---- upsert ----
  UpsertRequest upsert{.user = "user-42", .segments = {}, .mode = UpsertMode::kSet};
  upsert.segments.push_back(Seg(101, 86400, true));
  upsert.segments.push_back(Seg(205, kJan2030));
  upsert.segments.push_back(Seg(70000, 2592000, true, 7, 3));
  upsert.segments.push_back(Seg(9000000000, kNever, false, std::nullopt, 12));
  v.push_back({"upsert.request.hex",
               "upsert request, mode \"set\": TTL, absolute and never-expiring segments, attrs",
               {"\"mode\": \"set\" (the default: the expiry becomes the given one), \"extend\"",
                "(the later of the current and the given expiry) or \"add\" (see upsert_add).",
                "Each segment is an array [id, value, ttl, attr1, attr2]; only id and value",
                "are required, trailing elements may be left off, nil means absent:",
                "  id     uint64 segment ID",
                "  value  with ttl true: seconds from now; otherwise an absolute expiry in",
                "         Unix seconds (0: never expires)", "  ttl    bool, default false",
                "  attr1, attr2  uint32, set when present, kept unchanged when absent",
                "Here: 101 expires in one day; 205 at 2030-01-01; 70000 in 30 days with attr1 7",
                "and attr2 3; 9000000000 never expires, attr2 12 (attr1 nil to reach attr2)."},
               Op::kUpsert,
               8,
               ok,
               upsert});
  v.push_back({"upsert.response.hex",
               "upsert response",
               {"inserted: segments not live before; updated: live segments the request named,",
                "changed or not; trimmed: expired segments this write removed; count: live",
                "segments afterwards."},
               Op::kUpsert,
               8,
               ok,
               UpsertResult{.inserted = 3, .updated = 1, .trimmed = 1, .count = 5}});

  UpsertRequest upsert_add{.user = "user-42", .segments = {}, .mode = UpsertMode::kAdd};
  upsert_add.segments.push_back(Seg(101, 3600));
  upsert_add.segments.push_back(Seg(300, 600));
  v.push_back({"upsert_add.request.hex",
               "upsert request, mode \"add\": push expiries later by value seconds",
               {"With \"add\" each value is seconds added to the current expiry (a segment",
                "that does not exist yet is created expiring at now + value); ttl is unused."},
               Op::kUpsert,
               9,
               ok,
               upsert_add});
  v.push_back({"upsert_add.response.hex",
               "upsert response to the \"add\"",
               {},
               Op::kUpsert,
               9,
               ok,
               UpsertResult{.inserted = 1, .updated = 1, .trimmed = 0, .count = 6}});

  UpsertRequest upsert_once{.user = "user-42",
                            .segments = {Seg(300, 600)},
                            .mode = UpsertMode::kAdd,
                            .write_id = WriteId{0x0123456789abcdefull, 42}};
  v.push_back({"upsert_write_id.request.hex",
               "upsert request with a write_id: applied at most once by a cluster",
               {"\"write_id\" is a bin of 16 bytes naming this write (here a client ID",
                "0123456789abcdef and a counter, 42). A cluster with a log applies a write_id",
                "at most once: send the same write again with the same write_id when its answer",
                "was lost or InDoubt (status 16). A single server ignores it. Every write may",
                "carry one: upsert, each batch_upsert item, remove, trim, delete, expire."},
               Op::kUpsert,
               21,
               ok,
               upsert_once});
  v.push_back(
      {"upsert_write_id.response.hex",
       "upsert response to that write when it was sent a second time",
       {"\"duplicate\": true: the cluster had made this write_id already and did not",
        "make it again; the counts are the first answer's (0 when the node answering",
        "no longer knows them). Absent in every other answer."},
       Op::kUpsert,
       21,
       ok,
       UpsertResult{.inserted = 0, .updated = 1, .trimmed = 0, .count = 6, .duplicate = true}});

  UpsertRequest upsert_replace{
      .user = "user-42",
      .segments = {Seg(70000, 2592000, true, std::nullopt, 5), Seg(101, 86400, true)},
      .mode = UpsertMode::kSet,
      .write_id = {},
      .replace_attrs = true};
  v.push_back({"upsert_replace_attrs.request.hex",
               "upsert request with \"replace_attrs\": attributes become exactly the given ones",
               {"With \"replace_attrs\": true each named segment's attr1 and attr2 become",
                "exactly those given, nil or absent clearing one, instead of absent keeping the",
                "current value. Here 70000 keeps no attr1 (it had 7) and gets attr2 5; 101",
                "loses both. Segments not named are untouched. Sent only when true (default",
                "false); also per batch_upsert item."},
               Op::kUpsert,
               27,
               ok,
               upsert_replace});
  v.push_back({"upsert_replace_attrs.response.hex",
               "upsert response to the replace_attrs upsert",
               {},
               Op::kUpsert,
               27,
               ok,
               UpsertResult{.inserted = 0, .updated = 2, .trimmed = 0, .count = 6}});

  // ---- batch_upsert ----
  BatchUpsertRequest batch_upsert;
  batch_upsert.items.push_back(
      {.user = "user-42", .segments = {Seg(101, 86400, true)}, .mode = UpsertMode::kExtend});
  batch_upsert.items.push_back({.user = "user-43",
                                .segments = {Seg(205, kJan2030), Seg(206, kJan2030, false, 1)},
                                .mode = UpsertMode::kSet});
  v.push_back({"batch_upsert.request.hex",
               "batch_upsert request: two users, each item with its own mode",
               {"\"items\": 0 to max_batch maps, each exactly an upsert body. A top-level",
                "\"mode\" may also be sent: it applies to items that have none."},
               Op::kBatchUpsert,
               10,
               ok,
               batch_upsert});
  BatchUpsertResponse batch_upsert_results;
  batch_upsert_results.push_back(
      UpsertResult{.inserted = 0, .updated = 1, .trimmed = 0, .count = 5});
  batch_upsert_results.push_back(
      Status::LimitExceeded("profile of user-43 would hold 10001 segments, the limit is 10000"));
  v.push_back({"batch_upsert.response.hex",
               "batch_upsert response: one result per item, in order",
               {"As in batch_get, each element carries its own \"status\"; here the second",
                "item failed with status 7 (LimitExceeded) and nothing of it was written."},
               Op::kBatchUpsert,
               10,
               ok,
               batch_upsert_results});

  BatchUpsertRequest batch_upsert_partial;
  batch_upsert_partial.items.push_back(
      {.user = "user-44", .segments = {Seg(101, 86400, true)}, .mode = UpsertMode::kSet});
  batch_upsert_partial.items.push_back(
      {.user = "user-45", .segments = {Seg(5, 1000000000)}, .mode = UpsertMode::kSet});
  batch_upsert_partial.items.push_back({.user = "user-46",
                                        .segments = {Seg(7, 3600, true), Seg(7, 7200, true)},
                                        .mode = UpsertMode::kSet});
  v.push_back({"batch_upsert_partial.request.hex",
               "batch_upsert request: three items, two of them bad",
               {"The second item's expiry (2001-09-09) is in the past; the third names",
                "segment 7 twice. Each fails alone; the first is written."},
               Op::kBatchUpsert,
               17,
               ok,
               batch_upsert_partial});
  BatchUpsertResponse batch_upsert_partial_results;
  batch_upsert_partial_results.push_back(
      UpsertResult{.inserted = 1, .updated = 0, .trimmed = 0, .count = 1});
  batch_upsert_partial_results.push_back(Status::InvalidArgument(
      "segment 5: expiry 1000000000 is not in the future (now is 1795000000)"));
  batch_upsert_partial_results.push_back(
      Status::InvalidArgument("segment 7 appears twice in one upsert"));
  v.push_back({"batch_upsert_partial.response.hex",
               "batch_upsert response: the bad items failed alone, the good one was written",
               {"One rule for both batches: an item fails alone for anything wrong with it",
                "(malformed, over max_segments, an expiry in the past, an ID twice); only what",
                "is wrong with the batch itself fails the frame."},
               Op::kBatchUpsert,
               17,
               ok,
               batch_upsert_partial_results});

  // ---- remove ----
  v.push_back({"remove.request.hex",
               "remove request: these segment IDs of one user",
               {},
               Op::kRemove,
               11,
               ok,
               RemoveRequest{.user = "user-42", .ids = {101, 9000000000}}});
  v.push_back({"remove.response.hex",
               "remove response: how many of the IDs were there",
               {},
               Op::kRemove,
               11,
               ok,
               RemoveResponse{2}});

  // ---- trim ----
  v.push_back({"trim.request.hex",
               "trim request: remove every segment that will not be live at a time",
               {"Removes every segment expiring at or before \"before\" (Unix seconds), live",
                "ones included; never-expiring ones stay. Absent, 0 or past: the server's now."},
               Op::kTrim,
               12,
               ok,
               TrimRequest{.user = "user-42", .before = kJan2030}});
  v.push_back({"trim.response.hex",
               "trim response",
               {"trimmed: segments removed; remaining: live segments left."},
               Op::kTrim,
               12,
               ok,
               TrimResult{.trimmed = 1, .remaining = 4}});

  // ---- delete ----
  v.push_back({"delete.request.hex",
               "delete request: the whole profile of one user",
               {},
               Op::kDelete,
               13,
               ok,
               DeleteRequest{"user-42"}});
  v.push_back({"delete.response.hex",
               "delete response: whether there was a profile",
               {},
               Op::kDelete,
               13,
               ok,
               DeleteResponse{true}});

  // ---- expire ----
  v.push_back({"expire.request.hex",
               "expire request: \"these segments expire in an hour, if that is later\"",
               {"\"value\" is the new expiry: absolute Unix seconds (0: never expires), or with",
                "\"ttl\": true seconds from the server's now. \"condition\" (optional): \"nx\"",
                "only segments that never expire, \"xx\" only those that do, \"gt\" only where",
                "the new expiry is later, \"lt\" only where earlier (never counts as +infinity).",
                "A new expiry not in the future (a past time, or a TTL of 0) removes the",
                "segment. Redis's HPERSIST is {\"value\": 0, \"condition\": \"xx\"}."},
               Op::kExpire,
               28,
               ok,
               ExpireRequest{.user = "user-42",
                             .ids = {101, 205, 9000000000},
                             .value = 3600,
                             .ttl = true,
                             .condition = ExpireCondition::kGt}});
  v.push_back({"expire.response.hex",
               "expire response: one outcome per listed ID, in order, and the count",
               {"Outcomes: 0 missing (no live segment with that ID), 1 set, 2 removed (the",
                "new expiry was not in the future), 3 unchanged (the condition did not hold).",
                "Here 101's expiry moved an hour on; 205 already expired later; the profile",
                "holds no 9000000000. \"count\": live segments afterwards."},
               Op::kExpire,
               28,
               ok,
               ExpireResponse{.results = {ExpireOutcome::kSet, ExpireOutcome::kUnchanged,
                                          ExpireOutcome::kMissing},
                              .count = 5}});

  // ---- link, unlink (profile bridging) ----
  v.push_back({"link.request.hex",
               "link request: cookie-77 joins the group of user-42 for 30 days",
               {"\"user\" joins the group of \"master\" (of master's own master when master",
                "is a member: no chains); when user is a master itself, its whole group moves",
                "with it. \"ttl\" (optional, default 0: never): seconds the link lasts;",
                "linking again refreshes it. \"write_id\" as in every write. user equal to",
                "master is InvalidArgument; past max_links members, LimitExceeded."},
               Op::kLink,
               34,
               ok,
               LinkRequest{.user = "cookie-77", .master = "user-42", .ttl = 2592000}});
  v.push_back({"link.response.hex",
               "link response: the group's master, its members, and the members that moved",
               {"\"master\" (bin): the master of the group the user is in now; \"members\":",
                "users linked to it now (the master not counted); \"moved\": members of the",
                "user's own former group that moved with it (0 unless the user was a master)."},
               Op::kLink,
               34,
               ok,
               LinkResponse{.master = "user-42", .members = 3, .moved = 0}});
  v.push_back({"unlink.request.hex",
               "unlink request: cookie-77 leaves its group",
               {"Removes exactly the user's contribution to the group's view at once; its",
                "own profile stays. A master's unlink dissolves its group."},
               Op::kUnlink,
               35,
               ok,
               UnlinkRequest{.user = "cookie-77"}});
  v.push_back({"unlink.response.hex",
               "unlink response: whether the user was linked",
               {"false for a user in no group (nothing is written); unlink again after a",
                "failure or a lost answer is safe."},
               Op::kUnlink,
               35,
               ok,
               UnlinkResponse{true}});

  // ---- profile fields ----
  GetRequest get_fields{.user = "user-42", .options = {}};
  get_fields.options.ids_only = true;
  get_fields.options.fields.mode = FieldSelection::Mode::kNames;
  get_fields.options.fields.names = {"cap:77", "country", "last_seen", "score", "consent", "gone"};
  v.push_back({"get_fields.request.hex",
               "get request: segment IDs and some profile fields by name",
               {"\"fields\": true asks for every live field, an array of names (str or bin,",
                "1 to 64 bytes each, at most 256) for those; \"field_prefix\" (str or bin) for",
                "those whose name starts with it. Absent: no field, and the answer is",
                "exactly what it was before fields existed. Also an option of batch_get."},
               Op::kGet,
               36,
               ok,
               get_fields});
  GetResult fields_answer = IdsOnly({5484}, 1);
  fields_answer.fields_asked = true;
  fields_answer.fields = {
      {"cap:77", FieldValue::Int(2), kJan2030 + 86400},
      {"consent", FieldValue::Bytes(std::string("\x01\x9f", 2)), kNever},
      {"country", FieldValue::String("FR"), kNever},
      {"last_seen", FieldValue::Time(kJan2030 - 60), kFeb2030},
      {"score", FieldValue::Double(0.75), kNever},
  };
  v.push_back({"get_fields.response.hex",
               "get response with \"fields\": name -> [value, expires_at], names sorted",
               {"Every live field asked for (\"gone\" is not live: left out), names in",
                "bytewise order. A value's MessagePack form is its type: int (cap:77, a",
                "counter), float 64 (score), str (country), bin (consent, bytes), or the",
                "timestamp extension d6 ff + 4 bytes of seconds (last_seen, a time).",
                "expires_at: u32 Unix seconds, 0 never. \"fields\" is present (an empty map",
                "when nothing matched) whenever fields were asked for, and only then."},
               Op::kGet,
               36,
               ok,
               fields_answer});
  GetRequest get_prefix{.user = "cookie-9", .options = {}};
  get_prefix.options.ids_only = true;
  get_prefix.options.fields.mode = FieldSelection::Mode::kPrefix;
  get_prefix.options.fields.prefix = "cap:";
  v.push_back({"get_field_prefix.request.hex",
               "get request: the fields whose name starts with \"cap:\" (frequency caps)",
               {"\"field_prefix\" and \"fields\" are not given together (InvalidArgument)."},
               Op::kGet,
               37,
               ok,
               get_prefix});
  GetResult prefix_answer = IdsOnly({}, 0);
  prefix_answer.fields_asked = true;
  prefix_answer.fields = {{"cap:77", FieldValue::Int(3), kJan2030 + 86400},
                          {"cap:80", FieldValue::Int(1), kJan2030 + 3600}};
  v.push_back({"get_field_prefix.response.hex",
               "get response of a profile of fields alone: no segment, two counters",
               {"A user with a live field but no live segment has a profile: count 0, ids",
                "empty, and its fields."},
               Op::kGet,
               37,
               ok,
               prefix_answer});
  v.push_back({"field_set.request.hex",
               "field_set request: three fields, [name, value, expiry?, ttl?] each",
               {"expiry (u32, default 0): absolute Unix seconds, 0 never; with ttl true, seconds",
                "from the server's now. Each field is replaced whole (value, type, expiry).",
                "Here country never expires, score expires 2030-02-01, last_seen in 30 days."},
               Op::kFieldSet,
               38,
               ok,
               FieldSetRequest{.user = "user-42",
                               .fields = {{"country", FieldValue::String("FR"), kNever, false},
                                          {"score", FieldValue::Double(0.75), kFeb2030, false},
                                          {"last_seen", FieldValue::Time(kJan2030), 2592000, true}},
                               .write_id = {}}});
  v.push_back({"field_set.response.hex",
               "field_set response: fields set, and live fields after",
               {"\"changed\": the fields the request set (all of them); \"count\": the",
                "profile's live fields after the write."},
               Op::kFieldSet,
               38,
               ok,
               FieldWriteResponse{.changed = 3, .count = 7, .duplicate = false}});
  v.push_back({"field_del.request.hex",
               "field_del request: delete fields by name",
               {"Names the profile does not hold live are not an error. NotFound (status 1)",
                "when the user has no profile."},
               Op::kFieldDelete,
               39,
               ok,
               FieldDeleteRequest{.user = "user-42", .names = {"score", "nope"}, .write_id = {}}});
  v.push_back({"field_del.response.hex",
               "field_del response: live fields deleted, and live fields after",
               {},
               Op::kFieldDelete,
               39,
               ok,
               FieldWriteResponse{.changed = 1, .count = 6, .duplicate = false}});
  FieldIncrement cap_77;
  cap_77.name = "cap:77";
  cap_77.delta = 1;
  cap_77.ttl = 86400;
  cap_77.cap = 3;
  v.push_back({"field_incr.request.hex",
               "field_incr request: \"at most 3 impressions of campaign 77 a day\"",
               {"\"delta\" (int, default 1), \"ttl\" (u32 seconds, default 0: never), \"window\"",
                "(\"fixed\", the default: the TTL is set when the counter is made and kept; or",
                "\"sliding\": every increment sets it again), \"cap\" (int, optional)."},
               Op::kFieldIncrement,
               40,
               ok,
               FieldIncrementRequest{.user = "user-42", .increment = cap_77, .write_id = {}}});
  v.push_back({"field_incr.response.hex",
               "field_incr response: the counter after the increment",
               {"\"value\": an int; \"capped\": false, the increment was made."},
               Op::kFieldIncrement,
               40,
               ok,
               FieldIncrementResponse{.value = 3, .capped = false, .duplicate = false}});
  v.push_back({"field_incr_capped.request.hex",
               "field_incr request again, the counter at its cap",
               {},
               Op::kFieldIncrement,
               41,
               ok,
               FieldIncrementRequest{.user = "user-42", .increment = cap_77, .write_id = {}}});
  v.push_back({"field_incr_capped.response.hex",
               "field_incr response refusing to pass the cap: a result, not an error",
               {"Status 0, \"capped\": true and the counter's current value: nothing was",
                "written (the bidder skips the impression)."},
               Op::kFieldIncrement,
               41,
               ok,
               FieldIncrementResponse{.value = 3, .capped = true, .duplicate = false}});
  v.push_back(
      {"field_max.request.hex",
       "field_max request: keep the later last-seen time",
       {"\"value\": an int, a float or a timestamp, of the field's type when it",
        "exists; \"expiry\" and \"ttl\" as in field_set, the field's new expiry when",
        "the value given is kept."},
       Op::kFieldMax,
       42,
       ok,
       FieldMaxRequest{.user = "user-42",
                       .field = {"last_seen", FieldValue::Time(kJan2030 + 7200), 2592000, true},
                       .write_id = {}}});
  v.push_back(
      {"field_max.response.hex",
       "field_max response: the field's value after, and whether it is the one given",
       {"\"replaced\": false when the field's live value was as large or larger (it",
        "is then the \"value\" answered, unchanged)."},
       Op::kFieldMax,
       42,
       ok,
       FieldMaxResponse{
           .value = FieldValue::Time(kJan2030 + 7200), .replaced = true, .duplicate = false}});

  // ---- errors ----
  v.push_back({"error.response.hex",
               "error response: a get whose \"limit\" was a string",
               {"Any request may be answered so: the header repeats the op and request_id and",
                "carries the status code (here 2, InvalidArgument); the body is",
                "{\"message\": str}, for people (decode errors start with the op name).",
                "Codes: 1 NotFound, 2 InvalidArgument, 3 Corruption, 4 IOError, 5 DeviceFull,",
                "6 Conflict, 7 LimitExceeded, 8 Busy, 9 Unavailable, 10 Internal,",
                "11 Unsupported, 13 Unauthenticated, 14 WrongNode (with a \"revision\", see",
                "wrong_node.response), 15 LogUnavailable, 16 InDoubt, 17 ReadOnly",
                "(log_unavailable, in_doubt, read_only); 12 Timeout is client-side only.",
                "The request that got it: {\"user\": \"user-42\", \"limit\": \"x\"}."},
               Op::kGet,
               14,
               Status::Code::kInvalidArgument,
               ErrorBody{"get: limit: expected an unsigned integer, got a string"}});
  v.push_back({"wrong_node.response.hex",
               "error response of a cluster node: a get for a user it does not hold",
               {"Status 14 (WrongNode): the user's partition (here \"foo\", partition 3045) is",
                "not held by this node in the map of the body's \"revision\". Fetch cluster_map",
                "again if yours is older, then ask a replica of the partition. In batch_get and",
                "batch_upsert results such an entry is {\"status\": 14, \"message\": str}.",
                "The request that got it: {\"user\": \"foo\"}."},
               Op::kGet,
               20,
               Status::Code::kWrongNode,
               WrongNodeBody{"get: partition 3045 is not held by this node (map revision 42); "
                             "ask cluster_map",
                             42}});
  v.push_back({"log_unavailable.response.hex",
               "error response of a cluster node whose log does not take writes",
               {"Status 15 (LogUnavailable): the cluster's log refused the write or could not",
                "be reached; nothing was written. Retry later (with the same write_id). Reads",
                "go on. The request that got it: an upsert of user-42."},
               Op::kUpsert,
               22,
               Status::Code::kLogUnavailable,
               ErrorBody{"the cluster's log did not take the write, nothing was written: "
                         "Broker: Not enough in-sync replicas"}});
  v.push_back(
      {"in_doubt.response.hex",
       "error response of a cluster node that cannot tell whether a write was made",
       {"Status 16 (InDoubt): send the same write again with the same write_id; if the",
        "first was made the second is not, and is answered with \"duplicate\": true."},
       Op::kUpsert,
       23,
       Status::Code::kInDoubt,
       ErrorBody{"the write reached the cluster's log (or may have) but this node did not "
                 "apply it in time; retry it with the same write_id to learn its outcome"}});
  v.push_back({"read_only.response.hex",
               "error response of a passive cluster's node to a write",
               {"Status 17 (ReadOnly): the cluster applies another cluster's log and takes no",
                "writes; nothing was written. Send the write to the active cluster, not to",
                "another node of this one."},
               Op::kDelete,
               25,
               Status::Code::kReadOnly,
               ErrorBody{"this node belongs to a passive cluster, which applies another "
                         "cluster's log and takes no writes: send writes to the active cluster"}});
  GetResult stale_get;
  stale_get.count = 1;
  stale_get.ids = {5484};
  GetOptions ids_only;
  ids_only.ids_only = true;
  v.push_back({"get_stale.request.hex",
               "get request to a cluster node (IDs only), answered below from a stale copy",
               {},
               Op::kGet,
               24,
               ok,
               GetRequest{"user-42", ids_only}});
  v.push_back({"get_stale.response.hex",
               "get response marked stale: flags bit 0 set",
               {"A cluster node answered from its own copy while it may be behind the",
                "cluster's log (catching up, lagging, cut off from the log or from etcd). The",
                "body is an ordinary answer; ask another replica for one not marked stale."},
               Op::kGet,
               24,
               ok,
               stale_get,
               kFlagStale});
  v.push_back({"field_cluster.response.hex",
               "error response of a cluster node to a profile field write",
               {"Status 11 (Unsupported): a node of the cluster runs a build that cannot",
                "apply profile fields' log entries; nothing was written. The request that got",
                "it: a field_incr."},
               Op::kFieldIncrement,
               43,
               Status::Code::kUnsupported,
               ErrorBody{"field_incr: node b of the cluster runs a build without fields; "
                         "fields are written once every node is upgraded"}});
  v.push_back({"ping_bad_body.request.hex",
               "ping request whose body is not MessagePack (the byte c1, never used)",
               {"ping and stats read no field, but their body is a body: empty, or a",
                "MessagePack map (its keys ignored). Anything else gets InvalidArgument and",
                "the connection stays usable."},
               Op::kPing,
               18,
               ok,
               RawBody{"\xc1"}});
  v.push_back({"ping_bad_body.response.hex",
               "error response to the ping above: status 2 (InvalidArgument)",
               {},
               Op::kPing,
               18,
               Status::Code::kInvalidArgument,
               ErrorBody{"ping: body is not valid MessagePack: byte 0xc1 at offset 0"}});
  v.push_back({"bad_magic.response.hex",
               "error response to a frame whose magic is not \"SG\"",
               {"Nothing of such a header is trusted: op 0 and request_id 0. The server sends",
                "this one frame and closes the connection. A body_length over",
                "max_frame_bytes is answered the same way, status 7 (LimitExceeded), but with",
                "the frame's op and request_id."},
               static_cast<Op>(0),
               0,
               Status::Code::kInvalidArgument,
               ErrorBody{"bad frame magic: not a segstore frame"}});
  return v;
}

}  // namespace segstore::proto::examples
