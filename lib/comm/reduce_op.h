// Reduction operators of the communicators and the (dtype, op) pairs every backend supports.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace fpg::comm {

// Semantics, on every backend that claims them (the threads backend in comm/host_reduce.h):
//  sum: F32 summed in fp32; BF16 decoded to fp32, summed in fp32, rounded once to bf16 at the end.
//  max: NaN propagates (any NaN contribution gives NaN) and +0 counts as larger than -0, so the
//       result does not depend on the order of contributions except for which NaN's bits are kept.
//       This is what torch.amax does, so a sharded amax equals the full-tensor amax. NCCL's own
//       ncclMax (fmaxf) drops NaNs: an NCCL backend must not map max straight onto it.
enum class ReduceOp : uint8_t { sum, max };

inline std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }

// The reductions the Communicator interface guarantees: F32 and BF16, sum and max.
inline bool reduction_supported(DType dt, ReduceOp) { return dt == DType::F32 || dt == DType::BF16; }

// Bytes of one element of a reducible dtype.
inline size_t reduction_elem_bytes(DType dt) { return dt == DType::F32 ? 4 : 2; }

}  // namespace fpg::comm
