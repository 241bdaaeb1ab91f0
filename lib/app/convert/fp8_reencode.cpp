#include "app/convert/fp8_reencode.h"

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/param_state_map.h"
#include "ckpt/param_state_read.h"
#include "ckpt/state_store.h"
#include "app/convert/staged_output.h"
#include "comm/group.h"
#include "core/printable.h"
#include "core/progress.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/thread_pool.h"
#include "layout/layout_json.h"
#include "pipeline/pipeline_layout.h"
#include "app/checkpoint/state_documents.h"
#include "app/checkpoint/state_save.h"
#include "app/train/train_setup.h"

namespace fpg::app::convert {
namespace {

using nlohmann::json;

std::vector<float>& arena(pipeline::OptimizerState& st, const std::string& state) {
  if (state == "exp_avg") return st.exp_avg;
  if (state == "exp_avg_sq") return st.exp_avg_sq;
  if (state == "momentum_buffer") return st.momentum;
  throw InternalError("reencode: no optimizer state named " + state);
}

json doc_json(const ckpt::Documents& d, const char* name, const std::string& dir) {
  return JsonDocument(d.get(name).value_or("null"), dir + ": document " + quoted_name(name)).value();
}

std::string layout_json(const train::TrainOptions& o) {
  const pipeline::PipelineLayout l = train::training_layout(o);
  return l.layer_wise ? layout::to_json(*l.layer_wise) : layout::to_json(*l.bucketed);
}

}  // namespace

Fp8ReencodeSummary reencode_fp8(const std::string& src, const std::string& dst, const Fp8ReencodeOptions& o) {
  // No step of it advances a count: its phases are named instead.
  Progress progress("convert", 0, o.progress);
  progress.phase("validating " + src);
  const ckpt::StateStore& store = ckpt::state_store();
  const auto opened = store.open(src, "re-encode it");
  const ckpt::StateReader& reader = *opened;
  const std::string& dir = reader.dir();
  const ckpt::Documents& saved = reader.index().documents;
  const ckpt::ParamStateMap map = ckpt::ParamStateMap::from_index(reader.index(), dir);
  const train::TrainOptions before = checkpoint::run_from_documents(saved, dir);
  const train::TrainCursor cursor = checkpoint::saved_cursor(saved, dir);
  const int64_t step = checkpoint::saved_optimizer_step(saved, dir);
  // The rebuilt run must lay its state out as the saved one did.
  if (json::parse(layout_json(before)) != doc_json(saved, ckpt::doc::layout, dir))
    throw FormatError(dir + ": the layout rebuilt from the documents differs from the saved one; cannot re-encode");

  train::TrainOptions after = before;
  after.pipeline.fp8 = o.fp8;
  const model::ModelSpec spec = train::training_spec(after);  // UsageError when the recipe cannot take a param
  const uint32_t dp = after.dp;

  ckpt::StateWriteOptions wo;
  wo.compression = o.compression;
  wo.chunk_bytes = o.chunk_bytes;
  std::vector<ckpt::RankManifest> manifests(dp);
  ckpt::Documents documents;
  size_t fp8_params = 0;
  std::mutex mu;
  convert::StagedOutput out(dst, convert::OutputKind::directory, o.force, {src, dir});
  const std::string target = out.staged_dir();
  const std::unique_ptr<ckpt::StateSave> save = store.begin_save(target, wo);  // removed unless committed
  const std::string& staging = save->staging();
  progress.phase("re-encoding the state of " + std::to_string(dp) + " ranks into " + dst);
  comm::run_ranks(static_cast<int>(dp), [&](comm::Communicator& comm) {
    ThreadPool pool(1);  // this rank's reads on its own thread (ranks run at once)
    const pipeline::InitFn init = [&](uint32_t p, float* out) {
      ckpt::read_param_state(reader, map, p, "master", 0, spec.params[p].numel(), out, &pool);
    };
    pipeline::RankPipeline pipe(spec, after.pipeline, comm, init, 1);
    pipeline::RankState& rs = pipe.state();
    for (pipeline::OptimizerState* part : {&rs.bucketed, &rs.layer_wise})
      for (const std::string& s : checkpoint::saved_states(part->kind)) {
        if (s == "master") continue;
        for (const pipeline::StateFragment& f : part->fragments)
          ckpt::read_param_state(reader, map, f.param, s, f.param_range.begin, f.param_range.end,
                                 arena(*part, s).data() + f.offset, &pool);
      }
    rs.bucketed.step = step;
    rs.layer_wise.step = pipe.layer_wise_layout() ? step : 0;

    ckpt::StateWriteOptions mine = wo;
    mine.pool = &pool;
    const std::unique_ptr<ckpt::StateWriter> w = store.writer(staging, rs.rank, mine);
    checkpoint::RankSaveOptions so;
    so.layout = map.state_layout();
    checkpoint::save_rank_state(*w, pipe, so);
    ckpt::RankManifest m = w->finish();
    std::lock_guard<std::mutex> lock(mu);
    manifests[rs.rank] = std::move(m);
    if (rs.rank == 0) {
      documents = checkpoint::state_documents(pipe, cursor, map.state_layout());
      fp8_params = rs.fp8.size();
    }
  });
  // Only the FP8 recipe (and the buffers FP8 params live in) may differ from the saved run.
  for (const char* name : {ckpt::doc::model, ckpt::doc::optimizer, ckpt::doc::data, ckpt::doc::rng})
    if (doc_json(documents, name, dir) != doc_json(saved, name, dir))
      throw FormatError(dir + ": document '" + std::string(name) +
                        "' of the rebuilt run differs from the saved one; cannot re-encode");
  progress.phase("committing " + dst);
  save->documents() = documents;
  save->commit(std::move(manifests));
  out.commit();
  return {dir, dst, static_cast<uint64_t>(step), fp8_params};
}

}  // namespace fpg::app::convert
