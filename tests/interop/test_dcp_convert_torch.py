#!/usr/bin/env python3
"""`fpgather convert CKPT OUT --to dcp` loaded by torch.distributed.checkpoint.load into a nested state dict
{"model": {NAME: t}, "optimizer": {"state": {NAME: {STATE: t}}}} and compared bitwise with the same export
as safetensors read by safetensors.torch: an fpgather checkpoint and a Megatron torch_dist one, bf16 and
fp32 weights. torch's format_utils.dcp_to_torch_save of each output gives that nested dict (the
planner_data torch's own planner writes), and storage_meta.checkpoint_id is the output's path; a plain
DCP's state of no parameter (AdamW's 0-d step) stays under its own key. Needs torch; exit 77 (skip)
without it (CI has no torch: run it with a Python that has it)."""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

FPGATHER = os.environ.get("FPGATHER", "fpgather")
TESTDATA = os.environ["TESTDATA"]
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def export(ckpt, out, *args):
    subprocess.run([FPGATHER, "--no-progress", "convert", ckpt, out, "--states", *args], check=True,
                   stdout=subprocess.DEVNULL)


cases = [os.path.join(TESTDATA, "ckpt", "valid", "dp2-bucket"),
         os.path.join(TESTDATA, "megatron", "dp1-buckets-padded", "ckpt")]
with tempfile.TemporaryDirectory() as tmp:
    for n, ckpt in enumerate(cases):
        for dtype in ("bf16", "fp32"):
            out = os.path.join(tmp, f"{n}-{dtype}.dcp")
            export(ckpt, out, "--to", "dcp", "--dtype", dtype)
            export(ckpt, out + ".safetensors", "--dtype", dtype)
            want = load_file(out + ".safetensors")
            md = FileSystemReader(out).read_metadata()
            sd = {"model": {}, "optimizer": {"state": {}}}
            for fqn, m in md.state_dict_metadata.items():
                empty = torch.empty(m.size, dtype=m.properties.dtype)
                if fqn.startswith("model."):
                    sd["model"][fqn[len("model."):]] = empty
                else:
                    name, state = fqn[len("optimizer.state."):].rsplit(".", 1)
                    sd["optimizer"]["state"].setdefault(name, {})[state] = empty
            dcp.load(sd, checkpoint_id=out)
            got = dict(sd["model"])
            for name, states in sd["optimizer"]["state"].items():
                for state, t in states.items():
                    got[f"{name}.{state}"] = t
            check(set(got) == set(want), f"{out}: the DCP holds the safetensors export's tensors")
            for k, t in want.items():
                if k in got:
                    check(got[k].dtype == t.dtype and got[k].shape == t.shape and
                          torch.equal(got[k].view(-1).view(torch.uint8), t.view(-1).view(torch.uint8)),
                          f"{out}: {k} bitwise")
            check(str(md.storage_meta.checkpoint_id) == out, f"{out}: checkpoint_id {md.storage_meta.checkpoint_id}")
            dcp_to_torch_save(out, out + ".pt")
            nested = torch.load(out + ".pt", weights_only=True)
            check(set(nested) == {"model", "optimizer"} and set(nested["optimizer"]) == {"state"},
                  f"{out}: dcp_to_torch_save gives {sorted(nested)[:5]}")
            flat = dict(nested.get("model", {}))
            for name, states in nested.get("optimizer", {}).get("state", {}).items():
                for state, t in states.items():
                    flat[f"{name}.{state}"] = t
            check(set(flat) == set(got) and all(torch.equal(flat[k].view(-1).view(torch.uint8),
                                                            got[k].view(-1).view(torch.uint8)) for k in got),
                  f"{out}: dcp_to_torch_save holds what dcp.load read")
            print(f"{ckpt} {dtype}: {len(got)} tensors loaded by torch.distributed.checkpoint, nested by dcp_to_torch_save")

    # A plain DCP torch wrote, with AdamW's 0-d steps, train_state and param_groups: kept under their
    # own keys.
    out = os.path.join(tmp, "train_state.dcp")
    export(os.path.join(TESTDATA, "dcp", "train_state"), out, "--to", "dcp", "--dtype", "fp32")
    dcp_to_torch_save(out, out + ".pt")
    nested = torch.load(out + ".pt", weights_only=True)
    check(set(nested["model"]) == {"0.weight", "0.bias", "1.weight", "1.bias"}, f"{out}: model {sorted(nested['model'])}")
    check(set(nested["optimizer"]["state"]["0.weight"]) == {"exp_avg", "exp_avg_sq"}, f"{out}: optimizer state")
    check(nested["optim.state.0.weight.step"].item() == 2.0, f"{out}: the step under its own key")
    check(nested["optim.param_groups.0.lr"] == 0.01, f"{out}: param_groups carried")
    check(nested["train_state.step"].item() == 2, f"{out}: train_state carried")

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
print("all checks passed")
