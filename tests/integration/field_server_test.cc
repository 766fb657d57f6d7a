// Profile fields over the wire: the four writes and the get's field options
// through the client library, their errors, a linked user's reads, a cluster
// node's refusal, and segctl's commands, against the whole server in
// process. The server's clock is a ManualClock: expiries are exact.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cluster/view.h"
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

FieldUpdate Set(std::string name, FieldValue v, uint32_t expiry = kNever, bool ttl = false) {
  return FieldUpdate{std::move(name), std::move(v), expiry, ttl};
}

GetOptions AllFields() {
  GetOptions o;
  o.ids_only = true;
  o.fields.mode = FieldSelection::Mode::kAll;
  return o;
}

class FieldServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(nullptr); }
  // A single server, or with `board` a cluster node reading its view there.
  void Start(cluster::ViewBoard* board) {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    ProfileServiceOptions so;
    so.max_batch = 100;
    so.cluster = board;
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
  // The live fields of `user` (every one), or the error's code name.
  std::vector<Field> Fields(const std::string& user) {
    auto r = client_->Get(user, AllFields());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    EXPECT_TRUE(r->fields_asked);
    return r->fields;
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  testing::InProcessServer served_;
  std::unique_ptr<Client> client_;
};

TEST_F(FieldServerTest, EveryTypeRoundTripsThroughTheServer) {
  const std::vector<FieldUpdate> set = {
      Set("country", FieldValue::String("FR")),
      Set("score", FieldValue::Double(0.75), kStart + 100),
      Set("consent", FieldValue::Bytes(std::string("\0\xff", 2)), 60, true),
      Set("seen", FieldValue::Time(kStart - 5)),
      Set("visits", FieldValue::Int(-3)),
      Set(std::string("\xff\xfe", 2), FieldValue::Int(1)),  // a name that is not UTF-8
  };
  auto w = client_->FieldSet("alice", set);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->changed, 6u);
  EXPECT_EQ(w->count, 6u);
  const std::vector<Field> want = {
      {"consent", FieldValue::Bytes(std::string("\0\xff", 2)), kStart + 60},
      {"country", FieldValue::String("FR"), kNever},
      {"score", FieldValue::Double(0.75), kStart + 100},
      {"seen", FieldValue::Time(kStart - 5), kNever},
      {"visits", FieldValue::Int(-3), kNever},
      {std::string("\xff\xfe", 2), FieldValue::Int(1), kNever},
  };
  EXPECT_EQ(Fields("alice"), want);

  // A profile of fields alone exists: OK, no segment.
  auto plain = client_->Get("alice");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->count, 0u);
  EXPECT_FALSE(plain->fields_asked);
  EXPECT_TRUE(plain->fields.empty());

  // By name (one absent, one twice) and by prefix.
  GetOptions named = AllFields();
  named.fields.mode = FieldSelection::Mode::kNames;
  named.fields.names = {"visits", "nope", "country", "visits"};
  auto r = client_->Get("alice", named);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fields, (std::vector<Field>{want[1], want[4]}));
  GetOptions prefix = AllFields();
  prefix.fields.mode = FieldSelection::Mode::kPrefix;
  prefix.fields.prefix = "s";
  r = client_->Get("alice", prefix);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->fields, (std::vector<Field>{want[2], want[3]}));
  prefix.fields.prefix = "zzz";
  r = client_->Get("alice", prefix);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->fields_asked);
  EXPECT_TRUE(r->fields.empty());

  // A batch get asks the same of every user.
  ASSERT_TRUE(client_->Upsert("bob", std::vector<SegmentUpdate>{{9, 3600, true, {}, {}}}).ok());
  const std::vector<std::string> users = {"alice", "nobody", "bob"};
  auto batch = client_->BatchGet(users, named);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), 3u);
  EXPECT_EQ((*batch)[0]->fields.size(), 2u);
  EXPECT_TRUE((*batch)[1].status().IsNotFound());
  EXPECT_TRUE((*batch)[2]->fields_asked);
  EXPECT_TRUE((*batch)[2]->fields.empty());
  EXPECT_EQ((*batch)[2]->ids, (std::vector<uint64_t>{9}));

  // Expired fields are hidden; a profile whose last field expired is gone.
  clock_.Advance(60);
  EXPECT_EQ(Fields("alice").size(), 5u);  // consent expired
  auto dropped =
      client_->FieldDelete("alice", std::vector<std::string>{"country", "score", "seen", "visits",
                                                             std::string("\xff\xfe", 2), "nope"});
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(dropped->changed, 5u);
  EXPECT_EQ(dropped->count, 0u);
  EXPECT_TRUE(client_->Get("alice").status().IsNotFound());
  auto none = client_->FieldDelete("alice", std::vector<std::string>{"country"});
  EXPECT_TRUE(none.status().IsNotFound()) << none.status().ToString();
}

