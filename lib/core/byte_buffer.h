// A reusable byte buffer that is never zero-filled: for a buffer that a read fills whole before
// anything reads it (a slab of an export). std::vector<uint8_t>::resize zero-fills every byte it adds,
// a pass over the memory on the thread that sizes the buffer before the read that overwrites it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace fpg {

class ByteBuffer {
 public:
  // Makes size() `n`. Within the capacity it keeps its memory (and bytes); beyond it allocates anew,
  // keeping nothing.
  ByteBuffer() = default;
  // A moved-from buffer is empty, holding no memory (a defaulted move would leave it a capacity
  // without memory).
  ByteBuffer(ByteBuffer&& o) noexcept : data_(std::move(o.data_)), size_(o.size_), capacity_(o.capacity_) {
    o.size_ = o.capacity_ = 0;
  }
  ByteBuffer& operator=(ByteBuffer&& o) noexcept {
    data_ = std::move(o.data_);
    size_ = o.size_;
    capacity_ = o.capacity_;
    o.size_ = o.capacity_ = 0;
    return *this;
  }

  void resize(size_t n) {
    if (n > capacity_) {
      data_.reset();
      data_.reset(new uint8_t[n]);
      capacity_ = n;
    }
    size_ = n;
  }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace fpg
