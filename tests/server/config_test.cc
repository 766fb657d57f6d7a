// segstored's configuration: the shipped file, the TOML loader's checks and
// the small parsers behind it.

#include "server/config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace segstore::server {
namespace {

using Code = Status::Code;
using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kShippedConfig = std::string(SEGSTORE_SOURCE_DIR) + "/config/segstored.toml";

Status Load(std::string_view text, Config* c) { return LoadConfigText(text, "test.toml", c); }

::testing::AssertionResult Rejected(std::string_view text, std::string_view must_mention) {
  Config c = DefaultConfig();
  Status s = Load(text, &c);
  if (s.ok()) return ::testing::AssertionFailure() << "accepted:\n" << text;
  if (s.code() != Code::kInvalidArgument) {
    return ::testing::AssertionFailure() << "wrong code: " << s.ToString();
  }
  if (s.message().find(must_mention) == std::string_view::npos) {
    return ::testing::AssertionFailure()
           << "message \"" << s.message() << "\" does not mention \"" << must_mention << "\"";
  }
  return ::testing::AssertionSuccess() << s.message();
}

// Every setting the file can carry, set away from its default, so that a key
// the shipped file leaves out shows up as a difference.
Config EveryKeyChanged() {
  Config c = DefaultConfig();
  c.server.host = "10.9.8.7";
  c.server.port = 1;
  c.server.threads = 77;
  c.server.max_connections = 7;
  c.server.idle_timeout = seconds(7);
  c.server.max_frame_bytes = 7777;
  c.server.max_in_flight = 7;
  c.server.max_pending_bytes = 777777;
  c.server.shutdown_timeout = seconds(77);
  c.server.auth_secret_file = "/etc/secret";
  c.server.tls = {"/c.pem", "/k.pem", "/ca.pem", "1.3"};
  c.max_batch = 7;
  c.storage.path = "/elsewhere";
  c.storage.file_size = 7ull << 30;
  c.storage.write_block_size = 64 * 1024;
  c.storage.durability = c.storage.durability == storage::Durability::kCommit
                             ? storage::Durability::kBuffered
                             : storage::Durability::kCommit;
  c.storage.flush_interval = std::chrono::microseconds(7);
  c.storage.align_records = !c.storage.align_records;
  c.storage.io_backend = storage::IoBackend::kSync;
  c.storage.queue_depth = 7;
  c.storage.max_key_size = 7;
  c.storage.background_defrag = !c.storage.background_defrag;
  c.storage.defrag_threshold = 0.07;
  c.storage.defrag_blocks_per_second = 7;
  c.storage.rotate_blocks_per_second = 7;
  c.profile.max_segments = 7;
  c.profile.max_links = 7;
  c.profile.max_fields = 7;
  c.profile.max_field_bytes = 7;
  c.profile.max_field_names = 7;
  c.profile.sweeper = !c.profile.sweeper;
  c.profile.sweep_records_per_second = 7;
  c.profile.sweep_share = 0.07;
  c.profile.sweep_interval = milliseconds(7);
  c.profile.sweep_flush_interval = milliseconds(7);
  c.log_level = "off";
  return c;
}

// The settings Describe() leaves out, compared one by one.
void ExpectUndescribedEqual(const Config& got, const Config& want) {
  EXPECT_EQ(got.server.shutdown_timeout, want.server.shutdown_timeout);
  EXPECT_EQ(got.storage.queue_depth, want.storage.queue_depth);
  EXPECT_EQ(got.storage.max_key_size, want.storage.max_key_size);
  EXPECT_EQ(got.storage.defrag_threshold, want.storage.defrag_threshold);
  EXPECT_EQ(got.storage.defrag_blocks_per_second, want.storage.defrag_blocks_per_second);
  EXPECT_EQ(got.storage.rotate_blocks_per_second, want.storage.rotate_blocks_per_second);
  EXPECT_EQ(got.profile.sweep_interval, want.profile.sweep_interval);
  EXPECT_EQ(got.profile.sweep_flush_interval, want.profile.sweep_flush_interval);
}

TEST(ConfigTest, ShippedFileLoadsAndDocumentsTheDefaults) {
  Config c = DefaultConfig();
  Status s = LoadConfigFile(kShippedConfig, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto got = Describe(c);
  const auto want = Describe(DefaultConfig());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "key " << want[i].name << " differs from the default";
  }
  ExpectUndescribedEqual(c, DefaultConfig());
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ConfigTest, ShippedFileSetsEveryKey) {
  Config c = EveryKeyChanged();
  Status s = LoadConfigFile(kShippedConfig, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto got = Describe(c);
  const auto want = Describe(DefaultConfig());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "the shipped file does not set " << want[i].name;
  }
  ExpectUndescribedEqual(c, DefaultConfig());
}

TEST(ConfigTest, EmptyTextChangesNothing) {
  Config c = EveryKeyChanged();
  ASSERT_TRUE(Load("", &c).ok());
  EXPECT_EQ(Describe(c), Describe(EveryKeyChanged()));
}

TEST(ConfigTest, ValuesAreApplied) {
  Config c = DefaultConfig();
  Status s = Load(R"(
[server]
listen = "[::1]:7800"
threads = 3
idle_timeout_seconds = 30
max_frame_bytes = 65536
max_pending_bytes = "2MiB"
shutdown_timeout_seconds = 0
[storage]
path = "/data/s.dat"
file_size = "64GiB"
write_block_size = "4MiB"
durability = "buffered"
io_backend = "io_uring"
defrag_threshold = 0
[profile]
sweeper = false
sweep_share = 1
max_fields = 4096
max_field_bytes = 65536
max_field_names = 0
[log]
level = "debug"
)",
                  &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.server.host, "::1");
  EXPECT_EQ(c.server.port, 7800);
  EXPECT_EQ(c.server.threads, 3u);
  EXPECT_EQ(c.server.idle_timeout, seconds(30));
  EXPECT_EQ(c.server.max_frame_bytes, 65536u);
  EXPECT_EQ(c.server.max_pending_bytes, 2u << 20);
  EXPECT_EQ(c.server.shutdown_timeout, seconds(0));
  EXPECT_EQ(c.storage.path, "/data/s.dat");
  EXPECT_EQ(c.storage.file_size, uint64_t{64} << 30);
  EXPECT_EQ(c.storage.write_block_size, 4u << 20);
  EXPECT_EQ(c.storage.durability, storage::Durability::kBuffered);
  EXPECT_EQ(c.storage.io_backend, storage::IoBackend::kIoUring);
  EXPECT_EQ(c.storage.defrag_threshold, 0.0);
  EXPECT_FALSE(c.profile.sweeper);
  EXPECT_EQ(c.profile.sweep_share, 1.0);
  EXPECT_EQ(c.profile.max_fields, 4096u);
  EXPECT_EQ(c.profile.max_field_bytes, 65536u);
  EXPECT_EQ(c.profile.max_field_names, 0u);
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ConfigTest, TlsAndAuthSettingsAreAppliedAndChecked) {
  Config c = DefaultConfig();
  Status s = Load(R"(
[server]
auth_secret_file = "/etc/segstore/secrets"
[tls]
cert_file = "/etc/segstore/server.pem"
key_file = "/etc/segstore/server.key"
client_ca_file = "/etc/segstore/clients-ca.pem"
min_version = "1.3"
)",
                  &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.server.auth_secret_file, "/etc/segstore/secrets");
  EXPECT_TRUE(c.server.tls.enabled());
  EXPECT_EQ(c.server.tls.cert_file, "/etc/segstore/server.pem");
  EXPECT_EQ(c.server.tls.key_file, "/etc/segstore/server.key");
  EXPECT_EQ(c.server.tls.client_ca_file, "/etc/segstore/clients-ca.pem");
  EXPECT_EQ(c.server.tls.min_version, "1.3");
  EXPECT_TRUE(Validate(c).ok());
  EXPECT_FALSE(DefaultConfig().server.tls.enabled());

  EXPECT_TRUE(Rejected("[tls]\nmin_version = \"1.1\"\n", "tls.min_version"));
  EXPECT_TRUE(Rejected("[tls]\ncert_file = 1\n", "tls.cert_file"));
  EXPECT_TRUE(Rejected("[tls]\nkeyfile = \"k\"\n", "tls.keyfile"));
  // A certificate without its key, or a key or client CAs without a
  // certificate, is half a setup.
  Config half = DefaultConfig();
  half.server.tls.cert_file = "/c.pem";
  EXPECT_EQ(Validate(half).code(), Code::kInvalidArgument);
  half = DefaultConfig();
  half.server.tls.key_file = "/k.pem";
  EXPECT_EQ(Validate(half).code(), Code::kInvalidArgument);
  half = DefaultConfig();
  half.server.tls.client_ca_file = "/ca.pem";
  EXPECT_NE(Validate(half).message().find("tls.cert_file"), std::string_view::npos);
}

