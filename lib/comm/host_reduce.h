// The deterministic host reduction behind the CPU backends' reduce_scatter and all_reduce.
#pragma once

#include <cstddef>

#include "comm/reduce_op.h"
#include "core/dtype.h"

namespace fpg::comm {

// Reduces elements [begin, end) of the n contributions src[0..n) (base pointers of arrays of
// `dtype`) and writes the result to the same range of every dst[0..ndst).
//
// Order: for each element, acc = x0, then acc = acc ⊕ x1, acc = acc ⊕ x2, … up to x(n−1), in rank
// order, i.e. ((x0 + x1) + x2) + … in fp32 for sum. acc starts at x0, not at 0 + x0 (which would turn
// −0 into +0), so n = 1 returns its input bit for bit. The result equals the same sum computed
// serially in rank order, on every rank, whatever thread computes it (no reassociation: this file
// must not be built with -ffast-math). BF16 sums decode to fp32, accumulate as above and round once
// with bf16_from_float. Max follows reduce_op.h (NaN propagates, the lowest rank's NaN bits are kept;
// +0 > −0) and returns one of the inputs bit for bit.
//
// A dst may alias a src only at the same range, and no other thread may touch [begin, end) of any
// src or dst meanwhile: each block is read in full before it is written.
void reduce_rank_order(DType dtype, ReduceOp op, const void* const* src, int n, size_t begin, size_t end,
                       void* const* dst, int ndst);

}  // namespace fpg::comm
