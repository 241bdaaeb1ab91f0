// Per-expert FP8 scales in `convert`: a stacked tensor [E..., R, C] quantizes each matrix exactly as
// the CPU reference quantizer does that matrix alone (bitwise), matches the NumPy goldens of
// testdata/fp8_experts, and dequantizes back per matrix, with or without fpgather's metadata.
#include <cstring>
#include <string>
#include <vector>

#include "catch.h"
#include "app/convert/fp8_pair.h"
#include "app/convert/quantize_model.h"
#include "core/error.h"
#include "fp8/quantize.h"
#include "fp8/recipe.h"
#include "fp8/stacked.h"
#include "formats/safetensors/model.h"
#include "formats/safetensors/writer.h"
#include "safetensors_test_util.h"

using namespace fpg;

namespace {

const std::string kDir = std::string(FPG_TESTDATA_DIR) + "/fp8_experts/";
const std::string kInput = kDir + "experts.safetensors";
const char* const kRecipes[] = {"tensorwise", "blockwise", "blockwise-1x128", "mxfp8"};

fp8::Recipe recipe_named(const std::string& name) {
  const fp8::Scaling s = *fp8::parse_scaling(name);
  switch (s) {
    case fp8::Scaling::tensorwise: return fp8::Recipe::tensorwise();
    case fp8::Scaling::blockwise_1x128: return fp8::Recipe::blockwise_1x128();
    case fp8::Scaling::blockwise_128x128: return fp8::Recipe::blockwise_128x128();
    default: return fp8::Recipe::mxfp8();
  }
}

std::vector<uint8_t> bytes_of(const safetensors::Model& m, const std::string& name) {
  const auto span = m.bytes(m.tensor(name));
  return {span.begin(), span.end()};
}

// The reference: matrix `i` of the stacked tensor quantized on its own.
fp8::QuantizedTensor quantize_matrix(const safetensors::Model& in, const std::string& name, const fp8::Recipe& r,
                                     uint64_t i) {
  const auto& t = *in.tensor(name).info;
  const uint64_t R = t.shape[t.shape.size() - 2], C = t.shape.back();
  const size_t elem = t.dtype == DType::BF16 ? 2 : 4;
  const uint8_t* values = in.data(in.tensor(name)) + i * R * C * elem;
  return fp8::quantize_tensor(r, t.dtype == DType::BF16 ? fp8::Input::bf16 : fp8::Input::f32, {R, C}, values, name);
}

uint64_t matrices_of(const std::vector<uint64_t>& shape, size_t expert_dims) {
  uint64_t n = 1;
  for (size_t d = 0; d < expert_dims; ++d) n *= shape[d];
  return n;
}

}  // namespace

TEST_CASE("convert: stacked experts are quantized matrix by matrix, bitwise as the reference and the goldens",
          "[convert][experts]") {
  sttest::TempDir tmp;
  const auto in = safetensors::Model::open(kInput);
  for (const char* name : kRecipes) {
    SECTION(name) {
      const fp8::Recipe r = recipe_named(name);
      app::convert::QuantizeModelOptions o;
      o.recipe = r;
      const std::string out_path = tmp.file(std::string(name) + ".safetensors");
      const app::convert::ConvertSummary s = app::convert::quantize_model(kInput, out_path, o);
      CHECK(s.quantized == 3);
      CHECK(s.copied == 1);
      const auto out = safetensors::Model::open(out_path);
      const auto golden = safetensors::Model::open(kDir + "expected-" + name + ".safetensors");

      struct Case {
        const char* tensor;
        size_t expert_dims;
      };
      for (const Case c : {Case{"layers.0.experts.w13", 1}, Case{"layers.0.experts.w2", 2},
                           Case{"layers.0.dense.weight", 0}}) {
        INFO(c.tensor);
        const std::string scale = std::string(c.tensor) + app::convert::kScaleSuffix;
        const auto& shape = in.tensor(c.tensor).info->shape;
        // Scale shape: the expert dimensions, then one matrix's grid.
        std::vector<uint64_t> want_shape(shape.begin(), shape.begin() + static_cast<long>(c.expert_dims));
        const fp8::QuantizedTensor first = quantize_matrix(in, c.tensor, r, 0);
        want_shape.insert(want_shape.end(), first.scale_shape.begin(), first.scale_shape.end());
        CHECK(out.tensor(scale).info->shape == want_shape);
        CHECK(golden.tensor(scale).info->shape == want_shape);

        const std::vector<uint8_t> data = bytes_of(out, c.tensor), scales = bytes_of(out, scale);
        CHECK(data == bytes_of(golden, c.tensor));
        CHECK(scales == bytes_of(golden, scale));
        const uint64_t n = matrices_of(shape, c.expert_dims);
        const uint64_t per = data.size() / n, per_scale = scales.size() / n;
        for (uint64_t i = 0; i < n; ++i) {
          const fp8::QuantizedTensor q = quantize_matrix(in, c.tensor, r, i);
          REQUIRE(q.data.size() == per);
          REQUIRE(q.scale_inv.size() == per_scale);
          CHECK(std::memcmp(q.data.data(), data.data() + i * per, per) == 0);
          CHECK(std::memcmp(q.scale_inv.data(), scales.data() + i * per_scale, per_scale) == 0);
        }
      }
      // The experts differ in magnitude by orders: per-expert scales differ (one shared scale would not).
      if (r.scaling == fp8::Scaling::tensorwise) {
        const auto s13 = bytes_of(out, std::string("layers.0.experts.w13") + app::convert::kScaleSuffix);
        CHECK(std::memcmp(s13.data(), s13.data() + 4, 4) != 0);
      }
    }
  }
}

