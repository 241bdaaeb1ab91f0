#include "formats/dcp/metadata/metadata.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <future>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/thread_start.h"
#include "core/units.h"
#include "formats/dcp/huge_pages.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {

using Ref = PickleDocument::Ref;
using PKind = PickleDocument::Kind;

namespace {

constexpr std::string_view kMetaModule = "torch.distributed.checkpoint.metadata.";
const std::string kMetadataClass = std::string(kMetaModule) + "Metadata";
const std::string kTensorClass = std::string(kMetaModule) + "TensorStorageMetadata";
const std::string kBytesClass = std::string(kMetaModule) + "BytesStorageMetadata";
const std::string kChunkClass = std::string(kMetaModule) + "ChunkStorageMetadata";
const std::string kPropertiesClass = std::string(kMetaModule) + "TensorProperties";
const std::string kIndexClass = std::string(kMetaModule) + "MetadataIndex";
const std::string kStorageMetaClass = std::string(kMetaModule) + "StorageMeta";
const std::string kMemFormatClass = std::string(kMetaModule) + "_MEM_FORMAT_ENCODING";
const std::string kStorageInfoClass = "torch.distributed.checkpoint.filesystem._StorageInfo";
const std::string kSizeClass = "torch.Size";
const std::string* const kClassNames[] = {&kMetadataClass,     &kTensorClass, &kBytesClass,        &kChunkClass,
                                          &kPropertiesClass,   &kIndexClass,  &kStorageMetaClass,  &kMemFormatClass,
                                          &kStorageInfoClass,  &kSizeClass};

std::string key_field(const std::string& parent, const std::string& key) {
  return parent + "[" + safetensors::quote_name(key) + "]";
}

// Where a value sits in the metadata ("state_dict_metadata['w'].chunks[3].sizes"), built as a chain
// of stack frames and rendered only for an error message: decoding a million chunks builds no strings.
class Path {
 public:
  explicit Path(std::string_view root) : text_(root) {}
  Path(const Path& parent, std::string_view member) : parent_(&parent), kind_(Kind::member), text_(member) {}
  Path(const Path& parent, size_t index) : parent_(&parent), kind_(Kind::index), index_(index) {}
  Path(const Path& parent, const std::string* key) : parent_(&parent), kind_(Kind::key), key_(key) {}
  std::string str() const {
    std::string s = parent_ ? parent_->str() : std::string();
    switch (kind_) {
      case Kind::root: return std::string(text_);
      case Kind::member: return s + (s.empty() ? "" : ".") + std::string(text_);
      case Kind::index: return s + "[" + std::to_string(index_) + "]";
      case Kind::key: return s + "[" + safetensors::quote_name(*key_) + "]";
    }
    return s;
  }

 private:
  enum class Kind : uint8_t { root, member, index, key };
  const Path* parent_ = nullptr;
  Kind kind_ = Kind::root;
  std::string_view text_;
  size_t index_ = 0;
  const std::string* key_ = nullptr;
};

// Storage entries by (fqn, chunk offsets), where the last of repeated keys wins, as in Python's dict.
// Entries are grouped by fqn in file order (a run of entries of one fqn costs one string compare
// each); within a group, offsets that increase in file order (as writers store row-sharded chunks)
// are unique and are matched to a key's chunks by a cursor that follows them, with a binary search
// where the chunk order departs from it. Other groups are sorted first, repeats counted, the last kept.
class StorageIndex {
 public:
  StorageIndex(const std::vector<StorageEntry>& storage, uint64_t* duplicates) : storage_(storage) {
    // Each group's entries, in file order: chunked (with offsets) and unchunked (bytes items). The
    // entries of one key share its name's allocation (the decoder makes one per name), found by
    // address before the name is hashed.
    uint32_t group = 0;
    std::unordered_map<const std::string*, uint32_t> by_name;
    const std::string* last = nullptr;
    for (size_t i = 0; i < storage.size(); ++i) {
      const std::string* name = &storage[i].fqn.str();
      if (name != last) {
        const auto known = by_name.find(name);
        if (known != by_name.end()) {
          group = known->second;
        } else {
          group = by_fqn_.try_emplace(*name, static_cast<uint32_t>(groups_.size())).first->second;
          if (group == groups_.size()) groups_.emplace_back();
          by_name.emplace(name, group);
        }
        last = name;
      }
      Group& g = groups_[group];
      (storage[i].chunk_offsets ? g.chunked : g.unchunked).push_back(static_cast<uint32_t>(i));
    }
    for (Group& g : groups_) {
      if (g.unchunked.size() > 1) *duplicates += g.unchunked.size() - 1;
      bool increasing = true;
      for (size_t j = 1; increasing && j < g.chunked.size(); ++j)
        increasing = offsets(g.chunked[j - 1]) < offsets(g.chunked[j]);
      if (increasing) continue;
      // Sort by offsets, then by file order; keep the last of each run of equal offsets.
      std::stable_sort(g.chunked.begin(), g.chunked.end(),
                       [&](uint32_t a, uint32_t b) { return offsets(a) < offsets(b); });
      std::vector<uint32_t> kept;
      for (size_t j = 0; j < g.chunked.size(); ++j) {
        if (j + 1 < g.chunked.size() && offsets(g.chunked[j]) == offsets(g.chunked[j + 1])) {
          ++*duplicates;
          continue;
        }
        kept.push_back(g.chunked[j]);
      }
      g.chunked = std::move(kept);
    }
  }

