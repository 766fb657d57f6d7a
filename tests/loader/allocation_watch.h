// The loader tests' allocation watch: parser_test.cc replaces operator new
// for the whole loader_test binary and counts the allocations made while a
// watch is on, so a test can show a parser allocates nothing per line.
#pragma once

#include <cstdint>
#include <functional>

namespace segstore::loader::testing {

// The allocations (operator new, any thread) made while `run` runs.
uint64_t AllocationsDuring(const std::function<void()>& run);

}  // namespace segstore::loader::testing
