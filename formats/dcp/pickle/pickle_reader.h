// A restricted unpickler: decodes pickle protocols 2-5 into data without executing anything.
//
// The pickle virtual machine is run over the bytes with a stack, a mark stack and a memo, but every
// opcode that would call Python builds a node instead: a global is looked up in an AllowList (refused
// with its name otherwise), REDUCE / NEWOBJ record an `object` node, BUILD attaches its state. The
// result is a PickleDocument, an arena of nodes that share children as the memo shares objects. A
// hostile pickle can make that graph cyclic or exponentially wide when unfolded, so every traversal of
// a document is bounded in depth and in visited nodes (to_value, the metadata decoder).
//
// Refused (fpg::FormatError naming the file, the byte offset and the reason): protocols 0 and 1 and
// their text opcodes, protocols above 5, out-of-band buffers (NEXT_BUFFER, READONLY_BUFFER), the
// extension registry (EXT1/2/4), integers beyond 64 bits, malformed UTF-8, lengths past the end of the
// input, memo references to unset entries, stack underflow, a mark or container nesting deeper than
// the limit, more nodes than the limit, bytes after STOP, and any global not in the allow-list.
//
// Memory: the document and everything unfolded from it are charged to the document's DecodeBudget
// (decode_budget.h), a bound set by the pickle's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/dcp/pickle/allow_list.h"
#include "formats/dcp/pickle/decode_budget.h"
#include "formats/dcp/pickle/pickle_value.h"

namespace fpg::dcp {

struct PickleLimits {
  uint64_t max_bytes = uint64_t{4} << 30;  // the pickle itself
  uint32_t max_depth = 256;         // open marks, and nesting of any traversal of the result
  uint64_t max_nodes = 64u << 20;   // values created while decoding (about 40 bytes each)
  uint64_t max_value_nodes = 8u << 20;  // values produced by one to_value (about 120 bytes each)
};

class PickleDocument {
 public:
  using Ref = uint32_t;
  enum class Kind : uint8_t {
    none, boolean, integer, floating, str, bytes, bytearray, tuple, list, dict, set, frozenset, global,
    object,         // class or function, args, optional BUILD state
    persistent_id,  // BINPERSID: the id value (torch.save: ('storage', type, key, location, numel))
  };

  Ref root() const { return root_; }
  const std::string& file() const { return file_; }
  uint32_t max_depth() const { return limits_.max_depth; }
  size_t node_count() const { return nodes_.size(); }
  // The memory budget of this pickle: the document's own arrays are charged to it, and so must be
  // whatever a consumer builds from the document (shared values each time they are unfolded).
  DecodeBudget& budget() const { return *budget_; }

  Kind kind(Ref r) const { return node(r).kind; }
  bool as_bool(Ref r) const { return bits(r) != 0; }
  int64_t as_int(Ref r) const { return static_cast<int64_t>(bits(r)); }
  double as_float(Ref r) const {
    double f;
    const uint64_t b = bits(r);
    std::memcpy(&f, &b, sizeof f);
    return f;
  }
  // str, bytes and bytearray: the text; global: "module.name"; object: its class or function's name.
  const std::string& text(Ref r) const { return strings_[node(r).text]; }
  // An id of the text: nodes with equal ids have equal text (objects share their class's), though
  // equal text may come with distinct ids. Lets a decoder recognise a class name once, not per object.
  uint32_t text_id(Ref r) const { return node(r).text; }
  GlobalRole role(Ref r) const { return static_cast<GlobalRole>(node(r).role); }

