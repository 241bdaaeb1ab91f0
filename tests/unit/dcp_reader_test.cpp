// Reading real DCP checkpoints written by torch (testdata/dcp): metadata, every tensor chunk and
// bytes entry compared bit for bit with the ground truth torch wrote beside them, in both
// serializations; and the hostile variants (forbidden global, escaping path, symlink, CRC flip).
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

#include "catch.h"
#include "core/error.h"
#include "dcp_test_util.h"
#include "formats/dcp/metadata/rank_local_metadata.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/summary.h"
#include "formats/dcp/validate.h"

using namespace fpg;
using namespace fpg::dcp;
using namespace fpg::dcptest;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// Every tensor of the checkpoint assembled from its chunks and compared with the ground truth;
// every bytes entry whose ground truth is a repr compared with ours. Returns the keys checked.
size_t check_against_ground_truth(const Reader& r, const std::string& tensors, const std::string& objects) {
  const safetensors::Reader expected(tensors);
  const nlohmann::json reprs = read_json(objects);
  size_t checked = 0;
  for (const Entry& e : r.metadata().entries) {
    INFO("key " << e.fqn);
    if (!e.is_tensor) {
      const Value v = r.read_object(e);
      if (reprs.contains(e.fqn)) {
        CHECK(v.repr(100000) == reprs.at(e.fqn).get<std::string>());
        ++checked;
      }
      continue;
    }
    const safetensors::TensorInfo& want = expected.tensor(e.fqn);
    REQUIRE(e.tensor.dtype->dtype);
    CHECK(*e.tensor.dtype->dtype == want.dtype);
    CHECK(e.tensor.size == want.shape);
    const uint64_t es = e.tensor.dtype->element_bytes;
    std::vector<uint8_t> whole(want.nbytes(), 0xAB);
    for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
      const ChunkMeta& ch = e.tensor.chunks[c];
      std::vector<uint8_t> buf(r.chunk_bytes(e, c));
      r.read_chunk(e, c, buf.data(), buf.size());
      // Scatter the chunk's rows (its last dimension contiguous) into the whole tensor.
      const size_t nd = e.tensor.size.size();
      if (nd == 0) {
        std::memcpy(whole.data(), buf.data(), buf.size());
        continue;
      }
      uint64_t rows = 1;
      for (size_t d = 0; d + 1 < nd; ++d) rows *= ch.sizes[d];
      const uint64_t row = ch.sizes[nd - 1] * es;
      for (uint64_t i = 0; i < rows && row > 0; ++i) {
        uint64_t rem = i, flat = 0, stride = 1;
        std::vector<uint64_t> idx(nd, 0);
        for (size_t d = nd - 1; d-- > 0;) {
          idx[d] = rem % ch.sizes[d];
          rem /= ch.sizes[d];
        }
        for (size_t d = nd; d-- > 0;) {
          flat += (ch.offsets[d] + idx[d]) * stride;
          stride *= e.tensor.size[d];
        }
        std::memcpy(whole.data() + flat * es, buf.data() + i * row, row);
      }
    }
    const auto bytes = expected.bytes(want);
    CHECK(std::vector<uint8_t>(bytes.begin(), bytes.end()) == whole);
    ++checked;
  }
  return checked;
}

}  // namespace

