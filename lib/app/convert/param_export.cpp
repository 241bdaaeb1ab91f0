#include "app/convert/param_export.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>

#include "app/convert/export_files.h"
#include "app/convert/staged_output.h"
#include "core/byte_buffer.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "core/progress.h"
#include "formats/dcp/zip/crc32.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/torch_dtype.h"
#include "formats/dcp/torch_save/torch_save_writer.h"
#include "formats/safetensors/writer.h"

namespace fpg::app::convert {
namespace {

// Slabs read ahead of the one being converted and written, for sources that serve concurrent reads.
constexpr size_t kSlabsReadAhead = 3;
// Blocks of half a slab read ahead of the one the DCP writer is writing.
constexpr size_t kDcpBlocksReadAhead = 4;

struct Planned {
  size_t source = 0;  // index into ParamSource::tensors()
  safetensors::TensorSpec spec;
  // Written as the source's bytes, unchanged, under a dtype of its own (ParamTensor::safetensors_dtype).
  bool as_stored = false;
  uint64_t bytes() const {
    uint64_t n = 1;
    for (uint64_t d : spec.shape) n *= d;
    return dtype_bytes(spec.dtype, n);
  }
};

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

// A plain DCP's key for an exported tensor: "model.NAME" for weights, "optimizer.state.NAME.STATE"
// (the master as "master") for the rest, as a state dict {"model": …, "optimizer": {"state": …}} flattens.
std::string dcp_key(const ckpt::ParamTensor& t, const std::string& exported_name) {
  if (t.role == "other") return t.name;  // state of no parameter: its own key
  if (exported_name == t.param) return "model." + t.param;
  return "optimizer.state." + t.param + "." + t.role;
}

// The key's path in the nested state dict torch's planner flattened it from: ("model", NAME) and
// ("optimizer", "state", NAME, STATE); a state of no parameter is a path of its one key.
std::vector<std::string> dcp_planner_path(const ckpt::ParamTensor& t, const std::string& exported_name) {
  if (t.role == "other") return {t.name};
  if (exported_name == t.param) return {"model", t.param};
  return {"optimizer", "state", t.param, t.role};
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
  // The export in units of one slab of one tensor, in file order.
  struct Unit {
    size_t file, tensor;
    uint64_t lo, hi;  // source elements
  };
  std::vector<Unit> units;
  for (size_t f = 0; f < files.names.size(); ++f)
    for (size_t i : files.tensors[f]) {
      const ckpt::ParamTensor& st = src.tensors()[tensors[i].source];
      const uint64_t n = st.numel();
      const uint64_t slab = std::max<uint64_t>(1, o.slab_bytes / std::max<uint64_t>(dtype_bits(st.dtype) / 8, 4));
      for (uint64_t lo = 0; lo < n; lo += slab) units.push_back({f, i, lo, std::min(n, lo + slab)});
    }
  // Slabs are read `depth` ahead, each into its own buffer, while the previous one is written in the
  // background: a source that serves concurrent reads keeps the disk busy across slab ends (one read's
  // last chunks overlap the next read's first); one that does not reads them one at a time on this
  // thread (deferred). Memory: depth + 1 slabs.
  const size_t depth = src.concurrent_reads() ? kSlabsReadAhead : 1;
  if (depth == 1) {
    std::vector<ckpt::ParamRange> plan;
    for (const Unit& u : units) plan.push_back({tensors[u.tensor].source, u.lo, u.hi});
    src.plan_reads(std::move(plan), 2 * o.slab_bytes);
  }
  struct Slab {
    ByteBuffer in, converted;  // filled whole by the read or the conversion: never zero-filled first
  };
  std::vector<Slab> slabs(depth + 1);
  // Declared after the buffers they fill or write: destroyed (waited for) first on an exception.
  std::deque<std::future<void>> reading;  // reads of units [next_read - reading.size(), next_read)
  size_t next_read = 0;
  std::future<void> writing;  // the write of the previous unit
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
      convert_elements(b.in.data(), st.dtype, b.converted.data(), t.spec.dtype, u.hi - u.lo);
      out = &b.converted;
    }
    finish_write();  // unit k - 1: its slab is the one the next read fills
    safetensors::Writer& writer = output.writer(u.file);
    writing = std::async(std::launch::async, [wr = &writer, w = writer.index(t.spec.name), at = u.lo * out_elem, out] {
      wr->write(w, at, out->data(), out->size());
    });
    writing_bytes = out->size();
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
  // The writer asks for each tensor's bytes in consecutive blocks of its I/O block size, tensor after
  // tensor, and writes each before asking for the next. Those blocks are read, converted and
  // checksummed ahead into a ring of buffers while it does, so a write that waits on the disk does not
  // stop the reading, and the writer writes each from its buffer with its CRC-32 already known; each
  // read spans many source chunks, read in parallel. A source that serves one read at a time is
  // given the whole sequence of reads first (plan_reads), so that the disk reads ahead along it.
  dcp::DcpWriteOptions wo;
  wo.io_block_bytes = static_cast<size_t>(std::max<uint64_t>(o.slab_bytes / 2, 1));
  wo.checkpoint_id = staged.dir();
  dcp::DcpWriter w(staged.staged_dir(), wo);
  for (const Planned& t : tensors) {
    const dcp::TorchDType* dtype = dcp::find_torch_dtype(dcp::torch_dtype_name(t.spec.dtype));
    if (!dtype) throw UsageError(t.spec.name + ": dtype " + std::string(dtype_name(t.spec.dtype)) + " has no torch dtype");
    w.declare_tensor(dcp_key(src.tensors()[t.source], t.spec.name), *dtype, t.spec.shape,
                     dcp_planner_path(src.tensors()[t.source], t.spec.name));
  }
  // With the states, a DCP source's non-tensor items (param_groups, a scheduler's state) too, as
  // stored, under their own keys.
  if (o.states)
    for (const std::string& name : src.objects()) w.declare_bytes(name);
  ExportSummary sum;
  sum.checkpoint = src.describe();
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.bytes();
  Progress progress("export", total, o.progress);

