#include "ckpt/problem.h"

#include <algorithm>
#include <tuple>

#include "core/printable.h"

namespace fpg::ckpt {

std::string_view problem_kind_name(ProblemKind k) {
  switch (k) {
    case ProblemKind::gap: return "gap";
    case ProblemKind::overlap: return "overlap";
    case ProblemKind::out_of_bounds: return "out_of_bounds";
    case ProblemKind::dtype: return "dtype";
    case ProblemKind::shape: return "shape";
    case ProblemKind::checksum: return "checksum";
    case ProblemKind::missing_file: return "missing_file";
    case ProblemKind::truncated_file: return "truncated_file";
    case ProblemKind::layout_mismatch: return "layout_mismatch";
    case ProblemKind::version: return "version";
    case ProblemKind::index_checksum: return "index_checksum";
  }
  return "unknown";
}

std::string to_string(const Problem& p) {
  std::string s(problem_kind_name(p.kind));
  s += " " + (p.key.empty() ? std::string("-") : printable(p.key));
  s += " [" + std::to_string(p.lo) + ", " + std::to_string(p.hi) + ")";
  s += " " + (p.file.empty() ? std::string("-") : printable(p.file));
  if (!p.message.empty()) s += ": " + printable(p.message);
  return s;
}

void sort_problems(std::vector<Problem>& problems) {
  std::stable_sort(problems.begin(), problems.end(), [](const Problem& a, const Problem& b) {
    return std::tie(a.key, a.lo, a.hi, a.kind, a.file) < std::tie(b.key, b.lo, b.hi, b.kind, b.file);
  });
}

}  // namespace fpg::ckpt
