// Profile bridging over the wire: the five operations and the merged get
// through the client library, their errors, and segctl's commands, against
// the whole server in process.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "integration/daemon.h"
#include "integration/in_process.h"
#include "segstore/client.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using client::Client;
using testing::Has;
using testing::Segctl;

constexpr UnixSeconds kStart = 1'790'000'000;

class LinkServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    p.max_links = 4;
    ProfileServiceOptions so;
    so.max_batch = 100;
    ServerOptions server_options;
    server_options.threads = 2;
    served_.Start(o, nullptr, p, so, server_options);
    ASSERT_FALSE(HasFatalFailure());
    client_ = served_.Connect();
    ASSERT_NE(client_, nullptr);
  }
  void TearDown() override {
    client_.reset();
    served_.Stop();
  }
  void Put(const std::string& user, uint64_t id, uint32_t ttl = 3600) {
    std::vector<SegmentUpdate> up = {{id, ttl, true, {}, {}}};
    ASSERT_TRUE(client_->Upsert(user, up).ok());
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  testing::InProcessServer served_;
  std::unique_ptr<Client> client_;
};

TEST_F(LinkServerTest, EveryLinkOperationThroughTheClient) {
  Put("home", 1);
  Put("work", 2);
  Put("phone", 3);
  Put("other", 4);
  auto linked = client_->Link("work", "home");
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->master, "home");
  EXPECT_EQ(linked->members, 1u);
  linked = client_->Link("phone", "work", 3600);  // a member: its master's group
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->master, "home");
  EXPECT_EQ(linked->members, 2u);

  // The merged view names its master; a user in no group answers as before.
  auto got = client_->Get("phone");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(got->master, "home");
  EXPECT_EQ(got->profiles, 3u);
  GetOptions own;
  own.own_only = true;
  got = client_->Get("phone", own);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{3}));
  EXPECT_EQ(got->master, "");
  got = client_->Get("other");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->master, "");
  EXPECT_EQ(got->profiles, 0u);
  std::vector<std::string> users = {"work", "other", "nobody", "home"};
  auto batch = client_->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), 4u);
  EXPECT_EQ((*batch)[0]->ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ((*batch)[0]->master, "home");
  EXPECT_EQ((*batch)[1]->master, "");
  EXPECT_TRUE((*batch)[2].status().IsNotFound());
  EXPECT_EQ((*batch)[3]->profiles, 3u);
  EXPECT_EQ(*client_->Count("work"), 3u);

  EXPECT_EQ(*client_->MasterOf("phone"), "home");
  EXPECT_EQ(*client_->MasterOf("home"), "home");
  auto none = client_->MasterOf("other");
  EXPECT_TRUE(none.status().IsNotFound());
  EXPECT_TRUE(Has(std::string(none.status().message()), "in no group")) << none.status().ToString();
  EXPECT_TRUE(*client_->Connected("phone", "work"));
  EXPECT_FALSE(*client_->Connected("phone", "other"));

  auto page = client_->Links("home", "", 1);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->master, "home");
  ASSERT_EQ(page->links.size(), 1u);
  EXPECT_EQ(page->links[0].user, "phone");
  EXPECT_EQ(page->links[0].expires_at, kStart + 3600);
  EXPECT_EQ(page->next, "phone");
  page = client_->Links("phone", page->next, 1);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->links.size(), 1u);
  EXPECT_EQ(page->links[0].user, "work");
  EXPECT_EQ(page->links[0].expires_at, kNever);
  EXPECT_EQ(page->next, "");

  EXPECT_TRUE(*client_->Unlink("work"));
  EXPECT_FALSE(*client_->Unlink("work"));
  got = client_->Get("home");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 3}));
  // A delete of the master deletes its group.
  EXPECT_TRUE(*client_->Delete("home"));
  EXPECT_TRUE(client_->Get("phone").status().IsNotFound());
  EXPECT_TRUE(client_->Get("work").ok());
}

TEST_F(LinkServerTest, BadLinksGetClearErrorsAndWriteNothing) {
  Put("m", 1);
  auto r = client_->Link("m", "m");
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  r = client_->Link("", "m");
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  r = client_->Link("a", std::string(300, 'x'));  // over max_key_bytes (256)
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client_->Link("u" + std::to_string(i), "m").ok());
  r = client_->Link("u9", "m");
  EXPECT_EQ(r.status().code(), Status::Code::kLimitExceeded) << r.status().ToString();
  EXPECT_TRUE(client_->MasterOf("u9").status().IsNotFound());
  EXPECT_EQ(client_->Links("m")->links.size(), 4u);
  // The connection is still usable after every error.
  EXPECT_TRUE(client_->Ping().ok());
}

TEST_F(LinkServerTest, SegctlDrivesLinks) {
  const uint16_t port = served_.server->port();
  Put("alice-pc", 1);
  Put("alice-phone", 2);
  auto [rc, out] = Segctl(port, "link alice-phone alice-pc --ttl 90d");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "alice-phone linked to master alice-pc (1 linked users)")) << out;
  std::tie(rc, out) = Segctl(port, "--json get alice-phone --ids-only");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"master\":\"alice-pc\"")) << out;
  EXPECT_TRUE(Has(out, "\"ids\":[1,2]")) << out;
  std::tie(rc, out) = Segctl(port, "get alice-phone --own --ids-only");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_FALSE(Has(out, "merged")) << out;
  std::tie(rc, out) = Segctl(port, "get alice-phone");
  EXPECT_TRUE(Has(out, "(the merged view of 2 linked profiles, master alice-pc)")) << out;
  std::tie(rc, out) = Segctl(port, "master-of alice-phone");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "alice-pc\n");
  std::tie(rc, out) = Segctl(port, "--json links alice-pc");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out,
                  "{\"master\":\"alice-pc\",\"links\":[{\"user\":\"alice-phone\","
                  "\"expires_at\":" +
                      std::to_string(kStart + 90 * 86400) + "}]}"))
      << out;
  std::tie(rc, out) = Segctl(port, "connected alice-pc alice-phone");
  EXPECT_EQ(out, "connected\n");
  std::tie(rc, out) = Segctl(port, "unlink alice-phone");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "alice-phone unlinked")) << out;
  std::tie(rc, out) = Segctl(port, "master-of alice-phone");
  EXPECT_EQ(rc, 3) << out;
  EXPECT_TRUE(Has(out, "alice-phone is in no group")) << out;
  std::tie(rc, out) = Segctl(port, "link alice-pc alice-pc");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "cannot be linked to itself")) << out;
  std::tie(rc, out) = Segctl(port, "link a b --ttl 5y");
  EXPECT_EQ(rc, 1) << out;
}

}  // namespace
}  // namespace segstore::server
