// The globals a restricted pickle may name, and what each becomes. Nothing named here is ever called:
// a class becomes an `object` value recording its arguments and state, a constant becomes a `global`
// value, and the few builtins that only build data (set, bytes, OrderedDict, ...) are decoded as the
// data they build. Every other global is refused with its name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fpg::dcp {

enum class GlobalRole : uint8_t {
  constant,        // a value: a torch dtype, layout, memory format, storage class
  constructor,     // REDUCE / NEWOBJ record an object value (dataclasses, torch.Size, enums, paths)
  ordered_dict,    // collections.OrderedDict() → an empty dict
  make_set,        // builtins.set(list) → a set
  make_frozenset,  // builtins.frozenset(list) → a frozenset
  make_bytes,      // builtins.bytes() → empty bytes (protocol 2's empty bytes)
  make_bytearray,  // builtins.bytearray(bytes) → a bytearray
  codecs_encode,   // _codecs.encode(str, 'latin1') → bytes (protocol 2's bytes)
  get_layout,      // torch.serialization._get_layout('torch.strided') → the layout constant
  rebuild_tensor,  // torch._utils._rebuild_tensor_v2 / _v3 → an object the torch.save reader reads
};

// One profile of what a pickle may contain.
class AllowList {
 public:
  // Role of `module`.`name`, with Python 2 module names mapped as Python 3 does (__builtin__ →
  // builtins, copy_reg → copyreg); nullopt if the global is refused.
  std::optional<GlobalRole> find(std::string_view module, std::string_view name) const;
  // Whether BINPERSID is accepted (torch.save's storages).
  bool persistent_ids() const { return persistent_ids_; }
  std::string_view profile() const { return profile_; }

  // DCP's .metadata: the dataclasses of torch.distributed.checkpoint.metadata, _StorageInfo,
  // torch.Size, dtypes, layouts, memory formats, OrderedDict, pathlib paths (StorageMeta's
  // checkpoint_id) and the data-building builtins. No persistent ids.
  static const AllowList& dcp_metadata();
  // A torch.save archive's data.pkl: tensors (_rebuild_tensor_v2/_v3, the storage classes),
  // torch.Size, dtypes, layouts, memory formats, OrderedDict, the data-building builtins, and numpy
  // arrays and scalars (Megatron's RNG state) and the classes of Megatron-LM's common state (its
  // training args as an argparse.Namespace, Megatron's enums, the rerun state) recorded as objects.
  // Persistent ids allowed.
  static const AllowList& torch_save();

 private:
  AllowList(std::string_view profile, bool metadata, bool torch_save)
      : profile_(profile), metadata_(metadata), torch_save_(torch_save), persistent_ids_(torch_save) {}
  std::string_view profile_;
  bool metadata_;
  bool torch_save_;
  bool persistent_ids_;
};

// "os.system": module and name as messages print them.
std::string qualified_name(std::string_view module, std::string_view name);

}  // namespace fpg::dcp
