#include "convert/export_files.h"

#include <filesystem>

#include "core/error.h"
#include "formats/safetensors/index.h"

namespace fpg::convert {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ExportFiles plan_export_files(const std::vector<uint64_t>& tensor_bytes, const std::string& out, uint64_t max_shard) {
  ExportFiles f;
  std::vector<size_t> all(tensor_bytes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (ends_with(out, ".safetensors")) {
    f.paths = {out};
    f.tensors = {all};
    return f;
  }
  fs::path dir = out;
  uint64_t total = 0;
  for (uint64_t b : tensor_bytes) total += b;
  if (ends_with(out, ".json")) {
    dir = fs::path(out).parent_path();
    f.index_path = out;
  } else if (total > max_shard) {
    f.index_path = (dir / safetensors::kIndexFileName).string();
  }
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw UsageError("OUT " + dir.string() + " is a file, not a directory");
  fs::create_directories(dir, ec);
  if (ec) throw FormatError("cannot create output directory " + dir.string() + ": " + ec.message());
  if (f.index_path.empty()) {
    f.paths = {(dir / "model.safetensors").string()};
    f.tensors = {all};
    return f;
  }
  // HF's rule: a shard closes before the tensor that would take it past the limit (a tensor larger
  // than the limit gets a shard of its own).
  uint64_t in_shard = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (f.tensors.empty() || (in_shard > 0 && in_shard + tensor_bytes[i] > max_shard)) {
      f.tensors.emplace_back();
      in_shard = 0;
    }
    f.tensors.back().push_back(i);
    in_shard += tensor_bytes[i];
  }
  for (size_t s = 0; s < f.tensors.size(); ++s)
    f.paths.push_back((dir / safetensors::shard_file_name(s, f.tensors.size())).string());
  return f;
}

}  // namespace fpg::convert
