// The process's C heap (glibc): how segstored tunes it, its figures, and the
// periodic trim that gives freed memory back to the kernel. Process-wide by
// nature; HeapTrimmer is driven from segstored's main thread only.
#pragma once

#include <chrono>
#include <cstdint>

namespace segstore::server {

// Raises glibc's mmap and trim thresholds (heap.cc says why, with figures).
// Call once, before any thread starts.
void TuneHeap();

// What the heap holds now (mallinfo2) and the resident set (/proc/self/statm).
struct HeapFigures {
  uint64_t in_use_bytes = 0;    // handed out and not freed
  uint64_t free_bytes = 0;      // freed and kept by the allocator, resident or not
  uint64_t resident_bytes = 0;  // the whole process
};
HeapFigures ReadHeapFigures();

// Every trim of the process so far (any HeapTrimmer, and TrimHeap).
struct HeapTrimCounts {
  uint64_t trims = 0;
  uint64_t released_bytes = 0;  // fall of the resident set across the trims
};
HeapTrimCounts ReadHeapTrimCounts();

// malloc_trim(0): free pages of every arena go back to the kernel. Returns
// how far the resident set fell (0 if it did not).
uint64_t TrimHeap();

// With the thresholds raised, memory freed after a burst (a load's request
// frames, a batch of large answers) stays resident for good. Every
// `interval`, if the resident memory outside the heap's allocations grew by
// at least `min_growth` since the last trim, this trims (where the resident
// set cannot be read, growth of the heap's free bytes decides). A trim walks each
// arena's free chunks under its lock and advises the kernel of whole free
// pages: cheap once in a while, and the pages fault back in only if reused.
class HeapTrimmer {
 public:
  // interval 0: never trims.
  explicit HeapTrimmer(std::chrono::milliseconds interval, uint64_t min_growth = 1u << 20);

  // Call as often as convenient (segstored: every tick of its main loop).
  // Returns whether it trimmed.
  bool Tick(std::chrono::steady_clock::time_point now);

 private:
  // Resident bytes not accounted for by allocations in use (negative when
  // allocations are not all touched yet); the heap's free bytes when the
  // resident set is unknown.
  static int64_t Slack(const HeapFigures& f);

  const std::chrono::milliseconds interval_;
  const uint64_t min_growth_;
  std::chrono::steady_clock::time_point next_{};
  bool started_ = false;
  int64_t slack_after_trim_ = 0;
};

}  // namespace segstore::server
