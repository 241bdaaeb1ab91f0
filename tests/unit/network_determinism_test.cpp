// The built-in network's results are bitwise reproducible: same seed, same bits; concurrent ranks
// give the sequential bits; accumulating micro-batches equals summing their gradients in order.
#include <cstring>
#include <thread>
#include <vector>

#include "catch.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/presets.h"
#include "model/teacher_task.h"

using namespace fpg::model;

// OpenBLAS's own query, weak so the test links against any BLAS.
extern "C" int openblas_get_num_threads() __attribute__((weak));

namespace {

using Arrays = std::vector<std::vector<float>>;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_bits(const Arrays& a, const Arrays& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

Arrays zeros_like(const Arrays& a) {
  Arrays z;
  for (const auto& v : a) z.emplace_back(v.size(), 0.0f);
  return z;
}

struct Result {
  float loss = 0.0f;
  Arrays grads;
};

// Forward and backward of micro-batch `index` with a fresh draw into `net`'s hands.
Result run(const TeacherTask& task, NetworkCompute& net, const Arrays& params, uint64_t index) {
  MicroBatch mb;
  task.draw(index, net, mb);
  Result r;
  r.grads = zeros_like(params);
  r.loss = net.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows,
                                pointers(r.grads), GradMode::overwrite);
  return r;
}

}  // namespace

TEST_CASE("same seed, same bits", "[network]") {
  const ModelSpec spec = preset("tiny");
  const Arrays p1 = init_network_params(spec, 11, NetworkRole::student);
  const Arrays p2 = init_network_params(spec, 11, NetworkRole::student);
  CHECK(same_bits(p1, p2));
  CHECK(!same_bits(p1, init_network_params(spec, 12, NetworkRole::student)));

  const TeacherTask t1(*spec.network, 11, 16), t2(*spec.network, 11, 16);
  CHECK(same_bits(t1.teacher_params(), t2.teacher_params()));
  NetworkCompute n1(*spec.network), n2(*spec.network);
  const Result a = run(t1, n1, p1, 3), b = run(t2, n2, p2, 3);
  CHECK(a.loss == b.loss);
  CHECK(same_bits(a.grads, b.grads));
  // A reused instance (its workspace grown by a larger batch in between) still gives the same bits.
  const TeacherTask wide(*spec.network, 11, 48);
  run(wide, n1, p1, 0);
  const Result c = run(t1, n1, p1, 3);
  CHECK(c.loss == a.loss);
  CHECK(same_bits(c.grads, a.grads));
}

TEST_CASE("a network pins OpenBLAS to one thread", "[network]") {
  NetworkCompute net(NetworkDims{2, 2, 2, 1, 2});
  if (openblas_get_num_threads) CHECK(openblas_get_num_threads() == 1);
}

TEST_CASE("ranks running concurrently give the sequential bits", "[network]") {
  const ModelSpec spec = preset("tiny");
  const Arrays params = init_network_params(spec, 5, NetworkRole::student);
  const TeacherTask task(*spec.network, 5, 32);
  const int kRanks = 2, kPerRank = 6;

  std::vector<Result> sequential;
  NetworkCompute net(*spec.network);
  for (int i = 0; i < kRanks * kPerRank; ++i) sequential.push_back(run(task, net, params, i));

  // Each rank owns its workspace and shares the task and the params, as the pipeline's ranks do.
  std::vector<Result> concurrent(kRanks * kPerRank);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      NetworkCompute own(*spec.network);
      for (int k = 0; k < kPerRank; ++k) concurrent[k * kRanks + r] = run(task, own, params, k * kRanks + r);
    });
  for (auto& t : ranks) t.join();
  for (int i = 0; i < kRanks * kPerRank; ++i) {
    CAPTURE(i);
    CHECK(concurrent[i].loss == sequential[i].loss);
    CHECK(same_bits(concurrent[i].grads, sequential[i].grads));
  }
}

TEST_CASE("accumulating micro-batches equals summing their gradients in order, bitwise", "[network]") {
  const ModelSpec spec = preset("tiny");
  const Arrays params = init_network_params(spec, 9, NetworkRole::student);
  const TeacherTask task(*spec.network, 9, 16);
  NetworkCompute net(*spec.network);
  const int kAccum = 4;

  Arrays summed;
  for (int a = 0; a < kAccum; ++a) {
    const Result r = run(task, net, params, a);
    if (a == 0) {
      summed = r.grads;
      continue;
    }
    for (size_t i = 0; i < summed.size(); ++i)
      for (size_t j = 0; j < summed[i].size(); ++j) summed[i][j] += r.grads[i][j];
  }

  Arrays acc = zeros_like(params);
  MicroBatch mb;
  for (int a = 0; a < kAccum; ++a) {
    task.draw(a, net, mb);
    net.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows, pointers(acc),
                         a == 0 ? GradMode::overwrite : GradMode::accumulate);
  }
  CHECK(same_bits(acc, summed));
}
