"""Development aid only (FIXTURES_CPU_DEBUG=1): lets the parallel configurations of
make_megatron_fixtures.py run on a machine without a GPU by sending Megatron's CUDA calls to the
CPU. Fixtures are never made this way; it exists to debug the generator without device time."""
import contextlib

import torch


class _Stream:
    def __init__(self, *a, **k):
        pass

    def wait_stream(self, *a):
        pass

    def synchronize(self):
        pass

    def wait_event(self, *a):
        pass

    def record_event(self, *a):
        return _Event()


class _Event(_Stream):
    def record(self, *a):
        pass

    def query(self):
        return True

    def elapsed_time(self, *a):
        return 0.0


torch.cuda.is_available = lambda: False
torch.cuda.set_device = lambda *a: None
torch.cuda.current_device = lambda: "cpu"
torch.cuda.device_count = lambda: 1
torch.cuda.synchronize = lambda *a: None
torch.cuda.Stream = _Stream
torch.cuda.Event = _Event
torch.cuda.current_stream = lambda *a: _Stream()
torch.cuda.default_stream = lambda *a: _Stream()
torch.cuda.stream = lambda *a: contextlib.nullcontext()
torch.cuda.manual_seed = lambda *a: None
torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
torch.cuda.set_rng_state = lambda *a, **k: None
torch.cuda.empty_cache = lambda: None
torch.cuda.memory_allocated = lambda *a: 0
torch.cuda.max_memory_allocated = lambda *a: 0
torch.Tensor.cuda = lambda self, *a, **k: self
torch.nn.Module.cuda = lambda self, *a, **k: self
_orig_get_device_name = torch.cuda.get_device_name
torch.cuda.get_device_name = lambda *a: "cpu"
torch.cuda.get_device_capability = lambda *a: (9, 0)


def _cpuify(dev):
    if dev is None:
        return dev
    if isinstance(dev, int) or (isinstance(dev, str) and dev.startswith("cuda")) or \
            (isinstance(dev, torch.device) and dev.type == "cuda"):
        return "cpu"
    return dev


def _wrap(fn):
    def w(*a, **k):
        if "device" in k:
            k["device"] = _cpuify(k["device"])
        return fn(*a, **k)
    return w


for _n in ("tensor", "zeros", "ones", "empty", "full", "arange", "zeros_like", "ones_like", "empty_like",
           "full_like", "randn", "rand", "randint", "as_tensor", "eye", "linspace"):
    setattr(torch, _n, _wrap(getattr(torch, _n)))

_orig_to = torch.Tensor.to


def _to(self, *a, **k):
    a = tuple(_cpuify(x) if isinstance(x, (str, torch.device, int)) and not isinstance(x, bool) and
              not isinstance(x, torch.dtype) else x for x in a)
    if "device" in k:
        k["device"] = _cpuify(k["device"])
    return _orig_to(self, *a, **k)


torch.Tensor.to = _to
torch.Tensor.is_cuda = property(lambda self: False)

_orig_type = torch.Tensor.type


def _type(self, *a, **k):
    if a or k:
        return _orig_type(self, *a, **k)
    return _orig_type(self).replace("torch.", "torch.cuda.", 1)


torch.Tensor.type = _type

torch.cuda.random.get_rng_state = lambda *a, **k: torch.get_rng_state()
torch.cuda.random.set_rng_state = lambda *a, **k: None
import megatron.core.tensor_parallel.random as _r  # noqa: E402

_r._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
_r._set_cuda_rng_state = lambda *a, **k: None