TEST(ConfigTest, SizesAreStringsWithUnitsOrIntegers) {
  Config c = DefaultConfig();
  ASSERT_TRUE(Load("[storage]\nfile_size = \"4GiB\"\n", &c).ok());
  EXPECT_EQ(c.storage.file_size, uint64_t{4} << 30);
  ASSERT_TRUE(Load("[storage]\nfile_size = 1073741824\n", &c).ok());
  EXPECT_EQ(c.storage.file_size, uint64_t{1} << 30);
  ASSERT_TRUE(Load("[storage]\nfile_size = \"512MiB\"\n", &c).ok());
  EXPECT_EQ(c.storage.file_size, uint64_t{512} << 20);
  ASSERT_TRUE(Load("[server]\nmax_pending_bytes = \"64KiB\"\n", &c).ok());
  EXPECT_EQ(c.server.max_pending_bytes, 64u * 1024);
  ASSERT_TRUE(Load("[server]\nmax_frame_bytes = 4096\n", &c).ok());
  EXPECT_EQ(c.server.max_frame_bytes, 4096u);
}

TEST(ConfigTest, UnknownSectionIsRejectedWithItsLine) {
  EXPECT_TRUE(Rejected("[server]\nthreads = 1\n\n[srever]\nthreads = 2\n", "line 4"));
  EXPECT_TRUE(Rejected("[server]\nthreads = 1\n\n[srever]\nthreads = 2\n", "srever"));
  EXPECT_TRUE(Rejected("\nthreads = 1\n", "line 2"));  // a key outside any section
}

