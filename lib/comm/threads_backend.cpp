#include "comm/threads_backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/comm_error.h"
#include "comm/host_reduce.h"
#include "comm/rendezvous.h"
#include "core/error.h"
#include "core/thread_start.h"

namespace fpg::comm {
namespace {

enum class OpKind : uint8_t {
  all_gather, all_gather_v, reduce_scatter, all_reduce, broadcast, barrier, all_gather_bytes, gather_bytes,
};

const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::all_gather: return "all_gather";
    case OpKind::all_gather_v: return "all_gather_v";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::broadcast: return "broadcast";
    case OpKind::barrier: return "barrier";
    case OpKind::all_gather_bytes: return "all_gather_bytes";
    case OpKind::gather_bytes: return "gather_bytes";
  }
  return "?";
}

// One rank's call, as the other ranks see it while the collective runs.
struct Op {
  OpKind kind = OpKind::barrier;
  uint64_t seq = 0;  // 1-based issue number on this rank; equal on all ranks for one collective
  const void* send = nullptr;
  void* recv = nullptr;  // broadcast: the buffer
  size_t count = 0;      // bytes (gathers, broadcast) or elements (reductions)
  DType dtype = DType::U8;
  ReduceOp rop = ReduceOp::sum;
  int root = 0;
  std::vector<size_t> counts;  // all_gather_v; a copy, since a deferred op outlives the caller's vector
  const std::vector<uint8_t>* blob = nullptr;
  std::vector<std::vector<uint8_t>>* blobs_out = nullptr;
};

std::string describe(const Op& op) {
  std::string s = kind_name(op.kind);
  switch (op.kind) {
    case OpKind::all_gather: return s + fmt::format("({} bytes per rank)", op.count);
    case OpKind::all_gather_v: return s + fmt::format("([{}] bytes)", fmt::join(op.counts, ", "));
    case OpKind::reduce_scatter:
    case OpKind::all_reduce:
      return s + fmt::format("({} x {}, {})", op.count, dtype_name(op.dtype), reduce_op_name(op.rop));
    case OpKind::broadcast: return s + fmt::format("({} bytes from rank {})", op.count, op.root);
    case OpKind::gather_bytes: return s + fmt::format("(to rank {})", op.root);
    default: return s;
  }
}

bool same_call(const Op& a, const Op& b) {
  return a.kind == b.kind && a.seq == b.seq && a.count == b.count && a.dtype == b.dtype && a.rop == b.rop &&
         a.root == b.root && a.counts == b.counts;
}

// State shared by the ranks of one run.
struct Shared {
  Shared(int n, const CommOptions& o) : n(n), options(o), rv(n, o.timeout), posted(static_cast<size_t>(n)) {}
  const int n;
  const CommOptions options;
  Rendezvous rv;
  std::vector<const Op*> posted;  // posted[r]: rank r's call, valid between the two rendezvous
};

class ThreadsCommunicator;

class ThreadsWork final : public Work {
 public:
  ThreadsWork(ThreadsCommunicator* comm, uint64_t seq) : comm_(comm), seq_(seq) {}
  void wait() override;
  bool done() override;

 private:
  ThreadsCommunicator* comm_;
  uint64_t seq_;
};

class ThreadsCommunicator final : public Communicator {
 public:
  ThreadsCommunicator(Shared& g, int rank)
      : g_(g), rank_(rank), srcs_(static_cast<size_t>(g.n)), dsts_(static_cast<size_t>(g.n)) {}

  int rank() const override { return rank_; }
  int size() const override { return g_.n; }
  std::string_view backend() const override { return "threads"; }
  MemorySpace memory_space() const override { return MemorySpace::host; }

  // Runs every pending collective up to and including `seq`, in issue order.
  void progress_to(uint64_t seq) {
    while (completed_ < seq) {
      if (broken_) throw CommAborted("threads communicator: an earlier collective on this rank failed");
      if (pending_.empty()) throw InternalError("threads communicator: waiting on a collective never issued");
      Op op = std::move(pending_.front());
      pending_.pop_front();
      execute(op);
    }
  }
  bool completed(uint64_t seq) const { return completed_ >= seq; }
  void flush() { progress_to(issued_); }

