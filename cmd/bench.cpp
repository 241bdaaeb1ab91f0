// fpgather bench: throughput figures as ratios against a baseline measured in the same process.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/chunk_codec.h"
#include "cli.h"
#include "json_output.h"
#include "cmd/bench/comm_bench.h"
#include "cmd/bench/export_bench.h"
#include "cmd/bench/gpu_optim_bench.h"
#include "cmd/bench/gpu_quantize_bench.h"
#include "cmd/bench/io_bench.h"
#include "cmd/bench/quantize_bench.h"
#include "cmd/bench/reshard_bench.h"
#include "cmd/bench/step_bench.h"
#include "cmd/bench/validate_bench.h"
#include "cmd/bench_dcp.h"
#include "cmd/option_range.h"
#include "app/train/trainer.h"
#include "comm/threads_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/spec_json.h"

namespace fpg::cli {
namespace {

struct BenchQuantizeArgs {
  uint64_t rows = 8192, cols = 8192;
  std::string threads;  // "1,2"; empty: 1 and --threads (or all hardware threads)
  std::string input = "both";
  std::vector<std::string> recipes;
  double min_seconds = 0.5;
};

// "1,2,4" -> {1, 2, 4}; `option` names the flag in errors.
std::vector<size_t> parse_counts(const std::string& list, const char* option) {
  std::vector<size_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (v < 1 || used != item.size()) throw std::invalid_argument(item);
      out.push_back(static_cast<size_t>(v));
    } catch (const std::exception&) {
      throw UsageError(std::string(option) + ": '" + item + "' is not a positive number");
    }
  }
  if (out.empty()) throw UsageError(std::string(option) + ": empty list");
  return out;
}

std::vector<size_t> parse_threads(const std::string& list, size_t global_threads) {
  if (!list.empty()) {
    const std::vector<size_t> counts = parse_counts(list, "--thread-counts");
    for (size_t n : counts)
      if (n > max_threads())
        throw UsageError("--thread-counts: " + std::to_string(n) + " threads is more than " + std::to_string(max_threads()));
    return counts;
  }
  std::vector<size_t> out{1};
  const size_t all = resolve_threads(global_threads);
  if (all > 1) out.push_back(all);
  return out;
}

const char* input_name(fp8::Input in) { return in == fp8::Input::f32 ? "fp32" : "bf16"; }

// The tensor is held as fp32 and bf16 with its FP8 output: 4 GiB elements is about 30 GiB.
constexpr uint64_t kMaxBenchElements = uint64_t{1} << 32;

void check_tensor_size(uint64_t rows, uint64_t cols) {
  if (rows > kMaxBenchElements / cols)
    throw UsageError("--rows x --cols must be at most " + std::to_string(kMaxBenchElements) + " elements, not " +
                     std::to_string(rows) + " x " + std::to_string(cols));
}

int run_bench_quantize(const BenchQuantizeArgs& a, const GlobalOptions& g) {
  check_tensor_size(a.rows, a.cols);
  bench::QuantizeBenchOptions o;
  o.rows = a.rows;
  o.cols = a.cols;
  o.threads = parse_threads(a.threads, g.threads);
  if (a.input == "fp32") o.inputs = {fp8::Input::f32};
  else if (a.input == "bf16") o.inputs = {fp8::Input::bf16};
  else if (a.input != "both") throw UsageError("--input must be fp32, bf16 or both");
  o.recipes = a.recipes;
  o.min_seconds = a.min_seconds;
  const auto rows = bench::run_quantize_bench(o);
  if (g.json) {
    nlohmann::json j = {{"benchmark", "quantize"}, {"rows", a.rows}, {"cols", a.cols}, {"results", nlohmann::json::array()}};
    for (const auto& r : rows)
      j["results"].push_back({{"recipe", r.recipe}, {"input", input_name(r.input)}, {"threads", r.threads},
                              {"input_bytes", r.input_bytes}, {"best_s", r.best_s}, {"median_s", r.median_s},
                              {"gbps", r.gbps}, {"ratio_to_memcpy", r.ratio_to_memcpy},
                              {"speedup_vs_1_thread", r.speedup_vs_1_thread}});
    print_json(j);
    return 0;
  }
  std::printf("quantize %llu x %llu (GB/s = input bytes / best time; ratio = GB/s / memcpy GB/s, same run)\n",
              static_cast<unsigned long long>(a.rows), static_cast<unsigned long long>(a.cols));
  std::printf("%-16s %-5s %7s %10s %10s %8s %8s\n", "recipe", "input", "threads", "ms", "GB/s", "ratio", "speedup");
  for (const auto& r : rows)
    std::printf("%-16s %-5s %7zu %10.2f %10.2f %8.2f %8.2f\n", r.recipe.c_str(), input_name(r.input), r.threads,
                r.best_s * 1e3, r.gbps, r.ratio_to_memcpy, r.speedup_vs_1_thread);
  return 0;
}

