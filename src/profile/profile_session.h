// ProfileSessionImpl: the profile operations of one thread, on that thread's
// storage Worker. Every write is one read-modify-write of the user's record
// (storage::Worker::Update), so concurrent writers never lose a segment.
// Not thread-safe: the thread that opened it only.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "profile/codec.h"
#include "profile/field_names.h"
#include "profile/fields.h"
#include "profile/segment_ops.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::profile {

class ProfileSessionImpl final : public ProfileSession {
 public:
  // `names`: the store's field name table; outlives the session.
  ProfileSessionImpl(storage::Store* store, const ProfileOptions& options, FieldNames* names,
                     std::unique_ptr<storage::Worker> worker);

  void Get(std::string_view user, const GetOptions& options, Callback<GetResult> done) override;
  void BatchGet(std::span<const std::string> users, const GetOptions& options,
                Callback<std::vector<Result<GetResult>>> done) override;
  using ProfileSession::Delete;
  using ProfileSession::Expire;
  using ProfileSession::Remove;
  using ProfileSession::Trim;
  using ProfileSession::Upsert;
  void Upsert(const WriteContext& w, std::string_view user, std::span<const SegmentUpdate> updates,
              const UpsertOptions& how, Callback<UpsertResult> done) override;
  void Remove(const WriteContext& w, std::string_view user, std::span<const uint64_t> ids,
              Callback<uint32_t> done) override;
  void Trim(const WriteContext& w, std::string_view user, UnixSeconds before,
            Callback<TrimResult> done) override;
  void Count(std::string_view user, uint64_t id_from, uint64_t id_to,
             Callback<uint32_t> done) override;
  void Delete(const WriteContext& w, std::string_view user, Callback<bool> done) override;
  void Expire(const WriteContext& w, std::string_view user, std::span<const uint64_t> ids,
              const ExpireSpec& spec, Callback<ExpireResult> done) override;
  void Link(const WriteContext& w, std::string_view user, std::string_view master,
            uint32_t ttl_seconds, Callback<LinkResult> done) override;
  void Unlink(const WriteContext& w, std::string_view user, Callback<bool> done) override;
  void MasterOf(std::string_view user, Callback<std::string> done) override;
  void Links(std::string_view user, std::string_view cursor, uint32_t max,
             Callback<LinksPage> done) override;
  void Connected(std::string_view a, std::string_view b, Callback<bool> done) override;
  void ApplyLinkStep(const WriteContext& w, const LinkStep& step,
                     Callback<LinkStepResult> done) override;
  void FieldSet(const WriteContext& w, std::string_view user, std::span<const FieldUpdate> fields,
                Callback<FieldWriteResult> done) override;
  void FieldDelete(const WriteContext& w, std::string_view user, std::span<const std::string> names,
                   Callback<FieldWriteResult> done) override;
  void FieldIncrement(const WriteContext& w, std::string_view user,
                      const segstore::FieldIncrement& inc, Callback<IncrementResult> done) override;
  void FieldMax(const WriteContext& w, std::string_view user, const FieldUpdate& f,
                Callback<FieldMaxResult> done) override;
  void SetGroupPeers(GroupPeers* peers) override { peers_ = peers; }
  void Grouped(std::string_view user, Callback<bool> done) override;
  void FieldTarget(std::string_view user, Callback<std::string> done) override;
  storage::Worker& worker() override { return *worker_; }

  // What a sweep of one record did.
  struct Swept {
    bool rewritten = false;
    bool deleted = false;
    uint32_t segments_removed = 0;
    uint32_t fields_removed = 0;
    uint64_t bytes_reclaimed = 0;
  };
  // Rewrites the record at `ref` (found by the engine's FindDue) without the
  // segments expired before SweepHorizon(), or drops it when none is left.
  // For the sweeper: one device read when the record has not moved.
  void SweepAt(const storage::RecordRef& ref, Callback<Swept> done);
  // What the sweeper drops segments expired before: now, less
  // ProfileOptions::log_grace_seconds.
  UnixSeconds SweepHorizon() const;

