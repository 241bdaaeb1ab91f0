// The model-parallel ranks of a Megatron checkpoint recovered from its model keys' chunks
// (formats/dcp/megatron/megatron_parallel.h): TP inferred, each rank's local pieces (gated linear_fc1
// as [w_i; v_i]), pipeline stages and expert-parallel ranks, and chunks that no TP split explains.
// The real checkpoints of testdata/megatron/parallel are covered by tests/interop/test_megatron_parallel.py.
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "formats/dcp/megatron/megatron_parallel.h"
#include "safetensors_test_util.h"

using namespace fpg;
using namespace fpg::dcp;
using fpg::sttest::format_error;

namespace {

// The chunks of a key of `shape` cut into `n` equal pieces along `axis`.
std::vector<Box> split(const std::vector<uint64_t>& shape, size_t axis, uint64_t n) {
  std::vector<Box> out;
  for (uint64_t i = 0; i < n; ++i) {
    Box b{std::vector<uint64_t>(shape.size(), 0), shape};
    b.sizes[axis] = shape[axis] / n;
    b.offsets[axis] = i * b.sizes[axis];
    out.push_back(b);
  }
  return out;
}

// The same per stacked layer (axis 0 of the key is the layer axis; `axis` counts in the parameter).
std::vector<Box> split_layers(const std::vector<uint64_t>& shape, size_t axis, uint64_t n) {
  std::vector<Box> out;
  for (uint64_t l = 0; l < shape[0]; ++l)
    for (Box b : split(shape, axis + 1, n)) {
      b.sizes[0] = 1;
      b.offsets[0] = l;
      out.push_back(b);
    }
  return out;
}

// A two-layer GPT at TP 2: embedding split by rows, qkv by rows, proj and fc2 by columns, a gated fc1
// stored as [w_0, w_1, v_0, v_1], the norms replicated.
std::vector<ModelKey> gpt_tp2(uint64_t layers = 2) {
  std::vector<ModelKey> k;
  k.push_back({"module.embedding.word_embeddings.weight", DType::BF16, {64, 8}, split({64, 8}, 0, 2)});
  k.push_back({"module.decoder.layers.self_attention.linear_qkv.layer_norm_weight", DType::F32, {layers, 8},
               split_layers({layers, 8}, 0, 1)});
  k.push_back({"module.decoder.layers.self_attention.linear_qkv.weight", DType::BF16, {layers, 24, 8},
               split_layers({layers, 24, 8}, 0, 2)});
  k.push_back({"module.decoder.layers.self_attention.linear_proj.weight", DType::BF16, {layers, 8, 16},
               split_layers({layers, 8, 16}, 1, 2)});
  k.push_back({"module.decoder.layers.mlp.linear_fc1.weight", DType::BF16, {layers, 32, 8},
               split_layers({layers, 32, 8}, 0, 4)});
  k.push_back({"module.decoder.layers.mlp.linear_fc2.weight", DType::BF16, {layers, 8, 16},
               split_layers({layers, 8, 16}, 1, 2)});
  k.push_back({"module.decoder.final_layernorm.weight", DType::F32, {8}, split({8}, 0, 1)});
  return k;
}

const LocalParam& find(const std::vector<LocalParam>& ps, const std::string& name) {
  for (const LocalParam& p : ps)
    if (p.local.name == name) return p;
  FAIL("no local parameter " << name);
  return ps.front();
}

std::vector<std::string> names(const std::vector<LocalParam>& ps) {
  std::vector<std::string> out;
  for (const LocalParam& p : ps) out.push_back(p.local.name);
  return out;
}

}  // namespace

TEST_CASE("ParallelModel: TP inferred from the split parameters, local pieces per rank", "[dcp][megatron]") {
  const std::vector<MegatronParam> params = megatron_params(gpt_tp2());
  const ParallelModel model(params);
  CHECK(model.tp() == 2);
  CHECK(model.layers() == 2);
  CHECK_FALSE(model.has_experts());

  const std::vector<LocalParam> r1 = model.dense_rank(1, 0, 2, true, true);
  CHECK(r1.size() == params.size());
  const LocalParam& emb = find(r1, "embedding.word_embeddings.weight");
  CHECK(emb.local.shape == std::vector<uint64_t>{32, 8});
  REQUIRE(emb.pieces.size() == 1);
  CHECK(emb.pieces[0].box.offsets == std::vector<uint64_t>{32, 0});
  const LocalParam& proj = find(r1, "decoder.layers.1.self_attention.linear_proj.weight");
  CHECK(proj.local.shape == std::vector<uint64_t>{8, 8});
  CHECK(proj.pieces[0].box.offsets == std::vector<uint64_t>{0, 8});
  // Gated fc1: rank 1 holds w_1 (rows [8, 16)) then v_1 (rows [24, 32)).
  const LocalParam& fc1 = find(r1, "decoder.layers.0.mlp.linear_fc1.weight");
  CHECK(fc1.local.shape == std::vector<uint64_t>{16, 8});
  REQUIRE(fc1.pieces.size() == 2);
  CHECK(fc1.pieces[0].box.offsets == std::vector<uint64_t>{8, 0});
  CHECK(fc1.pieces[0].local_start == 0);
  CHECK(fc1.pieces[1].box.offsets == std::vector<uint64_t>{24, 0});
  CHECK(fc1.pieces[1].local_start == 64);
  CHECK(find(r1, "decoder.final_layernorm.weight").whole());
  CHECK_FALSE(fc1.whole());
}

