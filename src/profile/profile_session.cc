#include "profile/profile_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/clock.h"
#include "profile/segment_ops.h"

namespace segstore::profile {

ProfileSessionImpl::ProfileSessionImpl(storage::Store* store, const ProfileOptions& options,
                                       FieldNames* names, std::unique_ptr<storage::Worker> worker)
    : store_(store), options_(options), names_(names), worker_(std::move(worker)) {}

UnixSeconds ProfileSessionImpl::Now() const { return store_->clock().Now(); }

Status ProfileSessionImpl::Decode(const storage::Record& rec) {
  Status s = DecodeColumns(rec.body(), &scratch_);
  if (!s.ok()) return s.WithContext(fmt::format("profile of user '{}'", rec.key()));
  return s;
}

Status ProfileSessionImpl::DecodeForWrite(const WriteContext& w, const storage::Record* cur,
                                          const Columns** columns) {
  *columns = nullptr;
  if (cur == nullptr) return Status::OK();
  SEGSTORE_RETURN_IF_ERROR(Decode(*cur));
  if (w.log_position != 0 && scratch_.log_position >= w.log_position) {
    return Status::Conflict(
        fmt::format("already applied: the record holds log position {}", scratch_.log_position));
  }
  *columns = &scratch_;
  return Status::OK();
}

Result<storage::Mutation> ProfileSessionImpl::Store(const std::vector<Segment>& segments,
                                                    const WriteContext& w, const Columns* current) {
  if (current == nullptr) return Store(segments, w, Group(), std::string_view());
  return Store(segments, w, current->group, current->fields);
}

Result<storage::Mutation> ProfileSessionImpl::Store(const std::vector<Segment>& segments,
                                                    const WriteContext& w, const Group& group,
                                                    std::string_view fields) {
  field_expiries_.clear();
  if (!fields.empty()) {
    // The fields' expiries count in the record's times; expired ones are
    // kept (hidden from reads) until the sweeper or a write of fields drops
    // them, and a section with nothing live is dropped here.
    if (Status s = DecodeFieldSection(fields, &stored_fields_); !s.ok()) return s;
    const UnixSeconds now = Now(w);
    bool live = false;
    for (const StoredField& f : stored_fields_) {
      field_expiries_.push_back(f.expires_at);
      live |= Alive(f.expires_at, now);
    }
    if (!live) {
      fields = {};
      field_expiries_.clear();
    }
  }
  return Store(segments, w, group, fields, field_expiries_);
}

Result<storage::Mutation> ProfileSessionImpl::Store(const std::vector<Segment>& segments,
                                                    const WriteContext& w, const Group& group,
                                                    std::string_view fields,
                                                    std::span<const UnixSeconds> field_expiries) {
  if (segments.empty() && group.empty() && fields.empty()) return Emptied(w);
  std::string body;
  EncodeProfile(segments, w.log_position, group, fields, &body);
  return Put(std::move(body), TimesFor(segments, options_.sweep_share, field_expiries), group);
}

storage::Mutation ProfileSessionImpl::Emptied(const WriteContext& w) const {
  if (w.log_position == 0) return storage::Mutation::Delete();
  // Emptied by a log entry: an empty record keeps the entry's position for
  // log_grace_seconds, so a replay after a restart still skips what came
  // before it (a tombstone holds no position). It reads as no profile, and
  // the engine drops it once void.
  std::string body;
  EncodeSegments({}, w.log_position, &body);
  const uint64_t void_at = uint64_t{Now(w)} + options_.log_grace_seconds;
  storage::Mutation m = storage::Mutation::Put(
      std::move(body), 0, static_cast<uint32_t>(std::min<uint64_t>(void_at, UINT32_MAX)));
  m.reference.emplace();
  return m;
}

storage::Mutation ProfileSessionImpl::Put(std::string body, RecordTimes t, const Group& group) {
  if (!group.empty()) {
    // A record in a group stays until its links go (a write or the sweeper
    // drops them), and is due when the first of them expires.
    t.void_at = 0;
    auto due = [&t](UnixSeconds e) {
      if (e != kNever && (t.sweep_at == 0 || e < t.sweep_at)) t.sweep_at = e;
    };
    if (group.member) due(group.link_expires);
    for (const GroupMember& m : group.members) due(m.expires_at);
  }
  storage::Mutation m = storage::Mutation::Put(std::move(body), t.sweep_at, t.void_at);
  // A member keeps naming its master; anything else names none.
  if (!group.member) m.reference.emplace();
  return m;
}

void ProfileSessionImpl::Write(const WriteContext& w, std::string_view user, storage::UpdateFn fn,
                               storage::WriteCallback done) {
  if (w.now != 0) {
    // At the log entry's time: a record still alive then counts, even if
    // the clock here has passed its last expiry (StoreOptions::void_grace_seconds).
    worker_->UpdateAsOf(user, w.now, std::move(fn), std::move(done));
  } else {
    worker_->Update(user, std::move(fn), std::move(done));
  }
}

UnixSeconds ProfileSessionImpl::SweepHorizon() const {
  const UnixSeconds now = Now();
  return now > options_.log_grace_seconds ? now - options_.log_grace_seconds : 0;
}

void ProfileSessionImpl::Get(std::string_view user, const GetOptions& options,
                             Callback<GetResult> done) {
  if (Reserved({user}, done)) return;
  if (options.own_only) {
    GetOwn(user, options, std::move(done));
    return;
  }
  // A user in no group (nearly all of them) costs what GetOwn costs: the
  // engine reads the master too only when the index marks the user linked.
  worker_->GetWithReference(
      user, [this, options, done = std::move(done)](Result<storage::Record> r,
                                                    Result<storage::Record> referenced) mutable {
        if (!r.ok()) return done(r.status());
        // A body with a group section goes straight to the group read, which
        // decodes it once, whole.
        if (!HasGroupSection(r->body())) return AnswerOwn(*r, options, done);
        GroupRecord own(std::move(*r));
        if (own.reference().empty() || HoldsHere(own.reference())) {
          Result<GroupRecord> named = referenced.ok()
                                          ? Result<GroupRecord>(GroupRecord(std::move(*referenced)))
                                          : Result<GroupRecord>(referenced.status());
          return ReadGroup(own, named, options, Now(), std::move(done));
        }
        // On a cluster node, a master another node holds: read there.
        std::vector<std::string> named = {std::string(own.reference())};
        auto held = std::make_shared<GroupRecord>(std::move(own));
        ReadAll(std::move(named), [this, held, options, done = std::move(done)](
                                      Result<std::vector<Result<GroupRecord>>> m) mutable {
          if (!m.ok()) return done(m.status());
          ReadGroup(*held, (*m)[0], options, Now(), std::move(done));
        });
      });
}

void ProfileSessionImpl::GetOwn(std::string_view user, const GetOptions& options,
                                Callback<GetResult> done) {
  worker_->Get(user, [this, options, done = std::move(done)](Result<storage::Record> r) {
    if (!r.ok()) return done(r.status());
    AnswerOwn(*r, options, done);
  });
}

void ProfileSessionImpl::AnswerOwn(const storage::Record& r, const GetOptions& options,
                                   const Callback<GetResult>& done) {
  GetResult out;
  const UnixSeconds now = Now();
  Result<uint32_t> live = DecodeSelect(r.body(), now, options, &scratch_, &out);
  uint32_t live_fields = 0;
  if (live.ok()) {
    // A profile with live fields and no live segment exists.
    Status s = AnswerFields(scratch_.fields, *names_, options.fields, now, *live, &stored_fields_,
                            &out.fields, &live_fields);
    if (!s.ok()) live = s;
  }
  if (!live.ok()) {
    done(live.status().WithContext(fmt::format("profile of user '{}'", r.key())));
  } else if (*live == 0 && live_fields == 0) {
    done(Status::NotFound("no live segments"));
  } else {
    done(std::move(out));
  }
}

void ProfileSessionImpl::BatchGet(std::span<const std::string> users, const GetOptions& options,
                                  Callback<std::vector<Result<GetResult>>> done) {
  struct Join {
    std::vector<Result<GetResult>> results;
    size_t remaining;
    Callback<std::vector<Result<GetResult>>> done;
  };
  if (users.empty()) {
    worker_->Defer([done = std::move(done)] { done(std::vector<Result<GetResult>>()); });
    return;
  }
  auto join = std::make_shared<Join>(
      Join{std::vector<Result<GetResult>>(users.size(), Status::Internal("pending")), users.size(),
           std::move(done)});
  // One submission for all of them: the device reads go out together.
  storage::Worker::Batch batch(*worker_);
  for (size_t i = 0; i < users.size(); ++i) {
    Get(users[i], options, [join, i](Result<GetResult> r) {
      join->results[i] = std::move(r);
      if (--join->remaining == 0) join->done(std::move(join->results));
    });
  }
}

void ProfileSessionImpl::Upsert(const WriteContext& w, std::string_view user,
                                std::span<const SegmentUpdate> updates, const UpsertOptions& how,
                                Callback<UpsertResult> done) {
  if (Reserved({user}, done)) return;
  const UnixSeconds now = Now(w);
  if (Status s = ValidateUpsert(updates, how.mode, now); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  struct State {
    std::vector<SegmentUpdate> updates;
    UpsertResult result;
  };
  auto state = std::make_shared<State>();
  state->updates.assign(updates.begin(), updates.end());
  Write(
      w, user,
      [this, state, how, w, now](const storage::Record* cur) -> Result<storage::Mutation> {
        const Columns* columns = nullptr;
        SEGSTORE_RETURN_IF_ERROR(DecodeForWrite(w, cur, &columns));
        state->result = Merge(columns, state->updates, how, now, &merged_);
        // An empty upsert of a profile with nothing expired changes nothing.
        if (state->updates.empty() && state->result.trimmed == 0) return storage::Mutation::Keep();
        if (merged_.size() > options_.max_segments) {
          return Status::LimitExceeded(
              fmt::format("the profile would hold {} segments; the limit is {}", merged_.size(),
                          options_.max_segments));
        }
        return Store(merged_, w, columns);
      },
      [state, done = std::move(done)](Result<storage::WriteOutcome> r) {
        if (!r.ok()) {
          done(r.status());
        } else {
          done(state->result);
        }
      });
}

void ProfileSessionImpl::Remove(const WriteContext& w, std::string_view user,
                                std::span<const uint64_t> ids, Callback<uint32_t> done) {
  if (Reserved({user}, done)) return;
  auto removed = std::make_shared<uint32_t>(0);
  auto id_list = std::make_shared<std::vector<uint64_t>>(ids.begin(), ids.end());
  Write(
      w, user,
      [this, removed, id_list, w](const storage::Record* cur) -> Result<storage::Mutation> {
        *removed = 0;
        const Columns* columns = nullptr;
        SEGSTORE_RETURN_IF_ERROR(DecodeForWrite(w, cur, &columns));
        if (columns == nullptr) return Status::NotFound("no live segments");
        // The engine judged the record alive a moment ago; the clock may have
        // ticked past its last expiry since. No live segment: no profile.
        const UnixSeconds now = Now(w);
        if (LiveCount(scratch_, now) == 0) return Status::NotFound("no live segments");
        uint32_t trimmed = 0;
        *removed = RemoveIds(scratch_, *id_list, now, &merged_, &trimmed);
        if (*removed == 0 && trimmed == 0) return storage::Mutation::Keep();
        return Store(merged_, w, columns);
      },
      [removed, done = std::move(done)](Result<storage::WriteOutcome> r) {
        if (!r.ok()) {
          done(r.status());
        } else {
          done(*removed);
        }
      });
}

void ProfileSessionImpl::Trim(const WriteContext& w, std::string_view user, UnixSeconds before,
                              Callback<TrimResult> done) {
  if (Reserved({user}, done)) return;
  auto result = std::make_shared<TrimResult>();
  Write(
      w, user,
      [this, result, before, w](const storage::Record* cur) -> Result<storage::Mutation> {
        *result = TrimResult{};
        const Columns* columns = nullptr;
        SEGSTORE_RETURN_IF_ERROR(DecodeForWrite(w, cur, &columns));
        if (columns == nullptr) return Status::NotFound("no live segments");
        const UnixSeconds now = Now(w);
        if (LiveCount(scratch_, now) == 0)
          return Status::NotFound("no live segments");  // as Remove
        *result = TrimBefore(scratch_, std::max(before, now), &merged_);
        if (result->trimmed == 0) return storage::Mutation::Keep();
        return Store(merged_, w, columns);
      },
      [result, done = std::move(done)](Result<storage::WriteOutcome> r) {
        if (!r.ok()) {
          done(r.status());
        } else {
          done(*result);
        }
      });
}

void ProfileSessionImpl::Expire(const WriteContext& w, std::string_view user,
                                std::span<const uint64_t> ids, const ExpireSpec& spec,
                                Callback<ExpireResult> done) {
  if (Reserved({user}, done)) return;
  // One reading of the clock, as Upsert: what the TTL was checked against
  // is what it is applied at (a log entry's time is fixed anyway).
  const UnixSeconds now = Now(w);
  if (ids.size() > options_.max_segments) {
    FailSoon(Status::LimitExceeded(
                 fmt::format("{} segment IDs; the limit is {}", ids.size(), options_.max_segments)),
             std::move(done));
    return;
  }
  if (Status s = ValidateExpire(spec, now); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  struct State {
    std::vector<uint64_t> ids;
    ExpireResult result;
  };
  auto state = std::make_shared<State>();
  state->ids.assign(ids.begin(), ids.end());
  Write(
      w, user,
      [this, state, spec, w, now](const storage::Record* cur) -> Result<storage::Mutation> {
        state->result = ExpireResult{};
        const Columns* columns = nullptr;
        SEGSTORE_RETURN_IF_ERROR(DecodeForWrite(w, cur, &columns));
        // `now` is no later than the engine's liveness check: a record it
        // found alive has a live segment at `now`, unless it is an empty one
        // keeping a log position.
        if (columns == nullptr || LiveCount(scratch_, now) == 0) {
          return Status::NotFound("no live segments");
        }
        uint32_t trimmed = 0;
        const bool changed =
            ApplyExpire(scratch_, state->ids, spec, now, &state->result, &merged_, &trimmed);
        if (!changed && trimmed == 0) return storage::Mutation::Keep();
        return Store(merged_, w, columns);
      },
      [state, done = std::move(done)](Result<storage::WriteOutcome> r) {
        if (!r.ok()) {
          done(r.status());
        } else {
          done(std::move(state->result));
        }
      });
}

void ProfileSessionImpl::Count(std::string_view user, uint64_t id_from, uint64_t id_to,
                               Callback<uint32_t> done) {
  GetOptions o;
  o.id_from = id_from;
  o.id_to = id_to;
  o.count_only = true;
  Get(user, o, [done = std::move(done)](Result<GetResult> r) {
    if (r.ok()) {
      done(r->count);
    } else {
      done(r.status());  // NotFound too: a user without a profile has no count
    }
  });
}

void ProfileSessionImpl::Delete(const WriteContext& w, std::string_view user, Callback<bool> done) {
  if (Reserved({user}, done)) return;
  if (w.log_position != 0) {
    // From the log: a record at or past the entry's position was written by
    // a later entry (the delete was applied before a restart, then the user
    // written again): it stays.
    // Whether there was a profile: a live segment or field at the entry's
    // time (an empty record keeping a position is none).
    auto existed = std::make_shared<bool>(false);
    Write(
        w, user,
        [this, w, existed](const storage::Record* cur) -> Result<storage::Mutation> {
          *existed = false;
          const Columns* columns = nullptr;
          SEGSTORE_RETURN_IF_ERROR(DecodeForWrite(w, cur, &columns));
          if (columns == nullptr) return storage::Mutation::Keep();
          const UnixSeconds now = Now(w);
          *existed = LiveCount(*columns, now) > 0;
          if (!*existed && !columns->fields.empty()) {
            Result<uint32_t> live = SelectFields(columns->fields, *names_, FieldSelection(), now,
                                                 &stored_fields_, &fields_);
            if (!live.ok()) return live.status();
            *existed = *live > 0;
          }
          return storage::Mutation::Delete();
        },
        [existed, done = std::move(done)](Result<storage::WriteOutcome> r) {
          if (!r.ok()) {
            done(r.status());
          } else {
            done(*existed);
          }
        });
    return;
  }
  // On a cluster node a delete is a coordinator's: the node deletes a
  // grouped user this way, any other with a plain delete entry (Grouped).
  if (peers_ != nullptr) return DeleteGrouped(w, std::string(user), std::move(done));
  // One write, as before bridging, unless the record has a group section.
  auto grouped = std::make_shared<bool>(false);
  worker_->Update(
      user,
      [grouped](const storage::Record* cur) -> Result<storage::Mutation> {
        *grouped = false;
        if (cur == nullptr) return storage::Mutation::Delete();  // a tombstone in case of damage
        if (!cur->reference().empty() || HasGroupSection(cur->body())) {
          *grouped = true;
          return storage::Mutation::Keep();
        }
        return storage::Mutation::Delete();
      },
      [this, w, user = std::string(user), grouped,
       done = std::move(done)](Result<storage::WriteOutcome> r) mutable {
        if (!r.ok()) return done(r.status());
        if (*grouped) return DeleteGrouped(w, user, std::move(done));
        done(r->applied == storage::Mutation::Kind::kDelete);
      });
}

void ProfileSessionImpl::SweepAt(const storage::RecordRef& ref, Callback<Swept> done) {
  auto swept = std::make_shared<Swept>();
  worker_->UpdateAt(
      ref,
      [this, swept](const storage::Record* cur) -> Result<storage::Mutation> {
        *swept = Swept{};
        if (cur == nullptr) return storage::Mutation::Keep();  // gone, or wholly expired
        SEGSTORE_RETURN_IF_ERROR(Decode(*cur));
        const UnixSeconds horizon = SweepHorizon();
        TrimResult t = TrimBefore(scratch_, horizon, &merged_);
        // Links expired by then go too (profile bridging): the member's own,
        // and a master's to its members.
        Group group = scratch_.group;
        const size_t links_before = group.members.size() + (group.member ? 1 : 0);
        if (group.member && !Alive(group.link_expires, horizon)) group.member = false;
        std::erase_if(group.members,
                      [horizon](const GroupMember& m) { return !Alive(m.expires_at, horizon); });
        const size_t links_dropped = links_before - group.members.size() - (group.member ? 1 : 0);
        // And expired fields.
        std::string fields;
        size_t fields_dropped = 0;
        field_expiries_.clear();
        if (!scratch_.fields.empty()) {
          SEGSTORE_RETURN_IF_ERROR(DecodeFieldSection(scratch_.fields, &stored_fields_));
          fields_dropped = std::erase_if(stored_fields_, [horizon](const StoredField& f) {
            return !Alive(f.expires_at, horizon);
          });
          if (fields_dropped == 0) {
            fields = scratch_.fields;
          } else if (!stored_fields_.empty()) {
            EncodeFieldSection(stored_fields_, &fields);
          }
          for (const StoredField& f : stored_fields_) field_expiries_.push_back(f.expires_at);
        }
        if (t.trimmed == 0 && links_dropped == 0 && fields_dropped == 0) {
          return storage::Mutation::Keep();
        }
        if (!group.member) group.link_expires = kNever;
        // Only expired segments, links and fields go, so nothing live
        // changes: the record keeps its log position. Nothing left: deleted
        // (its last segment expired log_grace_seconds ago or more; no entry
        // still to be applied needs it).
        Result<storage::Mutation> m = storage::Mutation::Delete();
        if (!merged_.empty() || !group.empty() || !fields.empty()) {
          // Fields alive at the horizon stay, as segments do, though none
          // may be alive now: a log entry from before they expired may
          // still come (log_grace_seconds), and must find what every
          // replica has.
          m = Store(merged_, WriteContext{0, scratch_.log_position}, group, fields,
                    field_expiries_);
          if (!m.ok()) return m;
        }
        swept->segments_removed = t.trimmed;
        swept->fields_removed = static_cast<uint32_t>(fields_dropped);
        swept->deleted = m->kind == storage::Mutation::Kind::kDelete;
        swept->rewritten = !swept->deleted;
        swept->bytes_reclaimed =
            cur->body().size() > m->body.size() ? cur->body().size() - m->body.size() : 0;
        return m;
      },
      [swept, done = std::move(done)](Result<storage::WriteOutcome> r) {
        if (!r.ok()) {
          done(r.status());
        } else {
          done(*swept);
        }
      });
}

Status CheckUpsert(std::span<const SegmentUpdate> updates, UpsertMode mode, UnixSeconds now) {
  return ValidateUpsert(updates, mode, now);
}

Status CheckExpire(const ExpireSpec& spec, UnixSeconds now) { return ValidateExpire(spec, now); }

// ---- Blocking helpers of the public ProfileSession.

namespace {
template <typename T, typename Start>
Result<T> RunSync(ProfileSession* s, Start start) {
  std::optional<Result<T>> out;
  start([&out](Result<T> r) { out.emplace(std::move(r)); });
  while (!out) s->Wait(std::chrono::milliseconds(100));
  return std::move(*out);
}
}  // namespace

Result<GetResult> ProfileSession::GetSync(std::string_view user, const GetOptions& options) {
  return RunSync<GetResult>(this, [&](Callback<GetResult> cb) { Get(user, options, cb); });
}
Result<std::vector<Result<GetResult>>> ProfileSession::BatchGetSync(
    std::span<const std::string> users, const GetOptions& options) {
  return RunSync<std::vector<Result<GetResult>>>(
      this, [&](Callback<std::vector<Result<GetResult>>> cb) { BatchGet(users, options, cb); });
}
Result<UpsertResult> ProfileSession::UpsertSync(std::string_view user,
                                                std::span<const SegmentUpdate> updates,
                                                UpsertMode mode) {
  return RunSync<UpsertResult>(this,
                               [&](Callback<UpsertResult> cb) { Upsert(user, updates, mode, cb); });
}
Result<UpsertResult> ProfileSession::UpsertSync(std::string_view user,
                                                std::span<const SegmentUpdate> updates,
                                                const UpsertOptions& how) {
  return RunSync<UpsertResult>(this,
                               [&](Callback<UpsertResult> cb) { Upsert(user, updates, how, cb); });
}
Result<uint32_t> ProfileSession::RemoveSync(std::string_view user, std::span<const uint64_t> ids) {
  return RunSync<uint32_t>(this, [&](Callback<uint32_t> cb) { Remove(user, ids, cb); });
}
Result<TrimResult> ProfileSession::TrimSync(std::string_view user, UnixSeconds before) {
  return RunSync<TrimResult>(this, [&](Callback<TrimResult> cb) { Trim(user, before, cb); });
}
Result<uint32_t> ProfileSession::CountSync(std::string_view user, uint64_t id_from,
                                           uint64_t id_to) {
  return RunSync<uint32_t>(this, [&](Callback<uint32_t> cb) { Count(user, id_from, id_to, cb); });
}
Result<bool> ProfileSession::DeleteSync(std::string_view user) {
  return RunSync<bool>(this, [&](Callback<bool> cb) { Delete(user, cb); });
}
Result<ExpireResult> ProfileSession::ExpireSync(std::string_view user,
                                                std::span<const uint64_t> ids,
                                                const ExpireSpec& spec) {
  return RunSync<ExpireResult>(this,
                               [&](Callback<ExpireResult> cb) { Expire(user, ids, spec, cb); });
}

Result<LinkResult> ProfileSession::LinkSync(std::string_view user, std::string_view master,
                                            uint32_t ttl_seconds) {
  return RunSync<LinkResult>(
      this, [&](Callback<LinkResult> cb) { Link(WriteContext{}, user, master, ttl_seconds, cb); });
}
Result<bool> ProfileSession::UnlinkSync(std::string_view user) {
  return RunSync<bool>(this, [&](Callback<bool> cb) { Unlink(WriteContext{}, user, cb); });
}
Result<std::string> ProfileSession::MasterOfSync(std::string_view user) {
  return RunSync<std::string>(this, [&](Callback<std::string> cb) { MasterOf(user, cb); });
}
Result<LinksPage> ProfileSession::LinksSync(std::string_view user, std::string_view cursor,
                                            uint32_t max) {
  return RunSync<LinksPage>(this, [&](Callback<LinksPage> cb) { Links(user, cursor, max, cb); });
}
Result<bool> ProfileSession::ConnectedSync(std::string_view a, std::string_view b) {
  return RunSync<bool>(this, [&](Callback<bool> cb) { Connected(a, b, cb); });
}

}  // namespace segstore::profile
