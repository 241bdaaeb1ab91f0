"""fpgather.open: every format's summary, stored keys and tensors against the fpgather command and
the fixtures' goldens."""
import glob
import os
import subprocess
import sys
import threading

import ml_dtypes
import numpy as np
import pytest

import fpgather
from conftest import data, read_safetensors

CHECKPOINTS = {
    "fpgather": data("ckpt", "valid", "dp2-bucket"),
    "fpgather_model_layout": data("ckpt", "valid", "dp4-model"),
    "torch_dcp": data("dcp", "small"),
    "megatron": data("megatron", "dp1-one-bucket", "ckpt"),
    "megatron_layerwise_muon": data("megatron", "dp1-layerwise-muon", "ckpt"),
    "safetensors_file": data("safetensors", "reference_all_dtypes.safetensors"),
    "safetensors_sharded": data("models", "tiny-llama-sharded"),
}
FORMATS = {"fpgather": "fpgather", "fpgather_model_layout": "fpgather", "torch_dcp": "torch_dcp",
           "megatron": "megatron_torch_dist", "megatron_layerwise_muon": "megatron_torch_dist",
           "safetensors_file": "safetensors", "safetensors_sharded": "safetensors"}


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_summary_is_inspect_json(name, cli_json):
    path = CHECKPOINTS[name]
    c = fpgather.open(path)
    assert c.format == FORMATS[name]
    assert c.summary() == cli_json("inspect", path)
    assert c.summary(keys=True) == cli_json("inspect", "--keys", path)


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_stored_keys_and_storage(name, cli_json):
    path = CHECKPOINTS[name]
    c = fpgather.open(path)
    stored = c.stored()
    assert stored, "every fixture stores keys"
    first = stored[0]
    assert c.storage(first.name) == cli_json("inspect", "--key", first.name, path)
    with pytest.raises(fpgather.UsageError) as e:
        c.storage("no/such/key")
    assert e.value.exit_code == 2


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_tensors_equal_the_commands_export(name, fpgather_cli, tmp_path):
    """read() of every model-space tensor equals what `fpgather convert --states` writes for it."""
    path = CHECKPOINTS[name]
    out = tmp_path / "export.safetensors"
    c = fpgather.open(path)
    if c.format == "safetensors":  # a model is its own export: its files, read by hand
        files = [path] if os.path.isfile(path) else glob.glob(os.path.join(path, "*.safetensors"))
        exported = {k: v for f in files for k, v in read_safetensors(f).items()}
    else:
        rc, _, err = fpgather_cli("convert", path, str(out), "--states")
        assert rc == 0, err
        exported = read_safetensors(out)
    assert set(c.keys()) == set(exported)
    assert len(c) == len(exported)
    for key in c:
        b = exported[key]
        a = c.read(key, raw=fpgather.dtype_of(c.info(key).dtype) is None)
        if a.dtype == np.uint8 and b.dtype == np.uint8:
            assert a.tobytes() == b.tobytes(), key
            continue
        assert a.shape == b.shape, key
        if a.dtype != b.dtype:
            # The export writes every weight as bf16 (--dtype bf16): a weight held in fp32 is rounded.
            assert c.info(key).role == "weight" and b.dtype == ml_dtypes.bfloat16, key
            a = a.astype(np.float32).astype(ml_dtypes.bfloat16)
        assert a.tobytes() == b.tobytes(), key


def test_megatron_tensors_equal_megatrons_own(tmp_path):
    """The Megatron fixture's truth.safetensors holds what Megatron itself had in memory."""
    c = fpgather.open(data("megatron", "dp1-one-bucket", "ckpt"))
    truth = read_safetensors(data("megatron", "dp1-one-bucket", "truth.safetensors"))
    compared = 0
    for key, want in truth.items():
        if key not in c:
            continue
        got = c.read(key).astype(np.float32)
        np.testing.assert_array_equal(got, want.astype(np.float32), err_msg=key)
        compared += 1
    assert compared >= len(truth) // 2


