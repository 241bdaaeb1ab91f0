#include "ckpt/param_diff.h"

#include <algorithm>
#include <map>

#include "core/progress.h"
#include "core/shape.h"

namespace fpg::ckpt {
namespace {

// An object's content as a difference shows it: long ones cut, so that a report stays a few lines.
std::string shown(const std::string& text) {
  constexpr size_t kMax = 200;
  return text.size() <= kMax ? text : text.substr(0, kMax) + "...";
}

// The objects (non-tensor state) of both sides, matched by name and compared by decoded content.
void diff_objects(const ParamSource& A, const ParamSource& B, const DiffOptions& o, DiffReport& rep) {
  std::map<std::string, std::pair<long, long>> names;
  for (size_t i = 0; i < A.objects().size(); ++i)
    if (!ignored(o, A.objects()[i])) names[A.objects()[i]] = {static_cast<long>(i), -1};
  for (size_t i = 0; i < B.objects().size(); ++i) {
    if (ignored(o, B.objects()[i])) continue;
    auto [it, fresh] = names.emplace(B.objects()[i], std::make_pair(-1L, -1L));
    it->second.second = static_cast<long>(i);
  }
  for (const auto& [name, ab] : names) {
    if (ab.second < 0) { rep.diffs.push_back({name, "only in A", "", 0, 0, {}}); continue; }
    if (ab.first < 0) { rep.diffs.push_back({name, "only in B", "", 0, 0, {}}); continue; }
    ++rep.keys_compared;
    const std::string a = A.object_text(static_cast<size_t>(ab.first));
    const std::string b = B.object_text(static_cast<size_t>(ab.second));
    if (a != b) rep.diffs.push_back({name, "value", shown(a) + " vs " + shown(b), 1, 0, {}});
  }
}

}  // namespace

DiffReport diff_params(const ParamSource& A, const ParamSource& B, const DiffOptions& o) {
  DiffReport rep;
  rep.model_space = true;
  std::map<std::string, std::pair<long, long>> names;
  for (size_t t = 0; t < A.tensors().size(); ++t)
    if (!ignored(o, A.tensors()[t].name)) names[A.tensors()[t].name] = {static_cast<long>(t), -1};
  for (size_t t = 0; t < B.tensors().size(); ++t) {
    if (ignored(o, B.tensors()[t].name)) continue;
    auto [it, fresh] = names.emplace(B.tensors()[t].name, std::make_pair(-1L, -1L));
    it->second.second = static_cast<long>(t);
  }
  uint64_t total = 0;  // bytes both sides read
  for (const auto& [name, ab] : names)
    if (ab.first >= 0 && ab.second >= 0) {
      const ParamTensor& a = A.tensors()[static_cast<size_t>(ab.first)];
      const ParamTensor& b = B.tensors()[static_cast<size_t>(ab.second)];
      if (a.dtype == b.dtype && a.shape == b.shape) total += 2 * dtype_bytes(a.dtype, a.numel());
    }
  if (o.progress) o.progress->set_total(total);
  std::vector<uint8_t> buf_a, buf_b;
  for (const auto& [name, ab] : names) {
    if (ab.second < 0) { rep.diffs.push_back({name, "only in A", "", 0, 0, {}}); continue; }
    if (ab.first < 0) { rep.diffs.push_back({name, "only in B", "", 0, 0, {}}); continue; }
    const ParamTensor& a = A.tensors()[static_cast<size_t>(ab.first)];
    const ParamTensor& b = B.tensors()[static_cast<size_t>(ab.second)];
    if (a.dtype != b.dtype) {
      rep.diffs.push_back({name, "dtype", std::string(dtype_name(a.dtype)) + " vs " + std::string(dtype_name(b.dtype)), 0, 0, {}});
      continue;
    }
    if (a.shape != b.shape) {
      rep.diffs.push_back({name, "shape", shape_string(a.shape) + " vs " + shape_string(b.shape), 0, 0, {}});
      continue;
    }
    ++rep.keys_compared;
    const size_t elem = static_cast<size_t>(std::max(dtype_bits(a.dtype) / 8, 1));
    KeyDiff kd{name, "values", "", 0, 0, {}};
    const uint64_t n = a.numel();
    for (uint64_t x = 0; x < n; x += o.block_elems) {
      const uint64_t y = std::min(n, x + o.block_elems);
      buf_a.resize((y - x) * elem);
      buf_b.resize((y - x) * elem);
      A.read(static_cast<size_t>(ab.first), x, y, buf_a.data());
      B.read(static_cast<size_t>(ab.second), x, y, buf_b.data());
      rep.elements_compared += y - x;
      compare_values(buf_a.data(), buf_b.data(), a.dtype, x, y - x, o, kd);
      if (o.progress) o.progress->advance(2 * dtype_bytes(a.dtype, y - x));
    }
    if (kd.differing) {
      describe_values(kd, n);
      rep.diffs.push_back(std::move(kd));
    }
  }
  diff_objects(A, B, o, rep);
  A.finish_reads();
  B.finish_reads();
  std::sort(rep.diffs.begin(), rep.diffs.end(), [](const KeyDiff& x, const KeyDiff& y) { return x.key < y.key; });
  return rep;
}

}  // namespace fpg::ckpt
