// The profile operations as pure functions over decoded segments: what a get
// selects, how an upsert merges, what remove and trim keep, and when a record
// becomes worth sweeping. No I/O; thread-safe.
#pragma once

#include <span>
#include <vector>

#include "profile/codec.h"
#include "segstore/profile.h"

namespace segstore::profile {

// A segment is live while `at` is before its expiry (PROTOCOL.md, Types).
inline bool Alive(UnixSeconds expires_at, UnixSeconds at) {
  return expires_at == kNever || expires_at > at;
}

// A segment that never expires counts as expiring at +infinity: inside a
// window only when the window has no upper end.
inline bool InWindow(UnixSeconds expires_at, const GetOptions& o) {
  if (expires_at == kNever) return o.expiry_to == UINT32_MAX;
  return expires_at >= o.expiry_from && expires_at <= o.expiry_to;
}

// How many segments of `c` are live at `now` (0: the profile does not exist).
uint32_t LiveCount(const Columns& c, UnixSeconds now);

// The live segments of `c` at `now` that match `o`, into `out`. Returns how
// many segments are live at all (0: the profile does not exist for readers).
uint32_t Select(const Columns& c, UnixSeconds now, const GetOptions& o, GetResult* out);

// The merged view of a group of linked profiles (profile bridging) at `now`:
// the union of their live segments, each with the latest expiry found among
// them (kNever the latest of all) and the attributes of the profile that gave
// it (the earliest in `profiles` on a tie). Into `out`, sorted by id.
void MergeProfiles(std::span<const Columns* const> profiles, UnixSeconds now, Columns* out);

// Memory SelectMerged reuses from one call to the next: keep one per thread
// (not thread-safe), so that a merged read allocates nothing once it has
// grown. Only SelectMerged reads or writes it.
struct MergeScratch {
  // A live row's claim on its id: its expiry's rank (a later one is larger,
  // kNever the largest) in the high 32 bits, and the complement of the row's
  // number over the whole group (profile after profile) in the low 32; so
  // the larger of two claims is the row the merged view keeps, and on equal
  // expiries it is the earlier profile's.
  struct Row {
    uint64_t id;
    uint64_t claim;
  };
  std::vector<uint64_t> best;       // dense ids: per id of a block, its best claim; all 0 after
  std::vector<size_t> cursor;       // dense ids: per profile, its first row not merged
  std::vector<Row> runs, merged;    // sparse ids: sorted runs of claims, merged pairwise
  std::vector<uint32_t> run_ends;   // sparse ids: where each run in `runs` ends
  std::vector<uint32_t> first_row;  // per profile, its first row's number; then the total
  Columns fallback;                 // a group of 2^32 rows or more: MergeProfiles into it
};

// Exactly what MergeProfiles(profiles, now) and then Select(merged, now, o,
// out) give, and the same count of live segments (0: the group has no live
// segment), in one pass and without the merged profile in between: what a
// get by a linked user answers (group_read.cc). Where the group's ids span
// a range under 64 times its rows (the reference workload's 82,000 ids do),
// each row is put straight in its id's place, a block of ids at a time;
// otherwise the profiles' live rows are merged pairwise. Neither has a
// branch on how the profiles' ids interleave (a heap's compares mispredict
// about every other time on such data).
uint32_t SelectMerged(std::span<const Columns* const> profiles, UnixSeconds now,
                      const GetOptions& o, MergeScratch* scratch, GetResult* out);

// Checks an upsert request before anything is read: ids unique, expiries in
// the future, TTLs that fit. InvalidArgument names the first offending segment.
Status ValidateUpsert(std::span<const SegmentUpdate> updates, UpsertMode mode, UnixSeconds now);

// Applies `updates` (validated) to the current segments `c` (null: none) at
// `now`, dropping expired ones: the new profile into `out`, sorted by id.
UpsertResult Merge(const Columns* c, std::span<const SegmentUpdate> updates,
                   const UpsertOptions& how, UnixSeconds now, std::vector<Segment>* out);
inline UpsertResult Merge(const Columns* c, std::span<const SegmentUpdate> updates, UpsertMode mode,
                          UnixSeconds now, std::vector<Segment>* out) {
  return Merge(c, updates, UpsertOptions{mode}, now, out);
}

// Checks an expire request before anything is read: a TTL must not run past
// 2^32-1 at `now` (InvalidArgument).
Status ValidateExpire(const ExpireSpec& spec, UnixSeconds now);

// Whether expire's `condition` holds for a segment expiring at `current`
// given the new expiry `target` (kNever counts as +infinity on both sides).
bool ExpireHolds(ExpireCondition condition, UnixSeconds current, UnixSeconds target);

// Applies expire (validated) to `c` at `now`: each of `ids` judged against
// `c` as it is, one outcome per ID in *result (count included); the new
// profile into `out`, without the expired segments (how many: *trimmed).
// Returns whether any outcome is set or removed.
bool ApplyExpire(const Columns& c, std::span<const uint64_t> ids, const ExpireSpec& spec,
                 UnixSeconds now, ExpireResult* result, std::vector<Segment>* out,
                 uint32_t* trimmed);

// Keeps the live segments of `c` whose ids are not in `ids`; returns how many
// live ones were removed, and in *trimmed how many had expired.
uint32_t RemoveIds(const Columns& c, std::span<const uint64_t> ids, UnixSeconds now,
                   std::vector<Segment>* out, uint32_t* trimmed);

// Keeps the segments of `c` that are still alive at `before` (>= now).
TrimResult TrimBefore(const Columns& c, UnixSeconds before, std::vector<Segment>* out);

// Whether `g` (a master's group) lists `user` with a link live at `now`.
bool ListsLive(const Group& g, std::string_view user, UnixSeconds now);

// The engine's times for a record holding `segments` and fields expiring at
// `fields` (all live; kNever: never): void_at, when the last of them expires
// (0 if one never does); sweep_at, when `share` of them will have expired (0
// if that never happens), never later than void_at. A field counts as a
// segment does.
struct RecordTimes {
  UnixSeconds sweep_at = 0;
  UnixSeconds void_at = 0;
};
RecordTimes TimesFor(std::span<const Segment> segments, double share,
                     std::span<const UnixSeconds> fields = {});
// The same from the segments' expiries alone (Columns::expires).
RecordTimes TimesFor(std::span<const UnixSeconds> segment_expiries, double share,
                     std::span<const UnixSeconds> fields);

}  // namespace segstore::profile
