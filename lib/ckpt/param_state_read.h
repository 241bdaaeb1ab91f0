// Reading a parameter's optimizer state (or fp32 master) out of a training checkpoint by parameter
// coordinates, through the layout-independent map of ckpt/param_state_map.h.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/param_state_map.h"
#include "core/thread_pool.h"
#include "ckpt/state_store.h"

namespace fpg::ckpt {

// Elements [lo, hi) of state `state` of spec param `param` into out (hi - lo floats). The chunks
// are read and checked in `pool` (null: the global pool). FormatError as StateReader::read.
void read_param_state(const ckpt::StateReader& reader, const ckpt::ParamStateMap& map, uint32_t param,
                      const std::string& state, uint64_t lo, uint64_t hi, float* out, ThreadPool* pool = nullptr);

}  // namespace fpg::ckpt
