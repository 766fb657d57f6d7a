// Profile bridging's writes and lookups: link, unlink, a group's delete,
// master_of, links, connected (proto/PROTOCOL.md, "Linked profiles").
//
// A link is a few single-record read-modify-writes, in an order chosen so
// that a crash between any two leaves nothing a read counts as a link that
// was not made (group_read.cc: a link counts only while both sides say it):
//
//   link(U, M):  1. read U and M; the target T is M's master when M is a
//                   member, else M; U's own members G move with it
//                2. T's record lists U and G (the limit checked here)
//                3. U's record names T, with its link's expiry
//                4. each of G names T
//                5. U's former master, if any, lists it no more
//                6. read U's membership again: unless it counts under T (a
//                   concurrent link moved T's group, or dropped U from
//                   it), start over with T
//   unlink(U):   the master's list first, then U's record
//
// Each write is one LinkStep (segments.h), applied by ApplyLinkStep to one
// record: the unit a cluster's log carries. Every step checks, inside its
// read-modify-write, that the record is as step 1 read it where that
// matters (T names no master, U gained no member); otherwise the link
// starts over, a bounded number of times. So
// concurrent links end in a star whatever their order: link(A, B) racing
// link(B, C) ends with A and B both members of C.
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

// A link starts over at most this many times before answering Busy.
constexpr int kMaxLinkAttempts = 16;
// From this attempt on, a member of U's list that did not agree when read
// is taken for one a crash cut short (see NameTarget).
constexpr int kStaleAfter = 4;

bool Lists(const Group& g, std::string_view user) {
  return std::binary_search(
      g.members.begin(), g.members.end(), GroupMember{std::string(user), kNever},
      [](const GroupMember& a, const GroupMember& b) { return a.user < b.user; });
}

// Every segment of `c` as it is (expired ones too: the writes here change
// links, not segments; the sweeper and the next segment write trim).
std::vector<Segment> SegmentsOf(const Columns& c) {
  std::vector<Segment> out(c.size());
  for (size_t i = 0; i < c.size(); ++i) c.CopyTo(i, &out[i]);
  return out;
}

void SortMembers(std::vector<GroupMember>* members) {
  std::sort(members->begin(), members->end(),
            [](const GroupMember& a, const GroupMember& b) { return a.user < b.user; });
}

}  // namespace

// ---------------------------------------------------------------- Membership

void ProfileSessionImpl::ReadMembership(std::string_view user, Callback<Membership> done,
                                        bool verify) {
  ReadWithReference(user, [this, verify, done = std::move(done)](Result<GroupRecord> r,
                                                                 Result<GroupRecord> referenced) {
    Membership m;
    if (!r.ok()) {
      if (!r.status().IsNotFound()) {
        done(r.status());
        return;
      }
      done(std::move(m));
      return;
    }
    const UnixSeconds now = Now();
    m.exists = true;
    Columns own;
    if (Status s = DecodeColumns(r->body(), &own); !s.ok()) {
      done(s.WithContext(fmt::format("profile of user '{}'", r->key())));
      return;
    }
    m.group = own.group;
    m.names = std::string(r->reference());
    if (own.group.member && !m.names.empty()) {
      Columns master;
      if (Alive(own.group.link_expires, now) && referenced.ok() &&
          DecodeColumns(referenced->body(), &master).ok() && !master.group.member) {
        auto it = std::find_if(master.group.members.begin(), master.group.members.end(),
                               [&](const GroupMember& g) { return g.user == r->key(); });
        if (it != master.group.members.end() && Alive(it->expires_at, now)) {
          m.master = m.names;
          m.master_group = std::move(master.group);
        }
      }
    } else if (std::any_of(own.group.members.begin(), own.group.members.end(),
                           [now](const GroupMember& g) { return Alive(g.expires_at, now); })) {
      m.master = std::string(r->key());
      m.master_group = own.group;
    }
    // Only live links count from here on.
    std::erase_if(m.master_group.members,
                  [now](const GroupMember& g) { return !Alive(g.expires_at, now); });
    if (m.master.empty() || !verify) return done(std::move(m));
    VerifyMembers(std::string(r->key()), std::move(m), std::move(done));
  });
}

