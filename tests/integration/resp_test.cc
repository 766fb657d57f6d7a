// The RESP port (proto/RESP.md) of a whole server in this process: replies
// held to their exact bytes in RESP2 and RESP3 through a raw socket, and
// the server driven by Debian's redis-cli and python3-redis, as the tools
// and libraries bidders use would drive it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "integration/in_process.h"
#include "segstore/client.h"
#include "storage/test_util.h"
#include "support/resp_conn.h"
#include "support/shell.h"
#include "support/test_pki.h"

namespace segstore::server {
namespace {

using segstore::testing::RespConn;
using segstore::testing::Shell;
using std::chrono::milliseconds;

constexpr UnixSeconds kStart = 1'790'000'000;
const std::string kSecret = "the RESP port secret, 32 bytes..";

class RespTest : public ::testing::Test {
 protected:
  void TearDown() override { served_.Stop(); }

  void Start(ServerOptions options = {}) {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    p.max_links = max_links_;
    ProfileServiceOptions so;
    options.threads = 2;
    options.resp_host = "127.0.0.1";
    options.resp_port = 0;
    served_.Start(o, nullptr, p, so, options);
  }

  void StartWithSecret(ServerOptions options = {}) {
    const std::string path = dir_.File("secrets");
    std::ofstream(path) << kSecret << "\n";
    ::chmod(path.c_str(), 0600);
    options.auth_secret_file = path;
    Start(std::move(options));
  }

  uint16_t port() const { return served_.server->resp_port(); }

  std::unique_ptr<RespConn> Connect() {
    auto c = std::make_unique<RespConn>();
    EXPECT_TRUE(c->Connect(port()));
    return c;
  }

  std::string Cli(const std::string& args) {
    auto [status, out] = Shell("redis-cli -p " + std::to_string(port()) + " " + args);
    EXPECT_EQ(status, 0) << args << ": " << out;
    return out;
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  uint32_t max_links_ = profile::ProfileOptions{}.max_links;  // set before Start
  testing::InProcessServer served_;
};

// The replies of SEG.UPSERT and SEG.GET below, in RESP2 and RESP3.
const std::string kUpserted2 =
    "*10\r\n$8\r\ninserted\r\n:2\r\n$7\r\nupdated\r\n:0\r\n$7\r\ntrimmed\r\n:0\r\n"
    "$5\r\ncount\r\n:2\r\n$9\r\nduplicate\r\n:0\r\n";
const std::string kGot2 =
    "*10\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:0\r\n"
    "$3\r\nids\r\n*2\r\n$3\r\n100\r\n$3\r\n200\r\n"
    "$7\r\nexpires\r\n*2\r\n:1790003600\r\n:1790007200\r\n"
    "$5\r\nattr1\r\n*2\r\n$-1\r\n:5\r\n";
const std::string kGot3 =
    "%5\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n#f\r\n"
    "$3\r\nids\r\n*2\r\n$3\r\n100\r\n$3\r\n200\r\n"
    "$7\r\nexpires\r\n*2\r\n:1790003600\r\n:1790007200\r\n"
    "$5\r\nattr1\r\n*2\r\n_\r\n:5\r\n";

TEST_F(RespTest, SegmentCommandsAnswerInRespTwoByteForByte) {
  Start();
  auto c = Connect();
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u1", "TTL", "100", "3600", "200", "7200", "ATTR1", "5"}),
            kUpserted2);
  EXPECT_EQ(c->Call({"seg.get", "u1"}), kGot2);
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "IDSONLY"}),
            "*6\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*2\r\n"
            "$3\r\n100\r\n$3\r\n200\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "COUNT"}),
            "*6\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "IDS", "150", "300", "LIMIT", "1"}),
            "*10\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n"
            "$3\r\n200\r\n$7\r\nexpires\r\n*1\r\n:1790007200\r\n$5\r\nattr1\r\n*1\r\n:5\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "WINDOW", "0", "1790005000"}),
            "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n"
            "$3\r\n100\r\n$7\r\nexpires\r\n*1\r\n:1790003600\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "NOTEXPIRING", "0", "1790005000", "IDSONLY"}),
            "*6\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n"
            "$3\r\n200\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "nobody"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.COUNT", "u1"}), ":2\r\n");
  EXPECT_EQ(c->Call({"SEG.COUNT", "u1", "IDS", "0", "150"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.COUNT", "nobody"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.MGET", "2", "nobody", "u1", "IDSONLY"}),
            "*2\r\n$-1\r\n*6\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n"
            "*2\r\n$3\r\n100\r\n$3\r\n200\r\n");
  EXPECT_EQ(c->Call({"EXISTS", "u1", "nobody", "u1"}), ":2\r\n");
  EXPECT_EQ(c->Call({"TYPE", "u1"}), "+hash\r\n");
  EXPECT_EQ(c->Call({"TYPE", "nobody"}), "+none\r\n");
  EXPECT_EQ(c->Call({"SEG.REMOVE", "u1", "100", "999"}),
            "*4\r\n$7\r\nremoved\r\n:1\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u1", "EXTEND", "200", "0"}),
            "*10\r\n$8\r\ninserted\r\n:0\r\n$7\r\nupdated\r\n:1\r\n$7\r\ntrimmed\r\n:0\r\n"
            "$5\r\ncount\r\n:1\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1"}),
            "*10\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n"
            "$3\r\n200\r\n$7\r\nexpires\r\n*1\r\n:0\r\n$5\r\nattr1\r\n*1\r\n:5\r\n");
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u2", "300", "1790000100", "301", "0"}).substr(0, 5), "*10\r\n");
  clock_.Advance(200);
  EXPECT_EQ(c->Call({"SEG.TRIM", "u2"}),
            "*6\r\n$7\r\ntrimmed\r\n:1\r\n$9\r\nremaining\r\n:1\r\n$9\r\nduplicate\r\n:0\r\n");
  // A profile whose every segment expired is no profile.
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u3", "300", "1790000300"}).substr(0, 5), "*10\r\n");
  clock_.Advance(200);
  EXPECT_EQ(c->Call({"SEG.GET", "u3"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"EXISTS", "u3"}), ":0\r\n");
  EXPECT_EQ(c->Call({"SEG.DEL", "u1"}), "*4\r\n$7\r\ndeleted\r\n:1\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(c->Call({"DEL", "u1", "u2", "nobody"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1"}), "$-1\r\n");
}

// A read's reply over the largest reply is refused LIMIT, as the binary
// protocol refuses a response over 64 MiB, and the connection goes on.
TEST_F(RespTest, AReplyOverTheLargestIsRefusedAndTheConnectionGoesOn) {
  ServerOptions o;
  o.resp_max_reply_bytes = 2000;
  Start(o);
  auto c = Connect();
  std::vector<std::string> upsert = {"SEG.UPSERT", "u1", "TTL"};
  for (int i = 0; i < 200; ++i) {
    upsert.push_back(std::to_string(1'000'000 + i));
    upsert.push_back("3600");
  }
  EXPECT_EQ(c->Call(upsert).substr(0, 5), "*10\r\n");
  const std::string refused =
      "-LIMIT the reply would be over 2000 bytes: ask for fewer users, a LIMIT or IDSONLY\r\n";
  EXPECT_EQ(c->Call({"SEG.GET", "u1"}), refused);
  EXPECT_EQ(c->Call({"HGETALL", "u1"}), refused);
  EXPECT_EQ(c->Call({"SEG.MGET", "2", "u1", "u1", "LIMIT", "40"}), refused);
  // 400 segments: their IDs alone would exceed the limit (refused before the
  // reply is built).
  EXPECT_EQ(c->Call({"SEG.MGET", "2", "u1", "u1", "IDSONLY"}), refused);
  // What fits is answered, on the same connection.
  const std::string some = c->Call({"SEG.GET", "u1", "LIMIT", "2"});
  EXPECT_EQ(some.substr(0, 32), "*8\r\n$5\r\ncount\r\n:200\r\n$5\r\nstale\r\n");
  EXPECT_NE(some.find("$7\r\n1000001\r\n"), std::string::npos) << some;
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "COUNT"}),
            "*6\r\n$5\r\ncount\r\n:200\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n");
  EXPECT_EQ(c->Call({"HLEN", "u1"}), ":200\r\n");
}

