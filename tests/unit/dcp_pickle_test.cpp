// The restricted unpickler: each opcode Python's pickler emits for protocols 2-5, the allow-list, and
// hostile pickles (truncated, bad memo, huge lengths, deep nesting, cycles, forbidden globals).
#include <random>

#include "catch.h"
#include "core/error.h"
#include "dcp_test_util.h"
#include "formats/dcp/pickle/pickle_reader.h"

using namespace fpg;
using namespace fpg::dcp;
using namespace fpg::dcptest;

namespace {

std::string error_of(const std::string& b, const AllowList& allow = AllowList::dcp_metadata(),
                     const PickleLimits& limits = {}) {
  return format_error([&] {
    const auto doc = decode(b, allow, limits);
    doc.to_value(doc.root());
  });
}

}  // namespace

TEST_CASE("pickle: integers of every width", "[dcp][pickle]") {
  CHECK(decode_value(Pickle().proto().int1(200).stop().bytes()).as_int() == 200);
  CHECK(decode_value(Pickle().proto().raw("M").le(65535, 2).stop().bytes()).as_int() == 65535);
  CHECK(decode_value(Pickle().proto().raw("J").le(0xFFFFFFFE, 4).stop().bytes()).as_int() == -2);
  // LONG1: two's complement, little-endian, minimal length.
  CHECK(decode_value(Pickle().proto().raw("\x8a").byte(0).stop().bytes()).as_int() == 0);
  CHECK(decode_value(Pickle().proto().raw("\x8a").byte(5).le(uint64_t{1} << 32, 5).stop().bytes()).as_int() ==
        int64_t{1} << 32);
  CHECK(decode_value(Pickle().proto().raw("\x8a").byte(1).byte(0xff).stop().bytes()).as_int() == -1);
  CHECK(decode_value(Pickle().proto().raw("\x8a").byte(8).le(uint64_t{1} << 63, 8).stop().bytes()).as_int() ==
        INT64_MIN);
  // Nine bytes that are only sign extension still fit.
  CHECK(decode_value(Pickle().proto().raw("\x8a").byte(9).le(~uint64_t{0}, 8).byte(0xff).stop().bytes()).as_int() ==
        -1);
  CHECK(decode_value(Pickle().proto().raw("\x8b").le(2, 4).le(0x0100, 2).stop().bytes()).as_int() == 256);
  CHECK(contains(error_of(Pickle().proto().raw("\x8a").byte(9).le(0, 8).byte(1).stop().bytes()),
                 "integer beyond 64 bits"));
  CHECK(contains(error_of(Pickle().proto().raw("\x8a").byte(9).le(uint64_t{1} << 63, 8).byte(0).stop().bytes()),
                 "integer beyond 64 bits"));
  CHECK(contains(error_of(Pickle().proto().raw("\x8b").le(0xFFFFFFFF, 4).stop().bytes()), "negative length"));
}

