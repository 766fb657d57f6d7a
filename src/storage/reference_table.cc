#include "storage/reference_table.h"

#include <cassert>
#include <cstdlib>
#include <new>
#include <utility>

namespace segstore::storage {
namespace {

constexpr uint32_t kMinCapacity = 8;
// Compact the arena once this much of it, and half of it, is garbage. Small:
// a partition holds a few dozen references, and one whose records keep
// moving (relinked, rewritten) must not keep kilobytes of dead names each
// (4 KiB here made a relinked reference cost 231 bytes of DRAM, not 86).
// Compaction copies only what is live, so its cost stays proportional.
constexpr size_t kMinGarbage = 256;

}  // namespace

ReferenceTable::~ReferenceTable() { std::free(slots_); }

uint32_t ReferenceTable::HomeOf(uint64_t key) const {
  // Offsets are sequential within a block: mix them (a 64-bit multiplicative hash).
  return static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ULL) >> 32) & (capacity_ - 1);
}

uint32_t ReferenceTable::FindSlot(uint64_t key) const {
  if (count_ == 0) return capacity_;
  for (uint32_t slot = HomeOf(key);; slot = (slot + 1) & (capacity_ - 1)) {
    if (slots_[slot].key == key) return slot;
    if (slots_[slot].key == 0) return capacity_;
  }
}

std::string_view ReferenceTable::Find(uint64_t offset) const {
  const uint32_t slot = FindSlot(KeyOf(offset));
  if (slot == capacity_) return {};
  return std::string_view(arena_).substr(slots_[slot].pos, slots_[slot].len);
}

void ReferenceTable::Put(uint64_t offset, std::string_view reference) {
  assert(!reference.empty());
  Erase(offset);
  if ((count_ + 1) * 4 > capacity_ * 3) Resize(capacity_ == 0 ? kMinCapacity : capacity_ * 2);
  const uint64_t key = KeyOf(offset);
  uint32_t slot = HomeOf(key);
  while (slots_[slot].key != 0) slot = (slot + 1) & (capacity_ - 1);
  slots_[slot] =
      Slot{key, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(reference.size())};
  arena_.append(reference);
  ++count_;
}

bool ReferenceTable::Erase(uint64_t offset) {
  uint32_t slot = FindSlot(KeyOf(offset));
  if (slot == capacity_) return false;
  garbage_ += slots_[slot].len;
  // Backward shift: move each following entry that may live earlier into the hole.
  for (uint32_t next = (slot + 1) & (capacity_ - 1); slots_[next].key != 0;
       next = (next + 1) & (capacity_ - 1)) {
    const uint32_t home = HomeOf(slots_[next].key);
    // Can `next`'s entry move to `slot`? Only if its home is not in (slot, next].
    const bool between =
        slot <= next ? (home > slot && home <= next) : (home > slot || home <= next);
    if (between) continue;
    slots_[slot] = slots_[next];
    slot = next;
  }
  slots_[slot] = Slot{};
  --count_;
  if (count_ == 0) {
    std::free(std::exchange(slots_, nullptr));
    capacity_ = 0;
    std::string().swap(arena_);
    garbage_ = 0;
  } else if (count_ * 8 < capacity_ && capacity_ > kMinCapacity) {
    Resize(capacity_ / 2);
  } else if (garbage_ >= kMinGarbage && garbage_ * 2 >= arena_.size()) {
    Compact();
  }
  return true;
}

void ReferenceTable::Resize(uint32_t capacity) {
  Slot* old = slots_;
  const uint32_t old_capacity = capacity_;
  // calloc: an all-zero slot is empty.
  slots_ = static_cast<Slot*>(std::calloc(capacity, sizeof(Slot)));
  if (slots_ == nullptr) throw std::bad_alloc();
  capacity_ = capacity;
  for (uint32_t i = 0; i < old_capacity; ++i) {
    if (old[i].key == 0) continue;
    uint32_t slot = HomeOf(old[i].key);
    while (slots_[slot].key != 0) slot = (slot + 1) & (capacity_ - 1);
    slots_[slot] = old[i];
  }
  std::free(old);
}

void ReferenceTable::Compact() {
  std::string fresh;
  fresh.reserve(arena_.size() - garbage_);
  for (uint32_t i = 0; i < capacity_; ++i) {
    Slot& s = slots_[i];
    if (s.key == 0) continue;
    const uint32_t pos = static_cast<uint32_t>(fresh.size());
    fresh.append(arena_, s.pos, s.len);
    s.pos = pos;
  }
  arena_ = std::move(fresh);
  garbage_ = 0;
}

}  // namespace segstore::storage