TEST_F(FieldServerTest, CountersCapAndTheirWindowsExpire) {
  FieldIncrement inc;
  inc.name = "cap:77";
  inc.ttl = 86400;
  inc.cap = 3;
  for (int64_t want = 1; want <= 3; ++want) {
    auto r = client_->FieldIncrement("u", inc);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->value, want);
    EXPECT_FALSE(r->capped);
    clock_.Advance(100);
  }
  // The cap is a result, not an error: nothing written.
  auto capped = client_->FieldIncrement("u", inc);
  ASSERT_TRUE(capped.ok()) << capped.status().ToString();
  EXPECT_TRUE(capped->capped);
  EXPECT_EQ(capped->value, 3);
  // A fixed window: the counter expires a day after it was made, whatever
  // the increments since; then it starts again.
  EXPECT_EQ(Fields("u"), (std::vector<Field>{{"cap:77", FieldValue::Int(3), kStart + 86400}}));
  clock_.Set(kStart + 86400);
  auto again = client_->FieldIncrement("u", inc);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->value, 1);
  EXPECT_EQ(Fields("u"), (std::vector<Field>{{"cap:77", FieldValue::Int(1), kStart + 2 * 86400}}));
  // A sliding window: every increment sets the expiry again.
  FieldIncrement sliding;
  sliding.name = "recent";
  sliding.ttl = 600;
  sliding.window = FieldIncrement::Window::kSliding;
  sliding.delta = -2;
  ASSERT_TRUE(client_->FieldIncrement("u", sliding).ok());
  clock_.Advance(500);
  auto r = client_->FieldIncrement("u", sliding);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->value, -4);
  auto fields = Fields("u");
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[1].name, "recent");
  EXPECT_EQ(fields[1].expires_at, kStart + 86400 + 500 + 600);
}

TEST_F(FieldServerTest, MaxKeepsTheLarger) {
  auto r = client_->FieldMax("u", Set("seen", FieldValue::Time(kStart - 100)));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->replaced);
  r = client_->FieldMax("u", Set("seen", FieldValue::Time(kStart - 200), 3600, true));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->replaced);
  EXPECT_EQ(r->value, FieldValue::Time(kStart - 100));
  r = client_->FieldMax("u", Set("seen", FieldValue::Time(kStart), 3600, true));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->replaced);
  EXPECT_EQ(Fields("u"), (std::vector<Field>{{"seen", FieldValue::Time(kStart), kStart + 3600}}));
  r = client_->FieldMax("u", Set("score", FieldValue::Double(-1.5)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->value, FieldValue::Double(-1.5));
}

