// How `convert` puts outputs in place (app/convert/staged_output.h): an existing OUT refused without
// force and replaced whole with it, inputs never replaced, nothing left behind; and what a model
// directory carries over (app/convert/model_dir_files.h).
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "catch.h"
#include "app/convert/model_dir_files.h"
#include "app/convert/quantize_model.h"
#include "app/convert/staged_output.h"
#include "core/error.h"
#include "formats/safetensors/model.h"
#include "safetensors_test_util.h"

using namespace fpg;
using app::convert::OutputKind;
using app::convert::StagedOutput;
using sttest::TempDir;

namespace {

const std::string kModels = std::string(FPG_TESTDATA_DIR) + "/models/";

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no UsageError>";
}

std::string read_text(const std::string& path) {
  const auto b = sttest::read_bytes(path);
  return {b.begin(), b.end()};
}

// Stages `files` (name -> contents) into OUT and commits.
void put(const std::string& out, OutputKind kind, bool force, const std::map<std::string, std::string>& files,
         const std::vector<std::string>& inputs = {}) {
  StagedOutput s(out, kind, force, inputs);
  for (const auto& [name, text] : files) sttest::write_text(s.stage(name), text);
  s.commit();
}

}  // namespace

TEST_CASE("staged output: a directory is refused when it exists, replaced whole with force", "[convert][output]") {
  TempDir tmp;
  const std::string out = tmp.file("ex");
  put(out, OutputKind::directory, false, {{"a", "1"}, {"b", "2"}, {"c", "3"}});
  CHECK(TempDir::list_dir(out) == std::set<std::string>{"a", "b", "c"});
  const std::string msg = usage_error([&] { put(out, OutputKind::directory, false, {{"a", "new"}}); });
  CHECK(sttest::contains(msg, out));
  CHECK(sttest::contains(msg, "give force to replace it"));  // the field: the command line says --force
  CHECK(read_text(out + "/a") == "1");
  put(out, OutputKind::directory, true, {{"d", "4"}});
  CHECK(TempDir::list_dir(out) == std::set<std::string>{"d"});  // nothing of the old output stays
  CHECK(tmp.list() == std::set<std::string>{"ex"});              // no staging directory either

  // An empty directory is filled, not refused.
  ::mkdir(tmp.file("empty").c_str(), 0755);
  put(tmp.file("empty") + "/", OutputKind::directory, false, {{"x", "1"}});
  CHECK(TempDir::list_dir(tmp.file("empty")) == std::set<std::string>{"x"});
}

TEST_CASE("staged output: an abandoned output leaves OUT as it was and no staging directory", "[convert][output]") {
  TempDir tmp;
  const std::string out = tmp.file("ex");
  put(out, OutputKind::directory, false, {{"a", "1"}});
  {
    StagedOutput s(out, OutputKind::directory, true);
    sttest::write_text(s.stage("b"), "2");
  }  // destroyed before commit(): a failed conversion
  CHECK(TempDir::list_dir(out) == std::set<std::string>{"a"});
  CHECK(tmp.list() == std::set<std::string>{"ex"});
}

TEST_CASE("staged output: force never removes inputs, subdirectories or the working directory", "[convert][output]") {
  TempDir tmp;
  const std::string out = tmp.file("ex");
  put(out, OutputKind::directory, false, {{"in.safetensors", "x"}});
  CHECK(sttest::contains(usage_error([&] {
                           StagedOutput s(out, OutputKind::directory, true, {out + "/in.safetensors"});
                         }),
                         "holds the input"));
  ::mkdir((out + "/sub").c_str(), 0755);
  CHECK(sttest::contains(usage_error([&] { StagedOutput s(out, OutputKind::directory, true); }),
                         "holds the directory 'sub'"));
  ::rmdir((out + "/sub").c_str());
  // A file OUT that is an input, even with force.
  CHECK(sttest::contains(usage_error([&] {
                           StagedOutput s(out + "/in.safetensors", OutputKind::file, true, {out + "/in.safetensors"});
                         }),
                         "is the input file"));
  // A file where a directory is needed and the reverse.
  CHECK(sttest::contains(usage_error([&] { StagedOutput s(out + "/in.safetensors", OutputKind::directory, true); }),
                         "is a file"));
  CHECK(sttest::contains(usage_error([&] { StagedOutput s(out, OutputKind::file, true); }), "is a directory"));
  CHECK(TempDir::list_dir(out) == std::set<std::string>{"in.safetensors"});
}

TEST_CASE("staged output: a single file is refused when it exists, renamed over with force", "[convert][output]") {
  TempDir tmp;
  const std::string out = tmp.file("m.safetensors");
  put(out, OutputKind::file, false, {{"m.safetensors", "old"}});
  CHECK(sttest::contains(usage_error([&] { put(out, OutputKind::file, false, {{"m.safetensors", "new"}}); }),
                         "exists"));
  CHECK(read_text(out) == "old");
  put(out, OutputKind::file, true, {{"m.safetensors", "new"}});
  CHECK(read_text(out) == "new");
  CHECK(tmp.list() == std::set<std::string>{"m.safetensors"});
}

