#include "replica/entry.h"

#include <fmt/format.h>

#include <type_traits>

#include "common/coding.h"

namespace segstore::replica {
namespace {

void PutBigEndian64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (56 - 8 * i));
}

uint64_t GetBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

Status CheckHeader(std::string_view bytes) {
  if (bytes.size() < kEntryHeaderSize) {
    return Status::InvalidArgument(fmt::format(
        "log entry of {} bytes: shorter than its {}-byte header", bytes.size(), kEntryHeaderSize));
  }
  if (static_cast<uint8_t>(bytes[0]) != kEntryFormat) {
    return Status::InvalidArgument(fmt::format("log entry format {} (this build reads {})",
                                               static_cast<uint8_t>(bytes[0]), kEntryFormat));
  }
  return Status::OK();
}

template <typename Request>
Status DecodeBody(std::string_view body, const proto::DecodeLimits& limits, WriteEntry* entry) {
  Request request;
  SEGSTORE_RETURN_IF_ERROR(proto::Decode(body, limits, &request));
  entry->request = std::move(request);
  return Status::OK();
}

}  // namespace

proto::Op WriteEntry::op() const {
  return std::visit(
      [](const auto& r) {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, proto::UpsertRequest>) {
          return proto::Op::kUpsert;
        } else if constexpr (std::is_same_v<R, proto::RemoveRequest>) {
          return proto::Op::kRemove;
        } else if constexpr (std::is_same_v<R, proto::TrimRequest>) {
          return proto::Op::kTrim;
        } else if constexpr (std::is_same_v<R, proto::DeleteRequest>) {
          return proto::Op::kDelete;
        } else if constexpr (std::is_same_v<R, proto::LinkStepRequest>) {
          return proto::Op::kLinkStep;
        } else if constexpr (std::is_same_v<R, proto::FieldSetRequest>) {
          return proto::Op::kFieldSet;
        } else if constexpr (std::is_same_v<R, proto::FieldDeleteRequest>) {
          return proto::Op::kFieldDelete;
        } else if constexpr (std::is_same_v<R, proto::FieldIncrementRequest>) {
          return proto::Op::kFieldIncrement;
        } else if constexpr (std::is_same_v<R, proto::FieldMaxRequest>) {
          return proto::Op::kFieldMax;
        } else {
          static_assert(std::is_same_v<R, proto::ExpireRequest>);
          return proto::Op::kExpire;
        }
      },
      request);
}

const std::string& WriteEntry::user() const {
  return std::visit(
      [](const auto& r) -> const std::string& {
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, proto::LinkStepRequest>) {
          return r.step.user;
        } else {
          return r.user;
        }
      },
      request);
}

void EncodeEntry(const WriteEntry& entry, std::string* out) {
  const size_t start = out->size();
  out->resize(start + kEntryHeaderSize);
  char* h = out->data() + start;
  h[0] = static_cast<char>(kEntryFormat);
  h[1] = static_cast<char>(entry.op());
  h[2] = 0;
  h[3] = 0;
  EncodeFixed32(reinterpret_cast<uint8_t*>(h + 4), entry.now);
  PutBigEndian64(entry.write_id.hi, h + 8);
  PutBigEndian64(entry.write_id.lo, h + 16);
  EncodeFixed64(reinterpret_cast<uint8_t*>(h + 24), entry.origin);
  EncodeFixed64(reinterpret_cast<uint8_t*>(h + 32), entry.ticket);
  std::visit([out](const auto& r) { proto::Encode(r, out); }, entry.request);
}

Result<EntryHeader> DecodeEntryHeader(std::string_view bytes) {
  SEGSTORE_RETURN_IF_ERROR(CheckHeader(bytes));
  EntryHeader h;
  h.op = static_cast<proto::Op>(static_cast<uint8_t>(bytes[1]));
  h.now = DecodeFixed32(reinterpret_cast<const uint8_t*>(bytes.data() + 4));
  h.write_id = WriteId{GetBigEndian64(bytes.data() + 8), GetBigEndian64(bytes.data() + 16)};
  h.origin = DecodeFixed64(reinterpret_cast<const uint8_t*>(bytes.data() + 24));
  h.ticket = DecodeFixed64(reinterpret_cast<const uint8_t*>(bytes.data() + 32));
  return h;
}

Status DecodeEntry(std::string_view bytes, const proto::DecodeLimits& limits, WriteEntry* entry) {
  SEGSTORE_RETURN_IF_ERROR(CheckHeader(bytes));
  entry->now = DecodeFixed32(reinterpret_cast<const uint8_t*>(bytes.data() + 4));
  entry->write_id = WriteId{GetBigEndian64(bytes.data() + 8), GetBigEndian64(bytes.data() + 16)};
  entry->origin = DecodeFixed64(reinterpret_cast<const uint8_t*>(bytes.data() + 24));
  entry->ticket = DecodeFixed64(reinterpret_cast<const uint8_t*>(bytes.data() + 32));
  const std::string_view body = bytes.substr(kEntryHeaderSize);
  Status s;
  switch (static_cast<proto::Op>(static_cast<uint8_t>(bytes[1]))) {
    case proto::Op::kUpsert:
      s = DecodeBody<proto::UpsertRequest>(body, limits, entry);
      break;
    case proto::Op::kRemove:
      s = DecodeBody<proto::RemoveRequest>(body, limits, entry);
      break;
    case proto::Op::kTrim:
      s = DecodeBody<proto::TrimRequest>(body, limits, entry);
      break;
    case proto::Op::kDelete:
      s = DecodeBody<proto::DeleteRequest>(body, limits, entry);
      break;
    case proto::Op::kExpire:
      s = DecodeBody<proto::ExpireRequest>(body, limits, entry);
      break;
    case proto::Op::kLinkStep:
      s = DecodeBody<proto::LinkStepRequest>(body, limits, entry);
      break;
    case proto::Op::kFieldSet:
      s = DecodeBody<proto::FieldSetRequest>(body, limits, entry);
      break;
    case proto::Op::kFieldDelete:
      s = DecodeBody<proto::FieldDeleteRequest>(body, limits, entry);
      break;
    case proto::Op::kFieldIncrement:
      s = DecodeBody<proto::FieldIncrementRequest>(body, limits, entry);
      break;
    case proto::Op::kFieldMax:
      s = DecodeBody<proto::FieldMaxRequest>(body, limits, entry);
      break;
    default:
      return Status::InvalidArgument(
          fmt::format("log entry op 0x{:02x} is not a write", static_cast<uint8_t>(bytes[1])));
  }
  if (!s.ok()) return s.WithContext("log entry body");
  std::visit([entry](auto& r) { r.write_id = entry->write_id; }, entry->request);
  return Status::OK();
}

}  // namespace segstore::replica
