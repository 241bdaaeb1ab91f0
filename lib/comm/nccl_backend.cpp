#include "comm/nccl_backend.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_start.h"

#if defined(FPGATHER_HAVE_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/comm_error.h"
#include "comm/mpi_runtime.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"
#include "kernels/max_keys.h"

#define FPG_NCCL_CHECK(call)                                                                     \
  do {                                                                                           \
    const ncclResult_t fpg_nc_ = (call);                                                         \
    if (fpg_nc_ != ncclSuccess)                                                                  \
      throw ::fpg::comm::CommAborted(std::string(#call) + " failed at " + __FILE__ + ":" +     \
                                     std::to_string(__LINE__) + ": " + ncclGetErrorString(fpg_nc_)); \
  } while (0)

namespace fpg::comm {
namespace {

using Clock = std::chrono::steady_clock;

// What the ranks of one single-process run share: a failed rank sets `failed`, the others' blocking
// waits see it and abort their own communicators (NCCL communicators are not thread-safe, so each
// rank aborts only its own).
struct SharedState {
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string reason;
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lk(mu);
    if (!failed.exchange(true)) reason = why;
  }
  std::string why() {
    std::lock_guard<std::mutex> lk(mu);
    return reason;
  }
};

ncclDataType_t nccl_type(DType dt) { return dt == DType::F32 ? ncclFloat32 : ncclBfloat16; }

class NcclCommunicator;

class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator& c, cudaEvent_t ev, bool host_blocking) : c_(c), ev_(ev), host_blocking_(host_blocking) {}
  ~NcclWork() override { cudaEventDestroy(ev_); }  // safe while pending: CUDA defers the release
  void wait() override;
  bool done() override;

 private:
  NcclCommunicator& c_;
  cudaEvent_t ev_;
  bool host_blocking_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int n, int device, SharedState* shared, const CommOptions& o)
      : comm_(comm), rank_(rank), n_(n), device_(device), shared_(shared), options_(o) {
    FPG_CUDA_CHECK(cudaSetDevice(device_));
    FPG_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    FPG_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    FPG_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    // Best effort: every handle has been waited or dropped; the streams may still run.
    if (!aborted_) cudaStreamSynchronize(comm_stream_);
    if (scratch_) cudaFree(scratch_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(comm_stream_);
    cudaStreamDestroy(compute_);
  }

  int rank() const override { return rank_; }
  int size() const override { return n_; }
  std::string_view backend() const override { return "nccl"; }
  MemorySpace memory_space() const override { return MemorySpace::device; }

  cudaStream_t compute_stream() const { return compute_; }
  int device() const { return device_; }

  // Ends the NCCL communicator: destroyed after a clean run, aborted after a failure.
  void finish(bool ok) {
    if (aborted_) return;
    if (ok) {
      host_wait_stream(compute_);
      host_wait_stream(comm_stream_);
      FPG_NCCL_CHECK(ncclCommDestroy(comm_));
    } else {
      abort_comm();
    }
    aborted_ = true;  // either way the communicator is gone
  }

  // Blocks the host until `ev` completes, watching for a failed peer and the timeout.
  void host_wait(cudaEvent_t ev) {
    const auto t0 = Clock::now();
    for (;;) {
      const cudaError_t e = cudaEventQuery(ev);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) FPG_CUDA_CHECK(e);
      ncclResult_t async = ncclSuccess;
      FPG_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess) {
        abort_comm();
        throw CommAborted(std::string("nccl communicator: ") + ncclGetErrorString(async));
      }
      if (shared_ && shared_->failed) {
        abort_comm();
        throw CommAborted("communicator group aborted: " + shared_->why());
      }
      if (options_.timeout.count() > 0 && Clock::now() - t0 > options_.timeout) {
        abort_comm();
        throw CommAborted(fmt::format("rank {} waited more than {} ms for a collective", rank_,
                                      options_.timeout.count()));
      }
      std::this_thread::yield();
    }
  }
  void make_compute_wait(cudaEvent_t ev) { FPG_CUDA_CHECK(cudaStreamWaitEvent(compute_, ev, 0)); }

 protected:
  WorkPtr do_all_gather(const void* send, void* recv, size_t bytes_per_rank) override {
    begin();
    if (bytes_per_rank)
      FPG_NCCL_CHECK(ncclAllGather(send, recv, bytes_per_rank, ncclUint8, comm_, comm_stream_));
    return end();
  }
  WorkPtr do_all_gather_v(const void* send, void* recv, const std::vector<size_t>& bytes_per_rank) override {
    begin();
    gather_v(send, recv, bytes_per_rank);
    return end();
  }
  WorkPtr do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    begin();
    if (count != 0) {
      if (op == ReduceOp::sum) {
        FPG_NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(dtype), ncclSum, comm_, comm_stream_));
      } else {
        // Keys of the whole input; the in-place reduce-scatter leaves ours at slot rank.
        const size_t total = count * static_cast<size_t>(n_);
        uint32_t* keys = scratch_keys(total);
        cuda::encode_max_keys(dtype, send, keys, total, comm_stream_);
        uint32_t* mine = keys + static_cast<size_t>(rank_) * count;
        FPG_NCCL_CHECK(ncclReduceScatter(keys, mine, count, ncclUint32, ncclMax, comm_, comm_stream_));
        cuda::decode_max_keys(dtype, mine, recv, count, comm_stream_);
      }
    }
    return end();
  }
  WorkPtr do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    begin();
    if (count != 0) {
      if (op == ReduceOp::sum) {
        FPG_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(dtype), ncclSum, comm_, comm_stream_));
      } else {
        uint32_t* keys = scratch_keys(count);
        cuda::encode_max_keys(dtype, send, keys, count, comm_stream_);
        FPG_NCCL_CHECK(ncclAllReduce(keys, keys, count, ncclUint32, ncclMax, comm_, comm_stream_));
        cuda::decode_max_keys(dtype, keys, recv, count, comm_stream_);
      }
    }
    return end();
  }
  WorkPtr do_broadcast(void* buffer, size_t bytes, int root) override {
    begin();
    if (bytes) FPG_NCCL_CHECK(ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, comm_, comm_stream_));
    return end();
  }
  WorkPtr do_barrier() override {
    begin();
    uint32_t* one = scratch_keys(1);
    FPG_NCCL_CHECK(ncclAllReduce(one, one, 1, ncclUint32, ncclMax, comm_, comm_stream_));
    return end(/*host_blocking=*/true);
  }
  std::vector<std::vector<uint8_t>> do_all_gather_bytes(const std::vector<uint8_t>& blob) override {
    return blobs(blob);
  }
  std::vector<std::vector<uint8_t>> do_gather_bytes(const std::vector<uint8_t>& blob, int root) override {
    auto all = blobs(blob);
    if (rank_ != root) all.clear();
    return all;
  }

 private:
  void begin() {
    if (aborted_) throw CommAborted("nccl communicator: an earlier collective on this rank failed");
    FPG_CUDA_CHECK(cudaSetDevice(device_));
    FPG_CUDA_CHECK(cudaEventRecord(ready_, compute_));
    FPG_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
  }
  WorkPtr end(bool host_blocking = false) {
    cudaEvent_t ev = nullptr;
    FPG_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const cudaError_t e = cudaEventRecord(ev, comm_stream_);
    if (e != cudaSuccess) cudaEventDestroy(ev);
    FPG_CUDA_CHECK(e);
    return std::make_unique<NcclWork>(*this, ev, host_blocking);
  }

  // Uneven all-gather as one NCCL group of broadcasts, one per rank with a non-empty part.
  void gather_v(const void* send, void* recv, const std::vector<size_t>& bytes) {
    char* r = static_cast<char*>(recv);
    FPG_NCCL_CHECK(ncclGroupStart());
    size_t offset = 0;
    ncclResult_t rc = ncclSuccess;
    for (int q = 0; q < n_ && rc == ncclSuccess; ++q) {
      const size_t len = bytes[static_cast<size_t>(q)];
      if (len != 0) rc = ncclBroadcast(q == rank_ ? send : r + offset, r + offset, len, ncclUint8, q, comm_, comm_stream_);
      offset += len;
    }
    const ncclResult_t end_rc = ncclGroupEnd();
    FPG_NCCL_CHECK(rc);
    FPG_NCCL_CHECK(end_rc);
  }

  // Device scratch of at least `n` keys. Growing waits for the collectives that may still use it.
  uint32_t* scratch_keys(size_t n) {
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(uint32_t);
    if (bytes > scratch_bytes_) {
      host_wait_stream();
      if (scratch_) FPG_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      FPG_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
      scratch_bytes_ = bytes;
    }
    return static_cast<uint32_t*>(scratch_);
  }

  // Blocks the host until everything enqueued on `stream` (default: the communication stream) is done.
  void host_wait_stream(cudaStream_t stream = nullptr) {
    cudaEvent_t ev = nullptr;
    FPG_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    NcclWork w(*this, ev, true);  // owns ev
    FPG_CUDA_CHECK(cudaEventRecord(ev, stream ? stream : comm_stream_));
    host_wait(ev);
  }

  // Host blobs through the device: sizes by all-gather, then the bytes by the uneven gather.
  std::vector<std::vector<uint8_t>> blobs(const std::vector<uint8_t>& blob) {
    const size_t n = static_cast<size_t>(n_);
    std::vector<uint64_t> sizes(n);
    DeviceBuffer sz(n * sizeof(uint64_t));
    const uint64_t mine = blob.size();
    begin();
    FPG_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(sz.p) + static_cast<size_t>(rank_) * 8, &mine, 8,
                                   cudaMemcpyHostToDevice, comm_stream_));
    FPG_NCCL_CHECK(ncclAllGather(static_cast<char*>(sz.p) + static_cast<size_t>(rank_) * 8, sz.p, 8, ncclUint8,
                                 comm_, comm_stream_));
    FPG_CUDA_CHECK(cudaMemcpyAsync(sizes.data(), sz.p, n * 8, cudaMemcpyDeviceToHost, comm_stream_));
    host_wait_stream();
    std::vector<size_t> bytes(sizes.begin(), sizes.end());
    size_t total = 0, offset = 0;
    for (size_t q = 0; q < n; ++q) {
      if (q == static_cast<size_t>(rank_)) offset = total;
      total += bytes[q];
    }
    std::vector<uint8_t> flat(total);
    DeviceBuffer d(total);
    if (!blob.empty())
      FPG_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(d.p) + offset, blob.data(), blob.size(),
                                     cudaMemcpyHostToDevice, comm_stream_));
    gather_v(static_cast<char*>(d.p) + offset, d.p, bytes);
    if (total) FPG_CUDA_CHECK(cudaMemcpyAsync(flat.data(), d.p, total, cudaMemcpyDeviceToHost, comm_stream_));
    host_wait_stream();
    std::vector<std::vector<uint8_t>> out;
    size_t at = 0;
    for (size_t len : bytes) {
      out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(at), flat.begin() + static_cast<std::ptrdiff_t>(at + len));
      at += len;
    }
    return out;
  }

  struct DeviceBuffer {
    explicit DeviceBuffer(size_t bytes) {
      if (bytes) FPG_CUDA_CHECK(cudaMalloc(&p, bytes));
    }
    ~DeviceBuffer() {
      if (p) cudaFree(p);
    }
    void* p = nullptr;
  };

  void abort_comm() {
    if (aborted_) return;
    aborted_ = true;
    ncclCommAbort(comm_);  // its result does not matter: the group is being torn down
  }

  ncclComm_t comm_;
  const int rank_, n_, device_;
  SharedState* shared_;
  const CommOptions options_;
  cudaStream_t compute_ = nullptr, comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  bool aborted_ = false;
};

