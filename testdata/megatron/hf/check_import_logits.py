"""Megatron-Core loads fpgather's import of a Hugging Face model (`convert HF_DIR OUT --to megatron`) and
its forward gives the logits of the Megatron checkpoint the HF model was exported from, bit for bit.

  python3 check_import_logits.py REPORT.json CASE [CASE ...]                world 1, one process
  python3 check_import_logits.py REPORT.json --world TP PP EP CASE          TP x PP x EP ranks on one GPU

CASE is FIXTURE=IMPORTED:MODE. FIXTURE is a folder of testdata/megatron/parallel (ckpt/ saved by
Megatron-Core, truth.json); IMPORTED is the import of fpgather's export of it. Megatron-Core builds the
fixture's model (make_megatron_fixtures.par_build: local spec, SequentialMLP experts) at the given
parallelism, loads FIXTURE/ckpt with dist_checkpointing.load into it and runs the forward (bf16
autocast, eval) on 2 x 16 fixed tokens of the real vocabulary; then sets every parameter to NaN, loads
IMPORTED (keys without DDP's "module." prefix, as Megatron-LM saves them) and runs the same forward.
MODE fp32: the export and the import were made with --dtype fp32, so every value is carried exactly
and the model is the fixture's as built (fp32 norms, bf16 linears); MODE bf16: both with --dtype bf16,
and the model is cast to bf16 whole (as Megatron-LM's --bf16 runs it), so that the fixture's fp32
norms are rounded on load as the bf16 export rounds them. Recorded per case (and per rank): whether
the logits over the real vocabulary are identical bit for bit (the padding rows are zero in an import,
trained values in the fixture, so only their logits may differ), the max abs difference, and whether
every parameter was loaded (none left NaN).

--world runs TP x PP x EP processes on the one GPU over gloo (gloo_one_gpu.py), DP = EP: each rank
compares its own logits (its vocabulary shard at TP > 1, its micro-batch with EP); at PP > 1 the first
stage's hidden states reach the last stage through the host. Needs one GPU, torch and megatron-core
(scripts/megatron-site.sh). Exit 1 unless every case is identical.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import make_megatron_fixtures as mf  # noqa: E402

SEQ, BATCH = 16, 2
# Development aid only (as make_megatron_fixtures.py's): run on a machine without a GPU.
CPU_DEBUG = bool(os.environ.get("FIXTURES_CPU_DEBUG"))


def parse_case(case):
    fixture, rest = case.split("=", 1)
    imported, mode = rest.rsplit(":", 1)
    assert mode in ("fp32", "bf16"), case
    return fixture, imported, mode


def fixture_cfg(fixture, tp=1, pp=1, ep=1):
    cfg = json.load(open(os.path.join(fixture, "truth.json")))["config"]
    cfg = dict(mf.PAR_DEFAULTS, **{k: v for k, v in cfg.items() if k in mf.PAR_DEFAULTS})
    cfg.update(tp=tp, pp=pp, ep=ep, dp=ep, first_stage_layers=None)
    return cfg


def tokens_of(cfg):
    gen = torch.Generator().manual_seed(7)
    return torch.randint(0, cfg["real_vocab"] or cfg["vocab"], (BATCH * cfg["ep"], SEQ), generator=gen)


def forward(model, tokens, pp_exchange):
    """The logits of this rank (None on a stage that is not the last)."""
    from megatron.core import parallel_state as ps
    dev = torch.cuda.current_device()
    mask = torch.tril(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool)).logical_not().to(dev)
    pos = torch.arange(SEQ).unsqueeze(0).to(dev)
    with torch.no_grad(), torch.autocast("cpu" if dev == "cpu" else "cuda", dtype=torch.bfloat16):
        if not ps.is_pipeline_first_stage():
            model.set_input_tensor(pp_exchange(None).to(dev))
        out = model(tokens.to(dev), pos, mask)
        if not ps.is_pipeline_last_stage():
            pp_exchange(out.detach().cpu())
            return None
    return out.float().cpu()


def logits_pair(fixture, imported, mode, model, ddp, tokens, pp_exchange):
    from megatron.core import dist_checkpointing
    if mode == "bf16":
        model.bfloat16()
    model.eval()
    dist_checkpointing.load({"model": ddp.sharded_state_dict()}, os.path.join(fixture, "ckpt"))
    want = forward(model, tokens, pp_exchange)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    dist_checkpointing.load({"model": model.sharded_state_dict()}, imported)
    nan_params = [n for n, p in model.named_parameters() if torch.isnan(p).any()]
    got = forward(model, tokens, pp_exchange)
    return want, got, nan_params


def compare(want, got, vocab, nan_params):
    if want is None:
        return {"stage": "not last", "loaded_all": not nan_params, "nan_params": nan_params}
    # The logits of the real vocabulary (the last dimension is this rank's vocabulary shard at TP > 1).
    from megatron.core import parallel_state as ps
    shard = want.shape[-1]
    lo = ps.get_tensor_model_parallel_rank() * shard
    keep = max(0, min(shard, vocab - lo))
    w, g = want[..., :keep], got[..., :keep]
    return {"identical": bool(torch.equal(w.view(torch.int32), g.view(torch.int32))),
            "max_abs_diff": (w - g).abs().max().item() if keep else 0.0, "max_abs_logit": w.abs().max().item(),
            "vocab_columns": keep, "loaded_all": not nan_params, "nan_params": nan_params[:10]}


def world_one(report_path, cases):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29543")
    if CPU_DEBUG:
        import cpu_debug  # noqa: F401
    torch.distributed.init_process_group("gloo" if CPU_DEBUG else "nccl", world_size=1, rank=0)
    torch.cuda.set_device(0)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1)
    report, ok = [], True
    for case in cases:
        fixture, imported, mode = parse_case(case)
        cfg = fixture_cfg(fixture)
        entry = {"fixture": os.path.basename(fixture.rstrip("/")), "imported": imported, "mode": mode, "world": "1"}
        try:
            model, ddp, _ = mf.par_build(cfg)
            want, got, nan_params = logits_pair(fixture, imported, mode, model, ddp, tokens_of(cfg), None)
            entry.update(compare(want, got, cfg["real_vocab"] or cfg["vocab"], nan_params))
        except Exception as e:  # recorded; the other cases still run
            entry["error"] = f"{type(e).__name__}: {e}"[:800]
        good = entry.get("identical") and entry.get("loaded_all")
        ok &= bool(good)
        report.append(entry)
        print(line(entry), flush=True)
    json.dump({"ok": ok, "cases": report, "torch": torch.__version__}, open(report_path, "w"), indent=1)
    torch.distributed.destroy_process_group()
    return 0 if ok else 1


def line(e):
    where = f"{e['fixture']} ({os.path.basename(e['imported'].rstrip('/'))}, {e['mode']}, world {e['world']})"
    if "error" in e:
        return f"{where}: ERROR {e['error']}"
    if "identical" not in e:
        return f"{where}: loaded all {e['loaded_all']}"
    return (f"{where}: logits identical {e['identical']} (max abs diff {e['max_abs_diff']:.3g}, |logit| <= "
            f"{e['max_abs_logit']:.3f}, {e['vocab_columns']} vocab columns); every parameter loaded {e['loaded_all']}")


def worker(report_path, tp, pp, ep, case, rank, world, port):
    fixture, imported, mode = parse_case(case)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import gloo_one_gpu
    gloo_one_gpu.install()
    if CPU_DEBUG:
        import cpu_debug  # noqa: F401
    torch.cuda.set_device(0)
    from megatron.core import parallel_state as ps
    gloo_one_gpu.patch_megatron()
    ps.initialize_model_parallel(tp, pp, expert_model_parallel_size=ep)
    cfg = fixture_cfg(fixture, tp, pp, ep)
    tokens = tokens_of(cfg)
    dp_rank = ps.get_data_parallel_rank()
    tokens = tokens[dp_rank * BATCH:(dp_rank + 1) * BATCH]

    def pp_exchange(hidden):
        # The first stage's hidden states to the last stage of the same TP and DP rank, through the
        # host (gloo moves no CUDA tensors point to point).
        sent = [None] * world
        dist.all_gather_object(sent, (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank(),
                                      dp_rank, hidden))
        if hidden is not None:
            return None
        for stage, t, d, h in sent:
            if stage == 0 and t == ps.get_tensor_model_parallel_rank() and d == dp_rank:
                return h
        raise RuntimeError("no hidden states from the first stage")

    entry = {"fixture": os.path.basename(fixture.rstrip("/")), "imported": imported, "mode": mode,
             "world": f"TP {tp} x PP {pp} x EP {ep}", "rank": rank}
    try:
        model, ddp, _ = mf.par_build(cfg)
        want, got, nan_params = logits_pair(fixture, imported, mode, model, ddp, tokens, pp_exchange)
        entry.update(compare(want, got, cfg["real_vocab"] or cfg["vocab"], nan_params))
    except Exception as e:
        entry["error"] = f"{type(e).__name__}: {e}"[:800]
    entries = [None] * world
    dist.all_gather_object(entries, entry)
    if rank == 0:
        ok = all(("identical" not in e or e["identical"]) and e.get("loaded_all") and "error" not in e for e in entries)
        json.dump({"ok": ok, "cases": entries, "torch": torch.__version__}, open(report_path, "w"), indent=1)
        for e in entries:
            print(f"rank {e['rank']}: " + line(e), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def launch(report_path, tp, pp, ep, case, timeout=300):
    import gloo_one_gpu
    world, port = tp * pp * ep, 29760
    log = os.path.splitext(report_path)[0]
    codes = gloo_one_gpu.run_ranks(
        lambda r: [sys.executable, os.path.abspath(__file__), report_path, "--worker", str(tp), str(pp), str(ep), case,
                   str(r), str(world), str(port)], world, log, timeout)
    with open(f"{log}.rank0.log") as f:
        print("".join(l for l in f if l.startswith("rank ")), end="", flush=True)
    if any(codes) or not os.path.exists(report_path):
        for r in range(world):
            with open(f"{log}.rank{r}.log") as f:
                print(f"-- rank {r}:\n" + "\n".join(f.read().splitlines()[-15:]), flush=True)
        return 1
    return 0 if json.load(open(report_path))["ok"] else 1


def main():
    args = sys.argv[1:]
    if len(args) >= 2 and args[1] == "--worker":
        report, _, tp, pp, ep, case, rank, world, port = args
        worker(report, int(tp), int(pp), int(ep), case, int(rank), int(world), int(port))
        return 0
    if len(args) >= 2 and args[1] == "--world":
        report, _, tp, pp, ep, case = args
        return launch(report, int(tp), int(pp), int(ep), case)
    return world_one(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
