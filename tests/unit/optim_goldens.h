// Reader for testdata/optim (written by testdata/optim/gen_optim_goldens.py) and bitwise comparison
// helpers for the optimizer tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fpg_test {

struct GoldenCase {
  std::string name, optimizer;
  nlohmann::json hyper;
  std::vector<int64_t> shape;
  int steps = 0;
  std::vector<float> data;
  std::map<std::string, std::pair<int64_t, int64_t>> arrays;  // key -> (offset, count)

  bool has(const std::string& key) const { return arrays.count(key) != 0; }
  std::vector<float> get(const std::string& key) const {
    const auto it = arrays.find(key);
    if (it == arrays.end()) throw std::runtime_error(name + ": no array " + key);
    return std::vector<float>(data.begin() + it->second.first,
                              data.begin() + it->second.first + it->second.second);
  }
  std::vector<float> get(const std::string& what, int step) const {
    return get(what + "/" + std::to_string(step));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct GoldenSet {
  int torch_vec_width = 8;
  std::string torch_version;
  std::vector<GoldenCase> cases;
};

inline const GoldenSet& optim_goldens() {
  static const GoldenSet set = [] {
    const std::string dir = std::string(FPG_TESTDATA_DIR) + "/optim/";
    std::ifstream mf(dir + "manifest.json");
    if (!mf) throw std::runtime_error("cannot open " + dir + "manifest.json");
    const nlohmann::json m = nlohmann::json::parse(mf);
    GoldenSet s;
    s.torch_vec_width = m.at("torch_vec_width").get<int>();
    s.torch_version = m.at("torch_version").get<std::string>();
    for (const auto& c : m.at("cases")) {
      GoldenCase g;
      g.name = c.at("name").get<std::string>();
      g.optimizer = c.at("optimizer").get<std::string>();
      g.hyper = c.at("hyper");
      g.shape = c.at("shape").get<std::vector<int64_t>>();
      g.steps = c.at("steps").get<int>();
      for (const auto& [k, v] : c.at("arrays").items()) g.arrays[k] = {v.at(0).get<int64_t>(), v.at(1).get<int64_t>()};
      std::ifstream f(dir + c.at("file").get<std::string>(), std::ios::binary | std::ios::ate);
      if (!f) throw std::runtime_error("cannot open golden file of " + g.name);
      const auto bytes = static_cast<size_t>(f.tellg());
      g.data.resize(bytes / sizeof(float));
      f.seekg(0);
      f.read(reinterpret_cast<char*>(g.data.data()), static_cast<std::streamsize>(bytes));
      s.cases.push_back(std::move(g));
    }
    return s;
  }();
  return set;
}

inline std::vector<const GoldenCase*> golden_cases(const std::string& optimizer) {
  std::vector<const GoldenCase*> out;
  for (const auto& c : optim_goldens().cases)
    if (c.optimizer == optimizer) out.push_back(&c);
  return out;
}

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Number of elements whose bit patterns differ (so -0 != +0); `first` gets the first such index.
inline int64_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b, int64_t* first = nullptr) {
  int64_t bad = 0;
  if (first) *first = -1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (bits_of(a[i]) != bits_of(b[i])) {
      if (bad == 0 && first) *first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  return bad + static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

}  // namespace fpg_test
