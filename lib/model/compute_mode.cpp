#include "model/compute_mode.h"

#include "core/error.h"
#include "core/float_codec.h"

namespace fpg::model {

const char* compute_name(Compute c) { return c == Compute::bf16 ? "bf16" : "fp32"; }

Compute parse_compute(const std::string& name) {
  if (name == "fp32") return Compute::fp32;
  if (name == "bf16") return Compute::bf16;
  throw UsageError(Message(Field{"compute"}, " must be fp32 or bf16, not '", name, "'"));
}

float round_to_bf16(float x) { return float_from_bf16(bf16_from_float(x)); }

}  // namespace fpg::model
