#include "app/convert/checkpoint_diff.h"

#include "ckpt/format_registry.h"
#include "ckpt/param_diff.h"
#include "core/progress.h"

namespace fpg::app::convert {

CheckpointDiff diff_any(const std::string& a, const std::string& b, const ckpt::DiffOptions& options, bool validate,
                        bool progress) {
  // Opening and validating both sides reads their indexes (metadata) in full: named as a phase,
  // then the bar of the comparison.
  Progress bar("diff", 0, progress);
  bar.phase((validate ? "validating " : "opening ") + a + " and " + b);
  ckpt::DiffOptions opts = options;
  if (progress) opts.progress = &bar;
  const auto ca = ckpt::open_checkpoint(a);
  const auto cb = ckpt::open_checkpoint(b);
  CheckpointDiff d;
  if (auto stored = ca->diff_stored(*cb, opts, validate)) {
    d.report = std::move(*stored);
    d.dir_a = ca->path();
    d.dir_b = cb->path();
    return d;
  }
  ckpt::ParamsOptions o;
  o.refusing = "compare it";
  o.validate = validate;
  const auto pa = ca->params(o);
  const auto pb = cb->params(o);
  d.report = ckpt::diff_params(pa->params(), pb->params(), opts);
  d.dir_a = a;
  d.dir_b = b;
  return d;
}

}  // namespace fpg::app::convert
