// The profile layer: one record per user, holding a key-ordered map of
// audience segments, each with its own expiry. Built on the storage engine
// (include/segstore/storage.h); knows nothing of sockets.
//
// Time: every operation reads the store's clock (injectable). A segment whose
// expires_at has passed is invisible to every read from that second on; a
// profile with no live segment does not exist for readers.
//
// Threads: a ProfileStore is shared. Each thread opens a ProfileSession (it
// wraps that thread's storage Worker) and uses it from that thread only.
// Operations are asynchronous like the engine's: callbacks run on the
// session's thread inside Poll()/Wait(), never inside the starting call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/messages.h"
#include "segstore/result.h"
#include "segstore/segments.h"
#include "segstore/storage.h"

namespace segstore::profile {

using segstore::ExpireCondition;
using segstore::ExpireOutcome;
using segstore::ExpireResult;
using segstore::ExpireSpec;
using segstore::Field;
using segstore::FieldMaxResult;
using segstore::FieldSelection;
using segstore::FieldUpdate;
using segstore::FieldValue;
using segstore::FieldWriteResult;
using segstore::GetOptions;
using segstore::GetResult;
using segstore::IncrementResult;
using segstore::kNever;
using segstore::LinkedUser;
using segstore::LinkResult;
using segstore::LinksPage;
using segstore::Segment;
using segstore::SegmentUpdate;
using segstore::TrimResult;
using segstore::UnixSeconds;
using segstore::UpsertMode;
using segstore::UpsertOptions;
using segstore::UpsertResult;

struct ProfileOptions {
  // A write that would leave a profile with more segments is refused.
  uint32_t max_segments = 10000;
  // Profile fields: a write that would leave a profile with more live
  // fields, or a string or bytes value larger than max_field_bytes, is
  // refused (LimitExceeded).
  uint32_t max_fields = 256;
  uint32_t max_field_bytes = 1024;
  // Field names numbered in the store's name table (the rest are stored in
  // each body, costing their bytes): src/profile/field_names.h.
  uint32_t max_field_names = 65535;
  // Profile bridging: at most this many users linked to one master (a link
  // beyond is refused with LimitExceeded), so a merged read reads at most
  // this many profiles besides the master's.
  uint32_t max_links = 64;
  // A record becomes worth rewriting (sweep_at) once this share of its
  // segments has expired.
  double sweep_share = 0.25;
  // The expiry sweeper: a background thread that rewrites records whose
  // sweep_at has passed, without their expired segments, at most this many
  // records a second. Records with nothing left alive are dropped by the
  // engine unread (void_at). A record comes due about every 180 hours on the
  // reference workload (a quarter of 30 days), so 500 a second keeps up with
  // some 300 million users; at that rate the p99 of gets beside it stayed
  // within 10% on the project's machine (bench/sweeper_bench).
  bool sweeper = true;
  uint32_t sweep_records_per_second = 500;
  std::chrono::milliseconds sweep_interval{100};
  // The sweeper's rewrites are buffered whatever the store's durability, and
  // reach the device at least this often: losing one in a crash only brings
  // back expired segments, which every read hides, and the record is simply
  // due again. Fewer, larger flushes disturb foreground reads less.
  std::chrono::milliseconds sweep_flush_interval{1000};
  // In a cluster with a log (0 elsewhere): the sweeper drops only segments
  // expired this long ago, and a profile a log entry emptied keeps that
  // entry's log position this long: so that an entry applied late, or
  // replayed after a restart, finds what the others found. Set it with the
  // store's void_grace_seconds.
  uint32_t log_grace_seconds = 0;
};

// What the sweeper has done since the store opened.
struct SweeperStats {
  uint64_t records_visited = 0;    // due records read
  uint64_t records_rewritten = 0;  // rewritten without their expired segments
  uint64_t records_deleted = 0;    // nothing was left alive
  uint64_t segments_removed = 0;
  uint64_t fields_removed = 0;   // expired profile fields
  uint64_t bytes_reclaimed = 0;  // record bytes no longer stored
};

template <typename T>
using Callback = std::function<void(Result<T>)>;

// How a write is made. A client's write on a single server (the default)
// happens at the store's clock and records nothing more. A cluster replica
// applying an entry of the cluster's log (src/replica) gives the entry's
// time, so that every replica computes the same record whatever its clock
// and its lag, and the entry's log position, which the written record keeps
// (profile codec 2): an entry replayed after a restart finds its user's
// record at or past its position and is not applied again.
struct WriteContext {
  UnixSeconds now = 0;        // 0: the store's clock
  uint64_t log_position = 0;  // 0: none; else the entry's position (>= 1)
};

// Profile bridging on a cluster node: where a session reads the records of
// users whose partitions other nodes hold, and how a link's steps reach the
// node holding each step's record (which writes it through the cluster's
// log). A single server has none: everything is read and written here.
// Callbacks run on the session's thread, never inside the call.
class GroupPeers {
 public:
  virtual ~GroupPeers() = default;
  // Whether this node serves `user`'s partition now (its copy is current).
  virtual bool Holds(std::string_view user) = 0;
  // The records of `users` (none of them held here), one per user in
  // order; NotFound for a user without a record.
  virtual void Read(std::vector<std::string> users,
                    Callback<std::vector<Result<StoredRecord>>> done) = 0;
  // Applies `step` where its user is held (here too), through the log.
  virtual void Step(const LinkStep& step, Callback<LinkStepResult> done) = 0;
};

class ProfileSession {
 public:
  virtual ~ProfileSession() = default;

