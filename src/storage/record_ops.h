// The engine's operations on records. Each is one object, alive from Start()
// to its callback, on the worker's thread, and reads as its steps in the
// order they happen; a step that waits for the device returns, and the
// completion (OnIoComplete) goes on with the next one.
//
//   GetOp     the newest version of a key: look up, read candidates until one
//             holds the key, answer.
//   UpdateOp  the read-modify-write behind every put and delete: the same
//             search, then the caller's function, then a compare-and-set
//             write (on a conflict, search again), then wait until durable.
//             Started from a place (UpdateAt) it first reads the record
//             there to learn the key.
//   ReadAtOp  the record at a known place, whatever its key (GetAt).
//   PairOp    a key's GetOp and the GetOp of the key its record names
//             (GetWithReference), started together when the index knows the
//             reference.
//
// Two parts they share, as members:
//   RecordRead  the bytes of one record at a known place: copied from its
//               write block while the block is in memory, else one device
//               read of the sectors covering it, into a pooled buffer.
//   KeySearch   which index entries may hold a key (copied under the
//               partition lock, then the lock is let go), and the verdict on
//               each record read: the key, another key with the same tag,
//               damaged, or moved meanwhile by defragmentation or a newer
//               write (then the search starts over).
//
// An op never calls its callback inside the call that started it (the
// caller may be in the middle of a loop): an op that ends there has its
// callback posted. It deletes itself after its callback.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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

class RecordRead {
 public:
  RecordRead() = default;
  RecordRead(const RecordRead&) = delete;
  RecordRead& operator=(const RecordRead&) = delete;
  ~RecordRead() { Release(); }

  // Starts reading the `size` bytes at device `offset` of the block
  // incarnation `salt` (dropping any record held). True when they are here
  // at once (the block is in memory); false when a device read is in flight:
  // `done` is then called with its result, to be passed to Finish().
  bool Start(WorkerImpl* w, uint64_t offset, uint32_t size, uint64_t salt, IoCompletion* done);
  // The device read ended with `result`: OK, or IOError naming the place.
  Status Finish(int32_t result, StoreImpl& store);
  // Holds the record at (offset, salt), read and not yet handed on.
  bool Holds(uint64_t offset, uint64_t salt) const {
    return storage_ != nullptr && offset == offset_ && salt == salt_;
  }
  // The record's bytes, once read.
  const uint8_t* record() const { return rec_; }
  uint32_t size() const { return size_; }
  uint64_t salt() const { return salt_; }
  // A Record that owns the bytes read (no copy); `v` is their validated view.
  Record Take(const RecordView& v);
  void Release();

 private:
  uint8_t* storage_ = nullptr;  // a pooled read buffer, storage_size_ bytes
  uint32_t storage_size_ = 0;
  const uint8_t* rec_ = nullptr;  // the record within it
  uint64_t offset_ = 0;
  uint32_t size_ = 0;
  uint64_t salt_ = 0;
  uint64_t read_at_ = 0;  // the device offset of storage_[0]
};

class KeySearch {
 public:
  struct Candidate {
    IndexEntry entry;
    uint64_t block_salt;  // names its block's incarnation when the entry was read
  };
  // A get reads live entries first and looks at tombstones only when a live
  // one could not be read (to tell "deleted" from "damaged"); an update
  // reads them all.
  enum class Scope : uint8_t { kGet, kUpdate };
  KeySearch(WorkerImpl* w, Scope scope) : w_(w), scope_(scope) {}
  // The key: set once, before the first Lookup.
  void SetKey(std::string_view key);

  // (Re)reads the key's index entries, and the clock.
  void Lookup();
  // The next candidate to read; null when none is left.
  const Candidate* Next();
  enum class Verdict : uint8_t {
    kFound,  // the key's record: *view describes it
    kNext,   // another key with the same tag, or damaged (counted, logged): on to the next
    kMoved,  // fails validation because its entry moved while it was read: look up again
  };
  // Judges `read`, the bytes of the candidate Next() gave last; lets go of
  // them unless kFound.
  Verdict Check(RecordRead* read, RecordView* view);
  // After kMoved: OK to look up again, or Busy once the key kept moving
  // too often.
  Status CountRestart();

  const Candidate& current() const { return candidates_[next_ - 1]; }
  const SmallVector<Candidate, 2>& candidates() const { return candidates_; }
  // Candidates that failed validation since the last Lookup.
  uint32_t damaged() const { return damaged_; }
  // The current candidate's record, `v`, is alive: a put, indexed live, not
  // past its void_at.
  bool Alive(const RecordView& v) const;
  std::string_view key() const { return {key_data_, key_size_}; }
  // A get's lookup: the reference of the first live linked candidate
  // (index.h); empty when none is linked, as for nearly every key.
  std::string_view reference() const { return reference_; }
  uint32_t partition() const { return partition_; }
  uint32_t tag() const { return tag_; }
  UnixSeconds now() const { return now_; }
  // From now on, "now" is `as_of` (non-zero) instead of the store's clock.
  void SetAsOf(UnixSeconds as_of) { as_of_ = as_of; }

