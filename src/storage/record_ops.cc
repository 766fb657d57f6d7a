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
    r.reference_ = v.reference;
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

// ---------------------------------------------------------------- RecordRead

bool RecordRead::Start(WorkerImpl* w, uint64_t offset, uint32_t size, uint64_t salt,
                       IoCompletion* done) {
  Release();
  StoreImpl* store = w->store();
  offset_ = offset;
  size_ = size;
  salt_ = salt;
  const uint32_t block = store->BlockOf(offset);
  if (auto image = store->blocks().PinImage(block); image && image->salt == salt) {
    // Still in a write block in memory: copy it out; no device read.
    w->counters().Bump(w->counters().memory_reads);
    storage_ = AcquireReadBuffer(size);
    storage_size_ = size;
    std::memcpy(storage_, image->data() + (offset - store->BlockOffset(block)), size);
    rec_ = storage_;
    return true;
  }
  read_at_ = AlignDown(offset, kSectorSize);
  storage_size_ = static_cast<uint32_t>(AlignUp(offset + size, kSectorSize) - read_at_);
  storage_ = AcquireReadBuffer(storage_size_);
  rec_ = storage_ + (offset - read_at_);
  w->counters().Bump(w->counters().device_reads);
  w->queue()->Read(read_at_, storage_, storage_size_, done);
  return false;
}

Status RecordRead::Finish(int32_t result, StoreImpl& store) {
  if (result >= 0 && static_cast<uint32_t>(result) == storage_size_) return Status::OK();
  const std::string why = result < 0
                              ? std::strerror(-result)
                              : fmt::format("short read, {} of {} bytes", result, storage_size_);
  Release();
  return Status::IOError(
      fmt::format("read at offset {} of {}: {}", read_at_, store.device().name(), why));
}

Record RecordRead::Take(const RecordView& v) {
  Record r = RecordBuilder::Make(std::exchange(storage_, nullptr), storage_size_, v);
  rec_ = nullptr;
  return r;
}

void RecordRead::Release() {
  if (storage_ != nullptr) ReleaseReadBuffer(std::exchange(storage_, nullptr), storage_size_);
  rec_ = nullptr;
}

// ---------------------------------------------------------------- KeySearch

void KeySearch::SetKey(std::string_view key) {
  partition_ = Index::PartitionOf(key);
  tag_ = Index::TagOf(w_->store()->DigestOf(key));
  key_size_ = static_cast<uint32_t>(key.size());
  char* dst = key_inline_;
  if (key.size() > kInlineKey) {
    key_heap_ = std::make_unique<char[]>(key.size());
    dst = key_heap_.get();
  }
  std::memcpy(dst, key.data(), key.size());
  key_data_ = dst;
}

void KeySearch::Lookup() {
  StoreImpl* store = w_->store();
  candidates_.clear();
  next_ = 0;
  damaged_ = 0;
  reference_.clear();
  now_ = as_of_ != 0 ? as_of_ : store->clock().Now();
  Index::Locked table = store->index().Lock(partition_);
  auto add = [&](const IndexEntry& e) {
    candidates_.push_back(Candidate{e, store->blocks().salt(store->BlockOf(e.offset()))});
  };
  if (scope_ == Scope::kUpdate) {
    table->ForEachWithTag(tag_, add);
    return;
  }
  table->ForEachWithTag(tag_, [&](const IndexEntry& e) {
    if (!e.live() || Expired(e.void_at(), now_)) return;
    add(e);
    // The one test a key that is not linked pays.
    if (e.linked() && reference_.empty()) reference_ = table->Reference(e);
  });
  live_candidates_ = candidates_.size();
  table->ForEachWithTag(tag_, [&](const IndexEntry& e) {
    if (!e.live() || Expired(e.void_at(), now_)) add(e);
  });
}

const KeySearch::Candidate* KeySearch::Next() {
  // A get reads the dead candidates only to explain a damaged live one.
  const size_t end = scope_ == Scope::kGet && damaged_ == 0 ? live_candidates_ : candidates_.size();
  return next_ < end ? &candidates_[next_++] : nullptr;
}

