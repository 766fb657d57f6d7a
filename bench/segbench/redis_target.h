// The Redis target of segbench: the reference workload over the Redis
// protocol (RESP2, through hiredis), in one of two dialects:
// - kRedis: a Redis 7 server, for the side-by-side comparison with segstore;
// - kSegstore: segstored's own RESP port (proto/RESP.md, its SEG.*
//   commands), so that the port's cost is a figure beside the binary
//   protocol's on the same server.
//
// kRedis. Data model: one hash per user. Key: the user ID; field: a segment
// ID in decimal; value: that segment's expiry in Unix seconds, in decimal
// (Redis 7.0 has no per-field TTL, so expiry lives in the value and the
// scripts below honour it). Operations map onto Redis as follows; "now" is
// the client's clock, in Unix seconds, taken when the request is sent.
//   Get        whole_profiles: HGETALL user (every field, expired or not);
//              else EVALSHA of the live-get script: the fields whose value
//              > now (nil when the key does not exist). `missing` counts
//              users without a hash; a hash whose fields have all expired
//              counts as present with no segments.
//   BatchGet   the Get command for each user, pipelined back to back.
//   Upsert     EVALSHA of the upsert script: HSET every pair, then HDEL the
//              fields whose value <= now; `segments` = fields deleted.
//   Trim       EVALSHA of the trim script: HDEL the fields whose value <=
//              now; `segments` = fields deleted.
//   Replace    for each user, pipelined: DEL user, HSET user <all pairs>.
// The Lua scripts are in redis_target.cc and loaded by NewRedisTarget
// (SCRIPT LOAD). If the server forgets them (SCRIPT FLUSH, a restart),
// EVALSHA fails with NOSCRIPT and so do those requests: make a new target.
//
// kSegstore. The server keeps the profiles and their expiry itself; no
// scripts. Replies are RESP2 (a map is an array of key, value, ...):
//   Get        SEG.GET user [IDSONLY]: null (`missing`) or [count, n, stale,
//              0/1, segments, [...]]; `segments` = n (the live segments).
//   BatchGet   one SEG.MGET numusers user... [IDSONLY]: one element per
//              user, null (`missing`), SEG.GET's map (`segments` sums
//              their counts) or an error (the request fails).
//   Upsert     SEG.UPSERT user id expiry ... (mode SET, absolute expiries):
//              [inserted, n, updated, n, trimmed, n, count, n, duplicate,
//              0/1]; `segments` = trimmed.
//   Trim       SEG.TRIM user: [trimmed, n, remaining, n, duplicate, 0/1];
//              `segments` = trimmed; null (no profile) is 0 trimmed.
//   whole_profiles: Get and BatchGet as kRedis's, HGETALL user (pipelined
//              for a batch): the hash view of a profile (live segments as
//              fields, their attributes as values), against Redis's own.
//   Replace    for each user, pipelined: SEG.DEL user, SEG.UPSERT user
//              <all pairs>.
// Sample reads `INFO segstore` (every statistic of the binary stats
// operation, name:value) for the same figures as the segstore target.
// Neither TLS nor the shared secret is spoken: the port must serve plain
// TCP without a secret.
// Link (profile bridging) and the profile field calls (SetFields,
// Increment, GetFields) are the binary protocol's alone in segbench: in
// both dialects they fail, from a posted handler, "not supported" (Redis
// would need a second hash a user and scripts of its own; the RESP port has
// no field commands yet).
//
// Each Connection is one hiredis asynchronous context driven by the Asio
// io_context it was opened on (one non-blocking socket, requests pipelined
// without limit). Threads and lifetimes follow target.h: the Target is
// immutable once made and may be shared by threads (Open from any of them;
// Sample from one at a time); a Connection is used, and its callbacks run,
// on its io_context's thread only, and must be destroyed before that
// io_context. A Connection does not reconnect: once its socket fails, or a
// request goes unanswered for `timeout`, every request in flight fails and
// every later one fails at once (ok == false, posted); open a new one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "bench/segbench/target.h"
#include "segstore/result.h"

namespace segstore::bench {

struct RedisOptions {
  enum class Dialect : uint8_t {
    kRedis,     // a Redis 7 server: hashes and Lua scripts
    kSegstore,  // segstored's RESP port: SEG.* commands (proto/RESP.md)
  };
  std::string host = "127.0.0.1";  // an IPv4/IPv6 address or a host name
  uint16_t port = 6379;
  Dialect dialect = Dialect::kRedis;
  // Get/BatchGet as a plain HGETALL. kRedis: true gets every field, expired
  // segments included, as a client filtering on its side would see them;
  // false runs the live-only Lua script (what segstore's get returns).
  // kSegstore: true sends HGETALL (live segments only), false SEG.GET.
  bool whole_profiles = false;
  // kSegstore only: gets ask for segment IDs only (IDSONLY, the smallest
  // answer), as SegstoreOptions::ids_only.
  bool ids_only = false;
  // How long a request may wait for its answer before its connection is
  // given up (failing everything in flight); also the connect timeout of
  // Open, NewRedisTarget and Sample. 0: none (connects then time out after
  // 10 s all the same).
  std::chrono::milliseconds timeout{30000};
};

// Connects once, synchronously, to check the server answers and (kRedis) to
// load the Lua scripts (SCRIPT LOAD) or (kSegstore) to check it is a
// segstored (INFO segstore names its process), then returns a Target for
// `options`. InvalidArgument for an empty host, port 0, a negative timeout,
// ids_only with kRedis or with whole_profiles; Unavailable, naming host:port, when the server
// cannot be reached, does not answer in time, refuses a command (for
// example NOAUTH), or (kSegstore) is not a segstored.
// Side effect: sets SIGPIPE to ignored for the process if it was at its
// default (hiredis writes with write(2), so a server that goes away would
// otherwise kill the process); a handler already installed is kept.
Result<std::unique_ptr<Target>> NewRedisTarget(const RedisOptions& options);

}  // namespace segstore::bench