 private:
  UnixSeconds Now() const;
  UnixSeconds Now(const WriteContext& w) const { return w.now != 0 ? w.now : Now(); }
  // The mutation that stores `segments` for a write made as `w`, recording
  // its log position (if any) in the body. None left (no segment, no group,
  // no live field): the record is deleted, or, for a log entry, kept empty
  // with its position for a while. `current` is the record's decoded current
  // version (null: none): its group section (profile bridging) and its
  // fields are kept. Corruption: its fields section is damaged.
  Result<storage::Mutation> Store(const std::vector<Segment>& segments, const WriteContext& w,
                                  const Columns* current);
  // The same with this group section and fields section (codec.h; empty:
  // none): a member's record keeps naming its master (the engine's
  // reference); any other names none.
  Result<storage::Mutation> Store(const std::vector<Segment>& segments, const WriteContext& w,
                                  const Group& group, std::string_view fields);
  // The same with the fields' expiries given: every field of `fields` is
  // live (an empty section: none).
  Result<storage::Mutation> Store(const std::vector<Segment>& segments, const WriteContext& w,
                                  const Group& group, std::string_view fields,
                                  std::span<const UnixSeconds> field_expiries);
  // A write that leaves nothing (no segment, no group, no live field):
  // delete, or for a log entry an empty record keeping its position (Store).
  storage::Mutation Emptied(const WriteContext& w) const;
  // The put of `body` at times `t` (TimesFor's) for a profile in `group`:
  // a group's links count in its times, and a member names its master.
  static storage::Mutation Put(std::string body, RecordTimes t, const Group& group);
  // The engine's read-modify-write, at the write's time when it has one.
  void Write(const WriteContext& w, std::string_view user, storage::UpdateFn fn,
             storage::WriteCallback done);
  // Decodes `rec` into scratch_; Corruption names the user.
  Status Decode(const storage::Record& rec);
  // Decodes `cur` (null: no record) into scratch_ for a write made as `w`:
  // Conflict when the record already holds w's log position or a later one.
  // Sets *columns to scratch_, or null when there is no record.
  Status DecodeForWrite(const WriteContext& w, const storage::Record* cur, const Columns** columns);
  template <typename T>
  void FailSoon(Status s, Callback<T> done);
  // True when one of `users` is a key of the node's own records
  // (storage::IsReservedKey: the field name table, a cluster's
  // checkpoints), which no profile operation reads or writes: `done` then
  // fails soon with InvalidArgument.
  template <typename T>
  bool Reserved(std::initializer_list<std::string_view> users, Callback<T>& done);
  // ---- Profile fields (field_write.cc).
  // How a field write changes the user's live fields (sorted by name; empty
  // when it has none or no profile, `exists` false for the latter): true
  // when it changed them, false to write nothing.
  using FieldChange =
      std::function<Result<bool>(std::vector<Field>* fields, UnixSeconds now, bool exists)>;
  // One read-modify-write of `user`'s fields (its segments and group kept,
  // expired segments and fields dropped); `done` gets the live fields
  // after it. A linked user's fields are its master's: when `user`'s
  // record names a master with a live link, the write goes to the master's
  // record instead (`member` then names the user, and the master must list
  // it live, else the write comes back to the user's own record).
  void WriteFields(const WriteContext& w, std::string_view user, FieldChange change,
                   Callback<uint32_t> done, std::string member = {}, bool own = false);
  FieldLimits field_limits() const {
    return FieldLimits{options_.max_fields, options_.max_field_bytes};
  }
  // ---- Profile bridging (group_read.cc, group_write.cc).
  struct LinkOp;
  // A record a group's operation read: from this node's engine, or as
  // stored on the node holding it (peers_).
  class GroupRecord {
   public:
    explicit GroupRecord(storage::Record r) : local_(std::move(r)) {}
    GroupRecord(std::string key, StoredRecord r) : key_(std::move(key)), remote_(std::move(r)) {}
    std::string_view key() const { return local_ ? local_->key() : std::string_view(key_); }
    std::string_view body() const { return local_ ? local_->body() : remote_.body; }
    std::string_view reference() const {
      return local_ ? local_->reference() : std::string_view(remote_.reference);
    }

