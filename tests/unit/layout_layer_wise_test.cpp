// The layer-wise layout: whole matrices to ranks by LPT on Newton-Schulz cost, the rest bucketed.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "layout/layer_wise_layout.h"
#include "model/model_spec.h"
#include "model/presets.h"

using namespace fpg;
using namespace fpg::layout;

namespace {

model::Param matrix(const std::string& name, uint64_t m, uint64_t n) {
  return {name, {m, n}, DType::BF16, model::Role::matrix, false, false};
}
model::Param vec(const std::string& name, uint64_t n) {
  return {name, {n}, DType::BF16, model::Role::vector, false, false};
}

BucketedOptions dp_opts(uint32_t dp) {
  BucketedOptions o;
  o.dp = dp;
  return o;
}

// Every matrix owned once; rank lists, slabs and gather sizes agree with each other.
void check_consistent(const model::ModelSpec& spec, const LayerWiseLayout& l) {
  REQUIRE(l.ranks.size() == l.dp);
  std::vector<int> owned(l.matrices.size(), 0);
  for (const auto& rk : l.ranks) {
    uint64_t cost = 0;
    for (uint32_t i : rk.owned) {
      ++owned[i];
      CHECK(l.matrices[i].owner == rk.rank);
      cost += l.matrices[i].cost;
    }
    CHECK(cost == rk.cost);
    CHECK(std::is_sorted(rk.owned.begin(), rk.owned.end()));
    for (const auto& g : l.groups) {
      uint64_t at = 0;
      for (uint32_t i : rk.owned) {
        if (l.matrices[i].dtype != g.dtype) continue;
        CHECK(l.matrices[i].offset == at);
        at += l.matrices[i].numel();
      }
      CHECK(at == g.sizes[rk.rank]);
    }
  }
  for (int c : owned) CHECK(c == 1);
  for (const auto& g : l.groups) {
    uint64_t d = 0;
    for (uint32_t r = 0; r < l.dp; ++r) {
      CHECK(g.displs[r] == d);
      d += g.sizes[r];
    }
    CHECK(g.total == d);
  }
  // Matrices and scalar params partition the spec.
  std::vector<int> seen(spec.params.size(), 0);
  for (const auto& m : l.matrices) ++seen[m.param];
  for (const auto& b : l.scalar.buffers)
    for (const auto& s : b.params) ++seen[s.param];
  for (int c : seen) CHECK(c == 1);
}

}  // namespace

TEST_CASE("Newton-Schulz cost is max(m,n)*min(m,n)^2", "[layout]") {
  CHECK(newton_schulz_cost(352, 48) == 352ull * 48 * 48);
  CHECK(newton_schulz_cost(48, 352) == 352ull * 48 * 48);
  CHECK(newton_schulz_cost(1, 1) == 1);
  CHECK_THROWS_AS(newton_schulz_cost(1ull << 40, 1ull << 40), UsageError);
}

TEST_CASE("layer-wise: LPT assignment with the total-order tie-break", "[layout]") {
  model::ModelSpec spec;
  spec.name = "lw";
  spec.params = {matrix("a", 64, 64), vec("n", 64), matrix("b", 128, 64), matrix("c", 64, 64),
                 matrix("d", 64, 128), matrix("e", 32, 32)};
  const auto l = build_layer_wise_layout(spec, dp_opts(2));
  check_consistent(spec, l);
  REQUIRE(l.matrices.size() == 5);
  // Costs: b = d = 128*64^2 (tie; equal numel too, so b first by index), a = c = 64^3, e = 32^3.
  // LPT: b->0, d->1, a->0, c->1, e->0.
  CHECK(*l.owner(2) == 0);
  CHECK(*l.owner(4) == 1);
  CHECK(*l.owner(0) == 0);
  CHECK(*l.owner(3) == 1);
  CHECK(*l.owner(5) == 0);
  CHECK(!l.owner(1));
  // Rank 0 packs a, b, e in registration order.
  const auto& r0 = l.ranks[0].owned;
  REQUIRE(r0.size() == 3);
  CHECK(l.matrices[r0[0]].name == "a");
  CHECK(l.matrices[r0[1]].name == "b");
  CHECK(l.matrices[r0[2]].name == "e");
  CHECK(l.matrices[r0[1]].offset == 64 * 64);
  REQUIRE(l.groups.size() == 1);
  CHECK(l.groups[0].sizes == std::vector<uint64_t>{64 * 64 + 128 * 64 + 32 * 32, 128 * 64 + 64 * 64});
  // The vector is on the scalar layout.
  REQUIRE(l.scalar.buffers.size() == 1);
  CHECK(l.scalar.buffers[0].params.size() == 1);
  CHECK(l.scalar.buffers[0].params[0].name == "n");
  // Pure function: identical on every call (every rank).
  CHECK(build_layer_wise_layout(spec, dp_opts(2)) == l);
}

