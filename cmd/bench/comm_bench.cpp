#include "cmd/bench/comm_bench.h"

#include <algorithm>

#include "core/error.h"
#include "model/spec_json.h"
#include "pipeline/pipeline_layout.h"

#if defined(FPGATHER_HAVE_NCCL)
#include <cuda_runtime.h>

#include "cmd/bench/cuda_timing.h"
#include "comm/group.h"
#include "comm/nccl_backend.h"
#include "kernels/cuda_check.h"
#endif

namespace fpg::bench {

std::vector<CommBenchRow> comm_bench_sizes(const std::string& model, uint32_t dp) {
  const model::ModelSpec spec = model::resolve_model(model);
  pipeline::PipelineConfig cfg;  // train's defaults: bf16 params, fp32 grads, bucketed, one bucket per buffer
  const pipeline::PipelineLayout l = pipeline::build_pipeline_layout(spec, cfg, dp);
  if (!l.bucketed) throw InternalError("bench comm: no bucketed layout");
  std::vector<CommBenchRow> rows;
  for (const layout::Buffer& b : l.bucketed->buffers)
    for (const layout::Bucket& bucket : b.buckets) {
      const uint64_t shard = bucket.numel() / dp;
      const size_t pbytes = b.key.param_dtype == DType::U8 ? 1 : b.key.param_dtype == DType::F32 ? 4 : 2;
      const size_t gbytes = b.key.grad_dtype == DType::F32 ? 4 : 2;
      CommBenchRow rs{spec.name, "reduce_scatter", gbytes == 4 ? "f32" : "bf16", shard * gbytes, shard * gbytes * dp};
      CommBenchRow ag{spec.name, "all_gather", pbytes == 1 ? "u8" : pbytes == 4 ? "f32" : "bf16", shard * pbytes,
                      shard * pbytes * dp};
      rows.push_back(rs);
      rows.push_back(ag);
    }
  return rows;
}

#if defined(FPGATHER_HAVE_NCCL)

std::vector<CommBenchRow> run_comm_bench(const CommBenchOptions& o) {
  if (o.iters < 1) throw UsageError("bench comm: --iters must be at least 1");
  std::vector<CommBenchRow> rows;
  for (const std::string& m : o.models) {
    const auto r = comm_bench_sizes(m, o.dp);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  uint64_t biggest = 0;
  for (const auto& r : rows) biggest = std::max(biggest, r.total_bytes);
  bool has_rank0 = false;
  comm::make_communicator_group("nccl", static_cast<int>(o.dp))->run([&](comm::Communicator& c) {
    cudaStream_t s = comm::nccl_compute_stream(c);
    void* buf = nullptr;
    FPG_CUDA_CHECK(cudaMalloc(&buf, std::max<uint64_t>(biggest, 1)));
    FPG_CUDA_CHECK(cudaMemsetAsync(buf, 0, std::max<uint64_t>(biggest, 1), s));  // zeros: sums stay finite
    CudaEventTimer timer(s);
    std::vector<double> ms;
    for (CommBenchRow& row : rows) {
      const auto once = [&] {
        // In place, as the pipeline issues them.
        if (row.op == "all_gather") return c.all_gather(buf, row.shard_bytes);
        const DType dt = row.dtype == "f32" ? DType::F32 : DType::BF16;
        return c.reduce_scatter(buf, row.shard_bytes / (dt == DType::F32 ? 4 : 2), dt, comm::ReduceOp::sum);
      };
      ms.clear();
      for (int it = 0; it < 5 + o.iters; ++it) {
        c.barrier()->wait();
        timer.start();
        once()->wait();
        const double e = timer.stop_ms();
        if (it >= 5) ms.push_back(e);
      }
      const double med = median(ms);
      if (c.rank() == 0) {
        row.median_ms = med;
        row.algbw_gbps = med > 0 ? static_cast<double>(row.total_bytes) / (med * 1e-3) / 1e9 : 0;
        row.busbw_gbps = row.algbw_gbps * (o.dp - 1) / o.dp;
      }
    }
    FPG_CUDA_CHECK(cudaStreamSynchronize(s));
    FPG_CUDA_CHECK(cudaFree(buf));
    if (c.rank() == 0) has_rank0 = true;
  });
  if (!has_rank0) rows.clear();
  return rows;
}

#else

std::vector<CommBenchRow> run_comm_bench(const CommBenchOptions&) {
  throw UsageError("bench comm: this fpgather is built without NCCL (it needs CUDA and NCCL)");
}

#endif

}  // namespace fpg::bench
