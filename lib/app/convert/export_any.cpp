#include "app/convert/export_any.h"

#include "app/convert/checkpoint_params.h"
#include "app/convert/param_export.h"

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

ExportSummary export_any(const std::string& in, const std::string& out, ExportFormat to, const ExportOptions& opt) {
  ExportOptions o = opt;
  o.inputs.push_back(in);
  if (to == ExportFormat::dcp) return export_params_dcp(open_params(in, "export it", o.validate)->params(), out, o);
  if (source_contents(in) != ckpt::Contents::training_state) return export_params(open_params(in, "export it", o.validate)->params(), out, o);
  return export_checkpoint(in, out, o);
}

}  // namespace fpg::app::convert
