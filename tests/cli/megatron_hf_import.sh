#!/usr/bin/env bash
# `convert --to megatron`: Hugging Face models imported as Megatron-Core torch_dist model sections.
#  - Round trips of real Megatron-Core checkpoints (testdata/megatron/parallel, saved by Megatron-Core
#    at TP 2, PP 2, TP 2 x PP 2, EP 2 and world 1): exported to HF and imported back at the fixture's
#    TP x PP x EP, every parameter equals the original bit for bit (bf16 both ways for the BF16-held
#    tensors, fp32 both ways for the F32-held norms; only the vocabulary padding rows, which an HF model
#    has not, are zeros), and the layout is Megatron's own: the same keys, global shapes, chunk boxes,
#    rank files and _extra_state objects (testdata/megatron/hf/import_layout.py).
#  - Small HF models of each architecture (testdata/megatron/hf/models, made by make_hf_models.py)
#    imported at TP 1 and at TP 2 x PP 2 (x EP 2) equal the goldens that script computed; imported
#    with the TE spec's names and exported back, they are the HF model again, byte for byte.
#  - Refusals by name, nothing written.
# testdata/megatron/hf/check_import_logits.py proves Megatron-Core runs the imports with the original
# logits (GPU machine, scripts/check-megatron-hf.sh).
source "$(dirname "$0")/common.sh"
M="$TESTDATA/megatron/parallel"
H="$TESTDATA/megatron/hf"
F=("$FPGATHER" --no-progress)

