#include "core/printable.h"
#include "core/fs.h"
#include "formats/fpckpt/rank_writer.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>

#include "ckpt/checksum.h"
#include "core/error.h"
#include "formats/fpckpt/chunk_pipeline.h"
#include "formats/fpckpt/hdf5_util.h"

namespace fpg::fpckpt {

struct RankWriter::H5 {
  std::string path;
  OutputFile file;
  std::unique_ptr<ChunkPipeline> chunks;  // ended before the file is closed
};

std::string rank_file_name(uint32_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05u.h5", rank);
  return buf;
}

RankWriter::RankWriter(std::string dir, uint32_t rank, WriteOptions opts) : dir_(std::move(dir)), opts_(opts) {
  manifest_.rank = rank;
  if (opts_.chunk_bytes == 0) throw UsageError("checkpoint chunk size must be positive");
}

RankWriter::~RankWriter() {
  if (h5_ && h5_->file.is_open()) {
    // Abandoned mid-save (an exception): nothing more of this file may fail to be written, not the
    // chunks still in flight nor the datasets' and the file's closing (OutputFile).
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    divert_writes(h5_->file);
  }
  if (h5_) h5_->chunks.reset();  // waits for the chunks in flight
  if (h5_ && h5_->file.is_open()) {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    h5_->file.abandon();
    // A writer abandoned mid-save (an exception) ends here. Leave this thread no error records
    // (HDF5 notes the unregistered zstd filter even when all goes well): a thread-safe HDF5 does not
    // free them when the thread ends and complains at exit ("infinite loop closing library").
    H5Eclear2(H5E_DEFAULT);
  }
}

uint32_t RankWriter::declare(const ckpt::Key& key) {
  if (finished_) throw InternalError("RankWriter used after finish()");
  if (!ckpt::valid_key_name(key.name)) throw UsageError("checkpoint key name " + quoted_name(key.name) + " is empty, too long or has control characters");
  if (!key.checked_numel()) throw UsageError("checkpoint key " + quoted_name(key.name) + ": shape " + shape_string(key.shape) + " overflows");
  if (dtype_bits(key.dtype) % 8 != 0)
    throw UsageError("checkpoint key " + quoted_name(key.name) + ": dtype " + std::string(dtype_name(key.dtype)) + " has sub-byte elements, which the format does not store");
  const auto it = key_of_.find(key.name);
  if (it != key_of_.end()) {
    const ckpt::Key& k = manifest_.keys[it->second];
    if (k.dtype != key.dtype || k.shape != key.shape || k.kind != key.kind)
      throw UsageError("checkpoint key " + quoted_name(key.name) + " declared twice with different dtype, shape or kind");
    return it->second;
  }
  const auto id = static_cast<uint32_t>(manifest_.keys.size());
  manifest_.keys.push_back(key);
  key_of_.emplace(key.name, id);
  return id;
}

void RankWriter::declare_padding(uint32_t key, uint64_t lo, uint64_t hi) {
  if (key >= manifest_.keys.size()) throw InternalError("RankWriter::declare_padding: undeclared key");
  const ckpt::Key& k = manifest_.keys[key];
  if (lo >= hi || hi > k.numel())
    throw UsageError("checkpoint key " + quoted_name(k.name) + ": padding [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     ") is empty or outside [0, " + std::to_string(k.numel()) + ")");
  manifest_.padding.push_back({key, lo, hi});
}

void RankWriter::open_file() {
  h5_ = std::make_unique<H5>();
  manifest_.file.name = rank_file_name(manifest_.rank);
  manifest_.file.rank = manifest_.rank;
  h5_->path = dir_ + "/" + manifest_.file.name;
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  hdf5_init();
  Hid fcpl = checked(H5Pcreate(H5P_FILE_CREATE), H5Pclose, h5_->path, "property list");
  H5Pset_obj_track_times(fcpl, 0);
  h5_->file = OutputFile(
      checked(H5Fcreate(h5_->path.c_str(), H5F_ACC_EXCL, fcpl, H5P_DEFAULT), H5Fclose, h5_->path, "create data file"),
      h5_->path);
  int vfd = -1;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(h5_->file, H5P_DEFAULT, &handle) >= 0 && handle) vfd = *static_cast<int*>(handle);
  h5_->chunks = std::make_unique<ChunkPipeline>(h5_->path, vfd, opts_.compression,
                                                opts_.tasks ? *opts_.tasks : TaskQueue::global());
}

namespace {

// HDF5 has no bf16 or FP8 type: those are stored as unsigned integers of their width, with a `dtype`
// attribute naming the real type.
hid_t storage_type(DType t) {
  switch (t) {
    case DType::F32: return H5T_IEEE_F32LE;
    case DType::F64: return H5T_IEEE_F64LE;
    case DType::I8: return H5T_STD_I8LE;
    case DType::I16: return H5T_STD_I16LE;
    case DType::I32: return H5T_STD_I32LE;
    case DType::I64: return H5T_STD_I64LE;
    case DType::U16: return H5T_STD_U16LE;
    case DType::U32: return H5T_STD_U32LE;
    case DType::U64: return H5T_STD_U64LE;
    default: break;
  }
  switch (dtype_bits(t)) {
    case 16: return H5T_STD_U16LE;
    case 32: return H5T_STD_U32LE;
    case 64: return H5T_STD_U64LE;
    default: return H5T_STD_U8LE;  // 8-bit types; C64 is stored as bytes too
  }
}

void string_attr(hid_t obj, const char* name, const std::string& v) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, std::max<size_t>(1, v.size()));
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (a.valid()) H5Awrite(a, type, v.c_str());
}

