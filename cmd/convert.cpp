// fpgather convert: safetensors -> safetensors FP8 quantization and dequantization; a checkpoint
// exported to safetensors or rewritten with other compression; Megatron <-> Hugging Face. The conversion, its checks and its
// summary are app/convert/conversion.h's; this parses the flags and prints.
#include <cstdio>

#include "cli.h"
#include "json_output.h"
#include "app/convert/checkpoint_export.h"
#include "app/convert/conversion.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "option_range.h"
#include "pipeline/config.h"

namespace fpg::cli {
namespace {

struct ConvertArgs {
  std::string in, out;
  app::convert::ConversionOptions o;
};

// The library names an option by its field; the command by its flag ("--to hf").
std::string flag_name(const std::string& field, const std::string& value) {
  std::string flag = field == "pow2_scales" ? "--(no-)pow2-scales" : "--" + field;
  for (char& c : flag)
    if (c == '_') c = '-';
  return value.empty() ? flag : flag + " " + value;
}

int run_convert(const ConvertArgs& a, const GlobalOptions& g) {
  app::convert::ConversionOptions o = a.o;
  o.progress = progress_enabled(g);
  // Ctrl-C or SIGTERM stops the conversion before OUT is touched.
  install_interrupt_handlers();
  const app::convert::ConversionResult r = app::convert::convert_any(a.in, a.out, o, flag_name);
  for (const auto& w : r.warnings) std::fprintf(stderr, "fpgather: warning: %s\n", w.c_str());
  if (g.json) {
    print_json(r.document);
  } else {
    for (const auto& line : r.text) std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace

void register_convert(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand("convert",
                                 "Quantize a safetensors model to FP8 or dequantize it; export a checkpoint to "
                                 "safetensors, recompress it or change its FP8 recipe; export a Megatron checkpoint to "
                                 "Hugging Face and import one back");
  cmd->add_option("IN", args->in,
                  "Input: a .safetensors file, an index .json, or a directory holding one; or a checkpoint (or a "
                  "root holding `latest`)")
      ->required();
  cmd->add_option("OUT", args->out,
                  "Output: a .safetensors file, an index .json, or a directory (model.safetensors, or shards and "
                  "an index, beside IN's config and tokenizer files); with --compress or --fp8 a new checkpoint. "
                  "Never over an existing OUT without --force")
      ->required();
  cmd->add_flag("--force", args->o.force,
                "Replace an existing OUT: the new output is written beside it and swapped in whole, leaving no "
                "file of the old one");
  auto* fp8 = with_values(cmd->add_option("--fp8", args->o.fp8,
                               "Recipe: tensorwise, blockwise (128x128), blockwise-1x128, mxfp8 (scales NAME_scale_inv; "
                               "NAME_scale where OUT's config.json declares compressed-tensors); of a checkpoint: "
                               "re-encode it as `train --fp8` would run (also delayed, none)"),
      {"tensorwise", "blockwise", "blockwise-1x128", "mxfp8", "delayed", "none"});
  auto* deq = cmd->add_flag("--dequantize", args->o.dequantize,
                            "Turn FP8 tensors and their scales (NAME_scale_inv or NAME_scale) back into --dtype");
  fp8->excludes(deq);
  with_values(cmd->add_option("--fp8-format", args->o.fp8_format, "e4m3 (default) or e5m2"),
              {"e4m3", "e5m2"})->capture_default_str();
  cmd->add_option("--include", args->o.include,
                  "Regex: quantize the floating tensors whose name it matches (default: those of rank >= 2)");
  cmd->add_option("--exclude", args->o.exclude, "Regex: leave the tensors whose name it matches unchanged");
  cmd->add_option("--expert-dims", args->o.expert_dims,
                  "Regex: the tensors whose leading dimensions (all but the last two) stack experts, each "
                  "quantized with scales of its own (default: every tensor of rank >= 3; '^$' for none)");
  cmd->add_flag("--no-pow2-scales", args->o.no_pow2_scales, "blockwise: exact scales fp8_max/amax (DeepSeek-V3 style)");
  cmd->add_flag("--pow2-scales", args->o.pow2_scales, "tensorwise: round scales down to powers of two");
  cmd->add_flag("--strict", args->o.strict,
                "--fp8 of a safetensors model: refuse (exit 3, nothing written) a tensor holding NaN or +-Inf, which "
                "is otherwise quantized with a warning");
  with_values(cmd->add_option("--mx-scale", args->o.mx_scale, "mxfp8 scale rule: rceil (TE/cuBLAS, default) or floor (OCP)"),
              {"rceil", "floor"})
      ->capture_default_str();
  with_values(cmd->add_option("--dtype", args->o.dtype,
                  "--dequantize output: bf16 or fp32; checkpoint export weights: bf16 (as held), fp32 (the masters) "
                  "or fp8 (the checkpoint's FP8 bytes and scales); --to hf and --to megatron: bf16 or fp32"),
              {"bf16", "fp32", "fp8"})
      ->capture_default_str();
  with_values(cmd->add_option("--to", args->o.to,
                  "Checkpoint export format: safetensors (default) or dcp (a PyTorch DCP directory OUT with "
                  "model.NAME and optimizer.state.NAME.STATE keys, which torch.distributed.checkpoint.load reads) "
                  "or hf (a Megatron GPT checkpoint as a Hugging Face model directory: --arch, --hf-config, --tokenizer) "
                  "or megatron (a Hugging Face model directory as a Megatron-Core torch_dist checkpoint's model "
                  "section: --arch, --tp, --pp, --ep, --layer-spec, --make-vocab-size-divisible-by)"),
              {"safetensors", "dcp", "hf", "megatron"})
      ->capture_default_str();
  with_values(cmd->add_option("--arch", args->o.arch,
                  "--to hf: the Hugging Face architecture, auto (default: the --hf-config's model_type, else what the "
                  "tensors show) or llama, mistral, qwen2, qwen3, mixtral, qwen3_moe; --to megatron: auto (IN's "
                  "config.json model_type) or the one IN must be"),
              {"auto", "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe"})
      ->capture_default_str();
  cmd->add_option("--hf-config", args->o.hf_config,
                  "--to hf: a config.json to start from (its fields kept, its shapes checked against the tensors); "
                  "needed where the checkpoint saved no training args. --to megatron: the config.json to read "
                  "instead of IN's");
  cmd->add_option("--tokenizer", args->o.tokenizer,
                  "--to hf: a directory whose tokenizer and generation_config files are copied into OUT");
  cmd->add_flag("--from-masters", args->o.from_masters,
                "--to hf: export the fp32 masters (rounded once to --dtype) instead of the weights as held");
  integer_range(cmd->add_option("--tp", args->o.tp, "--to megatron: the tensor-parallel size whose pieces are written "
                                "(expert TP is the same)"), 1, 1 << 16)
      ->capture_default_str();
  integer_range(cmd->add_option("--pp", args->o.pp, "--to megatron: the pipeline stages the layers are split over (evenly)"),
                1, 1 << 16)
      ->capture_default_str();
  integer_range(cmd->add_option("--ep", args->o.ep, "--to megatron: the expert-parallel size the experts are split over"),
                1, 1 << 16)
      ->capture_default_str();
  integer_range(cmd->add_option("--make-vocab-size-divisible-by", args->o.make_vocab_size_divisible_by,
                                "--to megatron: the vocabulary is padded to a multiple of this times --tp, as Megatron-LM "
                                "pads it (its flag of the same name)"),
                1, 1 << 20)
      ->capture_default_str();
  with_values(cmd->add_option("--layer-spec", args->o.layer_spec,
                  "--to megatron: the Megatron-Core layer spec the model is built with: te (Transformer Engine, "
                  "Megatron-LM's default) or local (--transformer-impl local)"),
              {"te", "local"})
      ->capture_default_str();
  cmd->add_flag("--states", args->o.states, "Checkpoint export: add NAME.master and NAME.<state> (fp32) per param");
  cmd->add_flag("--no-validate", args->o.no_validate,
                "Checkpoint export: export even a checkpoint that fails validation's index checks (salvage; "
                "an altered index is read as it is, a gap still fails)");
  cmd->add_option("--max-shard-size", args->o.max_shard_size,
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
  integer_range(cmd->add_option("--amax-history", args->o.amax_history, "Checkpoint --fp8 delayed: amax history length"), 1,
                pipeline::kMaxAmaxHistory)
      ->capture_default_str();
  with_values(cmd->add_option("--amax-algo", args->o.amax_algo, "Checkpoint --fp8 delayed: most_recent or max"),
              {"most_recent", "max"})->capture_default_str();
  cmd->add_option("--compress", args->o.compress,
                  "Checkpoint IN: rewrite it as checkpoint OUT with this compression, zstd[:LEVEL][+shuffle] or none "
                  "(with --fp8: the re-encoded checkpoint's, default zstd:1)");
  cmd->callback([args, &global, &run] {
    run = [args, &global] { return run_convert(*args, global); };
  });
}

}  // namespace fpg::cli