KeySearch::Verdict KeySearch::Check(RecordRead* read, RecordView* view) {
  StoreImpl* store = w_->store();
  const Candidate& c = current();
  Result<RecordView> v = DecodeRecord(read->record(), c.entry.size(), c.block_salt);
  if (v.ok() && v->footprint != c.entry.size()) {
    v = Status::Corruption(
        fmt::format("record is {} bytes, the index says {}", v->footprint, c.entry.size()));
  }
  if (v.ok() && v->key == key()) {
    *view = *v;
    return Verdict::kFound;
  }
  read->Release();
  if (v.ok()) return Verdict::kNext;  // another key with the same tag
  {
    Index::Locked table = store->index().Lock(partition_);
    if (table->Find(tag_, c.entry.offset()) == nullptr ||
        store->blocks().salt(store->BlockOf(c.entry.offset())) != c.block_salt) {
      return Verdict::kMoved;
    }
  }
  // Damaged: its key is unknown. Another candidate may still hold ours.
  ++damaged_;
  w_->counters().Bump(w_->counters().corruptions);
  spdlog::error("{}", v.status()
                          .WithContext(fmt::format(
                              "record at offset {} (write block {}) of {}", c.entry.offset(),
                              store->BlockOf(c.entry.offset()), store->device().name()))
                          .ToString());
  return Verdict::kNext;
}

Status KeySearch::CountRestart() {
  if (++restarts_ <= kMaxRestarts) return Status::OK();
  return Status::Busy("the key kept moving while being read; try again");
}

bool KeySearch::Alive(const RecordView& v) const {
  return IsPut(v.header.kind) && current().entry.live() && !Expired(v.header.void_at, now_);
}

// ---------------------------------------------------------------- Op

template <typename Value>
Op<Value>::Op(WorkerImpl* w, Callback done) : w_(w), store_(w->store()), done_(std::move(done)) {}

template <typename Value>
template <typename Steps>
void Op<Value>::Begin(Steps steps) {
  w_->OpStarted();
  starting_ = true;
  steps();
  starting_ = false;
  if (result_) w_->Post([this] { Deliver(); });  // it ended inside Start
}

template <typename Value>
void Op<Value>::Finish(Result<Value> r) {
  result_.emplace(std::move(r));
  if (!starting_) Deliver();
}

template <typename Value>
void Op<Value>::Deliver() {
  done_(std::move(*result_));
  w_->OpDone();
  delete this;
}

template class Op<Record>;
template class Op<WriteOutcome>;

// ---------------------------------------------------------------- GetOp

GetOp::GetOp(WorkerImpl* w, std::string_view key, Callback done)
    : Op(w, std::move(done)), search_(w, KeySearch::Scope::kGet) {
  search_.SetKey(key);
}

void GetOp::Start() {
  w_->counters().Bump(w_->counters().gets);
  Begin([this] {
    search_.Lookup();
    if (on_reference_ && !search_.reference().empty()) on_reference_(search_.reference());
    ReadNext();
  });
}

void GetOp::ReadNext() {
  while (const KeySearch::Candidate* c = search_.Next()) {
    if (!read_.Start(w_, c->entry.offset(), c->entry.size(), c->block_salt, this)) return;
    if (Judge()) return;
  }
  if (search_.damaged() > 0) {
    Finish(Status::Corruption(
        "the key's record is damaged on the device (see the server log for where)"));
  } else {
    Finish(Status::NotFound("key not found"));
  }
}

void GetOp::OnIoComplete(int32_t result) {
  if (Status s = read_.Finish(result, *store_); !s.ok()) {
    Finish(std::move(s));
    return;
  }
  if (!Judge()) ReadNext();
}