  // The storage index of a bytes item `fqn`, or kNoStorage.
  int64_t find_bytes(std::string_view fqn) const {
    const Group* g = group(fqn);
    return g && !g->unchunked.empty() ? g->unchunked.back() : kNoStorage;
  }

  // Storage indices of the chunks of tensor `fqn`, in their order (kNoStorage where none).
  void find_chunks(std::string_view fqn, std::vector<ChunkMeta>& chunks) const {
    const Group* g = group(fqn);
    size_t cursor = 0;
    for (ChunkMeta& c : chunks) {
      c.storage = kNoStorage;
      if (!g || g->chunked.empty()) continue;
      if (cursor < g->chunked.size() && offsets(g->chunked[cursor]) == c.offsets) {
        c.storage = g->chunked[cursor++];
        continue;
      }
      const auto it = std::lower_bound(g->chunked.begin(), g->chunked.end(), c.offsets,
                                       [&](uint32_t a, const DimVector& o) { return offsets(a) < o; });
      if (it != g->chunked.end() && offsets(*it) == c.offsets) {
        c.storage = *it;
        cursor = static_cast<size_t>(it - g->chunked.begin()) + 1;
      }
    }
  }

 private:
  struct Group {
    std::vector<uint32_t> chunked;    // sorted by offsets, unique
    std::vector<uint32_t> unchunked;  // file order; the last one counts
  };
  const DimVector& offsets(uint32_t i) const { return *storage_[i].chunk_offsets; }
  const Group* group(std::string_view fqn) const {
    const auto it = by_fqn_.find(fqn);
    return it == by_fqn_.end() ? nullptr : &groups_[it->second];
  }
  const std::vector<StorageEntry>& storage_;
  std::vector<Group> groups_;
  std::unordered_map<std::string_view, uint32_t> by_fqn_;
};

class Decoder {
 public:
  Decoder(const PickleDocument& doc, Metadata& m) : d_(doc), m_(m), meter_(doc.budget()) {}

  void run();

 private:
  // What is built from the document is charged to its budget before it is allocated: shared values
  // (one list of chunks named by many keys) each time they are unfolded.
  void charge(uint64_t bytes, const Path& field) const {
    meter_.charge(bytes, [&] { return field.str(); });
  }
  void charge_string(const std::string& s, const Path& field) const { charge(string_heap_bytes(s.size()), field); }
  FormatError err(const Path& field, const std::string& what) const {
    return FormatError(d_.file() + ": " + field.str() + ": " + what);
  }
  void note(const char* cls, const std::string& field) {
    const std::string line = "ignored field " + safetensors::quote_name(field) + " of " + cls;
    if (noted_.insert(line).second) {
      spdlog::debug("{}: {}", d_.file(), line);
      m_.notes.push_back(line);
    }
  }

