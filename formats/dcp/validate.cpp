#include "formats/dcp/validate.h"

#include <spdlog/spdlog.h>

#include <map>

#include "ckpt/capped_problems.h"
#include "core/error.h"
#include "core/shape.h"
#include "formats/dcp/metadata/box_coverage.h"

namespace fpg::dcp {

using ckpt::Problem;
using ckpt::ProblemKind;

namespace {

using u128 = unsigned __int128;

uint64_t clamp64(u128 v) { return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v); }

// Row-major flat [first element, one past the last element] of a box (saturating).
std::pair<uint64_t, uint64_t> flat_range(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& offsets,
                                         const std::vector<uint64_t>& sizes) {
  if (offsets.size() != shape.size() || sizes.size() != shape.size()) return {0, 0};
  u128 lo = 0, last = 0, stride = 1;
  bool empty = false;
  for (size_t d = shape.size(); d-- > 0;) {
    lo += static_cast<u128>(offsets[d]) * stride;
    if (sizes[d] == 0) empty = true;
    last += static_cast<u128>(offsets[d] + (sizes[d] ? sizes[d] - 1 : 0)) * stride;
    stride *= shape[d];
    if (stride > UINT64_MAX) stride = static_cast<u128>(UINT64_MAX) + 1;  // keeps the products bounded
  }
  return {clamp64(lo), empty ? clamp64(lo) : clamp64(last + 1)};
}

bool numel_overflows(const std::vector<uint64_t>& shape) {
  u128 n = 1;
  for (uint64_t d : shape) {
    n *= d;
    if (n > UINT64_MAX) return true;
  }
  return false;
}

std::string file_of(const Metadata& m, const ChunkMeta& c) {
  return c.storage == kNoStorage ? std::string() : m.storage[static_cast<size_t>(c.storage)].relative_path;
}

Problem box_problem(ProblemKind kind, const Entry& e, const std::vector<uint64_t>& offsets,
                    const std::vector<uint64_t>& sizes, std::string file, std::string message) {
  const auto [lo, hi] = flat_range(e.tensor.size, offsets, sizes);
  return Problem{kind, e.fqn, lo, hi, std::move(file), std::move(message)};
}

void check_tensor(const Metadata& m, const Entry& e, ckpt::CappedProblems& out) {
  const TensorMeta& t = e.tensor;
  const size_t nd = t.size.size();
  const bool overflow = numel_overflows(t.size);
  if (overflow)
    out.add({ProblemKind::shape, e.fqn, 0, 0, "", "size " + shape_string(t.size) + " overflows 64 bits"});
  std::vector<BoxView> boxes;
  std::vector<size_t> chunk_of;
  boxes.reserve(t.chunks.size());
  chunk_of.reserve(t.chunks.size());
  auto chunk = [](size_t i) { return "chunk " + std::to_string(i); };
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const ChunkMeta& c = t.chunks[i];
    if (c.offsets.size() != nd || c.sizes.size() != nd) {
      out.add({ProblemKind::shape, e.fqn, 0, 0, file_of(m, c),
                     chunk(i) + " has offsets " + shape_string(c.offsets) + " and sizes " + shape_string(c.sizes) +
                         " for a " + std::to_string(nd) + "-dimensional tensor of size " + shape_string(t.size)});
      continue;
    }
    bool inside = true;
    for (size_t d = 0; d < nd; ++d) inside = inside && c.offsets[d] <= t.size[d] && c.sizes[d] <= t.size[d] - c.offsets[d];
    if (c.storage == kNoStorage)
      out.add(box_problem(ProblemKind::missing_file, e, c.offsets, c.sizes, "",
                                chunk(i) + " " + box_string(c.offsets, c.sizes) + " has no storage_data entry"));
    if (!inside) {
      out.add(box_problem(ProblemKind::out_of_bounds, e, c.offsets, c.sizes, file_of(m, c),
                                chunk(i) + " " + box_string(c.offsets, c.sizes) + " lies outside the tensor's size " +
                                    shape_string(t.size)));
      continue;
    }
    boxes.push_back({c.offsets.data(), c.sizes.data()});
    chunk_of.push_back(i);
  }
  if (overflow) return;
  const CoverageResult cov = check_box_coverage(t.size, boxes);
  for (const CoverageIssue& is : cov.issues) {
    if (is.kind == CoverageIssue::Kind::gap) {
      out.add(box_problem(ProblemKind::gap, e, is.box.offsets, is.box.sizes, "",
                                box_string(is.box.offsets, is.box.sizes) + " is covered by no chunk"));
    } else {
      const ChunkMeta& a = t.chunks[chunk_of[is.a]];
      const ChunkMeta& b = t.chunks[chunk_of[is.b]];
      out.add(box_problem(ProblemKind::overlap, e, is.box.offsets, is.box.sizes, file_of(m, b),
                                "chunk " + std::to_string(chunk_of[is.a]) + " " + box_string(a.offsets, a.sizes) +
                                    " and chunk " + std::to_string(chunk_of[is.b]) + " " +
                                    box_string(b.offsets, b.sizes) + " overlap in " +
                                    box_string(is.box.offsets, is.box.sizes)));
    }
  }
  if (cov.more_gaps)
    out.add_summary({ProblemKind::gap, e.fqn, 0, 0, "", std::to_string(cov.more_gaps) + " more uncovered boxes not listed"});
  if (cov.more_overlaps)
    out.add_summary({ProblemKind::overlap, e.fqn, 0, 0, "", std::to_string(cov.more_overlaps) + " more overlaps not listed"});
  if (cov.budget_exceeded) {
    // The exact search stopped; DCP's own rule still applies.
    u128 volume = 0;
    for (const BoxView& b : boxes) {
      u128 v = 1;
      for (size_t d = 0; d < nd; ++d) v *= b.sizes[d];
      volume += v;
    }
    const u128 numel = t.numel();
    spdlog::debug("{}: key {}: coverage search stopped at its work limit; volumes checked", m.file, e.fqn);
    if (volume != numel)
      out.add({volume < numel ? ProblemKind::gap : ProblemKind::overlap, e.fqn, 0, t.numel(), "",
                     "the chunks' volumes sum to " + std::to_string(clamp64(volume)) + ", the tensor has " +
                         std::to_string(t.numel()) + " elements"});
  }
}

