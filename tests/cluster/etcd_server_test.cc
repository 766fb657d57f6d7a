// The etcd test harness itself: a single member serves the v3 HTTP gateway,
// disappears when killed and comes back with its data; a 3-member cluster
// keeps serving writes after one member is SIGKILLed.
#include "support/etcd_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>

namespace segstore::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Bounds each request to the v3 HTTP gateway.
constexpr auto kRequestTimeout = std::chrono::seconds(10);

std::string Base64(const std::string& in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const unsigned v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

HttpResponse Put(uint16_t port, const std::string& key, const std::string& value) {
  return HttpRequest(port, "POST", "/v3/kv/put",
                     R"({"key":")" + Base64(key) + R"(","value":")" + Base64(value) + R"("})",
                     kRequestTimeout);
}

HttpResponse Range(uint16_t port, const std::string& key) {
  return HttpRequest(port, "POST", "/v3/kv/range", R"({"key":")" + Base64(key) + R"("})",
                     kRequestTimeout);
}

HttpResponse Status(uint16_t port) {
  return HttpRequest(port, "POST", "/v3/maintenance/status", "{}", kRequestTimeout);
}

// The range response holds {"key":"<b64>",...,"value":"<b64>"} for the key.
bool RangeHas(uint16_t port, const std::string& key, const std::string& value) {
  const HttpResponse r = Range(port, key);
  return r.status == 200 && r.body.find(R"("value":")" + Base64(value) + "\"") != std::string::npos;
}

// Retries a put for up to `patience` (a leader election may be under way).
bool PutEventually(uint16_t port, const std::string& key, const std::string& value,
                   std::chrono::seconds patience = std::chrono::seconds(30)) {
  const auto deadline = Clock::now() + patience;
  while (Clock::now() < deadline) {
    if (Put(port, key, value).status == 200) return true;
    ::usleep(100 * 1000);
  }
  return false;
}

// A JSON string field's value in a flat search: "field":"value" (the gateway
// writes 64-bit integers as strings).
std::string Field(const std::string& json, const std::string& field) {
  const std::string prefix = "\"" + field + "\":\"";
  const size_t at = json.find(prefix);
  if (at == std::string::npos) return {};
  const size_t start = at + prefix.size();
  const size_t end = json.find('"', start);
  return end == std::string::npos ? std::string() : json.substr(start, end - start);
}

bool Refuses(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool refused =
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == ECONNREFUSED;
  ::close(fd);
  return refused;
}

// No live etcd has this PID (it was reaped: the PID is gone or reused).
bool GoneProcess(pid_t pid) {
  std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
  std::string argv0;
  return !cmdline || !std::getline(cmdline, argv0, '\0') || argv0 != "etcd";
}

TEST(EtcdServerTest, SingleMemberServesGatewayAndDiesWhenKilled) {
  EtcdCluster etcd(1);
  std::string why;
  ASSERT_TRUE(etcd.Start(&why)) << why;
  ASSERT_EQ(etcd.endpoints().size(), 1u);
  EXPECT_EQ(etcd.endpoint(0), "http://127.0.0.1:" + std::to_string(etcd.client_port(0)));
  const pid_t pid = etcd.pid(0);
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(GoneProcess(pid));

  const HttpResponse put = Put(etcd.client_port(0), "segstore/harness", "hello etcd");
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_NE(put.body.find("\"revision\""), std::string::npos) << put.body;
  const HttpResponse range = Range(etcd.client_port(0), "segstore/harness");
  ASSERT_EQ(range.status, 200) << range.body;
  EXPECT_NE(range.body.find(R"("key":")" + Base64("segstore/harness") + "\""), std::string::npos)
      << range.body;
  EXPECT_NE(range.body.find(R"("value":")" + Base64("hello etcd") + "\""), std::string::npos)
      << range.body;

  etcd.Kill(0);
  EXPECT_EQ(etcd.pid(0), -1);
  EXPECT_TRUE(GoneProcess(pid));
  EXPECT_TRUE(Refuses(etcd.client_port(0)));
  EXPECT_EQ(Range(etcd.client_port(0), "segstore/harness").status, 0);

  // Back on the same port, with the same data.
  ASSERT_TRUE(etcd.Restart(0, &why)) << why;
  EXPECT_GT(etcd.pid(0), 0);
  EXPECT_TRUE(RangeHas(etcd.client_port(0), "segstore/harness", "hello etcd"));
}

TEST(EtcdServerTest, ThreeMembersSurviveSigkillOfTheLeader) {
  EtcdCluster etcd(3);
  std::string why;
  ASSERT_TRUE(etcd.Start(&why)) << why;
  ASSERT_EQ(etcd.endpoints().size(), 3u);
  for (int i = 0; i < 3; ++i) ASSERT_GT(etcd.pid(i), 0) << i;
  ASSERT_TRUE(PutEventually(etcd.client_port(0), "segstore/before", "1"));
  for (int i = 0; i < 3; ++i) {
    // A follower may not have applied the put yet.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!RangeHas(etcd.client_port(i), "segstore/before", "1") && Clock::now() < deadline) {
      ::usleep(50 * 1000);
    }
    EXPECT_TRUE(RangeHas(etcd.client_port(i), "segstore/before", "1")) << i;
  }

  // Kill the leader (the harshest case: an election must follow); member 2
  // if no member says who leads.
  int victim = 2;
  std::string victim_id;
  for (int i = 0; i < 3; ++i) {
    const HttpResponse status = Status(etcd.client_port(i));
    const std::string leader = Field(status.body, "leader");
    if (status.status == 200 && !leader.empty() && Field(status.body, "member_id") == leader) {
      victim = i;
      victim_id = leader;
      break;
    }
  }
  if (victim_id.empty()) victim_id = Field(Status(etcd.client_port(victim)).body, "member_id");
  ASSERT_FALSE(victim_id.empty());
  const pid_t victim_pid = etcd.pid(victim);
  etcd.Kill(victim);
  EXPECT_EQ(etcd.pid(victim), -1);
  EXPECT_TRUE(GoneProcess(victim_pid));
  EXPECT_TRUE(Refuses(etcd.client_port(victim)));

  // The survivors agree on a leader other than the victim soon (a put sent
  // meanwhile would wait out etcd's request timeout).
  const int survivor = victim == 0 ? 1 : 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::string leader;
  while (Clock::now() < deadline) {
    leader = Field(Status(etcd.client_port(survivor)).body, "leader");
    if (!leader.empty() && leader != "0" && leader != victim_id) break;
    ::usleep(50 * 1000);
  }
  EXPECT_TRUE(!leader.empty() && leader != "0" && leader != victim_id)
      << "leader " << leader << ", victim " << victim_id;

  for (int i = 0; i < 3; ++i) {
    if (i == victim) continue;
    const std::string value = "from m" + std::to_string(i);
    EXPECT_TRUE(PutEventually(etcd.client_port(i), "segstore/after", value)) << i;
    EXPECT_TRUE(RangeHas(etcd.client_port(i), "segstore/after", value)) << i;
  }
}

}  // namespace
}  // namespace segstore::testing
