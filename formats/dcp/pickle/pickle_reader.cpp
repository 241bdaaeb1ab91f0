#include "formats/dcp/pickle/pickle_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/printable.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/dcp/huge_pages.h"
#include "formats/dcp/prefaulter.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {

using Ref = PickleDocument::Ref;
using Kind = PickleDocument::Kind;

namespace op {
constexpr uint8_t MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F',
                  INT = 'I', BININT = 'J', BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N',
                  PERSID = 'P', BINPERSID = 'Q', REDUCE = 'R', STRING = 'S', BINSTRING = 'T',
                  SHORT_BINSTRING = 'U', UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b',
                  GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h',
                  INST = 'i', LONG_BINGET = 'j', LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p',
                  BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')',
                  SETITEMS = 'u', BINFLOAT = 'G', BINBYTES = 'B', SHORT_BINBYTES = 'C';
constexpr uint8_t PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85,
                  TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a,
                  LONG4 = 0x8b, SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e,
                  EMPTY_SET = 0x8f, ADDITEMS = 0x90, FROZENSET = 0x91, NEWOBJ_EX = 0x92,
                  STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95, BYTEARRAY8 = 0x96,
                  NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98;
}  // namespace op

namespace {

constexpr Ref kUnset = std::numeric_limits<Ref>::max();

// Python's 'utf-8' with 'surrogatepass', as the unpickler decodes str: well-formed sequences, lone
// surrogates (ED A0..BF xx) allowed.
bool valid_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  auto cont = [&](size_t k) { return i + k < n && (s[i + k] & 0xC0) == 0x80; };
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      i += 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      if (!cont(1)) return false;
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(1) || !cont(2)) return false;
      if (c == 0xE0 && s[i + 1] < 0xA0) return false;  // overlong
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) return false;
      if (c == 0xF0 && s[i + 1] < 0x90) return false;  // overlong
      if (c == 0xF4 && s[i + 1] > 0x8F) return false;  // above U+10FFFF
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

constexpr std::string_view kLayouts[] = {"torch.strided",    "torch.sparse_coo", "torch.sparse_csr",
                                         "torch.sparse_csc", "torch.sparse_bsr", "torch.sparse_bsc",
                                         "torch._mkldnn",    "torch.jagged"};

std::string opcode_name(uint8_t c) {
  char buf[16];
  if (c >= 0x21 && c < 0x7f)
    std::snprintf(buf, sizeof buf, "'%c'", c);
  else
    std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

}  // namespace

// Runs the pickle machine over one input into a document.
class PickleMachine {
 public:
  // The whole input in memory.
  PickleMachine(PickleDocument& doc, const uint8_t* data, size_t size, const AllowList& allow)
      : doc_(doc), p_(data), n_(size), allow_(allow), end_(size) {}
  // The input read through `source` into a window as the machine goes: nothing but the window (and a
  // string longer than it, while it is read) is held.
  PickleMachine(PickleDocument& doc, const PickleSource& source, size_t size, const AllowList& allow)
      : doc_(doc), p_(nullptr), n_(size), allow_(allow), source_(&source) {}

  // Reserves the memo for `entries` (address space, faulted in as it is used, never copied).
  void reserve_memo(size_t entries) {
    memo_.reserve(entries);
    prefer_huge_pages(memo_.data(), memo_.capacity() * sizeof(Ref));
  }
  // Has `prefaulter` (started after this) fault in the node, pool and memo arrays ahead of their use.
  void prefault(Prefaulter& prefaulter) {
    prefaulter_ = &prefaulter;
    node_region_ = prefaulter.add(doc_.nodes_.data(), doc_.nodes_.capacity() * sizeof(PickleDocument::Node));
    pool_region_ = prefaulter.add(doc_.pool_.data(), doc_.pool_.capacity() * sizeof(Ref));
    memo_region_ = prefaulter.add(memo_.data(), memo_.capacity() * sizeof(Ref));
  }

