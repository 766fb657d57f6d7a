// Profile bridging on a real engine: links, the merged view, unlink and
// delete, link expiry and the sweeper, restarts and defragmentation, links
// a crash cut in two, racing links, and a randomised run against a model.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "profile/codec.h"
#include "profile/test_util.h"
#include "segstore/profile.h"
#include "segstore/storage.h"

namespace segstore::profile {
namespace {

constexpr UnixSeconds kStart = testing::kTestStart;

using testing::TempDir;

// The ids a get by `user` answers, "absent" for NotFound; with the master
// it names ("1,2 @m").
std::string ViewIn(ProfileSession& session, const std::string& user, bool own_only = false) {
  GetOptions o;
  o.own_only = own_only;
  auto r = session.GetSync(user, o);
  if (r.status().IsNotFound()) return "absent";
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return "error";
  std::string out;
  for (uint64_t id : r->ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  if (!r->master.empty()) out += " @" + r->master;
  return out;
}

// `user`'s master, "-" for a user in no group.
std::string MasterOfIn(ProfileSession& session, const std::string& user) {
  auto r = session.MasterOfSync(user);
  if (r.status().IsNotFound()) return "-";
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "error";
}

class LinkTest : public testing::ProfileStoreFixture {
 protected:
  // Defragmentation only when a test asks for it (DefragNow); popts_ as set.
  LinkTest() { background_defrag_ = false; }
  void Open() { ProfileStoreFixture::Open(popts_); }

  // Segment `id` expiring `ttl` seconds from now (0: never), with attr1 `a1`.
  void Put(const std::string& user, uint64_t id, uint32_t ttl = 0,
           std::optional<uint32_t> a1 = std::nullopt) {
    std::vector<SegmentUpdate> up = {{id, ttl, ttl != 0, a1, {}}};
    auto r = session_->UpsertSync(user, up);
    ASSERT_TRUE(r.ok()) << user << ": " << r.status().ToString();
  }
  void Link(const std::string& user, const std::string& master, uint32_t ttl = 0) {
    auto r = session_->LinkSync(user, master, ttl);
    ASSERT_TRUE(r.ok()) << user << " -> " << master << ": " << r.status().ToString();
  }
  std::string View(const std::string& user, bool own_only = false) {
    return ViewIn(*session_, user, own_only);
  }
  std::string MasterOf(const std::string& user) { return MasterOfIn(*session_, user); }
};

TEST_F(LinkTest, AGetByAnyLinkedUserAnswersTheGroupsMergedView) {
  Open();
  Put("home-pc", 1);
  Put("work-pc", 2);
  Put("phone", 3);
  Put("stranger", 4);
  auto r = session_->LinkSync("work-pc", "home-pc");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->master, "home-pc");
  EXPECT_EQ(r->members, 1u);
  Link("phone", "home-pc");
  EXPECT_EQ(View("home-pc"), "1,2,3 @home-pc");
  EXPECT_EQ(View("work-pc"), "1,2,3 @home-pc");
  EXPECT_EQ(View("phone"), "1,2,3 @home-pc");
  EXPECT_EQ(View("stranger"), "4");
  // own_only: the user's own profile, as before bridging.
  EXPECT_EQ(View("work-pc", true), "2");
  EXPECT_EQ(View("home-pc", true), "1");
  auto got = session_->GetSync("phone");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->profiles, 3u);
  EXPECT_EQ(*session_->CountSync("work-pc"), 3u);
  EXPECT_EQ(*session_->CountSync("work-pc", 2, 3), 2u);

  EXPECT_EQ(MasterOf("phone"), "home-pc");
  EXPECT_EQ(MasterOf("home-pc"), "home-pc");
  EXPECT_EQ(MasterOf("stranger"), "-");
  EXPECT_EQ(MasterOf("nobody"), "-");
  EXPECT_TRUE(*session_->ConnectedSync("phone", "work-pc"));
  EXPECT_TRUE(*session_->ConnectedSync("phone", "home-pc"));
  EXPECT_FALSE(*session_->ConnectedSync("phone", "stranger"));
  EXPECT_TRUE(*session_->ConnectedSync("stranger", "stranger"));
  EXPECT_FALSE(*session_->ConnectedSync("nobody", "stranger"));

  auto links = session_->LinksSync("work-pc");
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(links->master, "home-pc");
  ASSERT_EQ(links->links.size(), 2u);
  EXPECT_EQ(links->links[0].user, "phone");
  EXPECT_EQ(links->links[1].user, "work-pc");
  EXPECT_EQ(links->next, "");
  // Paged, one at a time.
  auto page = session_->LinksSync("home-pc", "", 1);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->links.size(), 1u);
  EXPECT_EQ(page->next, "phone");
  page = session_->LinksSync("home-pc", page->next, 1);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->links.size(), 1u);
  EXPECT_EQ(page->links[0].user, "work-pc");
  EXPECT_EQ(page->next, "");
  EXPECT_TRUE(session_->LinksSync("stranger").status().IsNotFound());
}

