"""Loads a torch_dist checkpoint of one of make_megatron_fixtures.py's parallel configurations into
Megatron-Core (megatron-core 0.19.2) at another parallelism, checks the loaded state against the
source's ground truth bitwise, and trains a few more steps.

  python3 load_at_parallelism.py CKPT CONFIG TRUTH.safetensors OUT.json [--tp N] [--pp N] [--dp N]
                                 [--ep N] [--bucket-size N|none] [--first-stage-layers N] [--steps N]
                                 [--reduce-chained-common]

CONFIG names the PAR_CONFIGS entry the checkpoint was made from (the model); --tp/--pp/--dp/--ep the
parallelism it is loaded at (default: the configuration's; at another PP the layers split evenly),
--bucket-size the DDP buckets (a number: overlap_grad_reduce with that bucket size; none: one bucket
per buffer; default: the configuration's), --first-stage-layers the layers of the first of 2 pipeline
stages (the last holds the rest). The world (TP x PP x DP ranks) runs as
processes on the one GPU over gloo, as the generator runs (gloo_one_gpu.py). Each rank builds the
model and DistributedOptimizer, steps once on other gradients so that the optimizer state exists
(Megatron describes it for loading only then), then dist_checkpointing.load fills both from CKPT
in the form its content metadata names. Rank 0 assembles every rank's pieces into whole tensors
(make_megatron_fixtures.assemble) and compares them with TRUTH. Then every rank trains --steps steps
(forward and backward at PP 1; seeded gradients at PP > 1 and for MoE at TP > 1) and rank 0 records
the losses and a SHA-256 of the whole state after them, so that two checkpoints of one state (fpgather's output and Megatron's
own save) loaded alike can be compared. OUT.json: all_equal, the tensors that differ or are missing,
losses, state_sha256; OUT.after.safetensors: the whole state after the steps (weights, masters,
states), for measuring how close two runs are.

After the load every parameter's Adam `step` is set from its param group's: Megatron-Core 0.19.2 with
torch's Adam (no Transformer Engine or Apex) gives every parameter of a dp_reshardable load one shared
step tensor (DistributedOptimizer.load_state_dict), which torch's Adam then increments once per
parameter, and its fully_reshardable load keeps the warm-up step's; either way bias correction would
follow the load path instead of the checkpoint.

--reduce-chained-common: a MoE saved at EP > 1 keeps a chained optimizer (dense + expert) whose common
state Megatron-Core 0.19.2 cannot hand to the one optimizer of a run at EP 1 (the experts then join the
dense buffers): ChainedOptimizer.load_state_dict gives {0: dense, 1: expert} to its only child (KeyError
'optimizer'). With this flag the loaded optimizer state keeps the dense child's common entry (its
param_groups, which are all the EP 1 run has), for loading Megatron's own fully_reshardable MoE save
there as a reference.
"""
import argparse
import hashlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_megatron_fixtures as fx  # noqa: E402

SIZES = ("tp", "pp", "dp", "ep")


def target_cfg(args):
    cfg = fx.par_cfg(args.config)
    source_pp = cfg["pp"]
    for k in SIZES:
        if getattr(args, k):
            cfg[k] = getattr(args, k)
    if cfg["pp"] != source_pp:  # the source's uneven stages are its own; a new PP splits evenly
        cfg["first_stage_layers"] = None
    if args.first_stage_layers:  # PP 2: the last stage holds the rest
        cfg["first_stage_layers"] = args.first_stage_layers
    # Megatron-Core runs MoE at TP > 1 only with sequence parallelism, which its torch norms (no
    # Transformer Engine or Apex here) refuse: such a model steps on seeded gradients, as at PP > 1.
    cfg["seeded_grads"] = bool(cfg["experts"]) and cfg["tp"] > 1
    if args.bucket_size is not None:
        cfg["bucket_size"] = None if args.bucket_size == "none" else int(args.bucket_size)
        cfg["overlap_grad_reduce"] = cfg["bucket_size"] is not None
    return cfg


def restore_steps(opt):
    """Every parameter's own Adam step tensor, valued as its param group's (see the module note)."""
    for child in getattr(opt, "chained_optimizers", [opt]):
        inner = getattr(child, "optimizer", None)
        if inner is None:
            continue
        for group in inner.param_groups:
            if "step" not in group:
                continue
            for p in group["params"]:
                state = inner.state.get(p)
                if state is not None and torch.is_tensor(state.get("step")):
                    state["step"] = torch.tensor(float(group["step"]), dtype=state["step"].dtype,
                                                 device=state["step"].device)


def reduce_chained_common(optimizer_state, opt):
    """The loaded optimizer state of a chained save, for a run with one optimizer: the common entries
    of child 0 (see --reduce-chained-common) under the loaded sharded state."""
    children = [k for k in optimizer_state if isinstance(k, int)]
    if not children or len(getattr(opt, "chained_optimizers", [opt])) != 1:
        return optimizer_state, False
    out = {k: v for k, v in optimizer_state.items() if not isinstance(k, int)}
    for k, v in optimizer_state[min(children)].items():
        out.setdefault(k, v)
    return out, True


