#include "model/spec_json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/presets.h"

namespace fpg::model {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& field, const std::string& msg) {
  throw FormatError(source + ": " + field + ": " + msg);
}

void check_keys(const json& obj, std::initializer_list<const char*> allowed, const std::string& source,
                const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || it.key() == a;
    if (!ok) fail(source, where + (where.empty() ? "" : ".") + it.key(), "unknown key");
  }
}

uint64_t get_positive(const json& v, const std::string& source, const std::string& field, bool allow_zero) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    fail(source, field, "expected a non-negative integer, got " + v.dump());
  const uint64_t x = v.get<uint64_t>();
  if (x == 0 && !allow_zero) fail(source, field, "must be positive");
  return x;
}

std::string get_string(const json& v, const std::string& source, const std::string& field) {
  if (!v.is_string()) fail(source, field, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

bool get_bool(const json& v, const std::string& source, const std::string& field) {
  if (!v.is_boolean()) fail(source, field, "expected true or false, got " + v.dump());
  return v.get<bool>();
}

DType get_dtype(const json& v, const std::string& source, const std::string& field) {
  const std::string s = get_string(v, source, field);
  if (s == "BF16" || s == "bf16") return DType::BF16;
  if (s == "F32" || s == "fp32" || s == "f32") return DType::F32;
  fail(source, field, "dtype must be \"BF16\" or \"F32\", got \"" + s + "\"");
}

NetworkDims parse_network(const json& v, const std::string& source) {
  if (!v.is_object()) fail(source, "network", "expected an object");
  check_keys(v, {"input", "hidden", "ffn", "layers", "output"}, source, "network");
  NetworkDims d;
  auto dim = [&](const char* key, bool allow_zero) {
    if (!v.contains(key)) fail(source, std::string("network.") + key, "missing");
    return get_positive(v.at(key), source, std::string("network.") + key, allow_zero);
  };
  d.input = dim("input", false);
  d.hidden = dim("hidden", false);
  d.ffn = dim("ffn", false);
  d.layers = dim("layers", true);
  d.output = dim("output", false);
  return d;
}

Param parse_param(const json& v, const std::string& source, const std::string& where) {
  if (!v.is_object()) fail(source, where, "expected an object");
  check_keys(v, {"name", "shape", "role", "dtype", "keep_in_fp32", "gated"}, source, where);
  for (const char* key : {"name", "shape", "role"})
    if (!v.contains(key)) fail(source, where + "." + key, "missing");
  Param p;
  p.name = get_string(v.at("name"), source, where + ".name");
  const json& shape = v.at("shape");
  if (!shape.is_array() || shape.empty()) fail(source, where + ".shape", "expected a non-empty array");
  for (size_t i = 0; i < shape.size(); ++i)
    p.shape.push_back(get_positive(shape[i], source, where + ".shape[" + std::to_string(i) + "]", false));
  const std::string role = get_string(v.at("role"), source, where + ".role");
  auto r = parse_role(role);
  if (!r) fail(source, where + ".role", "unknown role \"" + role + "\" (matrix, embedding, output, vector)");
  p.role = *r;
  if (v.contains("keep_in_fp32")) p.keep_in_fp32 = get_bool(v.at("keep_in_fp32"), source, where + ".keep_in_fp32");
  p.dtype = p.keep_in_fp32 ? DType::F32 : DType::BF16;
  if (v.contains("dtype")) p.dtype = get_dtype(v.at("dtype"), source, where + ".dtype");
  if (v.contains("gated")) p.gated = get_bool(v.at("gated"), source, where + ".gated");
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
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail(source, "(document)", std::string("invalid JSON: ") + e.what());
  }
  if (!doc.is_object()) fail(source, "(document)", "expected a JSON object");
  check_keys(doc, {"name", "network", "params"}, source, "");

  ModelSpec spec;
  spec.name = doc.contains("name") ? get_string(doc.at("name"), source, "name") : default_name(source);
  if (doc.contains("network")) spec.network = parse_network(doc.at("network"), source);
  if (doc.contains("params")) {
    const json& ps = doc.at("params");
    if (!ps.is_array()) fail(source, "params", "expected an array");
    for (size_t i = 0; i < ps.size(); ++i)
      spec.params.push_back(parse_param(ps[i], source, "params[" + std::to_string(i) + "]"));
  } else if (spec.network) {
    spec.params = network_params(*spec.network);
  } else {
    fail(source, "params", "missing (give \"params\", \"network\" or both)");
  }
  if (auto pr = check_spec(spec)) {
    const std::string field =
        pr->param >= 0 ? "params[" + std::to_string(pr->param) + "]." + pr->field : pr->field;
    fail(source, field, pr->message);
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
  throw UsageError("--model '" + arg + "' is neither a preset (" + all + ") nor a readable spec file");
}

}  // namespace fpg::model