TEST_F(LinkTest, TheLatestExpiryWinsWithItsAttributes) {
  Open();
  Put("m", 7, 3600, 1u);
  Put("a", 7, 7200, 2u);  // later: wins, with attr1 2
  Put("b", 7, 1800, 3u);
  Put("m", 8, 3600, 4u);
  Put("b", 8, 0, std::nullopt);  // never expires: the latest of all, no attribute
  Link("a", "m");
  Link("b", "m");
  auto got = session_->GetSync("b");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ(got->At(0), (Segment{7, kStart + 7200, 2u, {}}));
  EXPECT_EQ(got->At(1), (Segment{8, kNever, {}, {}}));
  // As the winner expires, the next latest shows.
  clock_.Advance(3601);
  got = session_->GetSync("m");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->At(0), (Segment{7, kStart + 7200, 2u, {}}));
  clock_.Advance(3600);
  got = session_->GetSync("m");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(got->At(0).id, 8u);
}

TEST_F(LinkTest, NoChainsAndGroupsMergeUnderOneMaster) {
  Open();
  for (const char* u : {"a", "b", "c", "d", "e"}) Put(u, u[0]);
  Link("b", "a");
  // Linking to a member links to its master.
  auto r = session_->LinkSync("c", "b");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->master, "a");
  EXPECT_EQ(MasterOf("c"), "a");
  // Linking a master with a group moves the whole group.
  Link("e", "d");
  r = session_->LinkSync("d", "a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->master, "a");
  EXPECT_EQ(r->moved, 1u);
  EXPECT_EQ(r->members, 4u);
  for (const char* u : {"a", "b", "c", "d", "e"}) {
    EXPECT_EQ(MasterOf(u), "a") << u;
    EXPECT_EQ(View(u), "97,98,99,100,101 @a") << u;
  }
  // Hostile: a self-link, and cycles attempted (a master linked under its
  // own member is already its group's master: nothing changes).
  EXPECT_EQ(session_->LinkSync("a", "a").status().code(), Status::Code::kInvalidArgument);
  r = session_->LinkSync("a", "e");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->master, "a");
  EXPECT_EQ(MasterOf("a"), "a");
  EXPECT_EQ(MasterOf("e"), "a");
  // Linking again is idempotent.
  r = session_->LinkSync("e", "a");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->members, 4u);
  // A member moving to another master leaves the old group.
  Put("z", 122);
  Link("c", "z");
  EXPECT_EQ(MasterOf("c"), "z");
  EXPECT_EQ(View("c"), "99,122 @z");
  EXPECT_EQ(View("a"), "97,98,100,101 @a");
  EXPECT_EQ(session_->LinksSync("a")->links.size(), 3u);
}

TEST_F(LinkTest, TheLimitRefusesBeforeAnythingIsWritten) {
  popts_.max_links = 3;
  Open();
  for (int i = 0; i < 6; ++i) Put("u" + std::to_string(i), i);
  Link("u1", "u0");
  Link("u2", "u0");
  Link("u3", "u0");
  auto r = session_->LinkSync("u4", "u0");
  EXPECT_EQ(r.status().code(), Status::Code::kLimitExceeded) << r.status().ToString();
  EXPECT_EQ(MasterOf("u4"), "-");
  EXPECT_EQ(View("u4"), "4");
  EXPECT_EQ(session_->LinksSync("u0")->links.size(), 3u);
  // Moving a group that would not fit is refused whole.
  Link("u5", "u4");
  r = session_->LinkSync("u4", "u0");
  EXPECT_EQ(r.status().code(), Status::Code::kLimitExceeded);
  EXPECT_EQ(MasterOf("u5"), "u4");
  EXPECT_EQ(View("u5"), "4,5 @u4");
}

