// JSON parsing for untrusted headers and indexes (internal; includes nlohmann).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace fpg::safetensors {

// Parses `text` into std::map-backed objects (O(log n) per key; ordered_json searches keys
// linearly, quadratic on a 100k-tensor header), refusing a key repeated in any object (nlohmann
// would keep the last silently), a NUL byte, and nesting deeper than 64 (bounds what a hostile file
// costs). Throws fpg::FormatError "FILE: ..." where FILE is `file`; `what` names the document
// ("header", "index").
nlohmann::json parse_strict_json(const std::string& file, const std::string& what,
                                 const char* text, size_t size);

// A JSON integer ≥ 0 ("-0" included); false for negatives, fractions and floats.
bool json_to_u64(const nlohmann::json& v, uint64_t* out);

}  // namespace fpg::safetensors