  // tuple, list, set, frozenset: element count; dict: entry count.
  size_t size(Ref r) const {
    const Node& n = node(r);
    switch (n.kind) {
      case Kind::tuple:
      case Kind::frozenset:
      case Kind::list:
      case Kind::set: return n.b;
      case Kind::dict: return n.b / 2;
      default: return 0;
    }
  }
  Ref item(Ref seq, size_t i) const { return kids(seq)[i]; }
  Ref key(Ref dict, size_t i) const { return kids(dict)[2 * i]; }
  Ref value(Ref dict, size_t i) const { return kids(dict)[2 * i + 1]; }
  // dict: the value of the last entry whose key is the str `key`.
  std::optional<Ref> find(Ref dict, std::string_view key) const;
  // object: its argument tuple; its BUILD state, if any.
  Ref args(Ref obj) const { return node(obj).a; }
  std::optional<Ref> state(Ref obj) const {
    if (!node(obj).has_state) return std::nullopt;
    return node(obj).b;
  }
  // persistent_id: the id value.
  Ref persistent_id(Ref r) const { return node(r).a; }

  // The Python type name of a node for messages: "int", "tuple", "torch.Size", ...
  std::string type_name(Ref r) const;

  // Unfolds node `r` into an owning Value, at most max_depth deep and max_value_nodes values, each
  // charged to budget() (a FormatError naming the file otherwise). `object_hook`, when set, is offered every object and
  // persistent_id node first and may return the value to use for it (the torch.save reader turns
  // tensors into tensor values this way).
  using ObjectHook = std::function<std::optional<Value>(const PickleDocument&, Ref)>;
  Value to_value(Ref r, const ObjectHook& object_hook = {}) const;

 private:
  friend class PickleMachine;
  // 16 bytes. Children of every container (tuple, list, dict as k0, v0, k1, v1, ..., set,
  // frozenset) are pool_[a, a + b); an object's are a = args and b = BUILD state (when has_state); a
  // persistent id's is a; a bool's, int's or float's 64 bits are b:a.
  struct Node {
    Kind kind = Kind::none;
    uint8_t role = 0;       // global and object: the GlobalRole of the name
    uint8_t has_state = 0;  // object
    uint32_t text = 0;      // index into strings_
    Ref a = 0;
    Ref b = 0;
  };
  // An int in [0, kImmediateEnd) is not a node: its Ref is kImmediate | value (Python pickles
  // lengths, offsets and sizes as such ints; a node each would be most of a .metadata's document).
  static constexpr Ref kImmediate = Ref{1} << 31;
  static constexpr Ref kImmediateEnd = kImmediate - 1;  // kImmediate | value stays below the machine's "unset"
  static bool immediate(Ref r) { return r & kImmediate; }
  // What an immediate int reads as where a node is asked for: an int, no text, no children.
  static const Node& immediate_node() {
    static const Node n{Kind::integer, 0, 0, 0, 0, 0};
    return n;
  }
  const Node& node(Ref r) const { return immediate(r) ? immediate_node() : nodes_[r]; }
  uint64_t bits(Ref r) const {
    if (immediate(r)) return r & ~kImmediate;
    return uint64_t{nodes_[r].b} << 32 | nodes_[r].a;
  }
  const Ref* kids(Ref r) const { return pool_.data() + node(r).a; }
  std::string file_;
  PickleLimits limits_;
  std::vector<Node> nodes_;
  std::vector<std::string> strings_;
  std::vector<Ref> pool_;
  Ref root_ = 0;
  std::shared_ptr<DecodeBudget> budget_;
};

// Decodes `data` (`size` bytes, the whole pickle) under `allow`. `file` names the input in messages,
// e.g. "ckpt/.metadata" or "ckpt/__0_0.distcp [4096, 5673) archive/data.pkl".
PickleDocument read_pickle(const std::string& file, const uint8_t* data, size_t size,
                           const AllowList& allow, const PickleLimits& limits = {});

// Fills `dst` with `size` bytes of the pickle from `offset` (throwing, e.g. fpg::FormatError, when it
// cannot).
using PickleSource = std::function<void(uint64_t offset, uint8_t* dst, size_t size)>;
// The same, reading the `size` bytes of the pickle through `source` as the decoding goes, front to
// back, into a window of about a megabyte: a large pickle (a .metadata of a million chunks) is never
// held whole.
PickleDocument read_pickle(const std::string& file, size_t size, const PickleSource& source,
                           const AllowList& allow, const PickleLimits& limits = {});

}  // namespace fpg::dcp
