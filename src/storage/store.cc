#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "common/aligned_buffer.h"
#include "common/coding.h"
#include "storage/block_writer.h"
#include "storage/defragmenter.h"
#include "storage/index_checkpoint.h"
#include "storage/recovery.h"
#include "storage/store_impl.h"
#include "storage/worker_impl.h"

namespace segstore::storage {
namespace {

// A new device needs room for the superblock, the free-block reserves and
// a few blocks of data.
constexpr uint32_t kMinBlocks = 1 + BlockTable::kDefragReserve + BlockTable::kDeleteReserve + 4;

Status ValidateOptions(const StoreOptions& o) {
  uint32_t bs = o.write_block_size;
  if (bs < (64u << 10) || bs > (8u << 20) || (bs & (bs - 1)) != 0) {
    return Status::InvalidArgument(
        fmt::format("write_block_size {} must be a power of two from 64 KiB to 8 MiB", bs));
  }
  if (o.max_key_size == 0 || o.max_key_size > 65535) {
    return Status::InvalidArgument(
        fmt::format("max_key_size {} must be from 1 to 65535", o.max_key_size));
  }
  if (!(o.defrag_threshold > 0.0 && o.defrag_threshold < 1.0)) {
    return Status::InvalidArgument(
        fmt::format("defrag_threshold {} must be between 0 and 1", o.defrag_threshold));
  }
  if (o.queue_depth < 8 || o.queue_depth > 4096) {
    return Status::InvalidArgument(
        fmt::format("queue_depth {} must be from 8 to 4096", o.queue_depth));
  }
  if (o.flush_interval.count() <= 0) {
    return Status::InvalidArgument("flush_interval must be positive");
  }
  return Status::OK();
}

uint64_t Random64() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

}  // namespace

void Counters::AddTo(StoreStats* s) const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s->gets += get(gets);
  s->writes += get(writes);
  s->update_retries += get(update_retries);
  s->device_reads += get(device_reads);
  s->memory_reads += get(memory_reads);
  s->corruptions += get(corruptions);
  s->flushes += get(flushes);
  s->defrag_blocks += get(defrag_blocks);
  s->rotated_blocks += get(rotated_blocks);
  s->defrag_records_moved += get(defrag_records_moved);
  s->tombstones_reclaimed += get(tombstones_reclaimed);
  s->expired_dropped += get(expired_dropped);
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  SEGSTORE_RETURN_IF_ERROR(ValidateOptions(options));
  std::filesystem::path path(options.path);
  std::error_code ec;
  if (path.has_parent_path() && !std::filesystem::exists(path, ec)) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) {
      return Status::IOError(
          fmt::format("creating directory {}: {}", path.parent_path().string(), ec.message()));
    }
  }
  Result<std::shared_ptr<Device>> device =
      OpenFileDevice(options.path, options.file_size, options.io_backend);
  if (!device.ok()) return device.status();
  // The checkpoint is written to `<checkpoint>.tmp` and renamed over
  // `<checkpoint>`: either being the data file, under any spelling of its
  // path, would replace the data with an index at the first clean close.
  if (!options.index_checkpoint.empty()) {
    for (const std::string& written :
         {options.index_checkpoint, options.index_checkpoint + ".tmp"}) {
      std::error_code same_ec;
      if (std::filesystem::equivalent(options.path, written, same_ec)) {
        return Status::InvalidArgument(fmt::format(
            "the index checkpoint {} would write over the data file {}: name another file",
            options.index_checkpoint, options.path));
      }
    }
  }
  return StoreImpl::OpenOn(options, std::move(device).value());
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options,
                                           std::shared_ptr<Device> device) {
  SEGSTORE_RETURN_IF_ERROR(ValidateOptions(options));
  return StoreImpl::OpenOn(options, std::move(device));
}

StoreImpl::StoreImpl(const StoreOptions& options, std::shared_ptr<Device> device)
    : options_(options),
      device_(std::move(device)),
      clock_(options.clock != nullptr ? options.clock : Clock::System()),
      defrag_(std::make_unique<Defragmenter>(this)) {}

Result<std::unique_ptr<Store>> StoreImpl::OpenOn(const StoreOptions& options,
                                                 std::shared_ptr<Device> device) {
  std::unique_ptr<StoreImpl> store(new StoreImpl(options, std::move(device)));
  SEGSTORE_RETURN_IF_ERROR(store->Start());
  return std::unique_ptr<Store>(std::move(store));
}