TEST_CASE("dcp reader: the 4-rank checkpoint's metadata", "[dcp][reader]") {
  const Reader r(fixture("torch_save_4ranks"));
  const Metadata& m = r.metadata();
  CHECK(m.entries.size() == 45);
  CHECK(m.chunk_count() == 56);
  CHECK(m.storage.size() == 72);
  CHECK(m.version == "1.0.0");
  REQUIRE(m.storage_meta);
  REQUIRE(m.storage_meta->checkpoint_id);
  CHECK(contains(*m.storage_meta->checkpoint_id, "/testdata/dcp/torch_save_4ranks"));
  CHECK(m.storage_meta->save_id.has_value());
  CHECK(m.duplicate_storage_keys == 0);
  REQUIRE(m.planner_data.size() == 45);
  CHECK(m.planner_data[0].first == "model.0.weight");
  CHECK(m.planner_data[0].second == std::vector<std::string>{"model", "0.weight"});
  CHECK_FALSE(r.megatron());

  const Entry& w = r.entry("model.2.weight");
  REQUIRE(w.is_tensor);
  CHECK(w.tensor.dtype->name == "float32");
  CHECK(w.tensor.size == std::vector<uint64_t>{5, 8});
  REQUIRE(w.tensor.chunks.size() == 4);
  CHECK(w.tensor.chunks[2].offsets == std::vector<uint64_t>{4, 0});
  CHECK(w.tensor.chunks[2].sizes == std::vector<uint64_t>{1, 8});
  CHECK(w.tensor.chunks[3].sizes == std::vector<uint64_t>{0, 8});  // the empty shard of an uneven split
  CHECK(r.storage(w, 1).relative_path == "__1_0.distcp");
  CHECK(r.chunk_bytes(w, 2) == 32);
  const Entry& g = r.entry("extra.grid3d");
  CHECK(g.tensor.dtype->name == "bfloat16");
  CHECK(g.tensor.layout == "torch.strided");
  CHECK(g.tensor.memory_format == "torch.contiguous_format");
  CHECK(g.tensor.strides == std::vector<int64_t>{6, 2, 1});
  CHECK(r.entry("optim.state.0.weight.step").tensor.size.empty());
  CHECK_FALSE(r.entry("optim.param_groups.0.lr").is_tensor);
  CHECK(r.storage(r.entry("optim.param_groups.0.lr")).length > 0);
  CHECK_THROWS_AS(r.entry("no.such.key"), UsageError);
}

TEST_CASE("dcp reader: TORCH_SAVE and SAFETENSORS checkpoints equal the ground truth", "[dcp][reader]") {
  for (const char* dir : {"torch_save_4ranks", "safetensors_4ranks"}) {
    INFO(dir);
    const Reader r(fixture(dir));
    CHECK(check_against_ground_truth(r, fixture("expected_4ranks.safetensors"), fixture("expected_4ranks.json")) == 44);
    const Summary s = summarize(r);
    CHECK(s.format == "torch_dcp");
    REQUIRE(s.serialization);
    CHECK(*s.serialization == (std::string(dir) == "torch_save_4ranks" ? Serialization::torch_save
                                                                        : Serialization::safetensors));
    CHECK(s.files == std::vector<std::string>{"__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"});
    CHECK(s.tensors == 29);
    CHECK(s.bytes_entries == 16);
    CHECK(s.chunks == 56);
    // Megatron-like values: a dict keyed by a dtype tuple flattens into the key; numpy arrays decode.
    const Value numel = r.read_object(r.entry("objects.per_bucket_numel.0.(torch.bfloat16, torch.float32)"));
    CHECK(numel.repr() == "[1024, 896]");
    const Value np = r.read_object(r.entry("objects.rng.numpy"));
    CHECK(np.kind() == Value::Kind::object);
    CHECK(contains(np.name(), "multiarray._reconstruct"));
    const ValidationReport rep = validate(r, ValidateOptions{true});
    for (const auto& p : rep.problems) INFO(ckpt::to_string(p));
    CHECK(rep.ok());
    CHECK(rep.items_read == 72);
  }
}

