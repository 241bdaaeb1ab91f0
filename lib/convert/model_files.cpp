#include "convert/model_files.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "formats/safetensors/index.h"

namespace fpg::convert {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Refuses to write over any file the input is read from (the output is renamed over its target only
// at the end, but a half-converted model must never replace its own source).
void check_not_input(const safetensors::Model& in, const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  std::vector<std::string> inputs = {in.source()};
  for (size_t i = 0; i < in.shard_count(); ++i) inputs.push_back(in.shard(i).path());
  for (const auto& p : inputs)
    if (fs::equivalent(p, out, ec))
      throw UsageError("output " + out + " is the input file " + p + ": choose another OUT");
}

}  // namespace

OutputLayout plan_output_files(const safetensors::Model& in, const std::string& out) {
  OutputLayout layout;
  std::vector<size_t> all(in.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;

  if (ends_with(out, ".safetensors")) {
    layout.files.push_back({out, all});
  } else {
    fs::path dir;
    if (ends_with(out, ".json")) {
      layout.index_path = out;
      dir = fs::path(out).parent_path();
    } else if (in.sharded()) {
      dir = out;
      layout.index_path = (dir / safetensors::kIndexFileName).string();
    } else {
      throw UsageError("OUT " + out + " must end in .safetensors (one file) or .json (an index)");
    }
    if (dir.empty()) dir = ".";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw FormatError("cannot create output directory " + dir.string() + ": " + ec.message());
    layout.files.resize(in.shard_count());
    for (size_t s = 0; s < in.shard_count(); ++s)
      layout.files[s].path = (dir / fs::path(in.shard(s).path()).filename()).string();
    for (size_t i = 0; i < in.size(); ++i) layout.files[in.tensors()[i].shard].tensors.push_back(i);
  }
  for (const auto& f : layout.files) check_not_input(in, f.path);
  if (!layout.index_path.empty()) check_not_input(in, layout.index_path);
  return layout;
}

}  // namespace fpg::convert