// Both serializations store a chunk's elements uncompressed, TORCH_SAVE in a zip of stored entries
// with its headers, SAFETENSORS as the range of the file's image that holds them, so an item shorter
// than the chunk's elements cannot hold them, whatever the file holds. An item behind stream
// transforms (compressed, say) is only known to be non-empty when the chunk is.
void check_item_lengths(const Metadata& m, ckpt::CappedProblems& out) {
  for (const Entry& e : m.entries) {
    if (!e.is_tensor) continue;
    for (size_t i = 0; i < e.tensor.chunks.size(); ++i) {
      const ChunkMeta& c = e.tensor.chunks[i];
      if (c.storage == kNoStorage) continue;  // check_tensor reports it
      const StorageEntry& s = m.storage[static_cast<size_t>(c.storage)];
      u128 elements = 1;
      for (uint64_t d : c.sizes) elements = elements * d > UINT64_MAX ? static_cast<u128>(UINT64_MAX) + 1 : elements * d;
      const u128 bytes = elements * e.tensor.dtype->element_bytes;
      const u128 need = s.transform_descriptors.empty() ? bytes : bytes > 0 ? 1 : 0;
      if (s.length >= need) continue;
      const std::string what = std::to_string(clamp64(elements)) + " " + std::string(e.tensor.dtype->name) +
                               " elements (" + std::to_string(clamp64(bytes)) + " bytes" +
                               (s.transform_descriptors.empty() ? ")" : ", stream-transformed)");
      out.add(box_problem(ProblemKind::truncated_file, e, c.offsets, c.sizes, s.relative_path,
                          "chunk " + std::to_string(i) + " " + box_string(c.offsets, c.sizes) + ": its item of " +
                              std::to_string(s.length) + " bytes at offset " + std::to_string(s.offset) + " cannot hold " +
                              what));
    }
  }
}

}  // namespace

