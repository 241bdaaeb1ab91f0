#include "app/convert/checkpoint_export.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <unordered_map>

#include "app/checkpoint/state_documents.h"
#include "ckpt/key_names.h"
#include "ckpt/param_state_map.h"
#include "app/convert/export_files.h"
#include "app/convert/quantize_model.h"
#include "ckpt/state_store.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/float_codec.h"
#include "core/fs.h"
#include "core/progress.h"
#include "core/shape.h"
#include "core/tensor_file.h"
#include "core/thread_start.h"
#include "fp8/quantize.h"
#include "fp8/recipe.h"

namespace fpg::app::convert {
namespace {


// One output tensor and where its elements come from: pieces of checkpoint keys of dtype `src`
// that tile [0, numel); F32 sources may be rounded to BF16 on the way.
struct Piece {
  uint32_t key = 0;
  uint64_t key_lo = 0, out_lo = 0, numel = 0;
};
struct OutTensor {
  TensorSpec spec;
  DType src = DType::F32;
  std::vector<Piece> pieces;
  uint64_t numel() const { uint64_t n = 1; for (auto d : spec.shape) n *= d; return n; }
  uint64_t bytes() const { return numel() * (dtype_bits(spec.dtype) / 8); }
};

struct Fp8Export {
  fp8::Recipe recipe;
  std::string scaling;  // the checkpoint's name (delayed stays "delayed": one scale, like tensorwise)
};

// The recipe of an FP8 checkpoint from its "fp8" document; nothing when FP8 is off.
std::optional<Fp8Export> checkpoint_recipe(const ckpt::Index& index, const std::string& dir) {
  const auto text = index.documents.get(ckpt::doc::fp8);
  if (!text) return std::nullopt;
  const JsonDocument doc(*text, dir + ": document 'fp8'");
  if (!doc.root().get<bool>("enabled", false)) return std::nullopt;
  const JsonField r = doc.root().at("recipe");
  Fp8Export e;
  e.scaling = r.get<std::string>("scaling");
  const auto s = fp8::parse_scaling(e.scaling);
  if (!s) r.at("scaling").fail("unknown scaling");
  const auto f = fp8::parse_format(r.get<std::string>("format"));
  if (!f) r.at("format").fail("unknown format");
  const auto rule = fp8::parse_mx_rule(r.get<std::string>("mx_rule", "rceil"));
  if (!rule) r.at("mx_rule").fail("unknown mx_rule");
  e.recipe.scaling = *s == fp8::Scaling::delayed ? fp8::Scaling::tensorwise : *s;
  e.recipe.format = *f;
  e.recipe.pow2 = r.get<bool>("pow2", false);
  e.recipe.mx_rule = *rule;
  return e;
}

class Planner {
 public:
  Planner(const ckpt::StateReader& r, const ckpt::ParamStateMap& map) : r_(r), map_(map) {
    for (uint32_t k = 0; k < r.index().keys.size(); ++k) by_name_.emplace(r.index().keys[k].name, k);
  }

  long key(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? -1 : static_cast<long>(it->second);
  }
  const ckpt::Key& key_at(long k) const { return r_.index().keys[static_cast<size_t>(k)]; }

  // A whole key as one tensor (its bytes as stored, reshaped to `shape` of the same numel).
  OutTensor whole_key(const std::string& out_name, long k, std::vector<uint64_t> shape) const {
    const ckpt::Key& key = key_at(k);
    OutTensor t{{out_name, key.dtype, std::move(shape)}, key.dtype, {}};
    if (t.numel() != key.numel())
      throw InternalError("export: " + key.name + " reshaped to " + shape_string(t.spec.shape));
    t.pieces.push_back({static_cast<uint32_t>(k), 0, 0, key.numel()});
    return t;
  }

  // A param's state (or master) as F32 or rounded to BF16.
  OutTensor state(const std::string& out_name, uint32_t param, const std::string& s, DType out) const {
    const model::Param& p = map_.spec().params[param];
    OutTensor t{{out_name, out, p.shape}, DType::F32, {}};
    for (const ckpt::StatePiece& sp : map_.pieces(param, s, 0, p.numel()))
      t.pieces.push_back({sp.key, sp.key_lo, sp.param_lo, sp.numel});
    return t;
  }