TEST(ConfigTest, UnknownKeyIsRejectedWithItsLine) {
  const char* text = "# comment\n[server]\nthreads = 1\nmax_conections = 5\n";
  EXPECT_TRUE(Rejected(text, "line 4"));
  EXPECT_TRUE(Rejected(text, "server.max_conections"));
  EXPECT_TRUE(Rejected("[storage]\n\n\npath = \"x\"\nsize = 1\n", "line 5"));
  EXPECT_TRUE(Rejected("[log]\nlevel = \"info\"\n[log.sub]\nx = 1\n", "log.sub"));
}

TEST(ConfigTest, SyntaxErrorIsRejectedWithItsLine) {
  EXPECT_TRUE(Rejected("[server]\nthreads = 1\nthreads 2\n", "line 3"));
  EXPECT_TRUE(Rejected("[server]\nthreads = 1\nthreads = 2\n", "line 3"));  // duplicate key
}

TEST(ConfigTest, WrongTypeIsRejectedNamingTheKey) {
  EXPECT_TRUE(Rejected("[server]\nthreads = \"four\"\n", "server.threads"));
  EXPECT_TRUE(Rejected("[server]\nthreads = 2.5\n", "server.threads"));
  EXPECT_TRUE(Rejected("[server]\nlisten = 7700\n", "server.listen"));
  EXPECT_TRUE(Rejected("[storage]\nalign_records = 1\n", "storage.align_records"));
  EXPECT_TRUE(Rejected("[storage]\nfile_size = 4.5\n", "storage.file_size"));
  EXPECT_TRUE(Rejected("[storage]\nfile_size = true\n", "storage.file_size"));
  EXPECT_TRUE(Rejected("[storage]\ndefrag_threshold = \"half\"\n", "storage.defrag_threshold"));
  EXPECT_TRUE(Rejected("[profile]\nsweeper = \"yes\"\n", "profile.sweeper"));
  EXPECT_TRUE(Rejected("[log]\nlevel = 3\n", "log.level"));
  EXPECT_TRUE(Rejected("server = 1\n", "server"));  // a section that is not a table
}

TEST(ConfigTest, OutOfRangeValuesAreRejected) {
  EXPECT_TRUE(Rejected("[server]\nthreads = 5000\n", "server.threads"));
  EXPECT_TRUE(Rejected("[server]\nthreads = -1\n", "server.threads"));
  EXPECT_TRUE(Rejected("[server]\nmax_connections = 0\n", "server.max_connections"));
  EXPECT_TRUE(Rejected("[server]\nidle_timeout_seconds = 0\n", "server.idle_timeout_seconds"));
  EXPECT_TRUE(Rejected("[server]\nmax_frame_bytes = \"1KiB\"\n", "server.max_frame_bytes"));
  EXPECT_TRUE(Rejected("[server]\nmax_frame_bytes = \"1GiB\"\n", "server.max_frame_bytes"));
  EXPECT_TRUE(Rejected("[server]\nmax_pending_bytes = \"2GiB\"\n", "server.max_pending_bytes"));
  EXPECT_TRUE(Rejected("[server]\nmax_in_flight = 0\n", "server.max_in_flight"));
  EXPECT_TRUE(Rejected("[storage]\nfile_size = \"1MiB\"\n", "storage.file_size"));
  EXPECT_TRUE(Rejected("[storage]\nfile_size = \"17TiB\"\n", "storage.file_size"));
  EXPECT_TRUE(Rejected("[storage]\nfile_size = -1\n", "storage.file_size"));
  EXPECT_TRUE(Rejected("[storage]\nwrite_block_size = \"16MiB\"\n", "storage.write_block_size"));
  EXPECT_TRUE(Rejected("[storage]\ndefrag_threshold = 0.99\n", "storage.defrag_threshold"));
  EXPECT_TRUE(Rejected("[storage]\ndefrag_threshold = nan\n", "storage.defrag_threshold"));
  EXPECT_TRUE(Rejected("[profile]\nsweep_share = 0\n", "profile.sweep_share"));
  EXPECT_TRUE(Rejected("[profile]\nmax_fields = 0\n", "profile.max_fields"));
  EXPECT_TRUE(Rejected("[profile]\nmax_fields = 4097\n", "profile.max_fields"));
  EXPECT_TRUE(Rejected("[profile]\nmax_field_bytes = 0\n", "profile.max_field_bytes"));
  EXPECT_TRUE(Rejected("[profile]\nmax_field_bytes = 65537\n", "profile.max_field_bytes"));
  EXPECT_TRUE(Rejected("[profile]\nmax_field_names = 1048577\n", "profile.max_field_names"));
  EXPECT_TRUE(Rejected("[storage]\nqueue_depth = 4\n", "storage.queue_depth"));
  // Values that are the wrong word.
  EXPECT_TRUE(Rejected("[storage]\ndurability = \"sometimes\"\n", "storage.durability"));
  EXPECT_TRUE(Rejected("[storage]\nio_backend = \"epoll\"\n", "storage.io_backend"));
  EXPECT_TRUE(Rejected("[storage]\npath = \"\"\n", "storage.path"));
  EXPECT_TRUE(Rejected("[log]\nlevel = \"verbose\"\n", "log.level"));
  EXPECT_TRUE(Rejected("[server]\nlisten = \"localhost\"\n", "server.listen"));
  EXPECT_TRUE(Rejected("[storage]\nfile_size = \"4 GB\"\n", "storage.file_size"));
}

