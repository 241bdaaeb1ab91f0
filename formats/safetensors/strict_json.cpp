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

namespace {

// Pass one: a SAX walk that builds nothing and checks what the DOM parser cannot (repeated keys,
// depth). nlohmann's callback parser could do it in one pass, but it rescans the parent object after
// every closed value: quadratic in the number of tensors (minutes for a 100k-tensor header).
class Checker : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit Checker(const std::string& what) : what_(what) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    objects_.push_back({{}, objects_.empty() ? std::string() : objects_.back().last, {}});
    return push();
  }
  bool key(string_t& k) override {
    Frame& f = objects_.back();
    f.last = k;
    if (!f.keys.insert(k).second)
      throw Reject{objects_.size() == 1
                       ? what_ + " declares " + quote_name(k) + " twice"
                       : what_ + ": key " + quote_name(k) + " appears twice in the entry " +
                             quote_name(f.parent)};
    return true;
  }
  bool end_object() override {
    objects_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return push(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw Reject{what_ + " is not valid JSON: " + e.what()};
  }

 private:
  struct Frame {
    std::set<std::string> keys;
    std::string parent;  // the key this object is the value of ("" for the root)
    std::string last;    // the last key read in this object
  };
  bool push() {
    if (++depth_ > kMaxJsonDepth)
      throw Reject{what_ + " JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
    return true;
  }

  const std::string& what_;
  std::vector<Frame> objects_;
  size_t depth_ = 0;
};

}  // namespace

nlohmann::json parse_strict_json(const std::string& file, const std::string& what,
                                 const char* text, size_t size) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows; a NUL
  // is never valid JSON text (strings must escape it), so refuse it here.
  if (const void* nul = std::memchr(text, 0, size))
    throw FormatError(file + ": " + what + " is not valid JSON: NUL byte at offset " +
                      std::to_string(static_cast<const char*>(nul) - text) + " of the " + what);
  try {
    Checker checker(what);
    nlohmann::json::sax_parse(text, text + size, &checker);
    return nlohmann::json::parse(text, text + size);
  } catch (const Reject& r) {
    throw FormatError(file + ": " + r.what);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(file + ": " + what + " is not valid JSON: " + e.what());
  }
}

bool json_to_u64(const nlohmann::json& v, uint64_t* out) {
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