TEST_CASE("ParallelModel: pipeline stages hold their layers, the embedding first, the head last",
          "[dcp][megatron]") {
  const std::vector<MegatronParam> params = megatron_params(gpt_tp2(3));
  const ParallelModel model(params);
  const std::vector<std::string> first = names(model.dense_rank(0, 0, 1, true, false));
  const std::vector<std::string> last = names(model.dense_rank(0, 1, 2, false, true));
  CHECK(first.front() == "embedding.word_embeddings.weight");
  CHECK(first.size() == 1 + 5);
  // No output layer key: the output layer is tied to the embedding, and the last stage holds a copy
  // of it after the final norm, each in a bucket of its own (Megatron's shared embedding).
  CHECK(model.tied_output());
  REQUIRE(last.size() == 2 * 5 + 2);
  CHECK(last.front() == "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight");
  CHECK(last[last.size() - 2] == "decoder.final_layernorm.weight");
  CHECK(last.back() == "output_layer.weight");
  const std::vector<LocalParam> last_params = model.dense_rank(1, 1, 2, false, true);
  CHECK(last_params.back().param == 0);  // the embedding's TP piece of rank 1
  CHECK(last_params.back().local.own_bucket);
  CHECK(last_params.back().pieces[0].box.offsets == std::vector<uint64_t>{32, 0});
  CHECK(model.dense_rank(0, 0, 1, true, false).front().local.own_bucket);
  // At PP 1 the one stage holds the embedding once, in the buckets as any parameter.
  const std::vector<LocalParam> only = model.dense_rank(0, 0, 3, true, true);
  CHECK(only.size() == 1 + 3 * 5 + 1);
  CHECK_FALSE(only.front().local.own_bucket);

  // With an output layer key nothing is tied.
  std::vector<ModelKey> untied = gpt_tp2(3);
  untied.push_back({"module.output_layer.weight", DType::BF16, {64, 8}, split({64, 8}, 0, 2)});
  const std::vector<MegatronParam> uparams = megatron_params(untied);
  const ParallelModel umodel(uparams);
  CHECK_FALSE(umodel.tied_output());
  const std::vector<std::string> ulast = names(umodel.dense_rank(0, 1, 2, false, true));
  CHECK(ulast.back() == "output_layer.weight");
  CHECK(ulast[ulast.size() - 2] == "decoder.final_layernorm.weight");
  CHECK_FALSE(umodel.dense_rank(0, 0, 1, true, false).front().local.own_bucket);
}