def test_ranges_raw_and_out():
    c = fpgather.open(data("megatron", "dp1-one-bucket", "ckpt"))
    key = "embedding.word_embeddings.weight"
    whole = c.read(key)
    assert whole.dtype == ml_dtypes.bfloat16 and whole.shape == (64, 32)
    flat = whole.reshape(-1)
    np.testing.assert_array_equal(c.read(key, 100, 1000), flat[100:1000])
    np.testing.assert_array_equal(c.read(key, -10), flat[-10:])
    np.testing.assert_array_equal(c.read(key, stop=5), flat[:5])
    assert c.read(key, 7, 7).size == 0
    raw = c.read(key, raw=True)
    assert raw.dtype == np.uint8 and raw.tobytes() == whole.tobytes()
    assert c.read(key, 3, 9, raw=True).tobytes() == flat[3:9].tobytes()
    out = np.zeros((64, 32), dtype=ml_dtypes.bfloat16)
    assert c.read(key, out=out) is out
    assert out.tobytes() == whole.tobytes()
    with pytest.raises(fpgather.UsageError):
        c.read(key, out=np.zeros(3, dtype=np.float32))


def test_params_group_each_parameters_tensors():
    c = fpgather.open(data("megatron", "dp1-one-bucket", "ckpt"))
    params = list(c.params())
    assert sum(len(p.tensors) for p in params) == len(c.keys())
    p = params[0]
    assert p.weight is not None and p.master is not None
    assert set(p.states) == {"exp_avg", "exp_avg_sq"}
    np.testing.assert_array_equal(p.read("exp_avg"), c.read(p.name + ".exp_avg"))
    info = c.info(p.name + ".exp_avg")
    assert (info.param, info.role, info.dtype) == (p.name, "exp_avg", "F32")
    assert info.nbytes == 4 * info.numel
    with pytest.raises(fpgather.UsageError):
        p.read("momentum_buffer")


def test_fp8_and_all_dtypes_read_as_ml_dtypes():
    c = fpgather.open(data("safetensors", "reference_all_dtypes.safetensors"))
    dtypes = {c.info(k).dtype: c.read(k).dtype for k in c.keys() if fpgather.dtype_of(c.info(k).dtype) is not None}
    assert dtypes["BF16"] == ml_dtypes.bfloat16
    assert dtypes["F8_E4M3"] == ml_dtypes.float8_e4m3fn
    assert dtypes["F8_E5M2"] == ml_dtypes.float8_e5m2


def test_errors_carry_the_commands_exit_code_and_message(fpgather_cli):
    for path, cls in [("/nonexistent/ckpt", fpgather.FormatError),
                      (data("safetensors", "bad", "bad_json.safetensors"), fpgather.FormatError)]:
        rc, _, err = fpgather_cli("inspect", path)
        with pytest.raises(cls) as e:
            fpgather.open(path).summary()
        assert e.value.exit_code == rc == cls.exit_code
        assert isinstance(e.value, fpgather.Error)
        assert err.strip() == f"fpgather: error: {e.value}"
    c = fpgather.open(CHECKPOINTS["megatron"])
    with pytest.raises(fpgather.UsageError) as e:
        c.read("no.such.tensor")
    assert isinstance(e.value, ValueError) and e.value.exit_code == 2
    assert fpgather.ValidationError.exit_code == 1 and fpgather.InternalError.exit_code == 4


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(data("safetensors", "bad")) if n.endswith(".safetensors")))
def test_hostile_safetensors_raise_never_crash(name):
    path = data("safetensors", "bad", name)
    try:
        c = fpgather.open(path)
        for k in c.keys():
            c.read(k)
    except fpgather.Error as e:
        assert e.exit_code in (2, 3), (name, e)
    else:
        # A few are valid files with an oddity the reader accepts; validation must then pass too.
        assert fpgather.validate(path).ok, name


@pytest.mark.parametrize("name", sorted(os.listdir(data("ckpt", "broken"))))
def test_broken_checkpoints_refused_as_exceptions(name):
    path = data("ckpt", "broken", name)
    try:
        rep = fpgather.validate(path)
    except fpgather.Error as e:
        assert e.exit_code == 3, (name, e)
        return
    if rep.ok:
        return
    with pytest.raises(fpgather.Error) as e:
        fpgather.open(path).keys()
    assert e.value.exit_code in (1, 3), name


