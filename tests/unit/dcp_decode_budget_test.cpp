// The memory budget of decoding a pickle (formats/dcp/pickle/decode_budget.h): values shared through
// the memo are charged each time they are copied or unfolded, so that a small pickle cannot claim
// more than its size allows; tensor items may not view more elements than their storage holds; and
// per-chunk problems are listed with a cap (ckpt/capped_problems.h).
#include <string>
#include <vector>

#include "catch.h"
#include "ckpt/capped_problems.h"
#include "core/error.h"
#include "dcp_test_util.h"
#include "formats/dcp/byte_source.h"
#include "formats/dcp/pickle/decode_budget.h"
#include "formats/dcp/pickle/pickle_reader.h"
#include "formats/dcp/torch_save/torch_save.h"

using namespace fpg;
using namespace fpg::dcp;
using namespace fpg::dcptest;

namespace {

constexpr const char* kRefused = "decoding takes more than the";

std::string error_of(const std::string& b, const AllowList& allow = AllowList::dcp_metadata()) {
  return format_error([&] {
    const auto doc = decode(b, allow);
    doc.to_value(doc.root());
  });
}

// A list of `n` None, memoized as entry 0, then `apply` REDUCE(builtins.<fn>, (memo 0,)) `times`
// times, all in one list: the shape of set(items) as protocol 2 writes it, with the items shared.
std::string applied_to_shared_list(const char* fn, int n, int times) {
  Pickle p;
  p.proto().raw("]\x94(");
  for (int i = 0; i < n; ++i) p.raw("N");
  p.raw("e").global("builtins", fn).raw("\x94").raw("0").raw("]");  // memo 1: the global (popped); the outer list
  for (int i = 0; i < times; ++i) p.raw("h").byte(1).raw("h").byte(0).raw("\x85R").raw("a");
  return p.raw("\x86").stop().bytes();
}

}  // namespace

TEST_CASE("decode budget: the limit follows the input's size, and a refusal names file and place",
          "[dcp][budget]") {
  DecodeBudget b("x/.metadata", 900);
  CHECK(b.limit() == DecodeBudget::kBase + 900 * DecodeBudget::kPerInputByte);
  CHECK(b.add(b.limit()));
  CHECK_FALSE(b.add(1));
  const std::string msg = format_error([&] { b.exceeded("state_dict_metadata['w'].chunks"); });
  CHECK(contains(msg, "x/.metadata: state_dict_metadata['w'].chunks: decoding takes more than the 67.12 MB"));
  CHECK(contains(msg, "a pickle of 900 B"));
  // A meter publishes in steps, and at once for a single charge as large as the limit.
  DecodeBudget c("y", 0);
  {
    DecodeBudget::Meter m(c);
    m.charge(DecodeBudget::kStep - 1, [] { return std::string("here"); });
    CHECK(c.used() == 0);
    m.charge(1, [] { return std::string("here"); });
    CHECK(c.used() == DecodeBudget::kStep);
    m.charge(5, [] { return std::string("here"); });
  }
  CHECK(c.used() == DecodeBudget::kStep + 5);  // the rest when the meter ends
  DecodeBudget::Meter m(c);
  CHECK(contains(format_error([&] { m.charge(c.limit(), [] { return std::string("the big one"); }); }),
                 "y: the big one: decoding takes more than"));
}

TEST_CASE("decode budget: set and frozenset of a memoized list are charged each time", "[dcp][budget]") {
  // One copy of 2^16 items is what a real protocol 2 set costs: decoded.
  for (const char* fn : {"set", "frozenset"}) {
    INFO(fn);
    const auto doc = decode(applied_to_shared_list(fn, 1 << 16, 1));
    CHECK(doc.to_value(doc.root()).items()[1].items()[0].items().size() == 1u << 16);
    // 2^12 copies of it are 2^28 items (1 GiB of indices) from a pickle of 90 kB: refused while
    // decoding, at the opcode.
    const std::string msg = error_of(applied_to_shared_list(fn, 1 << 16, 1 << 12));
    CHECK(contains(msg, "test.pkl: pickle at byte "));
    CHECK(contains(msg, kRefused));
  }
}

TEST_CASE("decode budget: bytearray copies of one memoized bytes value are charged", "[dcp][budget]") {
  const std::string big(1 << 20, 'a');
  Pickle p;
  p.proto().raw("B").le(big.size(), 4).raw(big).raw("\x94").global("builtins", "bytearray").raw("\x94").raw("0]");
  for (int i = 0; i < 200; ++i) p.raw("h").byte(1).raw("h").byte(0).raw("\x85R").raw("a");
  const std::string msg = error_of(p.raw("\x86").stop().bytes());
  CHECK(contains(msg, "test.pkl: pickle at byte "));
  CHECK(contains(msg, kRefused));
}

