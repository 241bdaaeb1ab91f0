// Tensor dimensions (a chunk's offsets or sizes) held inline up to four, on the heap beyond.
//
// A checkpoint index holds two per chunk and one per storage entry, a million of each at scale: a
// heap allocation apiece (and its free) was a large part of decoding a DCP .metadata. Reads like a
// std::vector<uint64_t> (size, indexing, iteration, comparison with either) and converts to one
// where a function takes a vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace fpg {

class DimVector {
 public:
  static constexpr size_t kInline = 4;
  using value_type = uint64_t;
  using iterator = uint64_t*;
  using const_iterator = const uint64_t*;

  DimVector() = default;
  DimVector(std::initializer_list<uint64_t> v) { assign(v.begin(), v.end()); }
  DimVector(const std::vector<uint64_t>& v) { assign(v.data(), v.data() + v.size()); }  // NOLINT: implicit
  explicit DimVector(size_t n, uint64_t value = 0) { resize(n, value); }
  DimVector(const DimVector& o) { assign(o.begin(), o.end()); }
  DimVector(DimVector&& o) noexcept { take(o); }
  DimVector& operator=(const DimVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  DimVector& operator=(DimVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  DimVector& operator=(const std::vector<uint64_t>& v) {
    assign(v.data(), v.data() + v.size());
    return *this;
  }
  ~DimVector() { release(); }

  operator std::vector<uint64_t>() const { return vec(); }  // NOLINT: implicit, as a vector is passed
  std::vector<uint64_t> vec() const { return std::vector<uint64_t>(begin(), end()); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint64_t* data() { return on_heap() ? heap_ : inline_; }
  const uint64_t* data() const { return on_heap() ? heap_ : inline_; }
  uint64_t& operator[](size_t i) { return data()[i]; }
  uint64_t operator[](size_t i) const { return data()[i]; }
  uint64_t* begin() { return data(); }
  uint64_t* end() { return data() + size_; }
  const uint64_t* begin() const { return data(); }
  const uint64_t* end() const { return data() + size_; }
  uint64_t front() const { return data()[0]; }
  uint64_t back() const { return data()[size_ - 1]; }
  uint64_t& back() { return data()[size_ - 1]; }

  void assign(const uint64_t* first, const uint64_t* last) {
    const auto n = static_cast<size_t>(last - first);
    if (n > capacity_) {
      uint64_t* fresh = new uint64_t[n];
      std::copy(first, last, fresh);
      release();
      heap_ = fresh;
      capacity_ = static_cast<uint32_t>(n);
    } else {
      std::copy(first, last, data());
    }
    size_ = static_cast<uint32_t>(n);
  }
  void resize(size_t n, uint64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(uint64_t v) {
    if (size_ == capacity_) reserve(size_t{capacity_} * 2);
    data()[size_++] = v;
  }
  void clear() { size_ = 0; }

  friend bool operator==(const DimVector& a, const DimVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const DimVector& a, const DimVector& b) { return !(a == b); }
  friend bool operator<(const DimVector& a, const DimVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const DimVector& a, const std::vector<uint64_t>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const std::vector<uint64_t>& a, const DimVector& b) { return b == a; }
  friend bool operator!=(const DimVector& a, const std::vector<uint64_t>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<uint64_t>& a, const DimVector& b) { return !(b == a); }

 private:
  bool on_heap() const { return capacity_ > kInline; }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    uint64_t* fresh = new uint64_t[n];
    std::copy(begin(), end(), fresh);
    release();
    heap_ = fresh;
    capacity_ = static_cast<uint32_t>(n);
  }
  void release() {
    if (on_heap()) delete[] heap_;
    capacity_ = kInline;
  }
  // Leaves `o` empty and inline.
  void take(DimVector& o) {
    if (o.on_heap()) {
      heap_ = o.heap_;
    } else {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
    }
    size_ = o.size_;
    capacity_ = o.capacity_;
    o.size_ = 0;
    o.capacity_ = kInline;
  }

  union {
    uint64_t inline_[kInline];
    uint64_t* heap_;
  };
  uint32_t size_ = 0;
  uint32_t capacity_ = kInline;
};

}  // namespace fpg
