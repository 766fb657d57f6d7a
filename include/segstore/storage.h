// The segstore storage engine: a log-structured record store on a file or a
// raw NVMe device, with its index in DRAM and every device I/O through
// io_uring. It keeps one record per key (a byte string of up to 256 bytes by
// default) holding an opaque body of up to 1 MiB less 4 KiB, and knows nothing
// of what the body means. Design and on-device format: ARCHITECTURE.md and
// src/storage/FORMAT.md.
//
// Threads: a Store is shared by all threads. Each thread that reads or writes
// opens its own Worker (its own io_uring ring and open write block) and uses
// it from that thread only. Operations are asynchronous: they return at once,
// and their callbacks run later on the worker's thread, inside Poll() or
// Wait(). Never from inside the call that started them. An event loop watches
// event_fd() and calls OnEvent(); simple callers use the *Sync helpers.
//
// Guarantees: a write acknowledged in `commit` durability survives a crash
// or power loss; a deleted key never comes back, after a restart or a
// defragmentation; concurrent Updates of one key never lose one another.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/result.h"

namespace segstore {
class Clock;
}

namespace segstore::storage {

class Device;

// When a write is acknowledged.
enum class Durability : uint8_t {
  kCommit,    // once the write block holding it is on the device (group commit)
  kBuffered,  // at once; on the device within the flush interval
};

// How device I/O is done.
enum class IoBackend : uint8_t {
  kAuto,     // io_uring; where it is forbidden, pread/pwrite, logged as an error
  kIoUring,  // io_uring, or fail to open
  kSync,     // pread/pwrite; for diagnosis only
};

struct StoreOptions {
  // A regular file (created when missing) or a raw block device.
  std::string path = "segstore-data/segstore.dat";
  // Size of a data file created by Open. An existing file or device keeps its size.
  uint64_t file_size = uint64_t{4} << 30;
  // Write block size for a new device (a power of two, 64 KiB to 8 MiB). An
  // existing device keeps the size it was formatted with.
  uint32_t write_block_size = 1u << 20;
  Durability durability = Durability::kCommit;
  // Off (the default): records are packed back to back, and a get reads the
  // sectors covering its record in one device read (8 KiB when it straddles
  // a sector boundary). On: a record of up to 4 KiB never straddles a 4 KiB
  // sector (it starts on the next one instead), so every such read is 4 KiB,
  // at the cost of the padding: a reference profile of 2.3 KiB then takes
  // 4,100 device bytes instead of 2,344 (bench/RESULTS.md). Either way a
  // flush ends on a sector boundary, so packing saves space where writes
  // share flushes (loads, busy servers, buffered durability); a commit
  // write alone in its flush takes the rest of its last sector.
  bool align_records = false;
  // Longest time a buffered write waits in memory before its block is flushed.
  std::chrono::microseconds flush_interval{1000};
  uint32_t max_key_size = 256;
  // 0: the largest body a write block can hold, write_block_size - 4 KiB.
  uint32_t max_body_size = 0;
  // Background defragmentation: blocks whose live share falls below the
  // threshold are rewritten, at most this many blocks a second once free
  // blocks run short (under 10%); with half the device free or more, at a
  // sixteenth of that, scaling in between.
  bool background_defrag = true;
  double defrag_threshold = 0.5;
  uint32_t defrag_blocks_per_second = 64;
  // While tombstones wait to be reclaimed, the oldest block is also rewritten
  // at this rate, so that every block older than them eventually goes.
  uint32_t rotate_blocks_per_second = 4;
  std::chrono::milliseconds defrag_interval{50};
  IoBackend io_backend = IoBackend::kAuto;
  // io_uring entries per worker ring.
  uint32_t queue_depth = 256;
  // Time source for last-update stamps and expiry; null: the system clock.
  Clock* clock = nullptr;
  // A record past its void_at reads as absent at once, but is dropped (by
  // the index sweep, defragmentation, recovery) only this many seconds after
  // it, so that UpdateAsOf at an earlier time still finds it: a cluster node
  // applying its log late computes what the others did (0: at once).
  uint32_t void_grace_seconds = 0;
  // The index checkpoint: a file (never on the data device itself) where a
  // clean close writes the index, and from which the next start loads it
  // instead of reading every write block in use, once the block headers on
  // the device show nothing was written since (src/storage/FORMAT.md, "The
  // index checkpoint"). Anything that does not match is refused with a
  // warning and the device is scanned as without one. Empty: off (every
  // start scans).
  std::string index_checkpoint;
  // Whether a start that scans (no index checkpoint, or a refused one) reads
  // each sealed write block's summary (the list of records its last sectors
  // hold: src/storage/FORMAT.md, "Block summaries") instead of the whole
  // block. Blocks are written with summaries either way; off is for tests
  // and benchmarks comparing the two.
  bool block_summaries = true;
  // Called about once a second during a long recovery (for readiness
  // reporting): write blocks read so far, of how many.
  std::function<void(uint32_t blocks_read, uint32_t blocks_total)> on_recovery_progress;
};

// Gives a Record's bytes back to where they came from (a read-buffer cache).
struct RecordBytesReleaser {
  void (*release)(void* p, size_t size) = nullptr;
  size_t size = 0;
  void operator()(void* p) const {
    if (release != nullptr) release(p, size);
  }
};

// Per-worker overrides of the store's write settings.
struct WorkerOptions {
  // This worker's writes are acknowledged as this says rather than as the
  // store's durability does (deletes are always committed). For background
  // work whose writes need not survive a crash to be correct.
  std::optional<Durability> durability;
  // This worker's flush interval for buffered writes, instead of the store's.
  std::optional<std::chrono::microseconds> flush_interval;
};

// One version of one key, as read from the device or from memory.
class Record {
 public:
  Record() = default;
  std::string_view key() const { return key_; }
  std::string_view body() const { return body_; }
  uint32_t generation() const { return generation_; }  // 1 for a new key, +1 per write
  uint64_t version() const { return version_; }        // global write sequence
  uint32_t last_update() const { return last_update_; }
  uint32_t sweep_at() const { return sweep_at_; }  // as given by the writer; 0 = none
  uint32_t void_at() const { return void_at_; }    // as given by the writer; 0 = never
  // The key this version names (Mutation::reference); empty when none.
  std::string_view reference() const { return reference_; }

