// The two scale namings of `convert` (app/convert/fp8_pair.h): a model directory whose config.json
// declares compressed-tensors (tensorwise, mxfp8) gets NAME_scale in compressed-tensors' dtype and
// shape, per expert too, holding the bytes the NAME_scale_inv of a file output holds; everything
// else keeps NAME_scale_inv; both read back (with or without fpgather's metadata) to the same values.
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catch.h"
#include "app/convert/fp8_pair.h"
#include "app/convert/model_dir_files.h"
#include "app/convert/quantize_model.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "formats/safetensors/model.h"
#include "formats/safetensors/writer.h"
#include "safetensors_test_util.h"

using namespace fpg;
using app::convert::ScaleNaming;

namespace {

const std::string kInput = std::string(FPG_TESTDATA_DIR) + "/fp8_experts/experts.safetensors";

std::vector<uint8_t> bytes_of(const safetensors::Model& m, const std::string& name) {
  const auto span = m.bytes(m.tensor(name));
  return {span.begin(), span.end()};
}

// A model directory holding `model` as model.safetensors and a config.json.
std::string model_dir(const sttest::TempDir& tmp, const std::string& name, const std::string& model) {
  const std::string dir = tmp.file(name);
  ::mkdir(dir.c_str(), 0755);
  sttest::write_bytes(dir + "/model.safetensors", sttest::read_bytes(model));
  sttest::write_text(dir + "/config.json", R"({"model_type": "mixtral"})");
  return dir;
}

// `src` rewritten without its __metadata__, so that a reader has only the tensors to go by.
void copy_without_metadata(const std::string& src, const std::string& dst) {
  const auto q = safetensors::Model::open(src);
  std::vector<safetensors::TensorSpec> specs;
  for (const auto& e : q.tensors()) specs.push_back({e.info->name, e.info->dtype, e.info->shape});
  safetensors::Writer w(dst, specs);
  for (const auto& e : q.tensors()) w.write(e.info->name, 0, q.data(e), e.info->nbytes());
  w.commit();
}

safetensors::Model dequantized(const std::string& in, const std::string& out) {
  app::convert::DequantizeModelOptions d;
  d.dtype = DType::F32;
  app::convert::dequantize_model(in, out, d);
  return safetensors::Model::open(out);
}

}  // namespace

TEST_CASE("scale names, dtypes and shapes of each naming", "[convert][scale_naming]") {
  CHECK(app::convert::scale_name("model.layers.0.mlp.down_proj.weight", ScaleNaming::compressed_tensors) ==
        "model.layers.0.mlp.down_proj.weight_scale");
  CHECK(app::convert::scale_name("w", ScaleNaming::scale_inv) == "w_scale_inv");
  const auto plan = [](const fp8::Recipe& r, std::vector<uint64_t> shape, size_t experts) {
    return fp8::make_stacked_plan(r, fp8::Input::f32, shape, experts, "w");
  };
  using Shape = std::vector<uint64_t>;
  const auto tw = plan(fp8::Recipe::tensorwise(), {64, 96}, 0);
  const auto tw_experts = plan(fp8::Recipe::tensorwise(), {4, 64, 96}, 1);
  const auto mx_experts = plan(fp8::Recipe::mxfp8(), {4, 64, 96}, 1);
  const auto block = plan(fp8::Recipe::blockwise_128x128(), {4, 200, 96}, 1);
  CHECK(app::convert::scale_spec("w", tw, ScaleNaming::scale_inv).shape == Shape{});
  CHECK(app::convert::scale_spec("w", tw, ScaleNaming::compressed_tensors).shape == Shape{1});
  CHECK(app::convert::scale_spec("w", tw, ScaleNaming::compressed_tensors).dtype == DType::F32);
  CHECK(app::convert::scale_spec("w", tw_experts, ScaleNaming::scale_inv).shape == Shape{4});
  CHECK(app::convert::scale_spec("w", tw_experts, ScaleNaming::compressed_tensors).shape == Shape{4, 1});
  const auto mx_ct = app::convert::scale_spec("w", mx_experts, ScaleNaming::compressed_tensors);
  CHECK(mx_ct.name == "w_scale");
  CHECK(mx_ct.dtype == DType::U8);
  CHECK(mx_ct.shape == Shape{4, 64, 3});
  CHECK(app::convert::scale_spec("w", mx_experts, ScaleNaming::scale_inv).dtype == DType::F8_E8M0);
  CHECK(app::convert::scale_spec("w", block, ScaleNaming::compressed_tensors).shape == Shape{4, 2, 1});
  CHECK(app::convert::scale_spec("w", block, ScaleNaming::compressed_tensors).dtype == DType::F32);
}

