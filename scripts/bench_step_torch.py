#!/usr/bin/env python3
"""PyTorch's side of scripts/bench-step-vs-torch.sh: `fpgather train`'s step in PyTorch, timed.

The network, the task and the optimizer are fpgather's (lib/model, lib/train), rebuilt exactly:
  - the built-in network (model/network.h) at a preset's dims: input projection, `layers` residual
    blocks h += fc2(silu(gate) * up) with [gate | up] = fc1(rmsnorm(h) * norm), final rmsnorm, output
    head; rmsnorm eps 1e-6; loss = mean of (y - target)^2 over the micro-batch;
  - the teacher task (model/teacher_task.h): targets are a fixed teacher network's outputs on N(0, 1)
    inputs, and micro-batch t of step t (dp 1, no accumulation);
  - the initial student and teacher weights and the inputs are fpgather's own numbers: its
    counter-based Philox4x32-10 / Box-Muller streams (model/philox.h, model/network_init.cpp) are
    computed here, vectorized, so both programs start from identical weights and see identical data;
  - AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 1e-2; torch's fused kernel), global
    gradient-norm clipping at 1.0 (clip_grad_norm_), bf16 parameters with fp32 masters.

Two precisions:
  fp32  fpgather's own math: bf16 params decoded to fp32 each step, fp32 GEMMs (no TF32), fp32
        gradients applied to fp32 masters, masters copied back into the bf16 params. Phases: decode,
        forward_backward (teacher forward included, as in fpgather), optimizer (clip + AdamW),
        copy_back. The loss curve must match fpgather's within rounding.
  amp   what PyTorch users run: fp32 params (the masters) under bf16 autocast; phases forward_backward
        and optimizer (autocast's weight casts are inside the forward).
Each runs eager and with torch.compile (the student's forward + loss and the teacher's forward).

Timing: `--steps` steps, the first `--warmup` untimed (compilation happens there); each step is
synchronized (fpgather copies its loss to the host once per step too) and its phases are timed with
CUDA events (--device cuda) or perf_counter (cpu). Medians over the timed steps. The loss of every step
(before its update, as fpgather reports it) is in the output.

Usage: bench_step_torch.py --model base --device cuda [--steps 60 --warmup 10
       --runs fp32:eager,fp32:compile,amp:eager,amp:compile --threads N --micro-batch 32 --seed 1234 --json OUT]
Prints one JSON object (and writes it to --json when given).
"""
import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

PRESETS = {  # input, hidden, ffn, layers, output (lib/model/presets.cpp)
    "tiny": (20, 96, 96, 4, 20),
    "small": (128, 320, 864, 12, 128),
    "base": (1024, 768, 2048, 26, 1024),
    "1b": (2048, 2048, 5632, 29, 2048),
}
RMS_EPS = 1e-6
STUDENT_OUTPUT_GAIN = 0.1
STUDENT_DOMAIN = 0x5354554445
TEACHER_DOMAIN = 0x5445414348
INPUT_DOMAIN = 0x494E505554
M64 = (1 << 64) - 1


# ---- fpgather's random streams (model/philox.h), bit for bit up to libm's last-ulp rounding ----

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for ch in s.encode():
        h = ((h ^ ch) * 0x100000001B3) & M64
    return h


def philox_key(seed, domain):
    k = splitmix64((seed ^ splitmix64(domain)) & M64)
    return k & 0xFFFFFFFF, k >> 32


def _mulhilo(m, c):
    """(hi, lo) 32-bit halves of m * c for a constant m < 2^32 and int64 tensors c < 2^32, without
    overflowing int64: c split into 16-bit halves."""
    a = m * (c & 0xFFFF)           # < 2^48
    b = m * (c >> 16)              # < 2^48
    t = a + ((b & 0xFFFF) << 16)   # < 2^49
    return (t >> 32) + (b >> 16), t & 0xFFFFFFFF