TEST(ConfigTest, RejectedLoadNamesTheOrigin) {
  Config c = DefaultConfig();
  Status s = LoadConfigText("[server]\nthreads = -1\n", "/etc/segstored.toml", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/etc/segstored.toml"), std::string_view::npos) << s.message();
  EXPECT_NE(s.message().find("line 2"), std::string_view::npos) << s.message();
}

TEST(ConfigTest, LoadConfigFileOnMissingFileIsNotFound) {
  Config c = DefaultConfig();
  Status s = LoadConfigFile(std::string(SEGSTORE_SOURCE_DIR) + "/config/no-such-file.toml", &c);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_EQ(Describe(c), Describe(DefaultConfig()));
}

TEST(ConfigTest, ParseListenAcceptsHostPortV6AndPortOnly) {
  ServerOptions o;
  ASSERT_TRUE(ParseListen("127.0.0.1:7700", &o).ok());
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.port, 7700);
  ASSERT_TRUE(ParseListen("[::1]:80", &o).ok());
  EXPECT_EQ(o.host, "::1");
  EXPECT_EQ(o.port, 80);
  ASSERT_TRUE(ParseListen(":9000", &o).ok());
  EXPECT_EQ(o.host, "::1");  // unchanged
  EXPECT_EQ(o.port, 9000);
  ASSERT_TRUE(ParseListen("example.com:0", &o).ok());
  EXPECT_EQ(o.host, "example.com");
  EXPECT_EQ(o.port, 0);
  ASSERT_TRUE(ParseListen("0.0.0.0:65535", &o).ok());
  EXPECT_EQ(o.port, 65535);
}

TEST(ConfigTest, ParseListenRejectsMalformedAddresses) {
  for (const char* bad : {"host", "h:70000", "h:65536", "h:-1", "::1:80", "h:", "h:80x", "h: 80",
                          "h:+80", "", "[::1]", "[::1]80"}) {
    ServerOptions o;
    o.host = "unchanged";
    o.port = 1234;
    Status s = ParseListen(bad, &o);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << "\"" << bad << "\" was accepted";
    EXPECT_EQ(o.host, "unchanged") << bad;
    EXPECT_EQ(o.port, 1234) << bad;
  }
}

TEST(ConfigTest, AdminListenTakesAnAddressOrOff) {
  Config c = DefaultConfig();
  EXPECT_TRUE(c.admin.enabled);
  EXPECT_EQ(c.admin.host, "127.0.0.1");
  EXPECT_EQ(c.admin.port, kDefaultAdminPort);
  ASSERT_TRUE(LoadConfigText("[admin]\nlisten = \"off\"\n", "t", &c).ok());
  EXPECT_FALSE(c.admin.enabled);
  ASSERT_TRUE(LoadConfigText("[admin]\nlisten = \"10.0.0.5:9100\"\n", "t", &c).ok());
  EXPECT_TRUE(c.admin.enabled);
  EXPECT_EQ(c.admin.host, "10.0.0.5");
  EXPECT_EQ(c.admin.port, 9100);
  Status s = LoadConfigText("[admin]\nlisten = \"nowhere\"\n", "t", &c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("admin.listen"), std::string::npos) << s.ToString();
  EXPECT_EQ(c.admin.port, 9100);  // unchanged by the refused value
}

