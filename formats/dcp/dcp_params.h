// A PyTorch DCP or Megatron torch_dist checkpoint seen per parameter (ckpt::ParamSource): each
// parameter's weight, fp32 master and optimizer states as whole tensors, wherever the checkpoint keeps
// them. What is recognised:
//
//   Megatron (metadata.json with sharded_backend torch_dist), model keys "module.…", stacked over layers
//   (megatron_layout.h); the optimizer in one of its forms:
//     dp_reshardable     "[chained_N.]optimizer.distributed.dp_group_idx_G.gbuf_idx_B.dtype_(P, G)
//                        .bucket_idx_K.<state>" 1-D bucket keys, one set per optimizer group (one per
//                        model-parallel rank: megatron_parallel.h), each mapped to that rank's local
//                        parameters by the recomputed buffer layout, checked against the group's
//                        per_bucket_numel(_unpadded) and its stored chunks; a parameter's state is
//                        its pieces from the groups of the TP ranks that hold it;
//     model space        "[chained_N.]optimizer.state.<state>.<model key>" in the model key's shape:
//                        fully_reshardable ("param" is the master) and the layer-wise optimizer
//                        ("fp32_param" is the master, Muon's "momentum_buffer" beside Adam's moments).
//   Plain DCP (torchtitan and the like): every tensor key is a parameter named by its fqn (a leading
//   "model." removed; where some keys have it, only those: the other sections' tensors, torchtitan's
//   train_state say, are state of no parameter under their own keys), and "optimizer.state.<fqn>.<state>" / "optim.state.<fqn>.<state>" keys of the
//   parameter's shape are its optimizer states. A state of no parameter's shape that is 0-d (Adam's
//   step) or names no parameter is kept under its own key (role "other"); bytes entries are objects.
//
// Every tensor is a flat range of one stored key (a layer of a stacked key, or a parameter's place in a
// bucket), read chunk by chunk. A chunk that is one row-major run of its key and lies wholly inside
// the range read goes straight into the caller's buffer, up to 8 such reads in flight at once (they
// wait on the disk more than they compute), and the chunks after the range are asked of the disk
// ahead of the next reads; any other chunk is read whole and kept, so sequential reads decode each
// stored item once. Memory: the largest stored chunk, twice.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/param_source.h"
#include "ckpt/problem.h"
#include "core/thread_start.h"
#include "formats/dcp/megatron/megatron_common_state.h"
#include "formats/dcp/megatron/megatron_layout.h"
#include "formats/dcp/megatron/megatron_parallel.h"
#include "formats/dcp/part_crc_ledger.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/validate.h"

