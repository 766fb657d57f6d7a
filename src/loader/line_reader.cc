#include "loader/line_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace segstore::loader {

namespace {

constexpr size_t kReadSize = size_t{1} << 20;        // bytes asked of each read()
constexpr size_t kMaxLine = size_t{64} << 20;        // longest line, without its '\n'
constexpr size_t kMaxBuffer = kMaxLine + kReadSize;  // enough to see a line is too long

std::string ErrnoText(int err) { return std::strerror(err); }

class FileLineReader final : public LineReader {
 public:
  FileLineReader(std::string path, int fd, bool owns_fd, uint64_t total)
      : path_(std::move(path)),
        name_(path_ == "-" ? "standard input" : path_),
        fd_(fd),
        owns_fd_(owns_fd),
        total_bytes_(total),
        buf_(std::make_unique_for_overwrite<char[]>(kReadSize)),
        cap_(kReadSize) {}

  ~FileLineReader() override {
    if (compressed_) inflateEnd(&zs_);
    if (owns_fd_) ::close(fd_);
  }

  // Reads the first bytes and decides plain or gzip.
  Status Start() {
    // Two bytes tell gzip from plain; a pipe may hand them over one at a time.
    while (end_ < 2) {
      const ssize_t n = ReadFd(buf_.get() + end_, cap_ - end_);
      if (n < 0) return status_;
      if (n == 0) {
        eof_ = true;
        break;
      }
      end_ += static_cast<size_t>(n);
    }
    if (end_ < 2 || static_cast<unsigned char>(buf_[0]) != 0x1f ||
        static_cast<unsigned char>(buf_[1]) != 0x8b) {
      return Status::OK();  // plain: what was read is the start of the text
    }
    // gzip: what was read is compressed input.
    in_ = std::make_unique_for_overwrite<char[]>(kReadSize);
    std::memcpy(in_.get(), buf_.get(), end_);
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) {
      return Status::Internal(fmt::format("{}: zlib inflateInit2 failed", name_));
    }
    compressed_ = true;
    zs_.next_in = reinterpret_cast<Bytef*>(in_.get());
    zs_.avail_in = static_cast<uInt>(end_);
    in_member_ = true;
    input_eof_ = eof_;
    eof_ = false;
    end_ = 0;
    return Status::OK();
  }

  bool Next(std::string_view* line) override {
    for (;;) {
      if (scan_ < end_) {
        const void* nl = std::memchr(buf_.get() + scan_, '\n', end_ - scan_);
        if (nl != nullptr) {
          const size_t at = static_cast<size_t>(static_cast<const char*>(nl) - buf_.get());
          if (at - begin_ > kMaxLine) return TooLong();
          *line = std::string_view(buf_.get() + begin_, at - begin_);
          begin_ = scan_ = at + 1;
          ++line_number_;
          return true;
        }
        scan_ = end_;
      }
      if (!status_.ok()) return false;
      if (end_ - begin_ > kMaxLine) return TooLong();
      if (eof_) {
        if (begin_ == end_) return false;
        *line = std::string_view(buf_.get() + begin_, end_ - begin_);  // no final '\n'
        begin_ = scan_ = end_;
        ++line_number_;
        return true;
      }
      MakeRoom();
      const ssize_t n = compressed_ ? Inflate(buf_.get() + end_, cap_ - end_)
                                    : ReadFd(buf_.get() + end_, cap_ - end_);
      if (n < 0) return false;
      if (n == 0) eof_ = true;
      end_ += static_cast<size_t>(n);
    }
  }

  Status status() const override { return status_; }
  uint64_t line_number() const override { return line_number_; }
  uint64_t bytes_read() const override {
    return compressed_ ? bytes_from_fd_ - zs_.avail_in : bytes_from_fd_;
  }
  uint64_t total_bytes() const override { return total_bytes_; }
  bool compressed() const override { return compressed_; }
  const std::string& path() const override { return path_; }

 private:
  bool TooLong() {
    status_ = Status::LimitExceeded(
        fmt::format("{}: line {} is longer than {} MiB", name_, line_number_ + 1, kMaxLine >> 20));
    return false;
  }

