// fpgather bench: throughput figures as ratios against a baseline measured in the same process.
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/quantize_bench.h"
#include "cli.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace fpg::cli {
namespace {

struct BenchQuantizeArgs {
  uint64_t rows = 8192, cols = 8192;
  std::string threads;  // "1,2"; empty: 1 and --threads (or all hardware threads)
  std::string input = "both";
  std::vector<std::string> recipes;
  double min_seconds = 0.5;
};

std::vector<size_t> parse_threads(const std::string& list, size_t global_threads) {
  std::vector<size_t> out;
  if (list.empty()) {
    out.push_back(1);
    const size_t all = resolve_threads(global_threads);
    if (all > 1) out.push_back(all);
    return out;
  }
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      const long v = std::stol(item);
      if (v < 1) throw std::invalid_argument(item);
      out.push_back(static_cast<size_t>(v));
    } catch (const std::exception&) {
      throw UsageError("--thread-counts: '" + item + "' is not a positive number");
    }
  }
  return out;
}

const char* input_name(fp8::Input in) { return in == fp8::Input::f32 ? "fp32" : "bf16"; }

int run_bench_quantize(const BenchQuantizeArgs& a, const GlobalOptions& g) {
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
    std::printf("%s\n", j.dump(2).c_str());
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

}  // namespace

void register_bench(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto* cmd = app.add_subcommand("bench", "Measure throughput against an in-process baseline");
  cmd->require_subcommand(1);
  auto args = std::make_shared<BenchQuantizeArgs>();
  auto* q = cmd->add_subcommand("quantize", "FP8 recipes vs memcpy of the same input bytes");
  q->add_option("--rows", args->rows, "Rows M of the tensor")->capture_default_str();
  q->add_option("--cols", args->cols, "Columns K of the tensor")->capture_default_str();
  q->add_option("--thread-counts", args->threads, "Comma list of thread counts (default: 1 and --threads)");
  q->add_option("--input", args->input, "fp32, bf16 or both")->capture_default_str();
  q->add_option("--recipe", args->recipes,
                "tensorwise, blockwise, blockwise-1x128, mxfp8, mxfp8-both (repeatable; default all)");
  q->add_option("--min-seconds", args->min_seconds, "Minimum time per measurement")->capture_default_str();
  q->callback([args, &global, &run] { run = [args, &global] { return run_bench_quantize(*args, global); }; });
}

}  // namespace fpg::cli