Status StoreImpl::LoadOrFormat(IoQueue* queue) {
  AlignedBuffer sector(kSectorSize);
  AwaitedIo read;
  queue->Read(0, sector.data(), kSectorSize, &read);
  if (queue->Await(read) != static_cast<int32_t>(kSectorSize)) {
    return Status::IOError(fmt::format("reading the superblock of {}", device_->name()));
  }
  Result<Superblock> sb = DecodeSuperblock(sector.data());
  if (sb.ok()) {
    if (sb->device_size > IndexEntry::kMaxOffset) {
      return Status::Corruption(
          fmt::format("{}: superblock claims {} bytes, more than the {} TiB this build can address",
                      device_->name(), sb->device_size, IndexEntry::kMaxOffset >> 40));
    }
    if (sb->device_size > device_->size()) {
      return Status::Corruption(
          fmt::format("{} holds {} bytes but its superblock says {}: truncated?", device_->name(),
                      device_->size(), sb->device_size));
    }
    if (sb->block_size != options_.write_block_size) {
      spdlog::info("{} was formatted with {} KiB write blocks; using those", device_->name(),
                   sb->block_size >> 10);
    }
    superblock_ = *sb;
    return Status::OK();
  }
  if (sb.status().code() == Status::Code::kUnsupported) {
    // A data file format version this build does not read: the message
    // names both versions. Nothing has been written, and nothing will be.
    return Status::Unsupported(
        fmt::format("{} (nothing was written to it)", sb.status().message()));
  }
  if (!sb.status().IsNotFound()) {
    return sb.status().WithContext(fmt::format(
        "{} is not a segstore device, or its superblock is damaged; refusing to format it",
        device_->name()));
  }
  // A blank device: format it.
  Superblock fresh;
  fresh.block_size = options_.write_block_size;
  fresh.device_size = AlignDown(device_->size(), fresh.block_size);
  if (fresh.device_size > IndexEntry::kMaxOffset) {
    // The index addresses 16 TiB (40 bits of 16-byte units); larger drives
    // are split into partitions, one store each.
    return Status::InvalidArgument(
        fmt::format("{} holds {} bytes; a store addresses at most {} TiB: partition the drive",
                    device_->name(), device_->size(), IndexEntry::kMaxOffset >> 40));
  }
  if (fresh.device_size / fresh.block_size < kMinBlocks) {
    return Status::InvalidArgument(
        fmt::format("{} is too small: {} bytes hold fewer than {} write blocks of {} KiB",
                    device_->name(), device_->size(), kMinBlocks, fresh.block_size >> 10));
  }
  fresh.device_id = Random64();
  fresh.hash_seed = Random64();
  fresh.created_at = clock_->Now();
  EncodeSuperblock(fresh, sector.data());
  AwaitedIo write;
  queue->Write(0, sector.data(), kSectorSize, &write);
  if (queue->Await(write) != static_cast<int32_t>(kSectorSize)) {
    return Status::IOError(fmt::format("writing the superblock of {}", device_->name()));
  }
  spdlog::info("formatted {}: {} write blocks of {} KiB", device_->name(),
               fresh.device_size / fresh.block_size, fresh.block_size >> 10);
  superblock_ = fresh;
  return Status::OK();
}

