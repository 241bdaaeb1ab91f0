// `fpgather reshard`: the plan (interval intersection, empty ranks, bucket membership
// changes) and its proof — for N, M in {1, 2, 3, 4, 8}, both pipelines, every
// optimizer the target pipeline supports and several FP8 recipes: reshard N -> M passes
// `validate --data`, `diff SRC DST` is equal, and lib/ARCHITECTURE.md invariant 5: `train --load DST --dp M`
// continued for k steps equals, bitwise, a DP-M run continued from the same state — a run whose
// ranks this test fills in memory from the source checkpoint's values (read per param in model
// space, cut by the DP-M pipeline's own fragments), without the reshard code.
// (Runs at different DP with the same global batch are not bitwise alike when both accumulate:
// DP 2 x 2 sums (g0 + g1) + (g2 + g3), DP 4 x 1 ((g0 + g1) + g2) + g3; invariant 3 pairs DP N with
// DP 1 x N. So the reference continuation starts from the source's state, not from a DP-M run.)
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catch.h"
#include "ckpt/coverage.h"
#include "ckpt/state_view.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/diff.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"
#include "pipeline/fp8_params.h"
#include "pipeline_test_util.h"
#include "app/checkpoint/checkpointing.h"
#include "formats/fpckpt/reshard_checkpoint.h"

using namespace fpg;
using namespace fpg::pipeline;
using K = optim::OptimizerKind;
using SL = ckpt::StateLayout;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-reshard-XXXXXX";
    const char* d = mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    path = d;
  }
  ~TempDir() { fs::remove_tree(path); }
};

constexpr uint64_t kGlobalBatch = 24;  // micro-batches per step: divisible by 1, 2, 3, 4 and 8
constexpr uint64_t kSaveAt = 2, kEnd = 4;

struct Run {
  K opt;
  DistOpt dist;
  const char* fp8;
  SL layout;
  uint64_t bucket_size;  // 0: one bucket per buffer
};

app::train::TrainOptions options(const Run& c, uint32_t dp, uint64_t steps) {
  app::train::TrainOptions o;
  o.spec = test::spec32();
  o.dp = dp;
  o.accumulation = kGlobalBatch / dp;
  o.steps = steps;
  o.micro_batch = 2;
  o.seed = 5;
  PipelineConfig& p = o.pipeline;
  p.optimizer = c.opt;
  p.dist_opt = c.dist;
  p.lr = c.opt == K::lion ? 1e-3 : 3e-3;
  p.clip_grad = 0.5;
  if (c.bucket_size) p.bucket_size = c.bucket_size;
  test::set_fp8(p, c.fp8);
  return o;
}

struct Outcome {
  std::vector<test::RankSnap> ranks;
  std::vector<app::train::StepMetrics> steps;
};

Outcome run(const app::train::TrainOptions& o, const app::checkpoint::CheckpointOptions& c) {
  Outcome out;
  out.ranks.resize(o.dp);
  const auto r = app::checkpoint::train_with_checkpoints(o, c, [&](uint64_t done, const RankPipeline& p) {
    if (done != o.steps) return;
    test::RankSnap& s = out.ranks[p.state().rank];
    for (uint32_t i = 0; i < p.spec().params.size(); ++i) s.bytes.push_back(p.stored_bytes(i));
    s.state = p.state();
  });
  out.steps = r.train.steps;
  return out;
}

bool same_part(const OptimizerState& a, const OptimizerState& b) {
  return a.step == b.step && test::same_floats(a.master, b.master) && test::same_floats(a.exp_avg, b.exp_avg) &&
         test::same_floats(a.exp_avg_sq, b.exp_avg_sq) && test::same_floats(a.momentum, b.momentum);
}

bool same_fp8(const std::vector<Fp8ParamState>& a, const std::vector<Fp8ParamState>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!test::same_floats(a[i].scales.scale, b[i].scales.scale) || a[i].scales.e8m0 != b[i].scales.e8m0 ||
        a[i].scales.e8m0_col != b[i].scales.e8m0_col ||
        !test::same_floats(a[i].delayed.amax_history, b[i].delayed.amax_history) ||
        std::memcmp(&a[i].delayed.scale, &b[i].delayed.scale, 4) != 0)
      return false;
  return true;
}

