// `segctl load --links` against the whole server in process (groups of at
// most 4 members): both file formats, their detection, reloads that move
// IDs, bad rows, groups past the limit, dry runs, and a server that answers
// links with Busy or refuses them (a front end of its own over the same
// store: LinkFaults).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "integration/daemon.h"
#include "integration/in_process.h"
#include "integration/request_faults.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "server/service.h"
#include "storage/test_util.h"

namespace segstore::server {
namespace {

using client::Client;
using testing::Has;
using testing::Segctl;

constexpr UnixSeconds kStart = 1'790'000'000;
constexpr uint32_t kMaxLinks = 4;

using LinkFaults = testing::RequestFaults<proto::LinkRequest, proto::Op::kLink>;
using testing::WriteFile;
using testing::WriteGzip;

class LinkLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    p.max_links = kMaxLinks;
    ProfileServiceOptions so;
    so.max_batch = 100;
    server_options_.threads = 2;
    served_.Start(o, nullptr, p, so, server_options_);
    ASSERT_FALSE(HasFatalFailure());
    client_ = served_.Connect();
    ASSERT_NE(client_, nullptr);
  }
  void TearDown() override {
    client_.reset();
    if (faulty_server_) faulty_server_->Stop();
    faulty_server_.reset();
    served_.Stop();
  }

  uint16_t port() const { return served_.server->port(); }

  // A second front end on the same store, whose link requests `faults_` sees first.
  uint16_t StartFaultyServer() {
    faults_ = std::make_unique<LinkFaults>(served_.service.get());
    ServerOptions so = server_options_;
    so.host = "127.0.0.1";
    so.port = 0;
    so.clock = &clock_;
    faulty_server_ = std::make_unique<Server>(so, faults_.get());
    Status s = faulty_server_->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return faulty_server_->port();
  }

  std::string File(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    WriteFile(path, text);
    return path;
  }

  std::string MasterOf(const std::string& user) {
    auto r = client_->MasterOf(user);
    return r.ok() ? *r : "(" + r.status().ToString() + ")";
  }

  // The users linked to `user`'s master, with their links' expiries.
  std::vector<std::pair<std::string, UnixSeconds>> Links(const std::string& user) {
    std::vector<std::pair<std::string, UnixSeconds>> out;
    auto page = client_->Links(user);
    EXPECT_TRUE(page.ok()) << user << ": " << page.status().ToString();
    if (page.ok()) {
      for (const LinkedUser& l : page->links) out.emplace_back(l.user, l.expires_at);
    }
    return out;
  }
  std::vector<std::string> Members(const std::string& user) {
    std::vector<std::string> out;
    for (const auto& [u, expires] : Links(user)) out.push_back(u);
    return out;
  }

  uint64_t LinkRequests() const {
    return served_.server->counters().requests_by_op[static_cast<uint8_t>(proto::Op::kLink)];
  }

  void Put(const std::string& user, uint64_t id) {
    std::vector<SegmentUpdate> up = {{id, 3600, true, {}, {}}};
    ASSERT_TRUE(client_->Upsert(user, up).ok());
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  ServerOptions server_options_;
  testing::InProcessServer served_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<LinkFaults> faults_;
  std::unique_ptr<Server> faulty_server_;
};

using Strings = std::vector<std::string>;

TEST_F(LinkLoadTest, LoadsRowsAndComponentsFilesGzipAndStdin) {
  Put("person-1", 1);
  Put("cookie-1", 2);
  Put("device-1", 3);
  const std::string rows = File("links.csv",
                                "id,master,ttl\n"  // a header
                                "cookie-1,person-1,90d\n"
                                "device-1,person-1,never\n"
                                "login-1,person-1,\n"  // empty: --default-ttl
                                "cookie-2,person-2\r\n");
  const std::string tabs = File("links.tsv", "# tab rows\ncookie-3\tperson-3\t3600\n");
  const std::string components = dir_.File("components.tsv.gz");
  WriteGzip(components, "master\tmembers\nperson-4\tcookie-4,device-4,login-4\n");
  auto [rc, out] = Segctl(port(), "load --links --no-progress --default-ttl 1h " + rows + " " +
                                      tabs + " " + components);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, rows + ":1: skipped as a header line")) << out;
  EXPECT_TRUE(Has(out, components + ":1: skipped as a header line")) << out;
  EXPECT_TRUE(Has(out, "6 lines, 8 links: 8 made")) << out;
  EXPECT_TRUE(Has(out, "0 bad rows, 0 links failed, 0 retries")) << out;

  EXPECT_EQ(MasterOf("cookie-1"), "person-1");
  EXPECT_EQ(MasterOf("person-1"), "person-1");
  EXPECT_EQ(
      Links("person-1"),
      (std::vector<std::pair<std::string, UnixSeconds>>{
          {"cookie-1", kStart + 90 * 86400}, {"device-1", kNever}, {"login-1", kStart + 3600}}));
  EXPECT_EQ(MasterOf("cookie-2"), "person-2");
  EXPECT_EQ(Links("cookie-3"),
            (std::vector<std::pair<std::string, UnixSeconds>>{{"cookie-3", kStart + 3600}}));
  EXPECT_EQ(MasterOf("cookie-3"), "person-3");
  EXPECT_EQ(Members("login-4"), (Strings{"cookie-4", "device-4", "login-4"}));
  EXPECT_EQ(Links("person-4")[0].second, kStart + 3600);  // a components line takes the default
  // A read by any ID of a group answers the group's merged view.
  auto got = client_->Get("device-1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(got->master, "person-1");
  EXPECT_EQ(got->profiles, 4u);  // login-1's (empty) among them

  // Standard input, with --json.
  std::tie(rc, out) =
      Segctl(port(), "--json load --links --no-progress - < " + File("in.csv", "a,b\nc,b,1h\n"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out,
                  "{\"lines\":2,\"links\":2,\"linked\":2,\"moved\":0,\"bad_rows\":0,"
                  "\"failed_links\":0,\"retries\":0,"))
      << out;
  EXPECT_EQ(Members("b"), (Strings{"a", "c"}));
}

