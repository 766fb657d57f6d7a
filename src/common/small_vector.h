// SmallVector: a vector of trivially copyable T whose first N elements live
// inline, so the common small case allocates nothing. Only what the engine
// needs: push_back, clear, size, indexing, iteration.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

namespace segstore {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  void push_back(const T& v) {
    if (size_ < N) {
      inline_[size_] = v;
    } else {
      if (size_ == N) heap_.assign(inline_.begin(), inline_.end());
      heap_.push_back(v);
    }
    ++size_;
  }
  void clear() {
    size_ = 0;
    heap_.clear();
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }

 private:
  T* data() { return size_ <= N ? inline_.data() : heap_.data(); }
  const T* data() const { return size_ <= N ? inline_.data() : heap_.data(); }

  std::array<T, N> inline_{};
  std::vector<T> heap_;  // holds all elements once there are more than N
  size_t size_ = 0;
};

}  // namespace segstore
