#include "app/convert/checkpoint_diff.h"

#include "app/convert/checkpoint_params.h"
#include "ckpt/param_diff.h"
#include "formats/fpckpt/diff.h"
#include "formats/fpckpt/validate.h"

namespace fpg::app::convert {

CheckpointDiff diff_any(const std::string& a, const std::string& b, const ckpt::DiffOptions& opts, bool validate) {
  CheckpointDiff d;
  if (is_dcp_checkpoint(a) || is_dcp_checkpoint(b)) {
    const auto pa = open_params(a, "compare it", validate);
    const auto pb = open_params(b, "compare it", validate);
    d.report = ckpt::diff_params(pa->params(), pb->params(), opts);
    d.dir_a = a;
    d.dir_b = b;
  } else {
    const auto ra = fpckpt::open_valid(a, "compare it", validate);
    const auto rb = fpckpt::open_valid(b, "compare it", validate);
    d.report = fpckpt::diff_checkpoints(*ra, *rb, opts);
    d.dir_a = ra->dir();
    d.dir_b = rb->dir();
  }
  return d;
}

}  // namespace fpg::app::convert
