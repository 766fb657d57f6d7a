#include "replica/pending.h"

namespace segstore::replica {

uint64_t PendingWrites::Add(Clock::time_point deadline, Done done) {
  std::lock_guard lock(mu_);
  const uint64_t ticket = next_ticket_++;
  waiters_.emplace(ticket, Waiter{deadline, std::move(done)});
  return ticket;
}

void PendingWrites::Settle(uint64_t ticket, const WriteAnswer& answer) {
  Done done;
  {
    std::lock_guard lock(mu_);
    auto w = waiters_.find(ticket);
    if (w == waiters_.end()) return;
    done = std::move(w->second.done);
    waiters_.erase(w);
  }
  done(answer);
}

size_t PendingWrites::Expire(Clock::time_point now, const WriteAnswer& answer) {
  std::vector<uint64_t> late;
  {
    std::lock_guard lock(mu_);
    for (const auto& [ticket, w] : waiters_) {
      if (w.deadline <= now) late.push_back(ticket);
    }
  }
  for (uint64_t t : late) Settle(t, answer);
  return late.size();
}

void PendingWrites::FailAll(const WriteAnswer& answer) {
  std::vector<Done> done;
  {
    std::lock_guard lock(mu_);
    for (auto& [ticket, w] : waiters_) done.push_back(std::move(w.done));
    waiters_.clear();
  }
  for (Done& d : done) d(answer);
}

size_t PendingWrites::size() const {
  std::lock_guard lock(mu_);
  return waiters_.size();
}

}  // namespace segstore::replica