 private:
  friend class RecordBuilder;
  std::unique_ptr<void, RecordBytesReleaser> storage_;
  std::string_view key_;
  std::string_view body_;
  std::string_view reference_;
  uint32_t generation_ = 0;
  uint64_t version_ = 0;
  uint32_t last_update_ = 0;
  uint32_t sweep_at_ = 0;
  uint32_t void_at_ = 0;
};

// What an update function wants done with the key.
// Keys beginning with these two bytes are the node's own records (the
// field name table of src/profile, a cluster node's log checkpoints): never
// a user's profile, never copied to another node (proto/PROTOCOL.md).
inline constexpr std::string_view kReservedKeyPrefix{"\xff\x00", 2};
inline bool IsReservedKey(std::string_view key) { return key.starts_with(kReservedKeyPrefix); }

struct Mutation {
  enum class Kind : uint8_t { kKeep, kPut, kDelete };
  Kind kind = Kind::kKeep;
  std::string body;
  // Unix seconds, kept in the index: when the record becomes worth rewriting
  // (0 = never), and when nothing in it is alive any more (0 = never). From
  // `void_at` on, the key reads as absent and the engine drops the record
  // without reading it.
  uint32_t sweep_at = 0;
  uint32_t void_at = 0;
  // Another key this version names, for the layer above (a linked profile
  // names its master): kept in the record and in DRAM beside the index
  // entry, so Worker::GetWithReference reads both records in one round
  // trip. nullopt keeps the current version's (none for a new key); empty
  // names none. At most StoreOptions::max_key_size bytes.
  std::optional<std::string> reference;