TEST_F(RespTest, HashReadsSeeSegmentsAsFieldsAndAttributesAsValues) {
  Start();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SEG.UPSERT", "u", "5", "1790000100", "7", "1790000200", "ATTR1", "3", "ATTR2",
                     "4", "9", "0", "ATTR2", "8"})
                .substr(0, 5),
            "*10\r\n");
  EXPECT_EQ(c->Call({"HGETALL", "u"}),
            "*6\r\n$1\r\n5\r\n$0\r\n\r\n$1\r\n7\r\n$3\r\n3:4\r\n$1\r\n9\r\n$2\r\n:8\r\n");
  EXPECT_EQ(c->Call({"HGET", "u", "7"}), "$3\r\n3:4\r\n");
  EXPECT_EQ(c->Call({"HGET", "u", "6"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"HGET", "nobody", "6"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"HMGET", "u", "9", "6", "5"}), "*3\r\n$2\r\n:8\r\n$-1\r\n$0\r\n\r\n");
  EXPECT_EQ(c->Call({"HMGET", "nobody", "9"}), "*1\r\n$-1\r\n");
  EXPECT_EQ(c->Call({"HKEYS", "u"}), "*3\r\n$1\r\n5\r\n$1\r\n7\r\n$1\r\n9\r\n");
  EXPECT_EQ(c->Call({"HVALS", "u"}), "*3\r\n$0\r\n\r\n$3\r\n3:4\r\n$2\r\n:8\r\n");
  EXPECT_EQ(c->Call({"HLEN", "u"}), ":3\r\n");
  EXPECT_EQ(c->Call({"HLEN", "nobody"}), ":0\r\n");
  EXPECT_EQ(c->Call({"HEXISTS", "u", "9"}), ":1\r\n");
  EXPECT_EQ(c->Call({"HEXISTS", "u", "8"}), ":0\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "4", "5", "9", "11", "7"}),
            "*4\r\n:100\r\n:-1\r\n:-2\r\n:200\r\n");
  EXPECT_EQ(c->Call({"HPTTL", "u", "FIELDS", "1", "5"}), "*1\r\n:100000\r\n");
  EXPECT_EQ(c->Call({"HEXPIRETIME", "u", "fields", "2", "5", "9"}), "*2\r\n:1790000100\r\n:-1\r\n");
  EXPECT_EQ(c->Call({"HPEXPIRETIME", "u", "FIELDS", "1", "7"}), "*1\r\n:1790000200000\r\n");
  EXPECT_EQ(c->Call({"HTTL", "nobody", "FIELDS", "2", "5", "9"}), "*2\r\n:-2\r\n:-2\r\n");
  // An expired field is gone for every read.
  clock_.Advance(150);
  EXPECT_EQ(c->Call({"HGET", "u", "5"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "2", "5", "7"}), "*2\r\n:-2\r\n:50\r\n");
  EXPECT_EQ(c->Call({"HLEN", "u"}), ":2\r\n");
  EXPECT_EQ(c->Call({"HDEL", "u", "7", "5", "6"}), ":1\r\n");
  EXPECT_EQ(c->Call({"HDEL", "nobody", "7"}), ":0\r\n");
  EXPECT_EQ(c->Call({"HDEL", "u", "9"}), ":1\r\n");
  EXPECT_EQ(c->Call({"HGETALL", "u"}), "*0\r\n");
  EXPECT_EQ(c->Call({"EXISTS", "u"}), ":0\r\n");
  // RESP3: a map, empty for a missing key.
  ASSERT_EQ(c->Call({"HELLO", "3"}).substr(0, 4), "%8\r\n");
  EXPECT_EQ(c->Call({"HGETALL", "u"}), "%0\r\n");
  ASSERT_EQ(c->Call({"SEG.UPSERT", "u", "5", "0", "ATTR1", "1"}).substr(0, 4), "%5\r\n");
  EXPECT_EQ(c->Call({"HGETALL", "u"}), "%1\r\n$1\r\n5\r\n$1\r\n1\r\n");
  EXPECT_EQ(c->Call({"HGET", "u", "6"}), "_\r\n");
}

TEST_F(RespTest, HashWritesAndFieldExpiryAsRedisSevenFour) {
  Start();
  auto c = Connect();
  // HSET: values are attributes; a field set again loses its expiry and
  // takes exactly the new value.
  EXPECT_EQ(c->Call({"HSET", "u", "5", "", "7", "3:4", "9", ":8", "7", "1"}), ":3\r\n");
  EXPECT_EQ(c->Call({"HGET", "u", "7"}), "$1\r\n1\r\n");
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "100", "FIELDS", "3", "5", "7", "11"}),
            "*3\r\n:1\r\n:1\r\n:-2\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "3", "5", "7", "9"}), "*3\r\n:100\r\n:100\r\n:-1\r\n");
  EXPECT_EQ(c->Call({"HSET", "u", "7", ""}), ":0\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "1", "7"}), "*1\r\n:-1\r\n");
  EXPECT_EQ(c->Call({"HGET", "u", "7"}), "$0\r\n\r\n");
  // Conditions: NX only without an expiry, XX only with one, GT/LT against
  // the current (never counts as +infinity).
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "50", "NX", "FIELDS", "2", "5", "7"}), "*2\r\n:0\r\n:1\r\n");
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "500", "XX", "FIELDS", "2", "5", "9"}), "*2\r\n:1\r\n:0\r\n");
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "400", "GT", "FIELDS", "3", "5", "7", "9"}),
            "*3\r\n:0\r\n:1\r\n:0\r\n");
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "300", "LT", "FIELDS", "3", "5", "7", "9"}),
            "*3\r\n:1\r\n:1\r\n:1\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "3", "5", "7", "9"}), "*3\r\n:300\r\n:300\r\n:300\r\n");
  // Milliseconds round up to whole seconds; absolute times.
  EXPECT_EQ(c->Call({"HPEXPIRE", "u", "1500", "FIELDS", "1", "5"}), "*1\r\n:1\r\n");
  EXPECT_EQ(c->Call({"HPTTL", "u", "FIELDS", "1", "5"}), "*1\r\n:2000\r\n");
  EXPECT_EQ(c->Call({"HEXPIREAT", "u", "1790001000", "FIELDS", "1", "7"}), "*1\r\n:1\r\n");
  EXPECT_EQ(c->Call({"HEXPIRETIME", "u", "FIELDS", "1", "7"}), "*1\r\n:1790001000\r\n");
  EXPECT_EQ(c->Call({"HPEXPIREAT", "u", "1790002000001", "FIELDS", "1", "7"}), "*1\r\n:1\r\n");
  EXPECT_EQ(c->Call({"HEXPIRETIME", "u", "FIELDS", "1", "7"}), "*1\r\n:1790002001\r\n");
  // HPERSIST: -1 without an expiry.
  EXPECT_EQ(c->Call({"HPERSIST", "u", "FIELDS", "3", "7", "9", "11"}), "*3\r\n:1\r\n:1\r\n:-2\r\n");
  EXPECT_EQ(c->Call({"HPERSIST", "u", "FIELDS", "1", "7"}), "*1\r\n:-1\r\n");
  // A time of 0, or one in the past, removes the field (2).
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "0", "FIELDS", "1", "5"}), "*1\r\n:2\r\n");
  EXPECT_EQ(c->Call({"HEXPIREAT", "u", "1700000000", "FIELDS", "1", "9"}), "*1\r\n:2\r\n");
  EXPECT_EQ(c->Call({"HKEYS", "u"}), "*1\r\n$1\r\n7\r\n");
  EXPECT_EQ(c->Call({"HEXPIRE", "nobody", "10", "FIELDS", "2", "1", "2"}), "*2\r\n:-2\r\n:-2\r\n");
  // HSETEX and HGETEX (Redis 8).
  EXPECT_EQ(c->Call({"HSETEX", "u", "EX", "60", "FIELDS", "2", "20", "1", "21", "2"}), ":1\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "2", "20", "21"}), "*2\r\n:60\r\n:60\r\n");
  EXPECT_EQ(c->Call({"HSETEX", "u", "PXAT", "1790000500000", "FIELDS", "1", "22", "3"}), ":1\r\n");
  EXPECT_EQ(c->Call({"HEXPIRETIME", "u", "FIELDS", "1", "22"}), "*1\r\n:1790000500\r\n");
  EXPECT_EQ(c->Call({"HSETEX", "u", "FNX", "FIELDS", "1", "20", "1"}).substr(0, 26),
            "-ERR HSETEX: FNX is not su");
  EXPECT_EQ(c->Call({"HGETEX", "u", "EX", "30", "FIELDS", "3", "20", "21", "99"}),
            "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "2", "20", "21"}), "*2\r\n:30\r\n:30\r\n");
  EXPECT_EQ(c->Call({"HGETEX", "u", "PERSIST", "FIELDS", "1", "20"}), "*1\r\n$1\r\n1\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "1", "20"}), "*1\r\n:-1\r\n");
  EXPECT_EQ(c->Call({"HGETEX", "u", "FIELDS", "1", "21"}), "*1\r\n$1\r\n2\r\n");
  // Fields expire on the store's clock.
  clock_.Advance(31);
  EXPECT_EQ(c->Call({"HMGET", "u", "20", "21"}), "*2\r\n$1\r\n1\r\n$-1\r\n");
  // Errors name what is wrong and write nothing.
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "-1", "FIELDS", "1", "20"}).substr(0, 36),
            "-ERR HEXPIRE: invalid expire time '-");
  EXPECT_EQ(c->Call({"HEXPIRE", "u", "10", "XY", "FIELDS", "1", "20"}),
            "-ERR HEXPIRE: mandatory argument FIELDS is missing or not at the right position\r\n");
  EXPECT_EQ(c->Call({"HSET", "u", "20", "x"}).substr(0, 37),
            "-ERR HSET: the value of field 20 must");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "1", "20"}), "*1\r\n:-1\r\n");
}

TEST_F(RespTest, HashFieldsMustBeSegmentIds) {
  Start();
  auto c = Connect();
  for (const char* field : {"abc", "007", "-1", "+1", "18446744073709551616", ""}) {
    const std::string got = c->Call({"HGET", "u", field});
    EXPECT_EQ(got.substr(0, 16), "-ERR HGET: field") << field << ": " << got;
    EXPECT_NE(got.find("is not a segment ID"), std::string::npos) << got;
  }
  EXPECT_EQ(c->Call({"HGET", "u", "18446744073709551615"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "5", "1", "5"}),
            "-ERR HTTL: mandatory argument FIELDS is missing or not at the right position\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "2", "5"}),
            "-ERR HTTL: the numfields parameter must match the number of arguments\r\n");
  EXPECT_EQ(c->Call({"HTTL", "u", "FIELDS", "0", "5"}),
            "-ERR HTTL: numfields must be a whole number greater than 0\r\n");
  EXPECT_EQ(c->Call({"HDEL", "u", "5", "x"}).substr(0, 23), "-ERR HDEL: field 'x' is");
}

TEST_F(RespTest, HelloThreeSwitchesToRespThree) {
  Start();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SEG.UPSERT", "u1", "TTL", "100", "3600", "200", "7200", "ATTR1", "5"}),
            kUpserted2);
  const std::string hello = c->Call({"HELLO", "3", "SETNAME", "bidder-7"});
  ASSERT_EQ(hello.substr(0, 4), "%8\r\n") << hello;
  EXPECT_NE(hello.find("$5\r\nproto\r\n:3\r\n"), std::string::npos) << hello;
  EXPECT_NE(hello.find("$7\r\nversion\r\n$5\r\n7.4.0\r\n"), std::string::npos) << hello;
  EXPECT_NE(hello.find("$8\r\nsegstore\r\n$"), std::string::npos) << hello;
  EXPECT_EQ(c->Call({"SEG.GET", "u1"}), kGot3);
  EXPECT_EQ(c->Call({"SEG.GET", "nobody"}), "_\r\n");
  EXPECT_EQ(c->Call({"CLIENT", "GETNAME"}), "$8\r\nbidder-7\r\n");
  const std::string info = c->Call({"INFO", "keyspace"});
  EXPECT_EQ(info.substr(0, 1), "=") << info;
  EXPECT_NE(info.find("txt:# Keyspace\r\ndb0:keys=1,"), std::string::npos) << info;
  // Back to RESP2.
  EXPECT_EQ(c->Call({"HELLO", "2"}).substr(0, 5), "*16\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1"}), kGot2);
  EXPECT_EQ(c->Call({"HELLO", "4"}), "-NOPROTO unsupported protocol version\r\n");
  EXPECT_EQ(c->Call({"RESET"}), "+RESET\r\n");
  EXPECT_EQ(c->Call({"CLIENT", "GETNAME"}), "$-1\r\n");
}

