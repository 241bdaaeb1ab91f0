// `fpgather bench dcp-make --megatron`: a synthetic Megatron-Core torch_dist checkpoint of a GPT at
// TP × PP × DP in the default dp_reshardable form, for the benchmarks of reading and resharding
// model-parallel checkpoints at sizes the fixtures Megatron writes on one GPU cannot reach
// (BENCHMARKS.md). The model keys are laid out as Megatron-Core stores them (embedding and output
// layer split over TP along the vocabulary, stacked layers [L, …] with linear_qkv and linear_fc1
// split along their outputs, linear_fc1 as [w_0 … w_{T-1}, v_0 … v_{T-1}], linear_proj and
// linear_fc2 along their inputs, norms replicated); each of the TP × PP optimizer groups is laid out
// over its rank's local parameters by the layout engine, with Adam's param / exp_avg / exp_avg_sq,
// written through megatron/bucket_writer.h. Values are a deterministic pattern, not a training run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fpg::bench {

struct SyntheticMegatronOptions {
  std::string dir;  // the checkpoint to create (must not exist)
  uint32_t tp = 8, pp = 8, dp = 16;
  uint64_t layers = 64, hidden = 256, ffn = 1024, heads = 8, query_groups = 8, vocab = 4096;
  std::optional<uint64_t> bucket_size;  // elements per bucket; none: one bucket per buffer
};

struct SyntheticMegatronSummary {
  uint64_t groups = 0, ranks = 0, keys = 0, chunks = 0;
  uint64_t tensor_bytes = 0, file_bytes = 0, metadata_bytes = 0;
  double seconds = 0;
};

// Writes and commits the checkpoint, the groups in parallel on the global thread pool. UsageError
// for sizes that describe no such model (layers not divisible by pp, heads or query groups or the
// vocabulary not divisible by tp, an existing dir).
SyntheticMegatronSummary make_synthetic_megatron(const SyntheticMegatronOptions& o);

}  // namespace fpg::bench
