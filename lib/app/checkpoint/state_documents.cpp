#include "app/checkpoint/state_documents.h"

#include <nlohmann/json.hpp>

#include "ckpt/stored_states.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "fp8/recipe.h"
#include "layout/layout_json.h"
#include "model/spec_json.h"
#include "pipeline/fp8_params.h"

namespace fpg::app::checkpoint {
namespace {

using nlohmann::json;

json recipe_json(const fp8::Recipe& r) {
  return {{"scaling", std::string(fp8::scaling_name(r.scaling))},
          {"format", std::string(fp8::format_name(r.format))},
          {"pow2", r.pow2},
          {"amax_epsilon", r.amax_epsilon},
          {"mx_rule", std::string(fp8::mx_rule_name(r.mx_rule))},
          {"mx_rowwise", r.mx_rowwise},
          {"mx_columnwise", r.mx_columnwise}};
}

fp8::Recipe read_recipe(const JsonField& r) {
  fp8::Recipe out;
  const auto s = fp8::parse_scaling(r.get<std::string>("scaling"));
  if (!s) r.at("scaling").fail("unknown scaling");
  const auto f = fp8::parse_format(r.get<std::string>("format"));
  if (!f) r.at("format").fail("unknown format");
  const auto m = fp8::parse_mx_rule(r.get<std::string>("mx_rule"));
  if (!m) r.at("mx_rule").fail("unknown mx_rule");
  out.scaling = *s;
  out.format = *f;
  out.pow2 = r.get<bool>("pow2");
  out.amax_epsilon = r.get<float>("amax_epsilon");
  out.mx_rule = *m;
  out.mx_rowwise = r.get<bool>("mx_rowwise");
  out.mx_columnwise = r.get<bool>("mx_columnwise");
  return out;
}

json fp8_json(const RankStateAccess& rank) {
  const pipeline::PipelineConfig& c = rank.config();
  if (!c.fp8.enabled) return {{"enabled", false}};
  json j = {{"enabled", true}, {"recipe", recipe_json(c.fp8.recipe)}};
  const bool delayed = pipeline::is_delayed(c.fp8);
  if (delayed)
    j["delayed"] = {{"history_len", c.fp8.amax_history_len},
                    {"algo", c.fp8.amax_algo == fp8::AmaxAlgo::max ? "max" : "most_recent"},
                    {"margin", c.fp8.margin}};
  // Which keys hold each FP8 param's data and scale state (app/checkpoint/state_save.h writes them).
  json params = json::array();
  for (const pipeline::Fp8ParamState& s : rank.state().fp8) {
    const std::string& name = rank.spec().params.at(s.param).name;
    json keys = json::array();
    const pipeline::ParamStorage st = rank.param_storage(s.param);
    if (st.data) keys.push_back(ckpt::fp8_data_key(name));
    if (st.col) keys.push_back(ckpt::fp8_columnwise_key(name));
    if (!s.scales.scale.empty()) {
      keys.push_back(ckpt::fp8_state_key(name, "scale"));
      keys.push_back(ckpt::fp8_state_key(name, "scale_inv"));
    }
    if (!s.scales.e8m0.empty()) keys.push_back(ckpt::fp8_state_key(name, "scale_e8m0"));
    if (!s.scales.e8m0_col.empty()) keys.push_back(ckpt::fp8_state_key(name, "columnwise_scale_e8m0"));
    if (delayed) {
      keys.push_back(ckpt::fp8_state_key(name, "amax_history"));
      keys.push_back(ckpt::fp8_state_key(name, "delayed_scale"));
    }
    params.push_back({{"name", name}, {"keys", keys}});
  }
  j["params"] = params;
  return j;
}

json optimizer_json(const RankStateAccess& rank, ckpt::StateLayout sl) {
  const pipeline::PipelineConfig& c = rank.config();
  json h = {{"lr", c.lr},
            {"beta1", c.beta1},
            {"beta2", c.beta2},
            {"eps", c.eps},
            {"weight_decay", c.weight_decay},
            {"torch_vec_width", c.torch_vec_width},
            {"clip_grad", c.clip_grad}};
  json j = {{"name", optim::optimizer_name(c.optimizer)}, {"dist_opt", pipeline::dist_opt_name(c.dist_opt)}};
  if (c.optimizer == optim::OptimizerKind::muon) {
    j["scalar_optimizer"] = optim::scalar_optimizer_name(c.scalar_optimizer);
    h["muon_momentum"] = c.muon_momentum;
    h["muon_nesterov"] = c.muon_nesterov;
    h["muon_ns_steps"] = c.muon_ns_steps;
    h["muon_adjust_lr"] = c.muon_adjust_lr == optim::MuonLrAdjust::original ? "original" : "match_rms_adamw";
  }
  j["hyperparameters"] = h;
  // Optimizer steps taken (skipped steps not counted): Adam's bias correction.
  j["step"] = rank.state().bucketed.step;
  ckpt::put_stored_states(j, {sl, saved_states(rank.state().bucketed.kind),
                              rank.layer_wise_layout() ? saved_states(rank.state().layer_wise.kind)
                                                       : std::vector<std::string>{}});
  return j;
}

std::string shorten(const std::string& s) { return s.size() <= 160 ? s : s.substr(0, 157) + "..."; }

std::string value_at(const json& j, const std::string& path) {
  const json::json_pointer p(path);
  return j.contains(p) ? shorten(j.at(p).dump()) : std::string("nothing");
}

// "" when equal, else where and how they first differ.
std::string first_difference(const json& saved, const json& run) {
  const json patch = json::diff(saved, run);
  if (patch.empty()) return "";
  const std::string path = patch[0].at("path").get<std::string>();
  return "at " + (path.empty() ? std::string("/") : path) + ": the checkpoint has " + value_at(saved, path) +
         ", this run " + value_at(run, path);
}

JsonDocument training_document(const ckpt::Documents& d, const char* name, const std::string& dir) {
  const auto text = d.get(name);
  if (!text) throw FormatError(dir + ": the index has no " + quoted_name(name) + " document: not a training checkpoint");
  return JsonDocument(*text, dir + ": document " + quoted_name(name));
}

json parse_doc(const ckpt::Documents& d, const char* name, const std::string& dir) {
  return training_document(d, name, dir).value();
}

json without(json j, std::initializer_list<const char*> fields) {
  if (j.is_object())
    for (const char* f : fields) j.erase(f);
  return j;
}

// The bucketed part of a layout document (layer-wise layouts keep theirs under "scalar").
json bucketed_part(const json& layout) {
  return layout.value("kind", "") == "layer_wise" ? layout.value("scalar", json::object()) : layout;
}

// The command that reshards checkpoint `dir` for a run of `dp` ranks, `extra` options appended:
// "fpgather reshard run/step-00000008 run-step-00000008-dp2 --dp 2" (the target lies beside the
// checkpoint root, not inside it, where --keep would count it as one of its checkpoints).
std::string reshard_command(const std::string& dir, uint32_t dp, const std::string& extra) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  std::string out = d;
  const size_t slash = d.rfind('/');
  if (slash != std::string::npos && slash > 0) out = d.substr(0, slash) + "-" + d.substr(slash + 1);
  return "fpgather reshard " + d + " " + out + "-dp" + std::to_string(dp) + " --dp " + std::to_string(dp) + extra;
}

// `fpgather reshard DIR DIR-dpM --dp M ...` (reshard_command) producing the checkpoint that this run would accept:
// its DP size, dist-opt, bucket size and padding, and its accumulation where that is not the one
// reshard picks by default (the one that keeps the global batch).
std::string reshard_command_for(const ckpt::Documents& saved_docs, const ckpt::Documents& run_docs,
                                const json& saved_layout, const json& run_layout, const std::string& dir) {
  const uint32_t sdp = saved_layout.value("dp", 1u), rdp = run_layout.value("dp", 1u);
  std::string extra;
  const std::string sk = saved_layout.value("kind", ""), rk = run_layout.value("kind", "");
  if (sk != rk) extra += std::string(" --dist-opt ") + (rk == "layer_wise" ? "layerwise" : "bucketed");
  const json sb = bucketed_part(saved_layout), rb = bucketed_part(run_layout);
  if (sb.value("bucket_size", json()) != rb.value("bucket_size", json()))
    extra += " --bucket-size " + (rb.value("bucket_size", json()).is_null() ? std::string("none")
                                                                           : rb.at("bucket_size").dump());
  if (sb.value("pad_for_nccl", false) != rb.value("pad_for_nccl", false))
    extra += rb.value("pad_for_nccl", false) ? " --pad-for-nccl" : " --no-pad-for-nccl";
  // A hint only: a data document without a readable cursor counts as accumulation 1.
  const auto accumulation = [&](const ckpt::Documents& d) -> uint64_t {
    try {
      return saved_cursor(d, dir).accumulation;
    } catch (const FormatError&) {
      return 1;
    }
  };
  const uint64_t sa = accumulation(saved_docs), ra = accumulation(run_docs);
  if (rdp == 0 || (uint64_t{sdp} * sa) % rdp != 0 || (uint64_t{sdp} * sa) / rdp != ra)
    extra += " --accumulation " + std::to_string(ra);
  return reshard_command(dir, rdp, extra);
}

}  // namespace

