// The built-in network's fp32 forward and backward against an independent fp64 forward: the forward
// to a few fp32 ulps, and every gradient element against central finite differences of the fp64 loss.
#include <cmath>
#include <cstdint>
#include <vector>

#include "catch.h"
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

const NetworkDims kSmallDims{5, 8, 6, 2, 3};

// Student params with the norm weights moved off 1, so their gradients and their effect on the
// others are exercised too.
std::vector<std::vector<float>> test_params(const ModelSpec& spec) {
  auto params = init_network_params(spec, 7, NetworkRole::student);
  const PhiloxKey key = philox_key(7, 99);
  for (size_t i = 0; i < spec.params.size(); ++i)
    if (spec.params[i].role == Role::vector)
      for (size_t j = 0; j < params[i].size(); ++j) params[i][j] += 0.3f * philox_normal(key, i, j);
  return params;
}

}  // namespace

TEST_CASE("fp32 forward matches the fp64 reference", "[network]") {
  const ModelSpec spec = network_spec("grad", kSmallDims);
  const auto params = test_params(spec);
  TeacherTask task(kSmallDims, 3, 4);
  NetworkCompute net(kSmallDims);
  MicroBatch mb;
  task.draw(0, net, mb);

  std::vector<float> y(mb.target.size());
  net.forward(const_pointers(params), mb.x.data(), mb.rows, y.data());
  const auto pd = to_double(params);
  const std::vector<double> xd(mb.x.begin(), mb.x.end()), td(mb.target.begin(), mb.target.end());
  std::vector<double> yd(y.size());
  network_forward_reference(kSmallDims, const_ptrs(pd), xd.data(), mb.rows, yd.data());
  for (size_t i = 0; i < y.size(); ++i) CHECK(std::abs(y[i] - yd[i]) <= 1e-5 * (1.0 + std::abs(yd[i])));

  const double ref = network_loss_reference(kSmallDims, const_ptrs(pd), xd.data(), td.data(), mb.rows);
  const float loss = net.loss(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows);
  CHECK(std::abs(loss - ref) <= 1e-5 * ref);
  CHECK(ref > 0.1);  // the student is far from the teacher: gradients are not all tiny
}

TEST_CASE("backward matches central finite differences of the fp64 loss, every element", "[network]") {
  const ModelSpec spec = network_spec("grad", kSmallDims);
  const auto params = test_params(spec);
  TeacherTask task(kSmallDims, 3, 4);
  NetworkCompute net(kSmallDims);
  MicroBatch mb;
  task.draw(0, net, mb);

  std::vector<std::vector<float>> grads;
  for (const auto& p : params) grads.emplace_back(p.size(), 0.0f);
  const float loss =
      net.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows, pointers(grads),
                           GradMode::overwrite);
  CHECK(loss == net.loss(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows));

  auto pd = to_double(params);
  const std::vector<double> xd(mb.x.begin(), mb.x.end()), td(mb.target.begin(), mb.target.end());
  double gmax = 0.0;
  for (const auto& g : grads)
    for (float v : g) gmax = std::max(gmax, double(std::abs(v)));
  REQUIRE(gmax > 1e-3);

  // fp64 differences with h = 1e-5 are exact to ~1e-9; the fp32 analytic gradient carries relative
  // rounding of ~1e-6 and absolute noise of ~1e-7·gmax, so 1e-4 relative + 1e-5·gmax has wide margin
  // while a wrong term (a missing factor, a dropped residual path) misses by orders of magnitude.
  const double h = 1e-5;
  int64_t checked = 0, bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < pd.size(); ++i) {
    for (size_t j = 0; j < pd[i].size(); ++j) {
      const double saved = pd[i][j];
      pd[i][j] = saved + h;
      const double up = network_loss_reference(kSmallDims, const_ptrs(pd), xd.data(), td.data(), mb.rows);
      pd[i][j] = saved - h;
      const double down = network_loss_reference(kSmallDims, const_ptrs(pd), xd.data(), td.data(), mb.rows);
      pd[i][j] = saved;
      const double numeric = (up - down) / (2 * h);
      const double err = std::abs(double(grads[i][j]) - numeric);
      const double tol = 1e-4 * std::abs(numeric) + 1e-5 * gmax;
      worst = std::max(worst, err / tol);
      if (err > tol) {
        ++bad;
        CAPTURE(spec.params[i].name, j, grads[i][j], numeric);
        CHECK(err <= tol);
      }
      ++checked;
    }
  }
  CHECK(uint64_t(checked) == spec.numel());
  CHECK(bad == 0);
  CAPTURE(worst);
  CHECK(worst < 1.0);
}

TEST_CASE("accumulate mode adds the gradient onto what is there", "[network]") {
  const ModelSpec spec = network_spec("grad", kSmallDims);
  const auto params = test_params(spec);
  TeacherTask task(kSmallDims, 3, 4);
  NetworkCompute net(kSmallDims);
  MicroBatch mb;
  task.draw(5, net, mb);
  std::vector<std::vector<float>> g, acc;
  for (const auto& p : params) {
    g.emplace_back(p.size(), 0.0f);
    acc.emplace_back(p.size(), 0.5f);
  }
  const float l1 = net.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows,
                                        pointers(g), GradMode::overwrite);
  const float l2 = net.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows,
                                        pointers(acc), GradMode::accumulate);
  CHECK(l1 == l2);
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t j = 0; j < g[i].size(); ++j) REQUIRE(acc[i][j] == 0.5f + g[i][j]);
}
