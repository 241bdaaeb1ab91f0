#include "formats/fpckpt/reshard.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <thread>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>

#include "core/printable.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/thread_start.h"
#include "core/progress.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/read_ahead.h"

namespace fpg::fpckpt {
namespace {

ThreadPool& pool_of(const ReshardRunOptions& o) { return o.write.pool ? *o.write.pool : ThreadPool::global(); }

uint64_t max_chunk_bytes(const ckpt::Index& ix) {
  uint64_t m = 0;
  for (const auto& r : ix.runs) m = std::max<uint64_t>(m, dtype_bytes(r.dtype, r.chunk_elems));
  return m;
}

// How far the source is read ahead of the piece being read (in the page cache, not in memory): enough
// pieces that the disk never waits for the reader to ask.
uint64_t read_ahead_bytes(uint64_t piece) { return std::max<uint64_t>(2 * piece, 64ull << 20); }

size_t cache_size(const ReshardRunOptions& o) { return o.cache_chunks ? o.cache_chunks : 2 * pool_of(o).size() + 2; }

uint64_t piece_bytes(const ckpt::Index& ix, const ReshardRunOptions& o) {
  if (o.piece_bytes) return o.piece_bytes;
  return std::max<uint64_t>(pool_of(o).size() * o.write.chunk_bytes, max_chunk_bytes(ix));
}

// A flat range of a source key to read, and where its bytes go.
struct Want {
  uint32_t key = 0;
  uint64_t lo = 0, hi = 0;
  uint8_t* out = nullptr;
};

// Reads flat ranges of source keys, many at once: the chunks they need are decoded in parallel, each
// once however many of the ranges it serves, and a decoded chunk that a range used only in part is
// kept (the next range of that key, or the next param's state in a bucket key, usually starts there).
class ChunkSource {
 public:
  ChunkSource(const CheckpointReader& r, ThreadPool& pool, size_t capacity) : r_(r), pool_(pool), capacity_(capacity) {}

  void read(const std::vector<Want>& wants) {
    const ckpt::Index& ix = r_.index();
    std::vector<std::pair<uint32_t, uint32_t>> todo;  // (chunk, want) still to decode
    for (uint32_t w = 0; w < wants.size(); ++w) {
      const Want& x = wants[w];
      const ckpt::Key& k = ix.keys[x.key];
      uint64_t covered = 0;
      for (uint32_t c : ckpt::intersecting_chunks(ix, r_.chunks_of(x.key), x.lo, x.hi)) {
        const ckpt::Chunk& ch = ix.chunks[c];
        covered += std::min(x.hi, ch.hi()) - std::max(x.lo, ch.offset);
        if (auto hit = cached(c)) copy_out(ch, *hit, x);
        else todo.emplace_back(c, w);
      }
      if (covered != x.hi - x.lo)
        throw FormatError(r_.dir() + ": key " + quoted_name(k.name) + " [" + std::to_string(x.lo) + ", " + std::to_string(x.hi) +
                          ") is not all data (padding or a gap where the layout has values)");
    }
    // One task per chunk, with every range it serves.
    std::sort(todo.begin(), todo.end());
    std::vector<size_t> first;  // start of each chunk's entries in todo
    for (size_t i = 0; i < todo.size(); ++i)
      if (i == 0 || todo[i].first != todo[i - 1].first) first.push_back(i);
    first.push_back(todo.size());
    pool_.parallel_for(first.size() - 1, [&](size_t g) {
      thread_local ckpt::CodecScratch scratch;
      thread_local std::vector<uint8_t> stored, logical;
      const uint32_t c = todo[first[g]].first;
      const ckpt::Chunk& ch = ix.chunks[c];
      bool partial = false;
      for (size_t i = first[g]; i < first[g + 1]; ++i) {
        const Want& x = wants[todo[i].second];
        partial = partial || ch.offset < x.lo || ch.hi() > x.hi;
      }
      auto keep = partial ? spare() : nullptr;
      std::vector<uint8_t>& buf = keep ? *keep : logical;
      const std::string err = r_.verify_chunk(c, scratch, stored, buf);
      if (!err.empty())
        throw FormatError(r_.chunk_file(c) + ": key " + quoted_name(ix.keys[wants[todo[first[g]].second].key].name) + " [" +
                          std::to_string(ch.offset) + ", " + std::to_string(ch.hi()) + "): " + err);
      for (size_t i = first[g]; i < first[g + 1]; ++i) copy_out(ch, buf, wants[todo[i].second]);
      decoded_ += 1;
      read_ += ch.stored_bytes;
      if (keep) insert(c, std::move(keep));
    });
  }

