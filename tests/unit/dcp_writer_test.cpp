// DCP writer: checkpoints read back through formats/dcp's reader (keys in order, chunks, items back to
// back per rank file, data and objects bit for bit), Megatron checkpoints rewritten item for item, the
// .metadata pickle round trip, and every refusal with the atomic commit leaving nothing behind.
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/metadata/metadata_writer.h"
#include "formats/dcp/reader.h"
#include "safetensors_test_util.h"

using namespace fpg;
using namespace fpg::dcp;
using fpg::sttest::TempDir;

namespace {

const std::string kMegatron = std::string(FPG_TESTDATA_DIR) + "/megatron";

const TorchDType& dt(const char* name) { return *find_torch_dtype(name); }

uint8_t pattern(uint64_t seed, uint64_t i) { return static_cast<uint8_t>(seed * 131 + i * 17 + (i >> 8)); }

std::vector<uint8_t> bytes_of(uint64_t seed, uint64_t n) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = pattern(seed, i);
  return v;
}

FillBytes from(const std::vector<uint8_t>& data) {
  return [&data](uint64_t off, void* dst, size_t n) { std::memcpy(dst, data.data() + off, n); };
}

// The box [offsets, offsets + sizes) of a row-major tensor of `shape` with `elem`-byte elements.
std::vector<uint8_t> box(const std::vector<uint8_t>& full, const std::vector<uint64_t>& shape, size_t elem,
                         const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes) {
  uint64_t n = 1;
  for (uint64_t s : sizes) n *= s;
  std::vector<uint8_t> out;
  for (uint64_t e = 0; e < n; ++e) {
    uint64_t rest = e, global = 0;
    std::vector<uint64_t> idx(sizes.size());
    for (size_t d = sizes.size(); d-- > 0;) idx[d] = rest % sizes[d], rest /= sizes[d];
    for (size_t d = 0; d < sizes.size(); ++d) global = global * shape[d] + offsets[d] + idx[d];
    out.insert(out.end(), full.begin() + global * elem, full.begin() + (global + 1) * elem);
  }
  return out;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void check_same_metadata(const Metadata& a, const Metadata& b) {
  REQUIRE(a.entries.size() == b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const Entry &x = a.entries[i], &y = b.entries[i];
    CAPTURE(x.fqn);
    CHECK(x.fqn == y.fqn);
    REQUIRE(x.is_tensor == y.is_tensor);
    if (!x.is_tensor) continue;
    CHECK(x.tensor.dtype->name == y.tensor.dtype->name);
    CHECK(x.tensor.size == y.tensor.size);
    CHECK(x.tensor.layout == y.tensor.layout);
    CHECK(x.tensor.memory_format == y.tensor.memory_format);
    CHECK(x.tensor.requires_grad == y.tensor.requires_grad);
    CHECK(x.tensor.pin_memory == y.tensor.pin_memory);
    CHECK(x.tensor.strides == y.tensor.strides);
    REQUIRE(x.tensor.chunks.size() == y.tensor.chunks.size());
    for (size_t c = 0; c < x.tensor.chunks.size(); ++c) {
      CHECK(x.tensor.chunks[c].offsets == y.tensor.chunks[c].offsets);
      CHECK(x.tensor.chunks[c].sizes == y.tensor.chunks[c].sizes);
    }
  }
  REQUIRE(a.storage.size() == b.storage.size());
  for (size_t i = 0; i < a.storage.size(); ++i) {
    const StorageEntry &x = a.storage[i], &y = b.storage[i];
    CAPTURE(x.fqn);
    CHECK(x.fqn == y.fqn);
    CHECK(x.chunk_offsets == y.chunk_offsets);
    CHECK(x.index == y.index);
    CHECK(x.relative_path == y.relative_path);
    CHECK(x.offset == y.offset);
    CHECK(x.length == y.length);
    CHECK(x.transform_descriptors == y.transform_descriptors);
  }
  CHECK(a.version == b.version);
  REQUIRE(a.storage_meta.has_value() == b.storage_meta.has_value());
  if (a.storage_meta) {
    CHECK(a.storage_meta->checkpoint_id == b.storage_meta->checkpoint_id);
    CHECK(a.storage_meta->save_id == b.storage_meta->save_id);
    CHECK(a.storage_meta->load_id == b.storage_meta->load_id);
    CHECK(a.storage_meta->modules == b.storage_meta->modules);
  }
  CHECK(a.planner_data == b.planner_data);
  REQUIRE(a.extra.size() == b.extra.size());
  for (const auto& [k, v] : a.extra) {
    REQUIRE(b.extra.count(k));
    CHECK(b.extra.at(k).repr(1 << 20) == v.repr(1 << 20));
  }
}

struct TensorCase {
  const char* fqn;
  const char* dtype;
  std::vector<uint64_t> shape;
  std::vector<std::pair<uint32_t, std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>> chunks;  // rank, box
};

const std::vector<TensorCase>& tensor_cases() {
  static const std::vector<TensorCase> cases = {
      {"w", "bfloat16", {4, 6}, {{0, {{0, 0}, {2, 6}}}, {1, {{2, 0}, {2, 6}}}}},
      {"g", "float32", {3, 4}, {{0, {{0, 0}, {2, 2}}}, {0, {{0, 2}, {2, 2}}}, {2, {{2, 0}, {1, 4}}}}},
      {"s", "float64", {}, {{1, {{}, {}}}}},
      {"e", "float32", {0, 2}, {{1, {{0, 0}, {0, 2}}}}},
      {"f8", "float8_e5m2", {9}, {{2, {{0}, {4}}}, {1, {{4}, {5}}}}},
  };
  return cases;
}

Value sample_object() {
  return Value::sequence(Value::Kind::list,
                         {Value::dict({{Value::str("iteration"), Value::integer(3)},
                                       {Value::str("lr"), Value::floating(1e-3)},
                                       {Value::str("dtypes"), Value::sequence(Value::Kind::tuple,
                                                                              {Value::global("torch.bfloat16"),
                                                                               Value::global("torch.float32")})}})});
}

// Writes the cases, an object on rank 0 and raw bytes on rank 2.
Metadata write_sample(const std::string& target, DcpWriteOptions opts, const std::vector<uint8_t>& raw) {
  DcpWriter w(target, std::move(opts));
  for (const TensorCase& t : tensor_cases()) w.declare_tensor(t.fqn, dt(t.dtype), t.shape);
  w.declare_bytes("obj");
  w.declare_bytes("raw");
  for (uint32_t r = 0; r < 3; ++r) {
    for (size_t k = 0; k < tensor_cases().size(); ++k) {
      const TensorCase& t = tensor_cases()[k];
      uint64_t numel = 1;
      for (uint64_t d : t.shape) numel *= d;
      const size_t elem = dt(t.dtype).element_bytes;
      const std::vector<uint8_t> full = bytes_of(k, numel * elem);
      for (const auto& [rank, b] : t.chunks) {
        if (rank != r) continue;
        const std::vector<uint8_t> chunk = box(full, t.shape, elem, b.first, b.second);
        w.rank(r).write_tensor(t.fqn, b.first, b.second, from(chunk));
      }
    }
    if (r == 0) w.rank(0).write_object("obj", sample_object());
    if (r == 2) w.rank(2).write_bytes("raw", raw.size(), from(raw));
  }
  return w.commit();
}

}  // namespace

