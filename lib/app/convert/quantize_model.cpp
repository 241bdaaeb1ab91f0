#include "app/convert/quantize_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <regex>

#include "app/convert/fp8_pair.h"
#include "app/convert/model_dir_files.h"
#include "app/convert/model_output.h"
#include "app/convert/slab_input.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/tensor_file.h"
#include "fp8/quantize.h"
#include "fp8/shard.h"
#include "fp8/stacked.h"

namespace fpg::app::convert {
namespace {

bool quantizable_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

std::regex compile_regex(const std::string& pattern, const char* field) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw UsageError(Message(Field{field}, " ", quoted_name(pattern), " is not a valid regular expression: ", e.what()));
  }
}

// A tensor chosen for quantization, with the plan that checked the recipe can take it.
struct Chosen {
  size_t entry;
  fp8::StackedPlan plan;
};

// Leading dimensions of `t` that stack matrices: all but the last two of a tensor of rank >= 3, when
// the regex (or, without one, the rank) says it is stacked.
size_t expert_dims_of(const TensorInfo& t, const std::optional<std::regex>& stacked) {
  if (t.shape.size() < 3) return 0;
  return !stacked || std::regex_search(t.name, *stacked) ? t.shape.size() - 2 : 0;
}

std::vector<Chosen> choose_tensors(const TensorFiles& model, const QuantizeModelOptions& opt) {
  std::optional<std::regex> include, exclude, stacked;
  if (opt.include) include = compile_regex(*opt.include, "include");
  if (opt.exclude) exclude = compile_regex(*opt.exclude, "exclude");
  if (opt.expert_dims) stacked = compile_regex(*opt.expert_dims, "expert_dims");
  for (const auto& e : model.tensors()) {
    const auto& t = *e.info;
    if (t.dtype != DType::F8_E4M3 && t.dtype != DType::F8_E5M2) continue;
    if (const auto* scale = find_scale(model, t.name))
      throw UsageError(Message(model.path(), " is quantized already: tensor ", quoted_name(t.name), " is ",
                               dtype_name(t.dtype), " with a '", scale->info->name, "' (convert ", Field{"dequantize"},
                               " first)"));
  }
  std::vector<Chosen> chosen;
  for (size_t i = 0; i < model.size(); ++i) {
    const auto& t = *model.tensors()[i].info;
    if (!quantizable_dtype(t.dtype)) continue;
    const bool wanted = include ? std::regex_search(t.name, *include) : t.shape.size() >= 2;
    if (!wanted || (exclude && std::regex_search(t.name, *exclude))) continue;
    // make_plan names the tensor and the reason when the recipe cannot take it (exit 2).
    const fp8::Input input = t.dtype == DType::BF16 ? fp8::Input::bf16 : fp8::Input::f32;
    chosen.push_back({i, fp8::make_stacked_plan(opt.recipe, input, t.shape, expert_dims_of(t, stacked), t.name)});
  }
  return chosen;
}

// A chosen tensor's scale would take the name of a tensor the input has already.
void refuse_scale_collisions(const TensorFiles& model, const std::vector<Chosen>& chosen, ScaleNaming naming) {
  for (const Chosen& c : chosen) {
    const std::string& name = model.tensors()[c.entry].info->name;
    if (model.find(scale_name(name, naming)))
      throw UsageError("tensor " + quoted_name(name) + " already has a tensor " + quoted_name(scale_name(name, naming)) + " in " +
                       model.path() + ": is the model quantized already?");
  }
}

// The modules whose 2-D (or larger) floating ".weight" stays in high precision: what the
// quantization_config tells loaders not to convert.
std::vector<std::string> unquantized_modules(const TensorFiles& model, const std::vector<int>& chosen_of) {
  static const std::string kWeight = ".weight";
  std::vector<std::string> names;
  for (size_t i = 0; i < model.size(); ++i) {
    const auto& t = *model.tensors()[i].info;
    if (chosen_of[i] >= 0 || !quantizable_dtype(t.dtype) || t.shape.size() < 2 || t.name.size() <= kWeight.size() ||
        t.name.compare(t.name.size() - kWeight.size(), kWeight.size(), kWeight) != 0)
      continue;
    names.push_back(t.name.substr(0, t.name.size() - kWeight.size()));
  }
  return names;
}

