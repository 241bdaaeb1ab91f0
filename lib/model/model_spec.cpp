#include "model/model_spec.h"

#include <regex>
#include <unordered_set>

#include "core/error.h"

namespace fpg::model {

uint64_t ModelSpec::numel() const {
  uint64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t ModelSpec::find(std::string_view wanted) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == wanted) return static_cast<int64_t>(i);
  return -1;
}

bool operator==(const ModelSpec& a, const ModelSpec& b) {
  return a.name == b.name && a.network == b.network && a.params == b.params;
}

namespace {

std::optional<SpecProblem> check_param(const Param& p, int64_t i) {
  auto bad = [&](const char* field, std::string msg) {
    return std::optional<SpecProblem>(SpecProblem{i, field, std::move(msg)});
  };
  if (p.name.empty()) return bad("name", "empty name");
  if (p.shape.empty()) return bad("shape", "empty shape");
  for (uint64_t d : p.shape)
    if (d == 0) return bad("shape", "zero dimension in " + shape_string(p.shape));
  if (p.dtype != DType::BF16 && p.dtype != DType::F32)
    return bad("dtype", "dtype must be BF16 or F32, not " + std::string(dtype_name(p.dtype)));
  if (p.keep_in_fp32 && p.dtype != DType::F32) return bad("keep_in_fp32", "keep_in_fp32 needs dtype F32");
  const bool want_2d = p.role != Role::vector;
  if (want_2d && p.shape.size() != 2)
    return bad("shape", std::string(role_name(p.role)) + " must be 2-D, got " + shape_string(p.shape));
  if (!want_2d && p.shape.size() != 1)
    return bad("shape", "vector must be 1-D, got " + shape_string(p.shape));
  if (p.gated && (p.role != Role::matrix || p.shape[0] % 2 != 0))
    return bad("gated", "gated needs a matrix of shape [2F, H], got " + shape_string(p.shape));
  return std::nullopt;
}

}  // namespace

std::optional<SpecProblem> check_spec(const ModelSpec& spec) {
  if (spec.params.empty()) return SpecProblem{-1, "params", "a model needs at least one param"};
  std::unordered_set<std::string_view> names;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const auto& p = spec.params[i];
    if (auto pr = check_param(p, static_cast<int64_t>(i))) return pr;
    if (!names.insert(p.name).second)
      return SpecProblem{static_cast<int64_t>(i), "name", "duplicate name '" + p.name + "'"};
  }
  if (spec.network) {
    const auto want = network_params(*spec.network);
    if (want.size() != spec.params.size())
      return SpecProblem{-1, "network",
                         "network has " + std::to_string(want.size()) + " params, spec lists " +
                             std::to_string(spec.params.size())};
    for (size_t i = 0; i < want.size(); ++i) {
      const auto& a = spec.params[i];
      const auto& w = want[i];
      if (a.name != w.name || a.shape != w.shape || a.role != w.role || a.gated != w.gated)
        return SpecProblem{static_cast<int64_t>(i), "network",
                           "'" + a.name + "' " + shape_string(a.shape) + " does not match the network's '" +
                               w.name + "' " + shape_string(w.shape)};
    }
  }
  return std::nullopt;
}

void validate_spec(const ModelSpec& spec) {
  auto pr = check_spec(spec);
  if (!pr) return;
  std::string where = "model '" + spec.name + "'";
  if (pr->param >= 0) where += ": params[" + std::to_string(pr->param) + "]";
  throw UsageError(where + "." + pr->field + ": " + pr->message);
}

size_t mark_keep_in_fp32(ModelSpec& spec, const std::string& regex) {
  std::regex re;
  try {
    re = std::regex(regex, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw UsageError(Message(Field{"keep_fp32"}, ": invalid regular expression '", regex, "': ", e.what()));
  }
  size_t n = 0;
  for (auto& p : spec.params) {
    if (!std::regex_search(p.name, re)) continue;
    p.keep_in_fp32 = true;
    p.dtype = DType::F32;
    ++n;
  }
  return n;
}

}  // namespace fpg::model
