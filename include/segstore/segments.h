// The profile model's plain data types: a segment, what a get asks for and
// returns, what an upsert sends and the results of writes. Shared by the
// profile layer (include/segstore/profile.h), the wire protocol (proto/) and
// the client library (include/segstore/client.h); no behaviour, no
// dependencies beyond the standard library.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace segstore {

using UnixSeconds = uint32_t;
inline constexpr UnixSeconds kNever = 0;  // expires_at of a segment that never expires

struct Segment {
  uint64_t id = 0;
  UnixSeconds expires_at = kNever;
  std::optional<uint32_t> attr1;  // e.g. a partner or source id
  std::optional<uint32_t> attr2;  // e.g. flags
  bool operator==(const Segment&) const = default;
};

// Profile fields (proto/PROTOCOL.md, "Profile fields"): beside its
// segments, a profile holds named, typed values, each with its own expiry:
// counters, last-seen times, scores, strings.
struct FieldValue {
  enum class Type : uint8_t {
    kInt = 0,     // int64 (`i`); counters are these
    kDouble = 1,  // `d`
    kString = 2,  // `s`, text (MessagePack str on the wire)
    kBytes = 3,   // `s`, bytes (MessagePack bin)
    kTime = 4,    // Unix seconds in `i`, 0..2^32-1 (MessagePack timestamp)
  };
  Type type = Type::kInt;
  int64_t i = 0;
  double d = 0;
  std::string s;

  static FieldValue Int(int64_t v) { return FieldValue{Type::kInt, v, 0, {}}; }
  static FieldValue Double(double v) { return FieldValue{Type::kDouble, 0, v, {}}; }
  static FieldValue String(std::string v) { return FieldValue{Type::kString, 0, 0, std::move(v)}; }
  static FieldValue Bytes(std::string v) { return FieldValue{Type::kBytes, 0, 0, std::move(v)}; }
  static FieldValue Time(UnixSeconds v) { return FieldValue{Type::kTime, v, 0, {}}; }
  // Doubles compare by their bits: a stored NaN equals itself.
  bool operator==(const FieldValue& o) const;
};
struct Field {
  std::string name;  // 1 to 64 bytes
  FieldValue value;
  UnixSeconds expires_at = kNever;
  bool operator==(const Field&) const = default;
};

inline bool FieldValue::operator==(const FieldValue& o) const {
  return type == o.type && i == o.i && std::bit_cast<uint64_t>(d) == std::bit_cast<uint64_t>(o.d) &&
         s == o.s;
}

// Which fields a get returns (none by default: a get costs what it did
// before fields existed).
struct FieldSelection {
  enum class Mode : uint8_t {
    kNone = 0,    // no fields
    kAll = 1,     // every live field
    kNames = 2,   // the live ones among `names`
    kPrefix = 3,  // the live ones whose name starts with `prefix` ("cap:")
  };
  Mode mode = Mode::kNone;
  std::vector<std::string> names;
  std::string prefix;
  bool operator==(const FieldSelection&) const = default;
};

// What a get returns and how.
struct GetOptions {
  // Only segments whose expiry lies in [expiry_from, expiry_to] (a segment
  // that never expires counts as expiring at +infinity); with
  // `outside_expiry_window`, only those outside it ("will not expire today":
  // window [now, end of today], outside).
  UnixSeconds expiry_from = 0;
  UnixSeconds expiry_to = UINT32_MAX;
  bool outside_expiry_window = false;
  // Only segment IDs in [id_from, id_to].
  uint64_t id_from = 0;
  uint64_t id_to = UINT64_MAX;
  // Count, do not list.
  bool count_only = false;
  // At most this many segments, lowest IDs first (0: all). `count` still
  // reports every match.
  uint32_t limit = 0;
  // Segment IDs only (what a bidder matching campaigns needs): no expiries
  // or attributes in the result.
  bool ids_only = false;
  // A linked user (profile bridging): only its own profile, not the merged
  // view of its group.
  bool own_only = false;
  // The profile's fields to return beside its segments.
  FieldSelection fields;
};

