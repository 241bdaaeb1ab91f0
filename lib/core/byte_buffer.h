// A reusable byte buffer that is never zero-filled: for a buffer that a read fills whole before
// anything reads it (a slab of an export). std::vector<uint8_t>::resize zero-fills every byte it adds,
// a pass over the memory on the thread that sizes the buffer before the read that overwrites it.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
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

  // A buffer of kHugeFrom bytes or more is aligned to, and asks for, 2 MiB pages where the kernel
  // gives them for madvise: its first fill faults once per 2 MiB instead of once per 4 KiB (a 64 MiB
  // slab: 32 faults, not 16,384).
  void resize(size_t n) {
    if (n > capacity_) {
      data_.reset();
      const size_t bytes = n >= kHugeFrom ? (n + kHuge - 1) / kHuge * kHuge : n;
      void* p = n >= kHugeFrom ? std::aligned_alloc(kHuge, bytes) : std::malloc(n);
      if (!p) throw std::bad_alloc();
      if (n >= kHugeFrom) madvise(p, bytes, MADV_HUGEPAGE);  // a hint: refused, the pages are 4 KiB
      data_.reset(static_cast<uint8_t*>(p));
      capacity_ = n;
    }
    size_ = n;
  }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kHuge = size_t{2} << 20, kHugeFrom = size_t{8} << 20;
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace fpg