  uint64_t decoded() const { return decoded_; }
  uint64_t bytes_read() const { return read_; }

 private:
  void copy_out(const ckpt::Chunk& ch, const std::vector<uint8_t>& logical, const Want& x) const {
    const size_t elem = dtype_bits(r_.index().keys[x.key].dtype) / 8;
    const uint64_t a = std::max(x.lo, ch.offset), b = std::min(x.hi, ch.hi());
    std::memcpy(x.out + (a - x.lo) * elem, logical.data() + (a - ch.offset) * elem, (b - a) * elem);
  }
  std::shared_ptr<std::vector<uint8_t>> cached(uint32_t c) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it)
      if (it->first == c) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    return nullptr;
  }
  void insert(uint32_t c, std::shared_ptr<std::vector<uint8_t>> v) {
    std::lock_guard<std::mutex> l(mu_);
    lru_.emplace_front(c, std::move(v));
    while (lru_.size() > capacity_) {
      // An evicted buffer nobody reads any more is kept for the next partial chunk: a fresh one
      // would be allocated and zero-filled chunk by chunk.
      if (lru_.back().second.use_count() == 1 && spare_.size() < kSpares) spare_.push_back(std::move(lru_.back().second));
      lru_.pop_back();
    }
  }
  std::shared_ptr<std::vector<uint8_t>> spare() {
    std::lock_guard<std::mutex> l(mu_);
    if (spare_.empty()) return std::make_shared<std::vector<uint8_t>>();
    auto v = std::move(spare_.back());
    spare_.pop_back();
    return v;
  }

  const CheckpointReader& r_;
  ThreadPool& pool_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<uint32_t, std::shared_ptr<std::vector<uint8_t>>>> lru_;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> spare_;  // evicted buffers, for reuse
  static constexpr size_t kSpares = 2;  // a take is followed by an insert, which evicts one again
  std::atomic<uint64_t> decoded_{0}, read_{0};
};

// Batch buffers between the reader and the writer: one being read, one being written, and the one
// before it whose last chunks may still be written from its buffer.
constexpr size_t kBatchSlots = 3;

}  // namespace

uint64_t reshard_memory_estimate(const ckpt::Index& src, const ReshardRunOptions& o) {
  const uint64_t threads = pool_of(o).size(), src_chunk = max_chunk_bytes(src);
  // The batch buffers; the writer's 3 chunk buffers (plus a zstd bound) per thread; the reader's
  // stored, logical and 2 codec buffers per thread; the cache and its 2 spare buffers.
  return kBatchSlots * piece_bytes(src, o) + threads * 3 * (o.write.chunk_bytes + o.write.chunk_bytes / 128 + 1024) +
         threads * 4 * src_chunk + (cache_size(o) + 2) * src_chunk;
}

namespace {

// One piece of one run: what the reader reads into a slot and the writer writes from it (one
// dataset of the target).
struct Piece {
  uint32_t rank = 0;  // index into plan.ranks
  const ckpt::CopyRun* run = nullptr;
  uint64_t x = 0, n = 0;  // elements [x, x + n) of the run
  uint64_t at = 0;        // byte offset in its batch's slot
  uint64_t bytes = 0;
};

// Consecutive pieces [begin, end) of at most a piece's bytes together, read at once: runs are
// mostly shorter than a piece, and a batch keeps every reader thread busy with their chunks.
struct Batch {
  size_t begin = 0, end = 0;
  uint64_t bytes = 0;
};

// A batch's bytes: a buffer of a piece's size, allocated once (never zero-filled).
struct BatchBuffer {
  std::unique_ptr<uint8_t[]> bytes;
  size_t size = 0;
};

// kBatchSlots slots between a reader thread (source chunks, decoded in parallel on its own pool)
// and the writer (the calling thread, whose chunks are encoded and written on the write pool
// straight from the slot): batch i + 1 is read while batch i is written, so the disk reads and
// writes overlap. A slot is released once no chunk of its batch reads it any more.
class BatchQueue {
 public:
  explicit BatchQueue(size_t bytes) {
    for (auto& s : slots_) s.bytes.reset(new uint8_t[bytes]);
  }
  // Reader side: the next free slot (nullptr once aborted), then publish it.
  BatchBuffer* acquire_free(size_t i) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return aborted_ || i < consumed_ + kBatchSlots; });
    return aborted_ ? nullptr : &slots_[i % kBatchSlots];
  }
  void publish() {
    std::lock_guard<std::mutex> l(mu_);
    ++produced_;
    cv_.notify_all();
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> l(mu_);
    error_ = e;
    aborted_ = true;
    cv_.notify_all();
  }
  // Writer side: the filled slot of batch i (rethrows the reader's error), then release the oldest.
  const BatchBuffer& acquire_full(size_t i) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return error_ || i < produced_; });
    if (i >= produced_ && error_) std::rethrow_exception(error_);
    return slots_[i % kBatchSlots];
  }
  void release() {
    std::lock_guard<std::mutex> l(mu_);
    ++consumed_;
    cv_.notify_all();
  }
  void abort() {
    std::lock_guard<std::mutex> l(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  BatchBuffer slots_[kBatchSlots];
  size_t produced_ = 0, consumed_ = 0;
  bool aborted_ = false;
  std::exception_ptr error_;
};

}  // namespace