TEST_CASE("pickle: floats, strings, bytes, constants", "[dcp][pickle]") {
  CHECK(decode_value(Pickle().proto().raw("G").raw(std::string("\x3f\xf8\0\0\0\0\0\0", 8)).stop().bytes()).as_float() ==
        1.5);
  CHECK(decode_value(Pickle().proto().str("héllo").stop().bytes()).as_str() == "héllo");
  CHECK(decode_value(Pickle().proto().binunicode("abc").stop().bytes()).as_str() == "abc");
  CHECK(decode_value(Pickle().proto().raw("\x8d").le(2, 8).raw("xy").stop().bytes()).as_str() == "xy");
  const Value b1 = decode_value(Pickle().proto().raw("C").byte(3).raw(std::string("a\0b", 3)).stop().bytes());
  CHECK(b1.kind() == Value::Kind::bytes);
  CHECK(b1.as_str() == std::string("a\0b", 3));
  CHECK(decode_value(Pickle().proto().raw("B").le(1, 4).raw("z").stop().bytes()).as_str() == "z");
  CHECK(decode_value(Pickle().proto().raw("\x8e").le(1, 8).raw("q").stop().bytes()).repr() == "b'q'");
  CHECK(decode_value(Pickle().proto(5).raw("\x96").le(2, 8).raw("hi").stop().bytes()).repr() == "bytearray(b'hi')");
  CHECK(decode_value(Pickle().proto().raw("N").stop().bytes()).is_none());
  CHECK(decode_value(Pickle().proto().raw("\x88").stop().bytes()).as_bool());
  CHECK_FALSE(decode_value(Pickle().proto().raw("\x89").stop().bytes()).as_bool());
  CHECK(contains(error_of(Pickle().proto().str("\xff\xfe").stop().bytes()), "not valid UTF-8"));
  CHECK(contains(error_of(Pickle().proto().str("\xc0\xaf").stop().bytes()), "not valid UTF-8"));  // overlong '/'
  // Lone surrogates pass, as Python's surrogatepass decoder lets them.
  CHECK(decode_value(Pickle().proto().str("\xed\xa0\x80").stop().bytes()).as_str() == "\xed\xa0\x80");
}

TEST_CASE("pickle: tuples, lists, dicts, sets and marks", "[dcp][pickle]") {
  CHECK(decode_value(Pickle().proto().raw(")").stop().bytes()).repr() == "()");
  CHECK(decode_value(Pickle().proto().int1(1).raw("\x85").stop().bytes()).repr() == "(1,)");
  CHECK(decode_value(Pickle().proto().int1(1).int1(2).raw("\x86").stop().bytes()).repr() == "(1, 2)");
  CHECK(decode_value(Pickle().proto().int1(1).int1(2).int1(3).raw("\x87").stop().bytes()).repr() == "(1, 2, 3)");
  CHECK(decode_value(Pickle().proto().raw("(").int1(1).int1(2).int1(3).int1(4).raw("t").stop().bytes()).repr() ==
        "(1, 2, 3, 4)");
  CHECK(decode_value(Pickle().proto().raw("]").int1(1).raw("a").raw("(").int1(2).int1(3).raw("e").stop().bytes())
            .repr() == "[1, 2, 3]");
  CHECK(decode_value(Pickle().proto().raw("(").int1(7).raw("l").stop().bytes()).repr() == "[7]");
  const Value d = decode_value(
      Pickle().proto().raw("}").str("a").int1(1).raw("s").raw("(").str("b").raw("N").str("a").int1(2).raw("u").stop().bytes());
  CHECK(d.repr() == "{'a': 1, 'b': None, 'a': 2}");
  REQUIRE(d.find("a"));
  CHECK(d.find("a")->as_int() == 2);  // the last, as Python's dict keeps it
  CHECK(d.find("zz") == nullptr);
  CHECK(decode_value(Pickle().proto().raw("(").str("k").int1(5).raw("d").stop().bytes()).repr() == "{'k': 5}");
  CHECK(decode_value(Pickle().proto().raw("\x8f").raw("(").int1(1).int1(2).raw("\x90").stop().bytes()).repr() ==
        "{1, 2}");
  CHECK(decode_value(Pickle().proto().raw("(").int1(3).raw("\x91").stop().bytes()).repr() == "frozenset({3})");
  CHECK(decode_value(Pickle().proto().raw("\x8f").stop().bytes()).repr() == "set()");
  // POP, POP_MARK, DUP.
  CHECK(decode_value(Pickle().proto().int1(1).int1(2).raw("0").stop().bytes()).as_int() == 1);
  CHECK(decode_value(Pickle().proto().int1(1).raw("(").int1(2).int1(3).raw("1").stop().bytes()).as_int() == 1);
  CHECK(decode_value(Pickle().proto().int1(4).raw("2").raw("\x86").stop().bytes()).repr() == "(4, 4)");
  CHECK(contains(error_of(Pickle().proto().raw("(").int1(1).raw("d").stop().bytes()), "odd number"));
  CHECK(contains(error_of(Pickle().proto().int1(1).int1(2).raw("a").stop().bytes()), "APPEND to a int"));
  CHECK(contains(error_of(Pickle().proto().raw("]").str("k").int1(1).raw("s").stop().bytes()), "SETITEM on a list"));
}