  void run();
  template <class Input>
  static PickleDocument decode(const std::string& file, size_t size, const Input& input, const AllowList& allow,
                               const PickleLimits& limits);

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(doc_.file_ + ": pickle " + what + " (at byte " + std::to_string(op_pos()) + ")");
  }

  // The input's bytes [base_, base_ + end_) are at p_ (all of them for an input in memory); p_[pos_] is
  // the next one to read, p_[op_at_] the current opcode (both counted modulo 2^64 from p_).
  size_t remaining() const { return n_ - (base_ + pos_); }
  size_t op_pos() const { return base_ + op_at_; }
  // Streaming: makes k more bytes (at most remaining()) available at p_ + pos_. The unread rest of the
  // window moves to its start and the source fills the rest.
  static constexpr size_t kWindow = size_t{1} << 20;
  [[gnu::noinline]] void refill(size_t k) {
    const size_t keep = end_ - pos_;
    const size_t want = std::min(std::max(k, kWindow), remaining());
    if (window_.size() < want) {
      std::vector<uint8_t> grown(want);
      if (keep) std::memcpy(grown.data(), window_.data() + pos_, keep);
      window_.swap(grown);
    } else if (keep) {
      std::memmove(window_.data(), window_.data() + pos_, keep);
    }
    (*source_)(base_ + end_, window_.data() + keep, want - keep);
    base_ += pos_;
    op_at_ -= pos_;
    pos_ = 0;
    end_ = want;
    p_ = window_.data();
  }
  // k bytes past the window: past the input's end, or (streaming) still to be read.
  [[gnu::noinline]] void more(uint64_t k, const char* what) {
    if (k > remaining() || !source_) overrun(k, what);
    refill(static_cast<size_t>(k));
  }
  [[noreturn, gnu::noinline, gnu::cold]] void overrun(uint64_t k, const char* what) const {
    fail(std::string(what) + " of " + std::to_string(k) + " bytes runs past the end (" + std::to_string(remaining()) +
         " left)");
  }
  const uint8_t* take(uint64_t k, const char* what) {
    if (k > end_ - pos_) more(k, what);
    const uint8_t* q = p_ + pos_;
    pos_ += static_cast<size_t>(k);
    return q;
  }
  uint64_t le(int bytes, const char* what) {
    const uint8_t* q = take(static_cast<uint64_t>(bytes), what);
    uint64_t v = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    std::memcpy(&v, q, static_cast<size_t>(bytes));  // one load for the constant sizes of the opcodes
#else
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | q[i];
#endif
    return v;
  }
  std::string line(const char* what) {
    const size_t span = std::min<size_t>(remaining(), 4096);
    if (span > end_ - pos_) refill(span);
    const void* nl = std::memchr(p_ + pos_, '\n', span);
    if (!nl) fail(std::string(what) + " has no end of line within 4096 bytes");
    const size_t len = static_cast<const uint8_t*>(nl) - (p_ + pos_);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len + 1;
    if (!valid_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size()))
      fail(std::string(what) + " is not valid UTF-8");
    return s;
  }

  // Every kReportEvery values and pool items, the prefaulter hears of the arrays' growth.
  static constexpr uint64_t kReportEvery = 1u << 16;
  // Also at each array's capacity, so that its growth is charged before it is allocated.
  [[gnu::noinline]] void report_nodes() {
    if (doc_.nodes_.size() >= doc_.limits_.max_nodes)
      fail("holds more than " + std::to_string(doc_.limits_.max_nodes) + " values");
    next_node_report_ = std::min<uint64_t>({doc_.limits_.max_nodes, doc_.nodes_.size() + kReportEvery,
                                            std::max(doc_.nodes_.capacity(), doc_.nodes_.size() + 1)});
    if (prefaulter_) prefaulter_->used(node_region_, doc_.nodes_.size() * sizeof(PickleDocument::Node));
    charge_document(1, 0);
  }
  // The heap a vector takes holding `need` elements: its capacity, and while it grows past it the old
  // buffer and the new one (twice the size, or what is needed) together.
  template <class V>
  static uint64_t vector_bytes(const V& v, uint64_t need) {
    const uint64_t capacity = v.capacity();
    const uint64_t grown = need <= capacity ? 0 : std::max<uint64_t>(need, 2 * v.size());
    return (capacity + grown) * sizeof(typename V::value_type);
  }
  // The document's arrays and the machine's own, in bytes, with `more_nodes` values, `more_items`
  // pool items and a memo of `memo_need` entries to come: what is allocated, reserved address space
  // included, and the transient copy of an array that grows.
  uint64_t document_bytes(uint64_t more_nodes, uint64_t more_items, uint64_t memo_need) const {
    return vector_bytes(doc_.nodes_, doc_.nodes_.size() + more_nodes) +
           vector_bytes(doc_.pool_, doc_.pool_.size() + more_items) + vector_bytes(memo_, memo_need) +
           vector_bytes(doc_.strings_, doc_.strings_.size()) + text_bytes_ + vector_bytes(segments_, segments_.size()) +
           vector_bytes(chained_, chained_.size()) + vector_bytes(stack_, stack_.size());
  }
  // Charges the growth since the last charge. Called every kReportEvery values or pool items, when the
  // value or pool array is about to grow, when the memo grows, and every kTextStep bytes of text, so
  // that no run of opcodes grows the document far past its budget unseen.
  [[gnu::noinline]] void charge_document(uint64_t more_nodes, uint64_t more_items) {
    charge_document(more_nodes, more_items, memo_.size());
  }
  [[gnu::noinline]] void charge_document(uint64_t more_nodes, uint64_t more_items, uint64_t memo_need) {
    const uint64_t now = document_bytes(more_nodes, more_items, memo_need);
    if (now <= charged_) return;
    if (!doc_.budget_->add(now - charged_)) doc_.budget_->exceeded("pickle at byte " + std::to_string(op_pos()));
    charged_ = now;
  }
  Ref new_node(Kind k) {
    if (doc_.nodes_.size() >= next_node_report_) report_nodes();
    doc_.nodes_.emplace_back();
    doc_.nodes_.back().kind = k;
    return static_cast<Ref>(doc_.nodes_.size() - 1);
  }
  static constexpr uint64_t kTextStep = uint64_t{1} << 20;
  Ref new_text(Kind k, std::string s) {
    text_bytes_ += string_heap_bytes(s.size());
    if (text_bytes_ >= next_text_report_) {
      next_text_report_ = text_bytes_ + kTextStep;
      charge_document(0, 0);
    }
    const Ref r = new_node(k);
    doc_.nodes_[r].text = static_cast<uint32_t>(doc_.strings_.size());
    doc_.strings_.push_back(std::move(s));
    return r;
  }
  Ref new_number(Kind k, uint64_t bits) {
    const Ref r = new_node(k);
    doc_.nodes_[r].a = static_cast<Ref>(bits);
    doc_.nodes_[r].b = static_cast<Ref>(bits >> 32);
    return r;
  }
  Ref new_int(int64_t v) {
    if (v >= 0 && v < PickleDocument::kImmediateEnd) {
      ++immediates_;
      return PickleDocument::kImmediate | static_cast<Ref>(v);
    }
    return new_number(Kind::integer, static_cast<uint64_t>(v));
  }
  void check_pool(size_t n) {
    if (doc_.pool_.size() + n >= next_pool_report_) report_pool(n);
  }
  [[gnu::noinline]] void report_pool(size_t n) {
    if (doc_.pool_.size() + n >= kUnset) fail("holds more container items than 32-bit indices address");
    next_pool_report_ = std::min<uint64_t>({kUnset, doc_.pool_.size() + n + kReportEvery,
                                            std::max(doc_.pool_.capacity(), doc_.pool_.size() + n) + 1});
    if (prefaulter_) prefaulter_->used(pool_region_, (doc_.pool_.size() + n) * sizeof(Ref));
    charge_document(0, n);
  }
  // Most containers are one to three items (torch.Size, the arguments of a call): those are pushed.
  void append_pool(const Ref* items, size_t n) {
    if (n <= 3) {
      for (size_t i = 0; i < n; ++i) doc_.pool_.push_back(items[i]);
    } else {
      doc_.pool_.insert(doc_.pool_.end(), items, items + n);
    }
  }
  // A tuple or frozenset: immutable, its items known at once.
  Ref new_seq(Kind k, const Ref* kids, size_t n) {
    check_pool(n);
    const Ref r = new_node(k);
    PickleDocument::Node& nd = doc_.nodes_[r];
    nd.a = static_cast<Ref>(doc_.pool_.size());
    nd.b = static_cast<Ref>(n);
    append_pool(kids, n);
    return r;
  }
  Ref empty_tuple() {
    if (empty_tuple_ == kUnset) empty_tuple_ = new_seq(Kind::tuple, nullptr, 0);
    return empty_tuple_;
  }

  // A list, dict or set grows by APPEND(S), SETITEM(S) and ADDITEMS while the machine runs. While
  // its items are one run of the pool (every batch appended right after the last, as a pickler
  // writes a container) its node holds them as the document does, a = first item, b = count. A
  // batch that lands elsewhere in the pool (containers grown in turns) turns the node into a chain
  // of segments, a = first segment, b = last segment, text = item count, marked kChained; finish()
  // lays each chain out contiguously.
  struct Segment {
    Ref start, count, next;
  };
  static constexpr uint8_t kChained = 1;  // a mutable container's role byte (roles are for globals and objects)
  static bool chained(const PickleDocument::Node& nd) { return nd.role == kChained && mutable_container(nd.kind); }
  static bool mutable_container(Kind k) { return k == Kind::list || k == Kind::dict || k == Kind::set; }
  Ref new_container(Kind k) { return new_node(k); }
  Ref new_segment(Ref start, Ref count) {
    // Interleaved growth of many containers makes a segment per batch: bounded like the values.
    if (segments_.size() >= doc_.limits_.max_nodes)
      fail("grows its containers in more than " + std::to_string(doc_.limits_.max_nodes) + " pieces");
    segments_.push_back({start, count, kUnset});
    return static_cast<Ref>(segments_.size() - 1);
  }
  void extend(Ref c, const Ref* items, size_t n) {
    if (n == 0) return;
    check_pool(n);
    PickleDocument::Node& nd = node(c);
    const auto end = static_cast<Ref>(doc_.pool_.size());
    if (!chained(nd)) {
      if (nd.b == 0) nd.a = end;
      if (nd.a + nd.b == end) {
        nd.b += static_cast<Ref>(n);  // below kUnset with the pool
        append_pool(items, n);
        return;
      }
      const Ref first = new_segment(nd.a, nd.b);
      nd.text = nd.b;
      nd.a = nd.b = first;
      nd.role = kChained;
      chained_.push_back(c);
    }
    if (segments_[nd.b].start + segments_[nd.b].count == end) {
      segments_[nd.b].count += static_cast<Ref>(n);
    } else {
      const Ref s = new_segment(end, static_cast<Ref>(n));
      segments_[nd.b].next = s;
      nd.b = s;
    }
    nd.text += static_cast<Ref>(n);  // below kUnset with the pool
    append_pool(items, n);
  }
  // Items of a container (mutable or not) while the machine runs.
  std::vector<Ref> copy_items(Ref r) const {
    const PickleDocument::Node& nd = doc_.node(r);
    if (!chained(nd)) return std::vector<Ref>(doc_.kids(r), doc_.kids(r) + nd.b);
    std::vector<Ref> out;
    out.reserve(nd.text);
    for (Ref s = nd.a; s != kUnset; s = segments_[s].next)
      out.insert(out.end(), doc_.pool_.begin() + segments_[s].start,
                 doc_.pool_.begin() + segments_[s].start + segments_[s].count);
    return out;
  }
  // Entries of a dict or items of any container while the machine runs.
  size_t count(Ref r) const {
    const PickleDocument::Node& nd = doc_.node(r);
    const Ref n = chained(nd) ? nd.text : nd.b;
    return n / (nd.kind == Kind::dict ? 2 : 1);
  }
  void finish() {
    for (const Ref c : chained_) {
      PickleDocument::Node& nd = node(c);
      const Ref n = nd.text;
      check_pool(n);
      const auto start = static_cast<Ref>(doc_.pool_.size());
      doc_.pool_.reserve(doc_.pool_.size() + n);
      for (Ref s = nd.a; s != kUnset; s = segments_[s].next)
        for (Ref i = 0; i < segments_[s].count; ++i) doc_.pool_.push_back(doc_.pool_[segments_[s].start + i]);
      nd.a = start;
      nd.b = n;
      nd.text = 0;
      nd.role = 0;
    }
  }
  PickleDocument::Node& node(Ref r) { return doc_.nodes_[r]; }

  size_t floor() const { return floor_; }
  void push(Ref r) { stack_.push_back(r); }
  Ref pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    const Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Ref top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  // Pops the last mark; the items above it are stack_[at, end), which the caller consumes and drops.
  size_t pop_mark() {
    if (marks_.empty()) fail("needs a MARK and there is none");
    const size_t at = marks_.back();
    marks_.pop_back();
    floor_ = marks_.empty() ? 0 : marks_.back();
    return at;
  }
  // The container below the items of a mark popped at `at`.
  Ref below_mark(size_t at) {
    if (at <= floor()) fail("stack underflow");
    return stack_[at - 1];
  }

  void memo_put(uint64_t idx) {
    const Ref v = top();
    if (idx >= memo_.size()) grow_memo(idx);
    memo_count_ += memo_[idx] == kUnset;
    memo_[idx] = v;
  }
  [[gnu::noinline]] void grow_memo(uint64_t idx) {
    if (idx > 2 * (doc_.nodes_.size() + immediates_) + 1024)
      fail("memo index " + std::to_string(idx) + " is out of range");
    // Linear growth within the reserved capacity (no copy), doubling past it.
    const size_t grown = memo_.size() + std::max<size_t>(kReportEvery, memo_.capacity() > memo_.size() ? 0 : memo_.size());
    const size_t need = std::max<size_t>(static_cast<size_t>(idx) + 1, grown);
    charge_document(0, 0, need);
    memo_.resize(need, kUnset);
    if (prefaulter_) prefaulter_->used(memo_region_, memo_.size() * sizeof(Ref));
  }
  void memo_get(uint64_t idx) {
    if (idx >= memo_.size() || memo_[idx] == kUnset)
      fail("memo index " + std::to_string(idx) + " is not set");
    push(memo_[idx]);
  }
  uint64_t decimal(const char* what) {
    const std::string s = line(what);
    if (s.empty() || s.size() > 10) fail(std::string(what) + " is not a memo index");
    uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') fail(std::string(what) + " is not a memo index");
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    return v;
  }

  int64_t long_bytes(const uint8_t* b, uint64_t k) {
    if (k == 0) return 0;
    const uint8_t sign = (b[k - 1] & 0x80) ? 0xff : 0x00;
    if (k > 8) {
      for (uint64_t i = 8; i < k; ++i)
        if (b[i] != sign) fail("integer beyond 64 bits is not supported");
      if ((b[7] & 0x80) != (sign & 0x80)) fail("integer beyond 64 bits is not supported");
      k = 8;
    }
    uint64_t v = 0;
    for (uint64_t i = k; i-- > 0;) v = (v << 8) | b[i];
    if (k < 8 && sign) v |= ~uint64_t{0} << (8 * k);
    return static_cast<int64_t>(v);
  }

  void text_op(Kind k, uint64_t len, bool utf8) {
    const uint8_t* q = take(len, k == Kind::str ? "str" : "bytes");
    if (utf8 && !valid_utf8(q, static_cast<size_t>(len))) fail("str is not valid UTF-8");
    push(new_text(k, std::string(reinterpret_cast<const char*>(q), static_cast<size_t>(len))));
  }

  void global(const std::string& module, const std::string& name) {
    const auto role = allow_.find(module, name);
    if (!role)
      fail("global " + safetensors::quote_name(qualified_name(module, name)) + " is not allowed");
    std::string mod = module == "__builtin__" ? "builtins" : module == "copy_reg" ? "copyreg" : module;
    const Ref r = new_text(Kind::global, qualified_name(mod, name));
    node(r).role = static_cast<uint8_t>(*role);
    push(r);
  }

  void expect_tuple(Ref args, const char* op, Ref callable) {
    if (doc_.kind(args) != Kind::tuple)
      fail(std::string(op) + " of " + quoted_name(doc_.text(callable)) + " with arguments that are a " + doc_.type_name(args) +
           ", not a tuple");
  }
  Ref make_object(Ref callable, Ref args) {
    const Ref r = new_node(Kind::object);
    node(r).text = node(callable).text;
    node(r).role = node(callable).role;
    node(r).a = args;
    return r;
  }
  void reduce();
  void newobj(bool ex);

  PickleDocument& doc_;
  const uint8_t* p_;
  size_t n_;
  const AllowList& allow_;
  size_t pos_ = 0, op_at_ = 0, end_ = 0;
  size_t base_ = 0;
  const PickleSource* source_ = nullptr;  // streaming: fills window_
  std::vector<uint8_t> window_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  size_t floor_ = 0;  // the stack size at the last mark (0 without one): what pop() may not go below
  std::vector<Ref> memo_;
  uint64_t memo_count_ = 0;
  uint64_t immediates_ = 0;  // ints pushed as immediates (values without a node)
  std::vector<Segment> segments_;
  std::vector<Ref> chained_;  // the containers grown in separate pieces, for finish()
  Ref none_ = kUnset, true_ = kUnset, false_ = kUnset, empty_tuple_ = kUnset;
  uint64_t next_node_report_ = 0, next_pool_report_ = 0;
  uint64_t text_bytes_ = 0, next_text_report_ = kTextStep;  // heap bytes of strings_
  uint64_t charged_ = 0;                                    // bytes charged to the budget so far
  Prefaulter* prefaulter_ = nullptr;
  size_t node_region_ = 0, pool_region_ = 0, memo_region_ = 0;
};

