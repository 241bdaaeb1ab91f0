#include "ckpt/coverage.h"

#include <sys/stat.h>

#include <algorithm>

namespace fpg::ckpt {
namespace {

struct Flat {
  uint32_t key;
  uint32_t source;  // chunk index, or padding index | kPadBit
  uint64_t lo, hi;
};
constexpr uint32_t kPadBit = 0x80000000u;

bool flat_less(const Flat& a, const Flat& b) {
  if (a.key != b.key) return a.key < b.key;
  if (a.lo != b.lo) return a.lo < b.lo;
  return a.hi < b.hi;
}

std::string file_of(const Index& ix, uint32_t file) {
  return file < ix.files.size() ? ix.files[file].name : std::string();
}

}  // namespace

std::vector<Problem> check_index(const Index& ix) {
  std::vector<Problem> out;
  const auto nk = static_cast<uint32_t>(ix.keys.size());
  auto key_name = [&](uint32_t k) { return k < nk ? ix.keys[k].name : std::string(); };

  std::vector<uint64_t> numel(nk, 0);
  std::vector<char> bad_key(nk, 0);
  for (uint32_t k = 0; k < nk; ++k) {
    const Key& key = ix.keys[k];
    const auto n = key.checked_numel();
    if (!n) {
      out.push_back({ProblemKind::shape, key.name, 0, 0, "", "shape " + shape_string(key.shape) + " overflows 64 bits"});
      bad_key[k] = 1;
      continue;
    }
    numel[k] = *n;
    if (dtype_bits(key.dtype) % 8 != 0) {
      out.push_back({ProblemKind::dtype, key.name, 0, *n, "",
                     "dtype " + std::string(dtype_name(key.dtype)) + " has no whole-byte elements"});
      bad_key[k] = 1;
    }
  }

  // Runs: references and dtype.
  std::vector<char> bad_run(ix.runs.size(), 0);
  for (size_t r = 0; r < ix.runs.size(); ++r) {
    const Run& run = ix.runs[r];
    if (run.key >= nk) {
      out.push_back({ProblemKind::out_of_bounds, "", run.lo, run.hi(), file_of(ix, run.file),
                     "run " + std::to_string(r) + " names key #" + std::to_string(run.key) + ", which does not exist"});
      bad_run[r] = 1;
      continue;
    }
    const Key& key = ix.keys[run.key];
    if (run.file >= ix.files.size()) {
      out.push_back({ProblemKind::missing_file, key.name, run.lo, run.hi(), "",
                     "run " + std::to_string(r) + " names file #" + std::to_string(run.file) + ", which is not in the file table"});
      bad_run[r] = 1;
    }
    if (run.dtype != key.dtype) {
      out.push_back({ProblemKind::dtype, key.name, run.lo, run.hi(), file_of(ix, run.file),
                     "stored as " + std::string(dtype_name(run.dtype)) + ", key is " + std::string(dtype_name(key.dtype))});
    }
    if (run.chunk_elems == 0) {
      out.push_back({ProblemKind::shape, key.name, run.lo, run.hi(), file_of(ix, run.file), "run has chunks of 0 elements"});
      bad_run[r] = 1;
    }
  }

  // Chunks: on their run's grid, with consistent sizes; collect intervals.
  std::vector<Flat> flat;
  flat.reserve(ix.chunks.size() + ix.padding.size());
  bool sorted = true;
  auto push = [&](const Flat& f) {
    if (!flat.empty() && flat_less(f, flat.back())) sorted = false;
    flat.push_back(f);
  };
  for (size_t c = 0; c < ix.chunks.size(); ++c) {
    const Chunk& ch = ix.chunks[c];
    if (ch.run >= ix.runs.size()) {
      out.push_back({ProblemKind::out_of_bounds, "", ch.offset, ch.hi(), "",
                     "chunk " + std::to_string(c) + " names run #" + std::to_string(ch.run) + ", which does not exist"});
      continue;
    }
    if (bad_run[ch.run]) continue;
    const Run& run = ix.runs[ch.run];
    const Key& key = ix.keys[run.key];
    const std::string& file = file_of(ix, run.file);
    const uint64_t grid = ch.offset >= run.lo ? ch.offset - run.lo : 0;
    if (ch.offset < run.lo || ch.hi() > run.hi() || grid % run.chunk_elems != 0) {
      out.push_back({ProblemKind::out_of_bounds, key.name, ch.offset, ch.hi(), file,
                     "chunk is not on the chunk grid of its run [" + std::to_string(run.lo) + ", " +
                         std::to_string(run.hi()) + ") of " + std::to_string(run.chunk_elems) + "-element chunks"});
    } else if (ch.length != std::min<uint64_t>(run.chunk_elems, run.hi() - ch.offset)) {
      out.push_back({ProblemKind::shape, key.name, ch.offset, ch.hi(), file,
                     "chunk holds " + std::to_string(ch.length) + " elements, its run's grid says " +
                         std::to_string(std::min<uint64_t>(run.chunk_elems, run.hi() - ch.offset))});
    } else if (!(ch.flags & kFilterZstd) && !bad_key[run.key] && run.dtype == key.dtype &&
               ch.stored_bytes != dtype_bytes(run.dtype, run.chunk_elems)) {
      out.push_back({ProblemKind::shape, key.name, ch.offset, ch.hi(), file,
                     "uncompressed chunk stores " + std::to_string(ch.stored_bytes) + " bytes, expected " +
                         std::to_string(dtype_bytes(run.dtype, run.chunk_elems))});
    } else if ((ch.flags & ~run.filters) != 0) {
      out.push_back({ProblemKind::shape, key.name, ch.offset, ch.hi(), file,
                     "chunk flags name a filter its dataset does not have"});
    }
    if (ch.length == 0) continue;
    push({run.key, static_cast<uint32_t>(c), ch.offset, ch.hi()});
  }
  for (size_t p = 0; p < ix.padding.size(); ++p) {
    const Padding& pad = ix.padding[p];
    if (pad.key >= nk) {
      out.push_back({ProblemKind::out_of_bounds, "", pad.lo, pad.hi, "",
                     "padding names key #" + std::to_string(pad.key) + ", which does not exist"});
      continue;
    }
    if (pad.hi <= pad.lo) {
      out.push_back({ProblemKind::out_of_bounds, key_name(pad.key), pad.lo, pad.hi, "", "empty or reversed padding interval"});
      continue;
    }
    push({pad.key, static_cast<uint32_t>(p) | kPadBit, pad.lo, pad.hi});
  }
  if (!sorted) std::sort(flat.begin(), flat.end(), flat_less);

  // The sweep: per key, a cursor that every interval must start at.
  auto describe = [&](uint32_t source) {
    if (source & kPadBit) return std::string("declared padding");
    return "a chunk in " + ix.run_file_name(ix.chunks[source].run);
  };
  auto file_of_source = [&](uint32_t source) {
    return (source & kPadBit) ? std::string() : ix.run_file_name(ix.chunks[source].run);
  };
  size_t i = 0;
  for (uint32_t k = 0; k < nk; ++k) {
    const uint64_t n = numel[k];
    uint64_t cursor = 0;
    uint32_t cursor_source = 0;
    bool any = false;
    for (; i < flat.size() && flat[i].key == k; ++i) {
      const Flat& f = flat[i];
      if (bad_key[k]) continue;
      uint64_t lo = f.lo, hi = f.hi;
      if (hi > n) {
        out.push_back({ProblemKind::out_of_bounds, ix.keys[k].name, lo, hi, file_of_source(f.source),
                       describe(f.source) + " reaches past the key's extent " + std::to_string(n)});
        if (lo >= n) continue;
        hi = n;
      }
      if (lo > cursor) {
        out.push_back({ProblemKind::gap, ix.keys[k].name, cursor, lo, "", "not covered by data or declared padding"});
      } else if (lo < cursor && any) {
        out.push_back({ProblemKind::overlap, ix.keys[k].name, lo, std::min(hi, cursor), file_of_source(f.source),
                       describe(f.source) + " overlaps " + describe(cursor_source)});
      }
      if (hi > cursor || !any) {
        cursor = std::max(cursor, hi);
        cursor_source = f.source;
      }
      any = true;
    }
    if (!bad_key[k] && cursor < n)
      out.push_back({ProblemKind::gap, ix.keys[k].name, cursor, n, "", "not covered by data or declared padding"});
  }
  return out;
}

std::vector<Problem> check_files(const Index& ix, const std::string& dir) {
  std::vector<Problem> out;
  // The first run in each file names a key and range in the report.
  std::vector<long> first_run(ix.files.size(), -1);
  std::vector<uint64_t> runs_in(ix.files.size(), 0);
  for (size_t r = 0; r < ix.runs.size(); ++r) {
    const uint32_t f = ix.runs[r].file;
    if (f >= ix.files.size()) continue;
    if (first_run[f] < 0) first_run[f] = static_cast<long>(r);
    ++runs_in[f];
  }
  for (size_t f = 0; f < ix.files.size(); ++f) {
    const FileEntry& fe = ix.files[f];
    Problem p;
    p.file = fe.name;
    if (first_run[f] >= 0) {
      const Run& run = ix.runs[first_run[f]];
      p.key = run.key < ix.keys.size() ? ix.keys[run.key].name : "";
      p.lo = run.lo;
      p.hi = run.hi();
    }
    const std::string more = runs_in[f] > 1 ? " (and " + std::to_string(runs_in[f] - 1) + " more runs in it)" : "";
    struct stat st {};
    if (!valid_file_name(fe.name)) {
      p.kind = ProblemKind::missing_file;
      p.message = "file name is not a plain name inside the checkpoint";
      out.push_back(p);
    } else if (lstat((dir + "/" + fe.name).c_str(), &st) != 0) {
      p.kind = ProblemKind::missing_file;
      p.message = "data file not found" + more;
      out.push_back(p);
    } else if (!S_ISREG(st.st_mode)) {  // a symbolic link, FIFO or device is never read
      p.kind = ProblemKind::missing_file;
      p.message = "data file is not a regular file" + more;
      out.push_back(p);
    } else if (static_cast<uint64_t>(st.st_size) != fe.size) {
      p.kind = ProblemKind::truncated_file;
      p.message = "file has " + std::to_string(st.st_size) + " bytes, the index records " + std::to_string(fe.size) + more;
      out.push_back(p);
    }
  }
  return out;
}

std::vector<std::vector<KeyInterval>> intervals_by_key(const Index& ix) {
  std::vector<std::vector<KeyInterval>> out(ix.keys.size());
  for (size_t c = 0; c < ix.chunks.size(); ++c) {
    const Chunk& ch = ix.chunks[c];
    if (ch.run >= ix.runs.size() || ix.runs[ch.run].key >= ix.keys.size()) continue;
    out[ix.runs[ch.run].key].push_back({ch.offset, ch.hi(), false, static_cast<uint32_t>(c)});
  }
  for (size_t p = 0; p < ix.padding.size(); ++p)
    if (ix.padding[p].key < ix.keys.size())
      out[ix.padding[p].key].push_back({ix.padding[p].lo, ix.padding[p].hi, true, static_cast<uint32_t>(p)});
  for (auto& v : out)
    std::sort(v.begin(), v.end(), [](const KeyInterval& a, const KeyInterval& b) {
      return a.lo != b.lo ? a.lo < b.lo : a.hi < b.hi;
    });
  return out;
}

}  // namespace fpg::ckpt
