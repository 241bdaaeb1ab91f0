// Sharded safetensors models: index read/write, the one-model view, and its consistency checks.
#include <cstring>

#include "catch.h"
#include "core/error.h"
#include "formats/safetensors/index.h"
#include "formats/safetensors/model.h"
#include "formats/safetensors/writer.h"
#include "safetensors_test_util.h"

using namespace fpg;
using namespace fpg::safetensors;
using namespace fpg::sttest;

namespace {

// Writes a shard whose U8 tensors `names` hold their index + 1 in every byte.
void write_shard(const std::string& path, const std::vector<std::string>& names) {
  std::vector<TensorSpec> specs;
  for (const auto& n : names) specs.push_back({n, DType::U8, {2, 2}});
  Writer w(path, specs, {{"format", "pt"}});
  for (size_t i = 0; i < names.size(); ++i) {
    const std::vector<uint8_t> v(4, static_cast<uint8_t>(i + 1));
    w.write(names[i], 0, v.data(), v.size());
  }
  w.commit();
}

// A two-shard model in `dir`: a, b in shard 1; c in shard 2.
ShardIndex make_model(const TempDir& dir) {
  const std::string s1 = shard_file_name(0, 2), s2 = shard_file_name(1, 2);
  write_shard(dir.file(s1), {"a", "b"});
  write_shard(dir.file(s2), {"c"});
  ShardIndex index;
  index.total_size = 12;
  index.weight_map = {{"a", s1}, {"b", s1}, {"c", s2}};
  write_index(dir.file(kIndexFileName), index);
  return index;
}

}  // namespace