// The steps a cluster's log carries, applied one at a time as an applier
// does: each changes one record, says `changed` instead of writing when its
// record is not as the link read it, and a step replayed from before a
// later one (a restart re-reading the log) is refused as applied already,
// so an unlinked link never comes back.
TEST_F(LinkTest, StepsApplyOnceAndInLogOrder) {
  Open();
  Put("m", 1);
  Put("u", 2);
  auto step = [&](const LinkStep& st, uint64_t position) {
    std::optional<Result<LinkStepResult>> out;
    session_->ApplyLinkStep(WriteContext{kStart, position}, st,
                            [&](Result<LinkStepResult> r) { out = std::move(r); });
    while (!out) session_->Wait(std::chrono::milliseconds(100));
    return std::move(*out);
  };
  LinkStep list;
  list.kind = LinkStep::Kind::kList;
  list.user = "m";
  list.member = "u";
  list.max_links = 64;
  LinkStep name;
  name.kind = LinkStep::Kind::kName;
  name.user = "u";
  name.master = "m";

  auto r = step(list, 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->applied);
  EXPECT_FALSE(r->changed);
  EXPECT_EQ(r->members, 1u);
  EXPECT_EQ(MasterOf("u"), "-");  // the member does not agree yet
  EXPECT_EQ(View("m"), "1");
  r = step(name, 11);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(MasterOf("u"), "m");
  EXPECT_EQ(View("u"), "1,2 @m");

  // Not as read: the target names a master now, or U gained a member.
  LinkStep other = list;
  other.expect = "someone";
  r = step(other, 12);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->changed);
  EXPECT_FALSE(r->applied);
  // Past the limit: refused, nothing written.
  LinkStep full = list;
  full.member = "v";
  full.max_links = 1;
  EXPECT_EQ(step(full, 13).status().code(), Status::Code::kLimitExceeded);
  EXPECT_EQ(session_->LinksSync("m")->links.size(), 1u);

  // An unlink's steps, then the link's replayed: each record holds a later
  // position, so the replay changes nothing.
  LinkStep drop;
  drop.kind = LinkStep::Kind::kDrop;
  drop.user = "m";
  drop.member = "u";
  ASSERT_TRUE(step(drop, 14).ok());
  LinkStep clear;
  clear.kind = LinkStep::Kind::kClear;
  clear.user = "u";
  clear.master = "m";
  ASSERT_TRUE(step(clear, 15).ok());
  EXPECT_EQ(MasterOf("u"), "-");
  EXPECT_EQ(step(list, 10).status().code(), Status::Code::kConflict);
  EXPECT_EQ(step(name, 11).status().code(), Status::Code::kConflict);
  Reopen();
  EXPECT_EQ(MasterOf("u"), "-");
  EXPECT_EQ(View("u"), "2");

  // A group's delete: members naming the master with a live link, then it.
  ASSERT_TRUE(step(list, 20).ok());
  ASSERT_TRUE(step(name, 21).ok());
  LinkStep del_member;
  del_member.kind = LinkStep::Kind::kDeleteMember;
  del_member.user = "u";
  del_member.master = "elsewhere";
  r = step(del_member, 22);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied);  // it names another master
  del_member.master = "m";
  ASSERT_TRUE(step(del_member, 23).ok());
  LinkStep del;
  del.kind = LinkStep::Kind::kDelete;
  del.user = "m";
  r = step(del, 24);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(View("m"), "absent");
  EXPECT_EQ(View("u"), "absent");
}

// Two nodes of a cluster, as the profile layer sees them: each holds the
// users its predicate gives it, and reads and writes the other's through
// GroupPeers (here: the other node's session, called in place of a network).
// Links, merged reads, unlink and a group's delete across them.
class TwoNodes : public ::testing::Test {
 protected:
  struct Node;
  // The other node, reached as a cluster node's peers would reach it.
  class Peers : public GroupPeers {
   public:
    Peers(Node* self, Node* other, bool (*holds)(std::string_view))
        : self_(self), other_(other), holds_(holds) {}
    bool Holds(std::string_view user) override { return holds_(user); }
    void Read(std::vector<std::string> users,
              Callback<std::vector<Result<StoredRecord>>> done) override {
      ++reads;
      std::vector<Result<StoredRecord>> out;
      for (const std::string& u : users) {
        EXPECT_FALSE(holds_(u)) << u << " is held here: read it here";
        Result<storage::Record> r = other_->session->worker().GetSync(u);
        if (r.ok()) {
          out.push_back(StoredRecord{std::string(r->body()), std::string(r->reference())});
        } else {
          out.push_back(r.status());
        }
      }
      self_->session->worker().Defer([out, done] { done(std::move(out)); });
    }
    void Step(const LinkStep& step, Callback<LinkStepResult> done) override {
      ++steps;
      Node* at = holds_(step.user) ? self_ : other_;
      std::optional<Result<LinkStepResult>> r;
      at->session->ApplyLinkStep(WriteContext{}, step,
                                 [&](Result<LinkStepResult> x) { r = std::move(x); });
      while (!r) at->session->Wait(std::chrono::milliseconds(100));
      self_->session->worker().Defer([r = std::move(*r), done] { done(r); });
    }
    int reads = 0;
    int steps = 0;

