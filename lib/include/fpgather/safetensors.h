// Safetensors files: read (a .safetensors file, a sharded model's index .json, or a directory holding
// either; headers validated in full, data memory-mapped) and written (committed atomically, tensors in
// the reference writer's order, so the bytes equal those of the safetensors package).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fpgather/span.h>

namespace fpgather {

// A tensor and its bytes, little-endian, row-major.
struct Tensor {
  std::string name;
  std::string dtype;  // as safetensors names it: F32, BF16, F16, F8_E4M3, I64, ...
  std::vector<uint64_t> shape;  // [] is a scalar
  std::vector<uint8_t> data;
};

// An F32 tensor holding `values` (as many as the shape has elements; Error(usage) otherwise).
Tensor float32_tensor(const std::string& name, const std::vector<uint64_t>& shape, Span<const float> values);

// A tensor as the header declares it.
struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t numel = 0;
  uint64_t bytes = 0;
};

class SafetensorsReader {
 public:
  // Error(format) naming the file (and tensor, and range) for anything malformed.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;

  // Every tensor: shard order, then the order of their bytes in each file.
  const std::vector<TensorInfo>& tensors() const;
  // "__metadata__" (of the first shard for a sharded model).
  const std::map<std::string, std::string>& metadata() const;

  // Error(usage) naming the model and tensor when there is none of that name.
  Tensor read(const std::string& name) const;
  // The values as fp32, from F32, F64, BF16, F16, F8_E4M3, F8_E5M2 or F8_E8M0 (Error(usage) for
  // another dtype).
  std::vector<float> read_float32(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes `tensors` and `metadata` to `path` (replacing a file there). Error(usage) for an invalid
// tensor (duplicate or reserved name, unknown dtype, data not the size dtype and shape imply),
// Error(format) when the file cannot be written.
void write_safetensors(const std::string& path, const std::vector<Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace fpgather
