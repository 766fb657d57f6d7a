// Whether this test process allocates from glibc's heap, which the heap
// figures (mallinfo2) and the trim work on. A sanitizer's allocator (GCC's
// or clang's) replaces it: the tests of those figures skip then, on purpose
// (SKIP_UNLESS_ON_GLIBC_HEAP); the plain build runs them.
#pragma once

#include <malloc.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SEGSTORE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SEGSTORE_TEST_SANITIZED 1
#endif
#endif

namespace segstore::server::testing {

inline bool OnGlibcHeap() {
#if defined(SEGSTORE_TEST_SANITIZED)
  return false;
#else
  return ::mallinfo2().arena != 0;
#endif
}

}  // namespace segstore::server::testing

// In a test body: skips the test when the process is not on glibc's heap.
#define SKIP_UNLESS_ON_GLIBC_HEAP()                                              \
  if (!::segstore::server::testing::OnGlibcHeap()) {                             \
    GTEST_SKIP() << "a sanitizer's allocator replaces glibc's heap tested here"; \
  }