namespace fpg::dcp {

// How a checkpoint keeps its optimizer state.
enum class OptimizerForm : uint8_t { none, dp_reshardable, model_space };
std::string_view optimizer_form_name(OptimizerForm f);  // "none", "dp_reshardable", "model space"

// A stored optimizer state whose key names a parameter but whose shape is not the parameter's: it
// cannot be read as that parameter's state, and leaving it out would lose it. A 0-d state (torch's
// Adam step, one per parameter) is not one: it is an unmapped key.
struct ShapeMismatch {
  std::string state_key;  // the stored state, e.g. "optimizer.state.decoder.norm.weight.master"
  std::vector<uint64_t> state_shape;
  std::string param;      // the parameter it names, e.g. "decoder.norm.weight"
  std::string param_key;  // the parameter's stored key
  std::vector<uint64_t> param_shape;
};
// "key 'optimizer.state.n.w.master' has shape [65], its parameter 'n.w' (key 'model.n.w') has shape [64]"
std::string to_string(const ShapeMismatch& m);

// A stored chunk of a dp_reshardable bucket key that the recovered layout says is padding.
struct StoredPadding {
  std::string key;
  uint64_t lo = 0, hi = 0;  // elements of the bucket key
};

// One optimizer group of a dp_reshardable checkpoint: the distributed optimizer of one model-parallel
// rank, over that rank's local parameters.
struct OptimizerGroup {
  std::string prefix;  // "[chained_N.]optimizer.distributed.dp_group_idx_G"
  uint32_t index = 0;  // G
  bool expert = false;
  uint32_t tp = 0, pp = 0, ep = 0;  // the model-parallel rank (tp: the expert TP rank for experts)
  uint32_t dp = 1;                  // its data-parallel size (expert DP for experts), as recovered
  bool dp_is_smallest = false;      // dp is only the smallest the buckets allow (DcpParams::dp_is_smallest)
  RecoveredLayout layout;           // over `params`, registration order
  std::vector<LocalParam> params;
  // The ranks of the storage files holding the group's bucket chunks, ascending: its DP ranks in
  // order (a rank storing only tail padding writes none).
  std::vector<uint64_t> rank_files;
};

// The parallel sizes a dp_reshardable checkpoint was saved at, as its optimizer groups give them.
struct ParallelSizes {
  uint32_t tp = 1, pp = 1, ep = 1, expert_tp = 1;
  uint32_t dp = 1, expert_dp = 1;     // the largest over the groups
  // Context parallelism, from Megatron-LM's saved args (the keys do not show it): the distributed
  // optimizer shards over DP × CP ranks, so `dp` is that product and the data-parallel size dp / cp.
  uint32_t cp = 1;
  std::vector<uint64_t> stage_layers; // per pipeline stage, its number of layers
  // MoE: how each layer's experts are registered, as the stored bucket sizes confirm it; whether
  // they sit in the dense groups (a run at EP 1 whose expert TP is its TP: no chained optimizer).
  ExpertOrder expert_order = ExpertOrder::sequential;
  bool experts_in_dense = false;
};

class DcpParams : public ckpt::ParamSource {
 public:
  // fpg::Error with exit code 1 (check failed) when a dp_reshardable layout cannot be recovered
  // (the stored bucket sizes disagree with Megatron's arithmetic); FormatError for malformed objects.
  explicit DcpParams(const Reader& reader);

  std::string describe() const override;
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override;
  // Box `box` of tensor t, row-major, into out, where one stored piece of t is exactly that box (a
  // tensor-parallel piece of a parameter's state): that piece alone read, none of the others' bytes.
  // False, nothing read, otherwise.
  bool read_stored_piece(size_t t, const Box& box, void* out) const;
  bool concurrent_reads() const override { return true; }
  // The reads to come, in order: the asking ahead (see prefetch) follows them instead of the order of
  // tensors(), so that an export of some tensors (the weights alone, or a model's tensors gathered in
  // another order) asks the disk for those and nothing else. Until finish_reads.
  void plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const override;
  // Checks the CRC-32 of the torch.save records read in parts: their unread bytes (padding) are read
  // for it. FormatError naming the record on a mismatch.
  void finish_reads() const override;

  bool megatron() const { return megatron_; }
  // Megatron: the parameters in registration order, as the model keys give them.
  const std::vector<MegatronParam>& megatron_params() const { return params_; }
  // Megatron: the optimizer keys' common prefix ("optimizer.distributed.dp_group_idx_0" for
  // dp_reshardable, "optimizer.state" for model space), "" without optimizer state.
  const std::string& optimizer_prefix() const { return optimizer_prefix_; }
  // The stored entry a parameter tensor reads, and where its element 0 lies in it.
  size_t entry_of(size_t tensor) const { return sources_.at(tensor).entry; }
  OptimizerForm optimizer_form() const { return form_; }
  // dp_reshardable: every optimizer group (dense groups by index, then expert groups), and the
  // parallel sizes they were saved at.
  const std::vector<OptimizerGroup>& groups() const { return groups_; }
  const std::optional<ParallelSizes>& parallel() const { return parallel_; }
  // Megatron, any optimizer form: the tensor-parallel sizes the model keys' chunks give (dense,
  // expert) and the experts per MoE layer (0 without).
  uint32_t model_tp() const { return model_tp_; }
  uint32_t model_expert_tp() const { return model_expert_tp_; }
  uint64_t experts() const { return experts_; }
  // The recovered buffer layout of the first group and the DP size it was recovered at
  // (dp_reshardable only).
  const std::optional<RecoveredLayout>& layout() const { return layout_; }
  uint32_t dp() const { return dp_; }
  // Whether dp() is only the smallest DP size the stored buckets allow: when every bucket is smaller
  // than a rank's shard, only the first ranks store anything and larger sizes read alike.
  bool dp_is_smallest() const { return dp_is_smallest_; }
  // dp_reshardable: the stored chunks that are padding under the recovered layout.
  const std::vector<StoredPadding>& stored_padding() const { return stored_padding_; }
  // Stored keys no parameter tensor reads (besides bucket metadata and bytes entries) that name no
  // parameter; the states that name one with another shape are shape_mismatches().
  const std::vector<std::string>& unmapped_keys() const { return unmapped_; }
  // Stored optimizer states that name a parameter but have another shape; no tensor reads them.
  const std::vector<ShapeMismatch>& shape_mismatches() const { return mismatches_; }
  // Plain DCP: keys of a dtype fpgather has no counterpart of (complex128, complex32, the packed
  // float4_e2m1fn_x2 …), as {key, "torch.NAME"}. Each is a tensor of its bytes (ParamTensor::
  // unexportable says why it is not exported); the rest of the checkpoint is read as usual.
  struct UnsupportedDtype {
    std::string key, dtype;
  };
  const std::vector<UnsupportedDtype>& unsupported_dtypes() const { return unsupported_; }
  // Plain DCP: the bytes entries (param_groups, a scheduler's or dataloader's state), by key, each
  // compared by its decoded content (its repr).
  const std::vector<std::string>& objects() const override { return objects_; }
  std::string object_text(size_t object) const override;
  std::vector<uint8_t> object_bytes(size_t object) const override;