TEST_CASE("decode budget: unfolding a shared list charges every copy", "[dcp][budget]") {
  // [L, L, ..., L] with L a list of 1000 None: 10^4 references are 10^7 values (1.2 GB), fewer than
  // the value count limit would stop only at 8 Mi values; the budget stops it first.
  Pickle p;
  p.proto().raw("]\x94(");
  for (int i = 0; i < 1000; ++i) p.raw("N");
  p.raw("e]\x94(");
  for (int i = 0; i < 10000; ++i) p.raw("h").byte(0);
  p.raw("e\x86");
  const std::string msg = error_of(p.stop().bytes());
  CHECK(contains(msg, "test.pkl: unfolding a value: "));
  CHECK(contains(msg, kRefused));
  // Ten references unfold.
  Pickle few;
  few.proto().raw("]\x94(");
  for (int i = 0; i < 1000; ++i) few.raw("N");
  few.raw("e]\x94(");
  for (int i = 0; i < 10; ++i) few.raw("h").byte(0);
  const auto doc = decode(few.raw("e\x86").stop().bytes());
  CHECK(doc.to_value(doc.root()).items()[1].items().size() == 10);
}

namespace {

// A torch.save archive of one float32 tensor: a storage of `storage_numel` elements (all 1.0) viewed
// with `size` and `stride`.
std::string tensor_archive(uint64_t storage_numel, uint64_t size, uint64_t stride) {
  Pickle p;
  p.proto(2).global("torch._utils", "_rebuild_tensor_v2").raw("(");
  // persistent id ('storage', torch.FloatStorage, '0', 'cpu', numel)
  p.raw("(").binunicode("storage").global("torch", "FloatStorage").binunicode("0").binunicode("cpu");
  p.raw("J").le(storage_numel, 4).raw("tQ");
  p.int1(0).raw("J").le(size, 4).raw("\x85").raw("J").le(stride, 4).raw("\x85").raw("\x89");
  p.global("collections", "OrderedDict").raw(")R").raw("tR").stop();
  std::string storage;
  for (uint64_t i = 0; i < storage_numel; ++i) storage += std::string("\0\0\x80\x3f", 4);
  return make_zip({{"archive/data.pkl", p.bytes()}, {"archive/byteorder", "little"}, {"archive/data/0", storage}},
                  false);
}

}  // namespace

TEST_CASE("torch.save: a tensor item may not view more elements than its storage holds", "[dcp][torch_save][budget]") {
  const std::string ok = tensor_archive(4, 4, 1);
  BufferSource ok_src("ok.pt", reinterpret_cast<const uint8_t*>(ok.data()), ok.size());
  CHECK(tensor_item_record(TorchSaveArchive(ok_src)).numel() == 4);
  // Repeating elements within the storage's size reads no more than the storage: accepted.
  const std::string rep = tensor_archive(4, 4, 0);
  BufferSource rep_src("rep.pt", reinterpret_cast<const uint8_t*>(rep.data()), rep.size());
  CHECK(tensor_item_record(TorchSaveArchive(rep_src)).numel() == 4);
  // One element viewed 2^29 times with stride 0: refused before any element is read.
  const std::string zero = tensor_archive(1, 1u << 29, 0);
  BufferSource zero_src("zero.pt", reinterpret_cast<const uint8_t*>(zero.data()), zero.size());
  const TorchSaveArchive archive(zero_src);
  const std::string msg = format_error([&] { tensor_item_record(archive); });
  CHECK(contains(msg, "zero.pt archive/data.pkl: tensor of size [536870912] and stride [0] views 536870912 elements"));
  CHECK(contains(msg, "of a storage of 4 bytes"));
  // In a bytes item the same tensor counts against the object's budget of tensors.
  CHECK(contains(format_error([&] { archive.to_value(); }), "tensors of the pickled object exceed"));
}

TEST_CASE("capped problems: ten of each key and kind, the rest summed up", "[ckpt][problems]") {
  std::vector<ckpt::Problem> out;
  ckpt::CappedProblems capped(out);
  for (uint64_t i = 0; i < 1000; ++i) capped.add({ckpt::ProblemKind::missing_file, "w", i, i + 1, "", "chunk"});
  for (uint64_t i = 0; i < 3; ++i) capped.add({ckpt::ProblemKind::out_of_bounds, "w", i, i + 1, "", "chunk"});
  for (uint64_t i = 0; i < 12; ++i) capped.add({ckpt::ProblemKind::missing_file, "v", i, i + 1, "", "chunk"});
  capped.add_summary({ckpt::ProblemKind::gap, "w", 0, 0, "", "5 more uncovered boxes not listed"});
  capped.finish();
  REQUIRE(out.size() == 10 + 3 + 10 + 1 + 2);
  const ckpt::Problem& w = out[out.size() - 1];
  const ckpt::Problem& v = out[out.size() - 2];
  CHECK(v.key == "v");
  CHECK(v.message == "... and 2 more missing_file problems of this key, not listed (the first 10 are)");
  CHECK(w.key == "w");
  CHECK(w.message == "... and 990 more missing_file problems of this key, not listed (the first 10 are)");
  CHECK(w.lo == 10);
  CHECK(w.hi == 1000);
}
