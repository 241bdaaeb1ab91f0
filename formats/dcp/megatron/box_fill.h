// A box of a whole tensor (one tensor-parallel piece of a parameter) streamed out of a ckpt::ParamSource
// into a DCP writer's blocks, row-major within the box: memory one block, whatever the piece's size.
// Runs of the box that lie close together in the tensor (the columns of a row-parallel piece) are read
// as one range enclosing several and copied out, so that a narrow piece costs few reads.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/param_source.h"
#include "formats/dcp/byte_sink.h"
#include "formats/dcp/metadata/box_coverage.h"

namespace fpg::dcp {

// The fill of box `box` of tensor `tensor` of `src` (shape `shape`, elements of `element_bytes`).
// `read_bytes` (optional) counts the bytes read from `src`, enclosing ranges included.
FillBytes box_fill(const ckpt::ParamSource& src, size_t tensor, const std::vector<uint64_t>& shape, const Box& box,
                   uint64_t element_bytes, uint64_t* read_bytes = nullptr);

}  // namespace fpg::dcp