void ProfileSessionImpl::VerifyMembers(const std::string& user, Membership m,
                                       Callback<Membership> done) {
  // The members the master lists, but `user` (already known to agree when
  // it is a member), read at once: a link counts only where both agree.
  struct Check {
    Membership m;
    std::string user;
    std::vector<bool> agrees;
    Status error;
    Callback<Membership> done;
    void Finish() {
      if (!error.ok()) return done(error);
      std::vector<GroupMember> kept;
      for (size_t i = 0; i < m.master_group.members.size(); ++i) {
        if (agrees[i]) kept.push_back(std::move(m.master_group.members[i]));
      }
      m.master_group.members = std::move(kept);
      // A master none of whose members agrees is in no group.
      if (m.master == user && m.master_group.members.empty()) {
        m.master.clear();
        m.master_group.clear();
      }
      done(std::move(m));
    }
  };
  auto check = std::make_shared<Check>();
  check->user = user;
  check->agrees.assign(m.master_group.members.size(), false);
  check->m = std::move(m);
  check->done = std::move(done);
  std::vector<size_t> to_read;
  for (size_t i = 0; i < check->m.master_group.members.size(); ++i) {
    if (check->m.master_group.members[i].user == user) {
      check->agrees[i] = true;
    } else {
      to_read.push_back(i);
    }
  }
  if (to_read.empty()) {
    // Called from a read's completion, never inside the call that started
    // it: answering at once is fine.
    check->Finish();
    return;
  }
  const UnixSeconds now = Now();
  std::vector<std::string> members;
  for (size_t i : to_read) members.push_back(check->m.master_group.members[i].user);
  ReadAll(std::move(members), [check, to_read, now](Result<std::vector<Result<GroupRecord>>> all) {
    if (!all.ok()) return check->done(all.status());
    for (size_t j = 0; j < to_read.size(); ++j) {
      const size_t i = to_read[j];
      const Result<GroupRecord>& r = (*all)[j];
      if (r.ok()) {
        Columns c;
        if (Status s = DecodeColumns(r->body(), &c); !s.ok()) {
          if (check->error.ok()) check->error = s;
        } else {
          check->agrees[i] = r->reference() == check->m.master && c.group.member &&
                             Alive(c.group.link_expires, now);
        }
      } else if (!r.status().IsNotFound() && check->error.ok()) {
        check->error = r.status();
      }
    }
    check->Finish();
  });
}

void ProfileSessionImpl::MasterOf(std::string_view user, Callback<std::string> done) {
  if (Reserved({user}, done)) return;
  ReadMembership(user, [done = std::move(done)](Result<Membership> m) {
    if (!m.ok()) {
      done(m.status());
    } else if (m->master.empty()) {
      done(Status::NotFound("the user is in no group"));
    } else {
      done(std::move(m->master));
    }
  });
}

void ProfileSessionImpl::FieldTarget(std::string_view user, Callback<std::string> done) {
  if (Reserved({user}, done)) return;
  // Unverified: the other members' agreement changes which of them count,
  // never whose record the user's fields are on.
  ReadMembership(
      user,
      [user = std::string(user), done = std::move(done)](Result<Membership> m) mutable {
        if (!m.ok()) return done(m.status());
        done(m->master.empty() ? std::move(user) : std::move(m->master));
      },
      /*verify=*/false);
}