struct BenchExportArgs {
  bench::ExportBenchOptions o;
  std::string dtype = "fp32";
  bool weights_only = false;
  std::string to = "safetensors";
};

int run_bench_export(BenchExportArgs a, const GlobalOptions& g) {
  if (a.dtype == "bf16") a.o.export_options.weights = app::convert::ExportWeights::bf16;
  else if (a.dtype == "fp32") a.o.export_options.weights = app::convert::ExportWeights::fp32;
  else throw UsageError("--dtype must be bf16 or fp32, not '" + a.dtype + "'");
  a.o.export_options.states = !a.weights_only;
  if (a.to != "safetensors" && a.to != "dcp") throw UsageError("--to must be safetensors or dcp, not '" + a.to + "'");
  a.o.dcp = a.to == "dcp";
  const bench::ExportBenchResult r = bench::run_export_bench(a.o);
  if (g.json) {
    const nlohmann::json j = {{"benchmark", "export"},        {"checkpoint", a.o.checkpoint},
                              {"to", a.to},
                              {"dtype", a.dtype},             {"states", !a.weights_only},
                              {"bytes", r.bytes},             {"bytes_read", r.bytes_read},
                              {"plain_write_s", r.write_s},   {"plain_write_gbps", r.write_gbps()},
                              {"plain_read_s", r.read_s},     {"plain_read_gbps", r.read_gbps()},
                              {"duplex_s", r.duplex_s},       {"duplex_gbps", r.duplex_gbps()},
                              {"ratio_to_duplex", r.ratio_to_duplex()},
                              {"export_s", r.export_s},       {"export_gbps", r.export_gbps()},
                              {"ratio", r.ratio()},           {"ratio_to_serial", r.ratio_to_serial()},
                              {"peak_rss_before", r.peak_rss_before},
                              {"peak_rss_after", r.peak_rss_after}};
    print_json(j);
    return 0;
  }
  std::printf("export of %s to %s (%s weights%s): %.2f GB written, %.2f GB read\n", a.o.checkpoint.c_str(),
              a.to.c_str(), a.dtype.c_str(), a.weights_only ? "" : " + states", r.bytes / 1e9, r.bytes_read / 1e9);
  std::printf("%-20s %8s %8s\n", "what", "s", "GB/s");
  std::printf("%-20s %8.2f %8.2f\n", "plain write+fsync", r.write_s, r.write_gbps());
  std::printf("%-20s %8.2f %8.2f\n", "plain read (cold)", r.read_s, r.read_gbps());
  std::printf("%-20s %8.2f %8.2f  (read one file || write+fsync another: GB/s each way)\n", "duplex", r.duplex_s,
              r.duplex_gbps());
  std::printf("%-20s %8.2f %8.2f\n", "export (cold)", r.export_s, r.export_gbps());
  std::printf("ratio to min(read, write): %.2f; to reading then writing at those rates: %.2f; to duplex: "
              "%.2f (the target)\n",
              r.ratio(), r.ratio_to_serial(), r.ratio_to_duplex());
  std::printf("peak RSS %.1f MB (%.1f MB before the export)\n", r.peak_rss_after / 1e6, r.peak_rss_before / 1e6);
  return 0;
}

int run_bench_gpu_quantize(const bench::GpuQuantizeBenchOptions& o, const GlobalOptions& g) {
  check_tensor_size(o.rows, o.cols);
  const bench::GpuQuantizeReport r = bench::run_gpu_quantize_bench(o);
  if (g.json) {
    nlohmann::json j = {{"benchmark", "gpu-quantize"}, {"device", r.device}, {"rows", o.rows}, {"cols", o.cols},
                        {"model", o.model}, {"batch_params", r.batch_params}, {"batch_elements", r.batch_elements},
                        {"reps", o.reps}, {"results", nlohmann::json::array()}};
    for (const auto& x : r.rows)
      j["results"].push_back({{"recipe", x.recipe}, {"pass", x.pass}, {"elements", x.elements}, {"bytes", x.bytes},
                              {"median_ms", x.median_ms}, {"best_ms", x.best_ms}, {"gbps", x.gbps},
                              {"ratio_to_memcpy", x.ratio}});
    print_json(j);
    return 0;
  }
  std::printf("gpu-quantize on %s: %llu x %llu fp32 tensor; batch: %llu parameters of '%s' (%llu elements)\n",
              r.device.c_str(), static_cast<unsigned long long>(o.rows), static_cast<unsigned long long>(o.cols),
              static_cast<unsigned long long>(r.batch_params), o.model.c_str(),
              static_cast<unsigned long long>(r.batch_elements));
  std::printf("(GB/s = minimum bytes moved / median time; ratio = GB/s / cudaMemcpy D2D GB/s, same run)\n");
  std::printf("%-20s %-10s %12s %10s %10s %10s %7s\n", "recipe", "pass", "elements", "MB", "median ms", "GB/s", "ratio");
  for (const auto& x : r.rows)
    std::printf("%-20s %-10s %12llu %10.1f %10.3f %10.1f %7.3f\n", x.recipe.c_str(), x.pass.c_str(),
                static_cast<unsigned long long>(x.elements), x.bytes / 1e6, x.median_ms, x.gbps, x.ratio);
  return 0;
}

