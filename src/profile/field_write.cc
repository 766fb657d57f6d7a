// Profile fields: the writes (field_set, field_del, field_incr, field_max)
// and the part of a get that answers fields. Each write is one
// read-modify-write of the user's record, as upsert is, so concurrent
// increments never lose one (the engine runs the change again when another
// writer got in between).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "profile/profile_session.h"
#include "profile/segment_ops.h"

namespace segstore::profile {

void ProfileSessionImpl::WriteFields(const WriteContext& w, std::string_view user,
                                     FieldChange change, Callback<uint32_t> done,
                                     std::string member, bool own) {
  struct State {
    uint32_t count = 0;
    std::vector<std::string> unnumbered;
    std::string master;  // the write belongs to this master's record
    bool back = false;   // the master does not list the member: its own record
  };
  auto state = std::make_shared<State>();
  Write(
      w, user,
      [this, w, state, change, member,
       own](const storage::Record* cur) -> Result<storage::Mutation> {
        state->unnumbered.clear();
        state->master.clear();
        state->back = false;
        // A write of fields changes no segment: the record is read up to its
        // segments, and their bytes are kept as they are, expired ones too
        // (hidden from reads, as they were; the sweeper trims them).
        const BodyHead* head = nullptr;
        if (cur != nullptr) {
          if (Status s = DecodeHead(cur->body(), &head_); !s.ok()) {
            return s.WithContext(fmt::format("profile of user '{}'", cur->key()));
          }
          if (w.log_position != 0 && head_.log_position >= w.log_position) {
            return Status::Conflict(fmt::format("already applied: the record holds log position {}",
                                                head_.log_position));
          }
          head = &head_;
        }
        const UnixSeconds now = Now(w);
        // Profile bridging: a linked user's fields live on its master. A
        // write from a cluster's log names its record (the node that took it
        // sent a linked user's write to its master's node): never redirected,
        // so every replica writes the same record whatever it holds.
        // (A master that joined another group is a master no more: reads
        // do not count its list either.)
        if (!member.empty() &&
            (head == nullptr || head->group.member || !ListsLive(head->group, member, now))) {
          state->back = true;
          return storage::Mutation::Keep();
        }
        if (member.empty() && !own && w.log_position == 0 && head != nullptr &&
            head->group.member && Alive(head->group.link_expires, now) &&
            !cur->reference().empty()) {
          state->master = std::string(cur->reference());
          return storage::Mutation::Keep();
        }
        // Whether a segment may have expired (then only its columns tell
        // whether one is live). The segments are rewritten, expired ones
        // trimmed, only when the record is due for the sweeper (enough of it
        // has expired: ProfileOptions::sweep_share), which this write then
        // saves a rewrite; otherwise their bytes are kept, expired ones too
        // (hidden from reads, as they were, until the sweeper trims them).
        const bool some_expired = head != nullptr && !Alive(head->earliest, now);
        const bool due = some_expired && cur->sweep_at() != 0 && cur->sweep_at() <= now;
        bool decoded = false;
        auto decode = [&]() -> Status {
          if (decoded) return Status::OK();
          decoded = true;
          return Decode(*cur);
        };
        fields_.clear();
        old_expiries_.clear();
        bool exists = false;
        if (head != nullptr) {
          Status s = ResolveFields(head->fields, *names_, &fields_);
          if (!s.ok()) return s.WithContext(fmt::format("profile of user '{}'", cur->key()));
          for (const Field& f : fields_) old_expiries_.push_back(f.expires_at);
          std::erase_if(fields_, [now](const Field& f) { return !Alive(f.expires_at, now); });
          exists = !fields_.empty();
          if (!exists && head->count > 0) {
            if (some_expired) SEGSTORE_RETURN_IF_ERROR(decode());
            exists = !some_expired || LiveCount(scratch_, now) > 0;
          }
        }
        Result<bool> changed = change(&fields_, now, exists);
        if (!changed.ok()) return changed.status();
        // An expiry checked before the write may have passed since.
        std::erase_if(fields_, [now](const Field& f) { return !Alive(f.expires_at, now); });
        state->count = static_cast<uint32_t>(fields_.size());
        if (!*changed) return storage::Mutation::Keep();
        if (fields_.size() > options_.max_fields) {
          return Status::LimitExceeded(
              fmt::format("the profile would hold {} fields; the limit is {}", fields_.size(),
                          options_.max_fields));
        }
        std::string section;
        if (!fields_.empty()) EncodeFields(fields_, *names_, &section, &state->unnumbered);
        field_expiries_.clear();
        for (const Field& f : fields_) field_expiries_.push_back(f.expires_at);
        static const Group kNoGroup;
        const Group& group = head != nullptr ? head->group : kNoGroup;
        if (head == nullptr || head->count == 0 || due || (fields_.empty() && some_expired)) {
          // No segment; or due for the sweeper; or no field left beside
          // segments of which some expired: written from the live segments,
          // so that a profile with nothing live left goes (Store).
          merged_.clear();
          if (head != nullptr && head->count > 0) {
            SEGSTORE_RETURN_IF_ERROR(decode());
            TrimBefore(scratch_, now, &merged_);
          }
          return Store(merged_, w, group, section, field_expiries_);
        }
        std::string body;
        EncodeProfileKeeping(head->segments, w.log_position, group, section, &body);
        // The record's times count every segment's expiry and every field's.
        // Fields expiring as before (an increment in a fixed window, a max):
        // the record's times stay. Otherwise the segments' expiries are read.
        std::sort(old_expiries_.begin(), old_expiries_.end());
        std::sort(field_expiries_.begin(), field_expiries_.end());
        if (old_expiries_ == field_expiries_) {
          return Put(std::move(body), RecordTimes{cur->sweep_at(), cur->void_at()}, group);
        }
        SEGSTORE_RETURN_IF_ERROR(decode());
        return Put(std::move(body),
                   TimesFor(scratch_.expires, options_.sweep_share, field_expiries_), group);
      },
      [this, w, user = std::string(user), member, state, change,
       done = std::move(done)](Result<storage::WriteOutcome> r) mutable {
        if (!r.ok()) return done(r.status());
        if (!state->master.empty()) {
          if (!HoldsHere(state->master)) {
            // A cluster node sends a linked user's write to its master's
            // node before it gets here; the user was linked meanwhile.
            return done(Status::Busy(
                "the user joined a group whose master another node holds while the write was "
                "under way; send it again"));
          }
          return WriteFields(w, state->master, std::move(change), std::move(done), user);
        }
        if (state->back) {
          return WriteFields(w, member, std::move(change), std::move(done), {}, /*own=*/true);
        }
        // Names this write stored inline get numbers for the next writes.
        if (!state->unnumbered.empty()) names_->Register(state->unnumbered, *worker_);
        done(state->count);
      });
}

void ProfileSessionImpl::FieldSet(const WriteContext& w, std::string_view user,
                                  std::span<const FieldUpdate> fields,
                                  Callback<FieldWriteResult> done) {
  if (Reserved({user}, done)) return;
  if (Status s = CheckFieldSet(fields, Now(w), options_); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  auto updates = std::make_shared<std::vector<FieldUpdate>>(fields.begin(), fields.end());
  WriteFields(
      w, user,
      [updates](std::vector<Field>* live, UnixSeconds at, bool) -> Result<bool> {
        for (const FieldUpdate& u : *updates) {
          PutField(*live, Field{u.name, u.value, FieldExpiry(u.expiry, u.ttl, at)});
        }
        return !updates->empty();
      },
      [n = static_cast<uint32_t>(fields.size()), done = std::move(done)](Result<uint32_t> count) {
        if (!count.ok()) return done(count.status());
        done(FieldWriteResult{n, *count, false});
      });
}

void ProfileSessionImpl::FieldDelete(const WriteContext& w, std::string_view user,
                                     std::span<const std::string> names,
                                     Callback<FieldWriteResult> done) {
  if (Reserved({user}, done)) return;
  if (Status s = CheckFieldDelete(names); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  auto list = std::make_shared<std::vector<std::string>>(names.begin(), names.end());
  auto removed = std::make_shared<uint32_t>(0);
  WriteFields(
      w, user,
      [list, removed](std::vector<Field>* live, UnixSeconds, bool exists) -> Result<bool> {
        *removed = 0;
        if (!exists) return Status::NotFound("no profile");
        for (const std::string& name : *list) {
          if (Field* f = FindField(*live, name)) {
            live->erase(live->begin() + (f - live->data()));
            ++*removed;
          }
        }
        return *removed > 0;
      },
      [removed, done = std::move(done)](Result<uint32_t> count) {
        if (!count.ok()) return done(count.status());
        done(FieldWriteResult{*removed, *count, false});
      });
}

void ProfileSessionImpl::FieldIncrement(const WriteContext& w, std::string_view user,
                                        const segstore::FieldIncrement& inc,
                                        Callback<IncrementResult> done) {
  if (Reserved({user}, done)) return;
  if (Status s = CheckFieldIncrement(inc, Now(w)); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  auto result = std::make_shared<IncrementResult>();
  WriteFields(
      w, user,
      [inc, result](std::vector<Field>* live, UnixSeconds at, bool) -> Result<bool> {
        *result = IncrementResult{};
        Field* f = FindField(*live, inc.name);
        if (f != nullptr && f->value.type != FieldValue::Type::kInt) {
          return Status::InvalidArgument(fmt::format(
              "field {} holds no int: it cannot be incremented", QuotedFieldName(inc.name)));
        }
        const int64_t current = f != nullptr ? f->value.i : 0;
        int64_t next;
        if (__builtin_add_overflow(current, inc.delta, &next)) {
          return Status::InvalidArgument(fmt::format("field {}: {} + {} overflows 64 bits",
                                                     QuotedFieldName(inc.name), current,
                                                     inc.delta));
        }
        if (inc.cap && ((inc.delta > 0 && next > *inc.cap) || (inc.delta < 0 && next < *inc.cap))) {
          result->value = current;
          result->capped = true;
          return false;
        }
        result->value = next;
        const UnixSeconds fresh = inc.ttl == 0 ? kNever : FieldExpiry(inc.ttl, true, at);
        if (f == nullptr) {
          PutField(*live, Field{inc.name, FieldValue::Int(next), fresh});
        } else {
          f->value.i = next;
          if (inc.window == segstore::FieldIncrement::Window::kSliding && inc.ttl != 0) {
            f->expires_at = fresh;
          }
        }
        return true;
      },
      [result, done = std::move(done)](Result<uint32_t> count) {
        if (!count.ok()) return done(count.status());
        done(*result);
      });
}

namespace {

bool Comparable(FieldValue::Type t) {
  return t == FieldValue::Type::kInt || t == FieldValue::Type::kDouble ||
         t == FieldValue::Type::kTime;
}

// a > b, both of one comparable type.
// Whether `a` (field_max's value, never a NaN) is larger than `b` (the
// field's): a NaN stored by field_set counts below every number.
bool Larger(const FieldValue& a, const FieldValue& b) {
  return a.type == FieldValue::Type::kDouble ? a.d > b.d || std::isnan(b.d) : a.i > b.i;
}

}  // namespace

void ProfileSessionImpl::FieldMax(const WriteContext& w, std::string_view user,
                                  const FieldUpdate& update, Callback<FieldMaxResult> done) {
  if (Reserved({user}, done)) return;
  if (Status s = CheckFieldMax(update, Now(w), options_); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  auto result = std::make_shared<FieldMaxResult>();
  WriteFields(
      w, user,
      [update, result](std::vector<Field>* live, UnixSeconds at, bool) -> Result<bool> {
        *result = FieldMaxResult{};
        Field* f = FindField(*live, update.name);
        if (f != nullptr && f->value.type != update.value.type) {
          return Status::InvalidArgument(fmt::format(
              "field {} holds another type than the value given", QuotedFieldName(update.name)));
        }
        if (f != nullptr && !Larger(update.value, f->value)) {
          result->value = f->value;
          return false;
        }
        result->value = update.value;
        result->replaced = true;
        PutField(*live,
                 Field{update.name, update.value, FieldExpiry(update.expiry, update.ttl, at)});
        return true;
      },
      [result, done = std::move(done)](Result<uint32_t> count) {
        if (!count.ok()) return done(count.status());
        done(*result);
      });
}

Status CheckFieldSet(std::span<const FieldUpdate> fields, UnixSeconds now,
                     const ProfileOptions& options) {
  return CheckFieldSet(fields, now, FieldLimits{options.max_fields, options.max_field_bytes});
}

Status CheckFieldDelete(std::span<const std::string> names) {
  for (const std::string& name : names) SEGSTORE_RETURN_IF_ERROR(CheckFieldName(name));
  return Status::OK();
}

Status CheckFieldIncrement(const segstore::FieldIncrement& inc, UnixSeconds now) {
  SEGSTORE_RETURN_IF_ERROR(CheckFieldName(inc.name));
  if (uint64_t{now} + inc.ttl > UINT32_MAX) {
    return Status::InvalidArgument(fmt::format("field {}: TTL of {} seconds runs past 2106",
                                               QuotedFieldName(inc.name), inc.ttl));
  }
  return Status::OK();
}

Status CheckFieldMax(const FieldUpdate& field, UnixSeconds now, const ProfileOptions& options) {
  SEGSTORE_RETURN_IF_ERROR(CheckFieldSet(std::span<const FieldUpdate>(&field, 1), now, options));
  if (!Comparable(field.value.type)) {
    return Status::InvalidArgument(fmt::format(
        "field {}: field_max takes an int, a double or a time", QuotedFieldName(field.name)));
  }
  // A NaN is larger than nothing, and nothing is larger than it: once kept,
  // it would stay for good.
  if (field.value.type == FieldValue::Type::kDouble && std::isnan(field.value.d)) {
    return Status::InvalidArgument(
        fmt::format("field {}: field_max takes no NaN", QuotedFieldName(field.name)));
  }
  return Status::OK();
}

}  // namespace segstore::profile