   private:
    Node* self_;
    Node* other_;
    bool (*holds_)(std::string_view);
  };
  struct Node {
    TempDir dir;
    ManualClock clock{kStart};
    std::unique_ptr<storage::Store> store;
    std::unique_ptr<ProfileStore> profiles;
    std::unique_ptr<ProfileSession> session;
    std::unique_ptr<Peers> peers;
  };
  static bool OnA(std::string_view u) { return u.rfind("a-", 0) == 0; }
  static bool OnB(std::string_view u) { return !OnA(u); }

  void SetUp() override {
    for (Node* n : {&a_, &b_}) {
      storage::StoreOptions o;
      o.path = n->dir.File("data");
      o.file_size = 64u << 20;
      o.write_block_size = 256u << 10;
      o.clock = &n->clock;
      auto s = storage::Store::Open(o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      n->store = std::move(*s);
      ProfileOptions po;
      po.sweeper = false;
      auto p = ProfileStore::Open(n->store.get(), po);
      ASSERT_TRUE(p.ok());
      n->profiles = std::move(*p);
      auto sess = n->profiles->NewSession();
      ASSERT_TRUE(sess.ok());
      n->session = std::move(*sess);
    }
    a_.peers = std::make_unique<Peers>(&a_, &b_, &OnA);
    b_.peers = std::make_unique<Peers>(&b_, &a_, &OnB);
    a_.session->SetGroupPeers(a_.peers.get());
    b_.session->SetGroupPeers(b_.peers.get());
  }
  Node& At(std::string_view user) { return OnA(user) ? a_ : b_; }
  void Put(const std::string& user, uint64_t id) {
    std::vector<SegmentUpdate> up = {{id, 0, false, {}, {}}};
    ASSERT_TRUE(At(user).session->UpsertSync(user, up).ok());
  }
  // A get as a cluster sends it: to the node holding the user.
  std::string View(const std::string& user) { return ViewIn(*At(user).session, user); }
  std::string MasterOf(const std::string& user) { return MasterOfIn(*At(user).session, user); }

  Node a_, b_;
};

TEST_F(TwoNodes, LinksAcrossNodesReadWriteAndDeleteThroughThePeers) {
  Put("a-home", 1);
  Put("b-phone", 2);
  Put("b-tablet", 3);
  Put("a-work", 4);
  // What B still has of a partition A holds now (a move's leftover) is
  // never read: A's copy is.
  std::vector<SegmentUpdate> stale = {{99, 0, false, {}, {}}};
  ASSERT_TRUE(b_.session->UpsertSync("a-home", stale).ok());
  // The link goes to the node holding the member, which coordinates.
  auto r = b_.session->LinkSync("b-phone", "a-home");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->master, "a-home");
  ASSERT_TRUE(b_.session->LinkSync("b-tablet", "b-phone").ok());  // to its master, on A
  ASSERT_TRUE(a_.session->LinkSync("a-work", "b-tablet").ok());
  EXPECT_GT(b_.peers->steps, 0);
  EXPECT_GT(b_.peers->reads, 0);
  for (const char* u : {"a-home", "b-phone", "b-tablet", "a-work"}) {
    EXPECT_EQ(MasterOf(u), "a-home") << u;
    EXPECT_EQ(View(u), "1,2,3,4 @a-home") << u;
  }
  auto links = b_.session->LinksSync("b-phone");
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(links->links.size(), 3u);
  EXPECT_TRUE(*b_.session->ConnectedSync("b-phone", "a-work"));
  EXPECT_FALSE(*a_.session->ConnectedSync("a-work", "b-stranger"));

  // Unlink of a member on B: its master on A lists it no more.
  ASSERT_TRUE(*b_.session->UnlinkSync("b-tablet"));
  EXPECT_EQ(View("b-tablet"), "3");
  EXPECT_EQ(View("a-home"), "1,2,4 @a-home");
  // A group moves under a new master across the nodes.
  Put("b-new", 5);
  ASSERT_TRUE(a_.session->LinkSync("a-home", "b-new").ok());
  EXPECT_EQ(MasterOf("a-work"), "b-new");
  EXPECT_EQ(View("b-phone"), "1,2,4,5 @b-new");
  // A delete of the master deletes the group, on both nodes.
  ASSERT_TRUE(*b_.session->DeleteSync("b-new"));
  for (const char* u : {"b-new", "a-home", "b-phone", "a-work"}) EXPECT_EQ(View(u), "absent") << u;
  EXPECT_EQ(View("b-tablet"), "3");
}

