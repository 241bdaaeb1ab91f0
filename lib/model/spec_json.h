// The JSON file form of a model spec (`fpgather train --model FILE`, and the spec stored in every
// checkpoint index).
//
//   {
//     "name": "demo",                  optional; default: the file name without its extension
//     "network": {                     optional: the built-in network's dims; alone it generates
//       "input": 20, "hidden": 48,     the params, with "params" the params must match it (up to
//       "ffn": 176, "layers": 4,       dtype and keep_in_fp32)
//       "output": 20 },
//     "params": [                      registration order; required unless "network" is given
//       { "name": "blocks.0.fc1.weight",
//         "shape": [352, 48],          one or more positive integers
//         "role": "matrix",            "matrix" | "embedding" | "output" | "vector"
//         "dtype": "BF16",             optional: "BF16" (default) or "F32" ("bf16", "fp32" accepted)
//         "keep_in_fp32": false,       optional; true makes the default dtype F32
//         "gated": true }              optional: SwiGLU fc1 [2F, H]
//     ]
//   }
//
// Unknown keys are errors (they are usually typos). The rules of check_spec apply. Every error is a
// FormatError naming the file and the field, e.g. "m.json: params[3].shape: zero dimension in [0, 4]".
#pragma once

#include <string>
#include <string_view>

#include "model/model_spec.h"

namespace fpg::model {

// Parses `text`; `source` names it in errors (a file name) and gives the default model name.
ModelSpec parse_spec_json(std::string_view text, const std::string& source);

// Reads and parses the file at `path`.
ModelSpec load_spec_file(const std::string& path);

// The JSON form; parse_spec_json(spec_to_json(s), ...) == s. indent < 0: one line.
std::string spec_to_json(const ModelSpec& spec, int indent = 2);

// `--model ARG`: a preset name, else a JSON spec file. UsageError if it is neither.
ModelSpec resolve_model(const std::string& arg);

}  // namespace fpg::model