  // Which of the class name constants above an object's name is (nullptr: none). The objects of a
  // class share its name's text id: the name is compared with the constants once per id (a slot
  // the ids share keeps the last one's answer).
  const std::string* class_of(Ref obj) const {
    const uint32_t id = d_.text_id(obj);
    ClassSlot& slot = class_slots_[id % kClassSlots];
    if (slot.id == id) return slot.cls;
    const std::string& name = d_.text(obj);
    const std::string* found = nullptr;
    for (const std::string* c : kClassNames)
      if (*c == name) found = c;
    slot = {id, found};
    return found;
  }
  // `cls` is one of the class name constants above.
  bool is_object(Ref r, const std::string& cls) const { return d_.kind(r) == PKind::object && class_of(r) == &cls; }
  void expect_object(Ref r, const std::string& cls, const Path& field) const {
    if (!is_object(r, cls)) throw err(field, "expected " + cls + ", found " + d_.type_name(r));
    if (d_.size(d_.args(r)) != 0) throw err(field, cls + " built with constructor arguments");
  }
  // The BUILD state of a dataclass: a dict with str keys (or none: no fields set).
  std::optional<Ref> state_dict(Ref obj, const Path& field) const {
    const auto st = d_.state(obj);
    if (!st) return std::nullopt;
    if (d_.kind(*st) != PKind::dict) throw err(field, "state is a " + d_.type_name(*st) + ", not a dict");
    for (size_t i = 0; i < d_.size(*st); ++i)
      if (d_.kind(d_.key(*st, i)) != PKind::str)
        throw err(field, "state has a " + d_.type_name(d_.key(*st, i)) + " key");
    return st;
  }
  // The fields of a dataclass that the decoder reads, recognised by the key's text id: a pickler
  // memoizes each field name once, so a name is compared once, not once per object (a million
  // chunks and storage entries each name their fields).
  class FieldNames {
   public:
    static constexpr int kUnknown = -1;
    FieldNames(std::initializer_list<std::string_view> names) : names_(names) {}
    // The index of the str key `k` among the names, or kUnknown.
    int find(const PickleDocument& d, Ref k) {
      const uint32_t id = d.text_id(k);
      for (const auto& [known, index] : seen_)
        if (known == id) return index;  // a few ids: one per field name, in the order they came
      const std::string& name = d.text(k);
      int index = kUnknown;
      for (size_t i = 0; i < names_.size(); ++i)
        if (names_[i] == name) index = static_cast<int>(i);
      if (seen_.size() < kSeen) seen_.push_back({id, index});
      return index;
    }

   private:
    static constexpr size_t kSeen = 16;
    std::vector<std::string_view> names_;
    std::vector<std::pair<uint32_t, int>> seen_;
  };
  // Calls on_field(index of the name in `names` or kUnknown, name, value, path of the field) for
  // each field of a dataclass's state.
  template <class F>
  void fields(Ref obj, const Path& field, FieldNames& names, F&& on_field) {
    if (const auto st = state_dict(obj, field))
      for (size_t i = 0; i < d_.size(*st); ++i) {
        const Ref k = d_.key(*st, i);
        const std::string& name = d_.text(k);
        on_field(names.find(d_, k), name, d_.value(*st, i), Path(field, std::string_view(name)));
      }
  }
  // Calls on_field(name, value, path of the field) for each field of a dataclass's state.
  template <class F>
  void fields(Ref obj, const Path& field, F&& on_field) {
    if (const auto st = state_dict(obj, field))
      for (size_t i = 0; i < d_.size(*st); ++i) {
        const std::string& name = d_.text(d_.key(*st, i));
        on_field(name, d_.value(*st, i), Path(field, std::string_view(name)));
      }
  }