TEST(ConfigTest, RespListenTakesAnAddressOrOff) {
  Config c = DefaultConfig();
  EXPECT_TRUE(c.server.resp_host.empty());  // off unless configured
  ASSERT_TRUE(LoadConfigText("[resp]\nlisten = \"127.0.0.1:6380\"\n", "t", &c).ok());
  EXPECT_EQ(c.server.resp_host, "127.0.0.1");
  EXPECT_EQ(c.server.resp_port, 6380);
  EXPECT_TRUE(Validate(c).ok());
  Status s = LoadConfigText("[resp]\nlisten = \"6380\"\n", "t", &c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("resp.listen"), std::string::npos) << s.ToString();
  EXPECT_EQ(c.server.resp_port, 6380);  // unchanged by the refused value
  c.server.resp_port = c.server.port;
  s = Validate(c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("resp.listen must use another port than server.listen"),
            std::string::npos)
      << s.ToString();
  c.server.resp_port = c.admin.port;
  EXPECT_NE(Validate(c).message().find("admin.listen"), std::string::npos);
  ASSERT_TRUE(LoadConfigText("[resp]\nlisten = \"off\"\n", "t", &c).ok());
  EXPECT_TRUE(c.server.resp_host.empty());
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ConfigTest, ValidateRejectsTheAdminEndpointOnTheClientPort) {
  Config c = DefaultConfig();
  c.admin.port = c.server.port;
  Status s = Validate(c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("admin.listen"), std::string::npos) << s.ToString();
  c.admin.enabled = false;
  EXPECT_TRUE(Validate(c).ok());
  c.admin.enabled = true;
  c.admin.port = 0;
  c.server.port = 0;  // both ephemeral: they cannot collide
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ConfigTest, ParseBytesReadsUnits) {
  struct Case {
    const char* text;
    uint64_t bytes;
  };
  for (const Case& c :
       {Case{"0", 0}, Case{"4294967296", uint64_t{1} << 32}, Case{"17B", 17},
        Case{"64KiB", 64 * 1024}, Case{"64K", 64 * 1024}, Case{"512MiB", uint64_t{512} << 20},
        Case{"4GiB", uint64_t{4} << 30}, Case{"4 GiB", uint64_t{4} << 30},
        Case{"2TiB", uint64_t{2} << 40}, Case{"3G", uint64_t{3} << 30},
        Case{"18446744073709551615", UINT64_MAX}, Case{"16777215TiB", uint64_t{16777215} << 40}}) {
    uint64_t got = 1;
    Status s = ParseBytes(c.text, &got);
    ASSERT_TRUE(s.ok()) << c.text << ": " << s.ToString();
    EXPECT_EQ(got, c.bytes) << c.text;
  }
}

TEST(ConfigTest, ParseBytesRejectsOverflowAndJunk) {
  for (const char* bad :
       {"", "GiB", "-1", "4gib", "4GB", "4 XiB", "1.5GiB", " 4GiB", "18446744073709551616",
        "16777216TiB", "17179869184GiB", "99999999999999999999999", "4GiBs"}) {
    uint64_t got = 42;
    Status s = ParseBytes(bad, &got);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << "\"" << bad << "\" was accepted as " << got;
    EXPECT_EQ(got, 42u) << bad;
  }
}

