"""Writes real Megatron-Core `torch_dist` checkpoints and their ground truth, for fpgather's tests.

Run on a machine with one CUDA GPU, torch and megatron-core 0.19.2 (+ emerging-optimizers 0.3.0 for
Muon); scripts/gen-megatron-fixtures.sh does it on the GPU machine. Each configuration trains a small
GPT (local layer spec, SwiGLU, RMSNorm, untied output layer) for a few steps and saves, under OUT/NAME/:

  ckpt/          the checkpoint, written by megatron.core.dist_checkpointing.save (backend torch_dist)
  truth.safetensors   per parameter, keyed by its checkpoint name (decoder.layers.{i}.… for stacked
                 keys): NAME (the model weight as held), NAME.master (fp32 master) and NAME.<state>
                 (each optimizer state tensor: exp_avg, exp_avg_sq, momentum_buffer …), all whole
                 tensors in the parameter's shape
  truth.json     the configuration, the parameters in registration order (module name, checkpoint
                 key, layer index, shape, dtype), the optimizer's buffers and buckets as Megatron
                 built them (numel, numel_unpadded, per-parameter ranges), and the losses

dist_checkpointing.save starts a worker process, so everything runs under __main__.

  python3 make_megatron_fixtures.py OUT [--only NAME …] [--jobs N] [--timeout S]
  (or scripts/gen-megatron-fixtures.sh OUT [NAME …] [-- OPTIONS], which installs the wheels of .whl/)

DP=1 configurations (CONFIGS; run in this process on NCCL, world 1, unchanged): dp1-one-bucket,
dp1-buckets-padded, dp1-fully-reshardable, dp1-layerwise-muon.

Parallel configurations (PAR_CONFIGS; committed under testdata/megatron/parallel/, apart from the DP=1
ones that the tests of one model-parallel rank iterate over), each trained once and saved twice, as OUT/NAME-dp_reshardable/
and OUT/NAME-fully_reshardable/ (same truth files; truth.json's config.sharding says which). 2-4 ranks
run on ONE GPU: this script launches one worker process per rank (python3 make_megatron_fixtures.py
OUT --worker NAME RANK WORLD PORT), torch.distributed on gloo with the host-staged collectives of
gloo_one_gpu.py, parallel_state.initialize_model_parallel(tp, pp, expert_model_parallel_size=ep).
All: GPT, hidden 32, ffn 16, 4 heads, 2 query groups (GQA) unless said, vocab 64, 2 layers, SwiGLU,
RMSNorm, bf16 with fp32 grads/masters, Adam (distributed optimizer), 3 steps, seed 1234.
  tp2-dp1          TP 2, one bucket per buffer
  pp2-dp1          PP 2 (one layer per stage)
  tp2pp2-dp1       TP 2 x PP 2 (world 4)
  tp2-dp2          TP 2 x DP 2 (world 4), 4 heads MHA; optimizer state sharded over DP
  tp2-dp1-buckets  TP 2, overlap_grad_reduce, bucket_size 1000 (5 buckets in the bf16 buffer)
  ep2-moe          EP 2, 4 experts (2 per rank, SequentialMLP, top-2, allgather dispatcher), dense
                   part DP 2: ChainedOptimizer (dense + expert DistributedOptimizer); dp_reshardable
                   keys carry chained_0./chained_1.
  pp2-dp1-3layers  3 layers at PP 2 (2 on the first stage, 1 on the last)
  tp2-dp1-muon     LayerWise Muon at TP 2 (Adam for embedding, output layer, norms); with the
                   dp_reshardable metadata its keys carry chained_0./chained_1.
  pp2-dp1-tied     PP 2, output layer tied to the embedding (the last stage's copy is checkpointed
                   under the embedding's key as a replica); saved with verify_integrity (integrity.json)
  ep2-moe-dense-first  as ep2-moe, but layer 0 dense (moe_layer_freq [0, 1]); verify_integrity
  hf-llama, hf-llama-tied, hf-qwen3, hf-mixtral, hf-qwen3-moe   one model per Hugging Face
                   architecture of `convert --to hf` (HF_SHAPE: hidden 32, vocab 96 padded to 128,
                   2 steps; hf-llama saves Megatron-LM's training args; the MoE ones at EP 2), for
                   testdata/megatron/hf/
With PP > 1 there is no forward/backward (gloo cannot pass CUDA tensors point-to-point): each step
fills main_grad with a seeded draw over the parameter's whole global tensor (replicas equal), then
steps. truth.json (parallel): config (tp/pp/ep/dp, world, sharding), params (whole parameters with
global shapes, their holders: rank coordinates, local shape, the pieces the checkpoint places, which
flat ranges of optimizer state each rank holds), ranks (per global rank: coordinates, losses, DDP
buffers and buckets, per DistributedOptimizer its dp_group_idx, DP size/rank, per-bucket shard and
param ranges), replica_mismatch (should be {}), notes. truth.safetensors: NAME, NAME.master,
NAME.<state>, every tensor whole (TP joined; SwiGLU fc1 as the checkpoint's model-space tensor, all
w chunks then all v chunks; layers and experts by global index). verify_fixture.py checks a folder
against its checkpoint without Megatron. FIXTURES_CPU_DEBUG=1 (cpu_debug.py) runs the parallel
configurations on a CPU-only machine, for developing this script only.
"""
import argparse
import json
import os
import shutil
import sys

import torch


