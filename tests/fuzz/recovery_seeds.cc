// fuzz_recovery_seeds: writes fuzz_recovery's seeds, edits of the fuzz
// device image (recovery_image.h) aimed at each of its fields:
//
//   fuzz_recovery_seeds <output dir>     (writes <output dir>/recovery/*)
//
// No edit; plain edits that break a checksum (superblock, write block header,
// record, pad marker); and resealed edits of every field of the superblock,
// a write block header and three records (first, middle, last), and a record
// made from nothing in free space. scripts/fuzz.sh runs it before fuzz_recovery.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/recovery_image.h"

namespace fs = std::filesystem;

namespace segstore::fuzz {
namespace {

fs::path g_dir;
int g_written = 0;

void Write(const std::string& name, const std::string& bytes) {
  std::ofstream f(g_dir / name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FUZZ_CHECK(f.good());
  ++g_written;
}

void RecoverySeeds() {
  const RecoveryImage& img = TheRecoveryImage();
  const uint8_t plain = 0, reseal = kEditReseal;
  auto seed = [](const std::string& name, const std::vector<std::string>& edits) {
    std::string all;
    for (const std::string& e : edits) all += e;
    Write(name, all);
  };
  auto edit = [](uint8_t flags, uint64_t offset, uint8_t value) {
    std::string e;
    AppendEdit(&e, flags, offset, value);
    return e;
  };
  seed("none", {});
  // Superblock: checksum damage, then resealed geometry and identity changes.
  seed("super-checksum", {edit(kEditXor, 0, 0x01)});
  seed("super-magic", {edit(plain, 4, 'X')});
  // Block size (bytes 40-43, 64 KiB): 8 KiB, 128 KiB, 12 KiB (not a power of two).
  seed("super-block-size-8k", {edit(reseal, 41, 0x20), edit(reseal, 42, 0)});
  seed("super-block-size-128k", {edit(reseal, 42, 0x02)});
  seed("super-block-size-12k", {edit(reseal, 41, 0x30), edit(reseal, 42, 0)});
  // Device size (bytes 32-39, 768 KiB): more than the device, then half of it.
  seed("super-device-size-over", {edit(reseal, 34, 0x0f)});
  seed("super-device-size-half", {edit(reseal, 34, 0x06)});
  seed("super-version", {edit(reseal, 12, 3)});      // newer than this build reads
  seed("super-version-old", {edit(reseal, 12, 1)});  // older than its blocks: refused
  seed("super-hash-seed", {edit(reseal, 24, 0x55)});
  const uint64_t h0 = img.headers.front(), h1 = img.headers.back();
  // Write block headers.
  seed("header-checksum", {edit(kEditXor, h0 + 1, 0x80)});
  seed("header-seq", {edit(reseal, h0 + 16, 0xff), edit(reseal, h0 + 23, 0x7f)});
  seed("header-seq-equal", {edit(reseal, h1 + 16, static_cast<uint8_t>(img.bytes[h0 + 16]))});
  seed("header-index", {edit(reseal, h0 + 32, 9)});
  seed("header-block-size", {edit(reseal, h1 + 13, 0x80)});
  seed("header-device", {edit(reseal, h1 + 24, 0x00)});
  seed("header-nonce", {edit(reseal, h1 + 40, 0x11)});
  seed("header-erased", {edit(plain, h0, 0), edit(plain, h0 + 1, 0), edit(plain, h0 + 2, 0),
                         edit(plain, h0 + 3, 0), edit(plain, h0 + 4, 0)});
  // Records: the first, one in the middle, the last.
  const std::vector<RecoveryImage::Span>& r = img.records;
  for (const RecoveryImage::Span& s : {r.front(), r[r.size() / 2], r.back()}) {
    const std::string at = "record@" + std::to_string(s.start) + "-";
    seed(at + "checksum", {edit(kEditXor, s.start + 2, 0x10)});
    seed(at + "body-byte", {edit(kEditXor, s.start + s.size - 20, 0x04)});
    seed(at + "kind", {edit(reseal, s.start + 4, 2)});
    seed(at + "kind-bad", {edit(reseal, s.start + 4, 3)});
    seed(at + "key-len", {edit(reseal, s.start + 6, 1)});
    seed(at + "key-len-long", {edit(reseal, s.start + 7, 0xff)});
    seed(at + "body-len", {edit(reseal, s.start + 8, 0)});
    seed(at + "body-len-long", {edit(reseal, s.start + 10, 0x01)});
    seed(at + "generation", {edit(reseal, s.start + 15, 0xff)});
    seed(at + "version-high", {edit(reseal, s.start + 16, 0xff), edit(reseal, s.start + 23, 0xff)});
    std::vector<std::string> max;
    for (int i = 16; i < 24; ++i) max.push_back(edit(reseal, s.start + i, 0xff));
    seed(at + "version-max", max);
    seed(at + "version-zero", {edit(reseal, s.start + 16, 0), edit(reseal, s.start + 17, 0)});
    seed(at + "void-at-past", {edit(reseal, s.start + 32, 1)});
    seed(at + "sweep-at", {edit(reseal, s.start + 31, 0x60)});
    seed(at + "key-byte", {edit(reseal, s.start + 40, '9')});
  }
  // A record made from nothing in the free space after the last one.
  const uint64_t free_at = r.back().start + r.back().size + 4096;
  seed("record-new", {edit(reseal, free_at + 4, 1), edit(reseal, free_at + 5, 1),
                      edit(reseal, free_at + 6, 4), edit(reseal, free_at + 36, 'u')});
  seed("pad-marker", {edit(kEditXor, img.pads.front() + 5, 0x01)});
}

}  // namespace
}  // namespace segstore::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  spdlog::set_level(spdlog::level::off);
  segstore::fuzz::g_dir = fs::path(argv[1]) / "recovery";
  fs::create_directories(segstore::fuzz::g_dir);
  segstore::fuzz::RecoverySeeds();
  std::printf("fuzz_recovery_seeds: wrote %d seeds under %s\n", segstore::fuzz::g_written,
              segstore::fuzz::g_dir.c_str());
  return 0;
}
