// The DCP format's writer of exported tensors (ckpt::Format::write_params, `convert --to dcp`): a plain
// PyTorch DCP directory of one rank, one chunk per tensor, "model.NAME" for each weight and, with
// states, "optimizer.state.NAME.master" and "optimizer.state.NAME.<state>" — what
// torch.distributed.checkpoint.load fills into {"model": {NAME: …}, "optimizer": {"state": {NAME: {…}}}} —
// and the source's non-tensor objects under their own keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/param_export.h"
#include "ckpt/param_source.h"

namespace fpg::dcp {

// Writes into `dir` (created, committed atomically; DcpWriter) and returns the source bytes read; the
// source's finish_reads() runs before the commit. UsageError for a dtype torch has no name for.
uint64_t write_params(const ckpt::ParamSource& source, const std::vector<ckpt::ExportTensor>& tensors,
                      const std::string& dir, const ckpt::ParamWriteOptions& options);

}  // namespace fpg::dcp
