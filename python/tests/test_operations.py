"""validate, diff, reshard and convert against the fpgather command's JSON and output files."""
import filecmp
import os

import pytest

import fpgather
from conftest import data

MEGATRON = data("megatron", "dp1-one-bucket", "ckpt")


def problems_as_json(report):
    return [{"kind": p.kind, "key": p.key, "lo": p.lo, "hi": p.hi, "file": p.file, "message": p.message}
            for p in report.problems]


@pytest.mark.parametrize("path", [
    data("ckpt", "valid", "dp2-bucket"), MEGATRON, data("dcp", "small"),
    data("safetensors", "reference_all_dtypes.safetensors"),
    *[data("ckpt", "broken", n) for n in ("gap", "overlap", "flipped-bit", "missing-file", "truncated-file",
                                          "newer-version", "swapped-keys")],
    *[data("dcp", "broken", n) for n in ("crc_flip", "symlink_item")],
])
@pytest.mark.parametrize("with_data", [False, True])
def test_validate_matches_the_command(path, with_data, fpgather_cli, cli_json):
    args = ["validate", *(["--data"] if with_data else []), path]
    rc, _, _ = fpgather_cli("--json", *args)
    want = cli_json(*args, code=rc)
    rep = fpgather.validate(path, data=with_data)
    assert rep.ok == want["valid"] == (rc == 0)
    assert bool(rep) == rep.ok
    assert rep.readable == want["readable"]
    assert rep.data_checked == (with_data and rep.readable)
    assert problems_as_json(rep) == want["problems"]
    rc_text, text, _ = fpgather_cli("validate", *(["--data"] if with_data else []), path)
    for p in rep.problems:
        assert p.range == (p.lo, p.hi)
        assert str(p) in text.splitlines()


def test_validate_refuses_what_is_no_checkpoint(fpgather_cli):
    rc, _, err = fpgather_cli("validate", data("ckpt", "README.md"))
    with pytest.raises(fpgather.FormatError) as e:
        fpgather.validate(data("ckpt", "README.md"))
    assert rc == 3 and err.strip() == f"fpgather: error: {e.value}"


def test_invalid_checkpoint_refused_by_reads_unless_asked():
    path = data("ckpt", "broken", "gap")
    with pytest.raises(fpgather.ValidationError) as e:
        fpgather.open(path).keys()
    assert e.value.exit_code == 1
    c = fpgather.open(path, validate=False)
    assert c.keys()


@pytest.mark.parametrize("a,b,tol", [
    (data("ckpt", "valid", "dp4-model"), data("ckpt", "valid", "dp4-model-perturbed"), {}),
    (data("ckpt", "valid", "dp4-model"), data("ckpt", "valid", "dp4-model-perturbed"), {"atol": 0.5}),
    (data("ckpt", "valid", "dp4-model"), data("ckpt", "valid", "dp4-model"), {}),
    (MEGATRON, data("megatron", "dp1-buckets-padded", "ckpt"), {"rtol": 1e-3}),
])
def test_diff_matches_the_command(a, b, tol, fpgather_cli, cli_json):
    args = ["diff", a, b, *[f"--{k}={v}" for k, v in tol.items()]]
    rc, _, _ = fpgather_cli("--json", *args)
    want = cli_json(*args, code=rc)
    rep = fpgather.diff(a, b, **tol)
    assert rep.equal == want["equal"] == (rc == 0)
    assert rep.model_space == want["model_space"]
    assert rep.tensors_compared == want["keys_compared"]
    assert rep.elements_compared == want["elements_compared"]
    got = [{"key": d.tensor, "what": d.what, "detail": d.detail, "differing": d.differing,
            "max_abs_diff": d.max_abs_diff, "range": [d.lo, d.hi], "first": [v.index for v in d.first]}
           for d in rep.differences]
    assert got == [{"key": d["key"], "what": d["what"], "detail": d["detail"], "differing": d["differing"],
                    "max_abs_diff": d["max_abs_diff"], "range": d["range"], "first": [v["index"] for v in d["first"]]}
                   for d in want["differences"]]


def test_diff_refuses_negative_tolerance():
    with pytest.raises(fpgather.UsageError):
        fpgather.diff(MEGATRON, MEGATRON, rtol=-1)


def test_reshard_megatron_matches_the_command(tmp_path, fpgather_cli, cli_json):
    want = cli_json("reshard", "--dp", "2", "--dry-run", MEGATRON, str(tmp_path / "cli"))
    plan = fpgather.reshard(MEGATRON, tmp_path / "py", dp=2, dry_run=True)
    assert plan.dry_run and not (tmp_path / "py").exists()
    out = tmp_path / "dp2"
    rep = fpgather.reshard(MEGATRON, out, dp=2, to="fully_reshardable")
    assert rep.to.dp == 2 and rep.from_.state_layout == "dp_reshardable"
    assert rep.to.state_layout == "fully_reshardable"
    assert rep.bytes_written > 0 and want["source"] == rep.source
    assert fpgather.validate(out).ok
    assert fpgather.diff(MEGATRON, out).equal
    with pytest.raises(fpgather.UsageError):  # the target exists
        fpgather.reshard(MEGATRON, out, dp=2)


