// libFuzzer target: copy_partition's bodies, node to node (src/proto/wire.h):
// the request a serving node decodes and the page a copying node decodes,
// from arbitrary bytes. The first byte picks which (even: the request, odd:
// the response). The request goes through request_harness.h's checks. A
// page that decodes respects the protocol (a cursor of at most 2^32, a
// non-empty page unless it is the last, keys of 1 to max_key_bytes bytes and
// not reserved), and re-encodes to bytes that decode to the same page and
// re-encode to themselves, within kCopyPageOverhead of the sum of
// CopiedRecordBytes; a refusal is InvalidArgument or LimitExceeded with a
// message.
//
// Seeds: proto/examples/copy_partition*.{request,response}.hex (the OK
// bodies), each behind its selector byte, written by fuzz_seeds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "fuzz/request_harness.h"
#include "proto/wire.h"

namespace {

using namespace segstore;

void Page(std::string_view bytes) {
  const proto::DecodeLimits limits = fuzz::BodyLimits();
  proto::CopyPartitionResponse m;
  const Status s = proto::Decode(bytes, limits, &m);
  if (!s.ok()) {
    FUZZ_CHECK(fuzz::IsCleanRefusal(s));
    return;
  }
  FUZZ_CHECK(m.cursor <= kCopyFinished);
  FUZZ_CHECK(!m.records.empty() || m.finished());
  size_t bytes_of_records = 0;
  for (const proto::CopiedRecord& r : m.records) {
    fuzz::CheckUser(r.key, limits);
    FUZZ_CHECK(!(r.key.size() >= 2 && r.key[0] == '\xff' && r.key[1] == '\0'));
    bytes_of_records += proto::CopiedRecordBytes(r);
  }
  std::string again;
  proto::Encode(m, &again);
  FUZZ_CHECK(again.size() <= proto::kCopyPageOverhead + bytes_of_records);
  proto::CopyPartitionResponse back;
  FUZZ_CHECK(proto::Decode(again, limits, &back).ok());
  FUZZ_CHECK(back == m);
  std::string third;
  proto::Encode(back, &third);
  FUZZ_CHECK(third == again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    Page(segstore::fuzz::AsChars(data + 1, size - 1));
    return 0;
  }
  return segstore::fuzz::FuzzRequestBody<segstore::proto::CopyPartitionRequest>(data + 1, size - 1);
}
