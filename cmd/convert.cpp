// fpgather convert: safetensors -> safetensors FP8 quantization and dequantization.
#include <chrono>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "convert/quantize_model.h"
#include "core/error.h"
#include "fp8/recipe.h"

namespace fpg::cli {
namespace {

struct ConvertArgs {
  std::string in, out;
  std::string fp8;
  bool dequantize = false;
  std::string format = "e4m3";
  std::string include, exclude;
  bool no_pow2 = false, pow2 = false;
  std::string mx_scale = "rceil";
  std::string dtype = "bf16";
};

fp8::Recipe recipe_from(const ConvertArgs& a) {
  const auto scaling = fp8::parse_scaling(a.fp8);
  if (!scaling || *scaling == fp8::Scaling::delayed)
    throw UsageError("--fp8 must be tensorwise, blockwise, blockwise-1x128 or mxfp8, not '" + a.fp8 + "'");
  const auto format = fp8::parse_format(a.format);
  if (!format) throw UsageError("--fp8-format must be e4m3 or e5m2, not '" + a.format + "'");
  const auto rule = fp8::parse_mx_rule(a.mx_scale);
  if (!rule) throw UsageError("--mx-scale must be rceil or floor, not '" + a.mx_scale + "'");
  switch (*scaling) {
    case fp8::Scaling::tensorwise: return fp8::Recipe::tensorwise(*format, a.pow2);
    case fp8::Scaling::blockwise_1x128: return fp8::Recipe::blockwise_1x128(*format, !a.no_pow2);
    case fp8::Scaling::blockwise_128x128: return fp8::Recipe::blockwise_128x128(*format, !a.no_pow2);
    default: return fp8::Recipe::mxfp8(*format, *rule);
  }
}

int run_convert(const ConvertArgs& a, const GlobalOptions& g) {
  const auto t0 = std::chrono::steady_clock::now();
  convert::ConvertSummary s;
  std::string what;
  if (a.dequantize) {
    convert::DequantizeModelOptions o;
    if (a.dtype == "bf16") o.dtype = DType::BF16;
    else if (a.dtype == "fp32") o.dtype = DType::F32;
    else throw UsageError("--dtype must be bf16 or fp32, not '" + a.dtype + "'");
    o.progress = progress_enabled(g);
    s = convert::dequantize_model(a.in, a.out, o);
    what = "dequantized";
  } else {
    convert::QuantizeModelOptions o;
    o.recipe = recipe_from(a);
    if (!a.include.empty()) o.include = a.include;
    if (!a.exclude.empty()) o.exclude = a.exclude;
    o.progress = progress_enabled(g);
    s = convert::quantize_model(a.in, a.out, o);
    what = "quantized";
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g.json) {
    nlohmann::json j = {{"input", a.in},        {"output", a.out},         {"operation", what},
                        {"tensors_converted", s.quantized}, {"tensors_copied", s.copied},
                        {"bytes_in", s.bytes_in}, {"bytes_out", s.bytes_out}, {"files", s.files},
                        {"seconds", secs}};
    if (!a.dequantize) j["recipe"] = a.fp8, j["format"] = a.format;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s %zu tensors, copied %zu; %.2f MB -> %.2f MB in %.2f s\n", what.c_str(), s.quantized, s.copied,
                s.bytes_in / 1e6, s.bytes_out / 1e6, secs);
    for (const auto& f : s.files) std::printf("wrote %s\n", f.c_str());
  }
  return 0;
}

}  // namespace

void register_convert(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand("convert", "Quantize a safetensors model to FP8, or dequantize it back");
  cmd->add_option("IN", args->in, "Input: a .safetensors file, an index .json, or a directory holding one")
      ->required();
  cmd->add_option("OUT", args->out, "Output: a .safetensors file, an index .json, or a directory")->required();
  auto* fp8 = cmd->add_option("--fp8", args->fp8, "Recipe: tensorwise, blockwise (128x128), blockwise-1x128, mxfp8");
  auto* deq = cmd->add_flag("--dequantize", args->dequantize, "Turn FP8 tensors and their scales back into --dtype");
  fp8->excludes(deq);
  cmd->add_option("--fp8-format", args->format, "e4m3 (default) or e5m2")->capture_default_str();
  cmd->add_option("--include", args->include,
                  "Regex: quantize the floating tensors whose name it matches (default: those of rank >= 2)");
  cmd->add_option("--exclude", args->exclude, "Regex: leave the tensors whose name it matches unchanged");
  cmd->add_flag("--no-pow2-scales", args->no_pow2, "blockwise: exact scales fp8_max/amax (DeepSeek-V3 style)");
  cmd->add_flag("--pow2-scales", args->pow2, "tensorwise: round scales down to powers of two");
  cmd->add_option("--mx-scale", args->mx_scale, "mxfp8 scale rule: rceil (TE/cuBLAS, default) or floor (OCP)")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "--dequantize output: bf16 (default) or fp32")->capture_default_str();
  cmd->callback([args, &global, &run] {
    if (args->fp8.empty() && !args->dequantize) throw CLI::ValidationError("convert", "give --fp8 RECIPE or --dequantize");
    run = [args, &global] { return run_convert(*args, global); };
  });
}

}  // namespace fpg::cli