TEST_CASE("pickle: memo and frames", "[dcp][pickle]") {
  // MEMOIZE numbers entries in order; BINGET, LONG_BINGET and GET read them back, shared.
  CHECK(decode_value(Pickle().proto().raw("(").str("x").raw("\x94").str("y").raw("\x94").raw("h").byte(0).raw("j").le(1, 4)
                         .raw("t").stop().bytes())
            .repr() == "('x', 'y', 'x', 'y')");
  CHECK(decode_value(Pickle().proto(2).int1(9).raw("q").byte(3).raw("r").le(1000, 4).raw("0").raw("h").byte(3)
                         .raw("j").le(1000, 4).raw("\x86").stop().bytes())
            .repr() == "(9, 9)");
  CHECK(decode_value(Pickle().proto(2).int1(5).raw("p12\n").raw("g12\n").raw("\x86").stop().bytes()).repr() == "(5, 5)");
  const std::string framed = Pickle().proto().raw("\x95").le(4, 8).int1(1).raw("\x85").stop().bytes();
  CHECK(decode_value(framed).repr() == "(1,)");
  CHECK(contains(error_of(Pickle().proto().raw("h").byte(5).stop().bytes()), "memo index 5 is not set"));
  CHECK(contains(error_of(Pickle().proto().int1(1).raw("r").le(0xFFFFFF00, 4).stop().bytes()), "memo index"));
  CHECK(contains(error_of(Pickle().proto().raw("\x95").le(uint64_t{1} << 60, 8).stop().bytes()), "FRAME of"));
  CHECK(contains(error_of(Pickle().proto().int1(1).raw("pxx\n").stop().bytes()), "not a memo index"));
}

