// `fpgather step` as a library (app/replay/replay_step.h): torch's goldens replayed through files at DP 1
// (Adam/AdamW/Lion bitwise, Muon within its tolerance), and DP N equal to DP 1 bitwise for every
// optimizer, distributed optimizer and FP8 recipe; plus the gradient-scale convention it relies on.
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "formats/safetensors/writer.h"
#include "pipeline_test_util.h"
#include "optim/adam.h"
#include "pipeline/optimizer_step.h"
#include "app/replay/replay_step.h"
#include "app/replay/step_files.h"
#include "unit/optim_goldens.h"

using namespace fpg;
using fpg_test::GoldenCase;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/fpg-replay.XXXXXX";
  const char* d = mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  return d;
}

// The chained steps alternate between two OUT files: each replaces the one of two steps before.
app::replay::ReplayOptions options_of(const GoldenCase& c) {
  app::replay::ReplayOptions o;
  o.force = true;
  pipeline::PipelineConfig& p = o.pipeline;
  p.optimizer = *optim::parse_optimizer(c.optimizer);
  p.dist_opt = pipeline::resolve_dist_opt(std::nullopt, p.optimizer);
  p.clip_grad = 0;
  p.lr = c.hyper.at("lr").get<double>();
  p.weight_decay = c.hyper.at("weight_decay").get<double>();
  if (c.hyper.contains("betas")) {
    p.beta1 = c.hyper.at("betas")[0].get<double>();
    p.beta2 = c.hyper.at("betas")[1].get<double>();
  }
  if (c.optimizer == "muon") {
    p.muon_momentum = c.hyper.at("momentum").get<double>();
    p.muon_nesterov = c.hyper.at("nesterov").get<bool>();
    p.muon_ns_steps = c.hyper.at("ns_steps").get<int>();
    p.muon_adjust_lr = c.hyper.at("adjust_lr_fn") == "match_rms_adamw" ? optim::MuonLrAdjust::match_rms_adamw
                                                                        : optim::MuonLrAdjust::original;
  } else if (c.hyper.contains("eps")) {
    p.eps = c.hyper.at("eps").get<double>();
  }
  return o;
}

void write_one(const std::string& path, const std::vector<uint64_t>& shape, const std::vector<float>& v,
               int64_t step = 0) {
  app::replay::StepFile f;
  f.step = step;
  f.params.push_back({"w", shape, v, {}});
  app::replay::write_step_params(path, f, "test");
}

double rel_frobenius(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
  return den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
}

// A model of odd shapes with every role, magnitudes 1e-6..1, zeros; gradients with ±0.0.
std::vector<float> values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> e(-6.0f, 0.0f), u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (u(rng) < 0.5f ? -1.0f : 1.0f) * std::pow(10.0f, e(rng));
    if (i % 17 == 3) v[i] = 0.0f;
    if (i % 23 == 5) v[i] = -0.0f;
  }
  return v;
}

app::replay::StepFile random_model(bool mx, std::mt19937& rng) {
  const std::vector<std::pair<const char*, std::vector<uint64_t>>> odd = {
      {"embed.weight", {37, 19}},     {"blocks.0.norm.weight", {37}},    {"blocks.0.fc1.weight", {131, 37}},
      {"blocks.0.fc2.weight", {37, 53}}, {"blocks.1.fc1.weight", {1, 7}}, {"blocks.1.fc2.weight", {129, 300}},
      {"conv.weight", {3, 5, 7}},     {"lm_head.weight", {11, 37}},      {"scale", {}}};
  const std::vector<std::pair<const char*, std::vector<uint64_t>>> m32 = {
      {"embed.weight", {64, 48}}, {"norm.weight", {64}}, {"fc1.weight", {192, 64}}, {"fc2.weight", {64, 96}},
      {"fc3.weight", {32, 64}},   {"lm_head.weight", {40, 64}}};
  app::replay::StepFile f;
  for (const auto& [name, shape] : mx ? m32 : odd) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    f.params.push_back({name, shape, values(n, rng), {}});
  }
  return f;
}

