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
                     vocab_size=64, max_sequence_length=16, share_embeddings_and_output_weights=False,
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
        pairs = []
        for model_group, master_group in zip(getattr(child, "float16_groups", []),
                                             getattr(child, "fp32_from_float16_groups", [])):
            pairs += list(zip(model_group, master_group))
        for group in getattr(child, "fp32_from_fp32_groups", []):
            pairs += [(p, p) for p in group]
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


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.distributed.init_process_group("nccl", world_size=1, rank=0)
    torch.cuda.set_device(0)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1)
    failed = []
    for name, cfg in CONFIGS.items():
        if args.only and name not in args.only:
            continue
        cfg = dict(cfg, steps=3, seed=1234)
        try:
            run_one(name, cfg, args.out)
        except Exception as e:  # keep going: one failing configuration must not hide the others
            import traceback
            traceback.print_exc()
            failed.append(name)
    torch.distributed.destroy_process_group()
    sys.exit(1 if failed else 0)