TEST_CASE("convert --dequantize: per-expert scales round trip, read off the scale's shape without metadata",
          "[convert][experts]") {
  sttest::TempDir tmp;
  for (const char* name : kRecipes) {
    SECTION(name) {
      const fp8::Recipe r = recipe_named(name);
      app::convert::QuantizeModelOptions o;
      o.recipe = r;
      const std::string q_path = tmp.file("q.safetensors");
      app::convert::quantize_model(kInput, q_path, o);
      const auto q = safetensors::Model::open(q_path);

      // The same tensors without fpgather's metadata: the recipe and expert dimensions are inferred.
      const std::string bare = tmp.file("bare.safetensors");
      {
        std::vector<safetensors::TensorSpec> specs;
        for (const auto& e : q.tensors()) specs.push_back({e.info->name, e.info->dtype, e.info->shape});
        safetensors::Writer w(bare, specs);
        for (const auto& e : q.tensors()) w.write(e.info->name, 0, q.data(e), e.info->nbytes());
        w.commit();
      }
      for (const std::string& src : {q_path, bare}) {
        INFO(src);
        const auto model = safetensors::Model::open(src);
        const fp8::StackedPlan p =
            app::convert::fp8_pair_plan(model, *model.tensor("layers.0.experts.w2").info,
                                   *model.tensor(std::string("layers.0.experts.w2") + app::convert::kScaleSuffix).info);
        CHECK(p.expert_shape == std::vector<uint64_t>{2, 2});
        CHECK(p.matrix.recipe.scaling == r.scaling);
        CHECK(p.matrix.M == 40);
        const std::string deq = tmp.file("deq.safetensors");
        app::convert::DequantizeModelOptions d;
        d.dtype = DType::F32;
        d.force = true;
        app::convert::dequantize_model(src, deq, d);
        const auto back = safetensors::Model::open(deq);
        CHECK(back.find(std::string("layers.0.experts.w13") + app::convert::kScaleSuffix) == nullptr);
        for (const char* t : {"layers.0.experts.w13", "layers.0.experts.w2"}) {
          INFO(t);
          const auto& shape = q.tensor(t).info->shape;
          const uint64_t R = shape[shape.size() - 2], C = shape.back(), n = q.tensor(t).info->numel / (R * C);
          const auto scales = bytes_of(q, std::string(t) + app::convert::kScaleSuffix);
          const uint64_t per_scale = scales.size() / n;
          const auto got = bytes_of(back, t);
          REQUIRE(got.size() == n * R * C * 4);
          for (uint64_t i = 0; i < n; ++i) {
            const std::vector<float> want = fp8::dequantize_tensor(
                r, {R, C}, q.data(q.tensor(t)) + i * R * C, scales.data() + i * per_scale, t);
            CHECK(std::memcmp(want.data(), got.data() + i * R * C * 4, R * C * 4) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("convert --expert-dims: only the tensors it matches stack experts", "[convert][experts]") {
  sttest::TempDir tmp;
  const auto in = safetensors::Model::open(kInput);
  app::convert::QuantizeModelOptions o;
  o.recipe = fp8::Recipe::tensorwise();
  o.expert_dims = "w13$";
  app::convert::quantize_model(kInput, tmp.file("q.safetensors"), o);
  const auto out = safetensors::Model::open(tmp.file("q.safetensors"));
  CHECK(out.tensor(std::string("layers.0.experts.w13") + app::convert::kScaleSuffix).info->shape ==
        std::vector<uint64_t>{3});
  // w2 is not matched: one matrix [160, 64] with one scale, as the reference quantizes the whole.
  const std::string w2 = "layers.0.experts.w2";
  CHECK(out.tensor(w2 + app::convert::kScaleSuffix).info->shape.empty());
  const fp8::QuantizedTensor whole =
      fp8::quantize_tensor(o.recipe, fp8::Input::f32, in.tensor(w2).info->shape, in.data(in.tensor(w2)), w2);
  CHECK(bytes_of(out, w2) == whole.data);
  CHECK(bytes_of(out, w2 + app::convert::kScaleSuffix) == whole.scale_inv);

  o.expert_dims = "(";
  CHECK_THROWS_AS(app::convert::quantize_model(kInput, tmp.file("bad.safetensors"), o), UsageError);
}

TEST_CASE("fp8 stacked plans: shapes, refusals, fragments across matrices", "[fp8][experts]") {
  const fp8::Recipe r = fp8::Recipe::blockwise_128x128();
  const fp8::StackedPlan p = fp8::make_stacked_plan(r, fp8::Input::f32, {2, 3, 130, 200}, 2, "w");
  CHECK(p.matrices() == 6);
  CHECK(p.cells() == 6 * 4);
  CHECK(fp8::scale_inv_shape(p) == std::vector<uint64_t>{2, 3, 2, 2});
  const fp8::StackedPlan whole = fp8::make_stacked_plan(r, fp8::Input::f32, {2, 3, 130, 200}, 0, "w");
  CHECK(fp8::scale_inv_shape(whole) == std::vector<uint64_t>{7, 2});  // one matrix [780, 200]
  CHECK_THROWS_AS(fp8::make_stacked_plan(r, fp8::Input::f32, {130, 200}, 1, "w"), UsageError);
  CHECK_THROWS_AS(fp8::make_stacked_plan(fp8::Recipe::mxfp8(), fp8::Input::f32, {2, 4, 33}, 1, "w"), UsageError);

  // Three experts [3, 5, 64], 1x128 scales: any fragment dequantizes as the matrices do alone.
  const fp8::Recipe r1 = fp8::Recipe::blockwise_1x128();
  const fp8::StackedPlan s = fp8::make_stacked_plan(r1, fp8::Input::f32, {3, 5, 64}, 1, "e");
  std::vector<float> x(3 * 5 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37 % 101) - 50) * (i < 320 ? 1e-3f : 10.0f);
  std::vector<uint8_t> q(x.size());
  std::vector<float> scale_inv;
  for (uint64_t m = 0; m < 3; ++m) {
    const fp8::QuantizedTensor t = fp8::quantize_tensor(r1, fp8::Input::f32, {5, 64}, x.data() + m * 320, "e");
    std::memcpy(q.data() + m * 320, t.data.data(), 320);
    scale_inv.insert(scale_inv.end(), t.scales.scale_inv.begin(), t.scales.scale_inv.end());
  }
  fp8::ScaleView view;
  view.scale_inv = scale_inv.data();
  std::vector<float> all(x.size()), part(x.size());
  fp8::dequantize_stacked(s, view, 0, x.size(), q.data(), all.data());
  fp8::dequantize_stacked(s, view, 300, 400, q.data() + 300, part.data());  // spans all three matrices
  CHECK(std::memcmp(all.data() + 300, part.data(), 400 * 4) == 0);
  for (uint64_t m = 0; m < 3; ++m) {
    const auto* scales = reinterpret_cast<const uint8_t*>(scale_inv.data() + m * 5);
    const std::vector<float> want = fp8::dequantize_tensor(r1, {5, 64}, q.data() + m * 320, scales);
    CHECK(std::memcmp(want.data(), all.data() + m * 320, 320 * 4) == 0);
  }
}