def build(cfg):
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(cfg["seed"])
    model_parallel_cuda_manual_seed(cfg["seed"])
    layer_wise = cfg["optimizer"] == "muon"
    tcfg = TransformerConfig(
        num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
        normalization="RMSNorm", gated_linear_unit=True, activation_func=torch.nn.functional.silu,
        add_bias_linear=False, bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0)
    model = GPTModel(config=tcfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                     vocab_size=64, max_sequence_length=16, share_embeddings_and_output_weights=cfg["tied"],
                     position_embedding_type="rope")
    if layer_wise:
        # Megatron's non-distributed mixed-precision optimizer cannot save fp32 norm weights.
        model = model.bfloat16()
    model = model.cuda()
    ddp_cfg = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=cfg["overlap_grad_reduce"],
        use_distributed_optimizer=not layer_wise, bucket_size=cfg.get("bucket_size"),
        pad_buckets_for_high_nccl_busbw=cfg.get("pad_for_nccl", False))
    ddp = DistributedDataParallel(config=tcfg, ddp_config=ddp_cfg, module=model)
    ocfg = OptimizerConfig(
        optimizer=cfg["optimizer"], lr=1e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95,
        adam_eps=1e-8, clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16,
        use_distributed_optimizer=not layer_wise,
        use_layer_wise_distributed_optimizer=layer_wise)
    opt = get_megatron_optimizer(ocfg, [ddp])
    return model, ddp, opt