def test_reads_overlap_in_threads():
    """read() releases the GIL: threads reading one checkpoint get the same bytes as one thread."""
    c = fpgather.open(CHECKPOINTS["megatron"])
    want = {k: c.read(k).tobytes() for k in c.keys()}
    got = {}
    errors = []

    def work(keys):
        try:
            for k in keys:
                got[k] = c.read(k).tobytes()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    keys = list(want)
    threads = [threading.Thread(target=work, args=(keys[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == want


def test_import_pulls_in_no_torch():
    code = "import sys, fpgather; fpgather.open(sys.argv[1]).keys(); " \
           "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron', 'transformer_engine')]; " \
           "print(bad); sys.exit(1 if bad else 0)"
    p = subprocess.run([sys.executable, "-c", code, CHECKPOINTS["megatron"]], capture_output=True, text=True,
                       env=dict(os.environ))
    assert p.returncode == 0, p.stdout + p.stderr


# ---- zero copy --------------------------------------------------------------------------------------
def _dltensor(capsule):
    """(data pointer, DLPack type code, bits, shape) of a "dltensor" capsule, read with ctypes."""
    import ctypes

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                    ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = DLTensor.from_address(get(capsule, b"dltensor"))
    return t.data + t.byte_offset, t.dtype.code, t.dtype.bits, tuple(t.shape[i] for i in range(t.ndim))


def test_reads_are_arrays_that_own_their_memory_and_share_it():
    import gc

    c = fpgather.open(CHECKPOINTS["megatron"])
    name = next(k for k in c.keys() if k.endswith(".exp_avg"))
    a = c.read(name)
    part = c.read(name, 0, 7)
    assert a.flags.owndata and a.base is None and part.flags.owndata
    copy = a.copy()
    # DLPack and the buffer protocol see the same memory
    d = np.from_dlpack(a)
    assert np.shares_memory(a, d)
    buf = np.frombuffer(memoryview(a), dtype=a.dtype)
    assert np.shares_memory(a, buf)
    d.reshape(-1)[0] = 42.0
    assert a.reshape(-1)[0] == 42.0
    a.reshape(-1)[0] = copy.reshape(-1)[0]
    # out= is filled in place: the same memory, nothing allocated
    out = np.empty_like(a)
    assert c.read(name, out=out) is out
    # the arrays outlive the checkpoint
    c.close()
    del c
    gc.collect()
    assert np.array_equal(a, copy) and np.array_equal(d, copy) and np.array_equal(part, copy.reshape(-1)[:7])


def test_bf16_and_fp8_through_dlpack_without_a_copy():
    c = fpgather.open(CHECKPOINTS["megatron"])
    w = c.read(next(k for k in c.keys() if c.info(k).dtype == "BF16"))
    assert w.dtype == ml_dtypes.bfloat16
    with pytest.raises(BufferError):  # NumPy exports no bfloat16
        w.__dlpack__()
    x = fpgather.as_dlpack(w)
    assert x.__dlpack_device__() == (1, 0)  # kDLCPU
    data, code, bits, shape = _dltensor(x.__dlpack__())
    assert (data, code, bits, shape) == (w.ctypes.data, 4, 16, w.shape)  # kDLBfloat
    del c
    q = np.zeros((3, 5), dtype=ml_dtypes.float8_e4m3fn)
    assert _dltensor(fpgather.as_dlpack(q).__dlpack__())[:3] == (q.ctypes.data, 10, 8)  # kDLFloat8_e4m3fn
    f = np.arange(4, dtype=np.float32)
    assert fpgather.as_dlpack(f) is f  # NumPy's own export serves
    # the view keeps the array alive
    y = fpgather.as_dlpack(np.ones(4, dtype=ml_dtypes.bfloat16))
    import gc
    gc.collect()
    data, _, _, shape = _dltensor(y.__dlpack__())
    assert shape == (4,)
