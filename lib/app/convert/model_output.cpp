#include "app/convert/model_output.h"

#include <algorithm>
#include <filesystem>

#include "app/convert/model_dir_files.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/tensor_file.h"

namespace fpg::app::convert {
namespace {

namespace stdfs = std::filesystem;

// A config.json is a few kilobytes; this bounds what a hostile one can make us hold.
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return stdfs::equivalent(a, b, ec);
}

}  // namespace

ModelOutput::ModelOutput(const TensorFiles& in, const std::string& out, bool force,
                         std::map<std::string, std::string> metadata, const std::string& quantization_config)
    : in_(in),
      layout_(plan_output_files(in, out)),
      metadata_(std::move(metadata)),
      staged_(out, layout_.kind, force, input_files(in)),
      specs_(layout_.files.size()) {
  for (const auto& f : layout_.files) paths_.push_back(staged_.stage(f.name));
  if (!layout_.index_name.empty()) index_path_ = staged_.stage(layout_.index_name);
  carry_companions(quantization_config);
}

void ModelOutput::carry_companions(const std::string& quantization_config) {
  if (layout_.kind == OutputKind::file) return;
  const std::string in_dir = fs::split_path(in_.source()).first;
  if (fs::exists(staged_.dir(), true) && same_directory(in_dir, staged_.dir())) return;
  for (const std::string& from : companion_files(in_)) {
    const std::string name = fs::split_path(from).second;
    const std::string to = staged_.stage(name);
    if (name == "config.json") {
      fs::write_file_atomic(
          to, with_quantization_config(fs::read_small_file(from, kMaxConfigBytes), from, quantization_config));
      writes_config_ = true;
    } else {
      fs::copy_file(from, to);
    }
    companions_.push_back(staged_.final_path(name));
  }
}

void ModelOutput::declare(size_t file, TensorSpec spec) {
  if (!writers_.empty()) throw InternalError("convert: tensor declared after the output was opened");
  specs_.at(file).push_back(std::move(spec));
}

void ModelOutput::open() {
  for (size_t f = 0; f < layout_.files.size(); ++f)
    writers_.push_back(tensor_file_format().create(paths_[f], specs_[f], metadata_));
}

void ModelOutput::copy_tensor(size_t file, const TensorFiles::Entry& entry, ThreadPool& pool,
                              Progress& progress) {
  TensorFileWriter& w = writer(file);
  const size_t idx = w.index(entry.info->name);
  const uint8_t* src = in_.data(entry);
  const uint64_t n = entry.info->nbytes();
  const uint64_t slabs = (n + kSlabBytes - 1) / kSlabBytes;
  pool.parallel_for(slabs, [&](size_t s) {
    const uint64_t lo = s * kSlabBytes, len = std::min(kSlabBytes, n - lo);
    w.write(idx, lo, src + lo, len);
    progress.advance(len);
  });
}

std::vector<std::string> ModelOutput::commit() {
  std::vector<std::string> paths;
  for (size_t f = 0; f < writers_.size(); ++f) {
    writers_[f]->commit();
    paths.push_back(staged_.final_path(layout_.files[f].name));
  }
  paths.insert(paths.end(), companions_.begin(), companions_.end());
  if (!layout_.index_name.empty()) {
    ShardIndex index;
    if (const auto* src = in_.index()) index.extra_metadata_json = src->extra_metadata_json;
    uint64_t total = 0;
    for (size_t f = 0; f < writers_.size(); ++f) {
      for (const auto& t : writers_[f]->tensors()) {
        index.weight_map[t.name] = layout_.files[f].name;
        total += t.nbytes();
      }
    }
    index.total_size = total;
    tensor_file_format().write_index(index_path_, index);
    paths.push_back(staged_.final_path(layout_.index_name));
  }
  staged_.commit();
  return paths;
}

}  // namespace fpg::app::convert
