// Shared helpers of the pipeline tests: small network specs, configs, and runs that snapshot every
// rank's stored params and optimizer state so tests can compare ranks, runs and layouts.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "model/presets.h"
#include "pipeline/rank_pipeline.h"
#include "app/train/trainer.h"

namespace fpg::pipeline::test {

// The built-in network with every matrix dim a multiple of 32 (MXFP8 can take it) and 4 matrices:
//   input [64, 32], fc1 [192, 64] x2, fc2 [64, 96] x2, norms [64], output [32, 64]; 41,152 elements.
inline model::ModelSpec spec32() {
  model::NetworkDims d;
  d.input = 32;
  d.hidden = 64;
  d.ffn = 96;
  d.layers = 2;
  d.output = 32;
  return model::network_spec("t32", d);
}

inline fp8::Recipe recipe_named(const std::string& name) {
  if (name == "tensorwise") return fp8::Recipe::tensorwise();
  if (name == "delayed") return fp8::Recipe::delayed();
  if (name == "blockwise") return fp8::Recipe::blockwise_128x128();
  if (name == "blockwise-1x128") return fp8::Recipe::blockwise_1x128();
  if (name == "mxfp8") return fp8::Recipe::mxfp8(fp8::Format::e4m3, fp8::MxRule::rceil, true, true);
  if (name == "mxfp8-row") return fp8::Recipe::mxfp8(fp8::Format::e4m3, fp8::MxRule::rceil, true, false);
  return fp8::Recipe::tensorwise();
}

inline void set_fp8(PipelineConfig& c, const std::string& name) {
  c.fp8.enabled = name != "none";
  if (c.fp8.enabled) c.fp8.recipe = recipe_named(name);
  if (name == "delayed") {
    c.fp8.amax_history_len = 4;
    c.fp8.amax_algo = fp8::AmaxAlgo::max;
  }
}

// What one rank holds at one point: every param's stored bytes and its rank state.
struct RankSnap {
  std::vector<std::vector<uint8_t>> bytes;  // per spec param
  RankState state;
};

// A run: snapshots per (steps_done, rank), and the metrics.
struct Run {
  std::vector<std::vector<RankSnap>> snaps;  // [steps_done][rank]
  app::train::TrainResult result;
};

inline Run run_training(const app::train::TrainOptions& o, bool keep_all_steps = true) {
  Run r;
  r.snaps.assign(o.steps + 1, std::vector<RankSnap>(o.dp));
  r.result = app::train::train(o, [&](uint64_t done, const RankPipeline& p) {
    if (!keep_all_steps && done != o.steps) return;
    RankSnap& s = r.snaps[done][p.state().rank];  // each rank writes its own slot
    s.bytes.resize(p.spec().params.size());
    for (uint32_t i = 0; i < p.spec().params.size(); ++i) s.bytes[i] = p.stored_bytes(i);
    s.state = p.state();
  });
  return r;
}

// Every param's full master and optimizer state, assembled from all ranks' fragments.
struct FullState {
  std::map<std::string, std::vector<std::vector<float>>> arrays;  // name -> per param
  std::vector<std::vector<int>> covered;                          // per param element: how many fragments
};

inline void add_part(FullState& f, const OptimizerState& st, const model::ModelSpec& spec) {
  const std::pair<const char*, const std::vector<float>*> arenas[] = {
      {"master", &st.master}, {"exp_avg", &st.exp_avg}, {"exp_avg_sq", &st.exp_avg_sq}, {"momentum", &st.momentum}};
  for (const auto& [name, arena] : arenas) {
    if (arena->empty()) continue;
    auto& per = f.arrays[name];
    if (per.empty())
      for (const auto& p : spec.params) per.emplace_back(p.numel(), 0.0f);
    for (const StateFragment& fr : st.fragments)
      std::memcpy(per[fr.param].data() + fr.param_range.begin, arena->data() + fr.offset,
                  fr.param_range.size() * sizeof(float));
  }
  for (const StateFragment& fr : st.fragments)
    for (uint64_t k = fr.param_range.begin; k < fr.param_range.end; ++k) f.covered[fr.param][k] += 1;
}

inline FullState full_state(const std::vector<RankSnap>& ranks, const model::ModelSpec& spec) {
  FullState f;
  for (const auto& p : spec.params) f.covered.emplace_back(p.numel(), 0);
  for (const RankSnap& r : ranks) {
    add_part(f, r.state.bucketed, spec);
    add_part(f, r.state.layer_wise, spec);
  }
  return f;
}

inline bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

}  // namespace fpg::pipeline::test