TEST_CASE("layer-wise: equal matrices are dealt round-robin by registration index", "[layout]") {
  model::ModelSpec spec;
  spec.name = "eq";
  for (int i = 0; i < 6; ++i) spec.params.push_back(matrix("m" + std::to_string(i), 40, 40));
  const auto l = build_layer_wise_layout(spec, dp_opts(4));
  check_consistent(spec, l);
  const std::vector<uint32_t> want = {0, 1, 2, 3, 0, 1};
  for (uint32_t i = 0; i < 6; ++i) CHECK(*l.owner(i) == want[i]);
  CHECK(l.scalar.buffers.empty());
}

TEST_CASE("layer-wise: more ranks than matrices leaves ranks empty", "[layout]") {
  model::ModelSpec spec;
  spec.name = "few";
  spec.params = {matrix("a", 10, 20), vec("n", 20), matrix("b", 30, 20), matrix("c", 5, 5)};
  const auto l = build_layer_wise_layout(spec, dp_opts(8));
  check_consistent(spec, l);
  int empty = 0;
  for (const auto& r : l.ranks) empty += r.owned.empty() ? 1 : 0;
  CHECK(empty == 5);
  CHECK(l.groups[0].sizes[7] == 0);
  CHECK(l.groups[0].total == 200 + 600 + 25);
  // The scalar buffer still spans all 8 ranks.
  CHECK(l.scalar.buffers[0].buckets[0].shards.size() == 8);
}

TEST_CASE("layer-wise: fp32-kept params stay apart; rank 0 may own none of them", "[layout]") {
  model::ModelSpec spec;
  spec.name = "mixed";
  spec.params = {matrix("big", 256, 256), matrix("k1", 32, 32), vec("norm", 32), matrix("k2", 32, 32),
                 vec("kv", 16)};
  for (const char* n : {"k1", "k2", "kv"}) {
    auto& p = spec.params[static_cast<size_t>(spec.find(n))];
    p.keep_in_fp32 = true;
    p.dtype = DType::F32;
  }
  SECTION("default: fp32-kept matrices go to the scalar optimizer, in their own fp32 buffer") {
    const auto l = build_layer_wise_layout(spec, dp_opts(3));
    check_consistent(spec, l);
    REQUIRE(l.matrices.size() == 1);
    REQUIRE(l.groups.size() == 1);
    CHECK(l.groups[0].dtype == DType::BF16);
    // k1 is the first scalar param in registration order, so the fp32 buffer comes first.
    REQUIRE(l.scalar.buffers.size() == 2);
    CHECK(l.scalar.buffers[0].key.param_dtype == DType::F32);
    CHECK(l.scalar.buffers[0].params.size() == 3);
    CHECK(l.scalar.buffers[1].key.param_dtype == DType::BF16);
  }
  SECTION("fp32_matrices: they gather natively in an F32 group that rank 0 has no part of") {
    LayerWiseOptions lw;
    lw.fp32_matrices = true;
    const auto l = build_layer_wise_layout(spec, dp_opts(3), lw);
    check_consistent(spec, l);
    REQUIRE(l.matrices.size() == 3);
    REQUIRE(l.groups.size() == 2);
    const auto g = l.group(DType::F32);
    REQUIRE(g);
    CHECK(*l.owner(0) == 0);  // the big bf16 matrix
    CHECK(l.groups[*g].sizes == std::vector<uint64_t>{0, 1024, 1024});
    CHECK(l.groups[*l.group(DType::BF16)].sizes == std::vector<uint64_t>{65536, 0, 0});
    CHECK(l.scalar.buffers.size() == 2);  // norm (bf16) and kv (fp32)
  }
}

TEST_CASE("layer-wise: balanced Newton-Schulz cost on presets", "[layout]") {
  for (const char* name : {"tiny", "base", "1b"}) {
    const auto spec = model::preset(name);
    for (uint32_t dp : {2u, 3u, 4u, 8u, 16u, 64u}) {
      CAPTURE(name, dp);
      const auto l = build_layer_wise_layout(spec, dp_opts(dp));
      check_consistent(spec, l);
      CHECK(l.matrices.size() == 2 * spec.network->layers);
      uint64_t total = 0, biggest = 0, worst = 0;
      for (const auto& m : l.matrices) {
        total += m.cost;
        biggest = std::max(biggest, m.cost);
      }
      for (const auto& r : l.ranks) worst = std::max(worst, r.cost);
      // Graham's bound for LPT: at most 4/3 of the optimum, which is >= max(mean, biggest).
      const double bound = std::max(double(total) / dp, double(biggest));
      CHECK(double(worst) <= bound * 4.0 / 3.0);
      CHECK(build_layer_wise_layout(spec, dp_opts(dp)) == l);
    }
  }
}
