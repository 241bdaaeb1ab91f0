#include "convert/quantize_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <regex>

#include "convert/model_files.h"
#include "convert/model_output.h"
#include "convert/slab_input.h"
#include "core/error.h"
#include "core/progress.h"
#include "fp8/quantize.h"
#include "fp8/shard.h"
#include "formats/safetensors/model.h"

namespace fpg::convert {
namespace {

bool quantizable_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

std::regex compile_regex(const std::string& pattern, const char* option) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw UsageError(std::string(option) + " '" + pattern + "' is not a valid regular expression: " + e.what());
  }
}

// A tensor chosen for quantization, with the plan that checked the recipe can take it.
struct Chosen {
  size_t entry;
  fp8::Plan plan;
};

std::vector<Chosen> choose_tensors(const safetensors::Model& model, const QuantizeModelOptions& opt) {
  std::optional<std::regex> include, exclude;
  if (opt.include) include = compile_regex(*opt.include, "--include");
  if (opt.exclude) exclude = compile_regex(*opt.exclude, "--exclude");
  for (const auto& e : model.tensors()) {
    const auto& t = *e.info;
    if ((t.dtype == DType::F8_E4M3 || t.dtype == DType::F8_E5M2) && model.find(t.name + kScaleSuffix))
      throw UsageError(model.path() + " is quantized already: tensor '" + t.name + "' is " +
                       std::string(dtype_name(t.dtype)) + " with a '" + t.name + kScaleSuffix +
                       "' (convert --dequantize first)");
  }
  std::vector<Chosen> chosen;
  for (size_t i = 0; i < model.size(); ++i) {
    const auto& t = *model.tensors()[i].info;
    if (!quantizable_dtype(t.dtype)) continue;
    const bool wanted = include ? std::regex_search(t.name, *include) : t.shape.size() >= 2;
    if (!wanted || (exclude && std::regex_search(t.name, *exclude))) continue;
    if (model.find(t.name + kScaleSuffix))
      throw UsageError("tensor '" + t.name + "' already has a tensor '" + t.name + kScaleSuffix +
                       "' in " + model.path() + ": is the model quantized already?");
    // make_plan names the tensor and the reason when the recipe cannot take it (exit 2).
    const fp8::Input input = t.dtype == DType::BF16 ? fp8::Input::bf16 : fp8::Input::f32;
    chosen.push_back({i, fp8::make_plan(opt.recipe, input, t.shape, t.name)});
  }
  return chosen;
}

std::map<std::string, std::string> output_metadata(const safetensors::Model& model, const fp8::Recipe& r) {
  auto meta = model.metadata();
  meta[kMetadataRecipe] = std::string(fp8::scaling_name(r.scaling));
  meta[kMetadataFormat] = std::string(fp8::format_name(r.format));
  if (r.scaling == fp8::Scaling::mxfp8)
    meta[kMetadataMxRule] = std::string(fp8::mx_rule_name(r.mx_rule));
  else
    meta[kMetadataPow2] = r.pow2 ? "true" : "false";
  meta[kMetadataProducer] = std::string("fpgather ") + FPGATHER_VERSION;
  return meta;
}

// Rows per slab: about kSlabBytes of input, a multiple of the recipe's block height so no block
// straddles two slabs (each slab then quantizes as a tensor of its own, bit-identical to the whole).
uint64_t rows_per_slab(const fp8::Plan& p, size_t elem_bytes) {
  const uint64_t block_rows = p.recipe.scaling == fp8::Scaling::blockwise_128x128 ? 128 : 1;
  uint64_t rows = std::max<uint64_t>(1, kSlabBytes / std::max<uint64_t>(1, p.K * elem_bytes));
  return std::max(block_rows, rows / block_rows * block_rows);
}

