// `segctl load --fields` against the whole server in process: every value
// type and TTL form read back with a get, comma, tab, gzip and standard
// input files, the rows of one user gathered into one field_set, reloads,
// bad rows, limits the server holds (a profile's max_fields), dry runs, and
// a server that answers field writes with Busy, refuses some, takes none
// (a cluster node answers Unsupported) or is gone (a front end of its own
// over the same store: FieldFaults). The server's clock is a ManualClock:
// expiries are exact.
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
constexpr uint32_t kMaxFields = 8;  // live fields a profile holds, in these tests

using FieldFaults = testing::RequestFaults<proto::FieldSetRequest, proto::Op::kFieldSet>;
using testing::WriteFile;
using testing::WriteGzip;

bool HasName(const proto::FieldSetRequest& r, const std::string& name) {
  for (const FieldUpdate& f : r.fields) {
    if (f.name == name) return true;
  }
  return false;
}

class FieldLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    p.max_fields = max_fields_;
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

  // A second front end on the same store, whose field_set requests `faults_` sees first.
  uint16_t StartFaultyServer() {
    faults_ = std::make_unique<FieldFaults>(served_.service.get());
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

  // The live fields of `user`, every one, sorted by name; empty when it has
  // no profile.
  std::vector<Field> Fields(const std::string& user) {
    GetOptions o;
    o.ids_only = true;
    o.fields.mode = FieldSelection::Mode::kAll;
    auto r = client_->Get(user, o);
    if (r.status().IsNotFound()) return {};
    EXPECT_TRUE(r.ok()) << user << ": " << r.status().ToString();
    return r.ok() ? r->fields : std::vector<Field>{};
  }

  uint64_t FieldSetRequests() const {
    return served_.server->counters().requests_by_op[static_cast<uint8_t>(proto::Op::kFieldSet)];
  }

  uint32_t max_fields_ = kMaxFields;
  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  ServerOptions server_options_;
  testing::InProcessServer served_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<FieldFaults> faults_;
  std::unique_ptr<Server> faulty_server_;
};

using Fs = std::vector<Field>;
using V = FieldValue;

TEST_F(FieldLoadTest, LoadsEveryTypeAndTtlFormFromCommaTabGzipAndStdin) {
  const std::string csv = File("fields.csv",
                               "user,name,value,ttl\n"  // a header
                               "# typed by their prefix\n"
                               "u1,visits,int:-42\n"
                               "u1,score,double:0.5,90d\n"
                               "u1,country,str:FR,\n"  // empty: --default-ttl
                               "u1,consent,bytes:00ff,never\n"
                               "u1,seen,time:2026-12-01T00:00:00Z,@1900000000\r\n"
                               "\n"
                               "u2,count,7,3600\n"  // untyped: by the JSON number rule
                               "u2,ratio,1e3,2030-01-01T00:00:00Z\n"
                               "u2,zip,01234\n"
                               "\"u2\",\"note\",\"a, \"\"quoted\"\" one\"\n");
  const std::string tsv = File("fields.tsv", "u3\tconsent\tCP,AB,CD\t12h\n");
  const std::string gz = dir_.File("fields.csv.gz");
  WriteGzip(gz, "u4,when,time:1790000000\n");
  auto [rc, out] =
      Segctl(port(), "load --fields --no-progress --default-ttl 1h " + csv + " " + tsv + " " + gz);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, csv + ":1: skipped as a header line")) << out;
  EXPECT_TRUE(Has(out, "11 rows, 4 users: 11 fields set in 4 requests")) << out;
  EXPECT_TRUE(Has(out, "0 bad rows, 0 expired before sending, 0 fields failed, 0 retries")) << out;

  EXPECT_EQ(Fields("u1"), (Fs{{"consent", V::Bytes(std::string("\0\xff", 2)), kNever},
                              {"country", V::String("FR"), kStart + 3600},
                              {"score", V::Double(0.5), kStart + 90 * 86400},
                              {"seen", V::Time(1796083200), 1900000000},
                              {"visits", V::Int(-42), kStart + 3600}}));
  EXPECT_EQ(Fields("u2"), (Fs{{"count", V::Int(7), kStart + 3600},
                              {"note", V::String("a, \"quoted\" one"), kStart + 3600},
                              {"ratio", V::Double(1000), 1893456000},
                              {"zip", V::String("01234"), kStart + 3600}}));
  EXPECT_EQ(Fields("u3"), (Fs{{"consent", V::String("CP,AB,CD"), kStart + 12 * 3600}}));
  EXPECT_EQ(Fields("u4"), (Fs{{"when", V::Time(1790000000), kStart + 3600}}));
  // A profile of fields alone: no segments.
  EXPECT_EQ(client_->Get("u4")->count, 0u);

  // Standard input, --json, and no --default-ttl: a field without a TTL never expires.
  std::tie(rc, out) = Segctl(port(), "--json load --fields --no-progress - < " +
                                         File("in.csv", "u5,a,1\nu5,b,str:x\nu6,a,2,60\n"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out,
                  "{\"rows\":3,\"users\":2,\"fields\":3,\"fields_set\":3,\"requests\":2,"
                  "\"bad_rows\":0,\"expired_rows\":0,\"failed_fields\":0,\"retries\":0,"))
      << out;
  EXPECT_EQ(Fields("u5"), (Fs{{"a", V::Int(1), kNever}, {"b", V::String("x"), kNever}}));
  EXPECT_EQ(Fields("u6"), (Fs{{"a", V::Int(2), kStart + 60}}));

  // segctl get reads them back too.
  std::tie(rc, out) = Segctl(port(), "--json get u5 --fields");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"a\":{\"type\":\"int\",\"value\":1")) << out;
}

