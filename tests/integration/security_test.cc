// TLS and shared-secret authentication on the client port, through the
// client library against the whole server in process; certificates come
// from tests/support/test_pki. Also the credential loading's errors and
// a reload (what SIGHUP does in segstored).

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/secret_file.h"
#include "integration/in_process.h"
#include "proto/wire.h"
#include "segstore/client.h"
#include "server/raw_conn.h"
#include "server/security.h"
#include "storage/test_util.h"
#include "support/test_pki.h"

namespace segstore::server {
namespace {

using client::Client;
using client::ClientOptions;
using std::chrono::milliseconds;
using testing::WaitFor;
using Code = Status::Code;

constexpr UnixSeconds kStart = 1'790'000'000;
const std::string kSecretA = "first secret, 32 bytes long....";
const std::string kSecretB = "second secret, also long enough";

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ::chmod(path.c_str(), mode);
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = segstore::testing::MakeTestPki(dir_.File("pki"));
    ASSERT_TRUE(pki.ok()) << pki.status().ToString();
    pki_ = *pki;
    secrets_ = dir_.File("secrets");
  }
  void TearDown() override { served_.Stop(); }

  void Start(ServerOptions options) {
    storage::StoreOptions o = testing::SmallStore(dir_.File("data"), &clock_);
    profile::ProfileOptions p;
    p.sweeper = false;
    ProfileServiceOptions so;
    options.threads = 2;
    served_.Start(o, nullptr, p, so, options);
  }

  // Starts a server that requires kSecretA (the only line of its file).
  void StartWithSecret(ServerOptions options = {}) {
    WriteFile(secrets_, kSecretA + "\n");
    options.auth_secret_file = secrets_;
    Start(std::move(options));
  }

  ServerOptions Tls() const {
    ServerOptions o;
    o.tls.cert_file = pki_.server_cert;
    o.tls.key_file = pki_.server_key;
    return o;
  }

  ClientOptions TlsClient() const {
    ClientOptions o = Plain();
    o.tls.enabled = true;
    o.tls.ca_file = pki_.ca_cert;
    return o;
  }

  ClientOptions Plain() const {
    ClientOptions o;
    o.port = served_.server->port();
    o.connect_timeout = milliseconds(10000);
    o.request_timeout = milliseconds(10000);
    return o;
  }

  // A write and a read back through `c`.
  static void ExpectServes(Client* c, const std::string& user) {
    ASSERT_NE(c, nullptr);
    const std::vector<SegmentUpdate> segs = {{7, 3600, true, {}, {}}, {9, 3600, true, {}, {}}};
    auto up = c->Upsert(user, segs);
    ASSERT_TRUE(up.ok()) << up.status().ToString();
    auto got = c->Get(user);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->size(), 2u);
  }

  ServerCounters Counters() const { return served_.server->counters(); }

  // The test's one connection was accepted and has been closed: waited for,
  // 20 s guarding against a hang only.
  bool OneConnectionAcceptedAndClosed() const {
    return WaitFor(
        [&] {
          const ServerCounters c = Counters();
          return c.connections_accepted == 1 && c.connections_open == 0;
        },
        milliseconds(20000));
  }

  storage::testing::TempDir dir_;
  ManualClock clock_{kStart};
  segstore::testing::TestPki pki_;
  std::string secrets_;
  testing::InProcessServer served_;
};

// ---- TLS ----

TEST_F(SecurityTest, TlsServesTheClientLibrary) {
  Start(Tls());
  auto c = Client::Connect(TlsClient());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectServes(c->get(), "tls-user");
  // Batches large enough to span many TLS records come back whole.
  std::vector<std::string> users;
  for (int i = 0; i < 300; ++i) users.push_back("tls-user");
  auto batch = (*c)->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), users.size());
  EXPECT_TRUE(batch->back().ok());
  EXPECT_EQ(Counters().tls_handshake_failures, 0u);
  EXPECT_GT(Counters().tls_certificate_not_after, static_cast<int64_t>(kStart));
  EXPECT_EQ(served_.server->security(), "TLS 1.2+");
}

