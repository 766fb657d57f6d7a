// segctl's field-set and field-max values (NAME=VALUE) against a scripted
// server (tests/client/fake_server.h): they follow the one rule of profile
// field files, loader::ParseFieldValue (src/loader/field_parser.h), so a
// value means the same typed on the command line as in a `load --fields`
// file; what that rule refuses never leaves segctl.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "client/fake_server.h"
#include "proto/wire.h"

#ifndef SEGCTL_PATH
#error "SEGCTL_PATH must name the segctl binary"
#endif

extern char** environ;

namespace segstore::tools {
namespace {

using client::testing::FakeConn;
using client::testing::FakeServer;
using client::testing::Frame;

// Runs segctl with `args` (no shell: any bytes pass as they are) against
// 127.0.0.1:port; its exit status and what it wrote to stdout and stderr.
std::pair<int, std::string> Segctl(uint16_t port, std::vector<std::string> args) {
  args.insert(args.begin(),
              {SEGCTL_PATH, "--server", "127.0.0.1:" + std::to_string(port), "--timeout", "5000"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (::pipe(out) != 0) return {-1, "pipe"};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, SEGCTL_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  if (spawned != 0) return {-1, "cannot run " SEGCTL_PATH};
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

// A single server: an empty cluster map, and every field write taken.
void SingleServer(FakeConn& conn, const Frame& f) {
  switch (static_cast<proto::Op>(f.op())) {
    case proto::Op::kClusterMap:
      conn.Reply(f, ClusterMap{});
      return;
    case proto::Op::kFieldSet:
      conn.Reply(f, proto::FieldWriteResponse{1, 1, false});
      return;
    case proto::Op::kFieldMax: {
      proto::FieldMaxRequest req;
      (void)proto::Decode(f.body, {}, &req);
      conn.Reply(f, proto::FieldMaxResponse{req.field.value, true, false});
      return;
    }
    default:
      conn.ReplyError(f, Status::Unsupported("not in this test"));
  }
}

using Sent = std::pair<std::string, FieldValue>;  // a field's name and value

// The fields of the writes the server received, decoded (none here has an
// expiry: each must be never).
std::vector<Sent> FieldsSent(FakeServer& server) {
  std::vector<FieldUpdate> got;
  for (const Frame& f : server.received()) {
    if (static_cast<proto::Op>(f.op()) == proto::Op::kFieldSet) {
      proto::FieldSetRequest req;
      const Status s = proto::Decode(f.body, {}, &req);
      EXPECT_TRUE(s.ok()) << s.ToString();
      got.insert(got.end(), req.fields.begin(), req.fields.end());
    } else if (static_cast<proto::Op>(f.op()) == proto::Op::kFieldMax) {
      proto::FieldMaxRequest req;
      const Status s = proto::Decode(f.body, {}, &req);
      EXPECT_TRUE(s.ok()) << s.ToString();
      got.push_back(req.field);
    }
  }
  std::vector<Sent> out;
  for (FieldUpdate& u : got) {
    EXPECT_EQ(u.expiry, kNever) << u.name;
    EXPECT_FALSE(u.ttl) << u.name;
    out.emplace_back(std::move(u.name), std::move(u.value));
  }
  return out;
}

// Untyped, a JSON number is an int or a double and anything else a str
// ("+33", "007", ".5" and "true" are text); TYPE: prefixes as in field
// files, "str:" the empty string, a time with an offset.
TEST(SegctlFieldValueTest, ValuesFollowTheFieldFileRule) {
  FakeServer server(SingleServer);
  auto [rc, out] =
      Segctl(server.port(), {"field-set", "u", "a=42", "b=-7", "c=0.5", "d=1e3", "e=+33", "f=007",
                             "g=.5", "h=FR", "i=true", "j=str:", "k=str:int:3", "l=bytes:00ff",
                             "m=caf\xc3\xa9", "n=time:2026-12-01T00:00:00+02:00", "o=time:0"});
  EXPECT_EQ(rc, 0) << out;
  const std::vector<Sent> want = {
      Sent("a", FieldValue::Int(42)),
      Sent("b", FieldValue::Int(-7)),
      Sent("c", FieldValue::Double(0.5)),
      Sent("d", FieldValue::Double(1000)),
      Sent("e", FieldValue::String("+33")),
      Sent("f", FieldValue::String("007")),
      Sent("g", FieldValue::String(".5")),
      Sent("h", FieldValue::String("FR")),
      Sent("i", FieldValue::String("true")),
      Sent("j", FieldValue::String("")),
      Sent("k", FieldValue::String("int:3")),
      Sent("l", FieldValue::Bytes(std::string("\0\xff", 2))),
      Sent("m", FieldValue::String("caf\xc3\xa9")),
      Sent("n", FieldValue::Time(1'796'076'000)),  // 2026-11-30T22:00:00Z
      Sent("o", FieldValue::Time(0)),
  };
  EXPECT_EQ(FieldsSent(server), want);

  // field-max reads its value by the same rule.
  FakeServer max_server(SingleServer);
  std::tie(rc, out) = Segctl(max_server.port(), {"field-max", "u", "seen=time:1790000000"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(FieldsSent(max_server),
            (std::vector<Sent>{Sent("seen", FieldValue::Time(1'790'000'000))}));
}

// What the rule refuses is refused before connecting, naming the field: an
// empty value (the empty string is "str:"), a str that is not UTF-8, a
// double that is not a number (inf, nan, hex), a time that is not one, a
// number out of range.
TEST(SegctlFieldValueTest, ValuesTheRuleRefusesNeverReachTheServer) {
  FakeServer server(SingleServer);
  const std::pair<std::string, std::string> refused[] = {
      {"x=", "empty"},
      {"x=str:caf\xe9", "UTF-8"},
      {"x=caf\xe9", "UTF-8"},
      {"x=double:inf", "not a number"},
      {"x=double:nan", "not a number"},
      {"x=double:0x10", "not a number"},
      {"x=int:1.5", "not a 64-bit integer"},
      {"x=99999999999999999999", "range"},
      {"x=time:never", "time"},
      {"x=bytes:0g", "hex"},
  };
  for (const auto& [arg, why] : refused) {
    auto [rc, out] = Segctl(server.port(), {"field-set", "u", "ok=1", arg});
    EXPECT_EQ(rc, 1) << arg << ": " << out;
    EXPECT_NE(out.find("field x: "), std::string::npos) << arg << ": " << out;
    EXPECT_NE(out.find(why), std::string::npos) << arg << ": " << out;
  }
  auto [rc, out] = Segctl(server.port(), {"field-max", "u", "seen=time:never"});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(server.connections(), 0);
  EXPECT_TRUE(server.received().empty());
}

}  // namespace
}  // namespace segstore::tools
