#include "comm/mpi_backend.h"

#if defined(FPGATHER_HAVE_MPI)
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "comm/host_reduce.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"

namespace fpg::comm {
namespace {

constexpr size_t kPiece = size_t{1} << 30;  // bytes per MPI call: counts are ints

enum Kind : uint64_t { kAllGather = 1, kAllGatherV, kReduceScatter, kAllReduce, kBroadcast, kBarrier, kBlobs, kGather };

const char* kind_name(uint64_t k) {
  static const char* names[] = {"?", "all_gather", "all_gather_v", "reduce_scatter", "all_reduce",
                                "broadcast", "barrier", "all_gather_bytes", "gather_bytes"};
  return k < 9 ? names[k] : "?";
}

// What every rank must agree on; counts_hash covers all_gather_v's size list.
struct Call {
  uint64_t kind = 0, seq = 0, count = 0, dtype = 0, op = 0, root = 0, counts_hash = 0;
  std::array<uint64_t, 7> words() const { return {kind, seq, count, dtype, op, root, counts_hash}; }
};

std::string describe(const Call& c) {
  std::string s = kind_name(c.kind);
  switch (c.kind) {
    case kAllGather: return s + fmt::format("({} bytes per rank)", c.count);
    case kAllGatherV: return s + fmt::format("({} bytes in all)", c.count);
    case kReduceScatter:
    case kAllReduce:
      return s + fmt::format("({} x {}, {})", c.count, dtype_name(static_cast<DType>(c.dtype)),
                             reduce_op_name(static_cast<ReduceOp>(c.op)));
    case kBroadcast: return s + fmt::format("({} bytes from rank {})", c.count, c.root);
    case kGather: return s + fmt::format("(to rank {})", c.root);
    default: return s;
  }
}

uint64_t hash_sizes(const std::vector<size_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (size_t x : v) h = (h ^ x) * 1099511628211ull;
  return h;
}

class MpiWork final : public Work {
 public:
  void wait() override {}
  bool done() override { return true; }
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    mpi::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    mpi::check(MPI_Comm_size(comm_, &n_), "MPI_Comm_size");
  }

  int rank() const override { return rank_; }
  int size() const override { return n_; }
  std::string_view backend() const override { return "mpi"; }
  MemorySpace memory_space() const override { return MemorySpace::host; }