// End of stream over TLS (PROTOCOL.md, "End of stream"): a client that ends
// its TCP stream after its requests, without a TLS close_notify, still gets
// every answer, then the server closes.
TEST_F(SecurityTest, TlsEndOfStreamAnswersWhatWasSentFirst) {
  Start(Tls());
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.load_verify_file(pki_.ca_cert);
  ctx.set_verify_mode(asio::ssl::verify_peer);
  asio::ssl::stream<asio::ip::tcp::socket> tls(io, ctx);
  tls.next_layer().connect({asio::ip::make_address("127.0.0.1"), served_.server->port()});
  tls.handshake(asio::ssl::stream_base::client);
  // An upsert, whose answer waits for the device, then a ping.
  proto::UpsertRequest upsert{"eos-user", {{7, 3600, true, {}, {}}}, UpsertMode::kSet};
  std::string body;
  proto::Encode(upsert, &body);
  const std::string frames =
      testing::MakeFrame(static_cast<uint8_t>(proto::Op::kUpsert), 1, body) +
      testing::MakeFrame(static_cast<uint8_t>(proto::Op::kPing), 2, "");
  asio::write(tls, asio::buffer(frames));
  tls.next_layer().shutdown(asio::ip::tcp::socket::shutdown_send);
  // Read until the server closes, within a generous guard.
  std::string got;
  boost::system::error_code end;
  std::vector<char> buf(4096);
  std::function<void()> read = [&] {
    tls.async_read_some(asio::buffer(buf), [&](const boost::system::error_code& ec, size_t n) {
      got.append(buf.data(), n);
      if (ec) {
        end = ec;
        return;
      }
      read();
    });
  };
  read();
  io.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(end) << "the server did not close";
  std::vector<uint32_t> answered;
  for (size_t at = 0; at + proto::kHeaderSize <= got.size();) {
    proto::FrameHeader h;
    ASSERT_EQ(proto::DecodeHeader(reinterpret_cast<const uint8_t*>(got.data()) + at, UINT32_MAX,
                                  &h),
              proto::HeaderCheck::kOk);
    EXPECT_EQ(h.status, 0);
    answered.push_back(h.request_id);
    at += proto::kHeaderSize + h.body_length;
  }
  std::sort(answered.begin(), answered.end());
  EXPECT_EQ(answered, (std::vector<uint32_t>{1, 2}));
  auto c = Client::Connect(TlsClient());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Get("eos-user")->count, 1u);
}

TEST_F(SecurityTest, PlainClientOnTheTlsPortIsClosedAndCounted) {
  Start(Tls());
  auto plain = Client::Connect(Plain());
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), Code::kUnavailable) << plain.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return Counters().tls_handshake_failures == 1; }));
  // The server goes on serving TLS clients.
  auto c = Client::Connect(TlsClient());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectServes(c->get(), "after-plain");
}

TEST_F(SecurityTest, TlsClientOnAPlainPortFailsToConnect) {
  Start(ServerOptions{});
  auto c = Client::Connect(TlsClient());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().ToString();
  EXPECT_NE(c.status().message().find("TLS handshake failed"), std::string_view::npos)
      << c.status().ToString();
}

TEST_F(SecurityTest, ClientRefusesAServerItCannotVerify) {
  Start(Tls());
  // Signed by a CA the client does not trust.
  ClientOptions untrusted = TlsClient();
  untrusted.tls.ca_file = pki_.other_ca_cert;
  auto c = Client::Connect(untrusted);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable);
  EXPECT_NE(c.status().message().find("certificate verify failed"), std::string_view::npos)
      << c.status().ToString();
  // A certificate for other names.
  ClientOptions wrong_name = TlsClient();
  wrong_name.tls.server_name = "profiles.example.com";
  c = Client::Connect(wrong_name);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("certificate verify failed"), std::string_view::npos)
      << c.status().ToString();
  // The name it does carry, asked for explicitly, passes.
  ClientOptions right_name = TlsClient();
  right_name.tls.server_name = "localhost";
  c = Client::Connect(right_name);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Without verification it connects (encrypted, unauthenticated).
  ClientOptions insecure = untrusted;
  insecure.tls.verify = false;
  c = Client::Connect(insecure);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectServes(c->get(), "insecure");
  // TLS settings with TLS off: refused, never a silent plain connection.
  ClientOptions off = TlsClient();
  off.tls.enabled = false;
  c = Client::Connect(off);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << c.status().ToString();
  // An unreadable CA file is the caller's error, said before any traffic.
  ClientOptions missing = TlsClient();
  missing.tls.ca_file = dir_.File("no-such-ca.pem");
  c = Client::Connect(missing);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << c.status().ToString();
  EXPECT_NE(c.status().message().find("no-such-ca.pem"), std::string_view::npos);
}