 private:
  const ckpt::StateReader& r_;
  const ckpt::ParamStateMap& map_;
  std::unordered_map<std::string, uint32_t> by_name_;
};

// The weights of param p as `weights` asks (see the header).
void plan_weights(const Planner& pl, const model::Param& p, uint32_t param, ExportWeights weights,
                  const std::optional<Fp8Export>& fp8r, const std::string& dir, std::vector<OutTensor>& out) {
  if (weights == ExportWeights::fp32) {
    out.push_back(pl.state(p.name, param, "master", DType::F32));
    return;
  }
  const long w = pl.key(ckpt::weight_key(p.name));
  if (w >= 0) {  // held as BF16 (or F32 when fp32-kept): exported as held
    const ckpt::Key& k = pl.key_at(w);
    if (k.shape != p.shape || (k.dtype != DType::BF16 && k.dtype != DType::F32))
      throw FormatError(dir + ": key " + quoted_name(k.name) + " is " + std::string(dtype_name(k.dtype)) + " " +
                        shape_string(k.shape) + "; param " + quoted_name(p.name) + " is " + shape_string(p.shape));
    out.push_back(pl.whole_key(p.name, w, p.shape));
    return;
  }
  const long d = pl.key(ckpt::fp8_data_key(p.name));
  if (d < 0) throw FormatError(dir + ": param " + quoted_name(p.name) + " has neither a 'weight/' nor an 'fp8/' key");
  if (weights == ExportWeights::bf16 || !fp8r) {
    out.push_back(pl.state(p.name, param, "master", DType::BF16));
    return;
  }
  // The checkpoint's own FP8 bytes and scales, in convert's naming.
  const fp8::Plan plan = fp8::make_plan(fp8r->recipe, fp8::Input::f32, p.shape, p.name);
  const bool mx = fp8r->recipe.scaling == fp8::Scaling::mxfp8;
  const long s = pl.key(ckpt::fp8_state_key(p.name, mx ? "scale_e8m0" : "scale_inv"));
  const std::vector<uint64_t> shape = fp8::scale_inv_shape(plan);
  uint64_t numel = 1;
  for (auto x : shape) numel *= x;
  if (s < 0 || pl.key_at(s).numel() != numel || pl.key_at(s).dtype != fp8::scale_inv_dtype(plan))
    throw FormatError(dir + ": param " + quoted_name(p.name) + " has no " + fp8r->scaling + " scale grid of " +
                      std::to_string(numel) + " " + std::string(dtype_name(fp8::scale_inv_dtype(plan))) + " elements");
  out.push_back(pl.whole_key(p.name, d, p.shape));
  out.push_back(pl.whole_key(p.name + kScaleSuffix, s, shape));
}

std::map<std::string, std::string> export_metadata(const ckpt::StateReader& r, const ExportOptions& o,
                                                   const std::optional<Fp8Export>& fp8r, const ckpt::ParamStateMap& map) {
  std::map<std::string, std::string> m;
  m["format"] = "pt";
  m["fpgather.source"] = r.dir();
  try {
    m["fpgather.step"] = std::to_string(checkpoint::saved_optimizer_step(r.index().documents, r.dir()));
  } catch (const FormatError&) {
    m["fpgather.step"] = "0";  // metadata only: a checkpoint without a readable step exports as step 0
  }
  m["fpgather.weights"] = o.weights == ExportWeights::fp32 ? "fp32" : o.weights == ExportWeights::fp8 ? "fp8" : "bf16";
  if (o.states) {
    std::vector<std::string> all;
    for (uint32_t p = 0; p < map.spec().params.size(); ++p)
      for (const auto& s : map.states_of(p))
        if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
    std::string list;
    for (const auto& s : all) list += (list.empty() ? "" : ",") + s;
    m["fpgather.states"] = list;
  }
  if (o.weights == ExportWeights::fp8 && fp8r) {
    m[kMetadataRecipe] = fp8r->scaling;
    m[kMetadataFormat] = std::string(fp8::format_name(fp8r->recipe.format));
    if (fp8r->recipe.scaling == fp8::Scaling::mxfp8) m[kMetadataMxRule] = std::string(fp8::mx_rule_name(fp8r->recipe.mx_rule));
    else m[kMetadataPow2] = fp8r->recipe.pow2 ? "true" : "false";
  }
  m[kMetadataProducer] = std::string("fpgather ") + FPGATHER_VERSION;
  return m;
}

// Elements per slab: a slab is at most slab_bytes of F32 source.
uint64_t slab_elems(uint64_t slab_bytes) { return std::max<uint64_t>(1, slab_bytes / 4); }

// Calls f(piece, a, e) for each source read of elements [lo, hi) of tensor t (one slab), in the
// order the Streamer reads them: elements [a, e) of the tensor come from `piece`.
template <class F>
void for_each_read(const OutTensor& t, uint64_t lo, uint64_t hi, F f) {
  for (const Piece& p : t.pieces) {
    const uint64_t a = std::max(lo, p.out_lo), e = std::min(hi, p.out_lo + p.numel);
    if (a < e) f(p, a, e);
  }
}

// The checkpoint ranges an export of these tensors (in this order) reads, in order (for read-ahead).
std::vector<ckpt::KeyRead> export_reads(const std::vector<const OutTensor*>& order, uint64_t slab) {
  std::vector<ckpt::KeyRead> ranges;
  for (const OutTensor* t : order) {
    const size_t elem = dtype_bits(t->src) / 8;
    for (uint64_t lo = 0, n = t->numel(); lo < n; lo += slab)
      for_each_read(*t, lo, std::min(n, lo + slab), [&](const Piece& p, uint64_t a, uint64_t e) {
        ranges.push_back({p.key, p.key_lo + (a - p.out_lo), p.key_lo + (e - p.out_lo), (e - a) * elem});
      });
  }
  return ranges;
}

// Streams one tensor slab by slab: the slab is read (chunks in parallel) and converted while the
// previous one is written by another thread, so reading and writing overlap; the disk reads ahead
// of both (`ahead`: the reads of every tensor in the order they are streamed).
class Streamer {
 public:
  Streamer(const ckpt::StateReader& r, ThreadPool& pool, uint64_t slab_bytes, ckpt::ReadPlan& ahead,
           Progress& progress)
      : r_(r), pool_(pool), slab_elems_(slab_elems(slab_bytes)), ahead_(ahead), progress_(progress) {}
  ~Streamer() {
    if (pending_.valid()) pending_.wait();
  }

