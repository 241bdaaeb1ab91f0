#!/usr/bin/env python3
"""Golden files for lib/optim: torch 2.11 (CPU) runs of Adam/AdamW(fused=True), Lion and torch.optim.Muon.

Run (CPU only, deterministic; rewrites manifest.json and *.f32 next to this script):
    python3 testdata/optim/gen_optim_goldens.py
Needs torch 2.11.x and numpy. The tests (tests/unit/optim_*_test.cpp) read manifest.json.

Why CPU and which kernels:
- Adam/AdamW use torch's CPU fused kernel (aten/src/ATen/native/cpu/FusedAdamKernel.cpp). Its rounding
  depends on the build's vector width: the last numel % W elements of each tensor go through a scalar loop
  that rounds the second moment differently (lib/optim/adam_math.h). W is 8 for an AVX2 build and 16 for
  AVX-512; it is recorded in the manifest ("torch_vec_width") from torch's reported CPU capability.
  (torch's CUDA fused kernel rounds differently again; these goldens do not cover it.)
- Lion: torch has none; this is google/automl's lion/lion_pytorch.py step in torch fp32 ops, in its
  op order.
- Muon: torch.optim.Muon itself (bf16 Newton–Schulz on the CPU's bf16 matmul).

Layout: one raw little-endian fp32 file per case (CASE.f32); manifest.json lists for every case the
optimizer, torch hyperparameters, shape, step count and, for each array, its [offset, count] in elements
of that file. Arrays: "param/0" (initial), and for t = 1..steps "grad/t", "param/t" and the states after
step t ("exp_avg/t", "exp_avg_sq/t", "momentum_buffer/t"). For the large Muon case only the final momentum
buffer is stored, to keep the files small.
"""
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 5


def vec_width():
    cap = torch.backends.cpu.get_cpu_capability()
    return 16 if cap.startswith("AVX512") else 8 if cap.startswith("AVX2") else 0