ReshardResult run_reshard(const CheckpointReader& source, const ckpt::ReshardPlan& plan, const std::string& target,
                          const ReshardRunOptions& o) {
  ReshardResult res;
  const uint64_t piece = piece_bytes(source.index(), o);
  std::vector<Piece> pieces;
  uint64_t total = 0;
  for (uint32_t i = 0; i < plan.ranks.size(); ++i)
    for (const ckpt::CopyRun& run : plan.ranks[i].runs) {
      const size_t elem = dtype_bits(plan.keys[run.key].dtype) / 8;
      const uint64_t per = std::max<uint64_t>(1, piece / std::max<size_t>(1, elem));
      for (uint64_t x = 0; x < run.numel; x += per) {
        const uint64_t n = std::min(per, run.numel - x);
        pieces.push_back({i, &run, x, n, 0, n * elem});
      }
      total += run.numel * elem;
    }
  // Batches of at most a piece, and of at most an eighth of the copy (but at least a source chunk),
  // so that a small checkpoint's reads and writes overlap too instead of going in two or three steps.
  // The first batches grow from one source chunk (the writes start once the first is read: the disk
  // only reads until then) and the last ones shrink to one (after the last is read, it only writes).
  const uint64_t src_chunk = std::max<uint64_t>(1, max_chunk_bytes(source.index()));
  const uint64_t batch = std::max<uint64_t>(std::min<uint64_t>(piece, total / 8), src_chunk);
  auto batch_limit = [&](uint64_t before) {
    return std::max(src_chunk, std::min({batch, before, (total - before) / 2}));
  };
  std::vector<Batch> batches;
  uint64_t batched = 0, limit = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    Piece& p = pieces[i];
    if (batches.empty() || batches.back().bytes + p.bytes > limit) {
      batches.push_back({i, i, 0});
      limit = batch_limit(batched);
    }
    p.at = batches.back().bytes;
    batches.back().bytes += p.bytes;
    batches.back().end = i + 1;
    batched += p.bytes;
  }
  Progress own("reshard", total, o.progress && !o.bar);
  Progress& progress = o.bar ? *o.bar : own;
  progress.set_total(total);
  // The reader's own pool of `threads` threads (the writer keeps the write pool): source chunks are
  // pread outside the HDF5 mutex (reader.h), so as many reads are in flight as a batch has chunks,
  // while the writer's HDF5 writes go on; the threads mostly wait on the disk, and the memory bound
  // (reshard_memory_estimate) already counts a reader's buffers per thread.
  ThreadPool read_pool(std::max<size_t>(1, pool_of(o).size()));
  ChunkSource src(source, read_pool, cache_size(o));
  std::vector<ReadRange> ranges;
  for (const Piece& p : pieces) ranges.push_back({p.run->src_key, p.run->src_lo + p.x, p.run->src_lo + p.x + p.n, p.bytes});
  ReadAhead ahead(source, std::move(ranges), read_ahead_bytes(piece));
  BatchQueue queue(piece);  // a batch holds at most a piece's bytes
  std::thread reader = start_thread([&] {
    try {
      std::vector<Want> wants;
      for (size_t b = 0; b < batches.size(); ++b) {
        BatchBuffer* slot = queue.acquire_free(b);
        if (!slot) return;
        slot->size = batches[b].bytes;
        wants.clear();
        for (size_t i = batches[b].begin; i < batches[b].end; ++i) {
          const Piece& p = pieces[i];
          ahead.next();
          wants.push_back({p.run->src_key, p.run->src_lo + p.x, p.run->src_lo + p.x + p.n, slot->bytes.get() + p.at});
        }
        src.read(wants);
        queue.publish();
      }
    } catch (...) {
      queue.fail(std::current_exception());
    }
  }, "the reshard's reader");
  struct Join {
    std::thread& t;
    BatchQueue& q;
    ~Join() {
      q.abort();
      t.join();
    }
  } join{reader, queue};

  // Declared after the queue: destroyed first, it waits for the chunks that still read its slots.
  CheckpointWriter cw(target, o.write);
  cw.documents() = plan.documents;
  // Every rank's keys and padding are declared first (a batch may hold pieces of several ranks).
  std::vector<RankWriter*> writers;
  std::vector<std::vector<uint32_t>> ids;  // per rank: the writer's number of each plan key
  for (const ckpt::RankPlan& rp : plan.ranks) {
    RankWriter& w = cw.rank(rp.rank);
    std::vector<uint32_t> id(plan.keys.size(), UINT32_MAX);
    for (uint32_t k : rp.declares) id[k] = w.declare(plan.keys[k]);
    for (const ckpt::Padding& p : rp.padding) {
      if (p.key >= id.size() || id[p.key] == UINT32_MAX) throw InternalError("reshard plan: rank pads an undeclared key");
      w.declare_padding(id[p.key], p.lo, p.hi);
    }
    writers.push_back(&w);
    ids.push_back(std::move(id));
  }
  // A rank's pieces come one after another: once the batch holding its last ones is released, its
  // file is finished (closed and fsynced) in the background while the next ranks are written.
  std::vector<std::vector<uint32_t>> done_after(batches.size());  // ranks whose last batch it is
  {
    std::vector<size_t> last(plan.ranks.size(), SIZE_MAX);
    for (size_t b = 0; b < batches.size(); ++b)
      for (size_t i = batches[b].begin; i < batches[b].end; ++i) last[pieces[i].rank] = b;
    for (uint32_t i = 0; i < last.size(); ++i)
      if (last[i] != SIZE_MAX) done_after[last[i]].push_back(plan.ranks[i].rank);
  }
  // The previous batch's slot is released once its chunks no longer read it, after the next
  // batch's chunks are queued, so that the write pool never runs dry between batches.
  std::vector<std::pair<RankWriter*, uint64_t>> held;  // the writers of the held batch, with marks
  bool holding = false;
  auto release_held = [&] {
    for (const auto& h : held) h.first->fence(h.second);
    held.clear();
    if (holding) queue.release();
    holding = false;
  };
  for (size_t b = 0; b < batches.size(); ++b) {
    check_interrupt();  // a safe point: the writer's destructor removes the staging
    const BatchBuffer& buf = queue.acquire_full(b);
    std::vector<std::pair<RankWriter*, uint64_t>> marks;
    for (size_t i = batches[b].begin; i < batches[b].end; ++i) {
      const Piece& p = pieces[i];
      const uint32_t id = p.run->key < ids[p.rank].size() ? ids[p.rank][p.run->key] : UINT32_MAX;
      if (id == UINT32_MAX) throw InternalError("reshard plan: rank writes an undeclared key");
      RankWriter& w = *writers[p.rank];
      w.write_borrowed(id, p.run->lo + p.x, buf.bytes.get() + p.at, p.n);
      if (marks.empty() || marks.back().first != &w) marks.emplace_back(&w, 0);
      marks.back().second = w.mark();
    }
    release_held();  // batch b - 1: its ranks' writers are not used after this
    if (b > 0)
      for (uint32_t r : done_after[b - 1]) cw.finish_rank(r);
    held = std::move(marks);
    holding = true;
    res.bytes_written += buf.size;
    progress.advance(buf.size);
  }
  release_held();
  progress.phase("committing " + target);
  res.index = cw.commit();
  for (const auto& c : res.index.chunks) res.bytes_stored += c.stored_bytes;
  res.chunks_decoded = src.decoded();
  res.bytes_read = src.bytes_read();
  return res;
}

}  // namespace fpg::fpckpt