TEST_F(LinkTest, UnlinkAndDeleteRemoveExactlyOneContributionAtOnce) {
  Open();
  Put("m", 1);
  Put("a", 2);
  Put("b", 3);
  Put("c", 4);
  Link("a", "m");
  Link("b", "m");
  Link("c", "m");
  auto un = session_->UnlinkSync("a");
  ASSERT_TRUE(un.ok());
  EXPECT_TRUE(*un);
  EXPECT_EQ(View("m"), "1,3,4 @m");
  EXPECT_EQ(View("a"), "2");  // its own profile stays
  EXPECT_FALSE(*session_->UnlinkSync("a"));
  // A GDPR delete of a member: its segments leave the view, and it does not
  // come back linked when the ID is written again.
  EXPECT_TRUE(*session_->DeleteSync("b"));
  EXPECT_EQ(View("m"), "1,4 @m");
  EXPECT_EQ(View("b"), "absent");
  Put("b", 30);
  EXPECT_EQ(View("b"), "30");
  EXPECT_EQ(View("m"), "1,4 @m");
  // A member without segments stays linked (its link is what it holds).
  Put("d", 5, 60);
  Link("d", "m");
  clock_.Advance(61);
  EXPECT_EQ(MasterOf("d"), "m");
  EXPECT_EQ(View("d"), "1,4 @m");
  // A delete of a master deletes the group.
  EXPECT_TRUE(*session_->DeleteSync("m"));
  for (const char* u : {"m", "c", "d"}) EXPECT_EQ(View(u), "absent") << u;
  EXPECT_EQ(View("a"), "2");
  EXPECT_EQ(View("b"), "30");
  // An unlink of a master dissolves its group.
  Put("n", 1);
  Put("x", 2);
  Put("y", 3);
  Link("x", "n");
  Link("y", "n");
  EXPECT_TRUE(*session_->UnlinkSync("n"));
  EXPECT_EQ(View("n"), "1");
  EXPECT_EQ(View("x"), "2");
  EXPECT_EQ(View("y"), "3");
  EXPECT_EQ(MasterOf("y"), "-");
  // Segment writes to a member stay in its own profile and keep its link.
  Link("x", "n");
  Put("x", 20);
  ASSERT_TRUE(session_->RemoveSync("x", std::vector<uint64_t>{2}).ok());
  EXPECT_EQ(View("x", true), "20");
  EXPECT_EQ(View("n"), "1,20 @n");
  EXPECT_EQ(engine_->stats().index_references, 1u);
}