TEST_F(FieldLoadTest, FieldTypeTypesValuesWithoutAPrefix) {
  auto [rc, out] = Segctl(port(), "load --fields --no-progress --field-type str " +
                                      File("zips.csv", "u1,zip,12345\nu2,zip,01234\nu3,n,int:5\n"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(Fields("u1"), (Fs{{"zip", V::String("12345"), kNever}}));
  EXPECT_EQ(Fields("u2"), (Fs{{"zip", V::String("01234"), kNever}}));
  EXPECT_EQ(Fields("u3"), (Fs{{"n", V::Int(5), kNever}}));  // a prefix wins
  std::tie(rc, out) = Segctl(port(), "load --fields --no-progress --field-type double " +
                                         File("scores.csv", "u1,score,1\nu1,level,high\n"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "scores.csv:2: double \"high\" is not a number")) << out;
  EXPECT_EQ(Fields("u1"), (Fs{{"score", V::Double(1), kNever}, {"zip", V::String("12345"), 0}}));
}

// Rows of one user go in one field_set; a name given twice
// for a user, the later row wins, within one request and across requests.
TEST_F(FieldLoadTest, RowsOfOneUserGoInOneRequest) {
  std::string text;
  for (int f = 0; f < 5; ++f) {
    for (int u = 0; u < 3; ++u) {
      text += "u" + std::to_string(u) + ",f" + std::to_string(f) + "," + std::to_string(f) + "\n";
    }
  }
  text += "u0,f0,str:again\n";  // the same request: the later row wins
  uint64_t before = FieldSetRequests();
  auto [rc, out] = Segctl(port(), "load --fields --no-progress " + File("close.csv", text));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(FieldSetRequests() - before, 3u);
  EXPECT_TRUE(Has(out, "16 rows, 3 users: 15 fields set in 3 requests")) << out;
  EXPECT_EQ(Fields("u0").front(), (Field{"f0", V::String("again"), kNever}));
  EXPECT_EQ(Fields("u2").size(), 5u);

  // Rows of one user far apart go in one request too while --memory-mib
  // holds the users between them; past it, in two, in file order, whatever
  // runs beside them.
  text = "x,f,1\n";
  for (int u = 0; u < 5000; ++u) text += "y" + std::to_string(u) + ",f,1\n";
  text += "x,g,2\n";
  before = FieldSetRequests();
  std::tie(rc, out) = Segctl(port(), "load --fields --no-progress " + File("far.csv", text));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(FieldSetRequests() - before, 5001u);
  EXPECT_EQ(Fields("x"), (Fs{{"f", V::Int(1), kNever}, {"g", V::Int(2), kNever}}));
  text = "x,f,3\n";
  for (int u = 0; u < 5000; ++u) text += "y" + std::to_string(u) + ",f,1\n";
  text += "x,f,4\n";
  before = FieldSetRequests();
  std::tie(rc, out) =
      Segctl(port(), "load --fields --no-progress --memory-mib 1 --connections 4 --in-flight 32 " +
                         File("far.csv", text));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(FieldSetRequests() - before, 5002u);
  EXPECT_EQ(Fields("x").front(), (Field{"f", V::Int(4), kNever}));
}

// Loading again sets each named field whole (value, type, expiry); fields
// the file does not name are kept. Loading the same file twice changes
// nothing.
TEST_F(FieldLoadTest, ReloadingSetsTheNamedFieldsWholeAndKeepsTheOthers) {
  std::vector<SegmentUpdate> seg = {{5, 3600, true, {}, {}}};
  ASSERT_TRUE(client_->Upsert("u", seg).ok());
  const std::string first = File("a.csv", "u,visits,3,1h\nu,country,FR\nu,score,0.5\n");
  auto [rc, out] = Segctl(port(), "load --fields --no-progress " + first);
  ASSERT_EQ(rc, 0) << out;
  const std::string second = File("b.csv", "u,visits,str:many\nu,country,DE,30d\n");
  for (int twice = 0; twice < 2; ++twice) {
    std::tie(rc, out) = Segctl(port(), "load --fields --no-progress " + second);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(Fields("u"), (Fs{{"country", V::String("DE"), kStart + 30 * 86400},
                               {"score", V::Double(0.5), kNever},
                               {"visits", V::String("many"), kNever}}));
  }
  EXPECT_EQ(client_->Get("u")->ids, (std::vector<uint64_t>{5}));  // segments are left alone
}

TEST_F(FieldLoadTest, BadRowsAreReportedWithTheirLineAndTheRestIsWritten) {
  const std::string rows = File("bad.csv",
                                "u,ok1,1\n"
                                "u,f\n"         // 2: too few fields
                                "u,f,1,1h,x\n"  // 3: too many
                                ",f,1\n"        // 4: no user
                                "u," +
                                    std::string(65, 'n') +
                                    ",1\n"  // 5: name too long
                                    "u,f,str:" +
                                    std::string(1025, 'x') +
                                    "\n"                   // 6: value too long
                                    "u,f,int:x\n"          // 7: bad int
                                    "u,f,\n"               // 8: empty value
                                    "u,f,1,soon\n"         // 9: bad TTL
                                    "u,f,1,@1700000000\n"  // 10: expiry in the past
                                    "u,f,\"open\n"         // 11: an unclosed quote
                                    "u,f,str:\xff\n"       // 12: not UTF-8
                                    "u,ok2,2\n");
  auto [rc, out] = Segctl(port(), "load --fields --no-progress " + rows);
  EXPECT_EQ(rc, 1) << out;
  for (const std::string& says : {
           rows + ":2: 2 fields, at least 3 (user,name,value[,ttl] separated by ',')",
           rows + ":3: 5 fields, at most 4 (user,name,value[,ttl])",
           rows + ":4: user ID is empty",
           rows + ":5: field name of 65 bytes is over the limit of 64",
           rows + ":6: value of 1025 bytes is over the limit of 1024",
           rows + ":7: int \"x\" is not a 64-bit integer",
           rows + ":8: value is empty (the empty string is str:)",
           rows + ":9: TTL or expiry \"soon\" is not understood",
           rows + ":10: expiry \"@1700000000\" is in the past",
           rows + ":11: field 3 has an opening quote and no closing one",
           rows + ":12: str \"\xff\" is not valid UTF-8 (write bytes:HEX)",
       }) {
    EXPECT_TRUE(Has(out, says)) << says << "\n" << out;
  }
  EXPECT_TRUE(Has(out, "2 rows, 1 users: 2 fields set in 1 requests")) << out;
  EXPECT_TRUE(Has(out, "11 bad rows, 0 expired before sending, 0 fields failed")) << out;
  EXPECT_EQ(Fields("u"), (Fs{{"ok1", V::Int(1), kNever}, {"ok2", V::Int(2), kNever}}));

  // --max-errors stops the load, and says so in the exit status.
  std::tie(rc, out) = Segctl(port(), "load --fields --no-progress --max-errors 2 " + rows);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "stopping after 2 bad rows (--max-errors)")) << out;
}

