// `fpgather diff A B`: value-by-value comparison in model space. Keys are matched by name and compared
// over their flat extent where both hold data, so two DP layouts of the same state compare equal;
// padding is ignored, but data in one checkpoint where the other has padding is a difference.
// Bucket-layout optimizer state (ckpt/state_view.h) is compared per param as "optimizer/<param>/<state>"
// unless both checkpoints place every param's state alike in the same bucket keys, so checkpoints of
// different state layouts, bucket sizes or distributed optimizers compare too.
// Memory: two blocks of block_elems elements plus the readers' per-thread chunk buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/value_diff.h"
#include "formats/fpckpt/reader.h"

namespace fpg::fpckpt {

using ckpt::DiffOptions;
using ckpt::DiffReport;
using ckpt::KeyDiff;
using ckpt::ValueDiff;

DiffReport diff_checkpoints(const CheckpointReader& a, const CheckpointReader& b, const DiffOptions& opts);

}  // namespace fpg::fpckpt