struct BenchIoArgs {
  bench::IoBenchOptions o;
  double gib = 1.0;
  bool copy = false;
};

int run_bench_io(BenchIoArgs a, const GlobalOptions& g) {
  if (a.gib <= 0) throw UsageError("--size-gib must be positive");
  a.o.bytes = static_cast<uint64_t>(a.gib * (1ull << 30)) / 4 * 4;
  a.o.borrowed = !a.copy;
  for (const auto& c : a.o.compressions) ckpt::parse_compression(c);  // refuse bad values before timing
  const auto rows = bench::run_io_bench(a.o);
  if (g.json) {
    nlohmann::json j = {{"benchmark", "io"}, {"bytes", a.o.bytes}, {"dir", a.o.dir}, {"ranks", a.o.ranks},
                        {"threads", resolve_threads(g.threads)}, {"reps", a.o.reps}, {"borrowed", a.o.borrowed},
                        {"results", nlohmann::json::array()}};
    for (const auto& r : rows) {
      j["results"].push_back({{"what", r.what}, {"seconds", r.seconds}, {"gbps", r.gbps}, {"ratio_to_plain", r.ratio},
                              {"compression_ratio", r.compression}, {"extra_peak_mb", r.extra_peak_mb},
                              {"rep_seconds", r.rep_seconds}});
      if (r.ratio_to_none >= 0) j["results"].back()["ratio_to_none"] = r.ratio_to_none;
      if (r.write_s >= 0)
        j["results"].back()["pipeline"] = {{"copy_s", r.copy_s}, {"slot_wait_s", r.wait_s}, {"encode_thread_s", r.encode_s},
                                           {"write_s", r.write_s}};
    }
    print_json(j);
    return 0;
  }
  std::printf("io: %.2f GiB fp32 state in %s, %u rank files, %zu threads, median of %u interleaved reps%s (ratio = GB/s "
              "/ plain file GB/s, same run)\n",
              a.o.bytes / double(1ull << 30), a.o.dir.c_str(), a.o.ranks, resolve_threads(g.threads), a.o.reps,
              a.o.borrowed ? "" : ", saves copying (--copy)");
  std::printf("%-20s %9s %9s %8s %12s %14s  %s\n", "what", "s", "GB/s", "ratio", "compression", "extra peak MB", "reps s");
  for (const auto& r : rows) {
    std::printf("%-20s %9.3f %9.3f %8.2f %11.3fx", r.what.c_str(), r.seconds, r.gbps, r.ratio, r.compression);
    if (r.extra_peak_mb >= 0) std::printf(" %14.1f ", r.extra_peak_mb);
    else std::printf(" %14s ", "-");
    for (double x : r.rep_seconds) std::printf(" %.3f", x);
    std::printf("\n");
    if (r.write_s >= 0)
      std::printf("  (copy into slots %.3f s, waiting for a slot %.3f s, encoding %.3f thread-s, writer thread %.3f s)\n",
                  r.copy_s, r.wait_s, r.encode_s, r.write_s);
  }
  for (const auto& r : rows)
    if (r.ratio_to_none >= 0) {
      const std::string dir = r.what.substr(0, 4), enc = r.what.substr(5);
      std::printf("%s %s / %s none: %.2f\n", dir.c_str(), enc.c_str(), dir.c_str(), r.ratio_to_none);
    }
  return 0;
}

int run_bench_validate(const bench::ValidateBenchOptions& o, const GlobalOptions& g) {
  const auto r = bench::run_validate_bench(o);
  if (g.json) {
    nlohmann::json j = {{"benchmark", "validate"}, {"chunks", r.chunks}, {"keys", r.keys}, {"runs", r.runs},
                        {"padding_intervals", r.padding}, {"index_bytes", r.index_bytes},
                        {"index_bytes_per_chunk", r.bytes_per_chunk()}, {"write_s", r.write_s}, {"read_s", r.read_s},
                        {"check_s", r.check_s}, {"files_s", r.files_s}, {"chunks_per_s", r.chunks_per_s()},
                        {"problems", r.problems}};
    print_json(j);
    return 0;
  }
  std::printf("validate (index only): %llu chunks, %llu keys, %llu runs, %llu padding intervals\n",
              static_cast<unsigned long long>(r.chunks), static_cast<unsigned long long>(r.keys),
              static_cast<unsigned long long>(r.runs), static_cast<unsigned long long>(r.padding));
  std::printf("index size        %llu bytes, %.2f bytes/chunk\n", static_cast<unsigned long long>(r.index_bytes),
              r.bytes_per_chunk());
  std::printf("write index       %.3f s\n", r.write_s);
  std::printf("read index        %.3f s\n", r.read_s);
  std::printf("coverage checks   %.3f s\n", r.check_s);
  std::printf("file checks       %.3f s\n", r.files_s);
  std::printf("validate total    %.3f s = %.2f M chunks/s (read + checks), %llu problems\n", r.total_s(),
              r.chunks_per_s() / 1e6, static_cast<unsigned long long>(r.problems));
  return 0;
}

