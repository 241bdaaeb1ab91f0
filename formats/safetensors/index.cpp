#include "formats/safetensors/index.h"

#include <cstdio>

#include "core/error.h"
#include "core/fs.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/mapped_file.h"
#include "formats/safetensors/strict_json.h"

namespace fpg::safetensors {

bool is_safe_shard_name(std::string_view name) {
  if (name.empty() || name.front() == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return name.find('\0') == std::string_view::npos;
}

ShardIndex read_index(const std::string& path) {
  const MappedFile file(path);
  if (file.size() > kMaxHeaderSize)  // the same bound as a header: an index is metadata only
    throw FormatError(path + ": index of " + std::to_string(file.size()) +
                      " bytes exceeds the limit of " + std::to_string(kMaxHeaderSize));
  const auto* text = reinterpret_cast<const char*>(file.data());
  const auto json = parse_strict_json(path, "index", text ? text : "", file.size());
  if (!json.is_object()) throw FormatError(path + ": index is JSON but not an object");

  ShardIndex index;
  const auto meta = json.find("metadata");
  if (meta != json.end() && !meta->is_null()) {
    if (!meta->is_object()) throw FormatError(path + ": \"metadata\" is not an object");
    for (const auto& [k, v] : meta->items()) {
      if (k != "total_size") {
        index.extra_metadata_json.emplace(k, v.dump());
        continue;
      }
      uint64_t n = 0;
      // Some writers store it as a float; accept those that are whole numbers.
      if (!json_to_u64(v, &n)) {
        const bool whole = v.is_number_float() && v.get<double>() >= 0 &&
                           v.get<double>() < 1.8e19 &&
                           static_cast<double>(static_cast<uint64_t>(v.get<double>())) == v.get<double>();
        if (!whole)
          throw FormatError(path + ": \"metadata\".\"total_size\" is " + v.dump() +
                            ", not a non-negative integer");
        n = static_cast<uint64_t>(v.get<double>());
      }
      index.total_size = n;
    }
  }
  const auto wm = json.find("weight_map");
  if (wm == json.end()) throw FormatError(path + ": index has no \"weight_map\"");
  if (!wm->is_object()) throw FormatError(path + ": \"weight_map\" is not an object");
  for (const auto& [tensor, file_name] : wm->items()) {
    if (!file_name.is_string())
      throw FormatError(path + ": \"weight_map\" entry of tensor " + quote_name(tensor) +
                        " is not a string");
    const auto& shard = file_name.get_ref<const std::string&>();
    if (!is_safe_shard_name(shard))
      throw FormatError(path + ": tensor " + quote_name(tensor) + " is mapped to shard " +
                        quote_name(shard) +
                        ", which is not a relative path inside the index's directory");
    index.weight_map.emplace(tensor, shard);
  }
  return index;
}

void write_index(const std::string& path, const ShardIndex& index) {
  nlohmann::json json = nlohmann::json::object();  // std::map inside: keys sorted, like sort_keys
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [k, v] : index.extra_metadata_json) {
    try {
      meta[k] = nlohmann::json::parse(v);
    } catch (const nlohmann::json::exception&) {
      throw UsageError(path + ": index metadata " + quote_name(k) + " is not valid JSON text");
    }
  }
  if (index.total_size) meta["total_size"] = *index.total_size;
  json["metadata"] = std::move(meta);
  nlohmann::json wm = nlohmann::json::object();
  for (const auto& [tensor, shard] : index.weight_map) {
    if (!is_safe_shard_name(shard))
      throw UsageError(path + ": tensor " + quote_name(tensor) + " is mapped to shard " +
                       quote_name(shard) + ", which is not a relative path inside the directory");
    wm[tensor] = shard;
  }
  json["weight_map"] = std::move(wm);
  std::string text;
  try {
    text = json.dump(2, ' ', false, nlohmann::json::error_handler_t::strict) + "\n";
  } catch (const nlohmann::json::exception&) {
    throw UsageError(path + ": a tensor or shard name is not valid UTF-8");
  }
  fs::write_file_atomic(path, text);
}

std::string shard_file_name(size_t i, size_t n, std::string_view stem) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", i + 1, n);
  return std::string(stem) + buf;
}

}  // namespace fpg::safetensors
