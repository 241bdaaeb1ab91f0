#include "formats/dcp/pickle/pickle_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/shape.h"

namespace fpg::dcp {

std::string_view kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return "bool";
    case Value::Kind::integer: return "int";
    case Value::Kind::floating: return "float";
    case Value::Kind::str: return "str";
    case Value::Kind::bytes: return "bytes";
    case Value::Kind::bytearray: return "bytearray";
    case Value::Kind::tuple: return "tuple";
    case Value::Kind::list: return "list";
    case Value::Kind::dict: return "dict";
    case Value::Kind::set: return "set";
    case Value::Kind::frozenset: return "frozenset";
    case Value::Kind::global: return "global";
    case Value::Kind::object: return "object";
    case Value::Kind::tensor: return "tensor";
  }
  return "?";
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.flag_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::integer;
  v.int_ = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::floating;
  v.float_ = f;
  return v;
}

Value Value::str(std::string s) {
  Value v;
  v.kind_ = Kind::str;
  v.text_ = std::move(s);
  return v;
}

Value Value::bytes(std::string b) {
  Value v;
  v.kind_ = Kind::bytes;
  v.text_ = std::move(b);
  return v;
}

Value Value::bytearray(std::string b) {
  Value v;
  v.kind_ = Kind::bytearray;
  v.text_ = std::move(b);
  return v;
}

Value Value::sequence(Kind k, std::vector<Value> items) {
  if (k != Kind::tuple && k != Kind::list && k != Kind::set && k != Kind::frozenset)
    throw InternalError("Value::sequence: not a sequence kind");
  Value v;
  v.kind_ = k;
  v.items_ = std::move(items);
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> entries) {
  Value v;
  v.kind_ = Kind::dict;
  v.entries_ = std::move(entries);
  return v;
}

Value Value::global(std::string qualified_name) {
  Value v;
  v.kind_ = Kind::global;
  v.text_ = std::move(qualified_name);
  return v;
}

Value Value::object(std::string qualified_name, Value args, Value state, bool has_state) {
  Value v;
  v.kind_ = Kind::object;
  v.text_ = std::move(qualified_name);
  v.flag_ = has_state;
  v.items_.reserve(2);
  v.items_.push_back(std::move(args));
  v.items_.push_back(std::move(state));
  return v;
}

Value Value::tensor(std::shared_ptr<const TensorValue> t) {
  Value v;
  v.kind_ = Kind::tensor;
  v.tensor_ = std::move(t);
  return v;
}

namespace {
[[noreturn]] void wrong(Value::Kind have, const char* want) {
  throw InternalError(std::string("pickle value: ") + want + " requested of a " +
                      std::string(kind_name(have)));
}
}  // namespace

bool Value::as_bool() const {
  if (kind_ != Kind::boolean) wrong(kind_, "bool");
  return flag_;
}

int64_t Value::as_int() const {
  if (kind_ != Kind::integer) wrong(kind_, "int");
  return int_;
}

double Value::as_float() const {
  if (kind_ != Kind::floating) wrong(kind_, "float");
  return float_;
}

const std::string& Value::as_str() const {
  if (kind_ != Kind::str && kind_ != Kind::bytes && kind_ != Kind::bytearray) wrong(kind_, "str");
  return text_;
}

const std::string& Value::name() const {
  if (kind_ != Kind::global && kind_ != Kind::object) wrong(kind_, "name");
  return text_;
}

const std::vector<Value>& Value::items() const {
  if (kind_ != Kind::tuple && kind_ != Kind::list && kind_ != Kind::set && kind_ != Kind::frozenset)
    wrong(kind_, "items");
  return items_;
}

const std::vector<std::pair<Value, Value>>& Value::entries() const {
  if (kind_ != Kind::dict) wrong(kind_, "entries");
  return entries_;
}

const Value& Value::args() const {
  if (kind_ != Kind::object) wrong(kind_, "args");
  return items_[0];
}

const Value& Value::state() const {
  if (kind_ != Kind::object) wrong(kind_, "state");
  return items_[1];
}

bool Value::has_state() const {
  if (kind_ != Kind::object) wrong(kind_, "state");
  return flag_;
}