// The upgrade of FORMAT.md, "Versions" (O <= v < W): "before it writes
// anything in version W it rewrites the superblock's version to W and logs
// it". Called once recovery has read the file, and before anything can
// write: no Worker exists yet and the defragmentation thread has not started.
// After a failed recovery the file is left as it was (still openable by a
// release of its own version).
//
// Crash safety: the write is the superblock's whole sector, read back here
// and changed only in its checksum (bytes 0-3) and version (bytes 12-13),
// both in the first 512 bytes, written in one durable write (RWF_DSYNC: FUA)
// through the same path the format takes. A sector write is atomic on the
// devices we support (NVMe with 4 KiB sectors: the superblock is one of
// them; and any device writes a 512-byte sector whole), so a crash leaves
// either the old superblock (version v: the next Open upgrades again, and
// nothing was written in version W, since that waits for this write) or the
// new one (version W, over a file holding only version-v blocks and records,
// which W reads). Never a mix that fails its checksum.
Status StoreImpl::UpgradeFormat(IoQueue* queue) {
  if (superblock_.version == kFormatVersion) return Status::OK();
  AlignedBuffer sector(kSectorSize);
  AwaitedIo read;
  queue->Read(0, sector.data(), kSectorSize, &read);
  if (queue->Await(read) != static_cast<int32_t>(kSectorSize)) {
    return Status::IOError(
        fmt::format("reading the superblock of {} to upgrade its format version", device_->name()));
  }
  // The sector must still hold the superblock recovery worked from.
  Result<Superblock> sb = DecodeSuperblock(sector.data());
  if (!sb.ok() || sb->version != superblock_.version || sb->device_id != superblock_.device_id) {
    return Status::Corruption(
        fmt::format("the superblock of {} changed while it was being opened; not upgrading it",
                    device_->name()));
  }
  UpgradeSuperblock(sector.data());
  AwaitedIo write;
  queue->Write(0, sector.data(), kSectorSize, &write);
  if (queue->Await(write) != static_cast<int32_t>(kSectorSize)) {
    return Status::IOError(
        fmt::format("writing the superblock of {} to upgrade its format version from {} to {}",
                    device_->name(), superblock_.version, kFormatVersion));
  }
  spdlog::info("data file {}: format version {} upgraded to {}", device_->name(),
               superblock_.version, kFormatVersion);
  superblock_.version = kFormatVersion;
  return Status::OK();
}

Status StoreImpl::Start() {
  const auto started = std::chrono::steady_clock::now();
  {
    Result<std::unique_ptr<IoQueue>> q = device_->NewQueue(64);
    if (!q.ok()) return q.status().WithContext("opening the recovery I/O queue");
    SEGSTORE_RETURN_IF_ERROR(LoadOrFormat(q->get()));
    const auto block_count =
        static_cast<uint32_t>(superblock_.device_size / superblock_.block_size);
    blocks_ = std::make_unique<BlockTable>(block_count, superblock_.block_size);
    max_body_size_ = superblock_.block_size - kSectorSize;
    if (options_.max_body_size != 0)
      max_body_size_ = std::min(max_body_size_, options_.max_body_size);
    // The block headers first: a scan needs them, and the index checkpoint
    // is trusted only if they are exactly as it lists them.
    std::vector<BlockInUse> in_use;
    const auto headers_started = std::chrono::steady_clock::now();
    SEGSTORE_RETURN_IF_ERROR(FindBlocksInUse(this, q->get(), &recovery_, &in_use));
    recovery_.header_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - headers_started).count();
    const std::string& checkpoint = options_.index_checkpoint;
    if (checkpoint.empty()) {
      recovery_.scan_reason = "no index checkpoint configured";
    } else if (Status s = LoadIndexCheckpoint(this, checkpoint, in_use, &recovery_); s.ok()) {
      recovery_.from_checkpoint = true;
    } else {
      // Never trusted in part: whatever was loaded before the failure goes.
      recovery_.scan_reason = fmt::format("index checkpoint {}: {}", checkpoint, s.message());
      spdlog::warn("{}; scanning the device", recovery_.scan_reason);
      index_.Clear();
      blocks_ = std::make_unique<BlockTable>(block_count, superblock_.block_size);
      recovery_.live_records = 0;
      recovery_.tombstones = 0;
      recovery_.max_seq = 0;
    }
    // No stale checkpoint can be loaded after a crash from here on: every
    // write the store makes changes the block headers the next start checks
    // (FORMAT.md, "The index checkpoint"), so the file needs no removal.
    if (!recovery_.from_checkpoint) {
      SEGSTORE_RETURN_IF_ERROR(RebuildIndex(this, q->get(), in_use, &recovery_));
    }
    SEGSTORE_RETURN_IF_ERROR(UpgradeFormat(q->get()));
  }
  recovery_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  seq_.store(recovery_.max_seq + 1);
  if (recovery_.from_checkpoint) {
    spdlog::info(
        "recovered {} in {:.3f} s from the index checkpoint {}: {} live records, {} tombstones, "
        "{} of {} write blocks in use (their headers checked in {:.3f} s), io backend {}",
        device_->name(), recovery_.seconds, options_.index_checkpoint, recovery_.live_records,
        recovery_.tombstones, recovery_.blocks_in_use, recovery_.blocks_scanned,
        recovery_.header_seconds, device_->backend_name());
  } else {
    spdlog::info(
        "recovered {} in {:.3f} s by scanning it ({}): {} live records, {} tombstones, {} of {} "
        "write blocks in use: {} known from their summaries, {} read whole ({} record versions "
        "scanned); {:.1f} MB read, headers in {:.3f} s; io backend {}",
        device_->name(), recovery_.seconds, recovery_.scan_reason, recovery_.live_records,
        recovery_.tombstones, recovery_.blocks_in_use, recovery_.blocks_scanned,
        recovery_.blocks_from_summaries, recovery_.blocks_read_whole, recovery_.records_scanned,
        static_cast<double>(recovery_.bytes_read) / 1e6, recovery_.header_seconds,
        device_->backend_name());
  }
  started_ = true;
  if (options_.background_defrag) defrag_thread_ = std::thread([this] { DefragLoop(); });
  return Status::OK();
}