TEST_F(SecurityTest, ClientRefusesAnExpiredCertificate) {
  ServerOptions o = Tls();
  o.tls.cert_file = pki_.expired_server_cert;
  o.tls.key_file = pki_.expired_server_key;
  Start(o);
  auto c = Client::Connect(TlsClient());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("expired"), std::string_view::npos)
      << c.status().ToString();
}

TEST_F(SecurityTest, MutualTlsRequiresAClientCertificateFromTheClientCa) {
  ServerOptions o = Tls();
  o.tls.client_ca_file = pki_.ca_cert;
  Start(o);
  EXPECT_EQ(served_.server->security(), "TLS 1.2+, client certificates required");
  // No certificate: the server ends the handshake (with TLS 1.3 the client
  // learns it at its first read, the hello).
  auto c = Client::Connect(TlsClient());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().ToString();
  // A certificate from another CA.
  ClientOptions other = TlsClient();
  other.tls.cert_file = pki_.other_client_cert;
  other.tls.key_file = pki_.other_client_key;
  c = Client::Connect(other);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return Counters().tls_handshake_failures == 2; }))
      << Counters().tls_handshake_failures;
  // The right one.
  ClientOptions good = TlsClient();
  good.tls.cert_file = pki_.client_cert;
  good.tls.key_file = pki_.client_key;
  c = Client::Connect(good);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectServes(c->get(), "mtls");
  // Half a client certificate is refused before connecting.
  ClientOptions half = TlsClient();
  half.tls.cert_file = pki_.client_cert;
  c = Client::Connect(half);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << c.status().ToString();
}

TEST_F(SecurityTest, TlsHandshakeNotStartedInTimeIsClosed) {
  ServerOptions o = Tls();
  o.frame_timeout = milliseconds(300);
  Start(o);
  testing::RawConn idle;
  ASSERT_TRUE(idle.Connect(served_.server->port()));
  EXPECT_TRUE(idle.WaitClosed());
  EXPECT_TRUE(WaitFor([&] { return Counters().connections_slow_closed == 1; }));
  EXPECT_EQ(Counters().tls_handshake_failures, 1u);
  EXPECT_TRUE(WaitFor([&] { return Counters().connections_open == 0; }));
}

// ---- shared secret ----

TEST_F(SecurityTest, SecretIsRequiredBeforeAnyRequest) {
  WriteFile(secrets_, "# rotation: both are valid\n" + kSecretA + "\n\n  " + kSecretB + "  \n");
  ServerOptions o;
  o.auth_secret_file = secrets_;
  Start(o);
  EXPECT_EQ(served_.server->security(), "plain TCP, shared secret required");

  // Hello without the secret.
  auto c = Client::Connect(Plain());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnauthenticated) << c.status().ToString();

  // No hello at all: every request is refused, the connection stays usable.
  ClientOptions quiet = Plain();
  quiet.hello = false;
  c = Client::Connect(quiet);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto got = (*c)->Get("u");
  EXPECT_EQ(got.status().code(), Code::kUnauthenticated) << got.status().ToString();
  EXPECT_NE(got.status().message().find("hello"), std::string_view::npos);
  const std::vector<SegmentUpdate> segs = {{1, 3600, true, {}, {}}};
  EXPECT_EQ((*c)->Upsert("u", segs).status().code(), Code::kUnauthenticated);
  EXPECT_EQ((*c)->Delete("u").status().code(), Code::kUnauthenticated);
  EXPECT_EQ((*c)->Ping().code(), Code::kUnauthenticated);
  EXPECT_EQ((*c)->Stats().status().code(), Code::kUnauthenticated);

  // Either secret of the file serves.
  for (const std::string& secret : {kSecretA, kSecretB}) {
    ClientOptions ok = Plain();
    ok.auth_secret = secret;
    c = Client::Connect(ok);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ExpectServes(c->get(), "authed");
  }
  // Nothing was written by the refused requests.
  EXPECT_EQ(Counters().auth_failures, 0u);
}

