// lib/ARCHITECTURE.md invariant 4: save at step k, load, continue to N equals N uninterrupted steps, bit for
// bit (params with their FP8 scales and delayed histories, masters, optimizer states, step counts,
// losses), across optimizers, both pipelines, every FP8 recipe, both state layouts, compression
// none/zstd and DP 1/2/3; a run that saves equals one that does not; every saved checkpoint passes
// `validate --data`; a resume reads each chunk once over all ranks. Also: refusals of another run's
// checkpoint and of an invalid one, --keep, `latest`, a crash in the middle of a save, and one cut
// short before `latest` was updated.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"
#include "pipeline_test_util.h"
#include "app/checkpoint/checkpointing.h"

using namespace fpg;
using namespace fpg::pipeline;

namespace {

// A fresh directory; `path` (a checkpoint root inside it) does not exist yet: the save creates it.
struct TempDir {
  std::string base, path;
  explicit TempDir(const std::string& tag) {
    char tmpl[] = "/tmp/fpg-resume-XXXXXX";
    const char* d = mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    base = d;
    path = base + "/" + tag;
  }
  ~TempDir() { fs::remove_tree(base); }
};

bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Case {
  const char* name;
  optim::OptimizerKind opt;
  DistOpt dist;
  const char* fp8;
  ckpt::StateLayout layout;
  const char* compress;
  uint32_t dp;
  uint64_t bucket_size = 0;  // 0: one bucket per buffer
  const char* keep_fp32 = "";
  bool fp32_matrices = false;
  optim::ScalarOptimizer scalar = optim::ScalarOptimizer::adamw;
};

app::train::TrainOptions options(const Case& c, uint64_t steps) {
  app::train::TrainOptions o;
  o.spec = test::spec32();
  o.dp = c.dp;
  o.steps = steps;
  o.micro_batch = 8;
  o.seed = 77;
  o.keep_fp32 = c.keep_fp32;
  PipelineConfig& p = o.pipeline;
  p.optimizer = c.opt;
  p.dist_opt = c.dist;
  p.scalar_optimizer = c.scalar;
  p.lr = c.opt == optim::OptimizerKind::lion ? 1e-3 : 3e-3;
  p.clip_grad = 0.5;  // clipping active: the grad norm path is part of the continuation
  p.fp32_matrices = c.fp32_matrices;
  if (c.bucket_size) p.bucket_size = c.bucket_size;
  test::set_fp8(p, c.fp8);  // delayed: history 4, algo max
  return o;
}

// What every rank holds at the end, and the metrics of every step taken.
struct Outcome {
  std::vector<test::RankSnap> ranks;
  std::vector<app::train::StepMetrics> steps;
  app::checkpoint::CheckpointLog log;
};

Outcome run(const app::train::TrainOptions& o, const app::checkpoint::CheckpointOptions& c) {
  Outcome out;
  out.ranks.resize(o.dp);
  const auto r = app::checkpoint::train_with_checkpoints(o, c, [&](uint64_t done, const RankPipeline& p) {
    if (done != o.steps) return;
    test::RankSnap& s = out.ranks[p.state().rank];
    s.bytes.resize(p.spec().params.size());
    for (uint32_t i = 0; i < p.spec().params.size(); ++i) s.bytes[i] = p.stored_bytes(i);
    s.state = p.state();
  });
  out.steps = r.train.steps;
  out.log = r.checkpoints;
  return out;
}

bool same_part(const OptimizerState& a, const OptimizerState& b) {
  return a.step == b.step && test::same_floats(a.master, b.master) && test::same_floats(a.exp_avg, b.exp_avg) &&
         test::same_floats(a.exp_avg_sq, b.exp_avg_sq) && test::same_floats(a.momentum, b.momentum);
}

bool same_fp8(const std::vector<Fp8ParamState>& a, const std::vector<Fp8ParamState>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& x = a[i].scales;
    const auto& y = b[i].scales;
    if (!test::same_floats(x.scale, y.scale) || !test::same_floats(x.scale_inv, y.scale_inv) || x.e8m0 != y.e8m0 ||
        x.e8m0_col != y.e8m0_col || !test::same_floats(a[i].delayed.amax_history, b[i].delayed.amax_history) ||
        std::memcmp(&a[i].delayed.scale, &b[i].delayed.scale, 4) != 0 ||
        std::memcmp(&a[i].delayed.scale_inv, &b[i].delayed.scale_inv, 4) != 0)
      return false;
  }
  return true;
}