  static Mutation Keep() { return Mutation{}; }
  static Mutation Put(std::string body, uint32_t sweep_at = 0, uint32_t void_at = 0) {
    return Mutation{Kind::kPut, std::move(body), sweep_at, void_at, std::nullopt};
  }
  static Mutation Delete() { return Mutation{Kind::kDelete, {}, 0, 0, std::nullopt}; }
};

// Reads the current version (null when the key is absent, deleted or past its
// void_at) and returns what to do. May run more than once: when another
// writer got in between, the engine reads again and calls it again. An error
// Result aborts the update and is passed to the caller.
using UpdateFn = std::function<Result<Mutation>(const Record* current)>;

struct WriteOutcome {
  Mutation::Kind applied = Mutation::Kind::kKeep;  // kDelete only if something was deleted
  uint32_t generation = 0;                         // of the version written
  uint64_t version = 0;                            // of the version written
  uint32_t attempts = 1;                           // 1 + the times another writer got in between
};

// Where a record lies, as the index knows it: how background work visits
// records it found by a property (Store::FindDue) or by partition
// (Store::ListPartition) rather than by key.
struct RecordRef {
  uint64_t offset = 0;
  uint32_t size = 0;
  uint64_t block_salt = 0;
  uint32_t tag = 0;  // the index tag of its key (ListPartition lists in tag order)
};

using GetCallback = std::function<void(Result<Record>)>;
// `record`: as GetCallback's. `referenced`: the record of the key `record`
// names (Get's answer for that key) when `record` is one and names one;
// otherwise NotFound.
using GetPairCallback = std::function<void(Result<Record> record, Result<Record> referenced)>;
using WriteCallback = std::function<void(Result<WriteOutcome>)>;
using FlushCallback = std::function<void(Status)>;

class Worker {
 public:
  virtual ~Worker() = default;  // flushes what it holds and waits for its I/O

  // The record of `key`. NotFound when absent, deleted or past its void_at;
  // InvalidArgument for an empty or too long key; Corruption (counted in
  // stats) when the device returned bytes that fail validation; IOError when
  // the device failed.
  virtual void Get(std::string_view key, GetCallback done) = 0;
  // Get, and the record of the key it names (Record::reference) when it
  // names one. The index knows which keys name one (a bit in the entry a
  // get looks up anyway) and what they name, so both reads go to the device
  // together: one round trip. A key that names none costs what Get costs.
  virtual void GetWithReference(std::string_view key, GetPairCallback done) = 0;
  // Read-modify-write of `key`: see UpdateFn. Put and Delete are Updates.
  // Fails before anything is written with InvalidArgument (key or body too
  // large), DeviceFull (no free write block), Unavailable (the device failed
  // earlier: writes are refused; reads go on), Busy (no progress after many
  // conflicting writers).
  virtual void Update(std::string_view key, UpdateFn fn, WriteCallback done) = 0;
  // As Update, but the current version counts as alive while its void_at is
  // after `as_of` rather than after the store's clock: a write made at the
  // time a replicated log says it was (StoreOptions::void_grace_seconds keeps
  // such records for it).
  virtual void UpdateAsOf(std::string_view key, uint32_t as_of, UpdateFn fn,
                          WriteCallback done) = 0;
  // A whole new version, naming no key (whatever the current one named).
  virtual void Put(std::string_view key, std::string body, uint32_t sweep_at, uint32_t void_at,
                   WriteCallback done) = 0;
  // Always committed to the device before `done` runs, whatever the durability.
  virtual void Delete(std::string_view key, WriteCallback done) = 0;
  // Completes once everything this worker wrote so far is on the device.
  virtual void Flush(FlushCallback done) = 0;
  // Reads the record at `ref` (from Store::FindDue), whatever its key: the
  // version found there, which a newer one may have superseded since (go on
  // by its key). NotFound when no valid record lies there any more.
  virtual void GetAt(const RecordRef& ref, GetCallback done) = 0;
  // Update of the key whose record lies at `ref`: reads it there (once), then
  // runs exactly as Update(key, fn) would, starting from that copy when the
  // key still lives there. NotFound when no valid record lies at `ref`.
  virtual void UpdateAt(const RecordRef& ref, UpdateFn fn, WriteCallback done) = 0;
  // Runs `task` later on this worker's thread, inside Poll()/Wait(): for
  // layers above that complete a request without touching the device.
  virtual void Defer(std::function<void()> task) = 0;

  // Batches submissions: while a Batch lives, operations queue their I/O and
  // hand it to the kernel together when the last Batch ends.
  class Batch {
   public:
    explicit Batch(Worker& w) : w_(w) { w_.BeginBatch(); }
    ~Batch() { w_.EndBatch(); }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

   private:
    Worker& w_;
  };

  // Event-loop integration: event_fd() is readable when there is work; then
  // call OnEvent(). Poll() runs what is ready without blocking; Wait() blocks
  // up to `timeout` for something to run. A worker that is never polled
  // makes no progress: its buffered writes stay in memory, and since
  // defragmentation frees a block only once every earlier write is on the
  // device, it frees nothing meanwhile.
  virtual int event_fd() const = 0;
  virtual void OnEvent() = 0;
  virtual size_t Poll() = 0;
  virtual size_t Wait(std::chrono::milliseconds timeout) = 0;
  // Operations started and not yet completed.
  virtual uint32_t pending() const = 0;