struct BenchStepArgs {
  std::string model = "base";
  std::string dp_list = "1,2,4";
  uint64_t steps = 3;
  int64_t micro_batch = 32;
  double min_seconds = 0.3;
};

int run_bench_step(const BenchStepArgs& a, const GlobalOptions& g) {
  bench::StepBenchOptions o;
  o.spec = model::resolve_model(a.model);
  o.dp.clear();
  for (size_t v : parse_counts(a.dp_list, "--dp-list")) {
    if (v > 1024) throw UsageError("--dp-list: " + std::to_string(v) + " ranks is too many");
    o.dp.push_back(static_cast<uint32_t>(v));
  }
  o.steps = a.steps;
  o.micro_batch = a.micro_batch;
  o.min_seconds = a.min_seconds;
  const bench::StepBenchResult r = bench::run_step_bench(o);
  if (g.json) {
    nlohmann::json j = {{"benchmark", "step"}, {"model", o.spec.name}, {"params", o.spec.numel()},
                        {"steps", a.steps}, {"micro_batch", a.micro_batch},
                        {"phases", nlohmann::json::array()}, {"optimizer", nlohmann::json::array()}};
    for (const auto& p : r.phases)
      j["phases"].push_back({{"dp", p.dp}, {"step_ms", p.step_ms},
                             {"forward_backward_ms", p.times.forward_backward * 1e3},
                             {"reduce_scatter_ms", p.times.reduce_scatter * 1e3},
                             {"optimizer_ms", p.times.optimizer * 1e3}, {"copy_back_ms", p.times.copy_back * 1e3},
                             {"gather_ms", p.times.gather * 1e3}, {"decode_ms", p.times.decode * 1e3}});
    for (const auto& q : r.optimizer)
      j["optimizer"].push_back({{"optimizer", q.optimizer}, {"dp", q.dp}, {"elements", q.elements},
                                {"bytes", q.bytes}, {"best_s", q.best_s}, {"median_s", q.median_s},
                                {"gbps", q.gbps}, {"ratio_to_memcpy", q.ratio_to_memcpy}});
    print_json(j);
    return 0;
  }
  std::printf("step of %s (%llu params), micro-batch %lld, median of %llu steps, rank 0 (ms)\n", o.spec.name.c_str(),
              static_cast<unsigned long long>(o.spec.numel()), static_cast<long long>(a.micro_batch),
              static_cast<unsigned long long>(a.steps));
  std::printf("%4s %10s %10s %10s %10s %10s %10s %10s\n", "dp", "step", "fwd/bwd", "red-scat", "optimizer",
              "copy-back", "gather", "decode");
  for (const auto& p : r.phases)
    std::printf("%4u %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", p.dp, p.step_ms, p.times.forward_backward * 1e3,
                p.times.reduce_scatter * 1e3, p.times.optimizer * 1e3, p.times.copy_back * 1e3, p.times.gather * 1e3,
                p.times.decode * 1e3);
  std::printf("\noptimizer on rank 0's fragments, 1 thread (GB/s = bytes touched / best time; ratio vs memcpy of "
              "the same bytes)\n");
  std::printf("%-8s %4s %12s %14s %10s %8s %7s\n", "", "dp", "elements", "bytes", "ms", "GB/s", "ratio");
  for (const auto& q : r.optimizer)
    std::printf("%-8s %4u %12llu %14llu %10.2f %8.2f %7.2f\n", q.optimizer.c_str(), q.dp,
                static_cast<unsigned long long>(q.elements), static_cast<unsigned long long>(q.bytes), q.best_s * 1e3,
                q.gbps, q.ratio_to_memcpy);
  return 0;
}

struct BenchReshardArgs {
  bench::ReshardBenchOptions o;
  double plain_gib = 1;
};

