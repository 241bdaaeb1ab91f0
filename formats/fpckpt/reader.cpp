#include "formats/fpckpt/reader.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "ckpt/checksum.h"
#include "core/error.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/hdf5_util.h"
#include "formats/fpckpt/index_file.h"

namespace fpg::fpckpt {

struct CheckpointReader::Handles {
  std::unordered_map<uint32_t, Hid> files;     // by file index; invalid Hid = failed to open
  std::unordered_map<uint32_t, Hid> datasets;  // by run index
  std::unordered_map<uint32_t, std::string> file_errors;
};

CheckpointReader::CheckpointReader(const std::string& path) : h5_(std::make_unique<Handles>()) {
  dir_ = resolve_checkpoint(path);
  const std::string index_path = dir_ + "/" + kIndexFile;
  if (FILE* f = std::fopen(index_path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    throw FormatError(dir_ + ": not a checkpoint (no " + std::string(kIndexFile) + ")");
  }
  index_ = read_index(index_path);
  for (const auto& f : index_.files)
    if (!ckpt::valid_file_name(f.name)) throw FormatError(index_path + ": file name '" + f.name + "' is not a plain name");
  by_key_.resize(index_.keys.size());
  for (uint32_t c = 0; c < index_.chunks.size(); ++c) {
    const ckpt::Chunk& ch = index_.chunks[c];
    if (ch.run < index_.runs.size() && index_.runs[ch.run].key < by_key_.size()) by_key_[index_.runs[ch.run].key].push_back(c);
  }
  pad_by_key_.resize(index_.keys.size());
  for (const auto& p : index_.padding)
    if (p.key < pad_by_key_.size() && p.hi > p.lo) pad_by_key_[p.key].push_back({p.lo, p.hi});
  for (auto& v : pad_by_key_) std::sort(v.begin(), v.end());
  for (auto& v : by_key_)
    std::sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) { return index_.chunks[a].offset < index_.chunks[b].offset; });
}

CheckpointReader::~CheckpointReader() {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  h5_->datasets.clear();
  h5_->files.clear();
}

long CheckpointReader::find_key(const std::string& name) const { return index_.find_key(name); }

std::string CheckpointReader::read_stored(uint32_t c, std::vector<uint8_t>& stored) const {
  const ckpt::Chunk& ch = index_.chunks[c];
  if (ch.run >= index_.runs.size()) return "chunk names no run";
  const ckpt::Run& run = index_.runs[ch.run];
  if (run.file >= index_.files.size()) return "run names no file";
  const std::string path = dir_ + "/" + index_.files[run.file].name;
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  hdf5_init();
  auto fit = h5_->files.find(run.file);
  if (fit == h5_->files.end()) {
    Hid f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    // hdf5_error() also clears what opening left on this thread's error stack even when it worked:
    // records left on a pool thread that outlives the library make HDF5 complain at exit.
    if (!f.valid()) h5_->file_errors[run.file] = "cannot open: " + hdf5_error();
    else H5Eclear2(H5E_DEFAULT);
    fit = h5_->files.emplace(run.file, std::move(f)).first;
  }
  if (!fit->second.valid()) return h5_->file_errors[run.file];
  auto dit = h5_->datasets.find(ch.run);
  if (dit == h5_->datasets.end()) {
    const std::string name = std::to_string(run.dataset);
    Hid d(H5Dopen2(fit->second, name.c_str(), H5P_DEFAULT), H5Dclose);
    dit = h5_->datasets.emplace(ch.run, std::move(d)).first;
  }
  if (!dit->second.valid()) return "dataset /" + std::to_string(run.dataset) + " not found";
  if (run.chunk_elems == 0 || ch.offset < run.lo) return "chunk outside its run";
  const hsize_t at[1] = {ch.offset - run.lo};
  hsize_t size = 0;
  if (H5Dget_chunk_storage_size(dit->second, at, &size) < 0) return "chunk not stored: " + hdf5_error();
  if (size != ch.stored_bytes)
    return "stored chunk has " + std::to_string(size) + " bytes, the index records " + std::to_string(ch.stored_bytes);
  stored.resize(size);
  uint32_t mask = 0;
  if (H5Dread_chunk(dit->second, H5P_DEFAULT, at, &mask, stored.data()) < 0) return "cannot read chunk: " + hdf5_error();
  chunks_read_.fetch_add(1);
  bytes_read_.fetch_add(size);
  return "";
}

