#include "app/checkpoint/state_load.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "ckpt/key_names.h"
#include "ckpt/stored_states.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "layout/bucketed_layout.h"
#include "pipeline/fp8_params.h"
#include "app/checkpoint/state_documents.h"

namespace fpg::app::checkpoint {
namespace {

using pipeline::OptimizerState;
using pipeline::StateFragment;

std::vector<float>& arena(OptimizerState& st, const std::string& state) {
  if (state == "master") return st.master;
  if (state == "exp_avg") return st.exp_avg;
  if (state == "exp_avg_sq") return st.exp_avg_sq;
  if (state == "momentum_buffer") return st.momentum;
  throw InternalError("checkpoint: no optimizer state named " + state);
}

struct Loader {
  const ckpt::StateReader& r;

  // Reads [lo, hi) of key `name` (of `dtype` and `numel` elements) into out.
  void read(const std::string& name, DType dtype, uint64_t numel, uint64_t lo, uint64_t hi, void* out) const {
    const long k = r.find_key(name);
    if (k < 0) throw FormatError(r.dir() + ": no key " + quoted_name(name) + ", which this run's state needs");
    const ckpt::Key& key = r.index().keys[static_cast<size_t>(k)];
    if (key.dtype != dtype || key.numel() != numel)
      throw FormatError(r.dir() + ": key " + quoted_name(name) + " is " + std::string(dtype_name(key.dtype)) + " " +
                        shape_string(key.shape) + "; this run holds " + std::string(dtype_name(dtype)) + " of " +
                        std::to_string(numel) + " elements");
    r.read(static_cast<uint32_t>(k), lo, hi, out);
  }

