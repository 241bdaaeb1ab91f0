// `fpgather convert CKPT OUT` over any checkpoint fpgather reads, the export chosen by source and
// output format: an fpgather checkpoint to safetensors through checkpoint_export.h (its FP8 bytes
// and recipe available), a DCP / Megatron torch_dist source or any DCP output through
// param_export.h's per-parameter view.
#pragma once

#include <optional>
#include <string>

#include "app/convert/checkpoint_export.h"

namespace fpg::app::convert {

enum class ExportFormat { safetensors, dcp };

// "safetensors" or "dcp"; nullopt otherwise.
std::optional<ExportFormat> parse_export_format(const std::string& name);

// "bf16", "fp32" or "fp8"; nullopt otherwise.
std::optional<ExportWeights> parse_export_weights(const std::string& name);

// `in` is added to opt.inputs. With opt.validate, a source failing the checks that need no data is
// refused with its problems (exit 1); otherwise the errors of the export chosen.
ExportSummary export_any(const std::string& in, const std::string& out, ExportFormat to, const ExportOptions& opt);

}  // namespace fpg::app::convert
