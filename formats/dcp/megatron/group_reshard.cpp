#include "formats/dcp/megatron/group_reshard.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "core/printable.h"
#include "formats/dcp/checkpoint_dir.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/megatron/bucket_writer.h"
#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/megatron/parallel_report.h"
#include "formats/dcp/part_crc_ledger.h"

namespace fpg::dcp {
namespace {

// A group's source buckets, read by (local parameter, state) element ranges.
class GroupSource {
 public:
  GroupSource(const Reader& r, const OptimizerGroup& g, PartCrcLedger& crcs) : r_(r), g_(g), crcs_(crcs) {}

  // Elements [lo, hi) of spec parameter `param`'s state `state` (4 bytes each) into dst.
  void read(uint32_t param, const std::string& state, uint64_t lo, uint64_t hi, uint8_t* dst) const {
    const auto [entry, base] = place(param, state);
    const Entry& e = r_.metadata().entries[entry];
    uint64_t got = 0;
    const uint64_t A = base + lo, B = base + hi;
    for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
      const ChunkMeta& ch = e.tensor.chunks[c];
      if (ch.offsets.size() != 1 || ch.sizes.size() != 1) continue;  // validate reports the arity
      const uint64_t a = std::max(A, ch.offsets[0]), b = std::min(B, ch.offsets[0] + ch.sizes[0]);
      if (a >= b) continue;
      const StoredChunk::PartRead p = r_.read_chunk_part(e, c, a - ch.offsets[0], b - ch.offsets[0], dst + (a - A) * 4);
      if (p.tracked)
        crcs_.add({entry, c}, r_.dir() + ": key " + quoted_name(e.fqn) + " chunk " + std::to_string(c), p.record_size,
                  p.record_crc, p.offset, p.size, p.crc);
      got += b - a;
    }
    if (got != B - A)
      throw FormatError(r_.dir() + ": key " + quoted_name(e.fqn) + " elements [" + std::to_string(A) + ", " +
                        std::to_string(B) + ") are not all stored");
  }

 private:
  // The bucket key holding (param, state) and where the parameter starts in it.
  std::pair<size_t, uint64_t> place(uint32_t param, const std::string& state) const {
    const auto key = std::make_pair(param, state);
    if (const auto it = places_.find(key); it != places_.end()) return it->second;
    const layout::BucketedLayout& S = g_.layout.layout;
    const std::optional<layout::ParamLocation> loc = S.locate(param);
    if (!loc) throw InternalError(g_.prefix + ": parameter " + std::to_string(param) + " not in its layout");
    const layout::Buffer& buf = S.buffers[loc->buffer];
    const layout::ParamSlot& slot = buf.params[loc->slot];
    const layout::Bucket& bucket = buf.buckets[slot.bucket];
    const std::string name = bucket_key_name(g_.prefix, g_.layout.gbuf.at(loc->buffer), buf.key.param_dtype,
                                             buf.key.grad_dtype, slot.bucket, state);
    const Entry* e = r_.metadata().find(name);
    if (!e) throw FormatError(r_.dir() + ": no key " + quoted_name(name) + " for " + quoted_name(slot.name));
    const std::pair<size_t, uint64_t> at{static_cast<size_t>(e - r_.metadata().entries.data()),
                                         slot.world.begin - bucket.world.begin};
    return places_.emplace(key, at).first->second;
  }

  const Reader& r_;
  const OptimizerGroup& g_;
  PartCrcLedger& crcs_;
  mutable std::map<std::pair<uint32_t, std::string>, std::pair<size_t, uint64_t>> places_;
};

}  // namespace

bool is_replaced_optimizer_entry(const Entry& e, const std::vector<OptimizerGroup>& groups) {
  if (e.is_tensor) return e.fqn.rfind("optimizer.", 0) == 0 || (is_chained_key(e.fqn) && parse_bucket_key(e.fqn));
  return std::any_of(groups.begin(), groups.end(), [&](const OptimizerGroup& g) {
    return is_group_object(e.fqn, g.prefix, kPerBucketNumel) || is_group_object(e.fqn, g.prefix, kPerBucketNumelUnpadded) ||
           is_group_object(e.fqn, g.prefix, kParamGroups);
  });
}

uint64_t bucket_state_bytes(const layout::BucketedLayout& L, size_t states) {
  uint64_t n = 0;
  for (const layout::Buffer& buf : L.buffers)
    for (const layout::Bucket& bucket : buf.buckets) n += bucket.numel_unpadded * 4 * states;
  return n;
}

