// libFuzzer target: recovery (src/storage/recovery.cc, Store::Open) of a
// corrupted device. The input is a list of byte edits to a copy of a small
// store's device image (recovery_image.h says how the image is made and how
// edits read). The store is opened on the edited image, on an in-memory
// FaultDevice, then every key ever written is read.
//
// Open succeeds or fails with Corruption (a damaged superblock) or, when a
// resealed edit gave the superblock a format version this build does not read,
// Unsupported (FORMAT.md, "Versions"). A read is
// OK (of the key asked for; without resealed edits, with a body that key was
// once given: nothing is made up), NotFound or Corruption. Then one put must
// succeed (or fail cleanly) and read back. Never a crash, a hang (libFuzzer's
// -timeout) or a sanitizer finding.
//
// Seeds: edits aimed at each kind of field, written by fuzz_recovery_seeds
// (recovery_seeds.cc).
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/aligned_buffer.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/recovery_image.h"
#include "storage/fault_device.h"

namespace segstore::fuzz {
namespace {

bool CleanReadError(const Status& s) { return s.IsNotFound() || s.IsCorruption(); }

void Run(const uint8_t* data, size_t size) {
  const RecoveryImage& img = TheRecoveryImage();
  static AlignedBuffer scratch(kFuzzDeviceSize);
  std::memcpy(scratch.data(), img.bytes.data(), kFuzzDeviceSize);
  const bool resealed = ApplyEdits(img, data, size, scratch.data());
  // One device for every run, its whole image rewritten each time: a fresh
  // one costs its 768 KiB in page faults (ASan maps every large block anew),
  // a quarter of the speed. (The device's queues then complete in an order
  // that differs from run to run; nothing here depends on that order:
  // recovery takes its reads in issue order, and gets run one at a time.)
  static std::shared_ptr<storage::FaultDevice> device = DeviceHolding(scratch);
  Overwrite(device.get(), scratch);

  auto opened = storage::Store::Open(FuzzStoreOptions(), device);
  if (!opened.ok()) {
    FUZZ_CHECK(opened.status().IsCorruption() ||
               opened.status().code() == Status::Code::kUnsupported);
    return;
  }
  std::unique_ptr<storage::Store> store = std::move(opened).value();
  auto made = store->NewWorker();
  FUZZ_CHECK(made.ok());
  std::unique_ptr<storage::Worker> worker = std::move(made).value();

  for (const std::string& key : img.keys) {
    Result<storage::Record> r = worker->GetSync(key);
    if (!r.ok()) {
      FUZZ_CHECK(CleanReadError(r.status()));
      continue;
    }
    FUZZ_CHECK(r->key() == key);
    if (!resealed) FUZZ_CHECK(img.bodies.at(key).count(std::string(r->body())) == 1);
  }
  Result<storage::Record> never = worker->GetSync("never-written");
  FUZZ_CHECK(never.ok() ? never->key() == "never-written" : CleanReadError(never.status()));

  // A write after recovery: the block table and the sequence recovery rebuilt.
  const std::string body = "written after recovery";
  Result<storage::WriteOutcome> put = worker->PutSync(img.keys.front(), body);
  if (put.ok()) {
    Result<storage::Record> back = worker->GetSync(img.keys.front());
    FUZZ_CHECK(back.ok());
    FUZZ_CHECK(back->body() == body);
  } else {
    FUZZ_CHECK(put.status().IsCorruption() || put.status().code() == Status::Code::kDeviceFull);
  }
}

}  // namespace
}  // namespace segstore::fuzz

// A small quarantine: every run frees a few MiB (the index, block buffers);
// the default 256 MiB made each run fault in fresh pages, at half the speed
// and six times the memory. Freed memory is still poisoned until reused.
extern "C" const char* __asan_default_options() { return "quarantine_size_mb=16"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Recovery logs every damaged block; at thousands of runs a second that
  // is all the fuzzer would print. SEGSTORE_FUZZ_LOG=1 keeps the log, to see
  // what recovery made of one input.
  const char* log = std::getenv("SEGSTORE_FUZZ_LOG");
  if (log == nullptr || std::string(log) != "1") spdlog::set_level(spdlog::level::off);
  (void)segstore::fuzz::TheRecoveryImage();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  segstore::fuzz::Run(data, size);
  return 0;
}