StoreImpl::~StoreImpl() {
  if (defrag_thread_.joinable()) {
    {
      std::lock_guard lock(stop_mu_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    defrag_thread_.join();
  }
  {
    std::lock_guard lock(registry_mu_);
    if (!writers_.empty()) {
      spdlog::error("store closed with {} workers still open", writers_.size());
    }
  }
  if (!started_) return;  // a failed Open: nothing to keep
  if (Status s = CheckpointIndex(); !s.ok()) {
    spdlog::warn("index checkpoint {} not written: {}; the next start scans the device",
                 options_.index_checkpoint, s.message());
  }
}

Status StoreImpl::CheckpointIndex() {
  const std::string& path = options_.index_checkpoint;
  if (path.empty()) return Status::OK();
  if (!started_) {
    // A failed Start left the index half built: the next start must scan.
    return Status::Unavailable("the store did not finish opening");
  }
  {
    std::lock_guard lock(registry_mu_);
    if (!writers_.empty() || defrag_thread_.joinable()) {
      return Status::Unavailable(fmt::format(
          "{} workers still open: what they hold may not be on the device", writers_.size()));
    }
  }
  if (writes_failed()) {
    return Status::Unavailable(fmt::format("a device write failed ({})", write_error().ToString()));
  }
  for (uint32_t b = 1; b < blocks_->block_count(); ++b) {
    const BlockState state = blocks_->state(b);
    if (state == BlockState::kOpen || state == BlockState::kDefrag) {
      return Status::Unavailable(
          fmt::format("write block {} is still open or being defragmented", b));
    }
  }
  // The index sweep bounds the versions of the tombstones it makes with the
  // sequence's next value, not yet taken (Defragmenter::SweepIndex): taking
  // it here puts every one below the sequence the next start resumes from,
  // as the loader requires of a tombstone.
  NextSeq();
  const auto started = std::chrono::steady_clock::now();
  CheckpointSummary summary;
  SEGSTORE_RETURN_IF_ERROR(WriteIndexCheckpoint(this, path, &summary));
  spdlog::info(
      "index checkpoint {} written in {:.3f} s: {} entries ({} with references), {} write "
      "blocks, {} bytes",
      path, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
      summary.entries, summary.references, summary.blocks, summary.bytes);
  return Status::OK();
}

Result<std::unique_ptr<Worker>> StoreImpl::NewWorker(const WorkerOptions& options) {
  if (options.flush_interval && options.flush_interval->count() <= 0) {
    return Status::InvalidArgument("flush_interval must be positive");
  }
  Result<std::unique_ptr<WorkerImpl>> w = WorkerImpl::Create(this, options);
  if (!w.ok()) return w.status();
  return std::unique_ptr<Worker>(std::move(w).value());
}

Status StoreImpl::write_error() const {
  std::lock_guard lock(error_mu_);
  return write_error_;
}

void StoreImpl::SetWriteError(const Status& s) {
  std::lock_guard lock(error_mu_);
  if (!write_error_.ok()) return;  // the first error is the one that counts
  write_error_ = s;
  writes_failed_.store(true, std::memory_order_release);
  spdlog::error("device write failed; refusing writes until restart (reads go on): {}",
                s.ToString());
}

void StoreImpl::RegisterWriter(BlockWriter* w) {
  std::lock_guard lock(registry_mu_);
  writers_.push_back(w);
}

void StoreImpl::UnregisterWriter(BlockWriter* w) {
  std::lock_guard lock(registry_mu_);
  writers_.erase(std::remove(writers_.begin(), writers_.end(), w), writers_.end());
}

uint64_t StoreImpl::ReleaseSpareImages(std::chrono::steady_clock::duration unused_for) {
  const auto kept_before = std::chrono::steady_clock::now() - unused_for;
  std::vector<std::unique_ptr<BlockImage>> spares;
  {
    std::lock_guard lock(registry_mu_);
    for (BlockWriter* w : writers_) {
      if (auto image = w->ReleaseSpare(kept_before)) spares.push_back(std::move(image));
    }
  }
  const uint64_t released = spares.size() * uint64_t{block_size()};
  spares.clear();  // unmapped outside the lock
  CountImageBytes(-static_cast<int64_t>(released));
  return released;
}

uint64_t StoreImpl::DurableFrontier() const {
  std::lock_guard lock(registry_mu_);
  uint64_t m = UINT64_MAX;
  for (const BlockWriter* w : writers_) m = std::min(m, w->pending_min());
  return m;
}

void StoreImpl::RequestSeal(uint64_t seq) {
  uint64_t cur = seal_below_.load();
  while (cur < seq && !seal_below_.compare_exchange_weak(cur, seq)) {
  }
  std::lock_guard lock(registry_mu_);
  for (BlockWriter* w : writers_) {
    if (w->open_seq_hint() < seq) w->Wake();
  }
}

void StoreImpl::RegisterCounters(const Counters* c) {
  std::lock_guard lock(registry_mu_);
  counters_.push_back(c);
}

void StoreImpl::UnregisterCounters(const Counters* c) {
  std::lock_guard lock(registry_mu_);
  counters_.erase(std::remove(counters_.begin(), counters_.end(), c), counters_.end());
  StoreStats folded;
  c->AddTo(&folded);
  auto add = [](std::atomic<uint64_t>& a, uint64_t v) {
    a.fetch_add(v, std::memory_order_relaxed);
  };
  add(retired_.gets, folded.gets);
  add(retired_.writes, folded.writes);
  add(retired_.update_retries, folded.update_retries);
  add(retired_.device_reads, folded.device_reads);
  add(retired_.memory_reads, folded.memory_reads);
  add(retired_.corruptions, folded.corruptions);
  add(retired_.flushes, folded.flushes);
  add(retired_.defrag_blocks, folded.defrag_blocks);
  add(retired_.rotated_blocks, folded.rotated_blocks);
  add(retired_.defrag_records_moved, folded.defrag_records_moved);
  add(retired_.tombstones_reclaimed, folded.tombstones_reclaimed);
  add(retired_.expired_dropped, folded.expired_dropped);
}

StoreStats StoreImpl::stats() {
  StoreStats s;
  s.io_backend = device_->backend_name();
  s.device_bytes = superblock_.device_size;
  s.block_size = superblock_.block_size;
  s.blocks_total = blocks_->block_count() - 1;
  s.blocks_free = blocks_->free_count();
  s.live_bytes = blocks_->total_live_bytes();
  Index::Usage u = index_.usage();
  s.index_entries = u.entries;
  s.index_tombstones = u.tombstones;
  s.index_bytes = u.bytes_allocated;
  s.index_references = u.references;
  s.index_reference_bytes = u.reference_bytes;
  s.block_image_bytes = image_bytes_.load(std::memory_order_relaxed);
  if (writes_failed()) s.write_error = write_error().ToString();
  {
    std::lock_guard lock(registry_mu_);
    for (const Counters* c : counters_) c->AddTo(&s);
  }
  retired_.AddTo(&s);
  background_.AddTo(&s);
  s.watermark = blocks_->Watermark();
  s.sequence = CurrentSeq();
  return s;
}

Status StoreImpl::DefragNow(bool rotate) {
  std::lock_guard lock(defrag_mu_);
  Result<std::unique_ptr<WorkerImpl>> w = WorkerImpl::Create(this, WorkerOptions{});
  if (!w.ok()) return w.status();
  Defragmenter::Budget all;
  all.rewrite_blocks = UINT32_MAX;
  all.rotate_blocks = rotate ? 1 : 0;
  all.force_rotate = rotate;
  all.sweep_partitions = Index::kPartitions;
  Status s = defrag_->RunPass(w->get(), all);
  // Sweep once more: what the pass freed may have raised the watermark.
  Defragmenter::Budget sweep;
  sweep.sweep_partitions = Index::kPartitions;
  Status s2 = defrag_->RunPass(w->get(), sweep);
  return s.ok() ? s2 : s;
}

uint32_t StoreImpl::FindDue(uint32_t now, size_t max, uint32_t* cursor,
                            std::vector<RecordRef>* out) {
  size_t found = 0;
  uint32_t scanned = 0;
  while (scanned < Index::kPartitions && found < max) {
    uint32_t p = *cursor % Index::kPartitions;
    *cursor = (p + 1) % Index::kPartitions;
    ++scanned;
    Index::Locked table = index_.Lock(p);
    table->ForEach([&](const IndexEntry& e) {
      if (!e.live() || e.sweep_at() == 0 || e.sweep_at() > now) return;
      // Wholly expired: the index sweep drops it unread; visiting it would
      // spend a device read and the sweeper's budget on nothing.
      if (e.void_at() != 0 && e.void_at() <= now) return;
      out->push_back(RecordRef{e.offset(), e.size(), blocks_->salt(BlockOf(e.offset())), e.tag()});
      ++found;
    });
  }
  return scanned;
}

void StoreImpl::ListPartition(uint32_t partition, uint64_t tag_from, size_t max,
                              std::vector<RecordRef>* out, uint64_t* tag_next) {
  static_assert(kPartitionListEnd == PartitionTable::kTagEnd);
  *tag_next = kPartitionListEnd;
  if (partition >= Index::kPartitions || tag_from >= kPartitionListEnd) return;
  std::vector<IndexEntry> page;
  Index::Locked table = index_.Lock(partition);
  *tag_next = table->CollectLiveFrom(static_cast<uint32_t>(tag_from), max, &page);
  // The salt while the entry still points there, as FindDue reads it: the
  // block may be freed and reused once the partition is unlocked.
  for (const IndexEntry& e : page) {
    out->push_back(RecordRef{e.offset(), e.size(), blocks_->salt(BlockOf(e.offset())), e.tag()});
  }
}

void StoreImpl::DefragLoop() {
  Result<std::unique_ptr<WorkerImpl>> w = WorkerImpl::Create(this, WorkerOptions{});
  if (!w.ok()) {
    spdlog::error("defragmentation is off: {}", w.status().ToString());
    return;
  }
  const double tick = std::chrono::duration<double>(options_.defrag_interval).count();
  // A whole sweep of the index every kSweepSeconds.
  constexpr double kSweepSeconds = 10;
  double rewrite_tokens = 0, rotate_tokens = 0, sweep_tokens = 0;
  std::string last_error;
  std::unique_lock stop_lock(stop_mu_);
  while (!stop_cv_.wait_for(stop_lock, options_.defrag_interval, [this] { return stopping_; })) {
    stop_lock.unlock();
    // As fast as free space requires: the full rate once under 10% of the
    // blocks are free, a sixteenth of it from half free on (defragmentation
    // reads and writes whole blocks, which delays the reads queued behind).
    const double free_share =
        static_cast<double>(blocks_->free_count()) / (blocks_->block_count() - 1);
    const double urgency = std::clamp((0.5 - free_share) / 0.4, 1.0 / 16, 1.0);
    const double rate = options_.defrag_blocks_per_second * urgency;
    rewrite_tokens = std::min(rewrite_tokens + rate * tick, std::max(1.0, rate * tick));
    rotate_tokens = std::min(rotate_tokens + options_.rotate_blocks_per_second * tick,
                             std::max(1.0, options_.rotate_blocks_per_second * tick));
    sweep_tokens += Index::kPartitions * tick / kSweepSeconds;
    Defragmenter::Budget b;
    b.rewrite_blocks = static_cast<uint32_t>(rewrite_tokens);
    b.rotate_blocks = static_cast<uint32_t>(rotate_tokens);
    b.sweep_partitions =
        std::min<uint32_t>(static_cast<uint32_t>(sweep_tokens), Index::kPartitions);
    rewrite_tokens -= b.rewrite_blocks;
    rotate_tokens -= b.rotate_blocks;
    sweep_tokens -= b.sweep_partitions;
    Status s;
    {
      std::lock_guard lock(defrag_mu_);
      s = defrag_->RunPass(w->get(), b);
    }
    (*w)->Poll();
    if (!s.ok() && s.ToString() != last_error) {
      last_error = s.ToString();
      spdlog::error("defragmentation: {}", last_error);
    }
    stop_lock.lock();
  }
}

}  // namespace segstore::storage
