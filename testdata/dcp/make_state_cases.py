#!/usr/bin/env python3
"""Writes the DCP fixtures of the layouts and state that torch 2.15 saves beyond a model's weights.

Run where torch is installed (CPU only; two gloo processes for the rank-local case):
    /work/venv-torch/bin/python testdata/dcp/make_state_cases.py

Outputs (committed; CI has no torch and reads them):
  rank_local/        dcp.save(..., use_collectives=False) by 2 ranks: __0.metadata and __1.metadata,
                     no .metadata. A row-sharded weight (a DTensor, one chunk per rank), a replicated
                     bias each rank writes itself, and one key only each rank holds.
  expected_rank_local.safetensors, expected_rank_local.json   its ground truth: every tensor in full
                     by fqn (and its bytes entries: none).
  rank_local_gap/    rank_local without __0.metadata (a rank whose save did not finish).
  dtypes/            one process (no_dist): complex64, complex128, complex32 and float4_e2m1fn_x2
                     tensors beside an ordinary float32 weight.
  dtypes_changed/    dtypes with buffers.c128 doubled.
  complex64/         a float32 weight and a complex64 buffer; expected_complex64.safetensors holds them
                     (safetensors C64).
  train_state/       a model, its AdamW state after two steps (0-d `step` tensors, param_groups as
                     bytes), torchtitan's train_state (a 0-d step, a list) and a scheduler's state.
  train_state_next/  the same state with every optim.state.*.step one larger.
  train_state_lr/    the same state with param_groups' lr changed and nothing else.
  nvfp4/             a float32 weight and a packed float4_e2m1fn_x2 [3, 2] tensor; expected_nvfp4.safetensors
                     is safetensors' own save of them (the pairs as F4 of shape [3, 4]).
  zstd/              train_state's state saved through the ZStandard stream extension
                     (FileSystemWriter(_extensions=[ZStandard()]), two writer threads: two data files);
                     every item, tensor or bytes, is a zstd stream. Needs the zstandard module.
  zstd_safetensors/  the same with serialization_format=SAFETENSORS, which torch cannot load back:
                     the tensors' items are empty zstd streams, their elements uncompressed in the
                     file's safetensors image.
  zstd_truncated/    zstd with the storage entry of model.0.weight 16 bytes shorter (its stream ends
                     inside a frame).
  zstd_bomb/         zstd with model.0.weight's item replaced by a 32 KiB stream of 1 GiB of zeros,
                     appended to its data file.
  zstd_unknown/      zstd with model.0.weight's transform descriptor "stream.lz4/1".
  hf_distributed/    HuggingFaceStorageWriter(save_distributed=True) by 2 ranks: one safetensors file
                     per rank (shard-0000R-model-00001-of-00001.safetensors), each tensor's local shard
                     placed by DCP_SHARDING_INFO, no .metadata and no index; a row-sharded weight, a
                     column-sharded one and a replicated bias (written by both ranks).
                     expected_hf_distributed.safetensors holds the full tensors.
"""
import dataclasses
import os
import pickle
import shutil
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint import FileSystemWriter, HuggingFaceStorageWriter
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.filesystem import SerializationFormat
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_dcp_fixtures import SAFETENSORS_DTYPES, write_ground_truth, write_safetensors  # noqa: E402

SAFETENSORS_DTYPES[torch.complex64] = "C64"

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = 2


def rank_local_state(rank):
    mesh = init_device_mesh("cpu", (RANKS,))
    weight = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    return {
        "layer.weight": distribute_tensor(weight, mesh, [Shard(0)]),
        "layer.bias": torch.tensor([0.5, -1.5, 2.0]),
        f"rank{rank}.counter": torch.tensor([rank + 1], dtype=torch.int64),
    }


