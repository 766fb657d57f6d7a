// Helpers shared by the libFuzzer targets of tests/fuzz: a check that
// aborts with the failed condition (libFuzzer reports that as a crash and
// saves the input), and a view of the input as characters. Header-only; each
// target is one binary, one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "segstore/status.h"

// Aborts with `cond` and where it failed. Unlike assert() it is never
// compiled out.
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace segstore::fuzz {

inline std::string_view AsChars(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// A wire decoder's refusal: one of the codes wire.h promises, with a message.
inline bool IsCleanRefusal(const Status& s) {
  return (s.code() == Status::Code::kInvalidArgument || s.code() == Status::Code::kLimitExceeded) &&
         !s.message().empty();
}

}  // namespace segstore::fuzz
