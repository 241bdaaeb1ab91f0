#include "app/convert/conversion.h"

#include <chrono>
#include <fmt/format.h>

#include "app/convert/checkpoint_export.h"
#include "app/convert/checkpoint_params.h"
#include "app/convert/checkpoint_recompress.h"
#include "app/convert/export_any.h"
#include "app/convert/fp8_reencode.h"
#include "app/convert/hf_export.h"
#include "app/convert/hf_import.h"
#include "app/convert/quantize_model.h"
#include "app/convert/staged_output.h"
#include "ckpt/chunk_codec.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/interrupt.h"
#include "core/units.h"
#include "fp8/recipe.h"
#include "pipeline/config.h"

namespace fpg::app::convert {

std::string field_option_name(const std::string& field, const std::string& value) {
  return value.empty() ? field : field + "='" + value + "'";
}

namespace {

using Clock = std::chrono::steady_clock;

// Bounds of the import's sizes, checked before they shape anything.
constexpr int64_t kMaxParallelSize = 1 << 16;
constexpr int64_t kMaxVocabDivisor = 1 << 20;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

class Conversion {
 public:
  Conversion(const std::string& in, const std::string& out, const ConversionOptions& a, const OptionNamer& name)
      : in_(in), out_(out), a_(a), name_(name) {}

  ConversionResult run();

 private:
  std::string opt(const std::string& field, const std::string& value = "") const { return name_(field, value); }
  // "not 'VALUE'", as every refused value is quoted.
  static std::string not_(const std::string& value) { return ", not '" + value + "'"; }

  void check_values() const;
  fp8::Recipe quantize_recipe() const;
  pipeline::Fp8Config train_fp8_config() const;
  void require_directory_out(const std::string& writer, const std::string& instead) const;
  // The architecture named by `arch`: nullopt for auto.
  std::optional<HfArch> hf_arch_option() const;

  ConversionResult run_recompress();
  ConversionResult run_reencode_fp8();
  ConversionResult run_export();
  ConversionResult run_hf_export();
  ConversionResult run_hf_import();
  ConversionResult run_model();

