// The connection-security flags every tool shares (src/tools/client_flags.h):
// parsed from a command line, applied to ClientOptions, with their errors
// and warnings.
#include "tools/client_flags.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "storage/test_util.h"

namespace segstore::tools {
namespace {

using Code = Status::Code;

class ClientFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv(kAuthSecretFileEnv);
    secret_ = dir_.File("secret");
    Write(secret_, "# the loader's\nloader-secret-0123456789\n", 0600);
    Write(ca_, "not read by the flags, only checked for access\n", 0644);
  }
  void TearDown() override { ::unsetenv(kAuthSecretFileEnv); }

  static void Write(const std::string& path, const std::string& text, mode_t mode) {
    std::ofstream(path, std::ios::trunc) << text;
    ::chmod(path.c_str(), mode);
  }

  // Parses `args` (after the program name) and applies them to options for `host`.
  Status Apply(std::vector<std::string> args, const std::string& host = "127.0.0.1") {
    CLI::App app;
    ClientFlags flags;
    AddClientFlags(&app, &flags);
    std::vector<const char*> argv = {"tool"};
    for (const auto& a : args) argv.push_back(a.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return Status::InvalidArgument(e.what());
    }
    options_ = client::ClientOptions{};
    options_.host = host;
    return ApplyClientFlags(flags, &options_, &warning_);
  }

  storage::testing::TempDir dir_;
  std::string secret_;
  std::string ca_ = dir_.File("ca.pem");
  client::ClientOptions options_;
  std::string warning_;
};

TEST_F(ClientFlagsTest, NoFlagsLeaveThePlainDefaults) {
  ASSERT_TRUE(Apply({}).ok());
  EXPECT_FALSE(options_.tls.enabled);
  EXPECT_TRUE(options_.auth_secret.empty());
  EXPECT_TRUE(warning_.empty());
}

TEST_F(ClientFlagsTest, AnyTlsFlagTurnsTlsOn) {
  ASSERT_TRUE(Apply({"--tls-ca", ca_}).ok());
  EXPECT_TRUE(options_.tls.enabled);
  EXPECT_TRUE(options_.tls.verify);
  EXPECT_EQ(options_.tls.ca_file, ca_);
  ASSERT_TRUE(Apply({"--tls-server-name", "profiles.internal"}).ok());
  EXPECT_TRUE(options_.tls.enabled);
  EXPECT_EQ(options_.tls.server_name, "profiles.internal");
  ASSERT_TRUE(Apply({"--tls-insecure"}).ok());
  EXPECT_TRUE(options_.tls.enabled);
  EXPECT_FALSE(options_.tls.verify);
  ASSERT_TRUE(Apply({"--tls-cert", ca_, "--tls-key", ca_}).ok());
  EXPECT_EQ(options_.tls.cert_file, ca_);
  EXPECT_EQ(options_.tls.key_file, ca_);
}

TEST_F(ClientFlagsTest, HalfOrContradictoryTlsFlagsAreErrors) {
  Status s = Apply({"--tls-cert", ca_});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-key"), std::string_view::npos) << s.ToString();
  EXPECT_EQ(Apply({"--tls-key", ca_}).code(), Code::kInvalidArgument);
  s = Apply({"--tls-insecure", "--tls-ca", ca_});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("verifies nothing"), std::string_view::npos) << s.ToString();
  s = Apply({"--tls-ca", dir_.File("missing.pem")});
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("--tls-ca"), std::string_view::npos) << s.ToString();
}

TEST_F(ClientFlagsTest, TheSecretComesFromTheFlagOrTheEnvironment) {
  ASSERT_TRUE(Apply({"--auth-secret-file", secret_}).ok());
  EXPECT_EQ(options_.auth_secret, "loader-secret-0123456789");
  EXPECT_TRUE(warning_.empty()) << warning_;

  const std::string other = dir_.File("other");
  Write(other, "from-the-environment-0123\n", 0600);
  ::setenv(kAuthSecretFileEnv, other.c_str(), 1);
  ASSERT_TRUE(Apply({}).ok());
  EXPECT_EQ(options_.auth_secret, "from-the-environment-0123");
  ASSERT_TRUE(Apply({"--auth-secret-file", secret_}).ok());  // the flag wins
  EXPECT_EQ(options_.auth_secret, "loader-secret-0123456789");

  ::setenv(kAuthSecretFileEnv, dir_.File("missing").c_str(), 1);
  Status s = Apply({});
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_NE(s.message().find(kAuthSecretFileEnv), std::string_view::npos) << s.ToString();
  ::unsetenv(kAuthSecretFileEnv);

  Write(other, "short\n", 0600);
  s = Apply({"--auth-secret-file", other});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--auth-secret-file"), std::string_view::npos) << s.ToString();
}

TEST_F(ClientFlagsTest, WarnsWhenTheSecretCouldBeRead) {
  // A file others may read.
  ::chmod(secret_.c_str(), 0644);
  ASSERT_TRUE(Apply({"--auth-secret-file", secret_}).ok());
  EXPECT_NE(warning_.find("chmod 600"), std::string::npos) << warning_;
  ::chmod(secret_.c_str(), 0600);
  // To another host without TLS, or without verifying it.
  ASSERT_TRUE(Apply({"--auth-secret-file", secret_}, "10.1.2.3").ok());
  EXPECT_NE(warning_.find("in clear"), std::string::npos) << warning_;
  ASSERT_TRUE(Apply({"--auth-secret-file", secret_, "--tls-insecure"}, "10.1.2.3").ok());
  EXPECT_NE(warning_.find("without certificate verification"), std::string::npos) << warning_;
  // Verified TLS, or loopback: nothing to say.
  ASSERT_TRUE(Apply({"--auth-secret-file", secret_, "--tls-ca", ca_}, "10.1.2.3").ok());
  EXPECT_TRUE(warning_.empty()) << warning_;
  ASSERT_TRUE(Apply({"--auth-secret-file", secret_}, "::1").ok());
  EXPECT_TRUE(warning_.empty()) << warning_;
}

}  // namespace
}  // namespace segstore::tools