  struct Block {
    size_t tensor = SIZE_MAX;
    uint64_t offset = 0, size = 0;  // output bytes
    uint64_t read = 0;              // source bytes read for them
    uint64_t skip = 0;              // bytes of `bytes` before them
    uint32_t crc = 0;               // their CRC-32
    // Source elements covering them; the output elements. Both only grow: shrunk for a short block and
    // grown again, they would be zero-filled again.
    std::vector<uint8_t> in, bytes;
    const uint8_t* data() const { return bytes.data() + skip; }
  };
  auto grow = [](std::vector<uint8_t>& v, uint64_t n) {
    if (v.size() < n) v.resize(n);
  };
  // The source elements [lo, hi) covering output bytes [offset, offset + size) of a tensor.
  auto source_range = [&tensors](size_t tensor, uint64_t offset, uint64_t size) {
    const uint64_t out_elem = std::max<uint64_t>(dtype_bits(tensors[tensor].spec.dtype) / 8, 1);
    return std::pair<uint64_t, uint64_t>{offset / out_elem, (offset + size + out_elem - 1) / out_elem};
  };
  // Reads those elements and leaves the block's bytes at b.data().
  auto read_block = [&src, &tensors, grow, source_range](Block& b) {
    const Planned& t = tensors[b.tensor];
    const ckpt::ParamTensor& st = src.tensors()[t.source];
    const uint64_t in_elem = std::max<uint64_t>(dtype_bits(st.dtype) / 8, 1);
    const uint64_t out_elem = std::max<uint64_t>(dtype_bits(t.spec.dtype) / 8, 1);
    const auto [lo, hi] = source_range(b.tensor, b.offset, b.size);
    b.read = (hi - lo) * in_elem;
    b.skip = b.offset % out_elem;  // a block that starts inside an element (never with whole-element block sizes)
    grow(b.bytes, (hi - lo) * out_elem);
    if (st.dtype == t.spec.dtype) {
      src.read(t.source, lo, hi, b.bytes.data());
    } else {
      grow(b.in, b.read);
      src.read(t.source, lo, hi, b.in.data());
      convert_elements(b.in.data(), st.dtype, b.bytes.data(), t.spec.dtype, hi - lo);
    }
  };
  struct Want {
    size_t tensor;
    uint64_t offset, size;
  };
  std::vector<Want> expected;  // the blocks the writer will ask for, in order
  for (size_t ti = 0; ti < tensors.size(); ++ti)
    for (uint64_t at = 0, n = tensors[ti].bytes(); at < n; at += wo.io_block_bytes)
      expected.push_back({ti, at, std::min<uint64_t>(wo.io_block_bytes, n - at)});
  {
    std::vector<ckpt::ParamRange> plan;
    for (const Want& e : expected) {
      const auto [lo, hi] = source_range(e.tensor, e.offset, e.size);
      plan.push_back({tensors[e.tensor].source, lo, hi});
    }
    src.plan_reads(std::move(plan), 2 * o.slab_bytes);
  }
  // One buffer is lent to the writer, the others are read ahead.
  std::vector<Block> ring(kDcpBlocksReadAhead + 1);
  // Declared after the buffers they fill: destroyed (waited for) first on an exception. A source that
  // does not serve concurrent reads has each read wait for the read (not the checksum) before it.
  struct Pending {
    std::shared_future<void> read;   // the block's bytes are in its buffer
    std::shared_future<void> ready;  // and checksummed
  };
  std::deque<Pending> reading;  // blocks [next_fill, next_read)
  size_t next_read = 0, next_fill = 0;
  bool lent = false;  // ring[next_fill % ring.size()] is lent to the writer
  auto start_read = [&] {
    if (next_read >= expected.size()) return;
    Block& b = ring[next_read % ring.size()];
    b.tensor = expected[next_read].tensor;  // field by field: the buffers keep their memory
    b.offset = expected[next_read].offset;
    b.size = expected[next_read].size;
    std::shared_future<void> before;
    if (!src.concurrent_reads() && !reading.empty()) before = reading.back().read;
    auto read = std::make_shared<std::promise<void>>();
    Pending p;
    p.read = read->get_future().share();
    p.ready = std::async(std::launch::async, [&b, before, read, &read_block] {
                try {
                  if (before.valid()) before.wait();
                  read_block(b);
                } catch (...) {
                  read->set_exception(std::current_exception());
                  throw;
                }
                read->set_value();
                b.crc = dcp::crc32_update(0, b.data(), b.size);
              }).share();
    reading.push_back(std::move(p));
    ++next_read;
  };
  // The writer is done with the lent buffer: it takes the next read.
  auto give_back = [&] {
    if (!lent) return;
    lent = false;
    reading.pop_front();
    ++next_fill;
    start_read();
  };
  while (next_read < std::min(ring.size(), expected.size())) start_read();
  Block cur;  // a block asked for out of the expected order
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const Planned& t = tensors[ti];
    const ckpt::ParamTensor& st = src.tensors()[t.source];
    auto borrow = [&](uint64_t offset, size_t size) {
      give_back();  // the writer has written the block it was lent before
      const Block* b = nullptr;
      if (next_fill < expected.size() && expected[next_fill].tensor == ti && expected[next_fill].offset == offset &&
          expected[next_fill].size == size) {
        reading.front().ready.get();
        b = &ring[next_fill % ring.size()];
        lent = true;
      } else {
        cur.tensor = ti;
        cur.offset = offset;
        cur.size = size;
        read_block(cur);
        cur.crc = dcp::crc32_update(0, cur.data(), cur.size);
        b = &cur;
      }
      sum.bytes_read += b->read;
      progress.advance(size);
      return dcp::BorrowedBlock{b->data(), size, b->crc};
    };
    w.rank(0).write_tensor(dcp_key(st, t.spec.name), std::vector<uint64_t>(t.spec.shape.size(), 0), t.spec.shape,
                           dcp::BorrowBytes(borrow));
    give_back();
  }
  while (!reading.empty()) {
    reading.front().ready.wait();
    reading.pop_front();
  }
  if (o.states)
    for (size_t i = 0; i < src.objects().size(); ++i) {
      const std::vector<uint8_t> item = src.object_bytes(i);
      w.rank(0).write_bytes(src.objects()[i], item.size(), [&item](uint64_t offset, void* dst, size_t size) {
        std::memcpy(dst, item.data() + offset, size);
      });
      sum.bytes_read += item.size();
    }
  src.finish_reads();
  w.commit();
  staged.commit();
  sum.files = {staged.dir()};
  sum.tensors = tensors.size();
  sum.bytes_written = total;
  return sum;
}

}  // namespace fpg::app::convert