bool GetOp::Judge() {
  RecordView v;
  switch (search_.Check(&read_, &v)) {
    case KeySearch::Verdict::kFound:
      if (search_.Alive(v)) {
        Finish(read_.Take(v));
      } else {
        Finish(Status::NotFound("key not found"));
      }
      return true;
    case KeySearch::Verdict::kNext:
      return false;
    case KeySearch::Verdict::kMoved:
      // Defragmentation or a newer write moved the key while it was read.
      if (Status s = search_.CountRestart(); !s.ok()) {
        Finish(std::move(s));
        return true;
      }
      search_.Lookup();
      return false;
  }
  return false;
}

// ---------------------------------------------------------------- PairOp

PairOp::PairOp(WorkerImpl* w, std::string_view key, GetPairCallback done)
    : w_(w), key_(key), done_(std::move(done)) {}

void PairOp::Start() {
  auto* op = new GetOp(w_, key_, [this](Result<Record> r) { OnRecord(std::move(r)); });
  op->OnReference([this](std::string_view reference) { Follow(reference); });
  ++pending_;
  starting_ = true;
  op->Start();
  starting_ = false;
}

void PairOp::Follow(std::string_view reference) {
  followed_.assign(reference);
  referenced_.reset();
  ++pending_;
  if (Status s = w_->CheckKey(reference); !s.ok()) {
    // Written only through Update, which checks it: damage in memory at worst.
    w_->OpStarted();
    w_->Post([this, s = std::move(s)] {
      OnReferenced(s.WithContext("the record's reference"));
      w_->OpDone();
    });
    return;
  }
  (new GetOp(w_, followed_, [this](Result<Record> r) { OnReferenced(std::move(r)); }))->Start();
  // Inside Start the key's own read is still to be queued: the caller submits both.
  if (!starting_) w_->MaybeSubmit();
}

void PairOp::OnRecord(Result<Record> r) {
  record_.emplace(std::move(r));
  --pending_;
  MaybeDone();
}

void PairOp::OnReferenced(Result<Record> r) {
  referenced_.emplace(std::move(r));
  --pending_;
  MaybeDone();
}

void PairOp::MaybeDone() {
  if (pending_ > 0) return;
  const std::string_view wanted = record_->ok() ? (*record_)->reference() : std::string_view();
  if (!wanted.empty() && (!referenced_ || wanted != followed_)) {
    Follow(wanted);
    return;
  }
  Result<Record> referenced =
      wanted.empty() ? Result<Record>(Status::NotFound("no reference")) : std::move(*referenced_);
  done_(std::move(*record_), std::move(referenced));
  delete this;
}

// ---------------------------------------------------------------- ReadAtOp

ReadAtOp::ReadAtOp(WorkerImpl* w, const RecordRef& ref, Callback done)
    : Op(w, std::move(done)), ref_(ref) {}

void ReadAtOp::Start() {
  Begin([this] {
    if (read_.Start(w_, ref_.offset, ref_.size, ref_.block_salt, this)) Judge();
  });
}

void ReadAtOp::OnIoComplete(int32_t result) {
  if (Status s = read_.Finish(result, *store_); !s.ok()) {
    Finish(std::move(s));
    return;
  }
  Judge();
}

void ReadAtOp::Judge() {
  Result<RecordView> v = DecodeRecord(read_.record(), ref_.size, ref_.block_salt);
  if (v.ok() && v->footprint == ref_.size && IsPut(v->header.kind)) {
    Finish(read_.Take(*v));
  } else {
    Finish(Status::NotFound("no record there any more"));
  }
}

// ---------------------------------------------------------------- UpdateOp

UpdateOp::UpdateOp(WorkerImpl* w, std::string_view key, UpdateFn fn, Callback done)
    : Op(w, std::move(done)), fn_(std::move(fn)), search_(w, KeySearch::Scope::kUpdate) {
  search_.SetKey(key);
}

UpdateOp::UpdateOp(WorkerImpl* w, const RecordRef& ref, UpdateFn fn, Callback done)
    : Op(w, std::move(done)), fn_(std::move(fn)), at_(ref), search_(w, KeySearch::Scope::kUpdate) {}

