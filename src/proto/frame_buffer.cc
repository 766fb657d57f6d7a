#include "proto/frame_buffer.h"

#include <algorithm>
#include <cstring>

namespace segstore::proto {

FrameBuffer::FrameBuffer(size_t read_size, size_t keep_bytes, uint32_t max_body)
    : read_size_(read_size), keep_bytes_(keep_bytes), max_body_(max_body) {}

size_t FrameBuffer::FrontFrameSize() const {
  FrameHeader h;
  if (end_ - start_ < kHeaderSize ||
      DecodeHeader(reinterpret_cast<const uint8_t*>(buf_.data() + start_), UINT32_MAX, &h) ==
          HeaderCheck::kBadMagic) {
    return kHeaderSize;
  }
  return kHeaderSize + size_t{std::min(h.body_length, max_body_)};
}

FrameBuffer::Span FrameBuffer::Space() {
  if (start_ == end_) start_ = end_ = 0;
  const size_t have = end_ - start_;
  const size_t frame = FrontFrameSize();
  const size_t want = std::max(read_size_, frame > have ? frame - have : 0);
  if (buf_.size() - end_ < want) {
    if (start_ > 0) {
      std::memmove(buf_.data(), buf_.data() + start_, have);
      start_ = 0;
      end_ = have;
    }
    if (buf_.size() - end_ < want) buf_.resize(end_ + want);
  }
  return {buf_.data() + end_, buf_.size() - end_};
}

FrameBuffer::Next FrameBuffer::Take(uint32_t max_body, FrameHeader* header,
                                    std::string_view* body) {
  if (end_ - start_ < kHeaderSize) return Next::kNeedMore;
  switch (DecodeHeader(reinterpret_cast<const uint8_t*>(buf_.data() + start_), max_body, header)) {
    case HeaderCheck::kBadMagic:
      return Next::kBadMagic;
    case HeaderCheck::kTooLarge:
      return Next::kTooLarge;
    case HeaderCheck::kOk:
    case HeaderCheck::kBadVersion:
      break;
  }
  const size_t frame = kHeaderSize + size_t{header->body_length};
  if (end_ - start_ < frame) return Next::kNeedMore;
  *body = std::string_view(buf_.data() + start_ + kHeaderSize, header->body_length);
  start_ += frame;
  taken_ += frame;
  return Next::kFrame;
}

bool FrameBuffer::Ready() const {
  if (end_ - start_ < kHeaderSize) return false;
  return end_ - start_ >= FrontFrameSize();
}

void FrameBuffer::Shrink() {
  if (start_ == end_ && buf_.size() > keep_bytes_) {
    start_ = end_ = 0;
    std::vector<char>().swap(buf_);
  }
}

}  // namespace segstore::proto