// Bitwise: every rank's params (data, scales, delayed state), optimizer parts and FP8 state.
void require_same_end(const Outcome& a, const Outcome& b) {
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    INFO("rank " << r);
    REQUIRE(a.ranks[r].bytes == b.ranks[r].bytes);
    REQUIRE(same_part(a.ranks[r].state.bucketed, b.ranks[r].state.bucketed));
    REQUIRE(same_part(a.ranks[r].state.layer_wise, b.ranks[r].state.layer_wise));
    REQUIRE(same_fp8(a.ranks[r].state.fp8, b.ranks[r].state.fp8));
  }
}

// The metrics of steps [from, N) of `full` equal `part`'s, bitwise.
void require_same_steps(const std::vector<app::train::StepMetrics>& full, const std::vector<app::train::StepMetrics>& part,
                        uint64_t from) {
  REQUIRE(full.size() == from + part.size());
  for (size_t i = 0; i < part.size(); ++i) {
    const auto& x = full[from + i];
    const auto& y = part[i];
    INFO("step " << x.step);
    REQUIRE(y.step == x.step);
    REQUIRE(std::memcmp(&x.loss, &y.loss, sizeof x.loss) == 0);
    REQUIRE(std::memcmp(&x.grad_norm, &y.grad_norm, sizeof x.grad_norm) == 0);
    REQUIRE(x.skipped == y.skipped);
  }
}

void require_valid(const std::string& dir) {
  fpckpt::ValidateOptions vo;
  vo.data = true;
  const auto rep = fpckpt::validate_checkpoint(dir, vo);
  for (const auto& p : rep.problems) UNSCOPED_INFO(p.key << " [" << p.lo << ", " << p.hi << ") " << p.message);
  REQUIRE(rep.problems.empty());
  REQUIRE(rep.layout_checked);
  REQUIRE(rep.chunks_read == rep.chunks);
}

app::checkpoint::CheckpointOptions ckpt_opts(const Case& c, const std::string& save, uint64_t every) {
  app::checkpoint::CheckpointOptions k;
  k.save = save;
  k.save_every = every;
  k.layout = c.layout;
  k.compression = ckpt::parse_compression(c.compress);
  k.chunk_bytes = 16 << 10;  // several chunks per run
  return k;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

}  // namespace

TEST_CASE("save at k, load, continue to N equals N uninterrupted steps, bitwise", "[resume]") {
  using K = optim::OptimizerKind;
  using SL = ckpt::StateLayout;
  const Case cases[] = {
      {"adamw bucketed", K::adamw, DistOpt::bucketed, "none", SL::model, "zstd", 2},
      {"adam bucketed tensorwise, buckets", K::adam, DistOpt::bucketed, "tensorwise", SL::bucket, "none", 3, 8192},
      {"lion bucketed delayed", K::lion, DistOpt::bucketed, "delayed", SL::model, "zstd:3+shuffle", 2},
      {"adamw bucketed delayed, buckets", K::adamw, DistOpt::bucketed, "delayed", SL::bucket, "zstd", 3, 8192},
      {"adamw bucketed blockwise dp1", K::adamw, DistOpt::bucketed, "blockwise", SL::bucket, "zstd", 1},
      {"adamw bucketed blockwise-1x128", K::adamw, DistOpt::bucketed, "blockwise-1x128", SL::model, "none", 2},
      {"adam bucketed mxfp8", K::adam, DistOpt::bucketed, "mxfp8", SL::model, "none", 3},
      {"adamw bucketed fp32-kept fc2", K::adamw, DistOpt::bucketed, "tensorwise", SL::bucket, "zstd", 2, 0, "fc2"},
      {"muon layerwise", K::muon, DistOpt::layerwise, "none", SL::model, "zstd", 2},
      {"muon layerwise delayed", K::muon, DistOpt::layerwise, "delayed", SL::bucket, "none", 3},
      {"muon layerwise tensorwise (compact)", K::muon, DistOpt::layerwise, "tensorwise", SL::model, "zstd", 3},
      {"muon layerwise blockwise dp1", K::muon, DistOpt::layerwise, "blockwise", SL::model, "none", 1},
      {"muon layerwise mxfp8", K::muon, DistOpt::layerwise, "mxfp8", SL::bucket, "zstd", 2},
      {"muon+lion layerwise, fp32 matrices", K::muon, DistOpt::layerwise, "none", SL::bucket, "zstd", 2, 0, "fc2",
       true, optim::ScalarOptimizer::lion},
      {"adamw layerwise delayed", K::adamw, DistOpt::layerwise, "delayed", SL::model, "zstd", 2},
  };
  const uint64_t N = 6, k = 3;
  for (const Case& c : cases) {
    SECTION(c.name) {
      TempDir tmp("run");
      const app::train::TrainOptions full = options(c, N);
      const Outcome plain = run(full, {});
      // The same run saving at k and N: saving does not perturb it.
      const Outcome saving = run(full, ckpt_opts(c, tmp.path, k));
      require_same_end(plain, saving);
      require_same_steps(plain.steps, saving.steps, 0);
      REQUIRE(saving.log.saved.size() == 2);
      REQUIRE(saving.log.save_seconds.size() == 2);
      for (double s : saving.log.save_seconds) CHECK(s > 0);
      for (const auto& dir : saving.log.saved) require_valid(dir);
      // Resume from step k (not `latest`, which is N) and continue to N.
      app::checkpoint::CheckpointOptions load;
      load.load = tmp.path + "/" + app::checkpoint::checkpoint_name(k);
      const Outcome resumed = run(full, load);
      REQUIRE(resumed.log.loaded_step == k);
      require_same_steps(plain.steps, resumed.steps, k);
      require_same_end(plain, resumed);
      // The ranks together read every chunk exactly once (the weights are not read once per rank).
      const fpckpt::CheckpointReader saved(load.load);
      uint64_t stored = 0;
      for (const auto& ch : saved.index().chunks) stored += ch.stored_bytes;
      CHECK(resumed.log.loaded_chunks == saved.index().chunks.size());
      CHECK(resumed.log.loaded_bytes == stored);
      CHECK(resumed.log.load_seconds > 0);
      CHECK(resumed.log.save_seconds.empty());
    }
  }
}