  // Blocking helpers: start the operation and Wait() until it completes.
  Result<Record> GetSync(std::string_view key);
  // GetWithReference: the pair.
  std::pair<Result<Record>, Result<Record>> GetWithReferenceSync(std::string_view key);
  Result<Record> GetAtSync(const RecordRef& ref);
  Result<WriteOutcome> UpdateAtSync(const RecordRef& ref, UpdateFn fn);
  Result<WriteOutcome> UpdateSync(std::string_view key, UpdateFn fn);
  Result<WriteOutcome> PutSync(std::string_view key, std::string body, uint32_t sweep_at = 0,
                               uint32_t void_at = 0);
  Result<WriteOutcome> DeleteSync(std::string_view key);
  Status FlushSync();

 protected:
  virtual void BeginBatch() = 0;
  virtual void EndBatch() = 0;
};

struct RecoveryStats {
  // How the index was rebuilt. True: loaded from the index checkpoint
  // (StoreOptions::index_checkpoint), after every block header was read and
  // found as it describes; records_scanned and damaged_regions are then 0.
  // False: by scanning the device, and scan_reason says why ("no index
  // checkpoint configured", or why the one found was refused).
  bool from_checkpoint = false;
  std::string scan_reason;
  uint32_t blocks_scanned = 0;  // write blocks whose header was read
  uint32_t blocks_in_use = 0;
  uint64_t records_scanned = 0;  // every valid record version found in blocks read whole
  // Of blocks_in_use on a scan: those known from their summaries, and those
  // read whole (no summary: open at the crash, or refused, counted apart).
  uint32_t blocks_from_summaries = 0;
  uint32_t blocks_read_whole = 0;
  uint32_t summaries_refused = 0;
  uint64_t records_from_summaries = 0;  // entries of the summaries taken
  uint64_t bytes_read = 0;              // from the device, block headers included
  uint64_t live_records = 0;     // indexed as live
  uint64_t tombstones = 0;       // indexed as tombstones (deleted or expired keys)
  uint64_t damaged_regions = 0;  // stretches of bytes failing validation amid valid records
  uint64_t max_seq = 0;
  double seconds = 0;
  // Of seconds: reading every block's header (both ways start with it).
  double header_seconds = 0;
  // Bytes of read buffers recovery allocated: a fixed few, reused, whatever
  // the device's size.
  uint64_t read_buffer_bytes = 0;
};

struct StoreStats {
  const char* io_backend = "";
  uint64_t device_bytes = 0;
  uint32_t block_size = 0;
  uint32_t blocks_total = 0;  // block 0 (the superblock) not counted
  uint32_t blocks_free = 0;
  uint64_t live_bytes = 0;  // bytes of records the index points to
  uint64_t index_entries = 0;
  uint64_t index_tombstones = 0;
  uint64_t index_bytes = 0;  // allocated: slack, empty slots and tombstones included
  // Of the entries, those whose record names a reference (Mutation::reference),
  // and the bytes of DRAM (of index_bytes) that keep the references.
  uint64_t index_references = 0;
  uint64_t index_reference_bytes = 0;
  // Bytes mapped for write block images: each worker's open block, blocks
  // being flushed (or pinned by a reader copying a record out), each worker's
  // spare (a finished image kept for its next block, unmapped once unused
  // for a while), and blocks a device error left with records only in
  // memory. Each is a mapping of a whole block, counted whole; pages are
  // resident as far as the block was written.
  uint64_t block_image_bytes = 0;
  uint64_t gets = 0;
  uint64_t writes = 0;  // puts and deletes written
  uint64_t update_retries = 0;
  uint64_t device_reads = 0;  // reads issued for gets and updates
  uint64_t memory_reads = 0;  // records served from a write block still in memory
  uint64_t corruptions = 0;
  uint64_t flushes = 0;
  uint64_t defrag_blocks = 0;   // blocks rewritten and freed
  uint64_t rotated_blocks = 0;  // of which rewritten to advance the watermark
  uint64_t defrag_records_moved = 0;
  uint64_t tombstones_reclaimed = 0;
  uint64_t expired_dropped = 0;  // records dropped at void_at, unread
  uint64_t watermark = 0;        // oldest block sequence still on the device
  uint64_t sequence = 0;         // next value of the global sequence
  // Empty while the device takes writes. After a device write error, the
  // error: writes are refused (Unavailable) until the store is reopened, and
  // reads go on.
  std::string write_error;
};

// Where Store::ListPartition's pages end: past every tag.
inline constexpr uint64_t kPartitionListEnd = uint64_t{1} << 32;

class Store {
 public:
  // Opens (formatting a blank device) and recovers: rebuilds the index by
  // scanning the device, or loads it from the index checkpoint
  // (StoreOptions::index_checkpoint) when the device's block headers are
  // exactly as it describes. Serves only once that is done. Unsupported when the
  // device holds a data file format version this build does not read (a
  // newer one, say): the message names both versions, and nothing is written
  // to the device. Corruption when it holds something that is not a valid
  // segstore superblock (never formatted over).
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  // Same, on a device the caller made (tests: FaultDevice).
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options,
                                             std::shared_ptr<Device> device);
  // Stops background work, then writes the index checkpoint when one is
  // configured and everything the index says is on the device (otherwise
  // the next start scans). Every Worker must be destroyed first.
  virtual ~Store() = default;

