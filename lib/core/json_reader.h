// Checked reading of JSON documents. Every document fpgather reads (layouts, model specs, the
// training documents of a checkpoint) goes through these two classes, so a malformed document fails
// alike everywhere: a FormatError (exit 3) "<source>: <field path>: <what is wrong>", e.g.
//   "m.json: params[3].shape: expected a non-empty array"
//   "ckpt: document 'optimizer': hyperparameters.lr: expected a number, got \"x\""
// Untrusted input never reaches nlohmann's own exceptions through these accessors.
//
//   const JsonDocument doc(text, "layout document");
//   const JsonField root = doc.root();
//   const uint32_t dp = root.get<uint32_t>("dp");
//   for (size_t i = 0; i < root.at("buffers").size(); ++i) read_buffer(root.at("buffers")[i]);
//
// nlohmann/json.hpp is needed only by callers that look at value() themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fpg {

// One value of a document and its path from the root ("" for the root, "a.b[2].c" below it). It
// refers into its JsonDocument (or the nlohmann::json it was made from) and the source name, and
// must not outlive them.
class JsonField {
 public:
  JsonField(const nlohmann::json& value, const std::string& source, std::string path = "");

  const nlohmann::json& value() const { return *value_; }
  const std::string& source() const { return *source_; }
  const std::string& path() const { return path_; }

  // FormatError "<source>: <path>: <msg>" ("(document)" for the root's path).
  [[noreturn]] void fail(const std::string& msg) const;

  // Objects. at: the member, "missing" if absent; find: nullopt if absent. Both fail with
  // "expected an object" on another type. A member that is present but null is present.
  JsonField at(const std::string& key) const;
  std::optional<JsonField> find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key).has_value(); }
  // "<path>.<key>: unknown key" for the first member not in `allowed`.
  void check_keys(std::initializer_list<const char*> allowed) const;

  // Arrays: fail with "expected an array" on another type; operator[] bounds-checked.
  size_t size() const;
  JsonField operator[](size_t i) const;

  bool is_null() const;
  bool is_object() const;

  // Scalars, each failing with "expected <kind>, got <the value>" on another type or out of range.
  uint64_t u64() const;      // a non-negative integer
  uint32_t u32() const;      // a non-negative integer below 2^32
  int64_t i64() const;       // an integer
  int i32() const;           // an integer within int
  double number() const;     // any number
  bool boolean() const;
  std::string str() const;
  std::vector<std::string> strings() const;  // an array of strings

  // as<T>() for T in uint64_t, uint32_t, int64_t, int, double, float, bool, std::string,
  // std::vector<std::string>; get<T>(key) = at(key).as<T>(); get<T>(key, fallback) when optional.
  template <class T> T as() const;
  template <class T> T get(const std::string& key) const { return at(key).as<T>(); }
  template <class T> T get(const std::string& key, T fallback) const {
    const auto f = find(key);
    return f ? f->as<T>() : fallback;
  }

  std::string dump() const;  // the value as compact JSON, for messages

 private:
  const nlohmann::json* value_;
  const std::string* source_;
  std::string path_;
};

template <> uint64_t JsonField::as<uint64_t>() const;
template <> uint32_t JsonField::as<uint32_t>() const;
template <> int64_t JsonField::as<int64_t>() const;
template <> int JsonField::as<int>() const;
template <> double JsonField::as<double>() const;
template <> float JsonField::as<float>() const;
template <> bool JsonField::as<bool>() const;
template <> std::string JsonField::as<std::string>() const;
template <> std::vector<std::string> JsonField::as<std::vector<std::string>>() const;

// A parsed document and the name errors give it (a file name, "<dir>: document 'model'").
class JsonDocument {
 public:
  // FormatError "<source>: (document): invalid JSON: ..." if `text` does not parse.
  JsonDocument(std::string_view text, std::string source);
  ~JsonDocument();
  JsonDocument(JsonDocument&&) noexcept;
  JsonDocument& operator=(JsonDocument&&) noexcept;

  JsonField root() const;
  const nlohmann::json& value() const;
  const std::string& source() const;

 private:
  struct Parsed;
  std::unique_ptr<Parsed> parsed_;  // on the heap: fields stay valid when the document moves
};

}  // namespace fpg