std::string box_string(const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes) {
  if (offsets.size() != sizes.size()) return "offsets " + shape_string(offsets) + " sizes " + shape_string(sizes);
  std::string s = "[";
  for (size_t d = 0; d < offsets.size(); ++d) {
    if (d) s += ", ";
    s += std::to_string(offsets[d]) + ":" + std::to_string(clamp64(static_cast<u128>(offsets[d]) + sizes[d]));
  }
  return s + "]";
}

std::vector<Problem> check_metadata(const Metadata& m) {
  std::vector<Problem> out;
  ckpt::CappedProblems capped(out);
  for (const Entry& e : m.entries) {
    if (e.is_tensor)
      check_tensor(m, e, capped);
    else if (e.storage == kNoStorage)
      capped.add({ProblemKind::missing_file, e.fqn, 0, 0, "", "bytes entry has no storage_data entry"});
  }
  capped.finish();
  return out;
}

std::vector<Problem> check_storage(const Metadata& m, const CheckpointDir& dir) {
  // Each file is checked and opened once, at its first entry; entries mostly come file by file, so
  // the file of the previous entry is tried before the map.
  struct FileCheck {
    size_t first = 0;   // its first storage entry
    uint64_t items = 0;
    std::string refused;  // why the file cannot be used ("" when it can)
    uint64_t size = 0;
  };
  std::vector<Problem> out;
  ckpt::CappedProblems capped(out);
  check_item_lengths(m, capped);
  std::map<std::string, FileCheck> files;
  FileCheck* last = nullptr;
  const std::string* last_path = nullptr;
  for (size_t i = 0; i < m.storage.size(); ++i) {
    const StorageEntry& s = m.storage[i];
    if (!last || *last_path != s.relative_path) {
      auto [it, fresh] = files.try_emplace(s.relative_path);
      last = &it->second;
      last_path = &it->first;
      if (fresh) {
        last->first = i;
        if (!CheckpointDir::is_plain_name(s.relative_path)) {
          last->refused = "is not a plain file name inside the checkpoint directory; refused";
        } else {
          try {
            last->size = dir.open(s.relative_path)->size();
          } catch (const FormatError& ex) {
            last->refused = ex.what();
          }
        }
      }
    }
    ++last->items;
    if (last->refused.empty() && (s.offset > last->size || s.length > last->size - s.offset))
      capped.add({ProblemKind::truncated_file, s.fqn, s.offset, clamp64(static_cast<u128>(s.offset) + s.length),
                     s.relative_path, "stored item runs past the end of the file (" + std::to_string(last->size) + " bytes)"});
  }
  for (const auto& [path, f] : files) {
    if (f.refused.empty()) continue;
    const std::string items = std::to_string(f.items) + (f.items == 1 ? " item" : " items");
    const std::string& first_key = m.storage[f.first].fqn;
    if (!CheckpointDir::is_plain_name(path))
      out.push_back({ProblemKind::missing_file, first_key, 0, 0, path, "relative_path of " + items + " " + f.refused});
    else
      out.push_back({ProblemKind::missing_file, first_key, 0, 0, path, items + ": " + f.refused});
  }
  capped.finish();
  return out;
}

