#include "app/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "comm/group.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/teacher_task.h"
#include "app/train/train_setup.h"

namespace fpg::app::train {
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

// JSON has no NaN or infinity: a diverged loss is null.
nlohmann::json json_number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

// The metrics of step `step` from the losses of all its micro-batches (rank-major) and rank 0's report.
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

// After the ranks ran: drops the steps before `first` (a resumed run's), fills the summary (medians of
// rank 0's phase times; `params`: elements of the spec) and the cursor. Without rank 0: clears steps.
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

// The signal that stops the run before step t, agreed by every rank (each may have seen it at
// another moment), 0 to go on. Asked only where a signal can stop the process.
int agreed_interrupt(comm::Communicator& comm) {
  if (!interrupt_handlers_installed()) return 0;
  const auto all = comm.all_gather_bytes({static_cast<uint8_t>(interrupt_signal())});
  int sig = 0;
  for (const auto& b : all)
    if (!b.empty() && b[0] != 0) sig = b[0];
  return sig;
}

// A rank of train(): the host pipeline, the network on the CPU.
class HostTrainingRank final : public TrainingRank {
 public:
  HostTrainingRank(const TrainOptions& o, const model::ModelSpec& spec, const model::TeacherTask& task,
                   comm::Communicator& comm, const pipeline::InitFn& init, const RankObserver& observer,
                   const TrainHooks& hooks)
      : o_(o), task_(task), comm_(comm), observer_(observer), hooks_(hooks),
        pipe_(spec, o.pipeline, comm, init, o.threads_per_rank), net_(*spec.network, o.compute),
        losses_(o.accumulation) {}

  uint64_t resume() override { return hooks_.resume ? hooks_.resume(pipe_, comm_) : 0; }

  pipeline::StepReport step(uint64_t t, std::vector<float>& all_losses) override {
    const uint64_t A = o_.accumulation, N = o_.dp, rank = static_cast<uint64_t>(comm_.rank());
    const pipeline::GradFn grad_fn = [&](const std::vector<const float*>& params, const std::vector<float*>& grads) {
      for (uint64_t a = 0; a < A; ++a) {
        task_.draw(model::micro_batch_index(t, N, rank, A, a), net_, mb_);
        losses_[a] = net_.forward_backward(params, mb_.x.data(), mb_.target.data(), mb_.rows, grads,
                                           a == 0 ? model::GradMode::overwrite : model::GradMode::accumulate);
      }
    };
    const pipeline::StepReport rep = pipe_.step(grad_fn, N * A);
    comm_.all_gather(losses_.data(), all_losses.data(), A * sizeof(float))->wait();
    return rep;
  }

  void observe(uint64_t steps_done) override {
    if (observer_) observer_(steps_done, pipe_);
  }

  void after_step(uint64_t steps_done) override {
    if (hooks_.after_step) hooks_.after_step(steps_done, pipe_, comm_);
  }

 private:
  const TrainOptions& o_;
  const model::TeacherTask& task_;
  comm::Communicator& comm_;
  const RankObserver& observer_;
  const TrainHooks& hooks_;
  pipeline::RankPipeline pipe_;
  model::NetworkCompute net_;
  model::MicroBatch mb_;
  std::vector<float> losses_;  // this rank's, one per micro-batch
};

}  // namespace

TrainResult run_training(const TrainOptions& o, const model::ModelSpec& spec, comm::CommunicatorGroup& group,
                         const pipeline::InitFn& init, const MakeTrainingRank& make_rank,
                         const StepCallback& on_step) {
  const model::NetworkDims dims = *spec.network;
  TrainResult result;
  result.steps.resize(o.steps);
  uint64_t first = 0;  // rank 0's resume point (every rank resumes the same state)
  group.run([&](comm::Communicator& comm) {
    const bool rank0 = comm.rank() == 0;
    if (rank0) result.has_rank0 = true;
    const pipeline::InitFn seeded = [&](uint32_t p, float* out) {
      model::init_network_param(spec.params[p], dims, o.seed, model::NetworkRole::student, out);
    };
    const std::unique_ptr<TrainingRank> rank = make_rank(comm, init ? init : seeded);
    const uint64_t start = rank->resume();
    if (start > o.steps)
      throw UsageError("train: the loaded state has taken " + std::to_string(start) + " steps, more than --steps " +
                       std::to_string(o.steps) + " (the step count to reach)");
    if (rank0) {
      first = start;
      spdlog::info("training steps {} to {} on dp {}", start, o.steps, o.dp);
    }
    rank->observe(start);

    std::vector<float> all_losses(o.accumulation * o.dp);
    for (uint64_t t = start; t < o.steps; ++t) {
      if (const int sig = agreed_interrupt(comm))
        throw Interrupted(sig, "stopped after step " + std::to_string(t) + " of " + std::to_string(o.steps));
      const pipeline::StepReport rep = rank->step(t, all_losses);
      if (rank0) {
        result.steps[t] = step_metrics(t, all_losses, rep);
        if (on_step) on_step(result.steps[t]);
      }
      rank->observe(t + 1);
      rank->after_step(t + 1);
    }
  });
  finish_result(result, o, spec.numel(), first);
  return result;
}

TrainResult train(const TrainOptions& o, const RankObserver& observer, const StepCallback& on_step,
                  const TrainHooks& hooks) {
  const model::ModelSpec spec = training_spec(o);
  const model::TeacherTask task(*spec.network, o.seed, o.micro_batch);
  const auto group = comm::make_host_group(o.comm, static_cast<int>(o.dp));
  return run_training(
      o, spec, *group, hooks.init,
      [&](comm::Communicator& comm, const pipeline::InitFn& init) -> std::unique_ptr<TrainingRank> {
        return std::make_unique<HostTrainingRank>(o, spec, task, comm, init, observer, hooks);
      },
      on_step);
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
  j["first_step"] = s.first_step;  // > 0 for a resumed run
  j["phase_ms"] = times_json(s.median_times);
  return j.dump();
}

}  // namespace fpg::app::train