# The round trip's diff: the differences allowed in MODE (bf16: F32-held tensors come back BF16;
# fp32: BF16-held tensors come back F32) and the padding rows past VOCAB x HIDDEN of the embedding and
# output layer; anything else fails.
diff_allowed() {
  python3 - "$@" <<'EOF'
import json, sys
doc, mode, padded_from = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
bad = []
for d in doc["differences"]:
    if d["what"] == "dtype" and d["detail"] == ("F32 vs BF16" if mode == "bf16" else "BF16 vs F32"):
        continue
    if d["what"] == "values" and d["key"] in ("embedding.word_embeddings.weight", "output_layer.weight") \
            and d["range"] and d["range"][0] >= padded_from:
        continue
    bad.append(f"{d['key']}: {d['what']} {d.get('detail', '')} {d.get('range')}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad or doc["keys_compared"] == 0 else 0)
EOF
}

# roundtrip FIXTURE ARCH DIVISOR [import options]: exported with a template config and imported back.
roundtrip() {
  local fx=$1 arch=$2 div=$3; shift 3
  [ -d "$M/$fx" ] || { fail "no fixture $M/$fx"; return; }
  python3 "$H/hf_reference.py" template "$M/$fx" "$arch" "$WORK/$fx.json"
  local vocab hidden
  vocab=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$WORK/$fx.json")
  hidden=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hidden_size"])' "$WORK/$fx.json")
  for dtype in bf16 fp32; do
    local hf="$WORK/$fx-$dtype-hf" mg="$WORK/$fx-$dtype-mg"
    expect_exit 0 "${F[@]}" convert "$M/$fx/ckpt" "$hf" --to hf --arch "$arch" --hf-config "$WORK/$fx.json" --dtype "$dtype"
    expect_exit 0 "${F[@]}" convert "$hf" "$mg" --to megatron --layer-spec local --dtype "$dtype" \
      --make-vocab-size-divisible-by "$div" "$@"
    "${F[@]}" --json diff "$M/$fx/ckpt" "$mg" --ignore '*.master' --ignore '*.exp_avg*' >"$WORK/diff.json" 2>/dev/null
    diff_allowed "$WORK/diff.json" "$dtype" $((vocab * hidden)) || fail "$fx ($dtype) imported back differs from the original"
  done
  python3 "$H/import_layout.py" "$FPGATHER" "$M/$fx/ckpt" "$WORK/$fx-bf16-mg" >"$WORK/layout" 2>&1 ||
    { fail "$fx imported: not Megatron's layout"; cat "$WORK/layout" >&2; }
}
roundtrip hf-llama-dp_reshardable llama 128
roundtrip hf-llama-tied-dp_reshardable llama 128
roundtrip hf-qwen3-dp_reshardable qwen3 128
roundtrip hf-mixtral-dp_reshardable mixtral 128 --ep 2
roundtrip hf-qwen3-moe-dp_reshardable qwen3_moe 128 --ep 2
roundtrip tp2-dp1-dp_reshardable llama 32 --tp 2
roundtrip pp2-dp1-dp_reshardable llama 64 --pp 2
roundtrip tp2pp2-dp1-dp_reshardable llama 32 --tp 2 --pp 2
roundtrip pp2-dp1-tied-dp_reshardable llama 64 --pp 2
roundtrip ep2-moe-dp_reshardable mixtral 64 --ep 2
roundtrip tp2-dp2-dp_reshardable llama 32 --tp 2
expect_in "$WORK/layout" "0 differ"
# A sharded HF model (an index and its shards) imports as the single file does.
F0=hf-qwen3-moe-dp_reshardable
expect_exit 0 "${F[@]}" convert "$M/$F0/ckpt" "$WORK/sharded-hf" --to hf --arch qwen3_moe --hf-config "$WORK/$F0.json" \
  --max-shard-size 20000
[ -f "$WORK/sharded-hf/model.safetensors.index.json" ] || fail "no sharded export"
expect_exit 0 "${F[@]}" convert "$WORK/sharded-hf" "$WORK/sharded-mg" --to megatron --layer-spec local --ep 2
expect_exit 0 "${F[@]}" diff "$WORK/$F0-bf16-mg" "$WORK/sharded-mg"

# The small models against their goldens, at TP 1 and TP 2 x PP 2 (x EP 2 with experts).
for a in llama mistral qwen2 qwen3 mixtral qwen3_moe; do
  ep=1
  case $a in mixtral | qwen3_moe) ep=2 ;; esac
  expect_exit 0 "${F[@]}" convert "$H/models/$a" "$WORK/$a-1" --to megatron --layer-spec local
  expect_in "$WORK/out" "imported a Hugging Face $a model (the config's model_type"
  expect_exit 0 "${F[@]}" diff "$H/models/$a/megatron.safetensors" "$WORK/$a-1"
  expect_exit 0 "${F[@]}" convert "$H/models/$a" "$WORK/$a-2" --to megatron --layer-spec local --tp 2 --pp 2 --ep $ep \
    --make-vocab-size-divisible-by 64
  expect_exit 0 "${F[@]}" validate "$WORK/$a-2" --data
  expect_exit 0 "${F[@]}" diff "$H/models/$a/megatron.safetensors" "$WORK/$a-2"
  # The TE spec's names, and back to Hugging Face: the same model.
  expect_exit 0 "${F[@]}" convert "$H/models/$a" "$WORK/$a-te" --to megatron --tp 2 --pp 2 --ep $ep \
    --make-vocab-size-divisible-by 64
  expect_exit 0 "${F[@]}" convert "$WORK/$a-te" "$WORK/$a-back" --to hf --arch $a --hf-config "$H/models/$a/config.json"
  expect_exit 0 "${F[@]}" diff "$H/models/$a" "$WORK/$a-back"
done
# What each spec and size writes.
expect_exit 0 "${F[@]}" inspect "$WORK/mixtral-te" --keys
expect_in "$WORK/out" "decoder.layers.pre_mlp_layernorm.weight"
expect_in "$WORK/out" "decoder.final_layernorm._extra_state/shard_0_1"
expect_in "$WORK/out" "decoder.layers.mlp.experts.experts.linear_fc1._extra_state/shard_1.3_2.4"
expect_in "$WORK/out" "training state: iteration 0, checkpoint_version 3.0"
expect_exit 0 "${F[@]}" inspect "$WORK/qwen3_moe-1" --keys
expect_in "$WORK/out" "decoder.layers.1.mlp.experts.experts.linear_fc1.weight                  bfloat16    [4, 48, 32]"
expect_in "$WORK/out" "decoder.layers.1.mlp.linear_fc1.layer_norm_weight"
expect_exit 0 "${F[@]}" inspect "$WORK/qwen2-2" --key decoder.layers.self_attention.linear_qkv.bias
expect_in "$WORK/out" "offsets [1, 48]"
expect_exit 0 "${F[@]}" --json convert "$H/models/qwen3" "$WORK/json" --to megatron --dtype fp32 --tp 2
for s in '"operation": "import_hf"' '"padded_vocab_size": 256' '"--qk-layernorm"' '"--kv-channels 16"' '"dtype": "fp32"'; do
  expect_in "$WORK/out" "$s"