TEST_CASE("compressed-tensors quantization_config: the keys its loaders read", "[convert][scale_naming]") {
  using nlohmann::json;
  CHECK(app::convert::declares_compressed_tensors(fp8::Recipe::tensorwise()));
  CHECK(app::convert::declares_compressed_tensors(fp8::Recipe::mxfp8()));
  CHECK(!app::convert::declares_compressed_tensors(fp8::Recipe::blockwise_128x128()));
  CHECK(!app::convert::declares_compressed_tensors(fp8::Recipe::blockwise_1x128()));
  const json tw = json::parse(app::convert::quantization_config(fp8::Recipe::tensorwise(), {"lm_head"}));
  CHECK(tw == json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "quantization_status": "compressed",
      "config_groups": {"group_0": {"targets": ["Linear"],
          "weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false},
          "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true,
                                "dynamic": true}}},
      "ignore": ["lm_head"], "fmt": "e4m3"})"));
  const json mx = json::parse(app::convert::quantization_config(fp8::Recipe::mxfp8(), {}));
  const json mx_args = json::parse(R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 32,
                                       "scale_dtype": "torch.uint8", "symmetric": true})");
  json w = mx_args, a = mx_args;
  w["dynamic"] = false;
  a["dynamic"] = true;
  CHECK(mx["format"] == "mxfp8-quantized");
  CHECK(mx["config_groups"]["group_0"]["weights"] == w);
  CHECK(mx["config_groups"]["group_0"]["input_activations"] == a);
  CHECK(mx["ignore"] == json::array());
}

TEST_CASE("convert into a model directory declaring compressed-tensors writes NAME_scale; back the same",
          "[convert][scale_naming]") {
  sttest::TempDir tmp;
  const std::string dir = model_dir(tmp, "in", kInput);
  struct Case {
    const char* tensor;
    std::vector<uint64_t> experts;  // leading expert dimensions of the tensor
  };
  const Case cases[] = {{"layers.0.experts.w13", {3}}, {"layers.0.experts.w2", {2, 2}}, {"layers.0.dense.weight", {}}};
  for (const fp8::Recipe& r : {fp8::Recipe::tensorwise(), fp8::Recipe::mxfp8()}) {
    const std::string name(fp8::scaling_name(r.scaling));
    SECTION(name) {
      app::convert::QuantizeModelOptions o;
      o.recipe = r;
      app::convert::quantize_model(kInput, tmp.file("file.safetensors"), o);  // a file: NAME_scale_inv
      app::convert::quantize_model(dir, tmp.file("ct"), o);
      const auto file = safetensors::Model::open(tmp.file("file.safetensors"));
      const auto ct = safetensors::Model::open(tmp.file("ct"));
      const bool mx = r.scaling == fp8::Scaling::mxfp8;
      for (const Case& c : cases) {
        INFO(c.tensor);
        const std::string t = c.tensor;
        REQUIRE(ct.find(t + "_scale") != nullptr);
        CHECK(ct.find(t + "_scale_inv") == nullptr);
        const auto& scale = *ct.tensor(t + "_scale").info;
        const auto& inv = *file.tensor(t + "_scale_inv").info;
        CHECK(scale.dtype == (mx ? DType::U8 : DType::F32));
        std::vector<uint64_t> want = c.experts;
        if (mx) want = inv.shape;  // [E..., R, C/32] in both namings
        else want.push_back(1);
        CHECK(scale.shape == want);
        CHECK(bytes_of(ct, t + "_scale") == bytes_of(file, t + "_scale_inv"));
        CHECK(bytes_of(ct, t) == bytes_of(file, t));
      }
      // Read back with fpgather's metadata and without it: the values of the NAME_scale_inv file.
      copy_without_metadata(tmp.file("ct/model.safetensors"), tmp.file("bare.safetensors"));
      const auto bare = safetensors::Model::open(tmp.file("bare.safetensors"));
      const fp8::StackedPlan p = app::convert::fp8_pair_plan(bare, *bare.tensor("layers.0.experts.w2").info,
                                                        *bare.tensor("layers.0.experts.w2_scale").info);
      CHECK(p.matrix.recipe.scaling == r.scaling);
      CHECK(p.expert_shape == std::vector<uint64_t>{2, 2});
      const auto want = dequantized(tmp.file("file.safetensors"), tmp.file("d-file.safetensors"));
      const auto from_ct = dequantized(tmp.file("ct"), tmp.file("d-ct.safetensors"));
      const auto from_bare = dequantized(tmp.file("bare.safetensors"), tmp.file("d-bare.safetensors"));
      CHECK(from_ct.size() == want.size());
      CHECK(from_bare.size() == want.size());
      for (const Case& c : cases) {
        INFO(c.tensor);
        CHECK(from_ct.tensor(c.tensor).info->dtype == DType::F32);
        CHECK(bytes_of(from_ct, c.tensor) == bytes_of(want, c.tensor));
        CHECK(bytes_of(from_bare, c.tensor) == bytes_of(want, c.tensor));
      }
    }
  }
}

