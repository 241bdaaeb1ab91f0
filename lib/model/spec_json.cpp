#include "model/spec_json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "model/presets.h"

namespace fpg::model {
namespace {

using json = nlohmann::json;

uint64_t read_dim(const JsonField& f, bool allow_zero) {
  const uint64_t x = f.u64();
  if (x == 0 && !allow_zero) f.fail("must be positive");
  return x;
}

DType read_dtype(const JsonField& f) {
  const std::string s = f.str();
  if (s == "BF16" || s == "bf16") return DType::BF16;
  if (s == "F32" || s == "fp32" || s == "f32") return DType::F32;
  f.fail("dtype must be \"BF16\" or \"F32\", got \"" + s + "\"");
}

NetworkDims read_network(const JsonField& v) {
  v.check_keys({"input", "hidden", "ffn", "layers", "output"});
  NetworkDims d;
  d.input = read_dim(v.at("input"), false);
  d.hidden = read_dim(v.at("hidden"), false);
  d.ffn = read_dim(v.at("ffn"), false);
  d.layers = read_dim(v.at("layers"), true);
  d.output = read_dim(v.at("output"), false);
  return d;
}

Param read_param(const JsonField& v) {
  v.check_keys({"name", "shape", "role", "dtype", "keep_in_fp32", "gated"});
  for (const char* key : {"name", "shape", "role"}) v.at(key);
  Param p;
  p.name = v.get<std::string>("name");
  const JsonField shape = v.at("shape");
  if (!shape.value().is_array() || shape.size() == 0) shape.fail("expected a non-empty array");
  for (size_t i = 0; i < shape.size(); ++i) p.shape.push_back(read_dim(shape[i], false));
  const JsonField role = v.at("role");
  auto r = parse_role(role.str());
  if (!r) role.fail("unknown role \"" + role.str() + "\" (matrix, embedding, output, vector)");
  p.role = *r;
  p.keep_in_fp32 = v.get<bool>("keep_in_fp32", false);
  p.dtype = p.keep_in_fp32 ? DType::F32 : DType::BF16;
  if (auto dtype = v.find("dtype")) p.dtype = read_dtype(*dtype);
  p.gated = v.get<bool>("gated", false);
  return p;
}

std::string default_name(const std::string& source) {
  std::string s = source;
  if (auto slash = s.find_last_of('/'); slash != std::string::npos) s = s.substr(slash + 1);
  if (auto dot = s.find_last_of('.'); dot != std::string::npos && dot > 0) s = s.substr(0, dot);
  return s;
}

}  // namespace

ModelSpec parse_spec_json(std::string_view text, const std::string& source) {
  const JsonDocument parsed(text, source);
  const JsonField doc = parsed.root();
  if (!doc.is_object()) doc.fail("expected a JSON object");
  doc.check_keys({"name", "network", "params"});

  ModelSpec spec;
  spec.name = doc.get<std::string>("name", default_name(source));
  if (auto network = doc.find("network")) spec.network = read_network(*network);
  if (auto ps = doc.find("params")) {
    for (size_t i = 0; i < ps->size(); ++i) spec.params.push_back(read_param((*ps)[i]));
  } else if (spec.network) {
    spec.params = network_params(*spec.network);
  } else {
    throw FormatError(source + ": params: missing (give \"params\", \"network\" or both)");
  }
  if (auto pr = check_spec(spec)) {
    const std::string field =
        pr->param >= 0 ? "params[" + std::to_string(pr->param) + "]." + pr->field : pr->field;
    throw FormatError(source + ": " + field + ": " + pr->message);
  }
  return spec;
}

ModelSpec load_spec_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw FormatError(path + ": read error");
  return parse_spec_json(ss.str(), path);
}

std::string spec_to_json(const ModelSpec& spec, int indent) {
  json doc = json::object();
  doc["name"] = spec.name;
  if (spec.network) {
    const auto& d = *spec.network;
    doc["network"] = {{"input", d.input}, {"hidden", d.hidden}, {"ffn", d.ffn}, {"layers", d.layers},
                      {"output", d.output}};
  }
  json ps = json::array();
  for (const auto& p : spec.params) {
    json j = {{"name", p.name}, {"shape", p.shape}, {"role", std::string(role_name(p.role))},
              {"dtype", std::string(dtype_name(p.dtype))}};
    if (p.keep_in_fp32) j["keep_in_fp32"] = true;
    if (p.gated) j["gated"] = true;
    ps.push_back(std::move(j));
  }
  doc["params"] = std::move(ps);
  return doc.dump(indent);
}

ModelSpec resolve_model(const std::string& arg) {
  if (preset_dims(arg)) return preset(arg);
  std::ifstream probe(arg);
  if (probe) return load_spec_file(arg);
  std::string all;
  for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
  throw UsageError(Message(Field{"model"}, " '", arg, "' is neither a preset (", all, ") nor a readable spec file"));
}

}  // namespace fpg::model
