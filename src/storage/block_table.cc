#include "storage/block_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <new>

namespace segstore::storage {

BlockImage::BlockImage(uint32_t block_size) : dirty(block_size), size_(block_size) {
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(p);
}

BlockImage::~BlockImage() { ::munmap(data_, size_); }

BlockTable::BlockTable(uint32_t block_count, uint32_t block_size)
    : count_(block_count),
      block_size_(block_size),
      meta_(new Meta[block_count]),
      images_(block_count) {
  assert(block_count >= 2);
  meta_[0].state.store(BlockState::kReserved);
  for (uint32_t b = 1; b < count_; ++b) free_.push_back(b);
  free_count_.store(count_ - 1);
}

bool BlockTable::Transition(uint32_t b, BlockState from, BlockState to) {
  return meta_[b].state.compare_exchange_strong(from, to, std::memory_order_acq_rel);
}

uint32_t BlockTable::ReserveFor(Purpose p) const {
  switch (p) {
    case Purpose::kWrite:
      return kDefragReserve + kDeleteReserve;
    case Purpose::kDelete:
      return kDefragReserve;
    case Purpose::kDefrag:
      return 0;
  }
  return 0;
}

std::optional<uint32_t> BlockTable::Allocate(Purpose p, uint64_t seq, uint64_t salt) {
  std::lock_guard lock(free_mu_);
  if (free_.size() <= ReserveFor(p)) return std::nullopt;
  uint32_t b = free_.front();
  free_.pop_front();
  free_count_.store(static_cast<uint32_t>(free_.size()), std::memory_order_relaxed);
  Meta& m = meta_[b];
  m.seq.store(seq, std::memory_order_release);
  m.salt.store(salt, std::memory_order_release);
  m.live.store(0, std::memory_order_relaxed);
  not_free_.emplace(seq, b);
  [[maybe_unused]] bool ok = Transition(b, BlockState::kFree, BlockState::kOpen);
  assert(ok);
  return b;
}

bool BlockTable::MarkUsed(uint32_t b) {
  return Transition(b, BlockState::kOpen, BlockState::kUsed);
}
bool BlockTable::BeginDefrag(uint32_t b) {
  return Transition(b, BlockState::kUsed, BlockState::kDefrag);
}
bool BlockTable::AbortDefrag(uint32_t b) {
  return Transition(b, BlockState::kDefrag, BlockState::kUsed);
}
bool BlockTable::MarkErasing(uint32_t b) {
  return Transition(b, BlockState::kDefrag, BlockState::kErasing);
}

bool BlockTable::ReleaseUnwritten(uint32_t b) {
  std::lock_guard lock(free_mu_);
  if (!Transition(b, BlockState::kOpen, BlockState::kFree)) return false;
  not_free_.erase({seq(b), b});
  free_.push_back(b);
  free_count_.store(static_cast<uint32_t>(free_.size()), std::memory_order_relaxed);
  return true;
}

bool BlockTable::Release(uint32_t b) {
  std::lock_guard lock(free_mu_);
  if (!Transition(b, BlockState::kErasing, BlockState::kFree)) return false;
  not_free_.erase({seq(b), b});
  free_.push_back(b);
  free_count_.store(static_cast<uint32_t>(free_.size()), std::memory_order_relaxed);
  return true;
}

void BlockTable::RecoverUsed(std::span<const BlockInUse> used) {
  std::lock_guard lock(free_mu_);
  for (const BlockInUse& u : used) {
    assert(u.block != 0 && u.block < count_);
    assert(meta_[u.block].state.load() == BlockState::kFree);
    meta_[u.block].seq.store(u.seq);
    meta_[u.block].salt.store(u.salt);
    meta_[u.block].state.store(BlockState::kUsed);
    not_free_.emplace(u.seq, u.block);
  }
  // The free list holds exactly the blocks in kFree, in their order.
  std::erase_if(free_, [this](uint32_t b) { return meta_[b].state.load() != BlockState::kFree; });
  free_count_.store(static_cast<uint32_t>(free_.size()), std::memory_order_relaxed);
}

uint64_t BlockTable::total_live_bytes() const {
  int64_t sum = 0;
  for (uint32_t b = 1; b < count_; ++b) sum += live_bytes(b);
  return static_cast<uint64_t>(std::max<int64_t>(sum, 0));
}

void BlockTable::AttachImage(uint32_t b, std::shared_ptr<const BlockImage> image) {
  std::lock_guard lock(image_mu_[b % kImageStripes]);
  images_[b] = std::move(image);
  meta_[b].has_image.store(true, std::memory_order_release);
}

void BlockTable::DetachImage(uint32_t b) {
  std::shared_ptr<const BlockImage> drop;  // freed outside the lock
  std::lock_guard lock(image_mu_[b % kImageStripes]);
  meta_[b].has_image.store(false, std::memory_order_release);
  drop.swap(images_[b]);
}

std::shared_ptr<const BlockImage> BlockTable::PinImage(uint32_t b) const {
  // Most reads find no image: answer those without taking the lock. The flag
  // is cleared only once the block is wholly on the device, so a stale
  // "false" still leads to the right bytes.
  if (!meta_[b].has_image.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(image_mu_[b % kImageStripes]);
  return images_[b];
}

std::vector<uint32_t> BlockTable::DefragCandidates(uint64_t max_live, size_t limit) const {
  std::vector<std::pair<int64_t, uint32_t>> found;
  for (uint32_t b = 1; b < count_; ++b) {
    if (state(b) != BlockState::kUsed) continue;
    int64_t live = live_bytes(b);
    if (live < 0 || static_cast<uint64_t>(live) < max_live) found.emplace_back(live, b);
  }
  std::sort(found.begin(), found.end());
  std::vector<uint32_t> out;
  for (size_t i = 0; i < found.size() && i < limit; ++i) out.push_back(found[i].second);
  return out;
}

std::optional<uint32_t> BlockTable::OldestUsed() const {
  std::optional<uint32_t> best;
  uint64_t best_seq = UINT64_MAX;
  for (uint32_t b = 1; b < count_; ++b) {
    if (state(b) == BlockState::kUsed && seq(b) < best_seq) {
      best_seq = seq(b);
      best = b;
    }
  }
  return best;
}

uint64_t BlockTable::Watermark(std::optional<uint32_t> exclude) const {
  std::lock_guard lock(free_mu_);
  for (const auto& [seq, b] : not_free_) {
    if (!exclude || *exclude != b) return seq;
  }
  return UINT64_MAX;
}

}  // namespace segstore::storage