TEST_CASE("a checkpoint of another run is refused, saying what differs", "[resume]") {
  TempDir tmp("refuse");
  const Case c{"base", optim::OptimizerKind::adamw, DistOpt::bucketed, "none", ckpt::StateLayout::model, "zstd", 2};
  run(options(c, 2), ckpt_opts(c, tmp.path, 0));
  app::checkpoint::CheckpointOptions load;
  load.load = tmp.path;  // a root holding `latest`
  auto refusal = [&](app::train::TrainOptions o) { return message_of([&] { run(o, load); }); };

  app::train::TrainOptions o = options(c, 4);
  o.dp = 3;
  std::string m = refusal(o);
  INFO(m);
  REQUIRE(m.find("saved at DP 2 and this run has DP 3") != std::string::npos);
  // The exact command that makes a checkpoint this run accepts (the global batch of 2 micro-batches
  // does not split over 3 ranks, so the run's accumulation is named).
  const std::string saved = tmp.path + "/step-00000002", beside = tmp.path + "-step-00000002";
  REQUIRE(m.find("`fpgather reshard " + saved + " " + beside + "-dp3 --dp 3 --accumulation 1`") != std::string::npos);

  o = options(c, 4);
  o.pipeline.dist_opt = DistOpt::layerwise;
  m = refusal(o);
  REQUIRE(m.find("--dist-opt bucketed") != std::string::npos);
  REQUIRE(m.find("`fpgather reshard " + saved + " " + beside + "-dp2 --dp 2 --dist-opt layerwise`") != std::string::npos);

  o = options(c, 4);
  o.pipeline.bucket_size = 4096;
  m = refusal(o);
  REQUIRE(m.find("the layout differs at /bucket_size: the checkpoint has null, this run 4096") != std::string::npos);
  REQUIRE(m.find("`fpgather reshard " + saved + " " + beside + "-dp2 --dp 2 --bucket-size 4096`") != std::string::npos);

  o = options(c, 4);
  o.spec = model::preset("tiny");
  m = refusal(o);
  REQUIRE(m.find("the model differs at /") != std::string::npos);

  o = options(c, 4);
  o.pipeline.optimizer = optim::OptimizerKind::lion;
  m = refusal(o);
  REQUIRE(m.find("the optimizer config differs at /name: the checkpoint has \"adamw\", this run \"lion\"") !=
          std::string::npos);

  o = options(c, 4);
  o.pipeline.beta1 = 0.8;
  m = refusal(o);
  REQUIRE(m.find("the optimizer config differs at /hyperparameters/beta1") != std::string::npos);

  // The lr, weight decay and clipping may change on resume (app/checkpoint/run_settings.h).
  o = options(c, 4);
  o.pipeline.lr = 1e-2;
  o.pipeline.weight_decay = 0;
  o.pipeline.clip_grad = 0.25;
  REQUIRE(message_of([&] { run(o, load); }) == "(no UsageError)");

  o = options(c, 4);
  test::set_fp8(o.pipeline, "tensorwise");
  m = refusal(o);
  REQUIRE(m.find("the FP8 recipe differs") != std::string::npos);

  o = options(c, 4);
  o.seed = 78;
  m = refusal(o);
  REQUIRE(m.find("the data stream differs at /seed: the checkpoint has 77, this run 78") != std::string::npos);

  // --steps is the step count to reach: below the checkpoint's is refused, equal runs nothing.
  o = options(c, 1);
  m = refusal(o);
  REQUIRE(m.find("more than steps 1") != std::string::npos);  // the field: the command line says --steps
  o = options(c, 2);
  REQUIRE(run(o, load).steps.empty());
}

