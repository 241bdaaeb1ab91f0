// --overlap-grad-reduce / --overlap-param-gather of `train --device cuda`
// (pipeline/device/device_rank_pipeline.h, pipeline/device/bucket_sync.h):
//  (a) overlap on/off (each and both) gives bitwise identical losses, masters, optimizer states,
//      stored bytes (FP8 scales included) and params after several steps with accumulation 2, on 1
//      GPU and on 2 when present, for AdamW bf16 and the delayed FP8 recipe;
//  (b) a forward never reads a param whose bucket's gather has not been waited and decoded (every
//      enqueued read checked through ParamHooks::on_read), the gathers really are in flight when the
//      next step starts, a grad sync after waiting them gives the non-overlapped bits, and a forward
//      reading without before_read is detected;
//  (c) each bucket's reduce-scatter is issued right after the report of its last param's grad, all
//      of them before the backward's last report but the last bucket's, once per param per step
//      (the last micro-batch only); without the option every one after the backward, in bucket order.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "catch.h"
#include "comm/group.h"
#include "core/float_codec.h"
#include "comm/nccl_backend.h"
#include "pipeline/device/bucket_sync.h"
#include "pipeline/device/device_micro_batch.h"
#include "pipeline/device/device_network.h"
#include "pipeline/device/device_rank_pipeline.h"
#include "app/train/device_trainer.h"
#include "pipeline/device/device_buffer.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "model/network_init.h"
#include "model/spec_json.h"
#include "model/teacher_task.h"
#include "app/train/trainer.h"
#include "unit/pipeline_test_util.h"