// "A<TAB>B" links A to B as a row and B to A as a components line: the
// load waits for a line that settles the file's format, and stops rather
// than guess when none does.
TEST_F(LinkLoadTest, TwoIdTabLinesFollowTheLineThatSettlesTheFormat) {
  const std::string components =
      File("c.tsv", "m1\ta\nm2\tb\nm3\tc,d\nm4\te\n");  // line 3 settles: components
  auto [rc, out] = Segctl(port(), "load --links --no-progress " + components);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(MasterOf("a"), "m1");
  EXPECT_EQ(MasterOf("b"), "m2");
  EXPECT_EQ(Members("m3"), (Strings{"c", "d"}));
  EXPECT_EQ(MasterOf("e"), "m4");

  const std::string rows = File("r.tsv", "f\tn1\ng\tn1\nh\tn2\t1h\n");  // line 3: tab rows
  std::tie(rc, out) = Segctl(port(), "load --links --no-progress " + rows);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(Members("n1"), (Strings{"f", "g"}));
  EXPECT_EQ(MasterOf("h"), "n2");

  // Nothing settles it: nothing is linked, and --format is asked for.
  const std::string pairs = File("pairs.tsv", "x1\ty1\nx2\ty2\n");
  const uint64_t before = LinkRequests();
  std::tie(rc, out) = Segctl(port(), "load --links --no-progress " + pairs);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, pairs + ": every data line of the file is ID<TAB>ID")) << out;
  EXPECT_TRUE(Has(out, "say --format rows or --format components")) << out;
  EXPECT_EQ(LinkRequests(), before);
  std::tie(rc, out) = Segctl(port(), "load --links --no-progress --format rows " + pairs);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(MasterOf("x1"), "y1");
  const std::string more = File("more.tsv", "p1\tq1\n");
  std::tie(rc, out) = Segctl(port(), "load --links --no-progress --format components " + more);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(MasterOf("q1"), "p1");
}

// The connected-components job runs again and one ID moved to another
// person: loading its new output moves it. Loading the same file again
// changes nothing.
TEST_F(LinkLoadTest, ReloadingAComponentsFileMovesIdsWhoseMasterChanged) {
  Put("c", 7);
  auto [rc, out] =
      Segctl(port(), "load --links --no-progress " + File("a.tsv", "m1\ta,b,c\nm2\td,e\n"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Members("m1"), (Strings{"a", "b", "c"}));
  EXPECT_EQ(Members("m2"), (Strings{"d", "e"}));
  EXPECT_EQ(client_->Get("m1")->ids, (std::vector<uint64_t>{7}));

  const std::string b = File("b.tsv", "m1\ta,b\nm2\tc,d,e\n");
  std::tie(rc, out) = Segctl(port(), "load --links --no-progress " + b);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(MasterOf("c"), "m2");
  EXPECT_EQ(Members("m1"), (Strings{"a", "b"}));
  EXPECT_EQ(Members("m2"), (Strings{"c", "d", "e"}));
  EXPECT_TRUE(client_->Get("m1").status().IsNotFound());  // c's segment went with it
  EXPECT_EQ(client_->Get("d")->ids, (std::vector<uint64_t>{7}));

  std::tie(rc, out) = Segctl(port(), "load --links --no-progress " + b);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Members("m1"), (Strings{"a", "b"}));
  EXPECT_EQ(Members("m2"), (Strings{"c", "d", "e"}));
}

