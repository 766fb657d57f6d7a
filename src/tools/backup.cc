#include "tools/backup.h"

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "proto/wire.h"
#include "segstore/cluster_client.h"
#include "tools/scan_source.h"

namespace segstore::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr char kFileMagic[8] = {'S', 'E', 'G', 'S', 'T', 'B', 'A', 'K'};
constexpr char kChunkMagic[4] = {'S', 'B', 'C', 'K'};
constexpr size_t kFileHeaderBytes = 32;
constexpr size_t kChunkHeaderBytes = 32;
// A chunk's stored or raw bytes, at most: a scan page is at most 16 MiB.
constexpr uint32_t kMaxChunkBytes = 64u << 20;

enum class ChunkKind : uint8_t { kProfiles = 1, kPartitionEnd = 2, kBackupEnd = 3 };
enum class Codec : uint8_t { kNone = 0, kZstd = 1 };

void Put32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void Put64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t Get32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t Get64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t Hash(const void* p, size_t n) { return XXH64(p, n, 0); }

std::string FileHeader(uint32_t from, uint32_t to) {
  std::string h(kFileHeaderBytes, '\0');
  std::memcpy(h.data(), kFileMagic, 8);
  Put32(h.data() + 8, kBackupFormatVersion);
  Put32(h.data() + 12, from);
  Put32(h.data() + 16, to);
  Put64(h.data() + 24, Hash(h.data(), 24));
  return h;
}

std::string Chunk(ChunkKind kind, uint32_t partition, std::string_view raw, int level) {
  std::string stored;
  Codec codec = Codec::kNone;
  if (!raw.empty()) {
    stored.resize(ZSTD_compressBound(raw.size()));
    const size_t n = ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), level);
    if (!ZSTD_isError(n)) {
      stored.resize(n);
      codec = Codec::kZstd;
    } else {
      stored.assign(raw);
    }
  }
  std::string out(kChunkHeaderBytes, '\0');
  std::memcpy(out.data(), kChunkMagic, 4);
  out[4] = static_cast<char>(kind);
  out[5] = static_cast<char>(codec);
  out[6] = static_cast<char>(partition & 0xff);
  out[7] = static_cast<char>(partition >> 8);
  Put32(out.data() + 8, static_cast<uint32_t>(stored.size()));
  Put32(out.data() + 12, static_cast<uint32_t>(raw.size()));
  Put64(out.data() + 16, Hash(stored.data(), stored.size()));
  Put64(out.data() + 24, Hash(out.data(), 24));
  out += stored;
  return out;
}

// One chunk as read from a file, checked.
struct ChunkRead {
  uint64_t index = 0;   // 0 for the first chunk
  uint64_t offset = 0;  // of its header in the file
  ChunkKind kind = ChunkKind::kProfiles;
  Codec codec = Codec::kNone;
  uint32_t partition = 0;
  uint32_t raw_bytes = 0;
  std::string stored;
};

// Reads a backup file chunk by chunk, checking each.
class BackupReader {
 public:
  ~BackupReader() {
    if (f_ != nullptr) std::fclose(f_);
  }

