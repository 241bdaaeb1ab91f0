#include "app/convert/hf_import.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/convert/hf_config_shape.h"
#include "app/convert/hf_megatron_view.h"
#include "app/convert/staged_output.h"
#include "ckpt/format_registry.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/progress.h"

namespace fpg::app::convert {
namespace {

constexpr uint64_t kConfigLimit = 16ull << 20;

// IN's config.json: the one given, else the one beside IN's tensors.
std::string config_path(const std::string& in, const std::string& given) {
  if (!given.empty()) return given;
  if (fs::is_directory(in)) return (std::filesystem::path(in) / "config.json").string();
  return (std::filesystem::path(in).parent_path() / "config.json").string();
}

// Megatron needs every split whole: query groups, FFN halves, expert FFN halves over TP.
void check_tensor_parallel(const HfModelShape& s, uint32_t tp, const std::string& what) {
  auto refuse = [&](const std::string& field, uint64_t n, const std::string& why) {
    throw UsageError(fmt::format("{}: {} {} does not split over TP {}: {}", what, field, n, tp, why));
  };
  if (s.kv_heads % tp) refuse("num_key_value_heads", s.kv_heads, "each tensor-parallel rank holds whole query groups");
  if (s.ffn % tp) refuse("intermediate_size", s.ffn, "each rank holds a part of the gate and of the up projection");
  if (s.moe_ffn % tp)
    refuse(s.arch == HfArch::mixtral ? "intermediate_size" : "moe_intermediate_size", s.moe_ffn,
           "each rank holds a part of every expert's gate and up projection (expert TP is TP)");
}

}  // namespace

HfImportSummary import_hf(const std::string& in, const std::string& out, const HfImportOptions& o) {
  if (o.tp == 0 || o.pp == 0 || o.ep == 0) throw UsageError("tp, pp and ep must be at least 1");
  if (o.vocab_divisible_by == 0) throw UsageError("make_vocab_size_divisible_by must be at least 1");
  if (o.dtype != DType::BF16 && o.dtype != DType::F32) throw InternalError("import: dtype must be BF16 or F32");
  if (output_kind(out) != OutputKind::directory)
    throw UsageError("OUT " + out + ": a Megatron checkpoint is a directory; give one (not a .safetensors or .json path)");

  HfImportSummary sum;
  std::unique_ptr<ckpt::Checkpoint> model;
  {
    Progress progress("import", 0, o.progress);
    progress.phase("opening " + in);
    model = ckpt::open_checkpoint(in);
  }
  if (model->format() != "safetensors")
    throw UsageError(in + ": an import to Megatron reads a Hugging Face model (safetensors and config.json); this is " +
                     std::string(model->format()));
  sum.source = model->path();
  const std::string cpath = config_path(in, o.config);
  if (!fs::exists(cpath, true))
    throw UsageError(cpath + ": no such file: a Hugging Face model directory holds its config.json (or give one)");
  const nlohmann::json config = nlohmann::json::parse(fs::read_small_file(cpath, kConfigLimit), nullptr, false);
  if (config.is_discarded() || !config.is_object()) throw UsageError(cpath + ": not a JSON object (a config.json)");
  sum.arch_from = o.arch ? "arch" : "the config's model_type";
  sum.arch = o.arch ? *o.arch : hf_arch_of_config(config, cpath);

  ckpt::ParamsOptions po;
  po.refusing = "import it into Megatron";
  const std::unique_ptr<ckpt::OpenedParams> opened = model->params(po);
  const ckpt::ParamSource& hf = opened->params();
  HfModelShape& s = sum.shape;
  s = hf_config_shape(sum.arch, config, cpath, hf);
  check_tensor_parallel(s, o.tp, cpath);
  s.padded_vocab = megatron_padded_vocab(s.vocab, o.vocab_divisible_by, o.tp);
  if (s.padded_vocab != s.vocab)
    sum.notes.push_back(fmt::format("vocabulary {} padded to {} rows (a multiple of {} x TP {}), the padding rows zero",
                                    s.vocab, s.padded_vocab, o.vocab_divisible_by, o.tp));

  const GptHfTable table = gpt_hf_table(s, o.spec);
  const HfMegatronView view(hf, table, o.dtype, sum.notes);
  ckpt::MegatronModelSection section;
  section.source = &view;
  section.tp = o.tp;
  section.pp = o.pp;
  section.ep = o.ep;
  for (size_t i = 0; i < table.megatron.size(); ++i) {
    const GptTensor& g = table.megatron[i];
    section.params.push_back({i, g.layer, g.expert, g.module_key, g.gated});
  }
  for (const GptExtraState& x : table.extra_states) section.extra_states.push_back({x.layer, x.expert, x.module_key});
  sum.tensors = section.params.size();
  sum.megatron_args = megatron_lm_args(s, config, o.vocab_divisible_by, o.tp, o.pp, o.ep, o.spec == MegatronLayerSpec::te);
  // Attention windows are a run's setting, not a weight: said, not translated.
  const auto w = config.find("sliding_window"), use = config.find("use_sliding_window");
  const bool windowed = use != config.end() && use->is_boolean() ? use->get<bool>()
                                                                  : sum.arch == HfArch::mistral || sum.arch == HfArch::mixtral;
  if (w != config.end() && w->is_number_integer() && windowed)
    sum.notes.push_back(fmt::format("config.json attends through a sliding window of {} tokens; the Megatron-LM "
                                    "arguments above leave attention windows to the run", w->dump()));

  StagedOutput staged(out, OutputKind::directory, o.force, {in, cpath});
  ckpt::MegatronModelWriteOptions wo;
  wo.checkpoint_id = staged.dir();
  wo.progress = o.progress;
  sum.written = ckpt::megatron_model_writer().write(section, staged.staged_dir(), wo);
  staged.commit();
  return sum;
}

}  // namespace fpg::app::convert
