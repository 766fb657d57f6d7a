// AlignedBuffer: an owned, zero-initialised byte array whose start is aligned
// for O_DIRECT I/O (4 KiB). Move-only. Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace segstore {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 4096;

  AlignedBuffer() = default;
  // Allocates `size` bytes, rounded up to kAlignment. Throws std::bad_alloc on failure
  // (an out-of-memory process cannot serve anyway).
  explicit AlignedBuffer(size_t size) : AlignedBuffer(size, true) {}
  // The same without zeroing: for buffers a read is about to fill.
  static AlignedBuffer Uninitialized(size_t size) { return AlignedBuffer(size, false); }
  ~AlignedBuffer() { std::free(data_); }

  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Gives up ownership: the caller frees the bytes with std::free.
  uint8_t* release() {
    size_ = 0;
    return std::exchange(data_, nullptr);
  }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  AlignedBuffer(size_t size, bool zero) : size_((size + kAlignment - 1) & ~(kAlignment - 1)) {
    if (size_ == 0) return;
    void* p = std::aligned_alloc(kAlignment, size_);
    if (p == nullptr) throw std::bad_alloc();
    if (zero) std::memset(p, 0, size_);
    data_ = static_cast<uint8_t*>(p);
  }

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace segstore