  const std::string& in_;
  const std::string& out_;
  const ConversionOptions& a_;
  const OptionNamer& name_;
};

// Values checked whatever the conversion, as the command line checks them while it parses.
void Conversion::check_values() const {
  try {
    parse_byte_size(a_.max_shard_size);
  } catch (const UsageError&) {
    throw UsageError(opt("max_shard_size") + " must be a positive size below 2^64 bytes (e.g. 5GB, 500MB, 2GiB)" +
                     not_(a_.max_shard_size));
  }
  if (a_.amax_history < 1 || static_cast<uint64_t>(a_.amax_history) > pipeline::kMaxAmaxHistory)
    throw UsageError(opt("amax_history") + " must be an integer from 1 to " + std::to_string(pipeline::kMaxAmaxHistory) +
                     not_(std::to_string(a_.amax_history)));
}

fp8::Recipe Conversion::quantize_recipe() const {
  const auto scaling = fp8::parse_scaling(a_.fp8);
  if (!scaling || *scaling == fp8::Scaling::delayed)
    throw UsageError(opt("fp8") + " must be tensorwise, blockwise, blockwise-1x128 or mxfp8" + not_(a_.fp8));
  const auto format = fp8::parse_format(a_.fp8_format);
  if (!format) throw UsageError(opt("fp8_format") + " must be e4m3 or e5m2" + not_(a_.fp8_format));
  const auto rule = fp8::parse_mx_rule(a_.mx_scale);
  if (!rule) throw UsageError(opt("mx_scale") + " must be rceil or floor" + not_(a_.mx_scale));
  switch (*scaling) {
    case fp8::Scaling::tensorwise: return fp8::Recipe::tensorwise(*format, a_.pow2_scales);
    case fp8::Scaling::blockwise_1x128: return fp8::Recipe::blockwise_1x128(*format, !a_.no_pow2_scales);
    case fp8::Scaling::blockwise_128x128: return fp8::Recipe::blockwise_128x128(*format, !a_.no_pow2_scales);
    default: return fp8::Recipe::mxfp8(*format, *rule);
  }
}

// The FP8 config `fpgather train --fp8 RECIPE` runs with: its parsing and its recipe defaults.
pipeline::Fp8Config Conversion::train_fp8_config() const {
  pipeline::Fp8Config c;
  if (a_.fp8 == "none") return c;
  const auto scaling = fp8::parse_scaling(a_.fp8);
  if (!scaling)
    throw UsageError(opt("fp8") + " must be none, tensorwise, delayed, blockwise, blockwise-1x128 or mxfp8" + not_(a_.fp8));
  const auto format = fp8::parse_format(a_.fp8_format);
  if (!format) throw UsageError(opt("fp8_format") + " must be e4m3 or e5m2" + not_(a_.fp8_format));
  const auto rule = fp8::parse_mx_rule(a_.mx_scale);
  if (!rule) throw UsageError(opt("mx_scale") + " must be rceil or floor" + not_(a_.mx_scale));
  c.enabled = true;
  switch (*scaling) {
    case fp8::Scaling::tensorwise: c.recipe = fp8::Recipe::tensorwise(*format); break;
    case fp8::Scaling::delayed: c.recipe = fp8::Recipe::delayed(*format); break;
    case fp8::Scaling::blockwise_1x128: c.recipe = fp8::Recipe::blockwise_1x128(*format); break;
    case fp8::Scaling::blockwise_128x128: c.recipe = fp8::Recipe::blockwise_128x128(*format); break;
    default: c.recipe = fp8::Recipe::mxfp8(*format, *rule, true, true); break;
  }
  c.amax_history_len = static_cast<size_t>(a_.amax_history);
  if (a_.amax_algo == "max") c.amax_algo = fp8::AmaxAlgo::max;
  else if (a_.amax_algo == "most_recent") c.amax_algo = fp8::AmaxAlgo::most_recent;
  else throw UsageError(opt("amax_algo") + " must be most_recent or max" + not_(a_.amax_algo));
  return c;
}

// A conversion that writes a checkpoint writes a directory: an OUT that names a file (.safetensors)
// or an index (.json) is refused before anything is read. `writer`: the option that makes it a
// checkpoint; `instead`: how to get the file the caller may have meant.
void Conversion::require_directory_out(const std::string& writer, const std::string& instead) const {
  const OutputKind kind = output_kind(out_);
  if (kind == OutputKind::directory) return;
  std::string dir = out_.substr(0, out_.rfind('.'));
  if (dir.empty()) dir = "OUT";
  throw UsageError("OUT " + out_ + ": " + writer + " writes a checkpoint, a directory, and a path ending in " +
                   (kind == OutputKind::file ? ".safetensors names one safetensors file"
                                             : ".json names a safetensors index") +
                   ": give a directory (e.g. " + dir + "), or " + instead);
}

std::optional<HfArch> Conversion::hf_arch_option() const {
  if (a_.arch == "auto") return std::nullopt;
  const std::optional<HfArch> arch = parse_hf_arch(a_.arch);
  if (!arch) throw UsageError(opt("arch") + " must be auto or " + hf_arch_names() + not_(a_.arch));
  return arch;
}

ConversionResult Conversion::run_recompress() {
  const auto t0 = Clock::now();
  RecompressOptions o;
  o.compression = ckpt::parse_compression(a_.compress);
  o.progress = a_.progress;
  o.force = a_.force;
  const RecompressSummary s = recompress_checkpoint(in_, out_, o);
  const double secs = seconds_since(t0);
  ConversionResult r;
  r.operation = "recompress";
  r.source = s.source;
  r.tensors = s.keys;
  r.bytes_read = s.stored_bytes_in;
  r.bytes_written = s.stored_bytes_out;
  r.files = {s.target};
  r.document = {{"input", s.source},         {"output", s.target},
                {"operation", "recompress"}, {"compression", ckpt::to_string(o.compression)},
                {"keys", s.keys},            {"runs", s.runs},
                {"logical_bytes", s.logical_bytes}, {"stored_bytes_in", s.stored_bytes_in},
                {"stored_bytes_out", s.stored_bytes_out}, {"seconds", secs}};
  r.text = {fmt::format("recompressed {} ({}) as {}: {} stored -> {} in {:.2f} s", plural(s.keys, "key"),
                        byte_size(s.logical_bytes), ckpt::to_string(o.compression), byte_size(s.stored_bytes_in),
                        byte_size(s.stored_bytes_out), secs),
            "wrote " + s.target};
  return r;
}

ConversionResult Conversion::run_reencode_fp8() {
  const auto t0 = Clock::now();
  Fp8ReencodeOptions o;
  o.fp8 = train_fp8_config();
  o.compression = ckpt::parse_compression(a_.compress.empty() ? "zstd:1" : a_.compress);
  o.force = a_.force;
  o.progress = a_.progress;
  const Fp8ReencodeSummary s = reencode_fp8(in_, out_, o);
  const double secs = seconds_since(t0);
  ConversionResult r;
  r.operation = "reencode_fp8";
  r.source = s.source;
  r.tensors = s.fp8_params;
  r.files = {s.target};
  r.document = {{"input", s.source}, {"output", s.target},          {"operation", "reencode_fp8"},
                {"fp8", a_.fp8},     {"fp8_format", a_.fp8_format}, {"step", s.step},
                {"fp8_params", s.fp8_params}, {"seconds", secs}};
  r.text = {fmt::format("re-encoded {} at step {} with fp8 {} ({} FP8 params) in {:.2f} s", s.source, s.step, a_.fp8,
                        s.fp8_params, secs),
            "wrote " + s.target};
  return r;
}

ConversionResult Conversion::run_export() {
  const auto t0 = Clock::now();
  ExportOptions o;
  const auto weights = parse_export_weights(a_.dtype);
  if (!weights) throw UsageError(opt("dtype") + " of a checkpoint export must be bf16, fp32 or fp8" + not_(a_.dtype));
  o.weights = *weights;
  o.states = a_.states;
  o.max_shard_bytes = parse_byte_size(a_.max_shard_size);
  o.progress = a_.progress;
  o.validate = !a_.no_validate;
  o.force = a_.force;
  const ExportSummary s = export_any(in_, out_, *parse_export_format(a_.to), o);
  const double secs = seconds_since(t0);
  ConversionResult r;
  r.operation = "export";
  r.source = s.checkpoint;
  r.tensors = s.tensors;
  r.bytes_read = s.bytes_read;
  r.bytes_written = s.bytes_written;
  r.files = s.files;
  r.document = {{"input", s.checkpoint}, {"output", out_},     {"operation", "export"},
                {"dtype", a_.dtype},     {"states", a_.states}, {"tensors", s.tensors},
                {"bytes_read", s.bytes_read}, {"bytes_written", s.bytes_written},
                {"files", s.files},      {"seconds", secs}};
  r.text.push_back(fmt::format("exported {} ({} weights{}) from {}: {} in {:.2f} s", plural(s.tensors, "tensor"),
                               a_.dtype, a_.states ? ", masters and optimizer states" : "", s.checkpoint,
                               byte_size(s.bytes_written), secs));
  for (const auto& f : s.files) r.text.push_back("wrote " + f);
  return r;
}

ConversionResult Conversion::run_hf_export() {
  const auto t0 = Clock::now();
  HfExportOptions o;
  o.arch = hf_arch_option();
  if (a_.dtype != "bf16" && a_.dtype != "fp32")
    throw UsageError(opt("dtype") + " of " + opt("to", "hf") + " must be bf16 or fp32" + not_(a_.dtype));
  o.fp32 = a_.dtype == "fp32";
  o.config = a_.hf_config;
  o.tokenizer = a_.tokenizer;
  o.from_masters = a_.from_masters;
  if (!a_.fp8.empty()) {
    o.fp8 = quantize_recipe();
    if (!a_.include.empty()) o.fp8_include = a_.include;
    if (!a_.exclude.empty()) o.fp8_exclude = a_.exclude;
  }
  o.max_shard_bytes = parse_byte_size(a_.max_shard_size);
  o.force = a_.force;
  o.progress = a_.progress;
  o.validate = !a_.no_validate;
  const HfExportSummary s = export_hf(in_, out_, o);
  const double secs = seconds_since(t0);
  const auto& m = s.shape;
  ConversionResult r;
  r.operation = "export_hf";
  r.source = s.exported.checkpoint;
  r.tensors = s.exported.tensors;
  r.bytes_read = s.exported.bytes_read;
  r.bytes_written = s.exported.bytes_written;
  r.files = s.exported.files;
  r.document = {{"input", s.exported.checkpoint}, {"output", out_}, {"operation", "export_hf"},
                {"arch", hf_arch_name(s.arch)}, {"arch_from", s.arch_from},
                {"dtype", a_.dtype}, {"from_masters", a_.from_masters},
                {"tensors", s.exported.tensors}, {"bytes_read", s.exported.bytes_read},
                {"bytes_written", s.exported.bytes_written}, {"files", s.exported.files},
                {"copied", s.copied}, {"notes", m.notes}, {"seconds", secs},
                {"fp8", a_.fp8.empty() ? nlohmann::json() : nlohmann::json(a_.fp8)},
                {"quantized", s.quantized ? nlohmann::json(s.quantized->quantized) : nlohmann::json()}};
  if (s.quantized)
    r.text.push_back(fmt::format("quantized {} with fp8 {} (copied {}: embedding, lm_head, routers, norms unless {} "
                                 "says otherwise)",
                                 plural(s.quantized->quantized, "tensor"), a_.fp8, s.quantized->copied, opt("exclude")));
  r.text.push_back(fmt::format("exported {} as a Hugging Face {} model ({}, from {}; {} tensors{}) from {}: {} in {:.2f} s",
                               plural(m.layers, "layer"), hf_arch_name(s.arch), s.arch_from,
                               a_.from_masters ? "the fp32 masters" : "the weights", a_.dtype,
                               m.experts ? ", " + std::to_string(m.experts) + " experts" : std::string(),
                               s.exported.checkpoint, byte_size(s.exported.bytes_written), secs));
  for (const auto& n : m.notes) r.text.push_back("note: " + n);
  for (const auto& f : s.exported.files) r.text.push_back("wrote " + f);
  if (!s.quantized) {  // a quantized export lists every file it wrote
    r.text.push_back("wrote " + out_ + "/config.json");
    for (const auto& f : s.copied) r.text.push_back("copied " + out_ + "/" + f);
  }
  return r;
}

ConversionResult Conversion::run_hf_import() {
  const auto t0 = Clock::now();
  HfImportOptions o;
  o.arch = hf_arch_option();
  const std::optional<MegatronLayerSpec> spec = parse_megatron_layer_spec(a_.layer_spec);
  if (!spec) throw UsageError(opt("layer_spec") + " must be te or local" + not_(a_.layer_spec));
  o.spec = *spec;
  if (a_.dtype != "bf16" && a_.dtype != "fp32")
    throw UsageError(opt("dtype") + " of " + opt("to", "megatron") + " must be bf16 or fp32" + not_(a_.dtype));
  o.dtype = a_.dtype == "fp32" ? DType::F32 : DType::BF16;
  for (const auto& [field, value] : {std::pair<const char*, int64_t>{"tp", a_.tp}, {"pp", a_.pp}, {"ep", a_.ep}})
    if (value < 1 || value > kMaxParallelSize)
      throw UsageError(opt(field) + " must be an integer from 1 to " + std::to_string(kMaxParallelSize) +
                       not_(std::to_string(value)));
  if (a_.make_vocab_size_divisible_by < 1 || a_.make_vocab_size_divisible_by > kMaxVocabDivisor)
    throw UsageError(opt("make_vocab_size_divisible_by") + " must be an integer from 1 to " +
                     std::to_string(kMaxVocabDivisor) + not_(std::to_string(a_.make_vocab_size_divisible_by)));
  o.tp = static_cast<uint32_t>(a_.tp);
  o.pp = static_cast<uint32_t>(a_.pp);
  o.ep = static_cast<uint32_t>(a_.ep);
  o.vocab_divisible_by = static_cast<uint64_t>(a_.make_vocab_size_divisible_by);
  o.config = a_.hf_config;
  o.force = a_.force;
  o.progress = a_.progress;
  const HfImportSummary s = import_hf(in_, out_, o);
  const double secs = seconds_since(t0);
  const auto& m = s.shape;
  const auto& w = s.written;
  ConversionResult r;
  r.operation = "import_hf";
  r.source = s.source;
  r.tensors = s.tensors;
  r.bytes_read = w.bytes_read;
  r.bytes_written = w.bytes_written;
  r.files = {out_};
  r.document = {{"input", s.source}, {"output", out_}, {"operation", "import_hf"},
                {"arch", hf_arch_name(s.arch)}, {"arch_from", s.arch_from},
                {"layer_spec", a_.layer_spec}, {"dtype", a_.dtype},
                {"tp", a_.tp}, {"pp", a_.pp}, {"ep", a_.ep},
                {"vocab_size", m.vocab}, {"padded_vocab_size", m.padded_vocab},
                {"stacked_layers", w.stacked_layers}, {"tensors", s.tensors}, {"keys", w.keys},
                {"chunks", w.chunks}, {"objects", w.objects}, {"data_files", w.files},
                {"bytes_read", w.bytes_read}, {"bytes_written", w.bytes_written},
                {"megatron_args", s.megatron_args}, {"notes", s.notes}, {"seconds", secs}};
  r.text.push_back(fmt::format("imported a Hugging Face {} model ({}; {}{}) from {} as a Megatron-Core torch_dist "
                               "checkpoint at TP {} x PP {}{} ({} spec, {}): {} parameters in {} keys, {} in {:.2f} s",
                               hf_arch_name(s.arch), s.arch_from, plural(m.layers, "layer"),
                               m.experts ? ", " + std::to_string(m.experts) + " experts" : std::string(), s.source, a_.tp,
                               a_.pp, a_.ep > 1 ? " x EP " + std::to_string(a_.ep) : std::string(), a_.layer_spec,
                               a_.dtype, s.tensors, w.keys, byte_size(w.bytes_written), secs));
  for (const auto& n : s.notes) r.text.push_back("note: " + n);
  std::string args;
  for (const auto& x : s.megatron_args) args += (args.empty() ? "" : " ") + x;
  r.text.push_back("Megatron-LM arguments of this model: " + args);
  r.text.push_back("wrote " + out_);
  return r;
}

ConversionResult Conversion::run_model() {
  const auto t0 = Clock::now();
  ConvertSummary s;
  if (a_.dequantize) {
    DequantizeModelOptions o;
    if (a_.dtype == "bf16") o.dtype = DType::BF16;
    else if (a_.dtype == "fp32") o.dtype = DType::F32;
    else throw UsageError(opt("dtype") + " must be bf16 or fp32" + not_(a_.dtype));
    o.progress = a_.progress;
    o.force = a_.force;
    s = dequantize_model(in_, out_, o);
  } else {
    QuantizeModelOptions o;
    o.recipe = quantize_recipe();
    if (!a_.include.empty()) o.include = a_.include;
    if (!a_.exclude.empty()) o.exclude = a_.exclude;
    if (!a_.expert_dims.empty()) o.expert_dims = a_.expert_dims;
    o.force = a_.force;
    o.progress = a_.progress;
    o.strict = a_.strict;
    s = quantize_model(in_, out_, o);
  }
  const double secs = seconds_since(t0);
  const std::string what = a_.dequantize ? "dequantized" : "quantized";
  ConversionResult r;
  r.operation = a_.dequantize ? "dequantize" : "quantize";
  r.source = in_;
  r.tensors = s.quantized;
  r.copied = s.copied;
  r.bytes_read = s.bytes_in;
  r.bytes_written = s.bytes_out;
  r.files = s.files;
  r.nonfinite = s.nonfinite;
  uint64_t nonfinite = 0;
  for (const auto& n : s.nonfinite) {
    nonfinite += n.total();
    r.warnings.push_back(fmt::format("tensor '{}' holds {} non-finite values ({} NaN, {} +Inf, {} -Inf): FP8 keeps NaN "
                                     "and turns +-Inf into +-max, and a scaling block holding an infinity gets scale 1",
                                     n.tensor, n.total(), n.nan, n.pos_inf, n.neg_inf));
  }
  if (nonfinite)
    r.warnings.push_back(fmt::format("{} non-finite values in {} tensors ({} refuses them)", nonfinite,
                                     s.nonfinite.size(), opt("strict")));
  r.document = {{"input", in_},         {"output", out_},         {"operation", what},
                {"tensors_converted", s.quantized}, {"tensors_copied", s.copied},
                {"bytes_in", s.bytes_in}, {"bytes_out", s.bytes_out}, {"files", s.files},
                {"seconds", secs}};
  r.document["recipe"] = r.document["format"] = r.document["nonfinite"] = nullptr;  // a dequantization has none
  if (!a_.dequantize) {
    r.document["recipe"] = a_.fp8, r.document["format"] = a_.fp8_format;
    r.document["nonfinite"] = nlohmann::json::array();
    for (const auto& n : s.nonfinite)
      r.document["nonfinite"].push_back(
          {{"tensor", n.tensor}, {"nan", n.nan}, {"pos_inf", n.pos_inf}, {"neg_inf", n.neg_inf}});
  }
  r.text.push_back(fmt::format("{} {}, copied {}; {} -> {} in {:.2f} s", what, plural(s.quantized, "tensor"), s.copied,
                               byte_size(s.bytes_in), byte_size(s.bytes_out), secs));
  for (const auto& f : s.files) r.text.push_back("wrote " + f);
  return r;
}

ConversionResult Conversion::run() {
  const ConversionOptions& a = a_;
  if (a.to != "hf" && a.to != "megatron" && !parse_export_format(a.to))
    throw UsageError(opt("to") + " must be safetensors, dcp, hf or megatron" + not_(a.to));
  check_values();
  const std::string to_megatron = opt("to", "megatron");
  if (a.to != "megatron" && (a.tp != 1 || a.pp != 1 || a.ep != 1 || a.make_vocab_size_divisible_by != 128 ||
                             a.layer_spec != "te"))
    throw UsageError(opt("tp") + ", " + opt("pp") + ", " + opt("ep") + ", " + opt("make_vocab_size_divisible_by") +
                     " and " + opt("layer_spec") + " belong to " + to_megatron);
  if (a.to == "megatron") {
    if (!a.tokenizer.empty() || a.from_masters || !a.fp8.empty() || !a.compress.empty() || a.dequantize || a.states ||
        a.no_validate)
      throw UsageError(to_megatron + " imports a Hugging Face model's weights: " + opt("tokenizer") + ", " +
                       opt("from_masters") + ", " + opt("fp8") + ", " + opt("compress") + ", " + opt("dequantize") +
                       ", " + opt("states") + " and " + opt("no_validate") + " do not apply");
    return run_hf_import();
  }
  if (a.to != "hf" && (a.arch != "auto" || !a.hf_config.empty() || !a.tokenizer.empty() || a.from_masters))
    throw UsageError(opt("arch") + ", " + opt("hf_config") + ", " + opt("tokenizer") + " and " + opt("from_masters") +
                     " belong to " + opt("to", "hf"));
  const std::optional<ckpt::Contents> contents = source_contents(in_);
  if (a.to == "hf") {
    if (!a.compress.empty() || a.dequantize || a.states)
      throw UsageError(opt("to", "hf") + " exports a Megatron checkpoint's model: " + opt("compress") + ", " +
                       opt("dequantize") + " and " + opt("states") + " do not apply");
    if (a.fp8.empty() && (!a.include.empty() || !a.exclude.empty() || a.pow2_scales || a.no_pow2_scales || a.strict))
      throw UsageError(opt("include") + ", " + opt("exclude") + ", " + opt("pow2_scales") + " and " + opt("strict") +
                       " belong to " + opt("fp8"));
    return run_hf_export();
  }
  const bool model = !contents || *contents == ckpt::Contents::model;
  const std::string to_dcp = opt("to", "dcp");
  if (a.to == "dcp" && model) throw UsageError(to_dcp + " exports a checkpoint; " + in_ + " is not one");
  if (a.to == "dcp" && (!a.fp8.empty() || !a.compress.empty() || a.dequantize))
    throw UsageError(to_dcp + " is an export: " + opt("fp8") + ", " + opt("compress") + " and " + opt("dequantize") +
                     " do not apply");
  if (a.to == "dcp") require_directory_out(to_dcp, "export to safetensors (without " + to_dcp + ")");
  if (contents == ckpt::Contents::framework_state) {
    if (a.dequantize || !a.fp8.empty() || !a.compress.empty() || a.pow2_scales || a.no_pow2_scales ||
        !a.include.empty() || !a.exclude.empty() || !a.expert_dims.empty())
      throw UsageError(in_ + " is a PyTorch DCP / Megatron torch_dist checkpoint: it exports to safetensors (" +
                       opt("dtype", "bf16|fp32") + ", " + opt("states") + ", " + opt("max_shard_size") +
                       "); quantize the export with " + opt("fp8"));
    return run_export();
  }
  if (contents == ckpt::Contents::training_state) {
    if (a.dequantize) throw UsageError(opt("dequantize") + " takes a safetensors model; " + in_ + " is a checkpoint");
    if (a.pow2_scales || a.no_pow2_scales || !a.include.empty() || !a.exclude.empty() || !a.expert_dims.empty())
      throw UsageError(opt("include") + ", " + opt("exclude") + ", " + opt("expert_dims") + " and " + opt("pow2_scales") +
                       " quantize safetensors models; " + in_ + " is a checkpoint (" + opt("fp8") +
                       " re-encodes it with train's recipe defaults)");
    if ((!a.fp8.empty() || !a.compress.empty()) && a.states)
      throw UsageError(opt("states") + " belongs to an export; " + opt("compress") + " and " + opt("fp8") +
                       " write a checkpoint");
    if ((!a.fp8.empty() || !a.compress.empty()) && a.no_validate)
      throw UsageError(opt("no_validate") + " salvages values into a safetensors export; " + opt("compress") + " and " +
                       opt("fp8") + " write a checkpoint, which is made only from a valid one");
    if (!a.fp8.empty()) {
      require_directory_out(opt("fp8") + " of a checkpoint",
                            "for a safetensors file of its FP8 weights export it with " + opt("dtype", "fp8") +
                                " (re-encoded with " + opt("fp8") + " into a directory first, for another recipe)");
      return run_reencode_fp8();
    }
    if (!a.compress.empty())
      require_directory_out(opt("compress"), "export the checkpoint to safetensors (without " + opt("compress") + ")");
    return a.compress.empty() ? run_export() : run_recompress();
  }
  if (!a.compress.empty() || a.states || a.no_validate)
    throw UsageError(opt("compress") + ", " + opt("states") + " and " + opt("no_validate") + " take a checkpoint; " + in_ +
                     " is not one");
  if (a.strict && a.fp8.empty())
    throw UsageError(opt("strict") + " belongs to quantizing a safetensors model with " + opt("fp8"));
  if (a.dequantize && !a.expert_dims.empty())
    throw UsageError(opt("expert_dims") + " quantizes; " + opt("dequantize") +
                     " reads the expert dimensions off each scale's shape");
  if (!a.fp8.empty() && a.dequantize)
    throw UsageError(opt("fp8") + " excludes " + opt("dequantize"));
  if (a.fp8.empty() && !a.dequantize)
    throw UsageError("give " + opt("fp8", "RECIPE") + " or " + opt("dequantize") + " (or a checkpoint as IN)");
  return run_model();
}

}  // namespace

ConversionResult convert_any(const std::string& in, const std::string& out, const ConversionOptions& options,
                             const OptionNamer& name) {
  // A signal (core/interrupt.h) stops the conversion before OUT is touched.
  const bool existed = fs::exists(out);
  return run_interruptible([&] { return Conversion(in, out, options, name).run(); },
                           [&] { return nothing_written(out, existed); });
}

}  // namespace fpg::app::convert
