// Helpers shared by the storage tests: temporary data files, small stores.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/coding.h"
#include "segstore/storage.h"
#include "storage/fault_device.h"
#include "storage/format.h"

namespace segstore::storage::testing {

// A directory under the build's temp area, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "segstore-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Small blocks and devices keep tests fast and make blocks fill and free often.
inline StoreOptions SmallOptions(const std::string& path, Clock* clock) {
  StoreOptions o;
  o.path = path;
  o.file_size = 16u << 20;
  o.write_block_size = 64u << 10;
  o.background_defrag = false;
  o.clock = clock;
  o.queue_depth = 64;
  // ctest runs the crash and recovery tests a second time with this at 0
  // (tests/storage/CMakeLists.txt): every block read whole.
  const char* summaries = std::getenv("SEGSTORE_TEST_BLOCK_SUMMARIES");
  o.block_summaries = summaries == nullptr || std::string_view(summaries) != "0";
  return o;
}

// Every byte of the file at `path`.
inline std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Sets the format version in the superblock of the data file at `path` and
// recomputes its checksum (FORMAT.md: XXH3-64 of bytes 4..63, seed 0), as a
// release of that format version would have written it.
inline void SetSuperblockVersion(const std::string& path, uint16_t version) {
  uint8_t sb[kSuperblockEncodedSize];
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pread(fd, sb, sizeof sb, 0), static_cast<ssize_t>(sizeof sb)) << path;
  EncodeFixed16(sb + 12, version);
  EncodeFixed32(sb, static_cast<uint32_t>(XXH3_64bits_withSeed(sb + 4, sizeof sb - 4, 0)));
  ASSERT_EQ(::pwrite(fd, sb, sizeof sb, 0), static_cast<ssize_t>(sizeof sb)) << path;
  ASSERT_EQ(::close(fd), 0) << path;
}

// Rewrites a whole data file image (`image`, `size` bytes) as a release
// writing format `version` would have written it: the version in the
// superblock, in every write block header of this device, and in every
// record those blocks' scans find, each checksum recomputed. The layouts of
// versions 1 and 2 are the same, so this makes a true version-1 file of a
// file this build wrote (FORMAT.md, "Versions"). Returns the records changed.
inline int SetFormatVersionEverywhere(uint8_t* image, size_t size, uint16_t version) {
  auto reseal = [](uint8_t* p, size_t n, uint64_t seed) {
    EncodeFixed32(p, static_cast<uint32_t>(XXH3_64bits_withSeed(p + 4, n - 4, seed)));
  };
  const uint64_t device_id = DecodeFixed64(image + 16);
  const uint32_t block_size = DecodeFixed32(image + 40);
  EncodeFixed16(image + 12, version);
  reseal(image, kSuperblockEncodedSize, 0);
  int records = 0;
  for (uint64_t base = block_size; base + block_size <= size; base += block_size) {
    uint8_t* block = image + base;
    Result<BlockHeader> h = DecodeBlockHeader(block);
    if (!h.ok() || h->device_id != device_id) continue;
    std::vector<uint32_t> offsets;
    BlockScanner scan(block, block_size, h->salt());
    RecordView v;
    uint32_t off;
    while (scan.Next(&v, &off)) offsets.push_back(off);
    for (uint32_t at : offsets) {
      uint8_t* r = block + at;
      const uint32_t used = kRecordHeaderSize + DecodeFixed16(r + 6) + DecodeFixed32(r + 8);
      r[5] = static_cast<uint8_t>(version);
      reseal(r, used, h->salt());
      ++records;
    }
    EncodeFixed16(block + 8, version);
    reseal(block, kBlockHeaderSize, 0);
  }
  return records;
}

// The same, on the data file at `path`.
inline int SetFileFormatVersionEverywhere(const std::string& path, uint16_t version) {
  std::string bytes = FileBytes(path);
  const int records =
      SetFormatVersionEverywhere(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size(), version);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good() ? records : -1;
}

// The data file format version in the superblock of the file at `path`.
inline uint16_t SuperblockVersion(const std::string& path) {
  const std::string bytes = FileBytes(path);
  return bytes.size() >= kSuperblockEncodedSize
             ? DecodeFixed16(reinterpret_cast<const uint8_t*>(bytes.data()) + 12)
             : 0;
}

inline std::string Key(int i) { return "user-" + std::to_string(i); }

inline std::string Body(int i, int version, size_t size = 300) {
  std::string b = "v" + std::to_string(version) + ":" + std::to_string(i) + ":";
  std::mt19937 rng(static_cast<uint32_t>(i * 7919 + version));
  while (b.size() < size) b.push_back(static_cast<char>('a' + rng() % 26));
  return b;
}

inline std::unique_ptr<Store> OpenOrDie(const StoreOptions& o) {
  Result<std::unique_ptr<Store>> s = Store::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline std::unique_ptr<Store> OpenOrDie(const StoreOptions& o, std::shared_ptr<Device> d) {
  Result<std::unique_ptr<Store>> s = Store::Open(o, std::move(d));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline std::unique_ptr<Worker> WorkerOrDie(Store* s) {
  Result<std::unique_ptr<Worker>> w = s->NewWorker();
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return w.ok() ? std::move(w).value() : nullptr;
}

}  // namespace segstore::storage::testing
