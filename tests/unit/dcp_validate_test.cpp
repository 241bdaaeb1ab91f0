// DCP validation with interval precision: the box coverage sweep on constructed layouts, metadata
// decoding errors that name the field, and the hand-broken metadata of testdata/dcp/broken.
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "catch.h"
#include "core/error.h"
#include "dcp_test_util.h"
#include "formats/dcp/metadata/box_coverage.h"
#include "formats/dcp/dcp_params.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/metadata/metadata.h"
#include "formats/dcp/validate.h"

using namespace fpg;
using namespace fpg::dcp;
using namespace fpg::dcptest;
using ckpt::ProblemKind;

namespace {

using V = std::vector<uint64_t>;

std::vector<std::string> issues(const V& shape, const std::vector<Box>& boxes) {
  std::vector<std::string> out;
  const CoverageResult r = check_box_coverage(shape, boxes);
  for (const CoverageIssue& is : r.issues)
    out.push_back((is.kind == CoverageIssue::Kind::gap ? std::string("gap ")
                                                       : "overlap " + std::to_string(is.a) + "," + std::to_string(is.b) + " ") +
                  box_string(is.box.offsets, is.box.sizes));
  return out;
}

Metadata parse_file(const std::string& path) {
  const auto b = sttest::read_bytes(path);
  return parse_metadata(path, b.data(), b.size());
}

std::vector<std::string> problems_of(const std::string& broken) {
  std::vector<ckpt::Problem> ps = check_metadata(parse_file(fixture("broken/" + broken + ".metadata")));
  ckpt::sort_problems(ps);
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(ckpt::to_string(p));
  return out;
}

// A minimal Metadata pickle: one 1-D float32 tensor "w" of `size` with the given chunks (offsets,
// sizes as raw pickle fragments), and a storage entry for each chunk in `stored`.
const char* kMeta = "torch.distributed.checkpoint.metadata";

Pickle& size_of(Pickle& p, const V& dims) {
  p.stack_global("torch", "Size").raw("(");
  for (uint64_t d : dims) p.int1(static_cast<int>(d));
  return p.raw("t\x85R");
}

// `storage_order`, when given, lists the chunks whose storage entries are written, in that order
// (repeats and omissions allowed); otherwise every chunk's, in chunk order.
std::string metadata_pickle(const V& size, const std::vector<std::pair<V, V>>& chunks, bool with_storage,
                            const std::string& chunk_sizes_override = "", const std::string& extra_field = "",
                            std::vector<size_t> storage_order = {}, const std::string& relative_path = "__0_0.distcp") {
  Pickle p;
  p.proto().stack_global(kMeta, "Metadata").raw(")\x81").raw("}").raw("(");
  p.str("state_dict_metadata").raw("}").str("w").stack_global(kMeta, "TensorStorageMetadata").raw(")\x81").raw("}(");
  p.str("properties").stack_global(kMeta, "TensorProperties").raw(")\x81");
  p.raw("(").stack_global("torch", "float32").stack_global("torch.serialization", "_get_layout").str("torch.strided")
      .raw("\x85R").raw("\x89").stack_global(kMeta, "_MEM_FORMAT_ENCODING").int1(0).raw("\x85R").raw("\x89N").raw("tb");
  p.str("size");
  size_of(p, size);
  if (!extra_field.empty()) p.str(extra_field).int1(1);
  p.str("chunks").raw("]");
  for (const auto& [off, sz] : chunks) {
    p.stack_global(kMeta, "ChunkStorageMetadata").raw(")\x81}(").str("offsets");
    size_of(p, off);
    p.str("sizes");
    if (chunk_sizes_override.empty())
      size_of(p, sz);
    else
      p.raw(chunk_sizes_override);
    p.raw("ub").raw("a");
  }
  p.raw("ub").raw("s");  // TensorStorageMetadata state, then w: ... into state_dict_metadata
  p.str("storage_data").raw("}");
  if (with_storage && storage_order.empty())
    for (size_t i = 0; i < chunks.size(); ++i) storage_order.push_back(i);
  if (with_storage)
    for (size_t i : storage_order) {
      const V& off = chunks[i].first;
      p.stack_global(kMeta, "MetadataIndex").raw(")\x81}(").str("fqn").str("w").str("offset");
      size_of(p, off);
      p.raw("ub").stack_global("torch.distributed.checkpoint.filesystem", "_StorageInfo").raw(")\x81}(")
          .str("relative_path").str(relative_path).str("offset").int1(0).str("length").int1(10).raw("ub").raw("s");
    }
  p.str("mcore_data").raw("}").str("w").str("x").raw("s");
  p.raw("ub").stop();
  return p.bytes();
}

Metadata parse_string(const std::string& b) {
  return parse_metadata("m/.metadata", reinterpret_cast<const uint8_t*>(b.data()), b.size());
}

}  // namespace

