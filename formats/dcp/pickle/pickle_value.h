// A Python value as a restricted pickle decodes it: data only, never a live object. Classes the
// allow-list admits appear as `object` values (the class name, its constructor arguments and the state
// BUILD gave it); tensors from a torch.save archive appear as `tensor` values holding their bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace fpg::dcp {

// A tensor read out of a torch.save archive: its torch dtype name ("bfloat16"), the fpgather dtype
// where there is one, its shape and its elements, contiguous, in little-endian order.
struct TensorValue {
  std::string torch_dtype;
  std::optional<DType> dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;
};

class Value {
 public:
  enum class Kind : uint8_t {
    none, boolean, integer, floating, str, bytes, bytearray, tuple, list, dict, set, frozenset,
    global,  // an allow-listed name used as a value: "torch.bfloat16", "torch.FloatStorage"
    object,  // an allow-listed class or function applied to arguments (REDUCE, NEWOBJ) plus BUILD state
    tensor,  // a tensor rebuilt from a torch.save archive
  };

  Value() = default;  // None
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value str(std::string s);
  static Value bytes(std::string b);
  static Value bytearray(std::string b);
  static Value sequence(Kind k, std::vector<Value> items);  // tuple, list, set or frozenset
  static Value dict(std::vector<std::pair<Value, Value>> entries);
  static Value global(std::string qualified_name);
  // `args` is the argument tuple; `state` the BUILD state (none if there was no BUILD).
  static Value object(std::string qualified_name, Value args, Value state, bool has_state);
  static Value tensor(std::shared_ptr<const TensorValue> t);

  Kind kind() const { return kind_; }
  bool is(Kind k) const { return kind_ == k; }
  bool is_none() const { return kind_ == Kind::none; }

  // Each accessor requires its kind (fpg::InternalError otherwise); check kind() first.
  bool as_bool() const;
  int64_t as_int() const;
  double as_float() const;
  const std::string& as_str() const;    // str (UTF-8), bytes or bytearray (raw)
  const std::string& name() const;      // global or object: "module.qualname"
  const std::vector<Value>& items() const;                   // tuple, list, set, frozenset
  const std::vector<std::pair<Value, Value>>& entries() const;  // dict, in insertion order
  const Value& args() const;             // object
  const Value& state() const;            // object; none without BUILD
  bool has_state() const;                // object
  const TensorValue& tensor_value() const;

  // dict: the value of the str key `key` (the last one, as Python's dict keeps it), or nullptr.
  const Value* find(std::string_view key) const;

  // A Python-like rendering for messages and listings, cut at `max_chars` with "...".
  std::string repr(size_t max_chars = 200) const;

 private:
  Kind kind_ = Kind::none;
  bool flag_ = false;  // boolean value; object: has_state
  int64_t int_ = 0;
  double float_ = 0;
  std::string text_;
  std::vector<Value> items_;                      // sequences; object: {args, state}
  std::vector<std::pair<Value, Value>> entries_;  // dict
  std::shared_ptr<const TensorValue> tensor_;
};

std::string_view kind_name(Value::Kind k);  // "none", "int", "str", "tuple", ...

}  // namespace fpg::dcp