  // Opens the calling thread's worker. Use it from this thread only.
  virtual Result<std::unique_ptr<Worker>> NewWorker(const WorkerOptions& options = {}) = 0;

  virtual StoreStats stats() = 0;
  virtual const RecoveryStats& recovery() const = 0;
  // The store's time source (StoreOptions::clock, or the system clock).
  virtual Clock& clock() = 0;

  // Finds live records whose sweep_at (as their writer set it) is not after
  // `now`: scans index partitions in DRAM from `*cursor` on, advancing it
  // (wrapping after the last), until `max` are found or every partition was
  // looked at once. Appends to `out`; returns how many partitions it scanned.
  virtual uint32_t FindDue(uint32_t now, size_t max, uint32_t* cursor,
                           std::vector<RecordRef>* out) = 0;
  // One page of routing partition `partition`'s live records (not
  // tombstones; records past their void_at but still indexed are included),
  // in the order of their index tags (the low 32 bits of the key's digest):
  // appends to `out` the refs of the live records whose tag lies in
  // [tag_from, *tag_next) and sets *tag_next to where the next page starts
  // (> tag_from), kPartitionListEnd when nothing is left. A page holds at
  // least min(max, what is left) records (`max` 0 counts as 1), and may hold
  // a few more than `max`: records sharing a tag always share a page. Paging
  // from 0 until kPartitionListEnd while others write lists every key live
  // throughout exactly once (a write or a defragmentation moves a record but
  // not its tag); keys written or deleted meanwhile may or may not be listed.
  // Read each ref with Worker::GetAt: the version found there, or NotFound
  // once it is superseded and its block reused. A partition of 4,096 or more,
  // or a tag_from of kPartitionListEnd or more, lists nothing. Cost: the
  // page's share of the partition's index table (for hashed tags, about
  // max / load slots) plus the probe displacement at its start, with that
  // partition locked; never a scan of the whole partition. Any thread.
  virtual void ListPartition(uint32_t partition, uint64_t tag_from, size_t max,
                             std::vector<RecordRef>* out, uint64_t* tag_next) = 0;
  virtual uint32_t max_key_size() const = 0;
  virtual uint32_t max_body_size() const = 0;

  // One defragmentation pass on the calling thread, ignoring the rate limits:
  // rewrites every block below the threshold (and, with `rotate`, the oldest
  // block), frees what it can, sweeps the index. For tests and tools; the
  // background thread does the same work on its own.
  virtual Status DefragNow(bool rotate) = 0;

  // Unmaps each worker's spare write block image (the finished image a worker
  // keeps to fill its next block without faulting pages in) if it has lain
  // unused for `unused_for` or longer: a store between bursts of writes gives
  // that memory back. Returns the bytes unmapped. Any thread; segstored's
  // main loop calls it on each turn (every second; half the systemd watchdog
  // interval when that is shorter) with 5 s.
  virtual uint64_t ReleaseSpareImages(std::chrono::steady_clock::duration unused_for) = 0;
};

}  // namespace segstore::storage