TEST_CASE("box coverage: 1-D gaps and overlaps as exact ranges", "[dcp][validate]") {
  CHECK(issues({10}, {{{0}, {4}}, {{4}, {6}}}).empty());
  CHECK(issues({10}, {{{0}, {3}}, {{5}, {5}}}) == std::vector<std::string>{"gap [3:5]"});
  CHECK(issues({10}, {{{0}, {6}}, {{4}, {6}}}) == std::vector<std::string>{"overlap 0,1 [4:6]"});
  CHECK(issues({10}, {{{2}, {3}}}) == std::vector<std::string>{"gap [0:2]", "gap [5:10]"});
  CHECK(issues({10}, {{{0}, {10}}, {{2}, {1}}, {{5}, {1}}}) ==
        std::vector<std::string>{"overlap 0,1 [2:3]", "overlap 0,2 [5:6]"});
  CHECK(issues({10}, {}) == std::vector<std::string>{"gap [0:10]"});
  // Zero-volume chunks cover nothing and overlap nothing (DCP's uneven shards end with one).
  CHECK(issues({10}, {{{0}, {10}}, {{10}, {0}}, {{3}, {0}}}).empty());
  CHECK(issues({0}, {}).empty());
}

TEST_CASE("box coverage: grids, slabs and scalars in n dimensions", "[dcp][validate]") {
  const std::vector<Box> grid = {{{0, 0}, {2, 3}}, {{0, 3}, {2, 3}}, {{2, 0}, {2, 3}}, {{2, 3}, {2, 3}}};
  CHECK(issues({4, 6}, grid).empty());
  std::vector<Box> hole = grid;
  hole.pop_back();
  CHECK(issues({4, 6}, hole) == std::vector<std::string>{"gap [2:4, 3:6]"});
  std::vector<Box> shifted = grid;
  shifted[3].offsets = {1, 3};
  CHECK(issues({4, 6}, shifted) == std::vector<std::string>{"overlap 1,3 [1:2, 3:6]", "gap [3:4, 3:6]"});
  // Column shards spanning all rows, and a 3-D layout with one missing corner.
  CHECK(issues({3, 4}, {{{0, 0}, {3, 1}}, {{0, 1}, {3, 3}}}).empty());
  std::vector<Box> cube;
  for (uint64_t a : {0, 1})
    for (uint64_t b : {0, 1})
      for (uint64_t c : {0, 2})
        if (!(a == 1 && b == 1 && c == 2)) cube.push_back({{a, b, c}, {1, 1, 2}});
  CHECK(issues({2, 2, 4}, cube) == std::vector<std::string>{"gap [1:2, 1:2, 2:4]"});
  // A box inside another.
  CHECK(issues({4, 4}, {{{0, 0}, {4, 4}}, {{1, 1}, {2, 2}}}) == std::vector<std::string>{"overlap 0,1 [1:3, 1:3]"});
  // Scalars: one chunk covers, none leaves a gap, two overlap.
  CHECK(issues({}, {{{}, {}}}).empty());
  CHECK(issues({}, {}) == std::vector<std::string>{"gap []"});
  CHECK(issues({}, {{{}, {}}, {{}, {}}}) == std::vector<std::string>{"overlap 0,1 []"});
}