// Bitwise: params (data and scales), optimizer parts, FP8 state on every rank; and the losses.
void require_same(const Outcome& a, const Outcome& b) {
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    INFO("rank " << r);
    REQUIRE(a.ranks[r].bytes == b.ranks[r].bytes);
    REQUIRE(same_part(a.ranks[r].state.bucketed, b.ranks[r].state.bucketed));
    REQUIRE(same_part(a.ranks[r].state.layer_wise, b.ranks[r].state.layer_wise));
    REQUIRE(same_fp8(a.ranks[r].state.fp8, b.ranks[r].state.fp8));
  }
  REQUIRE(a.steps.size() >= b.steps.size());
  for (size_t i = 0; i < b.steps.size(); ++i) {
    const auto& x = a.steps[a.steps.size() - b.steps.size() + i];
    REQUIRE(x.step == b.steps[i].step);
    REQUIRE(std::memcmp(&x.loss, &b.steps[i].loss, sizeof x.loss) == 0);
    REQUIRE(std::memcmp(&x.grad_norm, &b.steps[i].grad_norm, sizeof x.grad_norm) == 0);
  }
}

void require_valid(const std::string& dir) {
  fpckpt::ValidateOptions vo;
  vo.data = true;
  const auto rep = fpckpt::validate_checkpoint(dir, vo);
  for (const auto& p : rep.problems) UNSCOPED_INFO(ckpt::to_string(p));
  REQUIRE(rep.problems.empty());
  REQUIRE(rep.layout_checked);
}

void require_equal(const std::string& a, const std::string& b) {
  const fpckpt::CheckpointReader ra(a), rb(b);
  const auto rep = fpckpt::diff_checkpoints(ra, rb, {});
  for (const auto& d : rep.diffs) UNSCOPED_INFO(d.key << ": " << d.what << " " << d.detail);
  REQUIRE(rep.equal());
  REQUIRE(rep.keys_compared > 0);
}

// The source run at every DP size, saving at kSaveAt (global batch 24 at every DP).
std::map<uint32_t, std::string> sources(const Run& c, const std::vector<uint32_t>& dps, const std::string& dir) {
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  std::map<uint32_t, std::string> out;
  for (uint32_t dp : dps) {
    app::checkpoint::CheckpointOptions k;
    k.save = dir + "/dp" + std::to_string(dp);
    k.layout = c.layout;
    k.chunk_bytes = 8 << 10;  // several chunks per run: pieces and chunks do not line up
    run(options(c, dp, kSaveAt), k);
    out[dp] = k.save + "/" + app::checkpoint::checkpoint_name(kSaveAt);
  }
  return out;
}

// The reference: reads a checkpoint's values per param in model space (layout `model` keys, or the
// param's slice of its bucket key) and fills a pipeline's rank with them.
struct Oracle {
  const fpckpt::CheckpointReader& r;

  void read(const std::string& name, void* out, uint64_t n) const {
    const long k = r.find_key(name);
    REQUIRE(k >= 0);
    REQUIRE(r.index().keys[k].numel() == n);
    r.read(static_cast<uint32_t>(k), 0, n, out);
  }
  std::vector<float> param_state(const model::Param& p, const std::string& state) const {
    std::vector<float> v(p.numel());
    const std::string name = ckpt::model_state_key(p.name, state);
    if (r.find_key(name) >= 0) {
      read(name, v.data(), v.size());
      return v;
    }
    const auto view = ckpt::bucket_state_view(r.index());
    REQUIRE(view.has_value());
    for (const auto& s : *view)
      if (s.key.name == name) {
        r.read(s.source, s.offset, s.offset + v.size(), v.data());
        return v;
      }
    FAIL("no state " << name);
    return v;
  }
  uint64_t restore(RankPipeline& rank) const {
    RankState& rs = rank.state();
    const model::ModelSpec& spec = rank.spec();
    for (OptimizerState* st : {&rs.bucketed, &rs.layer_wise}) {
      const std::pair<const char*, std::vector<float>*> arenas[] = {
          {"master", &st->master}, {"exp_avg", &st->exp_avg}, {"exp_avg_sq", &st->exp_avg_sq},
          {"momentum_buffer", &st->momentum}};
      for (const auto& [state, arena] : arenas) {
        if (arena->empty()) continue;
        for (const StateFragment& f : st->fragments) {
          const std::vector<float> full = param_state(spec.params[f.param], state);
          std::memcpy(arena->data() + f.offset, full.data() + f.param_range.begin, f.param_range.size() * 4);
        }
      }
    }
    const auto opt = nlohmann::json::parse(*r.index().documents.get(ckpt::doc::optimizer));
    rs.bucketed.step = opt.at("step").get<int64_t>();
    rs.layer_wise.step = rank.layer_wise_layout() ? rs.bucketed.step : 0;
    for (Fp8ParamState& s : rs.fp8) {
      const std::string& n = spec.params[s.param].name;
      if (!s.scales.scale.empty()) {
        read(ckpt::fp8_state_key(n, "scale"), s.scales.scale.data(), s.scales.scale.size());
        read(ckpt::fp8_state_key(n, "scale_inv"), s.scales.scale_inv.data(), s.scales.scale_inv.size());
      }
      if (!s.scales.e8m0.empty()) read(ckpt::fp8_state_key(n, "scale_e8m0"), s.scales.e8m0.data(), s.scales.e8m0.size());
      if (!s.scales.e8m0_col.empty())
        read(ckpt::fp8_state_key(n, "columnwise_scale_e8m0"), s.scales.e8m0_col.data(), s.scales.e8m0_col.size());
      if (is_delayed(rank.config().fp8)) {
        read(ckpt::fp8_state_key(n, "amax_history"), s.delayed.amax_history.data(), s.delayed.amax_history.size());
        float next[2];
        read(ckpt::fp8_state_key(n, "delayed_scale"), next, 2);
        s.delayed.scale = next[0];
        s.delayed.scale_inv = next[1];
      }
    }
    for (uint32_t p = 0; p < spec.params.size(); ++p) {
      const ParamStorage st = rank.param_storage(p);
      if (!rank.is_fp8(p)) {
        read(ckpt::weight_key(spec.params[p].name), st.data, st.numel);
        continue;
      }
      if (st.data) read(ckpt::fp8_data_key(spec.params[p].name), st.data, st.numel);
      if (st.col) read(ckpt::fp8_columnwise_key(spec.params[p].name), st.col, st.numel);
    }
    rank.params_loaded();
    return kSaveAt;
  }
};