 private:
  WorkerImpl* w_;
  const Scope scope_;
  uint32_t partition_ = 0;
  uint32_t tag_ = 0;
  SmallVector<Candidate, 2> candidates_;
  size_t live_candidates_ = 0;  // get: candidates_ starts with these
  size_t next_ = 0;
  uint32_t damaged_ = 0;
  uint32_t restarts_ = 0;
  UnixSeconds now_ = 0;
  UnixSeconds as_of_ = 0;  // 0: the store's clock
  std::string reference_;
  // The key: inline when short (almost always), else on the heap.
  static constexpr size_t kInlineKey = 48;
  char key_inline_[kInlineKey];
  std::unique_ptr<char[]> key_heap_;
  const char* key_data_ = key_inline_;
  uint32_t key_size_ = 0;
};

// What every op shares: its worker, and its end: `done` called exactly once,
// never inside Start, then the op deleted.
template <typename Value>
class Op : public IoCompletion {
 public:
  using Callback = std::function<void(Result<Value>)>;

 protected:
  Op(WorkerImpl* w, Callback done);
  virtual ~Op() = default;
  // Runs the op's first steps, `steps`, counted as an op of the worker.
  template <typename Steps>
  void Begin(Steps steps);
  // Ends the op with `r`: its callback runs now, or just after Start when
  // still inside it; then the op is deleted (touch nothing after this).
  void Finish(Result<Value> r);

  WorkerImpl* const w_;
  StoreImpl* const store_;

 private:
  void Deliver();

  Callback done_;
  std::optional<Result<Value>> result_;
  bool starting_ = false;
};

class GetOp final : public Op<Record> {
 public:
  GetOp(WorkerImpl* w, std::string_view key, Callback done);
  // Called inside Start, once the index is looked up and before anything is
  // read, with the reference the index holds for the key (if it does).
  void OnReference(std::function<void(std::string_view)> f) { on_reference_ = std::move(f); }
  void Start();

 private:
  // 1. The next candidate: its bytes from memory, or a device read.
  void ReadNext();
  void OnIoComplete(int32_t result) override;
  // 2. The key's record? True when the op has ended.
  bool Judge();

  KeySearch search_;
  RecordRead read_;
  std::function<void(std::string_view)> on_reference_;
};

// Not an Op of its own: its two GetOps are, and it ends with the last of them.
class PairOp {
 public:
  PairOp(WorkerImpl* w, std::string_view key, GetPairCallback done);
  void Start();

 private:
  // Starts the read of `reference` (the key's record names it).
  void Follow(std::string_view reference);
  void OnRecord(Result<Record> r);
  void OnReferenced(Result<Record> r);
  // Both in: answers, or follows the record's own reference when the one
  // followed was another (a tag shared with a linked key, or a write
  // between the lookup and the read).
  void MaybeDone();

  WorkerImpl* const w_;
  const std::string key_;
  GetPairCallback done_;
  std::optional<Result<Record>> record_;
  std::optional<Result<Record>> referenced_;
  std::string followed_;  // the key whose read was started last
  int pending_ = 0;       // GetOps started and not yet answered
  bool starting_ = false;
};

class ReadAtOp final : public Op<Record> {
 public:
  ReadAtOp(WorkerImpl* w, const RecordRef& ref, Callback done);
  void Start();

 private:
  void OnIoComplete(int32_t result) override;
  void Judge();

  const RecordRef ref_;
  RecordRead read_;
};

class UpdateOp final : public Op<WriteOutcome> {
 public:
  UpdateOp(WorkerImpl* w, std::string_view key, UpdateFn fn, Callback done);
  // UpdateAt: the key is the one whose record lies at `ref`.
  UpdateOp(WorkerImpl* w, const RecordRef& ref, UpdateFn fn, Callback done);
  // Judge the current version alive as of this time, not the clock's (UpdateAsOf).
  void SetAsOf(uint32_t as_of) { search_.SetAsOf(as_of); }
  void Start();

 private:
  // 0. UpdateAt only: the record at the place, for its key.
  void ReadAt();
  void KeyFromPlace();
  // 1. Look up (and, after a conflict, again): which entries may hold the key.
  void Lookup();
  // 2. The next candidate, from memory, from the copy read at the place, or
  //    a device read.
  void ReadNext();
  void OnIoComplete(int32_t result) override;
  // 3. Is `bytes` the key's record? True when the op went on (to Decide, or
  //    to look up again) or ended.
  bool Judge(RecordRead* bytes);
  // 4. The caller's function decides; make room; 5. Apply.
  void Decide(const Record* current);
  // 5. Writes `m` under the partition lock. False when the key's entries
  //    changed since they were read: back to 1.
  bool Apply(const Mutation& m, std::string_view reference, const Record* current,
             BlockWriter::Slot* slot);
  bool SnapshotHolds(const PartitionTable& table) const;

  UpdateFn fn_;
  std::optional<RecordRef> at_;  // UpdateAt: where to read first
  bool reading_at_ = false;      // the device read in flight is the one at at_
  KeySearch search_;
  // UpdateAt: the record read at at_, kept until its candidate comes up.
  RecordRead place_;
  RecordRead read_;
  // The tag's entries as looked up: (offset, salt of the block incarnation).
  // The salt makes a block freed and reused in between, with a newer version
  // at the very same offset, count as a change.
  std::vector<std::pair<uint64_t, uint64_t>> snapshot_;
  std::optional<KeySearch::Candidate> matched_;
  WriteOutcome outcome_;
};

}  // namespace segstore::storage
