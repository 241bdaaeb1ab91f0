#!/usr/bin/env bash
# Megatron's common state (the common_state/shard_0_1 item) as Megatron-LM's training loop writes it,
# from testdata/megatron/common_state (make_common_state.py): the training args as an
# argparse.Namespace with Megatron's enums, a path and a signal, read as data; inspect prints the
# iteration and the saved args, validate --data decodes it; a virtual-pipeline run (named by its args,
# or by two model chunks' buffers) is reported as not mapped, not as invalid; a common state without
# content_metadata (dist_checkpointing.save used directly) reshards to fully_reshardable.
source "$(dirname "$0")/common.sh"
: "${MAKE_DCP:?MAKE_DCP must name the fpgather_make_dcp tool}"
M="$TESTDATA/megatron"
C="$M/common_state"
F=("$FPGATHER" --no-progress)
CS=common_state/shard_0_1

expect_exit 0 "$MAKE_DCP" copy "$M/parallel/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/lm" --replace $CS "$C/megatron_lm.pt"
expect_exit 0 "${F[@]}" inspect "$WORK/lm"
expect_in "$WORK/out" "training state: iteration 3, checkpoint_version 3.0; 40 saved args: tensor_model_parallel_size 2, pipeline_model_parallel_size 2,"
expect_in "$WORK/out" "optimizer 'adam', lr 0.001"
expect_in "$WORK/out" "parallel layout: TP 2 × PP 2 × DP 1 (4 optimizer groups)"
expect_exit 0 "${F[@]}" --json inspect "$WORK/lm"
expect_in "$WORK/out" '"attention_backend": "megatron.core.transformer.enums.AttnBackend(5,)"'
expect_in "$WORK/out" '"iteration": 3'
expect_exit 0 "${F[@]}" inspect --key $CS "$WORK/lm"
expect_in "$WORK/out" "'args': argparse.Namespace().__setstate__({'num_layers': 2"
expect_in "$WORK/out" "'exit_signal': signal.Signals(15,)"
expect_exit 0 "${F[@]}" validate --data "$WORK/lm"
expect_in "$WORK/out" "; 0 problems"
expect_exit 0 "${F[@]}" diff "$WORK/lm" "$M/parallel/tp2pp2-dp1-fully_reshardable/ckpt"
expect_in "$WORK/out" "equal: 60 keys"

# The same run's common state, args naming a virtual pipeline.
expect_exit 0 "$MAKE_DCP" copy "$M/parallel/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/vpp" --replace $CS "$C/megatron_lm_vpp.pt"
expect_exit 0 "${F[@]}" inspect "$WORK/vpp"
expect_in "$WORK/out" "optimizer layout not recovered: $WORK/vpp: saved with virtual pipeline parallelism (the args record virtual_pipeline_model_parallel_size 2)"
expect_exit 0 "${F[@]}" validate --data "$WORK/vpp"
expect_in "$WORK/out" "; 0 problems"
expect_in "$WORK/out" "optimizer state not mapped to parameters (not checked against a layout)"
expect_exit 3 "${F[@]}" convert "$WORK/vpp" "$WORK/vpp.safetensors" --states
expect_in "$WORK/err" "does not recover the interleaved stages of a virtual-pipeline run"
[ -e "$WORK/vpp.safetensors" ] && fail "convert of a virtual-pipeline run left an output"
# Without args: two model chunks' buffers in one group.
K=optimizer.distributed.dp_group_idx_0
expect_exit 0 "$MAKE_DCP" copy "$M/parallel/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/vpp2" \
  --replace $K.per_bucket_numel/shard_0_1 "$C/vpp_per_bucket_numel.pt" \
  --replace $K.per_bucket_numel_unpadded/shard_0_1 "$C/vpp_per_bucket_numel.pt"
expect_exit 0 "${F[@]}" validate "$WORK/vpp2"
expect_in "$WORK/out" "has buffers gbuf_idx_0 and gbuf_idx_2 of the same dtypes (BF16, F32): one per model chunk"
expect_exit 3 "${F[@]}" diff "$WORK/vpp2" "$M/parallel/tp2pp2-dp1-fully_reshardable/ckpt"

