#include "fp8/batch.h"

#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <vector>

#include "fp8/amax.h"
#include "fp8/source.h"

namespace fpg {
namespace fp8 {
namespace {

// Elements per piece: large enough that per-piece costs vanish, small enough to spread a big tensor
// over the pool.
constexpr uint64_t kPiece = uint64_t{1} << 18;

struct Piece {
  size_t job;
  uint64_t offset, count;  // within the job's fragment
};

std::vector<Piece> split(const FragmentJob* jobs, size_t n) {
  std::vector<Piece> pieces;
  for (size_t j = 0; j < n; ++j)
    for (uint64_t off = 0; off < jobs[j].count; off += kPiece)
      pieces.push_back({j, off, std::min(kPiece, jobs[j].count - off)});
  return pieces;
}

const void* advance(const Plan& p, const void* in, uint64_t elements) {
  const size_t size = input_size(p.input);
  return static_cast<const uint8_t*>(in) + elements * size;
}

}  // namespace

void batch_partial_amax(const FragmentJob* jobs, size_t n, ThreadPool& pool) {
  const std::vector<Piece> pieces = split(jobs, n);
  std::array<std::mutex, 64> locks;  // striped by grid address
  const auto lock_for = [&](const void* grid) -> std::mutex& {
    return locks[(reinterpret_cast<uintptr_t>(grid) >> 6) % locks.size()];
  };
  pool.parallel_for(pieces.size(), [&](size_t i) {
    const Piece& pc = pieces[i];
    const FragmentJob& j = jobs[pc.job];
    const Plan& p = *j.plan;
    const uint64_t start = j.start + pc.offset;
    const CellRange rr = touched_row_cells(p, start, pc.count);
    const CellRange cr = touched_col_cells(p, start, pc.count);
    std::vector<float> row(rr.size(), 0.0f), col(cr.size(), 0.0f);
    partial_amax_window(p, start, pc.count, advance(p, j.in, pc.offset), row.data(), rr, col.data(), cr);
    std::lock_guard<std::mutex> g(lock_for(j.amax ? static_cast<const void*>(j.amax) : j.amax_col));
    if (rr.size()) combine_max(j.amax + rr.begin, row.data(), rr.size());
    if (cr.size()) combine_max(j.amax_col + cr.begin, col.data(), cr.size());
  });
}

void batch_cast(const FragmentJob* jobs, size_t n, ThreadPool& pool) {
  const std::vector<Piece> pieces = split(jobs, n);
  // Last piece first: the amax pass has just read the pieces in order, so the end of a tensor
  // larger than the last-level cache is the part still cached.
  pool.parallel_for(pieces.size(), [&](size_t i) {
    const Piece& pc = pieces[pieces.size() - 1 - i];
    const FragmentJob& j = jobs[pc.job];
    cast_fragment(*j.plan, j.scales, j.start + pc.offset, pc.count, advance(*j.plan, j.in, pc.offset),
                  j.out ? j.out + pc.offset : nullptr, j.out_col ? j.out_col + pc.offset : nullptr);
  });
}

}  // namespace fp8
}  // namespace fpg
