#include "formats/dcp/summary.h"

#include <set>

namespace fpg::dcp {

Summary summarize(const Reader& r) {
  Summary s;
  s.dir = r.dir();
  const bool megatron = r.megatron().has_value();
  s.format = megatron ? "Megatron torch_dist" : "PyTorch DCP";
  if (megatron) {
    s.megatron_backend = r.megatron()->sharded_backend;
    s.megatron_backend_version = r.megatron()->sharded_backend_version;
  }
  s.dcp_version = r.metadata().version.value_or("");
  std::set<std::string> names;
  for (const StorageEntry& e : r.metadata().storage) names.insert(e.relative_path);
  for (const std::string& n : names) s.files.push_back({n, r.files().open(n)->size()});
  for (const Entry& e : r.metadata().entries) {
    KeySummary k;
    k.fqn = e.fqn;
    k.tensor = e.is_tensor;
    if (e.is_tensor) {
      k.dtype = std::string(e.tensor.dtype->name);
      k.shape = e.tensor.size;
      k.chunks = e.tensor.chunks.size();
      k.bytes = e.tensor.numel() * e.tensor.dtype->element_bytes;
      ++s.tensor_keys;
      s.chunks += k.chunks;
      s.tensor_bytes += k.bytes;
    } else {
      if (e.storage >= 0 && static_cast<size_t>(e.storage) < r.metadata().storage.size())
        k.bytes = r.metadata().storage[static_cast<size_t>(e.storage)].length;
      ++s.bytes_keys;
    }
    s.keys.push_back(std::move(k));
  }
  return s;
}

}  // namespace fpg::dcp