void note_padding_only_ranks(const layout::BucketedLayout& L, MegatronReshardSummary& sum) {
  for (const layout::Buffer& buf : L.buffers)
    for (const layout::Bucket& bucket : buf.buckets)
      for (const layout::Shard& shard : bucket.shards)
        if (shard.world.begin - bucket.world.begin >= bucket.numel_unpadded)
          sum.first_padding_only_rank = std::min(sum.first_padding_only_rank.value_or(shard.rank), shard.rank);
}

void declare_carried_entries(DcpWriter& w, const Metadata& md, const std::function<bool(const Entry&)>& replaced) {
  for (const Entry& e : md.entries) {
    if (replaced(e)) continue;
    if (e.is_tensor) w.declare_tensor(e.fqn, *e.tensor.dtype, e.tensor.size);
    else w.declare_bytes(e.fqn);
  }
}

const Entry& group_param_groups(const Reader& r, const std::string& group) {
  const Entry* pg = nullptr;
  for (const Entry& e : r.metadata().entries)
    if (!e.is_tensor && is_group_object(e.fqn, group, kParamGroups)) pg = &e;
  if (!pg)
    throw FormatError(r.dir() + ": no '" + group_object_key(group, kParamGroups) +
                      "' object holding the group's param_groups");
  return *pg;
}

size_t shard_writer_threads(size_t jobs, uint64_t per_job, uint64_t memory) {
  constexpr size_t kMostThreads = 8;
  const uint64_t fit = per_job ? memory / per_job : kMostThreads;
  return static_cast<size_t>(std::max<uint64_t>(1, std::min<uint64_t>({jobs, kMostThreads, fit})));
}

void for_each_group_shard(const std::vector<uint32_t>& dp_sizes,
                          const std::function<uint32_t(size_t group, uint32_t dp_rank)>& rank_file, size_t threads,
                          const std::function<void(size_t group, uint32_t dp_rank)>& job) {
  std::map<uint32_t, std::vector<std::pair<size_t, uint32_t>>> by_file;
  for (size_t g = 0; g < dp_sizes.size(); ++g)
    for (uint32_t d = 0; d < dp_sizes[g]; ++d) by_file[rank_file(g, d)].emplace_back(g, d);
  std::vector<const std::vector<std::pair<size_t, uint32_t>>*> files;
  for (const auto& [file, parts] : by_file) files.push_back(&parts);
  ThreadPool pool(std::max<size_t>(1, std::min(threads, files.size())));
  pool.parallel_for(files.size(), [&](size_t i) {
    for (const auto& [g, d] : *files[i]) job(g, d);
  });
}