std::vector<std::string> saved_states(optim::OptimizerKind kind) {
  std::vector<std::string> s = {"master"};
  for (const char* k : pipeline::state_keys(kind)) s.push_back(k);
  return s;
}

ckpt::Documents state_documents(const pipeline::RankPipeline& rank, const train::TrainCursor& cursor, ckpt::StateLayout sl) {
  return state_documents(PipelineAccess(rank), cursor, sl);
}

ckpt::Documents state_documents(const RankStateAccess& rank, const train::TrainCursor& cursor, ckpt::StateLayout sl) {
  ckpt::Documents d;
  d.set(ckpt::doc::model, model::spec_to_json(rank.spec(), -1));
  d.set(ckpt::doc::layout, rank.layer_wise_layout() ? layout::to_json(*rank.layer_wise_layout())
                                                    : layout::to_json(rank.bucketed_layout()));
  d.set(ckpt::doc::optimizer, optimizer_json(rank, sl).dump());
  d.set(ckpt::doc::fp8, fp8_json(rank).dump());
  const json cur = {{"seed", cursor.seed},
                    {"next_step", cursor.next_step},
                    {"micro_batch", cursor.micro_batch},
                    {"accumulation", cursor.accumulation},
                    {"dp", cursor.dp}};
  d.set(ckpt::doc::data,
        json{{"cursor", cur},
             {"order",
              "step t on DP rank r draws micro-batches (t * dp + r) * accumulation + a, a < accumulation; micro-batch "
              "i is a pure function of (seed, micro_batch, i)"}}
            .dump());
  d.set(ckpt::doc::rng, json{{"generator", "philox4x32-10"},
                             {"seed", cursor.seed},
                             {"stateless", true},
                             {"note", "initial weights, the teacher and every sample are counter-based functions of "
                                      "(seed, index): the data cursor is the whole RNG state"}}
                            .dump());
  return d;
}

