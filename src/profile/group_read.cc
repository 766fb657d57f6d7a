// The merged read of a group of linked profiles (profile bridging): a
// master's record lists its members (codec 3's group section), and each
// member's record names its master (the engine's reference, read with it).
//
// A link counts only while both sides say it: the master lists the member
// with a live link, and the member's record names that master with a live
// link of its own. A side that disagrees (a link or unlink a crash cut in
// two, or one still in flight) counts as no link: the member reads alone,
// and the master's read leaves it out. A master that names a master of its
// own would make a chain: it counts as no master.
//
// Round trips: the user's record and, when the index marks it linked, its
// master's, in one; then every other member at once.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "profile/profile_session.h"
#include "profile/segment_ops.h"

namespace segstore::profile {
namespace {

// Decoded profiles kept for the next group read on this thread (a session's
// reads all run on its thread): a Columns keeps its buffers (a reference
// profile's ids, expiries and bit stream, about 14 KiB), so a warm thread's
// group reads allocate none, and zero none, for them.
struct ReturnColumns {
  void operator()(Columns* c) const;
};
using PooledColumns = std::unique_ptr<Columns, ReturnColumns>;

struct ColumnsPool {
  // At most about 2 MiB a thread: a few groups' profiles, of up to 4,096
  // segments (a reference profile holds 1,000; larger ones are freed).
  static constexpr size_t kMaxKept = 32;
  static constexpr size_t kMaxRows = 4096;
  std::vector<std::unique_ptr<Columns>> free;
  ~ColumnsPool();
};
// Set once this thread's pool is destroyed (thread exit): a Columns returned
// after that is freed. Trivially destructible, so readable to the end.
thread_local bool pool_gone = false;
thread_local ColumnsPool pool;
ColumnsPool::~ColumnsPool() { pool_gone = true; }

PooledColumns TakeColumns() {
  if (pool_gone || pool.free.empty()) return PooledColumns(new Columns);
  PooledColumns c(pool.free.back().release());
  pool.free.pop_back();
  return c;
}

void ReturnColumns::operator()(Columns* c) const {
  if (pool_gone || pool.free.size() >= ColumnsPool::kMaxKept ||
      c->ids.capacity() > ColumnsPool::kMaxRows) {
    delete c;
    return;
  }
  pool.free.emplace_back(c);
}

// Whether `c` (a profile's decoded body) says it is linked, live at `now`.
bool LinkedLive(const Columns& c, UnixSeconds now) {
  return c.group.member && Alive(c.group.link_expires, now);
}

// The fields `options` asks for of `c` into out->fields (AnswerFields).
Status FieldsOf(const Columns& c, const FieldNames& names, const GetOptions& options,
                UnixSeconds now, uint32_t live_segments, GetResult* out, uint32_t* live) {
  std::vector<StoredField> scratch;
  return AnswerFields(c.fields, names, options.fields, now, live_segments, &scratch, &out->fields,
                      live);
}

// `own` alone, as GetOwn answers it.
void AnswerAlone(const Columns& own, const FieldNames& names, UnixSeconds now,
                 const GetOptions& options, const Callback<GetResult>& done) {
  GetResult out;
  const uint32_t live = Select(own, now, options, &out);
  uint32_t live_fields = 0;
  if (Status s = FieldsOf(own, names, options, now, live, &out, &live_fields); !s.ok()) {
    done(s);
    return;
  }
  if (live == 0 && live_fields == 0) {
    done(Status::NotFound("no live segments"));
    return;
  }
  done(std::move(out));
}

struct GroupRead {
  const FieldNames* names = nullptr;
  GetOptions options;
  Callback<GetResult> done;
  UnixSeconds now = 0;
  std::string master;
  // (user, profile): the master's first, then the members'.
  std::vector<std::pair<std::string, PooledColumns>> profiles;
  Status error;  // the first member read that failed (not NotFound)

