// FaultDevice: an in-memory device that fails on demand, for tests of the
// engine (and, later, of the server) under I/O errors, short writes, torn
// writes and power loss.
//
// Model: a write changes the durable image only when it completes; every
// write the engine issues is a durable (RWF_DSYNC) write, so "not followed by a
// completed flush" means "not completed". PowerLoss() cuts the power: each
// write then in flight keeps a random subset of its sectors (a torn write),
// and every later I/O fails with EIO. Reboot() returns a fresh device holding
// what survived. Queues complete operations only inside Poll()/Wait(): each
// poll a random part of them (at least one), in a shuffled order, so
// completions interleave as on a real device and a power loss may find a
// later write done and an earlier one still in flight.
//
// Thread-safe: queues may run on many threads; fault controls may be called
// from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "storage/io_queue.h"

namespace segstore::storage {

class FaultDevice final : public Device, public std::enable_shared_from_this<FaultDevice> {
 public:
  // A zero-filled device of `size` bytes (a multiple of kSectorSize). `seed`
  // makes tearing and completion order repeatable.
  static std::shared_ptr<FaultDevice> Create(uint64_t size, uint64_t seed);

  uint64_t size() const override { return image_.size(); }
  const std::string& name() const override { return name_; }
  const char* backend_name() const override { return "fault"; }
  Result<std::unique_ptr<IoQueue>> NewQueue(uint32_t depth) override;

  // --- Faults. Each applies to operations that complete after the call. ---
  // Writes fail with EIO once `n` more have succeeded (n = 0: from now on).
  void FailWritesAfter(uint64_t n);
  // Reads fail with EIO once `n` more have succeeded.
  void FailReadsAfter(uint64_t n);
  // Writes transfer only their first half (rounded to sectors), and report it.
  void SetShortWrites(bool on) { short_writes_ = on; }
  // Clears every injected fault (not a power loss).
  void ClearFaults();
  // The next `n` writes issued are held: no poll completes them until
  // ReleaseHeld(), after which a poll does, with EIO when `fail`.
  void HoldNextWrites(uint32_t n);
  void ReleaseHeld(bool fail);

  // Cuts the power: tears the writes in flight, fails every later I/O.
  void PowerLoss();
  // A new device holding the image that survived, powered on, with no faults.
  std::shared_ptr<FaultDevice> Reboot();

  // --- Direct image access, bypassing the I/O path. ---
  void XorByte(uint64_t offset, uint8_t mask);
  std::vector<uint8_t> ReadImage(uint64_t offset, size_t len) const;

  uint64_t writes_completed() const { return writes_completed_.load(); }
  uint64_t writes_torn() const { return writes_torn_.load(); }

 private:
  friend class FaultQueue;
  struct Pending {
    bool write;
    uint64_t offset;
    void* buf;
    uint32_t len;
  };

  FaultDevice(std::vector<uint8_t> image, uint64_t seed);
  // Registers an issued write so that PowerLoss() can tear it.
  void Issue(const Pending* op);
  // Carries out `op` against the image; returns the byte count or -errno.
  int32_t Complete(const Pending* op);
  // Whether `op` is held (HoldNextWrites) and must not complete yet.
  bool Held(const Pending* op) const;

  std::string name_ = "fault-device";
  mutable std::mutex mu_;
  std::vector<uint8_t> image_;
  std::mt19937_64 rng_;
  std::set<const Pending*> in_flight_writes_;
  uint32_t writes_to_hold_ = 0;
  std::set<const Pending*> held_;         // held writes not yet released
  std::set<const Pending*> release_eio_;  // released to fail
  bool powered_ = true;
  uint64_t writes_before_failure_ = UINT64_MAX;
  uint64_t reads_before_failure_ = UINT64_MAX;
  std::atomic<bool> short_writes_{false};
  std::atomic<uint64_t> writes_completed_{0};
  std::atomic<uint64_t> writes_torn_{0};
};

}  // namespace segstore::storage