TEST(ConfigTest, ParseDurabilityKnowsCommitAndBuffered) {
  storage::Durability d = storage::Durability::kBuffered;
  ASSERT_TRUE(ParseDurability("commit", &d).ok());
  EXPECT_EQ(d, storage::Durability::kCommit);
  ASSERT_TRUE(ParseDurability("buffered", &d).ok());
  EXPECT_EQ(d, storage::Durability::kBuffered);
  for (const char* bad : {"", "Commit", "sync", "commit "}) {
    EXPECT_EQ(ParseDurability(bad, &d).code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(d, storage::Durability::kBuffered) << bad;
  }
}

TEST(ConfigTest, ValidateAcceptsTheDefaults) { EXPECT_TRUE(Validate(DefaultConfig()).ok()); }

TEST(ConfigTest, ValidateRejectsBlockSizeThatIsNotAPowerOfTwo) {
  Config c = DefaultConfig();
  c.storage.write_block_size = 3u << 20;
  Status s = Validate(c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("write_block_size"), std::string_view::npos) << s.message();

  // The same value from a file passes the loader's range check; Validate is
  // what catches it.
  c = DefaultConfig();
  ASSERT_TRUE(Load("[storage]\nwrite_block_size = \"768KiB\"\n", &c).ok());
  EXPECT_EQ(Validate(c).code(), Code::kInvalidArgument);
}

TEST(ConfigTest, ValidateRejectsFileSmallerThanFourBlocks) {
  Config c = DefaultConfig();
  ASSERT_TRUE(Load("[storage]\nfile_size = \"16MiB\"\nwrite_block_size = \"8MiB\"\n", &c).ok());
  Status s = Validate(c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("file_size"), std::string_view::npos) << s.message();
}

TEST(ConfigTest, DescribeLineListsEverySetting) {
  const Config c = DefaultConfig();
  const std::string line = DescribeLine(c);
  for (const StatEntry& e : Describe(c)) {
    EXPECT_NE(line.find(e.name.substr(7) + "="), std::string::npos) << e.name;
  }
  EXPECT_NE(line.find("server.listen=127.0.0.1:7700"), std::string::npos) << line;
}
// storage.index_checkpoint: "auto" puts it beside a data file and turns it
// off beside a block device; "off" turns it off; a path is taken as it is,
// unless it is the data path itself; empty is refused.
TEST(ConfigTest, TheIndexCheckpointFollowsTheDataPath) {
  auto finish = [](std::string_view text, Config* c) {
    *c = DefaultConfig();
    c->storage.path = "/var/lib/segstore/segstore.dat";
    Status s = Load(text, c);
    return s.ok() ? FinishStorageConfig(c) : s;
  };
  Config c;
  ASSERT_TRUE(finish("", &c).ok());
  EXPECT_EQ(c.storage.index_checkpoint, "/var/lib/segstore/segstore.dat.index");
  ASSERT_TRUE(finish("[storage]\nindex_checkpoint = \"auto\"\n", &c).ok());
  EXPECT_EQ(c.storage.index_checkpoint, "/var/lib/segstore/segstore.dat.index");
  ASSERT_TRUE(finish("[storage]\nindex_checkpoint = \"off\"\n", &c).ok());
  EXPECT_EQ(c.storage.index_checkpoint, "");
  ASSERT_TRUE(finish("[storage]\nindex_checkpoint = \"/ssd/segstore.index\"\n", &c).ok());
  EXPECT_EQ(c.storage.index_checkpoint, "/ssd/segstore.index");

  Status s = finish("[storage]\nindex_checkpoint = \"/var/lib/segstore/segstore.dat\"\n", &c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("data path itself"), std::string_view::npos) << s.ToString();
  EXPECT_TRUE(Rejected("[storage]\nindex_checkpoint = \"\"\n", "index_checkpoint"));
  c = DefaultConfig();
  c.storage.path = "segstore-data/segstore.dat";
  ASSERT_TRUE(Load("[storage]\nindex_checkpoint = \"./segstore-data//segstore.dat\"\n", &c).ok());
  EXPECT_EQ(FinishStorageConfig(&c).code(), Code::kInvalidArgument);

  // Beside a block device there is no file to put it in: off unless named.
  std::string device;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    if (e.is_block_file(ec)) {
      device = e.path().string();
      break;
    }
  }
  if (device.empty()) GTEST_SKIP() << "no block device under /dev to name";
  c = DefaultConfig();
  c.storage.path = device;
  ASSERT_TRUE(FinishStorageConfig(&c).ok());
  EXPECT_EQ(c.storage.index_checkpoint, "") << device;
  c = DefaultConfig();
  c.storage.path = device;
  ASSERT_TRUE(Load("[storage]\nindex_checkpoint = \"/ssd/segstore.index\"\n", &c).ok());
  ASSERT_TRUE(FinishStorageConfig(&c).ok());
  EXPECT_EQ(c.storage.index_checkpoint, "/ssd/segstore.index");
}


