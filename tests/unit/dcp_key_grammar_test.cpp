// The stored-name grammars (megatron/megatron_keys.h, checkpoint_dir.h's rank files): accepted
// exactly as written, everything else refused, in linear time.
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "formats/dcp/checkpoint_dir.h"
#include "formats/dcp/megatron/megatron_keys.h"

using namespace fpg::dcp;

TEST_CASE("key grammar: bucket keys", "[dcp][megatron][keys]") {
  const auto k = parse_bucket_key(
      "chained_1.optimizer.distributed.dp_group_idx_12.gbuf_idx_3.dtype_(torch.bfloat16, torch.float32).bucket_idx_40.exp_avg_sq");
  REQUIRE(k);
  CHECK(k->group == "chained_1.optimizer.distributed.dp_group_idx_12");
  CHECK(k->gbuf == 3);
  CHECK(k->param_dtype == "bfloat16");
  CHECK(k->grad_dtype == "float32");
  CHECK(k->bucket == 40);
  CHECK(k->state == "exp_avg_sq");
  CHECK(bucket_key_name(k->group, 3, fpg::DType::BF16, fpg::DType::F32, 40, "exp_avg_sq") ==
        "chained_1.optimizer.distributed.dp_group_idx_12.gbuf_idx_3.dtype_(torch.bfloat16, torch.float32).bucket_idx_40.exp_avg_sq");
  const std::string good = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32).bucket_idx_0.param";
  CHECK(parse_bucket_key(good));
  for (const std::string& bad : std::vector<std::string>{
           good + ".x", good + " ", "x" + good, good.substr(0, good.size() - 6),
           "optimizer.distributed.dp_group_idx_.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32).bucket_idx_0.param",
           "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.bfloat16,torch.float32).bucket_idx_0.param",
           "optimizer.distributed.dp_group_idx_0.gbuf_idx_1234567890.dtype_(torch.bfloat16, torch.float32).bucket_idx_0.param",
           "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.bf-16, torch.float32).bucket_idx_0.param",
           "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32).bucket_idx_0.pa.ram",
           "chained_.optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32).bucket_idx_0.param",
       })
    CHECK_FALSE(parse_bucket_key(bad));
}

TEST_CASE("key grammar: group names and model-space state keys", "[dcp][megatron][keys]") {
  auto g = parse_group_name("optimizer.distributed.dp_group_idx_7");
  REQUIRE(g);
  CHECK_FALSE(g->chained);
  CHECK(g->dp_group == 7);
  g = parse_group_name("chained_1.optimizer.distributed.dp_group_idx_0");
  REQUIRE(g);
  CHECK(*g->chained == 1);
  CHECK_FALSE(parse_group_name("optimizer.distributed.dp_group_idx_7.x"));
  CHECK_FALSE(parse_group_name("chained_1234567890.optimizer.distributed.dp_group_idx_0"));

  auto m = parse_model_space_state_key("optimizer.state.exp_avg.module.decoder.layers.mlp.linear_fc1.weight");
  REQUIRE(m);
  CHECK(m->state == "exp_avg");
  CHECK(m->model_key == "module.decoder.layers.mlp.linear_fc1.weight");
  m = parse_model_space_state_key("chained_0.optimizer.state.fp32_param.embedding.word_embeddings.weight");
  REQUIRE(m);
  CHECK(m->state == "fp32_param");
  CHECK(model_space_state_key("param", "output_layer.weight") == "optimizer.state.param.output_layer.weight");
  CHECK_FALSE(parse_model_space_state_key("optimizer.state.exp_avg."));
  CHECK_FALSE(parse_model_space_state_key("optimizer.state..w"));
  CHECK_FALSE(parse_model_space_state_key("optimizer.state.exp_avg.a\nb"));
  CHECK_FALSE(parse_model_space_state_key("optimizer.stateexp_avg.w"));
}

TEST_CASE("key grammar: rank files", "[dcp][keys]") {
  CHECK(storage_file_rank("__0_0.distcp") == 0u);
  CHECK(storage_file_rank("__2047_3.distcp") == 2047u);
  for (const char* bad : {"_0_0.distcp", "__0_0.distcpx", "__a_0.distcp", "__0_.distcp", "__0_0.dist", "x__0_0.distcp",
                          "__0__0.distcp", "__0_0.distcp/", ".metadata"})
    CHECK_FALSE(storage_file_rank(bad));
  CHECK_THROWS_AS(storage_file_rank("__99999999999999999999_0.distcp"), fpg::FormatError);
  CHECK_THROWS_AS(storage_file_rank("__1048576_0.distcp"), fpg::FormatError);
}
