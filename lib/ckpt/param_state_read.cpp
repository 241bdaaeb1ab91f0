#include "ckpt/param_state_read.h"

namespace fpg::ckpt {

void read_param_state(const ckpt::StateReader& reader, const ckpt::ParamStateMap& map, uint32_t param,
                      const std::string& state, uint64_t lo, uint64_t hi, float* out, ThreadPool* pool) {
  for (const ckpt::StatePiece& p : map.pieces(param, state, lo, hi))
    reader.read(p.key, p.key_lo, p.key_lo + p.numel, out + (p.param_lo - lo), pool);
}

}  // namespace fpg::ckpt