TEST_CASE("staged output: an index with force replaces the files the old index names, nothing else",
          "[convert][output]") {
  TempDir tmp;
  const std::string index = tmp.file("m.index.json");
  const std::string old_index =
      R"({"metadata": {}, "weight_map": {"a": "old-1.safetensors", "b": "old-2.safetensors"}})";
  put(index, OutputKind::index, false,
      {{"old-1.safetensors", "1"}, {"old-2.safetensors", "2"}, {"m.index.json", old_index}});
  sttest::write_text(tmp.file("unrelated.txt"), "keep");
  // Without force: the index is refused; so is any file the new output would write over.
  CHECK(sttest::contains(usage_error([&] { put(index, OutputKind::index, false, {{"m.index.json", "{}"}}); }),
                         "m.index.json exists"));
  CHECK(sttest::contains(usage_error([&] {
                           put(tmp.file("other.json"), OutputKind::index, false, {{"old-1.safetensors", "x"}});
                         }),
                         "old-1.safetensors exists"));
  put(index, OutputKind::index, true, {{"new.safetensors", "n"}, {"m.index.json", "{}"}});
  CHECK(tmp.list() == std::set<std::string>{"m.index.json", "new.safetensors", "unrelated.txt"});
  CHECK(read_text(index) == "{}");
  // An old shard that is an input is refused before anything moves.
  put(index, OutputKind::index, true, {{"m.index.json", old_index}, {"old-1.safetensors", "1"}});
  CHECK(sttest::contains(usage_error([&] {
                           StagedOutput s(index, OutputKind::index, true, {tmp.file("old-1.safetensors")});
                         }),
                         "an input file"));
}

TEST_CASE("convert of a model directory: companion files carried, quantization_config set and removed",
          "[convert][output]") {
  TempDir tmp;
  const std::string in = tmp.file("hf");
  ::mkdir(in.c_str(), 0755);
  for (const char* f : {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"})
    sttest::write_bytes(in + "/" + f, sttest::read_bytes(kModels + "tiny-llama-sharded/" + f));
  sttest::write_text(in + "/config.json", R"({"architectures": ["LlamaForCausalLM"], "rms_norm_eps": 1e-05})");
  sttest::write_text(in + "/generation_config.json", R"({"bos_token_id": 1})");
  sttest::write_text(in + "/tokenizer.json", "{}");
  sttest::write_text(in + "/chat_template.jinja", "{{ messages }}");
  sttest::write_text(in + "/pytorch_model.bin", "old weights");
  sttest::write_text(in + "/.gitattributes", "*");
  ::mkdir((in + "/original").c_str(), 0755);
  ::symlink((in + "/tokenizer.json").c_str(), (in + "/tokenizer_config.json").c_str());

  app::convert::QuantizeModelOptions q;
  q.recipe = fp8::Recipe::blockwise_1x128();
  q.exclude = "lm_head";
  const auto s = app::convert::quantize_model(in, tmp.file("q"), q);
  const std::set<std::string> carried = {"config.json", "generation_config.json", "tokenizer.json",
                                         "tokenizer_config.json", "chat_template.jinja"};
  std::set<std::string> want = carried;
  want.insert({"model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
  CHECK(TempDir::list_dir(tmp.file("q")) == want);
  CHECK(s.files.back() == tmp.file("q") + "/model.safetensors.index.json");
  CHECK(read_text(tmp.file("q/tokenizer_config.json")) == "{}");
  const auto config = nlohmann::json::parse(read_text(tmp.file("q/config.json")));
  CHECK(config["rms_norm_eps"] == 1e-05);
  CHECK(config["quantization_config"] == nlohmann::json::parse(R"({"quant_method": "fp8", "fmt": "e4m3",
      "activation_scheme": "dynamic", "weight_block_size": [1, 128], "modules_to_not_convert": ["lm_head"]})"));

  app::convert::DequantizeModelOptions d;
  app::convert::dequantize_model(tmp.file("q"), tmp.file("d"), d);
  CHECK(TempDir::list_dir(tmp.file("d")) == want);
  CHECK(!nlohmann::json::parse(read_text(tmp.file("d/config.json"))).contains("quantization_config"));

  // A config.json that is not a JSON object fails before anything is written.
  sttest::write_text(in + "/config.json", "[1, 2]");
  CHECK(sttest::contains(sttest::format_error([&] { app::convert::quantize_model(in, tmp.file("bad"), q); }),
                         "config.json"));
  CHECK(!tmp.list().count("bad"));
}

TEST_CASE("convert of a single file into a directory writes model.safetensors", "[convert][output]") {
  TempDir tmp;
  app::convert::QuantizeModelOptions q;
  q.recipe = fp8::Recipe::mxfp8();
  const auto s = app::convert::quantize_model(kModels + "tiny-llama.safetensors", tmp.file("out/"), q);
  CHECK(TempDir::list_dir(tmp.file("out")) == std::set<std::string>{"model.safetensors"});  // no companions
  CHECK(s.files == std::vector<std::string>{tmp.file("out") + "/model.safetensors"});
  CHECK(safetensors::Model::open(tmp.file("out")).find("lm_head.weight_scale_inv") != nullptr);
}

TEST_CASE("quantization_config forms for each recipe", "[convert][output]") {
  using nlohmann::json;
  const json block = json::parse(app::convert::quantization_config(fp8::Recipe::blockwise_128x128(), {}));
  CHECK(block == json::parse(R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [128, 128]})"));
  const json tw = json::parse(app::convert::quantization_config(fp8::Recipe::tensorwise(fp8::Format::e5m2), {"lm_head"}));
  CHECK(tw["quant_method"] == "compressed-tensors");
  CHECK(tw["format"] == "float-quantized");
  CHECK(tw["config_groups"]["group_0"]["weights"]["strategy"] == "tensor");
  CHECK(tw["ignore"] == json::array({"lm_head"}));
  CHECK(tw["fmt"] == "e5m2");
  const json mx = json::parse(app::convert::quantization_config(fp8::Recipe::mxfp8(), {}));
  CHECK(mx["format"] == "mxfp8-quantized");
  CHECK(mx["config_groups"]["group_0"]["weights"]["group_size"] == 32);
  CHECK(mx["config_groups"]["group_0"]["input_activations"]["dynamic"] == true);
}