train::TrainCursor saved_cursor(const ckpt::Documents& saved, const std::string& dir) {
  const JsonDocument d = training_document(saved, ckpt::doc::data, dir);
  const JsonField c = d.root().at("cursor");
  train::TrainCursor t;
  t.seed = c.get<uint64_t>("seed");
  t.next_step = c.get<uint64_t>("next_step");
  t.micro_batch = c.get<int64_t>("micro_batch");
  t.accumulation = c.get<uint64_t>("accumulation");
  t.dp = c.get<uint32_t>("dp");
  return t;
}

int64_t saved_optimizer_step(const ckpt::Documents& saved, const std::string& dir) {
  return training_document(saved, ckpt::doc::optimizer, dir).root().get<int64_t>("step");
}

train::TrainOptions run_from_documents(const ckpt::Documents& docs, const std::string& dir) {
  train::TrainOptions o;
  o.spec = model::parse_spec_json(docs.get(ckpt::doc::model).value_or("null"), dir + ": document 'model'");
  const train::TrainCursor cur = saved_cursor(docs, dir);
  o.seed = cur.seed;
  o.steps = cur.next_step;
  o.micro_batch = cur.micro_batch;
  o.accumulation = cur.accumulation;
  o.dp = cur.dp;

  pipeline::PipelineConfig& c = o.pipeline;
  const JsonDocument layout_doc = training_document(docs, ckpt::doc::layout, dir);
  const JsonField layout = layout_doc.root();
  const bool layer_wise = layout.get<std::string>("kind") == "layer_wise";
  const JsonField bucketed = layer_wise ? layout.at("scalar") : layout;
  if (const JsonField bs = bucketed.at("bucket_size"); !bs.is_null()) c.bucket_size = bs.u64();
  c.pad_for_nccl = bucketed.get<bool>("pad_for_nccl");
  if (layer_wise) c.fp32_matrices = layout.get<bool>("fp32_matrices");

  const JsonDocument opt_doc = training_document(docs, ckpt::doc::optimizer, dir);
  const JsonField opt = opt_doc.root();
  const auto kind = optim::parse_optimizer(opt.get<std::string>("name"));
  if (!kind) opt.at("name").fail("unknown optimizer");
  const auto dist = pipeline::parse_dist_opt(opt.get<std::string>("dist_opt"));
  if (!dist) opt.at("dist_opt").fail("unknown distributed optimizer");
  c.optimizer = *kind;
  c.dist_opt = *dist;
  if (const auto so = opt.find("scalar_optimizer")) {
    const auto s = optim::parse_scalar_optimizer(so->str());
    if (!s) so->fail("unknown scalar optimizer");
    c.scalar_optimizer = *s;
  }
  const JsonField h = opt.at("hyperparameters");
  c.lr = h.get<double>("lr");
  c.beta1 = h.get<double>("beta1");
  c.beta2 = h.get<double>("beta2");
  c.eps = h.get<double>("eps");
  c.weight_decay = h.get<double>("weight_decay");
  c.torch_vec_width = h.get<int>("torch_vec_width");
  c.clip_grad = h.get<double>("clip_grad");
  if (c.optimizer == optim::OptimizerKind::muon) {
    c.muon_momentum = h.get<double>("muon_momentum");
    c.muon_nesterov = h.get<bool>("muon_nesterov");
    c.muon_ns_steps = h.get<int>("muon_ns_steps");
    c.muon_adjust_lr = h.get<std::string>("muon_adjust_lr") == "original" ? optim::MuonLrAdjust::original
                                                                         : optim::MuonLrAdjust::match_rms_adamw;
  }

  const JsonDocument fp8_doc = training_document(docs, ckpt::doc::fp8, dir);
  const JsonField f = fp8_doc.root();
  c.fp8.enabled = f.get<bool>("enabled");
  if (c.fp8.enabled) {
    c.fp8.recipe = read_recipe(f.at("recipe"));
    if (const auto d = f.find("delayed")) {
      c.fp8.amax_history_len = d->get<uint64_t>("history_len");
      c.fp8.amax_algo = d->get<std::string>("algo") == "max" ? fp8::AmaxAlgo::max : fp8::AmaxAlgo::most_recent;
      c.fp8.margin = d->get<int>("margin");
    }
  }
  return o;
}

