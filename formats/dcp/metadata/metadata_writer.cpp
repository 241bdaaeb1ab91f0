#include "formats/dcp/metadata/metadata_writer.h"

#include <map>

#include "core/printable.h"
#include "core/error.h"
#include "formats/dcp/pickle/pickle_writer.h"

namespace fpg::dcp {
namespace {

constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";

class MetadataPickler {
 public:
  std::string run(const Metadata& m) {
    new_object(kMetadataModule, "Metadata");
    const auto extra_planner = m.extra.find("planner_data");
    const size_t extras = m.extra.size() - (extra_planner != m.extra.end() ? 1 : 0);
    w_.begin_dict(5 + extras);
    field("state_dict_metadata");
    w_.begin_dict(m.entries.size());
    for (const Entry& e : m.entries) {
      w_.item();
      w_.str(e.fqn);
      if (e.is_tensor) tensor_storage(e);
      else new_object(kMetadataModule, "BytesStorageMetadata");  // no fields: no BUILD, as pickle writes it
    }
    w_.end();
    field("planner_data");
    if (!m.planner_data.empty()) planner_data(m);
    else if (extra_planner != m.extra.end()) pickle_value(w_, extra_planner->second);
    else w_.none();
    field("storage_data");
    w_.begin_dict(m.storage.size());
    for (const StorageEntry& s : m.storage) {
      w_.item();
      storage_key(s);
      storage_info(s);
    }
    w_.end();
    field("storage_meta");
    if (m.storage_meta) storage_meta(*m.storage_meta);
    else w_.none();
    field("version");
    optional_str(m.version);
    for (const auto& [name, value] : m.extra) {
      if (name == "planner_data") continue;
      field(name);
      pickle_value(w_, value);
    }
    w_.end();
    w_.build();
    return w_.finish();
  }

 private:
  // cls() with no arguments, as copyreg.__reduce_ex__ pickles a plain instance.
  void new_object(const char* module, const char* cls) {
    w_.global(module, cls);
    w_.begin_tuple(0);
    w_.end_tuple(0);
    w_.newobj();
  }

  void field(const std::string& name) {
    w_.item();
    w_.str(name);
  }

  void optional_str(const std::optional<std::string>& s) {
    if (s) w_.str(*s);
    else w_.none();
  }

  void torch_size(const std::vector<uint64_t>& dims) {
    w_.global("torch", "Size");
    w_.begin_tuple(1);
    w_.begin_tuple(dims.size());
    for (const uint64_t d : dims) w_.integer(static_cast<int64_t>(d));
    w_.end_tuple(dims.size());
    w_.end_tuple(1);
    w_.reduce();
  }

  // A shared object: the first use is built by `make`, later ones are BINGETs of its memo entry.
  template <typename Make>
  void shared(std::map<std::string, uint32_t>& memo, const std::string& key, Make make) {
    const auto it = memo.find(key);
    if (it != memo.end()) return w_.get(it->second);
    memo.emplace(key, make());
  }

  void layout(const std::string& name) {
    if (name.rfind("torch.", 0) != 0) throw UsageError(".metadata: layout " + quoted_name(name) + " is not a torch layout");
    shared(layouts_, name, [&] {
      w_.global("torch.serialization", "_get_layout");
      w_.begin_tuple(1);
      w_.str(name);
      w_.end_tuple(1);
      return w_.reduce();
    });
  }

  void memory_format(const std::string& name, const std::string& fqn) {
    int encoding;
    if (name == "torch.contiguous_format") encoding = 0;
    else if (name == "torch.channels_last") encoding = 1;
    else if (name == "torch.preserve_format") encoding = 2;
    else throw UsageError(".metadata: " + fqn + ": memory format " + quoted_name(name) + " has no _MEM_FORMAT_ENCODING");
    shared(memory_formats_, name, [&] {
      w_.global(kMetadataModule, "_MEM_FORMAT_ENCODING");
      w_.begin_tuple(1);
      w_.integer(encoding);
      w_.end_tuple(1);
      return w_.reduce();
    });
  }