def magnitudes(n, gen, lo=-6.0, hi=0.0):
    """Normal values with magnitudes spread over 10^lo..10^hi, shuffled, and some exact zeros."""
    x = torch.randn(n, generator=gen) * torch.logspace(lo, hi, n)[torch.randperm(n, generator=gen)]
    x[torch.randperm(n, generator=gen)[: max(0, n // 13)]] = 0.0
    return x.float()


class Case:
    def __init__(self, name, optimizer, hyper, shape):
        self.name, self.optimizer, self.hyper, self.shape = name, optimizer, hyper, list(shape)
        self.arrays, self.chunks, self.offset = {}, [], 0

    def put(self, key, t):
        a = t.detach().contiguous().float().numpy().astype("<f4").ravel()
        self.arrays[key] = [self.offset, int(a.size)]
        self.chunks.append(a)
        self.offset += a.size

    def write(self):
        np.concatenate(self.chunks).tofile(os.path.join(HERE, self.name + ".f32"))
        return {"name": self.name, "optimizer": self.optimizer, "hyper": self.hyper, "shape": self.shape,
                "steps": STEPS, "file": self.name + ".f32", "arrays": self.arrays}


def grads_for(shape, gen, zero_first=False):
    n = math.prod(shape)
    gs = [magnitudes(n, gen, 0.0, -6.0).reshape(shape) for _ in range(STEPS)]
    if zero_first:
        gs[0].zero_()
    return gs


def run_adam(name, hyper, n, seed):
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(magnitudes(n, gen))
    cls = torch.optim.AdamW if hyper["decoupled"] else torch.optim.Adam
    opt = cls([p], lr=hyper["lr"], betas=tuple(hyper["betas"]), eps=hyper["eps"],
              weight_decay=hyper["weight_decay"], fused=True)
    case = Case(name, "adamw" if hyper["decoupled"] else "adam", hyper, [n])
    case.put("param/0", p)
    for t, g in enumerate(grads_for([n], gen, zero_first=(n == 7)), 1):
        p.grad = g.clone()
        opt.step()
        st = opt.state[p]
        assert float(st["step"]) == t
        case.put(f"grad/{t}", g)
        case.put(f"param/{t}", p)
        case.put(f"exp_avg/{t}", st["exp_avg"])
        case.put(f"exp_avg_sq/{t}", st["exp_avg_sq"])
    return case.write()


@torch.no_grad()
def lion_step(p, g, exp_avg, lr, beta1, beta2, weight_decay):
    # google/automl lion/lion_pytorch.py, Lion.step, verbatim op order.
    p.data.mul_(1 - lr * weight_decay)
    update = exp_avg * beta1 + g * (1 - beta1)
    p.add_(torch.sign(update), alpha=-lr)
    exp_avg.mul_(beta2).add_(g, alpha=1 - beta2)


def run_lion(name, hyper, n, seed):
    gen = torch.Generator().manual_seed(seed)
    p = magnitudes(n, gen)
    m = torch.zeros_like(p)
    case = Case(name, "lion", hyper, [n])
    case.put("param/0", p)
    b1, b2 = hyper["betas"]
    for t, g in enumerate(grads_for([n], gen, zero_first=(n == 7)), 1):
        if t == 3:
            # Exact ties: a gradient that cancels the momentum's share makes the interpolation exactly 0
            # on some elements, where sign() must give 0.
            k = n // 3
            g[:k] = -(m[:k] * b1) / (1 - b1)
            g[:k][(m[:k] * b1 + g[:k] * (1 - b1)) != 0] = 0.0
        lion_step(p, g, m, hyper["lr"], b1, b2, hyper["weight_decay"])
        case.put(f"grad/{t}", g)
        case.put(f"param/{t}", p)
        case.put(f"exp_avg/{t}", m)
    return case.write()


def run_muon(name, hyper, shape, seed, store_buffers=True):
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(magnitudes(math.prod(shape), gen, -3.0, 0.0).reshape(shape))
    opt = torch.optim.Muon([p], lr=hyper["lr"], weight_decay=hyper["weight_decay"], momentum=hyper["momentum"],
                           nesterov=hyper["nesterov"], ns_steps=hyper["ns_steps"], eps=hyper["eps"],
                           adjust_lr_fn=hyper["adjust_lr_fn"])
    case = Case(name, "muon", hyper, shape)
    case.put("param/0", p)
    gs = grads_for(shape, gen, zero_first=(math.prod(shape) == 7))
    for t, g in enumerate(gs, 1):
        # Rows of very different scale, as real gradients have: exercises the norm and the bf16 rounding.
        g = g * torch.logspace(0, -3, shape[0]).reshape(-1, 1)
        p.grad = g.clone()
        opt.step()
        case.put(f"grad/{t}", g)
        case.put(f"param/{t}", p)
        if store_buffers or t == STEPS:
            case.put(f"momentum_buffer/{t}", opt.state[p]["momentum_buffer"])
    return case.write()


def main():
    if not torch.__version__.startswith("2.11"):
        sys.exit(f"torch 2.11 expected (the rounding is pinned to it), found {torch.__version__}")
    torch.set_num_threads(1)
    for f in os.listdir(HERE):
        if f.endswith(".f32"):
            os.remove(os.path.join(HERE, f))
    cases = []
    sizes = [1, 7, 129, 1003]
    adam_sets = {
        "adamw_default": dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=1e-2, decoupled=True),
        "adamw_wd": dict(lr=3e-2, betas=[0.8, 0.95], eps=1e-6, weight_decay=0.1, decoupled=True),
        "adamw_nowd": dict(lr=1e-2, betas=[0.9, 0.99], eps=1e-10, weight_decay=0.0, decoupled=True),
        "adam_plain": dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.0, decoupled=False),
        "adam_l2": dict(lr=5e-3, betas=[0.9, 0.98], eps=1e-8, weight_decay=0.1, decoupled=False),
        # beta1 < 0.5 takes the other branch of torch's lerp
        "adam_lowbeta": dict(lr=2e-3, betas=[0.3, 0.5], eps=1e-7, weight_decay=0.05, decoupled=False),
    }
    seed = 1
    for hname, h in adam_sets.items():
        for n in sizes:
            cases.append(run_adam(f"{hname}_n{n}", h, n, seed))
            seed += 1
    cases.append(run_adam("adamw_wd_n4099", adam_sets["adamw_wd"], 4099, seed))
    seed += 1
    lion_sets = {
        "lion_default": dict(lr=1e-4, betas=[0.9, 0.99], weight_decay=0.0),
        "lion_wd": dict(lr=3e-3, betas=[0.95, 0.98], weight_decay=0.5),
        "lion_lowbeta": dict(lr=1e-2, betas=[0.3, 0.6], weight_decay=0.1),
    }
    for hname, h in lion_sets.items():
        for n in sizes:
            cases.append(run_lion(f"{hname}_n{n}", h, n, seed))
            seed += 1
    muon_base = dict(lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, ns_steps=5, eps=1e-7,
                     adjust_lr_fn="original")
    muon_sets = [
        ("muon_default", muon_base, [(37, 53), (64, 16), (1, 7)]),
        ("muon_plain_rms", dict(muon_base, lr=0.01, weight_decay=0.0, momentum=0.9, nesterov=False,
                                adjust_lr_fn="match_rms_adamw"), [(37, 53), (64, 16)]),
        ("muon_nesterov_rms", dict(muon_base, lr=3e-3, weight_decay=0.2, momentum=0.8,
                                   adjust_lr_fn="match_rms_adamw"), [(53, 37), (16, 64)]),
    ]
    for hname, h, shapes in muon_sets:
        for shape in shapes:
            cases.append(run_muon(f"{hname}_{shape[0]}x{shape[1]}", h, list(shape), seed))
            seed += 1
    cases.append(run_muon("muon_default_128x384", muon_base, [128, 384], seed, store_buffers=False))
    manifest = {
        "generator": "testdata/optim/gen_optim_goldens.py",
        "torch_version": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_vec_width": vec_width(),
        "cases": cases,
    }
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(HERE, c["file"])) for c in cases)
    print(f"{len(cases)} cases, {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
