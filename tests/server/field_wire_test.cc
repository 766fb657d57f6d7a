// Profile fields over the binary protocol, frame by frame (RawConn) against
// the whole server in process (a store on a temporary file, the profile
// layer, ProfileService, the front end): the cases of proto/PROTOCOL.md,
// "Profile fields", whose answer depends on more than the codec (what is
// written when a request is refused, what a record too large for a write
// block answers), and the profile library's own guard on string values,
// which callers reach without the wire.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "integration/in_process.h"
#include "profile/field_names.h"
#include "proto/wire.h"
#include "segstore/profile.h"
#include "server/raw_conn.h"
#include "storage/test_util.h"
#include "support/msgpack_builder.h"
#include "support/wait_for.h"

namespace segstore::server {
namespace {

using proto::Op;
using segstore::testing::Mp;
using testing::Frame;
using testing::MakeFrame;
using testing::RawConn;
using Code = Status::Code;

constexpr UnixSeconds kStart = 1'790'000'000;
// The server's largest field value; with the store's 256 KiB write blocks a
// profile of a few such fields is larger than one block holds.
constexpr uint32_t kMaxFieldBytes = 65'536;

class FieldServerWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    p.max_field_bytes = kMaxFieldBytes;
    ServerOptions server;
    server.threads = 1;
    ProfileServiceOptions so;
    so.max_field_bytes = kMaxFieldBytes;
    served_.Start(o, nullptr, p, so, server);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_TRUE(raw_.Connect(served_.server->port()));
  }
  void TearDown() override {
    raw_.Close();
    served_.Stop();
  }

