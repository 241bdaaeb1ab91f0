// The hooks a device pipeline step hands to the network it drives (the overlap options):
// the network calls them while it ENQUEUES work on the compute stream, so the pipeline can make the
// stream wait for a bucket's param all-gather just before the first read, and start a bucket's grad
// reduce-scatter as soon as its last grad is enqueued. Param indices are spec indices.
#pragma once

#include <cstdint>
#include <functional>

namespace fpg::device {

struct ParamHooks {
  // Before an enqueued read of param p (forward and backward; idempotent for the pipeline: the
  // first call of a step waits the bucket's gather and decodes p, later ones return at once).
  std::function<void(uint32_t p)> before_read;
  // After the last enqueued write of p's grad for the step (so only on the step's LAST micro-batch).
  std::function<void(uint32_t p)> on_grad_ready;
  // Instrumentation (tests): right before every enqueued read of p, after before_read.
  std::function<void(uint32_t p)> on_read;
};

}  // namespace fpg::device
