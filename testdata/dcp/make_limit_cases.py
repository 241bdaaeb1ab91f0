#!/usr/bin/env python3
"""Writes hostile PyTorch DCP checkpoints that claim far more than their files hold, for the memory
bound of formats/dcp (formats/dcp/FORMAT.md, "Memory") and its tests (tests/cli/dcp_limits.sh,
scripts/probe-limits.sh).

usage: make_limit_cases.py OUT [CASE ...]     (all cases when none is named)

Each CASE becomes the directory OUT/CASE. Needs neither torch nor numpy: the classes are stand-ins
registered under the modules and names the real ones have, so that pickle writes the opcodes torch's
own pickling of the real objects writes (protocol 4, NEWOBJ + BUILD for the dataclasses), and Python's
pickler shares every object referenced twice through its memo, as it would for torch's objects.

  shared_chunks     100,000 keys whose chunks are one memoized list of 10,000 chunks: 10^9 claimed
                    chunks in a 1.7 MB .metadata
  shared_size       20,000 chunks sharing one 100,000-dimensional torch.Size as offsets and sizes
  shared_planner    planner_data of 20,000 keys sharing one path of 100,000 elements
  set_of_memo       builtins.set and frozenset applied 4,096 times to one memoized list of 2^20 items
  exponential_dag   an extra Metadata field of 64 nested lists, each holding the one below twice
                    (2^64 values when unfolded)
  missing_storage   one key of 10^6 chunks, none with a storage entry (a problem each)
  sparse_metadata   a sparse .metadata of 3.9 GB (a few kB on disk)
  zero_stride       a float32 key of 2^29 elements whose one item is a torch.save archive of a
                    1-element storage viewed with size (2^29,) and stride (0,)
  zero_stride_2e34  the same with 2^34 elements
  zero_stride_sparse  the 2^29 case with its data file extended by a hole to the 2 GiB the chunk
                    claims and a storage entry as long: only the view is wrong
  zero_stride_object  object.pt only: a torch.save archive of a list holding an 8 GiB float32 tensor
                    viewed with stride (0,) over a 1-element storage, to replace a bytes item with
"""
import enum
import io
import os
import pickle
import struct
import sys
import types
import zipfile


def module(name):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):  # the parent packages too: pickle imports the module by name
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    return sys.modules[name]


def register(mod, cls, name=None):
    name = name or cls.__name__
    cls.__module__ = mod
    cls.__qualname__ = name
    cls.__name__ = name
    module(mod).__dict__[name] = cls
    return cls


META = "torch.distributed.checkpoint.metadata"


class dtype:  # torch.dtype pickles as the global torch.<name>
    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name


dtype.__module__ = "torch"
torch = module("torch")
torch.float32 = dtype("float32")


class Size(tuple):
    def __reduce__(self):
        return (Size, (tuple(self),))


register("torch", Size, "Size")


def _get_layout(name):
    raise AssertionError("never called")


_get_layout.__module__ = "torch.serialization"
_get_layout.__qualname__ = "_get_layout"
module("torch.serialization")._get_layout = _get_layout


class Layout:
    def __reduce__(self):
        return (_get_layout, ("torch.strided",))


MemFormat = register(META, enum.Enum("_MEM_FORMAT_ENCODING", [("TORCH_CONTIGUOUS_FORMAT", 0)]))


class Dataclass:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class TensorProperties:
    def __init__(self):
        self.dtype = torch.float32

    def __getstate__(self):
        return (self.dtype, Layout(), False, MemFormat.TORCH_CONTIGUOUS_FORMAT, False)


register(META, TensorProperties)
for _name in ("Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "MetadataIndex"):
    register(META, type(_name, (Dataclass,), {}))
register("torch.distributed.checkpoint.filesystem", type("_StorageInfo", (Dataclass,), {}))
mod = module(META)
Metadata, TensorStorageMetadata = mod.Metadata, mod.TensorStorageMetadata
ChunkStorageMetadata, MetadataIndex = mod.ChunkStorageMetadata, mod.MetadataIndex
_StorageInfo = module("torch.distributed.checkpoint.filesystem")._StorageInfo


class Apply:  # f(arg) as pickle protocol 2 writes builtins: REDUCE of the global with one argument
    def __init__(self, f, arg):
        self.f, self.arg = f, arg

    def __reduce__(self):
        return (self.f, (self.arg,))


def tensor(size, chunks):
    return TensorStorageMetadata(properties=TensorProperties(), size=Size(size), chunks=chunks)


def chunk(offsets, sizes):
    return ChunkStorageMetadata(offsets=Size(offsets), sizes=Size(sizes))


def write(out, md, files=()):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(md, f, protocol=4)
    for name, data in files:
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


def metadata(state, storage=None, planner=None, **extra):
    return Metadata(state_dict_metadata=state, planner_data=planner, storage_data=storage or {},
                    storage_meta=None, version="1.0.0", **extra)


def shared_chunks(out):
    one = Size((1,))
    chunks = [ChunkStorageMetadata(offsets=Size((i,)), sizes=one) for i in range(10_000)]
    props, size = TensorProperties(), Size((10_000,))
    write(out, metadata({f"k{i}": TensorStorageMetadata(properties=props, size=size, chunks=chunks)
                         for i in range(100_000)}))


def shared_size(out):
    big = Size((1,) * 100_000)
    write(out, metadata({"w": tensor((1,) * 100_000, [ChunkStorageMetadata(offsets=big, sizes=big)
                                                      for _ in range(20_000)])}))


def shared_planner(out):
    path = tuple(f"p{i}" for i in range(100_000))
    state = {f"k{i}": tensor((1,), [chunk((0,), (1,))]) for i in range(20_000)}
    write(out, metadata(state, planner={f"k{i}": path for i in range(20_000)}))


def set_of_memo(out):
    items = list(range(1 << 20))
    apply = [Apply(set if i % 2 else frozenset, items) for i in range(4096)]
    write(out, metadata({"w": tensor((1,), [chunk((0,), (1,))])}, sets=apply))


def exponential_dag(out):
    v = [None]
    for _ in range(64):
        v = [v, v]
    write(out, metadata({"w": tensor((1,), [chunk((0,), (1,))])}, dag=v))


def missing_storage(out):
    n = 1_000_000
    one = (1,)  # plain tuples, which the metadata accepts for torch.Size: 10^6 chunks pickle in seconds
    write(out, metadata({"w": tensor((n,), [ChunkStorageMetadata(offsets=(i,), sizes=one) for i in range(n)])}))


def sparse_metadata(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, ".metadata"), "wb") as f:
        f.truncate(3_900_000_000)