  Status Open(const std::string& path) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "rb");
    if (f_ == nullptr) {
      return errno == ENOENT ? Status::NotFound(path + ": no such file")
                             : Status::IOError(path + ": " + std::strerror(errno));
    }
    char h[kFileHeaderBytes];
    const size_t n = std::fread(h, 1, sizeof h, f_);
    if (n < 12 || std::memcmp(h, kFileMagic, 8) != 0) {
      return Status::InvalidArgument(path + ": not a segstore backup file (no SEGSTBAK header)");
    }
    const uint32_t version = Get32(h + 8);
    if (version > kBackupFormatVersion) {
      return Status::Unsupported(fmt::format(
          "{}: backup file format version {} is newer than this segctl reads ({}): restore it "
          "with a newer segctl",
          path, version, kBackupFormatVersion));
    }
    if (n < sizeof h || version == 0 || Get64(h + 24) != Hash(h, 24)) {
      return Status::Corruption(path + ": the file header is damaged (checksum mismatch)");
    }
    from_ = Get32(h + 12);
    to_ = Get32(h + 16);
    if (from_ > to_ || to_ >= kPartitions) {
      return Status::Corruption(
          fmt::format("{}: the file header names partitions {}-{}", path, from_, to_));
    }
    offset_ = sizeof h;
    return Status::OK();
  }

  uint32_t from() const { return from_; }
  uint32_t to() const { return to_; }
  uint64_t offset() const { return offset_; }

  // The next chunk into *c: true; false at the end of the file; Corruption
  // naming the chunk when it is damaged or cut short.
  Result<bool> Next(ChunkRead* c) {
    char h[kChunkHeaderBytes];
    const size_t n = std::fread(h, 1, sizeof h, f_);
    if (n == 0 && std::feof(f_)) return false;
    c->index = index_;
    c->offset = offset_;
    auto bad = [&](std::string_view what) {
      return Status::Corruption(
          fmt::format("{}: chunk {} (at byte {}): {}", path_, index_, offset_, what));
    };
    if (n < sizeof h) return bad("cut short (the file ends inside its header)");
    if (std::memcmp(h, kChunkMagic, 4) != 0 || Get64(h + 24) != Hash(h, 24)) {
      return bad("its header is damaged (checksum mismatch)");
    }
    c->kind = static_cast<ChunkKind>(h[4]);
    c->codec = static_cast<Codec>(h[5]);
    c->partition = static_cast<uint8_t>(h[6]) | (uint32_t{static_cast<uint8_t>(h[7])} << 8);
    const uint32_t stored = Get32(h + 8);
    c->raw_bytes = Get32(h + 12);
    if (c->kind < ChunkKind::kProfiles || c->kind > ChunkKind::kBackupEnd ||
        static_cast<uint8_t>(c->codec) > 1 || stored > kMaxChunkBytes ||
        c->raw_bytes > kMaxChunkBytes) {
      return bad("an unknown kind, codec or size");
    }
    c->stored.resize(stored);
    if (stored > 0 && std::fread(c->stored.data(), 1, stored, f_) != stored) {
      return bad("cut short (the file ends inside its data)");
    }
    if (Get64(h + 16) != Hash(c->stored.data(), c->stored.size())) {
      return Status::Corruption(fmt::format("{}: chunk {} (partition {}, at byte {}): checksum "
                                            "mismatch: the file is damaged",
                                            path_, index_, c->partition, offset_));
    }
    offset_ += sizeof h + stored;
    ++index_;
    return true;
  }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  uint32_t from_ = 0;
  uint32_t to_ = 0;
  uint64_t offset_ = 0;
  uint64_t index_ = 0;
};

// What a check of the whole file found.
struct FileCheck {
  uint32_t from = 0;
  uint32_t to = 0;
  bool complete = false;
  // Where its last complete section ends (the header's end when none is
  // complete), and the partition after it.
  uint64_t complete_end = kFileHeaderBytes;
  uint32_t next_partition = 0;
  uint64_t chunks = 0;
  Status damage;  // the first damaged chunk, or a section out of order
  // With damage: whether it is a chunk that does not read (damaged or cut
  // short: a torn tail, when nothing whole follows), and where it starts.
  bool unreadable = false;
  uint64_t damage_offset = 0;
};

