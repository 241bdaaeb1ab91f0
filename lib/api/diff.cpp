// fpgather/diff.h over the comparisons `fpgather diff` runs: key by key between two fpgather
// checkpoints (formats/fpckpt/diff.h), parameter by parameter when either is a DCP or Megatron one.
#include <fpgather/diff.h>

#include "api/boundary.h"
#include "app/convert/checkpoint_params.h"
#include "ckpt/param_diff.h"
#include "formats/fpckpt/diff.h"
#include "formats/fpckpt/validate.h"

namespace fpgather {

DiffReport diff(const Checkpoint& a, const Checkpoint& b, const DiffOptions& options) {
  return api::at_boundary([&] {
    if (options.rtol < 0 || options.atol < 0) throw fpg::UsageError("diff: rtol and atol must be >= 0");
    fpg::ckpt::DiffOptions o;
    o.rtol = options.rtol;
    o.atol = options.atol;
    o.max_reports = options.max_reports;
    fpg::ckpt::DiffReport rep;
    if (a.format() != CheckpointFormat::fpgather || b.format() != CheckpointFormat::fpgather) {
      const auto pa = fpg::convert::open_params(a.path(), "compare it", options.validate);
      const auto pb = fpg::convert::open_params(b.path(), "compare it", options.validate);
      rep = fpg::ckpt::diff_params(pa->params(), pb->params(), o);
    } else {
      const auto ra = fpg::fpckpt::open_valid(a.path(), "compare it", options.validate);
      const auto rb = fpg::fpckpt::open_valid(b.path(), "compare it", options.validate);
      rep = fpg::fpckpt::diff_checkpoints(*ra, *rb, o);
    }
    DiffReport r;
    r.equal = rep.equal();
    r.model_space = rep.model_space;
    r.tensors_compared = rep.keys_compared;
    r.elements_compared = rep.elements_compared;
    for (const auto& d : rep.diffs) {
      TensorDifference t;
      t.tensor = d.key;
      t.what = d.what;
      t.detail = d.detail;
      t.differing = d.differing;
      t.max_abs_diff = d.max_abs;
      t.lo = d.lo;
      t.hi = d.hi;
      for (const auto& v : d.first) t.first.push_back({v.index, v.a, v.b});
      r.differences.push_back(std::move(t));
    }
    return r;
  });
}

}  // namespace fpgather
