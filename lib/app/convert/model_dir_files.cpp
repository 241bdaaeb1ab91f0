#include "app/convert/model_dir_files.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"

namespace fpg::app::convert {
namespace {

using ojson = nlohmann::ordered_json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_weight_file(const std::string& name) {
  static const char* const kSuffixes[] = {".safetensors", ".index.json", ".bin", ".pt",   ".pth",
                                          ".ckpt",        ".h5",         ".msgpack", ".gguf", ".onnx", ".npz"};
  for (const char* s : kSuffixes)
    if (ends_with(name, s)) return true;
  return false;
}

// compressed-tensors' QuantizationArgs of 8-bit floats; MX groups of 32 with E8M0 (uint8) scales.
ojson quant_args(const char* strategy, bool dynamic, bool mx) {
  ojson a = {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}};
  if (mx) {
    a["group_size"] = 32;
    a["scale_dtype"] = "torch.uint8";
  }
  a["symmetric"] = true;
  a["dynamic"] = dynamic;
  return a;
}

}  // namespace

std::vector<std::string> companion_files(const TensorFiles& in) {
  std::vector<std::string> files;
  if (!fs::exists(in.path(), true)) return files;
  const bool dir_in = fs::is_directory(in.path());
  if (!dir_in && !in.sharded()) return files;
  const std::string dir = fs::split_path(in.source()).first;
  const std::string index_name = in.sharded() ? fs::split_path(in.source()).second : std::string();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return files;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.empty() || n[0] == '.' || n == index_name || is_weight_file(n)) continue;
    const std::string path = fs::join_path(dir, n);
    if (fs::is_regular_file(path)) files.push_back(path);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

std::string with_quantization_config(const std::string& text, const std::string& path, const std::string& qc) {
  ojson j;
  try {
    j = ojson::parse(text);
  } catch (const std::exception& e) {
    throw FormatError(path + ": not valid JSON, so its quantization_config cannot be written: " + e.what());
  }
  if (!j.is_object()) throw FormatError(path + ": not a JSON object, so its quantization_config cannot be written");
  if (qc.empty()) j.erase("quantization_config");
  else j["quantization_config"] = ojson::parse(qc);
  try {
    return j.dump(2) + "\n";
  } catch (const std::exception& e) {
    throw FormatError(path + ": cannot be rewritten: " + e.what());
  }
}

bool declares_compressed_tensors(const fp8::Recipe& r) {
  return r.scaling != fp8::Scaling::blockwise_128x128 && r.scaling != fp8::Scaling::blockwise_1x128;
}

std::string quantization_config(const fp8::Recipe& r, const std::vector<std::string>& unquantized) {
  const std::string fmt(fp8::format_name(r.format));
  ojson q;
  if (!declares_compressed_tensors(r)) {
    q["quant_method"] = "fp8";
    q["fmt"] = fmt;
    q["activation_scheme"] = "dynamic";
    q["weight_block_size"] = {r.scaling == fp8::Scaling::blockwise_128x128 ? 128 : 1, 128};
    if (!unquantized.empty()) q["modules_to_not_convert"] = unquantized;
    return q.dump();
  }
  const bool mx = r.scaling == fp8::Scaling::mxfp8;
  q["quant_method"] = "compressed-tensors";
  q["format"] = mx ? "mxfp8-quantized" : "float-quantized";
  q["quantization_status"] = "compressed";
  q["config_groups"] = {{"group_0",
                         {{"targets", {"Linear"}},
                          {"weights", quant_args(mx ? "group" : "tensor", false, mx)},
                          {"input_activations", quant_args(mx ? "group" : "token", true, mx)}}}};
  q["ignore"] = unquantized;
  q["fmt"] = fmt;
  return q.dump();
}

}  // namespace fpg::app::convert
