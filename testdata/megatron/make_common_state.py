#!/usr/bin/env python3
"""Writes the common state Megatron-LM's training loop saves (megatron/training/checkpointing.py,
generate_state_dict) as the torch.save archive a torch_dist checkpoint stores in its
`common_state/shard_0_1` bytes item: the training args as an argparse.Namespace holding Megatron's
enums, torch dtypes, a path and a signal; checkpoint_version, iteration, the LR scheduler's state, the
rerun state machine's state, the FLOPs counter and content_metadata.

usage: make_common_state.py OUT_DIR

Needs neither torch nor Megatron: the classes are stand-ins registered under the modules and names the
real ones have (megatron.core.transformer.enums.AttnBackend, torch.bfloat16, ...), so pickle writes the
same GLOBAL / REDUCE / NEWOBJ opcodes torch.save writes for the real objects (protocol 2), and the
archive has torch.save's records. Writes:
  megatron_lm.pt      a TP 2 × PP 2 run (the shape of testdata/megatron/parallel/tp2pp2-dp1-*), iteration 3
  megatron_lm_vpp.pt  the same with virtual_pipeline_model_parallel_size 2
  megatron_lm_dp1.pt  a run at TP = PP = DP = 1 (the shape of testdata/megatron/dp1-*)
  megatron_lm_tp2_cp2.pt  a TP 2 × CP 2 run (world 4): its optimizer shards over DP × CP = 2 ranks,
                      as the TP 2 × DP 2 fixture's do (testdata/megatron/parallel/tp2-dp2-*)
  mcore_api.pt        what dist_checkpointing.save called directly stores: the optimizer's sharding
                      type, no content_metadata
  vpp_per_bucket_numel.pt  a per_bucket_numel object of two model chunks (four buffers, each dtype pair
                      twice), as a virtual pipeline stage's distributed optimizer saves it
"""
import argparse
import enum
import io
import pathlib
import pickle
import signal
import sys
import types
import zipfile


def module(name):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):  # the parent packages too: pickle imports the module by name
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    return sys.modules[name]


def register(mod, cls):
    cls.__module__ = mod
    module(mod).__dict__[cls.__name__] = cls
    return cls


class dtype:  # torch.dtype pickles as the global torch.<name>
    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name


dtype.__module__ = "torch"
torch = module("torch")
for n in ("bfloat16", "float32", "float16"):
    setattr(torch, n, dtype(n))

AttnBackend = register("megatron.core.transformer.enums",
                       enum.Enum("AttnBackend", [("flash", 1), ("fused", 2), ("unfused", 3), ("local", 4), ("auto", 5)]))
CudaGraphScope = register("megatron.core.transformer.enums", enum.Enum("CudaGraphScope", [("full", 1), ("attn", 2)]))
RerunMode = register("megatron.core.rerun_state_machine",
                     enum.Enum("RerunMode", [("DISABLED", "disabled"), ("VALIDATE_RESULTS", "validate_results")], type=str))
RerunState = register("megatron.core.rerun_state_machine",
                      enum.Enum("RerunState", [("NOT_RUNNING_YET", 0), ("INITIAL_RUN", 1)]))


def args(vpp, tp=2, pp=2, cp=1, dp=1):
    a = argparse.Namespace()
    a.num_layers = 2
    a.hidden_size = 32
    a.ffn_hidden_size = 64
    a.num_attention_heads = 4
    a.num_query_groups = 4
    a.group_query_attention = False
    a.seq_length = 16
    a.max_position_embeddings = 16
    a.padded_vocab_size = 64
    a.tensor_model_parallel_size = tp
    a.pipeline_model_parallel_size = pp
    a.virtual_pipeline_model_parallel_size = vpp
    a.context_parallel_size = cp
    a.expert_model_parallel_size = 1
    a.expert_tensor_parallel_size = 2
    a.data_parallel_size = dp
    a.world_size = tp * pp * cp * dp
    a.num_experts = None
    a.micro_batch_size = 2
    a.global_batch_size = 4
    a.train_iters = 10
    a.optimizer = "adam"
    a.lr = 0.001
    a.min_lr = 0.0
    a.weight_decay = 0.01
    a.adam_beta1 = 0.9
    a.adam_beta2 = 0.95
    a.bf16 = True
    a.fp16 = False
    a.params_dtype = torch.bfloat16
    a.use_distributed_optimizer = True
    a.overlap_grad_reduce = False
    a.ckpt_format = "torch_dist"
    a.save = pathlib.PosixPath("/checkpoints/run")
    a.exit_signal = signal.SIGTERM
    a.attention_backend = AttnBackend.auto
    a.cuda_graph_scope = [CudaGraphScope.full]
    a.transformer_impl = "transformer_engine"
    a.swiglu = True
    a.normalization = "RMSNorm"
    return a


def common_state(vpp, **sizes):
    return [{
        "args": args(vpp, **sizes),
        "checkpoint_version": 3.0,
        "iteration": 3,
        "optimizer": {"param_state_sharding_type": "dp_reshardable"},
        "opt_param_scheduler": {"max_lr": 0.001, "min_lr": 0.0, "num_steps": 12, "warmup_steps": 0,
                                "decay_style": "cosine", "decay_steps": 40},
        "rerun_state_machine": {"mode": RerunMode.DISABLED, "state": RerunState.NOT_RUNNING_YET,
                                "current_iteration": -1, "rerun_requested": False},
        "num_floating_point_operations_so_far": 1.25e9,
        "content_metadata": {"distrib_optim_sharding_type": "dp_reshardable", "chained_optim_avoid_prefix": True},
    }]


def torch_save(obj):
    """torch.save's archive of an object without tensors: data.pkl (protocol 2) and the header records."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=2))
        z.writestr("archive/.format_version", "1")
        z.writestr("archive/.storage_alignment", "64")
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
        z.writestr("archive/.data/serialization_id", "0000000000000000000000000000000000000000")
    return out.getvalue()


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "megatron_lm.pt").write_bytes(torch_save(common_state(None)))
    (out / "megatron_lm_vpp.pt").write_bytes(torch_save(common_state(2)))
    (out / "megatron_lm_dp1.pt").write_bytes(torch_save(common_state(None, tp=1, pp=1)))
    (out / "megatron_lm_tp2_cp2.pt").write_bytes(torch_save(common_state(None, tp=2, pp=1, cp=2, dp=1)))
    (out / "mcore_api.pt").write_bytes(torch_save([{"optimizer": {"param_state_sharding_type": "dp_reshardable"}}]))
    bf16, f32 = (torch.bfloat16, torch.float32), (torch.float32, torch.float32)
    chunks = [{bf16: [3328]}, {f32: [128]}, {bf16: [3328]}, {f32: [128]}]
    (out / "vpp_per_bucket_numel.pt").write_bytes(torch_save([chunks]))


if __name__ == "__main__":
    main()
