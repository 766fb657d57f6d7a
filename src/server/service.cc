#include "server/service.h"

#include <string>
#include <utility>

#include "proto/wire.h"

namespace segstore::server {

namespace {

// A read as the binary port would have received it: its body encoded, then
// Handle.
template <typename Request>
void HandleEncoded(Handler* handler, proto::FrameHeader header, const Request& request,
                   Responder responder) {
  std::string body;
  proto::Encode(request, &body);
  header.body_length = static_cast<uint32_t>(body.size());
  handler->Handle(header, body, std::move(responder));
}

}  // namespace

void Handler::HandleGet(const proto::FrameHeader& header, proto::GetRequest request,
                        Responder responder) {
  HandleEncoded(this, header, request, std::move(responder));
}

void Handler::HandleBatchGet(const proto::FrameHeader& header, proto::BatchGetRequest request,
                             Responder responder) {
  HandleEncoded(this, header, request, std::move(responder));
}

}  // namespace segstore::server