done
expect_exit 0 "${F[@]}" convert "$H/models/mistral" "$WORK/window" --to megatron
expect_in "$WORK/out" "note: config.json attends through a sliding window of 4096 tokens"
expect_exit 0 "${F[@]}" convert "$H/models/mixtral" "$WORK/mixtral-bf16-fp32" --to megatron --dtype fp32
expect_exit 1 "${F[@]}" diff "$H/models/mixtral/megatron.safetensors" "$WORK/mixtral-bf16-fp32"
expect_in "$WORK/out" "dtype: BF16 vs F32"

# Refusals, by name (exit 2), nothing written.
B="$WORK/bad"
mkbad() { rm -rf "$B" && cp -r "$H/models/$1" "$B" && rm -f "$B/megatron.safetensors"; }
mkbad llama
sed -i 's/"model_type": "llama"/"model_type": "gemma2"/' "$B/config.json"
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r1" --to megatron
expect_in "$WORK/err" 'model_type "gemma2" is not an architecture fpgather maps to Megatron (llama|mistral|qwen2|qwen3|mixtral|qwen3_moe)'
expect_exit 2 "${F[@]}" convert "$H/models/llama" "$WORK/r2" --to megatron --tp 4
expect_in "$WORK/err" "num_key_value_heads 2 does not split over TP 4"
expect_exit 2 "${F[@]}" convert "$H/models/llama" "$WORK/r3" --to megatron --pp 4
expect_in "$WORK/err" "2 layers do not split evenly over 4 pipeline stages"
expect_exit 2 "${F[@]}" convert "$H/models/mixtral" "$WORK/r4" --to megatron --ep 3
expect_in "$WORK/err" "4 experts per MoE layer do not split over 3 expert-parallel ranks"
expect_exit 2 "${F[@]}" convert "$H/models/llama" "$WORK/r5" --to megatron --ep 2
expect_in "$WORK/err" "expert parallelism 2 needs experts; the model has none"
mkbad llama
sed -i '/"model_type"/d' "$B/config.json"
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r6" --to megatron --arch qwen2
expect_in "$WORK/err" "qwen2 has q/k/v biases; there is no model.layers.0.self_attn.q_proj.bias"
expect_exit 2 "${F[@]}" convert "$H/models/qwen3" "$WORK/r7" --to megatron --arch llama
expect_in "$WORK/err" "model_type is \"qwen3\", not llama"
# A tensor missing, one left over: the model rewritten without or with them (st_edit SRC DST
# [-NAME | +NAME:N] ...: drops NAME, or adds a BF16 tensor NAME of N zeros).
st_edit() {
  python3 - "$@" <<'EOF2'
import json, struct, sys
src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
meta = header.pop("__metadata__", None)
blobs = {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}
for e in edits:
    if e[0] == "-":
        header.pop(e[1:]), blobs.pop(e[1:])
    else:
        name, count = e[1:].rsplit(":", 1)
        header[name] = {"dtype": "BF16", "shape": [int(count)]}
        blobs[name] = bytes(2 * int(count))
at, out = 0, {}
for k in sorted(header):
    out[k] = dict(header[k], data_offsets=[at, at + len(blobs[k])])
    at += len(blobs[k])
if meta is not None:
    out["__metadata__"] = meta
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs[k] for k in sorted(header)))
EOF2
}
mkbad llama
st_edit "$H/models/llama/model.safetensors" "$B/model.safetensors" -model.layers.1.mlp.up_proj.weight \
  -model.layers.0.self_attn.v_proj.weight
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r8" --to megatron
expect_in "$WORK/err" "2 tensors of the model its config.json describes are missing: model.layers.0.self_attn.v_proj.weight, model.layers.1.mlp.up_proj.weight"
mkbad llama
st_edit "$H/models/llama/model.safetensors" "$B/model.safetensors" +model.layers.0.self_attn.o_proj.bias:32
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r9" --to megatron
expect_in "$WORK/err" "1 tensor with no place in a Megatron-Core GPT model: model.layers.0.self_attn.o_proj.bias"
# A name from the file is listed as printable text: its escape byte does not reach the terminal.
mkbad llama
st_edit "$H/models/llama/model.safetensors" "$B/model.safetensors" +$'model.x\x1b[2J':4
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r19" --to megatron
expect_in "$WORK/err" 'no place in a Megatron-Core GPT model: model.x\x1b[2J'
grep -q $'\x1b' "$WORK/err" && fail "an escape byte of a tensor name reached the message"
# A tied model's lm_head and rotary frequencies are left out, each said.
mkbad mistral
st_edit "$H/models/mistral/model.safetensors" "$B/model.safetensors" +lm_head.weight:3200 \
  +model.layers.0.self_attn.rotary_emb.inv_freq:4