def rank_local_worker(rank, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    dcp.save(rank_local_state(rank), checkpoint_id=os.path.join(HERE, "rank_local"), use_collectives=False)
    dist.destroy_process_group()


def make_rank_local():
    mp.spawn(rank_local_worker, args=(29500 + os.getpid() % 1000,), nprocs=RANKS)
    expected = {"layer.weight": torch.arange(12, dtype=torch.float32).reshape(4, 3),
                "layer.bias": torch.tensor([0.5, -1.5, 2.0])}
    for rank in range(RANKS):
        expected[f"rank{rank}.counter"] = torch.tensor([rank + 1], dtype=torch.int64)
    write_ground_truth(expected, os.path.join(HERE, "expected_rank_local.safetensors"),
                       os.path.join(HERE, "expected_rank_local.json"))
    gap = os.path.join(HERE, "rank_local_gap")
    shutil.copytree(os.path.join(HERE, "rank_local"), gap)
    os.remove(os.path.join(gap, "__0.metadata"))


def make_dtypes():
    g = torch.Generator().manual_seed(5)
    state = {
        "weight": torch.randn(2, 3, generator=g),
        "buffers.c64": torch.complex(torch.randn(3, generator=g), torch.randn(3, generator=g)),
        "buffers.c128": torch.complex(torch.randn(2, 2, generator=g, dtype=torch.float64),
                                      torch.randn(2, 2, generator=g, dtype=torch.float64)),
        "buffers.c32": torch.complex(torch.randn(2, generator=g), torch.randn(2, generator=g)).to(torch.complex32),
        "nvfp4.packed": torch.tensor([[0x12, 0x34], [0x56, 0x78]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2),
    }
    dcp.save(state, checkpoint_id=os.path.join(HERE, "dtypes"), no_dist=True)
    state["buffers.c128"] = state["buffers.c128"] * 2
    dcp.save(state, checkpoint_id=os.path.join(HERE, "dtypes_changed"), no_dist=True)
    c64 = {"weight": state["weight"], "buffers.c64": state["buffers.c64"]}
    dcp.save(c64, checkpoint_id=os.path.join(HERE, "complex64"), no_dist=True)
    write_safetensors(os.path.join(HERE, "expected_complex64.safetensors"), c64)


def make_nvfp4():
    from safetensors.torch import save_file
    state = {"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
             "nvfp4.packed": torch.tensor([[0x12, 0x34], [0x56, 0x78], [0x9a, 0xbc]], dtype=torch.uint8)
             .view(torch.float4_e2m1fn_x2)}
    dcp.save(state, checkpoint_id=os.path.join(HERE, "nvfp4"), no_dist=True)
    save_file(state, os.path.join(HERE, "expected_nvfp4.safetensors"))


def train_state(step_offset=0, lr=1e-2):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    for step in range(2):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(10 * step + p.numel()))
        opt.step()
        sched.step()
    model_sd, optim_sd = get_state_dict(model, opt)
    for s in optim_sd["state"].values():
        s["step"] = s["step"] + step_offset
    for group in optim_sd["param_groups"]:
        group["lr"] = lr
    return {"model": model_sd, "optim": optim_sd,
            "train_state": {"step": torch.tensor(2 + step_offset), "losses": [2.5, 1.75]},
            "lr_scheduler": sched.state_dict()}


def make_train_states():
    dcp.save(train_state(), checkpoint_id=os.path.join(HERE, "train_state"), no_dist=True)
    dcp.save(train_state(step_offset=1), checkpoint_id=os.path.join(HERE, "train_state_next"), no_dist=True)
    dcp.save(train_state(lr=5e-3), checkpoint_id=os.path.join(HERE, "train_state_lr"), no_dist=True)


def rewrite_storage(name, fqn, change):
    """Copies zstd/ to NAME with the storage entry of FQN's first chunk replaced by change(entry, dir)."""
    out = os.path.join(HERE, name)
    shutil.copytree(os.path.join(HERE, "zstd"), out)
    path = os.path.join(out, ".metadata")
    with open(path, "rb") as f:
        md = pickle.load(f)
    index = next(i for i in md.storage_data if i.fqn == fqn)
    md.storage_data[index] = change(md.storage_data[index], out)
    with open(path, "wb") as f:
        pickle.dump(md, f)


def append_bomb(info, out):
    import zstandard
    c = zstandard.ZstdCompressor(level=19).compressobj()
    block = bytes(1 << 20)
    stream = b"".join(c.compress(block) for _ in range(1024)) + c.flush()
    data = os.path.join(out, info.relative_path)
    offset = os.path.getsize(data)
    with open(data, "ab") as f:
        f.write(stream)
    return dataclasses.replace(info, offset=offset, length=len(stream))


def make_zstd():
    state = train_state()
    dcp.save(state, storage_writer=FileSystemWriter(os.path.join(HERE, "zstd"), thread_count=2,
                                                    _extensions=[ZStandard()]), no_dist=True)
    dcp.save(train_state(), storage_writer=FileSystemWriter(
        os.path.join(HERE, "zstd_safetensors"), serialization_format=SerializationFormat.SAFETENSORS,
        _extensions=[ZStandard()]), no_dist=True)
    rewrite_storage("zstd_truncated", "model.0.weight", lambda i, _: dataclasses.replace(i, length=i.length - 16))
    rewrite_storage("zstd_bomb", "model.0.weight", append_bomb)
    rewrite_storage("zstd_unknown", "model.0.weight",
                    lambda i, _: dataclasses.replace(i, transform_descriptors=["stream.lz4/1"]))


def hf_distributed_full():
    return {"layer.weight": torch.arange(24, dtype=torch.float32).reshape(6, 4),
            "layer.proj": torch.arange(12, dtype=torch.bfloat16).reshape(2, 6) / 4,
            "layer.bias": torch.tensor([0.5, -1.5, 2.0, 4.0])}


def hf_distributed_worker(rank, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    mesh = init_device_mesh("cpu", (RANKS,))
    full = hf_distributed_full()
    state = {"layer.weight": distribute_tensor(full["layer.weight"], mesh, [Shard(0)]),
             "layer.proj": distribute_tensor(full["layer.proj"], mesh, [Shard(1)]),
             "layer.bias": full["layer.bias"]}
    dcp.save(state, storage_writer=HuggingFaceStorageWriter(os.path.join(HERE, "hf_distributed"), save_distributed=True))
    dist.destroy_process_group()


def make_hf_distributed():
    mp.spawn(hf_distributed_worker, args=(29600 + os.getpid() % 1000,), nprocs=RANKS)
    write_safetensors(os.path.join(HERE, "expected_hf_distributed.safetensors"), hf_distributed_full())


def main():
    for name in ["rank_local", "rank_local_gap", "dtypes", "dtypes_changed", "complex64", "train_state", "train_state_next",
                 "train_state_lr", "zstd", "zstd_safetensors", "zstd_truncated", "zstd_bomb", "zstd_unknown", "hf_distributed", "nvfp4"]:
        shutil.rmtree(os.path.join(HERE, name), ignore_errors=True)
    make_rank_local()
    make_dtypes()
    make_nvfp4()
    make_train_states()
    make_zstd()
    make_hf_distributed()
    print(f"torch {torch.__version__}: state cases written in testdata/dcp")


if __name__ == "__main__":
    sys.exit(main())
