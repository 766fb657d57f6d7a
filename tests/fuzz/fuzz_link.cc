// libFuzzer target: the bodies of profile bridging's requests (link,
// unlink, master_of, links, connected, and node to node link_step and
// read_records; proto::Decode into each). The first byte picks which
// (modulo 7), the rest is the body; one target rather than seven keeps the
// fuzzing stage's time. The checks are request_harness.h's; seeds:
// proto/examples/<op>.request.hex of each.
#include "fuzz/request_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace f = ::segstore::fuzz;
  namespace p = ::segstore::proto;
  if (size == 0) return 0;
  switch (data[0] % 7) {
    case 0:
      return f::FuzzRequestBody<p::LinkRequest>(data + 1, size - 1);
    case 1:
      return f::FuzzRequestBody<p::UnlinkRequest>(data + 1, size - 1);
    case 2:
      return f::FuzzRequestBody<p::MasterOfRequest>(data + 1, size - 1);
    case 3:
      return f::FuzzRequestBody<p::LinksRequest>(data + 1, size - 1);
    case 5:
      return f::FuzzRequestBody<p::LinkStepRequest>(data + 1, size - 1);
    case 6:
      return f::FuzzRequestBody<p::ReadRecordsRequest>(data + 1, size - 1);
    default:
      return f::FuzzRequestBody<p::ConnectedRequest>(data + 1, size - 1);
  }
}
