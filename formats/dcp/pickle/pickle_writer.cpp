#include "formats/dcp/pickle/pickle_writer.h"

#include <cstring>

#include "core/printable.h"
#include "core/error.h"

namespace fpg::dcp {
namespace {

namespace op {
constexpr char PROTO = '\x80', STOP = '.', NONE = 'N', NEWTRUE = '\x88', NEWFALSE = '\x89',
               BININT1 = 'K', BININT2 = 'M', BININT = 'J', LONG1 = '\x8a', BINFLOAT = 'G',
               BINUNICODE = 'X', GLOBAL = 'c', MARK = '(', EMPTY_TUPLE = ')', TUPLE = 't',
               TUPLE1 = '\x85', TUPLE2 = '\x86', TUPLE3 = '\x87', EMPTY_LIST = ']', APPEND = 'a',
               APPENDS = 'e', EMPTY_DICT = '}', SETITEM = 's', SETITEMS = 'u', REDUCE = 'R',
               NEWOBJ = '\x81', BUILD = 'b', BINPERSID = 'Q', BINPUT = 'q', LONG_BINPUT = 'r',
               BINGET = 'h', LONG_BINGET = 'j';
}  // namespace op

constexpr uint64_t kBatchSize = 1000;  // CPython's pickle._BATCHSIZE

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Protocol 2 names modules as Python 2 did (CPython's fix_imports); only these can occur here.
std::string_view python2_module(std::string_view module) {
  if (module == "builtins") return "__builtin__";
  if (module == "copyreg") return "copy_reg";
  return module;
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(op::PROTO);
  out_.push_back('\x02');
}

uint32_t PickleWriter::memoize() {
  const uint32_t idx = memo_size_++;
  if (idx < 256) {
    out_.push_back(op::BINPUT);
    out_.push_back(static_cast<char>(idx));
  } else {
    out_.push_back(op::LONG_BINPUT);
    put_le(out_, idx, 4);
  }
  return idx;
}

void PickleWriter::get(uint32_t memo_index) {
  if (memo_index >= memo_size_) throw InternalError("pickle: BINGET of unset memo entry");
  if (memo_index < 256) {
    out_.push_back(op::BINGET);
    out_.push_back(static_cast<char>(memo_index));
  } else {
    out_.push_back(op::LONG_BINGET);
    put_le(out_, memo_index, 4);
  }
}

void PickleWriter::none() { out_.push_back(op::NONE); }

void PickleWriter::boolean(bool b) { out_.push_back(b ? op::NEWTRUE : op::NEWFALSE); }

void PickleWriter::integer(int64_t v) {
  if (v >= 0 && v <= 0xFF) {
    out_.push_back(op::BININT1);
    put_le(out_, static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v <= 0xFFFF) {
    out_.push_back(op::BININT2);
    put_le(out_, static_cast<uint64_t>(v), 2);
  } else if (v >= -0x80000000LL && v <= 0x7FFFFFFFLL) {
    out_.push_back(op::BININT);
    put_le(out_, static_cast<uint64_t>(v), 4);
  } else {
    // LONG1: the shortest little-endian two's complement that keeps the sign.
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    int n = 8;
    while (n > 1 && ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) || (b[n - 1] == 0xFF && (b[n - 2] & 0x80)))) --n;
    out_.push_back(op::LONG1);
    out_.push_back(static_cast<char>(n));
    out_.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
  }
}

void PickleWriter::floating(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  out_.push_back(op::BINFLOAT);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void PickleWriter::str(std::string_view utf8) {
  const auto it = strings_.find(std::string(utf8));
  if (it != strings_.end()) return get(it->second);
  if (utf8.size() > 0xFFFFFFFFu) throw UsageError("pickle: a str of " + std::to_string(utf8.size()) + " bytes");
  out_.push_back(op::BINUNICODE);
  put_le(out_, utf8.size(), 4);
  out_.append(utf8);
  strings_.emplace(std::string(utf8), memoize());
}

// CPython writes b'' as __builtin__.bytes(), which torch.load(weights_only=True) refuses; the
// _codecs.encode form it uses for other bytes loads everywhere, so empty bytes take that form too.
void PickleWriter::bytes(std::string_view raw) {
  // Each byte becomes the code point of the same value, UTF-8 encoded.
  std::string text;
  text.reserve(raw.size() * 2);
  for (const char c : raw) {
    const auto u = static_cast<uint8_t>(c);
    if (u < 0x80) {
      text.push_back(static_cast<char>(u));
    } else {
      text.push_back(static_cast<char>(0xC0 | (u >> 6)));
      text.push_back(static_cast<char>(0x80 | (u & 0x3F)));
    }
  }
  global("_codecs", "encode");
  begin_tuple(2);
  str(text);
  str("latin1");
  end_tuple(2);
  reduce();
}

void PickleWriter::global(std::string_view module, std::string_view name) {
  module = python2_module(module);
  std::string key;
  key.reserve(module.size() + name.size() + 1);
  key.append(module).push_back('\n');
  key.append(name);
  const auto it = globals_.find(key);
  if (it != globals_.end()) return get(it->second);
  out_.push_back(op::GLOBAL);
  out_.append(key).push_back('\n');
  globals_.emplace(std::move(key), memoize());
}

void PickleWriter::begin_tuple(size_t n) {
  if (n > 3) out_.push_back(op::MARK);
}

void PickleWriter::end_tuple(size_t n) {
  static constexpr char kSized[] = {op::EMPTY_TUPLE, op::TUPLE1, op::TUPLE2, op::TUPLE3};
  out_.push_back(n <= 3 ? kSized[n] : op::TUPLE);
  if (n > 0) memoize();  // CPython shares the one empty tuple and never memoizes it
}

void PickleWriter::begin_list(uint64_t n) {
  out_.push_back(op::EMPTY_LIST);
  memoize();
  open_.push_back({false, n, 0});
}

void PickleWriter::begin_dict(uint64_t n) {
  out_.push_back(op::EMPTY_DICT);
  memoize();
  open_.push_back({true, n, 0});
}

// Ends the batch holding items up to open_.back().next.
void PickleWriter::close_batch() {
  const Open& c = open_.back();
  const uint64_t size = (c.next - 1) % kBatchSize + 1;
  if (size == 1) out_.push_back(c.dict ? op::SETITEM : op::APPEND);
  else out_.push_back(c.dict ? op::SETITEMS : op::APPENDS);
}

void PickleWriter::item() {
  if (open_.empty()) throw InternalError("pickle: item() outside a list or dict");
  Open& c = open_.back();
  if (c.next >= c.count) throw InternalError("pickle: more items than the container declared");
  if (c.next > 0 && c.next % kBatchSize == 0) close_batch();
  if (c.next % kBatchSize == 0 && c.count - c.next > 1) out_.push_back(op::MARK);
  ++c.next;
}

void PickleWriter::end() {
  if (open_.empty()) throw InternalError("pickle: end() outside a list or dict");
  const Open& c = open_.back();
  if (c.next != c.count) throw InternalError("pickle: fewer items than the container declared");
  if (c.count > 0) close_batch();
  open_.pop_back();
}

uint32_t PickleWriter::reduce() {
  out_.push_back(op::REDUCE);
  return memoize();
}

uint32_t PickleWriter::newobj() {
  out_.push_back(op::NEWOBJ);
  return memoize();
}

void PickleWriter::build() { out_.push_back(op::BUILD); }

void PickleWriter::persistent_id() { out_.push_back(op::BINPERSID); }

std::string PickleWriter::finish() {
  if (!open_.empty()) throw InternalError("pickle: finish() with an open list or dict");
  out_.push_back(op::STOP);
  return std::move(out_);
}

namespace {

void pickle_value_at(PickleWriter& w, const Value& v, const TensorPickler& tensor, uint32_t depth,
                     uint32_t max_depth) {
  if (depth > max_depth)
    throw UsageError("pickle: value nested deeper than " + std::to_string(max_depth) + " levels");
  using K = Value::Kind;
  const auto global_name = [&w](const std::string& qualified) {
    const auto dot = qualified.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == qualified.size())
      throw UsageError("pickle: global " + quoted_name(qualified) + " is not a module.name");
    w.global(std::string_view(qualified).substr(0, dot), std::string_view(qualified).substr(dot + 1));
  };
  switch (v.kind()) {
    case K::none: return w.none();
    case K::boolean: return w.boolean(v.as_bool());
    case K::integer: return w.integer(v.as_int());
    case K::floating: return w.floating(v.as_float());
    case K::str: return w.str(v.as_str());
    case K::bytes: return w.bytes(v.as_str());
    case K::bytearray: {  // CPython < protocol 5: bytearray(bytes), or bytearray() when empty
      w.global("builtins", "bytearray");
      const size_t n = v.as_str().empty() ? 0 : 1;
      w.begin_tuple(n);
      if (n) w.bytes(v.as_str());
      w.end_tuple(n);
      w.reduce();
      return;
    }
    case K::global: return global_name(v.name());
    case K::tuple: {
      const auto& items = v.items();
      w.begin_tuple(items.size());
      for (const Value& x : items) pickle_value_at(w, x, tensor, depth + 1, max_depth);
      return w.end_tuple(items.size());
    }
    case K::list: {
      const auto& items = v.items();
      w.begin_list(items.size());
      for (const Value& x : items) {
        w.item();
        pickle_value_at(w, x, tensor, depth + 1, max_depth);
      }
      return w.end();
    }
    case K::dict: {
      const auto& entries = v.entries();
      w.begin_dict(entries.size());
      for (const auto& [key, value] : entries) {
        w.item();
        pickle_value_at(w, key, tensor, depth + 1, max_depth);
        pickle_value_at(w, value, tensor, depth + 1, max_depth);
      }
      return w.end();
    }
    case K::set:
    case K::frozenset: {
      const auto& items = v.items();
      w.global("builtins", v.kind() == K::set ? "set" : "frozenset");
      w.begin_tuple(1);
      w.begin_list(items.size());
      for (const Value& x : items) {
        w.item();
        pickle_value_at(w, x, tensor, depth + 1, max_depth);
      }
      w.end();
      w.end_tuple(1);
      w.reduce();
      return;
    }
    case K::object: {
      global_name(v.name());
      if (!v.args().is(K::tuple)) throw UsageError("pickle: object " + v.name() + " with non-tuple arguments");
      pickle_value_at(w, v.args(), tensor, depth + 1, max_depth);
      w.reduce();
      if (v.has_state()) {
        pickle_value_at(w, v.state(), tensor, depth + 1, max_depth);
        w.build();
      }
      return;
    }
    case K::tensor:
      if (!tensor) throw UsageError("pickle: a tensor value where only plain values can be written");
      return tensor(w, v.tensor_value());
  }
  throw InternalError("pickle: unknown value kind");
}

}  // namespace

void pickle_value(PickleWriter& w, const Value& v, const TensorPickler& tensor, uint32_t max_depth) {
  pickle_value_at(w, v, tensor, 0, max_depth);
}

}  // namespace fpg::dcp