  // The live segments of `user`. NotFound when it has none.
  virtual void Get(std::string_view user, const GetOptions& options, Callback<GetResult> done) = 0;
  // Many users at once; their device reads are issued together. Each user's
  // result (or error, NotFound included) in the order asked.
  virtual void BatchGet(std::span<const std::string> users, const GetOptions& options,
                        Callback<std::vector<Result<GetResult>>> done) = 0;

  // The writes. Each takes a WriteContext; the overloads without one are a
  // client's write at the store's clock. With a log position, every write
  // fails with Conflict, writing nothing, when the user's record already
  // holds that position or a later one (the entry was applied before).

  // Inserts or updates segments; expired ones are trimmed in the same write.
  // InvalidArgument: a duplicate id, or an expiry that is not in the future.
  // LimitExceeded: more than max_segments would result. Nothing is written then.
  virtual void Upsert(const WriteContext& w, std::string_view user,
                      std::span<const SegmentUpdate> updates, const UpsertOptions& how,
                      Callback<UpsertResult> done) = 0;
  void Upsert(const WriteContext& w, std::string_view user, std::span<const SegmentUpdate> updates,
              UpsertMode mode, Callback<UpsertResult> done) {
    Upsert(w, user, updates, UpsertOptions{mode}, std::move(done));
  }
  // Removes these segment IDs (an ID listed twice counts once); returns how
  // many of them were live. NotFound, writing nothing, when the user has no
  // live segment.
  virtual void Remove(const WriteContext& w, std::string_view user, std::span<const uint64_t> ids,
                      Callback<uint32_t> done) = 0;
  // Removes every segment that is not live at `before` (expires_at <=
  // before; never-expiring ones stay), live ones included; a time earlier
  // than now (0 included) is now. NotFound, writing nothing, when the user
  // has no live segment.
  virtual void Trim(const WriteContext& w, std::string_view user, UnixSeconds before,
                    Callback<TrimResult> done) = 0;
  // Deletes the whole profile, durably (always committed): it never comes
  // back. Returns whether there was one.
  virtual void Delete(const WriteContext& w, std::string_view user, Callback<bool> done) = 0;
  // Sets the expiry of these segment IDs to `spec`'s where its condition
  // holds, each judged against the profile as it was (an ID listed twice
  // gets the same outcome twice): one ExpireOutcome per listed ID, in order,
  // and the live segments after. A new expiry not in the future (a past
  // time, or a TTL of 0) removes the segment; attributes are kept. Expired
  // segments are removed in the same write; nothing is written when no
  // outcome is set or removed and nothing had expired. NotFound, writing
  // nothing, when the user has no live segment; InvalidArgument when a TTL
  // runs past 2^32-1; LimitExceeded for more than max_segments IDs.
  virtual void Expire(const WriteContext& w, std::string_view user, std::span<const uint64_t> ids,
                      const ExpireSpec& spec, Callback<ExpireResult> done) = 0;

  void Upsert(std::string_view user, std::span<const SegmentUpdate> updates, UpsertMode mode,
              Callback<UpsertResult> done) {
    Upsert(WriteContext{}, user, updates, UpsertOptions{mode}, std::move(done));
  }
  void Upsert(std::string_view user, std::span<const SegmentUpdate> updates,
              const UpsertOptions& how, Callback<UpsertResult> done) {
    Upsert(WriteContext{}, user, updates, how, std::move(done));
  }
  void Remove(std::string_view user, std::span<const uint64_t> ids, Callback<uint32_t> done) {
    Remove(WriteContext{}, user, ids, std::move(done));
  }
  void Trim(std::string_view user, UnixSeconds before, Callback<TrimResult> done) {
    Trim(WriteContext{}, user, before, std::move(done));
  }
  void Delete(std::string_view user, Callback<bool> done) {
    Delete(WriteContext{}, user, std::move(done));
  }
  void Expire(std::string_view user, std::span<const uint64_t> ids, const ExpireSpec& spec,
              Callback<ExpireResult> done) {
    Expire(WriteContext{}, user, ids, spec, std::move(done));
  }

