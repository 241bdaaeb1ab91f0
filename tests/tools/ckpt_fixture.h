// The small model state that the checkpoint fixtures and unit tests write: two params whose
// bucketed layout at dp=8 has a rank (3) owning only alignment padding inside numel_unpadded, BF16
// weights, an FP8 weight with its scale, and fp32 master + Adam moments in either state layout.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/documents.h"
#include "ckpt/key_names.h"
#include "core/float_codec.h"
#include "formats/fpckpt/commit.h"
#include "ckpt/layout_save.h"
#include "layout/bucketed_layout.h"
#include "layout/layout_json.h"
#include "model/spec_json.h"

namespace fpg::testing {

inline model::ModelSpec fixture_spec() {
  model::ModelSpec spec;
  spec.name = "ckpt-fixture";
  // Registration order; the layout reverses it: norm at [0, 65), blocks.0.w at [128, 228).
  spec.params.push_back({"blocks.0.w", {10, 10}, DType::BF16, model::Role::matrix, false, false});
  spec.params.push_back({"norm", {65}, DType::BF16, model::Role::vector, false, false});
  return spec;
}

inline const std::vector<std::string>& fixture_states() {
  static const std::vector<std::string> s = {"master", "exp_avg", "exp_avg_sq"};
  return s;
}

// Deterministic state values; `perturb` changes one element (diff tests).
inline float fixture_value(uint32_t param, const std::string& state, uint64_t i, bool perturb = false) {
  const float s = state == "master" ? 1.f : state == "exp_avg" ? 0.01f : 1e-4f;
  float v = s * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(param));
  if (perturb && param == 0 && state == "exp_avg" && i == 42) v += 0.5f;
  return v;
}

struct FixtureOptions {
  uint32_t dp = 8;
  ckpt::StateLayout state_layout = ckpt::StateLayout::bucket;
  fpckpt::WriteOptions write;
  bool perturb = false;
  int skip_padding_rank = -1;  // this rank declares no padding (the "padding-only rank missing" bug)
  int overlap_rank = -1;       // this rank also writes rank 0's weight range (the "overlap" bug)
};

// Writes the fixture state to `target` and commits it; returns the index.
inline ckpt::Index write_fixture(const std::string& target, const FixtureOptions& o) {
  const auto spec = fixture_spec();
  layout::BucketedOptions lo;
  lo.dp = o.dp;
  const auto L = layout::build_bucketed_layout(spec, lo);
  fpckpt::CheckpointWriter w(target, o.write);
  ckpt::StateSaveOptions so;
  so.layout = o.state_layout;
  so.states = fixture_states();
  so.piece_elems = 1000;
  for (uint32_t r = 0; r < o.dp; ++r) {
    auto& rw = w.rank(r);
    if (static_cast<int>(r) == o.skip_padding_rank) {
      // The rank owns only padding: it declares the keys but (the bug) not its padding.
      const uint64_t n = L.buffers.at(0).buckets.at(0).numel_unpadded;
      for (const auto& s : so.states)
        rw.declare({ckpt::bucket_state_key(0, 0, s), DType::F32, {n},
                    s == "master" ? ckpt::KeyKind::master : ckpt::KeyKind::optimizer_state});
      continue;
    }
    ckpt::save_optimizer_state(rw, spec, L, so, [&](uint32_t p, const std::string& s, uint64_t lo_, uint64_t n, float* out) {
      for (uint64_t i = 0; i < n; ++i) out[i] = fixture_value(p, s, lo_ + i, o.perturb);
    });
  }
  // Weights: rank 0 writes the bf16 params and the FP8 copy of the matrix with its scale.
  auto& r0 = w.rank(0);
  for (uint32_t p = 0; p < spec.params.size(); ++p) {
    const auto& param = spec.params[p];
    std::vector<uint16_t> bf(param.numel());
    for (uint64_t i = 0; i < bf.size(); ++i) bf[i] = bf16_from_float(fixture_value(p, "master", i, o.perturb));
    const uint32_t k = r0.declare({"weight/" + param.name, DType::BF16, param.shape, ckpt::KeyKind::weight});
    r0.write(k, 0, bf.data(), bf.size());
    if (o.overlap_rank > 0) {
      auto& rx = w.rank(static_cast<uint32_t>(o.overlap_rank));
      const uint32_t kx = rx.declare({"weight/" + param.name, DType::BF16, param.shape, ckpt::KeyKind::weight});
      rx.write(kx, 0, bf.data(), 16);
    }
  }
  {
    const auto& m = spec.params[0];
    const float scale = 448.f / 0.9f;
    std::vector<uint8_t> q(m.numel());
    for (uint64_t i = 0; i < q.size(); ++i) q[i] = e4m3_from_float(fixture_value(0, "master", i) * scale);
    const uint32_t kd = r0.declare({"fp8/" + m.name, DType::F8_E4M3, m.shape, ckpt::KeyKind::fp8_data});
    r0.write(kd, 0, q.data(), q.size());
    const float inv = 1.f / scale;
    const uint32_t ks = r0.declare({"fp8/" + m.name + "/scale_inv", DType::F32, {}, ckpt::KeyKind::fp8_scale});
    r0.write(ks, 0, &inv, 1);
  }
  auto& d = w.documents();
  d.set(ckpt::doc::model, model::spec_to_json(spec, -1));
  d.set(ckpt::doc::layout, layout::to_json(L));
  d.set(ckpt::doc::optimizer, std::string("{\"name\": \"adamw\", \"lr\": 0.001, \"betas\": [0.9, 0.95], \"step\": 7, ") +
                                  "\"state_layout\": \"" + std::string(ckpt::state_layout_name(o.state_layout)) +
                                  "\", \"states\": [\"master\", \"exp_avg\", \"exp_avg_sq\"]}");
  d.set(ckpt::doc::fp8, "{\"recipe\": \"tensorwise\", \"amax_history\": [[0.9, 0.85]]}");
  d.set(ckpt::doc::data, "{\"cursor\": 1792}");
  d.set(ckpt::doc::rng, "{\"seed\": 1234, \"offset\": 7}");
  return w.commit();
}

}  // namespace fpg::testing