// Links sharing an ID go in file order, however many others run beside
// them: the last row naming an ID decides its master, even when its rows
// are next to each other (and so would be in flight together).
TEST_F(LinkLoadTest, TheLastRowNamingAnIdDecidesItsMaster) {
  std::string text = "y,m4\n";
  for (int i = 0; i < 200; ++i) {
    const std::string n = std::to_string(i);
    text += "x" + n + ",a" + n + "\nx" + n + ",b" + n + "\nx" + n + ",c" + n + "\n";
  }
  text += "m4,m5\n";  // m4's group (y) moves under m5 with it
  auto [rc, out] = Segctl(port(), "load --links --no-progress --connections 4 --in-flight 32 " +
                                      File("order.csv", text));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "602 lines, 602 links: 602 made")) << out;
  for (int i = 0; i < 200; ++i) {
    const std::string n = std::to_string(i);
    EXPECT_EQ(MasterOf("x" + n), "c" + n);
    EXPECT_TRUE(client_->MasterOf("a" + n).status().IsNotFound()) << n;
    EXPECT_TRUE(client_->MasterOf("b" + n).status().IsNotFound()) << n;
  }
  EXPECT_EQ(MasterOf("y"), "m5");
  EXPECT_EQ(Members("m5"), (Strings{"m4", "y"}));
}

TEST_F(LinkLoadTest, BadRowsAreReportedWithTheirLineAndTheRestIsLinked) {
  const std::string rows = File("bad.csv",
                                "a,m\n"
                                "s,s\n"           // 2: self-link
                                ",m\n"            // 3: empty ID
                                "b,m,1h,extra\n"  // 4: too many fields
                                "" + std::string(300, 'k') +
                                    ",m\n"               // 5: over the key limit
                                    "c,m,@1800000000\n"  // 6: absolute expiry
                                    "d,m,soon\n"         // 7: bad TTL
                                    "e,m\n");
  const std::string components = File("bad.tsv",
                                      "n\tf,g\n"
                                      "n2\t\n"       // 2: no members
                                      "n3\th,,i\n"   // 3: an empty member
                                      "n4\tj,n4\n"   // 4: the master itself
                                      "n5\tk,l,k\n"  // 5: a repeated member
                                      "n6\tz\n");
  auto [rc, out] = Segctl(port(), "load --links --no-progress " + rows + " " + components);
  EXPECT_EQ(rc, 1) << out;
  for (const std::string& says : {
           rows + ":2: ID and master are the same (\"s\"): a user cannot be linked to itself",
           rows + ":3: ID is empty",
           rows + ":4: 4 fields, at most 3 (id,master[,ttl])",
           rows + ":5: ID of 300 bytes is over the limit of 256",
           rows + ":6: TTL \"@1800000000\" is an absolute expiry",
           rows + ":7: TTL \"soon\" is not understood",
           components + ":2: no members after the tab",
           components + ":3: member 2 is empty",
           components + ":4: member 2 is the master itself (\"n4\")",
           components + ":5: member \"k\" appears twice in the line",
       }) {
    EXPECT_TRUE(Has(out, says)) << says << "\n" << out;
  }
  EXPECT_TRUE(Has(out, "4 lines, 5 links: 5 made")) << out;
  EXPECT_TRUE(Has(out, "10 bad rows, 0 links failed")) << out;
  EXPECT_EQ(Members("m"), (Strings{"a", "e"}));
  EXPECT_EQ(Members("n"), (Strings{"f", "g"}));
  EXPECT_EQ(MasterOf("z"), "n6");
  for (const char* unlinked : {"s", "b", "c", "d", "h", "j", "k"}) {
    EXPECT_TRUE(client_->MasterOf(unlinked).status().IsNotFound()) << unlinked;
  }

  // --max-errors stops the load, and says so in the exit status.
  std::tie(rc, out) = Segctl(port(), "load --links --no-progress --max-errors 2 " + rows);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "stopping after 2 bad rows (--max-errors)")) << out;
}

