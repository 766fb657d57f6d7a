#include "storage/fault_device.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <list>

#include "storage/emulated_queue.h"

namespace segstore::storage {

class FaultQueue final : public EmulatedQueue {
 public:
  FaultQueue(std::shared_ptr<FaultDevice> device, uint64_t seed)
      : device_(std::move(device)), rng_(seed) {}
  ~FaultQueue() override {
    std::lock_guard lock(device_->mu_);
    for (auto& p : issued_) {
      device_->in_flight_writes_.erase(&p.op);
      device_->held_.erase(&p.op);
      device_->release_eio_.erase(&p.op);
    }
  }
  const char* backend_name() const override { return "fault"; }
  using EmulatedQueue::init_status;

 protected:
  void Start(std::vector<Op>* ops) override {
    for (const Op& op : *ops) {
      issued_.push_back(Issued{FaultDevice::Pending{op.write, op.offset, op.buf, op.len}, op.done});
      if (op.write) device_->Issue(&issued_.back().op);
    }
  }
  void Reap(std::vector<Done>* out) override {
    // Complete a random part of what was issued (at least one operation), in a
    // shuffled order: the rest stays in flight, so a power loss can find any
    // mix of earlier writes pending and later ones done.
    std::vector<std::list<Issued>::iterator> order;
    for (auto it = issued_.begin(); it != issued_.end(); ++it) {
      if (!device_->Held(&it->op)) order.push_back(it);
    }
    std::shuffle(order.begin(), order.end(), rng_);
    const bool all = order.size() <= 1;
    if (!all) order.resize(1 + rng_() % order.size());
    for (auto it : order) {
      out->push_back(Done{it->done, device_->Complete(&it->op)});
      issued_.erase(it);
    }
    if (!all) Notify();  // still pollable for the rest
  }

 private:
  struct Issued {
    FaultDevice::Pending op;
    IoCompletion* done;
  };
  std::shared_ptr<FaultDevice> device_;
  std::mt19937_64 rng_;
  std::list<Issued> issued_;  // stable addresses: the device keeps pointers to writes
};

std::shared_ptr<FaultDevice> FaultDevice::Create(uint64_t size, uint64_t seed) {
  assert(size % kSectorSize == 0);
  return std::shared_ptr<FaultDevice>(new FaultDevice(std::vector<uint8_t>(size, 0), seed));
}

FaultDevice::FaultDevice(std::vector<uint8_t> image, uint64_t seed)
    : image_(std::move(image)), rng_(seed) {}

Result<std::unique_ptr<IoQueue>> FaultDevice::NewQueue(uint32_t /*depth*/) {
  uint64_t seed;
  {
    std::lock_guard lock(mu_);
    seed = rng_();
  }
  auto q = std::make_unique<FaultQueue>(shared_from_this(), seed);
  if (!q->init_status().ok()) return q->init_status();
  return std::unique_ptr<IoQueue>(std::move(q));
}

void FaultDevice::FailWritesAfter(uint64_t n) {
  std::lock_guard lock(mu_);
  writes_before_failure_ = n;
}

void FaultDevice::FailReadsAfter(uint64_t n) {
  std::lock_guard lock(mu_);
  reads_before_failure_ = n;
}

void FaultDevice::ClearFaults() {
  std::lock_guard lock(mu_);
  writes_before_failure_ = UINT64_MAX;
  reads_before_failure_ = UINT64_MAX;
  short_writes_ = false;
}

void FaultDevice::Issue(const Pending* op) {
  std::lock_guard lock(mu_);
  in_flight_writes_.insert(op);
  if (writes_to_hold_ > 0) {
    --writes_to_hold_;
    held_.insert(op);
  }
}

void FaultDevice::HoldNextWrites(uint32_t n) {
  std::lock_guard lock(mu_);
  writes_to_hold_ = n;
}

void FaultDevice::ReleaseHeld(bool fail) {
  std::lock_guard lock(mu_);
  if (fail) release_eio_.insert(held_.begin(), held_.end());
  held_.clear();
}

bool FaultDevice::Held(const Pending* op) const {
  std::lock_guard lock(mu_);
  return held_.count(op) > 0;
}

int32_t FaultDevice::Complete(const Pending* op) {
  std::lock_guard lock(mu_);
  if (op->write) in_flight_writes_.erase(op);
  held_.erase(op);
  if (release_eio_.erase(op) > 0) return -EIO;
  if (!powered_) return -EIO;
  if (op->offset + op->len > image_.size()) return -EINVAL;
  if (op->write) {
    if (writes_before_failure_ == 0) return -EIO;
    if (writes_before_failure_ != UINT64_MAX) --writes_before_failure_;
    uint32_t len = op->len;
    if (short_writes_ && len > kSectorSize) len = (len / 2) / kSectorSize * kSectorSize;
    std::memcpy(image_.data() + op->offset, op->buf, len);
    writes_completed_.fetch_add(1);
    return static_cast<int32_t>(len);
  }
  if (reads_before_failure_ == 0) return -EIO;
  if (reads_before_failure_ != UINT64_MAX) --reads_before_failure_;
  std::memcpy(op->buf, image_.data() + op->offset, op->len);
  return static_cast<int32_t>(op->len);
}

void FaultDevice::PowerLoss() {
  std::lock_guard lock(mu_);
  if (!powered_) return;
  powered_ = false;
  std::bernoulli_distribution keep(0.5);
  for (const Pending* w : in_flight_writes_) {
    bool torn = false;
    for (uint32_t s = 0; s < w->len; s += kSectorSize) {
      if (keep(rng_)) {
        std::memcpy(image_.data() + w->offset + s, static_cast<const uint8_t*>(w->buf) + s,
                    std::min<uint32_t>(kSectorSize, w->len - s));
        torn = true;
      }
    }
    if (torn) writes_torn_.fetch_add(1);
  }
  in_flight_writes_.clear();
}

std::shared_ptr<FaultDevice> FaultDevice::Reboot() {
  std::lock_guard lock(mu_);
  return std::shared_ptr<FaultDevice>(new FaultDevice(image_, rng_()));
}

void FaultDevice::XorByte(uint64_t offset, uint8_t mask) {
  std::lock_guard lock(mu_);
  image_.at(offset) ^= mask;
}

std::vector<uint8_t> FaultDevice::ReadImage(uint64_t offset, size_t len) const {
  std::lock_guard lock(mu_);
  return std::vector<uint8_t>(image_.begin() + static_cast<ptrdiff_t>(offset),
                              image_.begin() + static_cast<ptrdiff_t>(offset + len));
}

}  // namespace segstore::storage
