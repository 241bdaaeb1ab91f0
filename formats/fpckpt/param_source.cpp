#include "formats/fpckpt/param_source.h"

#include "ckpt/key_names.h"
#include "core/error.h"

namespace fpg::fpckpt {

CheckpointParams::CheckpointParams(const CheckpointReader& reader, ThreadPool* pool)
    : reader_(reader), pool_(pool), map_(ckpt::ParamStateMap::from_index(reader.index(), reader.dir())) {
  const auto& params = map_.spec().params;
  for (uint32_t p = 0; p < params.size(); ++p) {
    const long w = reader_.find_key(ckpt::weight_key(params[p].name));
    if (w >= 0) {
      const ckpt::Key& k = reader_.index().keys[static_cast<size_t>(w)];
      tensors_.push_back({params[p].name, params[p].name, "weight", k.dtype, k.shape});
      sources_.push_back({w, p, ""});
    }
    for (const std::string& s : map_.states_of(p)) {
      tensors_.push_back({params[p].name + "." + s, params[p].name, s, DType::F32, params[p].shape});
      sources_.push_back({-1, p, s});
    }
  }
}

std::string CheckpointParams::describe() const { return "fpgather checkpoint " + reader_.dir(); }

void CheckpointParams::read(size_t t, uint64_t lo, uint64_t hi, void* out) const {
  const Source& s = sources_.at(t);
  if (s.weight_key >= 0) {
    reader_.read(static_cast<uint32_t>(s.weight_key), lo, hi, out, pool_);
    return;
  }
  auto* dst = static_cast<uint8_t*>(out);
  for (const ckpt::StatePiece& piece : map_.pieces(s.param, s.state, lo, hi))
    reader_.read(piece.key, piece.key_lo, piece.key_lo + piece.numel, dst + (piece.param_lo - lo) * 4, pool_);
}

void CheckpointParams::will_read(size_t t, uint64_t lo, uint64_t hi) const {
  const Source& s = sources_.at(t);
  if (s.weight_key >= 0) {
    reader_.prefetch(static_cast<uint32_t>(s.weight_key), lo, hi);
    return;
  }
  for (const ckpt::StatePiece& piece : map_.pieces(s.param, s.state, lo, hi))
    reader_.prefetch(piece.key, piece.key_lo, piece.key_lo + piece.numel);
}

}  // namespace fpg::fpckpt
