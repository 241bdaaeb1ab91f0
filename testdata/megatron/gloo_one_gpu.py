"""Runs Megatron-Core with several ranks on ONE GPU: torch.distributed on gloo, CUDA tensors staged
through host copies.

NCCL refuses two ranks on one device; gloo does not care which device a rank computes on, but it
moves host tensors only and lacks reduce_scatter, AVG and NCCL's coalescing manager. install()
replaces the collectives Megatron calls through `torch.distributed.<name>` with host-staged
versions, and the names Megatron binds at import (`dist_all_gather_func`,
`dist_reduce_scatter_func`, `_coalescing_manager`) in the modules that bind them. Call install()
after init_process_group("gloo") and BEFORE importing megatron.core, then patch_megatron() after
importing it (it re-binds the module globals, whichever order the imports happened in).

Every shimmed collective is synchronous; with async_op=True it returns a finished work handle.
Reductions run in fp32 on the host (bf16/fp16 inputs are up-cast, the result cast back); data
movement (broadcast, gathers, all_to_all) moves raw bytes, so every dtype works.

The torch.distributed internals (object collectives, DCP's planning) keep calling the original
c10d functions: only the attributes of the torch.distributed namespace are replaced.
"""
import contextlib

import torch
import torch.distributed as dist

_orig = {}
_installed = False


class _Done:
    """A finished work handle."""

    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def synchronize(self):
        pass

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(None)
        return fut


def _ret(async_op):
    return _Done() if async_op else None


def _bytes(t):
    """Host copy of t as a flat uint8 tensor."""
    return t.detach().contiguous().reshape(-1).cpu().view(torch.uint8).clone()


def _from_bytes(dst, b):
    with torch.no_grad():
        dst.copy_(b.view(dst.dtype).reshape(dst.shape))


def _group_size(group):
    return dist.get_world_size(group)


def _group_rank(group):
    return dist.get_rank(group)


def _reduce_host(t, op, group):
    """fp32 host copy of t, reduced over group with op (AVG as SUM / size)."""
    h = t.detach().reshape(-1).to("cpu", torch.float32 if t.is_floating_point() and t.dtype != torch.float64
                                    else t.dtype, copy=True).contiguous()
    avg = op == dist.ReduceOp.AVG
    _orig["all_reduce"](h, op=dist.ReduceOp.SUM if avg else op, group=group)
    if avg:
        h /= _group_size(group)
    return h


def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    h = _reduce_host(tensor, op, group)
    with torch.no_grad():
        tensor.copy_(h.reshape(tensor.shape).to(tensor.dtype))
    return _ret(async_op)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    b = _bytes(tensor)
    if group_src is not None:
        _orig["broadcast"](b, group=group, group_src=group_src)
    else:
        _orig["broadcast"](b, src=src, group=group)
    _from_bytes(tensor, b)
    return _ret(async_op)


def _all_gather_bytes(t, group):
    """List over the group's ranks of each one's t, as flat uint8 host tensors (sizes may differ)."""
    b = _bytes(t)
    n = _group_size(group)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    _orig["all_gather"](sizes, torch.tensor([b.numel()], dtype=torch.int64), group=group)
    m = int(max(s.item() for s in sizes))
    padded = torch.zeros(m, dtype=torch.uint8)
    padded[:b.numel()] = b
    out = [torch.zeros(m, dtype=torch.uint8) for _ in range(n)]
    _orig["all_gather"](out, padded, group=group)
    return [o[:int(s.item())] for o, s in zip(out, sizes)]


def all_gather(tensor_list, tensor, group=None, async_op=False):
    parts = _all_gather_bytes(tensor, group)
    for dst, b in zip(tensor_list, parts):
        _from_bytes(dst, b)
    return _ret(async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    parts = _all_gather_bytes(input_tensor, group)
    whole = torch.cat(parts)
    _from_bytes(output_tensor, whole)
    return _ret(async_op)


def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
    h = _reduce_host(input, op, group)
    n = output.numel()
    r = _group_rank(group)
    with torch.no_grad():
        output.copy_(h[r * n:(r + 1) * n].reshape(output.shape).to(output.dtype))
    return _ret(async_op)


def reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False):
    r = _group_rank(group)
    h = _reduce_host(torch.cat([t.reshape(-1) for t in input_list]), op, group)
    off = sum(t.numel() for t in input_list[:r])
    with torch.no_grad():
        output.copy_(h[off:off + output.numel()].reshape(output.shape).to(output.dtype))
    return _ret(async_op)


