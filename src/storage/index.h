// The DRAM index: digest -> where the newest version of a key lives.
//
// 4,096 partitions, the routing partitions of include/segstore/routing.h (a
// public function of the key: a cluster moves a partition by walking one
// table); each is an
// open-addressing Robin Hood table of 20-byte entries under its own mutex (the
// engine's unit of locking; no lock is ever held across an I/O wait). An entry
// keeps only 32 more bits of the digest (the tag): two keys may share a tag,
// so the table is a multimap and the engine compares the full key on the
// device. A table grows by ~1.25x when its load passes 0.9, so a growing index
// keeps its load between 0.72 and 0.9: 22 to 28 bytes a record, plus a fixed
// 256 KiB of partition headers (which dominate below ~100k records). A table
// shrinks back to 0.72 when mass deletion takes its load below 0.35.
//
// A live entry of a kPutRef record (a linked profile: format.h) carries the
// `linked` bit, and its partition's ReferenceTable holds the key the record
// names, by the record's offset: a get sees the bit in the entry it looks
// up anyway and reads the referenced key's record in the same round trip. A
// record without one pays nothing but that bit's test. The table keeps
// "every live linked entry has exactly one reference, at its offset" itself:
// Insert and Replace take the new entry's reference, and Erase, Replace and
// Sweep drop the old one's.
//
// Thread-safety: PartitionTable is not thread-safe; reach it through
// Index::Lock(), which holds the partition's mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "segstore/routing.h"
#include "storage/format.h"
#include "storage/reference_table.h"

namespace segstore::storage {

enum class EntryKind : uint8_t { kEmpty = 0, kLive = 1, kTombstone = 2 };

// One record in DRAM: 20 bytes, packed.
class IndexEntry {
 public:
  static constexpr uint64_t kMaxOffset = (uint64_t{1} << 40) * kRecordAlign;  // 16 TiB
  static constexpr uint32_t kMaxSize = (uint32_t{1} << 20) * kRecordAlign;    // 16 MiB

  IndexEntry() = default;
  // A live record. `offset` (device byte offset) and `size` (its footprint)
  // must be multiples of kRecordAlign within the limits above. `linked`: a
  // kPutRef record, whose reference the partition's table keeps.
  static IndexEntry Live(uint32_t tag, uint64_t offset, uint32_t size, UnixSeconds sweep_at,
                         UnixSeconds void_at, bool linked = false);
  // A tombstone, or a record that has expired whole (void_at passed) and now
  // stands only to keep older versions of its key from coming back.
  // `version` bounds from above the version of the record at `offset`.
  static IndexEntry Tombstone(uint32_t tag, uint64_t offset, uint32_t size, uint64_t version);

  uint32_t tag() const { return tag_; }
  EntryKind kind() const { return static_cast<EntryKind>((word2_ >> 28) & 3); }
  bool empty() const { return kind() == EntryKind::kEmpty; }
  bool live() const { return kind() == EntryKind::kLive; }
  bool tombstone() const { return kind() == EntryKind::kTombstone; }
  // A live kPutRef record (never a tombstone).
  bool linked() const { return (word2_ & kLinkedBit) != 0; }
  uint64_t offset() const { return ((uint64_t{word2_ & 0xFF} << 32) | loc_lo_) * kRecordAlign; }
  uint32_t size() const { return ((word2_ >> 8) & 0xFFFFF) * kRecordAlign; }
  // Live entries only.
  UnixSeconds sweep_at() const { return a_; }
  UnixSeconds void_at() const { return b_; }
  // Tombstones only.
  uint64_t version() const { return (uint64_t{b_} << 32) | a_; }

  // The entry's 20 bytes as five words, in the order of the members below:
  // how the index checkpoint stores it (FORMAT.md, "The index checkpoint").
  std::array<uint32_t, 5> ToWords() const { return {tag_, loc_lo_, word2_, a_, b_}; }
  // The entry ToWords gave; nullopt when the words are no live entry or
  // tombstone (another kind, bit 31 set, a linked tombstone, size 0).
  static std::optional<IndexEntry> FromWords(const std::array<uint32_t, 5>& w);

 private:
  static constexpr uint32_t kLinkedBit = uint32_t{1} << 30;
  IndexEntry(uint32_t tag, uint64_t offset, uint32_t size, EntryKind kind, uint32_t a, uint32_t b);