TEST_F(RespTest, RepliesComeInCommandOrderHoweverTheyComplete) {
  Start();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SEG.UPSERT", "u1", "TTL", "100", "3600", "200", "7200", "ATTR1", "5"}),
            kUpserted2);
  // Local answers (ECHO), device reads (SEG.GET), errors found before the
  // service (a bad option) and by it (a user ID over the limit) in one write.
  std::string burst;
  std::vector<std::string> want;
  for (int i = 0; i < 300; ++i) {
    switch (i % 4) {
      case 0:
        burst += RespConn::Command({"ECHO", "m" + std::to_string(i)});
        want.push_back("$" + std::to_string(1 + std::to_string(i).size()) + "\r\nm" +
                       std::to_string(i) + "\r\n");
        break;
      case 1:
        burst += RespConn::Command({"SEG.GET", "u1"});
        want.push_back(kGot2);
        break;
      case 2:
        burst += RespConn::Command({"SEG.GET", "u1", "LIMIT", "x"});
        want.push_back("");  // an ERR line
        break;
      case 3:
        burst += RespConn::Command({"SEG.GET", std::string(300, 'k')});
        want.push_back("");
        break;
    }
  }
  ASSERT_TRUE(c->Write(burst));
  for (size_t i = 0; i < want.size(); ++i) {
    auto reply = c->Read();
    ASSERT_TRUE(reply.has_value()) << "reply " << i;
    if (want[i].empty()) {
      EXPECT_EQ(reply->substr(0, 5), "-ERR ") << i << ": " << *reply;
    } else {
      EXPECT_EQ(*reply, want[i]) << i;
    }
  }
}

TEST_F(RespTest, InlineCommandsAndTheirQuotes) {
  Start();
  auto c = Connect();
  ASSERT_TRUE(c->Write("PING\r\n\r\necho \"a b\\x41\\n\" 'c d'\r\nECHO x\n"));
  EXPECT_EQ(c->Read().value_or(""), "+PONG\r\n");
  EXPECT_EQ(c->Read().value_or(""), "-ERR wrong number of arguments for 'echo' command\r\n");
  EXPECT_EQ(c->Read().value_or(""), "$1\r\nx\r\n");
  ASSERT_TRUE(c->Write("ECHO \"a b\\x41\\n\"\r\n"));
  EXPECT_EQ(c->Read().value_or(""), "$5\r\na bA\n\r\n");
}

TEST_F(RespTest, ErrorsNameTheCommandAndWhatIsWrong) {
  Start();
  auto c = Connect();
  EXPECT_EQ(c->Call({"HINCRBY", "u1", "5", "1"}),
            "-ERR unknown command 'HINCRBY', with args beginning with: 'u1' '5' '1' (segstore "
            "answers the commands COMMAND lists; proto/RESP.md)\r\n");
  EXPECT_EQ(c->Call({"SEG.GET"}), "-ERR wrong number of arguments for 'seg.get' command\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "LIMIT", "-1"}),
            "-ERR SEG.GET: LIMIT must be a whole number from 0 to 4294967295 written without "
            "sign or leading zeros, not '-1'\r\n");
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u1", "SET"}),
            "-ERR wrong number of arguments for 'seg.upsert' command\r\n");
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u1", "SET", "7"}),
            "-ERR SEG.UPSERT: segment 7 has no value\r\n");
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u1", "7", "10", "ATTR1"}),
            "-ERR SEG.UPSERT: ATTR1 of segment 7 is missing\r\n");
  EXPECT_EQ(c->Call({"SEG.UPSERT", "u1", "WRITEID", "00", "7", "10"}),
            "-ERR SEG.UPSERT: WRITEID must be 32 hexadecimal digits\r\n");
  // The service's own checks come back as they are (the user ID's limit).
  const std::string big = c->Call({"SEG.GET", std::string(300, 'k')});
  EXPECT_EQ(big.substr(0, 5), "-ERR ") << big;
  EXPECT_NE(big.find("user"), std::string::npos) << big;
  // In a batch, a bad user fails alone: an error element in its place.
  EXPECT_EQ(c->Call({"SEG.MGET", "3", "nobody", std::string(300, 'k'), "", "IDSONLY"}),
            "*3\r\n$-1\r\n-ERR users[1]: user ID of 300 bytes, the limit is 256\r\n"
            "-ERR users[2]: empty user ID\r\n");
  EXPECT_EQ(c->Call({"SELECT", "1"}), "-ERR DB index is out of range\r\n");
  EXPECT_EQ(c->Call({"SELECT", "0"}), "+OK\r\n");
  // Nothing stored was touched by any of it.
  EXPECT_EQ(c->Call({"DBSIZE"}), ":0\r\n");
}

TEST_F(RespTest, BrokenBytesGetAProtocolErrorAfterEarlierRepliesThenTheConnectionCloses) {
  Start();
  auto c = Connect();
  ASSERT_TRUE(c->Write("*1\r\n$4\r\nPING\r\n*1\r\nX\r\n*1\r\n$4\r\nPING\r\n"));
  EXPECT_EQ(c->Read().value_or(""), "+PONG\r\n");
  EXPECT_EQ(c->Read().value_or(""), "-ERR Protocol error: expected '$', got 'X'\r\n");
  EXPECT_FALSE(c->Read().has_value());
  EXPECT_TRUE(c->closed());
  // A command over max_frame_bytes is refused before its bytes come.
  c = Connect();
  ASSERT_TRUE(c->Write("*2\r\n$4\r\nECHO\r\n$999999999\r\n"));
  const std::string over = c->Read().value_or("");
  EXPECT_EQ(over.substr(0, 43), "-ERR Protocol error: command of more than 4") << over;
  EXPECT_FALSE(c->Read().has_value());
  EXPECT_TRUE(c->closed());
  EXPECT_GE(served_.server->counters().broken_frames, 2u);
}

TEST_F(RespTest, QuitAnswersWhatCameBeforeAndNothingAfter) {
  Start();
  auto c = Connect();
  ASSERT_TRUE(c->Write(RespConn::Command({"SEG.UPSERT", "u1", "100", "0"}) +
                       RespConn::Command({"QUIT"}) +
                       RespConn::Command({"SEG.UPSERT", "u2", "100", "0"})));
  EXPECT_EQ(c->Read().value_or("").substr(0, 5), "*10\r\n");
  EXPECT_EQ(c->Read().value_or(""), "+OK\r\n");
  EXPECT_FALSE(c->Read().has_value());
  EXPECT_TRUE(c->closed());
  auto d = Connect();
  EXPECT_EQ(d->Call({"EXISTS", "u1", "u2"}), ":1\r\n");
}