# Context parallelism shows only in the args: a TP 2 × CP 2 run shards its optimizer over DP × CP = 2
# ranks, as the TP 2 × DP 2 fixture does.
expect_exit 0 "$MAKE_DCP" copy "$M/parallel/tp2-dp2-dp_reshardable/ckpt" "$WORK/cp" --replace $CS "$C/megatron_lm_tp2_cp2.pt"
expect_exit 0 "${F[@]}" inspect "$WORK/cp"
expect_in "$WORK/out" "parallel layout: TP 2 × PP 1 × CP 2 × DP 1, the optimizer sharded over DP × CP = 2 (2 optimizer groups)"
expect_exit 0 "${F[@]}" --json inspect "$WORK/cp"
expect_in "$WORK/out" '"cp": 2'
expect_exit 0 "${F[@]}" validate --data "$WORK/cp"
expect_in "$WORK/out" "; 0 problems"
expect_exit 0 "${F[@]}" diff "$WORK/cp" "$M/parallel/tp2-dp2-fully_reshardable/ckpt"
# Args of another run (TP 2 × PP 2 × DP 1) on the TP 2 × DP 2 checkpoint: every disagreement named.
expect_exit 0 "$MAKE_DCP" copy "$M/parallel/tp2-dp2-dp_reshardable/ckpt" "$WORK/mis" --replace $CS "$C/megatron_lm.pt"
expect_exit 1 "${F[@]}" validate "$WORK/mis"
expect_in "$WORK/out" "the saved training args disagree with the checkpoint: pipeline_model_parallel_size 2, the optimizer groups give PP 1; data_parallel_size 1, the buckets' shards give 2"
expect_exit 1 "${F[@]}" diff "$WORK/mis" "$M/parallel/tp2-dp2-fully_reshardable/ckpt"

# No content_metadata: the form comes from the keys, and the rewrite records one.
expect_exit 0 "$MAKE_DCP" copy "$M/dp1-one-bucket/ckpt" "$WORK/api" --replace $CS "$C/mcore_api.pt"
expect_exit 0 "${F[@]}" reshard "$WORK/api" "$WORK/api-fully" --dp 1 --to fully_reshardable
expect_exit 0 "${F[@]}" inspect --key $CS "$WORK/api-fully"
expect_in "$WORK/out" "'content_metadata': {'distrib_optim_sharding_type': 'fully_reshardable'}"
expect_exit 0 "${F[@]}" diff "$WORK/api" "$WORK/api-fully"
expect_in "$WORK/out" "equal: 60 keys"
# Megatron-LM's args survive a rewrite, re-pickled as data.
expect_exit 0 "$MAKE_DCP" copy "$M/dp1-one-bucket/ckpt" "$WORK/lm1" --replace $CS "$C/megatron_lm_dp1.pt"
expect_exit 0 "${F[@]}" reshard "$WORK/lm1" "$WORK/lm1-fully" --dp 1 --to fully_reshardable
expect_exit 0 "${F[@]}" validate --data "$WORK/lm1-fully"
expect_exit 0 "${F[@]}" inspect "$WORK/lm1-fully"
expect_in "$WORK/out" "training state: iteration 3, checkpoint_version 3.0; 40 saved args"

# reshard --tp/--pp of a Megatron-LM checkpoint: its args (saved at TP 2 x PP 2 x DP 1) take the
# target's sizes, which validate checks against the layout written, and no_save_rng.
expect_exit 0 "$MAKE_DCP" copy "$M/parallel/tp2pp2-dp1-dp_reshardable/ckpt" "$WORK/lm-tp2pp2" --replace $CS "$C/megatron_lm.pt"
expect_exit 0 "${F[@]}" validate "$WORK/lm-tp2pp2"
expect_exit 0 "${F[@]}" reshard "$WORK/lm-tp2pp2" "$WORK/lm-tp1" --tp 1 --pp 1 --dp 2 --bucket-size none
expect_exit 0 "${F[@]}" validate --data "$WORK/lm-tp1"
expect_in "$WORK/out" "; 0 problems"
expect_exit 0 "${F[@]}" inspect "$WORK/lm-tp1"
expect_in "$WORK/out" "41 saved args: tensor_model_parallel_size 1, pipeline_model_parallel_size 1,"
expect_exit 0 "${F[@]}" --json inspect "$WORK/lm-tp1"
expect_in "$WORK/out" '"no_save_rng": true'
expect_in "$WORK/out" '"data_parallel_size": 2'
expect_exit 0 "${F[@]}" diff "$WORK/lm-tp1" "$M/parallel/tp2pp2-dp1-fully_reshardable/ckpt"
expect_in "$WORK/out" "equal:"

finish
