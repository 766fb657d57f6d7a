#include "replica/write_ids.h"

#include <bit>
#include <string>
#include <vector>

namespace segstore::replica {
namespace {

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

bool WriteIdWindow::Admit(const WriteId& id, std::string_view user, UnixSeconds at, proto::Op op,
                          WriteAnswer* answer) {
  last_ = nullptr;
  const Key key{id, Fnv1a(user)};
  auto it = kept_.find(key);
  if (it != kept_.end() && uint64_t{it->second.latest} + seconds_ >= at) {
    const Kept& k = it->second;
    if (at > it->second.latest) it->second.latest = at;
    *answer = WriteAnswer{};
    answer->duplicate = true;
    if (k.code != 0) {
      answer->status = Status::FromCode(
          k.code, "a write with this write_id was made before and failed: " +
                      std::string(Status::CodeName(static_cast<Status::Code>(k.code))));
      return true;
    }
    // Each op reads back its own field (Answered); an unknown answer is zeros.
    answer->upsert = UpsertResult{k.v[0], k.v[1], k.v[2], k.v[3], true};
    answer->removed = k.v[0];
    answer->trim = TrimResult{k.v[0], k.v[1], true};
    answer->deleted = k.v[0] != 0;
    answer->step = LinkStepResult{k.v[0] != 0, k.v[1] != 0, k.v[2], true};
    answer->field_write = FieldWriteResult{k.v[0], k.v[1], true};
    const uint64_t bits = (uint64_t{k.v[1]} << 32) | k.v[0];
    answer->increment = IncrementResult{static_cast<int64_t>(bits), k.v[2] != 0, true};
    if (k.op == proto::Op::kFieldMax) {
      // A string or bytes value is not kept (v[2] 0): the answer's value is
      // then int 0, as counts a node does not know are 0.
      answer->field_max.duplicate = true;
      answer->field_max.replaced = k.v[3] != 0;
      switch (k.v[2]) {
        case 1 + static_cast<uint32_t>(FieldValue::Type::kInt):
          answer->field_max.value = FieldValue::Int(static_cast<int64_t>(bits));
          break;
        case 1 + static_cast<uint32_t>(FieldValue::Type::kDouble):
          answer->field_max.value = FieldValue::Double(std::bit_cast<double>(bits));
          break;
        case 1 + static_cast<uint32_t>(FieldValue::Type::kTime):
          answer->field_max.value = FieldValue::Time(static_cast<UnixSeconds>(bits));
          break;
        default:
          answer->field_max.value = FieldValue::Int(0);
          break;
      }
    }
    if (k.op == proto::Op::kExpire) {
      answer->expire.count = k.v[0];
      answer->expire.duplicate = true;
      if (k.outcomes != nullptr) {
        answer->expire.results.reserve(k.v[1]);
        for (uint32_t i = 0; i < k.v[1]; ++i) {
          answer->expire.results.push_back(
              static_cast<ExpireOutcome>((k.outcomes[i / 4] >> (2 * (i % 4))) & 3));
        }
      }
    }
    return true;
  }
  // A new write (or one seen longer ago than the window): recorded afresh.
  if (it == kept_.end()) it = kept_.emplace(key, Kept{}).first;
  const uint32_t entries = it->second.entries;
  it->second = Kept{};
  it->second.op = op;
  it->second.latest = at;
  it->second.entries = entries + 1;
  order_.push_back(key);
  last_ = &it->second;
  while (order_.size() > max_entries_) {
    auto old = kept_.find(order_.front());
    if (--old->second.entries == 0) {
      if (&old->second == last_) last_ = nullptr;
      kept_.erase(old);
    }
    order_.pop_front();
  }
  return false;
}

void WriteIdWindow::Answered(const WriteAnswer& answer) {
  if (last_ == nullptr) return;
  Kept& k = *last_;
  if (!answer.status.ok()) {
    k.code = static_cast<uint8_t>(answer.status.code());
    return;
  }
  switch (k.op) {
    case proto::Op::kUpsert:
      k.v[0] = answer.upsert.inserted;
      k.v[1] = answer.upsert.updated;
      k.v[2] = answer.upsert.trimmed;
      k.v[3] = answer.upsert.count;
      break;
    case proto::Op::kRemove:
      k.v[0] = answer.removed;
      break;
    case proto::Op::kTrim:
      k.v[0] = answer.trim.trimmed;
      k.v[1] = answer.trim.remaining;
      break;
    case proto::Op::kExpire: {
      const std::vector<ExpireOutcome>& results = answer.expire.results;
      k.v[0] = answer.expire.count;
      if (results.size() > kKeptOutcomes) break;
      k.v[1] = static_cast<uint32_t>(results.size());
      k.outcomes = std::make_shared<uint8_t[]>((results.size() + 3) / 4);  // zeroed
      for (size_t i = 0; i < results.size(); ++i) {
        k.outcomes[i / 4] |=
            static_cast<uint8_t>(static_cast<uint8_t>(results[i]) << (2 * (i % 4)));
      }
      break;
    }
    case proto::Op::kLinkStep:
      k.v[0] = answer.step.applied ? 1 : 0;
      k.v[1] = answer.step.changed ? 1 : 0;
      k.v[2] = answer.step.members;
      break;
    case proto::Op::kFieldSet:
    case proto::Op::kFieldDelete:
      k.v[0] = answer.field_write.changed;
      k.v[1] = answer.field_write.count;
      break;
    case proto::Op::kFieldIncrement: {
      const auto bits = static_cast<uint64_t>(answer.increment.value);
      k.v[0] = static_cast<uint32_t>(bits);
      k.v[1] = static_cast<uint32_t>(bits >> 32);
      k.v[2] = answer.increment.capped ? 1 : 0;
      break;
    }
    case proto::Op::kFieldMax: {
      const FieldValue& v = answer.field_max.value;
      uint64_t bits = 0;
      if (v.type == FieldValue::Type::kDouble) {
        bits = std::bit_cast<uint64_t>(v.d);
      } else if (v.type == FieldValue::Type::kInt || v.type == FieldValue::Type::kTime) {
        bits = static_cast<uint64_t>(v.i);
      }
      const bool kept = v.type != FieldValue::Type::kString && v.type != FieldValue::Type::kBytes;
      k.v[0] = static_cast<uint32_t>(bits);
      k.v[1] = static_cast<uint32_t>(bits >> 32);
      k.v[2] = kept ? 1 + static_cast<uint32_t>(v.type) : 0;
      k.v[3] = answer.field_max.replaced ? 1 : 0;
      break;
    }
    default:
      k.v[0] = answer.deleted ? 1 : 0;
      break;
  }
}

}  // namespace segstore::replica
