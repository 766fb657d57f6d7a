#include "replica/checkpoint.h"

#include <fmt/format.h>

namespace segstore::replica {
namespace {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint(std::string_view* in, uint64_t* v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const auto b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    x |= uint64_t{b & 0x7Fu} << shift;
    if ((b & 0x80) == 0) {
      *v = x;
      return true;
    }
  }
  return false;
}

constexpr uint8_t kCheckpointVersion = 1;
constexpr uint64_t kMaxOffset = uint64_t{1} << 62;

}  // namespace

std::string CheckpointKey(uint32_t log_partition) {
  return fmt::format("{}segstore:applied:{}", kReservedPrefix, log_partition);
}

std::string EncodeCheckpoint(const Checkpoint& c) {
  std::string out;
  out.push_back(static_cast<char>(kCheckpointVersion));
  PutVarint(static_cast<uint64_t>(c.next), &out);
  PutVarint(static_cast<uint64_t>(c.window_start), &out);
  PutVarint(c.partitions.size(), &out);
  for (const auto& [partition, next] : c.partitions) {
    PutVarint(partition, &out);
    PutVarint(static_cast<uint64_t>(next), &out);
  }
  return out;
}

Status DecodeCheckpoint(std::string_view body, Checkpoint* c) {
  const auto bad = [](std::string_view what) {
    return Status::Corruption(fmt::format("checkpoint record: {}", what));
  };
  if (body.empty()) return bad("empty");
  if (static_cast<uint8_t>(body[0]) != kCheckpointVersion) {
    return bad(fmt::format("version {} (this build reads {})", static_cast<uint8_t>(body[0]),
                           kCheckpointVersion));
  }
  body.remove_prefix(1);
  uint64_t next = 0, window = 0, n = 0;
  if (!GetVarint(&body, &next) || !GetVarint(&body, &window) || !GetVarint(&body, &n)) {
    return bad("cut short");
  }
  if (next > kMaxOffset || window > next) return bad("offsets out of range");
  if (n > 4096) return bad("more partitions than there are");
  Checkpoint out;
  out.next = static_cast<int64_t>(next);
  out.window_start = static_cast<int64_t>(window);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t partition = 0, offset = 0;
    if (!GetVarint(&body, &partition) || !GetVarint(&body, &offset)) return bad("cut short");
    if (partition >= 4096 || offset > kMaxOffset) return bad("partition entry out of range");
    out.partitions.emplace_back(static_cast<uint32_t>(partition), static_cast<int64_t>(offset));
  }
  if (!body.empty()) return bad("trailing bytes");
  *c = std::move(out);
  return Status::OK();
}

}  // namespace segstore::replica
