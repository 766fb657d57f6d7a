#include "storage/index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace segstore::storage {
namespace {

// Everything an entry says, for comparisons.
using EntryFields = std::tuple<uint32_t, EntryKind, uint64_t, uint32_t, uint32_t, uint32_t>;
EntryFields Fields(const IndexEntry& e) {
  return {e.tag(), e.kind(), e.offset(), e.size(), e.sweep_at(), e.void_at()};
}

std::vector<EntryFields> Sorted(std::vector<EntryFields> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<EntryFields> WithTag(const PartitionTable& t, uint32_t tag) {
  std::vector<EntryFields> out;
  t.ForEachWithTag(tag, [&](const IndexEntry& e) {
    EXPECT_EQ(e.tag(), tag);
    out.push_back(Fields(e));
  });
  return Sorted(std::move(out));
}

double Load(const PartitionTable& t) {
  return t.capacity() == 0 ? 0.0 : double(t.size()) / double(t.capacity());
}

// ---- IndexEntry ----

TEST(IndexEntryTest, IsTwentyBytes) {
  EXPECT_EQ(sizeof(IndexEntry), 20u);
  EXPECT_EQ(IndexEntry::kMaxOffset, uint64_t{16} << 40);
  EXPECT_EQ(IndexEntry::kMaxSize, 16u << 20);
}

TEST(IndexEntryTest, DefaultIsEmpty) {
  IndexEntry e;
  EXPECT_TRUE(e.empty());
  EXPECT_FALSE(e.live());
  EXPECT_FALSE(e.tombstone());
  EXPECT_EQ(e.kind(), EntryKind::kEmpty);
}

TEST(IndexEntryTest, LivePackingRoundTrips) {
  const uint64_t offsets[] = {0,
                              16,
                              4096,
                              uint64_t{1} << 32,
                              (uint64_t{1} << 36) - 16,
                              uint64_t{1} << 36,
                              uint64_t{0x0ABC'DEF0'1230},
                              IndexEntry::kMaxOffset - 16};
  const uint32_t sizes[] = {16, 48, 4096, 1u << 20, 0x80'0000, IndexEntry::kMaxSize - 16};
  const uint32_t times[] = {0, 1, 1'700'000'000, 0x8000'0000, 0xFFFF'FFFF};
  const uint32_t tags[] = {0, 1, 0x8000'0000, 0xFFFF'FFFF, 0x1234'5678};
  for (uint32_t tag : tags) {
    for (uint64_t off : offsets) {
      for (uint32_t size : sizes) {
        for (uint32_t sweep : times) {
          for (uint32_t void_at : times) {
            IndexEntry e = IndexEntry::Live(tag, off, size, sweep, void_at);
            ASSERT_TRUE(e.live());
            ASSERT_FALSE(e.empty());
            ASSERT_FALSE(e.tombstone());
            ASSERT_EQ(e.kind(), EntryKind::kLive);
            ASSERT_EQ(e.tag(), tag);
            ASSERT_EQ(e.offset(), off);
            ASSERT_EQ(e.size(), size);
            ASSERT_EQ(e.sweep_at(), sweep);
            ASSERT_EQ(e.void_at(), void_at);
          }
        }
      }
    }
  }
}

TEST(IndexEntryTest, TombstoneKeepsAllSixtyFourVersionBits) {
  const uint64_t versions[] = {0,
                               1,
                               0xFFFF'FFFF,
                               uint64_t{1} << 32,
                               0x8000'0000'0000'0001ULL,
                               0xDEAD'BEEF'CAFE'BABEULL,
                               UINT64_MAX};
  for (uint64_t v : versions) {
    IndexEntry e = IndexEntry::Tombstone(0xFFFF'FFFF, IndexEntry::kMaxOffset - 16,
                                         IndexEntry::kMaxSize - 16, v);
    ASSERT_TRUE(e.tombstone());
    ASSERT_FALSE(e.live());
    ASSERT_FALSE(e.empty());
    ASSERT_EQ(e.kind(), EntryKind::kTombstone);
    ASSERT_EQ(e.version(), v);
    ASSERT_EQ(e.tag(), 0xFFFF'FFFFu);
    ASSERT_EQ(e.offset(), IndexEntry::kMaxOffset - 16);
    ASSERT_EQ(e.size(), IndexEntry::kMaxSize - 16);
  }
}

TEST(IndexEntryTest, RandomFieldsDoNotBleedIntoEachOther) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 100000; ++i) {
    auto tag = static_cast<uint32_t>(rng());
    uint64_t off = (rng() & ((uint64_t{1} << 40) - 1)) * kRecordAlign;
    uint32_t size = static_cast<uint32_t>(1 + rng() % ((1u << 20) - 1)) * kRecordAlign;
    if (rng() % 2) {
      auto sweep = static_cast<uint32_t>(rng());
      auto void_at = static_cast<uint32_t>(rng());
      IndexEntry e = IndexEntry::Live(tag, off, size, sweep, void_at);
      ASSERT_EQ(Fields(e), EntryFields(tag, EntryKind::kLive, off, size, sweep, void_at));
    } else {
      uint64_t version = rng();
      IndexEntry e = IndexEntry::Tombstone(tag, off, size, version);
      ASSERT_TRUE(e.tombstone());
      ASSERT_EQ(e.tag(), tag);
      ASSERT_EQ(e.offset(), off);
      ASSERT_EQ(e.size(), size);
      ASSERT_EQ(e.version(), version);
    }
  }
}

// ---- PartitionTable ----

TEST(PartitionTableTest, EmptyTableHasNothing) {
  PartitionTable t;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.Find(1, 16), nullptr);
  EXPECT_FALSE(t.Erase(1, 16));
  EXPECT_FALSE(t.Replace(1, 16, IndexEntry::Live(1, 32, 16, 0, 0)));
  EXPECT_TRUE(WithTag(t, 1).empty());
  int visited = 0;
  t.Sweep([&](IndexEntry&) { return ++visited, true; });
  EXPECT_EQ(visited, 0);
}

TEST(PartitionTableTest, InsertFindEraseReplace) {
  PartitionTable t;
  t.Insert(IndexEntry::Live(7, 160, 48, 10, 20));
  t.Insert(IndexEntry::Tombstone(8, 320, 64, 99));
  EXPECT_EQ(t.size(), 2u);

  const IndexEntry* e = t.Find(7, 160);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(Fields(*e), EntryFields(7, EntryKind::kLive, 160, 48, 10, 20));
  e = t.Find(8, 320);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->tombstone());
  EXPECT_EQ(e->version(), 99u);
  // Tag and offset must both match.
  EXPECT_EQ(t.Find(7, 320), nullptr);
  EXPECT_EQ(t.Find(8, 160), nullptr);

  // Replace in place, then move to a new offset with the same tag.
  EXPECT_TRUE(t.Replace(7, 160, IndexEntry::Live(7, 160, 48, 11, 21)));
  EXPECT_EQ(Fields(*t.Find(7, 160)), EntryFields(7, EntryKind::kLive, 160, 48, 11, 21));
  EXPECT_TRUE(t.Replace(7, 160, IndexEntry::Live(7, 4096, 96, 0, 0)));
  EXPECT_EQ(t.Find(7, 160), nullptr);
  ASSERT_NE(t.Find(7, 4096), nullptr);
  EXPECT_EQ(t.Find(7, 4096)->size(), 96u);
  EXPECT_FALSE(t.Replace(7, 160, IndexEntry::Live(7, 160, 48, 0, 0)));
  EXPECT_EQ(t.size(), 2u);

  // Turning a live entry into a tombstone.
  EXPECT_TRUE(t.Replace(7, 4096, IndexEntry::Tombstone(7, 4096, 96, 1234)));
  EXPECT_TRUE(t.Find(7, 4096)->tombstone());

  EXPECT_TRUE(t.Erase(7, 4096));
  EXPECT_FALSE(t.Erase(7, 4096));
  EXPECT_EQ(t.Find(7, 4096), nullptr);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(t.Erase(8, 320));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.Find(8, 320), nullptr);
}

TEST(PartitionTableTest, LinkedEntriesKeepTheirReferenceWhereverTheyGo) {
  PartitionTable t;
  t.Insert(IndexEntry::Live(5, 16, 16, 1, 2, /*linked=*/true), "master-a");
  t.Insert(IndexEntry::Live(5, 32, 16, 1, 2), {});
  t.Insert(IndexEntry::Live(6, 48, 16, 1, 2, /*linked=*/true), "master-b");
  EXPECT_EQ(t.references(), 2u);
  EXPECT_GT(t.reference_bytes(), 0u);
  EXPECT_TRUE(t.Find(5, 16)->linked());
  EXPECT_FALSE(t.Find(5, 32)->linked());
  EXPECT_EQ(t.Reference(*t.Find(5, 16)), "master-a");
  EXPECT_EQ(t.Reference(*t.Find(5, 32)), "");
  // A new version at a new offset: the reference follows (here carried over
  // from the table's own bytes, as defragmentation may), the old one goes.
  const std::string carried(t.Reference(*t.Find(5, 16)));
  EXPECT_TRUE(
      t.Replace(5, 16, IndexEntry::Live(5, 4096, 16, 1, 2, true), t.Reference(*t.Find(5, 16))));
  EXPECT_EQ(t.Reference(*t.Find(5, 4096)), carried);
  EXPECT_EQ(t.references(), 2u);
  // A version naming none, then a tombstone: nothing left for key 5.
  EXPECT_TRUE(t.Replace(5, 4096, IndexEntry::Live(5, 8192, 16, 1, 2), {}));
  EXPECT_EQ(t.references(), 1u);
  // The sweep making a linked entry a tombstone drops its reference.
  t.Sweep([](IndexEntry& e) {
    if (e.linked()) e = IndexEntry::Tombstone(e.tag(), e.offset(), e.size(), 9);
    return true;
  });
  EXPECT_EQ(t.references(), 0u);
  EXPECT_EQ(t.reference_bytes(), 0u);  // the table goes with its last reference
  t.Insert(IndexEntry::Live(7, 64, 16, 1, 2, true), "m");
  EXPECT_TRUE(t.Erase(7, 64));
  EXPECT_EQ(t.references(), 0u);
  t.Insert(IndexEntry::Live(7, 80, 16, 1, 2, true), "m");
  t.Sweep([](IndexEntry& e) { return !e.linked(); });
  EXPECT_EQ(t.references(), 0u);
  EXPECT_EQ(t.size(), 3u);
}

TEST(ReferenceTableTest, AgreesWithAMapThroughGrowthShrinkingAndCompaction) {
  ReferenceTable refs;
  std::map<uint64_t, std::string> model;
  std::mt19937_64 rng(20261126);
  for (int op = 0; op < 200000; ++op) {
    // Offsets bunched as a block's records are, so homes collide.
    const uint64_t offset = (rng() % 3000) * 16 + (op % 50000 < 25000 ? 0 : 1 << 20);
    switch (rng() % 4) {
      case 0:
      case 1: {
        std::string ref(1 + rng() % 40, static_cast<char>('a' + rng() % 26));
        refs.Put(offset, ref);
        model[offset] = ref;
        break;
      }
      case 2:
        ASSERT_EQ(refs.Erase(offset), model.erase(offset) == 1) << "op " << op;
        break;
      default: {
        auto it = model.find(offset);
        ASSERT_EQ(refs.Find(offset), it == model.end() ? "" : it->second) << "op " << op;
      }
    }
    ASSERT_EQ(refs.size(), model.size());
    if (op % 50000 == 49999) {
      for (const auto& [o, r] : model) ASSERT_EQ(refs.Find(o), r);
      // Empty it: nothing stays allocated.
      if (op == 99999) {
        for (const auto& [o, r] : model) ASSERT_TRUE(refs.Erase(o));
        model.clear();
        EXPECT_EQ(refs.bytes_allocated(), 0u);
      }
    }
  }
  // Bytes stay bounded by what is held: at most 8 slots of 16 bytes per
  // reference (it shrinks below 1/8 full), and an arena at most half garbage
  // (or 256 bytes of it), allocated with at most 2x slack.
  size_t held = 0;
  for (const auto& [o, r] : model) held += r.size();
  EXPECT_LE(refs.bytes_allocated(), model.size() * 16 * 8 + 2 * (2 * held + 256));
}

// A partition's few references whose records keep moving (a group relinked
// again and again: each write puts the member's record at a new offset)
// keep costing what they cost at first, not the names of every old offset.
TEST(ReferenceTableTest, ReferencesWhoseRecordsKeepMovingStayCheap) {
  ReferenceTable refs;
  constexpr uint64_t kRefs = 10;
  uint64_t next = 0;
  std::vector<uint64_t> at(kRefs);
  for (uint64_t i = 0; i < kRefs; ++i) {
    at[i] = (next++) * 16;
    refs.Put(at[i], "master-00001234");
  }
  const size_t first = refs.bytes_allocated();
  size_t most = first;
  for (int round = 0; round < 1000; ++round) {
    for (uint64_t i = 0; i < kRefs; ++i) {
      ASSERT_TRUE(refs.Erase(at[i]));
      at[i] = (next++) * 16;
      refs.Put(at[i], "master-00001234");
    }
    most = std::max(most, refs.bytes_allocated());
  }
  EXPECT_EQ(refs.size(), kRefs);
  // 16 slots of 16 bytes; 150 bytes of names, at most 256 more of garbage,
  // with the string's growth slack.
  EXPECT_LE(most, 16 * 16 + 2 * (150 + 256)) << "first " << first;
}

TEST(PartitionTableTest, EntriesSharingATagAreAllVisited) {
  for (uint32_t tag : {0u, 1u, 0x8000'0000u, 0xFFFF'FFFEu, 0xFFFF'FFFFu}) {
    PartitionTable t;
    std::vector<EntryFields> expected;
    for (uint32_t i = 0; i < 12; ++i) {
      IndexEntry e = IndexEntry::Live(tag, uint64_t{i + 1} * 4096, 16 * (i + 1), i, 0);
      t.Insert(e);
      expected.push_back(Fields(e));
      // Neighbours with other tags, including ones with adjacent homes.
      t.Insert(IndexEntry::Live(tag + 1, uint64_t{i + 1} * 4096 + 16, 16, 0, 0));
      t.Insert(IndexEntry::Live(tag - 1, uint64_t{i + 1} * 4096 + 32, 16, 0, 0));
      t.Insert(IndexEntry::Live(tag ^ 0x5555'5555, uint64_t{i + 1} * 4096 + 48, 16, 0, 0));
    }
    ASSERT_EQ(WithTag(t, tag), Sorted(expected)) << "tag " << tag;

    // Erase one in the middle: the rest stay findable and visited.
    ASSERT_TRUE(t.Erase(tag, 6 * 4096));
    expected.erase(std::find(expected.begin(), expected.end(),
                             Fields(IndexEntry::Live(tag, 6 * 4096, 16 * 6, 5, 0))));
    ASSERT_EQ(WithTag(t, tag), Sorted(expected)) << "tag " << tag;
    for (uint32_t i = 0; i < 12; ++i) {
      uint64_t off = uint64_t{i + 1} * 4096;
      if (i == 5) {
        EXPECT_EQ(t.Find(tag, off), nullptr);
      } else {
        EXPECT_NE(t.Find(tag, off), nullptr) << "tag " << tag << " offset " << off;
      }
      EXPECT_NE(t.Find(tag + 1, off + 16), nullptr);
      EXPECT_NE(t.Find(tag - 1, off + 32), nullptr);
    }
    // Erase the first and the last inserted too.
    ASSERT_TRUE(t.Erase(tag, 4096));
    ASSERT_TRUE(t.Erase(tag, 12 * 4096));
    EXPECT_EQ(WithTag(t, tag).size(), 9u);
  }
}

TEST(PartitionTableTest, LoadStaysAtMostNinetyPercent) {
  PartitionTable t;
  std::mt19937 rng(12);
  for (uint32_t i = 0; i < 50000; ++i) {
    t.Insert(IndexEntry::Live(rng(), uint64_t{i} * 16, 16, 0, 0));
    ASSERT_LE(Load(t), 0.9) << "after " << i + 1 << " inserts, capacity " << t.capacity();
    ASSERT_EQ(t.bytes_allocated(), size_t{t.capacity()} * sizeof(IndexEntry));
  }
  // Grown tables are not much emptier than 0.72 either.
  EXPECT_GE(Load(t), 0.7);
}

TEST(PartitionTableTest, ShrinksAfterMassErasure) {
  PartitionTable t;
  std::mt19937 rng(13);
  std::vector<std::pair<uint32_t, uint64_t>> keys;
  for (uint32_t i = 0; i < 20000; ++i) {
    uint32_t tag = rng();
    keys.emplace_back(tag, uint64_t{i} * 16);
    t.Insert(IndexEntry::Live(tag, uint64_t{i} * 16, 16, 0, 0));
  }
  uint32_t big = t.capacity();
  ASSERT_GE(big, 20000u);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (size_t i = 100; i < keys.size(); ++i) ASSERT_TRUE(t.Erase(keys[i].first, keys[i].second));
  EXPECT_EQ(t.size(), 100u);
  EXPECT_LT(t.capacity(), big / 10) << "capacity " << t.capacity();
  EXPECT_LE(t.capacity(), 100u * 3);
  EXPECT_LE(Load(t), 0.9);
  for (size_t i = 0; i < 100; ++i) EXPECT_NE(t.Find(keys[i].first, keys[i].second), nullptr);
  for (size_t i = 0; i < 100; ++i) ASSERT_TRUE(t.Erase(keys[i].first, keys[i].second));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_LE(t.capacity(), 4u);
  // Still usable.
  t.Insert(IndexEntry::Live(42, 16, 16, 0, 0));
  EXPECT_NE(t.Find(42, 16), nullptr);
}

TEST(PartitionTableTest, SweepErasesAndEditsInPlace) {
  PartitionTable t;
  for (uint32_t i = 0; i < 1000; ++i) {
    t.Insert(IndexEntry::Live(i % 37, uint64_t{i} * 16, 16, i, 0));
  }
  uint32_t big = t.capacity();
  int visited = 0;
  t.Sweep([&](IndexEntry& e) {
    ++visited;
    if (e.offset() / 16 % 10 != 0) return false;  // keep one in ten
    e = IndexEntry::Tombstone(e.tag(), e.offset(), e.size(), e.sweep_at() + 1000);
    return true;
  });
  EXPECT_EQ(visited, 1000);
  EXPECT_EQ(t.size(), 100u);
  EXPECT_LT(t.capacity(), big);
  for (uint32_t i = 0; i < 1000; ++i) {
    const IndexEntry* e = t.Find(i % 37, uint64_t{i} * 16);
    if (i % 10 == 0) {
      ASSERT_NE(e, nullptr) << i;
      EXPECT_TRUE(e->tombstone());
      EXPECT_EQ(e->version(), i + 1000u);
    } else {
      EXPECT_EQ(e, nullptr) << i;
    }
  }
  // Everything can go.
  t.Sweep([](IndexEntry&) { return false; });
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(WithTag(t, 0).empty());
  t.Insert(IndexEntry::Live(3, 16, 16, 0, 0));
  EXPECT_EQ(t.size(), 1u);
}

// Drives a PartitionTable and a std::multimap with the same random operations
// and compares them throughout.
TEST(PartitionTableTest, RandomizedAgainstMultimapModel) {
  using Key = std::pair<uint32_t, uint64_t>;  // (tag, offset)
  std::multimap<Key, IndexEntry> model;
  std::vector<Key> keys;                     // the model's keys, for sampling
  std::unordered_map<uint64_t, size_t> pos;  // offset -> index in `keys` (offsets are unique)
  auto add_key = [&](Key k, const IndexEntry& e) {
    model.emplace(k, e);
    pos[k.second] = keys.size();
    keys.push_back(k);
  };
  auto drop_key = [&](Key k) {
    auto it = model.find(k);
    ASSERT_NE(it, model.end());
    model.erase(it);
    size_t i = pos.at(k.second);
    pos.erase(k.second);
    if (i + 1 != keys.size()) {
      keys[i] = keys.back();
      pos[keys[i].second] = i;
    }
    keys.pop_back();
  };
  auto expected_with_tag = [&](uint32_t tag) {
    std::vector<EntryFields> out;
    for (auto it = model.lower_bound(Key(tag, 0)); it != model.end() && it->first.first == tag;
         ++it) {
      out.push_back(Fields(it->second));
    }
    return Sorted(std::move(out));
  };

  std::mt19937_64 rng(0x1dea'5eed);
  // A small pool of tags makes long same-tag runs; the extremes exercise the
  // wrap-around of the probe sequence.
  std::vector<uint32_t> hot = {0, 1, 2, 0xFFFF'FFFF, 0xFFFF'FFFE, 0x8000'0000, 0x7FFF'FFFF};
  while (hot.size() < 48) hot.push_back(static_cast<uint32_t>(rng()));
  auto random_tag = [&]() -> uint32_t {
    return rng() % 2 ? hot[rng() % hot.size()] : static_cast<uint32_t>(rng());
  };
  uint64_t next_offset = 0;
  auto fresh_offset = [&]() { return (next_offset++) * kRecordAlign; };
  auto random_entry = [&](uint32_t tag, uint64_t offset) {
    uint32_t size = static_cast<uint32_t>(1 + rng() % 4096) * kRecordAlign;
    if (rng() % 4 == 0) return IndexEntry::Tombstone(tag, offset, size, rng());
    return IndexEntry::Live(tag, offset, size, static_cast<uint32_t>(rng()),
                            static_cast<uint32_t>(rng()));
  };

  PartitionTable t;
  constexpr int kOps = 200000;
  for (int op = 0; op < kOps; ++op) {
    uint32_t checked_tag;
    // Grow early on, then hover, with bursts of erasure.
    int phase = (op / 20000) % 3;
    int insert_weight = phase == 0 ? 60 : phase == 1 ? 35 : 20;
    int r = static_cast<int>(rng() % 100);
    if (r < insert_weight || keys.empty()) {
      uint32_t tag = random_tag();
      uint64_t off = fresh_offset();
      IndexEntry e = random_entry(tag, off);
      t.Insert(e);
      add_key(Key(tag, off), e);
      ASSERT_LE(Load(t), 0.9);
      checked_tag = tag;
    } else if (r < insert_weight + 25) {
      Key k = keys[rng() % keys.size()];
      ASSERT_TRUE(t.Erase(k.first, k.second)) << "op " << op;
      drop_key(k);
      checked_tag = k.first;
    } else if (r < insert_weight + 30) {
      // Absent: a known tag at an unused offset, or an unknown tag.
      uint32_t tag = random_tag();
      uint64_t off = (next_offset + 1 + rng() % 1000) * kRecordAlign;
      ASSERT_FALSE(t.Erase(tag, off));
      ASSERT_FALSE(t.Replace(tag, off, random_entry(tag, off)));
      ASSERT_EQ(t.Find(tag, off), nullptr);
      checked_tag = tag;
    } else if (r < insert_weight + 38) {
      Key k = keys[rng() % keys.size()];
      // Replace in place, or move the key to a fresh offset.
      uint64_t off = rng() % 2 ? k.second : fresh_offset();
      IndexEntry e = random_entry(k.first, off);
      ASSERT_TRUE(t.Replace(k.first, k.second, e)) << "op " << op;
      drop_key(k);
      add_key(Key(k.first, off), e);
      checked_tag = k.first;
    } else if (r < insert_weight + 39 && rng() % 8 == 0) {
      // Sweep: erase about a third, edit some of the rest in place.
      uint64_t salt = rng();
      std::vector<uint64_t> visited;
      std::vector<std::pair<Key, IndexEntry>> edited;
      std::vector<Key> erased;
      t.Sweep([&](IndexEntry& e) {
        visited.push_back(e.offset());
        uint64_t h = (e.offset() / kRecordAlign) * 0x9E37'79B9'7F4A'7C15ULL ^ salt;
        if (h % 3 == 0) {
          erased.emplace_back(e.tag(), e.offset());
          return false;
        }
        if (h % 5 == 0) {
          e = IndexEntry::Tombstone(e.tag(), e.offset(), e.size(), h);
          edited.emplace_back(Key(e.tag(), e.offset()), e);
        }
        return true;
      });
      std::sort(visited.begin(), visited.end());
      ASSERT_EQ(visited.size(), keys.size()) << "Sweep must visit every entry once";
      ASSERT_TRUE(std::adjacent_find(visited.begin(), visited.end()) == visited.end());
      for (const Key& k : erased) drop_key(k);
      for (auto& [k, e] : edited) model.find(k)->second = e;
      ASSERT_EQ(t.size(), model.size());
      ASSERT_LE(Load(t), 0.9);
      checked_tag = hot[rng() % hot.size()];
    } else {
      // Find hits.
      Key k = keys[rng() % keys.size()];
      const IndexEntry* e = t.Find(k.first, k.second);
      ASSERT_NE(e, nullptr) << "op " << op;
      ASSERT_EQ(Fields(*e), Fields(model.find(k)->second));
      checked_tag = k.first;
    }
    ASSERT_EQ(t.size(), model.size()) << "op " << op;

    if (op % 4 == 0) {
      ASSERT_EQ(WithTag(t, checked_tag), expected_with_tag(checked_tag)) << "op " << op;
      uint32_t h = hot[rng() % hot.size()];
      ASSERT_EQ(WithTag(t, h), expected_with_tag(h)) << "op " << op;
    }
    if (op % 20000 == 19999) {
      // Full comparison: every tag of the model, and every entry findable.
      for (uint32_t tag : hot) ASSERT_EQ(WithTag(t, tag), expected_with_tag(tag));
      for (const auto& [k, e] : model) {
        const IndexEntry* found = t.Find(k.first, k.second);
        ASSERT_NE(found, nullptr);
        ASSERT_EQ(Fields(*found), Fields(e));
      }
    }
  }
}

// ---- PartitionTable::CollectLiveFrom ----

uint32_t HomeIn(const PartitionTable& t, uint32_t tag) {
  return static_cast<uint32_t>((uint64_t{tag} * t.capacity()) >> 32);
}

// (tag, offset) of each entry, sorted.
std::vector<std::pair<uint32_t, uint64_t>> TagsAndOffsets(const std::vector<IndexEntry>& v) {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  for (const IndexEntry& e : v) out.emplace_back(e.tag(), e.offset());
  std::sort(out.begin(), out.end());
  return out;
}

// The live entries of `t` whose tag lies in [from, end), found by a full scan.
std::vector<IndexEntry> LiveInRange(const PartitionTable& t, uint64_t from, uint64_t end) {
  std::vector<IndexEntry> out;
  t.ForEach([&](const IndexEntry& e) {
    if (e.live() && e.tag() >= from && e.tag() < end) out.push_back(e);
  });
  return out;
}

// One page of `t` from `from`, appended to `listed`, checked against what `t`
// holds now: exactly its live entries with a tag in [from, next), in tag
// order; next > from; at least `max` of them unless the page ends the table;
// past the max-th, only entries of the max-th's home. Returns next.
uint64_t CheckedPage(const PartitionTable& t, uint64_t from, size_t max,
                     std::vector<IndexEntry>* listed) {
  std::vector<IndexEntry> page;
  const uint64_t next = t.CollectLiveFrom(static_cast<uint32_t>(from), max, &page);
  EXPECT_GT(next, from);
  EXPECT_LE(next, PartitionTable::kTagEnd);
  EXPECT_EQ(TagsAndOffsets(page), TagsAndOffsets(LiveInRange(t, from, next)))
      << "page [" << from << ", " << next << ") of max " << max << ", capacity " << t.capacity();
  for (size_t i = 1; i < page.size(); ++i) EXPECT_LE(page[i - 1].tag(), page[i].tag());
  const size_t least = std::max<size_t>(max, 1);
  if (next != PartitionTable::kTagEnd) {
    EXPECT_GE(page.size(), least) << "from " << from;
  }
  for (size_t i = least; i < page.size(); ++i) {
    EXPECT_EQ(HomeIn(t, page[i].tag()), HomeIn(t, page[least - 1].tag()))
        << "entry " << i << " of a page of max " << max;
  }
  listed->insert(listed->end(), page.begin(), page.end());
  return next;
}

// Pages through all of `t` from `from`; returns what was listed.
std::vector<IndexEntry> ListAll(const PartitionTable& t, size_t max, uint64_t from = 0) {
  std::vector<IndexEntry> listed;
  while (from != PartitionTable::kTagEnd) {
    from = CheckedPage(t, from, max, &listed);
    if (::testing::Test::HasFailure()) break;
  }
  return listed;
}

constexpr size_t kPageSizes[] = {1, 2, 7, 1000};

TEST(PartitionTableTest, ListingPagesEveryLiveEntryOnceInTagOrder) {
  PartitionTable t;
  std::mt19937 rng(31);
  for (uint32_t i = 0; i < 5000; ++i) {
    const uint32_t tag = rng();
    if (i % 5 == 0) {
      t.Insert(IndexEntry::Tombstone(tag, uint64_t{i} * 16, 16, i));
    } else {
      t.Insert(IndexEntry::Live(tag, uint64_t{i} * 16, 16, 0, 0));
    }
  }
  const auto everything = TagsAndOffsets(LiveInRange(t, 0, PartitionTable::kTagEnd));
  ASSERT_EQ(everything.size(), 4000u);
  for (size_t max : kPageSizes) {
    SCOPED_TRACE(max);
    std::vector<IndexEntry> listed = ListAll(t, max);
    EXPECT_EQ(TagsAndOffsets(listed), everything);
    for (size_t i = 1; i < listed.size(); ++i) ASSERT_LE(listed[i - 1].tag(), listed[i].tag());
  }
  // From the middle: just the entries from that tag on.
  std::vector<IndexEntry> upper = ListAll(t, 7, 0x8000'0000);
  EXPECT_EQ(TagsAndOffsets(upper),
            TagsAndOffsets(LiveInRange(t, 0x8000'0000, PartitionTable::kTagEnd)));
}

TEST(PartitionTableTest, ListingWrapsAroundTheEndOfTheTable) {
  // Entries whose home is the last slot lie wrapped into slots 0, 1, ...,
  // ahead of the entries whose home is there; so do the top tags' neighbours.
  for (uint32_t top : {10u, 40u, 400u}) {
    SCOPED_TRACE(top);
    PartitionTable t;
    uint64_t off = 0;
    for (uint32_t i = 0; i < top; ++i) {
      t.Insert(IndexEntry::Live(0xFFFF'FFFF - i % 8, off += 16, 16, 0, 0));
    }
    for (uint32_t tag : {0u, 0u, 1u, 2u, 0x100u, 0x8000'0000u}) {
      t.Insert(IndexEntry::Live(tag, off += 16, 16, 0, 0));
      t.Insert(IndexEntry::Tombstone(tag + 1, off += 16, 16, 1));
    }
    for (size_t max : kPageSizes) {
      SCOPED_TRACE(max);
      for (uint64_t from : {uint64_t{0}, uint64_t{1}, uint64_t{3}, uint64_t{0x8000'0000},
                            uint64_t{0xFFFF'FFF8}, uint64_t{0xFFFF'FFFF}}) {
        SCOPED_TRACE(from);
        EXPECT_EQ(TagsAndOffsets(ListAll(t, max, from)),
                  TagsAndOffsets(LiveInRange(t, from, PartitionTable::kTagEnd)));
      }
    }
  }
}

TEST(PartitionTableTest, ListingKeepsEntriesSharingATagInOnePage) {
  PartitionTable t;
  std::mt19937 rng(32);
  for (uint32_t i = 0; i < 200; ++i) t.Insert(IndexEntry::Live(0x1234'5678, i * 16u, 16, 0, 0));
  for (uint32_t i = 200; i < 300; ++i) t.Insert(IndexEntry::Live(rng(), i * 16u, 16, 0, 0));
  for (size_t max : kPageSizes) {
    std::vector<IndexEntry> listed;
    size_t pages_with_tag = 0;
    for (uint64_t from = 0; from != PartitionTable::kTagEnd;) {
      std::vector<IndexEntry> page;
      from = CheckedPage(t, from, max, &page);
      ASSERT_FALSE(::testing::Test::HasFailure());
      const auto n = std::count_if(page.begin(), page.end(),
                                   [](const IndexEntry& e) { return e.tag() == 0x1234'5678; });
      if (n > 0) {
        ++pages_with_tag;
        EXPECT_EQ(n, 200) << "max " << max;
      }
      listed.insert(listed.end(), page.begin(), page.end());
    }
    EXPECT_EQ(pages_with_tag, 1u);
    EXPECT_EQ(listed.size(), 300u);
  }
}

TEST(PartitionTableTest, ListingAnEmptyTableOrPastEveryTagEndsAtOnce) {
  PartitionTable t;
  std::vector<IndexEntry> page;
  EXPECT_EQ(t.CollectLiveFrom(0, 10, &page), PartitionTable::kTagEnd);
  EXPECT_EQ(t.CollectLiveFrom(0xFFFF'FFFF, 0, &page), PartitionTable::kTagEnd);
  EXPECT_TRUE(page.empty());
  // Tombstones only.
  for (uint32_t i = 0; i < 50; ++i) t.Insert(IndexEntry::Tombstone(i * 7, (i + 1) * 16u, 16, 1));
  EXPECT_EQ(t.CollectLiveFrom(0, 10, &page), PartitionTable::kTagEnd);
  EXPECT_TRUE(page.empty());
  // Past every tag, the walk starts in the middle of the table and finds nothing.
  for (uint32_t i = 0; i < 500; ++i) t.Insert(IndexEntry::Live(i, (i + 100) * 16u, 16, 0, 0));
  for (uint32_t from : {500u, 0x8000'0000u, 0xFFFF'FFFFu}) {
    EXPECT_EQ(t.CollectLiveFrom(from, 10, &page), PartitionTable::kTagEnd) << from;
    EXPECT_TRUE(page.empty()) << from;
  }
  // `max` 0 counts as 1: the page still moves on. (Tags 0 to 499 all have
  // home 0 here, so they share the page.)
  EXPECT_GT(CheckedPage(t, 0, 0, &page), 0u);
  EXPECT_EQ(page.size(), 500u);
}

TEST(PartitionTableTest, ListingTheSmallestTables) {
  // The smallest capacity (4): one to three entries at the extreme tags, in
  // every combination, listed from every interesting tag.
  const uint32_t tags[] = {0, 1, 0x7FFF'FFFF, 0x8000'0000, 0xFFFF'FFFE, 0xFFFF'FFFF};
  for (uint32_t a : tags) {
    for (uint32_t b : tags) {
      for (uint32_t c : tags) {
        for (int n = 1; n <= 3; ++n) {
          PartitionTable t;
          t.Insert(IndexEntry::Live(a, 16, 16, 0, 0));
          if (n >= 2) t.Insert(IndexEntry::Live(b, 32, 16, 0, 0));
          if (n >= 3) t.Insert(IndexEntry::Live(c, 48, 16, 0, 0));
          ASSERT_EQ(t.capacity(), 4u);
          for (uint32_t from : tags) {
            for (size_t max : {size_t{1}, size_t{2}}) {
              ASSERT_EQ(TagsAndOffsets(ListAll(t, max, from)),
                        TagsAndOffsets(LiveInRange(t, from, PartitionTable::kTagEnd)))
                  << a << " " << b << " " << c << " n " << n << " from " << from;
            }
          }
        }
      }
    }
  }
}

// Pages through a table while entries come, go, move (same tag, new offset,
// as an update or a defragmentation does) and the table grows and shrinks
// between pages: every entry live throughout is listed exactly once.
TEST(PartitionTableTest, ListingSurvivesChangesAndResizesBetweenPages) {
  std::mt19937_64 rng(33);
  std::vector<uint32_t> hot = {0, 1, 0xFFFF'FFFF, 0xFFFF'FFFE, 0x8000'0000};
  auto random_tag = [&]() -> uint32_t {
    return rng() % 4 == 0 ? hot[rng() % hot.size()] : static_cast<uint32_t>(rng());
  };
  int resized = 0;  // pages after which the capacity had changed
  for (size_t max : kPageSizes) {
    for (int round = 0; round < 8; ++round) {
      SCOPED_TRACE(::testing::Message() << "max " << max << " round " << round);
      PartitionTable t;
      struct Item {
        uint32_t tag;
        uint64_t offset;
        bool live_throughout;  // live at the start, and never erased or made a tombstone
      };
      std::vector<Item> items;                   // by id
      std::unordered_map<uint64_t, size_t> ids;  // offset -> id of what is there now
      std::vector<size_t> present;               // ids in the table
      uint64_t next_offset = 0;
      auto insert = [&](bool live, bool initial) {
        const uint32_t tag = random_tag();
        const uint64_t off = (++next_offset) * 16;
        t.Insert(live ? IndexEntry::Live(tag, off, 16, 0, 0)
                      : IndexEntry::Tombstone(tag, off, 16, 1));
        ids[off] = items.size();
        present.push_back(items.size());
        items.push_back(Item{tag, off, live && initial});
      };
      auto pick = [&]() {
        const size_t i = rng() % present.size();
        std::swap(present[i], present.back());
        return present.back();
      };
      const int initial = 50 + static_cast<int>(rng() % 3000);
      for (int i = 0; i < initial; ++i) insert(rng() % 6 != 0, true);

      uint32_t capacity = t.capacity();
      std::map<size_t, int> listed;  // id -> times listed
      uint64_t from = 0;
      int page_no = 0;
      while (from != PartitionTable::kTagEnd) {
        std::vector<IndexEntry> page;
        from = CheckedPage(t, from, max, &page);
        ASSERT_FALSE(::testing::Test::HasFailure());
        for (const IndexEntry& e : page) ++listed[ids.at(e.offset())];
        // Changes between pages: a burst that grows or shrinks the table now
        // and then, else a few of each kind.
        ++page_no;
        const int kind = static_cast<int>(rng() % 10);
        constexpr int kMostEntries = 6000;
        const int size = static_cast<int>(t.size());
        const int n = kind == 0   ? std::min(size * 2 + 10, kMostEntries - size)
                      : kind == 1 ? size * 9 / 10
                                  : static_cast<int>(rng() % 6);
        for (int i = 0; i < n; ++i) {
          const int what = kind == 0 ? 0 : kind == 1 ? 1 : static_cast<int>(rng() % 4);
          if (what == 0 || present.empty()) {
            insert(rng() % 6 != 0, false);
          } else if (what == 1) {
            const size_t id = pick();
            present.pop_back();
            ASSERT_TRUE(t.Erase(items[id].tag, items[id].offset));
            ids.erase(items[id].offset);
            items[id].live_throughout = false;
          } else if (what == 2) {
            // Moves: same tag, a new offset, the same kind.
            const size_t id = pick();
            const IndexEntry* old = t.Find(items[id].tag, items[id].offset);
            ASSERT_NE(old, nullptr);
            const uint64_t off = (++next_offset) * 16;
            const IndexEntry moved = old->live() ? IndexEntry::Live(items[id].tag, off, 16, 0, 0)
                                                 : IndexEntry::Tombstone(items[id].tag, off, 16, 2);
            ASSERT_TRUE(t.Replace(items[id].tag, items[id].offset, moved));
            ids.erase(items[id].offset);
            ids[off] = id;
            items[id].offset = off;
          } else {
            // Becomes a tombstone in place (deleted, or expired by the sweep).
            const size_t id = pick();
            ASSERT_TRUE(t.Replace(items[id].tag, items[id].offset,
                                  IndexEntry::Tombstone(items[id].tag, items[id].offset, 16, 3)));
            items[id].live_throughout = false;
          }
        }
        if (rng() % 16 == 0) {
          // A sweep rebuilds the table (and may shrink it).
          t.Sweep([&](IndexEntry& e) {
            if (e.tombstone() && rng() % 2 == 0) {
              const size_t id = ids.at(e.offset());
              ids.erase(e.offset());
              present.erase(std::find(present.begin(), present.end(), id));
              return false;
            }
            return true;
          });
        }
        if (t.capacity() != capacity) {
          capacity = t.capacity();
          ++resized;
        }
      }
      for (size_t id = 0; id < items.size(); ++id) {
        const auto it = listed.find(id);
        const int times = it == listed.end() ? 0 : it->second;
        if (items[id].live_throughout) {
          EXPECT_EQ(times, 1) << "id " << id << " tag " << items[id].tag;
        } else {
          EXPECT_LE(times, 1) << "id " << id << " tag " << items[id].tag;
        }
      }
    }
  }
  EXPECT_GT(resized, 50);
}

// ---- Index ----

// The index partition is the public routing partition (the vectors of
// PROTOCOL.md), whatever the device's digest seed; the tag is the digest's
// low 32 bits.
TEST(IndexTest, PartitionIsTheRoutingPartitionAndTagIsTheDigest) {
  EXPECT_EQ(Index::kPartitions, 4096u);
  EXPECT_EQ(Index::PartitionOf("foo"), 3045u);
  EXPECT_EQ(Index::PartitionOf("{user1000}.following"), 860u);
  EXPECT_EQ(Index::PartitionOf("{user1000}.followers"), 860u);
  Digest d{0xFEDC'BA98'7654'3210ULL, 0x1111'2222'3333'4444ULL};
  EXPECT_EQ(Index::TagOf(d), 0x7654'3210u);
}

TEST(IndexTest, PartitionsHoldSeparateData) {
  Index index;
  index.Lock(1)->Insert(IndexEntry::Live(99, 16, 16, 0, 0));
  EXPECT_NE(index.Lock(1)->Find(99, 16), nullptr);
  EXPECT_EQ(index.Lock(2)->Find(99, 16), nullptr);
  EXPECT_EQ(index.Lock(0)->size(), 0u);
  EXPECT_EQ(index.Lock(Index::kPartitions - 1)->size(), 0u);
  EXPECT_EQ(index.Lock(1)->size(), 1u);
}

TEST(IndexTest, LockingOnePartitionDoesNotBlockAnother) {
  Index index;
  std::atomic<bool> done{false};
  std::thread other;
  {
    Index::Locked held = index.Lock(1);
    other = std::thread([&] {
      index.Lock(2)->Insert(IndexEntry::Live(5, 16, 16, 0, 0));
      done = true;
    });
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(done) << "locking partition 2 waited for partition 1";
  }  // releases partition 1: the thread can finish even if it was wrongly blocked
  other.join();
  EXPECT_NE(index.Lock(2)->Find(5, 16), nullptr);
}

TEST(IndexTest, LockIsExclusivePerPartition) {
  Index index;
  std::atomic<bool> acquired{false};
  std::thread other;
  {
    Index::Locked held = index.Lock(7);
    other = std::thread([&] {
      Index::Locked mine = index.Lock(7);
      acquired = true;
    });
    // A correct lock never lets it in while held, however long we wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(acquired);
  }
  other.join();
  EXPECT_TRUE(acquired);
}

TEST(IndexTest, UsageCountsEntriesTombstonesAndBytes) {
  Index index;
  Index::Usage empty = index.usage();
  EXPECT_EQ(empty.entries, 0u);
  EXPECT_EQ(empty.tombstones, 0u);
  EXPECT_GT(empty.bytes_allocated, 0u);  // partition headers

  std::mt19937 rng(21);
  for (uint32_t i = 0; i < 1000; ++i) {
    uint32_t p = rng() % Index::kPartitions;
    if (i % 4 == 0) {
      index.Lock(p)->Insert(IndexEntry::Tombstone(rng(), uint64_t{i} * 16, 16, i));
    } else {
      index.Lock(p)->Insert(IndexEntry::Live(rng(), uint64_t{i} * 16, 16, 0, 0));
    }
  }
  uint64_t table_bytes = 0;
  for (uint32_t p = 0; p < Index::kPartitions; ++p) table_bytes += index.Lock(p)->bytes_allocated();
  Index::Usage u = index.usage();
  EXPECT_EQ(u.entries, 1000u);
  EXPECT_EQ(u.tombstones, 250u);
  EXPECT_EQ(u.bytes_allocated, empty.bytes_allocated + table_bytes);
  EXPECT_GE(table_bytes, 1000u * sizeof(IndexEntry));
  // usage() does not disturb anything.
  EXPECT_EQ(index.usage().entries, 1000u);
}

TEST(IndexTest, BytesPerEntryAtMostThirtyTwo) {
  for (uint32_t n : {50000u, 100000u, 200000u}) {
    Index index;
    std::mt19937_64 rng(n);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t r = rng();
      auto partition = static_cast<uint32_t>(r & (Index::kPartitions - 1));
      auto tag = static_cast<uint32_t>(r >> 32);
      index.Lock(partition)->Insert(IndexEntry::Live(tag, uint64_t{i} * 16, 16, 0, 0));
    }
    Index::Usage u = index.usage();
    ASSERT_EQ(u.entries, n);
    double per_entry = double(u.bytes_allocated) / double(u.entries);
    EXPECT_LE(per_entry, 32.0) << n << " entries: " << u.bytes_allocated << " bytes";
  }
}

}  // namespace
}  // namespace segstore::storage