int run_bench_reshard(BenchReshardArgs a, const GlobalOptions& g) {
  a.o.plain_bytes = static_cast<uint64_t>(a.plain_gib * (1ull << 30));
  a.o.threads = g.threads;
  const auto r = bench::run_reshard_bench(a.o);
  const double disk = std::min(r.plain_write_gbps, r.plain_read_gbps);
  if (g.json) {
    nlohmann::json j = {{"benchmark", "reshard"}, {"from_dp", a.o.from_dp}, {"to_dp", a.o.to_dp},
                        {"threads", ThreadPool::global().size()}, {"plain_write_gbps", r.plain_write_gbps},
                        {"plain_read_gbps", r.plain_read_gbps}, {"duplex_gbps", r.duplex_gbps},
                        {"results", nlohmann::json::array()}};
    if (!a.o.megatron.empty()) {
      j["megatron_layers"] = a.o.megatron_layers;
      j["megatron_hidden"] = a.o.megatron_hidden;
    }
    for (const auto& x : r.rows)
      j["results"].push_back({{"model", x.model}, {"bytes_read", x.bytes_read}, {"bytes_written", x.bytes_written},
                              {"train_s", x.train_s}, {"reshard_s", x.reshard_s}, {"gbps", x.gbps},
                              {"ratio_to_disk", x.ratio}, {"ratio_to_serial_bound", x.serial_ratio},
                              {"ratio_to_duplex", x.duplex_ratio}, {"same_size_duplex_gbps", x.same_size_duplex_gbps},
                              {"ratio_to_same_size_duplex", x.same_size_duplex_ratio},
                              {"peak_rss_bytes", x.peak_rss}});
    print_json(j);
    return 0;
  }
  std::printf("reshard DP %u -> %u, uncompressed, source evicted from the page cache, %zu threads\n", a.o.from_dp,
              a.o.to_dp, ThreadPool::global().size());
  std::printf("disk: plain write+fsync %.3f GB/s, plain read (cold) %.3f GB/s; min %.3f GB/s\n", r.plain_write_gbps,
              r.plain_read_gbps, disk);
  std::printf("disk duplex (read one file || write+fsync another, at once): %.3f GB/s each way\n", r.duplex_gbps);
  std::printf("(ratio = GB/s / min(read, write); serial = GB/s / (1 / (1/read + 1/write)), the bound when reads and "
              "writes share the disk; duplex = GB/s / the duplex rate above; same-size duplex: the duplex rate of as "
              "many bytes as the reshard wrote, measured after it, and GB/s / that rate, the target)\n");
  if (!a.o.megatron.empty())
    std::printf("megatron-*: a synthetic TP 2 x PP 2 x DP 2 dp_reshardable torch_dist checkpoint of %llu layers (hidden "
                "%llu), resharded --dp 4 (dp), --tp 1 --pp 1 --dp 2 --bucket-size 40000000 (tp), --dp 2 --to "
                "fully_reshardable (full)\n",
                static_cast<unsigned long long>(a.o.megatron_layers),
                static_cast<unsigned long long>(a.o.megatron_hidden));
  std::printf("%-13s %14s %14s %10s %9s %8s %8s %8s %10s %8s %14s\n", "model", "bytes read", "bytes written",
              "reshard s", "GB/s", "ratio", "serial", "duplex", "same GB/s", "/ same", "peak RSS MiB");
  for (const auto& x : r.rows)
    std::printf("%-13s %14llu %14llu %10.3f %9.3f %8.2f %8.2f %8.2f %10.3f %8.2f %14.1f\n", x.model.c_str(),
                static_cast<unsigned long long>(x.bytes_read), static_cast<unsigned long long>(x.bytes_written),
                x.reshard_s, x.gbps, x.ratio, x.serial_ratio, x.duplex_ratio, x.same_size_duplex_gbps,
                x.same_size_duplex_ratio, x.peak_rss / 1048576.0);
  return 0;
}

struct BenchCommArgs {
  std::string models = "base,1b";
  uint32_t dp = 2;
  int iters = 20;
};

int run_bench_comm(const BenchCommArgs& a, const GlobalOptions& g) {
  bench::CommBenchOptions o;
  o.models.clear();
  std::stringstream ss(a.models);
  for (std::string m; std::getline(ss, m, ',');)
    if (!m.empty()) o.models.push_back(m);
  if (o.models.empty()) throw UsageError("--models: empty list");
  if (a.dp < 2) throw UsageError("--dp: bus bandwidth needs at least 2 ranks");
  o.dp = a.dp;
  o.iters = a.iters;
  const auto rows = bench::run_comm_bench(o);
  if (rows.empty()) return 0;  // under mpirun: rank 0's process reports
  if (g.json) {
    nlohmann::json j = {{"benchmark", "comm"}, {"backend", "nccl"}, {"dp", a.dp}, {"iters", a.iters},
                        {"results", nlohmann::json::array()}};
    for (const auto& r : rows)
      j["results"].push_back({{"model", r.model}, {"op", r.op}, {"dtype", r.dtype}, {"shard_bytes", r.shard_bytes},
                              {"total_bytes", r.total_bytes}, {"median_ms", r.median_ms},
                              {"algbw_gbps", r.algbw_gbps}, {"busbw_gbps", r.busbw_gbps}});
    print_json(j);
    return 0;
  }
  std::printf("nccl collectives of a train step, dp %u, median of %d (in place, rank 0's compute stream)\n", a.dp,
              a.iters);
  std::printf("%-8s %-15s %-5s %14s %10s %10s %10s\n", "model", "op", "dtype", "total bytes", "ms", "algbw", "busbw");
  for (const auto& r : rows)
    std::printf("%-8s %-15s %-5s %14llu %10.3f %10.1f %10.1f\n", r.model.c_str(), r.op.c_str(), r.dtype.c_str(),
                static_cast<unsigned long long>(r.total_bytes), r.median_ms, r.algbw_gbps, r.busbw_gbps);
  return 0;
}


