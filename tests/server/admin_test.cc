// The admin endpoint (AdminServer) over raw sockets: its three paths, HEAD,
// the wrong method or path, keep-alive, malformed and oversize requests, the
// idle timeout and the connection limit.

#include "server/admin.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "server/http_client.h"
#include "server/raw_conn.h"

namespace segstore::server {
namespace {

using std::chrono::milliseconds;
using testing::HttpAnswer;
using testing::RawConn;
using testing::ReadAnswer;
using testing::Request;
using testing::WaitFor;

class AdminTest : public ::testing::Test {
 protected:
  void Start(AdminOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    AdminHandlers h;
    h.metrics = [this] {
      ++scrapes_;
      return std::string("# TYPE segstore_x gauge\nsegstore_x 1\n");
    };
    h.live = [this] { return live_.load(); };
    h.not_ready = [this] { return not_ready_.load() ? std::string("recovering: 3 of 9") : ""; };
    admin_ = std::make_unique<AdminServer>(options, h);
    Status s = admin_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  RawConn Connect() {
    RawConn c;
    EXPECT_TRUE(c.Connect(admin_->port()));
    return c;
  }
  HttpAnswer Ask(std::string_view method, std::string_view path) {
    return testing::Ask(admin_->port(), method, path);
  }

  std::atomic<int> scrapes_{0};
  std::atomic<bool> live_{true};
  std::atomic<bool> not_ready_{false};
  std::unique_ptr<AdminServer> admin_;
};

TEST_F(AdminTest, ServesMetricsHealthAndReadiness) {
  Start();
  HttpAnswer m = Ask("GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.head.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << m.head;
  EXPECT_EQ(m.body, "# TYPE segstore_x gauge\nsegstore_x 1\n");
  EXPECT_EQ(Ask("GET", "/metrics?name=x").status, 200);  // a query string is ignored

  HttpAnswer h = Ask("GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "ok\n");
  live_ = false;
  EXPECT_EQ(Ask("GET", "/health").status, 503);

  HttpAnswer r = Ask("GET", "/ready");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ready\n");
  not_ready_ = true;
  r = Ask("GET", "/ready");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "recovering: 3 of 9\n");
}

TEST_F(AdminTest, HeadAnswersHeadersOnlyAndOtherMethodsAndPathsAreRefused) {
  Start();
  {
    RawConn c = Connect();
    ASSERT_TRUE(c.Write(Request("HEAD", "/metrics")));
    HttpAnswer a = ReadAnswer(c, true);
    EXPECT_EQ(a.status, 200);
    EXPECT_NE(a.head.find("Content-Length: 37"), std::string::npos) << a.head;
    // No body followed: the next answer on the connection starts at once.
    ASSERT_TRUE(c.Write(Request("GET", "/health", true)));
    HttpAnswer b = ReadAnswer(c);
    EXPECT_EQ(b.status, 200);
    EXPECT_EQ(b.body, "ok\n");
  }
  HttpAnswer post = Ask("POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_NE(post.head.find("Allow: GET, HEAD"), std::string::npos) << post.head;
  EXPECT_EQ(Ask("GET", "/").status, 404);
  EXPECT_EQ(Ask("GET", "/metricsx").status, 404);
}

TEST_F(AdminTest, KeepsAConnectionAliveForManyRequests) {
  Start();
  RawConn c = Connect();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(c.Write(Request("GET", "/metrics")));
    HttpAnswer a = ReadAnswer(c);
    ASSERT_EQ(a.status, 200) << i;
  }
  EXPECT_EQ(scrapes_.load(), 5);
}

TEST_F(AdminTest, MalformedAndOversizeRequestsGetAnErrorAndAClose) {
  Start();
  {
    RawConn c = Connect();
    ASSERT_TRUE(c.Write("this is not HTTP\r\n\r\n"));
    HttpAnswer a = ReadAnswer(c);
    EXPECT_EQ(a.status, 400);
    EXPECT_TRUE(c.WaitClosed(testing::kPatience));
  }
  {
    RawConn c = Connect();
    std::string big = "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Pad: " + std::string(9000, 'a');
    ASSERT_TRUE(c.Write(big + "\r\n\r\n"));
    HttpAnswer a = ReadAnswer(c);
    EXPECT_EQ(a.status, 413);
    EXPECT_TRUE(c.WaitClosed(testing::kPatience));
  }
  EXPECT_EQ(scrapes_.load(), 0);
  EXPECT_EQ(Ask("GET", "/health").status, 200);  // and it serves on
}

TEST_F(AdminTest, ClosesAConnectionThatSendsNothing) {
  AdminOptions o;
  o.io_timeout = milliseconds(200);
  Start(o);
  RawConn idle = Connect();
  RawConn partial = Connect();
  ASSERT_TRUE(partial.Write("GET /metr"));  // a request begun and never finished
  EXPECT_TRUE(idle.WaitClosed(testing::kPatience));
  EXPECT_TRUE(partial.WaitClosed(testing::kPatience));
  EXPECT_EQ(Ask("GET", "/health").status, 200);
}

TEST_F(AdminTest, RefusesConnectionsPastTheLimitAndServesAgainOnceTheyClose) {
  AdminOptions o;
  o.max_connections = 4;
  Start(o);
  std::vector<RawConn> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(Connect());
    // Served, so the server has surely counted it before the next arrives.
    ASSERT_TRUE(held.back().Write(Request("GET", "/health")));
    ASSERT_EQ(ReadAnswer(held.back()).status, 200);
  }
  RawConn extra = Connect();
  EXPECT_TRUE(extra.WaitClosed(testing::kPatience));
  held.clear();
  EXPECT_TRUE(WaitFor([&] {
    RawConn c;
    if (!c.Connect(admin_->port())) return false;
    if (!c.Write(Request("GET", "/health", true))) return false;
    return ReadAnswer(c).status == 200;
  }));
}

TEST_F(AdminTest, StartFailsWhenThePortIsTakenAndStopIsIdempotent) {
  Start();
  AdminOptions o;
  o.host = "127.0.0.1";
  o.port = admin_->port();
  AdminServer other(o, AdminHandlers{});
  EXPECT_EQ(other.Start().code(), Status::Code::kIOError);
  admin_->Stop();
  admin_->Stop();
  RawConn c;
  EXPECT_FALSE(c.Connect(o.port));
}

}  // namespace
}  // namespace segstore::server
