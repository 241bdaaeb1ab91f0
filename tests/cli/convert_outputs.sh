#!/usr/bin/env bash
# fpgather convert's outputs: an existing OUT refused (exit 2, named) unless --force, which replaces it
# whole in every form (file, index, directory; safetensors exports, DCP, recompressed checkpoints);
# HF model directories keep their config and tokenizer files, config.json gets a quantization_config
# that --dequantize removes, and tensorwise/mxfp8 scales take compressed-tensors' names and layout
# there (checked with Python by compressed_tensors_check.py); stacked experts get per-expert scales.
source "$(dirname "$0")/common.sh"
: "${SRC:?SRC must name the source tree}"
F=("$FPGATHER" --no-progress)
# Python with numpy, ml_dtypes and safetensors for the compressed-tensors checks: PYTHON or $SRC/.venv.
PYTHON_TRIED=${PYTHON:-$SRC/.venv/bin/python3}
PY=
"$PYTHON_TRIED" -c 'import ml_dtypes, numpy, safetensors' 2>/dev/null && PY=$PYTHON_TRIED
MODEL="$TESTDATA/models/tiny-llama.safetensors"
SHARDED="$TESTDATA/models/tiny-llama-sharded"
mkdir "$WORK/t" && cd "$WORK/t" || exit 1

# listing DIR: its names, sorted, hidden ones included, on one line
listing() { ls -A "$1" | tr '\n' ' '; }

# The stale-shard case: a sharded export, then a one-file export into the same directory.
expect_exit 0 "${F[@]}" train --steps 2 --save ck
expect_exit 0 "${F[@]}" convert ck ex/ --dtype fp32 --states --max-shard-size 500KB
[ -f ex/model-00004-of-00004.safetensors ] || fail "expected four shards: $(listing ex)"
expect_exit 2 "${F[@]}" convert ck ex/
expect_in "$WORK/err" "ex"
expect_in "$WORK/err" "--force"
[ -f ex/model.safetensors.index.json ] || fail "a refused convert changed ex: $(listing ex)"
expect_exit 0 "${F[@]}" convert ck ex/ --force
[ "$(listing ex)" = "model.safetensors " ] || fail "--force left other files: $(listing ex)"
expect_exit 0 "${F[@]}" inspect ex
expect_in "$WORK/out" "1 file, 15 tensors"
[ "$(listing .)" = "ck ex " ] || fail "staging left behind: $(listing .)"
# and back: the index form replaces the one file's directory content the same way
expect_exit 0 "${F[@]}" convert ck ex --dtype fp32 --max-shard-size 100KB --force
[ -f ex/model.safetensors ] && fail "the old model.safetensors stayed beside the new shards"
expect_exit 0 "${F[@]}" inspect ex
expect_in "$WORK/out" "15 tensors"

# single file: refused, then renamed over
expect_exit 0 "${F[@]}" convert ck one.safetensors
expect_exit 2 "${F[@]}" convert ck one.safetensors --dtype fp32
expect_in "$WORK/err" "one.safetensors"
expect_exit 0 "${F[@]}" convert ck one.safetensors --dtype fp32 --force
expect_exit 0 "${F[@]}" inspect one.safetensors
grep -Eq 'blocks.0.fc1.weight +F32' "$WORK/out" || fail "one.safetensors was not replaced"

# index .json in a directory holding other files: only the old index's files are replaced
mkdir idx && echo keep >idx/notes.txt
expect_exit 0 "${F[@]}" convert ck idx/m.json --dtype fp32 --states --max-shard-size 500KB
[ -f idx/model-00004-of-00004.safetensors ] || fail "expected four shards: $(listing idx)"
expect_exit 2 "${F[@]}" convert ck idx/m.json
expect_exit 0 "${F[@]}" convert ck idx/m.json --force --max-shard-size 100KB
want="m.json model-00001-of-00003.safetensors model-00002-of-00003.safetensors model-00003-of-00003.safetensors"
[ "$(listing idx)" = "$want notes.txt " ] || fail "index --force: $(listing idx)"