void PickleMachine::reduce() {
  const Ref args = pop();
  const Ref callable = pop();
  if (doc_.kind(callable) != Kind::global)
    fail("REDUCE calls a " + doc_.type_name(callable) + " (only allow-listed globals are called)");
  const std::string& name = doc_.text(callable);
  expect_tuple(args, "REDUCE", callable);
  // The argument tuple's items, read in place (by index: the pool may grow below).
  struct Args {
    const std::vector<Ref>& pool;
    size_t at, n;
    size_t size() const { return n; }
    bool empty() const { return n == 0; }
    Ref operator[](size_t i) const { return pool[at + i]; }
  } const a{doc_.pool_, doc_.nodes_[args].a, doc_.nodes_[args].b};
  auto bad_args = [&]() { fail("REDUCE of " + quoted_name(name) + " with unexpected arguments"); };
  switch (doc_.role(callable)) {
    case GlobalRole::constant:
      fail("REDUCE calls " + quoted_name(name) + ", which is not callable");
    case GlobalRole::constructor:
    case GlobalRole::rebuild_tensor:
      push(make_object(callable, args));
      return;
    case GlobalRole::ordered_dict:
      if (!a.empty()) bad_args();
      push(new_container(Kind::dict));
      return;
    case GlobalRole::make_set:
    case GlobalRole::make_frozenset: {
      const bool set = doc_.role(callable) == GlobalRole::make_set;
      std::vector<Ref> items;
      if (!a.empty()) {
        if (a.size() != 1 || doc_.kind(a[0]) != Kind::list) bad_args();
        // A copy of the list's items each time, though the list may be one memoized value: charged
        // before it is made.
        check_pool(count(a[0]));
        items = copy_items(a[0]);
      }
      if (set) {
        const Ref r = new_container(Kind::set);
        extend(r, items.data(), items.size());
        push(r);
      } else {
        push(new_seq(Kind::frozenset, items.data(), items.size()));
      }
      return;
    }
    case GlobalRole::make_bytes:
      if (!a.empty()) bad_args();
      push(new_text(Kind::bytes, {}));
      return;
    case GlobalRole::make_bytearray:
      if (a.empty()) {
        push(new_text(Kind::bytearray, {}));
        return;
      }
      if (a.size() != 1 || doc_.kind(a[0]) != Kind::bytes) bad_args();
      push(new_text(Kind::bytearray, doc_.text(a[0])));
      return;
    case GlobalRole::codecs_encode: {
      // Protocol 2 writes bytes b as _codecs.encode(b.decode('latin1'), 'latin1').
      if (a.size() != 2 || doc_.kind(a[0]) != Kind::str || doc_.kind(a[1]) != Kind::str ||
          (doc_.text(a[1]) != "latin1" && doc_.text(a[1]) != "latin-1"))
        bad_args();
      const std::string& s = doc_.text(a[0]);
      std::string out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<uint8_t>(s[i]);
        if (c < 0x80) {
          out += static_cast<char>(c);
        } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size()) {
          out += static_cast<char>(((c & 0x03) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3F));
          ++i;
        } else {
          fail("_codecs.encode of a character beyond latin-1");
        }
      }
      push(new_text(Kind::bytes, std::move(out)));
      return;
    }
    case GlobalRole::get_layout: {
      if (a.size() != 1 || doc_.kind(a[0]) != Kind::str) bad_args();
      const std::string& layout = doc_.text(a[0]);
      bool known = false;
      for (std::string_view l : kLayouts) known = known || l == layout;
      if (!known) fail("unknown layout " + safetensors::quote_name(layout));
      const Ref r = new_text(Kind::global, layout);
      node(r).role = static_cast<uint8_t>(GlobalRole::constant);
      push(r);
      return;
    }
  }
  fail("REDUCE of " + quoted_name(name) + " is not supported");
}

