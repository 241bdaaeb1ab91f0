// fpgather/convert.h over the exports `fpgather convert CKPT OUT` runs: app/convert/checkpoint_export.h
// for an fpgather checkpoint to safetensors, app/convert/param_export.h for DCP sources and DCP output.
#include <fpgather/convert.h>

#include "api/boundary.h"
#include "app/convert/checkpoint_export.h"
#include "app/convert/checkpoint_params.h"
#include "app/convert/param_export.h"

namespace fpgather {

ConvertReport convert(const Checkpoint& source, const std::string& out, const ConvertOptions& options) {
  return api::at_boundary([&] {
    if (options.to != "safetensors" && options.to != "dcp")
      throw fpg::UsageError("convert: to must be safetensors or dcp, not '" + options.to + "'");
    fpg::convert::ExportOptions o;
    if (options.weights == "bf16") o.weights = fpg::convert::ExportWeights::bf16;
    else if (options.weights == "fp32") o.weights = fpg::convert::ExportWeights::fp32;
    else if (options.weights == "fp8") o.weights = fpg::convert::ExportWeights::fp8;
    else throw fpg::UsageError("convert: weights must be bf16, fp32 or fp8, not '" + options.weights + "'");
    o.states = options.states;
    o.max_shard_bytes = options.max_shard_bytes;
    o.validate = options.validate;
    o.force = options.force;
    o.inputs = {source.path()};
    fpg::convert::ExportSummary s;
    if (options.to == "dcp")
      s = fpg::convert::export_params_dcp(fpg::convert::open_params(source.path(), "export it", o.validate)->params(),
                                          out, o);
    else if (source.format() != CheckpointFormat::fpgather)
      s = fpg::convert::export_params(fpg::convert::open_params(source.path(), "export it", o.validate)->params(), out, o);
    else
      s = fpg::convert::export_checkpoint(source.path(), out, o);
    ConvertReport r;
    r.source = s.checkpoint;
    r.tensors = s.tensors;
    r.bytes_read = s.bytes_read;
    r.bytes_written = s.bytes_written;
    r.files = s.files;
    return r;
  });
}

}  // namespace fpgather