  std::string str(Ref r, const Path& field) const {
    if (d_.kind(r) != PKind::str) throw err(field, "expected str, found " + d_.type_name(r));
    return d_.text(r);
  }
  // str(r), one SharedString per distinct text. The storage entries of a key are spread over the
  // rank files' runs of storage_data and name it through the memo (one text id) or as equal text: a
  // name is copied and charged once, each text id costs a map entry.
  const SharedString& shared_str(Ref r, const Path& field) {
    if (d_.kind(r) != PKind::str) throw err(field, "expected str, found " + d_.type_name(r));
    const uint32_t id = d_.text_id(r);  // text ids count the pickle's strings from 0
    if (id >= names_by_id_.size()) {
      const size_t grown = std::max<size_t>(id + 1, 2 * names_by_id_.size());
      charge((grown - names_by_id_.size()) * sizeof(SharedString), field);
      names_by_id_.resize(grown);
    }
    SharedString& name = names_by_id_[id];
    if (name.str().empty() && !d_.text(r).empty()) {
      const std::string& text = d_.text(r);
      auto named = names_by_text_.find(text);
      if (named == names_by_text_.end()) {
        charge(kNameEntryBytes + string_heap_bytes(text.size()) + kSharedStringBytes, field);
        SharedString made(text);
        named = names_by_text_.emplace(made.str(), made).first;
      }
      name = named->second;
    }
    return name;
  }
  std::optional<std::string> opt_str(Ref r, const Path& field) const {
    if (d_.kind(r) == PKind::none) return std::nullopt;
    return str(r, field);
  }
  int64_t integer(Ref r, const Path& field) const {
    if (d_.kind(r) != PKind::integer) throw err(field, "expected int, found " + d_.type_name(r));
    return d_.as_int(r);
  }
  uint64_t u64(Ref r, const Path& field) const {
    const int64_t v = integer(r, field);
    if (v < 0) throw err(field, "is negative (" + std::to_string(v) + ")");
    return static_cast<uint64_t>(v);
  }
  bool boolean(Ref r, const Path& field) const {
    if (d_.kind(r) != PKind::boolean) throw err(field, "expected bool, found " + d_.type_name(r));
    return d_.as_bool(r);
  }
  // A sequence of ints: torch.Size(tuple) as DCP writes it, or a plain tuple or list.
  Ref int_seq(Ref r, const Path& field) const {
    if (is_object(r, kSizeClass)) {
      const Ref a = d_.args(r);
      if (d_.size(a) != 1) throw err(field, "torch.Size built with " + std::to_string(d_.size(a)) + " arguments");
      r = d_.item(a, 0);
    }
    if (d_.kind(r) != PKind::tuple && d_.kind(r) != PKind::list)
      throw err(field, "expected torch.Size, found " + d_.type_name(r));
    return r;
  }
  std::vector<uint64_t> dims(Ref r, const Path& field) const {
    const Ref s = int_seq(r, field);
    charge(heap_bytes(d_.size(s) * sizeof(uint64_t)), field);
    std::vector<uint64_t> v(d_.size(s));
    for (size_t i = 0; i < v.size(); ++i) v[i] = u64(d_.item(s, i), Path(field, i));
    return v;
  }
  void dims(Ref r, const Path& field, DimVector& v) const {
    const Ref s = int_seq(r, field);
    const size_t n = d_.size(s);
    if (n > DimVector::kInline) charge(heap_bytes(n * sizeof(uint64_t)), field);
    v.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const Ref x = d_.item(s, i);
      // The element's path is made only for the message (a million chunks have a few each).
      v[i] = d_.kind(x) == PKind::integer && d_.as_int(x) >= 0 ? static_cast<uint64_t>(d_.as_int(x)) : u64(x, Path(field, i));
    }
  }
  std::vector<int64_t> signed_dims(Ref r, const Path& field) const {
    const Ref s = int_seq(r, field);
    charge(heap_bytes(d_.size(s) * sizeof(int64_t)), field);
    std::vector<int64_t> v(d_.size(s));
    for (size_t i = 0; i < v.size(); ++i) v[i] = integer(d_.item(s, i), Path(field, i));
    return v;
  }
  std::string global_name(Ref r, const Path& field, const char* what) const {
    if (d_.kind(r) != PKind::global) throw err(field, std::string("expected a ") + what + ", found " + d_.type_name(r));
    return d_.text(r);
  }

  void properties(Ref r, const Path& field, TensorMeta& t);
  void tensor(Ref r, const Path& field, TensorMeta& t);
  void chunk(Ref r, const Path& field, ChunkMeta& c);
  void state_dict_metadata(Ref r, const Path& field);
  void storage_data(Ref r, const Path& field);
  void storage_meta(Ref r, const Path& field);
  void planner_data(Ref r);
  void resolve_storage();
  void decode_large_fields(std::optional<Ref> sdm, std::optional<Ref> sd);