  uint64_t bytes_read = 0;

  void stream(const OutTensor& t, TensorFileWriter& w) {
    const size_t idx = w.index(t.spec.name);
    const size_t src_elem = dtype_bits(t.src) / 8, out_elem = dtype_bits(t.spec.dtype) / 8;
    const bool round = t.src == DType::F32 && t.spec.dtype == DType::BF16;
    const uint64_t n = t.numel();
    for (uint64_t lo = 0; lo < n; lo += slab_elems_) {
      const uint64_t hi = std::min(n, lo + slab_elems_);
      Buffers& b = buffers_[turn_];
      turn_ ^= 1;
      b.src.resize((hi - lo) * src_elem);
      for_each_read(t, lo, hi, [&](const Piece& p, uint64_t a, uint64_t e) {
        ahead_.next();
        r_.read(p.key, p.key_lo + (a - p.out_lo), p.key_lo + (e - p.out_lo), b.src.data() + (a - lo) * src_elem, &pool_);
      });
      bytes_read += b.src.size();
      const uint8_t* data = b.src.data();
      if (round) {
        b.out.resize((hi - lo) * out_elem);
        const float* f = reinterpret_cast<const float*>(b.src.data());
        auto* h = reinterpret_cast<uint16_t*>(b.out.data());
        const uint64_t m = hi - lo, parts = std::min<uint64_t>(pool_.size(), (m + 65535) / 65536);
        pool_.parallel_for(parts, [&](size_t i) {
          for (uint64_t j = m * i / parts, end = m * (i + 1) / parts; j < end; ++j) h[j] = bf16_from_float(f[j]);
        });
        data = b.out.data();
      }
      // The other buffer's write must be done before it is refilled: at most one write in flight.
      if (pending_.valid()) pending_.get();
      const uint64_t off = lo * out_elem, size = (hi - lo) * out_elem;
      pending_ = start_async([&w, idx, off, data, size, this] {
        w.write(idx, off, data, size);
        progress_.advance(size);
        // Flush as we go: the disk writes while the next slabs are read, not all in the final fsync.
        unflushed_ += size;
        if (unflushed_ >= kWritebackBytes) {
          w.start_writeback();
          unflushed_ = 0;
        }
      });
    }
  }

