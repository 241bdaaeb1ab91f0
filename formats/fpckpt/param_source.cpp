#include "formats/fpckpt/param_source.h"

#include "ckpt/key_names.h"
#include "core/error.h"

namespace fpg::fpckpt {

CheckpointParams::CheckpointParams(const CheckpointReader& reader, ThreadPool* pool)
    : reader_(reader), pool_(pool), map_(ckpt::ParamStateMap::from_index(reader.index(), reader.dir())) {
  const auto& params = map_.spec().params;
  for (uint32_t p = 0; p < params.size(); ++p) {
    const long w = reader_.find_key(ckpt::weight_key(params[p].name));
    if (w >= 0) {
      const ckpt::Key& k = reader_.index().keys[static_cast<size_t>(w)];
      tensors_.push_back({params[p].name, params[p].name, "weight", k.dtype, k.shape});
      sources_.push_back({w, p, ""});
    }
    for (const std::string& s : map_.states_of(p)) {
      tensors_.push_back({params[p].name + "." + s, params[p].name, s, DType::F32, params[p].shape});
      sources_.push_back({-1, p, s});
    }
  }
}

std::string CheckpointParams::describe() const { return "fpgather checkpoint " + reader_.dir(); }

std::vector<ReadRange> CheckpointParams::key_ranges(const ckpt::ParamRange& r) const {
  const Source& s = sources_.at(r.tensor);
  std::vector<ReadRange> out;
  if (s.weight_key >= 0) {
    const uint32_t key = static_cast<uint32_t>(s.weight_key);
    out.push_back({key, r.lo, r.hi, (r.hi - r.lo) * (dtype_bits(tensors_[r.tensor].dtype) / 8)});
    return out;
  }
  for (const ckpt::StatePiece& piece : map_.pieces(s.param, s.state, r.lo, r.hi))
    out.push_back({piece.key, piece.key_lo, piece.key_lo + piece.numel, piece.numel * 4});
  return out;
}

void CheckpointParams::plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const {
  std::vector<ReadRange> ranges;
  std::vector<size_t> per_read;
  for (const ckpt::ParamRange& r : reads) {
    if (r.tensor >= sources_.size() || r.lo >= r.hi || r.hi > tensors_[r.tensor].numel()) {
      per_read.push_back(0);  // left to read() to refuse
      continue;
    }
    const std::vector<ReadRange> k = key_ranges(r);
    ranges.insert(ranges.end(), k.begin(), k.end());
    per_read.push_back(k.size());
  }
  std::lock_guard<std::mutex> l(plan_mu_);
  plan_.ahead.reset();  // a new plan replaces the last one
  plan_.reads = std::move(reads);
  plan_.ranges = std::move(per_read);
  plan_.next = 0;
  plan_.ahead = std::make_unique<ReadAhead>(reader_, std::move(ranges), window);
}

void CheckpointParams::read(size_t t, uint64_t lo, uint64_t hi, void* out) const {
  {
    std::lock_guard<std::mutex> l(plan_mu_);
    const Plan& p = plan_;
    if (p.ahead && p.next < p.reads.size() && p.reads[p.next].tensor == t && p.reads[p.next].lo == lo &&
        p.reads[p.next].hi == hi) {
      for (size_t i = 0; i < p.ranges[p.next]; ++i) p.ahead->next();
      if (++plan_.next == p.reads.size()) plan_.ahead.reset();  // every range was prefetched: its thread ends
    }
  }
  const Source& s = sources_.at(t);
  if (s.weight_key >= 0) {
    reader_.read(static_cast<uint32_t>(s.weight_key), lo, hi, out, pool_);
    return;
  }
  auto* dst = static_cast<uint8_t*>(out);
  for (const ckpt::StatePiece& piece : map_.pieces(s.param, s.state, lo, hi))
    reader_.read(piece.key, piece.key_lo, piece.key_lo + piece.numel, dst + (piece.param_lo - lo) * 4, pool_);
}

}  // namespace fpg::fpckpt
