#include "cmd/bench_dcp.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cmd/bench/dcp_bench.h"
#include "cmd/bench/synthetic_dcp.h"
#include "cmd/bench/synthetic_megatron.h"
#include "cmd/json_output.h"
#include "cmd/option_range.h"
#include "ckpt/checkpoint_reshard.h"
#include "ckpt/chunk_codec.h"

namespace fpg::cli {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

int run_dcp_make(const bench::SyntheticDcpOptions& o, const GlobalOptions& g) {
  const bench::SyntheticDcpSummary s = bench::make_synthetic_dcp(o);
  if (g.json) {
    const nlohmann::json j = {{"benchmark", "dcp-make"}, {"checkpoint", o.dir},       {"chunks", s.chunks},
                              {"keys", s.keys},          {"ranks", s.ranks},          {"chunk_bytes", o.chunk_bytes},
                              {"tensor_bytes", s.tensor_bytes}, {"file_bytes", s.file_bytes},
                              {"metadata_bytes", s.metadata_bytes}, {"seconds", s.seconds}};
    print_json(j);
    return 0;
  }
  std::printf("wrote %s: %llu chunks of %llu bytes over %llu keys and %llu rank files in %.2f s\n", o.dir.c_str(),
              static_cast<unsigned long long>(s.chunks), static_cast<unsigned long long>(o.chunk_bytes),
              static_cast<unsigned long long>(s.keys), static_cast<unsigned long long>(s.ranks), s.seconds);
  std::printf("tensor data %.3f GB; on disk %.3f GB, of which .metadata %.1f MB\n", s.tensor_bytes / 1e9,
              s.file_bytes / 1e9, s.metadata_bytes / 1e6);
  return 0;
}

int run_megatron_make(const bench::SyntheticMegatronOptions& o, const GlobalOptions& g) {
  const bench::SyntheticMegatronSummary s = bench::make_synthetic_megatron(o);
  if (g.json) {
    print_json({{"benchmark", "megatron-make"}, {"checkpoint", o.dir}, {"tp", o.tp}, {"pp", o.pp}, {"dp", o.dp},
                {"layers", o.layers}, {"hidden", o.hidden}, {"ffn", o.ffn}, {"vocab", o.vocab},
                {"bucket_size", o.bucket_size ? nlohmann::json(*o.bucket_size) : nlohmann::json()},
                {"groups", s.groups}, {"rank_files", s.ranks}, {"keys", s.keys}, {"chunks", s.chunks},
                {"tensor_bytes", s.tensor_bytes}, {"file_bytes", s.file_bytes}, {"metadata_bytes", s.metadata_bytes},
                {"seconds", s.seconds}});
    return 0;
  }
  std::printf("wrote %s: Megatron torch_dist, TP %u x PP %u x DP %u (%llu optimizer groups, %llu rank files), "
              "%llu keys, %llu chunks in %.2f s\n",
              o.dir.c_str(), o.tp, o.pp, o.dp, static_cast<unsigned long long>(s.groups),
              static_cast<unsigned long long>(s.ranks), static_cast<unsigned long long>(s.keys),
              static_cast<unsigned long long>(s.chunks), s.seconds);
  std::printf("tensor data %.3f GB; on disk %.3f GB, of which .metadata %.1f MB\n", s.tensor_bytes / 1e9,
              s.file_bytes / 1e9, s.metadata_bytes / 1e6);
  return 0;
}

nlohmann::json phase_json(const bench::PhaseTiming& p) {
  return {{"median_s", p.median_s}, {"best_s", p.best_s},          {"rep_seconds", p.seconds},
          {"median_cpu_s", p.median_cpu_s}, {"rep_cpu_seconds", p.cpu_seconds},
          {"rss_before", p.rss_before}, {"peak_rss", p.peak_rss}, {"peak_over_start", p.peak_over_start()}};
}

double per_chunk(uint64_t bytes, uint64_t chunks) { return chunks ? double(bytes) / chunks : 0; }

int run_dcp_bench(const bench::DcpBenchOptions& o, const GlobalOptions& g) {
  const bench::DcpBenchResult r = bench::run_dcp_bench(o);
  const bool exported = o.export_reps > 0;
  if (g.json) {
    nlohmann::json j = {{"benchmark", "dcp"},
                        {"checkpoint", o.checkpoint},
                        {"metadata_bytes", r.metadata_bytes},
                        {"keys", r.keys},
                        {"tensors", r.tensors},
                        {"chunks", r.chunks},
                        {"storage_entries", r.storage_entries},
                        {"files", r.files},
                        {"per_phase_peaks", r.per_phase_peaks},
                        {"open", phase_json(r.open)},
                        {"metadata_resident_bytes", r.metadata_resident},
                        {"metadata_resident_bytes_per_chunk", per_chunk(r.metadata_resident, r.chunks)},
                        {"open_peak_bytes_per_chunk", per_chunk(r.open.peak_over_start(), r.chunks)},
                        {"validate", phase_json(r.validate)},
                        {"problems", r.problems}};
    if (exported)
      j["export"] = {{"cold", o.cold},
                     {"dir", o.export_dir},
                     {"tensors", r.export_tensors},
                     {"bytes_read", r.export_bytes_read},
                     {"bytes_written", r.export_bytes_written},
                     {"read_gbps", r.export_read_gbps()},
                     {"timing", phase_json(r.export_phase)}};
    print_json(j);
    return 0;
  }
  std::printf("dcp %s: .metadata %.1f MB, %llu keys, %llu chunks, %llu storage entries in %llu files\n",
              o.checkpoint.c_str(), r.metadata_bytes / 1e6, static_cast<unsigned long long>(r.keys),
              static_cast<unsigned long long>(r.chunks), static_cast<unsigned long long>(r.storage_entries),
              static_cast<unsigned long long>(r.files));
  std::printf("(medians of %u reps; the export of %u; peak RSS is each phase's own%s)\n", o.reps, o.export_reps,
              r.per_phase_peaks ? "" : " — not here: the kernel kept the process's peak");
  std::printf("%-28s %10s %10s %10s %14s %14s\n", "phase", "median s", "best s", "cpu s", "peak RSS MiB",
              "over start MiB");
  auto row = [](const char* what, const bench::PhaseTiming& p) {
    std::printf("%-28s %10.4f %10.4f %10.4f %14.1f %14.1f\n", what, p.median_s, p.best_s, p.median_cpu_s,
                p.peak_rss / kMiB, p.peak_over_start() / kMiB);
  };
  row("open (.metadata decode)", r.open);
  row("validate (index only)", r.validate);
  if (exported) row(o.cold ? "export fp32 (cold cache)" : "export fp32 (warm cache)", r.export_phase);
  std::printf("metadata held by an open reader: %.1f MiB = %.0f bytes/chunk (decode peak %.0f bytes/chunk)\n",
              r.metadata_resident / kMiB, per_chunk(r.metadata_resident, r.chunks),
              per_chunk(r.open.peak_over_start(), r.chunks));
  std::printf("validation problems: %llu\n", static_cast<unsigned long long>(r.problems));
  if (exported)
    std::printf("export: %llu tensors, %.3f GB read, %.3f GB written to %s: %.3f GB/s read (median)\n",
                static_cast<unsigned long long>(r.export_tensors), r.export_bytes_read / 1e9,
                r.export_bytes_written / 1e9, o.export_dir.c_str(), r.export_read_gbps());
  return 0;
}

}  // namespace