  void finish() {
    if (pending_.valid()) pending_.get();
  }

 private:
  struct Buffers {
    std::vector<uint8_t> src, out;
  };
  const ckpt::StateReader& r_;
  ThreadPool& pool_;
  uint64_t slab_elems_;
  ckpt::ReadPlan& ahead_;
  Progress& progress_;
  Buffers buffers_[2];
  int turn_ = 0;
  AsyncTask<void> pending_;
  uint64_t unflushed_ = 0;  // written since the last start_writeback (touched by the writing task only)
  static constexpr uint64_t kWritebackBytes = 64ull << 20;
};

}  // namespace

uint64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw UsageError("size " + quoted_name(text) + " is not a number of bytes (e.g. 5GB, 500MB, 2GiB)");
  }
  std::string unit = text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> units = {{"", 1},         {"B", 1},          {"KB", 1e3},
                                                      {"MB", 1e6},     {"GB", 1e9},       {"TB", 1e12},
                                                      {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  const auto it = units.find(unit);
  if (it == units.end() || !(v > 0)) throw UsageError("size " + quoted_name(text) + " is not a positive size (e.g. 5GB, 500MB, 2GiB)");
  // 2^64 and above (and inf) do not convert to a byte count.
  if (!(v * it->second < 18446744073709551616.0)) throw UsageError("size " + quoted_name(text) + " is more than 2^64 - 1 bytes");
  return static_cast<uint64_t>(v * it->second);
}

ExportSummary export_checkpoint(const std::string& checkpoint, const std::string& out, const ExportOptions& o) {
  ThreadPool& pool = o.pool ? *o.pool : ThreadPool::global();
  // The index checks and the plan read the whole index: named from the start, then the bar.
  Progress progress("export", 0, o.progress);
  progress.phase((o.validate ? "validating " : "opening ") + checkpoint);
  const auto opened = ckpt::state_store().open(checkpoint, "export it", o.validate);
  const ckpt::StateReader& reader = *opened;
  const std::string& dir = reader.dir();
  const ckpt::ParamStateMap map = ckpt::ParamStateMap::from_index(reader.index(), dir);
  const std::optional<Fp8Export> fp8r = checkpoint_recipe(reader.index(), dir);
  if (o.weights == ExportWeights::fp8 && !fp8r)
    throw UsageError(Message(dir, " has no FP8 params (it was trained with ", Field{"fp8"}, " none): export bf16 or fp32 "
                             "weights, or quantize an export with `fpgather convert IN OUT --fp8 RECIPE`"));

  const Planner pl(reader, map);
  std::vector<OutTensor> tensors;
  const auto& params = map.spec().params;
  for (uint32_t p = 0; p < params.size(); ++p) plan_weights(pl, params[p], p, o.weights, fp8r, dir, tensors);
  if (o.states)
    for (uint32_t p = 0; p < params.size(); ++p)
      for (const std::string& s : map.states_of(p)) tensors.push_back(pl.state(params[p].name + "." + s, p, s, DType::F32));

  const auto [sizes, specs, total] = planned_specs(tensors);
  const ExportFiles files = plan_export_files(sizes, out, o.max_shard_bytes);
  std::vector<std::string> inputs = o.inputs;
  inputs.insert(inputs.end(), {checkpoint, dir});
  ExportOutput output(out, files, o.force, inputs, specs, export_metadata(reader, o, fp8r, map));

  ExportSummary sum;
  sum.checkpoint = dir;
  progress.set_total(total);
  {
    std::vector<const OutTensor*> order;
    for (const auto& in_file : files.tensors)
      for (size_t i : in_file) order.push_back(&tensors[i]);
    // Two slabs ahead: the disk reads the next slabs while this one is converted and the last written.
    const std::unique_ptr<ckpt::ReadPlan> ahead = reader.plan_reads(export_reads(order, slab_elems(o.slab_bytes)), 2 * o.slab_bytes);
    Streamer st(reader, pool, o.slab_bytes, *ahead, progress);
    for (size_t f = 0; f < files.names.size(); ++f)
      for (size_t i : files.tensors[f]) st.stream(tensors[i], output.writer(f));
    st.finish();
    sum.bytes_read = st.bytes_read;
  }
  sum.files = output.commit();
  sum.tensors = tensors.size();
  sum.bytes_written = total;
  return sum;
}

}  // namespace fpg::app::convert
