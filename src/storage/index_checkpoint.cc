#include "storage/index_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/coding.h"
#include "storage/store_impl.h"

namespace segstore::storage {
namespace {

// A chunk is written once its payload reaches this. Checksums are per chunk
// rather than over the whole file so that the loader checks each chunk
// before it uses a byte of it, through one chunk's buffer: a whole-file
// checksum would be known only after everything was inserted (or the file
// read twice, 2 GB for 100 M records).
constexpr uint32_t kChunkTarget = 64u << 10;
constexpr uint32_t kBlockItemSize = 20;
constexpr uint32_t kEntryWords = 5;
constexpr uint32_t kEntrySize = kEntryWords * 4;

uint32_t Checksum(const uint8_t* p, size_t n, uint64_t seed) {
  return static_cast<uint32_t>(XXH3_64bits_withSeed(p, n, seed));
}

std::string Errno(int err) { return std::strerror(err); }

// Fsyncs the directory holding `path`, so that a rename in it is durable.
Status SyncDirectory(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(fmt::format("opening {}: {}", dir.string(), Errno(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IOError(fmt::format("fsync of {}: {}", dir.string(), Errno(err)));
  return Status::OK();
}

// Writes chunks to a file, numbering them for their checksums.
class ChunkWriter {
 public:
  ChunkWriter(int fd, const std::string& path) : fd_(fd), path_(path) { Reset(); }

  Status WriteRaw(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::IOError(fmt::format("writing {}: {}", path_, Errno(errno)));
      }
      p += w;
      n -= static_cast<size_t>(w);
      bytes_ += static_cast<uint64_t>(w);
    }
    return Status::OK();
  }

  // The open chunk's payload; Add() counts an item appended to it.
  std::string& payload() { return buf_; }
  void Add() { ++count_; }
  bool full() const { return buf_.size() - kCheckpointChunkHeaderSize >= kChunkTarget; }
  bool empty() const { return count_ == 0; }

  // Frames the open chunk as `kind` (of `partition`), writes it, opens the next.
  Status Finish(CheckpointChunk kind, uint16_t partition = 0) {
    auto* p = reinterpret_cast<uint8_t*>(buf_.data());
    p[4] = static_cast<uint8_t>(kind);
    EncodeFixed16(p + 6, partition);
    EncodeFixed32(p + 8, static_cast<uint32_t>(buf_.size() - kCheckpointChunkHeaderSize));
    EncodeFixed32(p + 12, count_);
    EncodeFixed32(p, Checksum(p + 4, buf_.size() - 4, ordinal_++));
    Status s = WriteRaw(p, buf_.size());
    Reset();
    return s;
  }

  uint64_t bytes() const { return bytes_; }

 private:
  void Reset() {
    buf_.assign(kCheckpointChunkHeaderSize, '\0');
    count_ = 0;
  }

  int fd_;
  const std::string& path_;
  std::string buf_;  // the frame's 16 bytes, then the payload
  uint32_t count_ = 0;
  uint32_t ordinal_ = 0;
  uint64_t bytes_ = 0;
};

void Put16(std::string* out, uint16_t v) {
  char b[2];
  EncodeFixed16(b, v);
  out->append(b, 2);
}
void Put32(std::string* out, uint32_t v) {
  char b[4];
  EncodeFixed32(b, v);
  out->append(b, 4);
}
void Put64(std::string* out, uint64_t v) {
  char b[8];
  EncodeFixed64(b, v);
  out->append(b, 8);
}

// The blocks a checkpoint lists: every one whose header may be on the
// device. Erasing blocks are among them (their headers are not erased yet,
// and no entry points into them); Open and Defrag ones the caller ruled out.
bool Listed(BlockState s) { return s == BlockState::kUsed || s == BlockState::kErasing; }

Status WriteContents(StoreImpl* store, ChunkWriter* out, CheckpointSummary* summary) {
  const Superblock& sb = store->superblock();
  BlockTable& blocks = store->blocks();
  for (uint32_t b = 1; b < blocks.block_count(); ++b) {
    if (Listed(blocks.state(b))) ++summary->blocks;
  }
  uint8_t header[kCheckpointHeaderSize] = {};
  EncodeFixed64(header + 4, kCheckpointMagic);
  EncodeFixed16(header + 12, kCheckpointVersion);
  EncodeFixed16(header + 14, sb.version);
  EncodeFixed64(header + 16, sb.device_id);
  EncodeFixed64(header + 24, sb.hash_seed);
  EncodeFixed64(header + 32, sb.device_size);
  EncodeFixed32(header + 40, sb.block_size);
  EncodeFixed32(header + 44, Index::kPartitions);
  EncodeFixed64(header + 48, store->CurrentSeq());
  EncodeFixed32(header + 56, summary->blocks);
  EncodeFixed32(header, Checksum(header + 4, kCheckpointHeaderSize - 4, 0));
  SEGSTORE_RETURN_IF_ERROR(out->WriteRaw(header, sizeof header));

  for (uint32_t b = 1; b < blocks.block_count(); ++b) {
    if (!Listed(blocks.state(b))) continue;
    Put32(&out->payload(), b);
    Put64(&out->payload(), blocks.seq(b));
    Put64(&out->payload(), blocks.salt(b));
    out->Add();
    if (out->full()) SEGSTORE_RETURN_IF_ERROR(out->Finish(CheckpointChunk::kBlocks));
  }
  if (!out->empty()) SEGSTORE_RETURN_IF_ERROR(out->Finish(CheckpointChunk::kBlocks));

  for (uint32_t p = 0; p < Index::kPartitions; ++p) {
    Index::Locked table = store->index().Lock(p);
    Status failed;
    table->ForEach([&](const IndexEntry& e) {
      if (!failed.ok()) return;
      for (uint32_t w : e.ToWords()) Put32(&out->payload(), w);
      if (e.linked()) {
        const std::string_view ref = table->Reference(e);
        Put16(&out->payload(), static_cast<uint16_t>(ref.size()));
        out->payload().append(ref);
        ++summary->references;
      }
      out->Add();
      ++summary->entries;
      if (out->full()) failed = out->Finish(CheckpointChunk::kEntries, static_cast<uint16_t>(p));
    });
    SEGSTORE_RETURN_IF_ERROR(failed);
    if (!out->empty()) {
      SEGSTORE_RETURN_IF_ERROR(out->Finish(CheckpointChunk::kEntries, static_cast<uint16_t>(p)));
    }
  }

  Put64(&out->payload(), summary->entries);
  Put64(&out->payload(), summary->references);
  SEGSTORE_RETURN_IF_ERROR(out->Finish(CheckpointChunk::kEnd));
  summary->bytes = out->bytes();
  return Status::OK();
}

// Reads a file front to back through a buffer.
class FileReader {
 public:
  explicit FileReader(int fd) : fd_(fd), buf_(1u << 20) {
    // Read front to back once: a larger readahead window, and no need to
    // keep the pages afterwards.
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }

  // Reads exactly `n` bytes into `dst`. False at the end of the file (or a
  // read error, in `error`) before `n`.
  bool Read(void* dst, size_t n) {
    auto* d = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ == end_ && !Fill()) return false;
      const size_t take = std::min(n, end_ - pos_);
      std::memcpy(d, buf_.data() + pos_, take);
      pos_ += take;
      d += take;
      n -= take;
    }
    return true;
  }
  // True at the end of the file.
  bool AtEnd() { return pos_ == end_ && !Fill(); }
  const Status& error() const { return error_; }