TEST_F(RespTest, TheSharedSecretComesFirst) {
  StartWithSecret();
  auto c = Connect();
  EXPECT_EQ(c->Call({"PING"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(c->Call({"HELLO", "3"}).substr(0, 8), "-NOAUTH ");
  EXPECT_EQ(c->Call({"AUTH", kSecret}), "+OK\r\n");
  EXPECT_EQ(c->Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(c->Call({"RESET"}), "+RESET\r\n");
  EXPECT_EQ(c->Call({"PING"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(c->Call({"HELLO", "3", "AUTH", "default", kSecret}).substr(0, 4), "%8\r\n");
  EXPECT_EQ(c->Call({"PING"}), "+PONG\r\n");

  // A wrong secret is answered and the connection closed, as on the binary port.
  auto d = Connect();
  EXPECT_EQ(d->Call({"AUTH", "default", "wrong"}),
            "-WRONGPASS invalid username-password pair or user is disabled (the connection "
            "closes)\r\n");
  EXPECT_FALSE(d->Read().has_value());
  EXPECT_TRUE(d->closed());
  EXPECT_EQ(served_.server->counters().auth_failures, 1u);
  // Another user name is never right.
  auto e = Connect();
  EXPECT_EQ(e->Call({"AUTH", "admin", kSecret}).substr(0, 11), "-WRONGPASS ");

  // redis-cli with -a, and without.
  EXPECT_EQ(Cli("--no-auth-warning -a '" + kSecret + "' SEG.UPSERT u1 100 0 | head -2"),
            "inserted\n1\n");
  EXPECT_EQ(Cli("SEG.GET u1").substr(0, 32), "NOAUTH Authentication required.\n");
}

TEST_F(RespTest, WithoutASecretAuthIsAnError) {
  Start();
  auto c = Connect();
  EXPECT_EQ(c->Call({"AUTH", "x"}).substr(0, 41), "-ERR AUTH called without any password con");
  // HELLO's AUTH takes any password, as Redis's default user without one.
  EXPECT_EQ(c->Call({"HELLO", "2", "AUTH", "default", "x"}).substr(0, 5), "*16\r\n");
}

TEST_F(RespTest, TlsWithRedisCli) {
  auto pki = segstore::testing::MakeTestPki(dir_.File("pki"));
  ASSERT_TRUE(pki.ok()) << pki.status().ToString();
  ServerOptions o;
  o.tls.cert_file = pki->server_cert;
  o.tls.key_file = pki->server_key;
  Start(o);
  const std::string tls = "--tls --cacert " + pki->ca_cert + " ";
  EXPECT_EQ(Cli(tls + "SEG.UPSERT u1 TTL 5 60 | head -2"), "inserted\n1\n");
  EXPECT_EQ(Cli(tls + "--no-raw SEG.GET u1 IDSONLY"),
            "1) \"count\"\n2) (integer) 1\n3) \"stale\"\n4) (integer) 0\n5) \"ids\"\n"
            "6) 1) \"5\"\n");
  // Plain TCP to a TLS port gets nothing and is closed.
  auto [status, out] = Shell("redis-cli -p " + std::to_string(port()) + " PING");
  EXPECT_NE(out.find("PONG"), 0u) << out;
}

TEST_F(RespTest, RedisCliDrivesEveryCommandGroup) {
  Start();
  EXPECT_EQ(Cli("PING"), "PONG\n");
  EXPECT_EQ(Cli("SEG.UPSERT u1 TTL 100 3600 200 7200 ATTR1 5 ATTR2 6 | sed -n 2p"), "2\n");
  EXPECT_EQ(Cli("--no-raw SEG.GET u1 IDS 200 200"),
            " 1) \"count\"\n 2) (integer) 1\n 3) \"stale\"\n 4) (integer) 0\n 5) \"ids\"\n"
            " 6) 1) \"200\"\n 7) \"expires\"\n 8) 1) (integer) 1790007200\n 9) \"attr1\"\n"
            "10) 1) (integer) 5\n11) \"attr2\"\n12) 1) (integer) 6\n");
  EXPECT_EQ(Cli("-3 --no-raw SEG.GET u1 IDS 200 200"),
            "1# \"count\" => (integer) 1\n2# \"stale\" => (false)\n3# \"ids\" => 1) \"200\"\n"
            "4# \"expires\" => 1) (integer) 1790007200\n5# \"attr1\" => 1) (integer) 5\n"
            "6# \"attr2\" => 1) (integer) 6\n");
  EXPECT_EQ(Cli("--no-raw SEG.GET nobody"), "(nil)\n");
  EXPECT_EQ(Cli("SEG.COUNT u1"), "2\n");
  EXPECT_EQ(Cli("EXISTS u1 u9"), "1\n");
  EXPECT_EQ(Cli("CLIENT ID").empty(), false);
  EXPECT_EQ(Cli("COMMAND COUNT"), std::to_string(RespCommandTable().size()) + "\n");
  const std::string info = Cli("INFO");
  EXPECT_NE(info.find("redis_version:7.4.0"), std::string::npos) << info;
  EXPECT_NE(info.find("db0:keys=1,"), std::string::npos) << info;
  // Many commands through one connection, as a loader would send them.
  std::string script;
  for (int i = 0; i < 500; ++i) {
    script += "SEG.UPSERT bulk" + std::to_string(i) + " TTL " + std::to_string(i) + " 600\n";
  }
  std::ofstream(dir_.File("script")) << script;
  auto [status, out] = Shell("redis-cli -p " + std::to_string(port()) + " < " +
                             dir_.File("script") + " | grep -c inserted");
  EXPECT_EQ(out, "500\n");
  EXPECT_EQ(Cli("DBSIZE"), "501\n");
}

TEST_F(RespTest, PythonRedisClient) {
  Start();
  auto [status, out] =
      Shell("/usr/bin/python3 " SEGSTORE_SOURCE_DIR "/tests/integration/resp_redis_py.py " +
            std::to_string(port()));
  EXPECT_EQ(status, 0) << out;
}

TEST_F(RespTest, DeadlinesCloseSlowAndUnauthenticatedConnections) {
  ServerOptions o;
  o.frame_timeout = milliseconds(300);
  StartWithSecret(o);
  // No secret in time.
  auto c = Connect();
  EXPECT_EQ(c->Read(milliseconds(10000)).value_or(""),
            "-NOAUTH not authenticated within 300 ms\r\n");
  EXPECT_FALSE(c->Read().has_value());
  EXPECT_TRUE(c->closed());
  // A command begun and never finished.
  auto d = Connect();
  ASSERT_EQ(d->Call({"AUTH", kSecret}), "+OK\r\n");
  ASSERT_TRUE(d->Write("*2\r\n$4\r\nECHO\r\n$10\r\nabc"));
  EXPECT_EQ(d->Read(milliseconds(10000)).value_or(""),
            "-LIMIT a request did not arrive whole within 300 ms\r\n");
  EXPECT_FALSE(d->Read().has_value());
  EXPECT_TRUE(d->closed());
}

TEST_F(RespTest, TooManyConnectionsIsSaidInRedisWords) {
  ServerOptions o;
  o.max_connections = 1;
  Start(o);
  auto c = Connect();
  ASSERT_EQ(c->Call({"PING"}), "+PONG\r\n");
  auto d = Connect();
  EXPECT_EQ(d->Read().value_or(""),
            "-ERR max number of clients reached: too many connections (limit 1)\r\n");
  EXPECT_FALSE(d->Read().has_value());
  EXPECT_EQ(c->Call({"PING"}), "+PONG\r\n");
}

// ---- profile bridging ----

// home (segment 1, an hour), work (2) and phone (3) in one group; other (4)
// in none. Each upsert's reply checked short.
void LinkFixture(RespConn* c) {
  for (const auto& [user, id, value] : std::vector<std::array<std::string, 3>>{
           {"home", "1", "3600"}, {"work", "2", "0"}, {"phone", "3", "0"}, {"other", "4", "0"}}) {
    const std::vector<std::string> ttl = {"SEG.UPSERT", user, "TTL", id, value};
    ASSERT_EQ(c->Call(value == "0" ? std::vector<std::string>{"SEG.UPSERT", user, id, value} : ttl)
                  .substr(0, 5),
              "*10\r\n");
  }
}

TEST_F(RespTest, LinkCommandsAnswerInRespTwoByteForByte) {
  max_links_ = 2;
  Start();
  auto c = Connect();
  LinkFixture(c.get());
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(c->Call({"SEG.LINK", "work", "home"}),
            "*6\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$7\r\nmembers\r\n:1\r\n$5\r\nmoved\r\n:0\r\n");
  // A member as the master: its master's group.
  EXPECT_EQ(c->Call({"seg.link", "phone", "work", "ttl", "3600"}),
            "*6\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$7\r\nmembers\r\n:2\r\n$5\r\nmoved\r\n:0\r\n");
  // Past max_links: LimitExceeded, nothing written.
  EXPECT_EQ(c->Call({"SEG.LINK", "other", "home"}),
            "-LIMIT the group of 'home' would have 3 linked users; the limit is 2\r\n");
  EXPECT_EQ(c->Call({"SEG.MASTEROF", "other"}), "$-1\r\n");

  // The merged view names its master and how many profiles it merged.
  const std::string merged =
      "*12\r\n$5\r\ncount\r\n:3\r\n$5\r\nstale\r\n:0\r\n"
      "$3\r\nids\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
      "$7\r\nexpires\r\n*3\r\n:1790003600\r\n:0\r\n:0\r\n"
      "$6\r\nmaster\r\n$4\r\nhome\r\n$8\r\nprofiles\r\n:3\r\n";
  EXPECT_EQ(c->Call({"SEG.GET", "phone"}), merged);
  EXPECT_EQ(c->Call({"SEG.GET", "home"}), merged);
  EXPECT_EQ(c->Call({"SEG.GET", "work", "IDSONLY"}),
            "*10\r\n$5\r\ncount\r\n:3\r\n$5\r\nstale\r\n:0\r\n"
            "$3\r\nids\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
            "$6\r\nmaster\r\n$4\r\nhome\r\n$8\r\nprofiles\r\n:3\r\n");
  // OWN: the user's own profile, as a user in no group is answered.
  const std::string own_phone =
      "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n3\r\n"
      "$7\r\nexpires\r\n*1\r\n:0\r\n";
  EXPECT_EQ(c->Call({"SEG.GET", "phone", "OWN"}), own_phone);
  EXPECT_EQ(c->Call({"SEG.GET", "other"}),
            "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n4\r\n"
            "$7\r\nexpires\r\n*1\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.MGET", "3", "work", "other", "nobody", "IDSONLY"}),
            "*3\r\n*10\r\n$5\r\ncount\r\n:3\r\n$5\r\nstale\r\n:0\r\n"
            "$3\r\nids\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
            "$6\r\nmaster\r\n$4\r\nhome\r\n$8\r\nprofiles\r\n:3\r\n"
            "*6\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n4\r\n"
            "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.MGET", "1", "phone", "own"}), "*1\r\n" + own_phone);
  // The hash commands read the merged view, with no pairs of their own.
  EXPECT_EQ(c->Call({"HGETALL", "phone"}),
            "*6\r\n$1\r\n1\r\n$0\r\n\r\n$1\r\n2\r\n$0\r\n\r\n$1\r\n3\r\n$0\r\n\r\n");
  EXPECT_EQ(c->Call({"HKEYS", "work"}), "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n");
  EXPECT_EQ(c->Call({"HTTL", "phone", "FIELDS", "2", "1", "4"}), "*2\r\n:3600\r\n:-2\r\n");

  EXPECT_EQ(c->Call({"SEG.MASTEROF", "phone"}), "$4\r\nhome\r\n");
  EXPECT_EQ(c->Call({"SEG.MASTEROF", "home"}), "$4\r\nhome\r\n");
  EXPECT_EQ(c->Call({"SEG.MASTEROF", "nobody"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "phone", "work"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "home", "phone"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "phone", "other"}), ":0\r\n");
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "other", "other"}), ":1\r\n");

  // Pages: the cursor is the last user listed, "" after the last page.
  EXPECT_EQ(c->Call({"SEG.LINKS", "home", "COUNT", "1"}),
            "*6\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$5\r\nlinks\r\n*1\r\n"
            "*2\r\n$5\r\nphone\r\n:1790003600\r\n$4\r\nnext\r\n$5\r\nphone\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "work", "CURSOR", "phone", "COUNT", "1"}),
            "*6\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$5\r\nlinks\r\n*1\r\n"
            "*2\r\n$4\r\nwork\r\n:0\r\n$4\r\nnext\r\n$0\r\n\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "phone"}),
            "*6\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$5\r\nlinks\r\n*2\r\n"
            "*2\r\n$5\r\nphone\r\n:1790003600\r\n*2\r\n$4\r\nwork\r\n:0\r\n"
            "$4\r\nnext\r\n$0\r\n\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "other"}), "$-1\r\n");

  EXPECT_EQ(c->Call({"SEG.UNLINK", "work"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.UNLINK", "work"}), ":0\r\n");
  EXPECT_EQ(c->Call({"SEG.UNLINK", "nobody"}), ":0\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "work"}),
            "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n2\r\n"
            "$7\r\nexpires\r\n*1\r\n:0\r\n");
  // A master's unlink dissolves its group.
  EXPECT_EQ(c->Call({"SEG.UNLINK", "home"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.MASTEROF", "phone"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "phone"}), own_phone);
  // A link's TTL ends it.
  EXPECT_EQ(c->Call({"SEG.LINK", "phone", "other", "TTL", "60"}).substr(0, 4), "*6\r\n");
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "phone", "other"}), ":1\r\n");
  clock_.Advance(61);
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "phone", "other"}), ":0\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "phone"}), own_phone);
}

TEST_F(RespTest, LinkCommandsAnswerInRespThree) {
  Start();
  auto c = Connect();
  LinkFixture(c.get());
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(c->Call({"HELLO", "3"}).substr(0, 4), "%8\r\n");
  EXPECT_EQ(c->Call({"SEG.LINK", "work", "phone"}),
            "%3\r\n$6\r\nmaster\r\n$5\r\nphone\r\n$7\r\nmembers\r\n:1\r\n$5\r\nmoved\r\n:0\r\n");
  // A master linked elsewhere takes its group along.
  EXPECT_EQ(c->Call({"SEG.LINK", "phone", "home"}),
            "%3\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$7\r\nmembers\r\n:2\r\n$5\r\nmoved\r\n:1\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "work", "IDSONLY"}),
            "%5\r\n$5\r\ncount\r\n:3\r\n$5\r\nstale\r\n#f\r\n"
            "$3\r\nids\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
            "$6\r\nmaster\r\n$4\r\nhome\r\n$8\r\nprofiles\r\n:3\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "work", "IDSONLY", "OWN"}),
            "%3\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n#f\r\n$3\r\nids\r\n*1\r\n$1\r\n2\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "other", "COUNT"}),
            "%3\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n#f\r\n$3\r\nids\r\n*0\r\n");
  EXPECT_EQ(c->Call({"HGETALL", "work"}),
            "%3\r\n$1\r\n1\r\n$0\r\n\r\n$1\r\n2\r\n$0\r\n\r\n$1\r\n3\r\n$0\r\n\r\n");
  EXPECT_EQ(c->Call({"SEG.MASTEROF", "work"}), "$4\r\nhome\r\n");
  EXPECT_EQ(c->Call({"SEG.MASTEROF", "other"}), "_\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "home"}),
            "%3\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$5\r\nlinks\r\n*2\r\n"
            "*2\r\n$5\r\nphone\r\n:0\r\n*2\r\n$4\r\nwork\r\n:0\r\n$4\r\nnext\r\n$0\r\n\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "other"}), "_\r\n");
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "work", "home"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.CONNECTED", "work", "other"}), ":0\r\n");
  EXPECT_EQ(c->Call({"SEG.UNLINK", "phone"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.UNLINK", "phone"}), ":0\r\n");
}

TEST_F(RespTest, LinkCommandErrorsNameTheCommandAndTheArgument) {
  Start();
  auto c = Connect();
  for (const auto& [name, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"seg.link", {"SEG.LINK", "u"}},
           {"seg.unlink", {"SEG.UNLINK"}},
           {"seg.masterof", {"SEG.MASTEROF"}},
           {"seg.masterof", {"SEG.MASTEROF", "u", "v"}},
           {"seg.links", {"SEG.LINKS"}},
           {"seg.connected", {"SEG.CONNECTED", "a"}},
           {"seg.connected", {"SEG.CONNECTED", "a", "b", "c"}}}) {
    EXPECT_EQ(c->Call(args), "-ERR wrong number of arguments for '" + name + "' command\r\n");
  }
  EXPECT_EQ(c->Call({"SEG.LINK", "u", "m", "TTL", "soon"}),
            "-ERR SEG.LINK: TTL must be a whole number from 0 to 4294967295 written without "
            "sign or leading zeros, not 'soon'\r\n");
  EXPECT_EQ(c->Call({"SEG.LINK", "u", "m", "TTL"}), "-ERR SEG.LINK: TTL is missing\r\n");
  EXPECT_EQ(c->Call({"SEG.LINK", "u", "m", "FOREVER"}),
            "-ERR SEG.LINK: unknown option 'FOREVER' (TTL, WRITEID)\r\n");
  EXPECT_EQ(c->Call({"SEG.UNLINK", "u", "NOW"}),
            "-ERR SEG.UNLINK: unknown option 'NOW' (WRITEID)\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "u", "COUNT", "0"}),
            "-ERR SEG.LINKS: COUNT must be at least 1\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "u", "COUNT", "-1"}),
            "-ERR SEG.LINKS: COUNT must be a whole number from 0 to 4294967295 written without "
            "sign or leading zeros, not '-1'\r\n");
  EXPECT_EQ(c->Call({"SEG.LINKS", "u", "MATCH", "*"}),
            "-ERR SEG.LINKS: unknown option 'MATCH' (CURSOR, COUNT)\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u", "OWNED"}),
            "-ERR SEG.GET: unknown option 'OWNED' (WINDOW, NOTEXPIRING, IDS, COUNT, LIMIT, "
            "IDSONLY, OWN, FIELDS, ALLFIELDS, FIELDPREFIX)\r\n");
  // The operation's own refusals come back with their status's prefix.
  EXPECT_EQ(c->Call({"SEG.LINK", "u", "u"}), "-ERR a user cannot be linked to itself\r\n");
  const std::string big = c->Call({"SEG.LINK", std::string(300, 'k'), "m"});
  EXPECT_EQ(big.substr(0, 5), "-ERR ") << big;
  EXPECT_NE(big.find("300 bytes"), std::string::npos) << big;
  const std::string cursor = c->Call({"SEG.LINKS", "u", "CURSOR", std::string(300, 'k')});
  EXPECT_EQ(cursor.substr(0, 5), "-ERR ") << cursor;
  // Nothing stored was touched by any of it.
  EXPECT_EQ(c->Call({"DBSIZE"}), ":0\r\n");

  // Keys as COMMAND reports them: SEG.LINK routes by its user alone.
  EXPECT_EQ(c->Call({"COMMAND", "GETKEYS", "SEG.LINK", "u", "m", "TTL", "5"}), "*1\r\n$1\r\nu\r\n");
  EXPECT_EQ(c->Call({"COMMAND", "GETKEYS", "SEG.CONNECTED", "a", "b"}),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
  EXPECT_EQ(c->Call({"COMMAND", "INFO", "seg.connected"}),
            "*1\r\n*10\r\n$13\r\nseg.connected\r\n:3\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:2\r\n"
            ":1\r\n*0\r\n*0\r\n*0\r\n*0\r\n");
  const std::string docs = c->Call({"COMMAND", "DOCS", "seg.links"});
  EXPECT_NE(docs.find("$30\r\nuser [CURSOR cursor] [COUNT n]\r\n"), std::string::npos) << docs;
}

TEST_F(RespTest, RedisCliDrivesLinks) {
  Start();
  EXPECT_EQ(Cli("SEG.UPSERT home 1 0 | sed -n 2p"), "1\n");
  EXPECT_EQ(Cli("SEG.UPSERT work 2 0 | sed -n 2p"), "1\n");
  EXPECT_EQ(Cli("SEG.LINK work home TTL 3600"), "master\nhome\nmembers\n1\nmoved\n0\n");
  EXPECT_EQ(Cli("--no-raw SEG.LINKS home"),
            "1) \"master\"\n2) \"home\"\n3) \"links\"\n4) 1) 1) \"work\"\n      2) (integer) "
            "1790003600\n5) \"next\"\n6) \"\"\n");
  EXPECT_EQ(
      Cli("-3 --no-raw SEG.GET work IDSONLY"),
      "1# \"count\" => (integer) 2\n2# \"stale\" => (false)\n3# \"ids\" => \n"
      "   1) \"1\"\n   2) \"2\"\n4# \"master\" => \"home\"\n5# \"profiles\" => (integer) 2\n");
  EXPECT_EQ(Cli("SEG.MASTEROF work"), "home\n");
  EXPECT_EQ(Cli("--no-raw SEG.MASTEROF nobody"), "(nil)\n");
  EXPECT_EQ(Cli("SEG.CONNECTED work home"), "1\n");
  EXPECT_EQ(Cli("SEG.UNLINK work"), "1\n");
}

TEST_F(RespTest, MetricsCountCommandsAndErrors) {
  Start();
  auto c = Connect();
  c->Call({"SEG.GET", "u1"});
  c->Call({"SEG.GET", "u1", "LIMIT", "x"});
  c->Call({"NOSUCH"});
  const ServerCounters counters = served_.server->counters();
  const size_t get = static_cast<size_t>(RespCmd::kSegGet);
  EXPECT_EQ(counters.resp_commands[get], 2u);
  EXPECT_EQ(counters.resp_errors[get], 1u);
  EXPECT_EQ(counters.resp_commands[kRespCommands], 1u);
  EXPECT_EQ(counters.resp_errors[kRespCommands], 1u);
  EXPECT_EQ(counters.resp_latency_us[get].count(), 2u);
  // Each link command in its own slot.
  c->Call({"SEG.LINK", "a", "b"});
  c->Call({"SEG.LINKS", "a", "COUNT", "0"});
  c->Call({"SEG.CONNECTED", "a", "b"});
  const ServerCounters after = served_.server->counters();
  EXPECT_EQ(after.resp_commands[static_cast<size_t>(RespCmd::kSegLink)], 1u);
  EXPECT_EQ(after.resp_errors[static_cast<size_t>(RespCmd::kSegLink)], 0u);
  EXPECT_EQ(after.resp_commands[static_cast<size_t>(RespCmd::kSegLinks)], 1u);
  EXPECT_EQ(after.resp_errors[static_cast<size_t>(RespCmd::kSegLinks)], 1u);
  EXPECT_EQ(after.resp_commands[static_cast<size_t>(RespCmd::kSegConnected)], 1u);
  EXPECT_EQ(RespSlotName(static_cast<size_t>(RespCmd::kSegMasterof)), "seg.masterof");
}

// ---- profile fields (proto/RESP.md, "Profile fields") ----

// A map of changed, count, duplicate: SEG.FIELDSET's and SEG.FIELDDEL's reply.
std::string FieldWrite2(int changed, int count) {
  return "*6\r\n$7\r\nchanged\r\n:" + std::to_string(changed) +
         "\r\n$5\r\ncount\r\n:" + std::to_string(count) + "\r\n$9\r\nduplicate\r\n:0\r\n";
}

TEST_F(RespTest, FieldCommandsAnswerInRespTwoByteForByte) {
  Start();
  auto c = Connect();
  // Without TYPE a value is a string; one command sets fields of every type,
  // each group with its own TYPE and expiry.
  EXPECT_EQ(c->Call({"SEG.FIELDSET", "u1", "FIELDS", "2", "country", "FR", "city", "Paris"}),
            FieldWrite2(2, 2));
  EXPECT_EQ(c->Call({"seg.fieldset", "u1",     "type",   "INT",
                     "FIELDS",       "1",      "visits", "-3",
                     "TYPE",         "double", "FIELDS", "1",
                     "score",        "0.75",   "TYPE",   "bytes",
                     "FIELDS",       "1",      "blob",   std::string("\x00\xff", 2),
                     "EX",           "3600",   "TYPE",   "time",
                     "FIELDS",       "1",      "seen",   "1790000000"}),
            FieldWrite2(4, 6));
  // A profile of fields alone: count 0, no IDs; fields only when asked,
  // names in bytewise order, each [type, value, expires_at].
  const std::string blob =
      "$4\r\nblob\r\n*3\r\n$5\r\nbytes\r\n$2\r\n" + std::string("\x00\xff", 2) + "\r\n:0\r\n";
  const std::string city = "$4\r\ncity\r\n*3\r\n$6\r\nstring\r\n$5\r\nParis\r\n:0\r\n";
  const std::string country = "$7\r\ncountry\r\n*3\r\n$6\r\nstring\r\n$2\r\nFR\r\n:0\r\n";
  const std::string score = "$5\r\nscore\r\n*3\r\n$6\r\ndouble\r\n$4\r\n0.75\r\n:0\r\n";
  const std::string seen = "$4\r\nseen\r\n*3\r\n$4\r\ntime\r\n:1790000000\r\n:1790003600\r\n";
  const std::string visits = "$6\r\nvisits\r\n*3\r\n$3\r\nint\r\n:-3\r\n:0\r\n";
  const std::string head =
      "*8\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n$6\r\nfields\r\n";
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "ALLFIELDS"}),
            head + "*12\r\n" + blob + city + country + score + seen + visits);
  EXPECT_EQ(c->Call({"SEG.GET", "u1"}),
            "*6\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDS", "3", "visits", "nosuch", "seen", "IDSONLY"}),
            head + "*4\r\n" + seen + visits);
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDPREFIX", "c"}), head + "*4\r\n" + city + country);
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDPREFIX", "zz"}), head + "*0\r\n");
  // Beside segments, after them; the segment options leave fields alone.
  ASSERT_EQ(c->Call({"SEG.UPSERT", "u1", "7", "0"}).substr(0, 5), "*10\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "COUNT", "FIELDS", "1", "city"}),
            "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n"
            "$6\r\nfields\r\n*2\r\n" +
                city);
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDS", "1", "city"}),
            "*10\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n7\r\n"
            "$7\r\nexpires\r\n*1\r\n:0\r\n$6\r\nfields\r\n*2\r\n" +
                city);
  EXPECT_EQ(c->Call({"SEG.MGET", "2", "u1", "nobody", "IDSONLY", "FIELDS", "1", "visits"}),
            "*2\r\n*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n7\r\n"
            "$6\r\nfields\r\n*2\r\n" +
                visits + "$-1\r\n");

  // SEG.INCR: the new value.
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "visits", "5"}), ":2\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "visits", "-2"}), ":0\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "new", "0"}), ":0\r\n");
  // SEG.FIELDMAX: the field's value after it, and whether the one given won.
  EXPECT_EQ(
      c->Call({"SEG.FIELDMAX", "u1", "seen", "1790000500", "TYPE", "time"}),
      "*6\r\n$5\r\nvalue\r\n:1790000500\r\n$8\r\nreplaced\r\n:1\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(
      c->Call({"SEG.FIELDMAX", "u1", "seen", "1790000400", "TYPE", "time"}),
      "*6\r\n$5\r\nvalue\r\n:1790000500\r\n$8\r\nreplaced\r\n:0\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDMAX", "u1", "score", "0.5", "TYPE", "DOUBLE"}),
            "*6\r\n$5\r\nvalue\r\n$4\r\n0.75\r\n$8\r\nreplaced\r\n:0\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDMAX", "u1", "score", "1e3", "TYPE", "double"}),
            "*6\r\n$5\r\nvalue\r\n$4\r\n1000\r\n$8\r\nreplaced\r\n:1\r\n$9\r\nduplicate\r\n:0\r\n");
  // Without TYPE, an int; an absent field takes the value and its expiry.
  EXPECT_EQ(c->Call({"SEG.FIELDMAX", "u1", "best", "-7", "EX", "60"}),
            "*6\r\n$5\r\nvalue\r\n:-7\r\n$8\r\nreplaced\r\n:1\r\n$9\r\nduplicate\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "IDSONLY", "FIELDS", "5", "best", "score", "seen", "visits",
                     "new"}),
            "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n7\r\n"
            "$6\r\nfields\r\n*10\r\n"
            "$4\r\nbest\r\n*3\r\n$3\r\nint\r\n:-7\r\n:1790000060\r\n"
            "$3\r\nnew\r\n*3\r\n$3\r\nint\r\n:0\r\n:0\r\n"
            "$5\r\nscore\r\n*3\r\n$6\r\ndouble\r\n$4\r\n1000\r\n:0\r\n"
            "$4\r\nseen\r\n*3\r\n$4\r\ntime\r\n:1790000500\r\n:0\r\n"
            "$6\r\nvisits\r\n*3\r\n$3\r\nint\r\n:0\r\n:0\r\n");

  // SEG.FIELDDEL: how many of the names were live, and the live fields left.
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "u1", "FIELDS", "3", "city", "nosuch", "city"}),
            FieldWrite2(1, 7));
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "nobody", "FIELDS", "1", "city"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "u1", "WRITEID", "0123456789abcdef0123456789ABCDEF", "FIELDS",
                     "1", "nosuch"}),
            FieldWrite2(0, 7));
  // A profile of fields alone is a profile: DEL counts it.
  ASSERT_EQ(c->Call({"SEG.FIELDSET", "u2", "FIELDS", "1", "a", "b"}), FieldWrite2(1, 1));
  EXPECT_EQ(c->Call({"SEG.COUNT", "u2"}), ":0\r\n");
  // As a hash (a user's live segments) it does not exist; DEL still deletes it.
  EXPECT_EQ(c->Call({"EXISTS", "u2"}), ":0\r\n");
  EXPECT_EQ(c->Call({"TYPE", "u2"}), "+none\r\n");
  EXPECT_EQ(c->Call({"HGETALL", "u2"}), "*0\r\n");
  EXPECT_EQ(c->Call({"DEL", "u2"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u2", "ALLFIELDS"}), "$-1\r\n");
  // Deleting the last field of a profile without segments removes it.
  ASSERT_EQ(c->Call({"SEG.FIELDSET", "u3", "FIELDS", "1", "a", "b"}), FieldWrite2(1, 1));
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "u3", "FIELDS", "1", "a"}), FieldWrite2(1, 0));
  EXPECT_EQ(c->Call({"SEG.GET", "u3"}), "$-1\r\n");
}