# quantize / dequantize outputs follow the same rule
expect_exit 0 "${F[@]}" convert "$MODEL" q.safetensors --fp8 mxfp8
expect_exit 2 "${F[@]}" convert "$MODEL" q.safetensors --fp8 tensorwise
expect_exit 0 "${F[@]}" convert "$MODEL" q.safetensors --fp8 tensorwise --force
expect_exit 0 "${F[@]}" inspect q.safetensors
expect_in "$WORK/out" "fpgather.fp8.recipe: tensorwise"
expect_exit 2 "${F[@]}" convert q.safetensors q.safetensors --dequantize --force
expect_in "$WORK/err" "input"
# --force never replaces a directory holding the input or a subdirectory
mkdir -p nest/sub && cp "$MODEL" nest/in.safetensors
expect_exit 2 "${F[@]}" convert nest/in.safetensors nest --fp8 mxfp8 --force
[ -f nest/in.safetensors ] && [ -d nest/sub ] || fail "a refused --force touched nest"

# checkpoint outputs: DCP and recompression refuse, then replace with --force
expect_exit 0 "${F[@]}" convert ck d --to dcp
expect_exit 2 "${F[@]}" convert ck d --to dcp --states
expect_exit 0 "${F[@]}" inspect d
expect_in "$WORK/out" "15 tensor keys"
expect_exit 0 "${F[@]}" convert ck d --to dcp --states --force
expect_exit 0 "${F[@]}" inspect d
expect_in "$WORK/out" "60 tensor keys"
expect_exit 0 "${F[@]}" convert ck z --compress zstd:3
expect_exit 2 "${F[@]}" convert ck z --compress none
expect_exit 0 "${F[@]}" convert ck z --compress none --force
expect_exit 0 "${F[@]}" validate --data z
expect_exit 0 "${F[@]}" diff ck z
expect_in "$WORK/out" "equal"