TEST_F(LinkTest, LinksExpireAndTheSweeperDropsThem) {
  Open();
  Put("m", 1);
  Put("a", 2);
  Link("a", "m", 600);
  Link("b", "m", 300);  // b has no profile of its own: its record holds the link only
  Put("c", 3);
  Link("c", "m");
  EXPECT_EQ(View("b"), "1,2,3 @m");
  auto links = session_->LinksSync("m");
  ASSERT_TRUE(links.ok());
  ASSERT_EQ(links->links.size(), 3u);
  EXPECT_EQ(links->links[0].expires_at, kStart + 600);
  clock_.Advance(301);
  EXPECT_EQ(View("b"), "absent");
  EXPECT_EQ(MasterOf("b"), "-");
  EXPECT_EQ(View("m"), "1,2,3 @m");
  clock_.Advance(300);
  EXPECT_EQ(View("a"), "2");
  EXPECT_EQ(View("m"), "1,3 @m");
  ASSERT_TRUE(profiles_->SweepNow().ok());
  // Rewritten without them: a's record names no master; b's is gone.
  EXPECT_EQ(engine_->stats().index_references, 1u);  // c's
  auto b = session_->worker().GetSync("b");
  EXPECT_TRUE(b.status().IsNotFound());
  auto a = session_->worker().GetSync("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->reference(), "");
  EXPECT_EQ(session_->LinksSync("m")->links.size(), 1u);
  // Relinking refreshes an expiry.
  Link("a", "m", 100);
  Link("a", "m", 1000);
  clock_.Advance(500);
  EXPECT_EQ(MasterOf("a"), "m");
}

TEST_F(LinkTest, LinksSurviveRestartsAndDefragmentationAndUnlinksStayUnlinked) {
  Open();
  for (int i = 0; i < 40; ++i) Put("u" + std::to_string(i), i);
  for (int i = 1; i < 10; ++i) Link("u" + std::to_string(i), "u0");
  for (int i = 11; i < 20; ++i) Link("u" + std::to_string(i), "u10");
  // Churn so defragmentation has blocks to rewrite.
  for (int round = 0; round < 3; ++round) {
    for (int i = 20; i < 40; ++i) Put("u" + std::to_string(i), 100 + round);
  }
  ASSERT_TRUE(*session_->UnlinkSync("u5"));
  ASSERT_TRUE(*session_->DeleteSync("u15"));
  auto check = [&](const std::string& when) {
    for (int i = 0; i < 20; ++i) {
      const std::string u = "u" + std::to_string(i);
      const std::string want = i == 5 ? "-" : i == 15 ? "-" : i < 10 ? "u0" : "u10";
      EXPECT_EQ(MasterOf(u), want) << u << " " << when;
    }
    EXPECT_EQ(session_->LinksSync("u0")->links.size(), 8u) << when;
    EXPECT_EQ(session_->LinksSync("u10")->links.size(), 8u) << when;
    EXPECT_EQ(engine_->stats().index_references, 16u) << when;
  };
  check("written");
  Reopen();
  check("after a restart");
  ASSERT_TRUE(session_->worker().FlushSync().ok());
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(engine_->DefragNow(/*rotate=*/true).ok());
  check("after defragmentation");
  Reopen();
  check("after defragmentation and a restart");
}

// What a crash between a link's (or unlink's) writes leaves: one side says
// the link, the other does not. A read counts no link then, from either side.
TEST_F(LinkTest, ALinkACrashCutInTwoCountsAsNoLink) {
  Open();
  Put("m", 1);
  Put("a", 2);
  Put("b", 3);
  storage::Worker& w = session_->worker();
  // m lists a, but a's record does not name m (the crash came before step 3).
  {
    Group g;
    g.members.push_back(GroupMember{"a", kNever});
    std::string body;
    EncodeProfile(std::vector<Segment>{Segment{1, kNever, {}, {}}}, 0, g, &body);
    ASSERT_TRUE(w.PutSync("m", body).ok());
  }
  // Neither side counts it: m, whose only listed member disagrees, is in no
  // group either, and lists nobody.
  EXPECT_EQ(View("a"), "2");
  EXPECT_EQ(View("m"), "1");
  EXPECT_EQ(MasterOf("a"), "-");
  EXPECT_EQ(MasterOf("m"), "-");
  EXPECT_TRUE(session_->LinksSync("m").status().IsNotFound());
  EXPECT_FALSE(*session_->ConnectedSync("a", "m"));
  // b names m, but m does not list it (an unlink's first write landed).
  {
    Group g;
    g.member = true;
    std::string body;
    EncodeProfile(std::vector<Segment>{Segment{3, kNever, {}, {}}}, 0, g, &body);
    ASSERT_TRUE(w.UpdateSync("b", [&](const storage::Record*) -> Result<storage::Mutation> {
                   storage::Mutation m = storage::Mutation::Put(body);
                   m.reference = "m";
                   return m;
                 }).ok());
  }
  EXPECT_EQ(View("b"), "3");
  EXPECT_EQ(MasterOf("b"), "-");
  EXPECT_EQ(View("m"), "1");
  // Linking again (what a client does after an error) makes both whole.
  Link("a", "m");
  Link("b", "m");
  EXPECT_EQ(View("a"), "1,2,3 @m");
  EXPECT_EQ(View("b"), "1,2,3 @m");
  EXPECT_EQ(session_->LinksSync("m")->links.size(), 2u);
}

// A master whose list still holds a member a crash cut off (it does not
// name the master) can still be linked elsewhere: the stale entry neither
// moves nor blocks it.
TEST_F(LinkTest, AStaleListEntryDoesNotBlockALink) {
  Open();
  Put("m", 1);
  Put("a", 2);
  Put("z", 3);
  {
    Group g;
    g.members.push_back(GroupMember{"a", kNever});
    std::string body;
    EncodeProfile(std::vector<Segment>{Segment{1, kNever, {}, {}}}, 0, g, &body);
    ASSERT_TRUE(session_->worker().PutSync("m", body).ok());
  }
  auto r = session_->LinkSync("m", "z");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->master, "z");
  EXPECT_EQ(r->moved, 0u);
  EXPECT_EQ(View("m"), "1,3 @z");
  EXPECT_EQ(View("a"), "2");
  EXPECT_EQ(MasterOf("a"), "-");
}

