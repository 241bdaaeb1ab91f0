#include "formats/fpckpt/chunk_pipeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "ckpt/checksum.h"
#include "core/error.h"
#include "core/fs.h"

namespace fpg::fpckpt {

struct ChunkPipeline::Slot {
  std::vector<uint8_t> bytes;  // a copied chunk, zero-padded to chunk_elems
  const uint8_t* src = nullptr;  // the chunk's bytes: `bytes`, or the caller's buffer (borrowed)
  uint64_t src_elems = 0;        // elements at src: chunk_elems (copied), the chunk's length (borrowed)
  bool borrowing = false;        // still reads the caller's buffer
  ckpt::CodecScratch scratch;  // its encoding lives here (or is `bytes`, stored raw)
  ckpt::EncodedChunk enc;
  ckpt::Chunk meta;
  uint64_t seed = 0;  // of both checksums
  uint64_t at = 0, chunk_elems = 0, seq = 0;
  size_t elem = 0;
  bool shuffle = false;
  bool direct = false;  // written at `addr` by the encoding thread (preallocated), else by the writer thread
  uint64_t addr = 0;
  uint64_t turn = 0;    // place in the writer thread's order
};

namespace {

// PipelineTimes in nanoseconds.
std::atomic<uint64_t> copy_ns{0}, wait_ns{0}, encode_ns{0}, write_ns{0};

#if H5_VERSION_GE(1, 10, 5)
constexpr bool kChunkAddresses = true;
#else
constexpr bool kChunkAddresses = false;
#endif

// Writeback is started every this many bytes written: an fsync of gigabytes at the end costs
// seconds (3.4 s for 8 GiB measured). Preallocated chunks start it sooner: a file smaller than the
// writer thread's 64 MiB would otherwise reach the disk only at the commit's fsync, after
// everything else (a reshard's files, one after another).
constexpr uint64_t kWritebackBytes = 64ull << 20;
constexpr uint64_t kDirectWritebackBytes = 8ull << 20;

// Where the `nchunks` chunks of `chunk_elems` elements of a dataset created with its chunks
// allocated lie in the file; empty if HDF5 does not say for every one. With the HDF5 mutex held.
std::vector<uint64_t> chunk_addresses(hid_t ds, uint64_t nchunks, uint64_t chunk_elems) {
  std::vector<uint64_t> addr;
#if H5_VERSION_GE(1, 10, 5)
  addr.reserve(nchunks);
  for (uint64_t i = 0; i < nchunks; ++i) {
    const hsize_t at[1] = {i * chunk_elems};
    unsigned mask = 0;
    haddr_t a = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(ds, at, &mask, &a, &size) < 0 || a == HADDR_UNDEF) {
      H5Eclear2(H5E_DEFAULT);
      return {};
    }
    addr.push_back(a);
  }
#else
  (void)ds;
  (void)nchunks;
  (void)chunk_elems;
#endif
  return addr;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// The process-wide slot budget (chunk_pipeline.h): slots are handed out and taken back whole, so
// their buffers are reused from chunk to chunk and from rank to rank.
class SlotPool {
 public:
  using Slot = ChunkPipeline::Slot;
  static SlotPool& get() {
    static SlotPool pool;
    return pool;
  }
  void attach() {
    std::lock_guard<std::mutex> l(mu_);
    ++users_;
  }
  // The last pipeline gone: free the idle slots (a save's buffers do not outlive it).
  void detach() {
    std::vector<std::unique_ptr<Slot>> drop;
    std::lock_guard<std::mutex> l(mu_);
    if (--users_ == 0) {
      made_ -= free_.size();
      drop.swap(free_);
    }
  }
  Slot* acquire(size_t limit) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !free_.empty() || made_ < limit; });
    if (!free_.empty()) {
      Slot* s = free_.back().release();
      free_.pop_back();
      return s;
    }
    ++made_;
    return new Slot;
  }
  void release(Slot* s) {
    {
      std::lock_guard<std::mutex> l(mu_);
      free_.emplace_back(s);
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Slot>> free_;
  size_t made_ = 0, users_ = 0;
};

// The process-wide writer thread (chunk_pipeline.h): a queue of one thread, so writes run in the
// order they are handed over; started by the first pipeline, joined when the last one ends.
class WriterThread {
 public:
  static WriterThread& get() {
    static WriterThread w;
    return w;
  }
  void attach() {
    std::lock_guard<std::mutex> l(mu_);
    if (users_++ == 0) queue_ = std::make_unique<TaskQueue>(1);
  }
  void detach() {
    std::unique_ptr<TaskQueue> done;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (--users_ == 0) done = std::move(queue_);
    }
    // Joined outside the lock; every pipeline has drained, so its queue is empty.
  }
  void submit(std::function<void()> task) {
    std::lock_guard<std::mutex> l(mu_);
    queue_->submit(std::move(task));
  }

 private:
  std::mutex mu_;
  std::unique_ptr<TaskQueue> queue_;
  size_t users_ = 0;
};

}  // namespace

