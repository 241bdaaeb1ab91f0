// The built-in network learns: plain AdamW on whole fp32 params drives the student toward the teacher.
// The hidden "[.network-bench]" case prints the loss curves and forward+backward times of tiny and small.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <vector>

#include "catch.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/presets.h"
#include "model/teacher_task.h"
#include "optim/adam.h"

using namespace fpg::model;

namespace {

struct Curve {
  double initial = 0, final = 0;  // mean loss over held-out micro-batches, before and after
  std::vector<float> train_loss;  // per step
  double fb_ms = 0;               // thread CPU time of one forward+backward, mean
};

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// One process, DP=1, fp32 params, adam_step over whole params: the reference the pipeline must match.
Curve train(const char* preset_name, int steps, int64_t micro_batch, double lr, uint64_t seed) {
  const ModelSpec spec = preset(preset_name);
  const TeacherTask task(*spec.network, seed, micro_batch);
  NetworkCompute net(*spec.network);
  auto params = init_network_params(spec, seed, NetworkRole::student);
  std::vector<std::vector<float>> grads, m, v;
  for (const auto& p : params) {
    grads.emplace_back(p.size(), 0.0f);
    m.emplace_back(p.size(), 0.0f);
    v.emplace_back(p.size(), 0.0f);
  }
  // Held out: far from the training indices.
  std::vector<MicroBatch> eval(8);
  for (size_t k = 0; k < eval.size(); ++k) task.draw((uint64_t(1) << 40) + k, net, eval[k]);
  auto eval_loss = [&] {
    double s = 0;
    for (const auto& e : eval) s += net.loss(const_pointers(params), e.x.data(), e.target.data(), e.rows);
    return s / double(eval.size());
  };

  Curve c;
  c.initial = eval_loss();
  fpg::optim::AdamHyper h = fpg::optim::AdamHyper::adamw();
  h.lr = lr;
  MicroBatch mb;
  double fb = 0;
  for (int t = 0; t < steps; ++t) {
    task.draw(micro_batch_index(t, 1, 0, 1, 0), net, mb);
    const double t0 = thread_seconds();
    c.train_loss.push_back(net.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows,
                                                pointers(grads), GradMode::overwrite));
    fb += thread_seconds() - t0;
    for (size_t i = 0; i < params.size(); ++i)
      fpg::optim::adam_step(h, t + 1, params[i].data(), grads[i].data(), m[i].data(), v[i].data(),
                            int64_t(params[i].size()));
  }
  c.final = eval_loss();
  c.fb_ms = 1e3 * fb / steps;
  return c;
}

}  // namespace

TEST_CASE("tiny learns the teacher: 200 AdamW steps end below a third of the initial loss", "[network]") {
  const Curve c = train("tiny", 200, 32, 2e-3, 1);
  CAPTURE(c.initial, c.final);
  CHECK(c.initial > 0.5);  // O(1): the untrained student is about as far off as the targets' variance
  CHECK(c.initial < 2.0);
  CHECK(c.final < c.initial / 3);
  CHECK(c.train_loss.back() < c.train_loss.front() / 3);
}

TEST_CASE("network loss curves and timings", "[.network-bench]") {
  struct Run {
    const char* preset;
    int steps;
    double lr;
  };
  for (const Run& r : {Run{"tiny", 200, 1e-3}, Run{"tiny", 200, 2e-3}, Run{"tiny", 200, 3e-3},
                       Run{"small", 200, 1e-3}}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Curve c = train(r.preset, r.steps, 32, r.lr, 1);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-6s lr %.0e  steps %3d  micro-batch 32  eval loss %.4f -> %.4f (x%.3f)  train loss %.4f -> %.4f"
                "  fwd+bwd %.2f ms (thread CPU)  wall %.1f s\n",
                r.preset, r.lr, r.steps, c.initial, c.final, c.final / c.initial, c.train_loss.front(),
                c.train_loss.back(), c.fb_ms, wall);
    std::printf("  curve:");
    for (size_t t = 0; t < c.train_loss.size(); t += c.train_loss.size() / 10) std::printf(" %zu:%.3f", t, c.train_loss[t]);
    std::printf("\n");
  }
  CHECK(true);
}
