// The built-in network on the GPU (pipeline/device/device_network.h) against the CPU's NetworkCompute, and the
// device micro-batches (pipeline/device/device_micro_batch.h) against TeacherTask::draw.
//
// Tolerance: every output, the loss and every gradient array agree with the CPU within
// kRelTol = 1e-4 of the array's largest CPU magnitude (max |gpu − cpu| ≤ 1e-4 · max |cpu|). Both sides
// are fp32 with double row sums; the difference is the GEMMs' and row sums' summation order (about
// 1e-6 relative per GEMM, a few such steps deep), far below 1e-4, while a wrong index, transpose or
// formula is off by O(1). Bitwise: GradMode::accumulate equals overwrite + an elementwise add, and
// two runs of the same inputs give the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "catch.h"
#include "pipeline/device/device_micro_batch.h"
#include "pipeline/device/device_network.h"
#include "kernels/cuda_check.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/presets.h"
#include "model/teacher_task.h"
#include "device_network_util.h"

using namespace fpg_gpu_test;
namespace model = fpg::model;

namespace {

constexpr double kRelTol = 1e-4;

// A network's params and a batch, on the host and on the device.
struct Case {
  model::NetworkDims dims;
  int64_t batch;
  std::vector<std::vector<float>> params;
  std::vector<std::unique_ptr<Dev<float>>> dparams;
  std::vector<float> x, target;
  std::unique_ptr<Dev<float>> dx, dtarget;

  Case(const model::NetworkDims& d, int64_t b, uint32_t seed) : dims(d), batch(b) {
    params = model::init_network_params(model::network_spec("case", d), seed, model::NetworkRole::teacher);
    for (const auto& p : params) dparams.push_back(std::make_unique<Dev<float>>(p));
    x = normals(uint64_t(b) * d.input, seed + 1);
    target = normals(uint64_t(b) * d.output, seed + 2);
    dx = std::make_unique<Dev<float>>(x);
    dtarget = std::make_unique<Dev<float>>(target);
    settle();
  }
  std::vector<const float*> device_params() const {
    std::vector<const float*> p;
    for (const auto& d : dparams) p.push_back(d->get());
    return p;
  }
};

}  // namespace

TEST_CASE("device network forward, loss and gradients match NetworkCompute", "[device-network]") {
  Stream stream;
  for (const Shape& shape : kAwkwardShapes) {
    Case c(shape.dims, shape.batch, 7);
    model::NetworkCompute cpu(c.dims);
    fpg::device::DeviceNetwork gpu(c.dims, stream.s);
    REQUIRE(gpu.param_count() == cpu.param_count());
    const auto cpu_params = model::const_pointers(c.params);

    std::vector<float> y_cpu(uint64_t(c.batch) * c.dims.output);
    cpu.forward(cpu_params, c.x.data(), c.batch, y_cpu.data());
    Dev<float> y_dev(std::vector<float>(y_cpu.size(), 0.0f));
    gpu.forward(c.device_params(), c.dx->get(), c.batch, y_dev.get());
    Dev<float> loss_dev(std::vector<float>(2, 0.0f));
    settle();
    gpu.loss(c.device_params(), c.dx->get(), c.dtarget->get(), c.batch, loss_dev.get());
    stream.sync();
    CHECK(rel_error(y_dev.host(), y_cpu) <= kRelTol);
    const float loss_cpu = cpu.loss(cpu_params, c.x.data(), c.target.data(), c.batch);
    CHECK(std::fabs(read_float(loss_dev.get()) - loss_cpu) <= kRelTol * loss_cpu);

    std::vector<std::vector<float>> g_cpu;
    for (const auto& p : c.params) g_cpu.emplace_back(p.size(), 0.0f);
    const float fb_cpu = cpu.forward_backward(cpu_params, c.x.data(), c.target.data(), c.batch,
                                              model::pointers(g_cpu), model::GradMode::overwrite);
    Grads g(c.params);
    settle();
    gpu.forward_backward(c.device_params(), c.dx->get(), c.dtarget->get(), c.batch, g.ptrs(),
                         model::GradMode::overwrite, loss_dev.get() + 1);
    stream.sync();
    CHECK(std::fabs(read_float(loss_dev.get() + 1) - fb_cpu) <= kRelTol * fb_cpu);
    const auto g_gpu = g.host();
    for (size_t i = 0; i < g_cpu.size(); ++i) {
      INFO("layers " << c.dims.layers << " hidden " << c.dims.hidden << " param " << i);
      CHECK(rel_error(g_gpu[i], g_cpu[i]) <= kRelTol);
    }
  }
}