def test_reshard_megatron_to_another_tp_pp(tmp_path, fpgather_cli):
    par = data("megatron", "parallel")
    src = f"{par}/tp2pp2-dp1-dp_reshardable/ckpt"
    out = tmp_path / "tp1pp1"
    rep = fpgather.reshard(src, out, dp=1, tp=1, pp=1, bucket_size="none")
    assert rep.to.state_layout == "dp_reshardable" and rep.to.dp == 1
    assert fpgather.validate(out, data=True).ok
    assert fpgather.diff(out, f"{par}/tp2pp2-dp1-fully_reshardable/ckpt").equal
    rc, _, err = fpgather_cli("reshard", "--dp", "1", "--tp", "3", src, str(tmp_path / "cli"))
    with pytest.raises(fpgather.UsageError) as e:
        fpgather.reshard(src, tmp_path / "x", dp=1, tp=3)
    assert rc == 2 and "does not split over 3 tensor-parallel ranks" in str(e.value)
    with pytest.raises(fpgather.UsageError):
        fpgather.reshard(src, tmp_path / "y", dp=1, tp=0)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_reshard_megatron_to_another_ep_and_stages(tmp_path):
    par = data("megatron", "parallel")
    out = tmp_path / "ep1"
    fpgather.reshard(f"{par}/ep2-moe-dp_reshardable/ckpt", out, dp=2, ep=1, bucket_size="none")
    assert fpgather.validate(out, data=True).ok
    assert fpgather.diff(out, f"{par}/ep2-moe-fully_reshardable/ckpt").equal
    uneven = tmp_path / "uneven"
    fpgather.reshard(f"{par}/pp2-dp1-3layers-dp_reshardable/ckpt", uneven, dp=1, pp=2, first_stage_layers=1)
    assert fpgather.diff(uneven, f"{par}/pp2-dp1-3layers-fully_reshardable/ckpt").equal
    with pytest.raises(fpgather.UsageError) as e:
        fpgather.reshard(f"{par}/ep2-moe-dp_reshardable/ckpt", tmp_path / "x", dp=3, ep=3)
    assert "do not divide over 3 expert-parallel ranks" in str(e.value)
    with pytest.raises(fpgather.UsageError):
        fpgather.reshard(f"{par}/ep2-moe-dp_reshardable/ckpt", tmp_path / "y", dp=2, ep=1, first_stage_layers=0)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_reshard_errors_are_the_commands(tmp_path, fpgather_cli):
    src = data("dcp", "small")
    rc, _, err = fpgather_cli("reshard", "--dp", "2", src, str(tmp_path / "x"))
    with pytest.raises(fpgather.Error) as e:
        fpgather.reshard(src, tmp_path / "x", dp=2)
    assert e.value.exit_code == rc and err.strip() == f"fpgather: error: {e.value}"


@pytest.mark.parametrize("options,flags", [
    ({}, []),
    ({"states": True}, ["--states"]),
    ({"dtype": "fp32", "states": True}, ["--dtype", "fp32", "--states"]),
    ({"max_shard_size": "20kB"}, ["--max-shard-size", "20kB"]),
    ({"to": "dcp", "states": True}, ["--to", "dcp", "--states"]),
])
@pytest.mark.parametrize("src", [MEGATRON, data("dcp", "small")])
def test_convert_writes_what_the_command_writes(src, options, flags, tmp_path, fpgather_cli):
    if options.get("to") == "dcp" and src.endswith("small"):
        pytest.skip("a DCP checkpoint is exported to DCP by the command too; one source suffices")
    name = "out" if options.get("max_shard_size") or options.get("to") else "out.safetensors"
    rc, _, err = fpgather_cli("convert", *flags, src, str(tmp_path / "cli" / name))
    assert rc == 0, err
    rep = fpgather.convert(src, tmp_path / "py" / name, **options)
    assert rep.tensors > 0 and rep.bytes_written > 0
    cli_files = sorted(os.path.relpath(os.path.join(d, f), tmp_path / "cli")
                       for d, _, fs in os.walk(tmp_path / "cli") for f in fs)
    py_files = sorted(os.path.relpath(os.path.join(d, f), tmp_path / "py")
                      for d, _, fs in os.walk(tmp_path / "py") for f in fs)
    assert cli_files == py_files
    for f in cli_files:
        if os.path.basename(f) == ".metadata":  # DCP metadata records a per-save identifier
            continue
        assert filecmp.cmp(tmp_path / "cli" / f, tmp_path / "py" / f, shallow=False), f
    if options.get("to") == "dcp":
        assert fpgather.diff(tmp_path / "cli" / name, tmp_path / "py" / name).equal
    with pytest.raises(fpgather.UsageError):  # exists, no force
        fpgather.convert(src, tmp_path / "py" / name, **options)
    fpgather.convert(src, tmp_path / "py" / name, force=True, **options)


def test_convert_option_errors():
    with pytest.raises(fpgather.UsageError):
        fpgather.convert(MEGATRON, "/tmp/never-written", max_shard_size="lots")
    with pytest.raises(fpgather.UsageError):
        fpgather.convert(MEGATRON, "/tmp/never-written.safetensors", dtype="int4")
