// fpgather/convert.h over the exports `fpgather convert CKPT OUT` runs (app/convert/export_any.h).
#include <fpgather/convert.h>

#include "api/boundary.h"
#include "app/convert/export_any.h"

namespace fpgather {

ConvertReport convert(const Checkpoint& source, const std::string& out, const ConvertOptions& options) {
  return api::at_boundary([&] {
    const auto to = fpg::app::convert::parse_export_format(options.to);
    if (!to) throw fpg::UsageError("convert: to must be safetensors or dcp, not '" + options.to + "'");
    fpg::app::convert::ExportOptions o;
    const auto weights = fpg::app::convert::parse_export_weights(options.weights);
    if (!weights) throw fpg::UsageError("convert: weights must be bf16, fp32 or fp8, not '" + options.weights + "'");
    o.weights = *weights;
    o.states = options.states;
    o.max_shard_bytes = options.max_shard_bytes;
    o.validate = options.validate;
    o.force = options.force;
    const fpg::app::convert::ExportSummary s = fpg::app::convert::export_any(source.path(), out, *to, o);
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
