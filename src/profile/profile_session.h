// ProfileSessionImpl: the profile operations of one thread, on that thread's
// storage Worker. Every write is one read-modify-write of the user's record
// (storage::Worker::Update), so concurrent writers never lose a segment.
// Not thread-safe: the thread that opened it only.
#pragma once

#include <memory>
#include <string>

#include "profile/codec.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::profile {

class ProfileSessionImpl final : public ProfileSession {
 public:
  ProfileSessionImpl(storage::Store* store, const ProfileOptions& options,
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
  storage::Worker& worker() override { return *worker_; }

  // What a sweep of one record did.
  struct Swept {
    bool rewritten = false;
    bool deleted = false;
    uint32_t segments_removed = 0;
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
  // its log position (if any) in the body. None left: the record is deleted,
  // or, for a log entry, kept empty with its position for a while.
  storage::Mutation Store(const std::vector<Segment>& segments, const WriteContext& w);
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

  storage::Store* store_;
  const ProfileOptions options_;
  std::unique_ptr<storage::Worker> worker_;
  // Reused across operations (one thread, one at a time inside callbacks).
  Columns scratch_;
  std::vector<Segment> merged_;
};

}  // namespace segstore::profile
