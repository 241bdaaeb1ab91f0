// safetensors interop with the official library: files it wrote (testdata/safetensors, made by
// make_reference_files.py) read back as its manifest says, and our writer reproduces them byte for
// byte; the malformed files of make_bad_files.py are all refused, naming file and tensor.
#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "formats/safetensors/index.h"
#include "formats/safetensors/model.h"
#include "formats/safetensors/reader.h"
#include "formats/safetensors/writer.h"
#include "safetensors_test_util.h"

using namespace fpg;
using namespace fpg::safetensors;
using namespace fpg::sttest;

namespace {

const std::string kDir = std::string(FPG_TESTDATA_DIR) + "/safetensors";

nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::vector<uint8_t> unhex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

TEST_CASE("safetensors interop: files written by the official library", "[safetensors]") {
  const auto manifest = load_json(kDir + "/reference_manifest.json");
  REQUIRE(manifest.size() >= 4);
  TempDir dir;
  for (const auto& [file, want] : manifest.items()) {
    INFO(file);
    const std::string path = kDir + "/" + file;
    const Reader r(path);
    const auto& tensors = want["tensors"];
    REQUIRE(r.size() == tensors.size());
    std::vector<TensorSpec> specs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& w = tensors[i];
      const TensorInfo& t = r.tensors()[i];  // both in file order
      INFO(t.name);
      CHECK(t.name == w["name"].get<std::string>());
      CHECK(dtype_name(t.dtype) == w["dtype"].get<std::string>());
      CHECK(t.shape == w["shape"].get<std::vector<uint64_t>>());
      CHECK(t.begin == w["data_offsets"][0].get<uint64_t>());
      CHECK(t.end == w["data_offsets"][1].get<uint64_t>());
      const auto bytes = unhex(w["hex"].get<std::string>());
      const ByteSpan b = r.bytes(t);
      REQUIRE(b.size == bytes.size());
      CHECK(std::equal(b.begin(), b.end(), bytes.begin()));
      specs.push_back({t.name, t.dtype, t.shape});
    }
    std::map<std::string, std::string> meta;
    if (!want["metadata"].is_null()) meta = want["metadata"].get<std::map<std::string, std::string>>();
    CHECK(r.metadata() == meta);

    // Our writer, given the same tensors in another order, writes the same bytes.
    std::reverse(specs.begin(), specs.end());
    const std::string out = dir.file("copy.safetensors");
    {
      Writer w(out, specs, meta);
      for (const TensorInfo& t : r.tensors()) w.write(t.name, 0, r.data(t), t.nbytes());
      w.commit();
    }
    CHECK(read_bytes(out) == read_bytes(path));
  }
}

TEST_CASE("safetensors interop: a sharded model as transformers writes it", "[safetensors]") {
  const std::string index_path = kDir + "/sharded/" + kIndexFileName;
  const Model m = Model::open(index_path);
  CHECK(m.sharded());
  CHECK(m.shard_count() == 2);
  CHECK(m.size() == 5);
  CHECK(m.index()->total_size == m.total_bytes());
  CHECK(m.tensor("step").info->shape.empty());
  CHECK(m.tensor("norm.scale").shard == 1);
  // Our index writer reproduces the file.
  TempDir dir;
  write_index(dir.file("i.json"), *m.index());
  CHECK(read_bytes(dir.file("i.json")) == read_bytes(index_path));
}

TEST_CASE("safetensors interop: every file in testdata/safetensors/bad is refused",
          "[safetensors]") {
  const auto manifest = load_json(kDir + "/bad/manifest.json");
  REQUIRE(manifest.size() >= 6);
  for (const char* needed : {"bad_json", "header_past_end", "overlap", "out_of_range",
                             "size_mismatch", "unknown_dtype"})
    CHECK(manifest.contains(std::string(needed) + ".safetensors"));
  for (const auto& [file, want] : manifest.items()) {
    const std::string path = kDir + "/bad/" + file;
    const std::string msg = format_error([&] { Reader r(path); });
    INFO(file << ": " << msg);
    CHECK(contains(msg, path + ": "));
    if (!want["tensor"].is_null()) CHECK(contains(msg, "'" + want["tensor"].get<std::string>() + "'"));
  }
}