TEST_CASE("dcp reader: one tensor of each dtype, scalars and Python objects", "[dcp][reader]") {
  const Reader r(fixture("small"));
  CHECK(check_against_ground_truth(r, fixture("expected_small.safetensors"), fixture("expected_small.json")) == 24);
  CHECK(r.entry("fp8").tensor.dtype->dtype == DType::F8_E4M3);
  CHECK(r.open_chunk(r.entry("fp8"), 0).serialization() == Serialization::torch_save);
  // A tensor inside a bytes entry (a tuple is not flattened by DCP).
  const Value pair = r.read_object(r.entry("holder.pair"));
  REQUIRE(pair.kind() == Value::Kind::tuple);
  const TensorValue& t = pair.items()[0].tensor_value();
  CHECK(t.torch_dtype == "int16");
  CHECK(t.shape == std::vector<uint64_t>{3});
  CHECK(t.data == std::vector<uint8_t>{0, 0, 1, 0, 2, 0});
  CHECK(pair.items()[1].as_int() == 9);
  CHECK(r.read_bytes(r.entry("count")).size() == r.storage(r.entry("count")).length);
  // Buffers of the wrong size are a caller's bug.
  std::vector<uint8_t> small_buf(3);
  CHECK_THROWS_AS(r.read_chunk(r.entry("f32"), 0, small_buf.data(), small_buf.size()), InternalError);
  CHECK(validate(r, ValidateOptions{true}).ok());
}

TEST_CASE("dcp reader: directory detection and Megatron's metadata.json", "[dcp][reader]") {
  CHECK(is_dcp_directory(fixture("small")));
  CHECK_FALSE(is_dcp_directory(fixture("torch_save")));
  CHECK_FALSE(is_dcp_directory(fixture("no-such-dir")));
  CHECK_FALSE(is_dcp_directory(fixture("small/.metadata")));

  const std::string j = R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1, )"
                        R"("common_backend": "torch", "common_backend_version": 1, "extra": [1]})";
  const MegatronMetadata m = parse_megatron_metadata("metadata.json", j.data(), j.size());
  CHECK(m.sharded_backend == "torch_dist");
  CHECK(m.sharded_backend_version == 1);
  CHECK(m.common_backend == "torch");
  CHECK(m.common_backend_version == 1);
  CHECK(m.other.at("extra") == "[1]");
  auto err = [](const std::string& text) {
    return format_error([&] { parse_megatron_metadata("metadata.json", text.data(), text.size()); });
  };
  CHECK(contains(err(R"({"common_backend": "torch"})"), "no \"sharded_backend\""));
  CHECK(contains(err(R"({"sharded_backend": 1})"), "not a string"));
  CHECK(contains(err(R"({"sharded_backend": "torch_dist", "sharded_backend_version": "1"})"), "not an integer"));
  CHECK(contains(err(R"({"sharded_backend": "a", "sharded_backend": "b"})"), "twice"));
  CHECK(contains(err("[1]"), "not a JSON object"));

  // A checkpoint directory with metadata.json is reported as Megatron's.
  sttest::TempDir dir;
  for (const char* name : {".metadata", "__0_0.distcp"})
    sttest::write_bytes(dir.file(name), sttest::read_bytes(fixture(std::string("small/") + name)));
  sttest::write_text(dir.file("metadata.json"), j);
  const Reader r(dir.path());
  REQUIRE(r.megatron());
  CHECK(summarize(r).format == "megatron_torch_dist");
}