// End of stream before authentication: requests read are answered (here
// Unauthenticated), then the connection closes.
TEST_F(SecurityTest, EndOfStreamBeforeAuthenticationAnswersThenCloses) {
  StartWithSecret();
  testing::RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  ASSERT_TRUE(raw.Write(testing::MakeFrame(static_cast<uint8_t>(proto::Op::kPing), 9, "")));
  raw.ShutdownWrite();
  EXPECT_TRUE(raw.Expect(9, Code::kUnauthenticated));
  EXPECT_TRUE(raw.ExpectClosed());
}

TEST_F(SecurityTest, WrongSecretClosesTheConnection) {
  StartWithSecret();
  for (const std::string& wrong : {kSecretA + "x", kSecretA.substr(1), std::string("short")}) {
    ClientOptions bad = Plain();
    bad.auth_secret = wrong;
    auto c = Client::Connect(bad);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), Code::kUnauthenticated) << c.status().ToString();
    EXPECT_NE(c.status().message().find("wrong shared secret"), std::string_view::npos)
        << c.status().ToString();
  }
  EXPECT_EQ(Counters().auth_failures, 3u);
  // At the frame level: the error answers the hello, then the server closes.
  testing::RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  std::string hello;
  proto::Encode(proto::HelloRequest{"raw", "not the secret at all"}, &hello);
  ASSERT_TRUE(raw.Write(testing::MakeFrame(static_cast<uint8_t>(proto::Op::kHello), 5, hello)));
  EXPECT_TRUE(raw.Expect(5, Code::kUnauthenticated));
  EXPECT_TRUE(raw.ExpectClosed());
}

TEST_F(SecurityTest, UnauthenticatedConnectionIsClosedAfterTheFrameTimeout) {
  ServerOptions o;
  o.frame_timeout = milliseconds(300);
  StartWithSecret(o);
  testing::RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  // Requests answered Unauthenticated do not buy time.
  ASSERT_TRUE(raw.Write(testing::MakeFrame(static_cast<uint8_t>(proto::Op::kPing), 1, "")));
  EXPECT_TRUE(raw.Expect(1, Code::kUnauthenticated));
  testing::Frame f;
  ASSERT_EQ(raw.ReadFrame(&f), testing::RawConn::ReadResult::kFrame);
  EXPECT_EQ(f.id(), 0u);
  EXPECT_EQ(f.status(), Code::kUnauthenticated);
  EXPECT_TRUE(raw.ExpectClosed());
  EXPECT_EQ(Counters().connections_slow_closed, 1u);
  // An authenticated connection is not held to it.
  ClientOptions ok = Plain();
  ok.auth_secret = kSecretA;
  auto c = Client::Connect(ok);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::this_thread::sleep_for(milliseconds(700));
  ExpectServes(c->get(), "patient");
}

TEST_F(SecurityTest, BeforeAuthenticationOnlySmallFramesAreRead) {
  StartWithSecret();
  // A header announcing 1 MiB: refused at once, not buffered for 30 s.
  testing::RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port()));
  ASSERT_TRUE(raw.Write(testing::MakeHeader(static_cast<uint8_t>(proto::Op::kGet), 3, 1u << 20)));
  testing::Frame f;
  ASSERT_EQ(raw.ReadFrame(&f), testing::RawConn::ReadResult::kFrame);
  EXPECT_EQ(f.status(), Code::kLimitExceeded);
  EXPECT_NE(proto::DecodeError(f.body).find("before authentication"), std::string::npos)
      << proto::DecodeError(f.body);
  EXPECT_TRUE(raw.ExpectClosed());
  // Once authenticated, the usual limit applies: a 1 MiB batch is served.
  ClientOptions ok = Plain();
  ok.auth_secret = kSecretA;
  auto c = Client::Connect(ok);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::string> users(1000, std::string(200, 'u'));
  auto batch = (*c)->BatchGet(users);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->size(), users.size());
}