def rank_record(model, opt, placements, rank):
    tnames = {n: fx.truth_name(pcs[0]["key"], pcs[0]["global_offset"][:pcs[0]["prepend"]])
              for n, pcs in placements.items()}
    frags = fx.local_state_fragments(opt)
    params = [{"module_name": n, "name": tnames[n], "numel": p.numel(), "local_shape": list(p.shape),
               "weight": p.detach().cpu().reshape(-1).clone(), "states": frags.get(p, {}), "pieces": placements[n]}
              for n, p in model.named_parameters()]
    return {"rank": rank, "params": params}


def gather_whole(record, rank, world):
    import torch.distributed as dist
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(record, gathered, dst=0)
    if rank != 0:
        return None
    tensors, _, mismatch = fx.assemble(gathered)
    return tensors, mismatch


def worker(args, rank, world, port):
    cfg = target_cfg(args)
    assert world == fx.par_world(cfg), (world, cfg)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import gloo_one_gpu
    gloo_one_gpu.install()
    if os.environ.get("FIXTURES_CPU_DEBUG"):
        import cpu_debug  # noqa: F401  (development only: pretends the CPU is a GPU)
    torch.cuda.set_device(0)
    from megatron.core import dist_checkpointing, parallel_state as ps
    gloo_one_gpu.patch_megatron()
    ps.initialize_model_parallel(cfg["tp"], cfg["pp"], expert_model_parallel_size=cfg["ep"])
    model, ddp, opt = fx.par_build(cfg)
    placements = fx.param_placements(ddp)
    fx.par_train(dict(cfg, steps=1, seed=cfg["seed"] + 999), model, ddp, opt, placements)

    metadata = dist_checkpointing.load_content_metadata(args.ckpt) or {}
    model_sd = ddp.sharded_state_dict()
    sd = {"model": model_sd, "optimizer": opt.sharded_state_dict(model_sd, is_loading=True, metadata=metadata)}
    state = dist_checkpointing.load(sd, args.ckpt)
    model.load_state_dict({k[len("module."):] if k.startswith("module.") else k: v for k, v in state["model"].items()})
    if metadata.get("distrib_optim_sharding_type") == "fully_reshardable":
        import check_megatron_load
        check_megatron_load.skip_unloaded_states()
    optimizer_state, reduced = state["optimizer"], False
    if args.reduce_chained_common:
        optimizer_state, reduced = reduce_chained_common(optimizer_state, opt)
    with torch.no_grad():  # fp32 parameters are their own masters: views of leaves that need grad
        opt.load_state_dict(optimizer_state)
    restore_steps(opt)

    loaded = gather_whole(rank_record(model, opt, placements, rank), rank, world)
    losses = fx.par_train(dict(cfg, steps=args.steps, seed=cfg["seed"] + 1), model, ddp, opt, placements)
    after = gather_whole(rank_record(model, opt, placements, rank), rank, world)
    if rank == 0:
        from safetensors.torch import load_file
        truth = load_file(args.truth)
        tensors, mismatch = loaded
        equal, differ = 0, []
        for name, want in truth.items():
            got = tensors.get(name)
            if got is not None and got.dtype == want.dtype and got.shape == want.shape and \
                    torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)):
                equal += 1
            else:
                differ.append(name)
        h = hashlib.sha256()
        for name in sorted(after[0]):
            h.update(name.encode())
            h.update(after[0][name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        from safetensors.torch import save_file
        save_file({n: t.contiguous() for n, t in after[0].items()}, os.path.splitext(args.out)[0] + ".after.safetensors")
        result = {"ckpt": args.ckpt, "config": cfg, "metadata": metadata, "truth_tensors": len(truth),
                  "equal": equal, "differ_or_missing": differ, "extra": sorted(set(tensors) - set(truth)),
                  "replica_mismatch": mismatch, "all_equal": not differ and len(tensors) == len(truth),
                  "losses": losses, "state_sha256": h.hexdigest(), "chained_common_reduced": reduced}
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"{args.ckpt} at " + " x ".join(f"{k.upper()} {cfg[k]}" for k in SIZES) +
              f": state equal {result['all_equal']} ({equal}/{len(truth)}), losses {losses}, "
              f"state after {args.steps} steps {result['state_sha256'][:16]}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("config", choices=sorted(fx.PAR_CONFIGS))
    ap.add_argument("truth")
    ap.add_argument("out")
    for k in SIZES:
        ap.add_argument("--" + k, type=int, default=0)
    ap.add_argument("--bucket-size", metavar="N|none")
    ap.add_argument("--first-stage-layers", type=int, default=0)
    ap.add_argument("--reduce-chained-common", action="store_true")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--port", type=int, default=29700)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--worker", nargs=2, type=int, metavar=("RANK", "WORLD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args, args.worker[0], args.worker[1], args.port)
        return 0
    world = fx.par_world(target_cfg(args))
    log = os.path.splitext(args.out)[0]
    import gloo_one_gpu
    codes = gloo_one_gpu.run_ranks(
        lambda r: [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--worker", str(r), str(world)], world,
        log, args.timeout)
    if any(codes):
        for r in range(world):
            with open(f"{log}.rank{r}.log") as f:
                print(f"-- rank {r}:\n" + "\n".join(f.read().splitlines()[-15:]), flush=True)
        return 1
    with open(f"{log}.rank0.log") as f:
        print("".join(l for l in f if l.startswith(args.ckpt)), end="", flush=True)
    with open(args.out) as f:
        return 0 if json.load(f)["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