  // Moves the unfinished line to the front, and grows the buffer when that
  // line fills it.
  void MakeRoom() {
    const size_t pending = end_ - begin_;
    if (begin_ > 0) {
      std::memmove(buf_.get(), buf_.get() + begin_, pending);
      scan_ -= begin_;
      begin_ = 0;
      end_ = pending;
    }
    if (cap_ - end_ < kReadSize / 2 && cap_ < kMaxBuffer) {
      const size_t cap = std::min(cap_ * 2, kMaxBuffer);
      auto grown = std::make_unique_for_overwrite<char[]>(cap);
      std::memcpy(grown.get(), buf_.get(), end_);
      buf_ = std::move(grown);
      cap_ = cap;
    }
  }

  // read(2) into dst: bytes read, 0 at the end, -1 on an error (in status_).
  ssize_t ReadFd(char* dst, size_t n) {
    for (;;) {
      const ssize_t r = ::read(fd_, dst, n);
      if (r >= 0) {
        bytes_from_fd_ += static_cast<uint64_t>(r);
        return r;
      }
      if (errno == EINTR) continue;
      status_ = Status::IOError(fmt::format("{}: read: {}", name_, ErrnoText(errno)));
      return -1;
    }
  }

  // Decompresses into dst: bytes produced (at least one unless at the end), 0
  // at the end of the last gzip member, -1 on an error (in status_).
  ssize_t Inflate(char* dst, size_t n) {
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, std::numeric_limits<uInt>::max()));
    const uInt asked = zs_.avail_out;
    while (zs_.avail_out > 0) {
      if (zs_.avail_in == 0) {
        if (zs_.avail_out < asked) break;  // hand over what there is before reading more
        if (!input_eof_) {
          const ssize_t r = ReadFd(in_.get(), kReadSize);
          if (r < 0) return -1;
          if (r == 0) input_eof_ = true;
          zs_.next_in = reinterpret_cast<Bytef*>(in_.get());
          zs_.avail_in = static_cast<uInt>(r);
        }
        if (zs_.avail_in == 0) {
          if (in_member_) {
            status_ = Status::Corruption(
                fmt::format("{}: truncated gzip stream (the file ends inside a member)", name_));
            return -1;
          }
          break;  // the end, between members
        }
      }
      if (!in_member_) {  // more bytes after a member: the next member
        inflateReset(&zs_);
        in_member_ = true;
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        in_member_ = false;
      } else if (rc == Z_BUF_ERROR) {
        // No progress possible: more input is needed (avail_in is 0 now).
      } else if (rc != Z_OK) {
        status_ = Status::Corruption(fmt::format(
            "{}: corrupt gzip data: {}", name_,
            zs_.msg != nullptr ? zs_.msg : (rc == Z_MEM_ERROR ? "out of memory" : "bad stream")));
        return -1;
      }
    }
    return static_cast<ssize_t>(asked - zs_.avail_out);
  }

  const std::string path_;
  const std::string name_;  // for messages
  const int fd_;
  const bool owns_fd_;
  const uint64_t total_bytes_;

  Status status_;
  uint64_t line_number_ = 0;
  uint64_t bytes_from_fd_ = 0;

  // Text: [begin_, end_) is not handed out yet; no '\n' in [begin_, scan_).
  std::unique_ptr<char[]> buf_;
  size_t cap_;
  size_t begin_ = 0;
  size_t scan_ = 0;
  size_t end_ = 0;
  bool eof_ = false;  // of the text

  // gzip only.
  bool compressed_ = false;
  std::unique_ptr<char[]> in_;
  z_stream zs_{};
  bool in_member_ = false;
  bool input_eof_ = false;
};

}  // namespace

Status LineReader::Open(const std::string& path, std::unique_ptr<LineReader>* out) {
  int fd = 0;
  bool owns = false;
  if (path != "-") {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) return Status::NotFound(fmt::format("{}: no such file", path));
      return Status::IOError(fmt::format("{}: open: {}", path, ErrnoText(err)));
    }
    owns = true;
  }
  struct stat st;
  uint64_t total = 0;
  if (::fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      if (owns) ::close(fd);
      return Status::IOError(fmt::format("{}: is a directory", path));
    }
    if (S_ISREG(st.st_mode)) {
      total = static_cast<uint64_t>(st.st_size);
      const off_t at = ::lseek(fd, 0, SEEK_CUR);  // stdin may be a file read partway
      if (at > 0) total = at < st.st_size ? total - static_cast<uint64_t>(at) : 0;
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
  }
  auto reader = std::make_unique<FileLineReader>(path, fd, owns, total);
  if (Status s = reader->Start(); !s.ok()) return s;
  *out = std::move(reader);
  return Status::OK();
}

}  // namespace segstore::loader