TEST_CASE("DCP writer: a checkpoint read back through the reader", "[dcp][dcp_writer]") {
  TempDir tmp;
  const std::string target = tmp.file("ckpt");
  const std::vector<uint8_t> raw = bytes_of(99, 1000);
  DcpWriteOptions opts;
  opts.io_block_bytes = 5;  // many blocks per item
  const Metadata written = write_sample(target, opts, raw);
  CHECK(tmp.list() == std::set<std::string>{"ckpt"});
  CHECK(TempDir::list_dir(target) == std::set<std::string>{".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp"});

  const Reader r(target);
  const Metadata& m = r.metadata();
  check_same_metadata(m, written);
  std::vector<std::string> keys;
  for (const Entry& e : m.entries) keys.push_back(e.fqn);
  CHECK(keys == std::vector<std::string>{"w", "g", "s", "e", "f8", "obj", "raw"});
  CHECK(m.version == std::optional<std::string>("1.0.0"));
  REQUIRE(m.storage_meta);
  CHECK(m.storage_meta->checkpoint_id == std::optional<std::string>(target));
  REQUIRE(m.storage_meta->save_id);
  CHECK(m.storage_meta->save_id->size() == 36);
  CHECK(m.planner_data.size() == keys.size());
  CHECK(m.planner_data[1] == std::pair<std::string, std::vector<std::string>>{"g", {"g"}});
  CHECK_FALSE(r.megatron());

  // Each rank's items lie back to back from offset 0 to the end of its file.
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> by_file;
  for (const StorageEntry& s : m.storage) by_file[s.relative_path].push_back({s.offset, s.length});
  CHECK(by_file.size() == 3);
  for (auto& [file, items] : by_file) {
    CAPTURE(file);
    std::sort(items.begin(), items.end());
    uint64_t end = 0;
    for (const auto& [off, len] : items) {
      CHECK(off == end);
      end = off + len;
    }
    CHECK(end == file_size(target + "/" + file));
  }

  for (size_t k = 0; k < tensor_cases().size(); ++k) {
    const TensorCase& t = tensor_cases()[k];
    CAPTURE(t.fqn);
    const Entry& e = r.entry(t.fqn);
    REQUIRE(e.is_tensor);
    CHECK(e.tensor.dtype->name == t.dtype);
    CHECK(e.tensor.size == t.shape);
    REQUIRE(e.tensor.chunks.size() == t.chunks.size());
    uint64_t numel = 1;
    for (uint64_t d : t.shape) numel *= d;
    const size_t elem = dt(t.dtype).element_bytes;
    const std::vector<uint8_t> full = bytes_of(k, numel * elem);
    for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
      const ChunkMeta& ch = e.tensor.chunks[c];
      const auto it = std::find_if(t.chunks.begin(), t.chunks.end(), [&](const auto& x) { return x.second.first == ch.offsets; });
      REQUIRE(it != t.chunks.end());
      CHECK(ch.sizes == it->second.second);
      CHECK(r.storage(e, c).relative_path == "__" + std::to_string(it->first) + "_0.distcp");
      std::vector<uint8_t> got(r.chunk_bytes(e, c));
      r.read_chunk(e, c, got.data(), got.size());
      CHECK(got == box(full, t.shape, elem, ch.offsets, ch.sizes));
    }
  }
  CHECK(r.read_object(r.entry("obj")).repr(1 << 20) == sample_object().repr(1 << 20));
  CHECK(r.read_bytes(r.entry("raw")) == raw);
}

