#include "app/convert/param_export.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <tuple>

#include "app/convert/export_files.h"
#include "app/convert/staged_output.h"
#include "ckpt/format_registry.h"
#include "ckpt/param_export.h"
#include "core/byte_buffer.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/tensor_file.h"

namespace fpg::app::convert {
namespace {

// Slabs read ahead of the one being converted and written, for sources that serve concurrent reads.
constexpr size_t kSlabsReadAhead = 3;

using Planned = ckpt::ExportTensor;

// `safetensors`: the output is safetensors, which takes the tensors ParamTensor::safetensors_dtype allows.
std::vector<Planned> plan(const ckpt::ParamSource& src, const ExportOptions& o, bool safetensors) {
  if (o.weights == ExportWeights::fp8)
    throw UsageError(src.describe() + ": this export writes no FP8 recipe: export bf16 or fp32 weights, or quantize an "
                     "export with `fpgather convert IN OUT --fp8 RECIPE`");
  const auto& ts = src.tensors();
  // Per parameter, in order: its weight as held and its master, either of which may be absent.
  std::vector<std::string> order;
  std::map<std::string, std::pair<long, long>> found;  // param -> (weight, master)
  for (size_t i = 0; i < ts.size(); ++i) {
    auto [it, fresh] = found.emplace(ts[i].param, std::make_pair(-1L, -1L));
    if (fresh) order.push_back(ts[i].param);
    if (ts[i].role == "weight") it->second.first = static_cast<long>(i);
    if (ts[i].role == "master") it->second.second = static_cast<long>(i);
  }
  std::vector<Planned> out;
  for (const std::string& param : order) {
    const auto [weight, master] = found[param];
    const bool fp32 = o.weights == ExportWeights::fp32;
    // fp32: the master where there is one; bf16: the weight as held, else the master rounded.
    const long from = fp32 ? (master >= 0 ? master : weight) : (weight >= 0 ? weight : master);
    if (from < 0) continue;
    DType dtype = fp32 ? DType::F32 : DType::BF16;
    // Tensors that are not 16- to 64-bit floats (integer buffers, FP8) are written as stored.
    const DType held = ts[static_cast<size_t>(from)].dtype;
    if (!dtype_is_decodable_float(held) || dtype_bits(held) < 16) dtype = held;
    out.push_back({static_cast<size_t>(from), {param, dtype, ts[static_cast<size_t>(from)].shape}});
  }
  if (o.states)
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].role != "weight") out.push_back({i, {ts[i].name, ts[i].dtype, ts[i].shape}});
  for (Planned& p : out)
    if (const ckpt::ParamTensor& t = ts[p.source]; safetensors && t.safetensors_dtype) {
      p.spec.dtype = *t.safetensors_dtype;
      p.spec.shape = t.safetensors_shape;
      p.as_stored = true;
    }
  // Every tensor that cannot be exported is named at once, before anything is written.
  std::string refused;
  size_t n_refused = 0;
  for (const Planned& p : out)
    if (!p.as_stored && !ts[p.source].unexportable.empty()) {
      refused += "\n  " + ts[p.source].unexportable;
      ++n_refused;
    }
  if (n_refused)
    throw UnsupportedError(src.describe() + ": " + std::to_string(n_refused) + (n_refused == 1 ? " key" : " keys") +
                           " cannot be exported; refusing to export it:" + refused);
  return out;
}

}  // namespace