std::vector<std::vector<float>> random_grads(const app::replay::StepFile& f, std::mt19937& rng) {
  std::vector<std::vector<float>> g;
  for (const auto& t : f.params) g.push_back(values(t.value.size(), rng));
  return g;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST_CASE("step replays torch's Adam/AdamW/Lion goldens bitwise, chained through files", "[replay]") {
  const std::string dir = temp_dir();
  int cases = 0;
  for (const char* opt : {"adam", "adamw", "lion"})
    for (const GoldenCase* c : fpg_test::golden_cases(opt)) {
      const std::vector<uint64_t> shape(c->shape.begin(), c->shape.end());
      const app::replay::ReplayOptions o = options_of(*c);
      std::string in = dir + "/in.safetensors";
      write_one(in, shape, c->get("param", 0));
      for (int t = 1; t <= c->steps; ++t) {
        INFO(c->name << " step " << t);
        write_one(dir + "/g.safetensors", shape, c->get("grad", t));
        const std::string out = dir + "/out" + std::to_string(t % 2) + ".safetensors";
        app::replay::replay_step_files(in, dir + "/g.safetensors", out, o);
        const app::replay::StepFile r = app::replay::read_step_params(out);
        REQUIRE(r.step == t);
        REQUIRE(fpg_test::bit_mismatches(r.params[0].value, c->get("param", t)) == 0);
        REQUIRE(fpg_test::bit_mismatches(r.params[0].state.at("exp_avg"), c->get("exp_avg", t)) == 0);
        if (c->optimizer != "lion")
          REQUIRE(fpg_test::bit_mismatches(r.params[0].state.at("exp_avg_sq"), c->get("exp_avg_sq", t)) == 0);
        else
          REQUIRE(r.params[0].state.count("exp_avg_sq") == 0);
        in = out;
      }
      ++cases;
    }
  REQUIRE(cases >= 30);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("step replays torch's Muon within 5% per update, momentum bitwise", "[replay]") {
  const std::string dir = temp_dir();
  double worst = 0;
  for (const GoldenCase* c : fpg_test::golden_cases("muon")) {
    const std::vector<uint64_t> shape(c->shape.begin(), c->shape.end());
    const app::replay::ReplayOptions o = options_of(*c);
    std::string in = dir + "/in.safetensors";
    write_one(in, shape, c->get("param", 0));
    std::vector<float> ours = c->get("param", 0);
    for (int t = 1; t <= c->steps; ++t) {
      INFO(c->name << " step " << t);
      write_one(dir + "/g.safetensors", shape, c->get("grad", t));
      const std::string out = dir + "/out" + std::to_string(t % 2) + ".safetensors";
      app::replay::replay_step_files(in, dir + "/g.safetensors", out, o);
      const app::replay::StepFile r = app::replay::read_step_params(out);
      if (c->has("momentum_buffer/" + std::to_string(t)))
        REQUIRE(fpg_test::bit_mismatches(r.params[0].state.at("momentum_buffer"), c->get("momentum_buffer", t)) == 0);
      // Our delta from our previous param against torch's delta from its previous param.
      const std::vector<float> p0 = c->get("param", t - 1), p1 = c->get("param", t);
      std::vector<double> mine(p0.size()), theirs(p0.size());
      for (size_t i = 0; i < p0.size(); ++i) {
        mine[i] = double(r.params[0].value[i]) - double(ours[i]);
        theirs[i] = double(p1[i]) - double(p0[i]);
      }
      const double rel = rel_frobenius(mine, theirs);
      worst = std::max(worst, rel);
      REQUIRE(rel < 0.05);
      ours = r.params[0].value;
      in = out;
    }
  }
  WARN("worst Muon update vs torch: " << worst);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("step at DP N equals DP 1 bitwise: every optimizer, dist-opt and FP8 recipe", "[replay]") {
  struct Cfg {
    optim::OptimizerKind opt;
    pipeline::DistOpt dist;
    const char* fp8;
  };
  std::vector<Cfg> cfgs;
  for (auto opt : {optim::OptimizerKind::adamw, optim::OptimizerKind::adam, optim::OptimizerKind::lion})
    for (auto dist : {pipeline::DistOpt::bucketed, pipeline::DistOpt::layerwise})
      for (const char* fp8 : {"none", "blockwise", "mxfp8"}) cfgs.push_back({opt, dist, fp8});
  for (const char* fp8 : {"none", "tensorwise", "delayed", "blockwise-1x128", "mxfp8"})
    cfgs.push_back({optim::OptimizerKind::muon, pipeline::DistOpt::layerwise, fp8});
  for (const Cfg& c : cfgs) {
    const bool mx = std::string(c.fp8) == "mxfp8";
    std::mt19937 rng(11);
    const app::replay::StepFile start = random_model(mx, rng);
    const auto g1 = random_grads(start, rng), g2 = random_grads(start, rng);
    app::replay::ReplayOptions o;
    o.pipeline.optimizer = c.opt;
    o.pipeline.dist_opt = c.dist;
    o.pipeline.clip_grad = 0;
    o.pipeline.lr = 1e-2;
    if (c.opt == optim::OptimizerKind::muon) o.pipeline.scalar_optimizer = optim::ScalarOptimizer::lion;
    pipeline::test::set_fp8(o.pipeline, c.fp8);
    o.pipeline.bucket_size = 3000;  // several buckets, params spanning shard boundaries
    std::vector<app::replay::StepFile> ref;
    for (uint32_t dp : {1u, 2u, 3u, 4u, 8u}) {
      INFO(optim::optimizer_name(c.opt) << " " << pipeline::dist_opt_name(c.dist) << " fp8 " << c.fp8 << " dp " << dp);
      o.dp = dp;
      app::replay::StepFile f = start;
      std::vector<app::replay::StepFile> got;
      const app::replay::ReplayReport r1 = app::replay::replay_step(f, g1, o);
      REQUIRE(!r1.skipped);
      REQUIRE(r1.fp8_params == (std::string(c.fp8) == "none" ? 0u : mx ? 3u : 4u));
      got.push_back(f);
      app::replay::replay_step(f, g2, o);
      got.push_back(f);
      REQUIRE(f.step == 2);
      if (dp == 1) {
        ref = got;
        continue;
      }
      for (size_t s = 0; s < got.size(); ++s)
        for (size_t p = 0; p < f.params.size(); ++p) {
          INFO("step " << s + 1 << " param " << f.params[p].name);
          REQUIRE(same_bits(got[s].params[p].value, ref[s].params[p].value));
          REQUIRE(got[s].params[p].state.size() == ref[s].params[p].state.size());
          for (const auto& [k, v] : ref[s].params[p].state) REQUIRE(same_bits(got[s].params[p].state.at(k), v));
        }
    }
    // FP8 or not, the masters are the same: FP8 changes only what the ranks hold.
    if (std::string(c.fp8) != "none" && !mx) {
      app::replay::ReplayOptions plain = o;
      plain.pipeline.fp8 = {};
      plain.dp = 1;
      app::replay::StepFile f = start;
      app::replay::replay_step(f, g1, plain);
      for (size_t p = 0; p < f.params.size(); ++p) REQUIRE(same_bits(f.params[p].value, ref[0].params[p].value));
    }
  }
}

TEST_CASE("step: states are refused for an optimizer that does not keep them; roles from names", "[replay]") {
  std::mt19937 rng(3);
  app::replay::StepFile f = random_model(false, rng);
  const auto g = random_grads(f, rng);
  app::replay::ReplayOptions o;
  o.pipeline.optimizer = optim::OptimizerKind::lion;
  o.pipeline.clip_grad = 0;
  f.params[2].state["exp_avg_sq"] = std::vector<float>(f.params[2].value.size(), 0.0f);
  REQUIRE_THROWS_AS(app::replay::replay_step(f, g, o), UsageError);
  f.params[2].state.clear();

  o.pipeline.optimizer = optim::OptimizerKind::muon;
  o.pipeline.dist_opt = pipeline::DistOpt::layerwise;
  const app::replay::ReplayReport r = app::replay::replay_step(f, g, o);
  REQUIRE(r.muon_params == 4);  // fc1/fc2 of both blocks; not embed, lm_head, vectors, the 3-D tensor
  REQUIRE(f.params[2].state.count("momentum_buffer") == 1);
  REQUIRE(f.params[0].state.count("exp_avg_sq") == 1);  // embed: the scalar optimizer (adamw)
  o.scalar_params = "(";
  REQUIRE_THROWS_AS(app::replay::replay_step(f, g, o), UsageError);
}

TEST_CASE("one micro-batch on N ranks applies rank 0's gradient unscaled, -0.0 elsewhere", "[replay][pipeline]") {
  // The gradient-scale convention step relies on (rank_pipeline.h): the rank-order SUM with -0.0
  // from the other ranks, then / 1.0f, is the identity, so DP 4 equals the optimizer called directly.
  std::mt19937 rng(5);
  const app::replay::StepFile f = random_model(false, rng);
  auto g = random_grads(f, rng);
  for (auto& v : g)  // signed zeros must reach the optimizer as given
    for (size_t i = 0; i < v.size(); i += 7) v[i] = (i % 2) ? 0.0f : -0.0f;
  app::replay::ReplayOptions o;
  o.pipeline.optimizer = optim::OptimizerKind::adamw;
  o.pipeline.clip_grad = 0;
  o.dp = 4;
  app::replay::StepFile s = f;
  app::replay::replay_step(s, g, o);
  const pipeline::Hypers h = pipeline::make_hypers(o.pipeline, optim::OptimizerKind::adamw);
  for (size_t p = 0; p < f.params.size(); ++p) {
    std::vector<float> w = f.params[p].value, m(w.size(), 0.0f), v(w.size(), 0.0f);
    optim::adam_step(h.adam, 1, w.data(), g[p].data(), m.data(), v.data(), static_cast<int64_t>(w.size()));
    INFO(f.params[p].name);
    REQUIRE(same_bits(s.params[p].value, w));
    REQUIRE(same_bits(s.params[p].state.at("exp_avg"), m));
    REQUIRE(same_bits(s.params[p].state.at("exp_avg_sq"), v));
  }
}

TEST_CASE("step files: state by suffix, step in metadata, refusals name the tensor", "[replay]") {
  const std::string dir = temp_dir();
  namespace st = safetensors;
  const float one[2] = {1.0f, -0.0f};
  auto write = [&](const std::string& name, std::vector<st::TensorSpec> specs, std::map<std::string, std::string> meta) {
    st::Writer w(dir + "/" + name, specs, meta);
    for (const auto& s : specs) {
      std::vector<uint8_t> zero(dtype_bytes(s.dtype, s.shape.empty() ? 1 : s.shape[0]), 0);
      w.write(s.name, 0, s.dtype == DType::F32 && zero.size() == 8 ? static_cast<const void*>(one) : zero.data(),
              zero.size());
    }
    w.commit();
    return dir + "/" + name;
  };
  // A param, its states, a scalar, and a tensor named like a state of nothing (so a param).
  const std::string good = write("good.safetensors",
                                 {{"a", DType::F32, {2}}, {"a.exp_avg", DType::F32, {2}}, {"a.momentum_buffer", DType::F32, {2}},
                                  {"s", DType::F32, {}}, {"b.exp_avg", DType::F32, {2}}},
                                 {{"step", "41"}});
  const app::replay::StepFile f = app::replay::read_step_params(good);
  REQUIRE(f.step == 41);
  REQUIRE(f.params.size() == 3);
  for (const auto& p : f.params) {
    if (p.name == "a") REQUIRE(p.state.size() == 2);
    else REQUIRE(p.state.empty());
    if (p.name == "s") REQUIRE(p.shape.empty());
  }
  app::replay::ReplayOptions ro;
  ro.scalar_params = "embed";
  const model::ModelSpec spec = app::replay::step_spec(f, ro);
  REQUIRE(spec.params[static_cast<size_t>(spec.find("s"))].shape == std::vector<uint64_t>{1});
  // The scalar and the file form survive a write and a read.
  app::replay::write_step_params(dir + "/again.safetensors", f, "adamw");
  const app::replay::StepFile g = app::replay::read_step_params(dir + "/again.safetensors");
  REQUIRE(g.step == 41);
  REQUIRE(g.params.size() == 3);

  REQUIRE_THROWS_AS(app::replay::read_step_params(write("m.safetensors", {{"a", DType::F32, {2}}}, {{"step", "x1"}})), FormatError);
  REQUIRE_THROWS_AS(app::replay::read_step_params(write("bf.safetensors", {{"a", DType::BF16, {2}}}, {})), UsageError);
  REQUIRE_THROWS_AS(
      app::replay::read_step_params(write("sh.safetensors", {{"a", DType::F32, {2}}, {"a.exp_avg", DType::F32, {1}}}, {})),
      UsageError);
  try {
    app::replay::read_step_params(dir + "/bf.safetensors");
  } catch (const UsageError& e) {
    REQUIRE(std::string(e.what()).find("'a'") != std::string::npos);
  }
  std::system(("rm -rf " + dir).c_str());
}