namespace {

using fpg::device::BucketSync;
using fpg::device::DeviceOverlap;
using fpg::device::SyncEvent;

constexpr uint64_t kSteps = 5;

fpg::app::train::TrainOptions options(uint32_t dp, const std::string& fp8) {
  fpg::app::train::TrainOptions o;
  o.spec = fpg::model::resolve_model("tiny");
  o.dp = dp;
  o.steps = kSteps;
  o.micro_batch = 16;
  o.accumulation = 2;
  o.seed = 99;
  o.comm = "nccl";
  o.pipeline.bucket_size = 20000;  // the tiny model in several buckets
  fpg::pipeline::test::set_fp8(o.pipeline, fp8);
  return o;
}

int current_device() {
  int d = 0;
  FPG_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

struct RankEnd {
  fpg::pipeline::RankState state;
  std::vector<std::vector<uint8_t>> stored;
  std::vector<std::vector<float>> params;
};

struct Run {
  fpg::app::train::TrainResult result;
  std::vector<RankEnd> end;                       // per rank, after the last step
  std::vector<std::vector<SyncEvent>> logs;       // rank 0, per step
  std::vector<uint32_t> bucket_of;                // per param
  std::vector<std::vector<uint32_t>> params_of;   // per bucket
};

Run train(fpg::app::train::TrainOptions o, DeviceOverlap ov) {
  o.overlap_grad_reduce = ov.grad_reduce;
  o.overlap_param_gather = ov.param_gather;
  Run r;
  r.end.resize(o.dp);
  r.result = fpg::app::train::train_on_device(o, [&](uint64_t done, const fpg::device::DeviceRankPipeline& pipe) {
    const int rank = current_device();  // one rank per device, rank r on device r
    const BucketSync& bs = pipe.bucket_sync();
    if (rank == 0 && done == 0) {
      for (uint32_t p = 0; p < pipe.spec().params.size(); ++p) r.bucket_of.push_back(bs.bucket_of(p));
      for (uint32_t b = 0; b < bs.buckets(); ++b) r.params_of.push_back(bs.params_of(b));
    }
    if (rank == 0 && done > 0) r.logs.push_back(bs.log());  // reads only host bookkeeping
    if (done != o.steps) return;
    RankEnd& e = r.end[size_t(rank)];
    e.state = pipe.download_state();
    for (uint32_t p = 0; p < pipe.spec().params.size(); ++p) {
      e.stored.push_back(pipe.stored_bytes(p));
      const uint64_t n = pipe.spec().params[p].numel();
      if (pipe.param_view() == fpg::device::ParamView::fp32) {
        e.params.push_back(fpg::device::download(pipe.params()[p], n, pipe.stream()));
        continue;
      }
      pipe.finish_param_sync();  // --compute bf16: the bf16 views, as floats
      const std::vector<uint16_t> bits = fpg::device::download(pipe.bf16_params()[p], n, pipe.stream());
      std::vector<float> v(n);
      for (uint64_t i = 0; i < n; ++i) v[i] = fpg::float_from_bf16(bits[i]);
      e.params.push_back(std::move(v));
    }
  });
  return r;
}

void check_identical(const Run& a, const Run& b, const std::string& what) {
  INFO(what);
  REQUIRE(a.result.steps.size() == kSteps);
  REQUIRE(b.result.steps.size() == kSteps);
  for (size_t t = 0; t < kSteps; ++t) {
    INFO("step " << t);
    CHECK(a.result.steps[t].loss == b.result.steps[t].loss);
    CHECK(a.result.steps[t].grad_norm == b.result.steps[t].grad_norm);
    CHECK(a.result.steps[t].skipped == b.result.steps[t].skipped);
  }
  REQUIRE(a.end.size() == b.end.size());
  for (size_t r = 0; r < a.end.size(); ++r) {
    INFO("rank " << r);
    const auto &x = a.end[r], &y = b.end[r];
    CHECK(x.state.bucketed.step == kSteps);
    CHECK(x.state.bucketed.step == y.state.bucketed.step);
    CHECK(same_bits(x.state.bucketed.master, y.state.bucketed.master));
    CHECK(same_bits(x.state.bucketed.exp_avg, y.state.bucketed.exp_avg));
    CHECK(same_bits(x.state.bucketed.exp_avg_sq, y.state.bucketed.exp_avg_sq));
    REQUIRE(x.params.size() == y.params.size());
    for (size_t p = 0; p < x.params.size(); ++p) {
      INFO("param " << p);
      CHECK(x.stored[p] == y.stored[p]);
      CHECK(same_bits(x.params[p], y.params[p]));
    }
  }
}

size_t count(const std::vector<SyncEvent>& log, SyncEvent::Kind k) {
  size_t n = 0;
  for (const SyncEvent& e : log) n += e.kind == k;
  return n;
}

// (c) on rank 0's logs.
void check_reduce_scatter_order(const Run& r, bool overlap) {
  const size_t P = r.bucket_of.size(), B = r.params_of.size();
  REQUIRE(B >= 3);
  REQUIRE(r.logs.size() == kSteps);
  for (size_t t = 0; t < kSteps; ++t) {
    INFO("step " << t << " overlap " << overlap);
    const std::vector<SyncEvent>& log = r.logs[t];
    // one report per param: the last micro-batch's
    std::set<uint32_t> reported;
    for (const SyncEvent& e : log)
      if (e.kind == SyncEvent::grad_ready) reported.insert(e.index);
    CHECK(count(log, SyncEvent::grad_ready) == P);
    CHECK(reported.size() == P);
    CHECK(count(log, SyncEvent::reduce_scatter_issued) == B);
    size_t returned = log.size(), last_report = 0;
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].kind == SyncEvent::grad_fn_returned && returned == log.size()) returned = i;
      if (log[i].kind == SyncEvent::grad_ready) last_report = i;
    }
    REQUIRE(returned < log.size());
    std::vector<size_t> issued_before_last_report;
    uint32_t next_in_order = 0;
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].kind != SyncEvent::reduce_scatter_issued) continue;
      const uint32_t b = log[i].index;
      if (overlap) {
        // right after the report that completed the bucket, inside the backward
        REQUIRE(i > 0);
        CHECK(log[i - 1].kind == SyncEvent::grad_ready);
        CHECK(r.bucket_of[log[i - 1].index] == b);
        CHECK(i < returned);
        std::set<uint32_t> seen;
        for (size_t j = 0; j < i; ++j)
          if (log[j].kind == SyncEvent::grad_ready) seen.insert(log[j].index);
        for (uint32_t p : r.params_of[b]) CHECK(seen.count(p) == 1);
        if (i < last_report) issued_before_last_report.push_back(b);
      } else {
        CHECK(i > returned);
        CHECK(b == next_in_order);
        ++next_in_order;
      }
    }
    if (overlap) CHECK(issued_before_last_report.size() == B - 1);
  }
}

