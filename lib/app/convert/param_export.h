// `fpgather convert CKPT OUT` for any checkpoint seen per parameter (ckpt::ParamSource: a PyTorch DCP
// or Megatron torch_dist checkpoint, or fpgather's own): a safetensors export, streaming slab by slab
// in bounded memory (lanes that each read, convert and write one slab: four slabs in flight from
// sources that serve concurrent reads, two otherwise, their reads in order), files placed
// as app/convert/export_files.h says and the whole output put in place at the end
// (app/convert/staged_output.h; an existing OUT only with opt.force).
//
// Tensors, per parameter NAME in registration order:
//   weights bf16 (default)  NAME: BF16; an F32 weight is rounded (RNE), a BF16 one copied.
//   weights fp32            NAME: F32, the fp32 master where the checkpoint has one, else the weight.
//   states                  NAME.master and NAME.<state> as stored (F32 in Megatron and DCP).
// __metadata__: "format": "pt", "fpgather.source" (what was read), "fpgather.weights",
// "fpgather.producer", and "fpgather.states" (comma-separated) with states.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/param_source.h"
#include "app/convert/checkpoint_export.h"

namespace fpg::app::convert {

// UsageError for fp8 weights: this export writes no FP8 recipe (quantize its output with
// `convert --fp8`, or export an fpgather checkpoint with app/convert/checkpoint_export.h).
ExportSummary export_params(const ckpt::ParamSource& src, const std::string& out, const ExportOptions& opt);

// The same tensors as a PyTorch DCP directory OUT, written by the DCP format (ckpt::Format::write_params:
// formats/dcp/param_writer.h says what it holds), committed atomically (an existing OUT is refused, or
// with opt.force replaced whole). With opt.states the source's non-tensor objects too.
ExportSummary export_params_dcp(const ckpt::ParamSource& src, const std::string& out, const ExportOptions& opt);

}  // namespace fpg::app::convert
