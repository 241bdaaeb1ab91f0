// A ckpt::ParamSource whose tensors are each a sequence of element ranges of another source's tensors
// (or of zeros), read straight from there: what a model looks like under another model's names and
// layout (gpt_hf_table.h: a Megatron model as a Hugging Face one and back), without holding more than
// the range being read. A range of another dtype is converted on the way (ckpt::convert_elements: BF16,
// F16, F32 and F64 sources into BF16 or F32, widening exactly, narrowing to the nearest even).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/param_source.h"

namespace fpg::app::convert {

class GatheredView : public ckpt::ParamSource {
 public:
  // Elements [lo, lo + n) of source tensor `src`; zeros where `src` is absent.
  struct Piece {
    std::optional<size_t> src;
    uint64_t lo = 0, n = 0;
  };

  // `src` must outlive the view.
  explicit GatheredView(const ckpt::ParamSource& src) : src_(&src) {}

  std::string describe() const override { return src_->describe(); }
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override;
  bool concurrent_reads() const override { return src_->concurrent_reads(); }
  void plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const override;
  void finish_reads() const override { src_->finish_reads(); }

 protected:
  // Adds tensor `t` (name, shape, dtype; role "weight") made of `pieces`, which must hold exactly its
  // elements. InternalError otherwise, or for a conversion the view does not make.
  void add(ckpt::ParamTensor t, std::vector<Piece> pieces);
  const ckpt::ParamSource& source() const { return *src_; }

 private:
  struct Mapped {
    std::vector<Piece> pieces;
    std::vector<uint64_t> starts;  // per piece: its first element in the tensor
  };
  // The pieces covering elements [lo, hi) of tensor t, each as (piece, first element of the piece
  // read, elements, where they go in [lo, hi)).
  template <class F> void for_pieces(size_t t, uint64_t lo, uint64_t hi, F&& f) const;

  const ckpt::ParamSource* src_;
  std::vector<ckpt::ParamTensor> tensors_;
  std::vector<Mapped> map_;
};

}  // namespace fpg::app::convert