  uint32_t tag_ = 0;     // digest bits 0..31
  uint32_t loc_lo_ = 0;  // (offset / 16), low 32 bits
  uint32_t word2_ = 0;   // bits 0-7: (offset / 16) >> 32; 8-27: size / 16; 28-29: kind;
                         // 30: linked; 31: unused
  uint32_t a_ = 0;       // live: sweep_at; tombstone: version, low half
  uint32_t b_ = 0;       // live: void_at;  tombstone: version, high half
};
static_assert(sizeof(IndexEntry) == 20, "the index entry is 20 bytes by design");

class PartitionTable {
 public:
  PartitionTable() = default;
  ~PartitionTable();
  PartitionTable(const PartitionTable&) = delete;
  PartitionTable& operator=(const PartitionTable&) = delete;

  // Calls f(const IndexEntry&) for every entry with this tag.
  template <typename F>
  void ForEachWithTag(uint32_t tag, F&& f) const;
  // The entry of this tag at this device offset, or null. Valid until the next change.
  // Change an entry only through Replace (or Sweep): the linked bit and
  // the reference go together.
  const IndexEntry* Find(uint32_t tag, uint64_t offset) const;
  // `reference`: the record's, when e.linked() (non-empty then).
  void Insert(const IndexEntry& e, std::string_view reference = {});
  // As Insert, unless an entry of e's tag at e's offset is already here:
  // then it changes nothing and returns false. Costs what Insert does (the
  // check rides on the insertion's own probe), where Find and Insert would
  // probe twice. For loading an index that must not list a record twice.
  bool InsertNew(const IndexEntry& e, std::string_view reference = {});
  // Makes room for `entries` entries in all without growing again on the
  // way (a load that knows its count: one allocation, where inserting one
  // by one would resize a dozen times).
  void Reserve(uint32_t entries);
  // Removes the entry of this tag at this offset; false when absent.
  bool Erase(uint32_t tag, uint64_t offset);
  // Replaces the entry of this tag at `offset` by `e` (same tag), with
  // `reference` when e.linked(). False when absent.
  bool Replace(uint32_t tag, uint64_t offset, const IndexEntry& e, std::string_view reference = {});
  // The reference of the linked entry `e` (one of this table's); empty when
  // `e` is not linked.
  std::string_view Reference(const IndexEntry& e) const {
    return e.linked() ? refs_->Find(e.offset()) : std::string_view();
  }
  // Where CollectLiveFrom's pages end: past every tag.
  static constexpr uint64_t kTagEnd = uint64_t{1} << 32;
  // One page of the live entries in the order of their tags, for a caller
  // walking the whole table while it changes between pages: appends to `out`,
  // sorted by tag, every live entry whose tag lies in [tag_from, end) and
  // returns end (> tag_from; kTagEnd when nothing is left past the page).
  // Takes at least `max` entries (0 counts as 1) unless it reaches the end,
  // and ends the page only where the home slot changes, so entries sharing a
  // home (and so a tag) share a page and it may hold a few more than `max`.
  // The cursor is a tag, not a slot: a resize between pages changes nothing.
  // Visits the page's slots (tombstones and empty slots among them) plus the
  // probe displacement at its start, not the whole table.
  uint64_t CollectLiveFrom(uint32_t tag_from, size_t max, std::vector<IndexEntry>* out) const;
  // Calls f(const IndexEntry&) for every entry.
  template <typename F>
  void ForEach(F&& f) const {
    for (uint32_t i = 0; i < capacity_; ++i) {
      if (!slots_[i].empty()) f(slots_[i]);
    }
  }
  // Calls f(IndexEntry&) for every entry; f returns false to erase it. f may
  // change an entry in place but not its tag, nor make it linked (it may
  // make it a tombstone: its reference goes).
  template <typename F>
  void Sweep(F&& f);
  // Drops every entry and reference, and the memory they took.
  void Clear();

  uint32_t size() const { return count_; }
  uint32_t capacity() const { return capacity_; }
  // The entries' slots; the references' table apart.
  size_t bytes_allocated() const { return size_t{capacity_} * sizeof(IndexEntry); }
  uint32_t references() const { return refs_ ? refs_->size() : 0; }
  size_t reference_bytes() const {
    return refs_ ? sizeof(ReferenceTable) + refs_->bytes_allocated() : 0;
  }