def philox4x32_10(c0, c1, c2, c3, key):
    k0, k1 = key
    for rnd in range(10):
        if rnd > 0:
            k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
            k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
        hi0, lo0 = _mulhilo(0xD2511F53, c0)
        hi1, lo1 = _mulhilo(0xCD9E8D57, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1


def _box_muller(key, c0, c1, c2, c3, scale):
    """The normal pairs of Philox blocks (c0, c1) of streams (c2, c3), interleaved: [..., 2 * blocks]."""
    r0, r1 = philox4x32_10(c0, c1, c2, c3, key)
    u1 = (r0.double() + 0.5) * (1.0 / 4294967296.0)
    u2 = (r1.double() + 0.5) * (1.0 / 4294967296.0)
    radius = torch.sqrt(-2.0 * torch.log(u1))
    theta = 6.283185307179586 * u2
    z = torch.stack([(radius * torch.cos(theta)).float(), (radius * torch.sin(theta)).float()], dim=-1)
    # scale * z in fp32, as C++'s float product
    return z.flatten(-2) * torch.tensor(scale, dtype=torch.float32, device=z.device)


def philox_normal_1d(key, stream, n, scale, device):
    """scale * philox_normal_fill(key, stream, n), in slabs of 2^24 blocks."""
    out = torch.empty(n, dtype=torch.float32, device=device)
    blocks, slab = (n + 1) // 2, 1 << 24
    for b0 in range(0, blocks, slab):
        blk = torch.arange(b0, min(blocks, b0 + slab), dtype=torch.int64, device=device)
        z = _box_muller(key, blk & 0xFFFFFFFF, blk >> 32, torch.full_like(blk, stream & 0xFFFFFFFF),
                        torch.full_like(blk, stream >> 32), scale)
        m = min(z.numel(), n - 2 * b0)
        out[2 * b0:2 * b0 + m] = z[:m]
    return out


def philox_normal_rows(key, first_stream, rows, n, device):
    """[rows, n]: row b is philox_normal_fill(key, first_stream + b, n, 1.0) (streams below 2^32)."""
    blk = torch.arange((n + 1) // 2, dtype=torch.int64, device=device).view(1, -1).expand(rows, -1)
    st = torch.arange(first_stream, first_stream + rows, dtype=torch.int64, device=device).view(-1, 1).expand_as(blk)
    return _box_muller(key, blk & 0xFFFFFFFF, blk >> 32, st & 0xFFFFFFFF, st >> 32, 1.0)[:, :n]


def network_params(dims):
    """(name, shape) in fpgather's registration order (model/network.cpp)."""
    i, h, f, layers, o = dims
    ps = [("input.weight", (h, i))]
    for l in range(layers):
        ps += [(f"blocks.{l}.norm.weight", (h,)), (f"blocks.{l}.fc1.weight", (2 * f, h)),
               (f"blocks.{l}.fc2.weight", (h, f))]
    ps += [("final_norm.weight", (h,)), ("output.weight", (o, h))]
    return ps


def init_std(name, dims, student):
    i, h, f, layers, o = dims
    if name == "input.weight":
        return 1.0 / math.sqrt(i)
    if name == "output.weight":
        return (STUDENT_OUTPUT_GAIN if student else 1.0) / math.sqrt(h)
    if name.endswith(".fc1.weight"):
        return 1.0 / math.sqrt(h)
    if name.endswith(".fc2.weight"):
        return 1.0 / math.sqrt(f * layers)
    return 0.0


def init_params(dims, seed, student, device):
    """fpgather's initial values (model/network_init.cpp) as fp32 tensors, registration order."""
    key = philox_key(seed, STUDENT_DOMAIN if student else TEACHER_DOMAIN)
    out = []
    for name, shape in network_params(dims):
        std = init_std(name, dims, student)
        n = math.prod(shape)
        if std == 0.0:
            out.append(torch.ones(shape, dtype=torch.float32, device=device))
        else:
            # float(std) as C++'s static_cast<float>(std_dev): the scale is an fp32 number.
            out.append(philox_normal_1d(key, fnv1a64(name), n, float(std), device).view(shape))
    return out


def draw_inputs(dims, seed, micro_batch, index, device):
    """Micro-batch `index`'s inputs [micro_batch, input] (TeacherTask::draw_inputs)."""
    return philox_normal_rows(philox_key(seed, INPUT_DOMAIN), index * micro_batch, micro_batch, dims[0], device)


# ---- the network ----

def forward(params, x, layers):
    """y from x; params in registration order (any dtype the caller arranged)."""
    import torch.nn.functional as F

    def rmsnorm(h, w):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w

    h = x @ params[0].t()
    for l in range(layers):
        a = rmsnorm(h, params[1 + 3 * l])
        gate, up = (a @ params[2 + 3 * l].t()).chunk(2, dim=-1)
        h = h + (F.silu(gate) * up) @ params[3 + 3 * l].t()
    return rmsnorm(h, params[1 + 3 * layers]) @ params[2 + 3 * layers].t()


def loss_fn(params, x, target, layers):
    y = forward(params, x, layers)
    return (y.float() - target.float()).pow(2).mean()


def teacher_fn(params, x, layers):
    return forward(params, x, layers)


class Clock:
    """Phase marks: CUDA events on the GPU, perf_counter after a no-op on the CPU."""

    def __init__(self, cuda):
        self.cuda = cuda

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def run_variant(a, dims, mode, variant, student0, teacher32, inputs, device):
    layers = dims[3]
    cuda = device.type == "cuda"
    clock = Clock(cuda)
    opt_kwargs = dict(lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
    # fused AdamW on both devices (CPU's fused kernel exists since torch 2.4); foreach where refused.
    fused = {"fused": True}

    if mode == "fp32":
        masters = [p.clone() for p in student0]
        params16 = [p.to(torch.bfloat16) for p in student0]
        teacher = [p.clone() for p in teacher32]
    else:  # amp: the params are the fp32 masters; autocast casts them to bf16 in each forward
        masters = [torch.nn.Parameter(p.clone()) for p in student0]
        params16 = None
        teacher = [p.to(torch.bfloat16) for p in teacher32]
    try:
        opt = torch.optim.AdamW(masters, **opt_kwargs, **fused)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(masters, **opt_kwargs, foreach=True)

    lf, tf = loss_fn, teacher_fn
    if variant == "compile":
        lf = torch.compile(loss_fn)
        tf = torch.compile(teacher_fn)
    autocast = (lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)) if mode == "amp" else None

    steps, losses = [], []
    t_start = time.perf_counter()
    compile_s = None
    for t in range(a.steps):
        x = inputs[t]
        m0 = clock.mark()
        if mode == "fp32":
            work = [p.float().requires_grad_() for p in params16]  # decode
            m1 = clock.mark()
            with torch.no_grad():
                target = tf(teacher, x, layers)
            loss = lf(work, x, target, layers)
            loss.backward()
            for m, w in zip(masters, work):
                m.grad = w.grad
            m2 = clock.mark()
        else:
            m1 = m0
            with autocast():
                with torch.no_grad():
                    target = tf(teacher, x, layers)
                loss = lf(masters, x, target, layers)
            loss.backward()
            m2 = clock.mark()
        grad_norm = torch.nn.utils.clip_grad_norm_(masters, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        m3 = clock.mark()
        if mode == "fp32":
            with torch.no_grad():
                torch._foreach_copy_(params16, masters)  # copy-back: bf16(master)
        m4 = clock.mark()
        clock.sync()
        losses.append(loss.item())
        if t == 0:
            compile_s = time.perf_counter() - t_start
        if t >= a.warmup:
            steps.append({"step_ms": clock.ms(m0, m4), "decode_ms": clock.ms(m0, m1),
                          "forward_backward_ms": clock.ms(m1, m2), "optimizer_ms": clock.ms(m2, m3),
                          "copy_back_ms": clock.ms(m3, m4), "grad_norm": float(grad_norm)})
    med = lambda k: statistics.median(s[k] for s in steps) if steps else None
    peak = torch.cuda.max_memory_allocated() if cuda else None
    return {"mode": mode, "variant": variant, "step_ms": med("step_ms"),
            "phase_ms": {k: med(k) for k in ("decode_ms", "forward_backward_ms", "optimizer_ms", "copy_back_ms")},
            "first_step_s": compile_s, "losses": losses, "timed_steps": len(steps),
            "peak_gpu_bytes": peak}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads); 0: torch's default")
    ap.add_argument("--steps", type=int, default=60, help="steps in all (the loss curve)")
    ap.add_argument("--warmup", type=int, default=10, help="first steps left out of the timing")
    ap.add_argument("--micro-batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--runs", default="fp32:eager,fp32:compile,amp:eager,amp:compile",
                    help="comma list of MODE:VARIANT, MODE fp32 or amp, VARIANT eager or compile")
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args()
    if a.warmup >= a.steps:
        ap.error("--warmup must be below --steps")

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 GEMMs are fp32, as fpgather's (no TF32)
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_step_torch.py: --device cuda but torch sees no GPU")
    dims = PRESETS[a.model]

    t0 = time.perf_counter()
    with torch.no_grad():
        student0 = init_params(dims, a.seed, True, device)
        teacher32 = init_params(dims, a.seed, False, device)
        inputs = [draw_inputs(dims, a.seed, a.micro_batch, t, device) for t in range(a.steps)]
    init_s = time.perf_counter() - t0

    runs = [tuple(r.split(":")) for r in a.runs.split(",")]
    for mode, variant in runs:
        if mode not in ("fp32", "amp") or variant not in ("eager", "compile"):
            ap.error(f"--runs: unknown {mode}:{variant}")
    results = []
    for mode, variant in runs:
        r = run_variant(a, dims, mode, variant, student0, teacher32, inputs, device)
        results.append(r)
        print(f"torch {a.model} {mode} {variant}: {r['step_ms']:.3f} ms/step "
              f"(first step {r['first_step_s']:.1f} s), loss {r['losses'][0]:.6f} -> {r['losses'][-1]:.6f}",
              file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    out = {"benchmark": "step-torch", "model": a.model, "dims": dict(zip(("input", "hidden", "ffn", "layers", "output"), dims)),
           "params": sum(math.prod(s) for _, s in network_params(dims)),
           "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
           "threads": torch.get_num_threads(), "torch": torch.__version__, "steps": a.steps, "warmup": a.warmup,
           "micro_batch": a.micro_batch, "seed": a.seed, "lr": a.lr, "init_s": init_s, "results": results}
    text = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
