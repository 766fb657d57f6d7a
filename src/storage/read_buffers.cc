#include "storage/read_buffers.h"

#include <cstdlib>
#include <new>
#include <vector>

namespace segstore::storage {
namespace {

constexpr size_t kAlignment = 4096;
constexpr size_t kCachePerThread = 256;  // 2 MiB of 8 KiB buffers at most

struct Cache {
  std::vector<void*> free;
  ~Cache() {
    for (void* p : free) std::free(p);
  }
};
thread_local Cache cache;

}  // namespace

uint8_t* AcquireReadBuffer(size_t size) {
  if (size <= kPooledReadSize && !cache.free.empty()) {
    void* p = cache.free.back();
    cache.free.pop_back();
    return static_cast<uint8_t*>(p);
  }
  size_t rounded =
      size <= kPooledReadSize ? kPooledReadSize : (size + kAlignment - 1) & ~(kAlignment - 1);
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<uint8_t*>(p);
}

void ReleaseReadBuffer(void* p, size_t size) {
  if (p == nullptr) return;
  if (size <= kPooledReadSize && cache.free.size() < kCachePerThread) {
    cache.free.push_back(p);
    return;
  }
  std::free(p);
}

}  // namespace segstore::storage