TEST_CASE("retention (--keep) and `latest`", "[resume]") {
  TempDir tmp("keep");
  const Case c{"base", optim::OptimizerKind::adamw, DistOpt::bucketed, "none", ckpt::StateLayout::bucket, "none", 2};
  app::checkpoint::CheckpointOptions k = ckpt_opts(c, tmp.path, 1);
  k.keep = 2;
  const Outcome o = run(options(c, 4), k);
  REQUIRE(o.log.saved.size() == 4);
  REQUIRE(o.log.removed == std::vector<std::string>{"step-00000001", "step-00000002"});
  REQUIRE(entries(tmp.path) == std::vector<std::string>{"latest", "step-00000003", "step-00000004"});
  REQUIRE(fpckpt::resolve_checkpoint(tmp.path) == tmp.path + "/step-00000004");
  // Loading the root resumes from the checkpoint `latest` names.
  app::checkpoint::CheckpointOptions load;
  load.load = tmp.path;
  const Outcome more = run(options(c, 5), load);
  REQUIRE(more.log.loaded == tmp.path + "/step-00000004");
  REQUIRE(more.steps.size() == 1);
  REQUIRE(more.steps[0].step == 4);
  // Options that cannot work.
  app::checkpoint::CheckpointOptions bad;
  bad.save_every = 2;
  REQUIRE(message_of([&] { run(options(c, 2), bad); }).find("save_every needs save") != std::string::npos);
}

TEST_CASE("a crash in the middle of a save leaves `latest` on the previous checkpoint", "[resume]") {
  TempDir tmp("crash");
  const Case c{"base", optim::OptimizerKind::adamw, DistOpt::bucketed, "delayed", ckpt::StateLayout::model, "zstd", 3};
  app::checkpoint::CheckpointOptions k = ckpt_opts(c, tmp.path, 2);
  k.before_finish = [](uint32_t rank, uint64_t step) {
    if (step == 4 && rank == 1) throw FormatError("simulated crash of rank 1 while writing step 4");
  };
  bool threw = false;
  try {
    run(options(c, 6), k);
  } catch (const FormatError& e) {
    threw = std::string(e.what()).find("simulated crash") != std::string::npos;
  }
  REQUIRE(threw);
  // Step 2 is complete and `latest`; step 4 exists under no name, not even as a staging directory.
  REQUIRE(entries(tmp.path) == std::vector<std::string>{"latest", "step-00000002"});
  REQUIRE(fpckpt::resolve_checkpoint(tmp.path) == tmp.path + "/step-00000002");
  require_valid(tmp.path);
  // And the run resumes from it, as if uninterrupted.
  const Outcome plain = run(options(c, 4), {});
  app::checkpoint::CheckpointOptions load;
  load.load = tmp.path;
  const Outcome resumed = run(options(c, 4), load);
  require_same_steps(plain.steps, resumed.steps, 2);
  require_same_end(plain, resumed);
}

