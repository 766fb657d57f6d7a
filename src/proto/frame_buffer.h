// The bytes received on one connection, cut into frames: the server's and the
// client's connections both read into one of these and take whole frames out.
//
// Reads land in Space() and are counted by Commit(). Next() looks at the frame
// at the front: once all of it has come it is consumed and handed out, header
// and body; a header that breaks the stream (wrong magic, a body over the
// limit) is reported and nothing is consumed, since the stream cannot be
// resynchronised past it. A body handed out stays valid until the next call
// of Space(), Shrink() or Clear(): serve it (or copy it) before reading more.
//
// I/O-free, no threads: owned and used by one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "proto/input_buffer.h"
#include "proto/protocol.h"

namespace segstore::proto {

class FrameBuffer final : public InputBuffer {
 public:
  // `read_size`: the free space each read is offered (more when a frame
  // already begun needs more, up to a body of `max_body` bytes: a header
  // promising more never makes the buffer grow past that). An empty buffer
  // larger than `keep_bytes` is given back to the allocator by Shrink().
  FrameBuffer(size_t read_size, size_t keep_bytes, uint32_t max_body);

  // Free space for the next read: at least read_size bytes, and room for the
  // rest of the frame at the front when its header has come. Moves unread
  // bytes to the front or grows as needed (invalidating bodies handed out).
  Span Space() override;
  // `n` bytes were read into the last Space().
  void Commit(size_t n) override { end_ += n; }

  enum class Next : uint8_t {
    kNeedMore,  // not all of the front frame has come (or nothing has)
    kFrame,     // *header and *body hold the front frame, now consumed
    kBadMagic,  // the front bytes are not a segstore frame header
    kTooLarge,  // the front header's body_length is over max_body (*header is filled)
  };
  // The front frame, whole, if it is there. A frame of another protocol
  // version is still handed out (kFrame): whether to answer or refuse it is
  // the caller's choice (header->version says). *header is filled whenever
  // a whole header with the right magic has come, kNeedMore included.
  Next Take(uint32_t max_body, FrameHeader* header, std::string_view* body);

  // The bytes read and not yet taken.
  std::string_view unread() const { return {buf_.data() + start_, end_ - start_}; }
  bool empty() const override { return start_ == end_; }
  // Take() would not say kNeedMore (with no limit on the body).
  bool Ready() const override;
  // Bytes taken since this buffer was made: a change tells that a new frame
  // is now at the front.
  uint64_t taken() const override { return taken_; }
  // Drops every byte not yet taken.
  void Clear() override { start_ = end_ = 0; }
  // When empty, gives back memory over keep_bytes.
  void Shrink() override;

 private:
  // Bytes the front frame needs in all: its header's promise (at most
  // max_body_ of body), or a header.
  size_t FrontFrameSize() const;

  const size_t read_size_;
  const size_t keep_bytes_;
  const uint32_t max_body_;
  std::vector<char> buf_;
  size_t start_ = 0;  // bytes [start_, end_) are read and not taken
  size_t end_ = 0;
  uint64_t taken_ = 0;
};

}  // namespace segstore::proto
