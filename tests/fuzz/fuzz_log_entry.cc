// libFuzzer target: what a cluster node reads back from its log and its data
// file that others wrote: log entries (src/replica/entry.h) and checkpoint
// records (src/replica/checkpoint.h), from arbitrary bytes. The first byte
// picks which. An entry that decodes has a header that decodes alike, and
// re-encodes to bytes that decode to the same entry and re-encode to
// themselves; a refusal is InvalidArgument with a message. A checkpoint that
// decodes re-encodes to bytes that decode to the same checkpoint; a refusal
// is Corruption.
//
// Seeds: entries of every write and checkpoints, written by fuzz_seeds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "replica/checkpoint.h"
#include "replica/entry.h"

namespace {

using segstore::Status;
using namespace segstore::replica;

void Entry(std::string_view bytes) {
  segstore::proto::DecodeLimits limits;
  limits.max_key_bytes = 65535;
  limits.max_list = 1u << 24;
  WriteEntry e;
  const Status s = DecodeEntry(bytes, limits, &e);
  segstore::Result<EntryHeader> h = DecodeEntryHeader(bytes);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Status::Code::kInvalidArgument && !s.message().empty());
    return;
  }
  FUZZ_CHECK(h.ok());
  FUZZ_CHECK(h->op == e.op() && h->now == e.now && h->write_id == e.write_id);
  FUZZ_CHECK(h->origin == e.origin && h->ticket == e.ticket);
  // The request's own write_id came from the header; leave it out to encode.
  std::visit([](auto& r) { r.write_id = {}; }, e.request);
  std::string again;
  EncodeEntry(e, &again);
  WriteEntry back;
  FUZZ_CHECK(DecodeEntry(again, limits, &back).ok());
  std::visit([](auto& r) { r.write_id = {}; }, back.request);
  std::string third;
  EncodeEntry(back, &third);
  FUZZ_CHECK(third == again);
  FUZZ_CHECK(back.user() == e.user());
}

void CheckpointRecord(std::string_view bytes) {
  segstore::replica::Checkpoint c;
  const Status s = DecodeCheckpoint(bytes, &c);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Status::Code::kCorruption && !s.message().empty());
    return;
  }
  FUZZ_CHECK(c.window_start <= c.next);
  segstore::replica::Checkpoint back;
  FUZZ_CHECK(DecodeCheckpoint(EncodeCheckpoint(c), &back).ok());
  FUZZ_CHECK(back == c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes = segstore::fuzz::AsChars(data + 1, size - 1);
  if (data[0] & 1) {
    CheckpointRecord(bytes);
  } else {
    Entry(bytes);
  }
  return 0;
}
