// `fpgather diff A B` between checkpoints of any formats: their ParamSource tensors matched by name
// (NAME, NAME.master, NAME.<state>) and compared value by value. A tensor one side lacks, another
// dtype or shape is a difference; so is any value outside the tolerances.
// Memory: two blocks of block_elems elements.
#pragma once

#include "ckpt/param_source.h"
#include "ckpt/value_diff.h"

namespace fpg::ckpt {

DiffReport diff_params(const ParamSource& a, const ParamSource& b, const DiffOptions& opts);

}  // namespace fpg::ckpt
