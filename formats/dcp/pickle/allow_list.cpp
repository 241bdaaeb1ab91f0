#include "formats/dcp/pickle/allow_list.h"

#include "formats/dcp/torch_dtype.h"

namespace fpg::dcp {
namespace {

using Role = GlobalRole;

struct Entry {
  std::string_view module;
  std::string_view name;
  Role role;
};

// Shared by both profiles: values torch pickles by name and the builtins protocol 2 needs for data.
constexpr Entry kCommon[] = {
    {"torch", "Size", Role::constructor},
    {"torch.serialization", "_get_layout", Role::get_layout},
    {"torch", "strided", Role::constant},
    {"torch", "sparse_coo", Role::constant},
    {"torch", "sparse_csr", Role::constant},
    {"torch", "sparse_csc", Role::constant},
    {"torch", "sparse_bsr", Role::constant},
    {"torch", "sparse_bsc", Role::constant},
    {"torch", "_mkldnn", Role::constant},
    {"torch", "jagged", Role::constant},
    {"torch", "contiguous_format", Role::constant},
    {"torch", "channels_last", Role::constant},
    {"torch", "channels_last_3d", Role::constant},
    {"torch", "preserve_format", Role::constant},
    {"collections", "OrderedDict", Role::ordered_dict},
    {"builtins", "set", Role::make_set},
    {"builtins", "frozenset", Role::make_frozenset},
    {"builtins", "bytes", Role::make_bytes},
    {"builtins", "bytearray", Role::make_bytearray},
    {"_codecs", "encode", Role::codecs_encode},
};

constexpr std::string_view kDcpMetadataModule = "torch.distributed.checkpoint.metadata";

constexpr Entry kMetadata[] = {
    {kDcpMetadataModule, "Metadata", Role::constructor},
    {kDcpMetadataModule, "TensorStorageMetadata", Role::constructor},
    {kDcpMetadataModule, "BytesStorageMetadata", Role::constructor},
    {kDcpMetadataModule, "ChunkStorageMetadata", Role::constructor},
    {kDcpMetadataModule, "TensorProperties", Role::constructor},
    {kDcpMetadataModule, "MetadataIndex", Role::constructor},
    {kDcpMetadataModule, "StorageMeta", Role::constructor},
    {kDcpMetadataModule, "_MEM_FORMAT_ENCODING", Role::constructor},
    {"torch.distributed.checkpoint.filesystem", "_StorageInfo", Role::constructor},
    // StorageMeta.checkpoint_id is the save path, a pathlib path when the writer was given one
    // (pathlib._local since Python 3.13).
    {"pathlib", "PosixPath", Role::constructor},
    {"pathlib", "WindowsPath", Role::constructor},
    {"pathlib", "PurePosixPath", Role::constructor},
    {"pathlib", "PureWindowsPath", Role::constructor},
    {"pathlib._local", "PosixPath", Role::constructor},
    {"pathlib._local", "WindowsPath", Role::constructor},
    {"pathlib._local", "PurePosixPath", Role::constructor},
    {"pathlib._local", "PureWindowsPath", Role::constructor},
};

constexpr Entry kTorchSave[] = {
    {"torch._utils", "_rebuild_tensor_v2", Role::rebuild_tensor},
    {"torch._utils", "_rebuild_tensor_v3", Role::rebuild_tensor},
    {"torch.storage", "UntypedStorage", Role::constant},
    {"torch", "UntypedStorage", Role::constant},
    // Megatron's RNG state holds numpy's Mersenne Twister state: an ndarray and its dtype.
    {"numpy.core.multiarray", "_reconstruct", Role::constructor},
    {"numpy._core.multiarray", "_reconstruct", Role::constructor},
    {"numpy.core.multiarray", "scalar", Role::constructor},
    {"numpy._core.multiarray", "scalar", Role::constructor},
    {"numpy", "ndarray", Role::constant},
    {"numpy", "dtype", Role::constructor},
    {"numpy.dtypes", "UInt32DType", Role::constructor},
    // Megatron-LM's common state: the training args (an argparse.Namespace holding enums, paths and
    // signals), the rerun state machine and the optimizer config, as Megatron-Core's own
    // safe_globals.SAFE_GLOBALS admits them for torch.load(weights_only=True).
    {"argparse", "Namespace", Role::constructor},
    {"types", "SimpleNamespace", Role::constructor},
    {"pathlib", "PosixPath", Role::constructor},
    {"pathlib._local", "PosixPath", Role::constructor},
    {"signal", "Signals", Role::constructor},
    {"io", "BytesIO", Role::constructor},
    {"_io", "BytesIO", Role::constructor},
    {"megatron.core.enums", "ModelType", Role::constructor},
    {"megatron.core.optimizer.optimizer_config", "OptimizerConfig", Role::constructor},
    {"megatron.core.rerun_state_machine", "RerunDiagnostic", Role::constructor},
    {"megatron.core.rerun_state_machine", "RerunMode", Role::constructor},
    {"megatron.core.rerun_state_machine", "RerunState", Role::constructor},
    {"megatron.core.transformer.enums", "ModelType", Role::constructor},
    {"megatron.core.transformer.enums", "AttnBackend", Role::constructor},
    {"megatron.core.transformer.enums", "CudaGraphModule", Role::constructor},
    {"megatron.core.transformer.enums", "CudaGraphScope", Role::constructor},
    {"megatron.core.transformer.enums", "InferenceCudaGraphScope", Role::constructor},
};

std::optional<Role> find_in(const Entry* begin, const Entry* end, std::string_view module,
                            std::string_view name) {
  for (const Entry* e = begin; e != end; ++e)
    if (e->module == module && e->name == name) return e->role;
  return std::nullopt;
}

template <size_t N>
std::optional<Role> find_in(const Entry (&table)[N], std::string_view module, std::string_view name) {
  return find_in(table, table + N, module, name);
}

}  // namespace

std::string qualified_name(std::string_view module, std::string_view name) {
  std::string s(module);
  s += '.';
  s += name;
  return s;
}

std::optional<GlobalRole> AllowList::find(std::string_view module, std::string_view name) const {
  // Python 3's unpickler maps protocol 2's Python 2 names the same way (_compat_pickle).
  if (module == "__builtin__") module = "builtins";
  if (module == "copy_reg") module = "copyreg";
  if (module == "torch" && find_torch_dtype(name)) return Role::constant;
  if (auto r = find_in(kCommon, module, name)) return r;
  if (metadata_)
    if (auto r = find_in(kMetadata, module, name)) return r;
  if (torch_save_) {
    if (module == "torch" && find_torch_dtype_by_storage(name)) return Role::constant;
    if (auto r = find_in(kTorchSave, module, name)) return r;
  }
  return std::nullopt;
}

const AllowList& AllowList::dcp_metadata() {
  static const AllowList list("DCP .metadata", true, false);
  return list;
}

const AllowList& AllowList::torch_save() {
  static const AllowList list("torch.save", false, true);
  return list;
}

}  // namespace fpg::dcp