 private:
  bool Fill() {
    while (true) {
      const ssize_t r = ::read(fd_, buf_.data(), buf_.size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) error_ = Status::IOError(Errno(errno));
      if (r <= 0) return false;
      pos_ = 0;
      end_ = static_cast<size_t>(r);
      return true;
    }
  }

  int fd_;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0;
  size_t end_ = 0;
  Status error_;
};

// One chunk as read and checked.
struct Chunk {
  CheckpointChunk kind{};
  uint16_t partition = 0;
  uint32_t count = 0;
  std::vector<uint8_t> bytes;  // the frame, then the payload
  const uint8_t* payload() const { return bytes.data() + kCheckpointChunkHeaderSize; }
  size_t length() const { return bytes.size() - kCheckpointChunkHeaderSize; }
};

Status Truncated(const FileReader& in, std::string_view where) {
  if (!in.error().ok()) return in.error().WithContext(fmt::format("reading {}", where));
  return Status::Corruption(fmt::format("truncated: the file ends inside {}", where));
}

// Reads the next chunk (number `ordinal`) and checks its checksum.
Status ReadChunk(FileReader* in, uint32_t ordinal, Chunk* c) {
  c->bytes.resize(kCheckpointChunkHeaderSize);
  if (!in->Read(c->bytes.data(), kCheckpointChunkHeaderSize)) {
    if (in->error().ok() && in->AtEnd()) {
      return Status::Corruption(
          fmt::format("truncated: the file ends after {} chunks, before its end", ordinal));
    }
    return Truncated(*in, fmt::format("the frame of chunk {}", ordinal));
  }
  const uint32_t length = DecodeFixed32(c->bytes.data() + 8);
  if (length > kMaxCheckpointChunk) {
    return Status::Corruption(fmt::format("chunk {} claims {} bytes", ordinal, length));
  }
  c->bytes.resize(kCheckpointChunkHeaderSize + length);
  if (!in->Read(c->bytes.data() + kCheckpointChunkHeaderSize, length)) {
    return Truncated(*in, fmt::format("chunk {}", ordinal));
  }
  if (DecodeFixed32(c->bytes.data()) !=
      Checksum(c->bytes.data() + 4, c->bytes.size() - 4, ordinal)) {
    return Status::Corruption(fmt::format("checksum mismatch in chunk {}", ordinal));
  }
  const uint8_t kind = c->bytes[4];
  if (kind < static_cast<uint8_t>(CheckpointChunk::kBlocks) ||
      kind > static_cast<uint8_t>(CheckpointChunk::kEnd)) {
    return Status::Corruption(fmt::format("chunk {} is of unknown kind {}", ordinal, kind));
  }
  c->kind = static_cast<CheckpointChunk>(kind);
  c->partition = DecodeFixed16(c->bytes.data() + 6);
  c->count = DecodeFixed32(c->bytes.data() + 12);
  return Status::OK();
}

std::string Describe(const BlockInUse& b) {
  return fmt::format("block {} (seq {}, salt {:#x})", b.block, b.seq, b.salt);
}

// Why the blocks on the device are not the checkpoint's: the first difference.
std::string FirstDifference(const std::vector<BlockInUse>& listed,
                            const std::vector<BlockInUse>& on_device) {
  size_t i = 0;
  while (i < listed.size() && i < on_device.size() && listed[i] == on_device[i]) ++i;
  if (i == on_device.size()) {
    return fmt::format("{} is listed but holds no header of this incarnation on the device",
                       Describe(listed[i]));
  }
  if (i == listed.size() || on_device[i].block < listed[i].block) {
    return fmt::format("the device holds {}, which the checkpoint does not list",
                       Describe(on_device[i]));
  }
  if (on_device[i].block > listed[i].block) {
    return fmt::format("{} is listed but holds no header of this incarnation on the device",
                       Describe(listed[i]));
  }
  return fmt::format("the device holds {}, the checkpoint lists {}", Describe(on_device[i]),
                     Describe(listed[i]));
}

Status Load(StoreImpl* store, FileReader* in, const std::vector<BlockInUse>& on_device,
            RecoveryStats* stats) {
  const Superblock& sb = store->superblock();
  BlockTable& blocks = store->blocks();
  uint8_t header[kCheckpointHeaderSize];
  if (!in->Read(header, sizeof header)) return Truncated(*in, "its header");
  if (DecodeFixed64(header + 4) != kCheckpointMagic) {
    return Status::Corruption("not an index checkpoint (wrong magic)");
  }
  if (DecodeFixed32(header) != Checksum(header + 4, kCheckpointHeaderSize - 4, 0)) {
    return Status::Corruption("header checksum mismatch");
  }
  const uint16_t version = DecodeFixed16(header + 12);
  if (version != kCheckpointVersion) {
    return Status::Unsupported(fmt::format(
        "checkpoint version {}; this build reads version {} only", version, kCheckpointVersion));
  }
  const uint16_t data_version = DecodeFixed16(header + 14);
  const uint64_t device_id = DecodeFixed64(header + 16);
  const uint64_t hash_seed = DecodeFixed64(header + 24);
  const uint64_t device_size = DecodeFixed64(header + 32);
  const uint32_t block_size = DecodeFixed32(header + 40);
  const uint32_t partitions = DecodeFixed32(header + 44);
  const uint64_t next_seq = DecodeFixed64(header + 48);
  const uint32_t listed_count = DecodeFixed32(header + 56);
  if (device_id != sb.device_id || hash_seed != sb.hash_seed) {
    return Status::Conflict(fmt::format(
        "written for another device (device id {:#x}, this one {:#x})", device_id, sb.device_id));
  }
  if (device_size != sb.device_size || block_size != sb.block_size || data_version != sb.version ||
      partitions != Index::kPartitions) {
    return Status::Conflict(fmt::format(
        "written for {} bytes in blocks of {}, data file format version {}, {} partitions; the "
        "device has {} bytes in blocks of {}, version {}, {} partitions",
        device_size, block_size, data_version, partitions, sb.device_size, sb.block_size,
        sb.version, Index::kPartitions));
  }
  if (listed_count >= blocks.block_count() || next_seq == 0) {
    return Status::Corruption(
        fmt::format("lists {} blocks with next sequence {}", listed_count, next_seq));
  }

  uint32_t ordinal = 0;
  Chunk c;
  // The blocks. Each one's header on the device must be exactly as listed:
  // see FORMAT.md, "The index checkpoint", for why that shows nothing was
  // written since.
  std::vector<BlockInUse> listed;
  listed.reserve(listed_count);
  while (listed.size() < listed_count) {
    SEGSTORE_RETURN_IF_ERROR(ReadChunk(in, ordinal++, &c));
    if (c.kind != CheckpointChunk::kBlocks || c.length() != uint64_t{c.count} * kBlockItemSize ||
        listed.size() + c.count > listed_count) {
      return Status::Corruption(
          fmt::format("chunk {} is not the expected list of blocks", ordinal - 1));
    }
    for (uint32_t i = 0; i < c.count; ++i) {
      const uint8_t* p = c.payload() + i * kBlockItemSize;
      BlockInUse b{DecodeFixed32(p), DecodeFixed64(p + 4), DecodeFixed64(p + 12)};
      if (b.block == 0 || b.block >= blocks.block_count() || b.seq >= next_seq ||
          (!listed.empty() && b.block <= listed.back().block)) {
        return Status::Corruption(fmt::format("lists an impossible {}", Describe(b)));
      }
      listed.push_back(b);
    }
  }
  if (listed != on_device) {
    return Status::Conflict(fmt::format("the device was written since it was taken: {}",
                                        FirstDifference(listed, on_device)));
  }
  blocks.RecoverUsed(listed);  // the listed blocks are now exactly the kUsed ones

  // The entries, partition by partition. Live bytes are summed here and
  // added to the block table once a block, not once an entry.
  std::vector<int64_t> live(blocks.block_count(), 0);
  uint64_t entries = 0, references = 0;
  int64_t last_partition = -1;
  while (true) {
    SEGSTORE_RETURN_IF_ERROR(ReadChunk(in, ordinal++, &c));
    if (c.kind == CheckpointChunk::kEnd) break;
    if (c.kind != CheckpointChunk::kEntries || c.partition >= Index::kPartitions ||
        c.partition < last_partition) {
      return Status::Corruption(fmt::format("chunk {} is not the expected entries", ordinal - 1));
    }
    last_partition = c.partition;
    if (c.count > c.length() / kEntrySize) {
      return Status::Corruption(fmt::format("chunk {} counts {} entries in {} bytes", ordinal - 1,
                                            c.count, c.length()));
    }
    Index::Locked table = store->index().Lock(c.partition);
    // The writer puts a partition's entries in one chunk unless they fill
    // it: room for them all at once, not a dozen resizes on the way.
    table->Reserve(table->size() + c.count);
    const uint8_t* p = c.payload();
    const uint8_t* end = p + c.length();
    for (uint32_t i = 0; i < c.count; ++i) {
      auto bad = [&](std::string_view why) {
        return Status::Corruption(fmt::format("entry {} of chunk {} (partition {}): {}", i,
                                              ordinal - 1, c.partition, why));
      };
      if (static_cast<size_t>(end - p) < kEntrySize) return bad("truncated");
      std::array<uint32_t, kEntryWords> words;
      for (uint32_t w = 0; w < kEntryWords; ++w) words[w] = DecodeFixed32(p + 4 * w);
      p += kEntrySize;
      std::optional<IndexEntry> e = IndexEntry::FromWords(words);
      if (!e) return bad("not a valid entry");
      const uint32_t block = store->BlockOf(e->offset());
      const uint64_t in_block = e->offset() - store->BlockOffset(block);
      // An offset past the device (a hostile file's checksums can be right)
      // names no block at all.
      if (block >= blocks.block_count() || blocks.state(block) != BlockState::kUsed ||
          in_block < kBlockHeaderSize ||
          in_block + e->size() > sb.block_size) {
        return bad(fmt::format("points at offset {} ({} bytes), outside the blocks listed",
                               e->offset(), e->size()));
      }
      if (e->tombstone() && e->version() >= next_seq) return bad("a tombstone from the future");
      std::string_view reference;
      if (e->linked()) {
        if (static_cast<size_t>(end - p) < 2) return bad("truncated reference");
        const uint16_t len = DecodeFixed16(p);
        if (len == 0 || static_cast<size_t>(end - p) - 2 < len) {
          return bad("impossible reference length");
        }
        reference = std::string_view(reinterpret_cast<const char*>(p + 2), len);
        p += 2 + len;
        ++references;
      }
      if (!table->InsertNew(*e, reference)) return bad("listed twice");
      live[block] += AccountedBytes(*e);
      ++entries;
      if (e->live()) {
        ++stats->live_records;
      } else {
        ++stats->tombstones;
      }
    }
    if (p != end) {
      return Status::Corruption(fmt::format("chunk {} holds bytes past its entries", ordinal - 1));
    }
  }
  for (const BlockInUse& b : listed) blocks.AddLive(b.block, live[b.block]);
  if (c.length() != 16 || DecodeFixed64(c.payload()) != entries ||
      DecodeFixed64(c.payload() + 8) != references) {
    return Status::Corruption(fmt::format(
        "its end does not match the {} entries and {} references read", entries, references));
  }
  if (!in->AtEnd()) {
    if (!in->error().ok()) return in->error().WithContext("reading past its end");
    return Status::Corruption("bytes follow its end");
  }
  stats->max_seq = next_seq - 1;
  return Status::OK();
}

}  // namespace