  static constexpr size_t kClassSlots = 16;
  struct ClassSlot {
    uint32_t id = UINT32_MAX;
    const std::string* cls = nullptr;
  };
  const PickleDocument& d_;
  Metadata& m_;
  enum { kOffsets, kSizes };
  FieldNames chunk_fields_{"offsets", "sizes"};
  enum { kProperties, kSize, kChunks };
  FieldNames tensor_fields_{"properties", "size", "chunks"};
  enum { kFqn, kIndexOffset, kIndex };
  FieldNames index_fields_{"fqn", "offset", "index"};
  enum { kRelativePath, kInfoOffset, kLength, kTransforms };
  FieldNames info_fields_{"relative_path", "offset", "length", "transform_descriptors"};
  std::set<std::string> noted_;
  // shared_str's names: by text id, and by text for ids of equal text.
  static constexpr uint64_t kNameEntryBytes = 64;     // a hash map node and its bucket
  static constexpr uint64_t kSharedStringBytes = 48;  // make_shared's control block and string
  std::vector<SharedString> names_by_id_;
  std::unordered_map<std::string_view, SharedString> names_by_text_;
  mutable ClassSlot class_slots_[kClassSlots];
  mutable DecodeBudget::Meter meter_;
};

void Decoder::properties(Ref r, const Path& field, TensorMeta& t) {
  expect_object(r, kPropertiesClass, field);
  const auto st = d_.state(r);
  if (!st) throw err(field, "TensorProperties without state");
  auto set_dtype = [&](Ref v, const Path& f) {
    const std::string name = global_name(v, f, "torch dtype");
    const std::string prefix = "torch.";
    t.dtype = name.compare(0, prefix.size(), prefix) == 0 ? find_torch_dtype(name.substr(prefix.size())) : nullptr;
    if (!t.dtype) throw err(f, safetensors::quote_name(name) + " is not a torch dtype");
  };
  if (d_.kind(*st) == PKind::tuple) {
    // TensorProperties.__getstate__: (dtype, layout, requires_grad, memory format encoding,
    // pin_memory[, strides]).
    const size_t n = d_.size(*st);
    if (n != 5 && n != 6) throw err(field, "state tuple of " + std::to_string(n) + " items (5 or 6 expected)");
    set_dtype(d_.item(*st, 0), Path(field, "dtype"));
    t.layout = global_name(d_.item(*st, 1), Path(field, "layout"), "torch layout");
    t.requires_grad = boolean(d_.item(*st, 2), Path(field, "requires_grad"));
    const Path mf(field, "memory_format");
    const Ref enc = d_.item(*st, 3);
    if (!is_object(enc, kMemFormatClass) || d_.size(d_.args(enc)) != 1)
      throw err(mf, "expected _MEM_FORMAT_ENCODING, found " + d_.type_name(enc));
    switch (integer(d_.item(d_.args(enc), 0), mf)) {
      case 0: t.memory_format = "torch.contiguous_format"; break;
      case 1: t.memory_format = "torch.channels_last"; break;
      case 2: t.memory_format = "torch.preserve_format"; break;
      default: throw err(mf, "unknown _MEM_FORMAT_ENCODING value");
    }
    t.pin_memory = boolean(d_.item(*st, 4), Path(field, "pin_memory"));
    if (n == 6 && d_.kind(d_.item(*st, 5)) != PKind::none)
      t.strides = signed_dims(d_.item(*st, 5), Path(field, "strides"));
    return;
  }
  // A plain dataclass state, as writers without __getstate__ produce.
  bool has_dtype = false;
  fields(r, field, [&](const std::string& k, Ref v, const Path& f) {
    if (k == "dtype") {
      set_dtype(v, f);
      has_dtype = true;
    } else if (k == "layout") {
      t.layout = global_name(v, f, "torch layout");
    } else if (k == "requires_grad") {
      t.requires_grad = boolean(v, f);
    } else if (k == "memory_format") {
      t.memory_format = global_name(v, f, "torch memory format");
    } else if (k == "pin_memory") {
      t.pin_memory = boolean(v, f);
    } else if (k == "strides") {
      if (d_.kind(v) != PKind::none) t.strides = signed_dims(v, f);
    } else {
      note("TensorProperties", k);
    }
  });
  if (!has_dtype) throw err(field, "TensorProperties without dtype");
}

void Decoder::chunk(Ref r, const Path& field, ChunkMeta& c) {
  expect_object(r, kChunkClass, field);
  bool offsets = false, sizes = false;
  fields(r, field, chunk_fields_, [&](int k, const std::string& name, Ref v, const Path& f) {
    if (k == kOffsets) {
      dims(v, f, c.offsets);
      offsets = true;
    } else if (k == kSizes) {
      dims(v, f, c.sizes);
      sizes = true;
    } else {
      note("ChunkStorageMetadata", name);
    }
  });
  if (!offsets || !sizes) throw err(field, std::string("ChunkStorageMetadata without ") + (offsets ? "sizes" : "offsets"));
}