expect_exit 0 "${F[@]}" convert "$B" "$WORK/tied-extra" --to megatron --layer-spec local
expect_in "$WORK/out" "note: lm_head.weight left out: tie_word_embeddings makes the output layer the embedding"
expect_in "$WORK/out" "note: model.layers.0.self_attn.rotary_emb.inv_freq left out"
expect_exit 0 "${F[@]}" diff "$H/models/mistral/megatron.safetensors" "$WORK/tied-extra"
mkbad llama
sed -i 's/"intermediate_size": 48/"intermediate_size": 64/' "$B/config.json"
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r10" --to megatron
expect_in "$WORK/err" "model.layers.0.mlp.gate_proj.weight is [48, 32]; the model config.json describes has it [64, 32]"
mkbad llama
rm "$B/config.json"
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r11" --to megatron
expect_in "$WORK/err" "config.json: no such file"
# Counts of layers or experts the tensors cannot hold are refused before they size anything.
mkbad llama
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 4000000000/' "$B/config.json"
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r17" --to megatron
expect_in "$WORK/err" "num_hidden_layers 4000000000 is more layers than"
mkbad mixtral
sed -i 's/"num_local_experts": 4/"num_local_experts": 4000000000/' "$B/config.json"
expect_exit 2 "${F[@]}" convert "$B" "$WORK/r18" --to megatron
expect_in "$WORK/err" "4000000000 experts in each of 2 MoE layers are more expert tensors than"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r12" --to megatron
expect_in "$WORK/err" "an import to Megatron reads a Hugging Face model (safetensors and config.json); this is megatron_torch_dist"
expect_exit 0 "${F[@]}" convert "$H/models/llama" "$WORK/fp8" --fp8 blockwise
expect_exit 2 "${F[@]}" convert "$WORK/fp8" "$WORK/r13" --to megatron
expect_in "$WORK/err" "is F8_E4M3: an import reads BF16, F16, F32 or F64 tensors"
expect_exit 2 "${F[@]}" convert "$H/models/llama" "$WORK/r14" --to megatron --tokenizer "$H/models/llama"
expect_in "$WORK/err" "--to megatron imports a Hugging Face model's weights: --tokenizer"
expect_exit 2 "${F[@]}" convert "$M/tp2-dp1-dp_reshardable/ckpt" "$WORK/r15" --to hf --tp 2
expect_in "$WORK/err" "belong to --to megatron"
expect_exit 2 "${F[@]}" convert "$H/models/llama" "$WORK/r16.safetensors" --to megatron
expect_in "$WORK/err" "a Megatron checkpoint is a directory"
expect_exit 2 "${F[@]}" convert "$H/models/llama" "$WORK/llama-1" --to megatron --layer-spec local
expect_in "$WORK/err" "--force"
for r in r1 r2 r3 r4 r5 r6 r7 r8 r9 r10 r11 r12 r13 r14 r15 r16.safetensors r17 r18 r19; do
  [ -e "$WORK/$r" ] && fail "a refused import left $r"
done
ls -a "$WORK" | grep -q "staging\|\.tmp-" && fail "a refused import left a staging directory"
# --force replaces an import whole.
expect_exit 0 "${F[@]}" convert "$H/models/llama" "$WORK/llama-1" --to megatron --tp 2 --make-vocab-size-divisible-by 64 --force
expect_exit 0 "${F[@]}" diff "$H/models/llama/megatron.safetensors" "$WORK/llama-1"
finish
