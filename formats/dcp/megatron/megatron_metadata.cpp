#include "formats/dcp/megatron/megatron_metadata.h"

#include <vector>

#include "core/error.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/strict_json.h"

namespace fpg::dcp {
namespace {

constexpr uint64_t kMaxMetadataJson = uint64_t{1} << 20;

}  // namespace

MegatronMetadata parse_megatron_metadata(const std::string& file, const char* text, size_t size) {
  const nlohmann::json j = safetensors::parse_strict_json(file, "metadata.json", text, size);
  if (!j.is_object()) throw FormatError(file + ": not a JSON object");
  MegatronMetadata m;
  bool has_backend = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    auto bad = [&](const char* want) {
      return FormatError(file + ": " + safetensors::quote_name(k) + " is " + v.dump() + ", not " + want);
    };
    if (k == "sharded_backend") {
      if (!v.is_string()) throw bad("a string");
      m.sharded_backend = v.get<std::string>();
      has_backend = true;
    } else if (k == "sharded_backend_version" || k == "common_backend_version") {
      if (!v.is_number_integer()) throw bad("an integer");
      (k == "sharded_backend_version" ? m.sharded_backend_version : m.common_backend_version) = v.get<int64_t>();
    } else if (k == "common_backend") {
      if (!v.is_string()) throw bad("a string");
      m.common_backend = v.get<std::string>();
    } else {
      m.other.emplace(k, v.dump());
    }
  }
  if (!has_backend) throw FormatError(file + ": no \"sharded_backend\"");
  return m;
}

std::optional<MegatronMetadata> read_megatron_metadata(const CheckpointDir& dir) {
  if (!dir.has_regular_file("metadata.json")) return std::nullopt;
  const auto f = dir.open("metadata.json");
  if (f->size() > kMaxMetadataJson)
    throw FormatError(f->path() + ": " + std::to_string(f->size()) + " bytes, more than the " +
                      std::to_string(kMaxMetadataJson) + " accepted");
  std::vector<char> text(static_cast<size_t>(f->size()));
  f->read(0, text.data(), text.size());
  return parse_megatron_metadata(f->path(), text.data(), text.size());
}

}  // namespace fpg::dcp
