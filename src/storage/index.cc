#include "storage/index.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <new>
#include <utility>

namespace segstore::storage {
namespace {

// Loads: grow past kMaxLoad, shrink below kMinLoad, resize to kTargetLoad.
constexpr double kMaxLoad = 0.9;
constexpr double kMinLoad = 0.35;
constexpr double kTargetLoad = 0.72;
constexpr uint32_t kMinCapacity = 4;

uint32_t CapacityFor(uint32_t entries) {
  auto c = static_cast<uint32_t>(std::ceil(entries / kTargetLoad));
  return c < kMinCapacity ? kMinCapacity : c;
}

}  // namespace

IndexEntry::IndexEntry(uint32_t tag, uint64_t offset, uint32_t size, EntryKind kind, uint32_t a,
                       uint32_t b)
    : tag_(tag), a_(a), b_(b) {
  assert(offset % kRecordAlign == 0 && offset < kMaxOffset);
  assert(size % kRecordAlign == 0 && size > 0 && size < kMaxSize);
  uint64_t units = offset / kRecordAlign;
  loc_lo_ = static_cast<uint32_t>(units);
  word2_ = static_cast<uint32_t>(units >> 32) | ((size / kRecordAlign) << 8) |
           (static_cast<uint32_t>(kind) << 28);
}

IndexEntry IndexEntry::Live(uint32_t tag, uint64_t offset, uint32_t size, UnixSeconds sweep_at,
                            UnixSeconds void_at, bool linked) {
  IndexEntry e(tag, offset, size, EntryKind::kLive, sweep_at, void_at);
  if (linked) e.word2_ |= kLinkedBit;
  return e;
}

IndexEntry IndexEntry::Tombstone(uint32_t tag, uint64_t offset, uint32_t size, uint64_t version) {
  return IndexEntry(tag, offset, size, EntryKind::kTombstone, static_cast<uint32_t>(version),
                    static_cast<uint32_t>(version >> 32));
}

std::optional<IndexEntry> IndexEntry::FromWords(const std::array<uint32_t, 5>& w) {
  IndexEntry e;
  e.tag_ = w[0];
  e.loc_lo_ = w[1];
  e.word2_ = w[2];
  e.a_ = w[3];
  e.b_ = w[4];
  if ((e.word2_ >> 31) != 0 || e.size() == 0) return std::nullopt;
  if (!e.live() && !e.tombstone()) return std::nullopt;
  if (e.tombstone() && e.linked()) return std::nullopt;
  return e;
}

PartitionTable::~PartitionTable() { std::free(slots_); }

void PartitionTable::Clear() {
  std::free(std::exchange(slots_, nullptr));
  capacity_ = 0;
  count_ = 0;
  refs_.reset();
}

uint32_t PartitionTable::FindSlot(uint32_t tag, uint64_t offset) const {
  if (count_ == 0) return capacity_;
  uint32_t slot = Home(tag);
  for (uint32_t dist = 0;; ++dist, slot = Next(slot)) {
    const IndexEntry& e = slots_[slot];
    if (e.empty() || Distance(slot, e.tag()) < dist) return capacity_;
    if (e.tag() == tag && e.offset() == offset) return slot;
  }
}

const IndexEntry* PartitionTable::Find(uint32_t tag, uint64_t offset) const {
  uint32_t slot = FindSlot(tag, offset);
  return slot == capacity_ ? nullptr : &slots_[slot];
}

void PartitionTable::DropReference(const IndexEntry& old) {
  if (!old.linked()) return;
  refs_->Erase(old.offset());
  if (refs_->size() == 0) refs_.reset();
}

bool PartitionTable::InsertNoGrow(IndexEntry e, bool refuse_duplicate) {
  uint32_t slot = Home(e.tag());
  uint32_t dist = 0;
  // Entries lie sorted by home along the probe (Home's comment), and an
  // entry of the same tag has the same home: all of them come before the
  // first slot whose entry yields (a later home), so the check ends there.
  bool checking = refuse_duplicate;
  for (;; ++dist, slot = Next(slot)) {
    IndexEntry& cur = slots_[slot];
    if (cur.empty()) {
      cur = e;
      ++count_;
      return true;
    }
    if (checking && cur.tag() == e.tag() && cur.offset() == e.offset()) return false;
    uint32_t cur_dist = Distance(slot, cur.tag());
    if (cur_dist < dist) {  // Robin Hood: the richer entry yields its slot
      std::swap(cur, e);
      dist = cur_dist;
      checking = false;
    }
  }
}

void PartitionTable::Insert(const IndexEntry& e, std::string_view reference) {
  const bool inserted = InsertNew(e, reference, false);
  assert(inserted);
  (void)inserted;
}

bool PartitionTable::InsertNew(const IndexEntry& e, std::string_view reference) {
  return InsertNew(e, reference, true);
}

bool PartitionTable::InsertNew(const IndexEntry& e, std::string_view reference,
                               bool refuse_duplicate) {
  assert(!e.empty());
  assert(e.linked() == !reference.empty());
  if (count_ + 1 > static_cast<uint32_t>(capacity_ * kMaxLoad)) Resize(CapacityFor(count_ + 1));
  if (!InsertNoGrow(e, refuse_duplicate)) return false;
  if (e.linked()) {
    if (!refs_) refs_ = std::make_unique<ReferenceTable>();
    refs_->Put(e.offset(), reference);
  }
  return true;
}

void PartitionTable::Reserve(uint32_t entries) {
  const uint32_t capacity = CapacityFor(entries);
  if (capacity > capacity_) Resize(capacity);
}

void PartitionTable::EraseSlot(uint32_t slot) {
  // Backward shift: pull each following displaced entry one slot closer home.
  uint32_t next = Next(slot);
  while (!slots_[next].empty() && Distance(next, slots_[next].tag()) > 0) {
    slots_[slot] = slots_[next];
    slot = next;
    next = Next(next);
  }
  slots_[slot] = IndexEntry();
  --count_;
}

bool PartitionTable::Erase(uint32_t tag, uint64_t offset) {
  uint32_t slot = FindSlot(tag, offset);
  if (slot == capacity_) return false;
  DropReference(slots_[slot]);
  EraseSlot(slot);
  MaybeShrink();
  return true;
}

bool PartitionTable::Replace(uint32_t tag, uint64_t offset, const IndexEntry& e,
                             std::string_view reference) {
  assert(e.tag() == tag);
  assert(e.linked() == !reference.empty());
  uint32_t slot = FindSlot(tag, offset);
  if (slot == capacity_) return false;
  if (e.linked()) {
    // `reference` may point into the table's own arena (the old entry's,
    // carried over), which dropping the old one may compact: copy it first.
    std::string copy(reference);
    DropReference(slots_[slot]);
    if (!refs_) refs_ = std::make_unique<ReferenceTable>();
    refs_->Put(e.offset(), copy);
  } else {
    DropReference(slots_[slot]);
  }
  slots_[slot] = e;  // same tag, same home: the probe order is unchanged
  return true;
}

uint64_t PartitionTable::CollectLiveFrom(uint32_t tag_from, size_t max,
                                         std::vector<IndexEntry>* out) const {
  if (count_ == 0) return kTagEnd;
  max = std::max<size_t>(max, 1);
  // Positions along the table unrolled twice: the entry in slot s at
  // distance d from its home stands at position p (s or s + capacity_) for
  // the home p - d. Entries are sorted by that home along the positions, and
  // those whose home lies in [0, capacity_) each stand once in [0,
  // 2 * capacity_): a wrapped entry (home past its slot) is skipped in the
  // first lap (its home there is below 0) and taken in the second.
  const int64_t cap = capacity_;
  const int64_t first = Home(tag_from);
  const size_t start = out->size();
  size_t taken = 0;
  int64_t last_home = first;  // of the last entry taken
  uint64_t end = kTagEnd;
  for (int64_t p = first; p < 2 * cap; ++p) {
    const uint32_t slot = static_cast<uint32_t>(p < cap ? p : p - cap);
    const IndexEntry& e = slots_[slot];
    if (e.empty()) {
      if (p >= cap) break;  // nothing after it has a home below capacity_
      continue;
    }
    const int64_t home = p - Distance(slot, e.tag());
    if (home >= cap) break;  // the first lap's entries again
    if (home < first || (home == first && e.tag() < tag_from)) continue;
    if (taken >= max && home > last_home) {
      end = FirstTagOfHome(static_cast<uint64_t>(home));
      break;
    }
    if (!e.live()) continue;
    out->push_back(e);
    ++taken;
    last_home = home;
  }
  // Sorted by home already; entries sharing one may lie in any tag order.
  std::sort(out->begin() + static_cast<ptrdiff_t>(start), out->end(),
            [](const IndexEntry& a, const IndexEntry& b) { return a.tag() < b.tag(); });
  return end;
}

void PartitionTable::MaybeShrink() {
  if (capacity_ > kMinCapacity && count_ < static_cast<uint32_t>(capacity_ * kMinLoad)) {
    Resize(count_ == 0 ? 0 : CapacityFor(count_));
  }
}

void PartitionTable::Resize(uint32_t new_capacity) {
  IndexEntry* old = slots_;
  uint32_t old_capacity = capacity_;
  slots_ = nullptr;
  if (new_capacity > 0) {
    // calloc: an all-zero entry is an empty slot.
    slots_ = static_cast<IndexEntry*>(std::calloc(new_capacity, sizeof(IndexEntry)));
    if (slots_ == nullptr) throw std::bad_alloc();
  }
  capacity_ = new_capacity;
  count_ = 0;
  for (uint32_t i = 0; i < old_capacity; ++i) {
    if (!old[i].empty()) InsertNoGrow(old[i]);
  }
  std::free(old);
}

Index::Index() : partitions_(kPartitions) {}
Index::~Index() = default;

Index::Locked Index::Lock(uint32_t partition) {
  Partition& p = partitions_[partition];
  return Locked(p.mu, &p.table);
}

void Index::Clear() {
  for (uint32_t p = 0; p < kPartitions; ++p) Lock(p)->Clear();
}

Index::Usage Index::usage() {
  Usage u;
  u.bytes_allocated = partitions_.capacity() * sizeof(Partition);
  for (uint32_t p = 0; p < kPartitions; ++p) {
    Locked t = Lock(p);
    u.entries += t->size();
    u.bytes_allocated += t->bytes_allocated() + t->reference_bytes();
    u.references += t->references();
    u.reference_bytes += t->reference_bytes();
    t->ForEach([&](const IndexEntry& e) {
      if (e.tombstone()) ++u.tombstones;
    });
  }
  return u;
}

}  // namespace segstore::storage
