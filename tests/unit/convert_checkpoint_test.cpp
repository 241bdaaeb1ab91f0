// `fpgather convert` of training checkpoints: the param -> key map of both state layouts, export to
// safetensors (fp32 masters and optimizer states equal to what the run held, bitwise), `train
// --init` from that export starting from exactly those masters, and recompression (values equal,
// valid with --data).
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "catch.h"
#include "ckpt/param_state_map.h"
#include "app/convert/checkpoint_export.h"
#include "app/convert/checkpoint_recompress.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/diff.h"
#include "ckpt/param_state_read.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"
#include "formats/safetensors/model.h"
#include "pipeline_test_util.h"
#include "app/checkpoint/checkpointing.h"
#include "app/convert/fp8_reencode.h"

using namespace fpg;
using namespace fpg::pipeline;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-ckptconv-XXXXXX";
    const char* d = mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    path = d;
  }
  ~TempDir() { fs::remove_tree(path); }
};

struct Case {
  const char* name;
  optim::OptimizerKind opt;
  DistOpt dist;
  const char* fp8;
  ckpt::StateLayout layout;
  uint32_t dp;
  uint64_t bucket_size;
};

app::train::TrainOptions options(const Case& c, uint64_t steps) {
  app::train::TrainOptions o;
  o.spec = test::spec32();
  o.dp = c.dp;
  o.steps = steps;
  o.micro_batch = 8;
  o.seed = 5;
  o.pipeline.optimizer = c.opt;
  o.pipeline.dist_opt = c.dist;
  o.pipeline.lr = 3e-3;
  if (c.bucket_size) o.pipeline.bucket_size = c.bucket_size;
  test::set_fp8(o.pipeline, c.fp8);
  return o;
}

// Every param's full state after `steps` (or at the start, steps 0), assembled over the ranks.
test::FullState run(const app::train::TrainOptions& o, const app::checkpoint::CheckpointOptions& c) {
  std::vector<test::RankSnap> snaps(o.dp);
  app::checkpoint::train_with_checkpoints(o, c, [&](uint64_t done, const RankPipeline& p) {
    if (done == o.steps) snaps[p.state().rank].state = p.state();
  });
  return test::full_state(snaps, o.spec);
}

bool same_bytes(const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; }

const char* arena_name(const std::string& state) { return state == "momentum_buffer" ? "momentum" : state.c_str(); }

}  // namespace

TEST_CASE("checkpoint export to safetensors and train --init round trip, bitwise", "[ckptconv]") {
  const Case cases[] = {
      {"adamw bucketed bucket-layout dp2 small buckets", optim::OptimizerKind::adamw, DistOpt::bucketed, "none",
       ckpt::StateLayout::bucket, 2, 5000},
      {"muon layerwise blockwise model-layout dp3", optim::OptimizerKind::muon, DistOpt::layerwise, "blockwise",
       ckpt::StateLayout::model, 3, 0},
      {"lion bucketed mxfp8 bucket-layout dp4", optim::OptimizerKind::lion, DistOpt::bucketed, "mxfp8",
       ckpt::StateLayout::bucket, 4, 0},
      {"muon layerwise delayed bucket-layout dp2", optim::OptimizerKind::muon, DistOpt::layerwise, "delayed",
       ckpt::StateLayout::bucket, 2, 0},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      TempDir tmp;
      app::checkpoint::CheckpointOptions save;
      save.save = tmp.path + "/ck";
      save.layout = c.layout;
      const test::FullState trained = run(options(c, 3), save);
      const model::ModelSpec& spec = test::spec32();

      // The map reads every state of every param back as the run held it.
      const fpckpt::CheckpointReader reader(save.save);
      const ckpt::ParamStateMap map = ckpt::ParamStateMap::from_index(reader.index(), reader.dir());
      for (uint32_t p = 0; p < spec.params.size(); ++p)
        for (const std::string& s : map.states_of(p)) {
          const uint64_t n = spec.params[p].numel();
          std::vector<float> v(n);
          ckpt::read_param_state(reader, map, p, s, 0, n, v.data());
          const auto& want = trained.arrays.at(arena_name(s)).at(p);
          INFO(spec.params[p].name << " " << s);
          REQUIRE(same_bytes(v.data(), want.data(), n * 4));
          // a sub-range too
          std::vector<float> part(n / 2);
          ckpt::read_param_state(reader, map, p, s, n / 4, n / 4 + n / 2, part.data());
          REQUIRE(same_bytes(part.data(), want.data() + n / 4, part.size() * 4));
        }

      // fp32 export with states: the masters and states as held.
      app::convert::ExportOptions eo;
      eo.weights = app::convert::ExportWeights::fp32;
      eo.states = true;
      eo.slab_bytes = 4096;  // many slabs per tensor
      const std::string out = tmp.path + "/w.safetensors";
      const app::convert::ExportSummary sum = app::convert::export_checkpoint(save.save, out, eo);
      REQUIRE(sum.files == std::vector<std::string>{out});
      const auto model = safetensors::Model::open(out);
      for (uint32_t p = 0; p < spec.params.size(); ++p) {
        const std::string& name = spec.params[p].name;
        const uint64_t bytes = spec.params[p].numel() * 4;
        REQUIRE(same_bytes(model.data(model.tensor(name)), trained.arrays.at("master")[p].data(), bytes));
        for (const std::string& s : map.states_of(p)) {
          INFO(name << "." << s);
          const auto& e = model.tensor(name + "." + s);
          REQUIRE(e.info->dtype == DType::F32);
          REQUIRE(same_bytes(model.data(e), trained.arrays.at(arena_name(s))[p].data(), bytes));
        }
      }

      // train --init from it at step 0: the masters are the checkpoint's, bitwise.
      app::checkpoint::CheckpointOptions init;
      init.init = out;
      const test::FullState started = run(options(c, 0), init);
      for (uint32_t p = 0; p < spec.params.size(); ++p) {
        INFO(spec.params[p].name);
        REQUIRE(test::same_floats(started.arrays.at("master")[p], trained.arrays.at("master")[p]));
      }

      // Recompression preserves every value and validates.
      app::convert::RecompressOptions ro;
      ro.compression = ckpt::parse_compression("zstd:3+shuffle");
      ro.piece_bytes = 8192;  // runs cut into several pieces
      app::convert::recompress_checkpoint(save.save, tmp.path + "/z", ro);
      fpckpt::ValidateOptions vo;
      vo.data = true;
      const auto report = fpckpt::validate_checkpoint(tmp.path + "/z", vo);
      REQUIRE(report.problems.empty());
      REQUIRE(report.layout_checked);
      const fpckpt::CheckpointReader z(tmp.path + "/z");
      REQUIRE(fpckpt::diff_checkpoints(reader, z, {}).equal());
    }
  }
}

