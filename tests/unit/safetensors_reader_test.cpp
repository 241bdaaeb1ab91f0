// safetensors reader: valid headers, every malformed case, and fuzzing (truncation, byte mutation).
#include <cstring>
#include <random>

#include "catch.h"
#include "formats/safetensors/reader.h"
#include "safetensors_test_util.h"

using namespace fpg;
using namespace fpg::safetensors;
using namespace fpg::sttest;

namespace {

const char* kAB =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
    R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}})";

struct BadCase {
  const char* name;
  std::vector<uint8_t> bytes;
  const char* tensor;  // must appear quoted in the message, or nullptr
  std::vector<const char*> parts;  // further substrings the message must hold
};

std::vector<uint8_t> raw(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<uint8_t> with_length(uint64_t n, const std::string& rest) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return raw(s + rest);
}

}  // namespace

TEST_CASE("safetensors reader parses a valid file", "[safetensors]") {
  TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt","note":"x"},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},)"
      R"("s":{"dtype":"F32","shape":[],"data_offsets":[14,18]},)"
      R"("z":{"dtype":"F64","shape":[2,0],"data_offsets":[18,18]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":{"ignored":[1]}}})";
  const auto bytes = image(header, 18);
  write_bytes(dir.file("ok.safetensors"), bytes);
  Reader r(dir.file("ok.safetensors"));
  CHECK(r.path() == dir.file("ok.safetensors"));
  CHECK(r.file_size() == bytes.size());
  CHECK(r.data_offset() % 8 == 0);
  CHECK(r.data_size() == 18);
  REQUIRE(r.size() == 4);
  // File order is data-offset order, not header order.
  CHECK(r.tensors()[0].name == "a");
  CHECK(r.tensors()[1].name == "b");
  CHECK(r.tensors()[2].name == "s");
  CHECK(r.tensors()[3].name == "z");
  const TensorInfo& s = r.tensor("s");
  CHECK(s.dtype == DType::F32);
  CHECK(s.shape.empty());
  CHECK(s.numel == 1);
  CHECK(s.nbytes() == 4);
  CHECK(r.tensor("z").numel == 0);
  CHECK(r.find("missing") == nullptr);
  CHECK(contains(format_error([&] { r.tensor("missing"); }), "'missing'"));
  CHECK(r.has_metadata());
  CHECK(r.metadata().at("format") == "pt");
  CHECK(r.metadata().at("note") == "x");
  const ByteSpan b = r.bytes(r.tensor("b"));
  REQUIRE(b.size == 6);
  CHECK(std::memcmp(b.data, bytes.data() + r.data_offset() + 8, 6) == 0);

  // The reference's examples: an empty header, and a header with null metadata.
  const auto empty = image("{}", 0);
  CHECK(Reader::from_buffer("empty", empty.data(), empty.size()).size() == 0);
  const auto null_meta = image(R"({"__metadata__":null})", 0);
  const Reader n = Reader::from_buffer("n", null_meta.data(), null_meta.size());
  CHECK(!n.has_metadata());
  // Leading whitespace in the header is valid JSON.
  const auto ws = image(std::string(" \n") + kAB, 14);
  CHECK(Reader::from_buffer("ws", ws.data(), ws.size()).size() == 2);
}