TEST_CASE("device network accumulate equals overwrite plus an elementwise add, bitwise", "[device-network]") {
  Stream stream;
  for (const Shape& shape : kAwkwardShapes) {
    Case c1(shape.dims, shape.batch, 11);
    Case c2(shape.dims, shape.batch, 11);  // same params, other batch below
    c2.x = normals(c2.x.size(), 99);
    c2.target = normals(c2.target.size(), 98);
    c2.dx = std::make_unique<Dev<float>>(c2.x);
    c2.dtarget = std::make_unique<Dev<float>>(c2.target);
    settle();
    fpg::device::DeviceNetwork gpu(c1.dims, stream.s);

    Grads first(c1.params), second(c1.params), acc(c1.params);
    settle();
    gpu.forward_backward(c1.device_params(), c1.dx->get(), c1.dtarget->get(), c1.batch, first.ptrs(),
                         model::GradMode::overwrite, nullptr);
    gpu.forward_backward(c1.device_params(), c2.dx->get(), c2.dtarget->get(), c1.batch, second.ptrs(),
                         model::GradMode::overwrite, nullptr);
    gpu.forward_backward(c1.device_params(), c1.dx->get(), c1.dtarget->get(), c1.batch, acc.ptrs(),
                         model::GradMode::overwrite, nullptr);
    gpu.forward_backward(c1.device_params(), c2.dx->get(), c2.dtarget->get(), c1.batch, acc.ptrs(),
                         model::GradMode::accumulate, nullptr);
    stream.sync();
    const auto a = first.host(), b = second.host(), got = acc.host();
    for (size_t i = 0; i < a.size(); ++i) {
      std::vector<float> want(a[i].size());
      for (size_t k = 0; k < want.size(); ++k) want[k] = a[i][k] + b[i][k];
      INFO("param " << i);
      CHECK(mismatches(got[i], want) == 0);
    }
  }
}

TEST_CASE("device network runs are bitwise reproducible", "[device-network]") {
  Stream stream;
  for (const Shape& shape : kAwkwardShapes) {
    Case c(shape.dims, shape.batch, 5);
    std::vector<std::vector<std::vector<float>>> grads;
    std::vector<float> losses;
    for (int run = 0; run < 2; ++run) {  // a fresh instance each run: nothing carried over
      fpg::device::DeviceNetwork gpu(c.dims, stream.s);
      Grads g(c.params);
      Dev<float> loss(std::vector<float>(1, 0.0f));
      settle();
      gpu.forward_backward(c.device_params(), c.dx->get(), c.dtarget->get(), c.batch, g.ptrs(),
                           model::GradMode::overwrite, loss.get());
      stream.sync();
      grads.push_back(g.host());
      losses.push_back(read_float(loss.get()));
    }
    CHECK(mismatches({losses[0]}, {losses[1]}) == 0);
    for (size_t i = 0; i < grads[0].size(); ++i) CHECK(mismatches(grads[0][i], grads[1][i]) == 0);
  }
}

TEST_CASE("device micro-batches equal the CPU's: inputs bitwise, targets within tolerance", "[device-network]") {
  Stream stream;
  const model::NetworkDims dims{37, 50, 33, 2, 19};
  const model::TeacherTask task(dims, 4321, 9);
  model::NetworkCompute cpu(dims);
  fpg::device::DeviceNetwork gpu(dims, stream.s);
  fpg::device::DeviceMicroBatches batches(task, stream.s);
  REQUIRE(batches.rows() == 9);
  for (uint64_t index : {0ull, 5ull, 123456ull}) {
    batches.draw(index, gpu);
    stream.sync();
    std::vector<float> x(9 * dims.input), t(9 * dims.output);
    FPG_CUDA_CHECK(cudaMemcpy(x.data(), batches.x(), x.size() * sizeof(float), cudaMemcpyDeviceToHost));
    FPG_CUDA_CHECK(cudaMemcpy(t.data(), batches.target(), t.size() * sizeof(float), cudaMemcpyDeviceToHost));
    model::MicroBatch mb;
    task.draw(index, cpu, mb);
    INFO("micro-batch " << index);
    CHECK(mismatches(x, mb.x) == 0);
    CHECK(rel_error(t, mb.target) <= kRelTol);
  }
}