  void tensor_storage(const Entry& e) {
    const TensorMeta& t = e.tensor;
    if (!t.dtype) throw UsageError(".metadata: tensor " + e.fqn + " has no dtype");
    new_object(kMetadataModule, "TensorStorageMetadata");
    w_.begin_dict(3);
    field("properties");
    new_object(kMetadataModule, "TensorProperties");
    const size_t n = t.strides ? 6 : 5;
    w_.begin_tuple(n);
    w_.global("torch", t.dtype->name);
    layout(t.layout);
    w_.boolean(t.requires_grad);
    memory_format(t.memory_format, e.fqn);
    w_.boolean(t.pin_memory);
    if (t.strides) {
      w_.begin_tuple(t.strides->size());
      for (const int64_t s : *t.strides) w_.integer(s);
      w_.end_tuple(t.strides->size());
    }
    w_.end_tuple(n);
    w_.build();
    field("size");
    torch_size(t.size);
    field("chunks");
    w_.begin_list(t.chunks.size());
    for (const ChunkMeta& c : t.chunks) {
      w_.item();
      new_object(kMetadataModule, "ChunkStorageMetadata");
      w_.begin_dict(2);
      field("offsets");
      torch_size(c.offsets);
      field("sizes");
      torch_size(c.sizes);
      w_.end();
      w_.build();
    }
    w_.end();
    w_.end();
    w_.build();
  }

  void planner_data(const Metadata& m) {
    w_.begin_dict(m.planner_data.size());
    for (const auto& [fqn, path] : m.planner_data) {
      w_.item();
      w_.str(fqn);
      w_.begin_tuple(path.size());
      for (const std::string& p : path) w_.str(p);
      w_.end_tuple(path.size());
    }
    w_.end();
  }

  // MetadataIndex.__init__ sets fqn, index, then offset only for a tensor chunk.
  void storage_key(const StorageEntry& s) {
    new_object(kMetadataModule, "MetadataIndex");
    w_.begin_dict(s.chunk_offsets ? 3 : 2);
    field("fqn");
    w_.str(s.fqn);
    field("index");
    if (s.index) w_.integer(*s.index);
    else w_.none();
    if (s.chunk_offsets) {
      field("offset");
      torch_size(*s.chunk_offsets);
    }
    w_.end();
    w_.build();
  }

  void storage_info(const StorageEntry& s) {
    new_object(kFilesystemModule, "_StorageInfo");
    const bool transforms = !s.transform_descriptors.empty();
    w_.begin_dict(transforms ? 4 : 3);
    field("relative_path");
    w_.str(s.relative_path);
    field("offset");
    w_.integer(static_cast<int64_t>(s.offset));
    field("length");
    w_.integer(static_cast<int64_t>(s.length));
    if (transforms) {
      field("transform_descriptors");
      w_.begin_list(s.transform_descriptors.size());
      for (const std::string& d : s.transform_descriptors) {
        w_.item();
        w_.str(d);
      }
      w_.end();
    }
    w_.end();
    w_.build();
  }

  void storage_meta(const StorageMetaInfo& sm) {
    new_object(kMetadataModule, "StorageMeta");
    w_.begin_dict(4);
    field("checkpoint_id");
    optional_str(sm.checkpoint_id);
    field("save_id");
    optional_str(sm.save_id);
    field("load_id");
    optional_str(sm.load_id);
    field("modules");
    w_.begin_list(sm.modules.size());
    for (const std::string& mod : sm.modules) {
      w_.item();
      w_.str(mod);
    }
    w_.end();
    w_.end();
    w_.build();
  }

  PickleWriter w_;
  std::map<std::string, uint32_t> layouts_, memory_formats_;
};

}  // namespace

std::string metadata_pickle(const Metadata& m) { return MetadataPickler().run(m); }

}  // namespace fpg::dcp
