// Host bookkeeping of the device pipeline's per-bucket synchronization (
// --overlap-grad-reduce / --overlap-param-gather, pipeline/device/device_rank_pipeline.h): which params
// complete each bucket's grads (its reduce-scatter may start then), where each bucket's param
// all-gather stands (issued, waited by the compute stream), which params are decoded to fp32 since
// the last gather, and a log of the current step's events in order (tests assert the order, not
// timings). Plain C++: no CUDA here, the pipeline issues the collectives.
#pragma once

#include <cstdint>
#include <vector>

namespace fpg::device {

enum class GatherState : uint8_t {
  complete,  // waited (or never issued): the compute stream is ordered after it
  issued,    // in flight on the communication stream, not yet waited
};

struct SyncEvent {
  enum Kind : uint8_t {
    grad_ready,             // index: param (its last grad write of the step is enqueued)
    reduce_scatter_issued,  // index: bucket
    grad_fn_returned,       // the step's forward/backward is enqueued
    gather_issued,          // index: bucket
    gather_waited,          // index: bucket (the compute stream waits it from here)
    param_decoded,          // index: param
  };
  Kind kind;
  uint32_t index = 0;
  bool operator==(const SyncEvent& o) const { return kind == o.kind && index == o.index; }
};

class BucketSync {
 public:
  BucketSync() = default;
  // bucket_of[p]: the bucket (a flat id over all buffers) holding spec param p.
  BucketSync(std::vector<uint32_t> bucket_of, uint32_t buckets);

  uint32_t buckets() const { return static_cast<uint32_t>(params_.size()); }
  uint32_t bucket_of(uint32_t p) const;
  const std::vector<uint32_t>& params_of(uint32_t bucket) const { return params_.at(bucket); }

  // A step starts: no grad reported, no reduce-scatter issued, the log cleared.
  void begin_step();
  void mark_grad_fn_returned();
  // p's grad is complete. True when that completes its bucket (issue the reduce-scatter now).
  // InternalError when p is reported twice in a step (only the last micro-batch may report).
  bool grad_ready(uint32_t p);
  void mark_reduce_scatter_issued(uint32_t bucket);
  bool reduce_scatter_issued(uint32_t bucket) const { return rs_issued_.at(bucket); }

  // Issuing a bucket's gather makes its params undecoded until decoded again.
  void mark_gather_issued(uint32_t bucket);
  void mark_gather_waited(uint32_t bucket);
  GatherState gather(uint32_t bucket) const { return gather_.at(bucket); }
  void mark_decoded(uint32_t p);
  bool decoded(uint32_t p) const { return decoded_.at(p); }
  // What a read of p needs: its bucket's gather waited and p decoded since.
  bool readable(uint32_t p) const { return decoded(p) && gather(bucket_of(p)) == GatherState::complete; }

  const std::vector<SyncEvent>& log() const { return log_; }  // since begin_step()

 private:
  std::vector<uint32_t> bucket_of_;
  std::vector<std::vector<uint32_t>> params_;  // per bucket
  std::vector<uint32_t> missing_;              // per bucket: params whose grad is not ready yet
  std::vector<bool> grad_seen_, rs_issued_, decoded_;
  std::vector<GatherState> gather_;
  std::vector<SyncEvent> log_;
};

}  // namespace fpg::device
