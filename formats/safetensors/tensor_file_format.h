// safetensors as the build's tensor-file format (core/tensor_file.h): Model to read, Writer to write,
// Hugging Face's index and names for a model of several files.
#pragma once

#include <memory>

#include "core/tensor_file.h"

namespace fpg::safetensors {

std::unique_ptr<TensorFileFormat> make_tensor_file_format();

}  // namespace fpg::safetensors
