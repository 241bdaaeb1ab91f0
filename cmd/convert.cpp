// fpgather convert: safetensors -> safetensors FP8 quantization and dequantization; a checkpoint
// exported to safetensors or rewritten with other compression.
#include <chrono>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "json_output.h"
#include "app/convert/checkpoint_params.h"
#include "app/convert/export_any.h"
#include "app/convert/hf_export.h"
#include "app/convert/checkpoint_recompress.h"
#include "app/convert/quantize_model.h"
#include "app/convert/staged_output.h"
#include "core/error.h"
#include "core/units.h"
#include "core/fs.h"
#include "core/interrupt.h"
#include "option_range.h"
#include "pipeline/config.h"
#include "fp8/recipe.h"
#include "pipeline_args.h"
#include "app/convert/fp8_reencode.h"

namespace fpg::cli {
namespace {

struct ConvertArgs {
  std::string in, out;
  std::string fp8;
  bool dequantize = false;
  std::string format = "e4m3";
  std::string include, exclude, expert_dims;
  bool force = false;
  bool no_pow2 = false, pow2 = false;
  bool strict = false;
  std::string mx_scale = "rceil";
  std::string dtype = "bf16";
  // checkpoint input
  bool states = false;
  std::string max_shard_size = "5GB";
  std::string compress;
  size_t amax_history = 1;
  std::string amax_algo = "most_recent";
  bool no_validate = false;
  std::string to = "safetensors";
  // --to hf
  std::string arch = "auto", hf_config, tokenizer;
  bool from_masters = false;
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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_recompress(const ConvertArgs& a, const GlobalOptions& g) {
  const auto t0 = std::chrono::steady_clock::now();
  app::convert::RecompressOptions o;
  o.compression = ckpt::parse_compression(a.compress);
  o.progress = progress_enabled(g);
  o.force = a.force;
  const app::convert::RecompressSummary s = app::convert::recompress_checkpoint(a.in, a.out, o);
  const double secs = seconds_since(t0);
  if (g.json) {
    const nlohmann::json j = {{"input", s.source},         {"output", s.target},
                              {"operation", "recompress"}, {"compression", ckpt::to_string(o.compression)},
                              {"keys", s.keys},            {"runs", s.runs},
                              {"logical_bytes", s.logical_bytes}, {"stored_bytes_in", s.stored_bytes_in},
                              {"stored_bytes_out", s.stored_bytes_out}, {"seconds", secs}};
    print_json(j);
  } else {
    std::printf("recompressed %s (%s) as %s: %s stored -> %s in %.2f s\nwrote %s\n", plural(s.keys, "key").c_str(),
                byte_size(s.logical_bytes).c_str(), ckpt::to_string(o.compression).c_str(),
                byte_size(s.stored_bytes_in).c_str(), byte_size(s.stored_bytes_out).c_str(), secs, s.target.c_str());
  }
  return 0;
}

// The FP8 config `fpgather train --fp8 RECIPE` would run with (the same parsing and defaults).
pipeline::Fp8Config train_fp8_config(const ConvertArgs& a) {
  PipelineArgs p;
  p.fp8 = a.fp8;
  p.fp8_format = a.format;
  p.mx_scale = a.mx_scale;
  p.amax_history = a.amax_history;
  p.amax_algo = a.amax_algo;
  return pipeline_config(p, [](optim::OptimizerKind, optim::ScalarOptimizer) { return HyperDefaults{}; }).fp8;
}

int run_reencode_fp8(const ConvertArgs& a, const GlobalOptions& g) {
  const auto t0 = std::chrono::steady_clock::now();
  app::convert::Fp8ReencodeOptions o;
  o.fp8 = train_fp8_config(a);
  o.compression = ckpt::parse_compression(a.compress.empty() ? "zstd:1" : a.compress);
  o.force = a.force;
  o.progress = progress_enabled(g);
  const app::convert::Fp8ReencodeSummary s = app::convert::reencode_fp8(a.in, a.out, o);
  const double secs = seconds_since(t0);
  if (g.json) {
    const nlohmann::json j = {{"input", s.source}, {"output", s.target}, {"operation", "reencode_fp8"},
                              {"fp8", a.fp8},      {"fp8_format", a.format}, {"step", s.step},
                              {"fp8_params", s.fp8_params}, {"seconds", secs}};
    print_json(j);
  } else {
    std::printf("re-encoded %s at step %llu with fp8 %s (%zu FP8 params) in %.2f s\nwrote %s\n", s.source.c_str(),
                static_cast<unsigned long long>(s.step), a.fp8.c_str(), s.fp8_params, secs, s.target.c_str());
  }
  return 0;
}

int run_export(const ConvertArgs& a, const GlobalOptions& g) {
  const auto t0 = std::chrono::steady_clock::now();
  app::convert::ExportOptions o;
  const auto weights = app::convert::parse_export_weights(a.dtype);
  if (!weights) throw UsageError("--dtype of a checkpoint export must be bf16, fp32 or fp8, not '" + a.dtype + "'");
  o.weights = *weights;
  o.states = a.states;
  o.max_shard_bytes = app::convert::parse_byte_size(a.max_shard_size);
  o.progress = progress_enabled(g);
  o.validate = !a.no_validate;
  o.force = a.force;
  const app::convert::ExportSummary s = app::convert::export_any(a.in, a.out, *app::convert::parse_export_format(a.to), o);
  const double secs = seconds_since(t0);
  if (g.json) {
    const nlohmann::json j = {{"input", s.checkpoint}, {"output", a.out},   {"operation", "export"},
                              {"dtype", a.dtype},      {"states", a.states}, {"tensors", s.tensors},
                              {"bytes_read", s.bytes_read}, {"bytes_written", s.bytes_written},
                              {"files", s.files},      {"seconds", secs}};
    print_json(j);
  } else {
    std::printf("exported %s (%s weights%s) from %s: %s in %.2f s\n", plural(s.tensors, "tensor").c_str(), a.dtype.c_str(),
                a.states ? ", masters and optimizer states" : "", s.checkpoint.c_str(), byte_size(s.bytes_written).c_str(),
                secs);
    for (const auto& f : s.files) std::printf("wrote %s\n", f.c_str());
  }
  return 0;
}

int run_hf_export(const ConvertArgs& a, const GlobalOptions& g) {
  const auto t0 = std::chrono::steady_clock::now();
  app::convert::HfExportOptions o;
  if (a.arch != "auto") {
    o.arch = app::convert::parse_hf_arch(a.arch);
    if (!o.arch) throw UsageError("--arch must be auto or " + app::convert::hf_arch_names() + ", not '" + a.arch + "'");
  }
  if (a.dtype != "bf16" && a.dtype != "fp32") throw UsageError("--dtype of --to hf must be bf16 or fp32, not '" + a.dtype + "'");
  o.fp32 = a.dtype == "fp32";
  o.config = a.hf_config;
  o.tokenizer = a.tokenizer;
  o.from_masters = a.from_masters;
  if (!a.fp8.empty()) {
    o.fp8 = recipe_from(a);
    if (!a.include.empty()) o.fp8_include = a.include;
    if (!a.exclude.empty()) o.fp8_exclude = a.exclude;
  }
  o.max_shard_bytes = app::convert::parse_byte_size(a.max_shard_size);
  o.force = a.force;
  o.progress = progress_enabled(g);
  o.validate = !a.no_validate;
  const app::convert::HfExportSummary s = app::convert::export_hf(a.in, a.out, o);
  const double secs = seconds_since(t0);
  const auto& m = s.shape;
  if (g.json) {
    const nlohmann::json j = {{"input", s.exported.checkpoint}, {"output", a.out}, {"operation", "export_hf"},
                              {"arch", app::convert::hf_arch_name(s.arch)}, {"arch_from", s.arch_from},
                              {"dtype", a.dtype}, {"from_masters", a.from_masters},
                              {"tensors", s.exported.tensors}, {"bytes_read", s.exported.bytes_read},
                              {"bytes_written", s.exported.bytes_written}, {"files", s.exported.files},
                              {"copied", s.copied}, {"notes", m.notes}, {"seconds", secs},
                              {"fp8", a.fp8.empty() ? nlohmann::json() : nlohmann::json(a.fp8)},
                              {"quantized", s.quantized ? nlohmann::json(s.quantized->quantized) : nlohmann::json()}};
    print_json(j);
  } else {
    if (s.quantized)
      std::printf("quantized %s with fp8 %s (copied %zu: embedding, lm_head, routers, norms unless --exclude says "
                  "otherwise)\n", plural(s.quantized->quantized, "tensor").c_str(), a.fp8.c_str(), s.quantized->copied);
    std::printf("exported %s as a Hugging Face %s model (%s, from %s; %s tensors%s) from %s: %s in %.2f s\n",
                plural(m.layers, "layer").c_str(), app::convert::hf_arch_name(s.arch), s.arch_from.c_str(),
                a.from_masters ? "the fp32 masters" : "the weights", a.dtype.c_str(),
                m.experts ? (", " + std::to_string(m.experts) + " experts").c_str() : "", s.exported.checkpoint.c_str(),
                byte_size(s.exported.bytes_written).c_str(), secs);
    for (const auto& n : m.notes) std::printf("note: %s\n", n.c_str());
    for (const auto& f : s.exported.files) std::printf("wrote %s\n", f.c_str());
    if (!s.quantized) {  // a quantized export lists every file it wrote
      std::printf("wrote %s/config.json\n", a.out.c_str());
      for (const auto& f : s.copied) std::printf("copied %s/%s\n", a.out.c_str(), f.c_str());
    }
  }
  return 0;
}

// A conversion that writes a checkpoint writes a directory: an OUT that names a file (.safetensors)
// or an index (.json) is refused before anything is read. `writer`: the flag that makes it a
// checkpoint; `instead`: how to get the file the user may have meant.
void require_directory_out(const ConvertArgs& a, const std::string& writer, const std::string& instead) {
  const app::convert::OutputKind kind = app::convert::output_kind(a.out);
  if (kind == app::convert::OutputKind::directory) return;
  std::string dir = a.out.substr(0, a.out.rfind('.'));
  if (dir.empty()) dir = "OUT";
  throw UsageError("OUT " + a.out + ": " + writer + " writes a checkpoint, a directory, and a path ending in " +
                   (kind == app::convert::OutputKind::file ? ".safetensors names one safetensors file"
                                                           : ".json names a safetensors index") +
                   ": give a directory (e.g. " + dir + "), or " + instead);
}

int run_conversion(const ConvertArgs& a, const GlobalOptions& g) {
  if (a.to != "hf" && !app::convert::parse_export_format(a.to))
    throw UsageError("--to must be safetensors, dcp or hf, not '" + a.to + "'");
  if (a.to != "hf" && (a.arch != "auto" || !a.hf_config.empty() || !a.tokenizer.empty() || a.from_masters))
    throw UsageError("--arch, --hf-config, --tokenizer and --from-masters belong to --to hf");
  const std::optional<ckpt::Contents> contents = app::convert::source_contents(a.in);
  if (a.to == "hf") {
    if (!a.compress.empty() || a.dequantize || a.states)
      throw UsageError("--to hf exports a Megatron checkpoint's model: --compress, --dequantize and --states do not apply");
    if (a.fp8.empty() && (!a.include.empty() || !a.exclude.empty() || a.pow2 || a.no_pow2 || a.strict))
      throw UsageError("--include, --exclude, --(no-)pow2-scales and --strict belong to --fp8");
    return run_hf_export(a, g);
  }
  const bool model = !contents || *contents == ckpt::Contents::model;
  if (a.to == "dcp" && model)
    throw UsageError("--to dcp exports a checkpoint; " + a.in + " is not one");
  if (a.to == "dcp" && (!a.fp8.empty() || !a.compress.empty() || a.dequantize))
    throw UsageError("--to dcp is an export: --fp8, --compress and --dequantize do not apply");
  if (a.to == "dcp") require_directory_out(a, "--to dcp", "export to safetensors (without --to dcp)");
  if (contents == ckpt::Contents::framework_state) {
    if (a.dequantize || !a.fp8.empty() || !a.compress.empty() || a.pow2 || a.no_pow2 || !a.include.empty() ||
        !a.exclude.empty() || !a.expert_dims.empty())
      throw UsageError(a.in + " is a PyTorch DCP / Megatron torch_dist checkpoint: it exports to safetensors "
                       "(--dtype bf16|fp32, --states, --max-shard-size); quantize the export with --fp8");
    return run_export(a, g);
  }
  if (contents == ckpt::Contents::training_state) {
    if (a.dequantize) throw UsageError("--dequantize takes a safetensors model; " + a.in + " is a checkpoint");
    if (a.pow2 || a.no_pow2 || !a.include.empty() || !a.exclude.empty() || !a.expert_dims.empty())
      throw UsageError("--include, --exclude, --expert-dims and --(no-)pow2-scales quantize safetensors models; " +
                       a.in + " is a checkpoint (--fp8 re-encodes it with train's recipe defaults)");
    if ((!a.fp8.empty() || !a.compress.empty()) && a.states)
      throw UsageError("--states belongs to an export; --compress and --fp8 write a checkpoint");
    if ((!a.fp8.empty() || !a.compress.empty()) && a.no_validate)
      throw UsageError("--no-validate salvages values into a safetensors export; --compress and --fp8 write a "
                       "checkpoint, which is made only from a valid one");
    if (!a.fp8.empty()) {
      require_directory_out(a, "--fp8 of a checkpoint",
                            "for a safetensors file of its FP8 weights export it with --dtype fp8 (re-encoded with "
                            "--fp8 into a directory first, for another recipe)");
      return run_reencode_fp8(a, g);
    }
    if (!a.compress.empty())
      require_directory_out(a, "--compress", "export the checkpoint to safetensors (without --compress)");
    return a.compress.empty() ? run_export(a, g) : run_recompress(a, g);
  }
  if (!a.compress.empty() || a.states || a.no_validate)
    throw UsageError("--compress, --states and --no-validate take a checkpoint; " + a.in + " is not one");
  if (a.strict && a.fp8.empty()) throw UsageError("--strict belongs to quantizing a safetensors model with --fp8");
  if (a.dequantize && !a.expert_dims.empty())
    throw UsageError("--expert-dims quantizes; --dequantize reads the expert dimensions off each scale's shape");
  if (a.fp8.empty() && !a.dequantize) throw UsageError("give --fp8 RECIPE or --dequantize (or a checkpoint as IN)");
  const auto t0 = std::chrono::steady_clock::now();
  app::convert::ConvertSummary s;
  std::string what;
  if (a.dequantize) {
    app::convert::DequantizeModelOptions o;
    if (a.dtype == "bf16") o.dtype = DType::BF16;
    else if (a.dtype == "fp32") o.dtype = DType::F32;
    else throw UsageError("--dtype must be bf16 or fp32, not '" + a.dtype + "'");
    o.progress = progress_enabled(g);
    o.force = a.force;
    s = app::convert::dequantize_model(a.in, a.out, o);
    what = "dequantized";
  } else {
    app::convert::QuantizeModelOptions o;
    o.recipe = recipe_from(a);
    if (!a.include.empty()) o.include = a.include;
    if (!a.exclude.empty()) o.exclude = a.exclude;
    if (!a.expert_dims.empty()) o.expert_dims = a.expert_dims;
    o.force = a.force;
    o.progress = progress_enabled(g);
    o.strict = a.strict;
    s = app::convert::quantize_model(a.in, a.out, o);
    what = "quantized";
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t nonfinite = 0;
  for (const auto& n : s.nonfinite) {
    nonfinite += n.total();
    std::fprintf(stderr,
                 "fpgather: warning: tensor '%s' holds %llu non-finite values (%llu NaN, %llu +Inf, %llu -Inf): FP8 "
                 "keeps NaN and turns +-Inf into +-max, and a scaling block holding an infinity gets scale 1\n",
                 n.tensor.c_str(), static_cast<unsigned long long>(n.total()), static_cast<unsigned long long>(n.nan),
                 static_cast<unsigned long long>(n.pos_inf), static_cast<unsigned long long>(n.neg_inf));
  }
  if (nonfinite)
    std::fprintf(stderr, "fpgather: warning: %llu non-finite values in %zu tensors (--strict refuses them)\n",
                 static_cast<unsigned long long>(nonfinite), s.nonfinite.size());
  if (g.json) {
    nlohmann::json j = {{"input", a.in},        {"output", a.out},         {"operation", what},
                        {"tensors_converted", s.quantized}, {"tensors_copied", s.copied},
                        {"bytes_in", s.bytes_in}, {"bytes_out", s.bytes_out}, {"files", s.files},
                        {"seconds", secs}};
    j["recipe"] = j["format"] = j["nonfinite"] = nullptr;  // a dequantization has none
    if (!a.dequantize) {
      j["recipe"] = a.fp8, j["format"] = a.format;
      j["nonfinite"] = nlohmann::json::array();
      for (const auto& n : s.nonfinite)
        j["nonfinite"].push_back({{"tensor", n.tensor}, {"nan", n.nan}, {"pos_inf", n.pos_inf}, {"neg_inf", n.neg_inf}});
    }
    print_json(j);
  } else {
    std::printf("%s %s, copied %zu; %s -> %s in %.2f s\n", what.c_str(), plural(s.quantized, "tensor").c_str(), s.copied,
                byte_size(s.bytes_in).c_str(), byte_size(s.bytes_out).c_str(), secs);
    for (const auto& f : s.files) std::printf("wrote %s\n", f.c_str());
  }
  return 0;
}

// Ctrl-C or SIGTERM stops the conversion before OUT is touched.
int run_convert(const ConvertArgs& a, const GlobalOptions& g) {
  const bool existed = fs::exists(a.out);
  install_interrupt_handlers();
  return run_interruptible([&] { return run_conversion(a, g); }, [&] { return nothing_written(a.out, existed); });
}

}  // namespace

void register_convert(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand("convert",
                                 "Quantize a safetensors model to FP8 or dequantize it; export a checkpoint to "
                                 "safetensors, recompress it or change its FP8 recipe");
  cmd->add_option("IN", args->in,
                  "Input: a .safetensors file, an index .json, or a directory holding one; or a checkpoint (or a "
                  "root holding `latest`)")
      ->required();
  cmd->add_option("OUT", args->out,
                  "Output: a .safetensors file, an index .json, or a directory (model.safetensors, or shards and "
                  "an index, beside IN's config and tokenizer files); with --compress or --fp8 a new checkpoint. "
                  "Never over an existing OUT without --force")
      ->required();
  cmd->add_flag("--force", args->force,
                "Replace an existing OUT: the new output is written beside it and swapped in whole, leaving no "
                "file of the old one");
  auto* fp8 = with_values(cmd->add_option("--fp8", args->fp8,
                               "Recipe: tensorwise, blockwise (128x128), blockwise-1x128, mxfp8 (scales NAME_scale_inv; "
                               "NAME_scale where OUT's config.json declares compressed-tensors); of a checkpoint: "
                               "re-encode it as `train --fp8` would run (also delayed, none)"),
      {"tensorwise", "blockwise", "blockwise-1x128", "mxfp8", "delayed", "none"});
  auto* deq = cmd->add_flag("--dequantize", args->dequantize,
                            "Turn FP8 tensors and their scales (NAME_scale_inv or NAME_scale) back into --dtype");
  fp8->excludes(deq);
  with_values(cmd->add_option("--fp8-format", args->format, "e4m3 (default) or e5m2"),
              {"e4m3", "e5m2"})->capture_default_str();
  cmd->add_option("--include", args->include,
                  "Regex: quantize the floating tensors whose name it matches (default: those of rank >= 2)");
  cmd->add_option("--exclude", args->exclude, "Regex: leave the tensors whose name it matches unchanged");
  cmd->add_option("--expert-dims", args->expert_dims,
                  "Regex: the tensors whose leading dimensions (all but the last two) stack experts, each "
                  "quantized with scales of its own (default: every tensor of rank >= 3; '^$' for none)");
  cmd->add_flag("--no-pow2-scales", args->no_pow2, "blockwise: exact scales fp8_max/amax (DeepSeek-V3 style)");
  cmd->add_flag("--pow2-scales", args->pow2, "tensorwise: round scales down to powers of two");
  cmd->add_flag("--strict", args->strict,
                "--fp8 of a safetensors model: refuse (exit 3, nothing written) a tensor holding NaN or +-Inf, which "
                "is otherwise quantized with a warning");
  with_values(cmd->add_option("--mx-scale", args->mx_scale, "mxfp8 scale rule: rceil (TE/cuBLAS, default) or floor (OCP)"),
              {"rceil", "floor"})
      ->capture_default_str();
  with_values(cmd->add_option("--dtype", args->dtype,
                  "--dequantize output: bf16 or fp32; checkpoint export weights: bf16 (as held), fp32 (the masters) "
                  "or fp8 (the checkpoint's FP8 bytes and scales)"), {"bf16", "fp32", "fp8"})
      ->capture_default_str();
  with_values(cmd->add_option("--to", args->to,
                  "Checkpoint export format: safetensors (default) or dcp (a PyTorch DCP directory OUT with "
                  "model.NAME and optimizer.state.NAME.STATE keys, which torch.distributed.checkpoint.load reads) "
                  "or hf (a Megatron GPT checkpoint as a Hugging Face model directory: --arch, --hf-config, --tokenizer)"),
              {"safetensors", "dcp", "hf"})
      ->capture_default_str();
  with_values(cmd->add_option("--arch", args->arch,
                  "--to hf: the Hugging Face architecture, auto (default: the --hf-config's model_type, else what the "
                  "tensors show) or llama, mistral, qwen2, qwen3, mixtral, qwen3_moe"),
              {"auto", "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe"})
      ->capture_default_str();
  cmd->add_option("--hf-config", args->hf_config,
                  "--to hf: a config.json to start from (its fields kept, its shapes checked against the tensors); "
                  "needed where the checkpoint saved no training args");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "--to hf: a directory whose tokenizer and generation_config files are copied into OUT");
  cmd->add_flag("--from-masters", args->from_masters,
                "--to hf: export the fp32 masters (rounded once to --dtype) instead of the weights as held");
  cmd->add_flag("--states", args->states, "Checkpoint export: add NAME.master and NAME.<state> (fp32) per param");
  cmd->add_flag("--no-validate", args->no_validate,
                "Checkpoint export: export even a checkpoint that fails validation's index checks (salvage; "
                "an altered index is read as it is, a gap still fails)");
  cmd->add_option("--max-shard-size", args->max_shard_size,
                  "Checkpoint export to a directory or index: shard above this size (e.g. 5GB, 500MB, 2GiB; "
                  "positive, below 2^64 bytes)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              app::convert::parse_byte_size(text);
              return "";
            } catch (const UsageError&) {
              return "must be a positive size below 2^64 bytes (e.g. 5GB, 500MB, 2GiB), not '" + text + "'";
            }
          },
          ""));
  integer_range(cmd->add_option("--amax-history", args->amax_history, "Checkpoint --fp8 delayed: amax history length"), 1,
                pipeline::kMaxAmaxHistory)
      ->capture_default_str();
  with_values(cmd->add_option("--amax-algo", args->amax_algo, "Checkpoint --fp8 delayed: most_recent or max"),
              {"most_recent", "max"})->capture_default_str();
  cmd->add_option("--compress", args->compress,
                  "Checkpoint IN: rewrite it as checkpoint OUT with this compression, zstd[:LEVEL][+shuffle] or none "
                  "(with --fp8: the re-encoded checkpoint's, default zstd:1)");
  cmd->callback([args, &global, &run] {
    run = [args, &global] { return run_convert(*args, global); };
  });
}

}  // namespace fpg::cli