// A DP-M run of `to` continued to kEnd from the state in checkpoint `src`, filled in by the oracle.
Outcome continued_from(const std::string& src, const Run& to, uint32_t m) {
  const fpckpt::CheckpointReader r(src);
  const Oracle oracle{r};
  const app::train::TrainOptions o = options(to, m, kEnd);
  Outcome out;
  out.ranks.resize(m);
  app::train::TrainHooks hooks;
  hooks.resume = [&](RankPipeline& rank, comm::Communicator&) { return oracle.restore(rank); };
  const auto res = app::train::train(o, [&](uint64_t done, const RankPipeline& p) {
    if (done != o.steps) return;
    test::RankSnap& s = out.ranks[p.state().rank];
    for (uint32_t i = 0; i < p.spec().params.size(); ++i) s.bytes.push_back(p.stored_bytes(i));
    s.state = p.state();
  }, {}, hooks);
  out.steps = res.steps;
  return out;
}

fpckpt::ReshardRequest request(const std::string& src, const std::string& dst, uint32_t dp, const Run& to) {
  fpckpt::ReshardRequest q;
  q.source = src;
  q.target = dst;
  q.options.dp = dp;
  q.options.dist_opt = to.dist;
  q.options.state_layout = to.layout;
  q.options.bucket_size = to.bucket_size ? std::optional<uint64_t>(to.bucket_size) : std::nullopt;
  q.chunk_bytes = 4 << 10;
  return q;
}

// Reshard every N to every M, check, and continue (all pairs, or those from the first DP or to the last).
void check_matrix(const Run& from, const Run& to, const std::vector<uint32_t>& dps, bool continue_all) {
  TempDir tmp;
  const auto src = sources(from, dps, tmp.path + "/src");
  for (uint32_t n : dps)
    for (uint32_t m : dps) {
      INFO("DP " << n << " -> " << m);
      const std::string out = tmp.path + "/r" + std::to_string(n) + "-" + std::to_string(m);
      const auto res = fpckpt::reshard_checkpoint(request(src.at(n), out, m, to));
      REQUIRE(res.result.has_value());
      require_valid(out);
      require_equal(src.at(n), out);  // values preserved bitwise
      if (!continue_all && n != dps.front() && m != dps.back()) continue;
      app::checkpoint::CheckpointOptions load;
      load.load = out;
      require_same(continued_from(src.at(n), to, m), run(options(to, m, kEnd), load));  // invariant 5
    }
}

const std::vector<uint32_t> kDps = {1, 2, 3, 4, 8};

}  // namespace