void NcclWork::wait() {
  if (host_blocking_) c_.host_wait(ev_);
  else c_.make_compute_wait(ev_);
}

bool NcclWork::done() {
  const cudaError_t e = cudaEventQuery(ev_);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) FPG_CUDA_CHECK(e);
  return false;
}

// One process, `n` local GPUs, one thread each.
class LocalNcclGroup final : public CommunicatorGroup {
 public:
  LocalNcclGroup(int n, const CommOptions& o) : n_(n), options_(o) {}
  std::string_view backend() const override { return "nccl"; }
  int size() const override { return n_; }

  void run(const std::function<void(Communicator&)>& fn) override {
    std::vector<ncclComm_t> comms(static_cast<size_t>(n_));
    std::vector<int> devs(static_cast<size_t>(n_));
    for (int d = 0; d < n_; ++d) devs[static_cast<size_t>(d)] = d;
    FPG_NCCL_CHECK(ncclCommInitAll(comms.data(), n_, devs.data()));
    SharedState shared;
    RankFailures failures;
    const auto rank_main = [&](int r) {
      std::unique_ptr<NcclCommunicator> c;
      try {
        c = std::make_unique<NcclCommunicator>(comms[static_cast<size_t>(r)], r, n_, r, &shared, options_);
        fn(*c);
        c->finish(true);
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        failures.record(e);
        shared.fail(fmt::format("rank {} failed: {}", r, what_of(e)));
        if (c) c->finish(false);
        else ncclCommAbort(comms[static_cast<size_t>(r)]);
      }
    };
    // The ranks start together once every thread exists: a rank that ran while a later one's thread
    // was refused would wait in its first collective for a rank that never comes.
    std::mutex start_mu;
    std::condition_variable start_cv;
    int start = 0;  // 1: run, -1: a thread was refused, leave
    std::vector<std::thread> threads;
    try {
      for (int r = 1; r < n_; ++r)
        threads.push_back(start_thread(
            [&, r] {
              {
                std::unique_lock<std::mutex> l(start_mu);
                start_cv.wait(l, [&] { return start != 0; });
                if (start < 0) return;
              }
              rank_main(r);
            },
            fmt::format("rank {} of {}", r, n_)));
    } catch (...) {
      {
        std::lock_guard<std::mutex> l(start_mu);
        start = -1;
      }
      start_cv.notify_all();
      for (auto& t : threads) t.join();
      for (ncclComm_t c : comms) ncclCommDestroy(c);
      throw;
    }
    {
      std::lock_guard<std::mutex> l(start_mu);
      start = 1;
    }
    start_cv.notify_all();
    rank_main(0);
    for (auto& t : threads) t.join();
    failures.rethrow_first();
  }

