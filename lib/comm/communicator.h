// One rank's view of a group of N ranks and the collectives the step pipelines use.
// Backends: threads (comm/threads_backend.h), MPI and NCCL; callers only see
// this interface, so the pipelines do not change with the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/memory_space.h"
#include "comm/reduce_op.h"
#include "comm/work.h"
#include "core/dtype.h"

namespace fpg::comm {

// Rules common to every collective:
//  - Every rank of the group issues the same collectives in the same order with matching arguments
//    (sizes, dtype, op, root). A mismatch is an error where the backend can detect it (threads does:
//    UsageError on every rank), undefined otherwise (as with NCCL).
//  - Data buffers live in memory_space(); see work.h for when they may be touched again.
//  - Gathers and broadcast move raw bytes (any dtype); reductions take an element count and a dtype.
//  - Out-of-place forms take disjoint send and receive buffers; the in-place forms are the aliasing
//    that torch.distributed / NCCL allow, named below. Zero sizes are allowed everywhere.
//  - The public functions check arguments (UsageError) and then call the backend's do_* function.
// A Communicator is used by its own rank's thread only.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;
  virtual MemorySpace memory_space() const = 0;

  // Equal all-gather, all_gather_into_tensor: recv holds size()·bytes_per_rank bytes and receives
  // rank r's send bytes at [r·bytes_per_rank, (r+1)·bytes_per_rank). In place when
  // send == recv + rank()·bytes_per_rank (the second overload).
  [[nodiscard]] WorkPtr all_gather(const void* send, void* recv, size_t bytes_per_rank);
  [[nodiscard]] WorkPtr all_gather(void* buffer, size_t bytes_per_rank);

  // Uneven all-gather: rank r contributes bytes_per_rank[r] bytes (zero allowed), packed in rank
  // order in recv at offset sum(bytes_per_rank[0..r)). bytes_per_rank is the same on every rank and
  // has size() entries. In place when send == recv + that offset (the second overload).
  [[nodiscard]] WorkPtr all_gather_v(const void* send, void* recv,
                                     const std::vector<size_t>& bytes_per_rank);
  [[nodiscard]] WorkPtr all_gather_v(void* buffer, const std::vector<size_t>& bytes_per_rank);

  // Reduce-scatter, reduce_scatter_tensor: send holds size()·count_per_rank elements; recv
  // (count_per_rank elements) receives the reduction over ranks of send's slice
  // [rank()·count_per_rank, (rank()+1)·count_per_rank). In place when recv is that slice of send
  // (the second overload, Megatron's reduce_scatter_tensor(grad[r·L:(r+1)·L], grad)); the rest of
  // the buffer is left as it was.
  [[nodiscard]] WorkPtr reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                                       ReduceOp op = ReduceOp::sum);
  [[nodiscard]] WorkPtr reduce_scatter(void* buffer, size_t count_per_rank, DType dtype,
                                       ReduceOp op = ReduceOp::sum);

  // All-reduce of count elements; in place when send == recv.
  [[nodiscard]] WorkPtr all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  [[nodiscard]] WorkPtr all_reduce(void* buffer, size_t count, DType dtype, ReduceOp op);

  // Root's bytes overwrite buffer on every other rank.
  [[nodiscard]] WorkPtr broadcast(void* buffer, size_t bytes, int root);

  // Completes once every rank has issued it.
  [[nodiscard]] WorkPtr barrier();

  // Small host-side metadata (layouts, param-group info); blocking. all_gather_bytes returns every
  // rank's blob in rank order; gather_bytes returns them on root and an empty vector elsewhere.
  // Blobs may differ in size, including empty.
  std::vector<std::vector<uint8_t>> all_gather_bytes(const std::vector<uint8_t>& blob);
  std::vector<std::vector<uint8_t>> gather_bytes(const std::vector<uint8_t>& blob, int root);

 protected:
  // Arguments are checked by the public functions; in-place calls arrive with the aliased pointers.
  virtual WorkPtr do_all_gather(const void* send, void* recv, size_t bytes_per_rank) = 0;
  virtual WorkPtr do_all_gather_v(const void* send, void* recv,
                                  const std::vector<size_t>& bytes_per_rank) = 0;
  virtual WorkPtr do_reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                                    ReduceOp op) = 0;
  virtual WorkPtr do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
  virtual WorkPtr do_broadcast(void* buffer, size_t bytes, int root) = 0;
  virtual WorkPtr do_barrier() = 0;
  virtual std::vector<std::vector<uint8_t>> do_all_gather_bytes(const std::vector<uint8_t>& blob) = 0;
  virtual std::vector<std::vector<uint8_t>> do_gather_bytes(const std::vector<uint8_t>& blob, int root) = 0;
};

}  // namespace fpg::comm
