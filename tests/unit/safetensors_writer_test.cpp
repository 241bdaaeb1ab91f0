// safetensors writer: round trip of every dtype, parallel range writes, coverage, atomic commit.
#include <algorithm>
#include <cstring>
#include <thread>

#include "catch.h"
#include "core/error.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/reader.h"
#include "formats/safetensors/writer.h"
#include "safetensors_test_util.h"

using namespace fpg;
using namespace fpg::safetensors;
using namespace fpg::sttest;

namespace {

std::vector<uint8_t> pattern(uint64_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// Every dtype with a scalar (where whole bytes), a zero-size and two non-trivial shapes.
std::vector<TensorSpec> all_dtype_specs() {
  std::vector<TensorSpec> specs;
  for (int i = 0; i <= static_cast<int>(DType::U64); ++i) {
    const auto t = static_cast<DType>(i);
    const std::string n(dtype_name(t));
    const bool sub = dtype_bits(t) % 8 != 0;
    if (!sub) specs.push_back({n + ".scalar", t, {}});
    specs.push_back({n + ".empty", t, {3, 0, 2}});
    specs.push_back({n + ".vec", t, {sub ? 8u : 5u}});
    specs.push_back({n + ".mat", t, {4, sub ? 12u : 7u}});
  }
  return specs;
}

}  // namespace

TEST_CASE("safetensors writer round-trips every dtype, scalars and zero-size tensors",
          "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("all.safetensors");
  auto specs = all_dtype_specs();
  std::reverse(specs.begin(), specs.end());  // declaration order must not matter
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"producer", "fpgather"}};
  std::map<std::string, std::vector<uint8_t>> contents;
  {
    Writer w(path, specs, meta);
    CHECK(w.data_offset() % 8 == 0);
    // Four threads, each writing every tensor's bytes in 3-byte pieces, interleaved, tail first.
    for (size_t i = 0; i < w.tensors().size(); ++i)
      contents[w.tensors()[i].name] = pattern(w.tensors()[i].nbytes(), static_cast<uint32_t>(i));
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&, k] {
        for (size_t i = 0; i < w.tensors().size(); ++i) {
          const auto& bytes = contents.at(w.tensors()[i].name);
          const uint64_t pieces = (bytes.size() + 2) / 3;
          for (uint64_t p = pieces; p-- > 0;) {
            if (p % 4 != static_cast<uint64_t>(k)) continue;
            const uint64_t off = p * 3, len = std::min<uint64_t>(3, bytes.size() - off);
            w.write(i, off, bytes.data() + off, len);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    w.commit();
    CHECK(w.committed());
  }
  CHECK(dir.list() == std::set<std::string>{"all.safetensors"});

  const Reader r(path);
  CHECK(r.metadata() == meta);
  REQUIRE(r.size() == specs.size());
  for (const TensorSpec& s : specs) {
    INFO(s.name);
    const TensorInfo* t = r.find(s.name);
    REQUIRE(t);
    CHECK(t->dtype == s.dtype);
    CHECK(t->shape == s.shape);
    const ByteSpan b = r.bytes(*t);
    const auto& want = contents.at(s.name);
    REQUIRE(b.size == want.size());
    CHECK(std::equal(b.begin(), b.end(), want.begin()));
    // The reference order keeps each whole-byte tensor aligned to its element size.
    if (dtype_bits(t->dtype) % 8 == 0)
      CHECK((r.data_offset() + t->begin) % (dtype_bits(t->dtype) / 8) == 0);
  }
  // File order is the reference's: dtype rank descending, then name.
  for (size_t i = 1; i < r.size(); ++i) {
    const auto &a = r.tensors()[i - 1], &b = r.tensors()[i];
    CHECK(!reference_order_less(b.dtype, b.name, a.dtype, a.name));
  }
  // The header is the compact JSON padded with spaces.
  const auto bytes = read_bytes(path);
  const std::string header(bytes.begin() + 8, bytes.begin() + static_cast<long>(r.data_offset()));
  CHECK(header.substr(0, 16) == R"({"__metadata__":)");
  const auto last = header.find_last_not_of(' ');
  CHECK(header[last] == '}');
  CHECK(header.size() - last - 1 < 8);
}

TEST_CASE("safetensors writer: empty model and header layout", "[safetensors]") {
  TempDir dir;
  {
    Writer w(dir.file("e.safetensors"), {});
    w.commit();
  }
  // Exactly the reference's bytes for an empty dict.
  const std::vector<uint8_t> want = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
  CHECK(read_bytes(dir.file("e.safetensors")) == want);
  {
    // The reference's own serialization example: F32 [1, 2, 3] named "attn.0".
    Writer w(dir.file("x.safetensors"), {{"attn.0", DType::F32, {1, 2, 3}}});
    const float v[6] = {0, 1, 2, 3, 4, 5};
    w.write("attn.0", 0, v, sizeof v);
    w.commit();
  }
  const auto x = read_bytes(dir.file("x.safetensors"));
  const std::string hx(x.begin() + 8, x.begin() + 72);
  CHECK(x[0] == 64);
  CHECK(hx == R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})");
  CHECK(x.size() == 72 + 24);
}