// A profile holds at most max_fields (8 here) live fields: the server
// refuses a request that would leave more whole, and the loader sends its
// fields again one at a time, so that only those past the limit fail, each
// reported with its line.
TEST_F(FieldLoadTest, FieldsPastAProfilesLimitFailAloneWithTheirLines) {
  std::string text;
  for (int f = 0; f < 10; ++f) text += "u,f" + std::to_string(f) + "," + std::to_string(f) + "\n";
  text += "v,a,1\n";
  const uint64_t before = FieldSetRequests();
  auto [rc, out] = Segctl(port(), "load --fields --no-progress " + File("many.csv", text));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "many.csv:9: user u, field f8: LimitExceeded: ")) << out;
  EXPECT_TRUE(Has(out, "many.csv:10: user u, field f9: LimitExceeded: ")) << out;
  EXPECT_TRUE(Has(out, "11 rows, 2 users: 9 fields set in 9 requests")) << out;
  EXPECT_TRUE(Has(out, "2 fields failed")) << out;
  // u's request of 10, its 10 fields alone, v's.
  EXPECT_EQ(FieldSetRequests() - before, 12u);
  EXPECT_EQ(Fields("u").size(), kMaxFields);
  EXPECT_EQ(Fields("u").back(), (Field{"f7", V::Int(7), kNever}));
  EXPECT_EQ(Fields("v").size(), 1u);
}