 private:
  const int n_;
  const CommOptions options_;
};

#if defined(FPGATHER_HAVE_MPI)
// One process per GPU under mpirun.
class MpiNcclGroup final : public CommunicatorGroup {
 public:
  MpiNcclGroup(int n, const CommOptions& o) : n_(n), options_(o) {}
  std::string_view backend() const override { return "nccl"; }
  int size() const override { return n_; }

  void run(const std::function<void(Communicator&)>& fn) override {
    try {
      const int rank = mpi::world_rank();
      MPI_Comm local = MPI_COMM_NULL;
      mpi::check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
                 "MPI_Comm_split_type");
      int local_rank = 0;
      mpi::check(MPI_Comm_rank(local, &local_rank), "MPI_Comm_rank");
      mpi::check(MPI_Comm_free(&local), "MPI_Comm_free");
      const int devices = cuda::device_count();
      if (devices < 1) throw UsageError("nccl communicator: this process sees no CUDA device");
      const int device = local_rank % devices;
      FPG_CUDA_CHECK(cudaSetDevice(device));
      ncclUniqueId id{};
      if (rank == 0) FPG_NCCL_CHECK(ncclGetUniqueId(&id));
      mpi::check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
      ncclComm_t comm = nullptr;
      FPG_NCCL_CHECK(ncclCommInitRank(&comm, n_, id, rank));
      std::unique_ptr<NcclCommunicator> c;
      try {
        c = std::make_unique<NcclCommunicator>(comm, rank, n_, device, nullptr, options_);
      } catch (...) {
        ncclCommAbort(comm);
        throw;
      }
      try {
        fn(*c);
        c->finish(true);
      } catch (...) {
        c->finish(false);
        throw;
      }
    } catch (...) {
      mpi::mark_failed();  // see mpi_runtime.h: mpirun ends the job when this process exits
      throw;
    }
  }

 private:
  const int n_;
  const CommOptions options_;
};
#endif