PipelineTimes pipeline_times() {
  return {copy_ns.load() * 1e-9, wait_ns.load() * 1e-9, encode_ns.load() * 1e-9, write_ns.load() * 1e-9};
}

ChunkPipeline::ChunkPipeline(std::string path, int vfd, const ckpt::Compression& c, TaskQueue& queue)
    : path_(std::move(path)), vfd_(vfd), comp_(c), queue_(queue) {
  SlotPool::get().attach();
  WriterThread::get().attach();
}

ChunkPipeline::~ChunkPipeline() {
  {
    std::unique_lock<std::mutex> l(mu_);
    abandoned_ = true;  // tasks not yet started skip their work
    idle_.wait(l, [&] { return in_flight_ == 0; });
  }
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    datasets_.clear();
    H5Eclear2(H5E_DEFAULT);
  }
  WriterThread::get().detach();
  SlotPool::get().detach();
}

bool ChunkPipeline::preallocates() const { return kChunkAddresses && !comp_.zstd && vfd_ >= 0; }

void ChunkPipeline::add_dataset(uint32_t id, Hid ds, uint64_t nchunks, uint64_t chunk_elems, std::string what) {
  std::vector<uint64_t> addr;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    if (id != datasets_.size()) throw InternalError("ChunkPipeline: datasets out of order");
    if (preallocates()) addr = chunk_addresses(ds, nchunks, chunk_elems);
    if (!addr.empty()) ds.reset();  // HDF5 has nothing more to do for it
    datasets_.push_back({std::move(ds), nchunks, what});
  }
  std::lock_guard<std::mutex> l(mu_);
  placement_.push_back({std::move(addr), std::move(what)});
}

void ChunkPipeline::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> l(mu_);
  if (!error_) error_ = e;
}

void ChunkPipeline::submit(const ckpt::Chunk& meta, uint64_t seed, uint64_t at, const void* src, uint64_t chunk_elems,
                           size_t elem, bool shuffle, bool borrowed) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  const uint64_t t0 = now_ns();
  Slot* s = SlotPool::get().acquire(queue_.size() + 2);
  const uint64_t t1 = now_ns();
  wait_ns += t1 - t0;
  if (borrowed) {
    s->src = static_cast<const uint8_t*>(src);
    s->src_elems = meta.length;  // encode_chunk zero-pads an edge chunk into the slot's scratch
  } else {
    const size_t have = static_cast<size_t>(meta.length) * elem, full = chunk_elems * elem;
    s->bytes.resize(full);
    std::memcpy(s->bytes.data(), src, have);
    std::memset(s->bytes.data() + have, 0, full - have);  // HDF5 stores the edge chunk whole
    s->src = s->bytes.data();
    s->src_elems = chunk_elems;
    copy_ns += now_ns() - t1;
  }
  s->borrowing = borrowed;
  s->meta = meta;
  s->seed = seed;
  s->at = at;
  s->chunk_elems = chunk_elems;
  s->elem = elem;
  s->shuffle = shuffle;
  {
    std::lock_guard<std::mutex> l(mu_);
    const Placement* pl = meta.run < placement_.size() ? &placement_[meta.run] : nullptr;
    if (!pl || at % chunk_elems != 0 || (!pl->addr.empty() && at / chunk_elems >= pl->addr.size())) {
      SlotPool::get().release(s);
      throw InternalError("ChunkPipeline: chunk of an unknown dataset or outside it");
    }
    s->direct = !pl->addr.empty();
    if (s->direct) s->addr = pl->addr[at / chunk_elems];
    else s->turn = next_turn_++;
    s->seq = next_seq_++;
    ++in_flight_;
    if (borrowed) borrowing_.insert(s->seq);
  }
  queue_.submit([this, s] { run(s); });
}

void ChunkPipeline::encode(Slot& s) {
  ckpt::Compression c = comp_;
  c.shuffle = s.shuffle;
  s.enc = ckpt::encode_chunk(s.src, s.src_elems, s.chunk_elems, s.elem, c, s.scratch);
  ckpt::Chunk& m = s.meta;
  m.stored_bytes = static_cast<uint32_t>(s.enc.size);
  m.flags = s.enc.flags;
  const size_t logical = static_cast<size_t>(m.length) * s.elem;
  m.checksum_logical = ckpt::checksum(s.src, logical, s.seed);
  // A chunk stored raw and whole is its logical bytes: one hash for both.
  m.checksum_stored = (s.enc.data == s.src && s.enc.size == logical) ? m.checksum_logical
                                                                     : ckpt::checksum(s.enc.data, s.enc.size, s.seed);
}

void ChunkPipeline::unborrow(Slot& s) {
  if (!s.borrowing) return;
  s.borrowing = false;
  std::lock_guard<std::mutex> l(mu_);
  borrowing_.erase(s.seq);
  idle_.notify_all();
}

