// What applying a write answered (WriteAnswer), and the window of write IDs a
// replica applied lately with their answers (WriteIdWindow): how a cluster
// applies a write at most once however often a client sends it
// (proto/PROTOCOL.md, "Writes in a cluster"). A retry whose ID is in the
// window is not applied again; it gets the first answer, marked duplicate.
//
// Not thread-safe: the applier's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "proto/protocol.h"
#include "segstore/segments.h"
#include "segstore/status.h"

namespace segstore::replica {

// The answer to one write, whichever it was (the op says which field).
struct WriteAnswer {
  Status status;          // OK, or the write's own error (NotFound, LimitExceeded, ...)
  UpsertResult upsert;    // upsert
  uint32_t removed = 0;   // remove
  TrimResult trim;        // trim
  bool deleted = false;   // delete
  bool duplicate = false; // applied before: not again
};

struct WriteIdHash {
  size_t operator()(const WriteId& id) const {
    return static_cast<size_t>(id.hi * 0x9E3779B97F4A7C15ull ^ id.lo);
  }
};

class WriteIdWindow {
 public:
  // Keeps each ID for `seconds` of entry time after the newest entry seen,
  // and at most `max_ids` IDs (the oldest go first past that).
  WriteIdWindow(uint32_t seconds, size_t max_ids) : seconds_(seconds), max_ids_(max_ids) {}

  // The answer recorded for `id`, marked duplicate; false when `id` is not in
  // the window. An ID recorded without its answer (seen while the window was
  // rebuilt from the log after a restart) gives an OK answer with zero counts.
  bool Find(const WriteId& id, WriteAnswer* answer) const;
  // Records `id`, a write of `op` applied at entry time `at`, with its
  // answer (null: not known). A second Add of the same ID keeps the first.
  void Add(const WriteId& id, uint32_t at, proto::Op op, const WriteAnswer* answer);
  // Drops what fell out of the window.
  void Expire();

  size_t size() const { return ids_.size(); }
  uint32_t seconds() const { return seconds_; }

 private:
  // A compact answer: no message is kept (a duplicate of a failed write says
  // so in its own words).
  struct Kept {
    uint8_t code = 0;  // the status code of a write that failed
    uint32_t v[4] = {};  // the op's counts, in its result's field order
  };

  const uint32_t seconds_;
  const size_t max_ids_;
  uint32_t newest_ = 0;  // latest entry time seen
  std::unordered_map<WriteId, Kept, WriteIdHash> ids_;
  std::deque<std::pair<uint32_t, WriteId>> order_;  // (entry time, id), as added
};

}  // namespace segstore::replica