 private:
  // A part of a tensor stored in another key than the rest: a box of the tensor, row-major in
  // the key's flat extent from `base`.
  struct Piece {
    Box box;
    size_t entry = 0;
    uint64_t base = 0;
  };
  struct Source {
    size_t entry = 0;   // index into metadata().entries
    uint64_t base = 0;  // the tensor's element 0 in the key's flat extent
    std::vector<Piece> pieces;  // when not empty, the tensor is these (entry, base: the first one's)
  };
  void add(const std::string& param, const std::string& role, size_t entry, uint64_t base,
           const std::vector<uint64_t>& shape);
  void map_megatron();
  void map_plain();
  // A plain DCP tensor: `entry` as `param`'s `role` (its own name for "other"), or as its bytes where
  // its dtype has no fpgather counterpart.
  void add_plain(const std::string& param, const std::string& role, size_t entry);
  void map_buckets(const std::vector<MegatronParam>& params, const std::vector<size_t>& bucket_entries);
  struct GroupKeys;
  // Megatron-LM's saved args against the recovered sizes (TP, PP, EP, expert TP, DP): fpg::Error
  // (check failed) listing every disagreement; sets sizes.cp from context_parallel_size.
  void check_saved_args(const MegatronCommonState& common, ParallelSizes& sizes, bool experts) const;
  // Recovers one group's layout and DP size over its local parameters; `mismatch` says why not.
  bool recover_group(const GroupKeys& keys, OptimizerGroup& group, std::string& mismatch) const;
  void read_flat(size_t t, size_t entry, uint64_t base, uint64_t lo, uint64_t hi, void* out) const;
  // Asks the disk for the chunks `now` of tensor t's entry, which this read is about to copy, and for
  // what reads after it will want, in their order, up to a window (Reader::prefetch): with a plan
  // (plan_reads), the stored items of the planned reads from the one in progress on; without, tensor
  // t's chunks after `chunk` of `entry` (every piece's), then the following tensors'. Each stored item
  // is asked for once per pass; the asking runs on helper threads, as it may wait for the disk's queue.
  void prefetch(size_t t, size_t entry, const std::vector<size_t>& now, size_t chunk) const;
  // The ranges of stored keys a read of elements [lo, hi) of tensor t takes: f(entry, first, end),
  // elements of the key's flat extent.
  template <class F> void key_ranges(size_t t, uint64_t lo, uint64_t hi, F&& f) const;
  // The chunks of `entry` holding elements [lo, hi) of its flat extent, in chunk order: f(chunk).
  template <class F> void chunks_in(size_t entry, uint64_t lo, uint64_t hi, F&& f) const;
  // Moves the plan's position to the planned read of tensor t that [lo, hi) overlaps, if one lies a
  // few reads ahead of it (reads run a few at once, so they may start slightly out of order).
  void follow_plan(size_t t, uint64_t lo, uint64_t hi) const;