  // One request on the raw connection; its answer must carry `status`.
  Frame Call(Op op, std::string_view body, Code status) {
    const uint32_t id = ++next_id_;
    Frame f;
    EXPECT_TRUE(raw_.Write(MakeFrame(static_cast<uint8_t>(op), id, body)));
    EXPECT_TRUE(raw_.Expect(id, status, &f)) << proto::OpName(static_cast<uint8_t>(op));
    return f;
  }
  // The refusal's message (`status` must not be OK).
  std::string Refused(Op op, std::string_view body, Code status) {
    return proto::DecodeError(Call(op, body, status).body);
  }
  // Every live field of `user` ({"user", "fields": true}), decoded.
  GetResult AllFields(std::string_view user) {
    Frame f = Call(
        Op::kGet,
        Mp().Map(3).Str("user").Str(user).Str("projection").Str("ids").Str("fields").Bool(true),
        Code::kOk);
    GetResult r;
    const Status s = proto::Decode(f.body, {}, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return r;
  }
  // Record versions the store has written.
  uint64_t Writes() const { return served_.store->stats().writes; }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  testing::InProcessServer served_;
  RawConn raw_;
  uint32_t next_id_ = 0;
};

// {"user": user, "fields": [[name, <value>]]} with the value's bytes as given.
std::string SetOne(std::string_view user, std::string_view name, std::string_view value) {
  return std::string(
      Mp().Map(2).Str("user").Str(user).Str("fields").Arr(1).Arr(2).Str(name).Append(value));
}

// A str value that is not UTF-8 is refused, naming it, and nothing of the
// request is written: the answers of that user stay readable by strict
// decoders. The same bytes as a bin are a bytes value.
TEST_F(FieldServerWireTest, AStrValueThatIsNotUtf8IsRefusedAndNothingIsWritten) {
  const uint64_t writes = Writes();
  const std::string msg = Refused(Op::kFieldSet,
                                  Mp().Map(2)
                                      .Str("user")
                                      .Str("u")
                                      .Str("fields")
                                      .Arr(2)
                                      .Arr(2)
                                      .Str("country")
                                      .Str("FR")
                                      .Arr(2)
                                      .Str("city")
                                      .Str("Besan\xe7on"),  // Latin-1, not UTF-8
                                  Code::kInvalidArgument);
  EXPECT_NE(msg.find("fields[1].value"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not UTF-8"), std::string::npos) << msg;
  EXPECT_EQ(Writes(), writes);
  Call(Op::kGet, Mp().Map(2).Str("user").Str("u").Str("fields").Bool(true), Code::kNotFound);

  Call(Op::kFieldSet, SetOne("u", "city", Mp().Str("Besan\xc3\xa7on")), Code::kOk);
  Call(Op::kFieldSet, SetOne("u", "raw", Mp().Bin("Besan\xe7on")), Code::kOk);
  const GetResult r = AllFields("u");
  EXPECT_EQ(r.fields, (std::vector<Field>{{"city", FieldValue::String("Besan\xc3\xa7on"), kNever},
                                          {"raw", FieldValue::Bytes("Besan\xe7on"), kNever}}));
  // field_max takes no str at all; one that is not UTF-8 is refused as well.
  Refused(Op::kFieldMax,
          Mp().Map(3).Str("user").Str("u").Str("name").Str("n").Str("value").Str("\xff"),
          Code::kInvalidArgument);
}

// field_incr's window, when given, is "fixed" or "sliding": the empty
// string is neither, and nothing is written.
TEST_F(FieldServerWireTest, AnIncrementsWindowIsFixedOrSlidingNothingElse) {
  const uint64_t writes = Writes();
  for (std::string_view window : {"", "Fixed", "none"}) {
    const std::string msg =
        Refused(Op::kFieldIncrement,
                Mp().Map(3).Str("user").Str("u").Str("name").Str("n").Str("window").Str(window),
                Code::kInvalidArgument);
    EXPECT_NE(msg.find("window"), std::string::npos) << msg;
  }
  EXPECT_EQ(Writes(), writes);
  Call(Op::kFieldIncrement,
       Mp().Map(3).Str("user").Str("u").Str("name").Str("n").Str("window").Str("fixed"), Code::kOk);
  Call(Op::kFieldIncrement,
       Mp().Map(3).Str("user").Str("u").Str("name").Str("n").Str("window").Nil(), Code::kOk);
  EXPECT_EQ(AllFields("u").fields, (std::vector<Field>{{"n", FieldValue::Int(2), kNever}}));
}

// "fields": false asks for none, as leaving it out does: beside a
// "field_prefix" the prefix stands. true or an array (an empty one too) with
// a prefix is asking both: InvalidArgument. A prefix over 64 bytes is
// InvalidArgument.
TEST_F(FieldServerWireTest, GetFieldOptionsAsPublished) {
  Call(Op::kFieldSet,
       Mp().Map(2)
           .Str("user")
           .Str("u")
           .Str("fields")
           .Arr(2)
           .Arr(2)
           .Str("cap:1")
           .U(1)
           .Arr(2)
           .Str("country")
           .Str("FR"),
       Code::kOk);
  Frame f = Call(
      Op::kGet,
      Mp().Map(3).Str("user").Str("u").Str("fields").Bool(false).Str("field_prefix").Str("cap:"),
      Code::kOk);
  GetResult r;
  ASSERT_TRUE(proto::Decode(f.body, {}, &r).ok());
  EXPECT_TRUE(r.fields_asked);
  EXPECT_EQ(r.fields, (std::vector<Field>{{"cap:1", FieldValue::Int(1), kNever}}));
  f = Call(Op::kBatchGet,
           Mp().Map(3)
               .Str("users")
               .Arr(1)
               .Str("u")
               .Str("field_prefix")
               .Str("co")
               .Str("fields")
               .Bool(false),
           Code::kOk);
  proto::BatchGetResponse batch;
  ASSERT_TRUE(proto::Decode(f.body, {}, &batch).ok());
  ASSERT_EQ(batch.size(), 1u);
  ASSERT_TRUE(batch[0].ok());
  EXPECT_EQ(batch[0]->fields, (std::vector<Field>{{"country", FieldValue::String("FR"), kNever}}));

  Refused(Op::kGet,
          Mp().Map(3).Str("user").Str("u").Str("fields").Bool(true).Str("field_prefix").Str("c"),
          Code::kInvalidArgument);
  Refused(Op::kGet,
          Mp().Map(3).Str("user").Str("u").Str("fields").Arr(0).Str("field_prefix").Str("c"),
          Code::kInvalidArgument);
  const std::string msg = Refused(
      Op::kGet, Mp().Map(2).Str("user").Str("u").Str("field_prefix").Str(std::string(65, 'c')),
      Code::kInvalidArgument);
  EXPECT_NE(msg.find("field_prefix"), std::string::npos) << msg;
  Call(Op::kGet, Mp().Map(2).Str("user").Str("u").Str("field_prefix").Str(std::string(64, 'c')),
       Code::kOk);
}

// max_fields x max_field_bytes may pass what one write block holds (here
// 256 KiB blocks, 64 KiB values): a field write whose record would not fit
// is refused InvalidArgument and writes nothing; the profile stays as it
// was.
TEST_F(FieldServerWireTest, AFieldWriteWhoseRecordWouldNotFitAWriteBlockIsInvalidArgument) {
  std::string big(60'000, '\0');  // within max_field_bytes, and nothing to squeeze
  std::mt19937 random(7);
  for (char& c : big) c = static_cast<char>(random());
  for (int i = 0; i < 4; ++i) {
    Call(Op::kFieldSet, SetOne("u", "f" + std::to_string(i), Mp().Bin(big)), Code::kOk);
  }
  // The name table writes the four names' records asynchronously, and they
  // count among the engine's writes: counted once they are numbered.
  const profile::FieldNames& table = profile::FieldNamesOf(*served_.profiles);
  for (int i = 0; i < 4; ++i) {
    const std::string name = "f" + std::to_string(i);
    ASSERT_TRUE(segstore::testing::WaitFor([&] { return table.Find(name) != 0; },
                                           std::chrono::seconds(60), std::chrono::milliseconds(5)))
        << name << " not numbered within a minute";
  }
  const uint64_t writes = Writes();
  // A fifth makes the record too large for a block.
  std::string msg =
      Refused(Op::kFieldSet, SetOne("u", "f4", Mp().Bin(big)), Code::kInvalidArgument);
  EXPECT_NE(msg.find("bytes is over the limit of"), std::string::npos) << msg;
  EXPECT_EQ(Writes(), writes);
  EXPECT_EQ(AllFields("u").fields.size(), 4u);
  // So does one request of five for a user without a profile.
  Mp five;
  five.Map(2).Str("user").Str("v").Str("fields").Arr(5);
  for (int i = 0; i < 5; ++i) five.Arr(2).Str("f" + std::to_string(i)).Bin(big);
  msg = Refused(Op::kFieldSet, five, Code::kInvalidArgument);
  EXPECT_NE(msg.find("bytes is over the limit of"), std::string::npos) << msg;
  EXPECT_EQ(Writes(), writes);
  Call(Op::kGet, Mp().Map(2).Str("user").Str("v").Str("fields").Bool(true), Code::kNotFound);
}

// The profile library holds string values to UTF-8 itself (CheckFieldSet,
// and so ProfileSession's FieldSet and FieldMax), for callers that do not
// come through the wire's decoder: InvalidArgument naming the field, before
// any limit.
TEST_F(FieldServerWireTest, TheProfileLibraryRefusesAStringThatIsNotUtf8) {
  profile::ProfileOptions options;
  const std::vector<FieldUpdate> bad = {{"ok", FieldValue::String("fine"), kNever, false},
                                        {"city", FieldValue::String("Besan\xe7on"), kNever, false}};
  Status s = profile::CheckFieldSet(bad, kStart, options);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("city"), std::string_view::npos) << s.ToString();
  EXPECT_NE(s.message().find("UTF-8"), std::string_view::npos) << s.ToString();
  // Over the size limit too: the type's rule comes first, as on the wire.
  const std::vector<FieldUpdate> long_bad = {
      {"s", FieldValue::String(std::string(options.max_field_bytes + 1, '\xff')), kNever, false}};
  EXPECT_EQ(profile::CheckFieldSet(long_bad, kStart, options).code(), Code::kInvalidArgument);
  // The same bytes as bytes, and text, are fine.
  const std::vector<FieldUpdate> good = {
      {"city", FieldValue::String("Besan\xc3\xa7on"), kNever, false},
      {"raw", FieldValue::Bytes("Besan\xe7on"), kNever, false}};
  EXPECT_TRUE(profile::CheckFieldSet(good, kStart, options).ok());

  // And the session refuses it, writing nothing.
  auto session = served_.profiles->NewSession();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::optional<Result<FieldWriteResult>> out;
  (*session)->FieldSet({}, "lib", bad, [&out](Result<FieldWriteResult> r) { out.emplace(r); });
  while (!out) (*session)->Wait(std::chrono::milliseconds(10));
  EXPECT_EQ(out->status().code(), Code::kInvalidArgument) << out->status().ToString();
  EXPECT_TRUE((*session)->GetSync("lib").status().IsNotFound());
}

}  // namespace
}  // namespace segstore::server