void Decoder::tensor(Ref r, const Path& field, TensorMeta& t) {
  bool props = false, size = false, chunks = false;
  fields(r, field, tensor_fields_, [&](int k, const std::string& name, Ref v, const Path& f) {
    if (k == kProperties) {
      properties(v, f, t);
      props = true;
    } else if (k == kSize) {
      t.size = dims(v, f);
      size = true;
    } else if (k == kChunks) {
      if (d_.kind(v) != PKind::list) throw err(f, "expected list, found " + d_.type_name(v));
      charge(heap_bytes(d_.size(v) * sizeof(ChunkMeta)), f);
      t.chunks.resize(d_.size(v));
      for (size_t i = 0; i < t.chunks.size(); ++i) chunk(d_.item(v, i), Path(f, i), t.chunks[i]);
      chunks = true;
    } else {
      note("TensorStorageMetadata", name);
    }
  });
  if (!props || !size || !chunks)
    throw err(field, std::string("TensorStorageMetadata without ") + (!props ? "properties" : !size ? "size" : "chunks"));
}

void Decoder::state_dict_metadata(Ref r, const Path& field) {
  if (d_.kind(r) != PKind::dict) throw err(field, "expected dict, found " + d_.type_name(r));
  charge(heap_bytes(d_.size(r) * sizeof(Entry)), field);
  m_.entries.resize(d_.size(r));
  for (size_t i = 0; i < d_.size(r); ++i) {
    Entry& e = m_.entries[i];
    e.fqn = str(d_.key(r, i), Path(Path(field, i), "key"));
    const Path f(field, &e.fqn);
    charge_string(e.fqn, f);
    const Ref v = d_.value(r, i);
    if (is_object(v, kBytesClass)) {
      expect_object(v, kBytesClass, f);
      e.is_tensor = false;
      fields(v, f, [&](const std::string& k, Ref, const Path&) { note("BytesStorageMetadata", k); });
    } else {
      expect_object(v, kTensorClass, f);
      tensor(v, f, e.tensor);
    }
  }
}

void Decoder::storage_data(Ref r, const Path& field) {
  if (d_.kind(r) == PKind::none) return;
  if (d_.kind(r) != PKind::dict) throw err(field, "expected dict, found " + d_.type_name(r));
  charge(heap_bytes(d_.size(r) * sizeof(StorageEntry)), field);
  // A million entries: 150 MB filled front to back, in huge pages where the kernel allows.
  m_.storage.reserve(d_.size(r));
  prefer_huge_pages(m_.storage.data(), m_.storage.capacity() * sizeof(StorageEntry));
  m_.storage.resize(d_.size(r));
  for (size_t i = 0; i < d_.size(r); ++i) {
    StorageEntry& s = m_.storage[i];
    const Path at(field, i);
    const Path kf(at, "key");
    const Ref k = d_.key(r, i);
    expect_object(k, kIndexClass, kf);
    bool fqn = false;
    fields(k, kf, index_fields_, [&](int field_index, const std::string& name, Ref v, const Path& f) {
      if (field_index == kFqn) {
        s.fqn = shared_str(v, f);
        fqn = true;
      } else if (field_index == kIndexOffset) {
        if (d_.kind(v) != PKind::none) dims(v, f, s.chunk_offsets.emplace());
      } else if (field_index == kIndex) {
        if (d_.kind(v) != PKind::none) s.index = integer(v, f);
      } else {
        note("MetadataIndex", name);
      }
    });
    if (!fqn) throw err(kf, "MetadataIndex without fqn");
    const Path vf(field, &s.fqn.str());
    const Ref v = d_.value(r, i);
    expect_object(v, kStorageInfoClass, vf);
    bool path = false, offset = false, length = false;
    fields(v, vf, info_fields_, [&](int field_index, const std::string& name, Ref x, const Path& f) {
      if (field_index == kRelativePath) {
        if (d_.kind(x) != PKind::str) throw err(f, "expected str, found " + d_.type_name(x));
        s.relative_path = d_.text(x);
        charge_string(s.relative_path, f);
        path = true;
      } else if (field_index == kInfoOffset) {
        s.offset = u64(x, f);
        offset = true;
      } else if (field_index == kLength) {
        s.length = u64(x, f);
        length = true;
      } else if (field_index == kTransforms) {
        if (d_.kind(x) == PKind::none) return;
        if (d_.kind(x) != PKind::list && d_.kind(x) != PKind::tuple)
          throw err(f, "expected a list, found " + d_.type_name(x));
        for (size_t j = 0; j < d_.size(x); ++j) {
          const Path fj(f, j);
          s.transform_descriptors.push_back(str(d_.item(x, j), fj));
          charge(sizeof(std::string) + string_heap_bytes(s.transform_descriptors.back().size()), fj);
        }
      } else {
        note("_StorageInfo", name);
      }
    });
    if (!path || !offset || !length)
      throw err(vf, std::string("_StorageInfo without ") + (!path ? "relative_path" : !offset ? "offset" : "length"));
  }
}