  template <class T>
  void read_whole(const std::string& name, DType dtype, std::vector<T>& v) const {
    read(name, dtype, v.size(), 0, v.size(), v.data());
  }
};

// A range of a param's weights that one rank saved (one of its fragments).
struct Piece {
  uint32_t param = 0, rank = 0;
  uint64_t begin = 0, end = 0;
};

// Every rank's fragments, by param and offset: each rank knows its own; one metadata all-gather.
std::vector<Piece> all_pieces(const model::ModelSpec& spec, const pipeline::RankState& rs, comm::Communicator& comm) {
  std::vector<uint64_t> mine;
  for (const OptimizerState* st : {&rs.bucketed, &rs.layer_wise})
    for (const StateFragment& f : st->fragments) mine.insert(mine.end(), {f.param, f.param_range.begin, f.param_range.end});
  std::vector<uint8_t> blob(mine.size() * sizeof(uint64_t));
  if (!blob.empty()) std::memcpy(blob.data(), mine.data(), blob.size());
  const auto all = comm.all_gather_bytes(blob);
  std::vector<Piece> out;
  for (uint32_t r = 0; r < all.size(); ++r)
    for (size_t i = 0; i + 3 * sizeof(uint64_t) <= all[r].size(); i += 3 * sizeof(uint64_t)) {
      uint64_t v[3];
      std::memcpy(v, all[r].data() + i, sizeof v);
      out.push_back({static_cast<uint32_t>(v[0]), r, v[1], v[2]});
    }
  std::sort(out.begin(), out.end(),
            [](const Piece& a, const Piece& b) { return a.param != b.param ? a.param < b.param : a.begin < b.begin; });
  // The fragments tile every param (the save wrote exactly these ranges).
  for (uint32_t p = 0, i = 0; p < spec.params.size(); ++p) {
    uint64_t at = 0;
    for (; i < out.size() && out[i].param == p && out[i].begin == at; ++i) at = out[i].end;
    if (at != spec.params[p].numel())
      throw InternalError("checkpoint: the ranks' fragments do not tile param " + spec.params[p].name);
  }
  return out;
}

// The weights (and FP8 scale state) every rank needs whole: each saving rank reads back its own
// fragments and broadcasts them (broadcast copies bytes; bitwise), so the checkpoint is read once in
// all, not once per rank. A device-memory communicator cannot broadcast these host buffers: there
// every rank reads every param whole itself.
void load_params(const Loader& L, RankStateAccess& rank, comm::Communicator& comm) {
  const model::ModelSpec& spec = rank.spec();
  pipeline::RankState& rs = rank.state();
  const uint32_t me = static_cast<uint32_t>(comm.rank());
  const bool host = comm.memory_space() == comm::MemorySpace::host;
  std::vector<Piece> pieces;
  if (host) pieces = all_pieces(spec, rs, comm);
  else
    for (uint32_t p = 0; p < spec.params.size(); ++p) pieces.push_back({p, me, 0, spec.params[p].numel()});
  auto share = [&](const Piece& pc, const std::string& key, DType dtype, uint64_t numel, uint8_t* data) {
    const size_t elem = dtype_bits(dtype) / 8;
    uint8_t* at = data + pc.begin * elem;
    if (pc.rank == me) L.read(key, dtype, numel, pc.begin, pc.end, at);
    if (host) comm.broadcast(at, (pc.end - pc.begin) * elem, static_cast<int>(pc.rank))->wait();
  };
  for (const Piece& pc : pieces) {
    const std::string& name = spec.params.at(pc.param).name;
    const pipeline::ParamStorage st = rank.param_storage(pc.param);
    if (!rank.is_fp8(pc.param)) {
      share(pc, ckpt::weight_key(name), st.dtype, st.numel, st.data);
      continue;
    }
    if (st.data) share(pc, ckpt::fp8_data_key(name), st.dtype, st.numel, st.data);
    if (st.col) share(pc, ckpt::fp8_columnwise_key(name), st.dtype, st.numel, st.col);
  }

  // FP8 scale state: saved by the rank owning the param's element 0, identical on every rank.
  const bool delayed = pipeline::is_delayed(rank.config().fp8);
  for (pipeline::Fp8ParamState& s : rs.fp8) {
    const auto owner = std::find_if(pieces.begin(), pieces.end(), [&](const Piece& p) { return p.param == s.param && p.begin == 0; });
    if (owner == pieces.end()) throw InternalError("checkpoint: no rank owns element 0 of param #" + std::to_string(s.param));
    const int root = static_cast<int>(owner->rank);
    const std::string& name = spec.params.at(s.param).name;
    auto whole = [&](const std::string& state, DType dtype, auto& v) {
      if (owner->rank == me) L.read_whole(ckpt::fp8_state_key(name, state), dtype, v);
      if (host) comm.broadcast(v.data(), v.size() * sizeof(v[0]), root)->wait();
    };
    if (!s.scales.scale.empty()) {
      whole("scale", DType::F32, s.scales.scale);
      whole("scale_inv", DType::F32, s.scales.scale_inv);
    }
    if (!s.scales.e8m0.empty()) whole("scale_e8m0", DType::F8_E8M0, s.scales.e8m0);
    if (!s.scales.e8m0_col.empty()) whole("columnwise_scale_e8m0", DType::F8_E8M0, s.scales.e8m0_col);
    if (delayed) {
      whole("amax_history", DType::F32, s.delayed.amax_history);
      std::vector<float> next(2);
      whole("delayed_scale", DType::F32, next);
      s.delayed.scale = next[0];
      s.delayed.scale_inv = next[1];
    }
  }
}

}  // namespace

void load_rank_state(const ckpt::StateReader& reader, pipeline::RankPipeline& rank, comm::Communicator& comm) {
  PipelineAccess access(rank);
  load_rank_state(reader, access, comm);
}

void load_rank_state(const ckpt::StateReader& reader, RankStateAccess& rank, comm::Communicator& comm) {
  const Loader L{reader};
  const std::string& dir = reader.dir();
  const model::ModelSpec& spec = rank.spec();
  pipeline::RankState& rs = rank.state();

  const JsonDocument opt(reader.index().documents.get(ckpt::doc::optimizer).value_or("null"),
                         dir + ": document 'optimizer'");
  const ckpt::StateLayout sl = ckpt::read_stored_states(opt.root()).layout;
  const int64_t step = saved_optimizer_step(reader.index().documents, dir);

  // Bucketed part: this rank's fragments, from the keys of the checkpoint's state layout.
  const std::vector<std::string> states = saved_states(rs.bucketed.kind);
  const layout::BucketedLayout& bl = rank.bucketed_layout();
  const std::vector<layout::RankFragment> frags = layout::rank_fragments(bl, rs.rank);
  if (frags.size() != rs.bucketed.fragments.size())
    throw InternalError("checkpoint: rank fragments do not match the optimizer state's");
  for (size_t i = 0; i < frags.size(); ++i) {
    const StateFragment& f = rs.bucketed.fragments[i];
    const layout::Fragment& lf = frags[i].fragment;
    if (lf.param != f.param || lf.param_range != f.param_range)
      throw InternalError("checkpoint: fragment " + std::to_string(i) + " does not match the layout's");
    const model::Param& p = spec.params.at(f.param);
    for (const std::string& s : states) {
      float* out = arena(rs.bucketed, s).data() + f.offset;
      if (sl == ckpt::StateLayout::model) {
        L.read(ckpt::model_state_key(p.name, s), DType::F32, p.numel(), f.param_range.begin, f.param_range.end, out);
      } else {
        const layout::Bucket& b = bl.buffers.at(frags[i].buffer).buckets.at(frags[i].bucket);
        L.read(ckpt::bucket_state_key(frags[i].buffer, frags[i].bucket, s), DType::F32, b.numel_unpadded,
               lf.world_in_bucket.begin, lf.world_in_bucket.end, out);
      }
    }
  }
  // Layer-wise matrices this rank owns: whole, always layout `model`.
  for (const StateFragment& f : rs.layer_wise.fragments) {
    const model::Param& p = spec.params.at(f.param);
    for (const std::string& s : saved_states(rs.layer_wise.kind))
      L.read(ckpt::model_state_key(p.name, s), DType::F32, p.numel(), f.param_range.begin, f.param_range.end,
             arena(rs.layer_wise, s).data() + f.offset);
  }
  // Both parts step together (a skipped step skips both).
  rs.bucketed.step = step;
  rs.layer_wise.step = rank.layer_wise_layout() ? step : 0;

  // Params and FP8 scale state: every rank holds every param whole.
  load_params(L, rank, comm);
  rank.params_loaded();
}

}  // namespace fpg::app::checkpoint
