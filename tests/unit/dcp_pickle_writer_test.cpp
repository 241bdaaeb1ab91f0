// Pickle protocol 2 writer: byte-exact against CPython's pickle.dumps(obj, protocol=2) for the value
// kinds torch's files hold, CPython's batching of lists and dicts, and round trips through the
// restricted unpickler.
#include <cstring>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "formats/dcp/pickle/allow_list.h"
#include "formats/dcp/pickle/pickle_reader.h"
#include "formats/dcp/pickle/pickle_writer.h"

using namespace fpg;
using namespace fpg::dcp;

namespace {

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (const char c : s) {
    h.push_back(d[static_cast<uint8_t>(c) >> 4]);
    h.push_back(d[static_cast<uint8_t>(c) & 15]);
  }
  return h;
}

std::string pickled(const Value& v) {
  PickleWriter w;
  pickle_value(w, v);
  return w.finish();
}

Value S(const char* s) { return Value::str(s); }
Value I(int64_t v) { return Value::integer(v); }
Value F(double v) { return Value::floating(v); }
Value T(std::vector<Value> v) { return Value::sequence(Value::Kind::tuple, std::move(v)); }
Value L(std::vector<Value> v) { return Value::sequence(Value::Kind::list, std::move(v)); }
Value D(std::vector<std::pair<Value, Value>> e) { return Value::dict(std::move(e)); }

Value decode(const std::string& p) {
  const PickleDocument doc =
      read_pickle("test", reinterpret_cast<const uint8_t*>(p.data()), p.size(), AllowList::torch_save());
  return doc.to_value(doc.root());
}

}  // namespace

TEST_CASE("pickle writer: scalars, strings and bytes equal CPython's protocol 2", "[dcp][pickle_writer]") {
  // Goldens: python3 -c 'import pickle; print(pickle.dumps(VALUE, protocol=2).hex())'
  CHECK(hex(pickled(Value())) == "80024e2e");
  CHECK(hex(pickled(Value::boolean(true))) == "8002882e");
  CHECK(hex(pickled(Value::boolean(false))) == "8002892e");
  CHECK(hex(pickled(L({I(0), I(255), I(256), I(65535), I(65536), I(-1), I(-2147483648LL), I(2147483647),
                       I(2147483648LL), I(-2147483649LL), I(INT64_MAX), I(INT64_MIN)}))) ==
        "80025d7100284b004bff4d00014dffff4a000001004affffffff4a000000804affffff7f8a0500000080008a05ffffff7f"
        "ff8a08ffffffffffffff7f8a080000000000000080652e");
  CHECK(hex(pickled(T({F(1.5), F(-0.0), F(1e-8)}))) ==
        "8002473ff8000000000000478000000000000000473e45798ee2308c3a8771002e");
  CHECK(hex(pickled(S("h\xc3\xa9llo \xe2\x86\x92"))) == "8002580a00000068c3a96c6c6f20e2869271002e");
  CHECK(hex(pickled(Value::bytes(std::string("\x00\xff\x80" "a", 4)))) ==
        "8002635f636f646563730a656e636f64650a7100580600000000c3bfc28061710158060000006c6174696e3171028671"
        "035271042e");
}

