#include "proto/resp.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace segstore::proto {

namespace {

// "*<count>\r\n" and "$<length>\r\n": the longest line a count may take.
constexpr size_t kMaxCountLine = 32;

enum class Line : uint8_t { kNeedMore, kOk, kTooLong, kInvalid };

// Reads "<integer>\r\n" from p[0..avail): the value, and the bytes the line
// takes with its CRLF.
Line ReadCount(const char* p, size_t avail, int64_t* value, size_t* line) {
  const size_t look = std::min(avail, kMaxCountLine);
  const void* cr = std::memchr(p, '\r', look);
  if (cr == nullptr) return avail > kMaxCountLine ? Line::kTooLong : Line::kNeedMore;
  const size_t digits = static_cast<size_t>(static_cast<const char*>(cr) - p);
  if (digits + 1 >= avail) return Line::kNeedMore;
  if (p[digits + 1] != '\n' || digits == 0) return Line::kInvalid;
  const auto [end, ec] = std::from_chars(p, p + digits, *value);
  if (ec != std::errc() || end != p + digits) return Line::kInvalid;
  *line = digits + 2;
  return Line::kOk;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

RespReader::RespReader(size_t read_size, size_t keep_bytes, uint32_t max_command_bytes)
    : read_size_(read_size), keep_bytes_(keep_bytes), max_command_bytes_(max_command_bytes) {}

void RespReader::ResetParse() const {
  scanned_ = 0;
  arguments_ = -1;
  bulk_need_ = 0;
  spans_.clear();
  error_.clear();
}

InputBuffer::Span RespReader::Space() {
  if (start_ == end_) start_ = end_ = 0;
  const size_t have = end_ - start_;
  const size_t want = std::max(read_size_, bulk_need_);
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

void RespReader::Clear() {
  start_ = end_ = 0;
  ResetParse();
}

void RespReader::Shrink() {
  if (start_ == end_ && buf_.size() > keep_bytes_) {
    start_ = end_ = 0;
    std::vector<char>().swap(buf_);
  }
}

bool RespReader::Ready() const { return Advance() != Parse::kNeedMore; }

RespReader::Parse RespReader::AdvanceInline() const {
  const char* b = buf_.data() + start_;
  const size_t have = end_ - start_;
  const size_t limit = std::min<size_t>(kRespMaxInline, max_command_bytes_);
  // Bytes [0, scanned_) were looked at before: the line, or bytes without LF.
  if (scanned_ > 0 && b[scanned_ - 1] == '\n') return Parse::kWhole;
  const size_t look = std::min(have, limit);
  const void* nl = scanned_ < look ? std::memchr(b + scanned_, '\n', look - scanned_) : nullptr;
  if (nl == nullptr) {
    scanned_ = look;
    if (have < limit) return Parse::kNeedMore;
    error_ = "Protocol error: too big inline request";
    return Parse::kBroken;
  }
  scanned_ = static_cast<size_t>(static_cast<const char*>(nl) - b) + 1;
  return Parse::kWhole;
}

RespReader::Parse RespReader::Advance() const {
  if (!error_.empty()) return Parse::kBroken;
  if (start_ == end_) return Parse::kNeedMore;
  const char* b = buf_.data() + start_;
  const size_t have = end_ - start_;
  if (arguments_ < 0) {
    if (b[0] != '*') return AdvanceInline();
    int64_t count = 0;
    size_t line = 0;
    switch (ReadCount(b + 1, have - 1, &count, &line)) {
      case Line::kNeedMore:
        return Parse::kNeedMore;
      case Line::kTooLong:
        error_ = "Protocol error: too big mbulk count string";
        return Parse::kBroken;
      case Line::kInvalid:
        error_ = "Protocol error: invalid multibulk length";
        return Parse::kBroken;
      case Line::kOk:
        break;
    }
    if (count > kRespMaxArguments) {
      error_ = "Protocol error: invalid multibulk length";
      return Parse::kBroken;
    }
    scanned_ = 1 + line;
    if (count <= 0) return Parse::kEmpty;
    arguments_ = count;
    // Reserved for a few: a count is a claim, the bytes are the proof.
    spans_.reserve(static_cast<size_t>(std::min<int64_t>(count, 64)));
  }
  while (static_cast<int64_t>(spans_.size()) < arguments_) {
    const char* p = b + scanned_;
    const size_t avail = have - scanned_;
    if (avail == 0) return Parse::kNeedMore;
    if (p[0] != '$') {
      error_ = std::string("Protocol error: expected '$', got '") + p[0] + "'";
      return Parse::kBroken;
    }
    int64_t length = 0;
    size_t line = 0;
    switch (ReadCount(p + 1, avail - 1, &length, &line)) {
      case Line::kNeedMore:
        return Parse::kNeedMore;
      case Line::kTooLong:
        error_ = "Protocol error: too big bulk count string";
        return Parse::kBroken;
      case Line::kInvalid:
        error_ = "Protocol error: invalid bulk length";
        return Parse::kBroken;
      case Line::kOk:
        break;
    }
    if (length < 0) {
      error_ = "Protocol error: invalid bulk length";
      return Parse::kBroken;
    }
    const size_t whole = 1 + line + static_cast<size_t>(length) + 2;
    if (static_cast<uint64_t>(length) > max_command_bytes_ ||
        scanned_ + whole > max_command_bytes_) {
      error_ = "Protocol error: command of more than " + std::to_string(max_command_bytes_) +
               " bytes (the server's max_frame_bytes)";
      return Parse::kBroken;
    }
    if (avail < whole) {
      bulk_need_ = whole - avail;
      return Parse::kNeedMore;
    }
    bulk_need_ = 0;
    if (p[whole - 2] != '\r' || p[whole - 1] != '\n') {
      error_ = "Protocol error: bulk string not followed by CRLF";
      return Parse::kBroken;
    }
    spans_.emplace_back(scanned_ + 1 + line, static_cast<size_t>(length));
    scanned_ += whole;
  }
  return Parse::kWhole;
}

bool RespReader::SplitInline(size_t len, std::vector<std::string_view>* args, std::string* error) {
  char* p = buf_.data() + start_;
  char* const end = p + len;
  while (true) {
    while (p < end && IsSpace(*p)) ++p;
    if (p == end) return true;
    char* const begin = p;  // the argument is rewritten in place: never longer than its source
    char* out = p;
    // Bare bytes; then, as in Redis's sdssplitargs, a quote opens a quoted
    // part anywhere in the word (a"b c" is `ab c`).
    while (p < end && !IsSpace(*p) && *p != '"' && *p != '\'') *out++ = *p++;
    if (p < end && *p == '"') {
      ++p;
      while (true) {
        if (p == end) {
          *error = "Protocol error: unbalanced quotes in request";
          return false;
        }
        if (*p == '"') {
          ++p;
          break;
        }
        if (*p == '\\' && p + 1 < end) {
          ++p;
          int hi = 0;
          int lo = 0;
          if (*p == 'x' && p + 2 < end && (hi = HexValue(p[1])) >= 0 &&
              (lo = HexValue(p[2])) >= 0) {
            *out++ = static_cast<char>(hi * 16 + lo);
            p += 3;
            continue;
          }
          switch (*p) {
            case 'n':
              *out++ = '\n';
              break;
            case 'r':
              *out++ = '\r';
              break;
            case 't':
              *out++ = '\t';
              break;
            case 'b':
              *out++ = '\b';
              break;
            case 'a':
              *out++ = '\a';
              break;
            default:
              *out++ = *p;
          }
          ++p;
          continue;
        }
        *out++ = *p++;
      }
    } else if (p < end && *p == '\'') {
      ++p;
      while (true) {
        if (p == end) {
          *error = "Protocol error: unbalanced quotes in request";
          return false;
        }
        if (*p == '\'') {
          ++p;
          break;
        }
        if (*p == '\\' && p + 1 < end && p[1] == '\'') ++p;
        *out++ = *p++;
      }
    }
    // A closing quote must end the word.
    if (p < end && !IsSpace(*p)) {
      *error = "Protocol error: unbalanced quotes in request";
      return false;
    }
    args->emplace_back(begin, static_cast<size_t>(out - begin));
  }
}

RespReader::Next RespReader::Take(std::vector<std::string_view>* args, std::string* error) {
  args->clear();
  while (true) {
    switch (Advance()) {
      case Parse::kNeedMore:
        return Next::kNeedMore;
      case Parse::kBroken:
        *error = error_;
        return Next::kBroken;
      case Parse::kEmpty:
        break;
      case Parse::kWhole:
        if (arguments_ < 0) {
          if (!SplitInline(scanned_, args, &error_)) {
            args->clear();
            *error = error_;
            return Next::kBroken;
          }
        } else {
          args->reserve(spans_.size());
          for (const auto& [offset, length] : spans_) {
            args->emplace_back(buf_.data() + start_ + offset, length);
          }
        }
        break;
    }
    start_ += scanned_;
    taken_ += scanned_;
    ResetParse();
    if (!args->empty()) return Next::kCommand;
  }
}

// ---- RespWriter ----

void RespWriter::Header(char type, uint64_t n) {
  char buf[24];
  buf[0] = type;
  auto [end, ec] = std::to_chars(buf + 1, buf + sizeof buf - 2, n);
  *end++ = '\r';
  *end++ = '\n';
  out_->append(buf, static_cast<size_t>(end - buf));
}

void RespWriter::Simple(std::string_view s) {
  out_->push_back('+');
  const size_t at = out_->size();
  out_->append(s);
  std::replace_if(
      out_->begin() + static_cast<ptrdiff_t>(at), out_->end(),
      [](char c) { return c == '\r' || c == '\n'; }, ' ');
  out_->append("\r\n");
}

void RespWriter::Error(std::string_view prefix, std::string_view message) {
  out_->push_back('-');
  const size_t at = out_->size();
  out_->append(prefix);
  if (!message.empty()) {
    out_->push_back(' ');
    out_->append(message);
  }
  std::replace_if(
      out_->begin() + static_cast<ptrdiff_t>(at), out_->end(),
      [](char c) { return c == '\r' || c == '\n'; }, ' ');
  out_->append("\r\n");
}

void RespWriter::Integer(int64_t v) {
  char buf[24];
  buf[0] = ':';
  auto [end, ec] = std::to_chars(buf + 1, buf + sizeof buf - 2, v);
  *end++ = '\r';
  *end++ = '\n';
  out_->append(buf, static_cast<size_t>(end - buf));
}

void RespWriter::Bulk(std::string_view s) {
  Header('$', s.size());
  out_->append(s);
  out_->append("\r\n");
}

void RespWriter::BulkNumber(uint64_t v) {
  // "$<len>\r\n<digits>\r\n" in one append: the hot path of every reply
  // listing segment IDs.
  char digits[20];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
  const auto n = static_cast<size_t>(end - digits);
  char buf[32];
  size_t at = 0;
  buf[at++] = '$';
  if (n >= 10) buf[at++] = static_cast<char>('0' + n / 10);  // n is 1 to 20
  buf[at++] = static_cast<char>('0' + n % 10);
  buf[at++] = '\r';
  buf[at++] = '\n';
  std::memcpy(buf + at, digits, n);
  at += n;
  buf[at++] = '\r';
  buf[at++] = '\n';
  out_->append(buf, at);
}

namespace {

// Appends to a string through a stack buffer, one append per 8 KiB.
class Chunked {
 public:
  explicit Chunked(std::string* out) : out_(out) {}
  ~Chunked() { Flush(); }
  // Room for `n` (at most 2 KiB) more bytes.
  char* Room(size_t n) {
    if (at_ + n > sizeof buf_) Flush();
    return buf_ + at_;
  }
  void Used(size_t n) { at_ += n; }
  void Flush() {
    out_->append(buf_, at_);
    at_ = 0;
  }

 private:
  std::string* out_;
  size_t at_ = 0;
  char buf_[8192];
};

}  // namespace

namespace {

constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

template <typename U>
unsigned DecimalLength(U v) {
  unsigned n = 1;
  for (;;) {
    if (v < 10) return n;
    if (v < 100) return n + 1;
    if (v < 1000) return n + 2;
    if (v < 10000) return n + 3;
    v /= 10000;
    n += 4;
  }
}

// Writes v's `len` (DecimalLength) digits at p, two at a time from the last:
// no scratch buffer and no copy of a length known only at run time.
template <typename U>
char* PutDecimal(char* p, U v, unsigned len) {
  char* q = p + len;
  while (v >= 100) {
    const auto r = static_cast<unsigned>(v % 100);
    v /= 100;
    q -= 2;
    q[0] = kDigitPairs[2 * r];
    q[1] = kDigitPairs[2 * r + 1];
  }
  if (v >= 10) {
    q[-2] = kDigitPairs[2 * v];
    q[-1] = kDigitPairs[2 * v + 1];
  } else {
    q[-1] = static_cast<char>('0' + v);
  }
  return p + len;
}

}  // namespace

void RespWriter::BulkNumbers(std::span<const uint64_t> values, std::string_view each) {
  if (each.size() > 1024) {  // larger than the buffer is made for: one at a time
    for (uint64_t v : values) {
      BulkNumber(v);
      out_->append(each);
    }
    return;
  }
  Chunked c(out_);
  const size_t extra = each.size();
  for (uint64_t v : values) {
    char* p = c.Room(32 + extra);
    const unsigned n = DecimalLength(v);  // 1 to 20
    char* q = p;
    *q++ = '$';
    if (n >= 10) *q++ = static_cast<char>('0' + n / 10);
    *q++ = static_cast<char>('0' + n % 10);
    *q++ = '\r';
    *q++ = '\n';
    q = PutDecimal(q, v, n);
    *q++ = '\r';
    *q++ = '\n';
    if (extra > 0) {
      std::memcpy(q, each.data(), extra);
      q += extra;
    }
    c.Used(static_cast<size_t>(q - p));
  }
}

void RespWriter::Integers(std::span<const uint32_t> values) {
  Chunked c(out_);
  for (uint32_t v : values) {
    char* p = c.Room(16);
    char* q = p;
    *q++ = ':';
    q = PutDecimal(q, v, DecimalLength(v));
    *q++ = '\r';
    *q++ = '\n';
    c.Used(static_cast<size_t>(q - p));
  }
}

void RespWriter::Null() { out_->append(resp3_ ? "_\r\n" : "$-1\r\n"); }

void RespWriter::NullArray() { out_->append(resp3_ ? "_\r\n" : "*-1\r\n"); }

void RespWriter::Array(size_t n) { Header('*', n); }

void RespWriter::Map(size_t n) {
  if (resp3_) {
    Header('%', n);
  } else {
    Header('*', 2 * uint64_t{n});
  }
}

void RespWriter::Set(size_t n) { Header(resp3_ ? '~' : '*', n); }

void RespWriter::Boolean(bool b) {
  if (resp3_) {
    out_->append(b ? "#t\r\n" : "#f\r\n");
  } else {
    Integer(b ? 1 : 0);
  }
}

void RespWriter::Double(double d) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  const std::string_view text(buf, static_cast<size_t>(end - buf));
  if (!resp3_) return Bulk(text);
  out_->push_back(',');
  out_->append(text);
  out_->append("\r\n");
}

void RespWriter::Verbatim(std::string_view text) {
  if (!resp3_) return Bulk(text);
  Header('=', text.size() + 4);
  out_->append("txt:");
  out_->append(text);
  out_->append("\r\n");
}

}  // namespace segstore::proto