uint64_t ChunkPipeline::mark() const {
  std::lock_guard<std::mutex> l(mu_);
  return next_seq_;
}

void ChunkPipeline::fence(uint64_t mark) {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return borrowing_.empty() || *borrowing_.begin() >= mark; });
}

void ChunkPipeline::write(Slot& s) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  hdf5_init();  // on the writer thread: a failed write is reported by the save, not printed by HDF5
  Dataset& d = datasets_.at(s.meta.run);
  // Filter mask: bit i set = filter i of the dataset's pipeline (shuffle?, zstd) was skipped.
  const int n_filters = (s.shuffle ? 1 : 0) + (comp_.zstd ? 1 : 0);
  const uint32_t mask = (s.enc.flags & ckpt::kFilterZstd) ? 0u : (1u << n_filters) - 1;
  const hsize_t at[1] = {s.at};
  if (H5Dwrite_chunk(d.ds, H5P_DEFAULT, mask, at, s.enc.size, s.enc.data) < 0)
    hdf5_fail(path_, "write chunk [" + std::to_string(s.meta.offset) + ", " + std::to_string(s.meta.hi()) + ") of " +
                         d.what);
  if (--d.left == 0) d.ds.reset();
  H5Eclear2(H5E_DEFAULT);  // leave the writer thread no error records (see RankWriter::~RankWriter)
  unsynced_ += s.enc.size;
  if (vfd_ >= 0 && unsynced_ >= kWritebackBytes) {
    fs::start_writeback(vfd_);
    unsynced_ = 0;
  }
}

void ChunkPipeline::write_direct(Slot& s) {
  {
    // One write at a time: the kernel copies a buffered write into one file under the file's lock
    // anyway, and threads that wait for it here sleep instead of spinning on that lock.
    std::lock_guard<std::mutex> one(direct_mu_);
    if (const int e = fs::pwrite_full(vfd_, s.addr, s.enc.data, s.enc.size)) {
      std::string what;
      {
        std::lock_guard<std::mutex> l(mu_);
        what = placement_[s.meta.run].what;
      }
      throw FormatError(path_ + ": write chunk [" + std::to_string(s.meta.offset) + ", " +
                        std::to_string(s.meta.hi()) + ") of " + what + ": " + fs::io_error_text(e));
    }
  }
  const uint64_t before = unsynced_direct_.fetch_add(s.enc.size);
  if ((before + s.enc.size) / kDirectWritebackBytes != before / kDirectWritebackBytes)
    fs::start_writeback(vfd_);
}

void ChunkPipeline::run(Slot* s) {
  bool skip;
  {
    std::lock_guard<std::mutex> l(mu_);
    skip = error_ || abandoned_;
  }
  if (!skip) {
    const uint64_t t0 = now_ns();
    try {
      encode(*s);
    } catch (...) {
      fail(std::current_exception());
    }
    encode_ns += now_ns() - t0;
    // Encoded into the slot's scratch: the caller's buffer is free. Stored raw and whole, it is
    // written from there (store() lets it go).
    if (s->enc.data != s->src) unborrow(*s);
  }
  // Its place in the file is fixed: written here, in parallel with the other encoding threads.
  if (s->direct) {
    store(s);
    return;
  }
  // Handed over under mu_, in sequence: the writer receives this pipeline's slots in order.
  std::lock_guard<std::mutex> l(mu_);
  ready_.emplace(s->turn, s);
  for (auto it = ready_.find(next_handoff_); it != ready_.end(); it = ready_.find(next_handoff_)) {
    Slot* w = it->second;
    ready_.erase(it);
    ++next_handoff_;
    WriterThread::get().submit([this, w] { store(w); });
  }
}

void ChunkPipeline::store(Slot* s) {
  bool ok;
  {
    std::lock_guard<std::mutex> l(mu_);
    ok = !error_ && !abandoned_;
  }
  if (ok) {
    const uint64_t t0 = now_ns();
    try {
      if (s->direct) write_direct(*s);
      else write(*s);
    } catch (...) {
      fail(std::current_exception());
    }
    write_ns += now_ns() - t0;
  }
  unborrow(*s);
  std::lock_guard<std::mutex> l(mu_);
  if (ok && !error_) written_.emplace_back(s->seq, s->meta);
  SlotPool::get().release(s);
  if (--in_flight_ == 0) idle_.notify_all();  // under mu_: the pipeline may end as soon as it is released
}

std::vector<ckpt::Chunk> ChunkPipeline::drain() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return in_flight_ == 0; });
  if (error_) std::rethrow_exception(error_);
  std::sort(written_.begin(), written_.end(),
            [](const std::pair<uint64_t, ckpt::Chunk>& a, const std::pair<uint64_t, ckpt::Chunk>& b) { return a.first < b.first; });
  std::vector<ckpt::Chunk> chunks;
  chunks.reserve(written_.size());
  for (auto& w : written_) chunks.push_back(w.second);
  written_.clear();
  return chunks;
}

}  // namespace fpg::fpckpt