TEST_CASE("safetensors shard names and index round trip", "[safetensors]") {
  CHECK(shard_file_name(0, 3) == "model-00001-of-00003.safetensors");
  CHECK(shard_file_name(162, 163, "x") == "x-00163-of-00163.safetensors");
  CHECK(is_safe_shard_name("a.safetensors"));
  CHECK(is_safe_shard_name("sub/a.safetensors"));
  CHECK(!is_safe_shard_name(""));
  CHECK(!is_safe_shard_name("/etc/passwd"));
  CHECK(!is_safe_shard_name("../a.safetensors"));
  CHECK(!is_safe_shard_name("sub/../../a"));
  CHECK(!is_safe_shard_name("sub//a"));
  CHECK(!is_safe_shard_name("a/"));

  TempDir dir;
  ShardIndex index;
  index.total_size = 123456789012ull;
  index.extra_metadata_json = {{"format", "\"pt\""}, {"total_parameters", "42"}};
  index.weight_map = {{"z.weight", "model-00002-of-00002.safetensors"},
                      {"a.weight", "model-00001-of-00002.safetensors"}};
  const std::string path = dir.file("idx.json");
  write_index(path, index);
  const ShardIndex back = read_index(path);
  CHECK(back.total_size == index.total_size);
  CHECK(back.extra_metadata_json == index.extra_metadata_json);
  CHECK(back.weight_map == index.weight_map);
  CHECK(back.shard_files() ==
        std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
  // The text is what transformers writes: json.dumps(indent=2, sort_keys=True) + "\n".
  const auto bytes = read_bytes(path);
  const std::string text(bytes.begin(), bytes.end());
  CHECK(text ==
        "{\n  \"metadata\": {\n    \"format\": \"pt\",\n    \"total_parameters\": 42,\n"
        "    \"total_size\": 123456789012\n  },\n  \"weight_map\": {\n"
        "    \"a.weight\": \"model-00001-of-00002.safetensors\",\n"
        "    \"z.weight\": \"model-00002-of-00002.safetensors\"\n  }\n}\n");
  CHECK(dir.list() == std::set<std::string>{"idx.json"});

  ShardIndex evil;
  evil.weight_map = {{"a", "../outside.safetensors"}};
  CHECK_THROWS_AS(write_index(dir.file("evil.json"), evil), UsageError);
}

TEST_CASE("safetensors index: malformed indexes", "[safetensors]") {
  TempDir dir;
  struct Case {
    const char* text;
    std::vector<const char*> parts;
  };
  const std::vector<Case> cases = {
      {"", {"not valid JSON"}},
      {"{\"weight_map\": {\"a\": \"x\"", {"not valid JSON"}},
      {"[]", {"not an object"}},
      {"{\"metadata\": {}}", {"no \"weight_map\""}},
      {"{\"weight_map\": []}", {"\"weight_map\" is not an object"}},
      {"{\"weight_map\": {\"a\": 3}}", {"'a'", "not a string"}},
      {"{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}", {"'a'", "twice"}},
      {"{\"weight_map\": {\"a\": \"../x.safetensors\"}}", {"'a'", "'../x.safetensors'"}},
      {"{\"weight_map\": {\"a\": \"/abs.safetensors\"}}", {"'a'", "relative path"}},
      {"{\"metadata\": [], \"weight_map\": {}}", {"\"metadata\" is not an object"}},
      {"{\"metadata\": {\"total_size\": -1}, \"weight_map\": {}}", {"total_size", "-1"}},
      {"{\"metadata\": {\"total_size\": \"12\"}, \"weight_map\": {}}", {"total_size"}},
      {"{\"metadata\": {\"total_size\": 1.5}, \"weight_map\": {}}", {"total_size"}},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string path = dir.file("i" + std::to_string(i++) + ".json");
    write_text(path, c.text);
    const std::string msg = format_error([&] { read_index(path); });
    INFO(c.text << " -> " << msg);
    CHECK(contains(msg, path + ": "));
    for (const char* p : c.parts) CHECK(contains(msg, p));
  }
  // Accepted variants: null metadata, total_size written as a whole float.
  write_text(dir.file("ok1.json"), "{\"metadata\": null, \"weight_map\": {}}");
  CHECK(!read_index(dir.file("ok1.json")).total_size);
  write_text(dir.file("ok2.json"), "{\"metadata\": {\"total_size\": 1024.0}, \"weight_map\": {}}");
  CHECK(read_index(dir.file("ok2.json")).total_size == 1024u);
}

TEST_CASE("safetensors model view over a sharded model", "[safetensors]") {
  TempDir dir;
  make_model(dir);
  for (const std::string& in : {dir.file(kIndexFileName), dir.path()}) {
    INFO(in);
    const Model m = Model::open(in);
    CHECK(m.sharded());
    CHECK(m.source() == dir.file(kIndexFileName));
    REQUIRE(m.shard_count() == 2);
    REQUIRE(m.size() == 3);
    CHECK(m.tensors()[0].info->name == "a");
    CHECK(m.tensors()[2].info->name == "c");
    CHECK(m.tensor("c").shard == 1);
    CHECK(m.reader(m.tensor("c")).path() == dir.file(shard_file_name(1, 2)));
    CHECK(m.data(m.tensor("b"))[3] == 2);
    CHECK(m.bytes(m.tensor("c")).size == 4);
    CHECK(m.total_bytes() == 12);
    CHECK(m.index()->total_size == 12u);
    CHECK(m.metadata().at("format") == "pt");
    CHECK(m.find("zz") == nullptr);
    CHECK(contains(format_error([&] { m.tensor("zz"); }), "'zz'"));
  }
  // A single file, directly or as a directory holding model.safetensors.
  TempDir one;
  write_shard(one.file("model.safetensors"), {"x", "y"});
  for (const std::string& in : {one.file("model.safetensors"), one.path()}) {
    const Model m = Model::open(in);
    CHECK(!m.sharded());
    CHECK(m.index() == nullptr);
    CHECK(m.size() == 2);
    CHECK(m.data(m.tensor("y"))[0] == 2);
  }
  TempDir none;
  CHECK(contains(format_error([&] { Model::open(none.path()); }), "neither"));
  CHECK(contains(format_error([&] { Model::open(none.file("absent.safetensors")); }),
                 "absent.safetensors"));
}

TEST_CASE("safetensors model: inconsistent shards are refused with index, shard and tensor named",
          "[safetensors]") {
  TempDir dir;
  const ShardIndex good = make_model(dir);
  const std::string index_path = dir.file(kIndexFileName);
  const std::string s1 = shard_file_name(0, 2), s2 = shard_file_name(1, 2);
  auto open_msg = [&](const ShardIndex& idx) {
    write_index(index_path, idx);
    return format_error([&] { Model::open(index_path); });
  };

  SECTION("missing shard file") {
    ShardIndex idx = good;
    idx.weight_map["d"] = "model-00009-of-00009.safetensors";
    const std::string msg = open_msg(idx);
    INFO(msg);
    CHECK(contains(msg, index_path + ": "));
    CHECK(contains(msg, "'model-00009-of-00009.safetensors'"));
    CHECK(contains(msg, "'d'"));
    CHECK(contains(msg, "does not exist"));
  }
  SECTION("tensor listed in the weight_map but absent from its shard") {
    ShardIndex idx = good;
    idx.weight_map["ghost"] = s2;
    const std::string msg = open_msg(idx);
    INFO(msg);
    CHECK(contains(msg, index_path + ": "));
    CHECK(contains(msg, "'ghost'"));
    CHECK(contains(msg, "'" + s2 + "'"));
  }
  SECTION("tensor mapped to the wrong shard") {
    ShardIndex idx = good;
    idx.weight_map["c"] = s1;
    idx.weight_map["keep2"] = s2;  // keeps shard 2 in the index
    write_shard(dir.file(s2), {"c", "keep2"});
    const std::string msg = open_msg(idx);
    INFO(msg);
    CHECK(contains(msg, "'c' is mapped to shard '" + s1 + "' but is stored in shard '" + s2 + "'"));
  }
  SECTION("tensor present in two shards") {
    write_shard(dir.file(s2), {"c", "a"});
    const std::string msg = open_msg(good);
    INFO(msg);
    CHECK(contains(msg, "'a'"));
    CHECK(contains(msg, "two shards"));
    CHECK(contains(msg, s1));
    CHECK(contains(msg, s2));
  }
  SECTION("tensor stored in a shard but missing from the weight_map") {
    write_shard(dir.file(s2), {"c", "extra"});
    const std::string msg = open_msg(good);
    INFO(msg);
    CHECK(contains(msg, "'extra'"));
    CHECK(contains(msg, "'" + s2 + "'"));
    CHECK(contains(msg, "missing from the weight_map"));
  }
  SECTION("a malformed shard is reported by its own path") {
    write_text(dir.file(s2), "garbage!");
    const std::string msg = open_msg(good);
    CHECK(contains(msg, dir.file(s2) + ": "));
  }
}