TEST_CASE("DCP writer: the Megatron flavour writes metadata.json and no planner data", "[dcp][dcp_writer]") {
  TempDir tmp;
  const std::string target = tmp.file("ckpt");
  DcpWriteOptions opts;
  opts.megatron = megatron_torch_dist_metadata();
  opts.planner_data = false;
  write_sample(target, opts, bytes_of(1, 10));
  // Byte for byte what megatron-core 0.19.2 writes (testdata/megatron/*/ckpt/metadata.json).
  CHECK(read_text(target + "/metadata.json") == read_text(kMegatron + "/dp1-one-bucket/ckpt/metadata.json"));
  const Reader r(target);
  REQUIRE(r.megatron());
  CHECK(r.megatron()->sharded_backend == "torch_dist");
  CHECK(r.megatron()->sharded_backend_version == std::optional<int64_t>(1));
  CHECK(r.metadata().planner_data.empty());
}

TEST_CASE("DCP writer: planner_data nested as torch's planner writes it, checkpoint_id as asked", "[dcp][dcp_writer]") {
  TempDir tmp;
  const std::string target = tmp.file("ckpt");
  DcpWriteOptions opts;
  opts.checkpoint_id = "/final/place";
  DcpWriter w(target, opts);
  const std::vector<uint8_t> data = bytes_of(3, 8);
  w.declare_tensor("model.input.weight", dt("float32"), {2}, {"model", "input.weight"});
  w.declare_tensor("optimizer.state.input.weight.exp_avg", dt("float32"), {2},
                   {"optimizer", "state", "input.weight", "exp_avg"});
  w.declare_tensor("flat.key", dt("float32"), {2});
  CHECK_THROWS_AS(w.declare_tensor("model.x", dt("float32"), {2}, {"model", "y"}), UsageError);
  for (const char* k : {"model.input.weight", "optimizer.state.input.weight.exp_avg", "flat.key"})
    w.rank(0).write_tensor(k, {0}, {2}, from(data));
  w.commit();
  const Reader r(target);
  using Path = std::vector<std::string>;
  const auto& pd = r.metadata().planner_data;
  REQUIRE(pd.size() == 3);
  CHECK(pd[0].second == Path{"model", "input.weight"});
  CHECK(pd[1].second == Path{"optimizer", "state", "input.weight", "exp_avg"});
  CHECK(pd[2].second == Path{"flat.key"});
  REQUIRE(r.metadata().storage_meta);
  CHECK(r.metadata().storage_meta->checkpoint_id == std::optional<std::string>("/final/place"));
}