TEST_F(FieldLoadTest, DryRunValidatesAndWritesNothing) {
  const std::string rows = File("dry.csv", "u,a,1\nu,b,2\nv,a,int:x\nw,a,3\n");
  const uint64_t before = FieldSetRequests();
  auto [rc, out] = Segctl(port(), "load --fields --no-progress --dry-run " + rows);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, rows + ":3: int \"x\" is not a 64-bit integer")) << out;
  EXPECT_TRUE(Has(out, "dry run: 3 rows, 2 users, 3 fields valid (2 requests)")) << out;
  EXPECT_TRUE(Has(out, "; 1 bad rows")) << out;
  std::tie(rc, out) =
      Segctl(port(), "load --fields --no-progress --dry-run " + File("ok.csv", "u,a,1\n"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(FieldSetRequests(), before);
  EXPECT_TRUE(Fields("u").empty());
}

TEST_F(FieldLoadTest, BusyRequestsAreSentAgain) {
  const uint16_t faulty = StartFaultyServer();
  int busy = 3;
  faults_->set_decide([&busy](const proto::FieldSetRequest&) {
    return busy-- > 0 ? Status::Busy("field_set: try later") : Status::OK();
  });
  auto [rc, out] =
      Segctl(faulty, "load --fields --no-progress " + File("busy.csv", "a,f,1\nb,f,2\nc,f,3\n"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "3 rows, 3 users: 3 fields set in 3 requests")) << out;
  EXPECT_TRUE(Has(out, "0 fields failed, 3 retries")) << out;
  EXPECT_EQ(faults_->requests(), 6u);
  EXPECT_EQ(Fields("c"), (Fs{{"f", V::Int(3), kNever}}));

  // Out of attempts (5 retries): failed, reported, and the load goes on.
  faults_->set_decide([](const proto::FieldSetRequest& r) {
    return r.user == "hot" ? Status::Busy("field_set: try later") : Status::OK();
  });
  std::tie(rc, out) =
      Segctl(faulty, "load --fields --no-progress " + File("hot.csv", "hot,f,1\nhot,g,2\nd,f,4\n"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "hot.csv:1: user hot: 2 fields (lines 1, 2) failed: Busy: ")) << out;
  EXPECT_TRUE(Has(out, "field_set: try later (after 6 attempts)\n")) << out;
  EXPECT_TRUE(Has(out, "2 fields failed, 5 retries")) << out;
  EXPECT_EQ(Fields("d"), (Fs{{"f", V::Int(4), kNever}}));
  EXPECT_TRUE(Fields("hot").empty());
}

// A request refused whole for one field (here the server says
// InvalidArgument for a field named "poison") is sent again a field at a
// time: the others are written, and the one at fault is reported with its line.
TEST_F(FieldLoadTest, ARefusedRequestIsSentAgainAFieldAtATime) {
  const uint16_t faulty = StartFaultyServer();
  faults_->set_decide([](const proto::FieldSetRequest& r) {
    return HasName(r, "poison") ? Status::InvalidArgument("field \"poison\": not this one")
                                : Status::OK();
  });
  auto [rc, out] = Segctl(faulty, "load --fields --no-progress " +
                                      File("odd.csv", "u,a,1\nu,poison,2\nu,c,3\nv,poison,4\n"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "odd.csv:2: user u, field poison: InvalidArgument: ")) << out;
  EXPECT_TRUE(Has(out, "odd.csv:4: user v, field poison: InvalidArgument: ")) << out;
  EXPECT_TRUE(Has(out, "field \"poison\": not this one\n")) << out;
  EXPECT_TRUE(Has(out, "4 rows, 2 users: 2 fields set in 2 requests")) << out;
  EXPECT_TRUE(Has(out, "2 fields failed, 0 retries")) << out;
  EXPECT_EQ(faults_->requests(), 5u);  // u's whole, u's three alone, v's
  EXPECT_EQ(Fields("u"), (Fs{{"a", V::Int(1), kNever}, {"c", V::Int(3), kNever}}));
  EXPECT_TRUE(Fields("v").empty());
}

// A server that takes no field writes (a cluster node, until fields are
// replicated through the cluster's log, answers Unsupported) stops the
// load at once, said once, instead of failing each of its rows.
TEST_F(FieldLoadTest, AServerThatTakesNoFieldWritesStopsTheLoadAtOnce) {
  const uint16_t faulty = StartFaultyServer();
  faults_->set_decide([](const proto::FieldSetRequest&) {
    return Status::Unsupported(
        "field_set: profile fields are not yet replicated through the cluster's log");
  });
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "u" + std::to_string(i) + ",f,1\n";
  auto [rc, out] = Segctl(faulty, "load --fields --no-progress " + File("many.csv", text));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "segctl load: the server takes no field writes: Unsupported: ")) << out;
  EXPECT_TRUE(Has(out, "profile fields are not yet replicated through the cluster's log\n")) << out;
  EXPECT_EQ(out.find("Unsupported"), out.rfind("Unsupported")) << out;  // said once
  EXPECT_TRUE(Has(out, "0 fields failed")) << out;
  // What was in flight (4 connections x 16) when the first answer came, not every row.
  EXPECT_LE(faults_->requests(), 64u) << out;
}

