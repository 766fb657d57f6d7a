#include "loader/line_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace segstore::loader {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxLine = size_t{64} << 20;

class LineReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "line_reader_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::string WritePlain(const std::string& name, const std::string& text) {
    const std::string path = Path(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // One gzip member per piece, written with zlib's own gzip writer ("ab"
  // appends a member).
  std::string WriteGzip(const std::string& name, const std::vector<std::string>& members) {
    const std::string path = Path(name);
    fs::remove(path);
    for (const std::string& m : members) {
      gzFile gz = gzopen(path.c_str(), "ab");
      EXPECT_NE(gz, nullptr);
      if (!m.empty()) {
        EXPECT_EQ(gzwrite(gz, m.data(), static_cast<unsigned>(m.size())),
                  static_cast<int>(m.size()));
      }
      EXPECT_EQ(gzclose(gz), Z_OK);
    }
    return path;
  }

  fs::path dir_;
};

std::unique_ptr<LineReader> OpenOk(const std::string& path) {
  std::unique_ptr<LineReader> r;
  Status s = LineReader::Open(path, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return r;
}

std::vector<std::string> ReadAll(LineReader* r) {
  std::vector<std::string> lines;
  std::string_view line;
  while (r->Next(&line)) lines.emplace_back(line);
  return lines;
}

// The lines of `text` as a reader should return them.
std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

// Over 2 MiB of lines of varied lengths (0 to a few KiB), deterministic, with
// enough randomness that gzip leaves it over 1 MiB.
std::string VariedText(size_t bytes) {
  std::mt19937_64 rng(42);
  std::string text;
  uint64_t n = 0;
  while (text.size() < bytes) {
    const size_t len = rng() % 8 == 0 ? rng() % 5000 : rng() % 120;
    text += "user-" + std::to_string(n++) + ",";
    for (size_t i = 0; i < len; ++i) text += "0123456789abcdef"[rng() % 16];
    text += '\n';
  }
  return text;
}

TEST_F(LineReaderTest, PlainFileGivesItsLines) {
  const std::string path = WritePlain("a.csv", "u1,1\nu2,2\n\nu3,3\n");
  auto r = OpenOk(path);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->compressed());
  EXPECT_EQ(r->path(), path);
  EXPECT_EQ(r->total_bytes(), 16u);
  std::string_view line;
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "u1,1");
  EXPECT_EQ(r->line_number(), 1u);
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "u2,2");
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "");
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "u3,3");
  EXPECT_EQ(r->line_number(), 4u);
  EXPECT_FALSE(r->Next(&line));
  EXPECT_FALSE(r->Next(&line));
  EXPECT_TRUE(r->status().ok());
  EXPECT_EQ(r->line_number(), 4u);
  EXPECT_EQ(r->bytes_read(), 16u);
}

TEST_F(LineReaderTest, FinalLineWithoutNewlineCounts) {
  auto r = OpenOk(WritePlain("a.csv", "a\nb"));
  EXPECT_EQ(ReadAll(r.get()), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r->status().ok());
  EXPECT_EQ(r->line_number(), 2u);
}

TEST_F(LineReaderTest, CarriageReturnIsLeftForTheParser) {
  auto r = OpenOk(WritePlain("a.csv", "a\r\nb\r\n"));
  EXPECT_EQ(ReadAll(r.get()), (std::vector<std::string>{"a\r", "b\r"}));
}

TEST_F(LineReaderTest, EmptyFileHasNoLines) {
  auto r = OpenOk(WritePlain("empty.csv", ""));
  EXPECT_TRUE(ReadAll(r.get()).empty());
  EXPECT_TRUE(r->status().ok());
  EXPECT_EQ(r->line_number(), 0u);
  EXPECT_EQ(r->total_bytes(), 0u);
  EXPECT_FALSE(r->compressed());
}

TEST_F(LineReaderTest, OneByteFileIsPlain) {
  auto r = OpenOk(WritePlain("one", "\x1f"));
  EXPECT_EQ(ReadAll(r.get()), (std::vector<std::string>{"\x1f"}));
  EXPECT_FALSE(r->compressed());
}

TEST_F(LineReaderTest, MissingFileIsNotFoundNamingThePath) {
  std::unique_ptr<LineReader> r;
  const std::string path = Path("no-such-file.csv");
  Status s = LineReader::Open(path, &r);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string_view::npos) << s.ToString();
  EXPECT_FALSE(r);
}