void PickleMachine::newobj(bool ex) {
  if (ex) {
    const Ref kwargs = pop();
    if (doc_.kind(kwargs) != Kind::dict || count(kwargs) != 0)
      fail("NEWOBJ_EX with keyword arguments is not supported");
  }
  const Ref args = pop();
  const Ref cls = pop();
  if (doc_.kind(cls) != Kind::global || doc_.role(cls) != GlobalRole::constructor)
    fail("NEWOBJ of a " + doc_.type_name(cls) + ", which is not an allow-listed class");
  expect_tuple(args, "NEWOBJ", cls);
  push(make_object(cls, args));
}

void PickleMachine::run() {
  if (remaining() != 0 && *take(1, "PROTO") != op::PROTO)
    fail("does not start with PROTO: protocols 0 and 1 are not supported");
  pos_ = 0;
  stack_.reserve(1024);
  while (true) {
    op_at_ = pos_;
    if (pos_ == end_) {
      if (remaining() == 0) fail("ends without STOP (truncated)");
      refill(1);
    }
    const uint8_t c = p_[pos_++];
    switch (c) {
      case op::PROTO: {
        const uint64_t v = le(1, "PROTO");
        if (v < 2 || v > 5) fail("protocol " + std::to_string(v) + " is not supported (2 to 5 are)");
        break;
      }
      case op::FRAME: {
        const uint64_t len = le(8, "FRAME");
        if (len > remaining())
          fail("FRAME of " + std::to_string(len) + " bytes runs past the end (" +
               std::to_string(remaining()) + " left)");
        break;
      }
      case op::STOP: {
        const Ref r = pop();
        if (!marks_.empty() || !stack_.empty())
          fail("STOP leaves " + std::to_string(stack_.size()) + " values and " +
               std::to_string(marks_.size()) + " marks behind");
        if (remaining() != 0)
          fail("STOP is followed by " + std::to_string(remaining()) + " more bytes");
        doc_.root_ = r;
        finish();
        return;
      }
      case op::NONE:
        if (none_ == kUnset) none_ = new_node(Kind::none);
        push(none_);
        break;
      case op::NEWTRUE:
      case op::NEWFALSE: {
        Ref& cached = c == op::NEWTRUE ? true_ : false_;
        if (cached == kUnset) cached = new_number(Kind::boolean, c == op::NEWTRUE);
        push(cached);
        break;
      }
      case op::BININT:
        push(new_int(static_cast<int32_t>(static_cast<uint32_t>(le(4, "BININT")))));
        break;
      case op::BININT1: push(new_int(static_cast<int64_t>(le(1, "BININT1")))); break;
      case op::BININT2: push(new_int(static_cast<int64_t>(le(2, "BININT2")))); break;
      case op::LONG1: {
        const uint64_t k = le(1, "LONG1");
        push(new_int(long_bytes(take(k, "LONG1"), k)));
        break;
      }
      case op::LONG4: {
        const auto k = static_cast<int32_t>(static_cast<uint32_t>(le(4, "LONG4")));
        if (k < 0) fail("LONG4 has a negative length");
        push(new_int(long_bytes(take(static_cast<uint64_t>(k), "LONG4"), static_cast<uint64_t>(k))));
        break;
      }
      case op::BINFLOAT: {
        const uint8_t* q = take(8, "BINFLOAT");
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | q[i];  // big-endian
        push(new_number(Kind::floating, bits));
        break;
      }
      case op::SHORT_BINUNICODE: text_op(Kind::str, le(1, "SHORT_BINUNICODE"), true); break;
      case op::BINUNICODE: text_op(Kind::str, le(4, "BINUNICODE"), true); break;
      case op::BINUNICODE8: text_op(Kind::str, le(8, "BINUNICODE8"), true); break;
      case op::SHORT_BINBYTES: text_op(Kind::bytes, le(1, "SHORT_BINBYTES"), false); break;
      case op::BINBYTES: text_op(Kind::bytes, le(4, "BINBYTES"), false); break;
      case op::BINBYTES8: text_op(Kind::bytes, le(8, "BINBYTES8"), false); break;
      case op::BYTEARRAY8: text_op(Kind::bytearray, le(8, "BYTEARRAY8"), false); break;

      case op::EMPTY_TUPLE: push(empty_tuple()); break;
      case op::TUPLE:
      case op::FROZENSET: {
        const size_t at = pop_mark();
        const Ref r = new_seq(c == op::TUPLE ? Kind::tuple : Kind::frozenset, stack_.data() + at, stack_.size() - at);
        stack_.resize(at);
        push(r);
        break;
      }
      case op::TUPLE1:
      case op::TUPLE2:
      case op::TUPLE3: {
        const size_t k = static_cast<size_t>(c - op::TUPLE1) + 1;
        if (stack_.size() < floor() + k) fail("stack underflow");
        const Ref r = new_seq(Kind::tuple, stack_.data() + stack_.size() - k, k);
        stack_.resize(stack_.size() - k);
        push(r);
        break;
      }
      case op::EMPTY_LIST: push(new_container(Kind::list)); break;
      case op::EMPTY_DICT: push(new_container(Kind::dict)); break;
      case op::EMPTY_SET: push(new_container(Kind::set)); break;
      case op::LIST:
      case op::DICT: {
        const size_t at = pop_mark();
        if (c == op::DICT && (stack_.size() - at) % 2) fail("DICT with an odd number of items");
        const Ref r = new_container(c == op::LIST ? Kind::list : Kind::dict);
        extend(r, stack_.data() + at, stack_.size() - at);
        stack_.resize(at);
        push(r);
        break;
      }
      case op::APPEND:
      case op::SETITEM: {
        const size_t k = c == op::APPEND ? 1 : 2;
        if (stack_.size() < floor() + k + 1) fail("stack underflow");
        const Ref target = stack_[stack_.size() - k - 1];
        const Kind want = c == op::APPEND ? Kind::list : Kind::dict;
        if (doc_.kind(target) != want)
          fail(std::string(c == op::APPEND ? "APPEND to a " : "SETITEM on a ") + doc_.type_name(target));
        extend(target, stack_.data() + stack_.size() - k, k);
        stack_.resize(stack_.size() - k);
        break;
      }
      case op::APPENDS:
      case op::SETITEMS:
      case op::ADDITEMS: {
        const size_t at = pop_mark();
        const size_t n = stack_.size() - at;
        if (c == op::SETITEMS && n % 2) fail("SETITEMS with an odd number of items");
        const Ref target = below_mark(at);
        const Kind want = c == op::APPENDS ? Kind::list : c == op::SETITEMS ? Kind::dict : Kind::set;
        if (doc_.kind(target) != want)
          fail(std::string(c == op::APPENDS ? "APPENDS to a " : c == op::SETITEMS ? "SETITEMS on a " : "ADDITEMS to a ") +
               doc_.type_name(target));
        extend(target, stack_.data() + at, n);
        stack_.resize(at);
        break;
      }

      case op::MARK:
        if (marks_.size() >= doc_.limits_.max_depth)
          fail("marks nest deeper than " + std::to_string(doc_.limits_.max_depth) + " levels");
        marks_.push_back(stack_.size());
        floor_ = stack_.size();
        break;
      case op::POP:
        if (stack_.size() > floor())
          stack_.pop_back();
        else
          stack_.resize(pop_mark());
        break;
      case op::POP_MARK: stack_.resize(pop_mark()); break;
      case op::DUP: push(top()); break;

      case op::BINPUT: memo_put(le(1, "BINPUT")); break;
      case op::LONG_BINPUT: memo_put(le(4, "LONG_BINPUT")); break;
      case op::PUT: memo_put(decimal("PUT")); break;
      case op::MEMOIZE: memo_put(memo_count_); break;
      case op::BINGET: memo_get(le(1, "BINGET")); break;
      case op::LONG_BINGET: memo_get(le(4, "LONG_BINGET")); break;
      case op::GET: memo_get(decimal("GET")); break;

      case op::GLOBAL: {
        const std::string module = line("GLOBAL module");
        const std::string name = line("GLOBAL name");
        global(module, name);
        break;
      }
      case op::STACK_GLOBAL: {
        const Ref name = pop();
        const Ref module = pop();
        if (doc_.kind(name) != Kind::str || doc_.kind(module) != Kind::str)
          fail("STACK_GLOBAL needs two str, found " + doc_.type_name(module) + " and " +
               doc_.type_name(name));
        global(doc_.text(module), doc_.text(name));
        break;
      }
      case op::REDUCE: reduce(); break;
      case op::NEWOBJ: newobj(false); break;
      case op::NEWOBJ_EX: newobj(true); break;
      case op::BUILD: {
        const Ref state = pop();
        const Ref obj = top();
        if (doc_.kind(obj) != Kind::object) fail("BUILD on a " + doc_.type_name(obj));
        if (node(obj).has_state) fail("BUILD twice on one " + quoted_name(doc_.text(obj)));
        node(obj).b = state;
        node(obj).has_state = 1;
        break;
      }
      case op::BINPERSID: {
        const Ref pid = pop();
        if (!allow_.persistent_ids())
          fail("persistent id (BINPERSID) is not allowed in a " + std::string(allow_.profile()) + " pickle");
        const Ref r = new_node(Kind::persistent_id);
        node(r).a = pid;
        push(r);
        break;
      }
      case op::NEXT_BUFFER:
      case op::READONLY_BUFFER:
        fail("opcode " + opcode_name(c) + " (out-of-band buffer) is not supported");
      case op::EXT1:
      case op::EXT2:
      case op::EXT4:
        fail("opcode " + opcode_name(c) + " (extension registry) is not supported");
      case op::INT:
      case op::LONG:
      case op::FLOAT:
      case op::STRING:
      case op::UNICODE:
      case op::BINSTRING:
      case op::SHORT_BINSTRING:
      case op::PERSID:
      case op::INST:
      case op::OBJ:
        fail("opcode " + opcode_name(c) + " of protocols 0 and 1 is not supported");
      default:
        fail("unknown opcode " + opcode_name(c));
    }
  }
}

