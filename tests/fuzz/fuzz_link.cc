// libFuzzer target: the bodies of profile bridging's five requests (link,
// unlink, master_of, links, connected; proto::Decode into each). The first
// byte picks which (modulo 5), the rest is the body; one target rather than
// five keeps the fuzzing stage's time. The checks are request_harness.h's;
// seeds: proto/examples/{link,unlink,master_of,links,connected}.request.hex.
#include "fuzz/request_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace f = ::segstore::fuzz;
  namespace p = ::segstore::proto;
  if (size == 0) return 0;
  switch (data[0] % 5) {
    case 0:
      return f::FuzzRequestBody<p::LinkRequest>(data + 1, size - 1);
    case 1:
      return f::FuzzRequestBody<p::UnlinkRequest>(data + 1, size - 1);
    case 2:
      return f::FuzzRequestBody<p::MasterOfRequest>(data + 1, size - 1);
    case 3:
      return f::FuzzRequestBody<p::LinksRequest>(data + 1, size - 1);
    default:
      return f::FuzzRequestBody<p::ConnectedRequest>(data + 1, size - 1);
  }
}
