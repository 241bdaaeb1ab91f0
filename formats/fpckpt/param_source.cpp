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
      tensors_.push_back({params[p].name, params[p].name, "weight", k.dtype, k.shape, {}});
      sources_.push_back({w, p, ""});
    }
    for (const std::string& s : map_.states_of(p)) {
      tensors_.push_back({params[p].name + "." + s, params[p].name, s, DType::F32, params[p].shape, {}});
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
  std::shared_ptr<ReadAhead> replaced;  // the last plan's, ended after the lock is released
  try {
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
    auto ahead = std::make_shared<ReadAhead>(reader_, std::move(ranges), window);
    std::lock_guard<std::mutex> l(plan_mu_);
    replaced = std::move(plan_.ahead);
    plan_.reads = std::move(reads);
    plan_.ranges = std::move(per_read);
    plan_.next = 0;
    plan_.ahead = std::move(ahead);
  } catch (...) {  // a hint: the reads go on without it
  }
}

void CheckpointParams::read(size_t t, uint64_t lo, uint64_t hi, void* out) const {
  std::shared_ptr<ReadAhead> ahead, ended;  // used and ended outside the lock: they may wait on the disk
  size_t advance = 0;
  {
    std::lock_guard<std::mutex> l(plan_mu_);
    Plan& p = plan_;
    // The planned read this is, looking a few ahead: a planned read that never came (a block whose
    // read failed, a writer asking out of the plan's order) does not stop the read-ahead for good.
    for (size_t j = p.next; p.ahead && j < std::min(p.reads.size(), p.next + kPlanLookahead); ++j) {
      const ckpt::ParamRange& r = p.reads[j];
      if (r.tensor != t || r.lo != lo || r.hi != hi) continue;
      for (size_t i = p.next; i <= j; ++i) advance += p.ranges[i];
      p.next = j + 1;
      ahead = p.ahead;
      if (p.next == p.reads.size()) ended = std::move(p.ahead);  // every range was prefetched: its thread ends
      break;
    }
  }
  for (size_t i = 0; i < advance; ++i) ahead->next();
  ahead.reset();
  ended.reset();
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