TEST_CASE("pickle: allow-listed globals are built as data, never called", "[dcp][pickle]") {
  // Protocol 2's bytes, set, frozenset, bytearray and empty bytes.
  const Value enc = decode_value(Pickle().proto(2).global("_codecs", "encode").binunicode("a\xc3\xbf").binunicode("latin1")
                                     .raw("\x86R").stop().bytes(),
                                 AllowList::torch_save());
  CHECK(enc.kind() == Value::Kind::bytes);
  CHECK(enc.as_str() == "a\xff");
  CHECK(decode_value(Pickle().proto(2).global("__builtin__", "set").raw("]").raw("(").int1(1).int1(2).raw("e")
                         .raw("\x85R").stop().bytes())
            .repr() == "{1, 2}");
  CHECK(decode_value(Pickle().proto(2).global("__builtin__", "frozenset").raw("]").raw("\x85R").stop().bytes()).repr() ==
        "frozenset()");
  CHECK(decode_value(Pickle().proto(2).global("__builtin__", "bytes").raw(")R").stop().bytes()).repr() == "b''");
  CHECK(decode_value(Pickle().proto(2).global("__builtin__", "bytearray").global("_codecs", "encode").binunicode("z")
                         .binunicode("latin1").raw("\x86R\x85R").stop().bytes())
            .repr() == "bytearray(b'z')");
  // OrderedDict() then SETITEMS is a dict.
  CHECK(decode_value(Pickle().proto(2).global("collections", "OrderedDict").raw(")R").raw("(").str("a").int1(1).raw("u")
                         .stop().bytes())
            .repr() == "{'a': 1}");
  // Constants and classes.
  const Value dt = decode_value(Pickle().proto().stack_global("torch", "bfloat16").stop().bytes());
  CHECK(dt.kind() == Value::Kind::global);
  CHECK(dt.name() == "torch.bfloat16");
  const Value layout = decode_value(
      Pickle().proto().stack_global("torch.serialization", "_get_layout").str("torch.strided").raw("\x85R").stop().bytes());
  CHECK(layout.kind() == Value::Kind::global);
  CHECK(layout.name() == "torch.strided");
  const Value size = decode_value(
      Pickle().proto().stack_global("torch", "Size").int1(2).int1(3).raw("\x86\x85R").stop().bytes());
  CHECK(size.kind() == Value::Kind::object);
  CHECK(size.repr() == "torch.Size([2, 3])");
  const Value obj = decode_value(Pickle().proto().stack_global("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata")
                                     .raw(")\x81").raw("}").str("offsets").int1(0).raw("sb").stop().bytes());
  CHECK(obj.name() == "torch.distributed.checkpoint.metadata.ChunkStorageMetadata");
  CHECK(obj.has_state());
  CHECK(obj.state().find("offsets")->as_int() == 0);
  const Value ex = decode_value(Pickle().proto().stack_global("torch.distributed.checkpoint.metadata", "StorageMeta")
                                    .raw(")}\x92").stop().bytes());
  CHECK(ex.name() == "torch.distributed.checkpoint.metadata.StorageMeta");
  CHECK_FALSE(ex.has_state());

  CHECK(contains(error_of(Pickle().proto().stack_global("torch.distributed.checkpoint.metadata", "StorageMeta")
                              .raw(")}").str("k").int1(1).raw("s\x92").stop().bytes()),
                 "keyword arguments"));
  CHECK(contains(error_of(Pickle().proto().stack_global("torch", "float32").raw(")R").stop().bytes()),
                 "'torch.float32', which is not callable"));
  CHECK(contains(error_of(Pickle().proto().stack_global("collections", "OrderedDict").raw(")\x81").stop().bytes()),
                 "NEWOBJ of a global collections.OrderedDict"));
  CHECK(contains(error_of(Pickle().proto().int1(1).raw(")R").stop().bytes()), "REDUCE calls a int"));
  CHECK(contains(error_of(Pickle().proto().stack_global("torch", "Size").int1(1).raw("R").stop().bytes()),
                 "not a tuple"));
  CHECK(contains(error_of(Pickle().proto(2).global("_codecs", "encode").binunicode("\xe2\x82\xac").binunicode("latin1")
                              .raw("\x86R").stop().bytes(),
                          AllowList::torch_save()),
                 "beyond latin-1"));
  CHECK(contains(error_of(Pickle().proto().stack_global("torch.serialization", "_get_layout").str("os.system")
                              .raw("\x85R").stop().bytes()),
                 "unknown layout"));
  CHECK(contains(error_of(Pickle().proto().int1(1).raw("b").stop().bytes()), "stack underflow"));
  CHECK(contains(error_of(Pickle().proto().int1(1).raw("}b").stop().bytes()), "BUILD on a int"));
}