std::optional<Ref> PickleDocument::find(Ref dict, std::string_view key) const {
  if (kind(dict) != Kind::dict) return std::nullopt;
  for (size_t i = size(dict); i-- > 0;) {
    const Ref k = this->key(dict, i);
    if (kind(k) == Kind::str && text(k) == key) return value(dict, i);
  }
  return std::nullopt;
}

std::string PickleDocument::type_name(Ref r) const {
  switch (kind(r)) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::str: return "str";
    case Kind::bytes: return "bytes";
    case Kind::bytearray: return "bytearray";
    case Kind::tuple: return "tuple";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::set: return "set";
    case Kind::frozenset: return "frozenset";
    case Kind::global: return "global " + text(r);
    case Kind::object: return text(r);
    case Kind::persistent_id: return "persistent id";
  }
  return "?";
}

namespace {

class Unfolder {
 public:
  Unfolder(const PickleDocument& doc, const PickleDocument::ObjectHook& hook, uint64_t budget)
      : doc_(doc), hook_(hook), budget_(budget), max_budget_(budget), meter_(doc.budget()) {}

  Value run(Ref r, uint32_t depth) {
    if (depth > doc_.max_depth())
      throw FormatError(doc_.file() + ": pickle value nests deeper than " +
                        std::to_string(doc_.max_depth()) + " levels");
    if (budget_ == 0)
      throw FormatError(doc_.file() + ": pickle value unfolds to more than " +
                        std::to_string(max_budget_) + " values");
    --budget_;
    // Each value's heap: its text, and the array of its items (before it is reserved).
    const Kind k = doc_.kind(r);
    const bool text = k == Kind::str || k == Kind::bytes || k == Kind::bytearray || k == Kind::global || k == Kind::object;
    const uint64_t items = k == Kind::dict ? 2 * doc_.size(r) : k == Kind::object || k == Kind::persistent_id ? 2 : doc_.size(r);
    meter_.charge(heap_bytes(items * sizeof(Value)) + (text ? string_heap_bytes(doc_.text(r).size()) : 0),
                  [] { return std::string("unfolding a value"); });
    switch (k) {
      case Kind::none: return Value();
      case Kind::boolean: return Value::boolean(doc_.as_bool(r));
      case Kind::integer: return Value::integer(doc_.as_int(r));
      case Kind::floating: return Value::floating(doc_.as_float(r));
      case Kind::str: return Value::str(doc_.text(r));
      case Kind::bytes: return Value::bytes(doc_.text(r));
      case Kind::bytearray: return Value::bytearray(doc_.text(r));
      case Kind::tuple:
      case Kind::list:
      case Kind::set:
      case Kind::frozenset: {
        std::vector<Value> items;
        items.reserve(doc_.size(r));
        for (size_t i = 0; i < doc_.size(r); ++i) items.push_back(run(doc_.item(r, i), depth + 1));
        return Value::sequence(k == Kind::tuple  ? Value::Kind::tuple
                               : k == Kind::list ? Value::Kind::list
                               : k == Kind::set  ? Value::Kind::set
                                                 : Value::Kind::frozenset,
                               std::move(items));
      }
      case Kind::dict: {
        std::vector<std::pair<Value, Value>> entries;
        entries.reserve(doc_.size(r));
        for (size_t i = 0; i < doc_.size(r); ++i) {
          Value k = run(doc_.key(r, i), depth + 1);
          entries.emplace_back(std::move(k), run(doc_.value(r, i), depth + 1));
        }
        return Value::dict(std::move(entries));
      }
      case Kind::global: return Value::global(doc_.text(r));
      case Kind::object:
      case Kind::persistent_id: {
        if (hook_)
          if (auto v = hook_(doc_, r)) return std::move(*v);
        if (doc_.kind(r) == Kind::persistent_id)
          return Value::object("persistent_id", run(doc_.persistent_id(r), depth + 1), Value(), false);
        Value args = run(doc_.args(r), depth + 1);
        const auto st = doc_.state(r);
        return Value::object(doc_.text(r), std::move(args), st ? run(*st, depth + 1) : Value(),
                             st.has_value());
      }
    }
    return Value();
  }