TEST_CASE("pickle writer: containers, memo and batching equal CPython's", "[dcp][pickle_writer]") {
  CHECK(hex(pickled(L({T({}), T({I(1)}), T({I(1), I(2)}), T({I(1), I(2), I(3)}), T({I(1), I(2), I(3), I(4)})}))) ==
        "80025d710028294b018571014b014b028671024b014b024b03877103284b014b024b034b04747104652e");
  CHECK(hex(pickled(D({{S("a"), I(1)}, {S("b"), L({I(2), I(3)})}, {S("c"), D({})}}))) ==
        "80027d71002858010000006171014b0158010000006271025d7103284b024b036558010000006371047d7105752e");
  // A lone item is APPEND / SETITEM, not MARK ... APPENDS.
  CHECK(hex(pickled(L({D({{S("k"), Value()}})}))) == "80025d71007d710158010000006b71024e73612e");
  // CPython interns dict keys: a repeated key is a BINGET of its first memo entry.
  CHECK(hex(pickled(L({D({{S("lr"), F(1.0)}, {S("wd"), I(0)}}), D({{S("lr"), F(2.0)}, {S("wd"), I(1)}})}))) ==
        "80025d7100287d71012858020000006c727102473ff00000000000005802000000776471034b00757d710428680247400000"
        "000000000068034b0175652e");
  CHECK(hex(pickled(Value::bytearray(std::string("a\xff", 2)))) ==
        "8002635f5f6275696c74696e5f5f0a6279746561727261790a7100635f636f646563730a656e636f64650a7101580300000061"
        "c3bf710258060000006c6174696e3171038671045271058571065271072e");
  CHECK(hex(pickled(Value::bytearray(""))) == "8002635f5f6275696c74696e5f5f0a6279746561727261790a7100295271012e");
  CHECK(hex(pickled(Value::sequence(Value::Kind::set, {I(3)}))) ==
        "8002635f5f6275696c74696e5f5f0a7365740a71005d71014b03618571025271032e");

  // 1001 items: MARK, 1000 items, APPENDS, then the last one alone with APPEND (pickle._BATCHSIZE).
  const std::string p = pickled(L(std::vector<Value>(1001, Value())));
  const std::string want = std::string("\x80\x02]q\0(", 6) + std::string(1000, 'N') + "eNa.";
  CHECK(p == want);
  std::vector<std::pair<Value, Value>> entries;
  for (int k = 0; k < 2001; ++k) entries.emplace_back(I(k), Value());
  const Value big = D(entries);
  CHECK(decode(pickled(big)).repr(1 << 20) == big.repr(1 << 20));
}

TEST_CASE("pickle writer: the empty bytes object loads under weights_only", "[dcp][pickle_writer]") {
  // CPython writes __builtin__.bytes() (torch's weights_only unpickler refuses it); ours is
  // _codecs.encode('', 'latin1'), which every unpickler decodes to b''.
  const std::string p = pickled(Value::bytes(""));
  CHECK(p.find("_codecs\nencode\n") != std::string::npos);
  CHECK(p.find("bytes\n") == std::string::npos);
  const Value v = decode(p);
  REQUIRE(v.is(Value::Kind::bytes));
  CHECK(v.as_str().empty());
}

TEST_CASE("pickle writer: values round-trip through the restricted unpickler", "[dcp][pickle_writer]") {
  std::string all_bytes;
  for (int c = 0; c < 256; ++c) all_bytes.push_back(static_cast<char>(c));
  const Value v = L({
      D({{S("param_groups"), L({D({{S("lr"), F(0.001)}, {S("betas"), T({F(0.9), F(0.95)})}, {S("min_lr"), Value()}})})},
         {T({Value::global("torch.bfloat16"), Value::global("torch.float32")}), L({I(24576)})},
         {I(-7), Value::bytes(all_bytes)},
         {S("fs"), Value::sequence(Value::Kind::frozenset, {I(1)})}}),
      T({I(1), I(2), I(3), I(4), I(5)}),
      Value::object("torch.Size", T({T({I(64), I(32)})}), Value(), false),
  });
  CHECK(decode(pickled(v)).repr(1 << 20) == v.repr(1 << 20));
}

TEST_CASE("pickle writer: refusals", "[dcp][pickle_writer]") {
  auto t = std::make_shared<TensorValue>();
  t->torch_dtype = "float32";
  t->data.resize(4);
  PickleWriter w;
  CHECK_THROWS_AS(pickle_value(w, L({Value::tensor(t)})), UsageError);

  Value deep = Value();
  for (int i = 0; i < 40; ++i) deep = L({deep});
  PickleWriter w2;
  CHECK_THROWS_AS(pickle_value(w2, deep, {}, 16), UsageError);
  PickleWriter w3;
  CHECK_THROWS_AS(pickle_value(w3, Value::global("nodot")), UsageError);

  PickleWriter w4;
  w4.begin_list(2);
  w4.item();
  w4.none();
  CHECK_THROWS_AS(w4.end(), InternalError);  // fewer items than declared
}