TEST_F(RespTest, FieldCommandsAnswerInRespThree) {
  Start();
  auto c = Connect();
  ASSERT_EQ(c->Call({"HELLO", "3"}).substr(0, 4), "%8\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDSET", "u1", "TYPE", "double", "FIELDS", "2", "score", "-0.125",
                     "big", "+inf"}),
            "%3\r\n$7\r\nchanged\r\n:2\r\n$5\r\ncount\r\n:2\r\n$9\r\nduplicate\r\n#f\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "ALLFIELDS"}),
            "%4\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n#f\r\n$3\r\nids\r\n*0\r\n"
            "$6\r\nfields\r\n%2\r\n"
            "$3\r\nbig\r\n*3\r\n$6\r\ndouble\r\n,inf\r\n:0\r\n"
            "$5\r\nscore\r\n*3\r\n$6\r\ndouble\r\n,-0.125\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDSET", "u2", "TYPE", "double", "FIELDS", "3", "a", ".5", "b", "1E6",
                     "c", "-inf"}),
            "%3\r\n$7\r\nchanged\r\n:3\r\n$5\r\ncount\r\n:3\r\n$9\r\nduplicate\r\n#f\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u2", "ALLFIELDS"}),
            "%4\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n#f\r\n$3\r\nids\r\n*0\r\n"
            "$6\r\nfields\r\n%3\r\n"
            "$1\r\na\r\n*3\r\n$6\r\ndouble\r\n,0.5\r\n:0\r\n"
            "$1\r\nb\r\n*3\r\n$6\r\ndouble\r\n,1e+06\r\n:0\r\n"
            "$1\r\nc\r\n*3\r\n$6\r\ndouble\r\n,-inf\r\n:0\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDMAX", "u1", "score", "2.5", "TYPE", "double"}),
            "%3\r\n$5\r\nvalue\r\n,2.5\r\n$8\r\nreplaced\r\n#t\r\n$9\r\nduplicate\r\n#f\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "cap", "1", "CAP", "1"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "cap", "1", "CAP", "1"}), "_\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "nobody", "FIELDS", "1", "cap"}), "_\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "nobody", "ALLFIELDS"}), "_\r\n");
}