void UpdateOp::Start() {
  Begin([this] {
    if (at_) {
      ReadAt();
    } else {
      Lookup();
    }
  });
}

void UpdateOp::ReadAt() {
  reading_at_ = true;
  if (place_.Start(w_, at_->offset, at_->size, at_->block_salt, this)) KeyFromPlace();
}

void UpdateOp::KeyFromPlace() {
  reading_at_ = false;
  Result<RecordView> v = DecodeRecord(place_.record(), at_->size, at_->block_salt);
  if (!v.ok() || v->footprint != at_->size || !IsPut(v->header.kind)) {
    Finish(Status::NotFound("no record there any more"));
    return;
  }
  search_.SetKey(v->key);
  Lookup();
}

void UpdateOp::Lookup() {
  search_.Lookup();
  snapshot_.clear();
  for (const KeySearch::Candidate& c : search_.candidates()) {
    snapshot_.emplace_back(c.entry.offset(), c.block_salt);
  }
  std::sort(snapshot_.begin(), snapshot_.end());
  ReadNext();
}

void UpdateOp::ReadNext() {
  while (const KeySearch::Candidate* c = search_.Next()) {
    RecordRead* bytes = &read_;
    if (place_.Holds(c->entry.offset(), c->block_salt)) {
      bytes = &place_;  // read already, at the place UpdateAt started from
    } else if (!read_.Start(w_, c->entry.offset(), c->entry.size(), c->block_salt, this)) {
      return;
    }
    if (Judge(bytes)) return;
  }
  // No candidate holds the key. A damaged one might have been it: write as
  // if it were absent (a delete still writes its tombstone, in case it was).
  matched_.reset();
  Decide(nullptr);
}

void UpdateOp::OnIoComplete(int32_t result) {
  RecordRead& done = reading_at_ ? place_ : read_;
  if (Status s = done.Finish(result, *store_); !s.ok()) {
    Finish(std::move(s));
    return;
  }
  if (reading_at_) {
    KeyFromPlace();
  } else if (!Judge(&read_)) {
    ReadNext();
  }
}

bool UpdateOp::Judge(RecordRead* bytes) {
  RecordView v;
  switch (search_.Check(bytes, &v)) {
    case KeySearch::Verdict::kFound: {
      matched_ = search_.current();
      const bool alive = search_.Alive(v);
      const Record r = bytes->Take(v);
      Decide(alive ? &r : nullptr);
      return true;
    }
    case KeySearch::Verdict::kNext:
      return false;
    case KeySearch::Verdict::kMoved:
      if (Status s = search_.CountRestart(); !s.ok()) {
        Finish(std::move(s));
        return true;
      }
      Lookup();  // the snapshot too
      return true;
  }
  return false;
}