 protected:
  WorkPtr do_all_gather(const void* send, void* recv, size_t bytes_per_rank) override {
    Op op;
    op.kind = OpKind::all_gather;
    op.send = send;
    op.recv = recv;
    op.count = bytes_per_rank;
    return submit(std::move(op));
  }
  WorkPtr do_all_gather_v(const void* send, void* recv, const std::vector<size_t>& bytes_per_rank) override {
    Op op;
    op.kind = OpKind::all_gather_v;
    op.send = send;
    op.recv = recv;
    op.counts = bytes_per_rank;
    return submit(std::move(op));
  }
  WorkPtr do_reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                            ReduceOp rop) override {
    Op op;
    op.kind = OpKind::reduce_scatter;
    op.send = send;
    op.recv = recv;
    op.count = count_per_rank;
    op.dtype = dtype;
    op.rop = rop;
    return submit(std::move(op));
  }
  WorkPtr do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp rop) override {
    Op op;
    op.kind = OpKind::all_reduce;
    op.send = send;
    op.recv = recv;
    op.count = count;
    op.dtype = dtype;
    op.rop = rop;
    return submit(std::move(op));
  }
  WorkPtr do_broadcast(void* buffer, size_t bytes, int root) override {
    Op op;
    op.kind = OpKind::broadcast;
    op.recv = buffer;
    op.count = bytes;
    op.root = root;
    return submit(std::move(op));
  }
  WorkPtr do_barrier() override {
    Op op;
    op.kind = OpKind::barrier;
    return submit(std::move(op));
  }
  std::vector<std::vector<uint8_t>> do_all_gather_bytes(const std::vector<uint8_t>& blob) override {
    std::vector<std::vector<uint8_t>> out;
    Op op;
    op.kind = OpKind::all_gather_bytes;
    op.blob = &blob;
    op.blobs_out = &out;
    submit(std::move(op))->wait();  // blocking: runs everything issued before it too
    return out;
  }
  std::vector<std::vector<uint8_t>> do_gather_bytes(const std::vector<uint8_t>& blob, int root) override {
    std::vector<std::vector<uint8_t>> out;
    Op op;
    op.kind = OpKind::gather_bytes;
    op.blob = &blob;
    op.blobs_out = &out;
    op.root = root;
    submit(std::move(op))->wait();
    return out;
  }

 private:
  WorkPtr submit(Op op) {
    if (broken_) throw CommAborted("threads communicator: an earlier collective on this rank failed");
    op.seq = ++issued_;
    const uint64_t seq = op.seq;
    if (g_.options.completion == Completion::immediate) {  // nothing is ever pending then
      execute(op);
    } else {
      pending_.push_back(std::move(op));
    }
    return std::make_unique<ThreadsWork>(this, seq);
  }

  void execute(const Op& op) {
    const char* what = kind_name(op.kind);
    g_.posted[static_cast<size_t>(rank_)] = &op;
    try {
      g_.rv.arrive_and_wait(rank_, /*abortable=*/true, what, op.seq);
    } catch (...) {
      broken_ = true;
      throw;
    }
    // From here every rank is inside this collective and reads the others' buffers: whatever
    // happens, meet again before leaving so no rank unwinds while another still reads its memory.
    std::exception_ptr err;
    try {
      check_matches();
      run_body(op);
    } catch (...) {
      err = std::current_exception();
    }
    g_.rv.arrive_and_wait(rank_, /*abortable=*/false, what, op.seq);
    if (err) {
      broken_ = true;
      std::rethrow_exception(err);
    }
    completed_ = op.seq;
  }

  // Every rank compares all calls with rank 0's, so all ranks reach the same verdict and message.
  void check_matches() const {
    const Op& first = *g_.posted[0];
    for (int q = 1; q < g_.n; ++q) {
      const Op& other = *g_.posted[static_cast<size_t>(q)];
      if (!same_call(first, other))
        throw UsageError(fmt::format(
            "collective mismatch: rank 0 called {} as collective #{}, rank {} called {} as collective #{}",
            describe(first), first.seq, q, describe(other), other.seq));
    }
  }

  const Op& posted(int q) const { return *g_.posted[static_cast<size_t>(q)]; }

  void run_body(const Op& op) {
    const int n = g_.n;
    switch (op.kind) {
      case OpKind::all_gather: {
        char* recv = static_cast<char*>(op.recv);
        for (int q = 0; q < n; ++q) {
          char* dst = recv + static_cast<size_t>(q) * op.count;
          const void* src = posted(q).send;
          if (op.count != 0 && dst != src) std::memcpy(dst, src, op.count);
        }
        return;
      }
      case OpKind::all_gather_v: {
        char* recv = static_cast<char*>(op.recv);
        size_t offset = 0;
        for (int q = 0; q < n; ++q) {
          const size_t len = op.counts[static_cast<size_t>(q)];
          const void* src = posted(q).send;
          if (len != 0 && recv + offset != src) std::memcpy(recv + offset, src, len);
          offset += len;
        }
        return;
      }
      case OpKind::broadcast:
        if (rank_ != op.root && op.count != 0) std::memcpy(op.recv, posted(op.root).recv, op.count);
        return;
      case OpKind::reduce_scatter: {
        const size_t shard = op.count * reduction_elem_bytes(op.dtype);
        for (int q = 0; q < n; ++q)
          srcs_[static_cast<size_t>(q)] = static_cast<const char*>(posted(q).send) + static_cast<size_t>(rank_) * shard;
        void* dst = op.recv;
        reduce_rank_order(op.dtype, op.rop, srcs_.data(), n, 0, op.count, &dst, 1);
        return;
      }
      case OpKind::all_reduce: {
        // Rank r owns chunk r of every buffer: nobody else reads or writes it during this step.
        const size_t align = 64 / reduction_elem_bytes(op.dtype);
        size_t per = (op.count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
        per = (per + align - 1) / align * align;
        const size_t begin = std::min(op.count, per * static_cast<size_t>(rank_));
        const size_t end = std::min(op.count, begin + per);
        for (int q = 0; q < n; ++q) {
          srcs_[static_cast<size_t>(q)] = posted(q).send;
          dsts_[static_cast<size_t>(q)] = posted(q).recv;
        }
        reduce_rank_order(op.dtype, op.rop, srcs_.data(), n, begin, end, dsts_.data(), n);
        return;
      }
      case OpKind::barrier: return;
      case OpKind::all_gather_bytes:
      case OpKind::gather_bytes: {
        auto& out = *op.blobs_out;
        out.clear();
        if (op.kind == OpKind::gather_bytes && rank_ != op.root) return;
        out.reserve(static_cast<size_t>(n));
        for (int q = 0; q < n; ++q) out.push_back(*posted(q).blob);
        return;
      }
    }
  }

  Shared& g_;
  const int rank_;
  uint64_t issued_ = 0, completed_ = 0;
  std::deque<Op> pending_;  // deferred mode: issued, not yet run
  bool broken_ = false;     // a collective failed here; the group is being aborted
  std::vector<const void*> srcs_;
  std::vector<void*> dsts_;
};

