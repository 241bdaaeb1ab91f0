#include "app/train/safetensors_init.h"

#include <cstring>
#include <set>

#include "app/convert/fp8_pair.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "core/shape.h"
#include "fp8/stacked.h"

namespace fpg::app::train {
namespace {

bool is_fp8(DType t) { return t == DType::F8_E4M3 || t == DType::F8_E5M2; }

// Suffixes of what `fpgather convert CKPT --states` writes next to each param (ignored here).
const char* const kStateSuffixes[] = {".master", ".exp_avg", ".exp_avg_sq", ".momentum_buffer"};

}  // namespace

SafetensorsInit::SafetensorsInit(const std::string& path, const model::ModelSpec& spec)
    : model_(tensor_file_format().open(path)), spec_(spec) {
  const TensorFiles& model = *model_;
  const std::string where = " in " + model.path();
  std::set<std::string> expected;
  for (const model::Param& p : spec_.params) {
    const auto* e = model.find(p.name);
    if (!e)
      throw UsageError(Message(Field{"init"}, ": model ", quoted_name(spec_.name), " has a param ", quoted_name(p.name), " ",
                               shape_string(p.shape), " that is not", where));
    const auto& t = *e->info;
    if (t.shape != p.shape)
      throw UsageError(Message(Field{"init"}, ": tensor ", quoted_name(p.name), where, " has shape ", shape_string(t.shape),
                               "; the param's is ", shape_string(p.shape)));
    const TensorFiles::Entry* scale = nullptr;
    if (is_fp8(t.dtype)) {
      scale = convert::find_scale(model, p.name);
      if (!scale)
        throw UsageError(Message(Field{"init"}, ": tensor ", quoted_name(p.name), where, " is ", dtype_name(t.dtype),
                                 " without a ", quoted_name(convert::scale_name(p.name, convert::ScaleNaming::scale_inv)),
                                 " or '", convert::scale_name(p.name, convert::ScaleNaming::compressed_tensors),
                                 "' tensor: its scale is unknown"));
      convert::fp8_pair_plan(model, t, *scale->info);  // checks the scale's shape and dtype
      expected.insert(scale->info->name);
    } else if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16) {
      throw UsageError(Message(Field{"init"}, ": tensor ", quoted_name(p.name), where, " is ", dtype_name(t.dtype),
                               "; a param initializes from F32, BF16, F16 or FP8 with scales"));
    }
    expected.insert(p.name);
    data_.push_back(e);
    scale_.push_back(scale);
  }
  for (const auto& e : model.tensors()) {
    const std::string& n = e.info->name;
    if (expected.count(n)) continue;
    bool state = false;
    for (const char* s : kStateSuffixes) {
      const size_t len = std::strlen(s);
      if (n.size() > len && n.compare(n.size() - len, len, s) == 0 && spec_.find(n.substr(0, n.size() - len)) >= 0)
        state = true;
    }
    if (!state)
      throw UsageError(Message(Field{"init"}, ": tensor ", quoted_name(n), where, " is not a param of model '", spec_.name,
                               "' (is it another model?)"));
  }
}

void SafetensorsInit::fill(uint32_t param, float* out) const {
  const auto& e = *data_.at(param);
  const auto& t = *e.info;
  const uint64_t n = spec_.params[param].numel();
  const uint8_t* src = model_->data(e);
  if (scale_[param]) {
    const auto& s = *scale_[param];
    const fp8::StackedPlan p = convert::fp8_pair_plan(*model_, t, *s.info);
    const convert::Fp8PairScales scales(p, model_->data(s));
    fp8::dequantize_stacked(p, scales.view, 0, n, src, out);
    return;
  }
  if (t.dtype == DType::F32) {
    std::memcpy(out, src, n * 4);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = t.dtype == DType::BF16 ? float_from_bf16(h) : float_from_fp16(h);
  }
}

}  // namespace fpg::app::train
