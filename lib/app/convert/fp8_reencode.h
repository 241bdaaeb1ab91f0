// `fpgather convert CKPT DST --fp8 RECIPE`: a training checkpoint with another FP8 recipe (or FP8
// turned on or off). The run is rebuilt from the checkpoint's documents (run_from_documents.h) with
// the new recipe: every DP rank's pipeline is built with its fp32 masters as the initial values, so
// the FP8 (or bf16) params are re-quantized from the masters by the pipeline's own copy-back and
// the recipe state is reset to what a fresh `train` run holds right after building its pipeline
// from those masters: scales (or MXFP8 E8M0 grids) computed from the masters' amax by the recipe;
// with delayed scaling, TE's initial state (scale 1) after that first cast recorded its amax in
// the history. The optimizer states and the step are then read into the rank states,
// and the ranks save in the checkpoint's state layout with the train save code, committed
// atomically (an existing DST is refused, or with `force` replaced whole). So DST equals the
// checkpoint `train --init <fp32 export of CKPT> --fp8 RECIPE` would save at step 0, with CKPT's
// optimizer states, step and data cursor.
//
// Before DST is committed, the documents of the rebuilt run are compared with CKPT's (model,
// optimizer, data, rng must be equal; fp8 and the layout's FP8 buffers may differ), so a rebuild
// that does not reproduce the saved run is refused rather than written.
//
// Memory: the whole training state of every DP rank, as `train` holds it (each rank its params
// whole plus its optimizer shard); chunk buffers besides.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/chunk_codec.h"
#include "pipeline/config.h"

namespace fpg::app::convert {

struct Fp8ReencodeOptions {
  pipeline::Fp8Config fp8;         // the new FP8 config (enabled = false: bf16 params)
  ckpt::Compression compression;   // of DST (default zstd:1, as train)
  uint64_t chunk_bytes = 4ull << 20;
  bool force = false;              // replace an existing DST (app/convert/staged_output.h)
  bool progress = false;           // name each phase on stderr's progress line (core/progress.h)
};

struct Fp8ReencodeSummary {
  std::string source, target;
  uint64_t step = 0;
  size_t fp8_params = 0;
};

Fp8ReencodeSummary reencode_fp8(const std::string& src, const std::string& dst, const Fp8ReencodeOptions& o);

}  // namespace fpg::app::convert