TEST_F(LinkLoadTest, DryRunValidatesAndLinksNothing) {
  const std::string rows = File("dry.csv", "a,m\nb,m,90d\nm2\tc,d\n");
  const uint64_t before = LinkRequests();
  auto [rc, out] = Segctl(port(), "load --links --no-progress --dry-run --format rows " + rows);
  EXPECT_EQ(rc, 1) << out;  // line 3, read as a row, has a tab in an ID
  EXPECT_TRUE(Has(out, rows + ":3: ID \"m2\\x09c\" contains a tab")) << out;
  EXPECT_TRUE(Has(out, "dry run: 2 lines, 2 links valid")) << out;
  const std::string components = File("dry.tsv", "m\ta,b,c\nm2\td\n");
  std::tie(rc, out) = Segctl(port(), "load --links --no-progress --dry-run " + components);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "dry run: 2 lines, 4 links valid")) << out;
  EXPECT_EQ(LinkRequests(), before);
  EXPECT_TRUE(client_->MasterOf("a").status().IsNotFound());
  EXPECT_TRUE(client_->MasterOf("d").status().IsNotFound());
}

// A group holds at most max_links (4 here) members: the links past it are
// refused by the server, reported with their line and IDs, and counted; the
// load goes on and exits with status 1.
TEST_F(LinkLoadTest, AGroupPastTheLimitIsReportedAndTheLoadGoesOn) {
  const std::string components = File("big.tsv", "big\ta,b,c,d,e,f\nsmall\tx\n");
  const std::string rows = File("more.csv", "y,small\ng,big\n");
  auto [rc, out] = Segctl(port(), "--json load --links --no-progress " + components + " " + rows);
  EXPECT_EQ(rc, 1) << out;
  // (The client names the server in the message: "link to 127.0.0.1:PORT: ...".)
  EXPECT_TRUE(Has(out, components + ":1: master big: 2 of 6 links failed (e, f): LimitExceeded: "))
      << out;
  EXPECT_TRUE(Has(out, "the group of 'big' would have 5 linked users; the limit is 4\n")) << out;
  EXPECT_TRUE(Has(out, rows + ":2: link g to big: LimitExceeded: ")) << out;
  EXPECT_TRUE(Has(out,
                  "\"lines\":4,\"links\":9,\"linked\":6,\"moved\":0,\"bad_rows\":0,"
                  "\"failed_links\":3,"))
      << out;
  EXPECT_EQ(Members("big"), (Strings{"a", "b", "c", "d"}));  // in file order
  EXPECT_EQ(Members("small"), (Strings{"x", "y"}));
  EXPECT_TRUE(client_->MasterOf("e").status().IsNotFound());
}

TEST_F(LinkLoadTest, BusyLinksAreSentAgain) {
  const uint16_t faulty = StartFaultyServer();
  int busy = 3;
  faults_->set_decide([&busy](const proto::LinkRequest&) {
    return busy-- > 0 ? Status::Busy("link: the groups kept changing") : Status::OK();
  });
  auto [rc, out] =
      Segctl(faulty, "load --links --no-progress " + File("busy.csv", "a,m\nb,n\nc,o\n"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "3 lines, 3 links: 3 made")) << out;
  EXPECT_TRUE(Has(out, "0 links failed, 3 retries")) << out;
  EXPECT_EQ(faults_->requests(), 6u);
  EXPECT_EQ(MasterOf("c"), "o");

  // Out of attempts (5 retries): failed, reported, and the load goes on.
  faults_->set_decide([](const proto::LinkRequest& r) {
    return r.user == "hot" ? Status::Busy("link: the groups kept changing") : Status::OK();
  });
  std::tie(rc, out) =
      Segctl(faulty, "load --links --no-progress " + File("hot.csv", "hot,m\nd,m\n"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "hot.csv:1: link hot to m: Busy: ")) << out;
  EXPECT_TRUE(Has(out, "link: the groups kept changing (after 6 attempts)\n")) << out;
  EXPECT_TRUE(Has(out, "1 links failed, 5 retries")) << out;
  EXPECT_EQ(Members("m"), (Strings{"a", "d"}));

  // A refusal of one link (here InvalidArgument) is that link's alone.
  faults_->set_decide([](const proto::LinkRequest& r) {
    return r.user == "odd" ? Status::InvalidArgument("link: not this one") : Status::OK();
  });
  std::tie(rc, out) =
      Segctl(faulty, "load --links --no-progress " + File("odd.tsv", "n\todd,h,i\n"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "odd.tsv:1: master n: 1 of 3 links failed (odd): InvalidArgument: ")) << out;
  EXPECT_TRUE(Has(out, "link: not this one\n")) << out;
  EXPECT_EQ(Members("n"), (Strings{"b", "h", "i"}));
}

