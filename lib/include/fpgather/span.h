// A view of contiguous elements (C++17 has no std::span): a pointer and a count, made implicitly from
// a std::vector, std::array or any container with data() and size().
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace fpgather {

template <class T>
class Span {
 public:
  Span() = default;
  Span(T* data, std::size_t size) : data_(data), size_(size) {}
  template <class Container,
            class = std::enable_if_t<std::is_convertible_v<decltype(std::declval<Container&>().data()), T*>>>
  Span(Container& c) : data_(c.data()), size_(c.size()) {}

  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }
  T& operator[](std::size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace fpgather