TEST_CASE("dcp reader: hostile checkpoints are refused with the file and the reason", "[dcp][reader][hostile]") {
  const std::string forbidden = format_error([] { Reader r(fixture("broken/forbidden_global")); });
  CHECK(contains(forbidden, "forbidden_global/.metadata: pickle global 'os.system' is not allowed"));
  CHECK(contains(format_error([] { Reader r(fixture("broken/truncated_metadata")); }),
                 "truncated_metadata/.metadata: pickle "));

  {  // relative_path '../x': refused when read, reported by validate
    const Reader r(fixture("broken/escape_path"));
    std::vector<uint8_t> buf(r.chunk_bytes(r.entry("f32"), 0));
    CHECK(contains(format_error([&] { r.read_chunk(r.entry("f32"), 0, buf.data(), buf.size()); }),
                   "stored file name '../x' is not a plain file name inside the checkpoint directory"));
    const ValidationReport rep = validate(r, ValidateOptions{true});
    REQUIRE(rep.problems.size() == 1);
    CHECK(rep.problems[0].kind == ckpt::ProblemKind::missing_file);
    CHECK(rep.problems[0].file == "../x");
    CHECK(rep.problems[0].key == "f32");
    CHECK(rep.items_read == 24);
  }
  {  // a symlinked data file
    const Reader r(fixture("broken/symlink_item"));
    CHECK(contains(format_error([&] { r.read_object(r.entry("count")); }),
                   "symlink_item/__0_0.distcp: is a symbolic link, not a regular file; refused"));
    const ValidationReport rep = validate(r);
    REQUIRE(rep.problems.size() == 1);
    CHECK(rep.problems[0].kind == ckpt::ProblemKind::missing_file);
    CHECK(contains(rep.problems[0].message, "symbolic link"));
  }
  {  // one flipped byte in a tensor record: only reading the data finds it
    const Reader r(fixture("broken/crc_flip"));
    CHECK(validate(r).ok());
    const ValidationReport rep = validate(r, ValidateOptions{true});
    REQUIRE(rep.problems.size() == 1);
    CHECK(rep.problems[0].kind == ckpt::ProblemKind::checksum);
    CHECK(rep.problems[0].key == "f32");
    CHECK(rep.problems[0].lo == 0);
    CHECK(rep.problems[0].hi == 6);
    CHECK(contains(rep.problems[0].message, "zip entry 'archive/data/0' has CRC-32"));
    std::vector<uint8_t> buf(r.chunk_bytes(r.entry("f32"), 0));
    CHECK(contains(format_error([&] { r.read_chunk(r.entry("f32"), 0, buf.data(), buf.size()); }), "CRC-32"));
  }
  {  // a SAFETENSORS image whose DCP_SHARDING_INFO places a chunk elsewhere than the metadata
    sttest::TempDir dir;
    for (const char* name : {".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"})
      sttest::write_bytes(dir.file(name), sttest::read_bytes(fixture(std::string("safetensors_4ranks/") + name)));
    auto data = sttest::read_bytes(dir.file("__1_0.distcp"));
    std::string text(data.begin(), data.end());
    const size_t at = text.find("model.0.weight\\\": {\\\"saved_offsets\\\": [2, 0]");
    REQUIRE(at != std::string::npos);
    text[text.find('2', at)] = '3';
    sttest::write_bytes(dir.file("__1_0.distcp"), std::vector<uint8_t>(text.begin(), text.end()));
    const Reader r(dir.path());
    const Entry& w = r.entry("model.0.weight");
    REQUIRE(w.tensor.chunks[1].offsets == std::vector<uint64_t>{2, 0});
    std::vector<uint8_t> buf(r.chunk_bytes(w, 1));
    CHECK(contains(format_error([&] { r.read_chunk(w, 1, buf.data(), buf.size()); }),
                   "tensor 'model.0.weight' was saved at offsets [3, 0], the metadata's chunk is at [2, 0]"));
  }
  {  // a FIFO where a data file should be: refused without blocking
    sttest::TempDir dir;
    sttest::write_bytes(dir.file(".metadata"), sttest::read_bytes(fixture("small/.metadata")));
    REQUIRE(::mkfifo(dir.file("__0_0.distcp").c_str(), 0600) == 0);
    const Reader r(dir.path());
    CHECK(contains(format_error([&] { r.read_object(r.entry("count")); }), "is a FIFO, not a regular file"));
  }
  {  // an item range past the end of its file
    sttest::TempDir dir;
    sttest::write_bytes(dir.file(".metadata"), sttest::read_bytes(fixture("small/.metadata")));
    auto data = sttest::read_bytes(fixture("small/__0_0.distcp"));
    data.resize(data.size() / 2);
    sttest::write_bytes(dir.file("__0_0.distcp"), data);
    const Reader r(dir.path());
    const ValidationReport rep = validate(r, ValidateOptions{true});
    REQUIRE_FALSE(rep.ok());
    for (const auto& p : rep.problems) CHECK(p.kind == ckpt::ProblemKind::truncated_file);
  }
}