  const Reader& r_;
  bool megatron_ = false;
  OptimizerForm form_ = OptimizerForm::none;
  uint32_t dp_ = 1;
  bool dp_is_smallest_ = false;
  std::vector<std::optional<uint64_t>> storage_rank_;  // per storage entry: the rank its file names
  std::optional<RecoveredLayout> layout_;
  std::vector<OptimizerGroup> groups_;
  std::optional<ParallelSizes> parallel_;
  uint32_t model_tp_ = 1, model_expert_tp_ = 1;
  uint64_t experts_ = 0;
  std::vector<StoredPadding> stored_padding_;
  std::vector<std::string> unmapped_;
  std::vector<ShapeMismatch> mismatches_;
  std::vector<UnsupportedDtype> unsupported_;
  std::vector<std::string> objects_;
  std::vector<size_t> object_entries_;  // per object: its entry
  std::vector<uint32_t> byte_view_;     // per tensor: the element size of a bytes view, else 0
  std::vector<MegatronParam> params_;
  std::string optimizer_prefix_;
  std::vector<ckpt::ParamTensor> tensors_;
  std::vector<Source> sources_;

  // CRCs of the records whose parts reads took alone (a parameter's slice of a bucket shard).
  mutable PartCrcLedger part_crcs_;
  struct Cached {
    size_t entry = SIZE_MAX, chunk = SIZE_MAX;
    std::vector<uint8_t> bytes;
  };
  mutable std::mutex cache_mu_;
  mutable Cached cache_;  // under cache_mu_
  mutable std::mutex ask_mu_;
  // Under ask_mu_: per stored item, whether it was asked for in this pass; the furthest tensor read;
  // per tensor, the (entry, chunk) pairs a read of it takes, in order (made as the asking reaches it).
  mutable std::vector<uint8_t> asked_;
  mutable size_t furthest_read_ = 0;
  mutable std::vector<std::vector<std::pair<size_t, size_t>>> read_order_;
  mutable std::vector<bool> read_order_known_;
  const std::vector<std::pair<size_t, size_t>>& read_order(size_t t) const;
  // Under ask_mu_: the planned reads, each with where its stored items begin in plan_items_ (the
  // plan's items in the order first read, each once); the furthest planned read begun.
  struct PlannedRead {
    size_t tensor;
    uint64_t lo, hi;
    size_t first_item;
  };
  mutable std::vector<PlannedRead> plan_;
  mutable std::vector<std::pair<size_t, size_t>> plan_items_;  // (entry, chunk)
  mutable size_t plan_at_ = 0;
  mutable std::vector<AsyncTask<void>> asking_;  // last: waited for before the rest goes
};

}  // namespace fpg::dcp

namespace fpg::dcp {

// What DcpParams finds wrong when mapping a checkpoint to parameters, as validation problems: a
// Megatron optimizer layout that cannot be recovered (layout_mismatch), objects that cannot be
// decoded (checksum), optimizer states whose shape is not their parameter's (shape, one per state). `view` receives the mapping when it succeeds.
// A layout fpgather does not read (UnsupportedError) is no problem: its message goes to `unmapped`.
std::vector<ckpt::Problem> check_param_mapping(const Reader& reader, std::unique_ptr<DcpParams>* view = nullptr,
                                               std::string* unmapped = nullptr);

// Refuses (fpg::Error, exit code 1, naming each state key, its shape and its parameter) a mapping with
// shape mismatches: whatever reads the checkpoint per parameter (an export, a reshard, a comparison)
// would otherwise leave those states out. `refusing` says what is refused ("export it").
void require_no_shape_mismatch(const DcpParams& params, const std::string& refusing);

// What `fpgather validate` runs on a DCP directory: DCP's rules (validate.h) and, for a checkpoint
// that passes them, check_param_mapping's problems added to the report. `view` receives the mapping
// when it succeeds; it reads through `reader`, which must outlive it.
ValidationReport validate_with_params(const Reader& reader, const ValidateOptions& options,
                                      std::unique_ptr<DcpParams>* view = nullptr, std::string* unmapped = nullptr);

}  // namespace fpg::dcp