struct BenchGpuOptimArgs {
  std::string model = "base";
  std::string muon_shapes = "4096x4096,4096x14336,8192x8192";
  int warmup = 3, iters = 20;
};

// "4096x4096,4096x14336" -> {(4096, 4096), (4096, 14336)}; "" -> none.
std::vector<std::pair<int64_t, int64_t>> parse_shapes(const std::string& list) {
  std::vector<std::pair<int64_t, int64_t>> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t x = item.find('x');
    try {
      size_t u1 = 0, u2 = 0;
      if (x == std::string::npos) throw std::invalid_argument(item);
      const long long r = std::stoll(item.substr(0, x), &u1), c = std::stoll(item.substr(x + 1), &u2);
      if (r < 1 || c < 1 || u1 != x || u2 != item.size() - x - 1) throw std::invalid_argument(item);
      out.emplace_back(r, c);
    } catch (const std::exception&) {
      throw UsageError("--muon-shapes: '" + item + "' is not ROWSxCOLS");
    }
  }
  return out;
}

int run_bench_gpu_optim(const BenchGpuOptimArgs& a, const GlobalOptions& g) {
  bench::GpuOptimBenchOptions o;
  o.spec = model::resolve_model(a.model);
  o.muon_shapes = parse_shapes(a.muon_shapes);
  o.warmup = a.warmup;
  o.iters = a.iters;
  const bench::GpuOptimBenchResult r = bench::run_gpu_optim_bench(o);
  if (g.json) {
    nlohmann::json j = {{"benchmark", "gpu-optim"}, {"device", r.device}, {"model", o.spec.name},
                        {"param_shapes", r.param_shapes}, {"model_muon_shapes", nlohmann::json::array()},
                        {"muon_shapes", nlohmann::json::array()}, {"iters", a.iters},
                        {"results", nlohmann::json::array()}};
    for (const auto& s : r.model_muon_shapes) j["model_muon_shapes"].push_back({s.first, s.second});
    for (const auto& s : o.muon_shapes) j["muon_shapes"].push_back({s.first, s.second});
    for (const auto& x : r.rows)
      j["results"].push_back({{"what", x.what}, {"shape", x.shape}, {"matrices", x.matrices},
                              {"elements", x.elements}, {"bytes", x.bytes}, {"median_ms", x.median_ms},
                              {"min_ms", x.min_ms}, {"gbps", x.gbps}, {"ratio_to_copy", x.ratio_to_copy},
                              {"tflops", x.tflops}, {"gemm", x.gemm}});
    print_json(j);
    return 0;
  }
  std::printf("gpu-optim on %s, model %s: median of %d launches (GB/s = bytes read + written / median; "
              "ratio = GB/s / D2D copy GB/s)\n", r.device.c_str(), o.spec.name.c_str(), a.iters);
  std::printf("%-10s %-12s %9s %13s %10s %9s %7s %8s %s\n", "what", "shape", "matrices", "elements", "ms", "GB/s",
              "ratio", "TFLOP/s", "gemm");
  for (const auto& x : r.rows)
    std::printf("%-10s %-12s %9lld %13lld %10.3f %9.1f %7.3f %8.1f %s\n", x.what.c_str(), x.shape.c_str(),
                static_cast<long long>(x.matrices), static_cast<long long>(x.elements), x.median_ms, x.gbps,
                x.ratio_to_copy, x.tflops, x.gemm.c_str());
  return 0;
}
}  // namespace