// (b): the trainer's loop on one GPU, with every enqueued param read checked. guard_reads = false
// drops before_read from step 1 on (the negative check).
struct Direct {
  std::vector<float> master;
  std::vector<std::vector<float>> params;
  size_t reads = 0, unreadable = 0;
  size_t pending_at_start = 0;  // buckets still gathering when a step's grad_fn began, summed over steps
};

Direct direct(const fpg::app::train::TrainOptions& o, DeviceOverlap ov, bool guard_reads) {
  const fpg::model::ModelSpec spec = fpg::app::train::device_training_spec(o);
  const fpg::model::NetworkDims dims = *spec.network;
  const fpg::model::TeacherTask task(dims, o.seed, o.micro_batch);
  Direct d;
  fpg::comm::make_nccl_group(1)->run([&](fpg::comm::Communicator& comm) {
    const fpg::pipeline::InitFn init = [&](uint32_t p, float* out) {
      fpg::model::init_network_param(spec.params[p], dims, o.seed, fpg::model::NetworkRole::student, out);
    };
    fpg::device::DeviceRankPipeline pipe(spec, o.pipeline, comm, init, ov);
    fpg::device::DeviceNetwork net(dims, pipe.stream());
    fpg::device::DeviceMicroBatches batches(task, pipe.stream());
    const BucketSync& bs = pipe.bucket_sync();
    for (uint64_t t = 0; t < o.steps; ++t) {
      pipe.step(
          [&](const std::vector<const float*>& params, const std::vector<float*>& grads) {
            for (uint32_t b = 0; b < bs.buckets(); ++b) d.pending_at_start += bs.gather(b) == fpg::device::GatherState::issued;
            fpg::device::ParamHooks h = pipe.param_hooks();
            if (!guard_reads && t > 0) h.before_read = nullptr;
            h.on_read = [&](uint32_t p) {
              ++d.reads;
              d.unreadable += !bs.readable(p);
            };
            fpg::device::ParamHooks first = h;
            first.on_grad_ready = nullptr;
            for (uint64_t a = 0; a < o.accumulation; ++a) {
              batches.draw(fpg::model::micro_batch_index(t, 1, 0, o.accumulation, a), net);
              net.forward_backward(params, batches.x(), batches.target(), batches.rows(), grads,
                                   a == 0 ? fpg::model::GradMode::overwrite : fpg::model::GradMode::accumulate, nullptr,
                                   a + 1 == o.accumulation ? &h : &first);
            }
          },
          o.accumulation, fpg::device::ParamReads::hooked);
    }
    d.master = pipe.download_state().bucketed.master;
    for (uint32_t p = 0; p < spec.params.size(); ++p)
      d.params.push_back(fpg::device::download(pipe.params()[p], spec.params[p].numel(), pipe.stream()));
  });
  return d;
}

bool skip_without_nccl() {
  if (fpg::app::train::device_training_built()) return false;
  std::printf("no NCCL in this build: [device-overlap] not run\n");
  return true;
}

}  // namespace

TEST_CASE("overlap on or off gives bitwise identical training", "[device-overlap]") {
  if (skip_without_nccl()) return;
  const uint32_t max_dp = fpg::cuda::device_count() >= 2 ? 2 : 1;
  if (max_dp == 1) std::printf("one GPU: the dp 2 runs of [device-overlap] need two, not run\n");
  for (const std::string fp8 : {"none", "delayed"}) {
    for (uint32_t dp = 1; dp <= max_dp; ++dp) {
      const fpg::app::train::TrainOptions o = options(dp, fp8);
      const Run off = train(o, {false, false});
      check_reduce_scatter_order(off, false);
      const Run grad = train(o, {true, false});
      check_identical(off, grad, "grad-reduce overlap, fp8 " + fp8 + ", dp " + std::to_string(dp));
      check_reduce_scatter_order(grad, true);
      const Run param = train(o, {false, true});
      check_identical(off, param, "param-gather overlap, fp8 " + fp8 + ", dp " + std::to_string(dp));
      const Run both = train(o, {true, true});
      check_identical(off, both, "both overlaps, fp8 " + fp8 + ", dp " + std::to_string(dp));
      check_reduce_scatter_order(both, true);
    }
  }
}

