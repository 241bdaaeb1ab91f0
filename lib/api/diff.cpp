// fpgather/diff.h over the comparison `fpgather diff` runs (app/convert/checkpoint_diff.h).
#include <fpgather/diff.h>

#include "api/boundary.h"
#include "app/convert/checkpoint_diff.h"

namespace fpgather {

DiffReport diff(const Checkpoint& a, const Checkpoint& b, const DiffOptions& options) {
  return api::at_boundary([&] {
    if (options.rtol < 0 || options.atol < 0) throw fpg::UsageError("diff: rtol and atol must be >= 0");
    fpg::ckpt::DiffOptions o;
    o.rtol = options.rtol;
    o.atol = options.atol;
    o.max_reports = options.max_reports;
    o.ignore = options.ignore;
    const fpg::ckpt::DiffReport rep = fpg::app::convert::diff_any(a.path(), b.path(), o, options.validate).report;
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