def train(model, ddp, opt, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    losses = []
    seq = 16
    mask = torch.tril(torch.ones(1, 1, seq, seq, dtype=torch.bool)).logical_not().cuda()
    pos = torch.arange(seq).unsqueeze(0).cuda()
    for _ in range(steps):
        tokens = torch.randint(0, 64, (4, seq + 1), generator=gen).cuda()
        ddp.zero_grad_buffer()
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
        loss.backward()
        ddp.finish_grad_sync()
        ok, _, _ = opt.step()
        assert ok, "optimizer step skipped"
        losses.append(loss.item())
    return losses


def checkpoint_names(model):
    """Module parameter name -> (checkpoint key, layer index or None), from the model's own sharded
    state dict: the key is what the file knows (a fused norm can be saved as …layer_norm_weight).
    A parameter is matched to its ShardedTensor by storage, else by its name with the layer index
    taken out (Megatron stacks per-layer parameters along a prepended axis)."""
    import re
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory
    by_ptr, keys = {}, {}
    for st in nested_values(model.sharded_state_dict()):
        if isinstance(st, ShardedTensor):
            layer = st.global_offset[0] if st.prepend_axis_num else None
            by_ptr[st.data.data_ptr()] = (st.key, layer)
            keys[st.key] = st.prepend_axis_num
        elif isinstance(st, ShardedTensorFactory):  # e.g. SwiGLU's fc1, saved as two chunks
            keys[st.key] = 1 if "layers." in st.key else 0
    names = {}
    for name, p in model.named_parameters():
        if p.data_ptr() in by_ptr:
            key, layer = by_ptr[p.data_ptr()]
        else:
            m = re.match(r"(.*layers\.)(\d+)\.(.*)", name)
            if m and keys.get(m.group(1) + m.group(3)):
                key, layer = m.group(1) + m.group(3), int(m.group(2))
            elif name in keys:
                key, layer = name, None
            else:
                raise KeyError(f"{name}: no ShardedTensor among {sorted(keys)}")
            print(f"  {name}: matched to {key} by name", flush=True)
        if layer is not None:
            head, _, tail = key.rpartition("layers.")
            key = f"{head}layers.{layer}.{tail}"
        names[name] = (key, layer)
    return names


def model_master_pairs(child):
    """(model param, its fp32 master) of a non-distributed mixed-precision optimizer; fp32 params
    are their own master."""
    pairs = []
    for model_group, master_group in zip(getattr(child, "float16_groups", []),
                                         getattr(child, "fp32_from_float16_groups", [])):
        pairs += list(zip(model_group, master_group))
    for group in getattr(child, "fp32_from_fp32_groups", []):
        pairs += [(p, p) for p in group]
    return pairs


def optimizer_truth(opt, model):
    """Per model parameter: its fp32 master and state tensors, whole, in the parameter's shape."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    out = {}
    children = getattr(opt, "chained_optimizers", [opt])
    for child in children:
        if isinstance(child, DistributedOptimizer):
            for p in child.model_param_group_index_map:
                tensors = child._get_main_param_and_optimizer_states(p)
                assert tensors["param"].numel() == p.numel(), "DP 1 holds whole parameters"
                out[p] = {k: v.detach().reshape(p.shape).float().cpu() for k, v in tensors.items()
                          if isinstance(v, torch.Tensor) and v.numel() == p.numel()}
            continue
        inner = child.optimizer
        pairs = model_master_pairs(child)
        for p, master in pairs:
            state = inner.state.get(master, {})
            t = {"param": master.detach().float().cpu().reshape(p.shape)}
            for k, v in state.items():
                if isinstance(v, torch.Tensor) and v.numel() == p.numel():
                    t[k] = v.detach().float().cpu().reshape(p.shape)
            out[p] = t
    return out


def buffer_layout(ddp, names):
    by_ptr = {p.data_ptr(): n for n, p in ddp.module.named_parameters()}
    layout = []
    for buf in list(ddp.buffers) + list(getattr(ddp, "expert_parallel_buffers", [])):
        b = {"param_dtype": str(buf.param_dtype), "grad_dtype": str(buf.grad_dtype),
             "numel": buf.numel, "buckets": []}
        for bucket in buf.buckets:
            params = []
            for p in bucket.params_list:
                start, end, _ = buf.param_index_map[p]
                params.append({"name": names[by_ptr[p.data_ptr()]][0], "start": start, "end": end})
            b["buckets"].append({"offset": bucket.offset, "numel": bucket.grad_data.numel(),
                                 "numel_unpadded": bucket.numel_unpadded, "params": params})
        layout.append(b)
    return layout


def run_one(name, cfg, out_root):
    from megatron.core import dist_checkpointing
    from safetensors.torch import save_file
    model, ddp, opt = build(cfg)
    losses = train(model, ddp, opt, cfg["steps"], cfg["seed"])
    names = checkpoint_names(model)
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "ckpt"))
    metadata = {"distrib_optim_sharding_type": cfg["sharding"], "chained_optim_avoid_prefix": True}
    model_sd = ddp.sharded_state_dict()
    state = {"model": model_sd,
             "optimizer": opt.sharded_state_dict(model_sd, is_loading=False, metadata=metadata),
             "iteration": cfg["steps"]}
    dist_checkpointing.save(state, os.path.join(out, "ckpt"), content_metadata=metadata)

    truth = optimizer_truth(opt, model)
    tensors = {}
    params = []
    for pname, p in model.named_parameters():
        key, layer = names[pname]
        tensors[key] = p.detach().cpu().contiguous()
        for k, v in truth[p].items():
            tensors[key + (".master" if k == "param" else "." + k)] = v.contiguous()
        params.append({"module_name": pname, "key": key, "layer": layer, "shape": list(p.shape),
                       "dtype": str(p.dtype), "states": sorted(k for k in truth[p] if k != "param")})
    save_file(tensors, os.path.join(out, "truth.safetensors"))
    info = {"config": cfg, "losses": losses, "params": params,
            "torch": torch.__version__, "megatron_core": __import__("megatron.core").core.__version__}
    if not cfg["optimizer"] == "muon":
        info["buffers"] = buffer_layout(ddp, names)
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"{name}: losses {losses}", flush=True)


CONFIGS = {
    # One bucket per buffer (overlap_grad_reduce off), dp_reshardable.
    "dp1-one-bucket": dict(optimizer="adam", sharding="dp_reshardable", overlap_grad_reduce=False),
    # Several buckets padded for NCCL bus bandwidth.
    "dp1-buckets-padded": dict(optimizer="adam", sharding="dp_reshardable", overlap_grad_reduce=True,
                               bucket_size=6000, pad_for_nccl=True),
    "dp1-fully-reshardable": dict(optimizer="adam", sharding="fully_reshardable",
                                  overlap_grad_reduce=True, bucket_size=6000),
    # LayerWise Muon (whole matrices per rank) with Adam for the other parameters.
    "dp1-layerwise-muon": dict(optimizer="muon", sharding="dp_reshardable", overlap_grad_reduce=False),
}




# ------------------------------------------------------------------------------------------------
# Parallel configurations (TP/PP/EP/DP > 1): several ranks on ONE GPU, torch.distributed on gloo
# (gloo_one_gpu.py stages CUDA tensors through the host). The parent process launches one worker
# process per rank (python3 make_megatron_fixtures.py --worker …; plain subprocesses, because
# dist_checkpointing.save starts processes of its own and daemonic multiprocessing children may not).

# Model shape shared by every parallel configuration; each entry overrides what it needs.
PAR_DEFAULTS = dict(tp=1, pp=1, dp=1, ep=1, layers=2, hidden=32, ffn=16, heads=4, query_groups=2,
                    vocab=64, experts=None, moe_ffn=8, first_stage_layers=None, optimizer="adam",
                    overlap_grad_reduce=False, bucket_size=None, pad_for_nccl=False, steps=3, seed=1234,
                    tied=False, moe_freq=None, integrity=False, qkv_bias=False, qk_norm=False,
                    kv_channels=None, real_vocab=None, save_args=False)

# name -> configuration; each is trained once and saved twice, as NAME-dp_reshardable and
# NAME-fully_reshardable. With pp > 1 there is no forward/backward (gloo cannot send CUDA tensors
# point-to-point between stages): the gradients are seeded draws, then the optimizer steps.
PAR_CONFIGS = {
    # TP 2, one bucket.
    "tp2-dp1": dict(tp=2),
    # PP 2, one layer per stage (seeded gradients).
    "pp2-dp1": dict(pp=2),
    # TP 2 x PP 2, GQA, one layer per stage (seeded gradients).
    "tp2pp2-dp1": dict(tp=2, pp=2),
    # TP 2 x DP 2: the distributed optimizer shards each TP rank's buffer over 2 DP ranks.
    "tp2-dp2": dict(tp=2, dp=2, query_groups=None),
    # TP 2, several buckets (overlap_grad_reduce, bucket_size 1500 elements).
    "tp2-dp1-buckets": dict(tp=2, overlap_grad_reduce=True, bucket_size=1000),
    # EP 2 MoE, 4 experts (2 per rank), top-2 router, allgather dispatcher; the dense part is
    # DP 2 (world 2), experts expert-DP 1: a ChainedOptimizer of a dense and an expert
    # DistributedOptimizer (dp_reshardable keys carry chained_0./chained_1.).
    "ep2-moe": dict(dp=2, ep=2, experts=4),
    # 3 layers at PP 2 (2 on the first stage, 1 on the last; seeded gradients).
    "pp2-dp1-3layers": dict(pp=2, layers=3, first_stage_layers=2),
    # LayerWise Muon (emerging-optimizers) at TP 2, Adam for embeddings, output layer and norms.
    "tp2-dp1-muon": dict(tp=2, optimizer="muon"),
    # PP 2 with the output layer tied to the embedding: the last stage holds a copy of the embedding
    # (checkpointed under the embedding's key as a replica) in its own buffers; saved with
    # verify_integrity (integrity.json: SHA-256 of every file).
    "pp2-dp1-tied": dict(pp=2, tied=True, integrity=True),
    # A MoE whose first layer is dense (moe_layer_freq [0, 1]): dense and expert MLP keys each cover
    # only their layers of the stacked layer axis; saved with verify_integrity.
    "ep2-moe-dense-first": dict(dp=2, ep=2, experts=4, moe_freq=[0, 1], integrity=True),
}
# Models for the Hugging Face export (world 1; testdata/megatron/hf/): vocab 96 padded to 128 as
# Megatron-LM pads it, each a shape of one architecture.
HF_SHAPE = dict(hidden=32, ffn=48, heads=4, query_groups=2, vocab=128, real_vocab=96, steps=2)
PAR_CONFIGS.update({
    # llama: GQA, untied; Megatron-LM's training args saved in the common state (no config needed).
    "hf-llama": dict(HF_SHAPE, save_args=True),
    # llama with the output layer tied to the embedding, MHA.
    "hf-llama-tied": dict(HF_SHAPE, tied=True, query_groups=None),
    # (No qwen2, q/k/v biases: Megatron-Core 0.19.2's distributed optimizer fails to save that model,
    # dp_reshardable on "assert tensors[key].shape == (gbuf_local_end - gbuf_local_start,)",
    # fully_reshardable on "The size of tensor a (64) must match the size of tensor b (32)".)
    # qwen3: q/k RMSNorm, head_dim 16 (heads x head_dim 64 != hidden 32).
    "hf-qwen3": dict(HF_SHAPE, qk_norm=True, kv_channels=16),
    # mixtral: 4 experts in every layer, top-2, EP 2 (world 2).
    "hf-mixtral": dict(HF_SHAPE, experts=4, moe_ffn=24, dp=2, ep=2),
    # qwen3_moe: q/k norms, layer 0 dense, layer 1 of 4 experts, EP 2 (world 2).
    "hf-qwen3-moe": dict(HF_SHAPE, experts=4, moe_ffn=24, qk_norm=True, moe_freq=[0, 1], dp=2, ep=2),
})
SHARDINGS = ("dp_reshardable", "fully_reshardable")


def megatron_lm_args(cfg):
    """The training args Megatron-LM's pretrain_gpt.py would have saved for this model (the fields an
    export reads, under Megatron-LM's names)."""
    import argparse
    return argparse.Namespace(
        num_layers=cfg["layers"], hidden_size=cfg["hidden"], ffn_hidden_size=cfg["ffn"],
        num_attention_heads=cfg["heads"], group_query_attention=cfg["query_groups"] is not None,
        num_query_groups=cfg["query_groups"] or cfg["heads"], kv_channels=cfg["kv_channels"],
        padded_vocab_size=cfg["vocab"], vocab_size=cfg["real_vocab"], max_position_embeddings=16,
        seq_length=16, rotary_base=10000, norm_epsilon=1e-5, normalization="RMSNorm", swiglu=True,
        position_embedding_type="rope", add_bias_linear=False, add_qkv_bias=cfg["qkv_bias"],
        qk_layernorm=cfg["qk_norm"], untie_embeddings_and_output_weights=not cfg["tied"],
        tensor_model_parallel_size=cfg["tp"], pipeline_model_parallel_size=cfg["pp"],
        num_experts=cfg["experts"], moe_router_topk=2, init_method_std=0.02, bf16=True)


def par_cfg(name):
    return dict(PAR_DEFAULTS, **PAR_CONFIGS[name])


def par_world(cfg):
    return cfg["tp"] * cfg["pp"] * cfg["dp"]


def par_build(cfg):
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(cfg["seed"])
    model_parallel_cuda_manual_seed(cfg["seed"])
    layer_wise = cfg["optimizer"] == "muon"
    moe = {}
    if cfg["experts"]:
        moe = dict(num_moe_experts=cfg["experts"], moe_ffn_hidden_size=cfg["moe_ffn"], moe_router_topk=2,
                   moe_token_dispatcher_type="allgather", moe_aux_loss_coeff=0.0,
                   moe_router_load_balancing_type="none", moe_grouped_gemm=False)
        if cfg["moe_freq"]:
            moe["moe_layer_freq"] = cfg["moe_freq"]
    tcfg = TransformerConfig(
        num_layers=cfg["layers"], hidden_size=cfg["hidden"], ffn_hidden_size=cfg["ffn"],
        num_attention_heads=cfg["heads"], num_query_groups=cfg["query_groups"],
        normalization="RMSNorm", gated_linear_unit=True, activation_func=torch.nn.functional.silu,
        add_bias_linear=False, bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
        tensor_model_parallel_size=cfg["tp"], pipeline_model_parallel_size=cfg["pp"],
        expert_model_parallel_size=cfg["ep"], sequence_parallel=False,
        num_layers_in_first_pipeline_stage=cfg["first_stage_layers"],
        num_layers_in_last_pipeline_stage=(cfg["layers"] - cfg["first_stage_layers"])
        if cfg["first_stage_layers"] else None, add_qkv_bias=cfg["qkv_bias"], qk_layernorm=cfg["qk_norm"],
        kv_channels=cfg["kv_channels"], **moe)
    if cfg["moe_freq"]:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
        spec = get_gpt_decoder_block_spec(tcfg, use_transformer_engine=False, normalization="RMSNorm",
                                          pp_rank=ps.get_pipeline_model_parallel_rank())
    else:
        spec = get_gpt_layer_local_spec(num_experts=cfg["experts"], moe_grouped_gemm=False,
                                        qk_layernorm=cfg["qk_norm"], normalization="RMSNorm")
    model = GPTModel(config=tcfg, transformer_layer_spec=spec, vocab_size=cfg["vocab"],
                     max_sequence_length=16, share_embeddings_and_output_weights=cfg["tied"],
                     position_embedding_type="rope", pre_process=ps.is_pipeline_first_stage(),
                     post_process=ps.is_pipeline_last_stage())
    if layer_wise:
        model = model.bfloat16()
    model = model.cuda()
    ddp_cfg = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=cfg["overlap_grad_reduce"],
        use_distributed_optimizer=not layer_wise, bucket_size=cfg["bucket_size"],
        pad_buckets_for_high_nccl_busbw=cfg["pad_for_nccl"])
    ddp = DistributedDataParallel(config=tcfg, ddp_config=ddp_cfg, module=model)
    ocfg = OptimizerConfig(
        optimizer=cfg["optimizer"], lr=1e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95,
        adam_eps=1e-8, clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16,
        use_distributed_optimizer=not layer_wise, use_layer_wise_distributed_optimizer=layer_wise)
    opt = get_megatron_optimizer(ocfg, [ddp])
    return model, ddp, opt


