// fpgather/convert.h over the conversion `fpgather convert IN OUT` runs (app/convert/conversion.h),
// its options named by their fields.
#include <fpgather/convert.h>

#include "api/boundary.h"
#include "app/convert/conversion.h"

namespace fpgather {

ConvertReport convert(const std::string& source, const std::string& out, const ConvertOptions& options) {
  return api::with_progress(options.progress, [&] {
    return api::at_boundary([&] {
      fpg::app::convert::ConversionOptions o;
      o.to = options.to;
      o.dtype = options.dtype;
      o.states = options.states;
      o.max_shard_size = options.max_shard_size;
      o.no_validate = !options.validate;
      o.force = options.force;
      o.fp8 = options.fp8;
      o.fp8_format = options.fp8_format;
      o.include = options.include;
      o.exclude = options.exclude;
      o.expert_dims = options.expert_dims;
      if (options.pow2_scales) (*options.pow2_scales ? o.pow2_scales : o.no_pow2_scales) = true;
      o.mx_scale = options.mx_scale;
      o.strict = options.strict;
      o.amax_history = options.amax_history;
      o.amax_algo = options.amax_algo;
      o.dequantize = options.dequantize;
      o.compress = options.compress;
      o.arch = options.arch;
      o.hf_config = options.hf_config;
      o.tokenizer = options.tokenizer;
      o.from_masters = options.from_masters;
      o.tp = options.tp;
      o.pp = options.pp;
      o.ep = options.ep;
      o.make_vocab_size_divisible_by = options.make_vocab_size_divisible_by;
      o.layer_spec = options.layer_spec;
      const fpg::app::convert::ConversionResult s = fpg::app::convert::convert_any(source, out, o);
      ConvertReport r;
      r.operation = s.operation;
      r.source = s.source;
      r.tensors = s.tensors;
      r.copied = s.copied;
      r.bytes_read = s.bytes_read;
      r.bytes_written = s.bytes_written;
      r.files = s.files;
      for (const auto& n : s.nonfinite) r.nonfinite.push_back({n.tensor, n.nan, n.pos_inf, n.neg_inf});
      r.json = s.document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
      r.text = s.text;
      r.warnings = s.warnings;
      return r;
    });
  });
}

ConvertReport convert(const Checkpoint& source, const std::string& out, const ConvertOptions& options) {
  return convert(source.path(), out, options);
}

}  // namespace fpgather
