// Pickle protocol 2, emitted the way CPython's pickler emits it, for what torch reads back: the DCP
// `.metadata` (pickle.load) and the data.pkl of torch.save archives (torch.load, weights_only).
//
// The writer is a thin opcode emitter with CPython's conventions, so that our data.pkl of a tensor is
// byte-identical to torch.save's: every str, non-empty tuple, list, dict, global and REDUCE/NEWOBJ
// result is memoized (BINPUT, LONG_BINPUT past 255) in the order CPython memoizes them; a global
// written again is a BINGET of its first memo entry, and so is a str (CPython shares interned strings
// such as field names; equal strings are equal values to every reader). Lists and dicts are filled in
// CPython's batches of 1000 (MARK … APPENDS / SETITEMS, or APPEND / SETITEM for a lone item). Ints
// use BININT1/BININT2/BININT, beyond 32 bits LONG1; floats BINFLOAT; bytes protocol 2's
// _codecs.encode(latin-1 text, 'latin1'), b'' included (CPython writes __builtin__.bytes(), which
// torch.load(weights_only=True) refuses).
//
// Callers emit objects in pickle's postfix order, e.g. a dataclass instance as torch pickles it:
//   global(module, cls); begin_tuple(0); end_tuple(0); newobj(); <state dict>; build();
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/dcp/pickle/pickle_value.h"

namespace fpg::dcp {

class PickleWriter {
 public:
  PickleWriter();  // PROTO 2

  void none();
  void boolean(bool b);
  void integer(int64_t v);
  void floating(double v);
  void str(std::string_view utf8);
  void bytes(std::string_view raw);
  void global(std::string_view module, std::string_view name);

  // A tuple of n items: begin_tuple(n), the n items, end_tuple(n).
  void begin_tuple(size_t n);
  void end_tuple(size_t n);

  // A list or dict of n items (dict: n key-value pairs): begin, then item() before each element (dict:
  // before each key), then end(). Containers nest.
  void begin_list(uint64_t n);
  void begin_dict(uint64_t n);
  void item();
  void end();

  // REDUCE (callable, args tuple) and NEWOBJ (class, args tuple); both memoize their result and
  // return its memo index, so a shared object (torch.strided) can be referenced again with get().
  uint32_t reduce();
  uint32_t newobj();
  void build();           // BUILD: applies the state on the stack to the object below it
  void persistent_id();   // BINPERSID: the value on the stack becomes a persistent id
  void get(uint32_t memo_index);

  // STOP; returns the pickle. The writer must not be used afterwards.
  std::string finish();

 private:
  uint32_t memoize();
  void close_batch();

  struct Open {
    bool dict = false;
    uint64_t count = 0;  // items declared
    uint64_t next = 0;   // items started
  };
  std::string out_;
  uint32_t memo_size_ = 0;
  std::unordered_map<std::string, uint32_t> strings_;
  std::unordered_map<std::string, uint32_t> globals_;  // "module\nname"
  std::vector<Open> open_;
};

// Pickles a tensor value in place (torch.save's persistent-storage form, torch_save_writer.h).
using TensorPickler = std::function<void(PickleWriter& w, const TensorValue& t)>;

// Pickles `v` as CPython would pickle the Python value it stands for: None, bool, int, float, str,
// bytes, bytearray, tuple, list, dict, set and frozenset (protocol 2's __builtin__.set([...]) form), globals
// ("torch.bfloat16": the object that name refers to), objects (callable(*args), then BUILD with the
// state when there is one) and tensors through `tensor`. Throws fpg::UsageError for a tensor when
// `tensor` is empty and for nesting deeper than `max_depth`.
void pickle_value(PickleWriter& w, const Value& v, const TensorPickler& tensor = {}, uint32_t max_depth = 256);

}  // namespace fpg::dcp