  void Finish() {
    if (!error.ok()) {
      done(error);
      return;
    }
    if (profiles.size() == 1) {
      // A master none of whose members agrees: in no group.
      AnswerAlone(*profiles[0].second, *names, now, options, done);
      return;
    }
    // The tie-break order of MergeProfiles: the master, then members by user.
    std::sort(profiles.begin() + 1, profiles.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<const Columns*> columns;
    columns.reserve(profiles.size());
    for (const auto& p : profiles) columns.push_back(p.second.get());
    // The session's thread's: every read runs on it, one Finish at a time.
    thread_local MergeScratch scratch;
    GetResult out;
    const uint32_t live = SelectMerged(columns, now, options, &scratch, &out);
    // The group's fields are its master's.
    uint32_t live_fields = 0;
    if (Status s = FieldsOf(*profiles[0].second, *names, options, now, live, &out, &live_fields);
        !s.ok()) {
      done(s.WithContext(fmt::format("profile of user '{}'", master)));
      return;
    }
    if (live == 0 && live_fields == 0) {
      done(Status::NotFound("no live segments in the group"));
      return;
    }
    out.master = master;
    out.profiles = static_cast<uint32_t>(profiles.size());
    done(std::move(out));
  }
};

}  // namespace

// ---------------------------------------------------------------- Records

void ProfileSessionImpl::ReadAll(std::vector<std::string> users,
                                 Callback<std::vector<Result<GroupRecord>>> done) {
  struct Join {
    std::vector<Result<GroupRecord>> results;
    size_t remaining = 0;
    Callback<std::vector<Result<GroupRecord>>> done;
    void One() {
      if (--remaining == 0) done(std::move(results));
    }
  };
  auto join = std::make_shared<Join>();
  join->results.reserve(users.size());
  for (size_t i = 0; i < users.size(); ++i) join->results.emplace_back(Status::Internal("pending"));
  join->done = std::move(done);
  if (users.empty()) {
    worker_->Defer([join] { join->done(std::move(join->results)); });
    return;
  }
  std::vector<std::string> remote;
  std::vector<size_t> remote_at;
  for (size_t i = 0; i < users.size(); ++i) {
    if (!HoldsHere(users[i])) {
      remote.push_back(users[i]);
      remote_at.push_back(i);
    }
  }
  join->remaining = users.size() - remote.size() + (remote.empty() ? 0 : 1);
  if (!remote.empty()) {
    peers_->Read(remote,
                 [join, remote, remote_at](Result<std::vector<Result<StoredRecord>>> r) mutable {
                   for (size_t j = 0; j < remote_at.size(); ++j) {
                     Result<GroupRecord>& out = join->results[remote_at[j]];
                     if (!r.ok()) {
                       out = r.status();
                     } else if (j >= r->size()) {
                       out = Status::Internal("a node answered fewer records than asked");
                     } else if (!(*r)[j].ok()) {
                       out = (*r)[j].status();
                     } else {
                       out = GroupRecord(std::move(remote[j]), std::move(*(*r)[j]));
                     }
                   }
                   join->One();
                 });
  }
  // One submission: the reads held here go out together.
  storage::Worker::Batch batch(*worker_);
  for (size_t i = 0; i < users.size(); ++i) {
    if (!HoldsHere(users[i])) continue;
    worker_->Get(users[i], [join, i](Result<storage::Record> r) {
      join->results[i] = r.ok() ? Result<GroupRecord>(GroupRecord(std::move(*r)))
                                : Result<GroupRecord>(r.status());
      join->One();
    });
  }
}

void ProfileSessionImpl::ReadWithReference(std::string_view user, PairCallback done) {
  // Results travel in shared pointers: a record read here is move-only, and
  // callbacks are std::functions.
  using Held = std::shared_ptr<Result<GroupRecord>>;
  // Once `own` is known: the record it names read with it (both held
  // here), or from here or its node now.
  auto named = [this](Held own, Held referenced, std::shared_ptr<PairCallback> then) {
    const bool read_already = referenced != nullptr;
    if (!own->ok() || (*own)->reference().empty() ||
        (read_already && HoldsHere((*own)->reference()))) {
      Result<GroupRecord> none = Status::NotFound("names no record");
      return (*then)(std::move(*own), referenced ? std::move(*referenced) : std::move(none));
    }
    ReadAll({std::string((*own)->reference())},
            [own, then](Result<std::vector<Result<GroupRecord>>> r) {
              if (!r.ok()) return (*then)(std::move(*own), r.status());
              (*then)(std::move(*own), std::move((*r)[0]));
            });
  };
  auto cb = std::make_shared<PairCallback>(std::move(done));
  if (HoldsHere(user)) {
    worker_->GetWithReference(
        user, [named, cb](Result<storage::Record> r, Result<storage::Record> referenced) {
          auto wrap = [](Result<storage::Record> x) {
            return std::make_shared<Result<GroupRecord>>(
                x.ok() ? Result<GroupRecord>(GroupRecord(std::move(*x)))
                       : Result<GroupRecord>(x.status()));
          };
          named(wrap(std::move(r)), wrap(std::move(referenced)), cb);
        });
    return;
  }
  ReadAll({std::string(user)}, [named, cb](Result<std::vector<Result<GroupRecord>>> r) {
    if (!r.ok()) return (*cb)(r.status(), r.status());
    named(std::make_shared<Result<GroupRecord>>(std::move((*r)[0])), nullptr, cb);
  });
}

// ---------------------------------------------------------------- Merged get

void ProfileSessionImpl::ReadGroup(const GroupRecord& own, const Result<GroupRecord>& referenced,
                                   const GetOptions& options, UnixSeconds now,
                                   Callback<GetResult> done) {
  auto read = std::make_shared<GroupRead>();
  read->names = names_;
  read->options = options;
  read->now = now;
  PooledColumns mine = TakeColumns();
  if (Status s = DecodeColumns(own.body(), mine.get()); !s.ok()) {
    done(s.WithContext(fmt::format("profile of user '{}'", own.key())));
    return;
  }
  const std::string user(own.key());
  std::vector<std::string> to_read;
  auto members_of = [&](const Group& g) {
    for (const GroupMember& m : g.members) {
      if (to_read.size() >= options_.max_links) break;
      if (m.user != user && Alive(m.expires_at, now)) to_read.push_back(m.user);
    }
  };
  if (mine->group.member) {
    // A member: counts only if its master, read with it, lists it.
    PooledColumns master = TakeColumns();
    const bool agreed = LinkedLive(*mine, now) && !own.reference().empty() && referenced.ok() &&
                        DecodeColumns(referenced->body(), master.get()).ok() &&
                        !master->group.member && ListsLive(master->group, user, now);
    if (!agreed) {
      AnswerAlone(*mine, *names_, now, options, done);
      return;
    }
    read->master = std::string(own.reference());
    members_of(master->group);
    read->profiles.reserve(to_read.size() + 2);
    read->profiles.emplace_back(read->master, std::move(master));
    read->profiles.emplace_back(user, std::move(mine));
  } else {
    // A master: its group lasts while it lists a live link (as MasterOf says).
    members_of(mine->group);
    if (to_read.empty()) {
      AnswerAlone(*mine, *names_, now, options, done);
      return;
    }
    read->master = user;
    read->profiles.reserve(to_read.size() + 1);
    read->profiles.emplace_back(user, std::move(mine));
  }
  read->done = std::move(done);
  if (to_read.empty()) {
    read->Finish();
    return;
  }
  // Every member at once: one submission here, one request per other node.
  ReadAll(to_read, [read, to_read](Result<std::vector<Result<GroupRecord>>> all) {
    if (!all.ok()) {
      read->done(all.status().WithContext(fmt::format("the group of '{}'", read->master)));
      return;
    }
    for (size_t i = 0; i < to_read.size(); ++i) {
      const std::string& member = to_read[i];
      const Result<GroupRecord>& r = (*all)[i];
      if (r.ok() && r->reference() == read->master) {
        PooledColumns c = TakeColumns();
        if (Status s = DecodeColumns(r->body(), c.get()); !s.ok()) {
          if (read->error.ok())
            read->error = s.WithContext(fmt::format("profile of user '{}'", member));
        } else if (LinkedLive(*c, read->now)) {
          read->profiles.emplace_back(member, std::move(c));
        }
      } else if (!r.ok() && !r.status().IsNotFound() && read->error.ok()) {
        read->error = r.status().WithContext(
            fmt::format("member '{}' of the group of '{}'", member, read->master));
      }
    }
    read->Finish();
  });
}

}  // namespace segstore::profile
