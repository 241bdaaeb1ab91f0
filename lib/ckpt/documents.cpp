#include "ckpt/documents.h"

#include <nlohmann/json.hpp>

#include "core/printable.h"
#include "core/error.h"

namespace fpg::ckpt {

bool Documents::valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  return name != "." && name != "..";
}

void Documents::set(const std::string& name, std::string json) {
  if (!valid_name(name)) throw UsageError("checkpoint document name " + quoted_name(name) + " is not [A-Za-z0-9_.-]{1,64}");
  if (!nlohmann::json::accept(json)) throw UsageError("checkpoint document " + quoted_name(name) + " is not valid JSON");
  docs_[name] = std::move(json);
}

std::optional<std::string> Documents::get(const std::string& name) const {
  const auto it = docs_.find(name);
  if (it == docs_.end()) return std::nullopt;
  return it->second;
}

}  // namespace fpg::ckpt