TEST_CASE("checkpoint export shards above --max-shard-size and refuses what it cannot write", "[ckptconv]") {
  TempDir tmp;
  const Case c{"adamw", optim::OptimizerKind::adamw, DistOpt::bucketed, "none", ckpt::StateLayout::model, 2, 0};
  app::checkpoint::CheckpointOptions save;
  save.save = tmp.path + "/ck";
  run(options(c, 1), save);
  app::convert::ExportOptions eo;
  eo.states = true;
  eo.max_shard_bytes = 100000;
  const auto sum = app::convert::export_checkpoint(save.save, tmp.path + "/out", eo);
  REQUIRE(sum.files.size() >= 3);
  REQUIRE(sum.files.back() == tmp.path + "/out/model.safetensors.index.json");
  const auto model = safetensors::Model::open(tmp.path + "/out");
  REQUIRE(model.sharded());
  REQUIRE(model.size() == sum.tensors);
  for (size_t s = 0; s < model.shard_count(); ++s) {
    uint64_t bytes = 0;
    for (const auto& t : model.shard(s).tensors()) bytes += t.nbytes();
    REQUIRE((bytes <= eo.max_shard_bytes || model.shard(s).tensors().size() == 1));
  }
  // Small enough: one model.safetensors in the directory.
  eo.max_shard_bytes = 1ull << 30;
  const auto one = app::convert::export_checkpoint(save.save, tmp.path + "/one", eo);
  REQUIRE(one.files == std::vector<std::string>{tmp.path + "/one/model.safetensors"});
  // FP8 weights of a checkpoint without FP8 params: refused, nothing written.
  eo.weights = app::convert::ExportWeights::fp8;
  REQUIRE_THROWS_AS(app::convert::export_checkpoint(save.save, tmp.path + "/x.safetensors", eo), UsageError);
  REQUIRE(access((tmp.path + "/x.safetensors").c_str(), F_OK) != 0);
  REQUIRE(app::convert::parse_byte_size("5GB") == 5000000000ull);
  REQUIRE(app::convert::parse_byte_size("2GiB") == (2ull << 30));
  REQUIRE_THROWS_AS(app::convert::parse_byte_size("lots"), UsageError);
}

