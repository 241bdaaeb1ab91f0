#include "ckpt/capped_problems.h"

#include <algorithm>

namespace fpg::ckpt {

void CappedProblems::add(Problem p) {
  Omitted& o = seen_[{p.key, p.kind}];
  if (o.listed < kListed) {
    ++o.listed;
    out_.push_back(std::move(p));
    return;
  }
  ++o.more;
  o.lo = std::min(o.lo, p.lo);
  o.hi = std::max(o.hi, p.hi);
}

void CappedProblems::finish() {
  for (const auto& [at, o] : seen_) {
    if (o.more == 0) continue;
    const std::string kind(problem_kind_name(at.second));
    out_.push_back({at.second, at.first, o.lo, o.hi, "",
                    "... and " + std::to_string(o.more) + " more " + kind + " problem" + (o.more == 1 ? "" : "s") +
                        " of this key, not listed (the first " + std::to_string(kListed) + " are)"});
  }
  seen_.clear();
}

}  // namespace fpg::ckpt