// The matching live segments, column by column (the read path's own layout:
// cheaper to fill than one struct per segment). Row i is ids[i], expires[i]
// (unless ids_only), attr1[i] and attr2[i] (those two only when some matching
// segment has the attribute; otherwise empty).
struct GetResult {
  std::vector<uint64_t> ids;
  std::vector<UnixSeconds> expires;
  std::vector<std::optional<uint32_t>> attr1;
  std::vector<std::optional<uint32_t>> attr2;
  uint32_t count = 0;  // live segments matching the options (all of them, whatever `limit`)
  // Set by the client library: the cluster node that answered read a copy
  // that may be behind the cluster's log (proto/PROTOCOL.md, "Stale reads").
  bool stale = false;
  // A linked user's read (profile bridging): the master of the group whose
  // merged view this is, and how many profiles it merged (the master's and
  // its members'). Empty and 0 for a user in no group, or with own_only.
  std::string master;
  uint32_t profiles = 0;
  // The live fields GetOptions::fields asked for, sorted by name (a linked
  // user's: its master's).
  std::vector<Field> fields;
  // Whether fields were asked for (GetOptions::fields not kNone): the wire
  // answer then carries "fields", even when none is live. Set by the server
  // before it answers, and by the client when the answer carries them.
  bool fields_asked = false;

  size_t size() const { return ids.size(); }
  // Row i as a Segment (expires_at is kNever when the result is ids_only).
  Segment At(size_t i) const {
    return Segment{ids[i], expires.empty() ? kNever : expires[i],
                   attr1.empty() ? std::nullopt : attr1[i],
                   attr2.empty() ? std::nullopt : attr2[i]};
  }
  std::vector<Segment> ToSegments() const {
    std::vector<Segment> out;
    out.reserve(size());
    for (size_t i = 0; i < size(); ++i) out.push_back(At(i));
    return out;
  }
};

// Profile bridging (proto/PROTOCOL.md, "Linked profiles"): users linked to
// a master share its group, and a get by any of them reads the group's
// merged view.
struct LinkedUser {
  std::string user;
  UnixSeconds expires_at = kNever;  // when the link expires (kNever: never)
  bool operator==(const LinkedUser&) const = default;
};
struct LinkResult {
  std::string master;    // the group's master after the link
  uint32_t members = 0;  // users linked to it now (the master not counted)
  uint32_t moved = 0;    // members of the user's own former group that moved with it
};
struct LinksPage {
  std::string master;             // the group's
  std::vector<LinkedUser> links;  // sorted by user, after the cursor asked
  std::string next;               // the cursor for the next page; empty at the end
};

// One step of a link, an unlink or a group's delete: a read-modify-write of
// the record of `user` alone, deterministic (what it does depends on that
// record and the step only), so that a cluster's log can carry it and every
// replica of the user's partition applies it alike. The operations are
// sequences of steps in an order that never lets a read count a link that
// was not made (src/profile/group_write.cc); each step checks that the
// record is still as the operation read it where that matters, and
// otherwise changes nothing and says `changed`.
struct LinkStep {
  enum class Kind : uint8_t {
    // `user` (the target) lists `member` and `moving` (with their links'
    // expiries), dropping expired links; a pointer it held is cleared
    // (it is a master now). Changed: its record does not name `expect`.
    // LimitExceeded past `max_links` members (nothing written).
    kList = 1,
    // `user` names `master`, its link expiring `expires`, keeping no
    // members. Changed: it lists a live member neither in `moving` nor,
    // with `stale`, in `listed` (it gained a member since it was read).
    kName = 2,
    // `user` (a member of the group moving) names `master`, its link
    // expiring `expires`, unless it names another than `expect` or
    // `master` (it moved elsewhere meanwhile) or has no record.
    kNameMoved = 3,
    // `user` (a master) lists `member` no more.
    kDrop = 4,
    // `user` loses its link, if it names `master` (any, if empty), and with
    // `members_too` its members; no segments and no link left: deleted.
    kClear = 5,
    // `user` is deleted if it names `master` with a live link.
    kDeleteMember = 6,
    // `user` is deleted (the last step of a grouped user's delete).
    kDelete = 7,
  };
  Kind kind = Kind::kList;
  std::string user;
  std::string master;
  std::string member;
  std::string expect;
  UnixSeconds expires = kNever;
  std::vector<LinkedUser> moving;
  std::vector<std::string> listed;
  bool stale = false;
  bool members_too = false;
  uint32_t max_links = 0;
  bool operator==(const LinkStep&) const = default;
};
struct LinkStepResult {
  bool applied = false;  // the record changed
  bool changed = false;  // it was not as read: the operation starts over
  uint32_t members = 0;  // kList: the target's members after it
  // A cluster applied a step with this step's write ID before (as
  // UpsertResult's).
  bool duplicate = false;
  bool operator==(const LinkStepResult&) const = default;
};

// One field to set: its value and its expiry, as a segment's (with `ttl`,
// now + `expiry` seconds; without, at `expiry`; kNever: never).
struct FieldUpdate {
  std::string name;
  FieldValue value;
  uint32_t expiry = kNever;
  bool ttl = false;
};

