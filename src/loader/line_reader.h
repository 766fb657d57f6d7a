// Reads a DMP file line by line: a plain file, a gzip-compressed one
// (detected by its magic bytes 1f 8b, decompressed with zlib; concatenated
// gzip members are read through), or standard input ("-"). Lines come out as
// views into a large internal buffer, without a copy or an allocation per
// line, and without iostreams.
//
// Not thread-safe; one reader per file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "segstore/status.h"

namespace segstore::loader {

class LineReader {
 public:
  // Opens `path` ("-": standard input). NotFound / IOError naming the path.
  static Status Open(const std::string& path, std::unique_ptr<LineReader>* out);
  virtual ~LineReader() = default;

  // The next line without its '\n' (a final line without one counts), valid
  // until the next call. Returns false at the end of input, or on an error
  // (then status() says which: a truncated or corrupt gzip stream, a read
  // error, or a line longer than 64 MiB).
  virtual bool Next(std::string_view* line) = 0;
  virtual Status status() const = 0;

  // Lines returned so far (the 1-based number of the last one).
  virtual uint64_t line_number() const = 0;
  // Bytes of the file consumed so far, and its size (0 when unknown: stdin, a
  // pipe), both as stored: compressed bytes for a gzip file.
  virtual uint64_t bytes_read() const = 0;
  virtual uint64_t total_bytes() const = 0;
  virtual bool compressed() const = 0;
  virtual const std::string& path() const = 0;
};

}  // namespace segstore::loader
