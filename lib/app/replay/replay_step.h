// `fpgather step` as a library: one optimizer step on tensors from files (app/replay/step_files.h), run
// through the full distributed pipeline (pipeline/rank_pipeline.h) on `dp` ranks (threads, or mpi processes).
//
// The model spec comes from the file's tensors, in file order: a 2-D tensor is a `matrix` (Muon takes
// it; FP8 recipes store it as FP8) unless its name matches `scalar_params`, which makes it an
// `embedding` (the scalar optimizer, never FP8); every other tensor is a `vector` of its numel
// elements (shape kept for the files). Parameters are BF16 in the spec — the mixed-precision case:
// the optimizer updates fp32 masters, the ranks hold bf16 (or FP8) copies — and `keep_fp32` makes
// matching ones native fp32 (`fp32_matrices`: matrices that stay with Muon).
//
// The given gradient is applied as is: rank 0 feeds it, every other rank feeds -0.0 (g + -0.0 == g
// bitwise), and the step runs with one micro-batch (no 1/N scaling; rank_pipeline.h). So the result
// does not depend on dp, the distributed optimizer or the FP8 recipe: the masters written out are
// bitwise those of dp 1. Clipping only with pipeline.clip_grad > 0. A non-finite gradient skips the
// step (as the pipeline does): parameters, state and step count come out unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/rank_pipeline.h"
#include "app/replay/step_files.h"

namespace fpg::app::replay {

struct ReplayOptions {
  pipeline::PipelineConfig pipeline;  // optimizer, hyperparameters, dist_opt, FP8, clip_grad
  uint32_t dp = 1;
  std::string scalar_params = "embed|lm_head|output";  // ECMAScript regex, matched anywhere in the name
  std::string keep_fp32;                               // empty: none
  std::string fp32_matrices;  // empty: none; set pipeline.fp32_matrices with it (app/train/fp32_params.h)
  std::string comm = "threads";  // "threads", or "mpi" with one rank per process (comm/group.h)
  bool force = false;  // replace an existing out (without it, UsageError before anything is read)
  bool progress = false;  // replay_step_files: name each phase on stderr's progress line (core/progress.h)
};

struct ReplayReport {
  // This process hosts rank 0, which assembles the result (always with threads); only then are the
  // other fields, the updated StepFile and the written file meaningful.
  bool has_rank0 = false;
  int64_t step_in = 0, step_out = 0;
  bool skipped = false;
  double grad_norm = 0;
  float clip_coef = 1.0f;
  uint64_t params = 0, elements = 0;
  uint64_t fp8_params = 0;    // stored as FP8 on the ranks
  uint64_t muon_params = 0;   // updated by Muon
  std::vector<std::string> warnings;  // about the options (app/train/fp32_params.h), for the user
  pipeline::PhaseTimes times;  // rank 0's
};

// The spec of the file's parameters (see above), with o.scalar_params, o.keep_fp32 and o.fp32_matrices
// applied (app/train/fp32_params.h; its warnings to *warnings). UsageError for an invalid regex.
model::ModelSpec step_spec(const StepFile& f, const ReplayOptions& o, std::vector<std::string>* warnings = nullptr);

// One step: f's parameters, state and step count are replaced by the updated ones. UsageError for
// a state tensor the optimizer of its parameter does not keep (e.g. exp_avg_sq with lion), and for
// configurations the pipeline refuses (muon with bucketed, MXFP8 on dims not multiples of 32, …).
ReplayReport replay_step(StepFile& f, const std::vector<std::vector<float>>& grads, const ReplayOptions& o);

// Reads params and grads, steps, writes out (may be the params path with o.force: everything is read
// first). UsageError, before anything is read, for an existing out without o.force.
ReplayReport replay_step_files(const std::string& params, const std::string& grads, const std::string& out,
                               const ReplayOptions& o);

}  // namespace fpg::app::replay