// Whether the file holds, anywhere after `offset`, the whole header of a
// chunk that ends a section (a partition's or the backup's): then damage at
// `offset` is not a torn tail but a hole in what was written and synced.
Result<bool> SectionEndAfter(const std::string& path, uint64_t offset) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::IOError(path + ": " + std::strerror(errno));
  if (std::fseek(f, static_cast<long>(offset + 1), SEEK_SET) != 0) {
    std::fclose(f);
    return Status::IOError(path + ": " + std::strerror(errno));
  }
  std::string buf;
  std::vector<char> block(1u << 20);
  bool found = false;
  while (!found) {
    const size_t n = std::fread(block.data(), 1, block.size(), f);
    if (n == 0) break;
    buf.append(block.data(), n);
    size_t at = 0;
    while (!found && (at = buf.find(std::string_view(kChunkMagic, 4), at)) != std::string::npos &&
           at + kChunkHeaderBytes <= buf.size()) {
      const char* h = buf.data() + at;
      const auto kind = static_cast<ChunkKind>(h[4]);
      found = Get64(h + 24) == Hash(h, 24) &&
              (kind == ChunkKind::kPartitionEnd || kind == ChunkKind::kBackupEnd);
      ++at;
    }
    // Keep what a header starting near the end may still need.
    if (buf.size() > kChunkHeaderBytes) buf.erase(0, buf.size() - kChunkHeaderBytes);
  }
  std::fclose(f);
  return found;
}

// Reads every chunk (a damaged one stops it, in check->damage). Errors: the
// file's header (not a backup, newer, damaged) or opening it.
Status CheckFile(const std::string& path, FileCheck* check) {
  BackupReader r;
  SEGSTORE_RETURN_IF_ERROR(r.Open(path));
  check->from = r.from();
  check->to = r.to();
  check->next_partition = r.from();
  ChunkRead c;
  while (true) {
    Result<bool> more = r.Next(&c);
    if (!more.ok()) {
      check->damage = more.status();
      check->unreadable = true;
      check->damage_offset = r.offset();
      return Status::OK();
    }
    if (!*more) return Status::OK();
    ++check->chunks;
    const auto out_of_order = [&](std::string_view what) {
      check->damage = Status::Corruption(fmt::format("{}: chunk {} (partition {}, at byte {}): {}",
                                                     path, c.index, c.partition, c.offset, what));
    };
    if (check->complete) {
      out_of_order("a chunk after the end of the backup");
      return Status::OK();
    }
    if (c.kind == ChunkKind::kBackupEnd) {
      if (check->next_partition != check->to + 1) {
        out_of_order("the end of the backup before its last partition");
        return Status::OK();
      }
      check->complete = true;
      continue;
    }
    if (c.partition != check->next_partition) {
      out_of_order(fmt::format("out of order (partition {} expected)", check->next_partition));
      return Status::OK();
    }
    if (c.kind == ChunkKind::kPartitionEnd) {
      check->complete_end = r.offset();
      ++check->next_partition;
    }
  }
}

Status Decompress(const ChunkRead& c, std::string* raw) {
  if (c.codec == Codec::kNone) {
    *raw = c.stored;
    return Status::OK();
  }
  raw->resize(c.raw_bytes);
  const size_t n = ZSTD_decompress(raw->data(), raw->size(), c.stored.data(), c.stored.size());
  if (ZSTD_isError(n) || n != c.raw_bytes) {
    return Status::Corruption(fmt::format("chunk {} (partition {}, at byte {}): zstd: {}", c.index,
                                          c.partition, c.offset,
                                          ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong size"));
  }
  return Status::OK();
}

// The backup's output file.
class BackupWriter {
 public:
  ~BackupWriter() {
    if (f_ != nullptr) std::fclose(f_);
  }
  Status Create(const std::string& path, uint32_t from, uint32_t to) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "wb");
    if (f_ == nullptr) return Status::IOError(path + ": " + std::strerror(errno));
    return Append(FileHeader(from, to));
  }
  // Continues `path` from `offset` (what follows is cut off).
  Status Continue(const std::string& path, uint64_t offset) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "r+b");
    if (f_ == nullptr) return Status::IOError(path + ": " + std::strerror(errno));
    return CutTo(offset);
  }
  Status Append(std::string_view bytes) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) {
      return Status::IOError(path_ + ": write failed: " + std::strerror(errno));
    }
    offset_ += bytes.size();
    return Status::OK();
  }
  Status CutTo(uint64_t offset) {
    if (std::fflush(f_) != 0 || ::ftruncate(::fileno(f_), static_cast<off_t>(offset)) != 0 ||
        std::fseek(f_, static_cast<long>(offset), SEEK_SET) != 0) {
      return Status::IOError(path_ + ": " + std::strerror(errno));
    }
    offset_ = offset;
    return Status::OK();
  }
  Status Sync() {
    if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) {
      return Status::IOError(path_ + ": " + std::strerror(errno));
    }
    return Status::OK();
  }
  uint64_t offset() const { return offset_; }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  uint64_t offset_ = 0;
};