const TensorValue& Value::tensor_value() const {
  if (kind_ != Kind::tensor) wrong(kind_, "tensor");
  return *tensor_;
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::dict) return nullptr;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->first.kind_ == Kind::str && it->first.text_ == key) return &it->second;
  return nullptr;
}

namespace {

// Python's repr of str (prefix 0) and bytes (prefix 'b'): single quotes unless the text holds a single
// quote and no double quote; \\, \n, \r, \t and the quote escaped; other control bytes (and, for
// bytes, every byte outside printable ASCII) as \xNN.
void quote(std::string& out, const std::string& s, char prefix) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  if (prefix) out += prefix;
  out += q;
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (prefix && c >= 0x80)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
}

// Python's repr of a float: the shortest digits that round-trip, fixed notation for decimal exponents
// in [-4, 16), scientific otherwise ("1e-05", "1000000000000000.0", "1e+16").
std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e_at = sci.find('e');
  std::string mant = sci.substr(0, e_at);
  const int exp = std::stoi(sci.substr(e_at + 1));
  std::string sign;
  if (mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  const int decpt = exp + 1;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return sign + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    if (static_cast<size_t>(decpt) >= digits.size())
      return sign + digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    return sign + digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  std::string r = sign + digits.substr(0, 1);
  if (digits.size() > 1) r += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return r + e;
}

void render(const Value& v, std::string& out, size_t max_chars) {
  if (out.size() > max_chars) return;
  using K = Value::Kind;
  switch (v.kind()) {
    case K::none: out += "None"; return;
    case K::boolean: out += v.as_bool() ? "True" : "False"; return;
    case K::integer: out += std::to_string(v.as_int()); return;
    case K::floating: out += python_float_repr(v.as_float()); return;
    case K::str: quote(out, v.as_str(), 0); return;
    case K::bytes: quote(out, v.as_str(), 'b'); return;
    case K::bytearray:
      out += "bytearray(";
      quote(out, v.as_str(), 'b');
      out += ")";
      return;
    case K::tuple:
    case K::list:
    case K::set:
    case K::frozenset: {
      const char* open = v.kind() == K::tuple ? "(" : v.kind() == K::list ? "[" : "{";
      const char* close = v.kind() == K::tuple ? ")" : v.kind() == K::list ? "]" : "}";
      if (v.kind() == K::frozenset) out += "frozenset(";
      if ((v.kind() == K::set || v.kind() == K::frozenset) && v.items().empty()) {
        out += v.kind() == K::set ? "set()" : ")";
        return;
      }
      out += open;
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ", ";
        render(v.items()[i], out, max_chars);
        if (out.size() > max_chars) return;
      }
      if (v.kind() == K::tuple && v.items().size() == 1) out += ",";
      out += close;
      if (v.kind() == K::frozenset) out += ")";
      return;
    }
    case K::dict: {
      out += "{";
      for (size_t i = 0; i < v.entries().size(); ++i) {
        if (i) out += ", ";
        render(v.entries()[i].first, out, max_chars);
        out += ": ";
        render(v.entries()[i].second, out, max_chars);
        if (out.size() > max_chars) return;
      }
      out += "}";
      return;
    }
    case K::global: out += v.name(); return;
    case K::object:
      // torch.Size((2, 3),) prints as Python prints it.
      if (v.name() == "torch.Size" && !v.has_state() && v.args().items().size() == 1 &&
          v.args().items()[0].kind() == K::tuple) {
        out += "torch.Size(";
        render(Value::sequence(K::list, v.args().items()[0].items()), out, max_chars);
        out += ")";
        return;
      }
      out += v.name();
      render(v.args(), out, max_chars);
      if (v.has_state()) {
        out += ".__setstate__(";
        render(v.state(), out, max_chars);
        out += ")";
      }
      return;
    case K::tensor: {
      const TensorValue& t = v.tensor_value();
      out += "tensor(" + t.torch_dtype + ", " + shape_string(t.shape) + ")";
      return;
    }
  }
}

}  // namespace

std::string Value::repr(size_t max_chars) const {
  std::string out;
  render(*this, out, max_chars);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return out;
}

}  // namespace fpg::dcp