// A client without the secret pipelines requests and reads none of their
// refusals, then sends a frame the server must refuse and close on. That
// last refusal is queued behind answers the client never takes; the server
// gives up on it after a grace instead of holding the connection (and its
// buffers) for ever. Both ends' socket buffers are set small, so that what
// the kernel can hold does not depend on the machine's tcp_rmem/tcp_wmem,
// and the refusal is triggered by the byte stream itself, not by a clock.
TEST_F(SecurityTest, AClientThatDoesNotReadItsRefusalIsClosedAnyway) {
  ServerOptions o;
  o.frame_timeout = std::chrono::minutes(10);  // only the grace can close it in time
  o.max_pending_bytes = 8u << 20;              // never paused: every byte sent is read
  o.socket_send_buffer = 4096;
  StartWithSecret(o);
  testing::RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port(), /*rcvbuf=*/4096));
  // 4,000 pings, each refused with about 110 bytes (440 KB): far more than
  // the two socket buffers hold (tens of KB), far less than max_pending_bytes.
  // Then a header announcing more than may come before authentication.
  constexpr uint32_t kRefused = 4000;
  std::string burst;
  for (uint32_t i = 1; i <= kRefused; ++i) {
    burst += testing::MakeFrame(static_cast<uint8_t>(proto::Op::kPing), i, "");
  }
  burst += testing::MakeHeader(static_cast<uint8_t>(proto::Op::kGet), kRefused + 1, 1u << 20);
  ASSERT_TRUE(raw.Write(burst, /*drain=*/false));
  // The refusal waits behind the unread answers, and the server gives up on
  // it. (20 s only guards against a hang; the grace is 2 s.)
  EXPECT_TRUE(OneConnectionAcceptedAndClosed()) << Counters().connections_open;
  EXPECT_EQ(Counters().broken_frames, 1u);
  EXPECT_EQ(Counters().connections_slow_closed, 0u);
  // What the kernel held reaches the client, then the close: ping refusals
  // only, never the LimitExceeded one the server gave up on.
  uint32_t answers = 0;
  testing::Frame f;
  while (raw.ReadFrame(&f) == testing::RawConn::ReadResult::kFrame) {
    ASSERT_EQ(f.status(), Code::kUnauthenticated) << "request " << f.id();
    ASSERT_LE(f.id(), kRefused);
    ++answers;
  }
  EXPECT_LT(answers, kRefused);
}

// The same client without that last frame, paused by backpressure: its
// deadline for authenticating still closes it, though the refusal that
// says so cannot be written either.
TEST_F(SecurityTest, AFloodingClientPausedByBackpressureIsClosedAtItsDeadline) {
  ServerOptions o;
  o.frame_timeout = milliseconds(300);
  o.max_pending_bytes = 64 * 1024;
  o.socket_send_buffer = 4096;
  StartWithSecret(o);
  testing::RawConn raw;
  ASSERT_TRUE(raw.Connect(served_.server->port(), /*rcvbuf=*/4096));
  // 2,000 pings (32 KB) whose refusals (220 KB) are more than the socket
  // buffers and max_pending_bytes together: the server stops reading. (Some
  // 800 pings are enough for that; whether the kernel takes the rest without
  // the server reading them does not matter.)
  std::string burst;
  for (uint32_t i = 1; i <= 2000; ++i) {
    burst += testing::MakeFrame(static_cast<uint8_t>(proto::Op::kPing), i, "");
  }
  (void)raw.Write(burst, /*drain=*/false, milliseconds(1000));
  EXPECT_TRUE(OneConnectionAcceptedAndClosed()) << Counters().connections_open;
  EXPECT_EQ(Counters().connections_slow_closed, 1u);
}

TEST_F(SecurityTest, SecretAndMutualTlsTogether) {
  ServerOptions o = Tls();
  o.tls.client_ca_file = pki_.ca_cert;
  o.tls.min_version = "1.3";
  StartWithSecret(o);
  EXPECT_EQ(served_.server->security(),
            "TLS 1.3+, client certificates required, shared secret required");
  ClientOptions co = TlsClient();
  co.tls.cert_file = pki_.client_cert;
  co.tls.key_file = pki_.client_key;
  auto no_secret = Client::Connect(co);
  ASSERT_FALSE(no_secret.ok());
  EXPECT_EQ(no_secret.status().code(), Code::kUnauthenticated);
  co.auth_secret = kSecretA;
  auto c = Client::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectServes(c->get(), "both");
}

