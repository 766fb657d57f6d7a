#include "profile/field_names.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "profile/field_codec.h"

namespace segstore::profile {
namespace {

constexpr char kRecordVersion = 1;
// Load reads this many numbers at a time, and stops after a batch with none.
constexpr uint32_t kLoadBatch = 256;
// New names' records written together, durable after one flush. At most
// kLoadBatch, so that a batch cut short by a crash leaves no run of missing
// numbers Load would stop at.
constexpr size_t kWriteBatch = kLoadBatch;

}  // namespace

FieldNames::FieldNames(uint32_t max_names)
    : max_names_(std::min(max_names, kMaxNames)),
      chunks_(new std::atomic<std::string*>[kMaxNames / kChunk + 1]) {
  for (uint32_t i = 0; i <= kMaxNames / kChunk; ++i) chunks_[i].store(nullptr);
}

FieldNames::~FieldNames() {
  for (uint32_t i = 0; i <= kMaxNames / kChunk; ++i) delete[] chunks_[i].load();
}

std::string FieldNames::Key(uint32_t id) {
  return fmt::format("{}field-name:{}", storage::kReservedKeyPrefix, id);
}

// Every name the store holds, past max_names_ too (a store written with a
// larger limit keeps reading its fields; only new numbers stop).
Status FieldNames::Load(storage::Worker& worker) {
  for (uint32_t from = 1; from <= kMaxNames; from += kLoadBatch) {
    const uint32_t to = std::min(kMaxNames, from + kLoadBatch - 1);
    std::vector<std::optional<Result<storage::Record>>> got(to - from + 1);
    {
      storage::Worker::Batch batch(worker);
      for (uint32_t id = from; id <= to; ++id) {
        worker.Get(Key(id), [&got, i = id - from](Result<storage::Record> r) {
          got[i].emplace(std::move(r));
        });
      }
    }
    while (std::any_of(got.begin(), got.end(), [](const auto& g) { return !g.has_value(); })) {
      worker.Wait(std::chrono::milliseconds(10));
    }
    bool any = false;
    for (uint32_t id = from; id <= to; ++id) {
      const Result<storage::Record>& r = *got[id - from];
      if (!r.ok()) {
        if (r.status().IsNotFound()) continue;
        return r.status().WithContext(fmt::format("field name {}", id));
      }
      const std::string_view body = r->body();
      if (body.size() < 2 || body[0] != kRecordVersion || body.size() - 1 > kMaxFieldNameBytes) {
        return Status::Corruption(
            fmt::format("field name record {}: not a name record ({} bytes)", id, body.size()));
      }
      std::lock_guard lock(mu_);
      Publish(id, std::string(body.substr(1)));
      ++loaded_;
      any = true;
    }
    if (!any) break;
  }
  if (loaded_ != size()) {
    spdlog::warn(
        "field name table: {} names, but numbers run to {}: {} numbers have no record (a crash "
        "while names were being registered leaves unused ones; a lost record's fields read as "
        "damaged)",
        loaded_, size(), size() - loaded_);
  }
  return Status::OK();
}

void FieldNames::Publish(uint32_t id, std::string name) {
  std::atomic<std::string*>& slot = chunks_[id >> kChunkBits];
  std::string* chunk = slot.load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    chunk = new std::string[kChunk];
    slot.store(chunk, std::memory_order_release);
  }
  chunk[id & (kChunk - 1)] = name;
  ids_.emplace(std::move(name), id);
  if (id > published_.load(std::memory_order_relaxed)) {
    published_.store(id, std::memory_order_release);
  }
}

uint32_t FieldNames::Find(std::string_view name) const {
  std::lock_guard lock(mu_);
  auto it = ids_.find(std::string(name));
  return it == ids_.end() ? 0 : it->second;
}

std::string_view FieldNames::Name(uint32_t id) const {
  if (id == 0 || id > published_.load(std::memory_order_acquire)) return {};
  const std::string* chunk = chunks_[id >> kChunkBits].load(std::memory_order_acquire);
  return chunk == nullptr ? std::string_view() : std::string_view(chunk[id & (kChunk - 1)]);
}

void FieldNames::Register(std::span<const std::string> names, storage::Worker& worker) {
  {
    std::lock_guard lock(mu_);
    for (const std::string& name : names) {
      if (published_.load(std::memory_order_relaxed) + queue_.size() >= max_names_) break;
      if (ids_.contains(name) || std::find(queue_.begin(), queue_.end(), name) != queue_.end()) {
        continue;
      }
      queue_.push_back(name);
    }
    if (writing_ || queue_.empty()) return;
    writing_ = true;
  }
  WriteNext(worker);
}

void FieldNames::WriteNext(storage::Worker& worker) {
  // The queue's first names (at most kWriteBatch) get the next numbers: their
  // records are written together and made durable by one flush, so a load
  // meeting thousands of new names waits for a flush per batch, not per name.
  struct Batch {
    uint32_t first = 0;  // the first name's number
    std::vector<std::string> names;
    size_t pending = 0;
    Status failure;
  };
  auto batch = std::make_shared<Batch>();
  {
    std::lock_guard lock(mu_);
    batch->first = published_.load(std::memory_order_relaxed) + 1;
    const size_t n = std::min(queue_.size(), kWriteBatch);
    batch->names.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  batch->pending = batch->names.size();
  auto failed = [this, batch](const Status& s) {
    spdlog::warn(
        "field name table: names {} to {} not registered (their fields stay named inline): {}",
        batch->first, batch->first + batch->names.size() - 1, s.ToString());
    std::lock_guard lock(mu_);
    queue_.clear();  // a later write asks again
    writing_ = false;
  };
  auto written = [this, &worker, batch, failed] {
    if (!batch->failure.ok()) return failed(batch->failure);
    // Usable only once on the device: a body naming a number must never
    // outlive the name's record in a crash.
    worker.Flush([this, &worker, batch, failed](Status s) {
      if (!s.ok()) return failed(s);
      {
        std::lock_guard lock(mu_);
        for (size_t i = 0; i < batch->names.size(); ++i) {
          Publish(batch->first + static_cast<uint32_t>(i), batch->names[i]);
        }
        queue_.erase(queue_.begin(),
                     queue_.begin() + static_cast<std::ptrdiff_t>(batch->names.size()));
        if (queue_.empty()) {
          writing_ = false;
          return;
        }
      }
      WriteNext(worker);
    });
  };
  for (size_t i = 0; i < batch->names.size(); ++i) {
    std::string body(1, kRecordVersion);
    body += batch->names[i];
    worker.Put(Key(batch->first + static_cast<uint32_t>(i)), std::move(body), 0, 0,
               [batch, written](Result<storage::WriteOutcome> r) {
                 if (!r.ok() && batch->failure.ok()) batch->failure = r.status();
                 if (--batch->pending == 0) written();
               });
  }
}

}  // namespace segstore::profile