TEST_CASE("pickle: every global outside the allow-list is refused by name", "[dcp][pickle]") {
  CHECK(error_of(Pickle().proto().stack_global("os", "system").str("true").raw("\x85R").stop().bytes()) ==
        "test.pkl: pickle global 'os.system' is not allowed (at byte 14)");
  CHECK(contains(error_of(Pickle().proto(2).global("__builtin__", "eval").stop().bytes()),
                 "global '__builtin__.eval' is not allowed"));
  CHECK(contains(error_of(Pickle().proto().global("builtins", "getattr").stop().bytes()),
                 "global 'builtins.getattr' is not allowed"));
  CHECK(contains(error_of(Pickle().proto().stack_global("subprocess", "Popen").stop().bytes()),
                 "global 'subprocess.Popen' is not allowed"));
  CHECK(contains(error_of(Pickle().proto().stack_global("posix", "system").stop().bytes()),
                 "global 'posix.system' is not allowed"));
  CHECK(contains(error_of(Pickle().proto().stack_global("torch", "load").stop().bytes()),
                 "global 'torch.load' is not allowed"));
  // Each profile admits only its own classes.
  CHECK(contains(error_of(Pickle().proto().stack_global("torch._utils", "_rebuild_tensor_v2").stop().bytes()),
                 "'torch._utils._rebuild_tensor_v2' is not allowed"));
  CHECK(contains(error_of(Pickle().proto().stack_global("torch.distributed.checkpoint.metadata", "Metadata").stop().bytes(),
                          AllowList::torch_save()),
                 "is not allowed"));
  CHECK(contains(error_of(Pickle().proto().stack_global("numpy", "dtype").stop().bytes()), "is not allowed"));
  CHECK(contains(error_of(Pickle().proto().raw("(").str("storage").raw("tQ").stop().bytes()),
                 "persistent id (BINPERSID) is not allowed in a DCP .metadata pickle"));
  // A name that is not text cannot smuggle control bytes into the message.
  CHECK(contains(error_of(Pickle().proto().stack_global("os\x1b[2J", "x").stop().bytes()), "\\x1b"));
  CHECK(contains(error_of(Pickle().proto().int1(1).int1(2).raw("\x93").stop().bytes()), "STACK_GLOBAL needs two str"));
}

TEST_CASE("pickle: protocols and opcodes outside 2-5 are refused", "[dcp][pickle]") {
  CHECK(contains(error_of("N."), "protocols 0 and 1 are not supported"));
  CHECK(contains(error_of(Pickle().proto(6).raw("N").stop().bytes()), "protocol 6 is not supported"));
  CHECK(contains(error_of(Pickle().proto(1).raw("N").stop().bytes()), "protocol 1 is not supported"));
  CHECK(contains(error_of(Pickle().proto(5).raw("\x97").stop().bytes()), "out-of-band buffer"));
  CHECK(contains(error_of(Pickle().proto(5).raw("\x98").stop().bytes()), "out-of-band buffer"));
  CHECK(contains(error_of(Pickle().proto().raw("\x82").byte(1).stop().bytes()), "extension registry"));
  CHECK(contains(error_of(Pickle().proto().raw("I1\n").stop().bytes()), "protocols 0 and 1"));
  CHECK(contains(error_of(Pickle().proto().raw("S'a'\n").stop().bytes()), "protocols 0 and 1"));
  CHECK(contains(error_of(Pickle().proto().raw("\xff").stop().bytes()), "unknown opcode 0xff"));
  CHECK(contains(error_of(Pickle().proto().int1(1).int1(2).stop().bytes()), "STOP leaves 1 values"));
  CHECK(contains(error_of(Pickle().proto().int1(1).stop().raw("junk").bytes()), "followed by 4 more bytes"));
  CHECK(contains(error_of(Pickle().proto().stop().bytes()), "stack underflow"));
  CHECK(contains(error_of(Pickle().proto().raw("t").stop().bytes()), "needs a MARK"));
  CHECK(contains(error_of(Pickle().proto().raw("(").raw("\x85").stop().bytes()), "stack underflow"));
  CHECK(contains(error_of(""), "ends without STOP"));
  CHECK(contains(error_of(Pickle().proto().int1(1).bytes()), "ends without STOP"));
}

TEST_CASE("pickle: huge declared lengths fail before any allocation", "[dcp][pickle]") {
  CHECK(contains(error_of(Pickle().proto().raw("\x8d").le(uint64_t{1} << 62, 8).raw("ab").stop().bytes()),
                 "str of 4611686018427387904 bytes runs past the end"));
  CHECK(contains(error_of(Pickle().proto().raw("\x8e").le(~uint64_t{0}, 8).stop().bytes()), "runs past the end"));
  CHECK(contains(error_of(Pickle().proto().raw("B").le(0xFFFFFFFF, 4).stop().bytes()), "runs past the end"));
  CHECK(contains(error_of(Pickle().proto().raw("X").le(5, 4).raw("ab").bytes()), "runs past the end (2 left)"));
  CHECK(contains(error_of(Pickle().proto().raw("\x8b").le(0x7FFFFFFF, 4).stop().bytes()), "runs past the end"));
}