std::map<std::string, std::string> output_metadata(const TensorFiles& model, const fp8::Recipe& r) {
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
// straddles two slabs (each slab then quantizes as a matrix of its own, bit-identical to the whole).
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

// Work is cut into units of (matrix, slab of its rows); unit u is slab u % slabs of matrix u / slabs.
struct Units {
  uint64_t matrices = 0, slabs = 0, rows = 0, M = 0, K = 0;
  uint64_t count() const { return matrices * slabs; }
  uint64_t matrix(uint64_t u) const { return u / slabs; }
  uint64_t row0(uint64_t u) const { return u % slabs * rows; }
  uint64_t nrows(uint64_t u) const { return std::min(rows, M - row0(u)); }
  // Flat element of the tensor where unit u starts.
  uint64_t start(uint64_t u) const { return matrix(u) * M * K + row0(u) * K; }
};

void quantize_one(const TensorFiles& model, const Chosen& c, ScaleNaming naming, TensorFileWriter& w,
                  ThreadPool& pool, Progress& progress, NonFiniteCount& found) {
  const auto& entry = model.tensors()[c.entry];
  const auto& t = *entry.info;
  const fp8::Plan& plan = c.plan.matrix;
  const size_t data_idx = w.index(t.name);
  const size_t scale_idx = w.index(scale_name(t.name, naming));
  const SlabInput src(model.data(entry), t.dtype);
  Units units;
  units.matrices = c.plan.matrices();
  units.M = plan.M;
  units.K = plan.K;
  units.rows = rows_per_slab(plan, src.stored_bytes());
  units.slabs = plan.K == 0 ? 0 : (plan.M + units.rows - 1) / units.rows;
  const uint64_t cells = plan.grid.size();  // scale cells of one matrix

  std::vector<uint8_t> scale_bytes;
  if (plan.recipe.scaling == fp8::Scaling::tensorwise) {
    // One scale per matrix from its whole amax: an amax pass, then the cast pass.
    std::vector<fp8::AmaxGrid> partial(units.count(), fp8::AmaxGrid(plan));
    pool.parallel_for(units.count(), [&](size_t u) {
      const uint64_t count = units.nrows(u) * plan.K;
      std::vector<float> scratch;
      const void* v = src.values(units.start(u), count, scratch);
      found.add(v, count, plan.input);
      fp8::partial_amax(plan, units.row0(u) * plan.K, count, v, partial[u]);
    });
    std::vector<fp8::Scales> scales(units.matrices);
    scale_bytes.resize(units.matrices * 4);
    for (uint64_t m = 0; m < units.matrices; ++m) {
      fp8::AmaxGrid amax(plan);
      for (uint64_t s = 0; s < units.slabs; ++s) amax.combine(partial[m * units.slabs + s]);
      scales[m] = fp8::compute_scales(plan, amax);
      std::memcpy(scale_bytes.data() + m * 4, scales[m].scale_inv.data(), 4);
    }
    pool.parallel_for(units.count(), [&](size_t u) {
      const uint64_t count = units.nrows(u) * plan.K;
      std::vector<float> scratch;
      std::vector<uint8_t> out(count);
      fp8::cast_fragment(plan, scales[units.matrix(u)].view(), units.row0(u) * plan.K, count,
                         src.values(units.start(u), count, scratch), out.data(), nullptr);
      w.write(data_idx, units.start(u), out.data(), count);
      progress.advance(count * src.stored_bytes());
    });
  } else {
    // Blocks lie inside a slab: each slab is quantized as a matrix of its own and its scale rows are
    // placed at its first grid row, in its matrix's grid.
    const bool mx = plan.recipe.scaling == fp8::Scaling::mxfp8;
    const uint64_t block_rows = plan.recipe.scaling == fp8::Scaling::blockwise_128x128 ? 128 : 1;
    const size_t scale_size = mx ? 1 : 4;
    scale_bytes.resize(units.matrices * cells * scale_size);
    pool.parallel_for(units.count(), [&](size_t u) {
      const uint64_t nrows = units.nrows(u), count = nrows * plan.K;
      const fp8::Plan sub = fp8::make_plan(plan.recipe, plan.input, nrows, plan.K, t.name);
      std::vector<float> scratch;
      std::vector<uint8_t> out(count);
      fp8::AmaxGrid amax;
      fp8::Scales scales;
      const void* v = src.values(units.start(u), count, scratch);
      found.add(v, count, plan.input);
      fp8::quantize_into(sub, v, out.data(), nullptr, amax, scales);
      w.write(data_idx, units.start(u), out.data(), count);
      const uint64_t cell0 = units.matrix(u) * cells + units.row0(u) / block_rows * plan.grid.cols;
      if (mx)
        std::memcpy(scale_bytes.data() + cell0, scales.e8m0.data(), scales.e8m0.size());
      else
        std::memcpy(scale_bytes.data() + cell0 * 4, scales.scale_inv.data(), scales.scale_inv.size() * 4);
      progress.advance(count * src.stored_bytes());
    });
  }
  if (!scale_bytes.empty()) w.write(scale_idx, 0, scale_bytes.data(), scale_bytes.size());
}

}  // namespace

