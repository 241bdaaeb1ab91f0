#include "core/json_reader.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fpg {
namespace {

using json = nlohmann::json;

// Long values are cut so that a hostile document cannot make a message of megabytes.
std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

}  // namespace

JsonField::JsonField(const json& value, const std::string& source, std::string path)
    : value_(&value), source_(&source), path_(std::move(path)) {}

void JsonField::fail(const std::string& msg) const {
  throw FormatError(*source_ + ": " + (path_.empty() ? std::string("(document)") : path_) + ": " + msg);
}

std::optional<JsonField> JsonField::find(const std::string& key) const {
  if (!value_->is_object()) fail("expected an object");
  auto it = value_->find(key);
  if (it == value_->end()) return std::nullopt;
  return JsonField(*it, *source_, path_.empty() ? key : path_ + "." + key);
}

JsonField JsonField::at(const std::string& key) const {
  auto f = find(key);
  if (!f) JsonField(*value_, *source_, path_.empty() ? key : path_ + "." + key).fail("missing");
  return *f;
}

void JsonField::check_keys(std::initializer_list<const char*> allowed) const {
  if (!value_->is_object()) fail("expected an object");
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || it.key() == a;
    if (!ok) JsonField(*it, *source_, path_.empty() ? it.key() : path_ + "." + it.key()).fail("unknown key");
  }
}

size_t JsonField::size() const {
  if (!value_->is_array()) fail("expected an array");
  return value_->size();
}

JsonField JsonField::operator[](size_t i) const {
  if (i >= size()) fail("no element " + std::to_string(i) + " (size " + std::to_string(value_->size()) + ")");
  return JsonField((*value_)[i], *source_, path_ + "[" + std::to_string(i) + "]");
}

bool JsonField::is_null() const { return value_->is_null(); }
bool JsonField::is_object() const { return value_->is_object(); }

uint64_t JsonField::u64() const {
  if (value_->is_number_unsigned()) return value_->get<uint64_t>();
  if (value_->is_number_integer() && value_->get<int64_t>() >= 0) return static_cast<uint64_t>(value_->get<int64_t>());
  fail("expected a non-negative integer, got " + shown(*value_));
}

uint32_t JsonField::u32() const {
  const uint64_t x = u64();
  if (x > std::numeric_limits<uint32_t>::max()) fail("out of range");
  return static_cast<uint32_t>(x);
}

int64_t JsonField::i64() const {
  if (value_->is_number_unsigned() && value_->get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(value_->get<uint64_t>());
  if (value_->is_number_integer() && !value_->is_number_unsigned()) return value_->get<int64_t>();
  if (value_->is_number_unsigned()) fail("out of range");
  fail("expected an integer, got " + shown(*value_));
}

int JsonField::i32() const {
  const int64_t x = i64();
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) fail("out of range");
  return static_cast<int>(x);
}

double JsonField::number() const {
  if (!value_->is_number()) fail("expected a number, got " + shown(*value_));
  return value_->get<double>();
}

bool JsonField::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false, got " + shown(*value_));
  return value_->get<bool>();
}

std::string JsonField::str() const {
  if (!value_->is_string()) fail("expected a string, got " + shown(*value_));
  return value_->get<std::string>();
}

std::vector<std::string> JsonField::strings() const {
  std::vector<std::string> out;
  for (size_t i = 0, n = size(); i < n; ++i) out.push_back((*this)[i].str());
  return out;
}

std::string JsonField::dump() const { return value_->dump(); }

template <> uint64_t JsonField::as<uint64_t>() const { return u64(); }
template <> uint32_t JsonField::as<uint32_t>() const { return u32(); }
template <> int64_t JsonField::as<int64_t>() const { return i64(); }
template <> int JsonField::as<int>() const { return i32(); }
template <> double JsonField::as<double>() const { return number(); }
template <> float JsonField::as<float>() const { return static_cast<float>(number()); }
template <> bool JsonField::as<bool>() const { return boolean(); }
template <> std::string JsonField::as<std::string>() const { return str(); }
template <> std::vector<std::string> JsonField::as<std::vector<std::string>>() const { return strings(); }

struct JsonDocument::Parsed {
  std::string source;
  json doc;
};

JsonDocument::JsonDocument(std::string_view text, std::string source) : parsed_(std::make_unique<Parsed>()) {
  parsed_->source = std::move(source);
  try {
    parsed_->doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw FormatError(parsed_->source + ": (document): invalid JSON: " + e.what());
  }
}

JsonDocument::~JsonDocument() = default;
JsonDocument::JsonDocument(JsonDocument&&) noexcept = default;
JsonDocument& JsonDocument::operator=(JsonDocument&&) noexcept = default;

JsonField JsonDocument::root() const { return JsonField(parsed_->doc, parsed_->source); }
const nlohmann::json& JsonDocument::value() const { return parsed_->doc; }
const std::string& JsonDocument::source() const { return parsed_->source; }

}  // namespace fpg
