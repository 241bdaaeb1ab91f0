// The stored-zip reader and torch.save archives: hand-built zips (ZIP64, bad CRC, compressed,
// overlapping, truncated) and real torch.save files written by torch (views, fp8, Python objects).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <random>

#include "catch.h"
#include "core/error.h"
#include "dcp_test_util.h"
#include "formats/dcp/zip/crc32.h"
#include "formats/dcp/torch_save/torch_save.h"
#include "formats/dcp/zip/zip_archive.h"

using namespace fpg;
using namespace fpg::dcp;
using namespace fpg::dcptest;

namespace {

std::string zip_error(const std::string& image, bool read_all = true) {
  return format_error([&] {
    BufferSource src("t.zip", reinterpret_cast<const uint8_t*>(image.data()), image.size());
    ZipArchive zip(src);
    if (read_all)
      for (const ZipEntry& e : zip.entries()) zip.read_all(e, e.size);
  });
}

std::string file_string(const std::string& path) {
  const auto b = sttest::read_bytes(path);
  return std::string(b.begin(), b.end());
}

void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

TEST_CASE("crc32: equals the bitwise definition at every length and alignment, whole or in pieces", "[dcp][zip]") {
  auto reference = [](const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
  };
  CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u);
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(200000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 4; ++offset)
    for (size_t n = 0; n < 1100; ++n) {  // every tail after 0-3 blocks of 256 bytes
      CAPTURE(offset, n);
      REQUIRE(crc32_update(0, buf.data() + offset, n) == reference(buf.data() + offset, n));
    }
  for (size_t n : {1000u, 4109u, 65541u, 199990u}) {
    CAPTURE(n);
    const uint32_t whole = reference(buf.data() + 3, n);
    CHECK(crc32_update(0, buf.data() + 3, n) == whole);
    for (size_t cut : {size_t{1}, size_t{17}, size_t{64}, size_t{100}, n / 2, n - 63}) {
      CAPTURE(cut);
      CHECK(crc32_update(crc32_update(0, buf.data() + 3, cut), buf.data() + 3 + cut, n - cut) == whole);
      CHECK(crc32_concat(crc32_update(0, buf.data() + 3, cut), crc32_update(0, buf.data() + 3 + cut, n - cut), n - cut) ==
            whole);
    }
    // Pieces checksummed apart, an empty one among them, joined in order.
    uint32_t joined = crc32_concat(0, crc32_update(0, buf.data(), 0), 0);
    for (size_t at = 0; at < n;) {
      const size_t piece = std::min<size_t>(n - at, 1 + (at * 7919) % 5000);
      joined = crc32_concat(joined, crc32_update(0, buf.data() + 3 + at, piece), piece);
      at += piece;
    }
    CHECK(joined == whole);
  }
}

TEST_CASE("zip: stored entries, with and without ZIP64 end records", "[dcp][zip]") {
  for (bool zip64 : {false, true}) {
    const std::string image = make_zip({{"a/data.pkl", "hello"}, {"a/data/0", std::string(100, 'x')}, {"a/e", ""}}, zip64);
    BufferSource src("t.zip", reinterpret_cast<const uint8_t*>(image.data()), image.size());
    ZipArchive zip(src);
    REQUIRE(zip.entries().size() == 3);
    const ZipEntry* e = zip.find("a/data.pkl");
    REQUIRE(e);
    const auto data = zip.read_all(*e, 100);
    CHECK(std::string(data.begin(), data.end()) == "hello");
    CHECK(zip.read_all(*zip.find("a/data/0"), 1000).size() == 100);
    CHECK(zip.read_all(*zip.find("a/e"), 0).empty());
    CHECK(zip.find("a/missing") == nullptr);
    CHECK(contains(format_error([&] { zip.read_all(*zip.find("a/data/0"), 99); }), "more than the 99 accepted"));
  }
}