  // ---- Profile bridging: groups of linked users (a star: one master, its
  // members). A get by any linked user answers the group's merged view.
  //
  // `user` joins the group of `master` (of master's own master when master
  // is a member: no chains), its link expiring `ttl_seconds` after now (0:
  // never). When `user` is a master itself, its whole group moves with it.
  // Linking again refreshes the expiry. InvalidArgument: user == master (or
  // master is a member of user's group: user is its master already... that
  // succeeds as it is). LimitExceeded: the master would have more than
  // max_links members (nothing is written). Busy: other links kept changing
  // the group.
  virtual void Link(const WriteContext& w, std::string_view user, std::string_view master,
                    uint32_t ttl_seconds, Callback<LinkResult> done) = 0;
  // `user` leaves its group: true when it was linked. A master's unlink
  // dissolves its group (every member leaves). The user's own profile stays.
  virtual void Unlink(const WriteContext& w, std::string_view user, Callback<bool> done) = 0;
  // The master of `user`'s group (`user` itself for a master). NotFound when
  // it is in no group.
  virtual void MasterOf(std::string_view user, Callback<std::string> done) = 0;
  // The users linked to the master of `user`'s group, sorted, after
  // `cursor` (exclusive; empty: from the start), at most `max` (0: 100).
  // NotFound when `user` is in no group.
  virtual void Links(std::string_view user, std::string_view cursor, uint32_t max,
                     Callback<LinksPage> done) = 0;
  // Whether `a` and `b` are in the same group (or are the same user).
  virtual void Connected(std::string_view a, std::string_view b, Callback<bool> done) = 0;
  // On a cluster node: where the records of other nodes' users are read and
  // a link's steps written (null, the default: a single server). Set before
  // the first operation; `peers` outlives the session.
  virtual void SetGroupPeers(GroupPeers* peers) = 0;
  // Whether `user`'s record takes part in a group (names a master, or has a
  // group section): one read here. A cluster node deletes such a user with
  // Delete (its group's steps), any other with a plain delete entry.
  virtual void Grouped(std::string_view user, Callback<bool> done) = 0;
  // The user whose record a field write of `user` changes: its master when
  // `user` is a member whose link counts, else `user` itself. The user's
  // record and its master's are read (the master's perhaps on another node),
  // never the other members': how a cluster node routes a field write.
  virtual void FieldTarget(std::string_view user, Callback<std::string> done) = 0;
  // One step of a link, unlink or group delete on `step.user`'s record
  // alone (segments.h): how a cluster node applies the steps its log
  // carries, and how Link, Unlink and Delete make their writes.
  virtual void ApplyLinkStep(const WriteContext& w, const LinkStep& step,
                             Callback<LinkStepResult> done) = 0;

  // ---- Profile fields (proto/PROTOCOL.md, "Profile fields"): typed values
  // beside the segments, each with its own expiry. Every one of these is
  // one read-modify-write of the user's record, as upsert is; a profile
  // that has none is made. Each checks its request before reading
  // anything: InvalidArgument (a name empty or over 64 bytes, a name twice,
  // a time outside 32 bits, an expiry not in the future), LimitExceeded (a
  // value over max_field_bytes, more than max_fields live fields).
  //
  // Sets these fields (each replaced whole: value, type and expiry).
  virtual void FieldSet(const WriteContext& w, std::string_view user,
                        std::span<const FieldUpdate> fields, Callback<FieldWriteResult> done) = 0;
  // Deletes these fields; `changed` counts the live ones among them.
  // NotFound, writing nothing, when the user has no profile.
  virtual void FieldDelete(const WriteContext& w, std::string_view user,
                           std::span<const std::string> names, Callback<FieldWriteResult> done) = 0;
  // Adds `inc.delta` to an int field (a new or expired one starts at 0),
  // atomically: see FieldIncrement. InvalidArgument when the field holds
  // another type, or the sum overflows 64 bits.
  virtual void FieldIncrement(const WriteContext& w, std::string_view user,
                              const segstore::FieldIncrement& inc,
                              Callback<IncrementResult> done) = 0;
  // Sets the field to `f` if `f.value` is larger than the live value (an
  // absent or expired field: always), keeping the larger: "last seen".
  // Int, double and time values; InvalidArgument for another type or when
  // the field holds another type.
  virtual void FieldMax(const WriteContext& w, std::string_view user, const FieldUpdate& f,
                        Callback<FieldMaxResult> done) = 0;

