#include "app/convert/hf_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app/convert/megatron_hf_view.h"
#include "app/convert/param_export.h"
#include "app/convert/staged_output.h"
#include "ckpt/format_registry.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/progress.h"
#include "core/staging.h"

namespace fpg::app::convert {
namespace {

constexpr uint64_t kConfigLimit = 16ull << 20;      // a config.json template
constexpr uint64_t kTokenizerLimit = 512ull << 20;  // one tokenizer file (tokenizer.json runs to tens of MB)

nlohmann::json read_template(const std::string& path) {
  if (path.empty()) return nullptr;
  const std::string text = fs::read_small_file(path, kConfigLimit);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw UsageError(path + ": not a JSON object (a config.json)");
  return j;
}

// The bf16 export an FP8 export is quantized from: a directory named as OUT's staging (so that the
// next conversion to OUT removes it if a killed run left it), locked while it lives, removed with it.
class Intermediate {
 public:
  explicit Intermediate(const std::string& out) {
    std::filesystem::path p = std::filesystem::absolute(out).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // "OUT/"
    std::string tmpl = p.parent_path().string() + "/." + p.filename().string() + ".fpgather-staging-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw FormatError("cannot create a staging directory beside " + out + ": " + std::strerror(errno));
    path_ = tmpl;
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ >= 0) fs::lock_staging(fd_);
  }
  ~Intermediate() {
    fs::remove_tree(path_);
    if (fd_ >= 0) ::close(fd_);
  }
  Intermediate(const Intermediate&) = delete;
  Intermediate& operator=(const Intermediate&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

const std::vector<std::string>& hf_tokenizer_files() {
  static const std::vector<std::string> names = {
      "tokenizer.json",      "tokenizer_config.json", "tokenizer.model",  "special_tokens_map.json",
      "added_tokens.json",   "vocab.json",            "vocab.txt",        "merges.txt",
      "generation_config.json", "chat_template.jinja", "chat_template.json"};
  return names;
}

HfExportSummary export_hf(const std::string& in, const std::string& out, const HfExportOptions& o) {
  if (output_kind(out) != OutputKind::directory)
    throw UsageError("OUT " + out + ": a Hugging Face model is a directory; give one (not a .safetensors or .json path)");
  const nlohmann::json tmpl = read_template(o.config);
  std::vector<std::pair<std::string, std::string>> tokenizer;
  if (!o.tokenizer.empty()) {
    if (!fs::is_directory(o.tokenizer)) throw UsageError(o.tokenizer + ": not a directory (a tokenizer directory)");
    for (const std::string& name : hf_tokenizer_files()) {
      const std::string path = o.tokenizer + "/" + name;
      if (fs::exists(path, true)) tokenizer.emplace_back(name, fs::read_small_file(path, kTokenizerLimit));
    }
    if (tokenizer.empty()) throw UsageError(o.tokenizer + ": holds no tokenizer file (tokenizer.json, tokenizer.model, vocab.json …)");
  }

  std::unique_ptr<ckpt::Checkpoint> ckpt;
  nlohmann::json args;
  {
    Progress progress("export", 0, o.progress);
    progress.phase((o.validate ? "validating " : "opening ") + in);
    ckpt = ckpt::open_checkpoint(in);
    if (ckpt->format() != "megatron_torch_dist")
      throw UsageError(Message(in, ": ", Field{"to"}, " hf exports a Megatron torch_dist checkpoint; this is ", ckpt->format()));
    const ckpt::CheckpointSummary s = ckpt->summary({});
    if (s.document.contains("training") && s.document["training"].is_object() && s.document["training"].contains("args"))
      args = s.document["training"]["args"];
    if (args.is_object() && args.empty()) args = nullptr;
  }
  ckpt::ParamsOptions po;
  po.refusing = "export it to Hugging Face";
  po.validate = o.validate;
  const std::unique_ptr<ckpt::OpenedParams> opened = ckpt->params(po);
  const MegatronGptTensors tensors = megatron_gpt_tensors(opened->params(), o.from_masters ? "master" : "weight");

  HfExportSummary sum;
  sum.arch_from = "--arch";
  sum.arch = o.arch ? *o.arch : choose_hf_arch(tensors, tmpl, sum.arch_from);
  const HfModel model =
      resolve_hf_model(sum.arch, tensors, args, tmpl, o.config, o.fp32 ? "float32" : "bfloat16");
  sum.shape = model.shape;
  const MegatronHfView view(tensors, model.shape);

  ExportOptions eo;
  eo.weights = o.fp32 ? ExportWeights::fp32 : ExportWeights::bf16;
  eo.max_shard_bytes = o.max_shard_bytes;
  eo.force = o.force;
  eo.progress = o.progress;
  eo.validate = o.validate;
  eo.inputs = {in};
  if (!o.config.empty()) eo.inputs.push_back(o.config);
  if (!o.tokenizer.empty()) eo.inputs.push_back(o.tokenizer);
  eo.side_files.emplace_back("config.json", model.config.dump(2) + "\n");
  for (auto& [name, text] : tokenizer) {
    sum.copied.push_back(name);
    eo.side_files.emplace_back(name, std::move(text));
  }
  if (!o.fp8) {
    sum.exported = export_params(view, out, eo);
    return sum;
  }
  // OUT is checked before anything is exported: quantize_model would refuse it only afterwards.
  if (fs::exists(out) && !o.force && !(fs::is_directory(out) && std::filesystem::is_empty(out)))
    throw UsageError(Message(out, " exists: give ", Field{"force"}, " to replace it"));
  const Intermediate staged(out);
  eo.force = false;
  sum.exported = export_params(view, staged.path(), eo);
  QuantizeModelOptions qo;
  qo.recipe = *o.fp8;
  if (!o.fp8_exclude.empty()) qo.exclude = o.fp8_exclude;
  qo.include = o.fp8_include;
  qo.force = o.force;
  qo.progress = o.progress;
  sum.quantized = quantize_model(staged.path(), out, qo);
  sum.exported.files = sum.quantized->files;
  return sum;
}

}  // namespace fpg::app::convert