TEST_CASE("safetensors writer is atomic: nothing under the final name until commit",
          "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<TensorSpec> specs = {{"a", DType::F32, {4}}, {"b", DType::BF16, {3}}};
  const auto a = pattern(16, 1), b = pattern(6, 2);

  SECTION("destroyed without commit: no final file, no temporary left") {
    {
      Writer w(path, specs);
      CHECK(!w.temp_path().empty());
      CHECK(dir.list().size() == 1);
      CHECK(dir.list().begin()->rfind(".m.safetensors.tmp-", 0) == 0);
      w.write("a", 0, a.data(), a.size());
      w.write("b", 0, b.data(), b.size());
    }
    CHECK(dir.list().empty());
  }
  SECTION("commit with bytes missing names the tensor and range, then cleans up") {
    {
      Writer w(path, specs);
      w.write("a", 0, a.data(), 8);
      w.write("a", 12, a.data() + 12, 4);
      w.write("b", 0, b.data(), b.size());
      std::string msg;
      try {
        w.commit();
      } catch (const InternalError& e) {
        msg = e.what();
      }
      INFO(msg);
      CHECK(contains(msg, path));
      CHECK(contains(msg, "'a'"));
      CHECK(contains(msg, "[8, 12)"));
      CHECK(!w.committed());
      CHECK(dir.list().size() == 1);  // only the temporary
    }
    CHECK(dir.list().empty());
  }
  SECTION("an untouched tensor is reported whole") {
    Writer w(path, specs);
    w.write("a", 0, a.data(), a.size());
    REQUIRE_THROWS_AS(w.commit(), InternalError);
    try {
      w.commit();
    } catch (const InternalError& e) {
      CHECK(contains(e.what(), "'b': bytes [0, 6)"));
    }
  }
  SECTION("overlapping and repeated writes count once; commit replaces an existing file") {
    write_text(path, "old contents");
    {
      Writer w(path, specs);
      w.write("a", 4, a.data() + 4, 12);
      w.write("a", 0, a.data(), 8);
      w.write("a", 0, a.data(), 16);
      w.write("b", 2, b.data() + 2, 4);
      w.write("b", 0, b.data(), 2);
      w.write("b", 0, b.data(), 0);
      w.commit();
      w.commit();  // idempotent
    }
    CHECK(dir.list() == std::set<std::string>{"m.safetensors"});
    const Reader r(path);
    CHECK(std::memcmp(r.data(r.tensor("a")), a.data(), 16) == 0);
    CHECK(std::memcmp(r.data(r.tensor("b")), b.data(), 6) == 0);
  }
  SECTION("misuse is an internal error") {
    Writer w(path, specs);
    CHECK_THROWS_AS(w.write("a", 10, a.data(), 8), InternalError);
    CHECK_THROWS_AS(w.write("a", 17, a.data(), 0), InternalError);
    CHECK_THROWS_AS(w.write("nope", 0, a.data(), 1), InternalError);
    CHECK_THROWS_AS(w.write(7, 0, a.data(), 1), InternalError);
    w.write("a", 0, a.data(), 16);
    w.write("b", 0, b.data(), 6);
    w.commit();
    CHECK_THROWS_AS(w.write("a", 0, a.data(), 1), InternalError);
  }
}