TEST_CASE("zip: malformed archives are refused with the entry named", "[dcp][zip]") {
  CHECK(contains(zip_error(make_zip({{"x/data.pkl", "abc", 0, true}}, true)),
                 "zip entry 'x/data.pkl' has CRC-32"));
  CHECK(contains(zip_error(make_zip({{"x/data.pkl", "abc", 8}}, false)),
                 "entry 'x/data.pkl' is compressed (method 8)"));
  CHECK(contains(zip_error(make_zip({{"x/a", "1"}, {"x/a", "2"}}, false)), "entry 'x/a' appears twice"));
  CHECK(contains(zip_error(std::string(30, 'Z')), "end of central directory not found"));
  CHECK(contains(zip_error("PK"), "too short"));
  {  // an entry whose size reaches into the central directory
    std::string z = make_zip({{"x/a", "hello"}}, false);
    const size_t cd = z.find("PK\x01\x02");
    put32(z, cd + 20, 500);
    put32(z, cd + 24, 500);
    CHECK(contains(zip_error(z), "runs into the central directory"));
  }
  {  // the directory's and the local header's names disagree
    std::string z = make_zip({{"x/a", "hello"}}, false);
    z[z.find("x/a")] = 'y';
    CHECK(contains(zip_error(z), "local header names another file"));
  }
  {  // a central directory offset past the end records
    std::string z = make_zip({{"x/a", "hello"}}, false);
    put32(z, z.size() - 6, 0x7fffffff);
    CHECK(contains(zip_error(z), "runs past its end records"));
  }
  {  // an entry count the directory cannot hold
    std::string z = make_zip({{"x/a", "hello"}}, true);
    const size_t rec = z.find("PK\x06\x06");
    put32(z, rec + 32, 1000000);
    put32(z, rec + 24, 1000000);
    CHECK(contains(zip_error(z), "declares 1000000 entries"));
  }
  {  // ZIP64 locator pointing nowhere
    std::string z = make_zip({{"x/a", "hello"}}, true);
    const size_t loc = z.find("PK\x06\x07");
    put32(z, loc + 8, 3);
    CHECK(contains(zip_error(z), "ZIP64 end record"));
  }
}

TEST_CASE("zip: every truncation and corruption of a torch.save file fails cleanly", "[dcp][zip][hostile]") {
  const std::string whole = file_string(fixture("torch_save/column_slice.pt"));
  CHECK(zip_error(whole) == "<no FormatError>");
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string msg = zip_error(whole.substr(0, n));
    INFO("prefix of " << n << " bytes: " << msg);
    CHECK(contains(msg, "t.zip: zip "));
  }
  std::mt19937 rng(4);
  for (int i = 0; i < 3000; ++i) {
    std::string b = whole;
    for (int k = 0; k < 2; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    try {
      BufferSource src("t.pt", reinterpret_cast<const uint8_t*>(b.data()), b.size());
      TorchSaveArchive archive(src);
      archive.to_value();
    } catch (const FormatError&) {
    }
  }
}

TEST_CASE("torch.save: tensors are read bit-exact through offsets and strides", "[dcp][torch_save]") {
  const safetensors::Reader expected(fixture("expected_torch_save.safetensors"));
  for (const char* name : {"column_slice", "transposed", "row_offset", "fp8", "scalar"}) {
    INFO(name);
    const std::string image = file_string(fixture(std::string("torch_save/") + name + ".pt"));
    BufferSource src(name, reinterpret_cast<const uint8_t*>(image.data()), image.size());
    const TorchSaveArchive archive(src);
    CHECK(archive.prefix() == name);  // torch.save to a path names the folder after the file
    const TensorRecord r = tensor_item_record(archive);
    const safetensors::TensorInfo& want = expected.tensor(name);
    REQUIRE(r.dtype->dtype);
    CHECK(*r.dtype->dtype == want.dtype);
    CHECK(r.shape == want.shape);
    std::vector<uint8_t> got(r.nbytes());
    archive.read_tensor(r, got.data());
    const auto bytes = expected.bytes(want);
    CHECK(std::vector<uint8_t>(bytes.begin(), bytes.end()) == got);
  }
  // What the views look like in the file: a slice keeps the whole storage and an offset.
  const std::string image = file_string(fixture("torch_save/column_slice.pt"));
  BufferSource src("column_slice", reinterpret_cast<const uint8_t*>(image.data()), image.size());
  const TensorRecord r = tensor_item_record(TorchSaveArchive(src));
  CHECK(r.storage_offset == 1);
  CHECK(r.stride == std::vector<uint64_t>{4, 1});
  CHECK(r.storage_bytes == 48);
  CHECK_FALSE(r.contiguous());
}