MegatronReshardSummary reshard_groups(const Reader& r, const DcpParams& params, const std::vector<std::string>& states,
                                      const MegatronReshardOptions& opts, const std::string& dst) {
  const ParallelSizes& P = *params.parallel();
  if (params.experts() > 0 || P.cp > 1)
    throw UsageError(r.dir() + " was saved at " + parallel_sizes_string(P) +
                     (params.experts() > 0 ? " with a MoE model" : "") +
                     "; reshard --dp rewrites the buckets of dense models at TP and PP only, without context "
                     "parallelism (--to fully_reshardable writes the model-space form Megatron-Core loads at any "
                     "parallelism)");
  const uint32_t TP = P.tp, DP = opts.dp, DP0 = P.dp;
  MegatronReshardSummary sum;
  sum.source_form = sum.target_form = "dp_reshardable";

  // Each group's target layout over its local parameters.
  std::vector<layout::BucketedLayout> targets;
  for (const OptimizerGroup& g : params.groups()) {
    const layout::BucketedLayout& S = g.layout.layout;
    layout::BucketedOptions lo;
    lo.dp = DP;
    lo.bucket_size = opts.bucket_size.value_or(S.bucket_size);
    lo.pad_for_nccl = opts.pad_for_nccl.value_or(S.pad_for_nccl);
    lo.grad_reduce_in_fp32 = std::all_of(S.buffers.begin(), S.buffers.end(),
                                         [](const layout::Buffer& b) { return b.key.grad_dtype == DType::F32; });
    if (std::any_of(g.params.begin(), g.params.end(), [](const LocalParam& p) { return p.local.own_bucket; }))
      for (const LocalParam& p : g.params) lo.own_bucket.push_back(p.local.own_bucket);
    targets.push_back(layout::build_bucketed_layout(g.layout.spec, lo));
    note_padding_only_ranks(targets.back(), sum);
  }
  sum.target = targets.front();
  sum.groups = static_cast<uint32_t>(targets.size());

  auto target_rank = [&](const OptimizerGroup& g, uint32_t d) { return g.tp + TP * (d + DP * g.pp); };
  const Metadata& md = r.metadata();
  auto is_optimizer = [&](const Entry& e) { return is_replaced_optimizer_entry(e, params.groups()); };
  uint64_t optimizer_bytes = 0;
  for (const layout::BucketedLayout& T : targets) optimizer_bytes += bucket_state_bytes(T, states.size());
  add_plan_figures(r, is_optimizer, optimizer_bytes, sum);
  if (opts.dry_run) return sum;

  // The bar counts the planned bytes as each is read for its write.
  Progress bar("reshard", sum.plan_written, opts.progress);
  DcpWriteOptions wo;
  wo.megatron = *r.megatron();
  wo.planner_data = false;
  DcpWriter w(dst, wo);
  declare_carried_entries(w, md, is_optimizer);
  for (size_t i = 0; i < targets.size(); ++i) {
    w.declare_bytes(group_object_key(params.groups()[i].prefix, kParamGroups));
    declare_group_buckets(w, params.groups()[i].prefix, targets[i], states);
  }

  // Carried entries: a model chunk moves with its (tp, pp) rank to DP rank dp mod DP.
  for (const Entry& e : md.entries) {
    if (is_optimizer(e)) continue;
    if (e.is_tensor) {
      GroupWriteCount n;
      copy_tensor_chunks(w, r, e, [&](uint64_t s) {
        const uint64_t tp = s % TP, dp = (s / TP) % DP0, pp = s / (uint64_t{TP} * DP0);
        return static_cast<uint32_t>(tp + TP * (dp % DP + DP * pp));
      }, n);
      sum.chunks += n.chunks;
      sum.bytes_written += n.bytes;
      bar.advance(n.bytes);
    } else {
      auto buf = std::make_shared<std::vector<uint8_t>>(r.read_bytes(e));
      w.rank(0).write_bytes(e.fqn, buf->size(), from_buffer(buf));
      sum.bytes_written += buf->size();
      bar.advance(buf->size());
    }
  }

  // Each DP rank of each group on a thread of its own: its file is its alone.
  PartCrcLedger crcs;
  std::mutex sum_mu;
  const std::vector<uint32_t> dps(targets.size(), DP);
  for_each_group_shard(
      dps, [&](size_t i, uint32_t d) { return target_rank(params.groups()[i], d); },
      shard_writer_threads(targets.size() * DP, wo.io_block_bytes), [&](size_t i, uint32_t d) {
    const OptimizerGroup& g = params.groups()[i];
    if (d == 0) {
      auto pg_bytes = std::make_shared<std::vector<uint8_t>>(r.read_bytes(group_param_groups(r, g.prefix)));
      w.rank(target_rank(g, 0)).write_bytes(group_object_key(g.prefix, kParamGroups), pg_bytes->size(),
                                            from_buffer(pg_bytes));
    }
    const GroupSource source(r, g, crcs);
    const GroupWriteCount n = write_group_buckets(
        w, g.prefix, targets[i], states, target_rank(g, 0), [&](uint32_t dd) { return target_rank(g, dd); },
        [&source, &bar](uint32_t param, const std::string& state, uint64_t begin) {
          return element_fill(
              [&source, &bar, param, state](uint64_t a, uint64_t b, uint8_t* dst) {
                source.read(param, state, a, b, dst);
                bar.advance((b - a) * 4);
              },
              begin);
        },
        d);
    const std::lock_guard<std::mutex> lock(sum_mu);
    sum.chunks += n.chunks;
    sum.bytes_written += n.bytes;
  });
  // The CRCs of the source records read in parts: their unread bytes (padding) read for it.
  for (const PartCrcLedger::Gap& gap : crcs.gaps())
    crcs.fill(gap, r.open_chunk(md.entries[gap.item.first], gap.item.second).record_crc(gap.offset, gap.size));
  const Metadata written = w.commit();
  sum.keys = written.entries.size();
  return sum;
}

}  // namespace fpg::dcp
