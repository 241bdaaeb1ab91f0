// Problems collected with a cap per key and kind: a checkpoint whose metadata claims a million chunks,
// none of them stored, is one problem per chunk, and listing each would make the report (and its
// memory) as large as the claim. The first kListed problems of each (key, kind) are kept; the rest
// are counted and, at finish(), summed up in one problem per (key, kind) that says how many were
// left out and which range they span.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/problem.h"

namespace fpg::ckpt {

class CappedProblems {
 public:
  static constexpr uint64_t kListed = 10;

  explicit CappedProblems(std::vector<Problem>& out) : out_(out) {}

  void add(Problem p);
  // Listed whatever the count: a problem that already sums others up.
  void add_summary(Problem p) { out_.push_back(std::move(p)); }
  // Appends "... and N more <kind> problems of this key, in [lo, hi)" for each (key, kind) past the
  // cap; call once, after the last add().
  void finish();

 private:
  struct Omitted {
    uint64_t listed = 0, more = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
  };
  std::vector<Problem>& out_;
  std::map<std::pair<std::string, ProblemKind>, Omitted> seen_;
};

}  // namespace fpg::ckpt
