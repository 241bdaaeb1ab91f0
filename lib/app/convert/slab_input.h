// Reads a stored tensor slab by slab in the element type the FP8 recipes take: F32 and BF16 straight
// from the file mapping, F16 widened to fp32 (exactly). A slab whose address is not aligned to its
// element size (a hand-made file may place tensors anywhere) is copied first, so the vectorized
// loops never see a misaligned pointer.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/float_codec.h"

namespace fpg::app::convert {

class SlabInput {
 public:
  SlabInput(const uint8_t* data, DType stored) : data_(data), stored_(stored) {}

  size_t stored_bytes() const { return stored_ == DType::F32 ? 4 : 2; }

  // Elements [start, start + count) as fp32 (F32, F16) or raw bf16 bits (BF16); `scratch` holds a
  // converted or realigned copy when one is needed and must outlive the returned pointer.
  const void* values(uint64_t start, uint64_t count, std::vector<float>& scratch) const {
    const uint8_t* p = data_ + start * stored_bytes();
    if (stored_ == DType::F16) {
      scratch.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        scratch[i] = float_from_fp16(h);
      }
      return scratch.data();
    }
    if (reinterpret_cast<uintptr_t>(p) % stored_bytes() == 0) return p;
    scratch.resize((count * stored_bytes() + 3) / 4);
    std::memcpy(scratch.data(), p, count * stored_bytes());
    return scratch.data();
  }

 private:
  const uint8_t* data_;
  DType stored_;
};

}  // namespace fpg::app::convert
