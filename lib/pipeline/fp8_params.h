// Which parameters are FP8 and the per-tensor pieces the copy-backs share: plans (from the fp32
// master read as bf16, or from gathered bf16), scale-grid storage and the delayed-scaling config.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8/delayed.h"
#include "fp8/recipe.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/rank_state.h"

namespace fpg::pipeline {

// A param is FP8 when FP8 is enabled and it is a bf16 `matrix` (Transformer Engine Linear weight)
// not kept in fp32.
bool is_fp8_param(const model::Param& p, const PipelineConfig& c);
// Per spec param, is_fp8_param (the layouts' BucketedOptions::fp8); empty when FP8 is off.
std::vector<bool> fp8_flags(const model::ModelSpec& spec, const PipelineConfig& c);

fp8::DelayedConfig delayed_config(const Fp8Config& c);
bool is_delayed(const Fp8Config& c);

// One FP8 param's plans. from_master reads the fp32 master as bf16(x) (Input::f32_as_bf16: sharded
// quantization equals full-tensor quantization of bf16(master)); from_bf16 reads bf16 bits.
struct Fp8Tensor {
  uint32_t param = 0;
  uint32_t state = 0;  // index in RankState::fp8
  fp8::Plan from_master, from_bf16;
};

// Builds RankState::fp8 (scale grids sized, delayed state at TE's initial scale 1) and the plans,
// for every FP8 param of spec, in spec order. index[p] is the Fp8Tensor of param p or -1.
// Throws UsageError naming the param when the recipe cannot take its shape (MXFP8 needs both dims
// multiples of 32 for the directions it produces).
std::vector<Fp8Tensor> make_fp8_tensors(const model::ModelSpec& spec, const PipelineConfig& c,
                                        std::vector<Fp8ParamState>& states, std::vector<int32_t>& index);

// Bytes of the param's quantized payload on the wire: rowwise + columnwise data.
uint64_t fp8_data_bytes(const fp8::Plan& p);

// Sets scales to the delayed state's current scale (the one the next cast uses).
void load_delayed_scales(Fp8ParamState& s);

// After the step's amax is known (global max over the tensor): record it and update the scale.
void record_delayed(const Fp8Config& c, Fp8ParamState& s, float amax);

}  // namespace fpg::pipeline
