#include "cmd/bench/quantize_bench.h"

#include <map>
#include <random>

#include "cmd/bench/memcpy_baseline.h"
#include "cmd/bench/timing.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "core/thread_pool.h"
#include "fp8/quantize.h"

namespace fpg::bench {
namespace {

struct NamedRecipe {
  std::string name;
  fp8::Recipe recipe;
};

std::vector<NamedRecipe> all_recipes() {
  return {
      {"tensorwise", fp8::Recipe::tensorwise()},
      {"blockwise", fp8::Recipe::blockwise_128x128()},
      {"blockwise-1x128", fp8::Recipe::blockwise_1x128()},
      {"mxfp8", fp8::Recipe::mxfp8()},
      {"mxfp8-both", fp8::Recipe::mxfp8(fp8::Format::e4m3, fp8::MxRule::rceil, true, true)},
  };
}

std::vector<NamedRecipe> chosen_recipes(const std::vector<std::string>& names) {
  const auto all = all_recipes();
  if (names.empty()) return all;
  std::vector<NamedRecipe> out;
  for (const auto& n : names) {
    bool found = false;
    for (const auto& r : all)
      if (r.name == n) out.push_back(r), found = true;
    if (!found) throw UsageError("bench quantize: unknown recipe '" + n + "'");
  }
  return out;
}

// Gaussian values with a few outliers, as weights look; the same for every run.
std::vector<float> make_values(uint64_t n) {
  std::vector<float> v(n);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& x : v) x = normal(rng);
  for (uint64_t i = 0; i < n; i += 4099) v[i] *= 50.0f;
  return v;
}

}  // namespace

std::vector<QuantizeBenchRow> run_quantize_bench(const QuantizeBenchOptions& opt) {
  const auto recipes = chosen_recipes(opt.recipes);
  const uint64_t n = opt.rows * opt.cols;
  const std::vector<float> f32 = make_values(n);
  std::vector<uint16_t> bf16(n);
  for (uint64_t i = 0; i < n; ++i) bf16[i] = bf16_from_float(f32[i]);
  std::vector<uint8_t> out(n), out_col(n), copy(n * 4);

  std::vector<QuantizeBenchRow> rows;
  std::map<std::pair<std::string, int>, double> one_thread;  // (recipe, input) -> best time at 1 thread
  for (size_t threads : opt.threads) {
    ThreadPool pool(threads);
    for (fp8::Input in : opt.inputs) {
      const void* src = in == fp8::Input::f32 ? static_cast<const void*>(f32.data()) : bf16.data();
      const uint64_t bytes = n * (in == fp8::Input::f32 ? 4 : 2);
      auto add = [&](const std::string& name, const Timing& t, double memcpy_gbps) {
        QuantizeBenchRow r;
        r.recipe = name;
        r.input = in;
        r.threads = pool.size();
        r.input_bytes = bytes;
        r.best_s = t.best;
        r.median_s = t.median;
        r.gbps = gbps(bytes, t.best);
        r.ratio_to_memcpy = memcpy_gbps > 0 ? r.gbps / memcpy_gbps : 1.0;
        const auto key = std::make_pair(name, static_cast<int>(in));
        if (pool.size() == 1) one_thread[key] = t.best;
        if (one_thread.count(key)) r.speedup_vs_1_thread = one_thread[key] / t.best;
        rows.push_back(r);
        return r.gbps;
      };
      const Timing base = time_it([&] { parallel_memcpy(pool, copy.data(), src, bytes); }, 3, opt.min_seconds);
      const double memcpy_gbps = add("memcpy", base, 0);
      for (const auto& nr : recipes) {
        const fp8::Plan plan = fp8::make_plan(nr.recipe, in, opt.rows, opt.cols, nr.name);
        fp8::AmaxGrid amax;
        fp8::Scales scales;
        fp8::QuantizeOptions qo;
        qo.pool = &pool;
        const Timing t = time_it([&] { fp8::quantize_into(plan, src, out.data(), out_col.data(), amax, scales, qo); },
                                 3, opt.min_seconds);
        add(nr.name, t, memcpy_gbps);
      }
    }
  }
  return rows;
}

}  // namespace fpg::bench
