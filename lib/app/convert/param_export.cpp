#include "app/convert/param_export.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "app/convert/export_files.h"
#include "app/convert/staged_output.h"
#include "ckpt/format_registry.h"
#include "ckpt/param_export.h"
#include "core/byte_buffer.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/tensor_file.h"
#include "core/thread_start.h"

namespace fpg::app::convert {
namespace {

// Units read, converted and written at once, for sources that serve concurrent reads: as many slabs
// in memory.
constexpr size_t kLanes = 4;

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
  // Units go to `lanes` threads, each taking the next unit in file order and reading, converting and
  // writing it into its own slab: reads of several units are in flight at once (the disk stays busy
  // across slab ends), and writes run beside them and beside each other (distinct byte ranges), so
  // that neither side waits for the other's slowest unit. A source that serves one read at a time
  // gets its reads in unit order, one after the other, while the other lane writes. Memory: one slab
  // per lane. The source is told the reads first (plan_reads), so that the disk reads ahead along
  // them and nothing else: an export of the weights alone asks for the weights, not the optimizer
  // state stored among them.
  const bool one_read = !src.concurrent_reads();
  const size_t lanes = std::min<size_t>(std::max<size_t>(units.size(), 1), one_read ? 2 : kLanes);
  {
    std::vector<ckpt::ParamRange> plan;
    for (const Unit& u : units) plan.push_back({tensors[u.tensor].source, u.lo, u.hi});
    src.plan_reads(std::move(plan), 2 * o.slab_bytes);
  }
  // A unit's bytes as read, and as converted (0 when it is written as read).
  auto read_bytes = [&](const Unit& u) {
    return (u.hi - u.lo) * std::max<uint64_t>(dtype_bits(src.tensors()[tensors[u.tensor].source].dtype) / 8, 1);
  };
  auto converted_bytes = [&](const Unit& u) -> uint64_t {
    const Planned& t = tensors[u.tensor];
    if (t.as_stored || src.tensors()[t.source].dtype == t.spec.dtype) return 0;
    return (u.hi - u.lo) * dtype_bits(t.spec.dtype) / 8;
  };
  uint64_t largest_in = 0, largest_converted = 0;  // bytes of a lane's buffers
  for (const Unit& u : units) {
    largest_in = std::max(largest_in, read_bytes(u));
    largest_converted = std::max(largest_converted, converted_bytes(u));
  }
  std::mutex mu;
  std::condition_variable done_cv;  // a unit written or a lane ended
  size_t next_unit = 0, lanes_running = 0;
  uint64_t bytes_read = 0, bytes_done = 0;
  // The error of the first unit in file order that failed, whichever lane saw it first: units after it
  // are dropped, those before it finish, so that a lane which could not make its buffers while an
  // earlier unit's read refused the file does not hide what is wrong with the file.
  std::exception_ptr error;
  size_t error_unit = SIZE_MAX;
  std::atomic<size_t> stop_at{SIZE_MAX};  // units from this one on are not started
  std::mutex read_mu;  // one_read: held across each read, taken in unit order (read_turn)
  std::condition_variable turn_cv;
  size_t read_turn = 0;
  auto halt = [&](size_t from) {
    for (size_t now = stop_at; from < now && !stop_at.compare_exchange_weak(now, from);) {
    }
    { std::lock_guard<std::mutex> l(read_mu); }
    turn_cv.notify_all();
  };
  auto lane = [&] {
    ByteBuffer in, converted;  // filled whole by the read or the conversion: never zero-filled first
    size_t k = SIZE_MAX;       // the unit in hand
    bool sized = false;
    try {
      for (;;) {
        {
          std::lock_guard<std::mutex> l(mu);
          if (next_unit >= std::min(units.size(), stop_at.load())) break;
          k = next_unit++;
        }
        // Each buffer made once, with the lane's first unit, at the largest size it takes: one grown
        // slab after slab would be fresh memory, faulted in and cleared by the kernel page by page,
        // before each read or conversion.
        if (!sized) {
          in.resize(static_cast<size_t>(largest_in));
          converted.resize(static_cast<size_t>(largest_converted));
          sized = true;
        }
        const Unit& u = units[k];
        const Planned& t = tensors[u.tensor];
        const ckpt::ParamTensor& st = src.tensors()[t.source];
        in.resize(read_bytes(u));
        if (one_read) {
          std::unique_lock<std::mutex> l(read_mu);
          turn_cv.wait(l, [&] { return read_turn == k || k >= stop_at; });
          if (k >= stop_at) break;
          src.read(t.source, u.lo, u.hi, in.data());
          ++read_turn;
          l.unlock();
          turn_cv.notify_all();
        } else {
          src.read(t.source, u.lo, u.hi, in.data());
        }
        const ByteBuffer* out = &in;  // written as read when the dtype is kept
        const uint64_t out_elem = t.as_stored ? 1 : dtype_bits(t.spec.dtype) / 8;
        if (const uint64_t c = converted_bytes(u)) {
          converted.resize(c);
          ckpt::convert_elements(in.data(), st.dtype, converted.data(), t.spec.dtype, u.hi - u.lo);
          out = &converted;
        }
        for (const Dest& d : u.dests) {
          TensorFileWriter& writer = output.writer(d.file);
          writer.write(writer.index(tensors[d.tensor].spec.name), u.lo * out_elem, out->data(), out->size());
        }
        {
          std::lock_guard<std::mutex> l(mu);
          bytes_read += in.size();
          bytes_done += out->size() * u.dests.size();
        }
        done_cv.notify_one();
      }
    } catch (...) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (k < error_unit) {
          error = std::current_exception();
          error_unit = k;
        }
      }
      halt(k);
    }
    {
      std::lock_guard<std::mutex> l(mu);
      --lanes_running;
    }
    done_cv.notify_one();
  };
  {
    std::vector<std::thread> threads;
    // Stops and joins the lanes however this scope is left (an exception of the progress included).
    struct Join {
      std::vector<std::thread>& threads;
      std::function<void(size_t)> halt;
      bool finished = false;
      ~Join() {
        if (!finished) halt(0);
        for (std::thread& th : threads) th.join();
      }
    } join{threads, halt};
    // The first lane the export cannot do without; a refused later one only means fewer units in flight.
    for (size_t i = 0; i < lanes; ++i) {
      {
        std::lock_guard<std::mutex> l(mu);
        ++lanes_running;
      }
      std::optional<std::thread> th =
          i == 0 ? std::optional<std::thread>(start_thread(lane, "the export's reads and writes")) : try_start_thread(lane);
      if (!th) {
        std::lock_guard<std::mutex> l(mu);
        --lanes_running;
        break;
      }
      threads.push_back(std::move(*th));
    }
    // Progress is reported on this thread, where it was made (its observer may be bound to it).
    uint64_t reported = 0;
    for (;;) {
      std::unique_lock<std::mutex> l(mu);
      done_cv.wait(l, [&] { return bytes_done != reported || lanes_running == 0; });
      const uint64_t step = bytes_done - reported;
      reported = bytes_done;
      const bool ended = lanes_running == 0;
      l.unlock();
      if (step) progress.advance(step);
      if (ended) break;
    }
    join.finished = true;
  }
  if (error) std::rethrow_exception(error);
  sum.bytes_read = bytes_read;
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
