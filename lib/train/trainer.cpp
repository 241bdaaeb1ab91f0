#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "comm/group.h"
#include "core/error.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/teacher_task.h"
#include "train/train_setup.h"

namespace fpg::train {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::json times_json(const pipeline::PhaseTimes& t) {
  return {{"forward_backward_ms", t.forward_backward * 1e3}, {"reduce_scatter_ms", t.reduce_scatter * 1e3},
          {"optimizer_ms", t.optimizer * 1e3},               {"copy_back_ms", t.copy_back * 1e3},
          {"gather_ms", t.gather * 1e3},                     {"decode_ms", t.decode * 1e3},
          {"step_ms", t.total() * 1e3}};
}

double json_number(double x) { return std::isfinite(x) ? x : 0.0; }

}  // namespace

TrainResult train(const TrainOptions& o, const RankObserver& observer, const StepCallback& on_step,
                  const TrainHooks& hooks) {
  const model::ModelSpec spec = training_spec(o);

  const model::NetworkDims dims = *spec.network;
  const model::TeacherTask task(dims, o.seed, o.micro_batch);
  const uint64_t A = o.accumulation, N = o.dp;

  TrainResult result;
  result.steps.resize(o.steps);
  uint64_t first = 0;  // rank 0's resume point (every rank gets the same)
  comm::make_host_group(o.comm, static_cast<int>(o.dp))->run([&](comm::Communicator& comm) {
    const uint64_t rank = static_cast<uint64_t>(comm.rank());
    if (rank == 0) result.has_rank0 = true;
    const pipeline::InitFn init = hooks.init ? hooks.init : [&](uint32_t p, float* out) {
      model::init_network_param(spec.params[p], dims, o.seed, model::NetworkRole::student, out);
    };
    pipeline::RankPipeline pipe(spec, o.pipeline, comm, init, o.threads_per_rank);
    const uint64_t start = hooks.resume ? hooks.resume(pipe, comm) : 0;
    if (start > o.steps)
      throw UsageError("train: the loaded state has taken " + std::to_string(start) + " steps, more than --steps " +
                       std::to_string(o.steps) + " (the step count to reach)");
    if (rank == 0) first = start;
    if (observer) observer(start, pipe);

    model::NetworkCompute net(dims);
    model::MicroBatch mb;
    std::vector<float> losses(A), all_losses(A * N);
    for (uint64_t t = start; t < o.steps; ++t) {
      const pipeline::GradFn grad_fn = [&](const std::vector<const float*>& params,
                                           const std::vector<float*>& grads) {
        for (uint64_t a = 0; a < A; ++a) {
          task.draw(model::micro_batch_index(t, N, rank, A, a), net, mb);
          losses[a] = net.forward_backward(params, mb.x.data(), mb.target.data(), mb.rows, grads,
                                           a == 0 ? model::GradMode::overwrite : model::GradMode::accumulate);
        }
      };
      const pipeline::StepReport rep = pipe.step(grad_fn, N * A);
      comm.all_gather(losses.data(), all_losses.data(), A * sizeof(float))->wait();
      if (rank == 0) {
        result.steps[t] = step_metrics(t, all_losses, rep);
        if (on_step) on_step(result.steps[t]);
      }
      if (observer) observer(t + 1, pipe);
      if (hooks.after_step) hooks.after_step(t + 1, pipe, comm);
    }
  });
  finish_result(result, o, spec.numel(), first);
  return result;
}

StepMetrics step_metrics(uint64_t step, const std::vector<float>& losses, const pipeline::StepReport& rep) {
  double sum = 0;
  for (float l : losses) sum += static_cast<double>(l);
  StepMetrics m;
  m.step = step;
  m.loss = sum / static_cast<double>(losses.size());
  m.grad_norm = rep.grad_norm;
  m.clip_coef = rep.clip_coef;
  m.skipped = rep.skipped;
  m.times = rep.times;
  return m;
}

void finish_result(TrainResult& result, const TrainOptions& o, uint64_t params, uint64_t first) {
  if (!result.has_rank0) {  // an mpi rank other than 0: rank 0's process reports
    result.steps.clear();
    return;
  }
  result.steps.erase(result.steps.begin(), result.steps.begin() + static_cast<int64_t>(first));

  TrainSummary& s = result.summary;
  s.steps = o.steps - first;
  s.first_step = first;
  s.dp = o.dp;
  s.params = params;
  if (!result.steps.empty()) {
    s.initial_loss = result.steps.front().loss;
    s.final_loss = result.steps.back().loss;
  }
  std::vector<double> total, fb, rs, opt, cb, ga, de;
  for (const StepMetrics& m : result.steps) {
    s.skipped += m.skipped ? 1 : 0;
    total.push_back(m.times.total());
    fb.push_back(m.times.forward_backward);
    rs.push_back(m.times.reduce_scatter);
    opt.push_back(m.times.optimizer);
    cb.push_back(m.times.copy_back);
    ga.push_back(m.times.gather);
    de.push_back(m.times.decode);
  }
  s.step_time_ms = median(total) * 1e3;
  s.median_times = {median(fb), median(rs), median(opt), median(cb), median(ga), median(de)};
  result.cursor = {o.seed, o.steps, o.micro_batch, o.accumulation, o.dp};
}

std::string step_json(const StepMetrics& m) {
  nlohmann::json j = {{"step", m.step},
                      {"loss", json_number(m.loss)},
                      {"grad_norm", json_number(m.grad_norm)},
                      {"clip_coef", m.clip_coef},
                      {"skipped", m.skipped}};
  j["times"] = times_json(m.times);
  return j.dump();
}

std::string summary_json(const TrainSummary& s) {
  nlohmann::json j = {{"initial_loss", json_number(s.initial_loss)},
                      {"final_loss", json_number(s.final_loss)},
                      {"steps", s.steps},
                      {"dp", s.dp},
                      {"params", s.params},
                      {"skipped_steps", s.skipped},
                      {"step_time_ms", s.step_time_ms}};
  if (s.first_step > 0) j["first_step"] = s.first_step;  // only resumed runs: fresh runs print as before
  j["phase_ms"] = times_json(s.median_times);
  return j.dump();
}

}  // namespace fpg::train