TEST_CASE("scale naming: blockwise and outputs that declare nothing keep NAME_scale_inv; clashes refused",
          "[convert][scale_naming]") {
  sttest::TempDir tmp;
  const std::string dir = model_dir(tmp, "in", kInput);
  app::convert::QuantizeModelOptions o;
  o.recipe = fp8::Recipe::blockwise_128x128();
  app::convert::quantize_model(dir, tmp.file("block"), o);
  CHECK(safetensors::Model::open(tmp.file("block")).find("layers.0.dense.weight_scale_inv") != nullptr);
  o.recipe = fp8::Recipe::tensorwise();
  // A directory without config.json declares nothing.
  const std::string plain = tmp.file("plain");
  ::mkdir(plain.c_str(), 0755);
  sttest::write_bytes(plain + "/model.safetensors", sttest::read_bytes(kInput));
  app::convert::quantize_model(plain, tmp.file("plain-q"), o);
  CHECK(safetensors::Model::open(tmp.file("plain-q")).find("layers.0.dense.weight_scale_inv") != nullptr);

  // An input tensor already named like a scale to be written: refused, nothing left behind.
  const std::string clash = tmp.file("clash");
  ::mkdir(clash.c_str(), 0755);
  {
    safetensors::Writer w(clash + "/model.safetensors",
                          {{"w", DType::F32, {4, 32}}, {"w_scale", DType::F32, {1}}});
    const std::vector<float> zeros(4 * 32 + 1, 0.5f);
    w.write("w", 0, zeros.data(), 4 * 32 * 4);
    w.write("w_scale", 0, zeros.data(), 4);
    w.commit();
  }
  sttest::write_text(clash + "/config.json", "{}");
  o.include = "^w$";
  std::string msg;
  try {
    app::convert::quantize_model(clash, tmp.file("clash-q"), o);
  } catch (const UsageError& e) {
    msg = e.what();
  }
  CHECK(sttest::contains(msg, "'w_scale'"));
  CHECK(!tmp.list().count("clash-q"));
  // Into a file the scale is w_scale_inv, which clashes with nothing; reading it back, w_scale_inv is
  // w's scale and w_scale an ordinary tensor.
  app::convert::quantize_model(clash, tmp.file("clash.safetensors"), o);
  const auto q = safetensors::Model::open(tmp.file("clash.safetensors"));
  CHECK(app::convert::find_scale(q, "w")->info->name == "w_scale_inv");
  const auto back = dequantized(tmp.file("clash.safetensors"), tmp.file("clash-d.safetensors"));
  CHECK(back.find("w_scale_inv") == nullptr);
  CHECK(bytes_of(back, "w_scale") == bytes_of(q, "w_scale"));
  const auto w = bytes_of(back, "w");
  const auto* values = reinterpret_cast<const float*>(w.data());
  CHECK(std::vector<float>(values, values + 4 * 32) == std::vector<float>(4 * 32, 0.5f));
}