namespace {

// Rewrites the checkpoint `src` through the writer: its keys in order, each item on the rank its file
// is named after (__R_*.distcp), tensors decoded and written again, bytes items copied (or, with
// `objects`, decoded and pickled again).
void rewrite(const Reader& src, const std::string& target, bool objects) {
  const Metadata& m = src.metadata();
  DcpWriteOptions opts;
  opts.megatron = src.megatron();
  opts.planner_data = false;
  DcpWriter w(target, opts);
  for (const Entry& e : m.entries) {
    if (e.is_tensor) w.declare_tensor(e.fqn, *e.tensor.dtype, e.tensor.size);
    else w.declare_bytes(e.fqn);
  }
  auto rank_of = [](const std::string& file) { return static_cast<uint32_t>(std::stoul(file.substr(2))); };
  for (const Entry& e : m.entries) {
    if (!e.is_tensor) {
      DcpRankWriter& rw = w.rank(rank_of(src.storage(e).relative_path));
      if (objects) {
        rw.write_object(e.fqn, src.read_object(e));
      } else {
        const std::vector<uint8_t> raw = src.read_bytes(e);
        rw.write_bytes(e.fqn, raw.size(), from(raw));
      }
      continue;
    }
    for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
      std::vector<uint8_t> data(src.chunk_bytes(e, c));
      src.read_chunk(e, c, data.data(), data.size());
      w.rank(rank_of(src.storage(e, c).relative_path))
          .write_tensor(e.fqn, e.tensor.chunks[c].offsets, e.tensor.chunks[c].sizes, from(data));
    }
  }
  w.commit();
}

