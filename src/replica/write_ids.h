// What applying a write answered (WriteAnswer), and the window of recent
// writes of one log partition (WriteIdWindow): how a cluster applies a
// write at most once however often a client sends it (proto/PROTOCOL.md,
// "Writes in a cluster"). A retry (the same write ID for the same user) is
// not applied again; it gets the first answer, marked duplicate.
//
// Every replica must judge a retry the same, so the judgement depends on the
// log alone: an entry is a duplicate when one of the `max_entries` entries
// before it in its log partition carried the same write ID for the same
// user, made at most `seconds` before it (entry times, the producers'
// clocks). Not thread-safe: the applier's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "proto/protocol.h"
#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::replica {

// The answer to one write, whichever it was (the op says which field).
struct WriteAnswer {
  Status status;                 // OK, or the write's own error (NotFound, LimitExceeded, ...)
  UpsertResult upsert;           // upsert
  uint32_t removed = 0;          // remove
  TrimResult trim;               // trim
  bool deleted = false;          // delete
  ExpireResult expire;           // expire
  LinkStepResult step;           // link_step
  FieldWriteResult field_write;  // field_set, field_del
  IncrementResult increment;     // field_incr
  FieldMaxResult field_max;      // field_max
  bool duplicate = false;        // applied before: not again
};

class WriteIdWindow {
 public:
  WriteIdWindow(uint32_t seconds, size_t max_entries)
      : seconds_(seconds), max_entries_(max_entries == 0 ? 1 : max_entries) {}

  // For each entry of the log partition, in offset order, whether this node
  // applies it or not (and, after a restart, those from the checkpoint's
  // window start on): true, with the first answer in *answer (marked
  // duplicate; zeros when not known here), when it repeats a write in the
  // window; else false, and the entry is recorded, its answer unknown until
  // Answered().
  bool Admit(const WriteId& id, std::string_view user, UnixSeconds at, proto::Op op,
             WriteAnswer* answer);
  // The answer of the write Admit last recorded.
  void Answered(const WriteAnswer& answer);

  size_t size() const { return order_.size(); }
  size_t max_entries() const { return max_entries_; }

  // The most outcomes of one expire kept for its duplicates: bounds what a
  // window holds (64 bytes an entry) whatever the writes list.
  static constexpr size_t kKeptOutcomes = 256;

 private:
  struct Key {
    WriteId id;
    uint64_t user = 0;  // FNV-1a of the user ID
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return static_cast<size_t>((k.id.hi * 0x9E3779B97F4A7C15ull) ^ k.id.lo ^ (k.user << 1));
    }
  };
  // A compact answer: no message is kept (a duplicate of a failed write says
  // so in its own words).
  struct Kept {
    proto::Op op = proto::Op::kUpsert;
    uint8_t code = 0;        // the status code of a write that failed
    uint32_t v[4] = {};      // the op's counts, in its result's field order
                             // (field_incr: the value's low then high half,
                             // capped; field_max: the value's bits likewise,
                             // its type + 1, replaced)
    UnixSeconds latest = 0;  // the latest entry time seen for the key
    uint32_t entries = 0;    // of the window's entries with this key
    // expire: v[0] is the count, v[1] how many outcomes are kept here, two
    // bits each, four to a byte (none when the write listed more than
    // kKeptOutcomes IDs: a duplicate's results are then not known). Never
    // changed once made: copies of a window may share it.
    std::shared_ptr<uint8_t[]> outcomes;
  };

  const uint32_t seconds_;
  const size_t max_entries_;
  std::unordered_map<Key, Kept, KeyHash> kept_;
  std::deque<Key> order_;  // the window's entries, oldest first
  Kept* last_ = nullptr;   // recorded by the last Admit
};

}  // namespace segstore::replica