 private:
  // Monotone in the tag. Robin Hood insertion puts an entry after those of
  // its home or an earlier one and before those of a later one, backward-shift
  // deletion moves a run of entries back together, and Resize and Sweep
  // reinsert: so along the probe order (wrapping at the end) entries lie
  // sorted by home. CollectLiveFrom relies on it.
  uint32_t Home(uint32_t tag) const {
    return static_cast<uint32_t>((uint64_t{tag} * capacity_) >> 32);
  }
  // The smallest tag whose home is `home` or later (kTagEnd for capacity_).
  uint64_t FirstTagOfHome(uint64_t home) const {
    return ((home << 32) + capacity_ - 1) / capacity_;
  }
  uint32_t Distance(uint32_t slot, uint32_t tag) const {
    uint32_t home = Home(tag);
    return slot >= home ? slot - home : slot + capacity_ - home;
  }
  uint32_t Next(uint32_t slot) const { return slot + 1 == capacity_ ? 0 : slot + 1; }
  // Slot of the entry of this tag at this offset, or capacity_ when absent.
  uint32_t FindSlot(uint32_t tag, uint64_t offset) const;
  void EraseSlot(uint32_t slot);
  bool InsertNew(const IndexEntry& e, std::string_view reference, bool refuse_duplicate);
  void InsertNoGrow(IndexEntry e) { InsertNoGrow(e, false); }
  // With `refuse_duplicate`, returns false (changing nothing) when an entry
  // of e's tag at e's offset is already here.
  bool InsertNoGrow(IndexEntry e, bool refuse_duplicate);
  void Resize(uint32_t new_capacity);
  void MaybeShrink();
  void DropReference(const IndexEntry& old);

  IndexEntry* slots_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t count_ = 0;
  std::unique_ptr<ReferenceTable> refs_;  // allocated with the first reference
};

class Index {
 public:
  static constexpr uint32_t kPartitions = segstore::kPartitions;
  // The routing partition of a key (proto/PROTOCOL.md, "Partitions").
  static uint32_t PartitionOf(std::string_view key) { return segstore::PartitionOf(key); }
  // The 32 bits of the key's digest an entry keeps.
  static uint32_t TagOf(const Digest& d) { return static_cast<uint32_t>(d.lo); }

  Index();
  ~Index();

  // A partition's table with its mutex held for the guard's lifetime.
  class Locked {
   public:
    PartitionTable* operator->() const { return table_; }
    PartitionTable& operator*() const { return *table_; }

   private:
    friend class Index;
    Locked(std::mutex& mu, PartitionTable* t) : lock_(mu), table_(t) {}
    std::unique_lock<std::mutex> lock_;
    PartitionTable* table_;
  };
  Locked Lock(uint32_t partition);
  // Empties every partition (a start whose index checkpoint failed halfway
  // through loading, before it scans the device).
  void Clear();

  struct Usage {
    uint64_t entries = 0;
    uint64_t tombstones = 0;
    // Tables, references and partition headers: slack and tombstones included.
    uint64_t bytes_allocated = 0;
    uint64_t references = 0;       // linked entries
    uint64_t reference_bytes = 0;  // of bytes_allocated, the references' tables
  };
  // Locks each partition in turn; a consistent total only when writes are quiet.
  Usage usage();

 private:
  struct alignas(64) Partition {
    std::mutex mu;
    PartitionTable table;
  };
  static_assert(sizeof(Partition) == 64, "a partition header is one cache line");
  std::vector<Partition> partitions_;
};

template <typename F>
void PartitionTable::ForEachWithTag(uint32_t tag, F&& f) const {
  if (count_ == 0) return;
  uint32_t slot = Home(tag);
  for (uint32_t dist = 0;; ++dist, slot = Next(slot)) {
    const IndexEntry& e = slots_[slot];
    if (e.empty() || Distance(slot, e.tag()) < dist) return;
    if (e.tag() == tag) f(e);
  }
}

template <typename F>
void PartitionTable::Sweep(F&& f) {
  if (count_ == 0) return;
  // Backward-shift deletion moves later entries into the erased slot, so
  // collect survivors first and rebuild only if something was erased.
  std::vector<IndexEntry> keep;
  bool erased = false;
  for (uint32_t i = 0; i < capacity_; ++i) {
    if (slots_[i].empty()) continue;
    const IndexEntry before = slots_[i];
    if (f(slots_[i])) {
      if (before.linked() && !slots_[i].linked()) DropReference(before);
      keep.push_back(slots_[i]);
    } else {
      DropReference(before);
      erased = true;
    }
  }
  if (!erased) return;
  for (uint32_t i = 0; i < capacity_; ++i) slots_[i] = IndexEntry();
  count_ = 0;
  for (const IndexEntry& e : keep) InsertNoGrow(e);
  MaybeShrink();
}

}  // namespace segstore::storage