void ProfileSessionImpl::Links(std::string_view user, std::string_view cursor, uint32_t max,
                               Callback<LinksPage> done) {
  if (Reserved({user}, done)) return;
  if (max == 0) max = 100;
  ReadMembership(user,
                 [cursor = std::string(cursor), max, done = std::move(done)](Result<Membership> m) {
                   if (!m.ok()) {
                     done(m.status());
                     return;
                   }
                   if (m->master.empty()) {
                     done(Status::NotFound("the user is in no group"));
                     return;
                   }
                   LinksPage page;
                   page.master = m->master;
                   for (const GroupMember& g : m->master_group.members) {
                     if (!cursor.empty() && g.user <= cursor) continue;
                     if (page.links.size() == max) {
                       page.next = page.links.back().user;
                       break;
                     }
                     page.links.push_back(LinkedUser{g.user, g.expires_at});
                   }
                   done(std::move(page));
                 });
}

void ProfileSessionImpl::Connected(std::string_view a, std::string_view b, Callback<bool> done) {
  if (Reserved({a, b}, done)) return;
  if (a == b) {
    worker_->Defer([done = std::move(done)] { done(true); });
    return;
  }
  struct Join {
    Result<Membership> a = Status::Internal("pending");
    Result<Membership> b = Status::Internal("pending");
    int remaining = 2;
    Callback<bool> done;
    // Unverified, each side is one lookup (its record and its master's): a
    // member's own agreement with its master proves the group, so two
    // users share one when a side is an agreeing member and the other is
    // that master or another agreeing member of it.
    void Finish() {
      if (!a.ok()) return done(a.status());
      if (!b.ok()) return done(b.status());
      auto agreed = [](const Membership& m, const std::string& user) {
        return !m.master.empty() && m.master != user;
      };
      const bool a_member = agreed(*a, user_a), b_member = agreed(*b, user_b);
      done((a_member && (a->master == b->master || a->master == user_b)) ||
           (b_member && b->master == user_a));
    }
    std::string user_a, user_b;
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  join->user_a = std::string(a);
  join->user_b = std::string(b);
  storage::Worker::Batch batch(*worker_);
  ReadMembership(
      a,
      [join](Result<Membership> m) {
        join->a = std::move(m);
        if (--join->remaining == 0) join->Finish();
      },
      /*verify=*/false);
  ReadMembership(
      b,
      [join](Result<Membership> m) {
        join->b = std::move(m);
        if (--join->remaining == 0) join->Finish();
      },
      /*verify=*/false);
}

// ---------------------------------------------------------------- Steps

void ProfileSessionImpl::RunStep(const WriteContext& w, const LinkStep& step,
                                 Callback<LinkStepResult> done) {
  if (peers_ != nullptr) return peers_->Step(step, std::move(done));
  ApplyLinkStep(w, step, std::move(done));
}

void ProfileSessionImpl::Grouped(std::string_view user, Callback<bool> done) {
  worker_->Get(user, [done = std::move(done)](Result<storage::Record> r) {
    if (r.status().IsNotFound()) return done(false);
    if (!r.ok()) return done(r.status());
    done(!r->reference().empty() || HasGroupSection(r->body()));
  });
}

void ProfileSessionImpl::ApplyLinkStep(const WriteContext& w, const LinkStep& step,
                                       Callback<LinkStepResult> done) {
  auto result = std::make_shared<LinkStepResult>();
  Write(
      w, step.user,
      [this, w, step, result](const storage::Record* cur) -> Result<storage::Mutation> {
        *result = LinkStepResult();
        const Columns* columns = nullptr;
        SEGSTORE_RETURN_IF_ERROR(DecodeForWrite(w, cur, &columns));
        static const Columns kNone;
        const Columns& c = columns != nullptr ? *columns : kNone;
        const std::string_view names = cur != nullptr ? cur->reference() : std::string_view();
        const UnixSeconds now = Now(w);
        // The record as a member naming step.master, its link expiring
        // step.expires (its own members, if any, dropped).
        auto name_master = [&] {
          Group g;
          g.member = true;
          g.link_expires = step.expires;
          Result<storage::Mutation> m = Store(SegmentsOf(c), w, g, c.fields);
          if (m.ok()) m->reference = step.master;
          return m;
        };
        auto moving = [&](std::string_view u) {
          return std::any_of(step.moving.begin(), step.moving.end(),
                             [&](const LinkedUser& x) { return x.user == u; });
        };
        switch (step.kind) {
          case LinkStep::Kind::kList: {
            if (names != step.expect) {
              result->changed = true;  // it became (or stopped being) a member meanwhile
              return storage::Mutation::Keep();
            }
            Group g = c.group;
            g.member = false;  // a pointer left by a link a crash cut short: a master now
            g.link_expires = kNever;
            std::erase_if(g.members, [&](const GroupMember& m) {
              return !Alive(m.expires_at, now) || m.user == step.member || moving(m.user);
            });
            g.members.push_back(GroupMember{step.member, step.expires});
            for (const LinkedUser& m : step.moving) {
              if (m.user != step.user) g.members.push_back(GroupMember{m.user, m.expires_at});
            }
            SortMembers(&g.members);
            if (g.members.size() > step.max_links) {
              return Status::LimitExceeded(
                  fmt::format("the group of '{}' would have {} linked users; the limit is {}",
                              step.user, g.members.size(), step.max_links));
            }
            result->members = static_cast<uint32_t>(g.members.size());
            return Store(SegmentsOf(c), w, g, c.fields);
          }
          case LinkStep::Kind::kName: {
            for (const GroupMember& m : c.group.members) {
              if (!Alive(m.expires_at, now) || moving(m.user)) continue;
              // A listed member that did not agree when read: a link in
              // flight (it may agree by now: start over and move it), or one
              // a crash cut short. After a few attempts the operation takes
              // it for the latter (`stale`) and it goes with the list; were
              // it in flight after all, that link's own check sees it no
              // longer counts and links it again, under the new master.
              const bool stale = step.stale && std::find(step.listed.begin(), step.listed.end(),
                                                         m.user) != step.listed.end();
              if (!stale) {
                result->changed = true;  // it gained a member since it was read
                return storage::Mutation::Keep();
              }
            }
            return name_master();
          }
          case LinkStep::Kind::kNameMoved: {
            if (cur == nullptr) return storage::Mutation::Keep();  // deleted meanwhile
            if (names != step.expect && names != step.master && !names.empty()) {
              return storage::Mutation::Keep();  // it moved elsewhere meanwhile
            }
            return name_master();
          }
          case LinkStep::Kind::kDrop: {
            if (cur == nullptr || !Lists(c.group, step.member)) return storage::Mutation::Keep();
            Group g = c.group;
            std::erase_if(g.members, [&](const GroupMember& m) { return m.user == step.member; });
            return Store(SegmentsOf(c), w, g, c.fields);
          }
          case LinkStep::Kind::kClear: {
            if (cur == nullptr) return storage::Mutation::Keep();
            if (!step.master.empty() && names != step.master) return storage::Mutation::Keep();
            Group g = c.group;
            const bool had = g.member || (step.members_too && !g.members.empty());
            if (!had) return storage::Mutation::Keep();
            g.member = false;
            g.link_expires = kNever;
            if (step.members_too) g.members.clear();
            // No segments and no link left: the record goes (Store deletes it).
            return Store(SegmentsOf(c), w, g, c.fields);
          }
          case LinkStep::Kind::kDeleteMember: {
            if (cur == nullptr || names != step.master) return storage::Mutation::Keep();
            if (!c.group.member || !Alive(c.group.link_expires, now)) {
              return storage::Mutation::Keep();  // its link expired: no longer in the group
            }
            return storage::Mutation::Delete();
          }
          case LinkStep::Kind::kDelete:
            if (cur == nullptr) return storage::Mutation::Keep();
            return storage::Mutation::Delete();
        }
        return Status::InvalidArgument(
            fmt::format("unknown link step kind {}", static_cast<int>(step.kind)));
      },
      [result, done = std::move(done)](Result<storage::WriteOutcome> r) {
        if (!r.ok()) return done(r.status());
        result->applied = r->applied != storage::Mutation::Kind::kKeep;
        done(*result);
      });
}

// ---------------------------------------------------------------- Link

struct ProfileSessionImpl::LinkOp : std::enable_shared_from_this<LinkOp> {
  ProfileSessionImpl* session;
  WriteContext w;
  std::string user;
  std::string asked;  // the master asked for (the link starts over with T)
  UnixSeconds expires = kNever;
  Callback<LinkResult> done;
  int attempts = 0;

  // Step 1's reading.
  Membership of_user, of_asked;
  std::string target;
  std::string target_names;         // what T's record named when read (a stale pointer, or "")
  std::vector<LinkedUser> moving;   // G: U's members, with their links' expiries
  std::vector<std::string> listed;  // every user U's list held when read (agreeing or not)
  std::string former;               // U's former master (or the one its record names)
  LinkResult result;

  void Start() {
    if (++attempts > kMaxLinkAttempts) {
      done(Status::Busy(
          fmt::format("gave up linking '{}' after {} attempts: other links kept changing the group",
                      user, kMaxLinkAttempts)));
      return;
    }
    auto self = shared_from_this();
    auto remaining = std::make_shared<int>(2);
    auto error = std::make_shared<Status>();
    auto read = [self, remaining, error](Membership* into) {
      return [self, remaining, error, into](Result<Membership> m) {
        if (m.ok()) {
          *into = std::move(*m);
        } else if (error->ok()) {
          *error = m.status();
        }
        if (--*remaining == 0) {
          if (!error->ok()) return self->done(*error);
          self->Plan();
        }
      };
    };
    storage::Worker::Batch batch(*session->worker_);
    session->ReadMembership(user, read(&of_user));
    session->ReadMembership(asked, read(&of_asked));
  }

  void Plan() {
    target = !of_asked.master.empty() ? of_asked.master : asked;
    if (target == user) {
      // `asked` is already in the group `user` is the master of.
      result = LinkResult{user, static_cast<uint32_t>(of_user.master_group.members.size()), 0};
      return done(result);
    }
    // T's record as read: what it names (when T is `asked` and not an agreed member).
    target_names = target == asked ? of_asked.names : std::string();
    moving.clear();
    if (of_user.master == user) {
      for (const GroupMember& m : of_user.master_group.members) {
        moving.push_back(LinkedUser{m.user, m.expires_at});
      }
    }
    listed.clear();
    for (const GroupMember& m : of_user.group.members) listed.push_back(m.user);
    former = !of_user.master.empty() && of_user.master != user ? of_user.master : of_user.names;
    ListUnderTarget();
  }

  // Runs `step`; then `next`, unless it failed or found its record changed
  // (the link starts over).
  void Run(LinkStep step, std::function<void(const LinkStepResult&)> next) {
    auto self = shared_from_this();
    session->RunStep(w, step, [self, next = std::move(next)](Result<LinkStepResult> r) {
      if (!r.ok()) return self->done(r.status());
      if (r->changed) return self->Start();
      next(*r);
    });
  }

  // 2. T lists U and G.
  void ListUnderTarget() {
    LinkStep step;
    step.kind = LinkStep::Kind::kList;
    step.user = target;
    step.member = user;
    step.expect = target_names;
    step.expires = expires;
    step.moving = moving;
    step.max_links = session->options_.max_links;
    Run(std::move(step), [this](const LinkStepResult& r) {
      result.members = r.members;
      NameTarget();
    });
  }

  // 3. U names T.
  void NameTarget() {
    LinkStep step;
    step.kind = LinkStep::Kind::kName;
    step.user = user;
    step.master = target;
    step.expires = expires;
    step.moving = moving;
    step.listed = listed;
    step.stale = attempts >= kStaleAfter;
    Run(std::move(step), [this](const LinkStepResult&) { NameTargetInMoved(0); });
  }

  // 4. Each of G names T (one at a time: a group moves rarely).
  void NameTargetInMoved(size_t i) {
    if (i == moving.size()) return ForgetFormer();
    LinkStep step;
    step.kind = LinkStep::Kind::kNameMoved;
    step.user = moving[i].user;
    step.master = target;
    step.expect = user;
    step.expires = moving[i].expires_at;
    Run(std::move(step), [this, i](const LinkStepResult&) { NameTargetInMoved(i + 1); });
  }

  // 5. U's former master lists it no more.
  void ForgetFormer() {
    if (former.empty() || former == target) return Verify();
    LinkStep step;
    step.kind = LinkStep::Kind::kDrop;
    step.user = former;
    step.member = user;
    Run(std::move(step), [this](const LinkStepResult&) { Verify(); });
  }

  // 6. Does U's link count now (T lists U, U names T, T names no master)?
  // Else a concurrent link moved T's group, or dropped U from it: link U
  // again, to T (or T's master).
  void Verify() {
    auto self = shared_from_this();
    session->ReadMembership(
        user,
        [self](Result<Membership> m) {
          if (!m.ok()) return self->done(m.status());
          if (m->master != self->target) {
            self->asked = self->target;
            return self->Start();
          }
          self->result.master = self->target;
          self->result.moved = static_cast<uint32_t>(self->moving.size());
          self->result.members = static_cast<uint32_t>(m->master_group.members.size());
          self->done(self->result);
        },
        /*verify=*/false);
  }
};

void ProfileSessionImpl::Link(const WriteContext& w, std::string_view user, std::string_view master,
                              uint32_t ttl_seconds, Callback<LinkResult> done) {
  if (Reserved({user, master}, done)) return;
  if (w.log_position != 0) {
    FailSoon(Status::Unsupported("links are not yet replicated through the cluster's log"),
             std::move(done));
    return;
  }
  if (user == master) {
    FailSoon(Status::InvalidArgument("a user cannot be linked to itself"), std::move(done));
    return;
  }
  const UnixSeconds now = Now(w);
  if (ttl_seconds != 0 && uint64_t{now} + ttl_seconds > UINT32_MAX) {
    FailSoon(Status::InvalidArgument("the link's expiry would be past 2106"), std::move(done));
    return;
  }
  auto op = std::make_shared<LinkOp>();
  op->session = this;
  op->w = w;
  op->user = std::string(user);
  op->asked = std::string(master);
  op->expires = ttl_seconds == 0 ? kNever : now + ttl_seconds;
  op->done = std::move(done);
  op->Start();
}

// ---------------------------------------------------------------- Unlink, Delete

void ProfileSessionImpl::DropFromList(const WriteContext& w, const std::string& master,
                                      const std::string& user, Callback<bool> done) {
  LinkStep step;
  step.kind = LinkStep::Kind::kDrop;
  step.user = master;
  step.member = user;
  RunStep(w, step, [done = std::move(done)](Result<LinkStepResult> r) {
    if (!r.ok()) return done(r.status());
    done(r->applied);
  });
}

void ProfileSessionImpl::ClearLink(const WriteContext& w, const std::string& user,
                                   const std::string& master, bool members_too,
                                   Callback<bool> done) {
  LinkStep step;
  step.kind = LinkStep::Kind::kClear;
  step.user = user;
  step.master = master;
  step.members_too = members_too;
  RunStep(w, step, [done = std::move(done)](Result<LinkStepResult> r) {
    if (!r.ok()) return done(r.status());
    done(r->applied);
  });
}

void ProfileSessionImpl::Unlink(const WriteContext& w, std::string_view user, Callback<bool> done) {
  if (Reserved({user}, done)) return;
  if (w.log_position != 0) {
    FailSoon(Status::Unsupported("links are not yet replicated through the cluster's log"),
             std::move(done));
    return;
  }
  ReadMembership(user, [this, w, user = std::string(user),
                        done = std::move(done)](Result<Membership> m) mutable {
    if (!m.ok()) return done(m.status());
    if (m->master == user) {
      // A master: its group dissolves. Its list first, then each member.
      auto members = std::make_shared<std::vector<GroupMember>>(m->group.members);
      ClearLink(w, user, "", /*members_too=*/true,
                [this, w, user, members, done = std::move(done)](Result<bool> r) mutable {
                  if (!r.ok()) return done(r.status());
                  ClearMembers(w, user, members, 0, [done = std::move(done)](Result<bool> all) {
                    if (!all.ok()) return done(all.status());
                    done(true);
                  });
                });
      return;
    }
    if (m->names.empty()) return done(false);
    // A member (or a record naming a master that does not list it): the
    // master's list first, then its own record.
    const bool linked = !m->master.empty();
    const std::string names = m->names;
    DropFromList(w, names, user,
                 [this, w, user, names, linked, done = std::move(done)](Result<bool> r) mutable {
                   if (!r.ok()) return done(r.status());
                   ClearLink(w, user, names, false,
                             [linked, done = std::move(done)](Result<bool> cleared) {
                               if (!cleared.ok()) return done(cleared.status());
                               done(linked);
                             });
                 });
  });
}

void ProfileSessionImpl::ClearMembers(const WriteContext& w, const std::string& master,
                                      std::shared_ptr<std::vector<GroupMember>> members, size_t i,
                                      Callback<bool> done) {
  if (i == members->size()) {
    worker_->Defer([done = std::move(done)] { done(true); });
    return;
  }
  ClearLink(w, (*members)[i].user, master, false,
            [this, w, master, members, i, done = std::move(done)](Result<bool> r) mutable {
              if (!r.ok()) return done(r.status());
              ClearMembers(w, master, members, i + 1, std::move(done));
            });
}

void ProfileSessionImpl::DeleteGrouped(const WriteContext& w, const std::string& user,
                                       Callback<bool> done) {
  ReadMembership(user, [this, w, user, done = std::move(done)](Result<Membership> m) mutable {
    if (!m.ok()) return done(m.status());
    auto finish = [this, w, user, done = std::move(done)](Status s) mutable {
      if (!s.ok()) return done(s);
      LinkStep step;
      step.kind = LinkStep::Kind::kDelete;
      step.user = user;
      RunStep(w, step, [done = std::move(done)](Result<LinkStepResult> r) {
        if (!r.ok()) return done(r.status());
        done(r->applied);
      });
    };
    if (m->master == user) {
      // A master's delete deletes the group: every member naming it with a
      // live link, then the master.
      auto members = std::make_shared<std::vector<std::string>>();
      for (const GroupMember& g : m->master_group.members) members->push_back(g.user);
      DeleteMembers(w, user, members, 0, std::move(finish));
      return;
    }
    if (!m->names.empty()) {
      // A member: it leaves its master's list, then goes.
      DropFromList(w, m->names, user,
                   [finish = std::move(finish)](Result<bool> r) mutable { finish(r.status()); });
      return;
    }
    finish(Status::OK());
  });
}

void ProfileSessionImpl::DeleteMembers(const WriteContext& w, const std::string& master,
                                       std::shared_ptr<std::vector<std::string>> members, size_t i,
                                       std::function<void(Status)> done) {
  if (i == members->size()) return done(Status::OK());
  // Only a member whose record names this master is in the group.
  LinkStep step;
  step.kind = LinkStep::Kind::kDeleteMember;
  step.user = (*members)[i];
  step.master = master;
  RunStep(w, step,
          [this, w, master, members, i, done = std::move(done)](Result<LinkStepResult> r) mutable {
            if (!r.ok()) return done(r.status());
            DeleteMembers(w, master, members, i + 1, std::move(done));
          });
}

}  // namespace segstore::profile
