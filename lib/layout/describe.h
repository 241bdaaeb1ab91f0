// Human-readable tables of a layout (`fpgather train --print-layout`): buffers, buckets with their
// ranges, numel_unpadded and padded sizes, params, padding, and every rank's shard and fragments.
#pragma once

#include <string>

#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"

namespace fpg::layout {

std::string describe(const BucketedLayout& layout);
// The matrix owners, per-rank costs and gather sizes, then describe(layout.scalar).
std::string describe(const LayerWiseLayout& layout);

}  // namespace fpg::layout
