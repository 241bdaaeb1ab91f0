// `fpgather validate` over any checkpoint fpgather reads: each format's checks (fpgather's coverage,
// layout and checksums; DCP's rules with the mapping to parameters; safetensors' headers), one report.
#pragma once

#include <string>

#include "ckpt/checkpoint_format.h"

namespace fpg::app::inspect {

// An invalid checkpoint is a report with problems; FormatError when `path` is no checkpoint or its
// index (metadata, header) cannot be read.
ckpt::ValidationReport validate(const std::string& path, const ckpt::ValidateOptions& options);

}  // namespace fpg::app::inspect
