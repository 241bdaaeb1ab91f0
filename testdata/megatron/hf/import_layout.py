"""The model section fpgather's import writes is laid out as Megatron-Core laid out the same model: the
same keys (the fixture's, without DDP's "module." prefix), global shapes, chunk boxes and the rank file
holding each chunk, and the same `_extra_state` objects; the optimizer's keys and the common state are
left out (an import writes no optimizer). Reads `fpgather --json inspect` of both checkpoints.

  python3 import_layout.py FPGATHER FIXTURE_CKPT IMPORTED_CKPT

Exit 1, listing what differs, when the layouts differ.
"""
import json
import subprocess
import sys


def inspect(fpgather, ckpt, *args):
    out = subprocess.run([fpgather, "--json", "--no-progress", "inspect", ckpt, *args], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def layout(fpgather, ckpt):
    keys = {}
    for k in inspect(fpgather, ckpt, "--keys")["keys"]:
        name = k["key"]
        if name.startswith("optimizer.") or name.startswith("chained_") or name.startswith("common_state"):
            continue
        bare = name[len("module."):] if name.startswith("module.") else name
        if not k["tensor"]:
            keys[bare] = "object"
            continue
        chunks = inspect(fpgather, ckpt, "--key", name)["chunks"]
        keys[bare] = (tuple(k["shape"]), sorted((tuple(c["offsets"]), tuple(c["sizes"]), c["file"]) for c in chunks))
    return keys


def main():
    fpgather, want_ckpt, got_ckpt = sys.argv[1:4]
    want, got = layout(fpgather, want_ckpt), layout(fpgather, got_ckpt)
    bad = [f"{k}: only in {'the fixture' if k in want else 'the import'}" for k in sorted(set(want) ^ set(got))]
    for k in sorted(set(want) & set(got)):
        if want[k] != got[k]:
            bad.append(f"{k}: fixture {want[k]}\n    import  {got[k]}")
    print(f"{got_ckpt}: {len(got)} keys, {len(bad)} differ from {want_ckpt}")
    for b in bad[:20]:
        print("  " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