TEST_CASE("pickle reader: a pickle large enough for the prefaulting helper keeps every value and limit",
          "[dcp][pickle_writer]") {
  // 1.2M memoized pairs, about 19 MB: past the size from which the node, pool and memo arrays are
  // faulted in on a helper thread, and large enough that the memo and pool grow while it runs.
  constexpr int64_t kPairs = 1200000;
  PickleWriter w;
  w.begin_list(kPairs + 1);
  for (int64_t i = 0; i < kPairs; ++i) {
    w.item();
    w.begin_tuple(2);
    w.integer(i * 1000003);
    w.integer(-i);
    w.end_tuple(2);
  }
  w.item();
  w.get(5);  // a memo reference to an early tuple
  w.end();
  const std::string p = w.finish();
  REQUIRE(p.size() > (size_t{16} << 20));
  const auto* data = reinterpret_cast<const uint8_t*>(p.data());
  const PickleDocument doc = read_pickle("big", data, p.size(), AllowList::torch_save());
  using K = PickleDocument::Kind;
  const auto root = doc.root();
  REQUIRE(doc.kind(root) == K::list);
  REQUIRE(doc.size(root) == static_cast<size_t>(kPairs + 1));
  for (int64_t i = 0; i < kPairs; i += 9973) {
    const auto t = doc.item(root, static_cast<size_t>(i));
    REQUIRE(doc.kind(t) == K::tuple);
    CHECK(doc.as_int(doc.item(t, 0)) == i * 1000003);
    CHECK(doc.as_int(doc.item(t, 1)) == -i);
  }
  const auto last = doc.item(root, static_cast<size_t>(kPairs));
  REQUIRE(doc.kind(last) == K::tuple);
  CHECK(doc.as_int(doc.item(last, 1)) == doc.as_int(doc.item(doc.item(root, 4), 1)));

  PickleLimits small;
  small.max_nodes = 1u << 20;
  try {
    read_pickle("big", data, p.size(), AllowList::torch_save(), small);
    FAIL("decoded past the node limit");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()).find("holds more than 1048576 values") != std::string::npos);
  }
}

TEST_CASE("pickle reader: a pickle read through a source in a window decodes as the whole of it in memory",
          "[dcp][pickle_writer]") {
  // About 3 MB: a few windows, strings that cross their edges, one longer than a window, memo
  // references back into earlier ones.
  PickleWriter w;
  constexpr int kItems = 60000;
  w.begin_list(kItems + 2);
  for (int i = 0; i < kItems; ++i) {
    w.item();
    w.begin_tuple(2);
    w.str("key." + std::to_string(i) + std::string(static_cast<size_t>(i % 37), 'x'));
    w.integer(int64_t{i} * 40503 - 7);
    w.end_tuple(2);
  }
  w.item();
  w.str(std::string((size_t{3} << 20) / 2, 'L'));  // longer than the window
  w.item();
  w.get(3);
  w.end();
  const std::string p = w.finish();
  REQUIRE(p.size() > (size_t{3} << 20));
  const auto* data = reinterpret_cast<const uint8_t*>(p.data());
  size_t reads = 0;
  const PickleSource source = [&](uint64_t offset, uint8_t* dst, size_t n) {
    REQUIRE(offset + n <= p.size());
    std::memcpy(dst, data + offset, n);
    ++reads;
  };
  const PickleDocument whole = read_pickle("p", data, p.size(), AllowList::torch_save());
  const PickleDocument streamed = read_pickle("p", p.size(), source, AllowList::torch_save());
  CHECK(reads > 3);
  CHECK(streamed.to_value(streamed.root()).repr(SIZE_MAX) == whole.to_value(whole.root()).repr(SIZE_MAX));
  // An error names the same byte either way, past the first window included.
  for (const size_t at : {size_t{5}, size_t{1} << 20, p.size() - 2}) {
    std::string bad = p;
    bad[at] = '\xff';
    const auto* b = reinterpret_cast<const uint8_t*>(bad.data());
    const PickleSource bad_source = [&](uint64_t offset, uint8_t* dst, size_t n) { std::memcpy(dst, b + offset, n); };
    std::string in_memory, from_source;
    try {
      read_pickle("p", b, bad.size(), AllowList::torch_save());
    } catch (const FormatError& e) {
      in_memory = e.what();
    }
    try {
      read_pickle("p", bad.size(), bad_source, AllowList::torch_save());
    } catch (const FormatError& e) {
      from_source = e.what();
    }
    INFO("corrupt byte at " << at);
    CHECK(!in_memory.empty());
    CHECK(from_source == in_memory);
  }
  // Cut short: the same refusal as the truncated bytes in memory.
  const size_t cut = (size_t{1} << 20) + 17;
  std::string in_memory;
  try {
    read_pickle("p", data, cut, AllowList::torch_save());
  } catch (const FormatError& e) {
    in_memory = e.what();
  }
  CHECK_THROWS_WITH(read_pickle("p", cut, source, AllowList::torch_save()), in_memory);
}
