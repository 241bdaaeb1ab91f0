// The CPU reference of `--compute bf16` (model/network_compute.h's rounding points):
//   - its forward is the fp64 reference rounded at the same points (model/network_reference.h), far
//     closer to it than to the unrounded math: the rounding is where the header says, and only there;
//   - parameters are rounded where read: a bf16-exact copy gives the same bits;
//   - its gradients point where the fp32 gradients point (bf16 operands perturb them by ~2^-9 each);
//   - accumulate equals overwrite plus an elementwise add, and runs repeat bit for bit;
//   - training tiny in bf16 follows the fp32 loss curve (the bound bench-step-vs-torch.sh holds
//     torch AMP to: every 10-step window's mean within 5e-2).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "app/train/trainer.h"
#include "catch.h"
#include "core/error.h"
#include "model/compute_mode.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/network_reference.h"
#include "model/philox.h"
#include "model/presets.h"
#include "model/teacher_task.h"
#include "network_test_util.h"

using namespace fpg::model;
using fpg::test::const_ptrs;
using fpg::test::to_double;

namespace {

// Wide enough that a layer sums dozens of bf16 products, small enough for the fp64 reference.
const NetworkDims kDims{24, 40, 56, 3, 16};
constexpr int64_t kRows = 8;

// Student params (fp32 values, not bf16-exact) with the norm weights moved off 1.
std::vector<std::vector<float>> test_params(const ModelSpec& spec) {
  auto params = init_network_params(spec, 11, NetworkRole::student);
  const PhiloxKey key = philox_key(11, 77);
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const float gain = spec.params[i].role == Role::output ? 10.0f : 1.0f;  // undo the student's small head
    for (size_t j = 0; j < params[i].size(); ++j) {
      if (spec.params[i].role == Role::vector) params[i][j] += 0.3f * philox_normal(key, i, j);
      else params[i][j] *= gain;
    }
  }
  return params;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max |a − b| / max |b|.
template <class A, class B>
double rel_diff(const std::vector<A>& a, const std::vector<B>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    s = std::max(s, std::fabs(double(b[i])));
  }
  return s > 0 ? d / s : d;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::vector<std::vector<float>> zeros_like(const std::vector<std::vector<float>>& a) {
  std::vector<std::vector<float>> z;
  for (const auto& v : a) z.emplace_back(v.size(), 0.0f);
  return z;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof x) == 0;
         });
}

}  // namespace

TEST_CASE("compute mode names", "[network][bf16]") {
  CHECK(parse_compute("fp32") == Compute::fp32);
  CHECK(parse_compute("bf16") == Compute::bf16);
  CHECK(std::string(compute_name(Compute::bf16)) == "bf16");
  CHECK_THROWS_AS(parse_compute("fp16"), fpg::UsageError);
  // 7 stored mantissa bits: the spacing at 1 is 2^-7, ties to even.
  CHECK(round_to_bf16(1.0f + 0x1p-8f) == 1.0f);
  CHECK(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  CHECK(round_to_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  CHECK(std::isnan(round_to_bf16(NAN)));
}

TEST_CASE("bf16 forward is the fp64 reference rounded at the same points", "[network][bf16]") {
  const ModelSpec spec = network_spec("bf16", kDims);
  const auto params = test_params(spec);
  const TeacherTask task(kDims, 5, kRows);
  NetworkCompute fp32(kDims);
  MicroBatch mb;
  task.draw(3, fp32, mb);

  NetworkCompute bf16(kDims, Compute::bf16);
  REQUIRE(bf16.compute() == Compute::bf16);
  std::vector<float> y(mb.target.size());
  bf16.forward(const_pointers(params), mb.x.data(), mb.rows, y.data());

  const auto pd = to_double(params);
  const std::vector<double> xd(mb.x.begin(), mb.x.end());
  std::vector<double> ref16(y.size()), ref32(y.size());
  network_forward_reference(kDims, const_ptrs(pd), xd.data(), mb.rows, ref16.data(), Compute::bf16);
  network_forward_reference(kDims, const_ptrs(pd), xd.data(), mb.rows, ref32.data(), Compute::fp32);
  REQUIRE(max_abs(ref32) > 0.1);
  const double to_rounded = rel_diff(y, ref16), to_exact = rel_diff(y, ref32);
  std::printf("bf16 forward: %.3g of max|y| from the rounded fp64 reference, %.3g from the unrounded\n", to_rounded,
              to_exact);
  CAPTURE(to_rounded, to_exact);
  // The rounded reference differs only in how the fp32 sums round (a bf16 rounding may flip where a
  // sum sits within an fp32 ulp of a tie); the unrounded math by the bf16 rounding itself.
  CHECK(to_rounded <= 2e-4);
  CHECK(to_exact >= 5e-4);
  CHECK(to_rounded * 10 <= to_exact);

  // Parameters are rounded where read: handing over bf16-exact copies changes nothing.
  std::vector<std::vector<float>> exact = params;
  for (auto& p : exact)
    for (float& v : p) v = round_to_bf16(v);
  std::vector<float> y_exact(y.size());
  bf16.forward(const_pointers(exact), mb.x.data(), mb.rows, y_exact.data());
  CHECK(same_bits(y, y_exact));
  // The fp32 mode reads them as they are.
  std::vector<float> y32(y.size()), y32_exact(y.size());
  fp32.forward(const_pointers(params), mb.x.data(), mb.rows, y32.data());
  fp32.forward(const_pointers(exact), mb.x.data(), mb.rows, y32_exact.data());
  CHECK_FALSE(same_bits(y32, y32_exact));
}

TEST_CASE("bf16 gradients point where the fp32 gradients point", "[network][bf16]") {
  const ModelSpec spec = network_spec("bf16", kDims);
  const auto params = test_params(spec);
  const TeacherTask task(kDims, 5, kRows);
  NetworkCompute fp32(kDims), bf16(kDims, Compute::bf16);
  MicroBatch mb;
  task.draw(4, fp32, mb);
  auto g32 = zeros_like(params), g16 = zeros_like(params);
  const float l32 = fp32.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows,
                                          pointers(g32), GradMode::overwrite);
  const float l16 = bf16.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows,
                                          pointers(g16), GradMode::overwrite);
  CAPTURE(l32, l16);
  CHECK(std::fabs(l16 - l32) <= 2e-2 * l32);
  CHECK(l16 != l32);  // the bf16 path did run
  // The loss equals loss() of the same mode.
  CHECK(l16 == bf16.loss(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows));
  double worst_cos = 1, worst_rel = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const double c = cosine(g16[i], g32[i]), r = rel_diff(g16[i], g32[i]);
    INFO(spec.params[i].name << ": cosine " << c << ", max diff " << r << " of max|g|");
    CHECK(c >= 0.999);
    CHECK(r <= 5e-2);
    worst_cos = std::min(worst_cos, c);
    worst_rel = std::max(worst_rel, r);
  }
  std::printf("bf16 vs fp32 gradients: cosine >= %.6f, max diff <= %.3g of max|g|\n", worst_cos, worst_rel);
}

