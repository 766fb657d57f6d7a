// The engine's two operations: GetOp reads the newest version of a key;
// UpdateOp is the read-modify-write every put and delete goes through.
//
// Both start the same way (RecordOp): take the partition lock, copy the index
// entries that carry the key's tag, let go of the lock, then read those
// records, from a write block still in memory or from the device, until one
// holds the key. A record that fails validation is re-checked against the
// index: if the entry moved meanwhile (defragmentation, a newer write), the
// lookup starts over; if not, it is a corruption.
//
// UpdateOp then calls the caller's function, takes the lock again and writes
// only if the key's entries are exactly those it read (compare-and-set on the
// record location); otherwise it reads again and retries.
//
// An op deletes itself after calling its callback, on the worker's thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/small_vector.h"
#include "segstore/storage.h"
#include "storage/block_writer.h"
#include "storage/format.h"
#include "storage/index.h"

namespace segstore::storage {

class StoreImpl;
class WorkerImpl;

// Fetches the bytes of one record at a known place: copied from its block's
// image while the block is in memory, else one device read into a pooled
// buffer. The base of every operation that reads records.
class RecordFetch : public IoCompletion {
 protected:
  explicit RecordFetch(WorkerImpl* w);
  ~RecordFetch();
  // Starts fetching the `size` bytes at device `offset` of the block
  // incarnation `salt`; then OnFetched (possibly before returning) or OnFetchFailed.
  void Fetch(uint64_t offset, uint32_t size, uint64_t salt);
  // `storage` (a read buffer of `storage_size` bytes, now owned by the
  // callee) holds the record at `rec`; nothing is validated yet.
  virtual void OnFetched(uint8_t* storage, size_t storage_size, const uint8_t* rec) = 0;
  virtual void OnFetchFailed(Status s) = 0;

  WorkerImpl* w_;
  StoreImpl* store_;

 private:
  void OnIoComplete(int32_t result) override;

  uint64_t offset_ = 0;
  uint8_t* buf_ = nullptr;  // the device read in flight lands here
  uint32_t buf_size_ = 0;
  uint64_t buf_offset_ = 0;
};

class RecordOp : public RecordFetch {
 public:
  void Start();

 protected:
  struct Candidate {
    IndexEntry entry;
    uint64_t block_salt;  // names its block's incarnation when the entry was read
  };

  // Which entries are candidates: a get reads live ones first and looks at
  // tombstones only when a live one could not be read (to tell "deleted" from
  // "damaged"); an update reads them all.
  enum class Scope : uint8_t { kGet, kUpdate };
  RecordOp(WorkerImpl* w, std::string_view key, Scope scope);
  virtual ~RecordOp() = default;

  // (Re)reads the index and the candidates.
  void Lookup();
  // Runs `fn` now, or posted when still inside Start() (so that no callback
  // runs inside the caller's own call).
  void Complete(void (RecordOp::*fn)());
  UnixSeconds now() const { return now_; }

  virtual void OnLookedUp() {}
  // Lets a subclass supply candidate `c`'s bytes without a read: it then
  // calls OnFetched itself and returns true.
  virtual bool UseFetched(const Candidate& /*c*/) { return false; }
  // The record of `c` holds the key.
  virtual void OnMatch(Record record, RecordKind kind, const Candidate& c) = 0;
  // No candidate holds the key. `damaged` counts candidates that failed
  // validation (whose key is therefore unknown).
  virtual void OnNoMatch(uint32_t damaged) = 0;
  virtual void OnFailure(Status s) = 0;

  std::string_view key() const { return {key_data_, key_size_}; }

  Digest digest_;
  uint32_t partition_;
  uint32_t tag_;
  SmallVector<Candidate, 2> candidates_;

 private:
  void ReadNext();
  bool Moved(const Candidate& c);

