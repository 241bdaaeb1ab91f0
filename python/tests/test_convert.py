"""convert with every option family of `fpgather convert`: the same files as the command writes,
its refusals with its messages, and progress callbacks (convert, reshard, validate) that can stop
the work."""
import filecmp
import json
import os
import re
import shutil
import struct

import pytest

import fpgather
from conftest import data

MODEL = data("models", "tiny-llama.safetensors")
SHARDED = data("models", "tiny-llama-sharded")
MEGATRON = data("megatron", "dp1-one-bucket", "ckpt")
HF_MEGATRON = data("megatron", "parallel", "hf-llama-dp_reshardable", "ckpt")
HF_QWEN3_MOE = data("megatron", "hf", "models", "qwen3_moe")
CKPT = data("ckpt", "valid", "dp2-bucket")


def files_under(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def assert_same_output(cli_out, py_out):
    """The same files, byte for byte (a DCP .metadata records a per-save identifier and an fpgather
    checkpoint's HDF5 files their creation times: those are compared by value instead)."""
    if os.path.isfile(cli_out):
        assert filecmp.cmp(cli_out, py_out, shallow=False)
        return
    names = files_under(cli_out)
    assert names == files_under(py_out)
    by_value = os.path.exists(os.path.join(cli_out, "index.h5")) or os.path.exists(os.path.join(cli_out, ".metadata"))
    for f in names:
        if by_value and (f.endswith(".h5") or f == ".metadata"):
            continue
        assert filecmp.cmp(os.path.join(cli_out, f), os.path.join(py_out, f), shallow=False), f
    if by_value:
        assert fpgather.diff(cli_out, py_out).equal


def without_seconds(doc, *paths):
    """A --json document with its time and the output paths left out."""
    doc = {k: v for k, v in doc.items() if k != "seconds"}
    text = json.dumps(doc)
    for p in paths:
        text = text.replace(json.dumps(str(p))[1:-1], "OUT")
    return json.loads(text)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, fpgather_cli):
    """A checkpoint `fpgather train` saves (the committed fpgather fixtures predate the data cursor
    that re-encoding and resharding rebuild the run from)."""
    root = tmp_path_factory.mktemp("train") / "run"
    rc, _, err = fpgather_cli("train", "--steps", "2", "--save", str(root))
    assert rc == 0, err
    return str(root)


@pytest.fixture(scope="module")
def hf_model_dir(tmp_path_factory):
    """A Hugging Face model directory: the tiny model, its config.json and a tokenizer file."""
    d = tmp_path_factory.mktemp("hf") / "tiny-llama"
    d.mkdir()
    shutil.copy(MODEL, d / "model.safetensors")
    (d / "config.json").write_text('{"model_type": "llama", "torch_dtype": "bfloat16"}')
    (d / "tokenizer.json").write_text("{}")
    return str(d)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    (d / "tokenizer_config.json").write_text('{"model_max_length": 16}')
    (d / "tokenizer.json").write_text("{}")
    return str(d)


@pytest.fixture(scope="module")
def fp8_model(tmp_path_factory, fpgather_cli):
    out = tmp_path_factory.mktemp("fp8") / "model-fp8.safetensors"
    rc, _, err = fpgather_cli("convert", MODEL, str(out), "--fp8", "blockwise", "--exclude", "lm_head|embed")
    assert rc == 0, err
    return str(out)