TEST_CASE("bf16 accumulate is overwrite plus an add, and runs repeat bitwise", "[network][bf16]") {
  const ModelSpec spec = network_spec("bf16", kDims);
  const auto params = test_params(spec);
  const TeacherTask task(kDims, 5, kRows);
  NetworkCompute net(kDims, Compute::bf16), again(kDims, Compute::bf16);
  MicroBatch a, b;
  task.draw(0, net, a);
  task.draw(1, net, b);
  auto ga = zeros_like(params), gb = zeros_like(params), acc = zeros_like(params), rep = zeros_like(params);
  const auto P = const_pointers(params);
  net.forward_backward(P, a.x.data(), a.target.data(), a.rows, pointers(ga), GradMode::overwrite);
  net.forward_backward(P, b.x.data(), b.target.data(), b.rows, pointers(gb), GradMode::overwrite);
  net.forward_backward(P, a.x.data(), a.target.data(), a.rows, pointers(acc), GradMode::overwrite);
  net.forward_backward(P, b.x.data(), b.target.data(), b.rows, pointers(acc), GradMode::accumulate);
  again.forward_backward(P, a.x.data(), a.target.data(), a.rows, pointers(rep), GradMode::overwrite);
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> want(ga[i].size());
    for (size_t k = 0; k < want.size(); ++k) want[k] = ga[i][k] + gb[i][k];
    INFO(spec.params[i].name);
    CHECK(same_bits(acc[i], want));
    CHECK(same_bits(rep[i], ga[i]));
  }
}

TEST_CASE("training tiny in bf16 follows the fp32 loss curve", "[network][bf16]") {
  fpg::app::train::TrainOptions o;
  o.spec = preset("tiny");
  o.dp = 1;
  o.steps = 100;
  o.micro_batch = 32;
  o.seed = 1234;
  o.pipeline.optimizer = fpg::optim::OptimizerKind::adamw;
  o.pipeline.lr = 3e-3;
  o.pipeline.clip_grad = 1.0;
  const fpg::app::train::TrainResult r32 = fpg::app::train::train(o);
  o.compute = Compute::bf16;
  const fpg::app::train::TrainResult r16 = fpg::app::train::train(o);
  REQUIRE(r16.steps.size() == r32.steps.size());
  double worst = 0;
  for (size_t t = 0; t + 10 <= r16.steps.size(); t += 10) {
    double s16 = 0, s32 = 0;
    for (size_t k = t; k < t + 10; ++k) {
      s16 += r16.steps[k].loss;
      s32 += r32.steps[k].loss;
    }
    worst = std::max(worst, std::fabs(s16 - s32) / s32);
  }
  std::printf("tiny, 100 steps: fp32 %.6f -> %.6f, bf16 %.6f -> %.6f; 10-step windows within %.3g\n",
              r32.summary.initial_loss, r32.summary.final_loss, r16.summary.initial_loss, r16.summary.final_loss,
              worst);
  CAPTURE(worst, r16.summary.initial_loss, r16.summary.final_loss);
  CHECK(worst <= 5e-2);
  CHECK(r16.summary.final_loss < r16.summary.initial_loss / 2);
  CHECK(r16.summary.initial_loss != r32.summary.initial_loss);  // the modes differ from step 0
  CHECK(r16.summary.skipped == 0);
}