TEST_CASE("torch.save: Python objects decode to the values Python prints", "[dcp][torch_save]") {
  std::ifstream f(fixture("expected_torch_save.json"));
  const nlohmann::json expected = nlohmann::json::parse(f);
  const std::string image = file_string(fixture("torch_save/objects.pt"));
  BufferSource src("objects.pt", reinterpret_cast<const uint8_t*>(image.data()), image.size());
  CHECK(TorchSaveArchive(src).to_value().repr(100000) == expected.at("objects.pt").get<std::string>());

  const std::string big = file_string(fixture("torch_save/bigint.pt"));
  BufferSource big_src("bigint.pt", reinterpret_cast<const uint8_t*>(big.data()), big.size());
  CHECK(contains(format_error([&] { TorchSaveArchive a(big_src); }),
                 "bigint.pt bigint/data.pkl: pickle integer beyond 64 bits is not supported"));

  const std::string objs = file_string(fixture("torch_save/tensors_in_object.pt"));
  BufferSource objs_src("tensors_in_object.pt", reinterpret_cast<const uint8_t*>(objs.data()), objs.size());
  const Value v = TorchSaveArchive(objs_src).to_value();
  const Value* shared = v.find("shared");
  REQUIRE(shared);
  REQUIRE(shared->items().size() == 2);
  const TensorValue& whole = shared->items()[0].tensor_value();
  const TensorValue& row = shared->items()[1].tensor_value();
  CHECK(whole.shape == std::vector<uint64_t>{3, 4});
  CHECK(row.shape == std::vector<uint64_t>{4});
  float w[12], r[4];
  std::memcpy(w, whole.data.data(), sizeof w);
  std::memcpy(r, row.data.data(), sizeof r);
  for (int i = 0; i < 12; ++i) CHECK(w[i] == static_cast<float>(i));
  for (int i = 0; i < 4; ++i) CHECK(r[i] == static_cast<float>(8 + i));
  const TensorValue& half = v.find("half")->tensor_value();
  CHECK(half.torch_dtype == "float16");
  CHECK(half.dtype == DType::F16);
  CHECK(half.data == std::vector<uint8_t>{0x00, 0x3e, 0x00, 0xc0});  // 1.5, -2.0
  CHECK(v.repr() == "{'shared': [tensor(float32, [3, 4]), tensor(float32, [4])], 'half': tensor(float16, [2])}");
}

TEST_CASE("torch.save: tensors reaching outside their storage are refused", "[dcp][torch_save]") {
  // data.pkl of a float tensor of `n` elements over a 3-element storage.
  auto tensor_pkl = [](int n) {
    return Pickle().proto(2).global("torch._utils", "_rebuild_tensor_v2").raw("(")
        .raw("(").binunicode("storage").global("torch", "FloatStorage").binunicode("0")
        .binunicode("cpu").int1(3).raw("tQ").int1(0).int1(n).raw("\x85").int1(1).raw("\x85")
        .raw("\x89").global("collections", "OrderedDict").raw(")R").raw("tR").stop().bytes();
  };
  const std::string pkl = tensor_pkl(4);
  const std::string zip = make_zip({{"archive/data.pkl", pkl}, {"archive/byteorder", "little"},
                                    {"archive/data/0", std::string(12, '\0')}}, true);
  BufferSource src("bad.pt", reinterpret_cast<const uint8_t*>(zip.data()), zip.size());
  const TorchSaveArchive archive(src);
  CHECK(contains(format_error([&] { tensor_item_record(archive); }), "reaches outside its storage of 12 bytes"));

  const std::string big_endian = make_zip({{"archive/data.pkl", pkl}, {"archive/byteorder", "big"}}, false);
  BufferSource be("be.pt", reinterpret_cast<const uint8_t*>(big_endian.data()), big_endian.size());
  CHECK(contains(format_error([&] { TorchSaveArchive a(be); }), "big-endian torch.save archives are not supported"));

  const std::string short_record =
      make_zip({{"archive/data.pkl", tensor_pkl(3)}, {"archive/data/0", std::string(8, '\0')}}, false);
  BufferSource sr("short.pt", reinterpret_cast<const uint8_t*>(short_record.data()), short_record.size());
  const TorchSaveArchive a2(sr);
  CHECK(contains(format_error([&] { tensor_item_record(a2); }), "is 8 bytes; its storage declares 12"));

  const std::string none = make_zip({{"archive/other", "x"}}, false);
  BufferSource ns("none.pt", reinterpret_cast<const uint8_t*>(none.data()), none.size());
  CHECK(contains(format_error([&] { TorchSaveArchive a(ns); }), "not a torch.save archive"));
}
