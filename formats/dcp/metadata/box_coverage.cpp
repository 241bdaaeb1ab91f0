#include "formats/dcp/metadata/box_coverage.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace fpg::dcp {
namespace {

class Sweep {
 public:
  Sweep(const std::vector<uint64_t>& shape, const std::vector<BoxView>& boxes, size_t max_issues, uint64_t budget,
        CoverageResult& out)
      : shape_(shape), boxes_(boxes), max_issues_(max_issues), budget_(budget), out_(out) {}

  struct Exceeded {};

  void run(size_t dim, std::vector<uint32_t> ids) {
    spend(ids.size() + 1);
    if (dim + 1 == shape_.size()) {
      line(dim, ids);
      return;
    }
    struct Event {
      uint64_t at;
      bool start;
      uint32_t id;
    };
    std::vector<Event> events;
    events.reserve(2 * ids.size());
    for (uint32_t id : ids) {
      const uint64_t lo = boxes_[id].offsets[dim];
      events.push_back({lo, true, id});
      events.push_back({lo + boxes_[id].sizes[dim], false, id});
    }
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.at < b.at; });
    spend(events.size());
    std::set<uint32_t> active;
    uint64_t prev = 0;
    size_t i = 0;
    while (true) {
      const uint64_t at = i < events.size() ? events[i].at : shape_[dim];
      if (at > prev) {
        if (active.empty()) {
          gap(box(dim, prev, at));
        } else {
          slab_lo_.push_back(prev);
          slab_size_.push_back(at - prev);
          run(dim + 1, std::vector<uint32_t>(active.begin(), active.end()));
          slab_lo_.pop_back();
          slab_size_.pop_back();
        }
      }
      if (i == events.size()) break;
      for (; i < events.size() && events[i].at == at; ++i) {
        if (events[i].start)
          active.insert(events[i].id);
        else
          active.erase(events[i].id);
      }
      prev = at;
    }
  }

  void scalar(const std::vector<uint32_t>& ids) {
    if (ids.empty()) gap(Box{});
    for (size_t k = 1; k < ids.size(); ++k) overlap(ids[0], ids[k], Box{});
  }

 private:
  void spend(uint64_t n) {
    if (n > budget_) throw Exceeded{};
    budget_ -= n;
  }

  // The box of the current outer slabs, [lo, hi) in `dim`, and whole extents after it.
  Box box(size_t dim, uint64_t lo, uint64_t hi) const {
    Box b{slab_lo_, slab_size_};
    b.offsets.push_back(lo);
    b.sizes.push_back(hi - lo);
    for (size_t d = dim + 1; d < shape_.size(); ++d) {
      b.offsets.push_back(0);
      b.sizes.push_back(shape_[d]);
    }
    return b;
  }

  void line(size_t dim, std::vector<uint32_t>& ids) {
    auto lo = [&](uint32_t id) { return boxes_[id].offsets[dim]; };
    auto hi = [&](uint32_t id) { return boxes_[id].offsets[dim] + boxes_[id].sizes[dim]; };
    std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
      return std::make_tuple(lo(a), hi(a), a) < std::make_tuple(lo(b), hi(b), b);
    });
    uint64_t cursor = 0;
    uint32_t reach = 0;  // the box ending furthest so far
    bool any = false;
    for (uint32_t id : ids) {
      if (lo(id) > cursor) gap(box(dim, cursor, lo(id)));
      if (any && lo(id) < cursor) overlap(reach, id, box(dim, lo(id), std::min(hi(id), cursor)));
      if (!any || hi(id) > cursor) {
        cursor = std::max(cursor, hi(id));
        reach = id;
      }
      any = true;
    }
    if (cursor < shape_[dim]) gap(box(dim, cursor, shape_[dim]));
  }

  void gap(Box b) {
    if (out_.issues.size() < max_issues_)
      out_.issues.push_back({CoverageIssue::Kind::gap, std::move(b), 0, 0});
    else
      ++out_.more_gaps;
  }

  void overlap(size_t a, size_t b, Box box) {
    if (!pairs_.insert(std::minmax(a, b)).second) return;
    if (out_.issues.size() < max_issues_)
      out_.issues.push_back({CoverageIssue::Kind::overlap, std::move(box), a, b});
    else
      ++out_.more_overlaps;
  }

  const std::vector<uint64_t>& shape_;
  const std::vector<BoxView>& boxes_;
  size_t max_issues_;
  uint64_t budget_;
  CoverageResult& out_;
  std::vector<uint64_t> slab_lo_, slab_size_;
  std::set<std::pair<size_t, size_t>> pairs_;
};

