#include "app/convert/export_any.h"

#include "app/convert/checkpoint_params.h"
#include "app/convert/param_export.h"
#include "core/progress.h"

namespace fpg::app::convert {

std::optional<ExportFormat> parse_export_format(const std::string& name) {
  if (name == "safetensors") return ExportFormat::safetensors;
  if (name == "dcp") return ExportFormat::dcp;
  return std::nullopt;
}

std::optional<ExportWeights> parse_export_weights(const std::string& name) {
  if (name == "bf16") return ExportWeights::bf16;
  if (name == "fp32") return ExportWeights::fp32;
  if (name == "fp8") return ExportWeights::fp8;
  return std::nullopt;
}

namespace {

// A source opened for its params, its metadata decoded and (with o.validate) checked: named as a
// phase while that lasts (a large DCP .metadata takes seconds), before the export's own bar.
std::unique_ptr<ckpt::OpenedParams> open_named(const std::string& in, const ExportOptions& o) {
  Progress progress("export", 0, o.progress);
  progress.phase((o.validate ? "validating " : "opening ") + in);
  return open_params(in, "export it", o.validate);
}

}  // namespace

ExportSummary export_any(const std::string& in, const std::string& out, ExportFormat to, const ExportOptions& opt) {
  ExportOptions o = opt;
  o.inputs.push_back(in);
  if (to == ExportFormat::dcp) return export_params_dcp(open_named(in, o)->params(), out, o);
  if (source_contents(in) != ckpt::Contents::training_state) return export_params(open_named(in, o)->params(), out, o);
  return export_checkpoint(in, out, o);
}

}  // namespace fpg::app::convert
