#include "app/replay/run_from_documents.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "model/spec_json.h"
#include "app/checkpoint/state_documents.h"

namespace fpg::train {
namespace {

using nlohmann::json;

json parse(const ckpt::Documents& d, const char* name, const std::string& dir) {
  const auto text = d.get(name);
  if (!text) throw FormatError(dir + ": the index has no '" + name + "' document: not a training checkpoint");
  return json::parse(*text);
}

fp8::Recipe recipe_from(const json& r) {
  fp8::Recipe out;
  const auto s = fp8::parse_scaling(r.at("scaling").get<std::string>());
  const auto f = fp8::parse_format(r.at("format").get<std::string>());
  const auto m = fp8::parse_mx_rule(r.at("mx_rule").get<std::string>());
  if (!s || !f || !m) throw std::runtime_error("recipe: unknown scaling, format or mx_rule");
  out.scaling = *s;
  out.format = *f;
  out.pow2 = r.at("pow2").get<bool>();
  out.amax_epsilon = r.at("amax_epsilon").get<float>();
  out.mx_rule = *m;
  out.mx_rowwise = r.at("mx_rowwise").get<bool>();
  out.mx_columnwise = r.at("mx_columnwise").get<bool>();
  return out;
}

}  // namespace

TrainOptions run_from_documents(const ckpt::Documents& docs, const std::string& dir) {
  TrainOptions o;
  const char* doc = ckpt::doc::model;
  try {
    o.spec = model::parse_spec_json(docs.get(ckpt::doc::model).value_or("null"), dir + " (document 'model')");
    doc = ckpt::doc::data;
    const TrainCursor cur = saved_cursor(docs, dir);
    o.seed = cur.seed;
    o.steps = cur.next_step;
    o.micro_batch = cur.micro_batch;
    o.accumulation = cur.accumulation;
    o.dp = cur.dp;

    pipeline::PipelineConfig& c = o.pipeline;
    doc = ckpt::doc::layout;
    const json layout = parse(docs, doc, dir);
    const json& bucketed = layout.at("kind") == "layer_wise" ? layout.at("scalar") : layout;
    if (!bucketed.at("bucket_size").is_null()) c.bucket_size = bucketed.at("bucket_size").get<uint64_t>();
    c.pad_for_nccl = bucketed.at("pad_for_nccl").get<bool>();
    if (layout.at("kind") == "layer_wise") c.fp32_matrices = layout.at("fp32_matrices").get<bool>();

    doc = ckpt::doc::optimizer;
    const json opt = parse(docs, doc, dir);
    const auto kind = optim::parse_optimizer(opt.at("name").get<std::string>());
    const auto dist = pipeline::parse_dist_opt(opt.at("dist_opt").get<std::string>());
    if (!kind || !dist) throw std::runtime_error("unknown optimizer or dist_opt");
    c.optimizer = *kind;
    c.dist_opt = *dist;
    if (opt.contains("scalar_optimizer")) {
      const auto s = optim::parse_scalar_optimizer(opt.at("scalar_optimizer").get<std::string>());
      if (!s) throw std::runtime_error("unknown scalar_optimizer");
      c.scalar_optimizer = *s;
    }
    const json& h = opt.at("hyperparameters");
    c.lr = h.at("lr").get<double>();
    c.beta1 = h.at("beta1").get<double>();
    c.beta2 = h.at("beta2").get<double>();
    c.eps = h.at("eps").get<double>();
    c.weight_decay = h.at("weight_decay").get<double>();
    c.torch_vec_width = h.at("torch_vec_width").get<int>();
    c.clip_grad = h.at("clip_grad").get<double>();
    if (c.optimizer == optim::OptimizerKind::muon) {
      c.muon_momentum = h.at("muon_momentum").get<double>();
      c.muon_nesterov = h.at("muon_nesterov").get<bool>();
      c.muon_ns_steps = h.at("muon_ns_steps").get<int>();
      c.muon_adjust_lr = h.at("muon_adjust_lr") == "original" ? optim::MuonLrAdjust::original
                                                                : optim::MuonLrAdjust::match_rms_adamw;
    }

    doc = ckpt::doc::fp8;
    const json f = parse(docs, doc, dir);
    c.fp8.enabled = f.at("enabled").get<bool>();
    if (c.fp8.enabled) {
      c.fp8.recipe = recipe_from(f.at("recipe"));
      if (f.contains("delayed")) {
        const json& d = f.at("delayed");
        c.fp8.amax_history_len = d.at("history_len").get<size_t>();
        c.fp8.amax_algo = d.at("algo") == "max" ? fp8::AmaxAlgo::max : fp8::AmaxAlgo::most_recent;
        c.fp8.margin = d.at("margin").get<int>();
      }
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw FormatError(dir + ": document '" + doc + "': " + e.what());
  }
  return o;
}

}  // namespace fpg::train
