// What a tensor is quantized with (Recipe), and a recipe applied to one tensor's geometry (Plan).
//
// Geometry follows Transformer Engine: a tensor of shape (d0, ..., dn) is the matrix (M, K) with
// M = d0*...*d(n-1) (1 for 1-D and 0-D tensors) and K = dn. Flat element i is (i / K, i % K).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8/format.h"

namespace fpg {
namespace fp8 {

enum class Scaling : uint8_t {
  tensorwise,         // current scaling: one scale from this tensor's amax
  delayed,            // one scale from an amax history (fp8/delayed.h)
  blockwise_1x128,    // one fp32 scale per 1x128 block along K
  blockwise_128x128,  // one fp32 scale per 128x128 block
  mxfp8,              // one E8M0 scale per 32 elements, rowwise (1x32) and/or columnwise (32x1)
};

enum class MxRule : uint8_t { rceil, floor };  // TE/cuBLAS round-up, OCP MX v1.0/torchao floor
// The high-precision values: fp32, bf16 (raw bits), or fp32 rounded to bf16 first (fp8/source.h).
enum class Input : uint8_t { f32, bf16, f32_as_bf16 };

struct Recipe {
  Scaling scaling = Scaling::tensorwise;
  Format format = Format::e4m3;
  bool pow2 = false;          // tensorwise/blockwise: truncate scales to powers of two
  float amax_epsilon = 0.0f;  // tensorwise/blockwise: amax below this counts as this
  MxRule mx_rule = MxRule::rceil;
  bool mx_rowwise = true;
  bool mx_columnwise = false;

  // The defaults of each recipe: tensorwise without pow2 (TE current scaling), blockwise with pow2
  // (TE Float8BlockScaling; pow2=false gives DeepSeek-V3-style scales x*(fp8_max/amax)).
  static Recipe tensorwise(Format f = Format::e4m3, bool pow2 = false);
  static Recipe delayed(Format f = Format::e4m3);
  static Recipe blockwise_1x128(Format f = Format::e4m3, bool pow2 = true);
  static Recipe blockwise_128x128(Format f = Format::e4m3, bool pow2 = true);
  static Recipe mxfp8(Format f = Format::e4m3, MxRule rule = MxRule::rceil, bool rowwise = true,
                      bool columnwise = false);
};

// CLI names: "tensorwise", "delayed", "blockwise-1x128", "blockwise" (128x128), "mxfp8"; "e4m3",
// "e5m2"; "rceil", "floor".
std::string_view scaling_name(Scaling s);
std::optional<Scaling> parse_scaling(std::string_view name);
std::string_view format_name(Format f);
std::optional<Format> parse_format(std::string_view name);
std::string_view mx_rule_name(MxRule r);
std::optional<MxRule> parse_mx_rule(std::string_view name);

struct GridShape {
  uint64_t rows = 0, cols = 0;
  uint64_t size() const { return rows * cols; }
};

// A recipe applied to one tensor: its geometry and its amax/scale grids. Build with make_plan,
// which checks that the recipe can take the tensor.
struct Plan {
  Recipe recipe;
  Input input = Input::f32;
  uint64_t M = 0, K = 0;
  // The main grid: [1, 1] per tensor; [ceil(M/128), ceil(K/128)] for 128x128; [M, ceil(K/128)] for
  // 1x128; [M, K/32] for MX rowwise ([0, 0] when rowwise is off).
  GridShape grid;
  // MX columnwise: [M/32, K] (compact, not transposed); [0, 0] otherwise.
  GridShape col_grid;

  uint64_t numel() const { return M * K; }
  bool has_rowwise() const { return recipe.scaling != Scaling::mxfp8 || recipe.mx_rowwise; }
  bool has_columnwise() const { return recipe.scaling == Scaling::mxfp8 && recipe.mx_columnwise; }
};

// Throws fpg::UsageError naming `name` and the reason when the recipe cannot take the shape
// (MX rowwise needs K % 32 == 0, MX columnwise M % 32 == 0, MX needs some direction).
Plan make_plan(const Recipe& r, Input in, const std::vector<uint64_t>& shape, std::string_view name = {});
Plan make_plan(const Recipe& r, Input in, uint64_t M, uint64_t K, std::string_view name = {});

}  // namespace fp8
}  // namespace fpg
