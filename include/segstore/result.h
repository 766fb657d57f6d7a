// Result<T>: a value of type T, or the Status saying why there is none.
// C++20 has no std::expected; this is the small subset we use, shaped so that
// it can later become an alias of it. Thread-compatible.
#pragma once

#include <cassert>
#include <utility>
#include <variant>

#include "segstore/status.h"

namespace segstore {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<1>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::in_place_index<0>, std::move(status)) {  // NOLINT
    assert(!std::get<0>(v_).ok() && "Result built from an OK status has no value");
  }

  bool ok() const { return v_.index() == 1; }
  // The failure; OK when a value is held.
  Status status() const { return ok() ? Status::OK() : std::get<0>(v_); }

  T& value() & { return std::get<1>(v_); }
  const T& value() const& { return std::get<1>(v_); }
  T&& value() && { return std::get<1>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace segstore

// Evaluates `expr` (a Status); returns it from the enclosing function if it failed.
#define SEGSTORE_RETURN_IF_ERROR(expr) \
  do {                                 \
    ::segstore::Status _st = (expr);   \
    if (!_st.ok()) return _st;         \
  } while (0)