bool UpdateOp::SnapshotHolds(const PartitionTable& table) const {
  std::vector<std::pair<uint64_t, uint64_t>> now_entries;
  table.ForEachWithTag(search_.tag(), [&](const IndexEntry& e) {
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
    Finish(m.status());
    return;
  }
  Mutation& mut = *m;
  // The reference written: the mutation's, or the current version's kept.
  const std::string_view reference = mut.kind != Mutation::Kind::kPut ? std::string_view()
                                     : mut.reference      ? std::string_view(*mut.reference)
                                     : current != nullptr ? current->reference()
                                                          : std::string_view();
  if (reference.size() > store_->max_key_size()) {
    Finish(Status::InvalidArgument(fmt::format("reference of {} bytes is over the key limit of {}",
                                               reference.size(), store_->max_key_size())));
    return;
  }
  const uint32_t stored_body = StoredBodySize(reference.size(), mut.body.size());
  if (mut.kind == Mutation::Kind::kPut && stored_body > store_->max_body_size()) {
    Finish(Status::InvalidArgument(fmt::format("body of {} bytes is over the limit of {}",
                                               stored_body, store_->max_body_size())));
    return;
  }
  const bool damaged = !matched_ && search_.damaged() > 0;
  if (mut.kind == Mutation::Kind::kKeep ||
      (mut.kind == Mutation::Kind::kDelete && current == nullptr && !damaged)) {
    outcome_.applied = Mutation::Kind::kKeep;
    Finish(outcome_);
    return;
  }
  const uint32_t footprint =
      RecordFootprint(static_cast<uint32_t>(search_.key().size()), stored_body);
  const BlockTable::Purpose purpose = mut.kind == Mutation::Kind::kDelete
                                          ? BlockTable::Purpose::kDelete
                                          : BlockTable::Purpose::kWrite;
  if (Status s = w_->writer().Reserve(footprint, purpose, reference.size()); !s.ok()) {
    Finish(std::move(s));
    return;
  }
  BlockWriter::Slot slot;
  if (!Apply(mut, reference, current, &slot)) {
    // Another writer got in between: read again, decide again.
    w_->counters().Bump(w_->counters().update_retries);
    if (++outcome_.attempts > kMaxAttempts) {
      Finish(Status::Busy(fmt::format(
          "gave up after {} attempts: other writers kept changing the key", kMaxAttempts)));
      return;
    }
    Lookup();
    return;
  }
  w_->counters().Bump(w_->counters().writes);
  if (mut.kind == Mutation::Kind::kDelete || w_->durability() == Durability::kCommit) {
    w_->writer().WhenDurable(slot, [this](Status s) {
      if (s.ok()) {
        Finish(outcome_);
      } else {
        Finish(std::move(s));
      }
    });
  } else {
    w_->writer().FlushWithinInterval();
    Finish(outcome_);
  }
}

bool UpdateOp::Apply(const Mutation& m, std::string_view reference, const Record* current,
                     BlockWriter::Slot* slot) {
  const uint32_t tag = search_.tag();
  Index::Locked table = store_->index().Lock(search_.partition());
  if (!SnapshotHolds(*table)) return false;
  BlockTable& blocks = store_->blocks();
  const bool is_delete = m.kind == Mutation::Kind::kDelete;
  RecordHeader h;
  const bool linked = !is_delete && !reference.empty();
  h.kind = is_delete ? RecordKind::kTombstone : linked ? RecordKind::kPutRef : RecordKind::kPut;
  h.key_len = static_cast<uint16_t>(search_.key().size());
  h.body_len = is_delete ? 0 : StoredBodySize(reference.size(), m.body.size());
  h.generation = current != nullptr ? current->generation() + 1 : 1;
  h.version = store_->NextSeq();
  h.last_update = search_.now();
  h.sweep_at = is_delete ? 0 : m.sweep_at;
  h.void_at = is_delete ? 0 : m.void_at;
  const uint32_t footprint = RecordFootprint(h.key_len, h.body_len);
  *slot = w_->writer().Append(footprint, h.version, linked ? reference.size() : 0);
  EncodeRecord(h, search_.key(), linked ? reference : std::string_view(),
               is_delete ? std::string_view() : std::string_view(m.body), slot->block_salt,
               slot->dst);
  const IndexEntry e =
      is_delete ? IndexEntry::Tombstone(tag, slot->offset, footprint, h.version)
                : IndexEntry::Live(tag, slot->offset, footprint, h.sweep_at, h.void_at, linked);
  const std::string_view indexed = linked ? reference : std::string_view();
  if (matched_) {
    // As it is now, not as read: the index sweep may have turned it into a
    // tombstone meanwhile (same place, so the snapshot still holds).
    const IndexEntry old = *table->Find(tag, matched_->entry.offset());
    table->Replace(tag, old.offset(), e, indexed);
    blocks.AddLive(store_->BlockOf(old.offset()), -int64_t{AccountedBytes(old)});
  } else {
    table->Insert(e, indexed);
  }
  blocks.AddLive(store_->BlockOf(slot->offset), AccountedBytes(e));
  outcome_.applied = m.kind;
  outcome_.generation = h.generation;
  outcome_.version = h.version;
  return true;
}

}  // namespace segstore::storage