// Sleeps so that `done` units since `start` keep to `rate` a second.
void Pace(double rate, double done, SteadyClock::time_point start) {
  if (rate <= 0) return;
  const auto due = start + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double>(done / rate));
  if (due > SteadyClock::now()) std::this_thread::sleep_until(due);
}

// Restore's batches: what a batch_upsert item's encoding may grow by on
// its way (a write ID and its key), and how often a whole batch answered
// Busy or Timeout is sent again.
constexpr size_t kWriteIdRoom = 32;
constexpr int kBatchRetries = 4;

bool Retryable(const Status& s) {
  return s.code() == Status::Code::kBusy || s.code() == Status::Code::kTimeout ||
         s.code() == Status::Code::kUnavailable;
}

bool Live(UnixSeconds expires_at, UnixSeconds now) {
  return expires_at == kNever || expires_at > now;
}

}  // namespace

Status RunBackup(const BackupOptions& o, BackupStats* stats) {
  *stats = BackupStats{};
  const auto start = SteadyClock::now();
  BackupWriter w;
  uint32_t from = o.partition_from, to = o.partition_to, first = o.partition_from;
  if (o.resume) {
    FileCheck check;
    SEGSTORE_RETURN_IF_ERROR(CheckFile(o.path, &check));
    if (check.complete) {
      stats->already_complete = true;
      stats->resumed_at = check.to + 1;
      return Status::OK();
    }
    // Only a torn tail is cut: damage followed by nothing whole that ends a
    // section (what a crash leaves after the last sync). Damage before a
    // complete section, or sections out of order, is refused: cutting
    // there would throw away what was backed up and read it again from the
    // live store, silently.
    if (!check.damage.ok()) {
      bool torn = false;
      if (check.unreadable) {
        Result<bool> later = SectionEndAfter(o.path, check.damage_offset);
        if (!later.ok()) return later.status();
        torn = !*later;
      }
      if (!torn) {
        return check.damage.WithContext(
            "backup --resume: the file is damaged before its last complete section (only a torn "
            "end is cut and resumed); back up to a new file");
      }
    }
    from = check.from;
    to = check.to;
    first = check.next_partition;
    SEGSTORE_RETURN_IF_ERROR(w.Continue(o.path, check.complete_end));
  } else {
    if (from > to || to >= kPartitions) {
      return Status::InvalidArgument(fmt::format("partitions {}-{}: a range within 0-4095", from, to));
    }
    SEGSTORE_RETURN_IF_ERROR(w.Create(o.path, from, to));
  }
  stats->resumed_at = first;
  Result<std::unique_ptr<ScanSource>> source = ScanSource::Connect(o.client, o.retries);
  if (!source.ok()) return source.status();
  std::string body;
  auto last_progress = start;
  for (uint32_t p = first; p <= to; ++p) {
    const uint64_t section = w.offset();
    Status s = (*source)->ReadPartition(
        p, o.page_bytes, [&] { return w.CutTo(section); },
        [&](ScanResponse& page) -> Status {
          if (page.profiles.empty()) return Status::OK();
          stats->users += page.profiles.size();
          body.clear();
          proto::Encode(ScanResponse{0, std::move(page.profiles)}, &body);
          stats->raw_bytes += body.size();
          SEGSTORE_RETURN_IF_ERROR(w.Append(Chunk(ChunkKind::kProfiles, p, body, o.zstd_level)));
          Pace(o.users_per_second, static_cast<double>(stats->users), start);
          Pace(o.mb_per_second * 1e6, static_cast<double>(stats->raw_bytes), start);
          return Status::OK();
        });
    if (!s.ok()) {
      (void)w.CutTo(section);
      (void)w.Sync();
      return s;
    }
    SEGSTORE_RETURN_IF_ERROR(w.Append(Chunk(ChunkKind::kPartitionEnd, p, {}, 0)));
    ++stats->partitions;
    const auto now = SteadyClock::now();
    if (now - last_progress > std::chrono::seconds(5) || p == to) {
      last_progress = now;
      SEGSTORE_RETURN_IF_ERROR(w.Sync());  // a resume finds what was said done
      if (!o.progress) continue;
      const double secs = std::chrono::duration<double>(now - start).count();
      std::fprintf(stderr, "segctl backup: partition %u of %u-%u, %llu users, %.0f users/s\n", p,
                   from, to, static_cast<unsigned long long>(stats->users),
                   static_cast<double>(stats->users) / std::max(secs, 1e-9));
    }
  }
  SEGSTORE_RETURN_IF_ERROR(w.Append(Chunk(ChunkKind::kBackupEnd, 0, {}, 0)));
  SEGSTORE_RETURN_IF_ERROR(w.Sync());
  stats->file_bytes = w.offset();
  stats->seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return Status::OK();
}

