// `segctl load`: pushes DMP segment files (or, with `links`, identity-graph
// link files) into a server. Lines are parsed (src/loader), a user's
// segments are grouped in memory up to a budget (row files are usually
// sorted by segment, not by user: without grouping a 1,000-segment user
// would cost 1,000 record rewrites), and the groups go out
// as batch upserts, pipelined through the asynchronous routing client
// (AsyncClusterClient): against a single server over several connections;
// against any node of a cluster, each user's upsert goes to a node holding
// it (users are batched per node; the client splits a batch again should the
// map change), with write IDs when the cluster has a log. Bad rows are
// reported with file and line, skipped and counted; a batch (or the items
// of one) the server refuses for want of resources, or whose answer was
// lost, is sent again after a pause; per-user errors are reported with the
// user.
//
// With `links`, each line links IDs to a master (loader/link_parser.h), one
// link request each, pipelined the same way. Links that share an ID (as
// user or master) are made one after the other, in file order, so that the
// last line naming an ID decides its master and the links into one master
// do not race each other; the others go side by side. A link refused for
// want of resources is sent again after a pause; one the server refuses
// (a group past its limit) is reported with its file, line and IDs; a
// server that takes no links at all (a cluster node, for now) stops the
// load at once.
//
// With `fields`, each row sets one profile field (loader/field_parser.h).
// The rows of one user are gathered in memory, up to `memory_bytes`, into
// one field_set request (a name once: the later row wins); one user's requests
// go one after the other, in file order, the others side by side. A request
// refused for want of resources is sent again after a pause; one the server
// refuses whole (a value or a profile past a limit) is sent again a field
// at a time, so that each field at fault is reported with its file and
// line and the others are written. Fields are not carried through a
// cluster's log yet: this talks to one server, and a server that takes no
// field writes (a cluster node) stops the load at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/field_parser.h"
#include "loader/link_parser.h"
#include "loader/parser.h"
#include "segstore/client.h"

namespace segstore::tools {

struct LoadOptions {
  client::ClientOptions client;
  std::vector<std::string> files;  // "-": standard input
  loader::ParseOptions parse;
  UpsertMode mode = UpsertMode::kSet;
  bool dry_run = false;
  uint64_t max_errors = 0;   // stop after this many bad rows (0: never stop)
  unsigned connections = 4;  // to the server; in a cluster, to each node
  // Requests in flight per connection: batch upserts, links or field sets.
  unsigned in_flight = 4;
  uint32_t batch_users = 100;
  uint64_t memory_bytes = uint64_t{1} << 30;  // grouping budget
  // Per batch item, on Busy, Unavailable, Timeout, LogUnavailable or InDoubt
  // (after the routing client's own retries); still unanswered after the
  // last (Unavailable, Timeout), the server (or a node) is gone for good and
  // the load stops.
  unsigned retries = 5;
  // Link files instead of segment files: `link_parse` reads them (its
  // max_key_bytes is the server's, when the server says it); `parse`,
  // `mode`, `batch_users` and `memory_bytes` do not apply.
  bool links = false;
  loader::LinkParseOptions link_parse;
  // Profile field files instead (user,name,value[,ttl]): `field_parse`
  // reads them (its max_key_bytes is the server's, when the server says
  // it), and their rows are grouped by user within `memory_bytes`; `parse`,
  // `mode` and `batch_users` do not apply.
  bool fields = false;
  loader::FieldParseOptions field_parse;
  bool json = false;
  // Progress: a bar on a terminal, else a line every few seconds.
  bool progress = true;
};

// Runs the load; returns the process exit status, as kLoadHelp states it:
// 0 when every row went in; 1 when the load ran to the end but some rows were
// bad, some users (or links) failed, or some absolute expiries passed before
// sending; 2 when it stopped or never started (an unreachable server or node,
// unreadable input, max_errors reached; for links, a server that takes none,
// or a file whose format cannot be told; for fields, a server that takes no
// field writes).
int RunLoad(const LoadOptions& options);

// What `segctl load --help` prints after the options: the file formats, the
// TTL and expiry forms, the lines skipped, and the exit status of RunLoad.
extern const char kLoadHelp[];

}  // namespace segstore::tools
