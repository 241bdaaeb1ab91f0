#include "formats/dcp/hf_distributed.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/shape.h"
#include "formats/dcp/safetensors_item.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/index.h"

namespace fpg::dcp {
namespace {

// "shard-" DIGITS{5,} "-model-" DIGITS{5,} "-of-" DIGITS{5,} ".safetensors": the digits of each field
// at `at`, advancing it; nullopt unless there are at least five, none past 2^53.
std::optional<uint64_t> digits(const std::string& s, size_t& at) {
  const size_t start = at;
  uint64_t v = 0;
  while (at < s.size() && s[at] >= '0' && s[at] <= '9' && at - start < 16) v = v * 10 + static_cast<uint64_t>(s[at++] - '0');
  if (at - start < 5 || (at < s.size() && s[at] >= '0' && s[at] <= '9')) return std::nullopt;
  return v;
}

bool literal(const std::string& s, size_t& at, std::string_view lit) {
  if (s.compare(at, lit.size(), lit) != 0) return false;
  at += lit.size();
  return true;
}

}  // namespace

std::optional<uint64_t> hf_shard_number(const std::string& name) {
  size_t at = 0;
  if (!literal(name, at, "shard-")) return std::nullopt;
  const auto shard = digits(name, at);
  if (!shard || !literal(name, at, "-model-") || !digits(name, at) || !literal(name, at, "-of-") || !digits(name, at) ||
      !literal(name, at, ".safetensors") || at != name.size() || *shard == 0)
    return std::nullopt;
  return shard;
}

std::vector<std::string> hf_distributed_files(const CheckpointDir& files) {
  if (files.has_regular_file(safetensors::kIndexFileName) || files.has_regular_file("model.safetensors")) return {};
  std::vector<std::pair<uint64_t, std::string>> found;
  for (const std::string& name : files.regular_files())
    if (const auto n = hf_shard_number(name)) found.emplace_back(*n, name);
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

Metadata hf_distributed_metadata(const CheckpointDir& files, const std::vector<std::string>& shards) {
  Metadata md;
  md.file = files.file_path(shards.size() == 1 ? shards.front() : shards.front() + " … " + shards.back());
  // Every shard number from 1 up to the highest: a rank whose file is missing did not finish.
  uint64_t expect = 1;
  for (const std::string& name : shards) {
    const uint64_t n = *hf_shard_number(name);
    if (n > expect)
      throw FormatError(files.path() + ": Hugging Face distributed shards (" + name + " and others) without shard " +
                        std::to_string(expect) + ": the save of that rank did not finish");
    expect = n + 1;
  }
  struct Seen {
    size_t entry;
    std::string file;
  };
  std::map<std::string, Seen, std::less<>> keys;
  for (const std::string& name : shards) {
    const SafetensorsImage img(files.open(name), 0);
    if (!img.has_sharding_info())
      throw FormatError(img.name() + ": a Hugging Face distributed shard without DCP_SHARDING_INFO in its metadata, "
                        "so its tensors cannot be placed");
    for (const safetensors::TensorInfo& t : img.reader().tensors()) {
      const std::vector<uint64_t>* offsets = img.saved_offsets(t.name);
      if (!offsets)
        throw FormatError(img.name() + ": DCP_SHARDING_INFO has no entry for tensor " + safetensors::quote_name(t.name));
      if (offsets->size() != t.shape.size())
        throw FormatError(img.name() + ": tensor " + safetensors::quote_name(t.name) + " of shape " +
                          shape_string(t.shape) + " is saved at offsets " + shape_string(*offsets) +
                          " of another arity");
      const std::string_view tname = torch_dtype_name(t.dtype);
      const TorchDType* dtype = tname.empty() ? nullptr : find_torch_dtype(tname);
      if (!dtype)
        throw FormatError(img.name() + ": tensor " + safetensors::quote_name(t.name) + " has dtype " +
                          std::string(dtype_name(t.dtype)) + ", which torch does not have");
      auto [it, fresh] = keys.try_emplace(t.name, Seen{md.entries.size(), name});
      if (fresh) {
        Entry e;
        e.fqn = t.name;
        e.tensor.dtype = dtype;
        e.tensor.size.assign(t.shape.size(), 0);
        md.entries.push_back(std::move(e));
      }
      Entry& e = md.entries[it->second.entry];
      if (e.tensor.dtype != dtype || e.tensor.size.size() != t.shape.size())
        throw FormatError(files.path() + ": key " + safetensors::quote_name(t.name) + " is " + std::string(e.tensor.dtype->name) +
                          " of " + std::to_string(e.tensor.size.size()) + " dimensions in " + it->second.file + " and " +
                          std::string(dtype->name) + " of " + std::to_string(t.shape.size()) + " in " + name);
      const bool replica = std::any_of(e.tensor.chunks.begin(), e.tensor.chunks.end(), [&](const ChunkMeta& c) {
        return c.offsets == *offsets && c.sizes == t.shape;
      });
      if (replica) continue;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if ((*offsets)[d] > UINT64_MAX - t.shape[d])
          throw FormatError(img.name() + ": tensor " + safetensors::quote_name(t.name) + " at offsets " +
                            shape_string(*offsets) + " overflows");
        e.tensor.size[d] = std::max(e.tensor.size[d], (*offsets)[d] + t.shape[d]);
      }
      StorageEntry s;
      s.fqn = SharedString(t.name);
      s.chunk_offsets = *offsets;
      s.relative_path = name;
      s.offset = 0;
      s.length = t.nbytes();
      e.tensor.chunks.push_back({*offsets, t.shape, static_cast<int64_t>(md.storage.size())});
      md.storage.push_back(std::move(s));
    }
  }
  for (size_t i = 0; i < md.entries.size(); ++i) md.by_fqn_.emplace(md.entries[i].fqn, i);
  return md;
}

}  // namespace fpg::dcp
