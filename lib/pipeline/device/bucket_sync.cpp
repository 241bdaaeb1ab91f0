#include "pipeline/device/bucket_sync.h"

#include <string>
#include <utility>

#include "core/error.h"

namespace fpg::device {

BucketSync::BucketSync(std::vector<uint32_t> bucket_of, uint32_t buckets)
    : bucket_of_(std::move(bucket_of)), params_(buckets) {
  for (uint32_t p = 0; p < bucket_of_.size(); ++p) {
    if (bucket_of_[p] >= buckets)
      throw InternalError("bucket sync: param " + std::to_string(p) + " in bucket " + std::to_string(bucket_of_[p]) +
                          " of " + std::to_string(buckets));
    params_[bucket_of_[p]].push_back(p);
  }
  decoded_.assign(bucket_of_.size(), true);
  gather_.assign(buckets, GatherState::complete);
  begin_step();
}

uint32_t BucketSync::bucket_of(uint32_t p) const {
  if (p >= bucket_of_.size()) throw InternalError("bucket sync: no param #" + std::to_string(p));
  return bucket_of_[p];
}

void BucketSync::begin_step() {
  missing_.resize(params_.size());
  for (size_t b = 0; b < params_.size(); ++b) missing_[b] = static_cast<uint32_t>(params_[b].size());
  grad_seen_.assign(bucket_of_.size(), false);
  rs_issued_.assign(params_.size(), false);
  log_.clear();
}

void BucketSync::mark_grad_fn_returned() { log_.push_back({SyncEvent::grad_fn_returned, 0}); }

bool BucketSync::grad_ready(uint32_t p) {
  const uint32_t b = bucket_of(p);
  if (grad_seen_[p])
    throw InternalError("pipeline: the grad of param #" + std::to_string(p) +
                        " was reported complete twice in one step (only the last micro-batch reports)");
  grad_seen_[p] = true;
  log_.push_back({SyncEvent::grad_ready, p});
  return --missing_[b] == 0;
}

void BucketSync::mark_reduce_scatter_issued(uint32_t bucket) {
  if (rs_issued_.at(bucket)) throw InternalError("pipeline: bucket " + std::to_string(bucket) + " reduced twice");
  rs_issued_[bucket] = true;
  log_.push_back({SyncEvent::reduce_scatter_issued, bucket});
}

void BucketSync::mark_gather_issued(uint32_t bucket) {
  gather_.at(bucket) = GatherState::issued;
  for (uint32_t p : params_[bucket]) decoded_[p] = false;
  log_.push_back({SyncEvent::gather_issued, bucket});
}

void BucketSync::mark_gather_waited(uint32_t bucket) {
  gather_.at(bucket) = GatherState::complete;
  log_.push_back({SyncEvent::gather_waited, bucket});
}

void BucketSync::mark_decoded(uint32_t p) {
  if (gather(bucket_of(p)) != GatherState::complete)
    throw InternalError("pipeline: param #" + std::to_string(p) + " decoded before its bucket's gather was waited");
  decoded_[p] = true;
  log_.push_back({SyncEvent::param_decoded, p});
}

}  // namespace fpg::device