def _flat_sharded(obj):
    from megatron.core.dist_checkpointing.mapping import ShardedTensor
    if isinstance(obj, ShardedTensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _flat_sharded(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _flat_sharded(v)]
    return []


def _replica_sum(rid):
    return sum(rid) if isinstance(rid, (tuple, list)) else int(rid)


def truth_name(key, prepended):
    """Checkpoint key without DDP's "module." and with its prepended indices put back (the layer after
    the first "layers.", the expert after the last "experts."): module.decoder.layers.mlp.experts.
    experts.linear_fc1.weight at (1, 3) -> decoder.layers.1.mlp.experts.experts.3.linear_fc1.weight."""
    out = key[len("module."):] if key.startswith("module.") else key
    rest = list(prepended)
    i = out.find("layers.")
    # A model of mixed dense and MoE layers keys each layer by its index ("decoder.layers.1.mlp.experts.
    # experts.linear_fc1.weight", the experts prepended): only the expert is put back.
    if rest and not out[i + len("layers."):][:1].isdigit():
        assert i >= 0, key
        j = i + len("layers.")
        out = f"{out[:j]}{rest.pop(0)}.{out[j:]}"
    if rest:
        i = out.rfind("experts.")
        assert i >= 0, key
        j = i + len("experts.")
        out = f"{out[:j]}{rest.pop(0)}.{out[j:]}"
    assert not rest, key
    return out


def param_placements(ddp):
    """Module parameter name -> the pieces the checkpoint makes of it: per piece its key, global shape
    and offset (prepended layer/expert axes included), local shape, replica_id, and the flat indices
    of the parameter's elements it holds (the ShardedTensor, or the factory's build_fn applied to an
    index tensor: SwiGLU's fc1 becomes its w and v chunks at their global places)."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory
    by_ptr = {}
    for st in nested_values(ddp.sharded_state_dict()):
        if isinstance(st, (ShardedTensor, ShardedTensorFactory)):
            by_ptr.setdefault(st.data.data_ptr(), []).append(st)
    out = {}
    for name, p in ddp.module.named_parameters():
        cands = [s for s in by_ptr.get(p.data_ptr(), []) if s.data.numel() == p.numel()]
        assert len(cands) == 1, f"{name}: {len(cands)} sharded entries share its storage"
        st = cands[0]
        idx = torch.arange(p.numel(), dtype=torch.int64).reshape(p.shape)
        if isinstance(st, ShardedTensorFactory):
            sts = _flat_sharded(st.build_fn(st.key, idx, st.replica_id, None))
        else:
            sts = [st]
        pieces = []
        for s in sts:
            data = idx if s is st else s.data
            pre = s.prepend_axis_num
            assert tuple(data.shape) == tuple(s.local_shape), (name, data.shape, s.local_shape)
            pieces.append(dict(key=s.key, global_shape=list(s.global_shape),
                               global_offset=list(s.global_offset), local_shape=list(s.local_shape),
                               prepend=pre, replica_id=list(s.replica_id) if isinstance(s.replica_id, tuple)
                               else s.replica_id, idx=data.reshape(-1).clone()))
        out[name] = pieces
    return out


def global_flat_index(piece):
    """Flat indices in the key's global tensor of the piece's elements (row-major, local order)."""
    gs, off, pre = piece["global_shape"], piece["global_offset"], piece["prepend"]
    strides = [1] * len(gs)
    for a in range(len(gs) - 2, -1, -1):
        strides[a] = strides[a + 1] * gs[a + 1]
    base = sum(o * s for o, s in zip(off[:pre], strides[:pre]))
    g = torch.zeros(piece["local_shape"], dtype=torch.int64) + base
    nd = len(piece["local_shape"])
    for a, n in enumerate(piece["local_shape"]):
        shape = [1] * nd
        shape[a] = n
        g = g + (torch.arange(n, dtype=torch.int64) + off[pre + a]).reshape(shape) * strides[pre + a]
    return g.reshape(-1)


def _stable_seed(*parts):
    import zlib
    return zlib.crc32("/".join(map(str, parts)).encode()) & 0x7FFFFFFF


def seeded_grads(model, placements, seed, step):
    """main_grad of every parameter from a draw over its key's whole global tensor, so that replicas
    (e.g. TP-replicated norms) get equal gradients and every shard its part of one global draw."""
    draws = {}
    for name, p in model.named_parameters():
        local = torch.empty(p.numel(), dtype=torch.float32)
        for piece in placements[name]:
            key = piece["key"]
            if key not in draws:
                n = 1
                for d in piece["global_shape"]:
                    n *= d
                gen = torch.Generator().manual_seed(_stable_seed(seed, step, key))
                draws[key] = torch.randn(n, generator=gen) * 0.01
            local[piece["idx"]] = draws[key][global_flat_index(piece)]
        p.main_grad.copy_(local.reshape(p.shape).to(p.main_grad.device, p.main_grad.dtype))


def par_train(cfg, model, ddp, opt, placements):
    from megatron.core import parallel_state as ps
    gen = torch.Generator().manual_seed(cfg["seed"])
    seq, mb = 16, 4
    dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    dev = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    mask = torch.tril(torch.ones(1, 1, seq, seq, dtype=torch.bool)).logical_not().to(dev)
    pos = torch.arange(seq).unsqueeze(0).to(dev)
    losses = []
    for step in range(cfg["steps"]):
        tokens = torch.randint(0, cfg["real_vocab"] or cfg["vocab"], (mb * dp, seq + 1), generator=gen)
        tokens = tokens[dp_rank * mb:(dp_rank + 1) * mb].to(dev)
        ddp.zero_grad_buffer()
        opt.zero_grad()
        if cfg["pp"] > 1 or cfg.get("seeded_grads"):
            seeded_grads(model, placements, cfg["seed"], step)
            losses.append(None)
        else:
            with torch.autocast("cuda" if dev != "cpu" else "cpu", dtype=torch.bfloat16):
                loss = ddp(tokens[:, :-1], pos, mask, labels=tokens[:, 1:]).float().mean()
            loss.backward()
            losses.append(loss.item())
        ddp.finish_grad_sync()
        ok, _, _ = opt.step()
        assert ok, "optimizer step skipped"
    return losses


def local_state_fragments(opt):
    """Per model parameter: {state: [(start, end, flat fp32 values)]} for the part of it this rank's
    optimizer holds ('param' is the fp32 master). Distributed optimizers hold the param's range of
    their DP shard, the others (LayerWise children) whole parameters."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    out = {}
    for child in getattr(opt, "chained_optimizers", [opt]):
        if isinstance(child, DistributedOptimizer):
            for gbuf in child.gbuf_ranges:
                for buckets in gbuf.values():
                    for bucket in buckets:
                        for p, r in bucket["param_map"].items():
                            s, e = r["param"].start, r["param"].end
                            d = out.setdefault(p, {})
                            for k, v in child._get_main_param_and_optimizer_states(p).items():
                                if torch.is_tensor(v) and k != "step" and v.numel() == e - s:
                                    d.setdefault(k, []).append((s, e, v.detach().float().cpu().reshape(-1).clone()))
            continue
        inner = child.optimizer
        pairs = model_master_pairs(child)
        for p, master in pairs:
            n = p.numel()
            d = out.setdefault(p, {})
            d.setdefault("param", []).append((0, n, master.detach().float().cpu().reshape(-1).clone()))
            for k, v in inner.state.get(master, {}).items():
                if torch.is_tensor(v) and k != "step" and v.numel() == n:
                    d.setdefault(k, []).append((0, n, v.detach().float().cpu().reshape(-1).clone()))
    return out


def _rng(r):
    return [r.start, r.end]


def rank_layout(ddp, opt, tnames):
    """This rank's buffers and buckets (as DDP built them) and, per DistributedOptimizer (chained
    index), its dp_group_idx, DP size/rank and per bucket the shard it owns and each param's ranges."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    by_ptr = {p.data_ptr(): n for n, p in ddp.module.named_parameters()}
    bufs = []
    for kind, blist in (("dense", list(ddp.buffers)), ("expert", list(getattr(ddp, "expert_parallel_buffers", [])))):
        for buf in blist:
            b = {"kind": kind, "param_dtype": str(buf.param_dtype), "grad_dtype": str(buf.grad_dtype),
                 "numel": buf.numel, "numel_unpadded": getattr(buf, "numel_unpadded", None), "buckets": []}
            for bucket in buf.buckets:
                params = []
                for p in bucket.params_list:
                    start, end, _ = buf.param_index_map[p]
                    mn = by_ptr[p.data_ptr()]
                    params.append({"name": tnames[mn], "module_name": mn, "start": start, "end": end})
                b["buckets"].append({"offset": bucket.offset, "numel": bucket.grad_data.numel(),
                                     "numel_unpadded": bucket.numel_unpadded, "params": params})
            bufs.append(b)
    opts = []
    for ci, child in enumerate(getattr(opt, "chained_optimizers", [opt])):
        o = {"chained_index": ci, "class": type(child).__name__}
        if isinstance(child, DistributedOptimizer):
            dpg = child.data_parallel_group
            o.update(dp_group_idx=child.data_parallel_group_idx, dp_world_size=dpg.size(), dp_rank=dpg.rank(),
                     dp_group_ranks=torch.distributed.get_process_group_ranks(dpg), gbufs=[])
            for gi, gbuf in enumerate(child.gbuf_ranges):
                buf = child.buffers[gi]
                g = {"gbuf_idx": gi, "param_dtype": str(buf.param_dtype), "grad_dtype": str(buf.grad_dtype),
                     "dtypes": [], "buckets": []}
                for dtype, buckets in gbuf.items():
                    g["dtypes"].append(str(dtype))
                    for bi, bucket in enumerate(buckets):
                        bb = buf.buckets[bi]
                        L = bb.grad_data.numel() // dpg.size()
                        params = []
                        for p, r in bucket["param_map"].items():
                            params.append({"name": tnames[by_ptr[p.data_ptr()]], "param": _rng(r["param"]),
                                           "gbuf_world": _rng(r["gbuf_world"]),
                                           "gbuf_world_in_bucket": _rng(r["gbuf_world_in_bucket"]),
                                           "gbuf_local": _rng(r["gbuf_local"])})
                        g["buckets"].append({"dtype": str(dtype), "bucket_idx": bi, "offset": bb.offset,
                                             "numel": bb.grad_data.numel(), "numel_unpadded": bb.numel_unpadded,
                                             "shard": [dpg.rank() * L, (dpg.rank() + 1) * L], "params": params})
                o["gbufs"].append(g)
        opts.append(o)
    return bufs, opts


def assemble(records):
    """Rank 0: every key's global tensors (weight, master, states) from all ranks' pieces and
    fragments; main replicas first, later writers compared. Returns the truth tensors (one per
    truth name), the params list and the replica mismatches."""
    keys = {}  # ckpt key -> {"shape", "prepend", "dtype", "vals": {state: tensor}, "cov": {state: bool}}
    entries = []
    for rec in records:
        for prm in rec["params"]:
            for piece in prm["pieces"]:
                entries.append((_replica_sum(piece["replica_id"]), rec["rank"], prm, piece))
    entries.sort(key=lambda e: (e[0], e[1]))
    mismatch = {}
    for _, rank, prm, piece in entries:
        k = keys.setdefault(piece["key"], {"shape": piece["global_shape"], "prepend": piece["prepend"],
                                           "dtype": prm["weight"].dtype, "vals": {}, "cov": {}})
        assert k["shape"] == piece["global_shape"], piece["key"]
        g = global_flat_index(piece)
        idx = piece["idx"]
        n = 1
        for d in k["shape"]:
            n *= d
        frags = {"": [(0, prm["numel"], prm["weight"])]}
        frags.update(prm["states"])
        for state, fl in frags.items():
            if state not in k["vals"]:
                k["vals"][state] = torch.zeros(n, dtype=k["dtype"] if state == "" else torch.float32)
                k["cov"][state] = torch.zeros(n, dtype=torch.bool)
            vals, cov = k["vals"][state], k["cov"][state]
            for s, e, v in fl:
                m = (idx >= s) & (idx < e)
                gi, vi = g[m], v[idx[m] - s].to(vals.dtype)
                new = ~cov[gi]
                vals[gi[new]] = vi[new]
                cov[gi[new]] = True
                if (~new).any():
                    d = (vals[gi[~new]].float() - vi[~new].float()).abs().max().item()
                    if d != 0:
                        name = f"{piece['key']}{'.' + state if state else ''}"
                        mismatch[name] = max(mismatch.get(name, 0.0), d)
    tensors, info = {}, {}
    for key, k in keys.items():
        for state, cov in k["cov"].items():
            assert cov.all(), f"{key} {state or 'weight'}: {int((~cov).sum())} of {cov.numel()} elements not held"
        pre = k["prepend"]
        shape = k["shape"]
        full = {s: v.reshape(shape) for s, v in k["vals"].items()}
        import itertools
        for ix in itertools.product(*[range(d) for d in shape[:pre]]):
            name = truth_name(key, ix)
            for state, v in full.items():
                suffix = "" if state == "" else ".master" if state == "param" else "." + state
                tensors[name + suffix] = v[ix].clone().contiguous()
            info[name] = {"key": key[len("module."):] if key.startswith("module.") else key,
                          "ckpt_key": key, "prepended_index": list(ix), "shape": shape[pre:], "dtype": str(k["dtype"]),
                          "states": sorted(s for s in full if s not in ("", "param"))}
    return tensors, info, mismatch


def par_worker(name, rank, world, port, out_root):
    cfg = par_cfg(name)
    assert world == par_world(cfg)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gloo_one_gpu
    gloo_one_gpu.install()
    if os.environ.get("FIXTURES_CPU_DEBUG"):
        import cpu_debug  # noqa: F401  (development only: pretends the CPU is a GPU)
    torch.cuda.set_device(0)
    from megatron.core import dist_checkpointing, parallel_state as ps
    gloo_one_gpu.patch_megatron()
    ps.initialize_model_parallel(cfg["tp"], cfg["pp"], expert_model_parallel_size=cfg["ep"])
    model, ddp, opt = par_build(cfg)
    placements = param_placements(ddp)
    losses = par_train(cfg, model, ddp, opt, placements)

    tnames = {n: truth_name(pcs[0]["key"], pcs[0]["global_offset"][:pcs[0]["prepend"]])
              for n, pcs in placements.items()}
    coords = dict(rank=rank, tp=ps.get_tensor_model_parallel_rank(), pp=ps.get_pipeline_model_parallel_rank(),
                  dp=ps.get_data_parallel_rank(), ep=ps.get_expert_model_parallel_rank(),
                  expert_dp=ps.get_expert_data_parallel_rank())
    frags = local_state_fragments(opt)
    params = []
    for n, p in model.named_parameters():
        params.append({"module_name": n, "name": tnames[n], "numel": p.numel(), "local_shape": list(p.shape),
                       "weight": p.detach().cpu().reshape(-1).clone(), "states": frags.get(p, {}),
                       "pieces": placements[n]})
    bufs, opts = rank_layout(ddp, opt, tnames)
    record = dict(coords, losses=losses, params=params, buffers=bufs, optimizers=opts)
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(record, gathered, dst=0)

    dirs = {s: os.path.join(out_root, f"{name}-{s}") for s in SHARDINGS}
    if rank == 0:
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(os.path.join(d, "ckpt"))
    dist.barrier()
    for sharding, d in dirs.items():
        metadata = {"distrib_optim_sharding_type": sharding, "chained_optim_avoid_prefix": True}
        model_sd = ddp.sharded_state_dict()
        state = {"model": model_sd,
                 "optimizer": opt.sharded_state_dict(model_sd, is_loading=False, metadata=metadata),
                 "iteration": cfg["steps"]}
        if cfg["save_args"]:
            state["args"], state["checkpoint_version"] = megatron_lm_args(cfg), 3.0
        dist_checkpointing.save(state, os.path.join(d, "ckpt"), content_metadata=metadata,
                                verify_integrity=cfg["integrity"])
        dist.barrier()

    if rank == 0:
        from safetensors.torch import save_file
        tensors, info, mismatch = assemble(gathered)
        order, holders = [], {}
        for rec in sorted(gathered, key=lambda r: (r["pp"], r["tp"], r["ep"], r["dp"])):
            for prm in rec["params"]:
                if prm["name"] not in holders:
                    order.append(prm["name"])
                    holders[prm["name"]] = []
                holders[prm["name"]].append({
                    **{c: rec[c] for c in ("rank", "tp", "pp", "dp", "ep", "expert_dp")},
                    "module_name": prm["module_name"], "local_shape": prm["local_shape"],
                    "states_held": {k: [[s, e] for s, e, _ in v] for k, v in prm["states"].items()},
                    "pieces": [{"key": pc["key"], "global_offset": pc["global_offset"][pc["prepend"]:],
                                "local_shape": pc["local_shape"], "local_flat_start": int(pc["idx"].min()),
                                "replica_id": pc["replica_id"]} for pc in prm["pieces"]]})
        plist = []
        for n in order:
            e = dict(info[n], name=n, holders=holders[n])
            pos = dict(zip(("layer", "expert"), e["prepended_index"]))
            e["layer"], e["expert"] = pos.get("layer"), pos.get("expert")
            local = holders[n][0]["local_shape"]
            e["partition_dim"] = next((a for a, (g, l) in enumerate(zip(e["shape"], local)) if g != l), None)
            plist.append(e)
        ranks = [{**{c: r[c] for c in ("rank", "tp", "pp", "dp", "ep", "expert_dp")},
                  "losses": r["losses"], "buffers": r["buffers"], "optimizers": r["optimizers"]}
                 for r in sorted(gathered, key=lambda r: r["rank"])]
        for sharding, d in dirs.items():
            save_file(tensors, os.path.join(d, "truth.safetensors"))
            meta = {"config": dict(cfg, name=name, sharding=sharding, world=world),
                    "params": plist, "ranks": ranks, "replica_mismatch": mismatch,
                    "torch": torch.__version__, "megatron_core": __import__("megatron.core").core.__version__,
                    "notes": PAR_NOTES}
            with open(os.path.join(d, "truth.json"), "w") as f:
                json.dump(meta, f, indent=1)
        print(f"{name}: {len(tensors)} truth tensors, losses {[r['losses'] for r in ranks]}, "
              f"replica mismatches {mismatch}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


PAR_NOTES = (
    "params: one entry per whole parameter, ordered by first appearance over ranks sorted by (pp, tp, ep, dp) "
    "and each rank's registration order; name = checkpoint key with its prepended layer/expert indices put "
    "back (decoder.layers.{L}.…, …local_experts.{E}.…); shape = global shape (TP shards joined; SwiGLU fc1 "
    "as the checkpoint's model-space tensor: all TP ranks' w chunks, then all v chunks); holders: which "
    "rank holds it, its local (TP) shape and the pieces of it the checkpoint places (global_offset without "
    "the prepended axes, local_flat_start = first local element of the piece), states_held = the flat "
    "ranges of the local parameter whose optimizer state this rank holds. ranks: per global rank its "
    "coordinates, losses (null: seeded gradients, no forward), the DDP buffers/buckets and, per "
    "(chained) DistributedOptimizer, dp_group_idx, DP size/rank and per bucket its shard and param ranges. "
    "truth.safetensors: NAME (model weight as held), NAME.master (fp32), NAME.<state>, whole.")


def run_dp1(names, out):
    """The DP=1 configurations, in this process (NCCL, world 1), exactly as before."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.distributed.init_process_group("nccl", world_size=1, rank=0)
    torch.cuda.set_device(0)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1)
    failed = []
    for name, cfg in CONFIGS.items():
        if name not in names:
            continue
        cfg = dict(cfg, steps=3, seed=1234)
        try:
            run_one(name, cfg, out)
        except Exception as e:  # keep going: one failing configuration must not hide the others
            import traceback
            traceback.print_exc()
            failed.append(name)
    torch.distributed.destroy_process_group()
    return failed


