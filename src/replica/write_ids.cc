#include "replica/write_ids.h"

#include <string>

namespace segstore::replica {

bool WriteIdWindow::Find(const WriteId& id, WriteAnswer* answer) const {
  auto it = ids_.find(id);
  if (it == ids_.end()) return false;
  const Kept& k = it->second;
  *answer = WriteAnswer{};
  answer->duplicate = true;
  if (k.code != 0) {
    const auto code = static_cast<Status::Code>(k.code);
    answer->status = Status::FromCode(
        k.code, "a write with this write_id was made before and failed: " +
                    std::string(Status::CodeName(code)));
    return true;
  }
  // Each op reads back its own field (see Add); an unknown answer is zeros.
  answer->upsert = UpsertResult{k.v[0], k.v[1], k.v[2], k.v[3], true};
  answer->removed = k.v[0];
  answer->trim = TrimResult{k.v[0], k.v[1], true};
  answer->deleted = k.v[0] != 0;
  return true;
}

void WriteIdWindow::Add(const WriteId& id, uint32_t at, proto::Op op,
                        const WriteAnswer* answer) {
  if (id.empty()) return;
  Kept k;
  if (answer != nullptr && answer->status.ok()) {
    switch (op) {
      case proto::Op::kUpsert:
        k.v[0] = answer->upsert.inserted;
        k.v[1] = answer->upsert.updated;
        k.v[2] = answer->upsert.trimmed;
        k.v[3] = answer->upsert.count;
        break;
      case proto::Op::kRemove:
        k.v[0] = answer->removed;
        break;
      case proto::Op::kTrim:
        k.v[0] = answer->trim.trimmed;
        k.v[1] = answer->trim.remaining;
        break;
      default:
        k.v[0] = answer->deleted ? 1 : 0;
        break;
    }
  } else if (answer != nullptr) {
    k.code = static_cast<uint8_t>(answer->status.code());
  }
  if (!ids_.emplace(id, k).second) return;
  order_.emplace_back(at, id);
  if (at > newest_) newest_ = at;
}

void WriteIdWindow::Expire() {
  const uint32_t horizon = newest_ > seconds_ ? newest_ - seconds_ : 0;
  while (!order_.empty() && (order_.front().first < horizon || order_.size() > max_ids_)) {
    ids_.erase(order_.front().second);
    order_.pop_front();
  }
}

}  // namespace segstore::replica