TEST_F(RespTest, CountersRefuseAtTheCapAndKeepFixedOrSlidingWindows) {
  Start();
  auto c = Connect();
  // "At most 2 a day": a fixed window, set when the counter is made.
  const std::vector<std::string> day = {"SEG.INCR", "u1",    "cap:77", "1",
                                        "TTL",      "86400", "CAP",    "2"};
  EXPECT_EQ(c->Call(day), ":1\r\n");
  clock_.Advance(3600);
  EXPECT_EQ(c->Call(day), ":2\r\n");
  // Refused: null, nothing written (the count and its expiry stay).
  EXPECT_EQ(c->Call(day), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDS", "1", "cap:77"}),
            "*8\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n$6\r\nfields\r\n"
            "*2\r\n$6\r\ncap:77\r\n*3\r\n$3\r\nint\r\n:2\r\n:1790086400\r\n");
  clock_.Advance(86400 - 3600 - 1);
  EXPECT_EQ(c->Call(day), "$-1\r\n");
  clock_.Advance(1);  // the window ends: a new counter, a new window
  EXPECT_EQ(c->Call(day), ":1\r\n");
  // A delta may be negative, and the cap a floor then.
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "floor", "-5", "CAP", "-5"}), ":-5\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "floor", "-1", "CAP", "-5"}), "$-1\r\n");
  // Upwards, the same cap is a ceiling the counter is already past.
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "floor", "1", "CAP", "-5"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "floor", "1"}), ":-4\r\n");

  // Fixed: later increments keep the first expiry. Sliding: each sets it anew.
  const std::vector<std::string> fixed = {"SEG.INCR", "u1", "fixed", "1", "TTL", "100"};
  const std::vector<std::string> sliding = {"SEG.INCR", "u1",  "sliding", "1",
                                            "TTL",      "100", "SLIDING"};
  EXPECT_EQ(c->Call(fixed), ":1\r\n");
  EXPECT_EQ(c->Call(sliding), ":1\r\n");
  clock_.Advance(60);
  EXPECT_EQ(c->Call(fixed), ":2\r\n");
  EXPECT_EQ(c->Call(sliding), ":2\r\n");
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDS", "2", "fixed", "sliding"}),
            "*8\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n$6\r\nfields\r\n"
            "*4\r\n$5\r\nfixed\r\n*3\r\n$3\r\nint\r\n:2\r\n:" +
                std::to_string(clock_.Now() + 40) +
                "\r\n$7\r\nsliding\r\n*3\r\n$3\r\nint\r\n:2\r\n:" +
                std::to_string(clock_.Now() + 100) + "\r\n");
  clock_.Advance(60);
  EXPECT_EQ(c->Call(fixed), ":1\r\n");    // expired at 100 s: counted afresh
  EXPECT_EQ(c->Call(sliding), ":3\r\n");  // alive until 160 s
  // A counter past 2^63-1 is an error, not a wrap; nothing written.
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "big", "9223372036854775807"}), ":9223372036854775807\r\n");
  const std::string overflow = c->Call({"SEG.INCR", "u1", "big", "1"});
  EXPECT_EQ(overflow, "-ERR field 'big': 9223372036854775807 + 1 overflows 64 bits\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "u1", "big", "-9223372036854775808"}), ":-1\r\n");
}