TEST_F(LineReaderTest, DirectoryIsAnIOError) {
  std::unique_ptr<LineReader> r;
  Status s = LineReader::Open(dir_.string(), &r);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_NE(s.message().find(dir_.string()), std::string_view::npos);
}

TEST_F(LineReaderTest, LinesCrossingTheBufferBoundaryComeOutWhole) {
  const std::string text = VariedText(3 << 20);
  const auto path = WritePlain("big.csv", text);
  auto r = OpenOk(path);
  const auto lines = ReadAll(r.get());
  EXPECT_TRUE(r->status().ok());
  EXPECT_EQ(lines, Split(text));
  EXPECT_EQ(r->line_number(), lines.size());
  EXPECT_EQ(r->bytes_read(), text.size());
  EXPECT_EQ(r->total_bytes(), text.size());
}

TEST_F(LineReaderTest, LineLongerThanTheBufferGrowsIt) {
  const std::string longest(3 << 20, 'x');
  const std::string text = "a\n" + longest + "\nb\n" + longest;
  auto r = OpenOk(WritePlain("long.csv", text));
  const auto lines = ReadAll(r.get());
  EXPECT_TRUE(r->status().ok());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1], longest);
  EXPECT_EQ(lines[2], "b");
  EXPECT_EQ(lines[3], longest);
}

TEST_F(LineReaderTest, LineOf64MiBIsReadAndALongerOneIsAnError) {
  // A sparse file: NUL bytes cost no disk.
  const std::string path = Path("huge.csv");
  {
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "\n", 1, static_cast<off_t>(kMaxLine)), 1);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(2 * kMaxLine + 2)), 0);
    ::close(fd);
  }
  auto r = OpenOk(path);
  std::string_view line;
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line.size(), kMaxLine);
  EXPECT_FALSE(r->Next(&line));
  EXPECT_EQ(r->status().code(), Status::Code::kLimitExceeded);
  EXPECT_EQ(r->status().message(), path + ": line 2 is longer than 64 MiB");
  EXPECT_FALSE(r->Next(&line));
}

TEST_F(LineReaderTest, GzipFileIsDecompressed) {
  const std::string text = VariedText(3 << 20);
  const auto path = WriteGzip("big.csv.gz", {text});
  const uint64_t size = fs::file_size(path);
  ASSERT_GT(size, 1u << 20);  // more than one read
  auto r = OpenOk(path);
  EXPECT_TRUE(r->compressed());
  EXPECT_EQ(r->total_bytes(), size);
  std::string_view line;
  ASSERT_TRUE(r->Next(&line));
  EXPECT_GT(r->bytes_read(), 0u);
  EXPECT_LT(r->bytes_read(), size);
  std::vector<std::string> lines{std::string(line)};
  while (r->Next(&line)) lines.emplace_back(line);
  EXPECT_TRUE(r->status().ok()) << r->status().ToString();
  EXPECT_EQ(lines, Split(text));
  EXPECT_EQ(r->bytes_read(), size);
}

TEST_F(LineReaderTest, ConcatenatedGzipMembersAreReadThrough) {
  // The text runs on across members: "b" ends in the second.
  const auto path = WriteGzip("multi.gz", {"a\nb", "b\nc\n", "", "d\ne"});
  auto r = OpenOk(path);
  EXPECT_EQ(ReadAll(r.get()), (std::vector<std::string>{"a", "bb", "c", "d", "e"}));
  EXPECT_TRUE(r->status().ok()) << r->status().ToString();
  EXPECT_EQ(r->bytes_read(), fs::file_size(path));
}

TEST_F(LineReaderTest, ManyLargeGzipMembersAreReadThrough) {
  const std::string a = VariedText(2 << 20);
  const std::string b = VariedText(1 << 20);
  auto r = OpenOk(WriteGzip("multi.gz", {a, b, a}));
  EXPECT_EQ(ReadAll(r.get()), Split(a + b + a));
  EXPECT_TRUE(r->status().ok()) << r->status().ToString();
}

