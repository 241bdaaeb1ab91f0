#!/usr/bin/env bash
# `convert --to hf`: Megatron-Core checkpoints (testdata/megatron/parallel, saved by Megatron-Core at
# TP 2, PP 2, TP 2 x PP 2, TP 2 x DP 2, EP 2, and world-1 models of each architecture) exported as
# Hugging Face model directories whose tensors equal, byte for byte, what
# testdata/megatron/hf/hf_reference.py maps from the ground truth Megatron wrote beside each
# checkpoint; config.json as the tensors, the template and the saved args say; what does not fit is
# refused by name. testdata/megatron/hf/check_hf_logits.py proves the same exports load in
# transformers with Megatron's logits (GPU machine, scripts/check-megatron-hf.sh).
source "$(dirname "$0")/common.sh"
M="$TESTDATA/megatron/parallel"
R="$TESTDATA/megatron/hf/hf_reference.py"
F=("$FPGATHER" --no-progress)

# export FIXTURE ARCH [convert options]: exported with a template made from the fixture's config
# (what a user passes as --hf-config), checked against the reference.
export_checked() {
  local fx=$1 arch=$2; shift 2
  local out="$WORK/$fx-$arch"
  python3 "$R" template "$M/$fx" "$arch" "$WORK/$fx-$arch.json"
  expect_exit 0 "${F[@]}" convert "$M/$fx/ckpt" "$out" --to hf --arch "$arch" --hf-config "$WORK/$fx-$arch.json" "$@"
  python3 "$R" check "$M/$fx" "$arch" "$out" >"$WORK/check" 2>&1 || { fail "$fx as $arch: tensors differ"; cat "$WORK/check" >&2; }
}
for c in tp2-dp1:llama pp2-dp1:llama tp2pp2-dp1:llama tp2-dp2:llama pp2-dp1-3layers:llama pp2-dp1-tied:llama \
         tp2-dp1-buckets:mistral ep2-moe:mixtral tp2-dp1-fully_reshardable:llama; do
  fx=${c%%:*}; [ -d "$M/$fx" ] || fx=$fx-dp_reshardable
  export_checked "$fx" "${c##*:}"
done
for c in hf-llama-tied:llama hf-qwen3:qwen3 hf-mixtral:mixtral hf-qwen3-moe:qwen3_moe; do
  fx=${c%%:*}-dp_reshardable
  if [ -d "$M/$fx" ]; then export_checked "$fx" "${c##*:}"; else fail "no fixture $M/$fx"; fi
done

# What the export wrote: config.json from the template and the tensors, the padding cut.
C="$WORK/tp2pp2-dp1-dp_reshardable-llama/config.json"
for s in '"architectures": [' '"LlamaForCausalLM"' '"num_key_value_heads": 2' '"head_dim": 8' '"vocab_size": 64' \
         '"intermediate_size": 16' '"tie_word_embeddings": false' '"torch_dtype": "bfloat16"'; do
  expect_in "$C" "$s"
done
expect_in "$WORK/pp2-dp1-tied-dp_reshardable-llama/config.json" '"tie_word_embeddings": true'
expect_in "$WORK/ep2-moe-dp_reshardable-mixtral/config.json" '"num_local_experts": 4'
expect_in "$WORK/hf-qwen3-dp_reshardable-qwen3/config.json" '"head_dim": 16'
expect_in "$WORK/hf-qwen3-moe-dp_reshardable-qwen3_moe/config.json" '"mlp_only_layers": ['
expect_in "$WORK/hf-qwen3-dp_reshardable-qwen3/config.json" '"vocab_size": 96'

# (qwen2's q/k/v biases: tests/unit/megatron_hf_view_test.cpp. Megatron-Core 0.19.2's distributed
# optimizer fails to save such a model in either form, so there is no fixture of one.)
# Megatron-LM's saved training args stand in for the template; --arch auto reads the tensors.
expect_exit 0 "${F[@]}" convert "$M/hf-llama-dp_reshardable/ckpt" "$WORK/args" --to hf
expect_in "$WORK/out" "as a Hugging Face llama model (the tensors"
python3 "$R" check "$M/hf-llama-dp_reshardable" llama "$WORK/args" >/dev/null || fail "hf-llama from its saved args: tensors differ"
expect_in "$WORK/args/config.json" '"vocab_size": 96'
expect_in "$WORK/args/config.json" '"rope_theta": 10000'
# --arch auto: the config's model_type over the tensors.
expect_exit 0 "${F[@]}" convert "$M/hf-qwen3-dp_reshardable/ckpt" "$WORK/auto3" --to hf --hf-config "$WORK/hf-qwen3-dp_reshardable-qwen3.json"
expect_in "$WORK/out" "qwen3 model (the config's model_type"

# The fp32 masters rounded once are the bf16 weights Megatron holds; fp32 widens them exactly.
expect_exit 0 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/masters" --to hf --arch llama \
  --hf-config "$WORK/tp2-dp1-dp_reshardable-llama.json" --from-masters
python3 "$R" check "$M/tp2-dp1-dp_reshardable" llama "$WORK/masters" >/dev/null || fail "--from-masters: not bf16 of the masters"
expect_exit 0 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/f32" --to hf --arch llama \
  --hf-config "$WORK/tp2-dp1-dp_reshardable-llama.json" --dtype fp32
