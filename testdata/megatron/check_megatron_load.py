"""Loads a torch_dist checkpoint into Megatron-Core (megatron-core 0.19.2, one GPU) with a given
configuration, checks the loaded state against a ground truth bitwise, and trains a few more steps.

  python3 check_megatron_load.py CKPT CONFIG_JSON TRUTH.safetensors OUT.json [--steps N]

CONFIG_JSON is a configuration of make_megatron_fixtures.py (optimizer, overlap_grad_reduce, bucket_size,
pad_for_nccl, seed): the model and DistributedOptimizer are built with it, then
dist_checkpointing.load fills them from CKPT (the optimizer in the form CKPT's content metadata names).
OUT.json records, per parameter tensor of the ground truth, whether the loaded value is bitwise equal,
and the losses of the next steps (same data for every call), so a resharded checkpoint loaded with
another bucket layout can be compared with the original loaded with its own.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_megatron_fixtures as fx  # noqa: E402


def skip_unloaded_states():
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    original = DistributedOptimizer._set_main_param_and_optimizer_states

    def patched(self, model_param, tensors):
        group_index, group_order = self.model_param_group_index_map[model_param]
        main_param = self.optimizer.param_groups[group_index]["params"][group_order]
        state = self.optimizer.state[main_param]
        held = {k: state.pop(k) for k in list(state) if k not in tensors and k != "param"}
        try:
            original(self, model_param, tensors)
        finally:  # each parameter its own step tensor: torch's Adam increments it in place
            state.update({k: v.clone() if torch.is_tensor(v) else v for k, v in held.items()})

    DistributedOptimizer._set_main_param_and_optimizer_states = patched


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("config")
    ap.add_argument("truth")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--skip-unloaded-states", action="store_true",
                    help="work around Megatron-Core 0.19.2's fully_reshardable loader with torch's Adam (no "
                         "Transformer Engine or Apex): it copies every per-parameter state the optimizer holds, "
                         "including torch's 'step' tensor, which the checkpoint does not store (KeyError 'step')")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    torch.distributed.init_process_group("nccl", world_size=1, rank=0)
    torch.cuda.set_device(0)
    from megatron.core import dist_checkpointing, parallel_state
    from safetensors.torch import load_file
    parallel_state.initialize_model_parallel(1, 1)

    cfg = json.loads(args.config)
    cfg.setdefault("seed", 1234)
    model, ddp, opt = fx.build(cfg)
    # Without Apex or Transformer Engine, Megatron's optimizers can describe their state for loading
    # only once it exists: one step on other data creates it; the load overwrites all of it.
    fx.train(model, ddp, opt, 1, 999)
    metadata = dist_checkpointing.load_content_metadata(args.ckpt) or {}
    model_sd = ddp.sharded_state_dict()
    sd = {"model": model_sd, "optimizer": opt.sharded_state_dict(model_sd, is_loading=True, metadata=metadata)}
    state = dist_checkpointing.load(sd, args.ckpt)
    model.load_state_dict({k[len("module."):] if k.startswith("module.") else k: v for k, v in state["model"].items()})
    if args.skip_unloaded_states:
        skip_unloaded_states()
    with torch.no_grad():  # fp32 parameters are their own masters: views of leaves that need grad
        opt.load_state_dict(state["optimizer"])

    truth = load_file(args.truth)
    names = fx.checkpoint_names(model)
    loaded = fx.optimizer_truth(opt, model)
    result = {"ckpt": args.ckpt, "config": cfg, "metadata": metadata, "equal": {}, "missing": []}
    for pname, p in model.named_parameters():
        key = names[pname][0]
        tensors = {key: p.detach().cpu()}
        for k, v in loaded[p].items():
            tensors[key + (".master" if k == "param" else "." + k)] = v
        for name, value in tensors.items():
            if name not in truth:
                result["missing"].append(name)
                continue
            want = truth[name]
            result["equal"][name] = bool(value.dtype == want.dtype and value.shape == want.shape and
                                         torch.equal(value.view(-1).view(torch.uint8) if value.dtype != torch.bool else value,
                                                     want.view(-1).view(torch.uint8)))
    result["all_equal"] = all(result["equal"].values()) and not result["missing"] and \
        len(result["equal"]) == len(truth)
    result["losses"] = fx.train(model, ddp, opt, args.steps, cfg["seed"] + 1)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{args.ckpt}: state equal {result['all_equal']} ({sum(result['equal'].values())}/{len(truth)}), "
          f"losses {result['losses']}", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