# an HF model directory: companions carried, quantization_config written and removed again
mkdir hf && cp "$SHARDED"/* hf/
echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 160, "torch_dtype": "bfloat16"}' >hf/config.json
echo '{"bos_token_id": 1}' >hf/generation_config.json
echo '{"version": "1.0"}' >hf/tokenizer.json
echo '{"chat_template": "{{ messages }}"}' >hf/tokenizer_config.json
echo 'old' >hf/pytorch_model.bin
expect_exit 0 "${F[@]}" convert hf hfq --fp8 blockwise --exclude lm_head
for f in config.json generation_config.json tokenizer.json tokenizer_config.json; do
  [ -f "hfq/$f" ] || fail "hfq lacks $f"
  expect_in "$WORK/out" "wrote hfq/$f"
done
[ -e hfq/pytorch_model.bin ] && fail "other weight formats are not carried"
cmp -s hf/tokenizer.json hfq/tokenizer.json || fail "tokenizer.json changed"
expect_in hfq/config.json '"quant_method": "fp8"'
expect_in hfq/config.json '"weight_block_size": ['
expect_in hfq/config.json '"modules_to_not_convert": ['
expect_in hfq/config.json '"hidden_size": 160'
expect_exit 0 "${F[@]}" convert hfq hfd --dequantize
grep -q quantization_config hfd/config.json && fail "--dequantize kept the quantization_config"
# tensorwise and mxfp8 declare compressed-tensors, so their scales are NAME_scale in its layout (the
# per-expert ones too); a file output keeps NAME_scale_inv. Both dequantize to the same values.
for recipe in tensorwise mxfp8; do
  expect_exit 0 "${F[@]}" convert hf "ct-$recipe" --fp8 "$recipe" --exclude 'lm_head|embed'
  expect_in "ct-$recipe/config.json" '"quant_method": "compressed-tensors"'
  expect_exit 0 "${F[@]}" inspect "ct-$recipe"
  grep -q '_scale_inv' "$WORK/out" && fail "$recipe into a compressed-tensors directory wrote _scale_inv"
  if [ $recipe = tensorwise ]; then
    grep -Eq 'model.layers.0.mlp.down_proj.weight_scale +F32 +\[1\]' "$WORK/out" || fail "$recipe weight_scale"
    grep -Eq 'model.experts.w1_scale +F32 +\[4, 1\]' "$WORK/out" || fail "$recipe per-expert weight_scale"
  else
    grep -Eq 'model.layers.0.mlp.down_proj.weight_scale +U8 +\[160, 13\]' "$WORK/out" || fail "$recipe weight_scale"
    grep -Eq 'model.experts.w1_scale +U8 +\[4, 96, 5\]' "$WORK/out" || fail "$recipe per-expert weight_scale"
  fi
  expect_exit 0 "${F[@]}" convert "ct-$recipe" "ct-$recipe.safetensors" --dequantize --dtype fp32
  expect_exit 0 "${F[@]}" convert hf "inv-$recipe.safetensors" --fp8 "$recipe" --exclude 'lm_head|embed'
  expect_exit 0 "${F[@]}" inspect "inv-$recipe.safetensors"
  expect_in "$WORK/out" "model.experts.w1_scale_inv"
  expect_exit 0 "${F[@]}" convert "inv-$recipe.safetensors" "inv-$recipe-d.safetensors" --dequantize --dtype fp32
  cmp -s "ct-$recipe.safetensors" "inv-$recipe-d.safetensors" || fail "$recipe: the two namings dequantize differently"
  if [ -n "$PY" ]; then
    "$PY" "$SRC/tests/cli/compressed_tensors_check.py" "$recipe" hf "ct-$recipe" "ct-$recipe.safetensors" \
      "inv-$recipe-d.safetensors" >"$WORK/out" 2>&1 || fail "compressed-tensors layout of $recipe: $(cat "$WORK/out")"
    cat "$WORK/out"
  fi
done
[ -n "$PY" ] || echo "no numpy, ml_dtypes and safetensors ($PYTHON_TRIED): compressed-tensors values not checked"
# compressed-tensors has no E5M2: refused for a directory that declares it, nothing left behind
expect_exit 2 "${F[@]}" convert hf ct-e5m2 --fp8 tensorwise --fp8-format e5m2
expect_in "$WORK/err" "has no E5M2"
[ -e ct-e5m2 ] && fail "a refused e5m2 conversion left ct-e5m2"
# train --init reads compressed-tensors' names too
expect_exit 0 "${F[@]}" convert ck init/ --dtype fp32
echo '{}' >init/config.json
expect_exit 0 "${F[@]}" convert init init-ct --fp8 tensorwise
expect_exit 0 "${F[@]}" inspect init-ct
expect_in "$WORK/out" "blocks.0.fc1.weight_scale "
expect_exit 0 "${F[@]}" train --steps 1 --init init-ct
# a single-file model into a directory: OUT/model.safetensors, which inspect reads as the model
expect_exit 0 "${F[@]}" convert "$MODEL" outdir/ --fp8 blockwise
[ "$(listing outdir)" = "model.safetensors " ] || fail "single file into a directory: $(listing outdir)"

# stacked experts: per-expert scales, and --expert-dims '^$' stacks none
expect_exit 0 "${F[@]}" inspect outdir
grep -Eq 'model.experts.w1_scale_inv +F32 +\[4, 1, 2\]' "$WORK/out" || fail "blockwise per-expert scale shape"
expect_exit 0 "${F[@]}" convert "$MODEL" tw.safetensors --fp8 tensorwise
expect_exit 0 "${F[@]}" inspect tw.safetensors
grep -Eq 'model.experts.w1_scale_inv +F32 +\[4\]' "$WORK/out" || fail "tensorwise per-expert scale shape"
expect_exit 0 "${F[@]}" convert "$MODEL" flat.safetensors --fp8 blockwise --expert-dims '^$'
expect_exit 0 "${F[@]}" inspect flat.safetensors
grep -Eq 'model.experts.w1_scale_inv +F32 +\[3, 2\]' "$WORK/out" || fail "--expert-dims '^\$' scale shape"
expect_exit 0 "${F[@]}" convert outdir back.safetensors --dequantize --dtype fp32
expect_exit 0 "${F[@]}" inspect back.safetensors
grep -Eq 'model.experts.w1 +F32 +\[4, 96, 160\]' "$WORK/out" || fail "dequantized experts"
expect_exit 2 "${F[@]}" convert "$MODEL" x.safetensors --fp8 blockwise --expert-dims '('
expect_in "$WORK/err" "--expert-dims"
finish
