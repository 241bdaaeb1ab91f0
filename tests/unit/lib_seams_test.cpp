// The seams lib/ declares and formats/registry.cpp fills (lib/ARCHITECTURE.md, "The format seam"),
// used as the use cases use them: a model written and read back through TensorFileFormat; a training
// checkpoint saved by ranks, committed, published and read back through StateStore, and a save never
// committed leaving nothing; the capability write_params where a format has it and its refusal where
// not; and a message that names options by field, with the places a caller renames.
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "catch.h"
#include "ckpt/format_registry.h"
#include "ckpt/state_store.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor_file.h"
#include "safetensors_test_util.h"

using namespace fpg;
using sttest::TempDir;

namespace {

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("tensor files: a file written by ranges from the seam reads back through it", "[seam]") {
  TempDir tmp;
  const TensorFileFormat& format = tensor_file_format();
  const std::string path = tmp.path() + "/m.safetensors";
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> b = {7, 8};
  {
    auto w = format.create(path, {{"a", DType::F32, {2, 3}}, {"b", DType::BF16, {2}}}, {{"k", "v"}});
    w->write("a", 12, a.data() + 3, 12);  // the second half first: ranges come in any order
    w->write("a", 0, a.data(), 12);
    w->write(w->index("b"), 0, b.data(), 4);
    w->commit();
  }
  const auto m = format.open(path);
  CHECK_FALSE(m->sharded());
  REQUIRE(m->shard_count() == 1);
  CHECK(m->shard_path(0) == path);
  CHECK(m->metadata().at("k") == "v");
  const TensorFiles::Entry& e = m->tensor("a");
  CHECK(e.info->shape == std::vector<uint64_t>{2, 3});
  REQUIRE(m->bytes(e).size == 24);
  CHECK(std::memcmp(m->data(e), a.data(), 24) == 0);
  CHECK(m->find("c") == nullptr);
  CHECK_THROWS_AS(m->tensor("c"), FormatError);
  CHECK(m->total_bytes() == 28);
  // A directory is a model only with model.safetensors or its index in it, and never one file.
  CHECK_THROWS_AS(format.open(tmp.path()), FormatError);
  CHECK_THROWS_AS(format.open_file(tmp.path()), FormatError);
  CHECK(format.shard_file_name(0, 3) == "model-00001-of-00003.safetensors");
  CHECK(format.index_file_name() == "model.safetensors.index.json");
}

TEST_CASE("tensor files: a writer destroyed uncommitted leaves nothing", "[seam]") {
  TempDir tmp;
  {
    auto w = tensor_file_format().create(tmp.path() + "/x.safetensors", {{"a", DType::F32, {4}}});
    const float v[2] = {1, 2};
    w->write("a", 0, v, 8);
  }
  CHECK(entries(tmp.path()).empty());
}

TEST_CASE("state store: ranks write, rank 0 commits, publish names it latest; a reader reads it back", "[seam]") {
  TempDir tmp;
  const ckpt::StateStore& store = ckpt::state_store();
  const std::string root = tmp.path(), target = root + "/step-00000001";
  ckpt::StateWriteOptions wo;
  wo.compression = ckpt::parse_compression("none");
  const ckpt::Key key{"weight/w", DType::F32, {8}, ckpt::KeyKind::weight};
  const std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7};
  {
    auto save = store.begin_save(target, wo);
    std::vector<ckpt::RankManifest> written;
    for (uint32_t r = 0; r < 2; ++r) {  // each rank's writer, as ranks on threads or processes make them
      auto w = store.writer(save->staging(), r, wo);
      w->write(w->declare(key), 4 * r, v.data() + 4 * r, 4);
      written.push_back(w->finish());
    }
    save->documents().set("note", "{\"a\": 1}");
    const ckpt::Index ix = save->commit(std::move(written));
    CHECK(ix.keys.size() == 1);
    CHECK(ix.files.size() == 2);
  }
  CHECK(store.publish(root, "step-00000001", 0).empty());
  CHECK(store.latest(root) == "step-00000001");
  CHECK(std::filesystem::exists(target + "/" + std::string(store.index_file())));
  CHECK(std::filesystem::exists(root + "/" + std::string(store.latest_file())));

  const auto reader = store.open(root, "read it");  // the root: `latest` resolved
  CHECK(reader->dir() == target);
  const long k = reader->find_key("weight/w");
  REQUIRE(k >= 0);
  std::vector<float> back(8);
  const auto plan = reader->plan_reads({{static_cast<uint32_t>(k), 0, 8, 32}}, 64);
  plan->next();
  reader->read(static_cast<uint32_t>(k), 0, 8, back.data());
  CHECK(back == v);
  CHECK(reader->chunks_read() >= 2);
  CHECK(reader->index().documents.get("note") == std::string("{\"a\": 1}"));
  CHECK(store.open_as_is(target)->dir() == target);
}

TEST_CASE("state store: a save never committed leaves no staging and no checkpoint", "[seam]") {
  TempDir tmp;
  const ckpt::StateStore& store = ckpt::state_store();
  {
    auto save = store.begin_save(tmp.path() + "/step-00000002", {});
    auto& w = save->rank(0);
    const float x = 1;
    w.write(w.declare({"weight/w", DType::F32, {1}, ckpt::KeyKind::weight}), 0, &x, 1);
    CHECK(entries(tmp.path()).size() == 1);  // the staging directory
  }
  CHECK(entries(tmp.path()).empty());
  CHECK(store.latest(tmp.path()).empty());
  CHECK_THROWS_AS(store.begin_save(tmp.path() + "/none/step-1", {}), UsageError);
}

TEST_CASE("write_params is a capability: DCP has it, the others refuse", "[seam]") {
  const ckpt::FormatRegistry& r = ckpt::builtin_formats();
  REQUIRE(r.find("dcp") != nullptr);
  REQUIRE(r.find("safetensors") != nullptr);
  CHECK(r.find("nonesuch") == nullptr);
  TempDir tmp;
  const auto model = ckpt::open_checkpoint(std::string(FPG_TESTDATA_DIR) + "/models/tiny-llama.safetensors")->params({});
  CHECK_THROWS_AS(r.find("safetensors")->write_params(model->params(), {}, tmp.path() + "/out", {}), UsageError);
  const auto& ts = model->params().tensors();
  size_t t = 0;
  while (t < ts.size() && ts[t].dtype != DType::BF16 && ts[t].dtype != DType::F32) ++t;
  REQUIRE(t < ts.size());
  const std::vector<ckpt::ExportTensor> one = {{t, {ts[t].name, DType::F32, ts[t].shape}}};
  const uint64_t read = r.find("dcp")->write_params(model->params(), one, tmp.path() + "/dcp", {});
  CHECK(read == dtype_bytes(ts[t].dtype, ts[t].numel()));
  CHECK(r.probe(tmp.path() + "/dcp") == r.find("dcp"));
}

TEST_CASE("a message naming options by field records where each stands", "[seam]") {
  const UsageError e(Message(Field{"save_every"}, " needs ", Field{"save"}, " DIR"));
  CHECK(std::string(e.what()) == "save_every needs save DIR");
  REQUIRE(e.fields().size() == 2);
  CHECK(e.fields()[0].at == 0);
  CHECK(e.fields()[0].field == "save_every");
  CHECK(e.fields()[1].at == 17);
  CHECK(e.fields()[1].field == "save");
  CHECK(UsageError("plain").fields().empty());
}