// link(A, B) and link(B, C) at once, from two threads: whatever the order,
// a star, never a chain.
TEST_F(LinkTest, RacingLinksEndInAStar) {
  Open();
  for (int round = 0; round < 40; ++round) {
    const std::string a = "a" + std::to_string(round), b = "b" + std::to_string(round),
                      c = "c" + std::to_string(round);
    Put(a, 1);
    Put(b, 2);
    Put(c, 3);
    Result<LinkResult> r1 = Status::Internal("unset"), r2 = Status::Internal("unset");
    // A session per thread: each wraps its thread's worker.
    std::thread t([&] {
      auto second = profiles_->NewSession();
      r2 = second.ok() ? (*second)->LinkSync(b, c) : Result<LinkResult>(second.status());
    });
    r1 = session_->LinkSync(a, b);
    t.join();
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    ASSERT_TRUE(r2.ok()) << r2.status().ToString();
    // Both acknowledged: a, b and c are one group, under c.
    for (const std::string& u : {a, b, c}) {
      EXPECT_EQ(MasterOf(u), c) << u << " round " << round;
      EXPECT_EQ(View(u), "1,2,3 @" + c) << u << " round " << round;
    }
    auto links = session_->LinksSync(c);
    ASSERT_TRUE(links.ok());
    EXPECT_EQ(links->links.size(), 2u) << "round " << round;
    // No chain: b lists nobody.
    auto rb = session_->worker().GetSync(b);
    ASSERT_TRUE(rb.ok());
    Columns cb;
    ASSERT_TRUE(DecodeColumns(rb->body(), &cb).ok());
    EXPECT_TRUE(cb.group.members.empty()) << "round " << round;
  }
}

// Links and segment writes on the same records at once, from two threads:
// no segment write is lost (each is one read-modify-write that keeps the
// group section), and every link still counts at the end.
TEST_F(LinkTest, LinksAndSegmentWritesOnOneGroupAtOnceLoseNothing) {
  Open();
  const std::vector<std::string> users = {"m", "a", "b", "c"};
  for (const std::string& u : users) Put(u, 0);
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    auto s = profiles_->NewSession();
    if (!s.ok()) {
      failed = true;
      return;
    }
    for (uint64_t id = 1; id <= 200; ++id) {
      std::vector<SegmentUpdate> up = {{id, 0, false, {}, {}}};
      if (!(*s)->UpsertSync(users[id % users.size()], up).ok()) failed = true;
    }
  });
  // No ASSERT while the writer runs: the thread must be joined first.
  for (int round = 0; round < 20; ++round) {
    for (size_t i = 1; i < users.size(); ++i) {
      EXPECT_TRUE(session_->LinkSync(users[i], "m").ok());
    }
    if (round % 2 == 0) {
      EXPECT_TRUE(session_->UnlinkSync(users[1 + round % 3]).ok());
    }
  }
  writer.join();
  for (size_t i = 1; i < users.size(); ++i) Link(users[i], "m");
  ASSERT_FALSE(failed.load());
  auto got = session_->GetSync("b");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->master, "m");
  EXPECT_EQ(got->count, 201u);  // ids 0 to 200, each written to one of the four
  for (const std::string& u : users) EXPECT_EQ(MasterOf(u), "m") << u;
}