TEST_CASE("box coverage: issue cap and work budget", "[dcp][validate]") {
  std::vector<Box> holes;
  for (uint64_t i = 0; i < 300; ++i) holes.push_back({{2 * i}, {1}});
  const CoverageResult capped = check_box_coverage({600}, holes, 100);
  CHECK(capped.issues.size() == 100);
  CHECK(capped.more_gaps == 200);
  // Long boxes over many short ones in dimension 0 exceed a small budget; the result says so.
  std::vector<Box> stripes;
  for (uint64_t i = 0; i < 200; ++i) stripes.push_back({{i, 0}, {1, 1}});
  for (uint64_t j = 1; j < 200; ++j) stripes.push_back({{0, j}, {200, 1}});
  const CoverageResult cut = check_box_coverage({200, 200}, stripes, 100, 1000);
  CHECK(cut.budget_exceeded);
  const CoverageResult full = check_box_coverage({200, 200}, stripes);
  CHECK_FALSE(full.budget_exceeded);
  CHECK(full.issues.empty());
}

TEST_CASE("box coverage: row-major runs that tile are recognised before any sweep", "[dcp][validate]") {
  // With no work budget the sweep stops at once, so a result that did not exceed it came from the
  // one-pass check of runs.
  auto by_runs = [](const V& shape, const std::vector<Box>& boxes) {
    const CoverageResult r = check_box_coverage(shape, boxes, 100, 0);
    return !r.budget_exceeded && r.issues.empty();
  };
  // Row blocks of a matrix, in any order, with a zero-volume chunk; runs inside rows and across them.
  CHECK(by_runs({6, 4}, {{{4, 0}, {2, 4}}, {{0, 0}, {3, 4}}, {{6, 0}, {0, 4}}, {{3, 0}, {1, 4}}}));
  CHECK(by_runs({2, 4}, {{{0, 0}, {1, 2}}, {{0, 2}, {1, 2}}, {{1, 0}, {1, 4}}}));
  CHECK(by_runs({2, 3, 4}, {{{0, 0, 0}, {1, 3, 4}}, {{1, 1, 0}, {1, 2, 4}}, {{1, 0, 0}, {1, 1, 4}}}));
  CHECK(by_runs({}, {{{}, {}}}));
  // Column shards are not runs, and runs that leave a gap or overlap do not tile: the sweep decides
  // and names the boxes.
  CHECK_FALSE(by_runs({3, 4}, {{{0, 0}, {3, 1}}, {{0, 1}, {3, 3}}}));
  CHECK(issues({3, 4}, {{{0, 0}, {3, 1}}, {{0, 1}, {3, 3}}}).empty());
  CHECK_FALSE(by_runs({10}, {{{0}, {4}}, {{5}, {5}}}));
  CHECK(issues({10}, {{{0}, {4}}, {{5}, {5}}}) == std::vector<std::string>{"gap [4:5]"});
  CHECK(issues({4, 2}, {{{0, 0}, {3, 2}}, {{2, 0}, {2, 2}}}) == std::vector<std::string>{"overlap 0,1 [2:3, 0:2]"});
  CHECK(issues({4, 2}, {{{0, 0}, {1, 2}}, {{1, 0}, {2, 2}}}) == std::vector<std::string>{"gap [3:4, 0:2]"});
}