TEST_F(LineReaderTest, EmptyGzipHasNoLines) {
  auto r = OpenOk(WriteGzip("empty.gz", {""}));
  EXPECT_TRUE(r->compressed());
  EXPECT_TRUE(ReadAll(r.get()).empty());
  EXPECT_TRUE(r->status().ok()) << r->status().ToString();
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(LineReaderTest, TruncatedGzipIsAnError) {
  const std::string text = VariedText(1 << 20);
  const std::string whole = ReadBytes(WriteGzip("whole.gz", {text}));
  // Cut in the compressed data, and cut only the 8-byte trailer short.
  for (size_t keep : {whole.size() / 2, whole.size() - 3}) {
    const auto path = WritePlain("cut.gz", whole.substr(0, keep));
    auto r = OpenOk(path);
    const auto lines = ReadAll(r.get());
    EXPECT_EQ(r->status().code(), Status::Code::kCorruption) << keep;
    EXPECT_EQ(r->status().message(),
              path + ": truncated gzip stream (the file ends inside a member)");
    EXPECT_LE(lines.size(), Split(text).size());
  }
}

TEST_F(LineReaderTest, CorruptGzipIsAnError) {
  const std::string text = VariedText(1 << 20);
  std::string bytes = ReadBytes(WriteGzip("whole.gz", {text}));
  for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16; ++i) bytes[i] ^= 0x5a;
  const auto path = WritePlain("bad.gz", bytes);
  auto r = OpenOk(path);
  ReadAll(r.get());
  EXPECT_EQ(r->status().code(), Status::Code::kCorruption);
  EXPECT_EQ(r->status().message().rfind(path + ": corrupt gzip data: ", 0), 0u)
      << r->status().ToString();
}

TEST_F(LineReaderTest, GarbageAfterAGzipMemberIsAnError) {
  std::string bytes = ReadBytes(WriteGzip("whole.gz", {"a\nb\n"}));
  bytes += "not gzip\n";
  auto r = OpenOk(WritePlain("tail.gz", bytes));
  ReadAll(r.get());
  EXPECT_EQ(r->status().code(), Status::Code::kCorruption) << r->status().ToString();
}

// Points fd 0 at another file descriptor for the life of the object.
class StdinRedirect {
 public:
  explicit StdinRedirect(int fd) : saved_(::dup(0)) {
    EXPECT_GE(saved_, 0);
    EXPECT_EQ(::dup2(fd, 0), 0);
    ::close(fd);
  }
  ~StdinRedirect() {
    ::dup2(saved_, 0);
    ::close(saved_);
  }

 private:
  int saved_;
};

// Reads "-" with `bytes` written into a pipe by another thread.
std::vector<std::string> ReadStdinPipe(const std::string& bytes, bool* compressed,
                                       uint64_t* total) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::thread writer([fd = fds[1], &bytes] {
    // In small pieces, so the reader sees short reads.
    for (size_t pos = 0; pos < bytes.size();) {
      const size_t n = std::min<size_t>(bytes.size() - pos, 1 + pos % 70000);
      const ssize_t w = ::write(fd, bytes.data() + pos, n);
      if (w <= 0) break;
      pos += static_cast<size_t>(w);
    }
    ::close(fd);
  });
  std::vector<std::string> lines;
  {
    StdinRedirect redirect(fds[0]);
    std::unique_ptr<LineReader> r = OpenOk("-");
    if (r) {
      EXPECT_EQ(r->path(), "-");
      *compressed = r->compressed();
      *total = r->total_bytes();
      lines = ReadAll(r.get());
      EXPECT_TRUE(r->status().ok()) << r->status().ToString();
      EXPECT_EQ(r->bytes_read(), bytes.size());
    }
  }
  writer.join();
  return lines;
}

TEST_F(LineReaderTest, StandardInputPlain) {
  const std::string text = VariedText(3 << 20);
  bool compressed = true;
  uint64_t total = 1;
  EXPECT_EQ(ReadStdinPipe(text, &compressed, &total), Split(text));
  EXPECT_FALSE(compressed);
  EXPECT_EQ(total, 0u);  // a pipe: unknown
}

TEST_F(LineReaderTest, StandardInputGzip) {
  const std::string text = VariedText(2 << 20);
  const std::string gz = ReadBytes(WriteGzip("in.gz", {text, "tail\n"}));
  bool compressed = false;
  uint64_t total = 1;
  EXPECT_EQ(ReadStdinPipe(gz, &compressed, &total), Split(text + "tail\n"));
  EXPECT_TRUE(compressed);
  EXPECT_EQ(total, 0u);
}

TEST_F(LineReaderTest, StandardInputFromAFileKnowsItsSize) {
  const auto path = WritePlain("in.csv", "a\nb\n");
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  StdinRedirect redirect(fd);
  auto r = OpenOk("-");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->total_bytes(), 4u);
  EXPECT_EQ(ReadAll(r.get()), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace segstore::loader
