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

// Whether `g` (a master's group) lists `user` with a link live at `now`.
bool ListsLive(const Group& g, std::string_view user, UnixSeconds now) {
  auto it = std::lower_bound(g.members.begin(), g.members.end(), user,
                             [](const GroupMember& m, std::string_view u) { return m.user < u; });
  return it != g.members.end() && it->user == user && Alive(it->expires_at, now);
}

// Whether `c` (a profile's decoded body) says it is linked, live at `now`.
bool LinkedLive(const Columns& c, UnixSeconds now) {
  return c.group.member && Alive(c.group.link_expires, now);
}

// `own` alone, as GetOwn answers it.
void AnswerAlone(const Columns& own, UnixSeconds now, const GetOptions& options,
                 const Callback<GetResult>& done) {
  GetResult out;
  if (Select(own, now, options, &out) == 0) {
    done(Status::NotFound("no live segments"));
    return;
  }
  done(std::move(out));
}

struct GroupRead {
  GetOptions options;
  Callback<GetResult> done;
  UnixSeconds now = 0;
  std::string master;
  // (user, profile): the master's first, then the members'.
  std::vector<std::pair<std::string, Columns>> profiles;
  size_t remaining = 0;
  Status error;  // the first member read that failed (not NotFound)

  void Finish() {
    if (!error.ok()) {
      done(error);
      return;
    }
    if (profiles.size() == 1) {
      // A master none of whose members agrees: in no group.
      AnswerAlone(profiles[0].second, now, options, done);
      return;
    }
    // The tie-break order of MergeProfiles: the master, then members by user.
    std::sort(profiles.begin() + 1, profiles.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<const Columns*> columns;
    columns.reserve(profiles.size());
    for (const auto& p : profiles) columns.push_back(&p.second);
    Columns merged;
    MergeProfiles(columns, now, &merged);
    GetResult out;
    const uint32_t live = Select(merged, now, options, &out);
    if (live == 0) {
      done(Status::NotFound("no live segments in the group"));
      return;
    }
    out.master = master;
    out.profiles = static_cast<uint32_t>(profiles.size());
    done(std::move(out));
  }
};

}  // namespace

void ProfileSessionImpl::ReadGroup(const storage::Record& own,
                                   const Result<storage::Record>& referenced,
                                   const GetOptions& options, UnixSeconds now,
                                   Callback<GetResult> done) {
  auto read = std::make_shared<GroupRead>();
  read->options = options;
  read->now = now;
  Columns mine;
  if (Status s = DecodeColumns(own.body(), &mine); !s.ok()) {
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
  if (mine.group.member) {
    // A member: counts only if its master, read with it, lists it.
    Columns master;
    const bool agreed = LinkedLive(mine, now) && !own.reference().empty() && referenced.ok() &&
                        DecodeColumns(referenced->body(), &master).ok() && !master.group.member &&
                        ListsLive(master.group, user, now);
    if (!agreed) {
      AnswerAlone(mine, now, options, done);
      return;
    }
    read->master = std::string(own.reference());
    members_of(master.group);
    read->profiles.emplace_back(read->master, std::move(master));
    read->profiles.emplace_back(user, std::move(mine));
  } else {
    // A master: its group lasts while it lists a live link (as MasterOf says).
    members_of(mine.group);
    if (to_read.empty()) {
      AnswerAlone(mine, now, options, done);
      return;
    }
    read->master = user;
    read->profiles.emplace_back(user, std::move(mine));
  }
  read->done = std::move(done);
  if (to_read.empty()) {
    read->Finish();
    return;
  }
  read->remaining = to_read.size();
  // One submission: the members' reads go out together.
  storage::Worker::Batch batch(*worker_);
  for (const std::string& member : to_read) {
    worker_->Get(member, [read, member](Result<storage::Record> r) {
      if (r.ok() && r->reference() == read->master) {
        Columns c;
        if (Status s = DecodeColumns(r->body(), &c); !s.ok()) {
          if (read->error.ok())
            read->error = s.WithContext(fmt::format("profile of user '{}'", member));
        } else if (LinkedLive(c, read->now)) {
          read->profiles.emplace_back(member, std::move(c));
        }
      } else if (!r.ok() && !r.status().IsNotFound() && read->error.ok()) {
        read->error = r.status().WithContext(
            fmt::format("member '{}' of the group of '{}'", member, read->master));
      }
      if (--read->remaining == 0) read->Finish();
    });
  }
}

}  // namespace segstore::profile