TEST_CASE("checkpoint FP8 re-encode: params re-quantized from the masters, states kept, recipe state fresh",
          "[ckptconv]") {
  struct Change {
    Case from;
    const char* to;
  };
  const Change changes[] = {
      {{"adamw bucketed none -> blockwise, bucket layout", optim::OptimizerKind::adamw, DistOpt::bucketed, "none",
        ckpt::StateLayout::bucket, 2, 0},
       "blockwise"},
      {{"muon layerwise tensorwise -> delayed, model layout", optim::OptimizerKind::muon, DistOpt::layerwise,
        "tensorwise", ckpt::StateLayout::model, 3, 0},
       "delayed"},
      {{"lion bucketed mxfp8 -> none, bucket layout", optim::OptimizerKind::lion, DistOpt::bucketed, "mxfp8",
        ckpt::StateLayout::bucket, 2, 6000},
       "none"},
  };
  for (const Change& ch : changes) {
    SECTION(ch.from.name) {
      TempDir tmp;
      app::checkpoint::CheckpointOptions save;
      save.save = tmp.path + "/ck";
      save.layout = ch.from.layout;
      const test::FullState trained = run(options(ch.from, 3), save);

      Case to = ch.from;
      to.fp8 = ch.to;
      app::convert::Fp8ReencodeOptions ro;
      ro.fp8 = options(to, 0).pipeline.fp8;
      ro.compression = ckpt::parse_compression("none");
      const auto sum = app::convert::reencode_fp8(save.save, tmp.path + "/re", ro);
      REQUIRE(sum.step == 3);
      fpckpt::ValidateOptions vo;
      vo.data = true;
      const auto report = fpckpt::validate_checkpoint(tmp.path + "/re", vo);
      REQUIRE(report.problems.empty());
      REQUIRE(report.layout_checked);
      // Masters and optimizer states equal, param by param through each checkpoint's own layout (in
      // layout `bucket`, turning FP8 on or off moves params between buffers, so bucket keys differ);
      // in layout `model` the keys themselves compare equal and only weight/FP8 keys differ.
      {
        const fpckpt::CheckpointReader a(save.save), b(tmp.path + "/re");
        const auto ma = ckpt::ParamStateMap::from_index(a.index(), a.dir());
        const auto mb = ckpt::ParamStateMap::from_index(b.index(), b.dir());
        for (uint32_t p = 0; p < test::spec32().params.size(); ++p)
          for (const std::string& s : ma.states_of(p)) {
            const uint64_t n = test::spec32().params[p].numel();
            std::vector<float> x(n), y(n);
            ckpt::read_param_state(a, ma, p, s, 0, n, x.data());
            ckpt::read_param_state(b, mb, p, s, 0, n, y.data());
            INFO("param " << p << " " << s);
            REQUIRE(test::same_floats(x, y));
          }
        if (ch.from.layout == ckpt::StateLayout::model)
          for (const auto& d : fpckpt::diff_checkpoints(a, b, {}).diffs) {
            INFO(d.key << ": " << d.what);
            REQUIRE((d.key.rfind("fp8/", 0) == 0 || d.key.rfind("weight/", 0) == 0));
          }
      }

      // Loading it under the new recipe gives what a fresh run from the masters holds (params, FP8
      // scale state), with the trained run's masters and moments.
      std::vector<test::RankSnap> loaded(to.dp), fresh(to.dp);
      app::checkpoint::CheckpointOptions load;
      load.load = tmp.path + "/re";
      app::checkpoint::train_with_checkpoints(options(to, 3), load, [&](uint64_t done, const RankPipeline& p) {
        if (done != 3) return;
        auto& s = loaded[p.state().rank];
        for (uint32_t i = 0; i < p.spec().params.size(); ++i) s.bytes.push_back(p.stored_bytes(i));
        s.state = p.state();
      });
      app::convert::ExportOptions eo;
      eo.weights = app::convert::ExportWeights::fp32;
      app::convert::export_checkpoint(save.save, tmp.path + "/m.safetensors", eo);
      app::checkpoint::CheckpointOptions init;
      init.init = tmp.path + "/m.safetensors";
      app::checkpoint::train_with_checkpoints(options(to, 0), init, [&](uint64_t, const RankPipeline& p) {
        auto& s = fresh[p.state().rank];
        for (uint32_t i = 0; i < p.spec().params.size(); ++i) s.bytes.push_back(p.stored_bytes(i));
        s.state = p.state();
      });
      for (uint32_t r = 0; r < to.dp; ++r) {
        INFO("rank " << r);
        REQUIRE(loaded[r].bytes == fresh[r].bytes);
        REQUIRE(loaded[r].state.fp8.size() == fresh[r].state.fp8.size());
        for (size_t i = 0; i < loaded[r].state.fp8.size(); ++i) {
          REQUIRE(test::same_floats(loaded[r].state.fp8[i].delayed.amax_history, fresh[r].state.fp8[i].delayed.amax_history));
          REQUIRE(same_bytes(&loaded[r].state.fp8[i].delayed.scale, &fresh[r].state.fp8[i].delayed.scale, 4));
        }
      }
      const test::FullState got = test::full_state(loaded, test::spec32());
      for (const auto& [name, arrays] : trained.arrays)
        for (size_t p = 0; p < arrays.size(); ++p) {
          INFO(name << " of param " << p);
          REQUIRE(test::same_floats(got.arrays.at(name)[p], arrays[p]));
        }
      REQUIRE(loaded[0].state.bucketed.step == 3);
    }
  }
}