void Decoder::storage_meta(Ref r, const Path& field) {
  if (d_.kind(r) == PKind::none) return;
  expect_object(r, kStorageMetaClass, field);
  StorageMetaInfo sm;
  fields(r, field, [&](const std::string& k, Ref v, const Path& f) {
    if (k == "checkpoint_id") {
      if (d_.kind(v) == PKind::object && d_.text(v).rfind("pathlib.", 0) == 0) {
        // pathlib.PosixPath(*parts): the path is the parts joined.
        std::string path;
        const Ref a = d_.args(v);
        for (size_t i = 0; i < d_.size(a); ++i) {
          const std::string part = str(d_.item(a, i), Path(f, i));
          if (!path.empty() && path.back() != '/') path += '/';
          path += part;
        }
        sm.checkpoint_id = path;
      } else {
        sm.checkpoint_id = opt_str(v, f);
      }
    } else if (k == "save_id") {
      sm.save_id = opt_str(v, f);
    } else if (k == "load_id") {
      sm.load_id = opt_str(v, f);
    } else if (k == "modules") {
      if (d_.kind(v) != PKind::list) throw err(f, "expected list, found " + d_.type_name(v));
      for (size_t i = 0; i < d_.size(v); ++i) {
        const Path fi(f, i);
        sm.modules.push_back(str(d_.item(v, i), fi));
        charge(sizeof(std::string) + string_heap_bytes(sm.modules.back().size()), fi);
      }
    } else {
      note("StorageMeta", k);
    }
  });
  m_.storage_meta = std::move(sm);
}

void Decoder::planner_data(Ref r) {
  if (d_.kind(r) == PKind::none) return;
  // The default planner's flattening map: {fqn: (path element, ...)} with str and int elements.
  bool standard = d_.kind(r) == PKind::dict;
  for (size_t i = 0; standard && i < d_.size(r); ++i) {
    const Ref k = d_.key(r, i), v = d_.value(r, i);
    standard = d_.kind(k) == PKind::str && (d_.kind(v) == PKind::tuple || d_.kind(v) == PKind::list);
    for (size_t j = 0; standard && j < d_.size(v); ++j)
      standard = d_.kind(d_.item(v, j)) == PKind::str || d_.kind(d_.item(v, j)) == PKind::integer;
  }
  if (!standard) {
    m_.extra.emplace("planner_data", d_.to_value(r));
    return;
  }
  const Path field("planner_data");
  charge(heap_bytes(d_.size(r) * sizeof(m_.planner_data[0])), field);
  m_.planner_data.resize(d_.size(r));
  for (size_t i = 0; i < d_.size(r); ++i) {
    auto& [fqn, path] = m_.planner_data[i];
    fqn = d_.text(d_.key(r, i));
    const Path f(field, &fqn);
    const Ref v = d_.value(r, i);
    charge(string_heap_bytes(fqn.size()) + heap_bytes(d_.size(v) * sizeof(std::string)), f);
    path.reserve(d_.size(v));
    for (size_t j = 0; j < d_.size(v); ++j) {
      const Ref x = d_.item(v, j);
      path.push_back(d_.kind(x) == PKind::str ? d_.text(x) : std::to_string(d_.as_int(x)));
      charge(string_heap_bytes(path.back().size()), f);
    }
  }
}

void Decoder::resolve_storage() {
  if (m_.storage.size() >= UINT32_MAX) throw err(Path("storage_data"), "has more entries than are supported");
  const StorageIndex where(m_.storage, &m_.duplicate_storage_keys);
  for (Entry& e : m_.entries) {
    if (e.is_tensor)
      where.find_chunks(e.fqn, e.tensor.chunks);
    else
      e.storage = where.find_bytes(e.fqn);
  }
}