void check_resumable(const ckpt::Documents& saved_docs, const ckpt::Documents& run_docs, const std::string& dir) {
  const std::string head = "cannot resume from " + dir + ": ";
  auto doc = [&](const ckpt::Documents& d, const char* name) { return parse_doc(d, name, dir); };
  // The most telling difference first: the model, the DP size and distributed optimizer, the
  // optimizer, the FP8 recipe and the data stream; the remaining layout options last (the layout
  // also changes with the model, the recipe and the dist-opt).
  if (const std::string d = first_difference(doc(saved_docs, ckpt::doc::model), doc(run_docs, ckpt::doc::model));
      !d.empty())
    throw UsageError(head + "the model differs " + d);

  const json saved_layout = doc(saved_docs, ckpt::doc::layout), run_layout = doc(run_docs, ckpt::doc::layout);
  const std::string reshard = "; loading does not reshard: rewrite the checkpoint for this run with `" +
                              reshard_command_for(saved_docs, run_docs, saved_layout, run_layout, dir) +
                              "` and load that";
  const auto sdp = saved_layout.value("dp", 0u), rdp = run_layout.value("dp", 0u);
  if (sdp != rdp)
    throw UsageError(head + "it was saved at DP " + std::to_string(sdp) + " and this run has DP " +
                     std::to_string(rdp) + reshard + " (or run at DP " + std::to_string(sdp) + ")");
  const std::string sk = saved_layout.value("kind", ""), rk = run_layout.value("kind", "");
  auto dist_opt = [](const std::string& k) { return k == "layer_wise" ? "layerwise" : "bucketed"; };
  if (sk != rk)
    throw UsageError(head + "its layout is " + sk + " (--dist-opt " + dist_opt(sk) + ") and this run's is " + rk +
                     " (--dist-opt " + dist_opt(rk) + ")" + reshard);

  {
    // The state layout and the step are the checkpoint's own; the states follow from the optimizer.
    // lr, weight decay and clipping scale the update and may change on resume (app/checkpoint/run_settings.h).
    const auto strip = [](json j) {
      j = without(std::move(j), {"step", "state_layout", "states", "matrix_states"});
      if (j.is_object() && j.contains("hyperparameters"))
        j["hyperparameters"] = without(j["hyperparameters"], {"lr", "weight_decay", "clip_grad"});
      return j;
    };
    const json saved = strip(doc(saved_docs, ckpt::doc::optimizer)), run = strip(doc(run_docs, ckpt::doc::optimizer));
    const auto names = [](const json& j) { return without(j, {"hyperparameters", "dist_opt"}); };
    std::string d = first_difference(names(saved), names(run));
    if (d.empty()) d = first_difference(saved, run);
    if (!d.empty()) throw UsageError(head + "the optimizer config differs " + d);
  }
  if (const std::string d = first_difference(doc(saved_docs, ckpt::doc::fp8), doc(run_docs, ckpt::doc::fp8));
      !d.empty())
    throw UsageError(head + "the FP8 recipe differs " + d);
  {
    const auto cursor = [&](const ckpt::Documents& docs) {
      return without(doc(docs, ckpt::doc::data).value("cursor", json::object()), {"next_step"});
    };
    const std::string d = first_difference(cursor(saved_docs), cursor(run_docs));
    if (!d.empty()) throw UsageError(head + "the data stream differs " + d + " (--seed, --micro-batch, --accumulation)");
  }
  if (const std::string d = first_difference(saved_layout, run_layout); !d.empty())
    throw UsageError(head + "the layout differs " + d + " (bucket size, padding rules)" + reshard);
}

}  // namespace fpg::app::checkpoint
