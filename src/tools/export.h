// `segctl export`: writes a server's profiles (or a cluster's) as the files
// `segctl load` reads back: DMP segment files (rows or grouped), a profile
// field file and a link file, in a directory. Profiles are read partition
// by partition with the scan operation (proto/PROTOCOL.md, "scan"): from a
// single server, or from any replica of each partition of a cluster
// (another replica, starting the partition again, when one fails).
//
// Files, each opening with a `#` comment line (the loaders skip it):
//
//   segments.tsv  rows:    user<TAB>id<TAB>@expires|never[<TAB>attr1[<TAB>attr2]]
//                 grouped: user<TAB>id:@expires|never,...  (no attributes)
//   fields.tsv    user<TAB>name<TAB>TYPE:value<TAB>@expires|never (RFC 4180
//                 quoting where a field needs it)
//   links.tsv     member<TAB>master<TAB>ttl|never
//
// Partitions come in order, users sorted (bytewise) within each, links
// sorted by member: the same data gives the same bytes. Load them in this
// order: segments, then fields (`--fields`), then links (`--links`): a field
// written for a linked user goes to its master's record.
//
// Only live data is written (the loaders refuse expiries in the past). A
// link is written when both of its records agree on it (the master lists the
// member and the member names the master), as reads count it; its expiry
// becomes a TTL from the export's clock (links take TTLs). What a file
// cannot hold is counted and reported, never written wrong: a user ID
// holding a tab or a line break, beginning with `#` or ending with a carriage
// return; a str field holding a line break; a double that is not finite;
// with grouped, segment attributes.
#pragma once

#include <cstdint>
#include <string>

#include "segstore/client.h"
#include "segstore/routing.h"

namespace segstore::tools {

struct ExportOptions {
  client::ClientOptions client;
  std::string out_dir;  // made if missing; its three files are replaced
  bool grouped = false;
  uint32_t partition_from = 0;  // the partitions exported, both ends included
  uint32_t partition_to = kPartitions - 1;
  std::string prefix;        // only users whose ID starts with these bytes
  uint32_t page_bytes = 0;   // scan's max_bytes (0: the server's page size)
  unsigned retries = 5;      // per partition, on Busy, Unavailable, Timeout, WrongNode
  bool progress = true;      // a line every few seconds on stderr
};

struct ExportStats {
  uint64_t partitions = 0;
  uint64_t users = 0;
  uint64_t segments = 0;
  uint64_t fields = 0;
  uint64_t links = 0;
  uint64_t bytes_read = 0;  // scan answers' bodies, as encoded
  uint64_t unwritable = 0;  // users, fields or links a file could not hold (left out)
  uint64_t attributes_dropped = 0;  // grouped: segments whose attributes were left out
  std::string first_unwritable;     // a sentence about the first of them
  double seconds = 0;
};

// Runs the export. OK when everything was written; InvalidArgument when it
// ran to the end but left something out (stats->unwritable or
// attributes_dropped, the message saying what); the error of a partition no
// server could answer, or of a file that could not be written, otherwise
// (the files are then incomplete).
Status RunExport(const ExportOptions& options, ExportStats* stats);

}  // namespace segstore::tools
