// The training documents of a checkpoint: the run read back from them equals the run that wrote
// them, and a malformed field is a FormatError naming the checkpoint, the document and the field path.
#include <string>

#include <nlohmann/json.hpp>

#include "app/checkpoint/state_documents.h"
#include "catch.h"
#include "core/error.h"
#include "pipeline_test_util.h"

using namespace fpg;
using namespace fpg::pipeline;

namespace {

app::train::TrainOptions options(optim::OptimizerKind opt, DistOpt dist, const char* fp8) {
  app::train::TrainOptions o;
  o.spec = test::spec32();
  o.dp = 2;
  o.steps = 1;
  o.micro_batch = 8;
  o.accumulation = 2;
  o.seed = 77;
  o.pipeline.optimizer = opt;
  o.pipeline.dist_opt = dist;
  o.pipeline.lr = 3e-3;
  o.pipeline.clip_grad = 0.5;
  o.pipeline.bucket_size = 4096;
  test::set_fp8(o.pipeline, fp8);
  return o;
}

// The documents rank 0 of a run of `o` writes after its last step.
ckpt::Documents documents_of(const app::train::TrainOptions& o) {
  ckpt::Documents docs;
  app::train::train(o, [&](uint64_t done, const RankPipeline& p) {
    if (done != o.steps || p.state().rank != 0) return;
    const app::train::TrainCursor cursor{o.seed, done, o.micro_batch, o.accumulation, o.dp};
    docs = app::checkpoint::state_documents(p, cursor, ckpt::StateLayout::bucket);
  });
  return docs;
}

// `docs` with document `name` changed by `edit`.
template <class F> ckpt::Documents edited(ckpt::Documents docs, const char* name, F&& edit) {
  nlohmann::json j = nlohmann::json::parse(*docs.get(name));
  edit(j);
  docs.set(name, j.dump());
  return docs;
}

template <class F> std::string format_error(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  FAIL("no FormatError");
  return "";
}

}  // namespace

TEST_CASE("the run read from the training documents is the run that wrote them", "[train][documents]") {
  for (const auto& o : {options(optim::OptimizerKind::adamw, DistOpt::bucketed, "delayed"),
                        options(optim::OptimizerKind::muon, DistOpt::layerwise, "mxfp8")}) {
    const ckpt::Documents docs = documents_of(o);
    const app::train::TrainOptions r = app::checkpoint::run_from_documents(docs, "ck");
    CHECK(r.spec == o.spec);
    CHECK(r.dp == o.dp);
    CHECK(r.steps == o.steps);
    CHECK(r.seed == o.seed);
    CHECK(r.micro_batch == o.micro_batch);
    CHECK(r.accumulation == o.accumulation);
    const PipelineConfig &a = r.pipeline, &b = o.pipeline;
    CHECK(a.optimizer == b.optimizer);
    CHECK(a.dist_opt == b.dist_opt);
    CHECK(a.lr == b.lr);
    CHECK(a.clip_grad == b.clip_grad);
    CHECK(a.bucket_size == b.bucket_size);
    CHECK(a.fp8.enabled);
    CHECK(a.fp8.recipe.scaling == b.fp8.recipe.scaling);
    CHECK(a.fp8.recipe.mx_columnwise == b.fp8.recipe.mx_columnwise);
    CHECK(a.fp8.amax_history_len == b.fp8.amax_history_len);
    CHECK(app::checkpoint::saved_optimizer_step(docs, "ck") == 1);
    // The rebuilt run writes the same documents.
    CHECK(documents_of(r).all() == docs.all());
  }
}

TEST_CASE("a malformed training document names the checkpoint, the document and the field", "[train][documents]") {
  const ckpt::Documents docs = documents_of(options(optim::OptimizerKind::adamw, DistOpt::bucketed, "delayed"));
  auto run_error = [](const ckpt::Documents& d) { return format_error([&] { app::checkpoint::run_from_documents(d, "ck"); }); };

  CHECK(run_error(edited(docs, ckpt::doc::optimizer, [](auto& j) { j["hyperparameters"]["lr"] = "fast"; })) ==
        "ck: document 'optimizer': hyperparameters.lr: expected a number, got \"fast\"");
  CHECK(run_error(edited(docs, ckpt::doc::optimizer, [](auto& j) { j["hyperparameters"].erase("beta2"); })) ==
        "ck: document 'optimizer': hyperparameters.beta2: missing");
  CHECK(run_error(edited(docs, ckpt::doc::optimizer, [](auto& j) { j["name"] = "sgd"; })) ==
        "ck: document 'optimizer': name: unknown optimizer");
  CHECK(run_error(edited(docs, ckpt::doc::fp8, [](auto& j) { j["delayed"]["margin"] = 1.5; })) ==
        "ck: document 'fp8': delayed.margin: expected an integer, got 1.5");
  CHECK(run_error(edited(docs, ckpt::doc::fp8, [](auto& j) { j["recipe"]["format"] = "e3m4"; })) ==
        "ck: document 'fp8': recipe.format: unknown format");
  CHECK(run_error(edited(docs, ckpt::doc::data, [](auto& j) { j["cursor"]["dp"] = -1; })) ==
        "ck: document 'data': cursor.dp: expected a non-negative integer, got -1");
  CHECK(run_error(edited(docs, ckpt::doc::layout, [](auto& j) { j.erase("pad_for_nccl"); })) ==
        "ck: document 'layout': pad_for_nccl: missing");
  CHECK(format_error([&] {
          app::checkpoint::saved_optimizer_step(edited(docs, ckpt::doc::optimizer, [](auto& j) { j["step"] = "one"; }), "ck");
        }) == "ck: document 'optimizer': step: expected an integer, got \"one\"");
  ckpt::Documents no_data = docs;
  no_data.erase(ckpt::doc::data);
  CHECK(run_error(no_data) == "ck: the index has no 'data' document: not a training checkpoint");
}
