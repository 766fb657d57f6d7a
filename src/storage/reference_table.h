// The references of one index partition's kPutRef records, in DRAM: record
// offset -> the key it names (format.h, RecordKind::kPutRef). Keyed by the
// offset, which names one record on the device, so two keys never share a
// slot (a digest or a tag could collide). Open addressing, linear probing,
// backward-shift deletion: 16-byte slots kept at most 3/4 full, the keys'
// bytes in one arena compacted once half of it (and 256 bytes) is garbage. Only partitions
// that hold a reference allocate one (Index, PartitionTable).
//
// Not thread-safe: it lives in its PartitionTable, under the partition's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace segstore::storage {

class ReferenceTable {
 public:
  ReferenceTable() = default;
  ~ReferenceTable();
  ReferenceTable(const ReferenceTable&) = delete;
  ReferenceTable& operator=(const ReferenceTable&) = delete;

  // Sets the reference of the record at `offset` (a multiple of 16).
  void Put(uint64_t offset, std::string_view reference);
  // The reference of the record at `offset`; empty when it has none. Valid
  // until the next change.
  std::string_view Find(uint64_t offset) const;
  // False when `offset` had none.
  bool Erase(uint64_t offset);

  uint32_t size() const { return count_; }
  // Slots and the arena, as allocated.
  size_t bytes_allocated() const {
    // The arena's heap bytes: none while it fits in the string itself.
    const size_t heap = arena_.capacity() > std::string().capacity() ? arena_.capacity() + 1 : 0;
    return size_t{capacity_} * sizeof(Slot) + heap;
  }

 private:
  struct Slot {
    uint64_t key = 0;  // offset / 16 + 1; 0 = empty
    uint32_t pos = 0;  // in arena_
    uint32_t len = 0;
  };
  static uint64_t KeyOf(uint64_t offset) { return offset / 16 + 1; }
  uint32_t HomeOf(uint64_t key) const;
  uint32_t FindSlot(uint64_t key) const;  // capacity_ when absent
  void Resize(uint32_t capacity);
  void Compact();

  Slot* slots_ = nullptr;
  uint32_t capacity_ = 0;  // a power of two, or 0
  uint32_t count_ = 0;
  std::string arena_;
  size_t garbage_ = 0;  // arena bytes no slot points to
};

}  // namespace segstore::storage
