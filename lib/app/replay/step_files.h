// The files of `fpgather step` (safetensors, fp32 only):
//
//   params (IN / OUT)  every parameter NAME as F32 with its own shape; optionally its optimizer state
//                      as NAME.exp_avg, NAME.exp_avg_sq, NAME.momentum_buffer (F32, NAME's shape);
//                      the optimizer step count as __metadata__ "step" (a decimal integer; absent: 0).
//                      A tensor is state when its name is another tensor's name plus one of those
//                      suffixes; every other tensor is a parameter.
//   grads (G)          exactly one F32 tensor per parameter, same name, same shape.
//
// OUT has the same form as IN, so it can be passed back as the next step's params. Its metadata is
// the step count and the optimizer name only — nothing about DP size or FP8 — so the same update
// writes the same bytes however it was computed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fpg::app::replay {

struct StepTensor {
  std::string name;
  std::vector<uint64_t> shape;  // as stored ([] for a scalar)
  std::vector<float> value;
  std::map<std::string, std::vector<float>> state;  // state key ("exp_avg", …) -> values
};

struct StepFile {
  std::vector<StepTensor> params;  // in file order
  int64_t step = 0;
};

// "exp_avg", "exp_avg_sq", "momentum_buffer".
const std::vector<std::string>& step_state_keys();

// Reads IN. UsageError (exit 2) for content the step cannot take — a parameter or state that is not
// F32, a state whose shape differs from its parameter's, an empty tensor; FormatError (exit 3) for a
// malformed file or a "step" that is not a non-negative integer. Errors name the file and tensor.
StepFile read_step_params(const std::string& path);

// Reads G against the parameters of `params`: one vector per parameter, in the same order.
// UsageError naming the tensor for a missing, extra, non-F32 or mis-shaped gradient.
std::vector<std::vector<float>> read_step_grads(const std::string& path, const StepFile& params);

// Writes OUT atomically: every parameter, then its state tensors, and {"step", "optimizer"}.
void write_step_params(const std::string& path, const StepFile& f, const std::string& optimizer);

}  // namespace fpg::app::replay