TEST_CASE("pickle: nesting, cycles and sharing are bounded", "[dcp][pickle]") {
  // Marks deeper than the limit.
  std::string marks = Pickle().proto().bytes();
  for (int i = 0; i < 300; ++i) marks += "(";
  CHECK(contains(error_of(marks + "N."), "marks nest deeper than 256 levels"));
  // A list nested 1000 deep decodes (the document is flat) but cannot be unfolded.
  Pickle deep;
  deep.proto();
  for (int i = 0; i < 1000; ++i) deep.raw("]");
  for (int i = 0; i < 999; ++i) deep.raw("a");
  CHECK(contains(error_of(deep.stop().bytes()), "nests deeper than 256 levels"));
  // A list that contains itself.
  CHECK(contains(error_of(Pickle().proto().raw("]\x94h").byte(0).raw("a").stop().bytes()), "nests deeper"));
  // Sharing that unfolds exponentially: x0 = [], x(k+1) = [xk, xk], 60 levels.
  Pickle laughs;
  laughs.proto().raw("]");
  for (int i = 0; i < 60; ++i) laughs.raw("2\x86");
  PickleLimits small;
  small.max_value_nodes = 100000;
  CHECK(contains(error_of(laughs.stop().bytes(), AllowList::dcp_metadata(), small), "unfolds to more than 100000 values"));
  // The node limit.
  Pickle many;
  many.proto().raw("(");
  for (int i = 0; i < 50; ++i) many.raw("N]");
  PickleLimits few;
  few.max_nodes = 20;
  CHECK(contains(error_of(many.raw("l").stop().bytes(), AllowList::dcp_metadata(), few), "holds more than 20 values"));
  // Two lists grown in turn, one item at a time: each item is a piece of its list, and the pieces are
  // bounded like the values; under the bound both lists come out whole and in order.
  auto in_turns = [](bool numbered) {
    Pickle p;
    p.proto().raw("]\x94]\x94");
    for (int i = 0; i < 30; ++i) {
      p.raw("h").byte(0).raw(numbered ? "" : "N");
      if (numbered) p.int1(i);
      p.raw("a0h").byte(1).raw(numbered ? "" : "N");
      if (numbered) p.int1(100 + i);
      p.raw("a0");
    }
    return p.raw("\x86").stop().bytes();
  };
  CHECK(contains(error_of(in_turns(false), AllowList::dcp_metadata(), few), "grows its containers in more than 20 pieces"));
  const auto doc = decode(in_turns(true));
  const Value both = doc.to_value(doc.root());
  REQUIRE(both.items().size() == 2);
  for (int l = 0; l < 2; ++l) {
    REQUIRE(both.items()[l].items().size() == 30);
    for (int i = 0; i < 30; ++i) CHECK(both.items()[l].items()[i].as_int() == 100 * l + i);
  }
}

TEST_CASE("pickle: every truncation and random corruption of a real .metadata fails cleanly",
          "[dcp][pickle][hostile]") {
  const auto bytes = sttest::read_bytes(fixture("small/.metadata"));
  REQUIRE(bytes.size() > 1000);
  const std::string whole(bytes.begin(), bytes.end());
  CHECK_NOTHROW(decode(whole));
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string msg = error_of(whole.substr(0, n));
    INFO("prefix of " << n << " bytes: " << msg);
    CHECK(contains(msg, "test.pkl: pickle "));
  }
  std::mt19937 rng(15);
  PickleLimits limits;
  limits.max_value_nodes = 100000;
  for (int i = 0; i < 3000; ++i) {
    std::string b = whole;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    try {
      const auto doc = decode(b, AllowList::dcp_metadata(), limits);
      doc.to_value(doc.root());
    } catch (const FormatError&) {
    }
  }
}
