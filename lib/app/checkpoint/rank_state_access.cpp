#include "app/checkpoint/rank_state_access.h"

#include "core/error.h"

namespace fpg::app::checkpoint {

pipeline::RankPipeline& PipelineAccess::writable() {
  if (!write_) throw InternalError("checkpoint: a read-only pipeline access was asked to change the pipeline");
  return *write_;
}

}  // namespace fpg::app::checkpoint