class _rebuild_tensor_v2:  # the pickle of a tensor: REDUCE of torch._utils._rebuild_tensor_v2
    def __init__(self, numel, stride):
        self.numel, self.stride = numel, stride

    def __reduce__(self):
        return (_rebuild, (StorageRef(), 0, (self.numel,), (self.stride,), False, OrderedDict()))


def _rebuild(*args):
    raise AssertionError("never called")


_rebuild.__module__ = "torch._utils"
_rebuild.__qualname__ = "_rebuild_tensor_v2"
_rebuild.__name__ = "_rebuild_tensor_v2"
module("torch._utils")._rebuild_tensor_v2 = _rebuild
FloatStorage = register("torch", type("FloatStorage", (), {}))
OrderedDict = register("collections", type("OrderedDict", (dict,), {"__reduce__": lambda self: (OrderedDict, ())}))


class StorageRef:  # a persistent id ('storage', torch.FloatStorage, '0', 'cpu', 1)
    pass


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", FloatStorage, "0", "cpu", 1) if isinstance(obj, StorageRef) else None


def torch_save(obj, storage_bytes):
    pkl = io.BytesIO()
    TorchPickler(pkl, protocol=2).dump(obj)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl.getvalue())
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/data/0", storage_bytes)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def zero_stride(out, numel=1 << 29, sparse=False):
    item = torch_save(_rebuild_tensor_v2(numel, 0), b"\0\0\x80\x3f")  # one float32 1.0
    hole = 0
    if sparse:
        # A hole (nothing on disk) between the archive's entries and its central directory makes the
        # item as long as the bytes the chunk claims, so that only the view itself is wrong.
        eocd = item.rindex(b"PK\5\6")
        cd = struct.unpack_from("<I", item, eocd + 16)[0]
        hole = 4 * numel - len(item)
        tail = bytearray(item[cd:])
        struct.pack_into("<I", tail, eocd - cd + 16, cd + hole)
        head, item = item[:cd], bytes(tail)
    storage = {MetadataIndex(fqn="w", offset=Size((0,)), index=0):
               _StorageInfo(relative_path="__0_0.distcp", offset=0, length=hole + len(item) + (len(head) if sparse else 0),
                            transform_descriptors=None)}
    if not sparse:
        write(out, metadata({"w": tensor((numel,), [chunk((0,), (numel,))])}, storage), [("__0_0.distcp", item)])
        return
    write(out, metadata({"w": tensor((numel,), [chunk((0,), (numel,))])}, storage))
    with open(os.path.join(out, "__0_0.distcp"), "wb") as f:
        f.write(head)
        f.seek(hole, os.SEEK_CUR)
        f.write(item)


def zero_stride_object(out):
    # An archive, not a checkpoint: for `make_dcp copy --replace KEY out/zero_stride_object/object.pt`.
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "object.pt"), "wb") as f:
        f.write(torch_save([_rebuild_tensor_v2(1 << 31, 0)], b"\0\0\x80\x3f"))


CASES = {
    "shared_chunks": shared_chunks,
    "shared_size": shared_size,
    "shared_planner": shared_planner,
    "set_of_memo": set_of_memo,
    "exponential_dag": exponential_dag,
    "missing_storage": missing_storage,
    "sparse_metadata": sparse_metadata,
    "zero_stride": zero_stride,
    "zero_stride_2e34": lambda out: zero_stride(out, 1 << 34),
    "zero_stride_sparse": lambda out: zero_stride(out, 1 << 29, sparse=True),
    "zero_stride_object": zero_stride_object,
}


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    out, names = argv[0], argv[1:] or list(CASES)
    for name in names:
        if name not in CASES:
            sys.exit(f"make_limit_cases.py: no case {name!r} (cases: {', '.join(CASES)})")
        CASES[name](os.path.join(out, name))


if __name__ == "__main__":
    main(sys.argv[1:])
