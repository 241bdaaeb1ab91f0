// A ckpt::ParamSource for tests of views and writers over one: named tensors (role "weight") whose
// element i of tensor t holds t * 100000 + i + `offset`, so that every element read says where it came
// from; F32 tensors hold it exactly, BF16 ones rounded to nearest even. Counts its reads.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "catch.h"
#include "ckpt/param_source.h"
#include "core/float_codec.h"

namespace fpg::test {

class FakeParams : public ckpt::ParamSource {
 public:
  // `offset` 1 keeps every value nonzero (a zero read then means "not read").
  explicit FakeParams(uint64_t offset = 0) : offset_(offset) {}

  void add(const std::string& name, std::vector<uint64_t> shape, DType dtype = DType::F32) {
    ckpt::ParamTensor t;
    t.name = t.param = name;
    t.role = "weight";
    t.dtype = dtype;
    t.shape = std::move(shape);
    tensors_.push_back(t);
  }
  float value(size_t t, uint64_t i) const { return static_cast<float>(t * 100000 + i + offset_); }
  size_t index(const std::string& name) const {
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (tensors_[i].name == name) return i;
    FAIL("no " << name);
    return 0;
  }

  std::string describe() const override { return "fake"; }
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override {
    REQUIRE(hi <= tensors_.at(t).numel());
    auto* bytes = static_cast<uint8_t*>(out);
    for (uint64_t i = lo; i < hi; ++i) {
      const float v = value(t, i);
      if (tensors_[t].dtype == DType::BF16) {
        const uint16_t h = bf16_from_float(v);
        std::memcpy(bytes + 2 * (i - lo), &h, 2);
      } else {
        std::memcpy(bytes + 4 * (i - lo), &v, 4);
      }
    }
    ++reads;
  }
  mutable uint64_t reads = 0;

 private:
  uint64_t offset_;
  std::vector<ckpt::ParamTensor> tensors_;
};

}  // namespace fpg::test