std::string CheckpointReader::verify_chunk(uint32_t c, ckpt::CodecScratch& scratch, std::vector<uint8_t>& stored,
                                           std::vector<uint8_t>& logical) const {
  std::string err = read_stored(c, stored);
  if (!err.empty()) return err;
  const ckpt::Chunk& ch = index_.chunks[c];
  const ckpt::Run& run = index_.runs[ch.run];
  if (ckpt::checksum(stored.data(), stored.size()) != ch.checksum_stored) return "stored bytes do not match their checksum";
  const size_t elem = dtype_bits(run.dtype) / 8;
  logical.resize(static_cast<size_t>(ch.length) * elem);
  err = ckpt::decode_chunk(stored.data(), stored.size(), ch.flags, ch.length, run.chunk_elems, elem, logical.data(), scratch);
  if (!err.empty()) return "cannot decode: " + err;
  if (ckpt::checksum(logical.data(), logical.size()) != ch.checksum_logical) return "decoded bytes do not match their checksum";
  return "";
}

void CheckpointReader::read(uint32_t key, uint64_t lo, uint64_t hi, void* out, ThreadPool* pool) const {
  if (key >= index_.keys.size()) throw UsageError("read: no key #" + std::to_string(key));
  const ckpt::Key& k = index_.keys[key];
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
  if (lo > hi || hi > k.numel())
    throw UsageError("key '" + k.name + "': range " + range + " is outside [0, " + std::to_string(k.numel()) + ")");
  if (lo == hi) return;
  const size_t elem = dtype_bits(k.dtype) / 8;
  auto* dst = static_cast<uint8_t*>(out);
  // Padding reads as zeros; everything else must come from a chunk.
  std::memset(dst, 0, (hi - lo) * elem);
  const auto& list = by_key_[key];
  auto first = std::partition_point(list.begin(), list.end(), [&](uint32_t c) { return index_.chunks[c].hi() <= lo; });
  // Every element of [lo, hi) must come from a chunk or declared padding.
  const auto& pads = pad_by_key_[key];
  auto covered_by_padding = [&](uint64_t from, uint64_t to) {
    auto pit = std::upper_bound(pads.begin(), pads.end(), std::make_pair(from, UINT64_MAX));
    if (pit != pads.begin()) --pit;
    for (; pit != pads.end() && from < to; ++pit)
      if (pit->first <= from && pit->second > from) from = pit->second;
    if (from < to)
      throw FormatError(dir_ + ": key '" + k.name + "': [" + std::to_string(from) + ", " + std::to_string(to) +
                        ") is covered by neither data nor padding");
  };
  std::vector<uint32_t> todo;
  uint64_t cursor = lo;
  for (auto it = first; it != list.end() && index_.chunks[*it].offset < hi; ++it) {
    const ckpt::Chunk& ch = index_.chunks[*it];
    if (ch.offset > cursor) covered_by_padding(cursor, ch.offset);
    todo.push_back(*it);
    cursor = std::max(cursor, ch.hi());
  }
  if (cursor < hi) covered_by_padding(cursor, hi);
  ThreadPool& p = pool ? *pool : ThreadPool::global();
  p.parallel_for(todo.size(), [&](size_t i) {
    thread_local ckpt::CodecScratch scratch;
    thread_local std::vector<uint8_t> stored, logical;
    const uint32_t c = todo[i];
    const ckpt::Chunk& ch = index_.chunks[c];
    const std::string err = verify_chunk(c, scratch, stored, logical);
    if (!err.empty())
      throw FormatError(dir_ + "/" + index_.files[index_.runs[ch.run].file].name + ": key '" + k.name + "' [" +
                        std::to_string(ch.offset) + ", " + std::to_string(ch.hi()) + "): " + err);
    const uint64_t a = std::max(lo, ch.offset), b = std::min(hi, ch.hi());
    std::memcpy(dst + (a - lo) * elem, logical.data() + (a - ch.offset) * elem, (b - a) * elem);
  });
}

}  // namespace fpg::fpckpt
