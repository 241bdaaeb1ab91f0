// What one distributed-optimizer pipeline runs: the optimizer and its hyperparameters, the FP8
// recipe of the parameters, the layout options and gradient clipping. Every rank builds its
// RankPipeline (pipeline/rank_pipeline.h) from the same config and the same spec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fp8/delayed.h"
#include "fp8/recipe.h"
#include "optim/muon.h"
#include "optim/routing.h"

namespace fpg::pipeline {

enum class DistOpt : uint8_t {
  bucketed,   // ZeRO-1: equal shards of every bucket (Megatron DistributedOptimizer)
  layerwise,  // matrices owned whole (Megatron LayerWiseDistributedOptimizer), the rest bucketed
};

// How a layer-wise matrix travels from its owner to every rank (pipeline/layer_wise_part.h).
enum class Transport : uint8_t { bf16, f32, fp8_compact };

const char* dist_opt_name(DistOpt d);                              // "bucketed", "layerwise"
std::optional<DistOpt> parse_dist_opt(const std::string& name);

// FP8 parameters. When enabled, every param with role `matrix`, dtype BF16 and not fp32-kept is
// stored as FP8 (Transformer Engine's Linear weights; embedding, output head and vectors stay bf16).
// The largest delayed-scaling history: each FP8 tensor keeps this many amaxes (Transformer Engine
// users run up to 1024).
constexpr size_t kMaxAmaxHistory = 65536;
// The largest bucket, in elements: the layout pads bucket ends up to lcm(dp, 128, 65536), which must
// not overflow 64 bits, and no buffer comes near it.
constexpr uint64_t kMaxBucketSize = uint64_t{1} << 48;
// The most Newton-Schulz iterations of a Muon step (5 is the usual; more do not converge further).
constexpr int kMaxNsSteps = 100;

struct Fp8Config {
  bool enabled = false;
  fp8::Recipe recipe;          // scaling, format, pow2, MX rule and directions
  // Delayed scaling only: history length and algorithm (Megatron's defaults: 1, most_recent).
  size_t amax_history_len = 1;
  fp8::AmaxAlgo amax_algo = fp8::AmaxAlgo::most_recent;
  int margin = 0;
};

struct PipelineConfig {
  DistOpt dist_opt = DistOpt::bucketed;
  optim::OptimizerKind optimizer = optim::OptimizerKind::adamw;
  // With muon: the optimizer of everything Muon does not take (vectors, embedding, output, and
  // fp32-kept matrices unless fp32_matrices).
  optim::ScalarOptimizer scalar_optimizer = optim::ScalarOptimizer::adamw;

  // torch-named hyperparameters shared by Adam/AdamW/Lion (and Muon's lr and weight decay).
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  int torch_vec_width = 8;  // Adam's scalar-tail rounding (optim/adam_math.h)
  // Muon only.
  double muon_momentum = 0.95;
  bool muon_nesterov = true;
  int muon_ns_steps = 5;
  optim::MuonLrAdjust muon_adjust_lr = optim::MuonLrAdjust::match_rms_adamw;

  // Clip the global gradient norm to this (torch clip_grad_norm_); <= 0: no clipping.
  double clip_grad = 1.0;

  Fp8Config fp8;

  // Layout.
  std::optional<uint64_t> bucket_size;  // nullopt: one bucket per buffer
  bool pad_for_nccl = false;
  bool fp32_matrices = false;   // layerwise: fp32-kept matrices go to the layer-wise optimizer too
  // layerwise: ship FP8 bytes + amax grids instead of bf16 where that is fewer bytes (the result is
  // bit-identical either way).
  bool compact_fp8_gather = true;
};

// The distributed optimizer to use when the user named none: layerwise for muon (Newton-Schulz needs
// whole matrices), bucketed otherwise. A requested one is returned as is (validate_config refuses
// muon with bucketed).
DistOpt resolve_dist_opt(std::optional<DistOpt> requested, optim::OptimizerKind optimizer);

// Throws UsageError with the reason when the config cannot run: muon with the bucketed optimizer
// (Newton-Schulz needs whole matrices), non-positive lr, betas outside [0, 1), FP8 recipes that
// need a direction, and the like. Shape checks happen when the pipeline is built.
void validate_config(const PipelineConfig& c);

}  // namespace fpg::pipeline