def reduce(tensor, dst=None, op=dist.ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    h = _reduce_host(tensor, op, group)
    with torch.no_grad():
        tensor.copy_(h.reshape(tensor.shape).to(tensor.dtype))  # every rank gets it: harmless
    return _ret(async_op)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False, group_dst=None):
    parts = _all_gather_bytes(tensor, group)
    if gather_list is not None:
        for d, b in zip(gather_list, parts):
            _from_bytes(d, b)
    return _ret(async_op)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False, group_src=None):
    n = _group_size(group)
    r = _group_rank(group)
    src_g = group_src if group_src is not None else dist.get_group_rank(group, src) \
        if group is not None else src
    if r == src_g:
        blob = torch.cat([_bytes(t) for t in scatter_list])
        sizes = torch.tensor([_bytes(t).numel() for t in scatter_list], dtype=torch.int64)
    else:
        sizes = torch.zeros(n, dtype=torch.int64)
    _orig["broadcast"](sizes, group_src=src_g, group=group) if group is not None else \
        _orig["broadcast"](sizes, src=src_g)
    if r != src_g:
        blob = torch.zeros(int(sizes.sum()), dtype=torch.uint8)
    _orig["broadcast"](blob, group_src=src_g, group=group) if group is not None else \
        _orig["broadcast"](blob, src=src_g)
    off = int(sizes[:r].sum())
    _from_bytes(tensor, blob[off:off + int(sizes[r])])
    return _ret(async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False):
    n = _group_size(group)
    r = _group_rank(group)
    rows_in = input.shape[0] if input.dim() else 1
    in_splits = list(input_split_sizes) if input_split_sizes else [rows_in // n] * n
    # every rank's input and splits, then take what is addressed to this rank
    parts = _all_gather_bytes(input, group)
    splits = _all_gather_bytes(torch.tensor(in_splits, dtype=torch.int64), group)
    row_bytes = input[0].numel() * input.element_size() if input.dim() else input.element_size()
    chunks = []
    for p, s in zip(parts, splits):
        s = s.view(torch.int64).tolist()
        start = sum(s[:r]) * row_bytes
        chunks.append(p[start:start + s[r] * row_bytes])
    _from_bytes(output, torch.cat(chunks))
    return _ret(async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    r = _group_rank(group)
    per = [_all_gather_bytes(t, group) for t in input_tensor_list]  # per[j][i]: rank i's j-th input
    for i, dst in enumerate(output_tensor_list):
        _from_bytes(dst, per[r][i])
    return _ret(async_op)


def barrier(group=None, async_op=False, device_ids=None):
    _orig["barrier"](group=group)
    return _ret(async_op)


@contextlib.contextmanager
def _coalescing_manager(group=None, device=None, async_ops=False):
    """NCCL's coalescing manager, for synchronous shims: nothing to coalesce; the yielded handle's
    wait() is a no-op (Megatron keeps it as the grad-reduce handle with overlap_grad_reduce)."""
    yield _Done()


_SHIMS = dict(all_reduce=all_reduce, broadcast=broadcast, all_gather=all_gather,
              all_gather_into_tensor=all_gather_into_tensor, _all_gather_base=all_gather_into_tensor,
              reduce_scatter_tensor=reduce_scatter_tensor, _reduce_scatter_base=reduce_scatter_tensor,
              reduce_scatter=reduce_scatter, reduce=reduce, gather=gather, scatter=scatter,
              all_to_all_single=all_to_all_single, all_to_all=all_to_all, barrier=barrier,
              _coalescing_manager=_coalescing_manager)


def install():
    """Replace torch.distributed's collectives with host-staged ones (idempotent)."""
    global _installed
    if _installed:
        return
    for name, fn in _SHIMS.items():
        _orig[name] = getattr(dist, name)
        setattr(dist, name, fn)
    _installed = True


# Modules that bind collectives at import, and the names they bind.
_BOUND = {
    "megatron.core.distributed.param_and_grad_buffer": {
        "dist_all_gather_func": all_gather_into_tensor, "dist_reduce_scatter_func": reduce_scatter_tensor,
        "_coalescing_manager": _coalescing_manager},
    "megatron.core.tensor_parallel.mappings": {
        "dist_all_gather_func": all_gather_into_tensor, "dist_reduce_scatter_func": reduce_scatter_tensor},
    "megatron.core.tensor_parallel.layers": {
        "dist_all_gather_func": all_gather_into_tensor, "dist_reduce_scatter_func": reduce_scatter_tensor},
    "megatron.core.tensor_parallel.utils": {"dist_all_gather_func": all_gather_into_tensor},
    "megatron.core.transformer.multi_token_prediction": {"dist_all_gather_func": all_gather_into_tensor},
    "megatron.core.timers": {"dist_all_gather_func": all_gather_into_tensor},
}


def patch_megatron():
    """Re-bind the collectives Megatron's modules took at import time."""
    import importlib
    for mod_name, names in _BOUND.items():
        try:
            mod = importlib.import_module(mod_name)
        except Exception:  # a module this Megatron lacks or cannot import here
            continue
        for n, fn in names.items():
            if hasattr(mod, n):
                setattr(mod, n, fn)


def run_ranks(argv_of_rank, world, log_prefix, timeout=300):
    """Runs `world` processes, rank r as argv_of_rank(r) with its output in LOG_PREFIX.rankR.log, until
    every one exits, one fails, or `timeout` seconds pass; the others are then killed (each runs in a
    session of its own, so its children go too). Returns the exit codes by rank."""
    import os
    import subprocess
    import time
    procs = []
    for r in range(world):
        f = open(f"{log_prefix}.rank{r}.log", "w")
        procs.append((subprocess.Popen(argv_of_rank(r), stdout=f, stderr=subprocess.STDOUT,
                                       start_new_session=True), f))
    t0 = time.time()
    while any(p.poll() is None for p, _ in procs) and time.time() - t0 < timeout:
        if any(p.poll() not in (None, 0) for p, _ in procs):
            break
        time.sleep(0.5)
    for p, f in procs:
        if p.poll() is None:
            os.killpg(p.pid, 9)
        p.wait()
        f.close()
    return [p.returncode for p, _ in procs]
