"""
The fpgather C++ API, bound for the fpgather package (import fpgather, not this).
"""

from typing import Any

class Error(Exception):
    """Every failure of fpgather; exit_code and kind: the fpgather command's for the same failure."""
    exit_code: int | None
    kind: str | None

class ValidationError(Error):
    """A checkpoint that fails validation was refused by an operation that uses it (exit 1)."""
    exit_code: int
    kind: str

class UsageError(Error, ValueError):
    """Bad arguments, or an input the operation cannot take (exit 2)."""
    exit_code: int
    kind: str

class FormatError(Error):
    """Unreadable, malformed or truncated input, or a failed write (exit 3)."""
    exit_code: int
    kind: str

class InternalError(Error):
    """A broken invariant inside fpgather (exit 4)."""
    exit_code: int
    kind: str


def version() -> str:
    """MAJOR.MINOR.PATCH of the library linked in."""

def set_threads(threads: int) -> None:
    """
    Worker threads of the parallel operations (reads, writes, validation with data, exports); 0: one per hardware thread.
    """

def set_log_level(level: str) -> None:
    """
    What the library logs to stderr: trace, debug, info, warn, error or off; '' for FPGATHER_LOG, else warn.
    """

class Problem:
    """One thing wrong with a checkpoint (fpgather-validate(1) kinds)."""

    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str:
        """The key it concerns; '' if none."""

    @property
    def lo(self) -> int: ...

    @property
    def hi(self) -> int: ...

    @property
    def range(self) -> tuple:
        """The flat element range (lo, hi) it concerns."""

    @property
    def file(self) -> str: ...

    @property
    def message(self) -> str: ...

    @property
    def text(self) -> str:
        """The whole line, as `fpgather validate` prints it."""

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

class Report:
    """What `fpgather validate` finds."""

    @property
    def valid(self) -> bool: ...

    @property
    def ok(self) -> bool:
        """Readable, and no problems."""

    @property
    def readable(self) -> bool: ...

    @property
    def data_checked(self) -> bool: ...

    @property
    def layout_checked(self) -> bool: ...

    @property
    def tensors(self) -> int: ...

    @property
    def chunks(self) -> int: ...

    @property
    def files(self) -> int: ...

    @property
    def chunks_read(self) -> int: ...

    @property
    def bytes_read(self) -> int: ...

    @property
    def problems(self) -> list[Problem]: ...

    def __bool__(self) -> bool: ...

    def __repr__(self) -> str: ...

class StoredTensor:
    """One stored key, as `fpgather inspect --keys` lists it."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def dtype(self) -> str: ...

    @property
    def shape(self) -> tuple: ...

    @property
    def numel(self) -> int: ...

    @property
    def bytes(self) -> int: ...

    @property
    def stored_bytes(self) -> int: ...

    @property
    def chunks(self) -> int: ...

    def __repr__(self) -> str: ...

class TensorInfo:
    """
    A tensor in model space: NAME (the weight), NAME.master or NAME.<state>.
    """

    @property
    def name(self) -> str: ...

    @property
    def param(self) -> str:
        """The parameter it belongs to."""

    @property
    def role(self) -> str:
        """'weight', 'master' or the optimizer state's name."""

    @property
    def dtype(self) -> str:
        """As safetensors names it: BF16, F32, F8_E4M3, ..."""

    @property
    def shape(self) -> tuple: ...

    @property
    def numel(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def __repr__(self) -> str: ...

class ValueDifference:
    """One differing element: its flat index and the values as text."""

    @property
    def index(self) -> int: ...

    @property
    def a(self) -> str: ...

    @property
    def b(self) -> str: ...

    def __repr__(self) -> str: ...

class TensorDifference:
    """How one tensor differs, as `fpgather diff` reports it."""

    @property
    def tensor(self) -> str: ...

    @property
    def what(self) -> str:
        """
        'only in A', 'only in B', 'dtype', 'shape', 'kind', 'coverage' or 'values'.
        """

    @property
    def detail(self) -> str: ...

    @property
    def differing(self) -> int: ...

    @property
    def max_abs_diff(self) -> float: ...

    @property
    def lo(self) -> int: ...

    @property
    def hi(self) -> int: ...

    @property
    def first(self) -> list[ValueDifference]: ...

    def __repr__(self) -> str: ...

class DiffReport:
    """What `fpgather diff` finds."""

    @property
    def equal(self) -> bool: ...

    @property
    def model_space(self) -> bool: ...

    @property
    def tensors_compared(self) -> int: ...

    @property
    def elements_compared(self) -> int: ...

    @property
    def differences(self) -> list[TensorDifference]: ...

    def __bool__(self) -> bool: ...

    def __repr__(self) -> str: ...

class ReshardLayout:
    """The layout a checkpoint's optimizer state is stored for."""

    @property
    def dp(self) -> int: ...

    @property
    def dist_opt(self) -> str: ...

    @property
    def state_layout(self) -> str: ...

    @property
    def bucket_size(self) -> int | None: ...

    @property
    def pad_for_nccl(self) -> bool: ...

    @property
    def accumulation(self) -> int: ...

class ReshardReport:
    """What `fpgather reshard` did (or, dry run, would do)."""

    @property
    def source(self) -> str: ...

    @property
    def target(self) -> str: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def to(self) -> ReshardLayout: ...

    @property
    def tensors(self) -> int: ...

    @property
    def bytes_read(self) -> int: ...

    @property
    def bytes_written(self) -> int: ...

class NonFiniteTensor:
    """A tensor quantized although it holds NaN or +-Inf."""

    @property
    def tensor(self) -> str: ...

    @property
    def nan(self) -> int: ...

    @property
    def pos_inf(self) -> int: ...

    @property
    def neg_inf(self) -> int: ...

    def __repr__(self) -> str: ...

class ConvertReport:
    """What `fpgather convert` did and wrote."""

    @property
    def operation(self) -> str:
        """
        quantize, dequantize, export, export_hf, import_hf, recompress or reencode_fp8.
        """

    @property
    def source(self) -> str:
        """The checkpoint or model read."""

    @property
    def tensors(self) -> int:
        """
        Tensors quantized, dequantized or exported; keys recompressed; FP8 params re-encoded.
        """

    @property
    def copied(self) -> int:
        """Tensors copied unchanged (quantize, dequantize)."""

    @property
    def bytes_read(self) -> int: ...

    @property
    def bytes_written(self) -> int: ...

    @property
    def files(self) -> list[str]:
        """Written, the index last where there is one."""

    @property
    def nonfinite(self) -> list[NonFiniteTensor]:
        """Quantized tensors holding NaN or +-Inf."""

    @property
    def json(self) -> str:
        """The document `fpgather convert --json` prints."""

    def summary(self) -> dict[str, Any]:
        """The document `fpgather convert --json` prints, as a dict."""

    @property
    def text(self) -> list[str]:
        """The lines `fpgather convert` prints."""

    @property
    def warnings(self) -> list[str]:
        """What the command warns of on stderr."""

    def __repr__(self) -> str: ...
