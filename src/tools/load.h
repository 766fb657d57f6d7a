// `segctl load`: pushes DMP segment files into a server. Lines are parsed
// (src/loader), a user's segments are grouped in memory up to a budget (row
// files are usually sorted by segment, not by user: without grouping a
// 1,000-segment user would cost 1,000 record rewrites), and the groups go out
// as batch upserts, pipelined over several connections through the async
// client. Bad rows are reported with file and line, skipped and counted; a
// batch the server refuses for want of resources is retried; per-user errors
// are reported with the user.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/parser.h"
#include "segstore/client.h"

namespace segstore::tools {

struct LoadOptions {
  client::ClientOptions client;
  std::vector<std::string> files;  // "-": standard input
  loader::ParseOptions parse;
  UpsertMode mode = UpsertMode::kSet;
  bool dry_run = false;
  uint64_t max_errors = 0;  // stop after this many bad rows (0: never stop)
  unsigned connections = 4;
  unsigned in_flight = 4;  // batches in flight per connection
  uint32_t batch_users = 100;
  uint64_t memory_bytes = uint64_t{1} << 30;  // grouping budget
  unsigned retries = 5;                       // per batch, on Busy/Unavailable/Timeout
  bool json = false;
  // Progress: a bar on a terminal, else a line every few seconds.
  bool progress = true;
};

// Runs the load; returns the process exit status: 0 when every row went in,
// 1 when some rows were bad or some users failed, 2 when the load stopped
// (max_errors, an unreachable server, unreadable input).
int RunLoad(const LoadOptions& options);

}  // namespace segstore::tools
