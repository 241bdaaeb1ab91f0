#include "app/replay/replay_step.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <regex>

#include "comm/group.h"
#include "comm/mpi_runtime.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/progress.h"
#include "pipeline/fp8_params.h"
#include "pipeline/rank_state.h"
#include "app/train/fp32_params.h"

namespace fpg::app::replay {
namespace {

using optim::OptimizerKind;

// The optimizer that updates spec param p: the layer-wise part's (the configured one) for the
// matrices it owns whole, the bucketed part's (the scalar optimizer under muon) for the rest — the
// routing of RankPipeline and layout::build_layer_wise_layout.
OptimizerKind kind_of(const model::Param& p, const pipeline::PipelineConfig& c) {
  const bool layer_wise = c.dist_opt == pipeline::DistOpt::layerwise && p.role == model::Role::matrix &&
                          p.is_2d() && (!p.keep_in_fp32 || c.fp32_matrices);
  if (layer_wise || c.optimizer != OptimizerKind::muon) return c.optimizer;
  return c.scalar_optimizer == optim::ScalarOptimizer::lion ? OptimizerKind::lion : OptimizerKind::adamw;
}

// Which arena of an OptimizerState holds state `key`.
std::vector<float>* arena(pipeline::OptimizerState& st, const std::string& key) {
  if (key == "exp_avg") return &st.exp_avg;
  if (key == "exp_avg_sq") return &st.exp_avg_sq;
  return &st.momentum;
}

// A rank's updated fragments: per fragment the part's optimizer, the param, its range, the masters,
// then every state of that optimizer in state_keys order.
std::vector<uint8_t> pack_fragments(pipeline::RankState& rs) {
  std::vector<uint8_t> out;
  const auto put = [&](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  for (pipeline::OptimizerState* st : {&rs.bucketed, &rs.layer_wise})
    for (const pipeline::StateFragment& fr : st->fragments) {
      const uint8_t kind = static_cast<uint8_t>(st->kind);
      const uint64_t head[3] = {fr.param, fr.param_range.begin, fr.param_range.size()};
      put(&kind, 1);
      put(head, sizeof head);
      put(st->master.data() + fr.offset, head[2] * sizeof(float));
      for (const char* key : pipeline::state_keys(st->kind))
        put(arena(*st, key)->data() + fr.offset, head[2] * sizeof(float));
    }
  return out;
}

void unpack_fragments(const std::vector<uint8_t>& blob, std::vector<std::vector<float>>& master,
                      std::vector<std::map<std::string, std::vector<float>>>& state) {
  size_t at = 0;
  const auto get = [&](void* p, size_t n) {
    if (at + n > blob.size()) throw InternalError("replay: truncated fragment blob");
    std::memcpy(p, blob.data() + at, n);
    at += n;
  };
  while (at < blob.size()) {
    uint8_t kind = 0;
    uint64_t head[3];
    get(&kind, 1);
    get(head, sizeof head);
    const uint64_t param = head[0], begin = head[1], len = head[2];
    if (param >= master.size() || begin + len > master[param].size())
      throw InternalError("replay: fragment out of range");
    get(master[param].data() + begin, len * sizeof(float));
    for (const char* key : pipeline::state_keys(static_cast<OptimizerKind>(kind))) {
      auto it = state[param].find(key);
      if (it == state[param].end()) throw InternalError(std::string("replay: unexpected state ") + key);
      get(it->second.data() + begin, len * sizeof(float));
    }
  }
}

}  // namespace

model::ModelSpec step_spec(const StepFile& f, const ReplayOptions& o, std::vector<std::string>* warnings) {
  const std::string& scalar_params = o.scalar_params;
  std::regex re;
  try {
    re = std::regex(scalar_params, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw UsageError(Message(Field{"scalar_params"}, ": invalid regular expression ", quoted_name(scalar_params), ": ",
                             e.what()));
  }
  model::ModelSpec spec;
  spec.name = "step";
  for (const StepTensor& t : f.params) {
    model::Param p;
    p.name = t.name;
    p.dtype = DType::BF16;
    if (t.shape.size() == 2) {
      p.shape = t.shape;
      p.role = !scalar_params.empty() && std::regex_search(t.name, re) ? model::Role::embedding : model::Role::matrix;
    } else {
      p.shape = {static_cast<uint64_t>(t.value.size())};
      p.role = model::Role::vector;
    }
    spec.params.push_back(std::move(p));
  }
  std::vector<std::string> w = train::apply_fp32_params(spec, o.keep_fp32, o.fp32_matrices, o.pipeline);
  if (warnings) *warnings = std::move(w);
  model::validate_spec(spec);
  return spec;
}

ReplayReport replay_step(StepFile& f, const std::vector<std::vector<float>>& grads, const ReplayOptions& o) {
  if (o.dp == 0) throw UsageError(Message(Field{"dp"}, " must be at least 1"));
  if (grads.size() != f.params.size()) throw InternalError("replay: one gradient per parameter expected");
  pipeline::validate_config(o.pipeline);
  std::vector<std::string> warnings;
  const model::ModelSpec spec = step_spec(f, o, &warnings);
  const uint32_t P = static_cast<uint32_t>(spec.params.size());

  // The state each param's optimizer keeps; a given state it does not keep is refused, not dropped.
  std::vector<std::vector<const char*>> keys(P);
  for (uint32_t p = 0; p < P; ++p) {
    const OptimizerKind k = kind_of(spec.params[p], o.pipeline);
    keys[p] = pipeline::state_keys(k);
    for (const auto& entry : f.params[p].state) {
      const std::string& key = entry.first;  // a structured binding cannot be captured in C++17
      const bool kept = std::any_of(keys[p].begin(), keys[p].end(), [&](const char* s) { return key == s; });
      if (!kept)
        throw UsageError("state tensor '" + f.params[p].name + "." + key + "': " + optim::optimizer_name(k) +
                         ", which updates " + quoted_name(f.params[p].name) + ", keeps no " + key);
    }
  }
  // Outputs: states start from the input's (zero where absent); ranks write disjoint ranges.
  std::vector<std::vector<float>> master(P);
  std::vector<std::map<std::string, std::vector<float>>> state(P);
  for (uint32_t p = 0; p < P; ++p) {
    master[p].assign(f.params[p].value.size(), std::numeric_limits<float>::quiet_NaN());
    for (const char* k : keys[p]) state[p][k].assign(f.params[p].value.size(), 0.0f);
  }

  ReplayReport rep;
  rep.warnings = std::move(warnings);
  rep.step_in = f.step;
  rep.params = P;
  rep.elements = spec.numel();
  for (const model::Param& p : spec.params) {
    rep.fp8_params += pipeline::is_fp8_param(p, o.pipeline) ? 1 : 0;
    rep.muon_params += kind_of(p, o.pipeline) == OptimizerKind::muon ? 1 : 0;
  }

  comm::make_host_group(o.comm, static_cast<int>(o.dp))->run([&](comm::Communicator& comm) {
    const pipeline::InitFn init = [&](uint32_t p, float* out) {
      std::memcpy(out, f.params[p].value.data(), f.params[p].value.size() * sizeof(float));
    };
    pipeline::RankPipeline pipe(spec, o.pipeline, comm, init);
    pipeline::RankState& rs = pipe.state();
    for (pipeline::OptimizerState* st : {&rs.bucketed, &rs.layer_wise}) {
      st->step = f.step;
      for (const pipeline::StateFragment& fr : st->fragments)
        for (const auto& [key, v] : f.params[fr.param].state) {
          std::vector<float>* a = arena(*st, key);
          std::copy(v.begin() + static_cast<int64_t>(fr.param_range.begin),
                    v.begin() + static_cast<int64_t>(fr.param_range.end), a->begin() + static_cast<int64_t>(fr.offset));
        }
    }
    const bool first = comm.rank() == 0;
    const pipeline::GradFn grad_fn = [&](const std::vector<const float*>&, const std::vector<float*>& out) {
      for (uint32_t p = 0; p < P; ++p) {
        if (first) std::memcpy(out[p], grads[p].data(), grads[p].size() * sizeof(float));
        else std::fill(out[p], out[p] + grads[p].size(), -0.0f);
      }
    };
    const pipeline::StepReport r = pipe.step(grad_fn, 1);
    // Every rank's fragments go to rank 0, which assembles the file (ranks may be processes).
    const auto blobs = comm.gather_bytes(pack_fragments(rs), 0);
    for (const auto& b : blobs) unpack_fragments(b, master, state);
    if (first) {
      rep.has_rank0 = true;
      rep.skipped = r.skipped;
      rep.grad_norm = r.grad_norm;
      rep.clip_coef = r.clip_coef;
      rep.step_out = r.optimizer_step;  // the bucketed part's counter; every part counts alike
      rep.times = r.times;
    }
  });
  if (!rep.has_rank0) return rep;  // another process assembles and writes the result
  if (rep.skipped) {  // the pipeline left everything as it was; so does the file
    rep.step_out = f.step;
    return rep;
  }
  for (uint32_t p = 0; p < P; ++p) {
    f.params[p].value = std::move(master[p]);
    f.params[p].state = std::move(state[p]);
  }
  f.step = rep.step_out;
  return rep;
}

ReplayReport replay_step_files(const std::string& params, const std::string& grads, const std::string& out,
                               const ReplayOptions& o) {
  if (!o.force && fs::exists(out, true))
    throw UsageError(Message("OUT ", out, " exists", out == params || out == grads ? " (it is an input)" : "",
                             ": give ", Field{"force"}, " to replace it"));
  // One step of a large model reads, steps and writes gigabytes, none of which advances a count.
  Progress progress("step", 0, o.progress && comm::launcher_rank() <= 0);
  progress.phase("reading " + params + " and " + grads);
  StepFile f = read_step_params(params);
  const std::vector<std::vector<float>> g = read_step_grads(grads, f);
  progress.phase("stepping on " + std::to_string(o.dp) + (o.dp == 1 ? " rank" : " ranks"));
  const ReplayReport rep = replay_step(f, g, o);
  if (rep.has_rank0) {
    progress.phase("writing " + out);
    write_step_params(out, f, optim::optimizer_name(o.pipeline.optimizer));
  }
  return rep;
}

}  // namespace fpg::app::replay