// An atomic increment of an int field (a counter).
struct FieldIncrement {
  std::string name;
  int64_t delta = 1;
  // Seconds the counter lives (0: never expires). kFixed: set when the
  // counter is made (a new or expired one) and kept by later increments: a
  // fixed window ("3 a day"). kSliding: every increment sets it again.
  uint32_t ttl = 0;
  enum class Window : uint8_t { kFixed = 0, kSliding = 1 };
  Window window = Window::kFixed;
  // With a cap, an increment that would take the value past it (above it
  // for a positive delta, below it for a negative one) is refused:
  // nothing is written and the result says so.
  std::optional<int64_t> cap;
};
// What field_set and field_del did.
struct FieldWriteResult {
  uint32_t changed = 0;    // fields set; or live fields deleted
  uint32_t count = 0;      // live fields after the write
  bool duplicate = false;  // as UpsertResult's
};
// What field_max did.
struct FieldMaxResult {
  FieldValue value;        // the field's value after it
  bool replaced = false;   // the given value was larger (or the field absent): it is the field now
  bool duplicate = false;  // as UpsertResult's
};
struct IncrementResult {
  int64_t value = 0;       // the counter after the increment (before it, when capped)
  bool capped = false;     // refused: the cap would have been passed
  bool duplicate = false;  // as UpsertResult's
};

enum class UpsertMode : uint8_t {
  kSet,     // the expiry becomes the given one
  kExtend,  // the later of the current and the given expiry
  kAdd,     // the current expiry plus `value` seconds (a new segment: now + value)
};

// One segment to insert or update.
struct SegmentUpdate {
  uint64_t id = 0;
  // kSet/kExtend: with `ttl`, expires at now + value seconds; without, at
  // `value` (Unix seconds; kNever: never). kAdd: seconds to add.
  uint32_t value = 0;
  bool ttl = false;
  // Set when present; kept (or absent, for a new segment) otherwise.
  std::optional<uint32_t> attr1;
  std::optional<uint32_t> attr2;
};

// How an upsert treats the segments it names.
struct UpsertOptions {
  UpsertMode mode = UpsertMode::kSet;
  // False: a segment's attributes are set where given and kept (or absent,
  // for a new segment) where not. True: each named segment's attributes
  // become exactly the given ones; one not given is cleared.
  bool replace_attrs = false;
};

// When expire changes a segment's expiry, judged against its current one.
// "Never" counts as +infinity on both sides.
enum class ExpireCondition : uint8_t {
  kNone,  // always
  kNx,    // only if the segment never expires
  kXx,    // only if it has an expiry
  kGt,    // only if the new expiry is later than the current one
  kLt,    // only if the new expiry is earlier than the current one
};

// What expire sets: the new expiry and the condition for setting it.
struct ExpireSpec {
  // With `ttl`, expires at now + value seconds (0: now, so the segment is
  // removed); without, at `value` (Unix seconds; kNever: never expires).
  uint32_t value = 0;
  bool ttl = false;
  ExpireCondition condition = ExpireCondition::kNone;
};

// What expire did to one listed segment ID (the wire carries the number).
enum class ExpireOutcome : uint8_t {
  kMissing = 0,    // the profile holds no live segment with this ID
  kSet = 1,        // the segment's expiry is now the new one
  kRemoved = 2,    // the new expiry was not in the future: the segment is gone
  kUnchanged = 3,  // the condition did not hold: nothing changed
};

struct ExpireResult {
  std::vector<ExpireOutcome> results;  // one per listed ID, in the order listed
  uint32_t count = 0;                  // live segments after the write
  // As UpsertResult's. A duplicate whose first answer the node no longer
  // knows has no results and a count of 0.
  bool duplicate = false;
};

// Names one write so that a cluster applies it at most once, however often
// it is sent (proto/PROTOCOL.md, "Writes in a cluster"): 16 bytes, unique
// per write (random, or a random client ID and a counter). All zeros: none.
struct WriteId {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool empty() const { return hi == 0 && lo == 0; }
  bool operator==(const WriteId&) const = default;
};

struct UpsertResult {
  uint32_t inserted = 0;
  uint32_t updated = 0;
  uint32_t trimmed = 0;  // expired segments removed by this write
  uint32_t count = 0;    // live segments after it
  // A cluster applied a write with this write's ID before: it was not
  // applied again, and the counts are the first one's (zeros when the node
  // that answered no longer knows them).
  bool duplicate = false;
};

struct TrimResult {
  uint32_t trimmed = 0;
  uint32_t remaining = 0;
  bool duplicate = false;  // as UpsertResult's
};

}  // namespace segstore