std::vector<Problem> check_items(const Reader& r, uint64_t* items_read, uint64_t* bytes_read) {
  const Metadata& m = r.metadata();
  std::vector<Problem> out;
  ckpt::CappedProblems capped(out);
  // Items whose file or range check_storage reports are skipped here.
  auto readable = [&](int64_t storage) {
    if (storage == kNoStorage) return false;
    const StorageEntry& s = m.storage[static_cast<size_t>(storage)];
    if (!CheckpointDir::is_plain_name(s.relative_path)) return false;
    try {
      const auto f = r.files().open(s.relative_path);
      return s.offset <= f->size() && s.length <= f->size() - s.offset;
    } catch (const FormatError&) {
      return false;
    }
  };
  std::vector<uint8_t> buffer;
  for (const Entry& e : m.entries) {
    if (!e.is_tensor) {
      if (!readable(e.storage)) continue;
      const StorageEntry& s = m.storage[static_cast<size_t>(e.storage)];
      try {
        r.read_object(e);
        ++*items_read;
        *bytes_read += s.length;
      } catch (const FormatError& ex) {
        capped.add({ProblemKind::checksum, e.fqn, 0, 0, s.relative_path, ex.what()});
      }
      continue;
    }
    for (size_t i = 0; i < e.tensor.chunks.size(); ++i) {
      const ChunkMeta& c = e.tensor.chunks[i];
      if (!readable(c.storage)) continue;
      const StorageEntry& s = m.storage[static_cast<size_t>(c.storage)];
      const std::string chunk = "chunk " + std::to_string(i) + " " + box_string(c.offsets, c.sizes);
      try {
        r.stored_chunk_bytes(e, i);
      } catch (const FormatError&) {
        continue;  // an item too short for its chunk: check_storage reports it, and it is not read
      }
      try {
        const StoredChunk sc = r.open_chunk(e, i);
        if (&sc.dtype() != e.tensor.dtype) {
          capped.add(box_problem(ProblemKind::dtype, e, c.offsets, c.sizes, s.relative_path,
                                    chunk + " is stored as " + std::string(sc.dtype().name) + ", the metadata says " +
                                        std::string(e.tensor.dtype->name)));
          continue;
        }
        if (sc.shape() != c.sizes) {
          capped.add(box_problem(ProblemKind::shape, e, c.offsets, c.sizes, s.relative_path,
                                    chunk + " is stored with shape " + shape_string(sc.shape())));
          continue;
        }
        buffer.resize(static_cast<size_t>(sc.nbytes()));
        sc.read(buffer.data());
        ++*items_read;
        *bytes_read += s.length;
      } catch (const FormatError& ex) {
        capped.add(box_problem(ProblemKind::checksum, e, c.offsets, c.sizes, s.relative_path, chunk + ": " + ex.what()));
      }
    }
  }
  capped.finish();
  return out;
}

ValidationReport validate(const Reader& r, const ValidateOptions& options) {
  ValidationReport rep;
  const Metadata& m = r.metadata();
  for (const Entry& e : m.entries) {
    if (e.is_tensor) {
      ++rep.tensors;
      rep.chunks += e.tensor.chunks.size();
    } else {
      ++rep.bytes_entries;
    }
  }
  rep.problems = check_metadata(m);
  std::vector<Problem> storage = check_storage(m, r.files());
  rep.problems.insert(rep.problems.end(), storage.begin(), storage.end());
  if (options.data) {
    std::vector<Problem> items = check_items(r, &rep.items_read, &rep.bytes_read);
    rep.problems.insert(rep.problems.end(), items.begin(), items.end());
  }
  ckpt::sort_problems(rep.problems);
  return rep;
}

}  // namespace fpg::dcp

namespace fpg::dcp {

void require_valid(const Reader& r, const std::string& refusing) {
  const ValidationReport rep = validate(r);
  if (rep.ok()) return;
  constexpr size_t kListed = 20;
  const size_t n = rep.problems.size();
  std::string msg = r.dir() + ": not a valid checkpoint (" + std::to_string(n) + " problem" + (n == 1 ? "" : "s") +
                    "); refusing to " + refusing + ":";
  for (size_t i = 0; i < n && i < kListed; ++i) msg += "\n  " + ckpt::to_string(rep.problems[i]);
  if (n > kListed) msg += "\n  ... and " + std::to_string(n - kListed) + " more (`fpgather validate` lists them all)";
  throw Error(ExitCode::check_failed, msg);
}

}  // namespace fpg::dcp
