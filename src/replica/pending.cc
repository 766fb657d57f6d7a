#include "replica/pending.h"

namespace segstore::replica {

uint64_t PendingWrites::Add(const WriteId& id, Clock::time_point deadline, Done done) {
  std::lock_guard lock(mu_);
  const uint64_t ticket = next_ticket_++;
  waiters_.emplace(ticket, Waiter{id, deadline, std::move(done)});
  by_id_.emplace(id, ticket);
  return ticket;
}

void PendingWrites::Settle(std::vector<Done>* done, const WriteAnswer& answer) {
  for (Done& d : *done) d(answer);
}

void PendingWrites::Complete(const WriteId& id, const WriteAnswer& answer) {
  std::vector<Done> done;
  {
    std::lock_guard lock(mu_);
    auto [first, last] = by_id_.equal_range(id);
    for (auto it = first; it != last; ++it) {
      auto w = waiters_.find(it->second);
      done.push_back(std::move(w->second.done));
      waiters_.erase(w);
    }
    by_id_.erase(first, last);
  }
  Settle(&done, answer);
}

void PendingWrites::Fail(uint64_t ticket, const WriteAnswer& answer) {
  std::vector<Done> done;
  {
    std::lock_guard lock(mu_);
    auto w = waiters_.find(ticket);
    if (w == waiters_.end()) return;
    auto [first, last] = by_id_.equal_range(w->second.id);
    for (auto it = first; it != last; ++it) {
      if (it->second == ticket) {
        by_id_.erase(it);
        break;
      }
    }
    done.push_back(std::move(w->second.done));
    waiters_.erase(w);
  }
  Settle(&done, answer);
}

size_t PendingWrites::Expire(Clock::time_point now, const WriteAnswer& answer) {
  std::vector<uint64_t> late;
  {
    std::lock_guard lock(mu_);
    for (const auto& [ticket, w] : waiters_) {
      if (w.deadline <= now) late.push_back(ticket);
    }
  }
  for (uint64_t t : late) Fail(t, answer);
  return late.size();
}

void PendingWrites::FailAll(const WriteAnswer& answer) {
  std::vector<Done> done;
  {
    std::lock_guard lock(mu_);
    for (auto& [ticket, w] : waiters_) done.push_back(std::move(w.done));
    waiters_.clear();
    by_id_.clear();
  }
  Settle(&done, answer);
}

size_t PendingWrites::size() const {
  std::lock_guard lock(mu_);
  return waiters_.size();
}

}  // namespace segstore::replica