TEST_CASE("reshard plan: chunks a run reads are exactly those intersecting its source range", "[reshard]") {
  ckpt::Index ix;
  ix.keys.push_back({"k", DType::F32, {100}, ckpt::KeyKind::other});
  ix.files.push_back({"rank-00000.h5", 0, 0});
  ix.runs.push_back({0, 0, 0, 10, 0, 40, DType::F32, 0});
  ix.runs.push_back({0, 1, 0, 16, 60, 40, DType::F32, 0});
  for (uint64_t off : {0, 10, 20, 30}) ix.chunks.push_back({0, 0, 0, 10, off, 40, 0, 0, 0});
  for (uint64_t off : {60, 76, 92}) ix.chunks.push_back({1, 0, 0, off == 92 ? 8u : 16u, off, 64, 0, 0, 0});
  ix.padding.push_back({0, 40, 60});
  REQUIRE(ckpt::check_index(ix).empty());
  const std::vector<uint32_t> by_key = {0, 1, 2, 3, 4, 5, 6};
  auto brute = [&](uint64_t lo, uint64_t hi) {
    std::vector<uint32_t> v;
    for (uint32_t c = 0; c < ix.chunks.size(); ++c)
      if (ix.chunks[c].offset < hi && ix.chunks[c].hi() > lo) v.push_back(c);
    return v;
  };
  for (uint64_t lo = 0; lo < 100; lo += 3)
    for (uint64_t hi = lo; hi <= 100; hi += 7) {
      INFO("[" << lo << ", " << hi << ")");
      REQUIRE(ckpt::intersecting_chunks(ix, by_key, lo, hi) == (lo < hi ? brute(lo, hi) : std::vector<uint32_t>{}));
    }
  REQUIRE(ckpt::intersecting_chunks(ix, by_key, 40, 60).empty());  // padding only
  REQUIRE(ckpt::intersecting_chunks(ix, by_key, 9, 11) == std::vector<uint32_t>{0, 1});
}

TEST_CASE("reshard plan: empty ranks, bucket membership changes, the source of every run", "[reshard]") {
  TempDir tmp;
  const Run lw{K::muon, DistOpt::layerwise, "none", SL::bucket, 3000};
  app::checkpoint::CheckpointOptions k;
  k.save = tmp.path + "/lw";
  k.layout = lw.layout;
  run(options(lw, 2, 1), k);
  const fpckpt::CheckpointReader src(k.save);

  // DP 8 with one bucket per param: 4 matrices leave ranks 4-7 without any (no momentum_buffer
  // keys), and a 64-element norm bucket (padded to 128, 16 per rank) leaves ranks 4-7 padding only.
  fpckpt::ReshardOptions o;
  o.dp = 8;
  o.bucket_size = std::optional<uint64_t>(1);
  const auto t = fpckpt::plan_reshard(src.index(), src.dir(), o);
  REQUIRE(t.plan.ranks.size() == 8);
  REQUIRE(t.target.accumulation == 3);  // 2 x 12 micro-batches over 8 ranks
  std::map<std::string, uint32_t> plan_key;
  for (uint32_t i = 0; i < t.plan.keys.size(); ++i) plan_key[t.plan.keys[i].name] = i;
  for (uint32_t r = 0; r < 8; ++r) {
    INFO("rank " << r);
    bool momentum = false;
    for (const auto& run : t.plan.ranks[r].runs)
      momentum = momentum || t.plan.keys[run.key].name.find("momentum_buffer") != std::string::npos;
    REQUIRE(momentum == (r < 4));
  }
  // A bucket key of a 64-element param: ranks 0-3 write 16 elements each, 4-7 nothing.
  std::string norm_key;
  for (const auto& key : t.plan.keys)
    if (key.name.rfind("optimizer/buffer", 0) == 0 && key.shape == std::vector<uint64_t>{64} &&
        key.name.find("/master") != std::string::npos)
      norm_key = key.name;
  REQUIRE(!norm_key.empty());
  for (uint32_t r = 0; r < 8; ++r) {
    uint64_t n = 0;
    for (const auto& run : t.plan.ranks[r].runs)
      if (run.key == plan_key[norm_key]) n += run.numel;
    REQUIRE(n == (r < 4 ? 16u : 0u));
  }
  // Every run reads one source key inside its extent; bucket keys come from other bucket numbers
  // (membership changed: 3000-element buckets in the source, one param per bucket in the target).
  bool moved = false;
  for (const auto& rp : t.plan.ranks)
    for (const auto& run : rp.runs) {
      const ckpt::Key& s = src.index().keys[run.src_key];
      REQUIRE(run.src_lo + run.numel <= s.numel());
      const std::string& tn = t.plan.keys[run.key].name;
      if (tn.rfind("optimizer/buffer", 0) == 0 && s.name.rfind("optimizer/buffer", 0) == 0 &&
          tn.substr(0, tn.rfind('/')) != s.name.substr(0, s.name.rfind('/')))
        moved = true;
    }
  REQUIRE(moved);

  // Muon cannot go bucketed; the global batch must split (or --accumulation given).
  o.dist_opt = DistOpt::bucketed;
  REQUIRE_THROWS_AS(fpckpt::plan_reshard(src.index(), src.dir(), o), UsageError);
  o.dist_opt.reset();
  o.dp = 5;
  REQUIRE_THROWS_AS(fpckpt::plan_reshard(src.index(), src.dir(), o), UsageError);
  o.accumulation = 3;
  REQUIRE(fpckpt::plan_reshard(src.index(), src.dir(), o).target.accumulation == 3);
}

