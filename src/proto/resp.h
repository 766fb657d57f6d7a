// RESP, the Redis serialization protocol, as segstore's second front end
// speaks it (proto/RESP.md): RespReader cuts the commands a client sends out
// of the bytes received, RespWriter appends replies in RESP2 or RESP3.
//
// A command is either a multibulk (an array of bulk strings: what every
// client library sends) or an inline command (one line of words, for a
// person at a terminal; double and single quotes group words, as Redis's
// own parser does). Bytes that are neither break the stream: the reader
// reports them with Redis's own "Protocol error: ..." wording and consumes
// nothing, and the server answers that error and closes the connection.
//
// I/O-free, no threads: owned and used by one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/input_buffer.h"

namespace segstore::proto {

// The most arguments one multibulk may announce (Redis's own limit), and the
// longest inline command line.
inline constexpr int64_t kRespMaxArguments = 1024 * 1024;
inline constexpr size_t kRespMaxInline = 64 * 1024;

class RespReader final : public InputBuffer {
 public:
  // `read_size` and `keep_bytes` as FrameBuffer's. `max_command_bytes`: the
  // most bytes one command may take on the wire, framing included; a command
  // announcing more breaks the stream before its bytes are buffered.
  RespReader(size_t read_size, size_t keep_bytes, uint32_t max_command_bytes);

  Span Space() override;
  void Commit(size_t n) override { end_ += n; }
  bool empty() const override { return start_ == end_; }
  bool Ready() const override;
  uint64_t taken() const override { return taken_; }
  void Clear() override;
  void Shrink() override;

  enum class Next : uint8_t {
    kNeedMore,  // the front command has not come whole (or nothing has)
    kCommand,   // *args holds the front command, now consumed
    kBroken,    // the front bytes are not RESP or pass a limit; *error says why
  };
  // The front command, whole: its arguments, the command's name first, into
  // *args (cleared first), valid until the next Space(), Shrink() or Clear().
  // Empty commands (a blank inline line, a multibulk of 0 or -1 elements)
  // are consumed and skipped, as Redis does. kBroken consumes nothing: the
  // stream cannot be trusted past those bytes.
  Next Take(std::vector<std::string_view>* args, std::string* error);

  // Changes the limit for the commands not yet begun (a server allows less
  // before a client authenticated).
  void set_max_command_bytes(uint32_t n) { max_command_bytes_ = n; }

 private:
  enum class Parse : uint8_t { kNeedMore, kWhole, kEmpty, kBroken };
  // Reads the front command as far as the bytes go, from where the last call
  // stopped (a command arriving in many reads is scanned once).
  Parse Advance() const;
  Parse AdvanceInline() const;
  // Splits the inline line [start_, start_ + len) into arguments in place.
  bool SplitInline(size_t len, std::vector<std::string_view>* args, std::string* error);
  void ResetParse() const;

  const size_t read_size_;
  const size_t keep_bytes_;
  uint32_t max_command_bytes_;
  std::vector<char> buf_;
  size_t start_ = 0;  // bytes [start_, end_) are read and not taken
  size_t end_ = 0;
  uint64_t taken_ = 0;
  // The parse of the front command so far; offsets are from start_.
  mutable size_t scanned_ = 0;      // bytes of it read
  mutable int64_t arguments_ = -1;  // its multibulk's count; -1 until read
  mutable size_t bulk_need_ = 0;    // bytes still missing of the bulk string begun
  mutable std::vector<std::pair<size_t, size_t>> spans_;  // each argument: offset, length
  mutable std::string error_;                             // kBroken: why
};

// Appends replies to a string in RESP2 or RESP3 (HELLO chooses). Types that
// RESP2 lacks are written as its nearest: a map as an array of keys and
// values, a set as an array, null as the null bulk string, a boolean as the
// integer 1 or 0, a double and verbatim text as bulk strings.
class RespWriter {
 public:
  RespWriter(std::string* out, bool resp3) : out_(out), resp3_(resp3) {}
  bool resp3() const { return resp3_; }

  void Simple(std::string_view s);  // "+OK"; CR and LF become spaces
  // "-PREFIX message": `prefix` is the error's code word ("ERR", "MOVED");
  // CR and LF in the message become spaces.
  void Error(std::string_view prefix, std::string_view message);
  void Integer(int64_t v);
  void Bulk(std::string_view s);
  void BulkNumber(uint64_t v);  // a number as a bulk string (a hash field or value)
  // Many elements at once, as BulkNumber and Integer write each, through a
  // stack buffer (one append per few hundred elements: a reply's columns).
  // `each`, when given, is written verbatim after every element: a reply
  // element already in RESP (HGETALL's empty value, "$0\r\n\r\n").
  void BulkNumbers(std::span<const uint64_t> values, std::string_view each = {});
  void Integers(std::span<const uint32_t> values);
  void Null();       // RESP2: the null bulk string
  void NullArray();  // RESP2: the null array
  void Array(size_t n);
  void Map(size_t n);  // n pairs follow
  void Set(size_t n);
  void Boolean(bool b);
  void Double(double d);
  void Verbatim(std::string_view text);  // "txt" text (INFO)
  // Room for `n` more bytes, so a large reply grows its string once.
  void Reserve(size_t n) { out_->reserve(out_->size() + n); }

 private:
  void Header(char type, uint64_t n);
  std::string* out_;
  bool resp3_;
};

}  // namespace segstore::proto