TEST_F(RespTest, FieldsExpireAsTheirExOrExatSays) {
  Start();
  auto c = Connect();
  EXPECT_EQ(
      c->Call({"SEG.FIELDSET", "u1", "EX", "10", "FIELDS", "1", "a",      "1", "EXAT", "1790000020",
               "FIELDS",       "1",  "b",  "2",  "EXAT",   "0", "FIELDS", "1", "c",    "3"}),
      FieldWrite2(3, 3));
  const std::string head =
      "*8\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n$6\r\nfields\r\n";
  const std::string a = "$1\r\na\r\n*3\r\n$6\r\nstring\r\n$1\r\n1\r\n:1790000010\r\n";
  const std::string b = "$1\r\nb\r\n*3\r\n$6\r\nstring\r\n$1\r\n2\r\n:1790000020\r\n";
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDS", "2", "a", "b"}), head + "*4\r\n" + a + b);
  clock_.Advance(10);  // a is expired from its expiry's second on
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDS", "2", "a", "b"}), head + "*2\r\n" + b);
  // A field set again takes exactly the expiry given: none here.
  EXPECT_EQ(c->Call({"SEG.FIELDSET", "u1", "FIELDS", "1", "b", "2"}), FieldWrite2(1, 2));
  clock_.Advance(100);
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "FIELDS", "1", "b"}),
            head + "*2\r\n$1\r\nb\r\n*3\r\n$6\r\nstring\r\n$1\r\n2\r\n:0\r\n");
  // The binary protocol's refusal of a time not in the future.
  const std::string past =
      c->Call({"SEG.FIELDSET", "u1", "EXAT", "1790000000", "FIELDS", "1", "d", "x"});
  EXPECT_EQ(past.substr(0, 5), "-ERR ") << past;
  // Once every field expired, the profile is gone.
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "u1", "FIELDS", "2", "b", "c"}), FieldWrite2(2, 0));
  EXPECT_EQ(c->Call({"SEG.GET", "u1", "ALLFIELDS"}), "$-1\r\n");
}

