"""fpgather: checkpoints of fpgather, PyTorch DCP, Megatron-Core torch_dist and safetensors, from
Python and without torch.

    >>> import fpgather
    >>> ckpt = fpgather.open("testdata/megatron/dp1-one-bucket/ckpt")
    >>> ckpt.format
    'megatron_torch_dist'
    >>> exp_avg = ckpt.read("module.output_layer.weight.exp_avg")   # a numpy array

Everything goes through fpgather's C++ library (the public API, <fpgather/fpgather.h>): the checks,
messages and numbers are those of the `fpgather` command. Failures raise fpgather.Error subclasses
whose ``exit_code`` is the command's for the same failure. Calls that read files or compute release
the GIL, so threads can overlap them.
"""

from __future__ import annotations

import json as _json
import os as _os
import warnings as _warnings
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import ml_dtypes as _ml_dtypes
import numpy as _np

from . import _fpgather
from ._fpgather import (
    ConvertReport,
    DiffReport,
    Error,
    FormatError,
    InternalError,
    NonFiniteTensor,
    Problem,
    Report,
    ReshardLayout,
    ReshardReport,
    StoredTensor,
    TensorDifference,
    TensorInfo,
    UsageError,
    ValidationError,
    ValueDifference,
    set_log_level,
    set_threads,
)

__all__ = [
    "Checkpoint", "ConvertReport", "DiffReport", "Error", "FormatError", "InternalError", "NonFiniteTensor",
    "Parameter", "Problem", "ProgressCallback", "Report", "ReshardLayout", "ReshardReport", "StoredTensor", "TensorDifference",
    "TensorInfo", "UsageError", "ValidationError", "ValueDifference", "adam_step", "as_dlpack", "convert",
    "dequantize", "diff", "dtype_of", "lion_step", "muon_step", "open", "quantize", "reshard",
    "set_log_level", "set_threads", "validate", "version",
]

__version__ = _fpgather.version()

PathLike = Union[str, "_os.PathLike[str]"]
#: Called as progress(done, total): bytes done and the total (0 while not known yet).
ProgressCallback = Callable[[int, int], object]