void ThreadsWork::wait() { comm_->progress_to(seq_); }
bool ThreadsWork::done() { return comm_->completed(seq_); }

class ThreadsGroup final : public CommunicatorGroup {
 public:
  ThreadsGroup(int size, const CommOptions& options) : n_(size), options_(options) {}

  std::string_view backend() const override { return "threads"; }
  int size() const override { return n_; }

  void run(const std::function<void(Communicator&)>& fn) override {
    Shared g(n_, options_);
    RankFailures failures;
    const auto rank_main = [&](int r) {
      try {
        ThreadsCommunicator comm(g, r);
        fn(comm);
        comm.flush();  // deferred collectives still run before the rank leaves
        g.rv.rank_left(r);
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        const bool aborted = failures.record(e);
        if (!aborted) g.rv.abort(fmt::format("rank {} failed: {}", r, what_of(e)));
        g.rv.rank_left(r);
      }
    };

    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(n_ - 1));
    try {
      for (int r = 1; r < n_; ++r)
        threads.push_back(start_thread([&rank_main, r] { rank_main(r); }, fmt::format("rank {} of {}", r, n_)));
    } catch (...) {
      g.rv.abort("could not start the rank threads");
      for (auto& t : threads) t.join();
      throw;
    }
    rank_main(0);
    for (auto& t : threads) t.join();
    failures.rethrow_first();
  }

 private:
  const int n_;
  const CommOptions options_;
};

}  // namespace

std::unique_ptr<CommunicatorGroup> make_threads_group(int size, const CommOptions& options) {
  if (size < 1 || size > kMaxThreadsRanks)
    throw UsageError(fmt::format("threads communicator: {} ranks requested (1 to {} allowed)", size,
                                 kMaxThreadsRanks));
  return std::make_unique<ThreadsGroup>(size, options);
}

}  // namespace fpg::comm