// --compute bf16: the network reads the gathered bf16 buffers themselves, so the waits guard the very
// bytes the GEMMs read (no decoded copy in between).
TEST_CASE("overlap on or off gives bitwise identical training under --compute bf16", "[device-overlap][bf16]") {
  if (skip_without_nccl()) return;
  const uint32_t max_dp = fpg::cuda::device_count() >= 2 ? 2 : 1;
  for (const std::string fp8 : {"none", "tensorwise"}) {
    for (uint32_t dp = 1; dp <= max_dp; ++dp) {
      fpg::app::train::TrainOptions o = options(dp, fp8);
      o.compute = fpg::model::Compute::bf16;
      const Run off = train(o, {false, false});
      const Run both = train(o, {true, true});
      check_identical(off, both, "bf16, both overlaps, fp8 " + fp8 + ", dp " + std::to_string(dp));
      check_reduce_scatter_order(both, true);
    }
  }
}

TEST_CASE("a forward only reads params whose gather was waited and decoded", "[device-overlap]") {
  if (skip_without_nccl()) return;
  for (const std::string fp8 : {"none", "delayed"}) {
    INFO("fp8 " << fp8);
    const fpg::app::train::TrainOptions o = options(1, fp8);
    const Direct off = direct(o, {false, false}, true);
    const Direct on = direct(o, {true, true}, true);
    // every read guarded; the gathers of steps 1.. were in flight when their forward began
    CHECK(on.reads > 0);
    CHECK(on.unreadable == 0);
    CHECK(off.unreadable == 0);
    CHECK(off.pending_at_start == 0);
    CHECK(on.pending_at_start >= (kSteps - 1) * 3);
    // the grad sync after waiting the gathers in the forward: the same bits as without overlap
    CHECK(same_bits(on.master, off.master));
    REQUIRE(on.params.size() == off.params.size());
    for (size_t p = 0; p < on.params.size(); ++p) CHECK(same_bits(on.params[p], off.params[p]));
    // negative: without before_read, the first reads of step 1 find their buckets still gathering
    const Direct unguarded = direct(o, {false, true}, false);
    CHECK(unguarded.unreadable > 0);
    // and without param-gather overlap the same forward is fine (nothing is left in flight)
    const Direct unguarded_sync = direct(o, {false, false}, false);
    CHECK(unguarded_sync.unreadable == 0);
  }
}

TEST_CASE("overlap on or off gives bitwise identical training: layer-wise (muon)", "[device-overlap]") {
  if (skip_without_nccl()) return;
  const uint32_t max_dp = fpg::cuda::device_count() >= 2 ? 2 : 1;
  for (const std::string fp8 : {"none", "tensorwise", "delayed"}) {  // delayed: recorded at the first read
    for (uint32_t dp = 1; dp <= max_dp; ++dp) {
      fpg::app::train::TrainOptions o = options(dp, fp8);
      o.pipeline.optimizer = fpg::optim::OptimizerKind::muon;
      o.pipeline.dist_opt = fpg::pipeline::DistOpt::layerwise;
      const std::string what = "layerwise muon, fp8 " + fp8 + ", dp " + std::to_string(dp);
      const Run off = train(o, {false, false});
      // the matrices are one more bucket: every param has a bucket and the matrices share the last
      REQUIRE(off.params_of.size() >= 2);
      const Run both = train(o, {true, true});
      check_identical(off, both, "both overlaps, " + what);
      const Run grad = train(o, {true, false});
      check_identical(off, grad, "grad-reduce overlap, " + what);
    }
  }
}
