// Progress of a long operation (convert, reshard, validate with data), reported to a caller's
// callback as the fpgather command draws its progress bar.
#pragma once

#include <cstdint>
#include <functional>

namespace fpgather {

// Called with the amount done and the total, in bytes (0 while the total is not known yet), as the
// work advances, from whichever thread advanced it, one call at a time; `done` never decreases
// within one stage, and an operation of several stages (an export to Hugging Face quantized to FP8:
// the export, then the quantization) starts again from 0 at each. An exception the callback throws
// stops the operation: what it staged is removed, nothing is committed, and the operation throws
// that exception.
using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

}  // namespace fpgather