// ---- loading and reloading ----

TEST_F(SecurityTest, ReloadServesNewConnectionsWithTheNewCredentials) {
  StartWithSecret(Tls());
  ClientOptions a = TlsClient();
  a.auth_secret = kSecretA;
  auto before = Client::Connect(a);
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  // Rotate: a new secret, and a certificate from another CA.
  WriteFile(secrets_, kSecretB + "\n");
  std::filesystem::copy_file(pki_.other_server_cert, pki_.server_cert,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki_.other_server_key, pki_.server_key,
                             std::filesystem::copy_options::overwrite_existing);
  Status s = served_.server->ReloadCredentials();
  ASSERT_TRUE(s.ok()) << s.ToString();

  ClientOptions b = TlsClient();
  b.tls.ca_file = pki_.other_ca_cert;
  b.auth_secret = kSecretB;
  auto after = Client::Connect(b);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ExpectServes(after->get(), "rotated");
  // The old secret and the old CA no longer get in.
  ClientOptions old_secret = b;
  old_secret.auth_secret = kSecretA;
  EXPECT_EQ(Client::Connect(old_secret).status().code(), Code::kUnauthenticated);
  EXPECT_EQ(Client::Connect(a).status().code(), Code::kUnavailable);
  // The connection made before goes on as it was.
  ExpectServes(before->get(), "before-rotation");

  // A reload that fails keeps what is in force.
  WriteFile(secrets_, "too short\n");
  s = served_.server->ReloadCredentials();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("line 1"), std::string_view::npos) << s.ToString();
  after = Client::Connect(b);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
}

TEST_F(SecurityTest, UnusableCredentialsAreClearErrors) {
  auto load = [](ServerOptions o) { return Credentials::Load(o).status(); };
  ServerOptions o = Tls();
  EXPECT_TRUE(load(o).ok());
  // A key that is not the certificate's.
  o.tls.key_file = pki_.other_server_key;
  Status s = load(o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("is not the key of the certificate"), std::string_view::npos) << s.ToString();
  // A missing file names the setting and the path.
  o = Tls();
  o.tls.cert_file = dir_.File("missing.pem");
  s = load(o);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("tls.cert_file"), std::string_view::npos) << s.ToString();
  // A file that is not PEM.
  WriteFile(dir_.File("junk.pem"), "not a certificate\n", 0644);
  o = Tls();
  o.tls.cert_file = dir_.File("junk.pem");
  s = load(o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  o = Tls();
  o.tls.client_ca_file = dir_.File("junk.pem");
  s = load(o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tls.client_ca_file"), std::string_view::npos) << s.ToString();
  // A secret file without a secret.
  WriteFile(secrets_, "# nothing yet\n\n");
  o = ServerOptions{};
  o.auth_secret_file = secrets_;
  s = load(o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
}

TEST(SecretFileTest, ReadsOneSecretPerLineAndSaysWhatIsWrong) {
  storage::testing::TempDir dir;
  const std::string path = dir.File("s");
  WriteFile(path, "# comment\n\n\t" + kSecretA + " \r\n" + kSecretB + "\n", 0640);
  bool loose = false;
  auto got = ReadSecretFile(path, &loose);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, (std::vector<std::string>{kSecretA, kSecretB}));
  EXPECT_TRUE(loose);
  ::chmod(path.c_str(), 0600);
  ASSERT_TRUE(ReadSecretFile(path, &loose).ok());
  EXPECT_FALSE(loose);

  WriteFile(path, kSecretA + "\nshort\n");
  auto bad = ReadSecretFile(path);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("line 2"), std::string_view::npos) << bad.status().ToString();
  WriteFile(path, std::string(kMaxSecretBytes + 1, 'x') + "\n");
  EXPECT_EQ(ReadSecretFile(path).status().code(), Code::kInvalidArgument);
  WriteFile(path, "\n# only comments\n");
  EXPECT_EQ(ReadSecretFile(path).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ReadSecretFile(dir.File("missing")).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace segstore::server