// NaN, +Inf and -Inf among the values of a tensor, counted slab by slab from the pool's threads.
struct NonFiniteCount {
  std::atomic<uint64_t> nan{0}, pos_inf{0}, neg_inf{0};
  // `values` as SlabInput gives them: fp32, or raw bf16 bits where the recipe takes bf16.
  void add(const void* values, uint64_t n, fp8::Input input) {
    uint64_t a = 0, p = 0, m = 0;
    auto count = [&](bool is_nan, bool negative) { is_nan ? ++a : negative ? ++m : ++p; };
    if (input == fp8::Input::bf16) {
      const auto* v = static_cast<const uint16_t*>(values);
      for (uint64_t i = 0; i < n; ++i)
        if ((v[i] & 0x7F80u) == 0x7F80u) count((v[i] & 0x7Fu) != 0, (v[i] & 0x8000u) != 0);
    } else {
      const auto* v = static_cast<const float*>(values);
      for (uint64_t i = 0; i < n; ++i)
        if (!std::isfinite(v[i])) count(std::isnan(v[i]), std::signbit(v[i]));
    }
    if (a) nan += a;
    if (p) pos_inf += p;
    if (m) neg_inf += m;
  }
};

std::string nonfinite_text(const NonFinite& f) {
  std::string s = std::to_string(f.total()) + " non-finite values (";
  s += std::to_string(f.nan) + " NaN, " + std::to_string(f.pos_inf) + " +Inf, " + std::to_string(f.neg_inf) + " -Inf)";
  return s;
}

void quantize_one(const safetensors::Model& model, const Chosen& c, safetensors::Writer& w, ThreadPool& pool,
                  Progress& progress, NonFiniteCount& found) {
  const auto& entry = model.tensors()[c.entry];
  const auto& t = *entry.info;
  const fp8::Plan& plan = c.plan;
  const size_t data_idx = w.index(t.name);
  const size_t scale_idx = w.index(t.name + kScaleSuffix);
  const SlabInput src(model.data(entry), t.dtype);
  const uint64_t rows = rows_per_slab(plan, src.stored_bytes());
  const uint64_t slabs = plan.K == 0 ? 0 : (plan.M + rows - 1) / rows;
  auto slab_range = [&](size_t s, uint64_t& r0, uint64_t& nrows) {
    r0 = s * rows;
    nrows = std::min(rows, plan.M - r0);
  };

  std::vector<uint8_t> scale_bytes;
  if (plan.recipe.scaling == fp8::Scaling::tensorwise) {
    // One scale from the whole tensor's amax: an amax pass, then the cast pass.
    std::vector<fp8::AmaxGrid> partial(slabs, fp8::AmaxGrid(plan));
    pool.parallel_for(slabs, [&](size_t s) {
      uint64_t r0, nrows;
      slab_range(s, r0, nrows);
      std::vector<float> scratch;
      const void* v = src.values(r0 * plan.K, nrows * plan.K, scratch);
      found.add(v, nrows * plan.K, plan.input);
      fp8::partial_amax(plan, r0 * plan.K, nrows * plan.K, v, partial[s]);
    });
    fp8::AmaxGrid amax(plan);
    for (const auto& g : partial) amax.combine(g);
    const fp8::Scales scales = fp8::compute_scales(plan, amax);
    pool.parallel_for(slabs, [&](size_t s) {
      uint64_t r0, nrows;
      slab_range(s, r0, nrows);
      const uint64_t start = r0 * plan.K, count = nrows * plan.K;
      std::vector<float> scratch;
      std::vector<uint8_t> out(count);
      fp8::cast_fragment(plan, scales.view(), start, count, src.values(start, count, scratch), out.data(), nullptr);
      w.write(data_idx, start, out.data(), count);
      progress.advance(count * src.stored_bytes());
    });
    scale_bytes.resize(4);
    std::memcpy(scale_bytes.data(), scales.scale_inv.data(), 4);
  } else {
    // Blocks lie inside a slab: each slab is quantized as a tensor of its own and its scale rows are
    // placed at its first grid row.
    const bool mx = plan.recipe.scaling == fp8::Scaling::mxfp8;
    const uint64_t block_rows = plan.recipe.scaling == fp8::Scaling::blockwise_128x128 ? 128 : 1;
    const size_t scale_size = mx ? 1 : 4;
    scale_bytes.resize(plan.grid.size() * scale_size);
    pool.parallel_for(slabs, [&](size_t s) {
      uint64_t r0, nrows;
      slab_range(s, r0, nrows);
      const uint64_t start = r0 * plan.K, count = nrows * plan.K;
      const fp8::Plan sub = fp8::make_plan(plan.recipe, plan.input, nrows, plan.K, t.name);
      std::vector<float> scratch;
      std::vector<uint8_t> out(count);
      fp8::AmaxGrid amax;
      fp8::Scales scales;
      const void* v = src.values(start, count, scratch);
      found.add(v, count, plan.input);
      fp8::quantize_into(sub, v, out.data(), nullptr, amax, scales);
      w.write(data_idx, start, out.data(), count);
      const uint64_t cell0 = r0 / block_rows * plan.grid.cols;
      if (mx)
        std::memcpy(scale_bytes.data() + cell0, scales.e8m0.data(), scales.e8m0.size());
      else
        std::memcpy(scale_bytes.data() + cell0 * 4, scales.scale_inv.data(), scales.scale_inv.size() * 4);
      progress.advance(count * src.stored_bytes());
    });
  }
  w.write(scale_idx, 0, scale_bytes.data(), scale_bytes.size());
}

}  // namespace