void register_bench(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto* cmd = app.add_subcommand("bench", "Measure throughput against an in-process baseline");
  cmd->require_subcommand(1);
  auto args = std::make_shared<BenchQuantizeArgs>();
  auto* q = cmd->add_subcommand("quantize", "FP8 recipes vs memcpy of the same input bytes");
  const double inf = std::numeric_limits<double>::infinity();
  const uint64_t dim = uint64_t{1} << 24;  // rows x cols is bounded too (kMaxBenchElements)
  integer_range(q->add_option("--rows", args->rows, "Rows M of the tensor"), 1, dim)->capture_default_str();
  integer_range(q->add_option("--cols", args->cols, "Columns K of the tensor; rows x cols at most 2^32"), 1, dim)
      ->capture_default_str();
  q->add_option("--thread-counts", args->threads,
                "Comma list of thread counts, each at most --threads' bound (default: 1 and --threads)");
  q->add_option("--input", args->input, "fp32, bf16 or both")->capture_default_str();
  q->add_option("--recipe", args->recipes,
                "tensorwise, blockwise, blockwise-1x128, mxfp8, mxfp8-both (repeatable; default all)");
  number_range(q->add_option("--min-seconds", args->min_seconds, "Minimum time per measurement"), 0, inf)
      ->capture_default_str();
  q->callback([args, &global, &run] { run = [args, &global] { return run_bench_quantize(*args, global); }; });

  auto gq = std::make_shared<bench::GpuQuantizeBenchOptions>();
  auto* gqc = cmd->add_subcommand("gpu-quantize", "FP8 kernels on the GPU vs cudaMemcpy; batched copy-back");
  integer_range(gqc->add_option("--rows", gq->rows, "Rows M of the single tensor"), 1, dim)->capture_default_str();
  integer_range(gqc->add_option("--cols", gq->cols, "Columns K of the single tensor; rows x cols at most 2^32"), 1, dim)
      ->capture_default_str();
  gqc->add_option("--recipe", gq->recipes,
                  "tensorwise, delayed, blockwise-1x128, blockwise, mxfp8, mxfp8-floor, mxfp8-both "
                  "(repeatable; default all)");
  gqc->add_option("--model", gq->model, "Preset whose parameter shapes the batched copy-back uses")
      ->capture_default_str();
  integer_range(gqc->add_option("--min-params", gq->min_params, "Repeat the preset's parameters until there are this many"),
                1, 1'000'000)
      ->capture_default_str();
  integer_range(gqc->add_option("--reps", gq->reps, "Timed repetitions per figure (median reported)"), 1, 1'000'000)
      ->capture_default_str();
  gqc->add_option("--shapes-json", gq->shapes_json, "Write the batch's parameter shapes to this file");
  gqc->callback([gq, &global, &run] { run = [gq, &global] { return run_bench_gpu_quantize(*gq, global); }; });

  auto io = std::make_shared<BenchIoArgs>();
  auto* i = cmd->add_subcommand("io", "Checkpoint save/load vs a plain large file write/read, same run");
  i->add_option("--dir", io->o.dir, "Directory for the files (removed afterwards)")->capture_default_str();
  // The state is held in memory.
  number_range(i->add_option("--size-gib", io->gib, "State size in GiB"), 0, 4096, true)->capture_default_str();
  integer_range(i->add_option("--ranks", io->o.ranks, "Rank files the state is split over"), 1, 65536)
      ->capture_default_str();
  integer_range(i->add_option("--chunk-bytes", io->o.chunk_bytes, "Checkpoint chunk size"), 1, ckpt::kMaxChunkBytes)
      ->capture_default_str();
  i->add_option("--compress", io->o.compressions, "Encodings to measure (repeatable; default none and zstd:1)");
  integer_range(i->add_option("--reps", io->o.reps, "Times each measurement is made, interleaved (medians reported)"), 1,
                1000)
      ->capture_default_str();
  i->add_flag("--copy", io->copy, "Saves copy their chunks (RankWriter::write) instead of lending the state in place");
  i->callback([io, &global, &run] { run = [io, &global] { return run_bench_io(*io, global); }; });

  auto ra = std::make_shared<BenchReshardArgs>();
  auto* rs = cmd->add_subcommand("reshard", "Reshard throughput vs min(plain read, write), and peak RSS, at two sizes");
  rs->add_option("--dir", ra->o.dir, "Directory for the checkpoints (removed afterwards)")->capture_default_str();
  auto* models = rs->add_option("--models", ra->o.models,
                                "Presets to save and reshard (repeatable; default small and base, none with --megatron)");
  with_values(rs->add_option("--megatron", ra->o.megatron,
                             "Megatron cases on a synthetic TP 2 x PP 2 x DP 2 torch_dist checkpoint (repeatable): dp "
                             "(--dp 4), tp (--tp 1 --pp 1 --dp 2), full (--dp 2 --to fully_reshardable)"),
              {"dp", "tp", "full"});
  integer_range(rs->add_option("--megatron-layers", ra->o.megatron_layers,
                               "Layers of the synthetic Megatron checkpoint (12 at hidden 1024: 3.6 GB)"),
                2, 4096)
      ->capture_default_str();
  integer_range(rs->add_option("--megatron-hidden", ra->o.megatron_hidden,
                               "Hidden size of the synthetic Megatron checkpoint (FFN 4x, 16 heads, 8 query groups, "
                               "vocabulary 32768)"),
                16, 65536)
      ->capture_default_str();
  integer_range(rs->add_option("--from-dp", ra->o.from_dp, "DP size of the saved checkpoint"), 1, comm::kMaxThreadsRanks)
      ->capture_default_str();
  integer_range(rs->add_option("--to-dp", ra->o.to_dp, "DP size to reshard to"), 1, comm::kMaxThreadsRanks)
      ->capture_default_str();
  number_range(rs->add_option("--plain-gib", ra->plain_gib, "Size of the plain-file disk baseline in GiB"), 0, 4096, true)
      ->capture_default_str();
  rs->callback([ra, models, &global, &run] {
    if (!ra->o.megatron.empty() && models->count() == 0) ra->o.models.clear();
    run = [ra, &global] { return run_bench_reshard(*ra, global); };
  });

  auto ex = std::make_shared<BenchExportArgs>();
  auto* e = cmd->add_subcommand("export", "Checkpoint -> safetensors or DCP export vs a plain file write/read, same run");
  e->add_option("CKPT", ex->o.checkpoint, "The checkpoint (or a root holding `latest`)")->required();
  e->add_option("--dir", ex->o.dir, "Directory for the export and the plain file (removed afterwards)")
      ->capture_default_str();
  e->add_option("--dtype", ex->dtype, "Weights: fp32 (the masters) or bf16")->capture_default_str();
  e->add_flag("--weights-only", ex->weights_only, "Leave out the masters and optimizer states (--states)");
  e->add_option("--to", ex->to, "Export format: safetensors or dcp (as `convert --to dcp`)")->capture_default_str();
  e->callback([ex, &global, &run] { run = [ex, &global] { return run_bench_export(*ex, global); }; });

  auto va = std::make_shared<bench::ValidateBenchOptions>();
  auto* v = cmd->add_subcommand("validate", "Index-only validation of a synthetic index: chunks/s and bytes/chunk");
  v->add_option("--dir", va->dir, "Directory for the index (removed afterwards)")->capture_default_str();
  // The index is built in memory.
  integer_range(v->add_option("--chunks", va->chunks, "Chunks in the synthetic index"), 1, 100'000'000)
      ->capture_default_str();
  integer_range(v->add_option("--keys", va->keys, "Keys"), 1, 10'000'000)->capture_default_str();
  integer_range(v->add_option("--ranks", va->ranks, "Rank files"), 1, 65536)->capture_default_str();
  v->callback([va, &global, &run] { run = [va, &global] { return run_bench_validate(*va, global); }; });
  auto sargs = std::make_shared<BenchStepArgs>();
  auto* st = cmd->add_subcommand("step", "Per-phase time of a training step at several DP sizes; optimizer vs memcpy");
  st->add_option("--model", sargs->model, "Preset or JSON spec of the built-in network")->capture_default_str();
  st->add_option("--dp-list", sargs->dp_list, "Comma list of DP sizes")->capture_default_str();
  integer_range(st->add_option("--steps", sargs->steps, "Training steps per DP size (the median is reported)"), 1,
                app::train::kMaxTrainSteps)
      ->capture_default_str();
  integer_range(st->add_option("--micro-batch", sargs->micro_batch, "Rows per micro-batch"), 1,
                static_cast<uint64_t>(app::train::kMaxMicroBatch))
      ->capture_default_str();
  number_range(st->add_option("--min-seconds", sargs->min_seconds, "Minimum time per optimizer/memcpy measurement"), 0,
               inf)
      ->capture_default_str();
  st->callback([sargs, &global, &run] { run = [sargs, &global] { return run_bench_step(*sargs, global); }; });
  auto cargs = std::make_shared<BenchCommArgs>();
  auto* cm = cmd->add_subcommand("comm", "NCCL all-gather/reduce-scatter bus bandwidth at a train step's bucket sizes");
  cm->add_option("--models", cargs->models, "Comma list of presets or JSON specs")->capture_default_str();
  integer_range(cm->add_option("--dp", cargs->dp, "Ranks (local GPUs, or mpirun processes)"), 2, comm::kMaxThreadsRanks)
      ->capture_default_str();
  integer_range(cm->add_option("--iters", cargs->iters, "Timed iterations per size (median), after 5 warm-up"), 1,
                1'000'000)
      ->capture_default_str();
  cm->callback([cargs, &global, &run] { run = [cargs, &global] { return run_bench_comm(*cargs, global); }; });

  auto gargs = std::make_shared<BenchGpuOptimArgs>();
  auto* go = cmd->add_subcommand("gpu-optim", "GPU fused AdamW/Lion, grad norm vs D2D copy; Muon step time (CUDA)");
  go->add_option("--model", gargs->model, "Preset or JSON spec whose parameters are the fragments")
      ->capture_default_str();
  go->add_option("--muon-shapes", gargs->muon_shapes, "Comma list of ROWSxCOLS matrices for the Muon step (may be empty)")
      ->capture_default_str();
  integer_range(go->add_option("--warmup", gargs->warmup, "Untimed launches before timing"), 0, 1'000'000)
      ->capture_default_str();
  integer_range(go->add_option("--iters", gargs->iters, "Timed launches (the median is reported)"), 1, 1'000'000)
      ->capture_default_str();
  go->callback([gargs, &global, &run] { run = [gargs, &global] { return run_bench_gpu_optim(*gargs, global); }; });

  register_bench_dcp(*cmd, global, run);
}

}  // namespace fpg::cli