 protected:
  WorkPtr do_all_gather(const void* send, void* recv, size_t bytes_per_rank) override {
    agree({kAllGather, 0, bytes_per_rank});
    return gather_v(send, recv, std::vector<size_t>(static_cast<size_t>(n_), bytes_per_rank));
  }
  WorkPtr do_all_gather_v(const void* send, void* recv, const std::vector<size_t>& bytes_per_rank) override {
    size_t total = 0;
    for (size_t b : bytes_per_rank) total += b;
    agree({kAllGatherV, 0, total, 0, 0, 0, hash_sizes(bytes_per_rank)});
    return gather_v(send, recv, bytes_per_rank);
  }
  WorkPtr do_reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                            ReduceOp op) override {
    agree({kReduceScatter, 0, count_per_rank, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op)});
    const size_t eb = reduction_elem_bytes(dtype), shard = count_per_rank * eb;
    const char* s = static_cast<const char*>(send);
    // Rank q's contribution to my shard arrives in staging slot q; my own is read in place.
    exchange([&](int q) { return s + static_cast<size_t>(q) * shard; }, shard);
    srcs_[static_cast<size_t>(rank_)] = s + static_cast<size_t>(rank_) * shard;
    void* dst = recv;
    reduce_rank_order(dtype, op, srcs_.data(), n_, 0, count_per_rank, &dst, 1);
    return done();
  }
  WorkPtr do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    agree({kAllReduce, 0, count, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op)});
    // Rank q owns elements [q·per, (q+1)·per) ∩ [0, count): it reduces them, then all gather.
    const size_t eb = reduction_elem_bytes(dtype), n = static_cast<size_t>(n_);
    const size_t per = (count + n - 1) / n;
    std::vector<size_t> bytes(n);
    for (size_t q = 0; q < n; ++q) {
      const size_t b = std::min(count, per * q), e = std::min(count, b + per);
      bytes[q] = (e - b) * eb;
    }
    const char* s = static_cast<const char*>(send);
    const size_t mine = std::min(count, per * static_cast<size_t>(rank_)) * eb;
    // What rank q sends me is its input at my chunk; what I send q is my input at q's chunk.
    exchange_sized([&](int q) { return s + std::min(count, per * static_cast<size_t>(q)) * eb; },
                   [&](int q) { return bytes[static_cast<size_t>(q)]; }, bytes[static_cast<size_t>(rank_)]);
    srcs_[static_cast<size_t>(rank_)] = s + mine;
    void* dst = static_cast<char*>(recv) + mine;
    reduce_rank_order(dtype, op, srcs_.data(), n_, 0, bytes[static_cast<size_t>(rank_)] / eb, &dst, 1);
    return gather_v(dst, recv, bytes);
  }
  WorkPtr do_broadcast(void* buffer, size_t bytes, int root) override {
    agree({kBroadcast, 0, bytes, 0, 0, static_cast<uint64_t>(root)});
    bcast(buffer, bytes, root);
    return done();
  }
  WorkPtr do_barrier() override {
    agree({kBarrier});
    mpi::check(MPI_Barrier(comm_), "MPI_Barrier");
    return done();
  }
  std::vector<std::vector<uint8_t>> do_all_gather_bytes(const std::vector<uint8_t>& blob) override {
    agree({kBlobs});
    const std::vector<size_t> sizes = blob_sizes(blob.size());
    size_t total = 0, offset = 0;
    for (size_t q = 0; q < sizes.size(); ++q) {
      if (q == static_cast<size_t>(rank_)) offset = total;
      total += sizes[q];
    }
    std::vector<uint8_t> flat(total);
    if (!blob.empty()) std::memcpy(flat.data() + offset, blob.data(), blob.size());
    gather_v(flat.data() + offset, flat.data(), sizes);
    std::vector<std::vector<uint8_t>> out;
    size_t at = 0;
    for (size_t len : sizes) {
      out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(at), flat.begin() + static_cast<std::ptrdiff_t>(at + len));
      at += len;
    }
    return out;
  }
  std::vector<std::vector<uint8_t>> do_gather_bytes(const std::vector<uint8_t>& blob, int root) override {
    agree({kGather, 0, 0, 0, 0, static_cast<uint64_t>(root)});
    const std::vector<size_t> sizes = blob_sizes(blob.size());
    std::vector<std::vector<uint8_t>> out;
    if (rank_ != root) {
      send_bytes(blob.data(), blob.size(), root);
      return out;
    }
    out.resize(sizes.size());
    for (int q = 0; q < n_; ++q) {
      if (q == root) {
        out[static_cast<size_t>(q)] = blob;
        continue;
      }
      out[static_cast<size_t>(q)].resize(sizes[static_cast<size_t>(q)]);
      recv_bytes(out[static_cast<size_t>(q)].data(), sizes[static_cast<size_t>(q)], q);
    }
    return out;
  }

 private:
  static WorkPtr done() { return std::make_unique<MpiWork>(); }

  // Compares this call with rank 0's on every rank; all ranks reach the same verdict.
  void agree(Call c) {
    c.seq = ++seq_;
    const auto mine = c.words();
    std::vector<uint64_t> all(mine.size() * static_cast<size_t>(n_));
    mpi::check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(),
                             static_cast<int>(mine.size()), MPI_UINT64_T, comm_),
               "MPI_Allgather");
    const auto at = [&](int q) {
      Call x;
      const uint64_t* w = all.data() + static_cast<size_t>(q) * mine.size();
      x.kind = w[0], x.seq = w[1], x.count = w[2], x.dtype = w[3], x.op = w[4], x.root = w[5], x.counts_hash = w[6];
      return x;
    };
    const Call first = at(0);
    for (int q = 1; q < n_; ++q) {
      const Call other = at(q);
      if (other.words() != first.words())
        throw UsageError(fmt::format(
            "collective mismatch: rank 0 called {} as collective #{}, rank {} called {} as collective #{}",
            describe(first), first.seq, q, describe(other), other.seq));
    }
    srcs_.assign(static_cast<size_t>(n_), nullptr);
  }

  void bcast(void* buffer, size_t bytes, int root) {
    char* p = static_cast<char*>(buffer);
    for (size_t at = 0; at < bytes; at += kPiece)
      mpi::check(MPI_Bcast(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, root, comm_),
                 "MPI_Bcast");
  }
  void send_bytes(const void* data, size_t bytes, int to) {
    const char* p = static_cast<const char*>(data);
    for (size_t at = 0; at < bytes; at += kPiece)
      mpi::check(MPI_Send(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, to, 0, comm_),
                 "MPI_Send");
  }
  void recv_bytes(void* data, size_t bytes, int from) {
    char* p = static_cast<char*>(data);
    for (size_t at = 0; at < bytes; at += kPiece)
      mpi::check(MPI_Recv(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, from, 0, comm_,
                          MPI_STATUS_IGNORE),
                 "MPI_Recv");
  }

  // Packed in rank order into recv; this rank's part comes from send (copied unless in place).
  WorkPtr gather_v(const void* send, void* recv, const std::vector<size_t>& bytes) {
    char* r = static_cast<char*>(recv);
    size_t offset = 0;
    for (int q = 0; q < n_; ++q) {
      const size_t len = bytes[static_cast<size_t>(q)];
      if (q == rank_ && len != 0 && r + offset != send) std::memmove(r + offset, send, len);
      bcast(r + offset, len, q);
      offset += len;
    }
    return done();
  }

  std::vector<size_t> blob_sizes(size_t mine) {
    const uint64_t m = mine;
    std::vector<uint64_t> all(static_cast<size_t>(n_));
    mpi::check(MPI_Allgather(&m, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
    return {all.begin(), all.end()};
  }

  // Equal-sized exchange: I send to_q(q) (shard bytes) to every other rank q and receive rank q's
  // piece for me into staging slot q; srcs_[q] then points at it.
  template <class To>
  void exchange(const To& to_q, size_t bytes) {
    exchange_sized(to_q, [&](int) { return bytes; }, bytes);
  }
  // to_q(q): what I send q; send_len(q): its length; recv_len: what every rank sends me.
  template <class To, class Len>
  void exchange_sized(const To& to_q, const Len& send_len, size_t recv_len) {
    staging_.resize(static_cast<size_t>(n_) * recv_len);
    for (int k = 1; k < n_; ++k) {
      const int to = (rank_ + k) % n_, from = (rank_ - k + n_) % n_;
      const char* s = static_cast<const char*>(to_q(to));
      char* d = staging_.data() + static_cast<size_t>(from) * recv_len;
      const size_t slen = send_len(to);
      // Pieces on each side follow that side's length, which the peer sees as its own.
      reqs_.clear();
      for (size_t at = 0; at < recv_len; at += kPiece) {
        reqs_.emplace_back();
        mpi::check(MPI_Irecv(d + at, static_cast<int>(std::min(kPiece, recv_len - at)), MPI_BYTE, from, 1, comm_,
                             &reqs_.back()),
                   "MPI_Irecv");
      }
      for (size_t at = 0; at < slen; at += kPiece) {
        reqs_.emplace_back();
        mpi::check(MPI_Isend(s + at, static_cast<int>(std::min(kPiece, slen - at)), MPI_BYTE, to, 1, comm_,
                             &reqs_.back()),
                   "MPI_Isend");
      }
      mpi::check(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      srcs_[static_cast<size_t>(from)] = d;
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, n_ = 1;
  uint64_t seq_ = 0;
  std::vector<char> staging_;
  std::vector<const void*> srcs_;
  std::vector<MPI_Request> reqs_;
};

class MpiGroup final : public CommunicatorGroup {
 public:
  explicit MpiGroup(int size) : n_(size) {}
  std::string_view backend() const override { return "mpi"; }
  int size() const override { return n_; }

  void run(const std::function<void(Communicator&)>& fn) override {
    MPI_Comm comm = MPI_COMM_NULL;
    mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    mpi::check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    try {
      MpiCommunicator c(comm);
      fn(c);
    } catch (...) {
      // The other processes may be blocked in a collective this rank will never join: leave MPI
      // unfinalised so that this process's exit makes mpirun end the job.
      mpi::mark_failed();
      throw;
    }
    mpi::check(MPI_Comm_free(&comm), "MPI_Comm_free");
  }

 private:
  const int n_;
};

}  // namespace

std::unique_ptr<CommunicatorGroup> make_mpi_group(int size, const CommOptions&) {
  // Without a launcher MPI would start as a singleton of one process: say how to run instead.
  if (!launched_by_mpi() && size != 1)
    throw UsageError(fmt::format("mpi communicator: {} ranks need {} processes: run under `mpirun -n {}`", size,
                                 size, size));
  const int world = mpi::world_size();
  if (size != world)
    throw UsageError(fmt::format("mpi communicator: {} ranks requested but {} processes were started "
                                 "(run under `mpirun -n {}`, one rank per process)",
                                 size, world, size));
  return std::make_unique<MpiGroup>(size);
}

}  // namespace fpg::comm

#else
#include "core/error.h"

namespace fpg::comm {

std::unique_ptr<CommunicatorGroup> make_mpi_group(int, const CommOptions&) {
  throw UsageError("the mpi communicator is not built into this fpgather (it needs MPI); use threads");
}

}  // namespace fpg::comm
#endif