Status WriteIndexCheckpoint(StoreImpl* store, const std::string& path, CheckpointSummary* summary) {
  const std::string tmp = path + ".tmp";
  // The data file's mode: the references it holds are keys (user IDs).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return Status::IOError(fmt::format("creating {}: {}", tmp, Errno(errno)));
  ChunkWriter out(fd, tmp);
  Status s = WriteContents(store, &out, summary);
  if (s.ok() && ::fsync(fd) != 0)
    s = Status::IOError(fmt::format("fsync of {}: {}", tmp, Errno(errno)));
  if (::close(fd) != 0 && s.ok()) {
    s = Status::IOError(fmt::format("closing {}: {}", tmp, Errno(errno)));
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::IOError(fmt::format("renaming {} to {}: {}", tmp, path, Errno(errno)));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  // The rename is durable only once the directory is.
  return SyncDirectory(path);
}

Status LoadIndexCheckpoint(StoreImpl* store, const std::string& path,
                           const std::vector<BlockInUse>& on_device, RecoveryStats* stats) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no such file");
    return Status::IOError(fmt::format("opening it: {}", Errno(errno)));
  }
  FileReader in(fd);
  Status s = Load(store, &in, on_device, stats);
  ::close(fd);
  return s;
}

}  // namespace segstore::storage
