// What a server connection reads into, whichever protocol it speaks: the
// binary protocol's FrameBuffer (frame_buffer.h) and RESP's RespReader
// (resp.h) both are one. The connection reads into Space(), counts what came
// with Commit(), and asks whether a whole request is waiting (Ready()); the
// protocol's own class cuts the requests out.
//
// I/O-free, no threads: owned and used by one connection.
#pragma once

#include <cstddef>
#include <cstdint>

namespace segstore::proto {

class InputBuffer {
 public:
  struct Span {
    char* data;
    size_t size;
  };
  virtual ~InputBuffer() = default;
  // Free space for the next read (at least the buffer's read size, and room
  // for the rest of the request at the front when its size is known). May
  // move unread bytes or grow, invalidating what was handed out.
  virtual Span Space() = 0;
  // `n` bytes were read into the last Space().
  virtual void Commit(size_t n) = 0;
  // No byte is waiting.
  virtual bool empty() const = 0;
  // A whole request (or bytes that break the stream) waits at the front.
  virtual bool Ready() const = 0;
  // Bytes taken since the buffer was made: a change tells that a new
  // request is now at the front.
  virtual uint64_t taken() const = 0;
  // Drops every byte not yet taken.
  virtual void Clear() = 0;
  // When empty, gives memory beyond the buffer's keep size back.
  virtual void Shrink() = 0;
};

}  // namespace segstore::proto