# Safetensors dtype names -> NumPy dtypes; the FP8 and bf16 types are ml_dtypes'. The packed
# sub-byte types (F4, F6_*) have no one-element-per-byte NumPy form and are read as raw bytes.
_DTYPES = {
    "BOOL": _np.dtype(_np.bool_),
    "U8": _np.dtype(_np.uint8),
    "I8": _np.dtype(_np.int8),
    "I16": _np.dtype(_np.int16),
    "U16": _np.dtype(_np.uint16),
    "I32": _np.dtype(_np.int32),
    "U32": _np.dtype(_np.uint32),
    "I64": _np.dtype(_np.int64),
    "U64": _np.dtype(_np.uint64),
    "F16": _np.dtype(_np.float16),
    "F32": _np.dtype(_np.float32),
    "F64": _np.dtype(_np.float64),
    "C64": _np.dtype(_np.complex64),
    "BF16": _np.dtype(_ml_dtypes.bfloat16),
    "F8_E4M3": _np.dtype(_ml_dtypes.float8_e4m3fn),
    "F8_E5M2": _np.dtype(_ml_dtypes.float8_e5m2),
    "F8_E4M3FNUZ": _np.dtype(_ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": _np.dtype(_ml_dtypes.float8_e5m2fnuz),
}
if hasattr(_ml_dtypes, "float8_e8m0fnu"):
    _DTYPES["F8_E8M0"] = _np.dtype(_ml_dtypes.float8_e8m0fnu)
# Bits per element of the packed types, whose bytes a range spans rounded up.
_PACKED_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
_FP8_FORMATS = {"e4m3": "F8_E4M3", "e5m2": "F8_E5M2"}


def version() -> str:
    """MAJOR.MINOR.PATCH of the fpgather library the module links."""
    return _fpgather.version()


def dtype_of(name: str) -> Optional[_np.dtype]:
    """The NumPy dtype of a safetensors dtype name ("BF16" -> ml_dtypes.bfloat16); None for one
    NumPy cannot hold element by element (F4, F6_E2M3, F6_E3M2: read them with raw=True)."""
    return _DTYPES.get(name)


# DLPack's type codes (dlpack.h, DLDataTypeCode) of the dtypes NumPy cannot export through DLPack.
_DLPACK_CODES = {
    _np.dtype(_ml_dtypes.bfloat16): 4,          # kDLBfloat
    _np.dtype(_ml_dtypes.float8_e4m3fn): 10,    # kDLFloat8_e4m3fn
    _np.dtype(_ml_dtypes.float8_e4m3fnuz): 11,  # kDLFloat8_e4m3fnuz
    _np.dtype(_ml_dtypes.float8_e5m2): 12,      # kDLFloat8_e5m2
    _np.dtype(_ml_dtypes.float8_e5m2fnuz): 13,  # kDLFloat8_e5m2fnuz
}
if "F8_E8M0" in _DTYPES:
    _DLPACK_CODES[_DTYPES["F8_E8M0"]] = 14      # kDLFloat8_e8m0fnu


def as_dlpack(array: _np.ndarray):
    """`array` for ``torch.from_dlpack``, ``jax.dlpack.from_dlpack`` and the like, without a copy.
    NumPy exports its own dtypes through DLPack (``array.__dlpack__``) and that array is returned
    as it is; for bfloat16 and the FP8 dtypes, which NumPy refuses to export, an object viewing the
    same memory with DLPack's bfloat16 / float8 type, keeping `array` alive for as long as a consumer
    holds it. `array` must be C-contiguous."""
    array = _np.asarray(array)
    code = _DLPACK_CODES.get(array.dtype)
    if code is None:
        return array
    if not array.flags.c_contiguous:
        raise UsageError("as_dlpack: the array must be C-contiguous")
    return _fpgather._dlpack(array.reshape(-1).view(_np.uint8), list(array.shape), code, array.dtype.itemsize * 8,
                             array)


class Parameter:
    """One parameter of a checkpoint in model space: its weight, fp32 master and optimizer states,
    each a TensorInfo; nothing is read until read() is called."""

    __slots__ = ("_checkpoint", "name", "tensors")

    def __init__(self, checkpoint: "Checkpoint", name: str, tensors: Dict[str, TensorInfo]):
        self._checkpoint = checkpoint
        self.name = name
        #: role ("weight", "master", "exp_avg", ...) -> TensorInfo
        self.tensors = tensors

    @property
    def weight(self) -> Optional[TensorInfo]:
        return self.tensors.get("weight")

    @property
    def master(self) -> Optional[TensorInfo]:
        return self.tensors.get("master")

    @property
    def states(self) -> Dict[str, TensorInfo]:
        """The optimizer states by name (exp_avg, exp_avg_sq, momentum_buffer ...)."""
        return {r: t for r, t in self.tensors.items() if r not in ("weight", "master")}

    def read(self, role: str = "weight", start: Optional[int] = None, stop: Optional[int] = None,
             *, raw: bool = False) -> _np.ndarray:
        """Checkpoint.read of this parameter's tensor `role`."""
        if role not in self.tensors:
            raise UsageError(f"parameter '{self.name}' has no {role} (it has: {', '.join(self.tensors)})")
        return self._checkpoint.read(self.tensors[role].name, start, stop, raw=raw)

    def __repr__(self) -> str:
        return f"<fpgather.Parameter {self.name}: {', '.join(self.tensors)}>"


class Checkpoint:
    """A checkpoint fpgather reads, as fpgather.open returns it.

    Two views: the stored keys, as the format keeps them (``stored()``, ``storage(key)``, what
    ``fpgather inspect`` lists), and the tensors in model space (``keys()``, ``info()``, ``read()``,
    ``params()``): per parameter NAME (the weight, as held), NAME.master and NAME.<state>, each in
    the parameter's shape, whatever the optimizer layout, as ``fpgather convert --states`` names
    them. The model-space index is read on first use and kept until close().
    """

    def __init__(self, path: PathLike, *, validate: bool = True):
        self._c = _fpgather._Checkpoint.open(_os.fspath(path))
        self._validate = validate
        self._reader: Optional[_fpgather._ParamReader] = None

    # ---- what it is -------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The checkpoint directory (after resolving `latest`), or the model file."""
        return self._c.path

    @property
    def format(self) -> str:
        """'fpgather', 'torch_dcp', 'megatron_torch_dist' or 'safetensors'."""
        return self._c.format

    def summary(self, *, keys: bool = False, layouts: bool = False) -> dict:
        """The summary as ``fpgather inspect --json`` prints it (``--keys``, ``--layouts`` as given)."""
        return _json.loads(self._c.inspect(keys, layouts).json)

    def stored(self) -> List[StoredTensor]:
        """Every stored key as ``fpgather inspect --keys`` lists it: name, kind, dtype, shape, bytes,
        stored bytes, chunks."""
        return list(self._c.inspect(False, False).tensors)

    def storage(self, key: str) -> dict:
        """One stored key's chunks, files and padding, as ``fpgather inspect --key KEY --json``."""
        return _json.loads(self._c.inspect_key(key))

    def validate(self, data: bool = False, *, progress: Optional[ProgressCallback] = None) -> Report:
        """fpgather.validate of this checkpoint."""
        return self._c.validate(data, progress)

    # ---- tensors in model space -------------------------------------------------------------------
    def _params(self) -> "_fpgather._ParamReader":
        if self._reader is None:
            self._reader = _fpgather._ParamReader(self._c, self._validate)
        return self._reader

    def keys(self) -> List[str]:
        """The tensors read() reads: per parameter NAME, NAME.master, NAME.<state>, in registration
        order."""
        return [t.name for t in self._params().tensors]

    def info(self, key: str) -> TensorInfo:
        """A tensor's name, parameter, role, dtype, shape, numel and nbytes; UsageError for a name
        the checkpoint does not hold."""
        r = self._params()
        return r.tensors[r.find(key)]

    def params(self) -> Iterator[Parameter]:
        """The parameters in registration order, each with its tensors (nothing read yet)."""
        groups: Dict[str, Dict[str, TensorInfo]] = {}
        for t in self._params().tensors:
            groups.setdefault(t.param, {})[t.role] = t
        for name, tensors in groups.items():
            yield Parameter(self, name, tensors)

    def read(self, key: str, start: Optional[int] = None, stop: Optional[int] = None, *,
             raw: bool = False, out: Optional[_np.ndarray] = None) -> _np.ndarray:
        """Tensor `key` as a NumPy array: the whole tensor in its shape, or with start/stop the flat
        elements [start, stop) (row-major; negative indices count from the end, as in a slice) as a
        1-D array. BF16 and FP8 come as ml_dtypes dtypes; raw=True gives the little-endian bytes as
        uint8 instead. `out`, a C-contiguous writable array of the right dtype and size, is filled
        in place instead of allocating one. Only the chunks holding the range are read.

        The data is read once, from the files straight into the array, which owns that memory and
        outlives the checkpoint (closed or collected): ``numpy.from_dlpack``, ``memoryview`` and
        ``torch.from_dlpack`` share it without a copy, and ``as_dlpack`` does for bfloat16 and FP8,
        which NumPy does not export."""
        r = self._params()
        i = r.find(key)
        t = r.tensors[i]
        lo, hi, _ = slice(start, stop).indices(t.numel)
        hi = max(lo, hi)
        whole = start is None and stop is None
        dtype = None if raw else _DTYPES.get(t.dtype)
        if dtype is None:
            if not raw:
                raise UsageError(f"'{key}': {t.dtype} has no NumPy dtype element by element: read it with raw=True")
            dtype = _np.dtype(_np.uint8)
            bits = _PACKED_BITS.get(t.dtype) or (_DTYPES[t.dtype].itemsize * 8 if t.dtype in _DTYPES
                                                   else 8 * t.nbytes // max(t.numel, 1))
            shape: Tuple[int, ...] = ((hi - lo) * bits + 7) // 8,
        else:
            shape = tuple(t.shape) if whole else (hi - lo,)
        if out is None:
            out = _np.empty(shape, dtype=dtype)
        else:
            if out.dtype != dtype or out.size != int(_np.prod(shape, dtype=_np.int64)):
                raise UsageError(f"'{key}': out must be {dtype} with {int(_np.prod(shape))} elements, "
                                 f"not {out.dtype} with {out.size}")
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise UsageError(f"'{key}': out must be C-contiguous and writable")
        r.read_into(i, lo, hi, out.reshape(-1).view(_np.uint8))
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and any(t.name == key for t in self._params().tensors)

    def __len__(self) -> int:
        return len(self._params().tensors)

    def __getitem__(self, key: str) -> _np.ndarray:
        return self.read(key)

    def close(self) -> None:
        """Drops the model-space index and whatever files it holds open."""
        self._reader = None

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fpgather.Checkpoint {self.format} {self.path!r}>"


def open(path: PathLike, *, validate: bool = True) -> Checkpoint:  # noqa: A001 (fpgather.open)
    """Opens any checkpoint fpgather reads: its own (a directory holding index.h5, or a root holding
    `latest`), a PyTorch DCP or Megatron torch_dist directory (holding .metadata), or a safetensors
    model (a file, an index, or a directory holding one). FormatError when it is no checkpoint.
    With validate (the default) reading tensors refuses a checkpoint that fails validation's index
    checks (ValidationError); validate=False reads what a broken one still holds."""
    return Checkpoint(path, validate=validate)


def _checkpoint(c: Union[PathLike, Checkpoint]) -> "_fpgather._Checkpoint":
    return c._c if isinstance(c, Checkpoint) else _fpgather._Checkpoint.open(_os.fspath(c))


def validate(path: Union[PathLike, Checkpoint], data: bool = False, *,
             progress: Optional[ProgressCallback] = None) -> Report:
    """The checks of ``fpgather validate`` (``--data``: also read every chunk, verify its checksums
    and decode it). An invalid checkpoint is a Report with problems (``report.ok`` False), not an
    exception; FormatError when no index can be read. With data, `progress` is called with (done,
    total) bytes of the chunks read, where the format reports it (fpgather checkpoints); what it
    raises stops the validation and propagates."""
    return _checkpoint(path).validate(data, progress)


def diff(a: Union[PathLike, Checkpoint], b: Union[PathLike, Checkpoint], rtol: float = 0.0, atol: float = 0.0,
         *, max_reports: int = 5, validate: bool = True) -> DiffReport:
    """``fpgather diff A B``: value by value in model space; equal when |a - b| <= atol + rtol*|b|
    (NaN equals NaN). `max_reports`: first differing values listed per tensor. validate=False is
    ``--no-validate``."""
    return _fpgather._diff(_checkpoint(a), _checkpoint(b), float(rtol), float(atol), int(max_reports), bool(validate))


def _bucket_size(v: Union[None, int, str]) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, str):
        if v == "none":
            return 0
        raise UsageError(f"reshard: bucket_size must be a number of elements or 'none', not '{v}'")
    return int(v)


def _size(v: Optional[int], name: str) -> int:
    """A target TP, PP or EP size: None keeps the source's (0 to the library), else 1 to 1024 as the CLI takes."""
    if v is None:
        return 0
    if not 1 <= int(v) <= 1024:
        raise UsageError(f"reshard: {name} must be from 1 to 1024, not {v}")
    return int(v)


def _layers(v: Optional[int], name: str) -> Optional[int]:
    """A pipeline stage's layer count: None leaves it to the source's stages or an even split, else 1 to 100000 as
    the CLI takes."""
    if v is None:
        return None
    if not 1 <= int(v) <= 100000:
        raise UsageError(f"reshard: {name} must be from 1 to 100000, not {v}")
    return int(v)


def reshard(src: Union[PathLike, Checkpoint], dst: PathLike, *, dp: int, dist_opt: Optional[str] = None,
            ckpt_layout: Optional[str] = None, bucket_size: Union[None, int, str] = None,
            pad_for_nccl: Optional[bool] = None, accumulation: Optional[int] = None,
            compress: Optional[str] = None, to: Optional[str] = None, tp: Optional[int] = None,
            pp: Optional[int] = None, ep: Optional[int] = None, first_stage_layers: Optional[int] = None,
            last_stage_layers: Optional[int] = None, dry_run: bool = False,
            progress: Optional[ProgressCallback] = None) -> ReshardReport:
    """``fpgather reshard SRC DST``, the options named as the command's (``--no-pad-for-nccl`` is
    pad_for_nccl=False; bucket_size='none' is one bucket per buffer; ``to`` is a Megatron
    checkpoint's optimizer form, dp_reshardable or fully_reshardable; ``tp``, ``pp`` and ``ep`` a
    Megatron dp_reshardable target's tensor-, pipeline- and expert-parallel sizes;
    ``first_stage_layers`` and ``last_stage_layers`` its uneven first and last pipeline stages). None
    keeps the source's.
    DST must not exist; it is committed whole. `progress` is called with (done, total) bytes
    written as the work advances; what it raises stops the reshard, leaves no DST, and propagates."""
    return _fpgather._reshard(_checkpoint(src), _os.fspath(dst), int(dp), _bucket_size(bucket_size), pad_for_nccl,
                              dist_opt or "", ckpt_layout or "", accumulation, compress or "", to or "",
                              _size(tp, "tp"), _size(pp, "pp"), _size(ep, "ep"),
                              _layers(first_stage_layers, "first_stage_layers"),
                              _layers(last_stage_layers, "last_stage_layers"), bool(dry_run), progress)


def convert(src: Union[PathLike, Checkpoint], dst: PathLike, *, to: str = "safetensors", dtype: str = "bf16",
            states: bool = False, max_shard_size: Union[int, str] = "5GB", no_validate: bool = False,
            force: bool = False, fp8: Optional[str] = None, fp8_format: str = "e4m3", include: Optional[str] = None,
            exclude: Optional[str] = None, expert_dims: Optional[str] = None, pow2_scales: Optional[bool] = None,
            mx_scale: str = "rceil", strict: bool = False, amax_history: int = 1, amax_algo: str = "most_recent",
            dequantize: bool = False, compress: Optional[str] = None, arch: str = "auto",
            hf_config: Optional[PathLike] = None, tokenizer: Optional[PathLike] = None, from_masters: bool = False,
            tp: int = 1, pp: int = 1, ep: int = 1, make_vocab_size_divisible_by: int = 128, layer_spec: str = "te",
            progress: Optional[ProgressCallback] = None) -> ConvertReport:
    """``fpgather convert SRC DST`` with every option of the command, named as its flags (underscores
    for dashes; ``--pow2-scales`` / ``--no-pow2-scales`` are pow2_scales=True / False). What SRC
    holds and the options choose the conversion, as the command chooses it:

    - a safetensors model (a file, an index, or a Hugging Face directory): ``fp8`` quantizes it
      (tensorwise, blockwise, blockwise-1x128, mxfp8; fp8_format, include, exclude, expert_dims,
      pow2_scales, mx_scale, strict), ``dequantize`` turns FP8 back into ``dtype`` (bf16, fp32);
    - a checkpoint (fpgather, PyTorch DCP, Megatron torch_dist): exported to safetensors (DST ending
      in .safetensors one file, in .json an index with shards beside it, anything else a directory)
      or, to='dcp', a DCP directory, with dtype bf16 (weights as held), fp32 (the masters) or fp8,
      states, max_shard_size (bytes, or text: 5GB, 500MB, 2GiB), no_validate; an fpgather
      checkpoint with ``compress`` (zstd[:LEVEL][+shuffle], none) or ``fp8`` (also delayed, none;
      amax_history, amax_algo) rewritten as a new checkpoint;
    - a Megatron GPT checkpoint with to='hf': a Hugging Face model directory (arch, hf_config,
      tokenizer, from_masters, dtype, max_shard_size; fp8 quantizes the export);
    - a Hugging Face model directory with to='megatron': a Megatron-Core torch_dist model section at
      tp x pp x ep (arch, hf_config, make_vocab_size_divisible_by, layer_spec te or local, dtype).

    DST is never written over unless force, and is put in place only when complete. Options that
    contradict each other or do not apply raise UsageError with the command's message, naming the
    options as given here. `progress`, a callable, is called with (done, total) bytes as the work
    advances (total 0 while not known; an export to hf with fp8 reports the export, then the
    quantization); what it raises stops the conversion, leaves nothing written, and propagates.
    What the command warns of on stderr (non-finite values quantized) is issued as RuntimeWarning.
    Returns a ConvertReport (``report.summary()``: the ``--json`` document)."""
    o = _fpgather._ConvertOptions()
    o.to = to
    o.dtype = dtype
    o.states = bool(states)
    o.max_shard_size = str(max_shard_size) if isinstance(max_shard_size, int) else max_shard_size
    o.validate = not no_validate
    o.force = bool(force)
    o.fp8 = fp8 or ""
    o.fp8_format = fp8_format
    o.include = include or ""
    o.exclude = exclude or ""
    o.expert_dims = expert_dims or ""
    o.pow2_scales = None if pow2_scales is None else bool(pow2_scales)
    o.mx_scale = mx_scale
    o.strict = bool(strict)
    o.amax_history = int(amax_history)
    o.amax_algo = amax_algo
    o.dequantize = bool(dequantize)
    o.compress = compress or ""
    o.arch = arch
    o.hf_config = _os.fspath(hf_config) if hf_config is not None else ""
    o.tokenizer = _os.fspath(tokenizer) if tokenizer is not None else ""
    o.from_masters = bool(from_masters)
    o.tp = int(tp)
    o.pp = int(pp)
    o.ep = int(ep)
    o.make_vocab_size_divisible_by = int(make_vocab_size_divisible_by)
    o.layer_spec = layer_spec
    source = src.path if isinstance(src, Checkpoint) else _os.fspath(src)
    report = _fpgather._convert(source, _os.fspath(dst), o, progress)
    for line in report.warnings:
        _warnings.warn(line, RuntimeWarning, stacklevel=2)
    return report


# ---- FP8 quantization -------------------------------------------------------------------------------
def _floats(a, what: str) -> _np.ndarray:
    a = _np.asarray(a)
    if a.dtype != _np.float32:
        a = a.astype(_np.float32)
    return _np.ascontiguousarray(a)


def quantize(array, recipe: str = "tensorwise", fmt: str = "e4m3", *, pow2_scales: Optional[bool] = None,
             mx_scale: str = "rceil") -> Tuple[_np.ndarray, _np.ndarray]:
    """FP8 of `array` (any float dtype, taken as fp32) with a recipe, as ``fpgather convert --fp8``
    quantizes a tensor: returns (data, scale_inv), data in the array's shape as
    ml_dtypes.float8_e4m3fn / float8_e5m2, scale_inv what dequantization multiplies by:
    tensorwise float32 [], blockwise float32 [ceil(M/128), ceil(K/128)], blockwise-1x128 float32
    [M, ceil(K/128)], mxfp8 float8_e8m0fnu [M, K/32], where (M, K) is the array as a matrix of its
    last dimension. pow2_scales None is the recipe's default; mx_scale rceil or floor."""
    values = _floats(array, "quantize")
    q = _fpgather._quantize(recipe, fmt, pow2_scales, mx_scale, list(values.shape), values.reshape(-1))
    data = _np.frombuffer(q.data, dtype=_DTYPES[q.dtype]).reshape(tuple(q.shape)).copy()
    scales = _np.frombuffer(q.scale_inv, dtype=_DTYPES["F32" if q.scale_dtype == "F32" else "F8_E8M0"])
    return data, scales.reshape(tuple(q.scale_shape)).copy()


def dequantize(data: _np.ndarray, scale_inv: _np.ndarray, recipe: str = "tensorwise", *,
               pow2_scales: Optional[bool] = None, mx_scale: str = "rceil") -> _np.ndarray:
    """The float32 values FP8 `data` times `scale_inv` stands for, as quantize(..., recipe) made
    them; the format is data's dtype."""
    data = _np.ascontiguousarray(data)
    scale_inv = _np.ascontiguousarray(scale_inv)
    fmt = {_DTYPES["F8_E4M3"]: "e4m3", _DTYPES["F8_E5M2"]: "e5m2"}.get(data.dtype)
    if fmt is None:
        raise UsageError(f"dequantize: data must be float8_e4m3fn or float8_e5m2, not {data.dtype}")
    scale_dtype = "F32" if scale_inv.dtype == _np.float32 else "F8_E8M0"
    if scale_dtype == "F8_E8M0" and scale_inv.dtype != _DTYPES.get("F8_E8M0"):
        raise UsageError(f"dequantize: scale_inv must be float32 or float8_e8m0fnu, not {scale_inv.dtype}")
    out = _np.empty(data.shape, dtype=_np.float32)
    _fpgather._dequantize(recipe, fmt, pow2_scales, mx_scale, list(data.shape), _FP8_FORMATS[fmt],
                          data.reshape(-1).view(_np.uint8), scale_dtype, list(scale_inv.shape),
                          scale_inv.reshape(-1).view(_np.uint8), out.reshape(-1))
    return out


# ---- optimizer steps ----------------------------------------------------------------------------------
def _inplace(a: _np.ndarray, what: str) -> _np.ndarray:
    if not isinstance(a, _np.ndarray) or a.dtype != _np.float32 or not a.flags.c_contiguous or not a.flags.writeable:
        raise UsageError(f"{what} must be a writable C-contiguous float32 numpy array (it is updated in place)")
    return a.reshape(-1)


def adam_step(param: _np.ndarray, grad, exp_avg: _np.ndarray, exp_avg_sq: _np.ndarray, *, step: int,
              lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 0.0, decoupled_weight_decay: bool = False) -> None:
    """Step `step` (1 for the first) of Adam, or AdamW with decoupled_weight_decay, in place on float32
    arrays: bitwise torch.optim.Adam/AdamW(fused=True) on the CPU. States start at zero."""
    g = _floats(grad, "grad").reshape(-1)
    _fpgather._adam_step(_inplace(param, "param"), g, _inplace(exp_avg, "exp_avg"),
                         _inplace(exp_avg_sq, "exp_avg_sq"), int(step), lr, betas[0], betas[1], eps, weight_decay,
                         decoupled_weight_decay)


def lion_step(param: _np.ndarray, grad, exp_avg: _np.ndarray, *, lr: float = 1e-4,
              betas: Tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0) -> None:
    """One Lion step in place on float32 arrays (the automl reference's op order)."""
    g = _floats(grad, "grad").reshape(-1)
    _fpgather._lion_step(_inplace(param, "param"), g, _inplace(exp_avg, "exp_avg"), lr, betas[0], betas[1],
                         weight_decay)


def muon_step(param: _np.ndarray, grad, momentum_buffer: _np.ndarray, *, lr: float = 1e-3,
              weight_decay: float = 0.1, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
              adjust_lr: str = "original") -> None:
    """One Muon step of a 2-D float32 matrix in place, as torch.optim.Muon (Newton-Schulz in bf16);
    adjust_lr 'original' or 'match_rms_adamw'."""
    if param.ndim != 2:
        raise UsageError(f"muon_step: param must be a matrix, not of shape {param.shape}")
    rows, cols = param.shape
    g = _floats(grad, "grad").reshape(-1)
    _fpgather._muon_step(_inplace(param, "param"), g, _inplace(momentum_buffer, "momentum_buffer"), rows, cols, lr,
                         weight_decay, momentum, nesterov, int(ns_steps), adjust_lr)