// A server that never takes a request, however often it is sent (here one
// answering Unavailable, as a server shutting down does), is gone for good:
// the load stops after the attempts, with exit status 2 and a line saying so.
TEST_F(FieldLoadTest, AServerGoneForGoodStopsTheLoad) {
  const uint16_t faulty = StartFaultyServer();
  faults_->set_decide([](const proto::FieldSetRequest&) {
    return Status::Unavailable("the server is shutting down");
  });
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "u" + std::to_string(i) + ",f,1\n";
  auto [rc, out] = Segctl(faulty, "load --fields --no-progress --connections 1 --in-flight 1 " +
                                      File("long.csv", text));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "segctl load: stopping: no answer after 6 attempts: Unavailable: ")) << out;
  EXPECT_TRUE(Has(out, "long.csv:1: user u0, field f: Unavailable: ")) << out;
  EXPECT_EQ(faults_->requests(), 6u);  // one request in flight, sent 6 times; nothing after it
}

TEST_F(FieldLoadTest, AServerThatCannotBeReachedExitsWithTwo) {
  const std::string rows = File("ok.csv", "u,a,1\n");
  const uint16_t closed = port();
  client_.reset();
  served_.Stop();
  auto [rc, out] = Segctl(closed, "--timeout 2000 load --fields --no-progress " + rows);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "segctl load: Unavailable: ")) << out;
}

TEST_F(FieldLoadTest, BadOptionsExitWithTwo) {
  const std::string rows = File("ok.csv", "u,a,1\n");
  for (const std::string& args :
       {"load --fields --links " + rows, "load --fields --format rows " + rows,
        "load --fields --mode extend " + rows, "load --fields --field-type string " + rows,
        "load --field-type int " + rows, "load --fields --default-ttl 0 " + rows,
        "load --fields --delimiter semicolon " + rows}) {
    auto [rc, out] = Segctl(port(), args);
    EXPECT_EQ(rc, 2) << args << "\n" << out;
  }
  EXPECT_EQ(FieldSetRequests(), 0u);
}

// What `segctl load --help` says of field files.
TEST_F(FieldLoadTest, HelpDescribesFieldFiles) {
  auto [rc, out] = Segctl(port(), "load --help");
  EXPECT_EQ(rc, 0) << out;
  for (const char* needle : {
           "--fields",
           "--field-type",
           "  USER,NAME,VALUE[,TTL]    a comma or a tab between the fields",
           "  int:-42                  64-bit signed integer\n",
           "  time:1790000000          Unix seconds, or ISO-8601 with Z or an offset\n",
           "(auto) a value that is a JSON number is a number",
           "str (FR, 01234, +33, .5, true)",
           "written str:int:3",
           "Fields may be quoted as in CSV\n(RFC 4180)",
           "without it the field never expires",
           "as long as the users read meanwhile fit in --memory-mib",
           "a field at a time",
           "with --fields a server that takes no field writes",
       }) {
    EXPECT_TRUE(Has(out, needle)) << "missing: " << needle << "\n" << out;
  }
}

}  // namespace
}  // namespace segstore::server