ConvertSummary quantize_model(const std::string& in_path, const std::string& out, const QuantizeModelOptions& opt) {
  const auto& s = opt.recipe.scaling;
  if (s == fp8::Scaling::delayed)
    throw UsageError("convert: delayed scaling needs an amax history; use tensorwise for a model file");
  if (s == fp8::Scaling::mxfp8 && (!opt.recipe.mx_rowwise || opt.recipe.mx_columnwise))
    throw UsageError("convert: mxfp8 writes rowwise scales only");
  ThreadPool& pool = opt.pool ? *opt.pool : ThreadPool::global();
  const auto model = safetensors::Model::open(in_path);
  const std::vector<Chosen> chosen = choose_tensors(model, opt);  // every refusal before any write
  std::vector<int> chosen_of(model.size(), -1);
  for (size_t c = 0; c < chosen.size(); ++c) chosen_of[chosen[c].entry] = static_cast<int>(c);

  ModelOutput output(model, plan_output_files(model, out), output_metadata(model, opt.recipe));
  ConvertSummary summary;
  const auto& files = output.layout().files;
  for (size_t f = 0; f < files.size(); ++f) {
    for (size_t i : files[f].tensors) {
      const auto& t = *model.tensors()[i].info;
      if (chosen_of[i] < 0) {
        output.declare(f, {t.name, t.dtype, t.shape});
        continue;
      }
      const fp8::Plan& p = chosen[chosen_of[i]].plan;
      output.declare(f, {t.name, fp8::data_dtype(opt.recipe.format), t.shape});
      output.declare(f, {t.name + kScaleSuffix, fp8::scale_inv_dtype(p), fp8::scale_inv_shape(p)});
    }
  }
  output.open();
  Progress progress("convert", model.total_bytes(), opt.progress);
  for (size_t f = 0; f < files.size(); ++f) {
    for (size_t i : files[f].tensors) {
      const auto& entry = model.tensors()[i];
      summary.bytes_in += entry.info->nbytes();
      if (chosen_of[i] < 0) {
        output.copy_tensor(f, entry, pool, progress);
        ++summary.copied;
      } else {
        NonFiniteCount found;
        quantize_one(model, chosen[chosen_of[i]], output.writer(f), pool, progress, found);
        ++summary.quantized;
        const NonFinite nf{entry.info->name, found.nan, found.pos_inf, found.neg_inf};
        if (nf.total() == 0) continue;
        // Refused before the output is committed: the files under their temporary names go.
        if (opt.strict)
          throw FormatError(model.path() + ": tensor '" + nf.tensor + "' holds " + nonfinite_text(nf) +
                            ", which FP8 cannot hold; --strict refuses to quantize it");
        summary.nonfinite.push_back(nf);
      }
    }
    for (const auto& t : output.writer(f).tensors()) summary.bytes_out += t.nbytes();
  }
  summary.files = output.commit();
  return summary;
}

}  // namespace fpg::convert