TEST_CASE("dcp metadata: a hand-built pickle decodes; fields of the wrong type are named", "[dcp][metadata]") {
  const Metadata m = parse_string(metadata_pickle({8}, {{{0}, {4}}, {{4}, {4}}}, true));
  REQUIRE(m.entries.size() == 1);
  CHECK(m.entries[0].tensor.chunks.size() == 2);
  CHECK(m.entries[0].tensor.chunks[1].storage == 1);
  CHECK(m.storage[1].relative_path == "__0_0.distcp");
  CHECK(m.extra.at("mcore_data").repr() == "{'w': 'x'}");
  CHECK(check_metadata(m).empty());

  const Metadata unstored = parse_string(metadata_pickle({8}, {{{0}, {8}}}, false));
  CHECK(unstored.entries[0].tensor.chunks[0].storage == kNoStorage);
  const auto ps = check_metadata(unstored);
  REQUIRE(ps.size() == 1);
  CHECK(ckpt::to_string(ps[0]) == "missing_file w [0, 8) -: chunk 0 [0:8] has no storage_data entry");

  const Metadata noted = parse_string(metadata_pickle({8}, {{{0}, {8}}}, true, "", "planner_hint"));
  CHECK(noted.notes == std::vector<std::string>{"ignored field 'planner_hint' of TensorStorageMetadata"});

  CHECK(format_error([] { parse_string(metadata_pickle({8}, {{{0}, {8}}}, true, Pickle().str("bad").bytes())); }) ==
        "m/.metadata: state_dict_metadata['w'].chunks[0].sizes: expected torch.Size, found str");
  CHECK(contains(format_error([] {
                   parse_string(metadata_pickle({8}, {{{0}, {8}}}, true, Pickle().raw("]").str("a").raw("a").bytes()));
                 }),
                 "chunks[0].sizes[0]: expected int, found str"));
  CHECK(contains(format_error([] {
                   parse_string(metadata_pickle({8}, {{{0}, {8}}}, true,
                                                Pickle().stack_global("torch", "Size").raw("J").le(0xFFFFFFFF, 4)
                                                    .raw("\x85\x85R").bytes()));
                 }),
                 "chunks[0].sizes[0]: is negative (-1)"));
  // Not a Metadata at all.
  CHECK(format_error([] { parse_string(Pickle().proto().int1(1).stop().bytes()); }) ==
        "m/.metadata: root: expected torch.distributed.checkpoint.metadata.Metadata, found int");
}

TEST_CASE("dcp metadata: field renames in a real .metadata are caught", "[dcp][metadata]") {
  const auto bytes = sttest::read_bytes(fixture("small/.metadata"));
  auto renamed = [&](const std::string& from, const std::string& to) {
    std::string b(bytes.begin(), bytes.end());
    const size_t at = b.find(from);
    REQUIRE(at != std::string::npos);
    b.replace(at, from.size(), to);
    return format_error([&] { parse_string(b); });
  };
  CHECK(contains(renamed("relative_path", "relative_xxxx"), "_StorageInfo without relative_path"));
  CHECK(contains(renamed("chunks", "chunkz"), "TensorStorageMetadata without chunks"));
  CHECK(contains(renamed("bfloat16", "bfloat17"), "pickle global 'torch.bfloat17' is not allowed"));
  CHECK(contains(renamed("_StorageInfo", "_StorageInfX"),
                 "global 'torch.distributed.checkpoint.filesystem._StorageInfX' is not allowed"));
  CHECK(contains(renamed("state_dict_metadata", "state_dict_metadatX"), "Metadata: no state_dict_metadata"));
}

TEST_CASE("dcp validate: the hand-broken metadata files", "[dcp][validate]") {
  CHECK(problems_of("chunk_gap") ==
        std::vector<std::string>{"gap extra.grid2d [15, 24) -: [2:4, 3:6] is covered by no chunk"});
  CHECK(problems_of("overlap") ==
        std::vector<std::string>{
            "overlap extra.rows_i64 [2, 4) -: chunk 0 [0:2, 0:2] and chunk 1 [1:3, 0:2] overlap in [1:2, 0:2]",
            "missing_file extra.rows_i64 [2, 6) -: chunk 1 [1:3, 0:2] has no storage_data entry",
            "gap extra.rows_i64 [6, 8) -: [3:4, 0:2] is covered by no chunk"});
  CHECK(problems_of("arity") ==
        std::vector<std::string>{
            "shape extra.rows_i64 [0, 0) -: chunk 0 has offsets [0, 0, 0] and sizes [2, 2] for a "
            "2-dimensional tensor of size [5, 2]",
            "gap extra.rows_i64 [0, 4) -: [0:2, 0:2] is covered by no chunk"});
  CHECK(problems_of("past_end") ==
        std::vector<std::string>{"out_of_bounds model.0.bias [8, 72) -: chunk 1 [8:72] lies outside the tensor's size [8]",
                                 "missing_file model.0.bias [8, 72) -: chunk 1 [8:72] has no storage_data entry"});
  CHECK(problems_of("no_storage") ==
        std::vector<std::string>{"missing_file extra.grid3d [0, 22) -: chunk 0 [0:2, 0:3, 0:2] has no storage_data entry"});
}

