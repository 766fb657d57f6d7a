// libFuzzer target: a byte stream of frames, read as the server reads a
// connection's input (src/server/connection.cc, profile_service.cc), without
// the sockets: the bytes go through a proto::FrameBuffer in reads of a size
// chosen by the input's length, and each frame it hands out must be the one
// a plain walk of the headers finds; a bad magic or an oversized body ends
// the stream (the server closes the connection); an incomplete frame ends it
// too; then the header checks (version, known op, status 0) and the body
// decoder of the header's op, under the server's default limits. A refusal becomes the error frame
// the server would send, which must read back as that error. Each frame is also read as a client
// reads an answer (the op's response decoder, or DecodeError), so the
// response decoders are fuzzed too.
//
// Seeds: every frame of proto/examples (requests and responses).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "fuzz/request_harness.h"
#include "proto/frame_buffer.h"
#include "proto/protocol.h"
#include "proto/wire.h"

namespace segstore::fuzz {
namespace {

using proto::FrameHeader;
using proto::Op;

// The server's defaults (src/server/profile_service.h: max_segments bounds lists).
proto::DecodeLimits ServerLimits() {
  proto::DecodeLimits l;
  l.max_key_bytes = proto::kDefaultMaxKeyBytes;
  l.max_batch = proto::kDefaultMaxBatch;
  l.max_list = 10000;
  return l;
}

// The error frame the server sends for `s` must carry it whole.
void CheckErrorFrame(const FrameHeader& h, const Status& s) {
  std::string out;
  proto::AppendErrorFrame(&out, h.op, h.request_id, s);
  FUZZ_CHECK(out.size() >= proto::kHeaderSize);
  FrameHeader back;
  FUZZ_CHECK(proto::DecodeHeader(reinterpret_cast<const uint8_t*>(out.data()), UINT32_MAX, &back) ==
             proto::HeaderCheck::kOk);
  FUZZ_CHECK(back.op == h.op && back.request_id == h.request_id);
  FUZZ_CHECK(back.status == static_cast<uint8_t>(s.code()));
  FUZZ_CHECK(back.body_length == out.size() - proto::kHeaderSize);
  FUZZ_CHECK(proto::DecodeError(std::string_view(out).substr(proto::kHeaderSize)) == s.message());
}

template <typename Request>
void ServeRequest(const FrameHeader& h, std::string_view body, const proto::DecodeLimits& l) {
  Request m;
  const Status s = proto::Decode(body, l, &m);
  if (s.ok()) {
    CheckDecoded(m, l);
    return;
  }
  FUZZ_CHECK(IsCleanRefusal(s));
  CheckErrorFrame(h, s.WithContext(proto::OpName(h.op)));
}

// What the server does with one whole frame whose header read as kOk or kBadVersion.
void Serve(const FrameHeader& h, std::string_view body, const proto::DecodeLimits& l) {
  Status refuse;
  if (h.version != proto::kVersion) {
    refuse = Status::Unsupported("protocol version");
  } else if (!proto::IsKnownOp(h.op)) {
    refuse = Status::Unsupported("unknown operation code");
  } else if (h.status != 0) {
    refuse = Status::InvalidArgument("a request must carry status 0");
  }
  if (!refuse.ok()) {
    CheckErrorFrame(h, refuse);
    return;
  }
  switch (static_cast<Op>(h.op)) {
    case Op::kHello:
      return ServeRequest<proto::HelloRequest>(h, body, l);
    case Op::kPing:
    case Op::kStats:
    case Op::kClusterMap:
      return ServeRequest<proto::EmptyRequest>(h, body, l);
    case Op::kGet:
      return ServeRequest<proto::GetRequest>(h, body, l);
    case Op::kBatchGet:
      return ServeRequest<proto::BatchGetRequest>(h, body, l);
    case Op::kCount:
      return ServeRequest<proto::CountRequest>(h, body, l);
    case Op::kMasterOf:
      return ServeRequest<proto::MasterOfRequest>(h, body, l);
    case Op::kLinks:
      return ServeRequest<proto::LinksRequest>(h, body, l);
    case Op::kConnected:
      return ServeRequest<proto::ConnectedRequest>(h, body, l);
    case Op::kScan:
      return ServeRequest<proto::ScanRequest>(h, body, l);
    case Op::kUpsert:
      return ServeRequest<proto::UpsertRequest>(h, body, l);
    case Op::kBatchUpsert:
      return ServeRequest<proto::BatchUpsertRequest>(h, body, l);
    case Op::kRemove:
      return ServeRequest<proto::RemoveRequest>(h, body, l);
    case Op::kTrim:
      return ServeRequest<proto::TrimRequest>(h, body, l);
    case Op::kDelete:
      return ServeRequest<proto::DeleteRequest>(h, body, l);
    case Op::kExpire:
      return ServeRequest<proto::ExpireRequest>(h, body, l);
    case Op::kLink:
      return ServeRequest<proto::LinkRequest>(h, body, l);
    case Op::kUnlink:
      return ServeRequest<proto::UnlinkRequest>(h, body, l);
    case Op::kCopyPartition:
      return ServeRequest<proto::CopyPartitionRequest>(h, body, l);
    case Op::kLinkStep:
      return ServeRequest<proto::LinkStepRequest>(h, body, l);
    case Op::kReadRecords:
      return ServeRequest<proto::ReadRecordsRequest>(h, body, l);
    case Op::kFieldSet:
      return ServeRequest<proto::FieldSetRequest>(h, body, l);
    case Op::kFieldDelete:
      return ServeRequest<proto::FieldDeleteRequest>(h, body, l);
    case Op::kFieldIncrement:
      return ServeRequest<proto::FieldIncrementRequest>(h, body, l);
    case Op::kFieldMax:
      return ServeRequest<proto::FieldMaxRequest>(h, body, l);
  }
  FUZZ_CHECK(false);  // IsKnownOp said yes
}

template <typename Response>
void ReadAnswer(std::string_view body, const proto::DecodeLimits& l) {
  Response m;
  const Status s = proto::Decode(body, l, &m);
  FUZZ_CHECK(s.ok() || IsCleanRefusal(s));
}

// What a client does with the frame as an answer.
void ReadAsAnswer(const FrameHeader& h, std::string_view body) {
  const proto::DecodeLimits l;
  if (h.status != 0) {
    (void)proto::DecodeError(body);  // never fails
    (void)proto::DecodeErrorRevision(body);
    return;
  }
  switch (static_cast<Op>(h.op)) {
    case Op::kHello:
      return ReadAnswer<proto::HelloResponse>(body, l);
    case Op::kPing:
      return;
    case Op::kStats:
      return ReadAnswer<proto::StatsResponse>(body, l);
    case Op::kClusterMap:
      return ReadAnswer<segstore::ClusterMap>(body, l);
    case Op::kGet:
      return ReadAnswer<GetResult>(body, l);
    case Op::kBatchGet:
      return ReadAnswer<proto::BatchGetResponse>(body, l);
    case Op::kCount:
      return ReadAnswer<proto::CountResponse>(body, l);
    case Op::kMasterOf:
      return ReadAnswer<proto::MasterOfResponse>(body, l);
    case Op::kLinks:
      return ReadAnswer<proto::LinksResponse>(body, l);
    case Op::kConnected:
      return ReadAnswer<proto::ConnectedResponse>(body, l);
    case Op::kScan:
      return ReadAnswer<proto::ScanResponse>(body, l);
    case Op::kUpsert:
      return ReadAnswer<UpsertResult>(body, l);
    case Op::kBatchUpsert:
      return ReadAnswer<proto::BatchUpsertResponse>(body, l);
    case Op::kRemove:
      return ReadAnswer<proto::RemoveResponse>(body, l);
    case Op::kTrim:
      return ReadAnswer<TrimResult>(body, l);
    case Op::kDelete:
      return ReadAnswer<proto::DeleteResponse>(body, l);
    case Op::kExpire:
      return ReadAnswer<proto::ExpireResponse>(body, l);
    case Op::kLink:
      return ReadAnswer<proto::LinkResponse>(body, l);
    case Op::kUnlink:
      return ReadAnswer<proto::UnlinkResponse>(body, l);
    case Op::kCopyPartition:
      return ReadAnswer<proto::CopyPartitionResponse>(body, l);
    case Op::kLinkStep:
      return ReadAnswer<proto::LinkStepResponse>(body, l);
    case Op::kReadRecords:
      return ReadAnswer<proto::ReadRecordsResponse>(body, l);
    case Op::kFieldSet:
    case Op::kFieldDelete:
      return ReadAnswer<proto::FieldWriteResponse>(body, l);
    case Op::kFieldIncrement:
      return ReadAnswer<proto::FieldIncrementResponse>(body, l);
    case Op::kFieldMax:
      return ReadAnswer<proto::FieldMaxResponse>(body, l);
  }
}

}  // namespace
}  // namespace segstore::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace segstore;
  using namespace segstore::fuzz;
  const proto::DecodeLimits limits = ServerLimits();
  std::string_view rest = AsChars(data, size);
  // Reads as a socket might deliver them: 1 to 61 bytes at a time.
  const size_t read_size = 1 + size % 61;
  proto::FrameBuffer in(read_size, 256, proto::kDefaultMaxFrameBytes);
  size_t start = 0;  // where the frame at the front of `in` starts in the input
  for (bool ended = false; !ended;) {
    if (!rest.empty()) {
      const auto space = in.Space();
      FUZZ_CHECK(space.size >= read_size);
      const size_t n = std::min(rest.size(), read_size);
      std::memcpy(space.data, rest.data(), n);
      in.Commit(n);
      rest.remove_prefix(n);
    }
    while (!ended) {
      proto::FrameHeader h;
      std::string_view body;
      const bool ready = in.Ready();
      const auto next = in.Take(proto::kDefaultMaxFrameBytes, &h, &body);
      // Ready() sets no limit on the body: a header over the limit may be
      // refused before its body has come.
      if (next != proto::FrameBuffer::Next::kTooLarge) {
        FUZZ_CHECK(ready == (next != proto::FrameBuffer::Next::kNeedMore));
      }
      if (next == proto::FrameBuffer::Next::kNeedMore) break;
      // What a plain walk of the headers finds at `start`.
      proto::FrameHeader walked;
      const proto::HeaderCheck check =
          proto::DecodeHeader(data + start, proto::kDefaultMaxFrameBytes, &walked);
      if (next == proto::FrameBuffer::Next::kBadMagic) {
        FUZZ_CHECK(check == proto::HeaderCheck::kBadMagic);
        CheckErrorFrame(proto::FrameHeader{}, Status::InvalidArgument("bad frame magic"));
        ended = true;  // the connection closes
        break;
      }
      FUZZ_CHECK(check != proto::HeaderCheck::kBadMagic);
      FUZZ_CHECK(walked.version == h.version && walked.op == h.op && walked.status == h.status &&
                 walked.flags == h.flags && walked.request_id == h.request_id &&
                 walked.body_length == h.body_length);
      // The header's fields survive encoding (the reserved bytes are not kept).
      uint8_t again[proto::kHeaderSize];
      proto::EncodeHeader(h, again);
      proto::FrameHeader back;
      FUZZ_CHECK(proto::DecodeHeader(again, proto::kDefaultMaxFrameBytes, &back) == check);
      FUZZ_CHECK(back.version == h.version && back.op == h.op && back.status == h.status &&
                 back.flags == h.flags && back.request_id == h.request_id &&
                 back.body_length == h.body_length);
      if (next == proto::FrameBuffer::Next::kTooLarge) {
        FUZZ_CHECK(check == proto::HeaderCheck::kTooLarge);
        FUZZ_CHECK(h.body_length > proto::kDefaultMaxFrameBytes);
        CheckErrorFrame(h, Status::LimitExceeded("frame body over the limit"));
        ended = true;  // the connection closes
        break;
      }
      FUZZ_CHECK(body.size() == h.body_length && start + proto::kHeaderSize + body.size() <= size &&
                 std::memcmp(body.data(), data + start + proto::kHeaderSize, body.size()) == 0);
      start += proto::kHeaderSize + body.size();
      FUZZ_CHECK(in.taken() == start);
      Serve(h, body, limits);
      ReadAsAnswer(h, body);
    }
    if (rest.empty()) break;  // an incomplete frame at the end is never served
  }
  return 0;
}