ExportSummary export_params(const ckpt::ParamSource& src, const std::string& out, const ExportOptions& o) {
  const std::vector<Planned> tensors = plan(src, o, true);
  const auto [sizes, specs, total] = planned_specs(tensors);
  const ExportFiles files = plan_export_files(sizes, out, o.max_shard_bytes);

  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"fpgather.source", src.describe()},
                                          {"fpgather.weights", o.weights == ExportWeights::fp32 ? "fp32" : "bf16"},
                                          {"fpgather.producer", std::string("fpgather ") + FPGATHER_VERSION}};
  if (o.states) {
    std::vector<std::string> roles;
    for (const auto& t : src.tensors())
      if (t.role != "weight" && t.role != "master" && t.role != "other" &&
          std::find(roles.begin(), roles.end(), t.role) == roles.end())
        roles.push_back(t.role);
    std::string list = "master";
    for (const auto& r : roles) list += "," + r;
    meta["fpgather.states"] = list;
  }
  ExportOutput output(out, files, o.force, o.inputs, specs, meta);
  for (const auto& [name, contents] : o.side_files) output.add_file(name, contents);

  ExportSummary sum;
  sum.checkpoint = src.describe();
  Progress progress("export", total, o.progress);
  // The export in units of one slab of one source tensor, in file order, each written to every planned
  // tensor that holds the same bytes: an fp32 export with states writes a parameter's master twice
  // (as NAME and NAME.master), read once (a quarter of a Megatron export's reads and checksums).
  struct Dest {
    size_t file, tensor;  // tensor: index into `tensors`
  };
  struct Unit {
    size_t tensor;    // the first planned tensor of these bytes
    uint64_t lo, hi;  // source elements
    std::vector<Dest> dests;
  };
  std::vector<Unit> units;
  std::map<std::tuple<size_t, bool, DType>, std::pair<size_t, size_t>> read_as;  // -> its units [first, end)
  for (size_t f = 0; f < files.names.size(); ++f)
    for (size_t i : files.tensors[f]) {
      const Planned& t = tensors[i];
      const auto [it, fresh] =
          read_as.emplace(std::make_tuple(t.source, t.as_stored, t.spec.dtype), std::make_pair(units.size(), units.size()));
      if (!fresh) {
        for (size_t k = it->second.first; k < it->second.second; ++k) units[k].dests.push_back({f, i});
        continue;
      }
      const ckpt::ParamTensor& st = src.tensors()[t.source];
      const uint64_t n = st.numel();
      const uint64_t slab = std::max<uint64_t>(1, o.slab_bytes / std::max<uint64_t>(dtype_bits(st.dtype) / 8, 4));
      for (uint64_t lo = 0; lo < n; lo += slab) units.push_back({i, lo, std::min(n, lo + slab), {{f, i}}});
      it->second.second = units.size();
    }
  // Slabs are read `depth` ahead, each into its own buffer, while the previous one is written in the
  // background: a source that serves concurrent reads keeps the disk busy across slab ends (one read's
  // last chunks overlap the next read's first); one that does not reads them one at a time on this
  // thread (deferred). Memory: depth + 1 slabs. Either is told the reads first (plan_reads), so that
  // the disk reads ahead along them and nothing else: an export of the weights alone asks for the
  // weights, not the optimizer state stored among them.
  const size_t depth = src.concurrent_reads() ? kSlabsReadAhead : 1;
  {
    std::vector<ckpt::ParamRange> plan;
    for (const Unit& u : units) plan.push_back({tensors[u.tensor].source, u.lo, u.hi});
    src.plan_reads(std::move(plan), 2 * o.slab_bytes);
  }
  struct Slab {
    ByteBuffer in, converted;  // filled whole by the read or the conversion: never zero-filled first
  };
  std::vector<Slab> slabs(depth + 1);
  {
    // Each buffer is made once at the largest size it takes: one grown slab after slab would be
    // fresh memory, faulted in and cleared by the kernel page by page, before each read or conversion.
    uint64_t in = 0, converted = 0;
    for (const Unit& u : units) {
      const Planned& t = tensors[u.tensor];
      const ckpt::ParamTensor& st = src.tensors()[t.source];
      in = std::max(in, (u.hi - u.lo) * std::max<uint64_t>(dtype_bits(st.dtype) / 8, 1));
      if (!t.as_stored && st.dtype != t.spec.dtype)
        converted = std::max(converted, (u.hi - u.lo) * dtype_bits(t.spec.dtype) / 8);
    }
    for (Slab& b : slabs) {
      b.in.resize(static_cast<size_t>(in));
      b.converted.resize(static_cast<size_t>(converted));
    }
  }
  // Declared after the buffers they fill or write: destroyed (waited for) first on an exception.
  std::deque<std::future<void>> reading;  // reads of units [next_read - reading.size(), next_read)
  size_t next_read = 0;
  std::future<void> writing;  // the writes of the previous unit
  uint64_t writing_bytes = 0;
  auto start_read = [&] {
    if (next_read >= units.size()) return;
    const Unit& u = units[next_read];
    const ckpt::ParamTensor& st = src.tensors()[tensors[u.tensor].source];
    Slab& b = slabs[next_read % slabs.size()];
    b.in.resize((u.hi - u.lo) * std::max<uint64_t>(dtype_bits(st.dtype) / 8, 1));
    const auto policy = depth > 1 ? std::launch::async : std::launch::deferred;
    reading.push_back(std::async(policy, [&src, &u, &b, t = tensors[u.tensor].source] { src.read(t, u.lo, u.hi, b.in.data()); }));
    ++next_read;
  };
  auto finish_write = [&] {
    if (!writing.valid()) return;
    writing.get();
    progress.advance(writing_bytes);
  };
  while (next_read < std::min(depth, units.size())) start_read();
  for (size_t k = 0; k < units.size(); ++k) {
    const Unit& u = units[k];
    const Planned& t = tensors[u.tensor];
    const ckpt::ParamTensor& st = src.tensors()[t.source];
    Slab& b = slabs[k % slabs.size()];
    reading.front().get();
    reading.pop_front();
    sum.bytes_read += b.in.size();
    const ByteBuffer* out = &b.in;  // written as read when the dtype is kept
    const uint64_t out_elem = t.as_stored ? 1 : dtype_bits(t.spec.dtype) / 8;
    if (!t.as_stored && st.dtype != t.spec.dtype) {
      b.converted.resize((u.hi - u.lo) * out_elem);
      ckpt::convert_elements(b.in.data(), st.dtype, b.converted.data(), t.spec.dtype, u.hi - u.lo);
      out = &b.converted;
    }
    finish_write();  // unit k - 1: its slab is the one the next read fills
    writing = std::async(std::launch::async, [&output, &tensors, &u, at = u.lo * out_elem, out] {
      for (const Dest& d : u.dests) {
        TensorFileWriter& writer = output.writer(d.file);
        writer.write(writer.index(tensors[d.tensor].spec.name), at, out->data(), out->size());
      }
    });
    writing_bytes = out->size() * u.dests.size();
    start_read();
  }
  finish_write();
  src.finish_reads();
  sum.files = output.commit();
  sum.tensors = tensors.size();
  sum.bytes_written = total;
  return sum;
}

ExportSummary export_params_dcp(const ckpt::ParamSource& src, const std::string& out, const ExportOptions& o) {
  const std::vector<Planned> tensors = plan(src, o, false);
  StagedOutput staged(out, OutputKind::directory, o.force, o.inputs);
  ckpt::ParamWriteOptions wo;
  wo.slab_bytes = o.slab_bytes;
  wo.objects = o.states;
  wo.checkpoint_id = staged.dir();
  wo.progress = o.progress;
  const ckpt::Format* dcp = ckpt::builtin_formats().find("dcp");
  if (!dcp) throw InternalError("export: this build has no DCP format");
  ExportSummary sum;
  sum.checkpoint = src.describe();
  sum.bytes_read = dcp->write_params(src, tensors, staged.staged_dir(), wo);
  staged.commit();
  sum.files = {staged.dir()};
  sum.tensors = tensors.size();
  for (const auto& t : tensors) sum.bytes_written += t.bytes();
  return sum;
}

}  // namespace fpg::app::convert
