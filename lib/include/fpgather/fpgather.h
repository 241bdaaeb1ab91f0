// The fpgather C++ API: checkpoints (open, validate, inspect, diff, reshard, convert) and their
// tensors in model space (params.h), safetensors files, FP8 quantization with a recipe and optimizer
// steps. Every failure throws fpgather::Error.
// With CMake: find_package(fpgather) and target_link_libraries(app PRIVATE fpgather::fpgather).
#pragma once

#include <fpgather/checkpoint.h>
#include <fpgather/convert.h>
#include <fpgather/diff.h>
#include <fpgather/error.h>
#include <fpgather/library.h>
#include <fpgather/optimizer.h>
#include <fpgather/params.h>
#include <fpgather/progress.h>
#include <fpgather/quantize.h>
#include <fpgather/reshard.h>
#include <fpgather/safetensors.h>
#include <fpgather/span.h>