void Decoder::decode_large_fields(std::optional<Ref> sdm, std::optional<Ref> sd) {
  // storage_data on a second thread, with a decoder of its own (its notes and class cache), when both
  // fields are large enough to pay for it and the run may use more than one thread.
  constexpr size_t kParallelFrom = 4096;
  const bool parallel = sdm && sd && d_.kind(*sd) == PKind::dict && d_.size(*sd) >= kParallelFrom &&
                        ThreadPool::global().size() > 1;
  if (!parallel) {
    if (sdm) state_dict_metadata(*sdm, Path("state_dict_metadata"));
    if (sd) storage_data(*sd, Path("storage_data"));
    return;
  }
  Metadata storage;
  auto decoding = start_async([&] {
    Decoder(d_, storage).storage_data(*sd, Path("storage_data"));
  });
  std::exception_ptr first;
  try {
    state_dict_metadata(*sdm, Path("state_dict_metadata"));
  } catch (...) {
    first = std::current_exception();
  }
  try {
    decoding.get();
  } catch (...) {
    if (!first) first = std::current_exception();
  }
  if (first) std::rethrow_exception(first);
  m_.storage = std::move(storage.storage);
  for (std::string& line : storage.notes)
    if (noted_.insert(line).second) m_.notes.push_back(std::move(line));
}

void Decoder::run() {
  const Ref root = d_.root();
  const Path top("Metadata");
  expect_object(root, kMetadataClass, Path("root"));
  // The two large fields, decoded after the others and at the same time (they are independent).
  std::optional<Ref> sdm, sd;
  fields(root, top, [&](const std::string& k, Ref v, const Path&) {
    const Path f(k);  // fields of the root are named on their own: "storage_data[...]"
    if (k == "state_dict_metadata") {
      sdm = v;
    } else if (k == "storage_data") {
      sd = v;
    } else if (k == "storage_meta") {
      storage_meta(v, f);
    } else if (k == "version") {
      m_.version = opt_str(v, f);
    } else if (k == "planner_data") {
      planner_data(v);
    } else {
      m_.extra.emplace(k, d_.to_value(v));
      spdlog::debug("{}: kept unknown Metadata field {}", d_.file(), safetensors::quote_name(k));
    }
  });
  decode_large_fields(sdm, sd);
  if (!sdm) throw err(top, "no state_dict_metadata");
  resolve_storage();
}

}  // namespace

uint64_t TensorMeta::numel() const {
  uint64_t n = 1;
  for (uint64_t d : size) {
    if (d != 0 && n > UINT64_MAX / d) return UINT64_MAX;
    n *= d;
  }
  return n;
}

const Entry* Metadata::find(std::string_view fqn) const {
  const auto it = by_fqn_.find(std::string(fqn));
  return it == by_fqn_.end() ? nullptr : &entries[it->second];
}

size_t Metadata::chunk_count() const {
  size_t n = 0;
  for (const Entry& e : entries) n += e.is_tensor ? e.tensor.chunks.size() : 0;
  return n;
}

Metadata decode_metadata(const PickleDocument& doc) {
  Metadata m;
  m.file = doc.file();
  Decoder(doc, m).run();
  m.by_fqn_.reserve(m.entries.size());
  for (size_t i = 0; i < m.entries.size(); ++i)
    if (!m.by_fqn_.emplace(m.entries[i].fqn, i).second)
      throw FormatError(m.file + ": " + key_field("state_dict_metadata", m.entries[i].fqn) +
                        ": key appears twice");
  return m;
}

namespace {

Metadata decode_logged(const PickleDocument& doc) {
  Metadata m = decode_metadata(doc);
  spdlog::debug("{}: decoding took {} of the {} its size allows", doc.file(), byte_size(doc.budget().used()),
                byte_size(doc.budget().limit()));
  return m;
}

}  // namespace

Metadata parse_metadata(const std::string& file, const uint8_t* data, size_t size, const PickleLimits& limits) {
  return decode_logged(read_pickle(file, data, size, AllowList::dcp_metadata(), limits));
}

Metadata parse_metadata(const std::string& file, size_t size, const PickleSource& source, const PickleLimits& limits) {
  return decode_logged(read_pickle(file, size, source, AllowList::dcp_metadata(), limits));
}

}  // namespace fpg::dcp