TEST_CASE("dcp reader: rank-local metadata read as one checkpoint", "[dcp][reader]") {
  CHECK(is_dcp_directory(fixture("rank_local")));
  const Reader r(fixture("rank_local"));
  CHECK(r.metadata_files() == std::vector<std::string>{"__0.metadata", "__1.metadata"});
  CHECK(r.metadata().entries.size() == 4);
  // The row-sharded weight has a chunk from each rank; the bias both ranks wrote is one chunk.
  CHECK(r.entry("layer.weight").tensor.chunks.size() == 2);
  CHECK(r.entry("layer.bias").tensor.chunks.size() == 1);
  CHECK(check_against_ground_truth(r, fixture("expected_rank_local.safetensors"), fixture("expected_rank_local.json")) == 4);
  CHECK(validate(r, ValidateOptions{true}).ok());

  // A rank whose save did not finish: its metadata file is named.
  CHECK(is_dcp_directory(fixture("rank_local_gap")));
  CHECK(contains(format_error([] { Reader r(fixture("rank_local_gap")); }), "without __0.metadata"));

  CHECK(rank_metadata_rank("__12.metadata") == 12u);
  CHECK_FALSE(rank_metadata_rank("__.metadata"));
  CHECK_FALSE(rank_metadata_rank("__1a.metadata"));
  CHECK_FALSE(rank_metadata_rank(".metadata"));
  CHECK_FALSE(rank_metadata_rank("__99999999.metadata"));
}

TEST_CASE("dcp reader: merging rank-local metadata", "[dcp][reader]") {
  auto rank = [](uint64_t r, const TorchDType* dtype, std::vector<uint64_t> off, std::vector<uint64_t> sizes) {
    RankMetadata m;
    m.rank = r;
    m.metadata.file = "d/__" + std::to_string(r) + ".metadata";
    Entry e;
    e.fqn = "w";
    e.tensor.dtype = dtype;
    e.tensor.size = {4};
    e.tensor.chunks.push_back({off, sizes, 0});
    m.metadata.entries.push_back(e);
    StorageEntry s;
    s.fqn = SharedString("w");
    s.chunk_offsets = off;
    s.relative_path = "__" + std::to_string(r) + "_0.distcp";
    m.metadata.storage.push_back(s);
    return m;
  };
  const TorchDType* f32 = find_torch_dtype("float32");
  const TorchDType* i64 = find_torch_dtype("int64");
  {
    std::vector<RankMetadata> v;
    v.push_back(rank(0, f32, {0}, {2}));
    v.push_back(rank(1, f32, {1}, {2}));  // overlaps rank 0's: kept, for validation to report
    v.push_back(rank(2, f32, {0}, {2}));  // a replica of rank 0's: dropped
    const Metadata m = merge_rank_metadata(std::move(v), "d/__0.metadata … __2.metadata");
    REQUIRE(m.find("w"));
    REQUIRE(m.find("w")->tensor.chunks.size() == 2);
    CHECK(m.storage[static_cast<size_t>(m.find("w")->tensor.chunks[1].storage)].relative_path == "__1_0.distcp");
  }
  std::vector<RankMetadata> v;
  v.push_back(rank(0, f32, {0}, {2}));
  v.push_back(rank(1, i64, {2}, {2}));
  const std::string err = format_error([&] { merge_rank_metadata(std::move(v), "d"); });
  CHECK(contains(err, "d/__1.metadata: key 'w' is a tensor of dtype torch.int64"));
  CHECK(contains(err, "d/__0.metadata has it as a tensor of dtype torch.float32"));
}