 protected:
  void OnFetched(uint8_t* storage, size_t storage_size, const uint8_t* rec) override;
  void OnFetchFailed(Status s) override { OnFailure(std::move(s)); }

 private:
  const Scope scope_;
  uint32_t damaged_ = 0;
  size_t live_candidates_ = 0;  // get: candidates_ starts with these
  bool in_start_ = false;
  size_t next_ = 0;
  uint32_t restarts_ = 0;
  UnixSeconds now_ = 0;
  // The key: inline when short (almost always), else on the heap.
  static constexpr size_t kInlineKey = 48;
  char key_inline_[kInlineKey];
  std::unique_ptr<char[]> key_heap_;
  const char* key_data_;
  uint32_t key_size_;
};

class GetOp final : public RecordOp {
 public:
  GetOp(WorkerImpl* w, std::string_view key, GetCallback done);

 private:
  void OnMatch(Record record, RecordKind kind, const Candidate& c) override;
  void OnNoMatch(uint32_t damaged) override;
  void OnFailure(Status s) override;
  void Deliver();

  GetCallback done_;
  std::optional<Result<Record>> result_;
};

// Reads the record at a place found in the index (Store::FindDue), whatever
// its key: NotFound when another record, or nothing valid, lies there now.
class ReadAtOp final : public RecordFetch {
 public:
  ReadAtOp(WorkerImpl* w, const RecordRef& ref, GetCallback done);
  // UpdateAt: once read, hand the record to an update of its key.
  ReadAtOp(WorkerImpl* w, const RecordRef& ref, UpdateFn fn, WriteCallback done);
  void Start();

 private:
  void OnFetched(uint8_t* storage, size_t storage_size, const uint8_t* rec) override;
  void OnFetchFailed(Status s) override;
  void Deliver();

  RecordRef ref_;
  GetCallback done_;
  UpdateFn update_fn_;         // UpdateAt only
  WriteCallback update_done_;  // UpdateAt only
  std::optional<Result<Record>> result_;
  // Set only while Start() runs: its flag saying the op ended (and was
  // deleted) inside it, so that Start touches nothing more.
  bool* ended_in_start_ = nullptr;
};

class UpdateOp final : public RecordOp {
 public:
  UpdateOp(WorkerImpl* w, std::string_view key, UpdateFn fn, WriteCallback done);
  // A record of this key already fetched from (ref.offset, ref.block_salt):
  // used instead of reading it again if the index still points there.
  // Takes `storage` (a read buffer of `storage_size` bytes holding it at `rec`).
  void GiveFetched(const RecordRef& ref, uint8_t* storage, size_t storage_size, const uint8_t* rec);

 private:
  void OnLookedUp() override;
  void OnMatch(Record record, RecordKind kind, const Candidate& c) override;
  void OnNoMatch(uint32_t damaged) override;
  void OnFailure(Status s) override;
  ~UpdateOp() override;
  void Decide(const Record* current);
  // Applies `m` under the partition lock. False when the key changed since it
  // was read (the caller retries).
  bool Apply(const Mutation& m, const Record* current, BlockWriter::Slot* slot);
  bool SnapshotHolds(const PartitionTable& table) const;
  void Retry();
  void Deliver();
  void Fail();

  bool UseFetched(const Candidate& c) override;

  UpdateFn fn_;
  WriteCallback done_;
  struct Fetched {
    RecordRef ref;
    uint8_t* storage;
    size_t storage_size;
    const uint8_t* rec;
  };
  std::optional<Fetched> fetched_;
  // The tag's entries as read: (offset, salt of the block incarnation). The
  // salt makes a block freed and reused in between, with a newer version at
  // the very same offset, count as a change.
  std::vector<std::pair<uint64_t, uint64_t>> snapshot_;
  std::optional<Candidate> matched_;
  uint32_t damaged_seen_ = 0;  // damaged candidates at the last lookup
  WriteOutcome outcome_;
  Status failure_;
};

}  // namespace segstore::storage
