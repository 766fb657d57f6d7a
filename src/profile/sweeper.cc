#include "profile/sweeper.h"

#include <spdlog/spdlog.h>

#include "common/clock.h"

namespace segstore::profile {

size_t Sweeper::RunPass(ProfileSessionImpl* session, size_t budget) {
  // FindDue returns whole partitions, so it may find more than the budget:
  // the surplus waits in due_ for the next pass instead of a whole cycle.
  if (due_.size() < budget) {
    store_->FindDue(session->SweepHorizon(), budget - due_.size(), &cursor_, &due_);
  }
  const size_t take = std::min(budget, due_.size());
  batch_.assign(due_.begin(), due_.begin() + static_cast<std::ptrdiff_t>(take));
  due_.erase(due_.begin(), due_.begin() + static_cast<std::ptrdiff_t>(take));
  size_t pending = batch_.size();
  storage::Worker& worker = session->worker();
  {
    storage::Worker::Batch batch(worker);
    for (const storage::RecordRef& ref : batch_) {
      session->SweepAt(ref, [this, &pending](Result<ProfileSessionImpl::Swept> s) {
        --pending;
        if (!s.ok()) {
          // NotFound: rewritten or gone since it was found.
          if (!s.status().IsNotFound()) spdlog::warn("expiry sweeper: {}", s.status().ToString());
          return;
        }
        visited_.fetch_add(1, std::memory_order_relaxed);
        if (s->rewritten) rewritten_.fetch_add(1, std::memory_order_relaxed);
        if (s->deleted) deleted_.fetch_add(1, std::memory_order_relaxed);
        segments_.fetch_add(s->segments_removed, std::memory_order_relaxed);
        fields_.fetch_add(s->fields_removed, std::memory_order_relaxed);
        bytes_.fetch_add(s->bytes_reclaimed, std::memory_order_relaxed);
      });
    }
  }
  while (pending > 0) session->Wait(std::chrono::milliseconds(10));
  return batch_.size();
}

SweeperStats Sweeper::stats() const {
  SweeperStats s;
  s.records_visited = visited_.load(std::memory_order_relaxed);
  s.records_rewritten = rewritten_.load(std::memory_order_relaxed);
  s.records_deleted = deleted_.load(std::memory_order_relaxed);
  s.segments_removed = segments_.load(std::memory_order_relaxed);
  s.fields_removed = fields_.load(std::memory_order_relaxed);
  s.bytes_reclaimed = bytes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace segstore::profile
