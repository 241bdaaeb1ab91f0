#include "fp8/recipe.h"

#include <string>

#include "core/error.h"

namespace fpg {
namespace fp8 {

Recipe Recipe::tensorwise(Format f, bool pow2) {
  Recipe r;
  r.scaling = Scaling::tensorwise;
  r.format = f;
  r.pow2 = pow2;
  return r;
}

Recipe Recipe::delayed(Format f) {
  Recipe r;
  r.scaling = Scaling::delayed;
  r.format = f;
  return r;
}

Recipe Recipe::blockwise_1x128(Format f, bool pow2) {
  Recipe r;
  r.scaling = Scaling::blockwise_1x128;
  r.format = f;
  r.pow2 = pow2;
  return r;
}

Recipe Recipe::blockwise_128x128(Format f, bool pow2) {
  Recipe r = blockwise_1x128(f, pow2);
  r.scaling = Scaling::blockwise_128x128;
  return r;
}

Recipe Recipe::mxfp8(Format f, MxRule rule, bool rowwise, bool columnwise) {
  Recipe r;
  r.scaling = Scaling::mxfp8;
  r.format = f;
  r.mx_rule = rule;
  r.mx_rowwise = rowwise;
  r.mx_columnwise = columnwise;
  return r;
}

std::string_view scaling_name(Scaling s) {
  switch (s) {
    case Scaling::tensorwise: return "tensorwise";
    case Scaling::delayed: return "delayed";
    case Scaling::blockwise_1x128: return "blockwise-1x128";
    case Scaling::blockwise_128x128: return "blockwise";
    case Scaling::mxfp8: return "mxfp8";
  }
  return "?";
}

std::optional<Scaling> parse_scaling(std::string_view n) {
  for (Scaling s : {Scaling::tensorwise, Scaling::delayed, Scaling::blockwise_1x128,
                    Scaling::blockwise_128x128, Scaling::mxfp8})
    if (n == scaling_name(s)) return s;
  if (n == "blockwise-128x128") return Scaling::blockwise_128x128;
  return std::nullopt;
}

std::string_view format_name(Format f) { return f == Format::e4m3 ? "e4m3" : "e5m2"; }

std::optional<Format> parse_format(std::string_view n) {
  if (n == "e4m3") return Format::e4m3;
  if (n == "e5m2") return Format::e5m2;
  return std::nullopt;
}

std::string_view mx_rule_name(MxRule r) { return r == MxRule::rceil ? "rceil" : "floor"; }

std::optional<MxRule> parse_mx_rule(std::string_view n) {
  if (n == "rceil") return MxRule::rceil;
  if (n == "floor") return MxRule::floor;
  return std::nullopt;
}

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

std::string shape_str(uint64_t M, uint64_t K, const std::vector<uint64_t>* shape) {
  std::string s = "[";
  if (shape) {
    for (size_t i = 0; i < shape->size(); ++i) s += (i ? ", " : "") + std::to_string((*shape)[i]);
  } else {
    s += std::to_string(M) + ", " + std::to_string(K);
  }
  return s + "]";
}

Plan build(const Recipe& r, Input in, uint64_t M, uint64_t K, std::string_view name,
           const std::vector<uint64_t>* shape) {
  Plan p;
  p.recipe = r;
  p.input = in;
  p.M = M;
  p.K = K;
  const auto fail = [&](const std::string& why) {
    throw UsageError(std::string(scaling_name(r.scaling)) + " cannot quantize tensor '" +
                     std::string(name) + "' of shape " + shape_str(M, K, shape) + ": " + why);
  };
  switch (r.scaling) {
    case Scaling::tensorwise:
    case Scaling::delayed:
      p.grid = {1, 1};
      break;
    case Scaling::blockwise_1x128:
      p.grid = {M, ceil_div(K, 128)};
      break;
    case Scaling::blockwise_128x128:
      p.grid = {ceil_div(M, 128), ceil_div(K, 128)};
      break;
    case Scaling::mxfp8:
      if (!r.mx_rowwise && !r.mx_columnwise) fail("neither rowwise nor columnwise scaling is enabled");
      if (r.mx_rowwise) {
        if (K % 32 != 0)
          fail("mxfp8 rowwise needs the last dimension to be a multiple of 32 (it is " +
               std::to_string(K) + ")");
        p.grid = {M, K / 32};
      }
      if (r.mx_columnwise) {
        if (M % 32 != 0)
          fail("mxfp8 columnwise needs the product of the leading dimensions to be a multiple of 32 (it is " +
               std::to_string(M) + ")");
        p.col_grid = {M / 32, K};
      }
      break;
  }
  return p;
}

}  // namespace

Plan make_plan(const Recipe& r, Input in, const std::vector<uint64_t>& shape, std::string_view name) {
  uint64_t M = 1, K = 1;
  if (!shape.empty()) {
    K = shape.back();
    for (size_t i = 0; i + 1 < shape.size(); ++i) M *= shape[i];
  }
  return build(r, in, M, K, name, &shape);
}

Plan make_plan(const Recipe& r, Input in, uint64_t M, uint64_t K, std::string_view name) {
  return build(r, in, M, K, name, nullptr);
}

}  // namespace fp8
}  // namespace fpg