TEST_CASE("safetensors reader refuses every malformed header with file and tensor named",
          "[safetensors]") {
  const std::string b14 = R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]})";
  const std::vector<BadCase> cases = {
      {"empty", {}, nullptr, {"0 bytes", "shorter than"}},
      {"short", raw("\x08\x00\x00"), nullptr, {"shorter than"}},
      {"too_large", with_length(100000001, "{}      "), nullptr, {"exceeds the limit"}},
      {"huge_length", with_length(~uint64_t(0), "{}      "), nullptr, {"exceeds the limit"}},
      {"past_end", with_length(64, "{}      "), nullptr, {"runs past the end"}},
      {"bad_json", image(R"({"a":{"dtype":"F32",)", 0), nullptr, {"not valid JSON"}},
      {"nul_padding", with_length(8, std::string("{}\0\0\0\0\0\0", 8)), nullptr, {"not valid JSON"}},
      {"bad_utf8", image("{\"a\xff\":{}}", 0), nullptr, {"not valid JSON"}},
      {"bom", image("\xEF\xBB\xBF{}", 0), nullptr, {"byte-order mark"}},
      {"not_object", image("[1,2]", 0), nullptr, {"not an object"}},
      {"deep", image(std::string(200, '[') + std::string(200, ']'), 0), nullptr, {"nests deeper"}},
      {"meta_not_object", image(R"({"__metadata__":[1]})", 0), nullptr, {"__metadata__"}},
      {"meta_not_string", image(R"({"__metadata__":{"k":1}})", 0), "k", {"not a string"}},
      {"entry_not_object", image(R"({"a":[1]})", 0), "a", {"not an object"}},
      {"missing_dtype", image(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), "a", {"\"dtype\""}},
      {"missing_shape", image(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8), "a", {"\"shape\""}},
      {"missing_offsets", image(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "a", {"\"data_offsets\""}},
      {"dtype_not_string", image(R"({"a":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", 8), "a",
       {"\"dtype\" is not a string"}},
      {"unknown_dtype", image(R"({"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", 8), "a",
       {"unknown dtype 'F12'"}},
      {"lowercase_dtype", image(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8), "a",
       {"unknown dtype"}},
      {"shape_not_array", image(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8), "a",
       {"\"shape\" is not an array"}},
      {"negative_dim", image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "a",
       {"-2", "non-negative integer"}},
      {"float_dim", image(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8), "a",
       {"non-negative integer"}},
      {"string_dim", image(R"({"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8), "a",
       {"non-negative integer"}},
      {"huge_dim", image(R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}})", 8),
       "a", {"non-negative integer"}},
      {"offsets_one", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", 8), "a",
       {"two integers"}},
      {"offsets_three", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", 8), "a",
       {"two integers"}},
      {"negative_offset", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8), "a",
       {"non-negative integers"}},
      {"float_offset", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", 8), "a",
       {"non-negative integers"}},
      {"reversed", image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "a",
       {"[8, 0)", "end before"}},
      {"numel_overflow",
       image(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", 8), "a",
       {"overflows"}},
      {"bytes_overflow",
       image(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8), "a",
       {"overflows"}},
      {"subbyte_partial", image(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2), "a",
       {"F4 [3]", "whole number of bytes"}},
      {"f6_partial", image(R"({"a":{"dtype":"F6_E2M3","shape":[1],"data_offsets":[0,1]}})", 1), "a",
       {"whole number of bytes"}},
      {"size_mismatch", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[8,14]}})", 14),
       "b", {"[8, 14)", "hold 6 bytes", "BF16 [4] needs 8"}},
      {"out_of_range", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"BF16","shape":[46],"data_offsets":[8,100]}})", 14),
       "b", {"[8, 100)", "outside the data section of 14 bytes"}},
      {"overlap", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "b", {"[4, 12)", "overlaps tensor 'a' [0, 8)"}},
      {"same_range", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
       "b", {"overlaps tensor 'a'"}},
      {"empty_inside", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", 8),
       "e", {"overlaps tensor 'a'"}},
      {"gap", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[10,16]}})", 16),
       "b", {"bytes [8, 10)", "belong to no tensor"}},
      {"leading_gap", image(R"({"b":{"dtype":"BF16","shape":[3],"data_offsets":[2,8]}})", 8),
       "b", {"bytes [0, 2)"}},
      {"trailing", image(kAB, 18), "b", {"bytes [14, 18)", "trailing"}},
      {"data_no_tensors", image("{}", 4), nullptr, {"bytes [0, 4)", "no tensors"}},
      {"duplicate", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
       "a", {"twice"}},
      {"duplicate_field", image(R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8),
       "dtype", {"twice", "entry 'a'"}},
      {"duplicate_meta", image(R"({"__metadata__":{"k":"1","k":"2"}})", 0), "k", {"twice", "__metadata__"}},
  };
  (void)b14;
  TempDir dir;
  for (const BadCase& c : cases) {
    const std::string path = dir.file(std::string(c.name) + ".safetensors");
    write_bytes(path, c.bytes);
    const std::string msg = format_error([&] { Reader r(path); });
    INFO(c.name << ": " << msg);
    CHECK(contains(msg, path + ": "));
    if (c.tensor) CHECK(contains(msg, std::string("'") + c.tensor + "'"));
    for (const char* p : c.parts) CHECK(contains(msg, p));
    // The same bytes from memory give the same verdict.
    const std::string mem = format_error([&] { Reader::from_buffer("mem", c.bytes.data(), c.bytes.size()); });
    CHECK(contains(mem, "mem: "));
  }
}