 private:
  const PickleDocument& doc_;
  const PickleDocument::ObjectHook& hook_;
  uint64_t budget_;
  uint64_t max_budget_;
  DecodeBudget::Meter meter_;
};

}  // namespace

Value PickleDocument::to_value(Ref r, const ObjectHook& object_hook) const {
  return Unfolder(*this, object_hook, limits_.max_value_nodes).run(r, 0);
}

// The input (`size` bytes, in memory or read through a source) into a document.
template <class Input>
PickleDocument PickleMachine::decode(const std::string& file, size_t size, const Input& input, const AllowList& allow,
                      const PickleLimits& limits) {
  PickleDocument doc;
  doc.file_ = file;
  doc.limits_ = limits;
  doc.budget_ = std::make_shared<DecodeBudget>(file, size);
  if (size > limits.max_bytes)
    throw FormatError(file + ": pickle of " + std::to_string(size) + " bytes is larger than the " +
                      std::to_string(limits.max_bytes) + " accepted");
  // Capacities from DCP metadata (about 1 value and 1.2 pool items per 10 bytes of pickle): reserved
  // address space, faulted in only as it is used.
  doc.nodes_.reserve(std::min<size_t>(size / 8 + 16, limits.max_nodes));
  doc.pool_.reserve(size / 5 + 16);
  prefer_huge_pages(doc.nodes_.data(), doc.nodes_.capacity() * sizeof(PickleDocument::Node));
  prefer_huge_pages(doc.pool_.data(), doc.pool_.capacity() * sizeof(Ref));
  PickleMachine machine(doc, input, size, allow);
  machine.reserve_memo(std::min<size_t>(size / 8 + 16, limits.max_nodes));
  // Large pickles only (a helper thread costs more than the faults of a small one), and only where
  // the run may use a second thread: on one the helper's faults are the decoder's.
  constexpr size_t kPrefaultFrom = size_t{16} << 20;
  Prefaulter prefaulter;
  if (size >= kPrefaultFrom && ThreadPool::global().size() > 1) {
    machine.prefault(prefaulter);
    prefaulter.start();
  }
  machine.run();
  prefaulter.stop();
  return doc;
}

PickleDocument read_pickle(const std::string& file, const uint8_t* data, size_t size, const AllowList& allow,
                           const PickleLimits& limits) {
  return PickleMachine::decode(file, size, data, allow, limits);
}

PickleDocument read_pickle(const std::string& file, size_t size, const PickleSource& source, const AllowList& allow,
                           const PickleLimits& limits) {
  return PickleMachine::decode(file, size, source, allow, limits);
}

}  // namespace fpg::dcp