NcclCommunicator& as_nccl(Communicator& c) {
  auto* n = dynamic_cast<NcclCommunicator*>(&c);
  if (!n) throw UsageError(fmt::format("the {} communicator has no CUDA stream", c.backend()));
  return *n;
}

}  // namespace

std::unique_ptr<CommunicatorGroup> make_nccl_group(int size, const CommOptions& options) {
  if (size < 1) throw UsageError(fmt::format("nccl communicator: {} ranks requested", size));
  if (launched_by_mpi()) {
#if defined(FPGATHER_HAVE_MPI)
    const int world = mpi::world_size();
    if (size != world)
      throw UsageError(fmt::format("nccl communicator: {} ranks requested but mpirun started {} processes", size,
                                   world));
    return std::make_unique<MpiNcclGroup>(size, options);
#else
    throw UsageError("nccl communicator: started by mpirun, but this fpgather is built without MPI");
#endif
  }
  const int devices = cuda::device_count();
  if (size > devices)
    throw UsageError(fmt::format("nccl communicator: {} ranks requested but {} CUDA device{} visible", size,
                                 devices, devices == 1 ? " is" : "s are"));
  return std::make_unique<LocalNcclGroup>(size, options);
}

cudaStream_t nccl_compute_stream(Communicator& comm) { return as_nccl(comm).compute_stream(); }
int nccl_device(Communicator& comm) { return as_nccl(comm).device(); }

}  // namespace fpg::comm

#else

namespace fpg::comm {

std::unique_ptr<CommunicatorGroup> make_nccl_group(int, const CommOptions&) {
  throw UsageError("the nccl communicator is not built into this fpgather (it needs CUDA and NCCL); use threads");
}
cudaStream_t nccl_compute_stream(Communicator& comm) {
  throw UsageError(fmt::format("the {} communicator has no CUDA stream", comm.backend()));
}
int nccl_device(Communicator& comm) {
  throw UsageError(fmt::format("the {} communicator has no CUDA device", comm.backend()));
}

}  // namespace fpg::comm
#endif