// The shipped file's [cluster] section is commented out (it would make
// segstored join a cluster); uncommented, it loads and says what it shows.
TEST(ConfigTest, ShippedClusterExampleLoadsWhenUncommented) {
  std::ifstream in(kShippedConfig);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const size_t at = all.find("# [cluster]\n");
  ASSERT_NE(at, std::string::npos);
  std::string section;
  std::istringstream lines(all.substr(at));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# ", 0) == 0) section += line.substr(2) + "\n";
  }
  Config c = DefaultConfig();
  Status s = Load(section, &c);
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << section;
  ASSERT_TRUE(FinishClusterConfig(&c).ok());
  EXPECT_TRUE(c.cluster_enabled);
  EXPECT_EQ(c.cluster.etcd.endpoints, std::vector<std::string>{"http://127.0.0.1:2379"});
  EXPECT_EQ(c.cluster.prefix, "/segstore");
  EXPECT_EQ(c.cluster.etcd.timeout, milliseconds(2000));
  EXPECT_EQ(c.cluster.self.id, "node-1");
  EXPECT_EQ(c.cluster.self.address, "10.0.0.1:7700");
  EXPECT_EQ(c.cluster.self.rack, "rack-a");
  EXPECT_EQ(c.cluster.replication, 2u);
  EXPECT_EQ(c.cluster.initial_nodes, 3u);
  EXPECT_EQ(c.cluster.lease_ttl, seconds(10));
  EXPECT_EQ(c.cluster.poll_interval, milliseconds(500));
  ASSERT_TRUE(c.cluster_log_enabled);
  EXPECT_EQ(c.replica.log.brokers, "127.0.0.1:9092");
  EXPECT_EQ(c.replica.log.topic, "segstore");
  EXPECT_EQ(
      c.replica.log.properties,
      (std::vector<std::pair<std::string, std::string>>{{"socket.keepalive.enable", "true"}}));
  // The defaults it shows are the defaults.
  const cluster::AgentOptions defaults;
  EXPECT_EQ(c.cluster.prefix, defaults.prefix);
  EXPECT_EQ(c.cluster.etcd.timeout, defaults.etcd.timeout);
  EXPECT_EQ(c.cluster.lease_ttl, defaults.lease_ttl);
  EXPECT_EQ(c.cluster.poll_interval, defaults.poll_interval);
  const replica::ReplicaOptions log_defaults;
  EXPECT_EQ(c.replica.log.partitions, log_defaults.log.partitions);
  EXPECT_EQ(c.replica.log.append_timeout, log_defaults.log.append_timeout);
  EXPECT_EQ(c.replica.apply_timeout, log_defaults.apply_timeout);
  EXPECT_EQ(c.replica.applier.max_lag, log_defaults.applier.max_lag);
  EXPECT_EQ(c.replica.applier.window_seconds, log_defaults.applier.window_seconds);
  EXPECT_EQ(c.replica.applier.window_max_ids, log_defaults.applier.window_max_ids);
  EXPECT_EQ(c.replica.applier.checkpoint_interval, log_defaults.applier.checkpoint_interval);
  EXPECT_EQ(c.log_grace_seconds, DefaultConfig().log_grace_seconds);
  EXPECT_EQ(c.replica.passive, log_defaults.passive);
  EXPECT_EQ(c.storage.void_grace_seconds, 3600u);  // the log's grace reaches the layers below
  EXPECT_EQ(c.profile.log_grace_seconds, 3600u);
  bool described = false;
  bool log_described = false;
  for (const StatEntry& e : Describe(c)) {
    described |= e.name == "config.cluster.node_id";
    log_described |= e.name == "config.cluster_log.brokers";
  }
  EXPECT_TRUE(described);
  EXPECT_TRUE(log_described);
}

TEST(ConfigTest, NoClusterSectionMeansASingleServer) {
  Config c = DefaultConfig();
  ASSERT_TRUE(FinishClusterConfig(&c).ok());
  EXPECT_FALSE(c.cluster_enabled);
  for (const StatEntry& e : Describe(c))
    EXPECT_NE(e.name.rfind("config.cluster.", 0), 0u) << e.name;
}

TEST(ConfigTest, ClusterSettingsAreChecked) {
  EXPECT_TRUE(Rejected("[cluster]\netcd_endpoints = []\n", "etcd_endpoints"));
  EXPECT_TRUE(Rejected("[cluster]\netcd_endpoints = [1]\n", "etcd_endpoints"));
  EXPECT_TRUE(Rejected("[cluster]\nnode_id = \"a/b\"\n", "node_id"));
  EXPECT_TRUE(Rejected("[cluster]\nnode_id = \"\"\n", "node_id"));
  EXPECT_TRUE(Rejected("[cluster]\nadvertise = \"nohost\"\n", "advertise"));
  EXPECT_TRUE(Rejected("[cluster]\nadvertise = \":7700\"\n", "advertise"));
  EXPECT_TRUE(Rejected("[cluster]\nreplication = 0\n", "replication"));
  EXPECT_TRUE(Rejected("[cluster]\nlease_ttl_seconds = 1\n", "lease_ttl_seconds"));
  EXPECT_TRUE(Rejected("[cluster]\nsurprise = 1\n", "cluster.surprise"));

  auto finished = [](std::string_view text) {
    Config c = DefaultConfig();
    Status s = Load(text, &c);
    return s.ok() ? FinishClusterConfig(&c) : s;
  };
  const std::string base = "[cluster]\netcd_endpoints = [\"http://127.0.0.1:2379\"]\n";
  EXPECT_TRUE(finished(base + "node_id = \"n1\"\n").ok());
  Status s = finished(base);
  EXPECT_NE(s.message().find("node_id is required"), std::string_view::npos) << s.ToString();
  s = finished(base + "node_id = \"n1\"\nreplication = 2\ninitial_nodes = 2\n");
  EXPECT_NE(s.message().find("replicas need the cluster's log"), std::string_view::npos)
      << s.ToString();
  s = finished("[cluster]\nnode_id = \"n1\"\n");
  EXPECT_NE(s.message().find("need etcd_endpoints"), std::string_view::npos) << s.ToString();
  s = finished("[server]\nlisten = \"0.0.0.0:7700\"\n" + base + "node_id = \"n1\"\n");
  EXPECT_NE(s.message().find("cluster.advertise is required"), std::string_view::npos)
      << s.ToString();
  EXPECT_TRUE(finished("[server]\nlisten = \"0.0.0.0:7700\"\n" + base +
                       "node_id = \"n1\"\nadvertise = \"10.1.2.3:7700\"\n")
                  .ok());
  s = finished(base + "node_id = \"n1\"\netcd_prefix = \"/x/\"\n");
  EXPECT_NE(s.message().find("etcd_prefix"), std::string_view::npos) << s.ToString();
}

