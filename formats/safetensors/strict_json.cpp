#include "formats/safetensors/strict_json.h"

#include <cstring>
#include <set>
#include <vector>

#include "core/error.h"
#include "formats/safetensors/format.h"

namespace fpg::safetensors {
namespace {

constexpr size_t kMaxJsonDepth = 64;

struct Reject {
  std::string what;
};

}  // namespace

nlohmann::ordered_json parse_strict_json(const std::string& file, const std::string& what,
                                         const char* text, size_t size) {
  using Json = nlohmann::ordered_json;
  struct Frame {
    std::set<std::string> keys;
    std::string parent;  // the key this object is the value of ("" for the root)
    std::string last;    // the last key read in this object
  };
  std::vector<Frame> objects;
  size_t depth = 0;
  Json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t ev, Json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (ev) {
      case E::object_start:
        objects.push_back({{}, objects.empty() ? std::string() : objects.back().last, {}});
        [[fallthrough]];
      case E::array_start:
        if (++depth > kMaxJsonDepth)
          throw Reject{what + " JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
        break;
      case E::object_end:
        objects.pop_back();
        [[fallthrough]];
      case E::array_end:
        --depth;
        break;
      case E::key: {
        Frame& f = objects.back();
        f.last = parsed.get_ref<const std::string&>();
        if (!f.keys.insert(f.last).second)
          throw Reject{objects.size() == 1
                           ? what + " declares " + quote_name(f.last) + " twice"
                           : what + ": key " + quote_name(f.last) + " appears twice in the entry " +
                                 quote_name(f.parent)};
        break;
      }
      case E::value:
        break;
    }
    return true;
  };
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows; a NUL
  // is never valid JSON text (strings must escape it), so refuse it here.
  if (const void* nul = std::memchr(text, 0, size))
    throw FormatError(file + ": " + what + " is not valid JSON: NUL byte at offset " +
                      std::to_string(static_cast<const char*>(nul) - text) + " of the " + what);
  try {
    return Json::parse(text, text + size, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Reject& r) {
    throw FormatError(file + ": " + r.what);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(file + ": " + what + " is not valid JSON: " + e.what());
  }
}

bool json_to_u64(const nlohmann::ordered_json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() == 0) {
    *out = 0;
    return true;
  }
  return false;
}

}  // namespace fpg::safetensors