void register_bench_dcp(CLI::App& bench, const GlobalOptions& global, Runner& run) {
  auto mk = std::make_shared<bench::SyntheticDcpOptions>();
  auto* m = bench.add_subcommand("dcp-make", "Write a synthetic PyTorch DCP checkpoint of N chunks (DcpWriter)");
  m->add_option("DIR", mk->dir, "The checkpoint to create (must not exist)")->required();
  // The metadata of every chunk is held in memory while it is written.
  integer_range(m->add_option("--chunks", mk->chunks, "Chunks in all"), 1, 100'000'000)->capture_default_str();
  integer_range(m->add_option("--keys", mk->keys, "fp32 tensor keys the chunks are spread over (alternately 2-D and 1-D)"),
                1, 10'000'000)
      ->capture_default_str();
  integer_range(m->add_option("--ranks", mk->ranks, "Rank data files"), 1, 65536)->capture_default_str();
  integer_range(m->add_option("--chunk-bytes", mk->chunk_bytes, "Bytes of each chunk's elements (a multiple of 4)"), 4,
                ckpt::kMaxChunkBytes)
      ->capture_default_str();
  m->callback([mk, &global, &run] { run = [mk, &global] { return run_dcp_make(*mk, global); }; });

  auto mm = std::make_shared<bench::SyntheticMegatronOptions>();
  auto mb = std::make_shared<std::string>("none");
  auto* mg = bench.add_subcommand(
      "megatron-make", "Write a synthetic Megatron torch_dist checkpoint of a GPT at TP x PP x DP (dp_reshardable)");
  mg->add_option("DIR", mm->dir, "The checkpoint to create (must not exist)")->required();
  integer_range(mg->add_option("--tp", mm->tp, "Tensor-parallel size"), 1, 1024)->capture_default_str();
  integer_range(mg->add_option("--pp", mm->pp, "Pipeline-parallel size"), 1, 1024)->capture_default_str();
  integer_range(mg->add_option("--dp", mm->dp, "Data-parallel size"), 1, 65536)->capture_default_str();
  integer_range(mg->add_option("--layers", mm->layers, "Transformer layers"), 1, 100000)->capture_default_str();
  integer_range(mg->add_option("--hidden", mm->hidden, "Hidden size"), 1, 1 << 20)->capture_default_str();
  integer_range(mg->add_option("--ffn", mm->ffn, "MLP hidden size (SwiGLU: fc1 holds twice this)"), 1, 1 << 22)
      ->capture_default_str();
  integer_range(mg->add_option("--heads", mm->heads, "Attention heads"), 1, 65536)->capture_default_str();
  integer_range(mg->add_option("--query-groups", mm->query_groups, "Query groups (GQA)"), 1, 65536)->capture_default_str();
  integer_range(mg->add_option("--vocab", mm->vocab, "Vocabulary size (padded)"), 1, 1 << 24)->capture_default_str();
  mg->add_option("--bucket-size", *mb, "Elements per bucket, or none: one bucket per buffer")->default_str("none");
  mg->callback([mm, mb, &global, &run] {
    run = [mm, mb, &global] {
      mm->bucket_size = ckpt::parse_bucket_size(*mb);
      return run_megatron_make(*mm, global);
    };
  });

  auto db = std::make_shared<bench::DcpBenchOptions>();
  auto* d = bench.add_subcommand(
      "dcp", "DCP checkpoint: .metadata decode, index-only validate and fp32 export times, peak RSS per phase");
  d->add_option("DIR", db->checkpoint, "A PyTorch DCP / Megatron torch_dist checkpoint")->required();
  integer_range(d->add_option("--reps", db->reps, "Repetitions of the open and validate phases (medians reported)"), 1,
                1000)
      ->capture_default_str();
  integer_range(d->add_option("--export-reps", db->export_reps, "Repetitions of the export (0: no export)"), 0, 1000)
      ->capture_default_str();
  d->add_option("--export-dir", db->export_dir, "Where the export is written (removed after each repetition)")
      ->capture_default_str();
  d->add_flag("--warm{false}", db->cold, "Export from the page cache as it is (default: evict the checkpoint first)");
  d->callback([db, &global, &run] { run = [db, &global] { return run_dcp_bench(*db, global); }; });
}

}  // namespace fpg::cli