def run_parallel(names, out, jobs, timeout, port0=29620):
    """Each parallel configuration: par_world(cfg) worker processes on cuda:0; up to `jobs` at once.
    Worker logs go to OUT/_logs/NAME.rankR.log."""
    import subprocess
    import time
    logs = os.path.join(out, "_logs")
    os.makedirs(logs, exist_ok=True)
    pending, running, failed = list(names), {}, []
    port = port0
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            world = par_world(par_cfg(name))
            procs = []
            for r in range(world):
                f = open(os.path.join(logs, f"{name}.rank{r}.log"), "w")
                procs.append((subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), out, "--worker", name, str(r), str(world), str(port)],
                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True), f))
            running[name] = (procs, time.time())
            port += 7
        time.sleep(0.5)
        for name, (procs, t0) in list(running.items()):
            codes = [p.poll() for p, _ in procs]
            dead = any(c not in (None, 0) for c in codes)
            late = time.time() - t0 > timeout
            if all(c == 0 for c in codes) or dead or late:
                if dead or late:
                    for p, _ in procs:
                        if p.poll() is None:
                            os.killpg(p.pid, 9)
                    for p, _ in procs:
                        p.wait()
                for _, f in procs:
                    f.close()
                ok = all(p.returncode == 0 for p, _ in procs)
                print(f"== {name}: {'ok' if ok else 'FAILED' + (' (timeout)' if late else '')} "
                      f"in {time.time() - t0:.0f}s", flush=True)
                if not ok:
                    failed.append(name)
                    for r in range(len(procs)):
                        with open(os.path.join(logs, f"{name}.rank{r}.log")) as f:
                            lines = [l for l in f.read().splitlines() if "Warning" not in l and "warn" not in l]
                        print(f"-- {name} rank {r}:\n" + "\n".join(lines[-12:]), flush=True)
                else:
                    with open(os.path.join(logs, f"{name}.rank0.log")) as f:
                        print("".join(l for l in f if l.startswith(name + ":")), end="", flush=True)
                del running[name]
    return failed


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*", help="configurations (names of CONFIGS or PAR_CONFIGS, or "
                    "fixture folder names NAME-dp_reshardable / NAME-fully_reshardable); default: all")
    ap.add_argument("--jobs", type=int, default=3, help="parallel configurations run at once")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per parallel configuration")
    ap.add_argument("--worker", nargs=4, metavar=("NAME", "RANK", "WORLD", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        name, rank, world, port = args.worker
        par_worker(name, int(rank), int(world), int(port), args.out)
        sys.exit(0)
    wanted = args.only
    dp1 = [n for n in CONFIGS if not wanted or n in wanted]
    par = []
    for n in PAR_CONFIGS:
        if not wanted or n in wanted or any(f"{n}-{s}" in wanted for s in SHARDINGS):
            par.append(n)
    unknown = [w for w in (wanted or []) if w not in dp1 and not any(w == n or w.startswith(n + "-") for n in par)]
    if unknown:
        sys.exit(f"unknown configurations: {unknown}")
    failed = []
    if dp1:
        failed += run_dp1(dp1, args.out)
    if par:
        failed += run_parallel(par, args.out, args.jobs, args.timeout)
    if failed:
        print("failed:", failed, flush=True)
    sys.exit(1 if failed else 0)