TEST_F(FieldServerTest, BadFieldWritesGetClearErrorsAndWriteNothing) {
  auto code = [](const Status& s) { return s.code(); };
  using C = Status::Code;
  EXPECT_EQ(
      code(client_->FieldSet("u", std::vector<FieldUpdate>{Set("", FieldValue::Int(1))}).status()),
      C::kInvalidArgument);
  auto r = client_->FieldSet(
      "u", std::vector<FieldUpdate>{Set(std::string(65, 'n'), FieldValue::Int(1))});
  EXPECT_EQ(code(r.status()), C::kInvalidArgument);
  EXPECT_TRUE(Has(std::string(r.status().message()), "fields[0].name")) << r.status().ToString();
  r = client_->FieldSet(
      "u", std::vector<FieldUpdate>{Set("a", FieldValue::Int(1)), Set("a", FieldValue::Int(2))});
  EXPECT_EQ(code(r.status()), C::kInvalidArgument);
  EXPECT_TRUE(Has(std::string(r.status().message()), "twice")) << r.status().ToString();
  r = client_->FieldSet("u", std::vector<FieldUpdate>{Set("a", FieldValue::Int(1), kStart)});
  EXPECT_EQ(code(r.status()), C::kInvalidArgument) << r.status().ToString();
  r = client_->FieldSet("u", std::vector<FieldUpdate>{Set("a", FieldValue::Int(1), 0, true)});
  EXPECT_EQ(code(r.status()), C::kInvalidArgument) << r.status().ToString();
  r = client_->FieldSet(
      "u", std::vector<FieldUpdate>{Set("a", FieldValue::String(std::string(1025, 'x')))});
  EXPECT_EQ(code(r.status()), C::kLimitExceeded) << r.status().ToString();
  std::vector<FieldUpdate> many;
  for (int i = 0; i < 257; ++i) many.push_back(Set("f" + std::to_string(i), FieldValue::Int(i)));
  r = client_->FieldSet("u", many);
  EXPECT_EQ(code(r.status()), C::kLimitExceeded) << r.status().ToString();
  r = client_->FieldSet(std::string("\xff\x00x", 3),
                        std::vector<FieldUpdate>{Set("a", FieldValue::Int(1))});
  EXPECT_EQ(code(r.status()), C::kInvalidArgument) << r.status().ToString();
  EXPECT_TRUE(client_->Get("u").status().IsNotFound());  // none of it was written

  ASSERT_TRUE(
      client_->FieldSet("u", std::vector<FieldUpdate>{Set("name", FieldValue::String("x"))}).ok());
  FieldIncrement inc;
  inc.name = "name";
  auto i = client_->FieldIncrement("u", inc);
  EXPECT_EQ(code(i.status()), C::kInvalidArgument) << i.status().ToString();
  inc.name = "big";
  inc.delta = INT64_MAX;
  ASSERT_TRUE(client_->FieldIncrement("u", inc).ok());
  i = client_->FieldIncrement("u", inc);
  EXPECT_EQ(code(i.status()), C::kInvalidArgument) << i.status().ToString();
  EXPECT_TRUE(Has(std::string(i.status().message()), "overflows")) << i.status().ToString();
  auto m = client_->FieldMax("u", Set("name", FieldValue::String("y")));
  EXPECT_EQ(code(m.status()), C::kInvalidArgument) << m.status().ToString();
  m = client_->FieldMax("u", Set("big", FieldValue::Double(1)));
  EXPECT_EQ(code(m.status()), C::kInvalidArgument) << m.status().ToString();
  GetOptions both = AllFields();
  both.fields.mode = FieldSelection::Mode::kNames;
  both.fields.names = {""};
  EXPECT_EQ(code(client_->Get("u", both).status()), C::kInvalidArgument);
  EXPECT_EQ(Fields("u"), (std::vector<Field>{{"big", FieldValue::Int(INT64_MAX), kNever},
                                             {"name", FieldValue::String("x"), kNever}}));
  EXPECT_TRUE(client_->Ping().ok());  // the connection is still usable
}

TEST_F(FieldServerTest, ALinkedUserReadsItsMastersFields) {
  ASSERT_TRUE(client_->Upsert("home", std::vector<SegmentUpdate>{{1, 3600, true, {}, {}}}).ok());
  ASSERT_TRUE(client_->Upsert("phone", std::vector<SegmentUpdate>{{2, 3600, true, {}, {}}}).ok());
  ASSERT_TRUE(
      client_->FieldSet("home", std::vector<FieldUpdate>{Set("country", FieldValue::String("FR"))})
          .ok());
  ASSERT_TRUE(
      client_->FieldSet("phone", std::vector<FieldUpdate>{Set("device", FieldValue::String("ios"))})
          .ok());
  ASSERT_TRUE(client_->Link("phone", "home").ok());
  auto r = client_->Get("phone", AllFields());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->master, "home");
  EXPECT_EQ(r->fields, (std::vector<Field>{{"country", FieldValue::String("FR"), kNever}}));
  GetOptions own = AllFields();
  own.own_only = true;
  r = client_->Get("phone", own);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->fields, (std::vector<Field>{{"device", FieldValue::String("ios"), kNever}}));
}