// Whether the boxes of nonzero volume are each one run of the row-major order and together tile the
// tensor: runs sorted by start, each starting where the previous ends, from 0 to numel. False says
// nothing (the sweep decides).
bool tiles_as_runs(const std::vector<uint64_t>& shape, const std::vector<BoxView>& boxes) {
  const size_t n = shape.size();
  uint64_t numel = 1;
  for (uint64_t d : shape) {
    if (d != 0 && numel > UINT64_MAX / d) return false;
    numel *= d;
  }
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  runs.reserve(boxes.size());
  for (const BoxView& b : boxes) {
    uint64_t volume = 1;
    for (size_t d = 0; d < n; ++d) volume *= b.sizes[d];  // inside the tensor, so at most numel
    if (volume == 0) continue;
    if (!is_row_major_run(shape, b.offsets, b.sizes)) return false;
    uint64_t lo = 0;
    for (size_t d = 0; d < n; ++d) lo = lo * shape[d] + b.offsets[d];  // inside the tensor, so below numel
    runs.emplace_back(lo, lo + volume);
  }
  if (!std::is_sorted(runs.begin(), runs.end())) std::sort(runs.begin(), runs.end());
  uint64_t at = 0;
  for (const auto& [lo, hi] : runs) {
    if (lo != at) return false;
    at = hi;
  }
  return at == numel;
}

}  // namespace

bool is_row_major_run(const std::vector<uint64_t>& shape, const uint64_t* offsets, const uint64_t* sizes) {
  size_t k = shape.size();
  while (k > 0 && offsets[k - 1] == 0 && sizes[k - 1] == shape[k - 1]) --k;
  // Dimensions from k on are whole; k - 1 may be partial; those before it must have size 1.
  for (size_t d = 0; d + 1 < k; ++d)
    if (sizes[d] != 1) return false;
  return true;
}

CoverageResult check_box_coverage(const std::vector<uint64_t>& shape, const std::vector<BoxView>& boxes,
                                  size_t max_issues, uint64_t work_budget) {
  CoverageResult out;
  // A tensor with a zero dimension has nothing to cover.
  if (std::any_of(shape.begin(), shape.end(), [](uint64_t s) { return s == 0; })) return out;
  if (tiles_as_runs(shape, boxes)) return out;
  std::vector<uint32_t> ids;
  ids.reserve(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i)
    if (std::none_of(boxes[i].sizes, boxes[i].sizes + shape.size(), [](uint64_t s) { return s == 0; }))
      ids.push_back(static_cast<uint32_t>(i));
  Sweep sweep(shape, boxes, max_issues, work_budget, out);
  try {
    if (shape.empty())
      sweep.scalar(ids);
    else
      sweep.run(0, std::move(ids));
  } catch (const Sweep::Exceeded&) {
    out.budget_exceeded = true;
  }
  return out;
}

CoverageResult check_box_coverage(const std::vector<uint64_t>& shape, const std::vector<Box>& boxes,
                                  size_t max_issues, uint64_t work_budget) {
  std::vector<BoxView> views;
  views.reserve(boxes.size());
  for (const Box& b : boxes) views.push_back({b.offsets.data(), b.sizes.data()});
  return check_box_coverage(shape, views, max_issues, work_budget);
}

}  // namespace fpg::dcp