TEST_CASE("safetensors writer refuses invalid declarations before creating anything",
          "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto usage = [&](std::vector<TensorSpec> specs, std::map<std::string, std::string> meta = {}) {
    try {
      Writer w(path, std::move(specs), std::move(meta));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("<no UsageError>");
  };
  CHECK(contains(usage({{"a", DType::F32, {1}}, {"a", DType::F16, {1}}}), "'a' is declared twice"));
  CHECK(contains(usage({{"__metadata__", DType::F32, {1}}}), "reserved"));
  CHECK(contains(usage({{"q", DType::F4, {}}}), "'q'"));
  CHECK(contains(usage({{"q", DType::F4, {3}}}), "whole number of bytes"));
  CHECK(contains(usage({{"q", DType::F6_E3M2, {2}}}), "'q'"));
  CHECK(contains(usage({{"o", DType::F64, {uint64_t(1) << 62}}}), "'o'"));
  CHECK(contains(usage({{"o", DType::U8, {uint64_t(1) << 32, uint64_t(1) << 32}}}), "'o'"));
  CHECK(contains(usage({{"bad\xff", DType::U8, {1}}}), "UTF-8"));
  CHECK(contains(usage({{"a", DType::U8, {1}}}, {{"k", "\xc3"}}), "UTF-8"));
  CHECK(dir.list().empty());
  // A directory that does not exist: FormatError naming the path.
  CHECK(contains(format_error([&] { Writer w(dir.file("no/such/dir.safetensors"), {}); }),
                 "no/such/dir.safetensors"));
}

TEST_CASE("safetensors writer: names needing JSON escapes round-trip", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("esc.safetensors");
  const std::vector<std::string> names = {"q\"uote", "back\\slash", "tab\there", "nl\n", "ünïcode",
                                          ""};
  std::vector<TensorSpec> specs;
  for (const auto& n : names) specs.push_back({n, DType::U8, {1}});
  {
    Writer w(path, specs, {{"k\"", "v\n"}});
    for (size_t i = 0; i < names.size(); ++i) {
      const uint8_t v = static_cast<uint8_t>(i);
      w.write(names[i], 0, &v, 1);
    }
    w.commit();
  }
  const Reader r(path);
  for (size_t i = 0; i < names.size(); ++i) {
    REQUIRE(r.find(names[i]));
    CHECK(*r.data(*r.find(names[i])) == i);
  }
  CHECK(r.metadata().at("k\"") == "v\n");
}

TEST_CASE("safetensors writer and reader handle a header of many tensors", "[safetensors]") {
  // 100k tensors: guards against per-key linear searches (quadratic headers).
  TempDir dir;
  const std::string path = dir.file("many.safetensors");
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 100000; ++i) specs.push_back({"layers." + std::to_string(i) + ".w", DType::U8, {1}});
  {
    Writer w(path, specs);
    for (size_t i = 0; i < w.tensors().size(); ++i) {
      const uint8_t v = static_cast<uint8_t>(i);
      w.write(i, 0, &v, 1);
    }
    w.commit();
  }
  const Reader r(path);
  REQUIRE(r.size() == 100000);
  CHECK(*r.data(r.tensor("layers.99999.w")) == r.tensor("layers.99999.w").begin % 256);
}
