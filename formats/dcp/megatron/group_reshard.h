// `reshard --dp M` of a Megatron dp_reshardable checkpoint saved at tensor or pipeline parallelism:
// every optimizer group (one per (TP rank, PP rank)) laid out again over its own local parameters for
// M data-parallel ranks (and the given bucket size and padding), at the same TP × PP.
//
// Each group's target layout is Megatron's for its local parameters (layout/bucketed_layout.h, the
// group's recovered options unless given), written through bucket_writer.h under the group's own
// prefix, its param_groups object carried. A local parameter's state is read from its place in the
// group's source buckets, chunk part by chunk part, every torch.save CRC checked once covered
// (PartCrcLedger). Files are numbered as Megatron's rank order has them (tp + TP × (dp + DP × pp));
// the model keys' chunks move with their (tp, pp) rank to DP rank dp mod M. Memory: one fragment.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "formats/dcp/dcp_params.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/megatron/megatron_reshard.h"
#include "formats/dcp/reader.h"

namespace fpg::dcp {

// What the per-group rewrites (this one and model_parallel_reshard.h) share:
// whether a source entry is optimizer state they replace (any tensor under "optimizer.", a chained
// optimizer's bucket keys, every group's per_bucket_numel(_unpadded) and param_groups objects);
bool is_replaced_optimizer_entry(const Entry& e, const std::vector<OptimizerGroup>& groups);
// the bytes a layout's bucket keys take for `states` (4-byte elements, numel_unpadded each);
uint64_t bucket_state_bytes(const layout::BucketedLayout& L, size_t states);
// the lowest rank of L whose shard of some bucket is only tail padding, into sum;
void note_padding_only_ranks(const layout::BucketedLayout& L, MegatronReshardSummary& sum);
// the declaration of every source entry that is carried (not `replaced`), in source order;
void declare_carried_entries(DcpWriter& w, const Metadata& md, const std::function<bool(const Entry&)>& replaced);
// the group's param_groups object (FormatError naming it when the source has none);
const Entry& group_param_groups(const Reader& r, const std::string& group);
// the threads that write the rank files (a job each): up to 8, as many as `memory` bytes hold at
// `per_job` bytes each, at least 1, never more than the jobs;
size_t shard_writer_threads(size_t jobs, uint64_t per_job, uint64_t memory = uint64_t{1} << 30);
// and job(group, dp_rank) for every DP rank of every group (`dp_sizes` per group), those of one rank
// file (`rank_file`: a MoE's dense and expert groups share the files) in group order on one thread,
// distinct files on up to `threads` threads: the reads of one and the writes of another overlap. The
// first exception is rethrown once all have stopped.
void for_each_group_shard(const std::vector<uint32_t>& dp_sizes,
                          const std::function<uint32_t(size_t group, uint32_t dp_rank)>& rank_file, size_t threads,
                          const std::function<void(size_t group, uint32_t dp_rank)>& job);

// `states`: Megatron's names of the states to write ("param", "exp_avg", …). UsageError for what
// this rewrite does not serve (MoE, context parallelism).
MegatronReshardSummary reshard_groups(const Reader& r, const DcpParams& params, const std::vector<std::string>& states,
                                      const MegatronReshardOptions& opts, const std::string& dst);

}  // namespace fpg::dcp
