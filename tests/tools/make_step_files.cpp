// Inputs for the `fpgather step` CLI tests (tests/cli/step.sh), so no Python or torch is needed at
// test time:
//
//   make_step_files golden CASE DIR   from testdata/optim (torch goldens): DIR/in.safetensors (the
//       initial param as "w"), DIR/g1..gS.safetensors (the gradients), DIR/want1..wantS.safetensors
//       (torch's param and state after each step, written exactly as `fpgather step` writes OUT, so
//       `cmp` checks bitwise equality), and DIR/flags (the case's hyperparameters as CLI flags).
//   make_step_files random DIR [mx]   a multi-tensor model: matrices of odd shapes (or, with mx,
//       multiples of 32 for MXFP8), an embedding, a head, vectors, a 3-D tensor and a scalar;
//       values from 1e-6 to 1 with exact zeros; DIR/in.safetensors and gradients DIR/g1, DIR/g2
//       (with ±0.0 in them), and broken ones: DIR/g_missing (the last tensor left out) and
//       DIR/g_shape (the second tensor reshaped).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/safetensors/writer.h"
#include "app/replay/step_files.h"

using fpg::app::replay::StepFile;
using fpg::app::replay::StepTensor;

namespace {

void write_tensors(const std::string& path, const std::vector<StepTensor>& ts) {
  std::vector<fpg::safetensors::TensorSpec> specs;
  for (const auto& t : ts) specs.push_back({t.name, fpg::DType::F32, t.shape});
  fpg::safetensors::Writer w(path, specs);
  for (const auto& t : ts) w.write(t.name, 0, t.value.data(), t.value.size() * 4);
  w.commit();
}

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

int golden(const std::string& name, const std::string& dir) {
  const std::string data = std::string(FPG_TESTDATA_DIR) + "/optim/";
  std::ifstream mf(data + "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(mf);
  for (const auto& c : m.at("cases")) {
    if (c.at("name") != name) continue;
    std::ifstream f(data + c.at("file").get<std::string>(), std::ios::binary | std::ios::ate);
    std::vector<float> raw(static_cast<size_t>(f.tellg()) / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size() * 4));
    const auto arr = [&](const std::string& key) {
      const auto& a = c.at("arrays").at(key);
      const auto off = a.at(0).get<size_t>(), n = a.at(1).get<size_t>();
      return std::vector<float>(raw.begin() + static_cast<long>(off), raw.begin() + static_cast<long>(off + n));
    };
    const auto shape = c.at("shape").get<std::vector<uint64_t>>();
    const std::string opt = c.at("optimizer");
    write_tensors(dir + "/in.safetensors", {{"w", shape, arr("param/0"), {}}});
    const int steps = c.at("steps");
    for (int t = 1; t <= steps; ++t) {
      write_tensors(dir + "/g" + std::to_string(t) + ".safetensors", {{"w", shape, arr("grad/" + std::to_string(t)), {}}});
      StepFile want;
      want.step = t;
      StepTensor w{"w", shape, arr("param/" + std::to_string(t)), {}};
      for (const char* k : {"exp_avg", "exp_avg_sq", "momentum_buffer"})
        if (c.at("arrays").contains(std::string(k) + "/" + std::to_string(t)))
          w.state[k] = arr(std::string(k) + "/" + std::to_string(t));
      want.params.push_back(w);
      fpg::app::replay::write_step_params(dir + "/want" + std::to_string(t) + ".safetensors", want, opt);
    }
    const auto& h = c.at("hyper");
    std::string flags = "--optimizer " + opt + " --lr " + num(h.at("lr")) + " --weight-decay " + num(h.at("weight_decay"));
    if (h.contains("betas")) flags += " --betas " + num(h.at("betas")[0]) + "," + num(h.at("betas")[1]);
    if (h.contains("eps") && opt != "muon") flags += " --eps " + num(h.at("eps"));
    std::ofstream(dir + "/flags") << flags << "\n";
    return 0;
  }
  std::fprintf(stderr, "no golden case %s\n", name.c_str());
  return 1;
}

// Magnitudes from 1e-6 to 1, both signs, some exact zeros.
std::vector<float> values(size_t n, std::mt19937& rng, bool signed_zeros) {
  std::uniform_real_distribution<float> e(-6.0f, 0.0f), u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float mag = std::pow(10.0f, e(rng));
    v[i] = u(rng) < 0.5f ? -mag : mag;
    if (i % 17 == 3) v[i] = 0.0f;
    if (signed_zeros && i % 23 == 5) v[i] = -0.0f;
  }
  return v;
}

int random_model(const std::string& dir, bool mx) {
  std::mt19937 rng(2024);
  struct T {
    const char* name;
    std::vector<uint64_t> shape;
  };
  const std::vector<T> ts = mx ? std::vector<T>{{"embed.weight", {64, 48}},      {"blocks.0.norm.weight", {64}},
                                                {"blocks.0.fc1.weight", {192, 64}}, {"blocks.0.fc2.weight", {64, 96}},
                                                {"blocks.1.fc1.weight", {96, 64}},  {"blocks.1.fc2.weight", {64, 32}},
                                                {"lm_head.weight", {40, 64}},       {"scale", {}}}
                               : std::vector<T>{{"embed.weight", {37, 19}},         {"blocks.0.norm.weight", {37}},
                                                {"blocks.0.fc1.weight", {131, 37}}, {"blocks.0.fc2.weight", {37, 53}},
                                                {"blocks.0.fc2.bias", {37}},        {"blocks.1.fc1.weight", {1, 7}},
                                                {"blocks.1.fc2.weight", {129, 300}}, {"conv.weight", {3, 5, 7}},
                                                {"lm_head.weight", {11, 37}},       {"scale", {}}};
  std::vector<StepTensor> params;
  for (const T& t : ts) {
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    params.push_back({t.name, t.shape, values(n, rng, false), {}});
  }
  write_tensors(dir + "/in.safetensors", params);
  for (int g = 1; g <= 2; ++g) {
    std::vector<StepTensor> grads = params;
    for (auto& t : grads) t.value = values(t.value.size(), rng, true);
    write_tensors(dir + "/g" + std::to_string(g) + ".safetensors", grads);
    if (g == 1) {  // broken gradient files: one tensor missing, one of the wrong shape
      std::vector<StepTensor> missing(grads.begin(), grads.end() - 1);
      write_tensors(dir + "/g_missing.safetensors", missing);
      grads[1].shape = {grads[1].value.size()};
      grads[1].shape.insert(grads[1].shape.begin(), 1);
      write_tensors(dir + "/g_shape.safetensors", grads);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() == 3 && a[0] == "golden") return golden(a[1], a[2]);
    if ((a.size() == 2 || (a.size() == 3 && a[2] == "mx")) && a[0] == "random") return random_model(a[1], a.size() == 3);
    std::fprintf(stderr, "usage: make_step_files golden CASE DIR | random DIR [mx]\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_step_files: %s\n", e.what());
    return 1;
  }
}