def nonfinite_model(path):
    """A model whose F32 matrix holds NaN and infinities (as tests/cli/convert_nonfinite.sh)."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]},
                         "ok": {"dtype": "F32", "shape": [2, 2], "data_offsets": [32, 48]}}).encode()
    header += b" " * (-len(header) % 8)
    w = struct.pack("<8f", 1, float("nan"), float("inf"), -float("inf"), 2, 3, float("inf"), 0.5)
    ok = struct.pack("<4f", 1, 2, 3, 4)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + w + ok)
    return str(path)


# (options for fpgather.convert, the command's flags, source, output name)
def cases(hf_model_dir, fp8_model, tokenizer_dir, trained):
    return {
        "fp8-blockwise-exact": ({"fp8": "blockwise", "pow2_scales": False, "exclude": "lm_head|embed"},
                                ["--fp8", "blockwise", "--no-pow2-scales", "--exclude", "lm_head|embed"], MODEL,
                                "q.safetensors"),
        "fp8-tensorwise-pow2-e5m2": ({"fp8": "tensorwise", "pow2_scales": True, "fp8_format": "e5m2"},
                                     ["--fp8", "tensorwise", "--pow2-scales", "--fp8-format", "e5m2"], MODEL,
                                     "q.safetensors"),
        "fp8-mxfp8-floor-include": ({"fp8": "mxfp8", "mx_scale": "floor", "include": "mlp"},
                                    ["--fp8", "mxfp8", "--mx-scale", "floor", "--include", "mlp"], MODEL,
                                    "q.safetensors"),
        "fp8-1x128-expert-dims": ({"fp8": "blockwise-1x128", "expert_dims": "^$"},
                                  ["--fp8", "blockwise-1x128", "--expert-dims", "^$"], MODEL, "q.safetensors"),
        "fp8-sharded-to-index": ({"fp8": "blockwise"}, ["--fp8", "blockwise"], SHARDED, "q/model.safetensors.index.json"),
        "fp8-model-dir": ({"fp8": "tensorwise", "exclude": "lm_head"}, ["--fp8", "tensorwise", "--exclude", "lm_head"],
                          hf_model_dir, "q"),
        "dequantize-fp32": ({"dequantize": True, "dtype": "fp32"}, ["--dequantize", "--dtype", "fp32"], fp8_model,
                            "d.safetensors"),
        "dequantize-bf16": ({"dequantize": True}, ["--dequantize"], fp8_model, "d.safetensors"),
        "compress-none": ({"compress": "none"}, ["--compress", "none"], CKPT, "c"),
        "reencode-mxfp8": ({"fp8": "mxfp8"}, ["--fp8", "mxfp8"], trained, "m"),
        "reencode-delayed": ({"fp8": "delayed", "amax_history": 4, "amax_algo": "max", "compress": "zstd:3"},
                             ["--fp8", "delayed", "--amax-history", "4", "--amax-algo", "max", "--compress", "zstd:3"],
                             trained, "m"),
        "export-fp32-states": ({"dtype": "fp32", "states": True}, ["--dtype", "fp32", "--states"], CKPT,
                               "e.safetensors"),
        "export-shards": ({"states": True, "max_shard_size": 20000}, ["--states", "--max-shard-size", "20000"],
                          MEGATRON, "e"),
        "export-dcp": ({"to": "dcp", "states": True}, ["--to", "dcp", "--states"], CKPT, "e"),
        "hf": ({"to": "hf"}, ["--to", "hf"], HF_MEGATRON, "hf"),
        "hf-arch-fp32-tokenizer": ({"to": "hf", "arch": "llama", "dtype": "fp32", "tokenizer": tokenizer_dir},
                                   ["--to", "hf", "--arch", "llama", "--dtype", "fp32", "--tokenizer", tokenizer_dir],
                                   HF_MEGATRON, "hf"),
        "hf-from-masters-shards": ({"to": "hf", "from_masters": True, "max_shard_size": "10kB"},
                                   ["--to", "hf", "--from-masters", "--max-shard-size", "10kB"], HF_MEGATRON, "hf"),
        "hf-fp8": ({"to": "hf", "fp8": "blockwise", "exclude": "lm_head"},
                   ["--to", "hf", "--fp8", "blockwise", "--exclude", "lm_head"], HF_MEGATRON, "hf"),
        "megatron": ({"to": "megatron", "tp": 2, "ep": 2, "make_vocab_size_divisible_by": 64, "layer_spec": "local",
                      "dtype": "fp32"},
                     ["--to", "megatron", "--tp", "2", "--ep", "2", "--make-vocab-size-divisible-by", "64",
                      "--layer-spec", "local", "--dtype", "fp32"], HF_QWEN3_MOE, "mg"),
    }


CASES = ["fp8-blockwise-exact", "fp8-tensorwise-pow2-e5m2", "fp8-mxfp8-floor-include", "fp8-1x128-expert-dims",
         "fp8-sharded-to-index", "fp8-model-dir", "dequantize-fp32", "dequantize-bf16", "compress-none",
         "reencode-mxfp8", "reencode-delayed", "export-fp32-states", "export-shards", "export-dcp", "hf",
         "hf-arch-fp32-tokenizer", "hf-from-masters-shards", "hf-fp8", "megatron"]


@pytest.mark.parametrize("case", CASES)
def test_convert_writes_what_the_command_writes(case, hf_model_dir, fp8_model, tokenizer_dir, trained, tmp_path,
                                                cli_json):
    options, flags, src, name = cases(hf_model_dir, fp8_model, tokenizer_dir, trained)[case]
    cli_out, py_out = tmp_path / "cli" / name, tmp_path / "py" / name
    os.makedirs(os.path.dirname(cli_out), exist_ok=True)
    os.makedirs(os.path.dirname(py_out), exist_ok=True)
    want = cli_json("convert", *flags, src, str(cli_out))
    report = fpgather.convert(src, py_out, **options)
    cli_root = tmp_path / "cli" / name.split("/")[0]
    py_root = tmp_path / "py" / name.split("/")[0]
    assert_same_output(str(cli_root), str(py_root))
    assert without_seconds(report.summary(), py_root) == without_seconds(want, cli_root)
    assert report.operation in ("quantize", "dequantize", "export", "export_hf", "import_hf", "recompress",
                                "reencode_fp8")
    assert report.files
    with pytest.raises(fpgather.UsageError):  # exists, no force
        fpgather.convert(src, py_out, **options)
    fpgather.convert(src, py_out, force=True, **options)
    assert_same_output(str(cli_root), str(py_root))


def test_convert_of_an_opened_checkpoint(tmp_path):
    report = fpgather.convert(fpgather.open(MEGATRON), tmp_path / "m.safetensors")
    assert report.operation == "export" and report.source.endswith("ckpt")


def test_nonfinite_values_warn_or_with_strict_refuse(tmp_path, fpgather_cli):
    src = nonfinite_model(tmp_path / "nonfinite.safetensors")
    rc, _, err = fpgather_cli("convert", src, str(tmp_path / "cli.safetensors"), "--fp8", "tensorwise", "--include", ".")
    assert rc == 0
    with pytest.warns(RuntimeWarning) as caught:
        report = fpgather.convert(src, tmp_path / "py.safetensors", fp8="tensorwise", include=".")
    assert [str(w.message) for w in caught] == [cli_message_as_python(line[len("fpgather: warning: "):])
                                                for line in err.strip().splitlines()]
    assert [(n.tensor, n.nan, n.pos_inf, n.neg_inf) for n in report.nonfinite] == [("w", 1, 2, 1)]
    assert filecmp.cmp(tmp_path / "cli.safetensors", tmp_path / "py.safetensors", shallow=False)
    rc, _, err = fpgather_cli("convert", src, str(tmp_path / "strict.safetensors"), "--fp8", "tensorwise",
                              "--include", ".", "--strict")
    with pytest.raises(fpgather.FormatError) as e:
        fpgather.convert(src, tmp_path / "strict.safetensors", fp8="tensorwise", include=".", strict=True)
    assert rc == 3 and err.strip() == f"fpgather: error: {e.value}"
    assert not os.path.exists(tmp_path / "strict.safetensors")


def cli_error(stderr):
    """The message of the command's error line: "fpgather: error: MESSAGE", or for what it refuses
    while parsing its flags "fpgather: convert: MESSAGE (see 'fpgather convert --help')"."""
    line = stderr.strip().splitlines()[-1]
    m = re.fullmatch(r"fpgather: error: (.*)|fpgather: convert: (.*) \(see 'fpgather convert --help'\)", line)
    assert m, line
    return m.group(1) or m.group(2)


def cli_message_as_python(message):
    """The command's message naming options as fpgather.convert's keywords: --to hf is to='hf',
    --(no-)pow2-scales pow2_scales, --max-shard-size max_shard_size."""
    for flag, value in (("to", "hf"), ("to", "dcp"), ("dtype", "fp8"), ("dtype", "bf16|fp32"), ("fp8", "RECIPE")):
        message = message.replace(f"--{flag} {value}", f"{flag}='{value}'")
    message = message.replace("--(no-)pow2-scales", "pow2_scales")
    return re.sub(r"--([a-z0-9][a-z0-9-]*)", lambda m: m.group(1).replace("-", "_"), message)


REFUSED = [
    # bad values
    ({"fp8": "fp4"}, ["--fp8", "fp4"], MODEL),
    ({"fp8": "blockwise", "fp8_format": "e3m4"}, ["--fp8", "blockwise", "--fp8-format", "e3m4"], MODEL),
    ({"fp8": "mxfp8", "mx_scale": "ceil"}, ["--fp8", "mxfp8", "--mx-scale", "ceil"], MODEL),
    ({"dequantize": True, "dtype": "fp16"}, ["--dequantize", "--dtype", "fp16"], MODEL),
    ({"dtype": "int4"}, ["--dtype", "int4"], MEGATRON),
    ({"to": "onnx"}, ["--to", "onnx"], MEGATRON),
    ({"to": "hf", "arch": "gpt2"}, ["--to", "hf", "--arch", "gpt2"], HF_MEGATRON),
    ({"to": "hf", "dtype": "fp8"}, ["--to", "hf", "--dtype", "fp8"], HF_MEGATRON),
    ({"max_shard_size": "lots"}, ["--max-shard-size", "lots"], MEGATRON),
    ({"max_shard_size": 0}, ["--max-shard-size", "0"], MEGATRON),
    ({"fp8": "delayed", "amax_history": 0}, ["--fp8", "delayed", "--amax-history", "0"], CKPT),
    ({"fp8": "delayed", "amax_algo": "mean"}, ["--fp8", "delayed", "--amax-algo", "mean"], CKPT),
    ({"fp8": "sometimes"}, ["--fp8", "sometimes"], CKPT),
    ({"compress": "lz4"}, ["--compress", "lz4"], CKPT),
    # options that do not go together, or not with the source
    ({"fp8": "blockwise", "dequantize": True}, ["--fp8", "blockwise", "--dequantize"], MODEL),
    ({"arch": "llama"}, ["--arch", "llama"], MEGATRON),
    ({"to": "hf", "states": True}, ["--to", "hf", "--states"], HF_MEGATRON),
    ({"to": "hf", "include": "mlp"}, ["--to", "hf", "--include", "mlp"], HF_MEGATRON),
    ({"to": "dcp"}, ["--to", "dcp"], MODEL),
    ({"to": "dcp", "compress": "none"}, ["--to", "dcp", "--compress", "none"], CKPT),
    ({"fp8": "blockwise"}, ["--fp8", "blockwise"], MEGATRON),
    ({"dequantize": True}, ["--dequantize"], CKPT),
    ({"fp8": "mxfp8", "pow2_scales": False}, ["--fp8", "mxfp8", "--no-pow2-scales"], CKPT),
    ({"compress": "none", "states": True}, ["--compress", "none", "--states"], CKPT),
    ({"compress": "none", "no_validate": True}, ["--compress", "none", "--no-validate"], CKPT),
    ({"states": True}, ["--states"], MODEL),
    ({"strict": True, "dequantize": True}, ["--strict", "--dequantize"], MODEL),
    ({"dequantize": True, "expert_dims": "x"}, ["--dequantize", "--expert-dims", "x"], MODEL),
    ({}, [], MODEL),
]


@pytest.mark.parametrize("options,flags,src", REFUSED, ids=[" ".join(f) or "nothing" for _, f, _ in REFUSED])
def test_refusals_are_the_commands(options, flags, src, tmp_path, fpgather_cli):
    rc, _, err = fpgather_cli("convert", *flags, src, str(tmp_path / "cli"))
    assert rc == 2, err
    with pytest.raises(fpgather.UsageError) as e:
        fpgather.convert(src, tmp_path / "py", **options)
    assert e.value.exit_code == 2
    # The command's message; where the library names the options, by these keywords.
    cli = cli_error(err).replace(str(tmp_path / "cli"), str(tmp_path / "py"))
    assert str(e.value) in (cli, cli_message_as_python(cli))
    assert not os.path.exists(tmp_path / "py")


def test_directory_outputs_refused_as_the_command_refuses_them(tmp_path, fpgather_cli):
    for options, flags in (({"fp8": "mxfp8"}, ["--fp8", "mxfp8"]), ({"to": "dcp"}, ["--to", "dcp"]),
                           ({"compress": "none"}, ["--compress", "none"])):
        rc, _, err = fpgather_cli("convert", *flags, CKPT, "out.safetensors")
        with pytest.raises(fpgather.UsageError) as e:
            fpgather.convert(CKPT, "out.safetensors", **options)
        assert rc == 2 and str(e.value) == cli_message_as_python(cli_error(err))


# ---- progress ---------------------------------------------------------------------------------------
class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, done, total):
        self.calls.append((done, total))

    def stages(self):
        """The calls split where `done` starts again (the next stage of an operation)."""
        stages = [[]]
        for d, t in self.calls:
            if stages[-1] and d < stages[-1][-1][0]:
                stages.append([])
            stages[-1].append((d, t))
        return stages

    def check(self, stages=1):
        assert self.calls, "the callback was called"
        assert all(isinstance(d, int) and isinstance(t, int) and t >= 0 for d, t in self.calls)
        assert len(self.stages()) == stages
        assert self.calls[-1][0] > 0
        return self.calls[-1]


class Stop(Exception):
    pass


def stopper(after=1):
    calls = []

    def callback(done, total):
        calls.append(done)
        if len(calls) >= after:
            raise Stop(f"stopped at {done} of {total}")

    return callback


def leftovers(parent, *expected):
    """What is in `parent` besides `expected`: a staging directory left behind, a half-written output."""
    return sorted(set(os.listdir(parent)) - set(expected))


@pytest.mark.parametrize("src,options,stages", [
    (MODEL, {"fp8": "blockwise"}, 1),
    (SHARDED, {"fp8": "mxfp8"}, 1),
    (MEGATRON, {"states": True}, 1),
    (CKPT, {"states": True, "to": "dcp"}, 1),
    (CKPT, {"compress": "none"}, 1),
    (HF_MEGATRON, {"to": "hf"}, 1),
    (HF_MEGATRON, {"to": "hf", "fp8": "blockwise"}, 2),  # the export, then its quantization
])
def test_convert_progress(src, options, stages, tmp_path):
    rec = Recorder()
    fpgather.convert(src, tmp_path / "out", progress=rec, **options)
    rec.check(stages)
    for stage in rec.stages():
        assert stage[-1][0] == stage[-1][1]  # done reaches the total


@pytest.mark.parametrize("src,options,name", [
    (MODEL, {"fp8": "blockwise"}, "q.safetensors"),
    (SHARDED, {"fp8": "blockwise"}, "q"),
    (MEGATRON, {"states": True}, "e.safetensors"),
    (MEGATRON, {"states": True, "max_shard_size": "10kB"}, "e"),
    (CKPT, {"to": "dcp"}, "e"),
    (HF_MEGATRON, {"to": "hf"}, "hf"),
])
def test_a_raising_callback_stops_convert_and_leaves_nothing(src, options, name, tmp_path):
    with pytest.raises(Stop, match="stopped at"):
        fpgather.convert(src, tmp_path / name, progress=stopper(), **options)
    assert leftovers(tmp_path) == []
    # and where OUT exists, force keeps it whole
    fpgather.convert(src, tmp_path / name, **options)
    before = {f: open(os.path.join(tmp_path, name, f) if os.path.isdir(tmp_path / name) else tmp_path / name,
                      "rb").read() for f in (files_under(tmp_path / name) if os.path.isdir(tmp_path / name) else [""])}
    with pytest.raises(Stop):
        fpgather.convert(src, tmp_path / name, force=True, progress=stopper(), **options)
    assert leftovers(tmp_path, name) == []
    after = {f: open(os.path.join(tmp_path, name, f) if os.path.isdir(tmp_path / name) else tmp_path / name,
                     "rb").read() for f in (files_under(tmp_path / name) if os.path.isdir(tmp_path / name) else [""])}
    assert after == before


def test_other_errors_of_the_callback_propagate_as_they_are(tmp_path):
    def bad(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fpgather.convert(MODEL, tmp_path / "q.safetensors", fp8="tensorwise", progress=bad)
    with pytest.raises(TypeError):  # a callable of the wrong arity: Python's own error
        fpgather.convert(MODEL, tmp_path / "q.safetensors", fp8="tensorwise", progress=lambda: None)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("src", ["trained", MEGATRON, data("megatron", "parallel", "tp2-dp1-dp_reshardable", "ckpt")])
def test_reshard_progress_and_stop(src, tmp_path, request):
    if src == "trained":
        src = request.getfixturevalue("trained")
    rec = Recorder()
    fpgather.reshard(src, tmp_path / "dp2", dp=1 if "dp1" not in src else 2, progress=rec)
    done, total = rec.check()
    assert done <= total
    assert fpgather.diff(src, tmp_path / "dp2").equal
    with pytest.raises(Stop):
        fpgather.reshard(src, tmp_path / "stopped", dp=1 if "dp1" not in src else 2, progress=stopper())
    assert leftovers(tmp_path, "dp2") == []


def test_validate_progress_and_stop():
    rec = Recorder()
    report = fpgather.validate(CKPT, data=True, progress=rec)
    assert report.ok
    done, total = rec.check()
    assert done == total == report.bytes_read
    with pytest.raises(Stop):
        fpgather.validate(CKPT, data=True, progress=stopper())
    assert fpgather.open(CKPT).validate(data=True, progress=Recorder()).ok