TEST_CASE("a checkpoint that fails validation is refused before anything is resumed", "[resume]") {
  TempDir tmp("invalid");
  const Case c{"base", optim::OptimizerKind::adamw, DistOpt::bucketed, "none", ckpt::StateLayout::bucket, "none", 2};
  run(options(c, 2), ckpt_opts(c, tmp.path, 2));
  const std::string dir = tmp.path + "/step-00000002", index = dir + "/" + fpckpt::kIndexFile;
  const ckpt::Index good = fpckpt::read_index(index);
  // Each edit resealed (the index checks catch it) but for the last one, whose index no longer
  // matches its checksum.
  // A data chunk of a key under `prefix` turned into declared padding: it would resume as zeros.
  auto chunk_to_padding = [](const std::string& prefix) {
    return [prefix](ckpt::Index& ix) {
      for (size_t c = 0; c < ix.chunks.size(); ++c)
        if (ix.keys[ix.chunks[c].key].name.rfind(prefix, 0) == 0) {
          ix.padding.push_back({ix.chunks[c].key, ix.chunks[c].offset, ix.chunks[c].hi()});
          ix.chunks.erase(ix.chunks.begin() + static_cast<long>(c));
          return;
        }
      FAIL("no key under " << prefix);
    };
  };
  const std::vector<std::pair<std::string, std::function<void(ckpt::Index&)>>> edits = {
      {"layout_mismatch", chunk_to_padding("optimizer/")},
      {"layout_mismatch", chunk_to_padding("weight/")},
      {"overlap", [](ckpt::Index& ix) { ix.chunks.push_back(ix.chunks.back()); }},  // a duplicated chunk
      {"overlap",  // padding declared over data
       [](ckpt::Index& ix) { ix.padding.push_back({ix.chunks[0].key, ix.chunks[0].offset, ix.chunks[0].hi()}); }},
  };
  app::checkpoint::CheckpointOptions load;
  load.load = tmp.path;
  for (const auto& [kind, edit] : edits) {
    ckpt::Index ix = good;
    edit(ix);
    unlink(index.c_str());
    fpckpt::write_index(index, ix);
    std::string msg;
    try {
      run(options(c, 4), load);
    } catch (const fpckpt::InvalidCheckpoint& e) {
      msg = e.what();
    }
    INFO(kind << ": " << msg);
    REQUIRE(msg.find("not a valid checkpoint") != std::string::npos);
    REQUIRE(msg.find("refusing to resume from it") != std::string::npos);
    REQUIRE(msg.find(kind + " ") != std::string::npos);
  }
  // An edited data cursor: the index checksum refuses it.
  unlink(index.c_str());
  fpckpt::write_index(index, good);
  {
    std::ifstream in(index, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const size_t at = bytes.find("\"next_step\":2");
    REQUIRE(at != std::string::npos);
    bytes[at + 12] = '1';
    std::ofstream(index, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string msg;
  try {
    run(options(c, 4), load);
  } catch (const fpckpt::InvalidCheckpoint& e) {
    msg = e.what();
  }
  REQUIRE(msg.find("index_checksum") != std::string::npos);
}

TEST_CASE("a save cut short before `latest` is adopted, and the run saves on", "[resume]") {
  TempDir tmp("adopt");
  const Case c{"base", optim::OptimizerKind::adamw, DistOpt::bucketed, "none", ckpt::StateLayout::model, "zstd", 2};
  run(options(c, 4), ckpt_opts(c, tmp.path, 2));
  // As if killed between step 4's rename and the update of `latest`, beside a staging directory
  // of a save killed earlier.
  fpckpt::update_latest(tmp.path, "step-00000002");
  const std::string stale = tmp.path + "/.step-00000003.tmp-00000000deadbeef";
  REQUIRE(mkdir(stale.c_str(), 0755) == 0);
  struct timeval old[2] = {{1, 0}, {1, 0}};
  REQUIRE(utimes(stale.c_str(), old) == 0);
  app::checkpoint::CheckpointOptions k = ckpt_opts(c, tmp.path, 2);
  k.load = tmp.path;
  const Outcome resumed = run(options(c, 6), k);
  REQUIRE(resumed.log.loaded == tmp.path + "/step-00000004");
  REQUIRE(resumed.log.saved == std::vector<std::string>{tmp.path + "/step-00000006"});
  REQUIRE(resumed.log.recovered.size() == 2);
  REQUIRE(entries(tmp.path) == std::vector<std::string>{"latest", "step-00000002", "step-00000004", "step-00000006"});
  require_valid(tmp.path);
  require_same_end(run(options(c, 6), {}), resumed);
}