TEST_CASE("ParallelModel: experts per expert-parallel rank, sequential or grouped", "[dcp][megatron]") {
  std::vector<ModelKey> keys;
  keys.push_back({"module.embedding.word_embeddings.weight", DType::BF16, {16, 4}, split({16, 4}, 0, 1)});
  keys.push_back({"module.decoder.layers.mlp.router.weight", DType::F32, {1, 4, 4}, split_layers({1, 4, 4}, 0, 1)});
  std::vector<Box> fc1, fc2;
  for (uint64_t e = 0; e < 4; ++e) {  // each expert's gated fc1 as its w and v halves
    fc1.push_back({{0, e, 0, 0}, {1, 1, 4, 4}});
    fc1.push_back({{0, e, 4, 0}, {1, 1, 4, 4}});
    fc2.push_back({{0, e, 0, 0}, {1, 1, 4, 4}});
  }
  keys.push_back({"module.decoder.layers.mlp.experts.experts.linear_fc1.weight", DType::BF16, {1, 4, 8, 4}, fc1});
  keys.push_back({"module.decoder.layers.mlp.experts.experts.linear_fc2.weight", DType::BF16, {1, 4, 4, 4}, fc2});
  const std::vector<MegatronParam> params = megatron_params(keys);
  const ParallelModel model(params);
  CHECK(model.experts() == 4);
  CHECK(model.expert_tp() == 1);
  // Dense ranks skip the experts.
  CHECK(names(model.dense_rank(0, 0, 1, true, true)) ==
        std::vector<std::string>{"embedding.word_embeddings.weight", "decoder.layers.0.mlp.router.weight"});
  const std::string p = "decoder.layers.0.mlp.experts.experts.";
  CHECK(names(model.expert_rank(0, 1, 2, 0, 1, ExpertOrder::sequential)) ==
        std::vector<std::string>{p + "2.linear_fc1.weight", p + "2.linear_fc2.weight", p + "3.linear_fc1.weight",
                                 p + "3.linear_fc2.weight"});
  CHECK(names(model.expert_rank(0, 1, 2, 0, 1, ExpertOrder::grouped)) ==
        std::vector<std::string>{p + "2.linear_fc1.weight", p + "3.linear_fc1.weight", p + "2.linear_fc2.weight",
                                 p + "3.linear_fc2.weight"});
  CHECK_THROWS_AS(model.expert_rank(0, 0, 3, 0, 1, ExpertOrder::sequential), FormatError);
  // At EP 1 the experts are dense parameters, registered after the router in either order.
  CHECK(names(model.dense_rank(0, 0, 1, true, true, ExpertOrder::sequential)) ==
        std::vector<std::string>{"embedding.word_embeddings.weight", "decoder.layers.0.mlp.router.weight",
                                 p + "0.linear_fc1.weight", p + "0.linear_fc2.weight", p + "1.linear_fc1.weight",
                                 p + "1.linear_fc2.weight", p + "2.linear_fc1.weight", p + "2.linear_fc2.weight",
                                 p + "3.linear_fc1.weight", p + "3.linear_fc2.weight"});
  CHECK(names(model.dense_rank(0, 0, 1, true, true, ExpertOrder::grouped))[2] == p + "0.linear_fc1.weight");
  CHECK(names(model.dense_rank(0, 0, 1, true, true, ExpertOrder::grouped))[3] == p + "1.linear_fc1.weight");

  // Cut for expert TP 2: each expert's gated fc1 into [w_0, w_1, v_0, v_1] along its rows, fc2 along
  // its columns; the router stays whole.
  const std::vector<MegatronParam> cut = tensor_parallel_params(params, 1, 2, 1, 2);
  const ParallelModel cut_model(cut);
  CHECK(cut_model.expert_tp() == 2);
  const std::vector<LocalParam> rank1 = cut_model.expert_rank(1, 0, 1, 0, 1, ExpertOrder::sequential);
  const LocalParam& fc1_0 = find(rank1, p + "0.linear_fc1.weight");
  CHECK(fc1_0.local.shape == std::vector<uint64_t>{4, 4});
  REQUIRE(fc1_0.pieces.size() == 2);
  CHECK(fc1_0.pieces[0].box.offsets == std::vector<uint64_t>{2, 0});  // w_1
  CHECK(fc1_0.pieces[1].box.offsets == std::vector<uint64_t>{6, 0});  // v_1
  const LocalParam& fc2_0 = find(rank1, p + "0.linear_fc2.weight");
  CHECK(fc2_0.pieces.at(0).box.offsets == std::vector<uint64_t>{0, 2});
  CHECK(fc2_0.local.shape == std::vector<uint64_t>{4, 2});
  CHECK(find(cut_model.dense_rank(1, 0, 1, true, true), "decoder.layers.0.mlp.router.weight").whole());
}

TEST_CASE("ParallelModel: chunks no tensor-parallel split explains are a format error", "[dcp][megatron]") {
  SECTION("three pieces of a TP 2 parameter") {
    std::vector<ModelKey> keys = gpt_tp2();
    keys[2].chunks = split_layers({2, 24, 8}, 0, 3);
    const std::vector<MegatronParam> params = megatron_params(keys);
    const ParallelModel model(params);
    CHECK(format_error([&] { model.dense_rank(0, 0, 2, true, true); }).find("do not split over 2") !=
          std::string::npos);
  }
  SECTION("pieces cut along two axes") {
    std::vector<ModelKey> keys = gpt_tp2();
    keys[0].chunks = {{{0, 0}, {32, 8}}, {{32, 4}, {32, 4}}};
    const std::vector<MegatronParam> params = megatron_params(keys);
    const ParallelModel model(params);
    CHECK(format_error([&] { model.dense_rank(0, 0, 2, true, true); }).find("more than one axis") != std::string::npos);
  }
  SECTION("one chunk that is not the whole parameter") {
    std::vector<ModelKey> keys = gpt_tp2();
    keys[6].chunks = {{{0}, {4}}};
    const std::vector<MegatronParam> params = megatron_params(keys);
    const ParallelModel model(params);
    CHECK(format_error([&] { model.dense_rank(0, 0, 2, true, true); }).find("not the whole shape") != std::string::npos);
  }
}
