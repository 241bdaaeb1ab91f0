#include "formats/fpckpt/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "ckpt/checksum.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/hdf5_util.h"
#include "formats/fpckpt/index_file.h"

namespace fpg::fpckpt {

struct CheckpointReader::Handles {
  std::unordered_map<uint32_t, Hid> files;     // by file index; invalid Hid = failed to open
  std::unordered_map<uint32_t, Hid> datasets;  // by run index
  std::unordered_map<uint32_t, std::string> file_errors;
  std::unordered_map<uint32_t, std::string> dataset_errors;  // by run index
  std::unordered_map<uint32_t, uint64_t> base;  // by file index: the user block's size (addresses start there)
};

struct CheckpointReader::Where {
  struct Loc {
    uint64_t addr = 0, size = 0;
    uint8_t state = 0;  // 0: not looked up, 1: located, 2: not stored (errors[c] says why)
  };
  std::vector<Loc> chunks;
  std::unordered_map<uint32_t, std::string> errors;  // by chunk
  std::unordered_map<uint32_t, int> fds;             // by file index; -1: failed (fd_errors says why)
  std::unordered_map<uint32_t, std::string> fd_errors;
  ~Where() {
    for (const auto& f : fds)
      if (f.second >= 0) ::close(f.second);
  }
};

namespace {
#if H5_VERSION_GE(1, 10, 5)
constexpr bool kDirectReads = true;
#else
constexpr bool kDirectReads = false;
#endif

// Where the object that hard link `name` in `loc` names begins in the file (without the user
// block), from the group's link table: the object itself is not read. False if there is none.
bool link_address(hid_t loc, const std::string& name, uint64_t& addr) {
#if H5_VERSION_GE(1, 12, 0)
  H5L_info2_t info{};
  if (H5Lget_info2(loc, name.c_str(), &info, H5P_DEFAULT) < 0 || info.type != H5L_TYPE_HARD) return false;
  haddr_t a = HADDR_UNDEF;
  if (H5VLnative_token_to_addr(loc, info.u.token, &a) < 0 || a == HADDR_UNDEF) return false;
  addr = a;
#else
  H5L_info_t info{};
  if (H5Lget_info(loc, name.c_str(), &info, H5P_DEFAULT) < 0 || info.type != H5L_TYPE_HARD) return false;
  addr = info.u.address;
#endif
  return true;
}

// A FormatError's message without its leading "<path>: ": chunk errors are reported under the file.
std::string without_path(const std::string& message, const std::string& path) {
  const std::string prefix = path + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}
}  // namespace

CheckpointReader::CheckpointReader(const std::string& path, ChunkReads reads, IndexCheck check)
    : reads_(kDirectReads ? reads : ChunkReads::hdf5), h5_(std::make_unique<Handles>()), where_(std::make_unique<Where>()) {
  dir_ = resolve_checkpoint(path);
  const std::string index_path = dir_ + "/" + kIndexFile;
  struct stat st {};
  if (lstat(index_path.c_str(), &st) != 0 && errno == ENOENT)
    throw FormatError(dir_ + ": not a checkpoint (no " + std::string(kIndexFile) + ")");
  index_ = read_index(index_path);
  if (check == IndexCheck::enforce && index_.index_checksum == ckpt::IndexChecksum::mismatch)
    throw IndexChecksumError(index_path + ": the index does not match its checksum (" + index_.index_checksum_detail +
                             "): it was changed after it was written (`fpgather validate` reports it)");
  index_read();
}

CheckpointReader::CheckpointReader(std::string dir, ckpt::Index index, ChunkReads reads)
    : dir_(std::move(dir)), index_(std::move(index)), reads_(kDirectReads ? reads : ChunkReads::hdf5),
      h5_(std::make_unique<Handles>()), where_(std::make_unique<Where>()) {
  index_read();
}

void CheckpointReader::index_read() {
  const std::string index_path = dir_ + "/" + kIndexFile;
  for (const auto& f : index_.files)
    if (!ckpt::valid_file_name(f.name)) throw FormatError(index_path + ": file name " + quoted_name(f.name) + " is not a plain name");
  by_key_.resize(index_.keys.size());
  by_run_.resize(index_.runs.size());
  where_->chunks.resize(index_.chunks.size());
  for (uint32_t c = 0; c < index_.chunks.size(); ++c) {
    const ckpt::Chunk& ch = index_.chunks[c];
    if (ch.run < index_.runs.size()) by_run_[ch.run].push_back(c);
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

std::string CheckpointReader::chunk_file(uint32_t c) const {
  const std::string name = c < index_.chunks.size() ? index_.run_file_name(index_.chunks[c].run) : "";
  return name.empty() ? dir_ : dir_ + "/" + name;
}

std::string CheckpointReader::file_of(uint32_t file, int64_t& id) const {
  hdf5_init();
  auto fit = h5_->files.find(file);
  if (fit == h5_->files.end()) {
    const std::string path = dir_ + "/" + index_.files[file].name;
    Hid f;
    try {
      f = open_checkpoint_file(path);
    } catch (const FormatError& e) {
      h5_->file_errors[file] = without_path(e.what(), path);
    }
    if (f.valid()) {
      hsize_t userblock = 0;
      Hid fcpl(H5Fget_create_plist(f), H5Pclose);
      if (fcpl.valid()) H5Pget_userblock(fcpl, &userblock);
      h5_->base[file] = userblock;
      // Records left on a pool thread that outlives the library make HDF5 complain when it is closed.
      H5Eclear2(H5E_DEFAULT);
    }
    fit = h5_->files.emplace(file, std::move(f)).first;
  }
  if (!fit->second.valid()) return h5_->file_errors[file];
  id = fit->second.get();
  return "";
}

std::string CheckpointReader::dataset_of(uint32_t c, int64_t& dataset) const {
  const ckpt::Chunk& ch = index_.chunks[c];
  if (ch.run >= index_.runs.size()) return "chunk names no run";
  const ckpt::Run& run = index_.runs[ch.run];
  if (run.file >= index_.files.size()) return "run names no file";
  int64_t file = -1;
  const std::string err = file_of(run.file, file);
  if (!err.empty()) return err;
  const std::string path = dir_ + "/" + index_.files[run.file].name;
  auto dit = h5_->datasets.find(ch.run);
  if (dit == h5_->datasets.end()) {
    const std::string name = std::to_string(run.dataset);
    Hid d;
    std::string error;
    if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
      error = "dataset /" + name + " not found";
    } else {
      try {
        d = open_own_dataset(file, name, path, "dataset /" + name);
      } catch (const FormatError& e) {
        error = without_path(e.what(), path);
      }
    }
    H5Eclear2(H5E_DEFAULT);
    if (!d.valid()) h5_->dataset_errors[ch.run] = error;
    dit = h5_->datasets.emplace(ch.run, std::move(d)).first;
  }
  if (!dit->second.valid()) return h5_->dataset_errors[ch.run];
  if (run.chunk_elems == 0 || ch.offset < run.lo) return "chunk outside its run";
  dataset = dit->second.get();
  return "";
}

std::string CheckpointReader::read_stored(uint32_t c, std::vector<uint8_t>& stored) const {
  return reads_ == ChunkReads::direct ? read_stored_direct(c, stored) : read_stored_hdf5(c, stored);
}

std::string CheckpointReader::read_stored_hdf5(uint32_t c, std::vector<uint8_t>& stored) const {
  const ckpt::Chunk& ch = index_.chunks[c];
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  int64_t ds = -1;
  const std::string err = dataset_of(c, ds);
  if (!err.empty()) return err;
  const hsize_t at[1] = {ch.offset - index_.runs[ch.run].lo};
  hsize_t size = 0;
  if (H5Dget_chunk_storage_size(ds, at, &size) < 0) return "chunk not stored: " + hdf5_error();
  if (size != ch.stored_bytes)
    return "stored chunk has " + std::to_string(size) + " bytes, the index records " + std::to_string(ch.stored_bytes);
  stored.resize(size);
  uint32_t mask = 0;
  if (H5Dread_chunk(ds, H5P_DEFAULT, at, &mask, stored.data()) < 0) return "cannot read chunk: " + hdf5_error();
  chunks_read_.fetch_add(1);
  bytes_read_.fetch_add(size);
  return "";
}

void CheckpointReader::locate_run(uint32_t c, int64_t dataset) const {
#if H5_VERSION_GE(1, 10, 5)
  const ckpt::Run& run = index_.runs[index_.chunks[c].run];
  const uint64_t base = h5_->base[run.file];
  std::vector<std::pair<uint32_t, Where::Loc>> found;
  std::vector<std::pair<uint32_t, std::string>> missing;
  // The whole run at once: a reader that needs one of its chunks usually needs the next ones too,
  // and a B-tree lookup costs microseconds while the mutex is wanted by writers.
  for (uint32_t x : by_run_[index_.chunks[c].run]) {
    const ckpt::Chunk& ch = index_.chunks[x];
    if (ch.offset < run.lo || (ch.offset - run.lo) % run.chunk_elems != 0) {
      missing.emplace_back(x, "chunk outside its run");
      continue;
    }
    const hsize_t at[1] = {ch.offset - run.lo};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(static_cast<hid_t>(dataset), at, &mask, &addr, &size) < 0)
      missing.emplace_back(x, "chunk not stored: " + hdf5_error());
    else if (addr == HADDR_UNDEF)
      missing.emplace_back(x, "chunk not stored");
    else
      found.emplace_back(x, Where::Loc{base + addr, size, 1});
  }
  std::lock_guard<std::mutex> l(where_mu_);
  for (auto& f : found) where_->chunks[f.first] = f.second;
  for (auto& m : missing) {
    where_->chunks[m.first].state = 2;
    where_->errors[m.first] = std::move(m.second);
  }
#else
  (void)c;
  (void)dataset;
#endif
}

std::string CheckpointReader::locate_stored(uint32_t c, uint64_t& addr, uint64_t& size, int& fd) const {
  const ckpt::Chunk& ch = index_.chunks[c];
  if (ch.run >= index_.runs.size()) return "chunk names no run";
  const ckpt::Run& run = index_.runs[ch.run];
  if (run.file >= index_.files.size()) return "run names no file";
  Where::Loc loc;
  {
    std::lock_guard<std::mutex> l(where_mu_);
    loc = where_->chunks[c];
  }
  if (loc.state == 0) {
    // Lock order: the HDF5 mutex, then where_mu_ (never the other way).
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    bool located;  // by another thread while this one waited for the mutex?
    {
      std::lock_guard<std::mutex> l(where_mu_);
      located = where_->chunks[c].state != 0;
    }
    if (!located) {
      int64_t ds = -1;
      const std::string err = dataset_of(c, ds);
      if (!err.empty()) return err;
      locate_run(c, ds);
    }
  }
  {
    std::lock_guard<std::mutex> l(where_mu_);
    loc = where_->chunks[c];
    if (loc.state != 1) return loc.state == 2 ? where_->errors[c] : "chunk not located";
    const std::string err = data_fd(run.file, fd);
    if (!err.empty()) return err;
  }
  addr = loc.addr;
  size = loc.size;
  return "";
}

std::string CheckpointReader::data_fd(uint32_t file, int& fd) const {
  auto fit = where_->fds.find(file);
  if (fit == where_->fds.end()) {
    const std::string path = dir_ + "/" + index_.files[file].name;
    int f = -1;
    try {
      f = fs::open_regular_file(path, false);
    } catch (const FormatError& e) {
      where_->fd_errors[file] = without_path(e.what(), path);
    }
    fit = where_->fds.emplace(file, f).first;
  }
  fd = fit->second;
  return fd < 0 ? where_->fd_errors[file] : "";
}

std::string CheckpointReader::read_stored_direct(uint32_t c, std::vector<uint8_t>& stored) const {
  const ckpt::Chunk& ch = index_.chunks[c];
  uint64_t addr = 0, size = 0;
  int fd = -1;
  const std::string err = locate_stored(c, addr, size, fd);
  if (!err.empty()) return err;
  if (size != ch.stored_bytes)
    return "stored chunk has " + std::to_string(size) + " bytes, the index records " + std::to_string(ch.stored_bytes);
  stored.resize(size);
  const std::string where = "bytes [" + std::to_string(addr) + ", " + std::to_string(addr + size) + ")";
  for (uint64_t done = 0; done < size;) {
    const ssize_t n = ::pread(fd, stored.data() + done, size - done, static_cast<off_t>(addr + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return "cannot read the chunk stored at " + where + ": " + std::strerror(errno);
    if (n == 0) return "the file ends at byte " + std::to_string(addr + done) + ", inside the chunk stored at " + where;
    done += static_cast<uint64_t>(n);
  }
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
  // Readers copy out the key's elements: a run of another element type would be read past its end.
  if (run.key >= index_.keys.size()) return "run names no key";
  if (run.dtype != index_.keys[run.key].dtype)
    return "stored as " + std::string(dtype_name(run.dtype)) + ", the key is " + std::string(dtype_name(index_.keys[run.key].dtype));
  // The decoded chunk is sized by its length: never more than its run's chunks hold.
  if (ch.length > run.chunk_elems)
    return "chunk of " + std::to_string(ch.length) + " elements in a run of " + std::to_string(run.chunk_elems) +
           "-element chunks";
  const uint64_t seed = index_.checksum_seed(ch);
  auto mismatch = [&](const char* what) {
    return std::string(what) + " do not match their checksum" + (seed ? " for this key and offset" : "");
  };
  if (ckpt::checksum(stored.data(), stored.size(), seed) != ch.checksum_stored) return mismatch("stored bytes");
  const size_t elem = dtype_bits(run.dtype) / 8;
  const size_t want = static_cast<size_t>(ch.length) * elem, full = run.chunk_elems * elem;
  if (ch.flags == 0 && stored.size() == full && want <= full) {
    // Stored raw: the logical bytes are the stored ones (a prefix of an edge chunk), taken without a
    // copy; a whole chunk whose two checksums are one value has just been checked.
    std::swap(stored, logical);
    logical.resize(want);
    if (want == full && ch.checksum_logical == ch.checksum_stored) return "";
  } else {
    logical.resize(want);
    err = ckpt::decode_chunk(stored.data(), stored.size(), ch.flags, ch.length, run.chunk_elems, elem, logical.data(),
                             scratch);
    if (!err.empty()) return "cannot decode: " + err;
  }
  if (ckpt::checksum(logical.data(), logical.size(), seed) != ch.checksum_logical) return mismatch("decoded bytes");
  return "";
}

std::pair<const uint32_t*, const uint32_t*> CheckpointReader::chunks_in(uint32_t key, uint64_t lo, uint64_t hi) const {
  const std::vector<uint32_t>& list = by_key_[key];
  const uint32_t* first = std::partition_point(list.data(), list.data() + list.size(),
                                               [&](uint32_t c) { return index_.chunks[c].hi() <= lo; });
  const uint32_t* last = std::partition_point(first, list.data() + list.size(),
                                              [&](uint32_t c) { return index_.chunks[c].offset < hi; });
  return {first, last};
}

void CheckpointReader::prefetch(uint32_t key, uint64_t lo, uint64_t hi) const {
  if (reads_ != ChunkReads::direct || key >= index_.keys.size() || lo >= hi) return;
  const auto [first, last] = chunks_in(key, lo, hi);
  for (const uint32_t* it = first; it != last; ++it) {
    uint64_t addr = 0, size = 0;
    int fd = -1;
    // A chunk that cannot be located is left to read() to report.
    if (locate_stored(*it, addr, size, fd).empty() && size == index_.chunks[*it].stored_bytes)
      fs::will_need(fd, addr, size);
  }
}

void CheckpointReader::prefetch_datasets(const std::vector<uint32_t>& runs) const {
  if (reads_ != ChunkReads::direct) return;
  // A dataset's object header and chunk index lie at the address its link gives, and the end of its
  // object header (attributes written after its chunks were allocated) right before the next
  // dataset's: the pages around that address hold what opening the dataset and locating its chunks
  // read, in fpgather's files (elsewhere those reads just find less in the page cache).
  constexpr uint64_t kBefore = 4096, kAfter = 8192;
  std::vector<std::pair<uint32_t, uint64_t>> at;  // (file, where the dataset begins in it)
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    for (uint32_t r : runs) {
      if (r >= index_.runs.size() || index_.runs[r].file >= index_.files.size() || h5_->datasets.count(r)) continue;
      const ckpt::Run& run = index_.runs[r];
      int64_t file = -1;
      uint64_t addr = 0;
      if (file_of(run.file, file).empty() && link_address(file, std::to_string(run.dataset), addr))
        at.emplace_back(run.file, h5_->base[run.file] + addr);
    }
    H5Eclear2(H5E_DEFAULT);
  }
  for (const auto& [file, addr] : at) {
    int fd = -1;
    {
      std::lock_guard<std::mutex> l(where_mu_);
      if (!data_fd(file, fd).empty()) continue;
    }
    if (addr > (UINT64_MAX >> 2)) continue;  // no file is that large: a hostile link, left to the open
    const uint64_t from = addr > kBefore ? addr - kBefore : 0;
    ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(addr + kAfter - from), POSIX_FADV_WILLNEED);
  }
}

void CheckpointReader::read(uint32_t key, uint64_t lo, uint64_t hi, void* out, ThreadPool* pool) const {
  if (key >= index_.keys.size()) throw UsageError("read: no key #" + std::to_string(key));
  const ckpt::Key& k = index_.keys[key];
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
  if (lo > hi || hi > k.numel())
    throw UsageError("key " + quoted_name(k.name) + ": range " + range + " is outside [0, " + std::to_string(k.numel()) + ")");
  if (lo == hi) return;
  const size_t elem = dtype_bits(k.dtype) / 8;
  auto* dst = static_cast<uint8_t*>(out);
  // Every element of [lo, hi) must come from a chunk or declared padding; padding reads as zeros
  // (only the gaps between chunks are cleared: the chunks fill the rest).
  const auto& pads = pad_by_key_[key];
  auto covered_by_padding = [&](uint64_t from, uint64_t to) {
    std::memset(dst + (from - lo) * elem, 0, (to - from) * elem);
    auto pit = std::upper_bound(pads.begin(), pads.end(), std::make_pair(from, UINT64_MAX));
    if (pit != pads.begin()) --pit;
    for (; pit != pads.end() && from < to; ++pit)
      if (pit->first <= from && pit->second > from) from = pit->second;
    if (from < to)
      throw FormatError(dir_ + ": key " + quoted_name(k.name) + ": [" + std::to_string(from) + ", " + std::to_string(to) +
                        ") is covered by neither data nor padding");
  };
  std::vector<uint32_t> todo;
  uint64_t cursor = lo;
  const auto [first, last] = chunks_in(key, lo, hi);
  for (const uint32_t* it = first; it != last; ++it) {
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
      throw FormatError(chunk_file(c) + ": key " + quoted_name(k.name) + " [" +
                        std::to_string(ch.offset) + ", " + std::to_string(ch.hi()) + "): " + err);
    const uint64_t a = std::max(lo, ch.offset), b = std::min(hi, ch.hi());
    std::memcpy(dst + (a - lo) * elem, logical.data() + (a - ch.offset) * elem, (b - a) * elem);
  });
}

}  // namespace fpg::fpckpt