// Random links, unlinks, segment writes, deletes, time and restarts against
// a model of the groups; every user's view and master checked as we go.
TEST_F(LinkTest, RandomisedAgainstAModel) {
  popts_.max_links = 5;
  Open();
  const uint64_t seed = testing::TestSeed();
  const bool trace = std::getenv("SEGSTORE_TEST_TRACE") != nullptr;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr int kUsers = 24;
  auto name = [](int i) { return "u" + std::to_string(i); };
  // The model: segments (id -> expiry) per user, and user -> (master, link expiry).
  std::map<std::string, std::map<uint64_t, UnixSeconds>> segs;
  std::map<std::string, std::pair<std::string, UnixSeconds>> master_of;
  auto now = [&] { return clock_.Now(); };
  auto alive = [&](UnixSeconds e) { return e == kNever || e > now(); };
  auto live_master = [&](const std::string& u) -> std::string {
    auto it = master_of.find(u);
    if (it == master_of.end() || !alive(it->second.second)) return "";
    return it->second.first;
  };
  auto members = [&](const std::string& m) {
    std::vector<std::string> out;
    for (const auto& [u, l] : master_of) {
      if (l.first == m && alive(l.second)) out.push_back(u);
    }
    return out;
  };
  auto has_record = [&](const std::string& u) {
    bool any = false;
    for (const auto& [id, e] : segs[u]) any = any || alive(e);
    return any || !live_master(u).empty() || !members(u).empty();
  };
  auto expected_view = [&](const std::string& u) -> std::string {
    std::string m = live_master(u);
    if (m.empty() && !members(u).empty()) m = u;
    std::vector<std::string> group;
    if (!m.empty()) {
      group = members(m);
      group.push_back(m);
    } else {
      group.push_back(u);
    }
    std::map<uint64_t, UnixSeconds> merged;
    for (const std::string& g : group) {
      for (const auto& [id, e] : segs[g]) {
        if (!alive(e)) continue;
        auto [it, fresh] = merged.emplace(id, e);
        if (!fresh && it->second != kNever && (e == kNever || e > it->second)) it->second = e;
      }
    }
    if (merged.empty()) return "absent";
    std::string out;
    for (const auto& [id, e] : merged) out += (out.empty() ? "" : ",") + std::to_string(id);
    if (!m.empty()) out += " @" + m;
    return out;
  };
  // Sized for the sanitizer builds too (a run under TSan took 22 s at 1,500
  // steps and a restart in 20).
  for (int step = 0; step < 1000; ++step) {
    const std::string u = name(static_cast<int>(rng() % kUsers));
    const std::string v = name(static_cast<int>(rng() % kUsers));
    const int what = static_cast<int>(rng() % 100);
    if (trace) std::fprintf(stderr, "step %d: %d %s %s\n", step, what, u.c_str(), v.c_str());
    if (what < 35) {
      const uint64_t id = rng() % 20;
      const uint32_t ttl = rng() % 3 == 0 ? 0 : 60 + static_cast<uint32_t>(rng() % 600);
      Put(u, id, ttl);
      segs[u][id] = ttl == 0 ? kNever : now() + ttl;
    } else if (what < 65) {
      const uint32_t ttl = rng() % 2 == 0 ? 0 : 60 + static_cast<uint32_t>(rng() % 600);
      auto r = session_->LinkSync(u, v, ttl);
      if (u == v) {
        ASSERT_EQ(r.status().code(), Status::Code::kInvalidArgument);
        continue;
      }
      // The model's answer.
      std::string target = live_master(v);
      if (target.empty()) target = v;
      if (target == u) {
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        continue;
      }
      std::vector<std::string> moving = members(u);
      std::vector<std::string> listed = members(target);
      std::set<std::string> after(listed.begin(), listed.end());
      after.insert(u);
      after.insert(moving.begin(), moving.end());
      if (after.size() > popts_.max_links) {
        ASSERT_EQ(r.status().code(), Status::Code::kLimitExceeded) << r.status().ToString();
        continue;
      }
      ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status().ToString();
      ASSERT_EQ(r->master, target);
      if (trace) std::fprintf(stderr, "  linked under %s, ttl %u\n", target.c_str(), ttl);
      for (const std::string& g : moving) master_of[g].first = target;
      master_of[u] = {target, ttl == 0 ? kNever : now() + ttl};
      master_of.erase(target);
    } else if (what < 75) {
      auto r = session_->UnlinkSync(u);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const bool was_master = !members(u).empty();
      const bool was_member = !live_master(u).empty();
      ASSERT_EQ(*r, was_master || was_member) << "step " << step << " " << u;
      if (was_master) {
        for (const std::string& g : members(u)) master_of.erase(g);
      }
      master_of.erase(u);
    } else if (what < 82) {
      auto r = session_->DeleteSync(u);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      std::vector<std::string> gone = {u};
      if (!members(u).empty()) {
        for (const std::string& g : members(u)) gone.push_back(g);
      }
      for (const std::string& g : gone) {
        segs.erase(g);
        master_of.erase(g);
      }
    } else if (what < 93) {
      clock_.Advance(static_cast<uint32_t>(rng() % 200));
    } else if (what < 97) {
      ASSERT_TRUE(profiles_->SweepNow().ok());
    } else {
      Reopen();
    }
    // Expired links are gone from the model's point of view.
    for (auto it = master_of.begin(); it != master_of.end();) {
      it = alive(it->second.second) ? std::next(it) : master_of.erase(it);
    }
    if (step % 8 == 0 || what >= 97) {
      for (int i = 0; i < kUsers; ++i) {
        const std::string x = name(i);
        if (trace && View(x) != expected_view(x)) {
          auto l = session_->LinksSync(x);
          if (l.ok()) {
            for (const auto& e : l->links)
              std::fprintf(stderr, "  %s lists %s until %u (now %u)\n", x.c_str(), e.user.c_str(),
                           e.expires_at, now());
          }
          for (const auto& [mu, ml] : master_of)
            std::fprintf(stderr, "  model: %s -> %s until %u\n", mu.c_str(), ml.first.c_str(),
                         ml.second);
        }
        ASSERT_EQ(View(x), expected_view(x)) << "step " << step << " user " << x;
        std::string m = live_master(x);
        if (m.empty() && !members(x).empty()) m = x;
        ASSERT_EQ(MasterOf(x), m.empty() ? "-" : m) << "step " << step << " user " << x;
        (void)has_record;
      }
    }
  }
}

}  // namespace
}  // namespace segstore::profile
