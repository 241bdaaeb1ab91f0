#include "convert/param_export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>

#include "convert/export_files.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "core/progress.h"
#include "formats/safetensors/index.h"
#include "formats/safetensors/writer.h"

namespace fpg::convert {
namespace {

struct Planned {
  size_t source = 0;  // index into ParamSource::tensors()
  safetensors::TensorSpec spec;
  uint64_t bytes() const {
    uint64_t n = 1;
    for (uint64_t d : spec.shape) n *= d;
    return dtype_bytes(spec.dtype, n);
  }
};

std::vector<Planned> plan(const ckpt::ParamSource& src, const ExportOptions& o) {
  if (o.weights == ExportWeights::fp8)
    throw UsageError(src.describe() + " holds no FP8 parameters: export bf16 or fp32 weights, or quantize an export "
                     "with `fpgather convert IN OUT --fp8 RECIPE`");
  const auto& ts = src.tensors();
  std::vector<Planned> out;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].role != "weight") continue;
    size_t from = i;
    DType dtype = DType::BF16;
    if (o.weights == ExportWeights::fp32) {
      dtype = DType::F32;
      for (size_t j = 0; j < ts.size(); ++j)
        if (ts[j].param == ts[i].param && ts[j].role == "master") from = j;
    }
    // Tensors that are not 16- to 64-bit floats (integer buffers, FP8) are written as stored.
    const DType held = ts[from].dtype;
    if (!dtype_is_decodable_float(held) || dtype_bits(held) < 16) dtype = held;
    out.push_back({from, {ts[i].param, dtype, ts[i].shape}});
  }
  if (o.states)
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].role != "weight") out.push_back({i, {ts[i].name, ts[i].dtype, ts[i].shape}});
  return out;
}

// Converts n elements of `from` into `to` (BF16 or F32 targets; same dtype copies).
void convert_elements(const uint8_t* src, DType from, uint8_t* dst, DType to, uint64_t n) {
  if (from == to) {
    std::memcpy(dst, src, dtype_bytes(from, n));
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (from) {
      case DType::F32: std::memcpy(&v, src + 4 * i, 4); break;
      case DType::BF16: { uint16_t h; std::memcpy(&h, src + 2 * i, 2); v = float_from_bf16(h); break; }
      case DType::F16: { uint16_t h; std::memcpy(&h, src + 2 * i, 2); v = float_from_fp16(h); break; }
      case DType::F64: { double d; std::memcpy(&d, src + 8 * i, 8); v = static_cast<float>(d); break; }
      default: throw InternalError("export: no conversion from " + std::string(dtype_name(from)));
    }
    if (to == DType::F32) {
      std::memcpy(dst + 4 * i, &v, 4);
    } else {
      const uint16_t h = bf16_from_float(v);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
}

}  // namespace

ExportSummary export_params(const ckpt::ParamSource& src, const std::string& out, const ExportOptions& o) {
  const std::vector<Planned> tensors = plan(src, o);
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& t : tensors) {
    sizes.push_back(t.bytes());
    total += t.bytes();
  }
  const ExportFiles files = plan_export_files(sizes, out, o.max_shard_bytes);

  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"fpgather.source", src.describe()},
                                          {"fpgather.weights", o.weights == ExportWeights::fp32 ? "fp32" : "bf16"},
                                          {"fpgather.producer", std::string("fpgather ") + FPGATHER_VERSION}};
  if (o.states) {
    std::vector<std::string> roles;
    for (const auto& t : src.tensors())
      if (t.role != "weight" && t.role != "master" && std::find(roles.begin(), roles.end(), t.role) == roles.end())
        roles.push_back(t.role);
    std::string list = "master";
    for (const auto& r : roles) list += "," + r;
    meta["fpgather.states"] = list;
  }
  std::vector<std::unique_ptr<safetensors::Writer>> writers;
  for (size_t f = 0; f < files.paths.size(); ++f) {
    std::vector<safetensors::TensorSpec> specs;
    for (size_t i : files.tensors[f]) specs.push_back(tensors[i].spec);
    writers.push_back(std::make_unique<safetensors::Writer>(files.paths[f], specs, meta));
  }

  ExportSummary sum;
  sum.checkpoint = src.describe();
  Progress progress("export", total, o.progress);
  // Two slabs: one is written by a background task while the next is read (and converted).
  struct Slab {
    std::vector<uint8_t> in, converted;
  };
  Slab slabs[2];
  size_t slot = 0;
  std::future<void> writing;  // the write of the other slab
  uint64_t writing_bytes = 0;
  auto finish_write = [&] {
    if (!writing.valid()) return;
    writing.get();
    progress.advance(writing_bytes);
  };
  for (size_t f = 0; f < files.paths.size(); ++f)
    for (size_t i : files.tensors[f]) {
      const Planned& t = tensors[i];
      const ckpt::ParamTensor& st = src.tensors()[t.source];
      const uint64_t n = st.numel();
      const uint64_t elem = std::max<uint64_t>(dtype_bits(st.dtype) / 8, 1);
      const uint64_t slab = std::max<uint64_t>(1, o.slab_bytes / std::max<uint64_t>(elem, 4));
      const size_t w = writers[f]->index(t.spec.name);
      const uint64_t out_elem = dtype_bits(t.spec.dtype) / 8;
      for (uint64_t lo = 0; lo < n; lo += slab) {
        const uint64_t hi = std::min(n, lo + slab);
        Slab& b = slabs[slot];
        b.in.resize((hi - lo) * elem);
        src.read(t.source, lo, hi, b.in.data());
        sum.bytes_read += b.in.size();
        const std::vector<uint8_t>* out = &b.in;  // written as read when the dtype is kept
        if (st.dtype != t.spec.dtype) {
          b.converted.resize((hi - lo) * out_elem);
          convert_elements(b.in.data(), st.dtype, b.converted.data(), t.spec.dtype, hi - lo);
          out = &b.converted;
        }
        finish_write();
        safetensors::Writer* writer = writers[f].get();
        writing = std::async(std::launch::async,
                             [writer, w, at = lo * out_elem, out] { writer->write(w, at, out->data(), out->size()); });
        writing_bytes = out->size();
        slot ^= 1;
      }
    }
  finish_write();
  for (auto& w : writers) {
    w->commit();
    sum.files.push_back(w->path());
  }
  if (!files.index_path.empty()) {
    safetensors::ShardIndex index;
    for (size_t f = 0; f < writers.size(); ++f)
      for (const auto& t : writers[f]->tensors())
        index.weight_map[t.name] = std::filesystem::path(files.paths[f]).filename().string();
    index.total_size = total;
    safetensors::write_index(files.index_path, index);
    sum.files.push_back(files.index_path);
  }
  sum.tensors = tensors.size();
  sum.bytes_written = total;
  return sum;
}

}  // namespace fpg::convert