std::vector<uint8_t> item(const Reader& r, const StorageEntry& s) {
  std::vector<uint8_t> b(s.length);
  r.files().open(s.relative_path)->read(s.offset, b.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("DCP writer: checkpoints of torch and Megatron rewritten item for item", "[dcp][dcp_writer]") {
  struct Case {
    std::string dir;
    bool objects_identical;  // torch.save'd objects re-pickled to torch's very bytes
  };
  // Megatron's optimizer param groups share one betas tuple between groups, which a Value cannot say.
  const std::vector<Case> cases = {{std::string(FPG_TESTDATA_DIR) + "/dcp/torch_save_4ranks", true},
                                   {std::string(FPG_TESTDATA_DIR) + "/dcp/small", true},
                                   {kMegatron + "/dp1-buckets-padded/ckpt", false},
                                   {kMegatron + "/dp1-layerwise-muon/ckpt", false}};
  for (const Case& k : cases) {
    for (const bool objects : {false, true}) {
      CAPTURE(k.dir, objects);
      TempDir tmp;
      const std::string target = tmp.file("out");
      const Reader src(k.dir);
      rewrite(src, target, objects);
      const Reader out(target);
      const Metadata& m = src.metadata();
      REQUIRE(out.metadata().entries.size() == m.entries.size());
      CHECK(TempDir::list_dir(target) == TempDir::list_dir(k.dir));
      if (src.megatron()) CHECK(read_text(target + "/metadata.json") == read_text(k.dir + "/metadata.json"));
      for (size_t i = 0; i < m.entries.size(); ++i) {
        const Entry &a = m.entries[i], &b = out.metadata().entries[i];
        CAPTURE(a.fqn);
        REQUIRE(a.fqn == b.fqn);
        REQUIRE(a.is_tensor == b.is_tensor);
        if (!a.is_tensor) {
          CHECK(out.storage(b).relative_path == src.storage(a).relative_path);
          CHECK(out.read_object(b).repr(1 << 20) == src.read_object(a).repr(1 << 20));
          if (!objects || k.objects_identical) CHECK(item(out, out.storage(b)) == item(src, src.storage(a)));
          continue;
        }
        REQUIRE(a.tensor.chunks.size() == b.tensor.chunks.size());
        for (size_t c = 0; c < a.tensor.chunks.size(); ++c) {
          CHECK(a.tensor.chunks[c].offsets == b.tensor.chunks[c].offsets);
          CHECK(a.tensor.chunks[c].sizes == b.tensor.chunks[c].sizes);
          CHECK(out.storage(b, c).relative_path == src.storage(a, c).relative_path);
          // torch.save's bytes, serialization id included, as the checkpoint's own torch wrote them.
          CHECK(item(out, out.storage(b, c)) == item(src, src.storage(a, c)));
        }
      }
    }
  }
}

TEST_CASE("DCP writer: .metadata pickles and parses back field for field", "[dcp][dcp_writer]") {
  SECTION("every field the model has") {
    Metadata m;
    Entry t;
    t.fqn = "a.weight";
    t.tensor.dtype = &dt("bfloat16");
    t.tensor.size = {4, 2, 3, 3};
    t.tensor.chunks = {{{0, 0, 0, 0}, {2, 2, 3, 3}, 0}, {{2, 0, 0, 0}, {2, 2, 3, 3}, 1}};
    t.tensor.memory_format = "torch.channels_last";
    t.tensor.requires_grad = true;
    t.tensor.pin_memory = true;
    t.tensor.strides = std::vector<int64_t>{18, 1, 6, 2};
    Entry s;
    s.fqn = "step";
    s.tensor.dtype = &dt("int64");
    s.tensor.chunks = {{{}, {}, 2}};
    Entry b;
    b.fqn = "blob";
    b.is_tensor = false;
    b.storage = 3;
    m.entries = {t, s, b};
    m.storage = {{"a.weight", std::vector<uint64_t>{0, 0, 0, 0}, 0, "__0_0.distcp", 0, 100, {}},
                 {"a.weight", std::vector<uint64_t>{2, 0, 0, 0}, std::nullopt, "__1_0.distcp", 0, 120, {"zstd"}},
                 {"step", std::vector<uint64_t>{}, std::nullopt, "__0_0.distcp", 100, 7, {}},
                 {"blob", std::nullopt, std::nullopt, "__0_0.distcp", 107, uint64_t{1} << 40, {}}};
    StorageMetaInfo sm;
    sm.checkpoint_id = "/ckpt";
    sm.load_id = "x";
    sm.modules = {"model", "optim"};
    m.storage_meta = sm;
    m.planner_data = {{"a.weight", {"a", "weight"}}, {"step", {"step"}}, {"blob", {"blob"}}};
    m.extra.emplace("mcore_data", Value::dict({{Value::str("a.weight"), Value::dict({})}}));
    const std::string p = metadata_pickle(m);
    check_same_metadata(parse_metadata("test", reinterpret_cast<const uint8_t*>(p.data()), p.size()), m);
  }
  SECTION("Megatron's .metadata parsed, pickled and parsed again") {
    const Reader r(kMegatron + "/dp1-fully-reshardable/ckpt");
    const std::string p = metadata_pickle(r.metadata());
    check_same_metadata(parse_metadata("test", reinterpret_cast<const uint8_t*>(p.data()), p.size()), r.metadata());
  }
  SECTION("refused: what torch could not read back") {
    Metadata m;
    Entry t;
    t.fqn = "x";
    m.entries = {t};
    CHECK_THROWS_AS(metadata_pickle(m), UsageError);  // no dtype
    m.entries[0].tensor.dtype = &dt("float32");
    m.entries[0].tensor.memory_format = "torch.channels_last_3d";
    CHECK_THROWS_AS(metadata_pickle(m), UsageError);
  }
}

TEST_CASE("DCP writer: refusals, and nothing left behind", "[dcp][dcp_writer]") {
  TempDir tmp;
  const std::string target = tmp.file("ckpt");
  const std::vector<uint8_t> zeros(4096, 0);
  const FillBytes fill = from(zeros);
  auto refused_commit = [&](auto&& write, const std::string& words) {
    {
      DcpWriter w(target);
      w.declare_tensor("t", dt("float32"), {4, 4});
      w.declare_bytes("b");
      write(w);
      try {
        w.commit();
        FAIL("commit() accepted it");
      } catch (const UsageError& e) {
        CAPTURE(e.what());
        CHECK(std::string(e.what()).find(words) != std::string::npos);
      }
    }
    CHECK(tmp.list().empty());  // neither the target nor the staging directory
  };
  SECTION("overlapping chunks") {
    refused_commit([&](DcpWriter& w) {
      w.rank(0).write_tensor("t", {0, 0}, {3, 4}, fill);
      w.rank(1).write_tensor("t", {2, 1}, {1, 1}, fill);
      w.rank(1).write_object("b", Value());
    }, "overlap");
  }
  SECTION("a gap") {
    refused_commit([&](DcpWriter& w) {
      w.rank(0).write_tensor("t", {0, 0}, {4, 2}, fill);
      w.rank(0).write_object("b", Value());
    }, "no chunk covers offsets [0, 2] sizes [4, 2]");
  }
  SECTION("a tensor without chunks") {
    refused_commit([&](DcpWriter& w) { w.rank(0).write_object("b", Value()); }, "no chunks");
  }
  SECTION("a bytes key written twice") {
    refused_commit([&](DcpWriter& w) {
      w.rank(0).write_tensor("t", {0, 0}, {4, 4}, fill);
      w.rank(0).write_object("b", Value());
      w.rank(1).write_object("b", Value());
    }, "written 2 times");
  }
  SECTION("a bytes key never written") {
    refused_commit([&](DcpWriter& w) { w.rank(0).write_tensor("t", {0, 0}, {4, 4}, fill); }, "written 0 times");
  }
  SECTION("a failed item breaks its rank") {
    refused_commit([&](DcpWriter& w) {
      w.rank(0).write_object("b", Value());
      CHECK_THROWS_AS(w.rank(1).write_tensor("t", {0, 0}, {4, 4},
                                             [](uint64_t, void*, size_t) { throw FormatError("source unreadable"); }),
                      FormatError);
      CHECK_THROWS_AS(w.rank(1).write_tensor("t", {0, 0}, {4, 4}, fill), UsageError);
      w.rank(0).write_tensor("t", {0, 0}, {4, 4}, fill);
    }, "rank 1 failed");
  }
  SECTION("writes refused at once") {
    DcpWriter w(target);
    w.declare_tensor("t", dt("float32"), {4, 4});
    w.declare_bytes("b");
    CHECK_THROWS_AS(w.declare_bytes("t"), UsageError);
    CHECK_THROWS_AS(w.declare_bytes(""), UsageError);
    CHECK_THROWS_AS(w.declare_tensor("huge", dt("float32"), {uint64_t{1} << 40, uint64_t{1} << 40}), UsageError);
    CHECK_THROWS_AS(w.rank(0).write_tensor("nope", {0, 0}, {1, 1}, fill), UsageError);
    CHECK_THROWS_AS(w.rank(0).write_tensor("t", {0}, {4}, fill), UsageError);
    CHECK_THROWS_AS(w.rank(0).write_tensor("t", {3, 0}, {2, 4}, fill), UsageError);
    CHECK_THROWS_AS(w.rank(0).write_tensor("b", {}, {}, fill), UsageError);
    CHECK_THROWS_AS(w.rank(0).write_object("t", Value()), UsageError);
    CHECK_THROWS_AS(w.rank(0).write_bytes("t", 1, fill), UsageError);
    // None of these broke the rank: it still takes items.
    w.rank(0).write_tensor("t", {0, 0}, {4, 4}, fill);
  }
  SECTION("an existing target") {
    std::ofstream(target) << "x";
    CHECK_THROWS_AS(DcpWriter(target), UsageError);
    CHECK(tmp.list() == std::set<std::string>{"ckpt"});
  }
}
