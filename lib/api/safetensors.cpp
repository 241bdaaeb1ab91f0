// fpgather/safetensors.h over the build's tensor-file format (core/tensor_file.h): a model (a file, or
// shards with an index) to read, a file writer to write.
#include <fpgather/safetensors.h>

#include <cstring>

#include "api/boundary.h"
#include "core/dtype.h"
#include "core/float_decode.h"
#include "core/shape.h"
#include "core/tensor_file.h"

namespace fpgather {
namespace {

fpg::DType internal_dtype(const std::string& name, const std::string& tensor) {
  const auto t = fpg::parse_dtype(name);
  if (!t) throw fpg::UsageError("tensor '" + tensor + "': unknown dtype '" + name + "' (F32, BF16, F16, F8_E4M3, ...)");
  return *t;
}

// Elements of `shape`; UsageError naming the tensor when the product overflows.
uint64_t element_count(const std::vector<uint64_t>& shape, const std::string& tensor) {
  uint64_t n = 0;
  if (!fpg::checked_numel(shape, &n))
    throw fpg::UsageError("tensor '" + tensor + "': shape " + fpg::shape_string(shape) + " overflows");
  return n;
}

}  // namespace

Tensor float32_tensor(const std::string& name, const std::vector<uint64_t>& shape, Span<const float> values) {
  return api::at_boundary([&] {
    const uint64_t n = element_count(shape, name);
    if (n != values.size())
      throw fpg::UsageError("tensor '" + name + "': shape " + fpg::shape_string(shape) + " holds " + std::to_string(n) +
                            " elements, not " + std::to_string(values.size()));
    Tensor t{name, "F32", shape, std::vector<uint8_t>(n * sizeof(float))};
    if (n) std::memcpy(t.data.data(), values.data(), n * sizeof(float));
    return t;
  });
}

struct SafetensorsReader::Impl {
  explicit Impl(std::unique_ptr<fpg::TensorFiles> m) : model(std::move(m)) {
    for (const auto& e : model->tensors())
      infos.push_back({e.info->name, std::string(fpg::dtype_name(e.info->dtype)), e.info->shape, e.info->numel,
                       e.info->nbytes()});
  }

  const fpg::TensorFiles::Entry& entry(const std::string& name) const {
    const auto* e = model->find(name);
    if (!e) throw fpg::UsageError(model->path() + ": no tensor named '" + name + "'");
    return *e;
  }

  std::unique_ptr<fpg::TensorFiles> model;
  std::vector<TensorInfo> infos;
};

SafetensorsReader::SafetensorsReader(const std::string& path)
    : impl_(api::at_boundary([&] { return std::make_unique<Impl>(fpg::tensor_file_format().open(path)); })) {}
SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const std::vector<TensorInfo>& SafetensorsReader::tensors() const { return impl_->infos; }

const std::map<std::string, std::string>& SafetensorsReader::metadata() const { return impl_->model->metadata(); }

Tensor SafetensorsReader::read(const std::string& name) const {
  return api::at_boundary([&] {
    const auto& e = impl_->entry(name);
    const auto bytes = impl_->model->bytes(e);
    return Tensor{e.info->name, std::string(fpg::dtype_name(e.info->dtype)), e.info->shape,
                  std::vector<uint8_t>(bytes.begin(), bytes.end())};
  });
}

std::vector<float> SafetensorsReader::read_float32(const std::string& name) const {
  return api::at_boundary([&] {
    const auto& e = impl_->entry(name);
    std::vector<float> values(e.info->numel);
    if (!fpg::decode_to_f32(e.info->dtype, impl_->model->data(e), e.info->numel, values.data()))
      throw fpg::UsageError(impl_->model->path() + ": tensor '" + name + "' is " +
                            std::string(fpg::dtype_name(e.info->dtype)) + ", not a float type fpgather decodes");
    return values;
  });
}

void write_safetensors(const std::string& path, const std::vector<Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  api::at_boundary([&] {
    std::vector<fpg::TensorSpec> specs;
    for (const auto& t : tensors) specs.push_back({t.name, internal_dtype(t.dtype, t.name), t.shape});
    const std::unique_ptr<fpg::TensorFileWriter> file = fpg::tensor_file_format().create(path, specs, metadata);
    fpg::TensorFileWriter& writer = *file;
    for (const auto& t : tensors) {
      const size_t i = writer.index(t.name);
      const uint64_t want = writer.tensors()[i].nbytes();
      if (t.data.size() != want)
        throw fpg::UsageError(path + ": tensor '" + t.name + "' (" + t.dtype + " " + fpg::shape_string(t.shape) +
                              ") needs " + std::to_string(want) + " bytes of data, not " + std::to_string(t.data.size()));
      if (want) writer.write(i, 0, t.data.data(), want);
    }
    writer.commit();
  });
}

}  // namespace fpgather