TEST_CASE("reshard refuses an invalid source and an existing target; leaves nothing behind", "[reshard]") {
  TempDir tmp;
  const Run c{K::adamw, DistOpt::bucketed, "none", SL::model, 0};
  app::checkpoint::CheckpointOptions k;
  k.save = tmp.path + "/ck";
  run(options(c, 2, 1), k);
  // An existing target: UsageError, the target untouched.
  REQUIRE_THROWS_AS(fpckpt::reshard_checkpoint(request(k.save, k.save, 1, c)), UsageError);
  // A missing data file: index validation refuses it (InvalidCheckpoint, exit 1), and no target appears.
  const std::string dir = fpckpt::resolve_checkpoint(k.save);
  REQUIRE(unlink((dir + "/rank-00001.h5").c_str()) == 0);
  const std::string out = tmp.path + "/out";
  bool refused = false;
  try {
    fpckpt::reshard_checkpoint(request(k.save, out, 1, c));
  } catch (const fpckpt::InvalidCheckpoint& e) {
    refused = e.code() == ExitCode::check_failed && std::string(e.what()).find("not a valid checkpoint") != std::string::npos;
  }
  REQUIRE(refused);
  struct stat st {};
  REQUIRE(stat(out.c_str(), &st) != 0);
}

TEST_CASE("reshard N -> M, bucketed: validate, diff, invariant 5", "[reshard]") {
  SECTION("adamw, model -> bucket layout") {
    check_matrix({K::adamw, DistOpt::bucketed, "none", SL::model, 3000},
                 {K::adamw, DistOpt::bucketed, "none", SL::bucket, 3000}, kDps, true);
  }
  SECTION("adam tensorwise, bucket -> model layout") {
    check_matrix({K::adam, DistOpt::bucketed, "tensorwise", SL::bucket, 3000},
                 {K::adam, DistOpt::bucketed, "tensorwise", SL::model, 3000}, kDps, false);
  }
  SECTION("lion delayed, bucket sizes 3000 -> one bucket") {
    check_matrix({K::lion, DistOpt::bucketed, "delayed", SL::bucket, 3000},
                 {K::lion, DistOpt::bucketed, "delayed", SL::bucket, 0}, kDps, false);
  }
}

TEST_CASE("reshard N -> M, layer-wise: validate, diff, invariant 5", "[reshard]") {
  SECTION("muon blockwise, model -> bucket layout") {
    check_matrix({K::muon, DistOpt::layerwise, "blockwise", SL::model, 0},
                 {K::muon, DistOpt::layerwise, "blockwise", SL::bucket, 0}, kDps, false);
  }
  SECTION("adamw mxfp8, bucket -> model layout, buckets 2000 -> 5000") {
    check_matrix({K::adamw, DistOpt::layerwise, "mxfp8", SL::bucket, 2000},
                 {K::adamw, DistOpt::layerwise, "mxfp8", SL::model, 5000}, kDps, false);
  }
  SECTION("lion, adam") {
    check_matrix({K::lion, DistOpt::layerwise, "none", SL::model, 0},
                 {K::lion, DistOpt::layerwise, "none", SL::model, 0}, {1, 3, 8}, false);
    check_matrix({K::adam, DistOpt::layerwise, "delayed", SL::bucket, 0},
                 {K::adam, DistOpt::layerwise, "delayed", SL::bucket, 0}, {2, 4}, false);
  }
}

TEST_CASE("reshard across distributed optimizers: bucketed <-> layer-wise", "[reshard]") {
  SECTION("adamw tensorwise bucketed -> layer-wise") {
    check_matrix({K::adamw, DistOpt::bucketed, "tensorwise", SL::bucket, 3000},
                 {K::adamw, DistOpt::layerwise, "tensorwise", SL::model, 3000}, {1, 3, 4}, false);
  }
  SECTION("lion layer-wise -> bucketed") {
    check_matrix({K::lion, DistOpt::layerwise, "none", SL::model, 0},
                 {K::lion, DistOpt::bucketed, "none", SL::bucket, 0}, {2, 8}, false);
  }
}