TEST_CASE("safetensors reader: files that cannot be opened", "[safetensors]") {
  TempDir dir;
  CHECK(contains(format_error([&] { Reader r(dir.file("nope.safetensors")); }), "nope.safetensors"));
  CHECK(contains(format_error([&] { Reader r(dir.path()); }), "not a regular file"));
}

namespace {

// The bytes of a valid file with metadata, a scalar, a zero-size tensor and several dtypes.
std::vector<uint8_t> fuzz_seed() {
  return image(R"({"__metadata__":{"format":"pt"},)"
               R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
               R"("s":{"dtype":"I64","shape":[],"data_offsets":[16,24]},)"
               R"("h":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]},)"
               R"("z":{"dtype":"U8","shape":[0,5],"data_offsets":[30,30]},)"
               R"("q":{"dtype":"F4","shape":[4],"data_offsets":[30,32]}})",
               32);
}

// Parses an exact-size heap copy (so ASan sees any read past the end); either the header is valid
// and every tensor lies inside the buffer, or the reader throws FormatError. Anything else fails.
bool parse_or_reject(const std::vector<uint8_t>& bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  try {
    const Reader r = Reader::from_buffer("fuzz", copy.get(), bytes.size());
    uint64_t sum = 0, covered = 0;
    for (const TensorInfo& t : r.tensors()) {
      REQUIRE(t.begin == covered);
      REQUIRE(r.data_offset() + t.end <= bytes.size());
      for (uint8_t v : r.bytes(t)) sum += v;  // touches every byte
      covered = t.end;
    }
    REQUIRE(covered == r.data_size());
    (void)sum;
    return true;
  } catch (const FormatError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("safetensors reader fuzz: truncation at every length", "[safetensors]") {
  const auto seed = fuzz_seed();
  REQUIRE(parse_or_reject(seed));
  size_t accepted = 0;
  for (size_t len = 0; len < seed.size(); ++len) {
    const std::vector<uint8_t> cut(seed.begin(), seed.begin() + static_cast<long>(len));
    if (parse_or_reject(cut)) ++accepted;
  }
  CHECK(accepted == 0);  // every strict prefix drops data bytes: never a valid file

  // And through real files (mmap path), for every length.
  TempDir dir;
  const std::string path = dir.file("cut.safetensors");
  for (size_t len = 0; len < seed.size(); ++len) {
    write_bytes(path, std::vector<uint8_t>(seed.begin(), seed.begin() + static_cast<long>(len)));
    CHECK(contains(format_error([&] { Reader r(path); }), path));
  }
}

TEST_CASE("safetensors reader fuzz: byte mutations never crash", "[safetensors]") {
  const auto seed = fuzz_seed();
  const uint8_t values[] = {0x00, 0xff, 0x80, '"', '{', '}', '[', ']', ',', ':', '0', '1', '9',
                            '-', '.', 'e', ' ', '\\', 'n'};
  size_t parsed = 0, rejected = 0;
  // Every position × a set of values interesting to a JSON lexer and to the length field.
  for (size_t i = 0; i < seed.size(); ++i) {
    for (uint8_t v : values) {
      auto m = seed;
      m[i] = v;
      (parse_or_reject(m) ? parsed : rejected)++;
    }
    auto m = seed;
    m[i] ^= 0x01;
    (parse_or_reject(m) ? parsed : rejected)++;
  }
  // Random multi-byte edits, insertions and deletions, from a fixed seed.
  std::mt19937 rng(12345);
  for (int iter = 0; iter < 20000; ++iter) {
    auto m = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const size_t pos = rng() % m.size();
      switch (rng() % 4) {
        case 0: m[pos] = static_cast<uint8_t>(rng()); break;
        case 1: m[pos] = values[rng() % sizeof values]; break;
        case 2: m.erase(m.begin() + static_cast<long>(pos)); break;
        case 3: m.insert(m.begin() + static_cast<long>(pos), values[rng() % sizeof values]); break;
      }
    }
    (parse_or_reject(m) ? parsed : rejected)++;
  }
  CHECK(rejected > 0);
  CHECK(parsed > 0);  // some mutations (e.g. inside the data section) leave a valid file
}