TEST(ConfigTest, ClusterLogSettingsAreChecked) {
  auto loaded = [](std::string_view text, Config* c) {
    *c = DefaultConfig();
    Status s = Load(text, c);
    return s.ok() ? FinishClusterConfig(c) : s;
  };
  const std::string cluster =
      "[cluster]\netcd_endpoints = [\"http://127.0.0.1:2379\"]\nnode_id = \"n1\"\n";
  const std::string log = "[cluster_log]\nbrokers = \"127.0.0.1:9092\"\n";
  Config c;
  // Replication: 2 by default with a log (no more than initial_nodes), 1 without.
  ASSERT_TRUE(loaded(cluster, &c).ok());
  EXPECT_EQ(c.cluster.replication, 1u);
  EXPECT_FALSE(c.cluster_log_enabled);
  ASSERT_TRUE(loaded(cluster + "initial_nodes = 3\n" + log, &c).ok());
  EXPECT_EQ(c.cluster.replication, 2u);
  ASSERT_TRUE(loaded(cluster + log, &c).ok());
  EXPECT_EQ(c.cluster.replication, 1u);  // one initial node
  ASSERT_TRUE(loaded(cluster + "replication = 3\ninitial_nodes = 3\n" + log, &c).ok());
  EXPECT_EQ(c.cluster.replication, 3u);

  Status s = loaded(log, &c);
  EXPECT_NE(s.message().find("cluster_log needs a [cluster] section"), std::string_view::npos)
      << s.ToString();
  s = loaded(cluster + log + "partitions = 48\n", &c);
  EXPECT_NE(s.message().find("power of two"), std::string_view::npos) << s.ToString();
  s = loaded(cluster + log + "append_timeout_ms = 5000\napply_timeout_ms = 4000\n", &c);
  EXPECT_NE(s.message().find("apply_timeout_ms must be longer"), std::string_view::npos)
      << s.ToString();
  EXPECT_TRUE(Rejected("[cluster_log]\nbrokers = \"\"\n", "brokers"));
  EXPECT_TRUE(Rejected("[cluster_log]\npartitions = 8192\n", "partitions"));
  EXPECT_TRUE(Rejected("[cluster_log]\nproperties = 3\n", "properties"));
  EXPECT_TRUE(Rejected("[cluster_log.properties]\n\"a\" = 1\n", "properties"));
  EXPECT_TRUE(Rejected("[cluster_log.properties]\n\"acks\" = \"1\"\n", "acks"));
  EXPECT_TRUE(
      Rejected("[cluster_log.properties]\n\"no.such.property\" = \"1\"\n", "no.such.property"));
  EXPECT_TRUE(Rejected("[cluster_log]\nsurprise = 1\n", "cluster_log.surprise"));
  EXPECT_TRUE(Rejected("[cluster_log]\npassive = \"yes\"\n", "passive"));
  s = loaded(cluster + "[cluster_log]\npassive = true\n", &c);
  EXPECT_NE(s.message().find("cluster_log.passive needs the log"), std::string_view::npos)
      << s.ToString();
  // A passive node: it applies the log and writes nothing; the stats say so.
  ASSERT_TRUE(loaded(cluster + log + "passive = true\n", &c).ok());
  EXPECT_TRUE(c.replica.passive);
  bool passive_described = false;
  for (const StatEntry& e : Describe(c)) {
    passive_described |= e.name == "config.cluster_log.passive" &&
                         std::get_if<uint64_t>(&e.value) != nullptr &&
                         *std::get_if<uint64_t>(&e.value) == 1;
  }
  EXPECT_TRUE(passive_described);
  // Property values stay out of what the server reports: they may be secrets.
  ASSERT_TRUE(
      loaded(cluster + log + "[cluster_log.properties]\n\"sasl.password\" = \"hunter2\"\n", &c)
          .ok());
  for (const StatEntry& e : Describe(c)) {
    if (const auto* v = std::get_if<std::string>(&e.value)) {
      EXPECT_EQ(v->find("hunter2"), std::string::npos) << e.name;
    }
  }
}

}  // namespace
}  // namespace segstore::server
