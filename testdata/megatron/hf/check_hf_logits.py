"""Transformers loads fpgather's Hugging Face export of a Megatron-Core checkpoint, and its logits
equal Megatron's forward of the same checkpoint on the same tokens.

  python3 check_hf_logits.py REPORT.json FIXTURE=HF_DIR [FIXTURE=HF_DIR …]

Per pair: FIXTURE is a folder of testdata/megatron/parallel (ckpt/, truth.json); Megatron-Core builds
the fixture's model at TP 1 × PP 1 (whatever parallelism saved it), loads the checkpoint's model
section with dist_checkpointing.load and runs its forward (bf16, eval) on 2 × 16 fixed tokens of the
real vocabulary; transformers' AutoModelForCausalLM.from_pretrained(HF_DIR) (bf16, then fp32) runs the
same tokens. Recorded: missing/unexpected/mismatched keys (all must be empty), the max abs difference
of the logits over the real vocabulary, the largest logit, and how many greedy next tokens agree.
Needs one GPU, torch, transformers and megatron-core (scripts/megatron-site.sh). Exit 1 when a load
reports keys, or the bf16 logits differ by more than 2 % of the largest logit, or fewer than 95 % of
the greedy tokens agree. An HF_DIR whose name holds "fp8" is an FP8 export, loaded through
transformers' own FP8 support in bf16 only (DeepSeek-V3 blockwise, quant_method fp8; MXFP8 as
compressed-tensors, which needs the compressed-tensors package), as quantized where transformers runs it,
else through its own dequantizing load (fp8_fallback, recorded as fp8_path), within 10 % of the largest
logit and 90 % greedy agreement: the error of E4M3 weights (3 mantissa bits, a relative step of up to
2^-3 per weight, averaging out over a dot product) on this small model.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def megatron_logits(fixture, tokens):
    import make_megatron_fixtures as mf
    from megatron.core import dist_checkpointing
    cfg = json.load(open(os.path.join(fixture, "truth.json")))["config"]
    cfg = dict(mf.PAR_DEFAULTS, **{k: v for k, v in cfg.items() if k in mf.PAR_DEFAULTS})
    cfg.update(tp=1, pp=1, ep=1, dp=1, first_stage_layers=None)
    model, ddp, _ = mf.par_build(cfg)
    dist_checkpointing.load({"model": ddp.sharded_state_dict()}, os.path.join(fixture, "ckpt"))
    model.eval()
    seq = tokens.shape[1]
    mask = torch.tril(torch.ones(1, 1, seq, seq, dtype=torch.bool)).logical_not().cuda()
    pos = torch.arange(seq).unsqueeze(0).cuda()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(tokens.cuda(), pos, mask)
    vocab = cfg["real_vocab"] or cfg["vocab"]
    return out[..., :vocab].float().cpu(), vocab


def hf_logits(hf_dir, tokens, dtype, **kwargs):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype, output_loading_info=True, **kwargs)
    model = model.cuda().eval()
    with torch.no_grad():
        logits = model(tokens.cuda()).logits.float().cpu()
    keys = {k: sorted(map(str, info.get(k) or [])) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    return logits, keys


def fp8_quant_method(hf_dir):
    return json.load(open(os.path.join(hf_dir, "config.json")))["quantization_config"]["quant_method"]


def fp8_fallback_name(hf_dir):
    return ("CompressedTensorsConfig(dequantize=True)" if fp8_quant_method(hf_dir) == "compressed-tensors"
            else "FineGrainedFP8Config(dequantize=True)")


def fp8_fallback(hf_dir):
    """transformers' own path that dequantizes an FP8 checkpoint's weights with its scales on load, where
    its FP8 execution is not available here: no FP8 kernel (transformers fetches them with `kernels`) for
    DeepSeek-V3 blockwise, no compressed execution of the format for compressed-tensors (which then
    decompresses into the model)."""
    if fp8_quant_method(hf_dir) == "compressed-tensors":
        from transformers import CompressedTensorsConfig
        return CompressedTensorsConfig(dequantize=True)
    from transformers import FineGrainedFP8Config
    return FineGrainedFP8Config(dequantize=True)


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.distributed.init_process_group("nccl", world_size=1, rank=0)
    torch.cuda.set_device(0)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1)
    report, ok = [], True
    for pair in sys.argv[2:]:
        fixture, hf_dir = pair.split("=", 1)
        gen = torch.Generator().manual_seed(7)
        cfg = json.load(open(os.path.join(fixture, "truth.json")))["config"]
        tokens = torch.randint(0, cfg.get("real_vocab") or cfg["vocab"], (2, 16), generator=gen)
        ref, vocab = megatron_logits(fixture, tokens)
        entry = {"fixture": os.path.basename(fixture.rstrip("/")), "hf_dir": hf_dir, "vocab": vocab,
                 "max_abs_logit": ref.abs().max().item()}
        fp8 = "fp8" in os.path.basename(hf_dir.rstrip("/"))  # an FP8 export: transformers' own FP8 path, bf16 compute
        for name, dtype in (("bf16", torch.bfloat16),) + ((("fp32", torch.float32),) if not fp8 else ()):
            try:
                try:
                    got, keys = hf_logits(hf_dir, tokens, dtype)
                    if fp8:
                        entry["fp8_path"] = "as quantized"
                except Exception as e:
                    if not fp8:
                        raise
                    entry["fp8_path"] = f"{fp8_fallback_name(hf_dir)} ({type(e).__name__}: {str(e)[:160]})"
                    got, keys = hf_logits(hf_dir, tokens, dtype, quantization_config=fp8_fallback(hf_dir))
            except Exception as e:  # recorded, and the other cases still run
                entry[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
                print(f"{entry['fixture']} ({os.path.basename(hf_dir)}) {name}: {entry[name]['error']}", flush=True)
                ok = False
                break
            diff = (got - ref).abs().max().item()
            agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
            entry[name] = {"max_abs_diff": diff, "greedy_agree": agree, **keys}
            if any(keys.values()):
                ok = False
        entry["fp8"] = fp8
        if any("error" in entry.get(k, {}) for k in ("bf16", "fp32")):
            report.append(entry)
            continue
        b = entry["bf16"]
        tol, agree = (0.10, 0.90) if fp8 else (0.02, 0.95)
        if b["max_abs_diff"] > tol * entry["max_abs_logit"] or b["greedy_agree"] < agree:
            ok = False
        report.append(entry)
        f32 = entry.get("fp32")
        print(f"{entry['fixture']} ({os.path.basename(hf_dir)}): |logit| <= {entry['max_abs_logit']:.3f}; transformers "
              f"bf16 max abs diff {b['max_abs_diff']:.4f}, greedy {b['greedy_agree']:.0%}"
              + (f"; fp32 max abs diff {f32['max_abs_diff']:.4f}, greedy {f32['greedy_agree']:.0%}" if f32 else "")
              + f"; keys {({k: v for k, v in b.items() if k.endswith('keys') and v}) or 'none reported'}", flush=True)
    json.dump({"ok": ok, "cases": report, "torch": torch.__version__,
               "transformers": __import__("transformers").__version__}, open(sys.argv[1], "w"), indent=1)
    torch.distributed.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
