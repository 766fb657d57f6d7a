// `segctl backup` and `segctl restore`: a running server's (or cluster's)
// live profiles, with their fields and both sides of their links, in one
// file, and back. Profiles are read partition by partition with the scan
// operation (tools/scan_source.h: a cluster's from any replica of each);
// each profile is one version of its record (per-record consistency).
//
// The file (docs/backup.md has the same, for operators), integers
// little-endian:
//
//   file header, 32 bytes:
//     0  8  magic "SEGSTBAK"
//     8  4  format version (kBackupFormatVersion, 1); a reader refuses a
//           newer one, naming both
//     12 4  first partition, 16 4 last partition (the range backed up)
//     20 4  0 (reserved)
//     24 8  XXH64 (seed 0) of bytes 0-23
//   then chunks, each a 32-byte header and `stored` bytes:
//     0  4  magic "SBCK"
//     4  1  kind: 1 profiles, 2 end of a partition, 3 end of the backup
//     5  1  codec: 0 none, 1 zstd
//     6  2  partition
//     8  4  stored: bytes that follow the header
//     12 4  raw: bytes once decompressed
//     16 8  XXH64 (seed 0) of the stored bytes
//     24 8  XXH64 (seed 0) of bytes 0-23 of this header
//   A profiles chunk holds, once decompressed, one MessagePack scan answer
//   body ({"cursor", "profiles": [...]}, proto/PROTOCOL.md "scan"; its
//   cursor is 0). A partition's section is its profiles chunks, then its
//   end chunk; sections come in partition order; the backup's end chunk
//   closes a complete file.
//
// Resuming (`resume`): an interrupted backup's file is read, every chunk
// checked, cut after its last complete section, and continued from the next
// partition. Pacing: at most `users_per_second` profiles, or
// `mb_per_second` MB of scan answers, a second (0: as fast as the server
// answers).
//
// Restore checks the whole file first (every chunk's checksums, the
// sections' order, the end chunk) and writes nothing from a damaged or
// incomplete file. It then writes each profile into the live store with the
// ordinary writes, so a cluster applies them as any write. The conflict rule
// (a merge; nothing the store holds is deleted):
//   - segments: upsert "extend": a segment in both keeps the later expiry
//     (never counts as the latest); the backup's attributes are set where it
//     has them;
//   - fields: field_set: the backup's value and expiry replace a live field
//     of the same name;
//   - links: the links both sides of the backup agree on are made (link),
//     after every profile's segments and fields; a member linked elsewhere
//     in the store moves to the backup's master.
// Segments, fields and links that expired since the backup are left out
// (counted). There are no tombstones: a user deleted before the backup is
// not in it, and a restore deletes nothing.
#pragma once

#include <cstdint>
#include <string>

#include "segstore/client.h"
#include "segstore/routing.h"

namespace segstore::tools {

inline constexpr uint32_t kBackupFormatVersion = 1;

struct BackupOptions {
  client::ClientOptions client;
  std::string path;
  bool resume = false;
  uint32_t partition_from = 0;
  uint32_t partition_to = kPartitions - 1;
  double users_per_second = 0;  // pacing; 0: none
  double mb_per_second = 0;     // pacing by scan answer bytes; 0: none
  uint32_t page_bytes = 0;      // scan's max_bytes (0: the server's); one chunk a page
  int zstd_level = 3;
  unsigned retries = 5;
  bool progress = true;
};

struct BackupStats {
  uint64_t partitions = 0;  // written by this run
  uint64_t users = 0;
  uint64_t raw_bytes = 0;   // chunks' bytes before compression
  uint64_t file_bytes = 0;  // the file's size at the end
  uint32_t resumed_at = 0;  // with resume: the first partition this run wrote
  bool already_complete = false;  // with resume: the file was complete
  double seconds = 0;
};

// Writes the backup. With `resume`, continues the file at `path` (its
// partition range is the file's). Errors: the file's (IOError), a partition
// no server could answer (its error, naming it; the file then ends after
// the last complete section: resume it), with resume a file that is not a
// backup, a newer format (Unsupported) or damaged before its last complete
// section (Corruption naming the chunk).
Status RunBackup(const BackupOptions& options, BackupStats* stats);

struct RestoreOptions {
  client::ClientOptions client;
  std::string path;
  uint32_t batch_users = 100;
  bool progress = true;
};

struct RestoreStats {
  uint64_t users = 0;
  uint64_t segments = 0;
  uint64_t fields = 0;
  uint64_t links = 0;
  uint64_t expired = 0;  // segments, fields and links left out: expired since the backup
  // Fields of users the store has as linked members, left out: a field
  // write of a member changes its master's fields (docs/backup.md).
  uint64_t member_fields_skipped = 0;
  uint64_t failed = 0;   // users or links the store refused (the first in `first_failure`)
  std::string first_failure;
  uint64_t file_bytes = 0;
  double seconds = 0;
};

// Checks the file, then restores it. Unsupported for a newer format
// version ("backup file format version 2 is newer than this segctl reads
// (1)"), Corruption naming the chunk for a damaged one ("chunk 17 (partition
// 2044, at byte 1048576): checksum mismatch"), InvalidArgument for an
// incomplete backup; nothing is written then. InvalidArgument when it ran
// to the end but the store refused some users or links (stats->failed).
Status RunRestore(const RestoreOptions& options, RestoreStats* stats);

}  // namespace segstore::tools