TEST_F(RespTest, ALinkedUsersFieldWritesLandOnItsMaster) {
  Start();
  auto c = Connect();
  LinkFixture(c.get());
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(c->Call({"SEG.LINK", "phone", "home"}).substr(0, 4), "*6\r\n");
  // Counted through any ID of the group, the person is counted.
  EXPECT_EQ(c->Call({"SEG.INCR", "phone", "cap", "1", "CAP", "2"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "home", "cap", "1", "CAP", "2"}), ":2\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "phone", "cap", "1", "CAP", "2"}), "$-1\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDSET", "phone", "FIELDS", "1", "country", "FR"}), FieldWrite2(1, 2));
  EXPECT_EQ(c->Call({"SEG.FIELDMAX", "phone", "seen", "5"}).substr(0, 19),
            "*6\r\n$5\r\nvalue\r\n:5\r\n");
  const std::string fields =
      "$6\r\nfields\r\n*6\r\n$3\r\ncap\r\n*3\r\n$3\r\nint\r\n:2\r\n:0\r\n"
      "$7\r\ncountry\r\n*3\r\n$6\r\nstring\r\n$2\r\nFR\r\n:0\r\n"
      "$4\r\nseen\r\n*3\r\n$3\r\nint\r\n:5\r\n:0\r\n";
  // The merged view carries the master's fields; OWN, the user's own.
  EXPECT_EQ(c->Call({"SEG.GET", "phone", "IDSONLY", "ALLFIELDS"}),
            "*12\r\n$5\r\ncount\r\n:2\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*2\r\n$1\r\n1\r\n"
            "$1\r\n3\r\n$6\r\nmaster\r\n$4\r\nhome\r\n$8\r\nprofiles\r\n:2\r\n" +
                fields);
  EXPECT_EQ(
      c->Call({"SEG.GET", "home", "IDSONLY", "OWN", "ALLFIELDS"}),
      "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n1\r\n" + fields);
  EXPECT_EQ(c->Call({"SEG.GET", "phone", "IDSONLY", "OWN", "ALLFIELDS"}),
            "*8\r\n$5\r\ncount\r\n:1\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*1\r\n$1\r\n3\r\n"
            "$6\r\nfields\r\n*0\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "phone", "FIELDS", "1", "country"}), FieldWrite2(1, 2));
  // Unlinked, the user's writes are its own again.
  EXPECT_EQ(c->Call({"SEG.UNLINK", "phone"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "phone", "cap", "1", "CAP", "2"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.INCR", "home", "cap", "1", "CAP", "2"}), "$-1\r\n");
}

TEST_F(RespTest, FieldCommandErrorsNameTheCommandAndWriteNothing) {
  Start();
  auto c = Connect();
  for (const auto& [name, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"seg.fieldset", {"SEG.FIELDSET", "u", "FIELDS", "1", "a"}},
           {"seg.fielddel", {"SEG.FIELDDEL", "u", "FIELDS", "1"}},
           {"seg.incr", {"SEG.INCR", "u", "n"}},
           {"seg.fieldmax", {"SEG.FIELDMAX", "u", "n"}}}) {
    EXPECT_EQ(c->Call(args), "-ERR wrong number of arguments for '" + name + "' command\r\n");
  }
  const std::string long_name(65, 'n');
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      // SEG.FIELDSET
      {{"SEG.FIELDSET", "u", "a", "1", "b", "2"},
       "SEG.FIELDSET: unknown option 'a' (WRITEID, TYPE, EX, EXAT, FIELDS)"},
      {{"SEG.FIELDSET", "u", "FIELDS", "2", "a", "1", "b"},
       "SEG.FIELDSET: FIELDS 2: the numfields parameter must match the number of name value "
       "pairs that follow"},
      {{"SEG.FIELDSET", "u", "FIELDS", "0", "a", "1"},
       "SEG.FIELDSET: FIELDS needs numfields, a whole number greater than 0"},
      {{"SEG.FIELDSET", "u", "FIELDS", "1", "a", "1", "TYPE", "int"},
       "SEG.FIELDSET: TYPE, EX and EXAT must come before a FIELDS"},
      {{"SEG.FIELDSET", "u", "TYPE", "float", "FIELDS", "1", "a", "1"},
       "SEG.FIELDSET: unknown TYPE 'float' (int, double, string, bytes, time)"},
      {{"SEG.FIELDSET", "u", "TYPE", "int", "TYPE", "int", "FIELDS", "1", "a", "1"},
       "SEG.FIELDSET: TYPE given twice before one FIELDS"},
      {{"SEG.FIELDSET", "u", "TYPE", "int", "FIELDS", "1", "a", "1.5"},
       "SEG.FIELDSET: field 'a': '1.5' is not an int: a whole number from -9223372036854775808 "
       "to 9223372036854775807 without '+' or leading zeros"},
      {{"SEG.FIELDSET", "u", "TYPE", "int", "FIELDS", "1", "a", "9223372036854775808"},
       "SEG.FIELDSET: field 'a': '9223372036854775808' is not an int: a whole number from "
       "-9223372036854775808 to 9223372036854775807 without '+' or leading zeros"},
      {{"SEG.FIELDSET", "u", "TYPE", "int", "FIELDS", "1", "a", "007"},
       "SEG.FIELDSET: field 'a': '007' is not an int: a whole number from -9223372036854775808 "
       "to 9223372036854775807 without '+' or leading zeros"},
      {{"SEG.FIELDSET", "u", "TYPE", "double", "FIELDS", "1", "a", "nan"},
       "SEG.FIELDSET: field 'a': 'nan' is not a double: a decimal number (3.5, -1e-3), inf or "
       "-inf"},
      {{"SEG.FIELDSET", "u", "TYPE", "double", "FIELDS", "1", "a", "1e999"},
       "SEG.FIELDSET: field 'a': '1e999' is not a double: a decimal number (3.5, -1e-3), inf "
       "or -inf"},
      {{"SEG.FIELDSET", "u", "TYPE", "double", "FIELDS", "1", "a", " 1"},
       "SEG.FIELDSET: field 'a': ' 1' is not a double: a decimal number (3.5, -1e-3), inf or "
       "-inf"},
      {{"SEG.FIELDSET", "u", "TYPE", "time", "FIELDS", "1", "a", "4294967296"},
       "SEG.FIELDSET: field 'a': '4294967296' is not a time: Unix seconds from 0 to "
       "4294967295 without sign or leading zeros"},
      {{"SEG.FIELDSET", "u", "FIELDS", "1", "a", std::string("\xff\xfe", 2)},
       "SEG.FIELDSET: field 'a': the value is not UTF-8 text: give TYPE bytes for a value of "
       "any bytes"},
      {{"SEG.FIELDSET", "u", "FIELDS", "1", "", "1"},
       "SEG.FIELDSET: a field name is empty (names are 1 to 64 bytes)"},
      {{"SEG.FIELDSET", "u", "FIELDS", "1", long_name, "1"},
       "SEG.FIELDSET: field name 'nnnnnnnnnnnnnnnn...' is 65 bytes; the limit is 64"},
      {{"SEG.FIELDSET", "u", "EX", "0", "FIELDS", "1", "a", "1"},
       "SEG.FIELDSET: EX must be at least 1 (without EX: never)"},
      {{"SEG.FIELDSET", "u", "EX", "1", "EXAT", "5", "FIELDS", "1", "a", "1"},
       "SEG.FIELDSET: give one of EX and EXAT, once, before one FIELDS"},
      {{"SEG.FIELDSET", "u", "WRITEID", "xyz", "FIELDS", "1", "a", "1"},
       "SEG.FIELDSET: WRITEID must be 32 hexadecimal digits"},
      // SEG.FIELDDEL
      {{"SEG.FIELDDEL", "u", "a", "b", "c"},
       "SEG.FIELDDEL: expected FIELDS numfields name [name ...], not 'a'"},
      {{"SEG.FIELDDEL", "u", "FIELDS", "1", "a", "b"},
       "SEG.FIELDDEL: FIELDS 1: the numfields parameter must match the number of names that "
       "follow"},
      {{"SEG.FIELDDEL", "u", "FIELDS", "1", long_name},
       "SEG.FIELDDEL: field name 'nnnnnnnnnnnnnnnn...' is 65 bytes; the limit is 64"},
      // SEG.INCR
      {{"SEG.INCR", "u", "n", "+1"},
       "SEG.INCR: delta must be a whole number from -9223372036854775808 to "
       "9223372036854775807 without '+' or leading zeros, not '+1'"},
      {{"SEG.INCR", "u", "n", "1", "SLIDING"},
       "SEG.INCR: SLIDING needs TTL seconds, at least 1: the window each increment starts "
       "again"},
      {{"SEG.INCR", "u", "n", "1", "TTL", "-1"},
       "SEG.INCR: TTL must be a whole number from 0 to 4294967295 written without sign or "
       "leading zeros, not '-1'"},
      {{"SEG.INCR", "u", "n", "1", "CAP"},
       "SEG.INCR: CAP must be a whole number from -9223372036854775808 to 9223372036854775807 "
       "without '+' or leading zeros"},
      {{"SEG.INCR", "u", "n", "1", "CAP", "1", "CAP", "2"}, "SEG.INCR: CAP given twice"},
      {{"SEG.INCR", "u", "n", "1", "WINDOW", "fixed"},
       "SEG.INCR: unknown option 'WINDOW' (TTL, SLIDING, CAP, WRITEID)"},
      {{"SEG.INCR", "u", "", "1"}, "SEG.INCR: a field name is empty (names are 1 to 64 bytes)"},
      // SEG.FIELDMAX
      {{"SEG.FIELDMAX", "u", "n", "1", "TYPE", "string"},
       "SEG.FIELDMAX: TYPE must be int, double or time: only numbers and times compare"},
      {{"SEG.FIELDMAX", "u", "n", "1.5"},
       "SEG.FIELDMAX: field 'n': '1.5' is not an int: a whole number from "
       "-9223372036854775808 to 9223372036854775807 without '+' or leading zeros"},
      {{"SEG.FIELDMAX", "u", "n", "1", "PX", "5"},
       "SEG.FIELDMAX: unknown option 'PX' (TYPE, EX, EXAT, WRITEID)"},
      // SEG.GET's field options
      {{"SEG.GET", "u", "ALLFIELDS", "FIELDPREFIX", "a"},
       "SEG.GET: give one of FIELDS, ALLFIELDS and FIELDPREFIX, once"},
      {{"SEG.GET", "u", "FIELDS", "3", "a", "b"},
       "SEG.GET: FIELDS 3: the numfields parameter must match the number of names that follow"},
      {{"SEG.GET", "u", "FIELDPREFIX", long_name},
       "SEG.GET: FIELDPREFIX is 65 bytes; the limit is 64"},
      {{"SEG.MGET", "1", "u", "FIELDS", "1", ""},
       "SEG.MGET: a field name is empty (names are 1 to 64 bytes)"},
      {{"SEG.GET", "u", "FIELD"},
       "SEG.GET: unknown option 'FIELD' (WINDOW, NOTEXPIRING, IDS, COUNT, LIMIT, IDSONLY, OWN, "
       "FIELDS, ALLFIELDS, FIELDPREFIX)"},
  };
  for (const auto& [args, message] : refused) {
    EXPECT_EQ(c->Call(args), "-ERR " + message + "\r\n") << args[0] << " " << args[1];
  }
  EXPECT_EQ(c->Call({"DBSIZE"}), ":0\r\n");
  // The operation's own refusals, with their status's prefix.
  ASSERT_EQ(c->Call({"SEG.FIELDSET", "u", "FIELDS", "1", "s", "text"}), FieldWrite2(1, 1));
  const std::string twice = c->Call({"SEG.FIELDSET", "u", "FIELDS", "2", "a", "1", "a", "2"});
  EXPECT_EQ(twice, "-ERR field 'a' appears twice in one write\r\n");
  const std::string large =
      c->Call({"SEG.FIELDSET", "u", "FIELDS", "1", "a", std::string(1025, 'x')});
  EXPECT_EQ(large.substr(0, 7), "-LIMIT ") << large;
  const std::string not_int = c->Call({"SEG.INCR", "u", "s", "1"});
  EXPECT_EQ(not_int.substr(0, 5), "-ERR ") << not_int;
  const std::string other_type = c->Call({"SEG.FIELDMAX", "u", "s", "1"});
  EXPECT_EQ(other_type.substr(0, 5), "-ERR ") << other_type;
  std::vector<std::string> many = {"SEG.GET", "u", "FIELDS", "257"};
  for (int i = 0; i < 257; ++i) many.push_back("f" + std::to_string(i));
  const std::string over = c->Call(many);
  EXPECT_EQ(over, "-LIMIT get: fields: 257 names, the limit is 256\r\n");
  // Nothing but the one field was written by any of it.
  EXPECT_EQ(c->Call({"SEG.GET", "u", "ALLFIELDS"}),
            "*8\r\n$5\r\ncount\r\n:0\r\n$5\r\nstale\r\n:0\r\n$3\r\nids\r\n*0\r\n$6\r\nfields\r\n"
            "*2\r\n$1\r\ns\r\n*3\r\n$6\r\nstring\r\n$4\r\ntext\r\n:0\r\n");
  // A field name is never taken for a keyword: it is counted, or fixed in place.
  EXPECT_EQ(c->Call({"SEG.FIELDSET", "k", "FIELDS", "2", "TYPE", "EX", "FIELDS", "WRITEID"}),
            FieldWrite2(2, 2));
  EXPECT_EQ(c->Call({"SEG.INCR", "k", "CAP", "1"}), ":1\r\n");
  EXPECT_EQ(c->Call({"SEG.FIELDDEL", "k", "FIELDS", "1", "FIELDS"}), FieldWrite2(1, 2));
  // Keys as COMMAND reports them: the user alone.
  EXPECT_EQ(c->Call({"COMMAND", "GETKEYS", "SEG.INCR", "u", "n", "1", "CAP", "3"}),
            "*1\r\n$1\r\nu\r\n");
  EXPECT_EQ(c->Call({"COMMAND", "GETKEYS", "SEG.FIELDSET", "u", "FIELDS", "1", "a", "b"}),
            "*1\r\n$1\r\nu\r\n");
  EXPECT_EQ(c->Call({"COMMAND", "INFO", "seg.incr"}),
            "*1\r\n*10\r\n$8\r\nseg.incr\r\n:-4\r\n*2\r\n+write\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"
            "*0\r\n*0\r\n*0\r\n*0\r\n");
}

TEST_F(RespTest, RedisCliDrivesFields) {
  Start();
  EXPECT_EQ(Cli("SEG.FIELDSET u1 FIELDS 1 country FR TYPE double FIELDS 1 score 0.5"),
            "changed\n2\ncount\n2\nduplicate\n0\n");
  EXPECT_EQ(Cli("SEG.INCR u1 cap 1 TTL 86400 CAP 1"), "1\n");
  EXPECT_EQ(Cli("--no-raw SEG.INCR u1 cap 1 TTL 86400 CAP 1"), "(nil)\n");
  EXPECT_EQ(Cli("-3 --no-raw SEG.GET u1 FIELDS 2 score cap"),
            "1# \"count\" => (integer) 0\n2# \"stale\" => (false)\n3# \"ids\" => (empty array)\n"
            "4# \"fields\" => \n   1# \"cap\" => \n      1) \"int\"\n      2) (integer) 1\n"
            "      3) (integer) 1790086400\n   2# \"score\" => \n      1) \"double\"\n"
            "      2) (double) 0.5\n      3) (integer) 0\n");
}

}  // namespace
}  // namespace segstore::server