  // Live segments with IDs in [id_from, id_to]. NotFound when the user has
  // no live segment.
  virtual void Count(std::string_view user, uint64_t id_from, uint64_t id_to,
                     Callback<uint32_t> done) = 0;

  // Event-loop integration, as storage::Worker.
  virtual storage::Worker& worker() = 0;
  size_t Poll() { return worker().Poll(); }
  size_t Wait(std::chrono::milliseconds timeout) { return worker().Wait(timeout); }

  // Blocking helpers.
  Result<GetResult> GetSync(std::string_view user, const GetOptions& options = {});
  Result<std::vector<Result<GetResult>>> BatchGetSync(std::span<const std::string> users,
                                                      const GetOptions& options = {});
  Result<UpsertResult> UpsertSync(std::string_view user, std::span<const SegmentUpdate> updates,
                                  UpsertMode mode = UpsertMode::kSet);
  Result<UpsertResult> UpsertSync(std::string_view user, std::span<const SegmentUpdate> updates,
                                  const UpsertOptions& how);
  Result<uint32_t> RemoveSync(std::string_view user, std::span<const uint64_t> ids);
  Result<TrimResult> TrimSync(std::string_view user, UnixSeconds before = 0);
  Result<uint32_t> CountSync(std::string_view user, uint64_t id_from = 0,
                             uint64_t id_to = UINT64_MAX);
  Result<bool> DeleteSync(std::string_view user);
  Result<ExpireResult> ExpireSync(std::string_view user, std::span<const uint64_t> ids,
                                  const ExpireSpec& spec);
  Result<LinkResult> LinkSync(std::string_view user, std::string_view master,
                              uint32_t ttl_seconds = 0);
  Result<bool> UnlinkSync(std::string_view user);
  Result<std::string> MasterOfSync(std::string_view user);
  Result<LinksPage> LinksSync(std::string_view user, std::string_view cursor = {},
                              uint32_t max = 0);
  Result<bool> ConnectedSync(std::string_view a, std::string_view b);
};

// Checks an upsert request as ProfileSession::Upsert does before it reads
// anything (ids unique, expiries in the future at `now`, TTLs that fit):
// InvalidArgument naming the first offending segment. A cluster node runs it
// before a write goes to the cluster's log.
Status CheckUpsert(std::span<const SegmentUpdate> updates, UpsertMode mode, UnixSeconds now);
// The same for expire: InvalidArgument when a TTL at `now` runs past 2^32-1.
Status CheckExpire(const ExpireSpec& spec, UnixSeconds now);
// The same for the field writes, under `options`' limits (max_fields,
// max_field_bytes): what ProfileSession's FieldSet, FieldDelete,
// FieldIncrement and FieldMax refuse before reading anything.
Status CheckFieldSet(std::span<const FieldUpdate> fields, UnixSeconds now,
                     const ProfileOptions& options);
Status CheckFieldDelete(std::span<const std::string> names);
Status CheckFieldIncrement(const segstore::FieldIncrement& inc, UnixSeconds now);
Status CheckFieldMax(const FieldUpdate& field, UnixSeconds now, const ProfileOptions& options);

// Opens profile sessions on a storage engine and runs the expiry sweeper.
// Thread-safe. The storage::Store must outlive it; destroy every session first.
// One at a time on an engine: it keeps the field name table the engine's
// profiles use (read at Open).
class ProfileStore {
 public:
  static Result<std::unique_ptr<ProfileStore>> Open(storage::Store* store,
                                                    const ProfileOptions& options);
  virtual ~ProfileStore() = default;
  // The calling thread's session (opens its storage worker).
  virtual Result<std::unique_ptr<ProfileSession>> NewSession() = 0;
  virtual SweeperStats sweeper_stats() const = 0;
  // One sweeper pass on the calling thread, ignoring the rate limit: every
  // record due at the store's clock now. For tests and tools.
  virtual Status SweepNow() = 0;
  // The storage engine under it: for work on records as stored (a cluster
  // node copying a partition's records to another node, byte for byte).
  virtual storage::Store& store() = 0;
  // A record's body as stored here, made readable by another node: profile
  // fields named by this store's name table get their names inline; any
  // other body is copied as it is. For records sent to other nodes
  // (copy_partition, read_records), so it never fails: a damaged body goes
  // as it is (the other node reads it as damaged, as this one does), and a
  // field whose name record was lost is left out; both are logged.
  virtual void PortableBody(std::string_view key, std::string_view body,
                            std::string* out) const = 0;
};

}  // namespace segstore::profile
