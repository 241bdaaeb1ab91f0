#include "app/replay/step_files.h"

#include <cstring>
#include <limits>
#include <set>

#include "core/printable.h"
#include "core/error.h"
#include "core/tensor_file.h"
#include "model/param.h"

namespace fpg::app::replay {
namespace {

std::vector<float> read_f32(const TensorFiles& r, const TensorFiles::Entry& e) {
  std::vector<float> v(e.info->numel);
  if (!v.empty()) std::memcpy(v.data(), r.data(e), v.size() * sizeof(float));  // the map need not be aligned
  return v;
}

void require_f32(const std::string& path, const TensorInfo& t, const char* what) {
  if (t.dtype != DType::F32)
    throw UsageError(path + ": " + what + " " + quoted_name(t.name) + " is " + std::string(dtype_name(t.dtype)) +
                     "; fpgather step takes F32 tensors only");
}

int64_t parse_step(const std::string& path, const std::string& text) {
  const std::string msg = path + ": __metadata__ \"step\" is " + quoted_name(text) + ", not a non-negative integer";
  if (text.empty() || text.size() > 18) throw FormatError(msg);
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') throw FormatError(msg);
    v = v * 10 + (c - '0');
  }
  return v;
}

// The state key NAME ends with when NAME is PARAM.KEY and PARAM is a tensor of the file; else "".
std::string state_suffix(const std::string& name, const TensorFiles& r) {
  for (const std::string& key : step_state_keys()) {
    const std::string dot = "." + key;
    if (name.size() > dot.size() && name.compare(name.size() - dot.size(), dot.size(), dot) == 0 &&
        r.find(std::string_view(name).substr(0, name.size() - dot.size())))
      return key;
  }
  return "";
}

}  // namespace

const std::vector<std::string>& step_state_keys() {
  static const std::vector<std::string> keys = {"exp_avg", "exp_avg_sq", "momentum_buffer"};
  return keys;
}

StepFile read_step_params(const std::string& path) {
  const std::unique_ptr<TensorFiles> file = tensor_file_format().open_file(path);
  const TensorFiles& r = *file;
  StepFile f;
  const auto it = r.metadata().find("step");
  if (it != r.metadata().end()) f.step = parse_step(path, it->second);

  std::map<std::string, size_t> index;
  for (const TensorFiles::Entry& e : r.tensors()) {
    const TensorInfo& t = *e.info;
    if (!state_suffix(t.name, r).empty()) continue;
    require_f32(path, t, "parameter");
    if (t.numel == 0) throw UsageError(path + ": parameter " + quoted_name(t.name) + " has no elements " + shape_string(t.shape));
    index[t.name] = f.params.size();
    f.params.push_back(StepTensor{t.name, t.shape, read_f32(r, e), {}});
  }
  for (const TensorFiles::Entry& e : r.tensors()) {
    const TensorInfo& t = *e.info;
    const std::string key = state_suffix(t.name, r);
    if (key.empty()) continue;
    const std::string owner = t.name.substr(0, t.name.size() - key.size() - 1);
    const auto p = index.find(owner);
    if (p == index.end())  // the owner is itself a state tensor: PARAM.exp_avg.exp_avg
      throw UsageError(path + ": " + quoted_name(t.name) + " is the state of " + quoted_name(owner) + ", which is not a parameter");
    require_f32(path, t, "state tensor");
    StepTensor& param = f.params[p->second];
    if (t.shape != param.shape)
      throw UsageError(path + ": state tensor " + quoted_name(t.name) + " has shape " + shape_string(t.shape) +
                       ", its parameter " + shape_string(param.shape));
    param.state[key] = read_f32(r, e);
  }
  if (f.params.empty()) throw UsageError(path + ": no parameters");
  return f;
}

std::vector<std::vector<float>> read_step_grads(const std::string& path, const StepFile& params) {
  const std::unique_ptr<TensorFiles> file = tensor_file_format().open_file(path);
  const TensorFiles& r = *file;
  std::set<std::string> names;
  for (const StepTensor& p : params.params) names.insert(p.name);
  for (const TensorFiles::Entry& e : r.tensors())
    if (!names.count(e.info->name)) throw UsageError(path + ": gradient " + quoted_name(e.info->name) + " matches no parameter");
  std::vector<std::vector<float>> grads;
  grads.reserve(params.params.size());
  for (const StepTensor& p : params.params) {
    const TensorFiles::Entry* e = r.find(p.name);
    if (!e) throw UsageError(path + ": no gradient for parameter " + quoted_name(p.name));
    const TensorInfo* t = e->info;
    require_f32(path, *t, "gradient");
    if (t->shape != p.shape)
      throw UsageError(path + ": gradient " + quoted_name(p.name) + " has shape " + shape_string(t->shape) +
                       ", the parameter " + shape_string(p.shape));
    grads.push_back(read_f32(r, *e));
  }
  return grads;
}

void write_step_params(const std::string& path, const StepFile& f, const std::string& optimizer) {
  std::vector<TensorSpec> specs;
  for (const StepTensor& p : f.params) {
    specs.push_back({p.name, DType::F32, p.shape});
    for (const auto& [key, v] : p.state) specs.push_back({p.name + "." + key, DType::F32, p.shape});
  }
  const std::unique_ptr<TensorFileWriter> w =
      tensor_file_format().create(path, specs, {{"step", std::to_string(f.step)}, {"optimizer", optimizer}});
  for (const StepTensor& p : f.params) {
    w->write(p.name, 0, p.value.data(), p.value.size() * sizeof(float));
    for (const auto& [key, v] : p.state) w->write(p.name + "." + key, 0, v.data(), v.size() * sizeof(float));
  }
  w->commit();
}

}  // namespace fpg::app::replay