python3 "$R" check "$M/tp2-dp1-dp_reshardable" llama "$WORK/f32" F32 >/dev/null || fail "--dtype fp32: tensors differ"
expect_in "$WORK/f32/config.json" '"torch_dtype": "float32"'
# Sharded output, a tokenizer directory copied.
mkdir "$WORK/tok" && echo '{"model_max_length": 16}' >"$WORK/tok/tokenizer_config.json" && echo '{}' >"$WORK/tok/tokenizer.json"
expect_exit 0 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/sharded" --to hf --arch llama \
  --hf-config "$WORK/tp2-dp1-dp_reshardable-llama.json" --max-shard-size 10000 --tokenizer "$WORK/tok"
[ -f "$WORK/sharded/model.safetensors.index.json" ] || fail "--max-shard-size 10000: no index"
[ -f "$WORK/sharded/tokenizer_config.json" ] && [ -f "$WORK/sharded/tokenizer.json" ] || fail "tokenizer files not copied"
python3 "$R" check "$M/tp2-dp1-dp_reshardable" llama "$WORK/sharded" >/dev/null || fail "sharded export differs"

# --fp8: exported, then quantized into OUT (blockwise: DeepSeek-V3's weight_scale_inv and
# quantization_config); the embedding, lm_head and the routers stay BF16; no staging left behind.
expect_exit 0 "${F[@]}" convert "$M/ep2-moe-dp_reshardable/ckpt" "$WORK/fp8" --to hf --arch mixtral \
  --hf-config "$WORK/ep2-moe-dp_reshardable-mixtral.json" --fp8 blockwise
expect_in "$WORK/out" "quantized 32 tensors with fp8 blockwise"
expect_in "$WORK/fp8/config.json" '"quant_method": "fp8"'
for m in '"lm_head"' '"model.embed_tokens"' '"model.layers.1.block_sparse_moe.gate"'; do expect_in "$WORK/fp8/config.json" "$m"; done
expect_exit 0 "${F[@]}" inspect "$WORK/fp8"
expect_in "$WORK/out" "model.layers.0.block_sparse_moe.experts.0.w1.weight_scale_inv  F32"
ls -a "$WORK" | grep -q fpgather-staging && fail "--fp8 left a staging directory"
# ... and dequantized back it holds values of the bf16 export's FP8 grid: the export's own tensors
# where nothing was quantized.
expect_exit 0 "${F[@]}" convert "$WORK/fp8" "$WORK/fp8-back" --dequantize
expect_exit 0 "${F[@]}" diff "$WORK/fp8-back" "$WORK/ep2-moe-dp_reshardable-mixtral" --atol 0.05
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r11" --to hf --hf-config "$WORK/tp2-dp1-dp_reshardable-llama.json" --exclude lm_head
expect_in "$WORK/err" "belong to --fp8"

# Refusals, by name (exit 2), nothing written.
T="$WORK/tp2-dp1-dp_reshardable-llama.json"
U="$WORK/no-model-type.json"  # the same fields without model_type, for any --arch
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.pop("model_type"); c["num_experts_per_tok"] = 2; json.dump(c, open(sys.argv[2], "w"))' "$T" "$U"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r1" --to hf
expect_in "$WORK/err" "the config fields num_attention_heads, rope_theta, rms_norm_eps, max_position_embeddings"
expect_in "$WORK/err" "--hf-config"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r2" --to hf --arch qwen2 --hf-config "$U"
expect_in "$WORK/err" "this model has no linear_qkv.bias"
expect_exit 2 "${F[@]}" convert "$M/hf-qwen3-dp_reshardable/ckpt" "$WORK/r3" --to hf --arch llama --hf-config "$U"
expect_in "$WORK/err" "--arch llama has none (use qwen3)"
sed 's/"hidden_size": 32/"hidden_size": 4096/' "$T" >"$WORK/bad.json"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r4" --to hf --arch llama --hf-config "$WORK/bad.json"
expect_in "$WORK/err" "hidden_size is 4096, but the checkpoint's tensors give 32"
sed 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$T" >"$WORK/bad.json"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r5" --to hf --arch llama --hf-config "$WORK/bad.json"
expect_in "$WORK/err" "linear_qkv has 64 rows; 4 heads and 4 key/value heads of 8 need 96"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r6" --to hf --arch mixtral --hf-config "$T"
expect_in "$WORK/err" "model_type is \"llama\", not --arch mixtral"
expect_exit 2 "${F[@]}" convert "$M/ep2-moe-dense-first-dp_reshardable/ckpt" "$WORK/r7" --to hf --arch mixtral --hf-config "$U"
expect_in "$WORK/err" "mixtral has experts in every layer"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r8.safetensors" --to hf --hf-config "$T"
expect_in "$WORK/err" "a Hugging Face model is a directory"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r9" --arch llama
expect_in "$WORK/err" "belong to --to hf"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r10" --to hf --hf-config "$T" --states
expect_in "$WORK/err" "--states"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/tp2-dp1-dp_reshardable-llama" --to hf --hf-config "$T"
expect_in "$WORK/err" "--force"
for r in r1 r2 r3 r4 r5 r6 r7 r8.safetensors r9 r10 r11; do [ -e "$WORK/$r" ] && fail "a refused export left $r"; done
finish
