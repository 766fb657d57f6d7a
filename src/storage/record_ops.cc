#include "storage/record_ops.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/coding.h"
#include "storage/read_buffers.h"
#include "storage/store_impl.h"
#include "storage/worker_impl.h"

namespace segstore::storage {

// Builds the public Record from a validated record view; friend of Record.
class RecordBuilder {
 public:
  // `storage` is a read buffer of `size` bytes holding the record.
  static Record Make(uint8_t* storage, size_t size, const RecordView& v) {
    Record r;
    r.storage_ = std::unique_ptr<void, RecordBytesReleaser>(
        storage, RecordBytesReleaser{&ReleaseReadBuffer, size});
    r.key_ = v.key;
    r.body_ = v.body;
    r.generation_ = v.header.generation;
    r.version_ = v.header.version;
    r.last_update_ = v.header.last_update;
    r.sweep_at_ = v.header.sweep_at;
    r.void_at_ = v.header.void_at;
    return r;
  }
};

namespace {

// Lookups that keep finding their entry moved give up after this many tries
// (defragmentation and writers would have to move the key each time).
constexpr uint32_t kMaxRestarts = 64;
constexpr uint32_t kMaxAttempts = 256;

bool Expired(UnixSeconds void_at, UnixSeconds now) { return void_at != 0 && void_at <= now; }

}  // namespace

// ---------------------------------------------------------------- RecordFetch

RecordFetch::RecordFetch(WorkerImpl* w) : w_(w), store_(w->store()) {}

RecordFetch::~RecordFetch() { ReleaseReadBuffer(buf_, buf_size_); }

void RecordFetch::Fetch(uint64_t offset, uint32_t size, uint64_t salt) {
  uint32_t block = store_->BlockOf(offset);
  if (auto image = store_->blocks().PinImage(block); image && image->salt == salt) {
    // Still in a write block in memory: copy it out; no device read.
    w_->counters().Bump(w_->counters().memory_reads);
    uint8_t* copy = AcquireReadBuffer(size);
    std::memcpy(copy, image->bytes.data() + (offset - store_->BlockOffset(block)), size);
    OnFetched(copy, size, copy);
    return;
  }
  offset_ = offset;
  uint64_t start = AlignDown(offset, kSectorSize);
  buf_size_ = static_cast<uint32_t>(AlignUp(offset + size, kSectorSize) - start);
  buf_ = AcquireReadBuffer(buf_size_);
  buf_offset_ = start;
  w_->counters().Bump(w_->counters().device_reads);
  w_->queue()->Read(start, buf_, buf_size_, this);
}

void RecordFetch::OnIoComplete(int32_t result) {
  uint8_t* buf = std::exchange(buf_, nullptr);
  uint32_t len = buf_size_;
  if (result < 0 || static_cast<uint32_t>(result) != len) {
    ReleaseReadBuffer(buf, len);
    std::string why = result < 0 ? std::strerror(-result)
                                 : fmt::format("short read, {} of {} bytes", result, len);
    OnFetchFailed(Status::IOError(
        fmt::format("read at offset {} of {}: {}", buf_offset_, store_->device().name(), why)));
    return;
  }
  OnFetched(buf, len, buf + (offset_ - buf_offset_));
}

// ---------------------------------------------------------------- RecordOp

RecordOp::RecordOp(WorkerImpl* w, std::string_view key, Scope scope)
    : RecordFetch(w),
      digest_(store_->DigestOf(key)),
      partition_(Index::PartitionOf(digest_)),
      tag_(Index::TagOf(digest_)),
      scope_(scope),
      key_size_(static_cast<uint32_t>(key.size())) {
  char* dst = key_inline_;
  if (key.size() > kInlineKey) {
    key_heap_ = std::make_unique<char[]>(key.size());
    dst = key_heap_.get();
  }
  std::memcpy(dst, key.data(), key.size());
  key_data_ = dst;
}

void RecordOp::Start() {
  w_->OpStarted();
  in_start_ = true;
  Lookup();
  in_start_ = false;
}

void RecordOp::Complete(void (RecordOp::*fn)()) {
  if (in_start_) {
    w_->Post([this, fn] { (this->*fn)(); });
  } else {
    (this->*fn)();
  }
}

void RecordOp::Lookup() {
  candidates_.clear();
  next_ = 0;
  damaged_ = 0;
  now_ = store_->clock().Now();
  {
    Index::Locked table = store_->index().Lock(partition_);
    auto add = [&](const IndexEntry& e) {
      candidates_.push_back(Candidate{e, store_->blocks().salt(store_->BlockOf(e.offset()))});
    };
    if (scope_ == Scope::kUpdate) {
      table->ForEachWithTag(tag_, add);
    } else {
      table->ForEachWithTag(tag_, [&](const IndexEntry& e) {
        if (e.live() && !Expired(e.void_at(), now_)) add(e);
      });
      live_candidates_ = candidates_.size();
      table->ForEachWithTag(tag_, [&](const IndexEntry& e) {
        if (!e.live() || Expired(e.void_at(), now_)) add(e);
      });
    }
  }
  OnLookedUp();
  ReadNext();
}

void RecordOp::ReadNext() {
  // A get reads the dead candidates only to explain a damaged live one.
  size_t end = scope_ == Scope::kGet && damaged_ == 0 ? live_candidates_ : candidates_.size();
  if (next_ >= end) {
    OnNoMatch(damaged_);
    return;
  }
  const Candidate& c = candidates_[next_];
  if (UseFetched(c)) return;
  Fetch(c.entry.offset(), c.entry.size(), c.block_salt);
}

bool RecordOp::Moved(const Candidate& c) {
  Index::Locked table = store_->index().Lock(partition_);
  IndexEntry* e = table->Find(tag_, c.entry.offset());
  return e == nullptr || store_->blocks().salt(store_->BlockOf(c.entry.offset())) != c.block_salt;
}

void RecordOp::OnFetched(uint8_t* storage, size_t storage_size, const uint8_t* rec) {
  const Candidate c = candidates_[next_];
  Result<RecordView> v = DecodeRecord(rec, c.entry.size(), c.block_salt);
  if (v.ok() && v->footprint != c.entry.size()) {
    v = Status::Corruption(
        fmt::format("record is {} bytes, the index says {}", v->footprint, c.entry.size()));
  }
  if (!v.ok()) {
    ReleaseReadBuffer(storage, storage_size);
    if (Moved(c)) {
      // Defragmentation or a newer write moved the key while we read: again.
      if (++restarts_ > kMaxRestarts) {
        OnFailure(Status::Busy("the key kept moving while being read; try again"));
      } else {
        Lookup();
      }
      return;
    }
    // Damaged: its key is unknown. Another candidate may still hold ours.
    ++damaged_;
    w_->counters().Bump(w_->counters().corruptions);
    spdlog::error("{}", v.status()
                            .WithContext(fmt::format(
                                "record at offset {} (write block {}) of {}", c.entry.offset(),
                                store_->BlockOf(c.entry.offset()), store_->device().name()))
                            .ToString());
    ++next_;
    ReadNext();
    return;
  }
  if (v->key != key()) {  // another key with the same tag
    ReleaseReadBuffer(storage, storage_size);
    ++next_;
    ReadNext();
    return;
  }
  RecordKind kind = v->header.kind;
  OnMatch(RecordBuilder::Make(storage, storage_size, *v), kind, c);
}

// ---------------------------------------------------------------- GetOp

GetOp::GetOp(WorkerImpl* w, std::string_view key, GetCallback done)
    : RecordOp(w, key, Scope::kGet), done_(std::move(done)) {}

void GetOp::OnMatch(Record record, RecordKind kind, const Candidate& c) {
  if (kind != RecordKind::kPut || !c.entry.live() || Expired(record.void_at(), now())) {
    result_.emplace(Status::NotFound("key not found"));
  } else {
    result_.emplace(std::move(record));
  }
  Complete(static_cast<void (RecordOp::*)()>(&GetOp::Deliver));
}

void GetOp::OnNoMatch(uint32_t damaged) {
  if (damaged > 0) {
    result_.emplace(Status::Corruption(
        "the key's record is damaged on the device (see the server log for where)"));
  } else {
    result_.emplace(Status::NotFound("key not found"));
  }
  Complete(static_cast<void (RecordOp::*)()>(&GetOp::Deliver));
}

void GetOp::OnFailure(Status s) {
  result_.emplace(std::move(s));
  Complete(static_cast<void (RecordOp::*)()>(&GetOp::Deliver));
}

void GetOp::Deliver() {
  w_->counters().Bump(w_->counters().gets);
  done_(std::move(*result_));
  w_->OpDone();
  delete this;
}

// ---------------------------------------------------------------- ReadAtOp

ReadAtOp::ReadAtOp(WorkerImpl* w, const RecordRef& ref, GetCallback done)
    : RecordFetch(w), ref_(ref), done_(std::move(done)) {}

ReadAtOp::ReadAtOp(WorkerImpl* w, const RecordRef& ref, UpdateFn fn, WriteCallback done)
    : RecordFetch(w), ref_(ref), update_fn_(std::move(fn)), update_done_(std::move(done)) {}

void ReadAtOp::Start() {
  w_->OpStarted();
  bool ended = false;
  ended_in_start_ = &ended;
  Fetch(ref_.offset, ref_.size, ref_.block_salt);
  if (ended) return;  // an UpdateAt found its record in memory: this op is gone
  ended_in_start_ = nullptr;
}

void ReadAtOp::OnFetched(uint8_t* storage, size_t storage_size, const uint8_t* rec) {
  Result<RecordView> v = DecodeRecord(rec, ref_.size, ref_.block_salt);
  bool valid = v.ok() && v->footprint == ref_.size && v->header.kind == RecordKind::kPut;
  if (valid && update_fn_) {
    // UpdateAt: go on as an update of the key found there, from this copy.
    auto* op = new UpdateOp(w_, v->key, std::move(update_fn_), std::move(update_done_));
    op->GiveFetched(ref_, storage, storage_size, rec);
    op->Start();
    w_->OpDone();
    if (ended_in_start_ != nullptr) *ended_in_start_ = true;
    delete this;
    return;
  }
  if (!valid) {
    ReleaseReadBuffer(storage, storage_size);
    result_.emplace(Status::NotFound("no record there any more"));
  } else {
    result_.emplace(RecordBuilder::Make(storage, storage_size, *v));
  }
  if (ended_in_start_ != nullptr) {  // still inside Start()
    w_->Post([this] { Deliver(); });
  } else {
    Deliver();
  }
}

void ReadAtOp::OnFetchFailed(Status s) {
  result_.emplace(std::move(s));
  Deliver();
}

void ReadAtOp::Deliver() {
  if (update_done_) {
    update_done_(result_->ok() ? Status::NotFound("no record there any more") : result_->status());
  } else {
    done_(std::move(*result_));
  }
  w_->OpDone();
  delete this;
}

// ---------------------------------------------------------------- UpdateOp

UpdateOp::UpdateOp(WorkerImpl* w, std::string_view key, UpdateFn fn, WriteCallback done)
    : RecordOp(w, key, Scope::kUpdate), fn_(std::move(fn)), done_(std::move(done)) {}

UpdateOp::~UpdateOp() {
  if (fetched_) ReleaseReadBuffer(fetched_->storage, fetched_->storage_size);
}

void UpdateOp::GiveFetched(const RecordRef& ref, uint8_t* storage, size_t storage_size,
                           const uint8_t* rec) {
  fetched_ = Fetched{ref, storage, storage_size, rec};
}

bool UpdateOp::UseFetched(const Candidate& c) {
  if (!fetched_ || c.entry.offset() != fetched_->ref.offset ||
      c.block_salt != fetched_->ref.block_salt) {
    return false;
  }
  Fetched f = *fetched_;
  fetched_.reset();  // ownership passes on; a retry reads afresh
  OnFetched(f.storage, f.storage_size, f.rec);
  return true;
}

void UpdateOp::OnLookedUp() {
  snapshot_.clear();
  for (const Candidate& c : candidates_) snapshot_.emplace_back(c.entry.offset(), c.block_salt);
  std::sort(snapshot_.begin(), snapshot_.end());
}

void UpdateOp::OnMatch(Record record, RecordKind kind, const Candidate& c) {
  matched_ = c;
  damaged_seen_ = 0;
  bool alive = kind == RecordKind::kPut && c.entry.live() && !Expired(record.void_at(), now());
  Decide(alive ? &record : nullptr);
}

void UpdateOp::OnNoMatch(uint32_t damaged) {
  // A damaged candidate might have been this key: write as if it were absent
  // (a delete still writes its tombstone, in case it was).
  matched_.reset();
  damaged_seen_ = damaged;
  Decide(nullptr);
}

void UpdateOp::OnFailure(Status s) {
  failure_ = std::move(s);
  Complete(static_cast<void (RecordOp::*)()>(&UpdateOp::Fail));
}

bool UpdateOp::SnapshotHolds(const PartitionTable& table) const {
  std::vector<std::pair<uint64_t, uint64_t>> now_entries;
  table.ForEachWithTag(tag_, [&](const IndexEntry& e) {
    now_entries.emplace_back(e.offset(), store_->blocks().salt(store_->BlockOf(e.offset())));
  });
  std::sort(now_entries.begin(), now_entries.end());
  return now_entries == snapshot_;
}

void UpdateOp::Decide(const Record* current) {
  Result<Mutation> m = Status::Internal("update function did not run");
  try {
    m = fn_(current);
  } catch (const std::exception& e) {
    m = Status::Internal(fmt::format("update function threw: {}", e.what()));
  }
  if (!m.ok()) {
    OnFailure(m.status());
    return;
  }
  Mutation& mut = *m;
  if (mut.kind == Mutation::Kind::kPut && mut.body.size() > store_->max_body_size()) {
    OnFailure(Status::InvalidArgument(fmt::format("body of {} bytes is over the limit of {}",
                                                  mut.body.size(), store_->max_body_size())));
    return;
  }
  if (mut.kind == Mutation::Kind::kKeep ||
      (mut.kind == Mutation::Kind::kDelete && current == nullptr && damaged_seen_ == 0)) {
    outcome_.applied = Mutation::Kind::kKeep;
    Complete(static_cast<void (RecordOp::*)()>(&UpdateOp::Deliver));
    return;
  }
  uint32_t footprint =
      RecordFootprint(static_cast<uint32_t>(key().size()), static_cast<uint32_t>(mut.body.size()));
  BlockTable::Purpose purpose = mut.kind == Mutation::Kind::kDelete ? BlockTable::Purpose::kDelete
                                                                    : BlockTable::Purpose::kWrite;
  if (Status s = w_->writer().Reserve(footprint, purpose); !s.ok()) {
    OnFailure(std::move(s));
    return;
  }
  BlockWriter::Slot slot;
  if (!Apply(mut, current, &slot)) {
    Retry();
    return;
  }
  w_->counters().Bump(w_->counters().writes);
  bool commit = mut.kind == Mutation::Kind::kDelete || w_->durability() == Durability::kCommit;
  if (commit) {
    w_->writer().WhenDurable(slot, [this](Status s) {
      if (s.ok()) {
        Deliver();
      } else {
        failure_ = std::move(s);
        Fail();
      }
    });
  } else {
    w_->writer().FlushWithinInterval();
    Complete(static_cast<void (RecordOp::*)()>(&UpdateOp::Deliver));
  }
}

bool UpdateOp::Apply(const Mutation& m, const Record* current, BlockWriter::Slot* slot) {
  Index::Locked table = store_->index().Lock(partition_);
  if (!SnapshotHolds(*table)) return false;
  BlockTable& blocks = store_->blocks();
  bool is_delete = m.kind == Mutation::Kind::kDelete;
  RecordHeader h;
  h.kind = is_delete ? RecordKind::kTombstone : RecordKind::kPut;
  h.key_len = static_cast<uint16_t>(key().size());
  h.body_len = is_delete ? 0 : static_cast<uint32_t>(m.body.size());
  h.generation = current != nullptr ? current->generation() + 1 : 1;
  h.version = store_->NextSeq();
  h.last_update = now();
  h.sweep_at = is_delete ? 0 : m.sweep_at;
  h.void_at = is_delete ? 0 : m.void_at;
  uint32_t footprint = RecordFootprint(h.key_len, h.body_len);
  *slot = w_->writer().Append(footprint, h.version);
  EncodeRecord(h, key(), is_delete ? std::string_view() : std::string_view(m.body),
               slot->block_salt, slot->dst);
  IndexEntry e = is_delete ? IndexEntry::Tombstone(tag_, slot->offset, footprint, h.version)
                           : IndexEntry::Live(tag_, slot->offset, footprint, h.sweep_at, h.void_at);
  if (matched_) {
    // As it is now, not as read: the index sweep may have turned it into a
    // tombstone meanwhile (same place, so the snapshot still holds).
    const IndexEntry old = *table->Find(tag_, matched_->entry.offset());
    table->Replace(tag_, old.offset(), e);
    blocks.AddLive(store_->BlockOf(old.offset()), -int64_t{AccountedBytes(old)});
  } else {
    table->Insert(e);
  }
  blocks.AddLive(store_->BlockOf(slot->offset), AccountedBytes(e));
  outcome_.applied = m.kind;
  outcome_.generation = h.generation;
  outcome_.version = h.version;
  return true;
}

void UpdateOp::Retry() {
  w_->counters().Bump(w_->counters().update_retries);
  if (++outcome_.attempts > kMaxAttempts) {
    OnFailure(Status::Busy(fmt::format(
        "gave up after {} attempts: other writers kept changing the key", kMaxAttempts)));
    return;
  }
  Lookup();
}

void UpdateOp::Deliver() {
  done_(outcome_);
  w_->OpDone();
  delete this;
}

void UpdateOp::Fail() {
  done_(std::move(failure_));
  w_->OpDone();
  delete this;
}

}  // namespace segstore::storage
