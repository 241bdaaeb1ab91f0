#include "model/presets.h"

#include <array>

#include "core/error.h"

namespace fpg::model {
namespace {

struct Preset {
  std::string_view name;
  NetworkDims dims;
};

// Dims chosen to land near 100k / 10M / 125M / 1B parameters with SwiGLU ratios F/H of 2.7-3.7.
constexpr std::array<Preset, 4> kPresets = {{
    {"tiny", {20, 96, 96, 4, 20}},
    {"small", {128, 320, 864, 12, 128}},
    {"base", {1024, 768, 2048, 26, 1024}},
    {"1b", {2048, 2048, 5632, 29, 2048}},
}};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

std::optional<NetworkDims> preset_dims(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.name == name) return p.dims;
  return std::nullopt;
}

ModelSpec network_spec(std::string name, const NetworkDims& dims) {
  ModelSpec spec;
  spec.name = std::move(name);
  spec.network = dims;
  spec.params = network_params(dims);
  return spec;
}

ModelSpec preset(std::string_view name) {
  auto dims = preset_dims(name);
  if (!dims) {
    std::string all;
    for (const auto& p : kPresets) all += (all.empty() ? "" : ", ") + std::string(p.name);
    throw UsageError("unknown model preset '" + std::string(name) + "' (presets: " + all + ")");
  }
  return network_spec(std::string(name), *dims);
}

}  // namespace fpg::model
