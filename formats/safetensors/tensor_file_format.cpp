#include "formats/safetensors/tensor_file_format.h"

#include "formats/safetensors/index.h"
#include "formats/safetensors/model.h"
#include "formats/safetensors/writer.h"

namespace fpg::safetensors {
namespace {

class Format final : public TensorFileFormat {
 public:
  std::unique_ptr<TensorFiles> open(const std::string& path) const override {
    return std::make_unique<Model>(Model::open(path));
  }
  std::unique_ptr<TensorFiles> open_file(const std::string& path) const override {
    return std::make_unique<Model>(Model::open_file(path));
  }
  std::unique_ptr<TensorFileWriter> create(const std::string& path, std::vector<TensorSpec> tensors,
                                           std::map<std::string, std::string> metadata) const override {
    return std::make_unique<Writer>(path, std::move(tensors), std::move(metadata));
  }
  ShardIndex read_index(const std::string& path) const override { return safetensors::read_index(path); }
  void write_index(const std::string& path, const ShardIndex& index) const override {
    safetensors::write_index(path, index);
  }
  std::string model_file_name() const override { return kModelFileName; }
  std::string index_file_name() const override { return kIndexFileName; }
  std::string shard_file_name(size_t i, size_t n) const override { return safetensors::shard_file_name(i, n); }
};

}  // namespace

std::unique_ptr<TensorFileFormat> make_tensor_file_format() { return std::make_unique<Format>(); }

}  // namespace fpg::safetensors