TEST_F(FieldServerTest, SegctlDrivesFields) {
  const uint16_t port = served_.server->port();
  auto [rc, out] = Segctl(port,
                          "field-set u country=str:FR score=0.5 visits=3 raw=bytes:00ff "
                          "seen=time:2026-01-01T00:00:00Z --ttl 1h");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "5 fields set, 5 live fields now")) << out;
  std::tie(rc, out) = Segctl(port, "--json get u --ids-only --fields country,visits,raw");
  EXPECT_EQ(rc, 0) << out;
  const std::string expiry = std::to_string(kStart + 3600);
  EXPECT_TRUE(Has(
      out, "\"fields\":{\"country\":{\"type\":\"str\",\"value\":\"FR\",\"expires_at\":" + expiry +
               "},\"raw\":{\"type\":\"bytes\",\"value\":\"00ff\""))
      << out;
  EXPECT_TRUE(Has(out, "\"visits\":{\"type\":\"int\",\"value\":3,")) << out;
  std::tie(rc, out) = Segctl(port, "get u --fields");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "5 fields")) << out;
  EXPECT_TRUE(Has(out, "2026-01-01 00:00:00")) << out;  // seen, a time
  std::tie(rc, out) = Segctl(port, "--json get u --field-prefix s");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\"score\":{\"type\":\"double\",\"value\":0.5,")) << out;
  EXPECT_FALSE(Has(out, "country")) << out;

  std::tie(rc, out) = Segctl(port, "incr u cap:77 --ttl 1d --cap 2");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "cap:77 = 1\n");
  std::tie(rc, out) = Segctl(port, "incr u cap:77 --by=1 --ttl 1d --cap 2");
  EXPECT_EQ(out, "cap:77 = 2\n");
  std::tie(rc, out) = Segctl(port, "--json incr u cap:77 --ttl 1d --cap 2");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "{\"value\":2,\"capped\":true}\n");
  std::tie(rc, out) = Segctl(port, "incr u cap:77 --by=-5 --sliding");
  EXPECT_EQ(out, "cap:77 = -3\n");

  std::tie(rc, out) = Segctl(port, "field-max u seen=time:2025-01-01T00:00:00Z");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "seen = 2026-01-01 00:00:00 (kept")) << out;
  std::tie(rc, out) = Segctl(port, "--json field-max u best=int:7");
  EXPECT_EQ(out, "{\"type\":\"int\",\"value\":7,\"replaced\":true}\n");

  std::tie(rc, out) = Segctl(port, "field-del u country nope");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "1 fields deleted, 6 live fields now")) << out;
  std::tie(rc, out) = Segctl(port, "field-del nobody country");
  EXPECT_EQ(rc, 3) << out;
  EXPECT_TRUE(Has(out, "nobody has no profile")) << out;

  // Bad input never reaches the server.
  std::tie(rc, out) = Segctl(port, "field-set u noequals");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "expected NAME=VALUE")) << out;
  std::tie(rc, out) = Segctl(port, "field-set u a=bytes:0g");
  EXPECT_EQ(rc, 1) << out;
  std::tie(rc, out) = Segctl(port, "field-set u a=1 --ttl 1h --expiry never");
  EXPECT_EQ(rc, 1) << out;
  std::tie(rc, out) = Segctl(port, "incr u n --by x");
  EXPECT_EQ(rc, 1) << out;
  std::tie(rc, out) = Segctl(port, "get u --fields --field-prefix c");
  EXPECT_EQ(rc, 1) << out;
  // The server's refusals come back as errors.
  std::tie(rc, out) = Segctl(port, "incr u country2");
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Segctl(port, "field-max u score=str:x");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "InvalidArgument")) << out;
}

}  // namespace
}  // namespace segstore::server
