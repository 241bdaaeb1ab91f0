#include "formats/dcp/summary.h"

#include <set>

#include "core/error.h"

namespace fpg::dcp {

Summary summarize(const Reader& r) {
  const Metadata& m = r.metadata();
  Summary s;
  s.megatron = r.megatron();
  s.format = s.megatron && s.megatron->sharded_backend == "torch_dist" ? "megatron_torch_dist" : "torch_dcp";
  s.dcp_version = m.version;
  std::set<std::string> files, transforms;
  const std::string* last = nullptr;  // consecutive entries mostly name one file: inserted once per run
  for (const StorageEntry& st : m.storage) {
    if (!last || *last != st.relative_path) files.insert(st.relative_path);
    last = &st.relative_path;
    s.stored_bytes += st.length;
    transforms.insert(st.transform_descriptors.begin(), st.transform_descriptors.end());
  }
  s.files.assign(files.begin(), files.end());
  s.transforms.assign(transforms.begin(), transforms.end());
  s.keys.reserve(m.entries.size());
  bool serialization_probed = false;
  for (const Entry& e : m.entries) {
    KeySummary k;
    k.fqn = e.fqn;
    k.is_tensor = e.is_tensor;
    if (e.is_tensor) {
      ++s.tensors;
      k.dtype = std::string(e.tensor.dtype->name);
      k.shape = e.tensor.size;
      k.chunks = e.tensor.chunks.size();
      const uint64_t n = e.tensor.numel();
      k.bytes = n > UINT64_MAX / e.tensor.dtype->element_bytes ? UINT64_MAX : n * e.tensor.dtype->element_bytes;
      for (const ChunkMeta& c : e.tensor.chunks)
        if (c.storage != kNoStorage) k.stored_bytes += m.storage[static_cast<size_t>(c.storage)].length;
      s.chunks += k.chunks;
      s.tensor_bytes += k.bytes;
      if (!s.serialization && !serialization_probed && !e.tensor.chunks.empty()) {
        serialization_probed = true;
        try {
          s.serialization = r.item_serialization(e, 0);
        } catch (const FormatError&) {
          // A broken item is validate's to report; the summary only describes.
        }
      }
    } else {
      ++s.bytes_entries;
      if (e.storage != kNoStorage) {
        k.chunks = 1;
        k.bytes = k.stored_bytes = m.storage[static_cast<size_t>(e.storage)].length;
      }
    }
    s.keys.push_back(std::move(k));
  }
  return s;
}

}  // namespace fpg::dcp