   private:
    std::optional<storage::Record> local_;
    std::string key_;
    StoredRecord remote_;
  };
  using PairCallback = std::function<void(Result<GroupRecord>, Result<GroupRecord>)>;
  // Whether `user`'s records here are current: always on a single server.
  bool HoldsHere(std::string_view user) const { return peers_ == nullptr || peers_->Holds(user); }
  // `users`' records, in order (NotFound: none): those held here in one
  // submission, the others from their nodes at the same time.
  void ReadAll(std::vector<std::string> users, Callback<std::vector<Result<GroupRecord>>> done);
  // `user`'s record and, when it names one, the record it names: in one
  // round trip when both are held here (GetWithReference).
  void ReadWithReference(std::string_view user, PairCallback done);
  // A link's write: applied here on a single server, else sent to the node
  // holding its record (peers_), which writes it through the log.
  void RunStep(const WriteContext& w, const LinkStep& step, Callback<LinkStepResult> done);
  // Where a user stands, from its record and its master's, read together.
  struct Membership {
    bool exists = false;  // the user has a record
    std::string names;    // the master its record names (even one that does not list it)
    Group group;          // its record's group section
    // The group it is in: its master (itself for a master with a live
    // link), and that master's live links. Empty: in no group.
    std::string master;
    Group master_group;
  };
  // With `verify`, a master's members are read too (VerifyMembers): one
  // more round trip, for a master only.
  void ReadMembership(std::string_view user, Callback<Membership> done, bool verify = true);
  // Keeps in m.master_group only the members whose records agree (name the
  // master with a live link); a master left with none is in no group.
  void VerifyMembers(const std::string& user, Membership m, Callback<Membership> done);
  // `master`'s list without `user` (true when it listed it).
  void DropFromList(const WriteContext& w, const std::string& master, const std::string& user,
                    Callback<bool> done);
  // `user`'s record without its link (when it names `master`, or any when
  // empty) and, with members_too, without its members; deleted when nothing
  // is left. True when something changed.
  void ClearLink(const WriteContext& w, const std::string& user, const std::string& master,
                 bool members_too, Callback<bool> done);
  void ClearMembers(const WriteContext& w, const std::string& master,
                    std::shared_ptr<std::vector<GroupMember>> members, size_t i,
                    Callback<bool> done);
  // Delete of a user whose record has a group section: a master's deletes
  // its group; a member leaves its master's list first.
  void DeleteGrouped(const WriteContext& w, const std::string& user, Callback<bool> done);
  void DeleteMembers(const WriteContext& w, const std::string& master,
                     std::shared_ptr<std::vector<std::string>> members, size_t i,
                     std::function<void(Status)> done);

  // A user's own profile only: today's get, one read (GetOptions::own_only).
  void GetOwn(std::string_view user, const GetOptions& options, Callback<GetResult> done);
  // Answers `r` as the user's own profile (DecodeSelect).
  void AnswerOwn(const storage::Record& r, const GetOptions& options,
                 const Callback<GetResult>& done);
  // The merged view of the group `own` (whose body has a group section)
  // takes part in: `referenced` is the record of the
  // master `own` names, read with it. Reads the other members at once
  // (group_read.cc).
  void ReadGroup(const GroupRecord& own, const Result<GroupRecord>& referenced,
                 const GetOptions& options, UnixSeconds now, Callback<GetResult> done);

  storage::Store* store_;
  const ProfileOptions options_;
  FieldNames* names_;
  std::unique_ptr<storage::Worker> worker_;
  GroupPeers* peers_ = nullptr;  // a cluster node's (SetGroupPeers)
  // Reused across operations (one thread, one at a time inside callbacks).
  Columns scratch_;
  std::vector<Segment> merged_;
  std::vector<StoredField> stored_fields_;
  std::vector<UnixSeconds> field_expiries_;
  std::vector<Field> fields_;
  BodyHead head_;                          // a write of fields' record, up to its segments
  std::vector<UnixSeconds> old_expiries_;  // its fields' expiries, sorted
};

template <typename T>
void ProfileSessionImpl::FailSoon(Status s, Callback<T> done) {
  worker_->Defer([s = std::move(s), done = std::move(done)] { done(s); });
}

template <typename T>
bool ProfileSessionImpl::Reserved(std::initializer_list<std::string_view> users,
                                  Callback<T>& done) {
  for (std::string_view user : users) {
    if (storage::IsReservedKey(user)) {
      FailSoon(
          Status::InvalidArgument(
              "user: IDs beginning with the bytes FF 00 are reserved (the server's own records)"),
          std::move(done));
      return true;
    }
  }
  return false;
}

}  // namespace segstore::profile
