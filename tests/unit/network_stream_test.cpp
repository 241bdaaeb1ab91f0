// The built-in network's random streams: Philox against Random123's known answers, micro-batches and
// initial values independent of who draws them and of the DP layout, shapes from any network spec.
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "model/network_compute.h"
#include "model/network_init.h"
#include "model/philox.h"
#include "model/presets.h"
#include "model/teacher_task.h"

using namespace fpg::model;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("Philox4x32-10 gives Random123's known answers", "[network]") {
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("philox normals have mean 0 and variance 1", "[network]") {
  const PhiloxKey key = philox_key(1, 2);
  const int n = 200000;
  std::vector<float> z(n);
  philox_normal_fill(key, 3, n, 1.0f, z.data());
  double s = 0, ss = 0;
  for (float v : z) {
    s += v;
    ss += double(v) * v;
  }
  CHECK(std::abs(s / n) < 0.01);
  CHECK(std::abs(ss / n - 1.0) < 0.02);
  CHECK(z[7] == philox_normal(key, 3, 7));
}

TEST_CASE("micro-batch i is the same whoever draws it, and DP layouts draw the same set", "[network]") {
  const NetworkDims dims = *preset("tiny").network;
  const TeacherTask a(dims, 21, 8), b(dims, 21, 8);
  NetworkCompute na(dims), nb(dims);
  MicroBatch first, second;
  // Draw in different orders from different instances.
  std::vector<MicroBatch> forward(6), backward(6);
  for (int i = 0; i < 6; ++i) a.draw(i, na, forward[i]);
  for (int i = 5; i >= 0; --i) b.draw(i, nb, backward[i]);
  for (int i = 0; i < 6; ++i) {
    CHECK(same_bits(forward[i].x, backward[i].x));
    CHECK(same_bits(forward[i].target, backward[i].target));
  }
  CHECK(!same_bits(forward[0].x, forward[1].x));
  // Targets are the teacher's outputs at O(1) scale.
  double ss = 0;
  for (float t : forward[0].target) ss += double(t) * t;
  ss /= double(forward[0].target.size());
  CHECK(ss > 0.3);
  CHECK(ss < 3.0);

  // DP=N with A accumulation steps covers, step by step, exactly DP=1 with N·A accumulation steps.
  for (uint64_t dp : {1, 2, 3, 4, 8}) {
    for (uint64_t accum : {1, 2, 3}) {
      for (uint64_t step = 0; step < 3; ++step) {
        std::vector<uint64_t> ranks, single;
        for (uint64_t r = 0; r < dp; ++r)
          for (uint64_t k = 0; k < accum; ++k) ranks.push_back(micro_batch_index(step, dp, r, accum, k));
        for (uint64_t k = 0; k < dp * accum; ++k) single.push_back(micro_batch_index(step, 1, 0, dp * accum, k));
        CHECK(ranks == single);
      }
    }
  }
}

TEST_CASE("initial values depend on the name and seed, not on the spec around them", "[network]") {
  const ModelSpec spec = preset("tiny");
  const auto all = init_network_params(spec, 4, NetworkRole::student);
  // One param alone, as a rank that owns only it would compute it.
  const Param& fc1 = spec.params[5];
  REQUIRE(fc1.name == "blocks.1.fc1.weight");
  std::vector<float> alone(fc1.numel());
  init_network_param(fc1, *spec.network, 4, NetworkRole::student, alone.data());
  CHECK(same_bits(alone, all[5]));
  // keep_in_fp32 and dtypes do not change the values.
  ModelSpec fp32 = spec;
  mark_keep_in_fp32(fp32, "norm|output");
  const auto all32 = init_network_params(fp32, 4, NetworkRole::student);
  for (size_t i = 0; i < all.size(); ++i) CHECK(same_bits(all[i], all32[i]));
  // Teacher and student differ, and params of equal shape are not copies of each other.
  const auto teacher = init_network_params(spec, 4, NetworkRole::teacher);
  CHECK(!same_bits(all[2], teacher[2]));
  CHECK(!same_bits(all[2], all[5]));
  // Scales: fc1 entries ~ N(0, 1/hidden).
  double ss = 0;
  for (float v : all[2]) ss += double(v) * v;
  CHECK(std::abs(ss / double(all[2].size()) * double(spec.network->hidden) - 1.0) < 0.05);

  Param wrong = fc1;
  wrong.shape = {3, 3};
  CHECK_THROWS_AS(init_network_param(wrong, *spec.network, 4, NetworkRole::student, alone.data()),
                  fpg::UsageError);
  ModelSpec free_form = spec;
  free_form.network.reset();
  CHECK_THROWS_AS(init_network_params(free_form, 4, NetworkRole::student), fpg::UsageError);
}

TEST_CASE("any network spec runs with its own shapes", "[network]") {
  for (const NetworkDims& d : {NetworkDims{1, 1, 1, 0, 1}, NetworkDims{3, 4, 2, 1, 7}, NetworkDims{9, 16, 24, 3, 2}}) {
    const ModelSpec spec = network_spec("any", d);
    const auto params = init_network_params(spec, 1, NetworkRole::student);
    REQUIRE(params.size() == spec.params.size());
    for (size_t i = 0; i < params.size(); ++i) CHECK(params[i].size() == spec.params[i].numel());
    std::vector<std::vector<float>> grads;
    for (const auto& p : params) grads.emplace_back(p.size(), NAN);
    const TeacherTask task(d, 1, 5);
    NetworkCompute net(d);
    MicroBatch mb;
    task.draw(0, net, mb);
    CHECK(mb.x.size() == 5 * d.input);
    CHECK(mb.target.size() == 5 * d.output);
    const float loss = net.forward_backward(const_pointers(params), mb.x.data(), mb.target.data(), mb.rows,
                                            pointers(grads), GradMode::overwrite);
    CHECK(std::isfinite(loss));
    for (const auto& g : grads)
      for (float v : g) REQUIRE(std::isfinite(v));  // every element written
  }
  const NetworkDims d{3, 4, 2, 1, 7};
  NetworkCompute net(d);
  std::vector<const float*> too_few(2, nullptr);
  std::vector<float> x(3), y(7);
  CHECK_THROWS_AS(net.forward(too_few, x.data(), 1, y.data()), fpg::UsageError);
}

TEST_CASE("a param larger than the init's block is filled on threads with the one-thread values", "[network]") {
  const ModelSpec spec = preset("base");
  const Param* big = nullptr;
  for (const Param& p : spec.params)
    if (p.name == "blocks.0.fc1.weight") big = &p;
  REQUIRE(big != nullptr);
  REQUIRE(big->numel() > (uint64_t{1} << 20) + 1);  // several blocks, the last one partial
  std::vector<float> threaded(big->numel());
  init_network_param(*big, *spec.network, 9, NetworkRole::student, threaded.data());
  // The same values drawn in one pass, as philox_normal defines them.
  std::vector<float> one(big->numel());
  const double std_dev = 1.0 / std::sqrt(double(spec.network->hidden));
  philox_normal_fill(philox_key(9, 0x5354554445ull), fnv1a64(big->name), one.size(), static_cast<float>(std_dev), one.data());
  CHECK(same_bits(threaded, one));
}