// A server that takes no links (a cluster node, until links are replicated
// through the cluster's log, answers Unsupported) stops the load at once,
// said once, instead of failing each of its thousands of lines.
TEST_F(LinkLoadTest, AServerThatTakesNoLinksStopsTheLoadAtOnce) {
  const uint16_t faulty = StartFaultyServer();
  faults_->set_decide([](const proto::LinkRequest&) {
    return Status::Unsupported("link: links are not yet replicated through the cluster's log");
  });
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "u" + std::to_string(i) + ",m" + std::to_string(i) + "\n";
  auto [rc, out] = Segctl(faulty, "load --links --no-progress " + File("many.csv", text));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "segctl load: the server takes no links: Unsupported: ")) << out;
  EXPECT_TRUE(Has(out, "link: links are not yet replicated through the cluster's log\n")) << out;
  EXPECT_EQ(out.find("Unsupported"), out.rfind("Unsupported")) << out;  // said once
  EXPECT_TRUE(Has(out, "0 links failed")) << out;
  // What was in flight (4 connections x 16) when the first answer came, not every line.
  EXPECT_LE(faults_->requests(), 64u) << out;
}

// A server that never takes a link, however often it is sent (here one
// answering Unavailable, as a server shutting down does), is gone for good:
// the load stops after the attempts, with exit status 2 and a line saying so.
TEST_F(LinkLoadTest, AServerGoneForGoodStopsTheLoad) {
  const uint16_t faulty = StartFaultyServer();
  faults_->set_decide(
      [](const proto::LinkRequest&) { return Status::Unavailable("the server is shutting down"); });
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "u" + std::to_string(i) + ",m" + std::to_string(i) + "\n";
  auto [rc, out] = Segctl(
      faulty, "load --links --no-progress --connections 1 --in-flight 1 " + File("long.csv", text));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "segctl load: stopping: no answer after 6 attempts: Unavailable: ")) << out;
  EXPECT_TRUE(Has(out, "long.csv:1: link u0 to m0: Unavailable: ")) << out;
  EXPECT_EQ(faults_->requests(), 6u);  // one link in flight, sent 6 times; nothing after it
}

TEST_F(LinkLoadTest, BadOptionsExitWithTwo) {
  const std::string rows = File("ok.csv", "a,m\n");
  for (const std::string& args :
       {"load --links --format grouped " + rows, "load --links --mode extend " + rows,
        "load --format components " + rows, "load --links --default-ttl 0 " + rows}) {
    auto [rc, out] = Segctl(port(), args);
    EXPECT_EQ(rc, 2) << args << "\n" << out;
  }
  EXPECT_EQ(LinkRequests(), 0u);
}

// What `segctl load --help` and README's loader paragraph say of link files.
TEST_F(LinkLoadTest, HelpAndReadmeDescribeLinkFiles) {
  auto [rc, out] = Segctl(port(), "load --help");
  EXPECT_EQ(rc, 0) << out;
  for (const char* needle : {
           "--links",
           "--in-flight",
           "  rows        ID,MASTER[,TTL]\n",
           "  components  MASTER<TAB>ID[,ID]...\n",
           "exactly one tab, ',' between IDs; a line with a bad or repeated",
           "TTL form above (86400, 90s 15m 12h 30d) or never; an absolute expiry is a",
           "without it the link never expires",
           "asking for\n--format",
           "a header of other names must",
           "re-loading a components file moves every",
           "A server that takes no links (a",
           "--links a server that takes no links or a file whose format cannot be",
       }) {
    EXPECT_TRUE(Has(out, needle)) << "missing: " << needle << "\n" << out;
  }
  const std::string readme = testing::ReadFile(std::string(SEGSTORE_SOURCE_DIR) + "/README.md");
  const size_t from = readme.find("Bulk loading DMP files");
  ASSERT_NE(from, std::string::npos);
  const size_t to = readme.find("```", readme.find("```", from) + 3);
  const std::string paragraph = readme.substr(from, to - from);
  for (const char* needle : {"`--links`", "`id,master[,ttl]`", "`master<TAB>id,id,...`",
                             "segctl load --links --default-ttl 90d"}) {
    EXPECT_TRUE(Has(paragraph, needle)) << "README misses: " << needle << "\n" << paragraph;
  }
}

}  // namespace
}  // namespace segstore::server