ConvertSummary quantize_model(const std::string& in_path, const std::string& out, const QuantizeModelOptions& opt) {
  const auto& s = opt.recipe.scaling;
  if (s == fp8::Scaling::delayed)
    throw UsageError("convert: delayed scaling needs an amax history; use tensorwise for a model file");
  if (s == fp8::Scaling::mxfp8 && (!opt.recipe.mx_rowwise || opt.recipe.mx_columnwise))
    throw UsageError("convert: mxfp8 writes rowwise scales only");
  ThreadPool& pool = opt.pool ? *opt.pool : ThreadPool::global();
  const std::unique_ptr<TensorFiles> opened = tensor_file_format().open(in_path);
  const TensorFiles& model = *opened;
  const std::vector<Chosen> chosen = choose_tensors(model, opt);  // refusals before anything is staged
  std::vector<int> chosen_of(model.size(), -1);
  for (size_t c = 0; c < chosen.size(); ++c) chosen_of[chosen[c].entry] = static_cast<int>(c);

  ModelOutput output(model, out, opt.force, output_metadata(model, opt.recipe),
                     quantization_config(opt.recipe, unquantized_modules(model, chosen_of)));
  // compressed-tensors (and the loaders that read it) know E4M3 only: such a config.json would make
  // them read E5M2 bytes as E4M3.
  if (output.writes_config() && declares_compressed_tensors(opt.recipe) && opt.recipe.format == fp8::Format::e5m2)
    throw UsageError("convert: " + std::string(fp8::scaling_name(s)) +
                     " into a model directory declares compressed-tensors, which has no E5M2; use e4m3, or "
                     "write a .safetensors file");
  // Scales are named as the output's config.json declares them; without one, fpgather's names.
  const ScaleNaming naming = output.writes_config() && declares_compressed_tensors(opt.recipe)
                                 ? ScaleNaming::compressed_tensors
                                 : ScaleNaming::scale_inv;
  refuse_scale_collisions(model, chosen, naming);  // the staged output goes with the exception
  ConvertSummary summary;
  const auto& files = output.layout().files;
  for (size_t f = 0; f < files.size(); ++f) {
    for (size_t i : files[f].tensors) {
      const auto& t = *model.tensors()[i].info;
      if (chosen_of[i] < 0) {
        output.declare(f, {t.name, t.dtype, t.shape});
        continue;
      }
      const fp8::StackedPlan& p = chosen[chosen_of[i]].plan;
      output.declare(f, {t.name, fp8::data_dtype(opt.recipe.format), t.shape});
      output.declare(f, scale_spec(t.name, p, naming));
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
        quantize_one(model, chosen[chosen_of[i]], naming, output.writer(f), pool, progress, found);
        ++summary.quantized;
        const NonFinite nf{entry.info->name, found.nan, found.pos_inf, found.neg_inf};
        if (nf.total() == 0) continue;
        // Refused before the output is committed: the files under their temporary names go.
        if (opt.strict)
          throw FormatError(Message(model.path(), ": tensor ", quoted_name(nf.tensor), " holds ", nonfinite_text(nf),
                                    ", which FP8 cannot hold; ", Field{"strict"}, " refuses to quantize it"));
        summary.nonfinite.push_back(nf);
      }
    }
    for (const auto& t : output.writer(f).tensors()) summary.bytes_out += t.nbytes();
  }
  summary.files = output.commit();
  return summary;
}

}  // namespace fpg::app::convert
