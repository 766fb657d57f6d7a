// Read buffers: the sector-aligned buffers device reads land in. Most reads
// are of one or two sectors, so buffers of up to kPooledSize come from a
// small per-thread cache instead of aligned_alloc and free (which cost more
// than the rest of a get's work in user space). A Record holding one gives it
// back when destroyed, on whatever thread that happens. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace segstore::storage {

inline constexpr size_t kPooledReadSize = 8192;

// A buffer of at least `size` bytes, aligned to 4 KiB. Never null (throws
// std::bad_alloc). Release it with ReleaseReadBuffer(p, size) with the same size.
uint8_t* AcquireReadBuffer(size_t size);
void ReleaseReadBuffer(void* p, size_t size);

}  // namespace segstore::storage