TEST_CASE("dcp metadata: repeated keys, bytes entries and other planner data", "[dcp][metadata]") {
  // Two chunks at the same offsets: one storage key twice (the last wins, as in Python's dict), and
  // the chunks overlap.
  const Metadata dup = parse_string(metadata_pickle({4}, {{{0}, {4}}, {{0}, {4}}}, true));
  CHECK(dup.duplicate_storage_keys == 1);
  CHECK(dup.entries[0].tensor.chunks[0].storage == 1);
  CHECK(dup.entries[0].tensor.chunks[1].storage == 1);
  const auto ps = check_metadata(dup);
  REQUIRE(ps.size() == 1);
  CHECK(ckpt::to_string(ps[0]) == "overlap w [0, 4) __0_0.distcp: chunk 0 [0:4] and chunk 1 [0:4] overlap in [0:4]");

  // Storage entries in another order than the chunks, increasing or not, repeated or missing: each
  // chunk finds the last entry of its offsets.
  const std::vector<std::pair<V, V>> four = {{{4}, {2}}, {{0}, {2}}, {{2}, {2}}, {{6}, {2}}};
  auto storage_of = [&](const std::vector<size_t>& order) {
    const Metadata m = parse_string(metadata_pickle({8}, four, true, "", "", order));
    std::vector<int64_t> out;
    for (const ChunkMeta& c : m.entries[0].tensor.chunks) out.push_back(c.storage);
    out.push_back(static_cast<int64_t>(m.duplicate_storage_keys));
    return out;
  };
  CHECK(storage_of({1, 2, 0, 3}) == std::vector<int64_t>{2, 0, 1, 3, 0});  // offsets 0, 2, 4, 6
  CHECK(storage_of({3, 0, 2, 1}) == std::vector<int64_t>{1, 3, 2, 0, 0});
  CHECK(storage_of({2, 0, 2, 3}) == std::vector<int64_t>{1, kNoStorage, 2, 3, 1});

  // A key repeated in state_dict_metadata, a bytes entry without storage, planner_data of another shape.
  auto bytes_meta = [](int keys, bool odd_planner) {
    Pickle p;
    p.proto().stack_global(kMeta, "Metadata").raw(")\x81}(").str("state_dict_metadata").raw("}(");
    for (int i = 0; i < keys; ++i) p.str("b").stack_global(kMeta, "BytesStorageMetadata").raw(")\x81");
    p.raw("u");
    if (odd_planner) p.str("planner_data").raw("}").str("b").int1(7).raw("s");
    return p.raw("ub").stop().bytes();
  };
  CHECK(format_error([&] { parse_string(bytes_meta(2, false)); }) ==
        "m/.metadata: state_dict_metadata['b']: key appears twice");
  const Metadata one = parse_string(bytes_meta(1, true));
  REQUIRE(one.entries.size() == 1);
  CHECK_FALSE(one.entries[0].is_tensor);
  CHECK(one.planner_data.empty());
  CHECK(one.extra.at("planner_data").repr() == "{'b': 7}");
  const auto missing = check_metadata(one);
  REQUIRE(missing.size() == 1);
  CHECK(ckpt::to_string(missing[0]) == "missing_file b [0, 0) -: bytes entry has no storage_data entry");
}

TEST_CASE("dcp params: a storage file naming a rank beyond the most ranks is refused, not sized by", "[dcp][metadata]") {
  namespace stdfs = std::filesystem;
  const stdfs::path dir = stdfs::temp_directory_path() / ("fpg-dcp-rank-" + std::to_string(::getpid()));
  for (const std::string& name : {std::string("__99999999_0.distcp"), std::string("__1048576_0.distcp")}) {
    INFO(name);
    stdfs::remove_all(dir);
    stdfs::create_directories(dir);
    std::ofstream(dir / ".metadata", std::ios::binary) << metadata_pickle({10}, {{{0}, {10}}}, true, "", "", {}, name);
    std::ofstream(dir / name, std::ios::binary) << std::string(10, '\0');
    const dcp::Reader reader(dir.string());
    try {
      const dcp::DcpParams params(reader);
      FAIL("opened");
    } catch (const FormatError& e) {
      CHECK(std::string(e.what()).find("beyond the 1048576 ranks") != std::string::npos);
    }
  }
  stdfs::remove_all(dir);
}
