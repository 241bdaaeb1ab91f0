#include "formats/dcp/metadata/rank_local_metadata.h"

#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "ckpt/index.h"
#include "core/error.h"
#include "core/shape.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {

std::optional<uint64_t> rank_metadata_rank(std::string_view name) {
  constexpr std::string_view kPrefix = "__", kSuffix = ".metadata";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(name.size() - kSuffix.size()) != kSuffix)
    return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 7) return std::nullopt;  // beyond kMaxRanks, and no overflow below
  uint64_t rank = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    rank = rank * 10 + static_cast<uint64_t>(c - '0');
  }
  if (rank >= ckpt::kMaxRanks) return std::nullopt;
  return rank;
}

std::string rank_metadata_name(uint64_t rank) { return "__" + std::to_string(rank) + ".metadata"; }

namespace {

std::string describe(const Entry& e) {
  if (!e.is_tensor) return "a bytes entry";
  return "a tensor of dtype torch." + std::string(e.tensor.dtype->name) + " and size " + shape_string(e.tensor.size);
}

bool same_kind(const Entry& a, const Entry& b) {
  if (a.is_tensor != b.is_tensor) return false;
  return !a.is_tensor || (a.tensor.dtype == b.tensor.dtype && a.tensor.size == b.tensor.size);
}

}  // namespace

Metadata merge_rank_metadata(std::vector<RankMetadata> ranks, std::string file) {
  Metadata m;
  m.file = std::move(file);
  if (ranks.empty()) return m;
  Metadata& first = ranks.front().metadata;
  m.version = first.version;
  m.storage_meta = first.storage_meta;
  m.extra = first.extra;
  std::set<std::string> planned;
  std::set<std::string> notes;
  // Per merged entry: the file it came from first, for messages, and its chunks' boxes.
  std::vector<const std::string*> origin;
  std::vector<std::set<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>> boxes;
  for (RankMetadata& r : ranks) {
    Metadata& md = r.metadata;
    for (auto& [fqn, path] : md.planner_data)
      if (planned.insert(fqn).second) m.planner_data.emplace_back(fqn, std::move(path));
    for (std::string& n : md.notes)
      if (notes.insert(n).second) m.notes.push_back(std::move(n));
    m.duplicate_storage_keys += md.duplicate_storage_keys;
    std::vector<bool> used(md.storage.size(), false);
    auto take_storage = [&](int64_t s) -> int64_t {
      if (s == kNoStorage) return kNoStorage;
      used[static_cast<size_t>(s)] = true;
      m.storage.push_back(md.storage[static_cast<size_t>(s)]);
      return static_cast<int64_t>(m.storage.size() - 1);
    };
    for (Entry& e : md.entries) {
      const auto it = m.by_fqn_.find(e.fqn);
      if (it == m.by_fqn_.end()) {
        Entry out = std::move(e);
        if (out.is_tensor) {
          boxes.emplace_back();
          for (ChunkMeta& c : out.tensor.chunks) {
            c.storage = take_storage(c.storage);
            boxes.back().emplace(c.offsets, c.sizes);
          }
        } else {
          boxes.emplace_back();
          out.storage = take_storage(out.storage);
        }
        m.by_fqn_.emplace(out.fqn, m.entries.size());
        m.entries.push_back(std::move(out));
        origin.push_back(&md.file);
        continue;
      }
      Entry& into = m.entries[it->second];
      if (!same_kind(into, e))
        throw FormatError(md.file + ": key " + safetensors::quote_name(e.fqn) + " is " + describe(e) + ", " +
                          *origin[it->second] + " has it as " + describe(into) +
                          ": the ranks' metadata do not describe one checkpoint");
      if (!e.is_tensor) continue;  // the lowest rank's bytes entry
      auto& seen = boxes[it->second];
      for (ChunkMeta& c : e.tensor.chunks) {
        if (!seen.emplace(c.offsets, c.sizes).second) continue;  // a replica an earlier rank wrote
        c.storage = take_storage(c.storage);
        into.tensor.chunks.push_back(std::move(c));
      }
    }
    // Storage entries no entry of this rank refers to are kept: validation reports what they are.
    for (size_t s = 0; s < md.storage.size(); ++s)
      if (!used[s] && !md.find(md.storage[s].fqn)) m.storage.push_back(std::move(md.storage[s]));
  }
  return m;
}

}  // namespace fpg::dcp
