// `fpgather convert IN OUT --dequantize`: every FP8 tensor NAME with a scale (NAME_scale_inv, or
// compressed-tensors' NAME_scale) becomes BF16 or F32 again (per-expert scales included,
// fp8_pair.h); the scale tensors are dropped, the other tensors copied, and a carried config.json
// loses its quantization_config.
#include <algorithm>
#include <cstring>

#include "app/convert/fp8_pair.h"
#include "app/convert/model_output.h"
#include "app/convert/quantize_model.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "core/progress.h"
#include "core/tensor_file.h"
#include "fp8/quantize.h"
#include "fp8/shard.h"

namespace fpg::app::convert {
namespace {

bool is_fp8(DType t) { return t == DType::F8_E4M3 || t == DType::F8_E5M2; }

struct Pair {
  size_t data;   // entry of NAME
  size_t scale;  // entry of NAME's scale
  fp8::StackedPlan plan;
};

void dequantize_one(const TensorFiles& model, const Pair& pair, DType dtype, TensorFileWriter& w,
                    ThreadPool& pool, Progress& progress) {
  const auto& data = model.tensors()[pair.data];
  const auto& scale = model.tensors()[pair.scale];
  const fp8::StackedPlan& p = pair.plan;
  const Fp8PairScales scales(p, model.data(scale));
  const size_t idx = w.index(data.info->name);
  const size_t out_bytes = dtype == DType::F32 ? 4 : 2;
  const uint64_t n = p.numel();
  const uint64_t slab = std::max<uint64_t>(1, kSlabBytes / 4);
  const uint64_t slabs = (n + slab - 1) / slab;
  const uint8_t* q = model.data(data);
  pool.parallel_for(slabs, [&](size_t s) {
    const uint64_t start = s * slab, count = std::min(slab, n - start);
    std::vector<float> values(count);
    fp8::dequantize_stacked(p, scales.view, start, count, q + start, values.data());
    if (dtype == DType::F32) {
      w.write(idx, start * 4, values.data(), count * 4);
    } else {
      std::vector<uint16_t> bf(count);
      for (uint64_t i = 0; i < count; ++i) bf[i] = bf16_from_float(values[i]);
      w.write(idx, start * out_bytes, bf.data(), count * out_bytes);
    }
    progress.advance(count);
  });
}

}  // namespace

ConvertSummary dequantize_model(const std::string& in_path, const std::string& out, const DequantizeModelOptions& opt) {
  if (opt.dtype != DType::BF16 && opt.dtype != DType::F32)
    throw UsageError(Message(Field{"dequantize"}, " writes bf16 or fp32, not ", dtype_name(opt.dtype)));
  ThreadPool& pool = opt.pool ? *opt.pool : ThreadPool::global();
  const std::unique_ptr<TensorFiles> opened = tensor_file_format().open(in_path);
  const TensorFiles& model = *opened;

  // Pair every FP8 tensor with its scale; an FP8 tensor without one cannot be dequantized faithfully.
  std::vector<int> pair_of(model.size(), -1);
  std::vector<bool> is_scale(model.size(), false);
  std::vector<Pair> pairs;
  for (size_t i = 0; i < model.size(); ++i) {
    const auto& t = *model.tensors()[i].info;
    if (!is_fp8(t.dtype)) continue;
    const auto* scale = find_scale(model, t.name);
    if (scale == nullptr)
      throw UsageError("tensor " + quoted_name(t.name) + " in " + model.path() + " is " + std::string(dtype_name(t.dtype)) +
                       " without a " + quoted_name(scale_name(t.name, ScaleNaming::scale_inv)) + " or '" +
                       scale_name(t.name, ScaleNaming::compressed_tensors) + "' tensor: its scale is unknown");
    const size_t s = static_cast<size_t>(scale - model.tensors().data());
    pairs.push_back({i, s, fp8_pair_plan(model, t, *scale->info)});
    pair_of[i] = static_cast<int>(pairs.size() - 1);
    is_scale[s] = true;
  }

  auto meta = model.metadata();
  for (auto it = meta.begin(); it != meta.end();)
    it = it->first.rfind("fpgather.fp8.", 0) == 0 ? meta.erase(it) : std::next(it);
  meta[kMetadataProducer] = std::string("fpgather ") + FPGATHER_VERSION;

  ModelOutput output(model, out, opt.force, meta, "");
  const auto& files = output.layout().files;
  for (size_t f = 0; f < files.size(); ++f)
    for (size_t i : files[f].tensors) {
      const auto& t = *model.tensors()[i].info;
      if (is_scale[i]) continue;
      output.declare(f, {t.name, pair_of[i] >= 0 ? opt.dtype : t.dtype, t.shape});
    }
  output.open();

  ConvertSummary summary;
  Progress progress("dequantize", model.total_bytes(), opt.progress);
  for (size_t f = 0; f < files.size(); ++f) {
    for (size_t i : files[f].tensors) {
      const auto& entry = model.tensors()[i];
      summary.bytes_in += entry.info->nbytes();
      if (is_scale[i]) {
        progress.advance(entry.info->nbytes());
        continue;
      }
      if (pair_of[i] >= 0) {
        dequantize_one(model, pairs[pair_of[i]], opt.dtype, output.writer(f), pool, progress);
        ++summary.quantized;
      } else {
        output.copy_tensor(f, entry, pool, progress);
        ++summary.copied;
      }
    }
    for (const auto& t : output.writer(f).tensors()) summary.bytes_out += t.nbytes();
  }
  summary.files = output.commit();
  return summary;
}

}  // namespace fpg::app::convert