Status RunRestore(const RestoreOptions& o, RestoreStats* stats) {
  *stats = RestoreStats{};
  const auto start = SteadyClock::now();
  FileCheck check;
  SEGSTORE_RETURN_IF_ERROR(CheckFile(o.path, &check));
  if (!check.damage.ok()) return check.damage;
  if (!check.complete) {
    return Status::InvalidArgument(
        fmt::format("{}: the backup is incomplete (it stops before partition {}): finish it with "
                    "segctl backup --resume {}",
                    o.path, check.next_partition, o.path));
  }
  client::ClusterClientOptions co;
  co.node = o.client;
  Result<std::unique_ptr<client::ClusterClient>> cc = client::ClusterClient::Connect(co);
  if (!cc.ok()) return cc.status();
  client::ClusterClient& c = **cc;
  const std::string first = client::FormatServerAddress(o.client.host, o.client.port);
  Result<client::Client*> first_client = c.NodeClient(first);
  if (!first_client.ok()) return first_client.status();
  Result<ClusterMap> map = (*first_client)->ClusterMap();
  if (!map.ok()) return map.status();

  auto failed = [&](std::string what) {
    if (stats->failed++ == 0) stats->first_failure = std::move(what);
  };
  struct Claim {
    std::string member, master;
    UnixSeconds expires = kNever;
  };
  std::vector<Claim> claims;
  std::set<std::pair<std::string, std::string>> listed;  // (master, member)
  // Batches are cut by encoded bytes as well as by users: under the
  // server's max_frame_bytes (its hello; the default when it said none) with
  // room for the write IDs a cluster client adds, and at most max_batch (and
  // batch_users) users. A user larger than that goes alone (refused alone
  // when it is over the frame).
  const ServerInfo& info = (*first_client)->server_info();
  const size_t frame =
      info.max_frame_bytes > 0 ? info.max_frame_bytes : proto::kDefaultMaxFrameBytes;
  const size_t batch_bytes_limit = frame - frame / 4;
  const size_t batch_users_limit = std::max<size_t>(
      1, std::min<size_t>(o.batch_users,
                          info.max_batch > 0 ? info.max_batch : proto::kDefaultMaxBatch));
  std::vector<UpsertItem> batch;
  size_t batch_bytes = 0;
  std::string sizing;
  auto item_bytes = [&](const UpsertItem& item) {
    sizing.clear();
    proto::Encode(item, &sizing);
    return sizing.size() + kWriteIdRoom;
  };
  auto attempt = [&](std::span<const UpsertItem> items) {
    Result<BatchUpsertResult> r = c.BatchUpsert(items);
    // A whole batch Busy or timed out (the client retried it already):
    // again, a few times, with a growing pause.
    for (int i = 0; !r.ok() && i < kBatchRetries && Retryable(r.status()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200) * (1 << i));
      r = c.BatchUpsert(items);
    }
    return r;
  };
  auto record = [&](std::span<const UpsertItem> items,
                    const Result<BatchUpsertResult>& r) -> Status {
    if (!r.ok()) {
      if (Retryable(r.status())) {
        return r.status().WithContext(
            fmt::format("batch_upsert of {} users, from '{}' (after {} retries)", items.size(),
                        items.front().user, kBatchRetries));
      }
      for (const UpsertItem& item : items) {
        failed("user '" + item.user + "': " + r.status().ToString());
      }
      return Status::OK();
    }
    for (size_t i = 0; i < r->size() && i < items.size(); ++i) {
      if ((*r)[i].ok()) {
        stats->segments += items[i].segments.size();
      } else {
        failed("user '" + items[i].user + "': " + (*r)[i].status().ToString());
      }
    }
    return Status::OK();
  };
  auto send = [&](std::span<const UpsertItem> items) -> Status {
    Result<BatchUpsertResult> r = attempt(items);
    if (r.ok() || Retryable(r.status()) || items.size() == 1) return record(items, r);
    // Refused as a whole (a frame over the limit, say): each user alone,
    // so that one user's refusal is that user's only.
    for (size_t i = 0; i < items.size(); ++i) {
      SEGSTORE_RETURN_IF_ERROR(record(items.subspan(i, 1), attempt(items.subspan(i, 1))));
    }
    return Status::OK();
  };
  auto flush = [&]() -> Status {
    if (batch.empty()) return Status::OK();
    Status s = send(batch);
    batch.clear();
    batch_bytes = 0;
    return s;
  };
  auto add = [&](UpsertItem item) -> Status {
    const size_t n = item_bytes(item);
    if (!batch.empty() &&
        (batch_bytes + n > batch_bytes_limit || batch.size() >= batch_users_limit)) {
      SEGSTORE_RETURN_IF_ERROR(flush());
    }
    batch.push_back(std::move(item));
    batch_bytes += n;
    return Status::OK();
  };

  // The node holding `user` (the first one asked on a single server).
  auto node_of = [&](const std::string& user) -> Result<client::Client*> {
    if (map->cluster && map->revision > 0) {
      return c.NodeClient(map->nodes[map->ReplicasOf(PartitionOf(user)).front()].address);
    }
    return c.NodeClient(first);
  };
  // A field write of a user whose link counts changes its master's fields
  // (PROTOCOL.md, "Profile fields"), and there is no write of a member's own
  // fields: a user the store has as a member of a group gets none of its own
  // fields written (they would overwrite its master's), counted in
  // member_fields_skipped. A user in no group (or a master) gets them.
  auto set_fields = [&](const std::string& user, std::span<const FieldUpdate> fields) -> Status {
    Result<client::Client*> node = node_of(user);
    if (!node.ok()) return node.status();
    Result<std::string> master = (*node)->MasterOf(user);
    if (master.ok() && *master != user) {
      stats->member_fields_skipped += fields.size();
      return Status::OK();
    }
    // NotFound: in no group. Unsupported: a cluster without links (no groups).
    if (!master.ok() && !master.status().IsNotFound() &&
        master.status().code() != Status::Code::kUnsupported) {
      failed("fields of user '" + user + "': master_of: " + master.status().ToString());
      return Status::OK();
    }
    Result<FieldWriteResult> fr = c.FieldSet(user, fields);
    if (fr.ok()) {
      stats->fields += fields.size();
    } else {
      failed("fields of user '" + user + "': " + fr.status().ToString());
    }
    return Status::OK();
  };

  BackupReader r;
  SEGSTORE_RETURN_IF_ERROR(r.Open(o.path));
  ChunkRead chunk;
  std::string raw;
  while (true) {
    Result<bool> more = r.Next(&chunk);
    if (!more.ok()) return more.status();  // changed since the check
    if (!*more) break;
    if (chunk.kind != ChunkKind::kProfiles) continue;
    SEGSTORE_RETURN_IF_ERROR(Decompress(chunk, &raw));
    ScanResponse page;
    proto::DecodeLimits lim;
    lim.max_key_bytes = 65535;
    if (Status s = proto::Decode(raw, lim, &page); !s.ok()) {
      return Status::Corruption(fmt::format("chunk {} (partition {}, at byte {}): {}",
                                            chunk.index, chunk.partition, chunk.offset,
                                            s.ToString()));
    }
    const auto now = static_cast<UnixSeconds>(std::time(nullptr)) + 2;  // a margin for the trip
    for (ScannedProfile& p : page.profiles) {
      ++stats->users;
      UpsertItem item;
      item.user = p.user;
      item.mode = UpsertMode::kExtend;
      for (const Segment& s : p.segments) {
        if (!Live(s.expires_at, now)) {
          ++stats->expired;
          continue;
        }
        item.segments.push_back(SegmentUpdate{s.id, s.expires_at, false, s.attr1, s.attr2});
      }
      if (!item.segments.empty()) SEGSTORE_RETURN_IF_ERROR(add(std::move(item)));
      std::vector<FieldUpdate> fields;
      for (Field& f : p.fields) {
        if (!Live(f.expires_at, now)) {
          ++stats->expired;
          continue;
        }
        fields.push_back(FieldUpdate{std::move(f.name), std::move(f.value), f.expires_at, false});
      }
      if (!fields.empty()) SEGSTORE_RETURN_IF_ERROR(set_fields(p.user, fields));
      if (!p.master.empty()) claims.push_back({p.user, p.master, p.link_expires});
      for (const LinkedUser& m : p.members) listed.insert({p.user, m.user});
    }
    stats->file_bytes = chunk.offset;
    if (o.progress && chunk.index % 256 == 0) {
      std::fprintf(stderr, "segctl restore: partition %u, %llu users\n", chunk.partition,
                   static_cast<unsigned long long>(stats->users));
    }
  }
  SEGSTORE_RETURN_IF_ERROR(flush());
  // Links last: a field write of a linked user goes to its master.
  const auto now = static_cast<UnixSeconds>(std::time(nullptr));
  for (const Claim& l : claims) {
    if (!listed.contains({l.master, l.member})) continue;  // a link cut in two: no link
    uint32_t ttl = 0;
    if (l.expires != kNever) {
      if (l.expires <= now + 1) {
        ++stats->expired;
        continue;
      }
      ttl = l.expires - now;
    }
    Result<client::Client*> node = node_of(l.member);
    if (!node.ok()) return node.status();
    Result<LinkResult> lr = (*node)->Link(l.member, l.master, ttl);
    if (lr.ok()) {
      ++stats->links;
    } else {
      failed("link of '" + l.member + "' to '" + l.master + "': " + lr.status().ToString());
    }
  }
  stats->file_bytes = r.offset();
  stats->seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  if (stats->failed > 0) {
    return Status::InvalidArgument(fmt::format("the store refused {} users or links; the first: {}",
                                               stats->failed, stats->first_failure));
  }
  return Status::OK();
}

}  // namespace segstore::tools