void u64_attr(hid_t obj, const char* name, uint64_t v) {
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (a.valid()) H5Awrite(a, H5T_NATIVE_UINT64, &v);
}

}  // namespace

void RankWriter::write(uint32_t key, uint64_t lo, const void* data, uint64_t numel) {
  write_run(key, lo, data, numel, false);
}

void RankWriter::write_borrowed(uint32_t key, uint64_t lo, const void* data, uint64_t numel) {
  write_run(key, lo, data, numel, true);
}

uint64_t RankWriter::mark() const { return h5_ && h5_->chunks ? h5_->chunks->mark() : 0; }

void RankWriter::fence(uint64_t mark) {
  if (h5_ && h5_->chunks) h5_->chunks->fence(mark);
}

void RankWriter::write_run(uint32_t key, uint64_t lo, const void* data, uint64_t numel, bool borrowed) {
  if (finished_) throw InternalError("RankWriter used after finish()");
  if (key >= manifest_.keys.size()) throw InternalError("RankWriter::write: undeclared key");
  const ckpt::Key& k = manifest_.keys[key];
  if (lo > k.numel() || numel > k.numel() - lo)
    throw UsageError("checkpoint key " + quoted_name(k.name) + ": write of [" + std::to_string(lo) + ", " + std::to_string(lo + numel) +
                     ") leaves [0, " + std::to_string(k.numel()) + ")");
  if (numel == 0) return;
  if (!h5_) open_file();
  const size_t elem = dtype_bits(k.dtype) / 8;
  // Chunks of about chunk_bytes, evened out so the edge chunk wastes less than one element per chunk.
  const uint64_t per = std::max<uint64_t>(1, std::min<uint64_t>(opts_.chunk_bytes / elem, UINT32_MAX / elem));
  const uint64_t nchunks = (numel + per - 1) / per;
  const uint64_t d = (numel + nchunks - 1) / nchunks;

  const auto dataset = static_cast<uint32_t>(manifest_.runs.size());
  ckpt::Run run;
  run.file = 0;
  run.dataset = dataset;
  run.key = key;
  run.chunk_elems = static_cast<uint32_t>(d);
  run.lo = lo;
  run.numel = numel;
  run.dtype = k.dtype;
  const ckpt::Compression& comp = opts_.compression;
  const bool shuffle = comp.zstd && comp.shuffle && elem > 1;
  run.filters = comp.zstd ? (ckpt::kFilterZstd | (shuffle ? ckpt::kFilterShuffle : 0u)) : 0u;

  Hid ds;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    const hsize_t dims[1] = {numel}, chunk[1] = {d};
    Hid space = checked(H5Screate_simple(1, dims, nullptr), H5Sclose, h5_->path, "dataspace");
    Hid dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, h5_->path, "property list");
    H5Pset_obj_track_times(dcpl, 0);
    H5Pset_chunk(dcpl, 1, chunk);
    // Chunks of known size (no compression) are allocated with the dataset and written at their
    // addresses in parallel (chunk_pipeline.h); compressed ones as they come.
    H5Pset_alloc_time(dcpl, h5_->chunks->preallocates() ? H5D_ALLOC_TIME_EARLY : H5D_ALLOC_TIME_INCR);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    if (shuffle && H5Pset_shuffle(dcpl) < 0) hdf5_fail(h5_->path, "shuffle filter");
    if (comp.zstd) {
      // Recorded, not run: chunks arrive compressed. Optional, so HDF5 builds without the plugin
      // still create and read the dataset; readers with the plugin (h5py + hdf5plugin) decode it.
      const unsigned cd[1] = {static_cast<unsigned>(comp.level)};
      if (H5Pset_filter(dcpl, kZstdFilterId, H5Z_FLAG_OPTIONAL, 1, cd) < 0) hdf5_fail(h5_->path, "zstd filter");
      H5Eclear2(H5E_DEFAULT);  // without the plugin HDF5 records "filter not registered", harmlessly
    }
    const std::string name = std::to_string(dataset);
    ds = checked(H5Dcreate2(h5_->file, name.c_str(), storage_type(k.dtype), space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                 H5Dclose, h5_->path, "create dataset /" + name + " for key " + quoted_name(k.name));
    string_attr(ds, "key", k.name);
    string_attr(ds, "dtype", std::string(dtype_name(k.dtype)));
    u64_attr(ds, "offset", lo);
  }
  h5_->chunks->add_dataset(dataset, std::move(ds), nchunks, d, "key " + quoted_name(k.name));
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (uint64_t i = 0; i < nchunks; ++i) {
    const uint64_t off = i * d;
    ckpt::Chunk c;
    c.run = dataset;
    c.key = key;
    c.offset = lo + off;
    c.length = static_cast<uint32_t>(std::min(d, numel - off));
    h5_->chunks->submit(c, ckpt::chunk_seed(k.name, c.offset), off, bytes + off * elem, d, elem, shuffle, borrowed);
  }
  manifest_.runs.push_back(run);
}

RankManifest RankWriter::finish() {
  if (finished_) throw InternalError("RankWriter::finish called twice");
  finished_ = true;
  if (h5_) {
    manifest_.chunks = h5_->chunks->drain();
    h5_->chunks.reset();
    {
      std::lock_guard<std::mutex> lock(hdf5_mutex());
      h5_->file.close();
      H5Eclear2(H5E_DEFAULT);  // closing flushes the zstd-filtered layouts: "filter not registered" again
    }
    fs::fsync_file(h5_->path);
    struct stat st {};
    if (stat(h5_->path.c_str(), &st) != 0) throw FormatError(h5_->path + ": cannot stat after writing");
    manifest_.file.size = static_cast<uint64_t>(st.st_size);
  }
  return std::move(manifest_);
}

}  // namespace fpg::fpckpt
