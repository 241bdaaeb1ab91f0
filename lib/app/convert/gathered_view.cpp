#include "app/convert/gathered_view.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "ckpt/param_export.h"
#include "core/error.h"

namespace fpg::app::convert {
namespace {

// What ckpt::convert_elements converts.
bool converts(DType from, DType to) {
  return from == to || ((to == DType::BF16 || to == DType::F32) &&
                        (from == DType::BF16 || from == DType::F16 || from == DType::F32 || from == DType::F64));
}

}  // namespace

void GatheredView::add(ckpt::ParamTensor t, std::vector<Piece> pieces) {
  Mapped m;
  uint64_t at = 0;
  for (const Piece& p : pieces) {
    if (p.src && !converts(src_->tensors().at(*p.src).dtype, t.dtype))
      throw InternalError(fmt::format("view: {} reads {} as {}", t.name, dtype_name(src_->tensors()[*p.src].dtype),
                                      dtype_name(t.dtype)));
    m.starts.push_back(at);
    at += p.n;
  }
  t.param = t.name;
  t.role = "weight";
  if (t.numel() != at) throw InternalError(fmt::format("view: {} has {} elements, its pieces {}", t.name, t.numel(), at));
  m.pieces = std::move(pieces);
  tensors_.push_back(std::move(t));
  map_.push_back(std::move(m));
}

template <class F>
void GatheredView::for_pieces(size_t t, uint64_t lo, uint64_t hi, F&& f) const {
  const Mapped& m = map_.at(t);
  size_t p = static_cast<size_t>(std::upper_bound(m.starts.begin(), m.starts.end(), lo) - m.starts.begin()) - 1;
  for (uint64_t at = lo; at < hi; ++p) {
    const Piece& piece = m.pieces.at(p);
    const uint64_t off = at - m.starts[p], n = std::min(piece.n - off, hi - at);
    if (n) f(piece, piece.lo + off, n, at - lo);
    at += n;
  }
}

void GatheredView::read(size_t t, uint64_t lo, uint64_t hi, void* out) const {
  const ckpt::ParamTensor& tensor = tensors_.at(t);
  if (lo > hi || hi > tensor.numel())
    throw InternalError(fmt::format("view: read [{}, {}) of {} ({} elements)", lo, hi, tensor.name, tensor.numel()));
  auto* bytes = static_cast<uint8_t*>(out);
  std::vector<uint8_t> scratch;
  for_pieces(t, lo, hi, [&](const Piece& piece, uint64_t a, uint64_t n, uint64_t at) {
    uint8_t* dst = bytes + dtype_bytes(tensor.dtype, at);
    if (!piece.src) {
      std::memset(dst, 0, dtype_bytes(tensor.dtype, n));
      return;
    }
    const DType from = src_->tensors()[*piece.src].dtype;
    if (from == tensor.dtype) {
      src_->read(*piece.src, a, a + n, dst);
      return;
    }
    scratch.resize(dtype_bytes(from, n));
    src_->read(*piece.src, a, a + n, scratch.data());
    ckpt::convert_elements(scratch.data(), from, dst, tensor.dtype, n);
  });
}

void GatheredView::plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const {
  std::vector<ckpt::ParamRange> mapped;
  for (const ckpt::ParamRange& r : reads)
    for_pieces(r.tensor, r.lo, r.hi, [&](const Piece& piece, uint64_t a, uint64_t n, uint64_t) {
      if (piece.src) mapped.push_back({*piece.src, a, a + n});
    });
  src_->plan_reads(std::move(mapped), window);
}

}  // namespace fpg::app::convert
