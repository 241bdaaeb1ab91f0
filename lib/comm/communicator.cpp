// Argument checks shared by every backend, then dispatch to the backend.
#include "comm/communicator.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "core/error.h"

namespace fpg::comm {
namespace {

size_t checked_mul(size_t a, size_t b, const char* what) {
  if (b != 0 && a > std::numeric_limits<size_t>::max() / b)
    throw UsageError(fmt::format("{}: size {} x {} overflows", what, a, b));
  return a * b;
}

// Non-null unless empty.
void check_ptr(const void* p, size_t bytes, const char* what, const char* name) {
  if (p == nullptr && bytes != 0) throw UsageError(fmt::format("{}: {} is null", what, name));
}

// send must be exactly `slot` (the in-place aliasing) or not overlap recv at all: a partial overlap
// would let one rank's output overwrite input another rank is still reading.
void check_alias(const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                 const void* slot, const char* what) {
  if (send == slot || send_bytes == 0 || recv_bytes == 0) return;
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  if (s < r + recv_bytes && r < s + send_bytes)
    throw UsageError(fmt::format(
        "{}: send and receive buffers overlap but are not the in-place form (send must equal "
        "recv + this rank's offset, or not overlap)",
        what));
}

void check_reduction(DType dt, ReduceOp op, const char* what) {
  if (!reduction_supported(dt, op))
    throw UsageError(fmt::format("{}: {} reduction of {} is not supported (F32 and BF16 are)", what,
                                 reduce_op_name(op), dtype_name(dt)));
}

void check_root(int root, int size, const char* what) {
  if (root < 0 || root >= size)
    throw UsageError(fmt::format("{}: root {} is not a rank of a group of {}", what, root, size));
}

}  // namespace

WorkPtr Communicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  const size_t total = checked_mul(bytes_per_rank, static_cast<size_t>(size()), "all_gather");
  check_ptr(send, bytes_per_rank, "all_gather", "send");
  check_ptr(recv, total, "all_gather", "recv");
  const char* slot = recv ? static_cast<const char*>(recv) + static_cast<size_t>(rank()) * bytes_per_rank
                          : nullptr;
  check_alias(send, bytes_per_rank, recv, total, slot, "all_gather");
  return do_all_gather(send, recv, bytes_per_rank);
}

WorkPtr Communicator::all_gather(void* buffer, size_t bytes_per_rank) {
  char* slot = buffer ? static_cast<char*>(buffer) + static_cast<size_t>(rank()) * bytes_per_rank : nullptr;
  return all_gather(slot, buffer, bytes_per_rank);
}

namespace {

// Byte offset of `rank`'s part and the total, after checking the per-rank sizes.
std::pair<size_t, size_t> v_layout(const std::vector<size_t>& bytes_per_rank, int rank, int size) {
  if (bytes_per_rank.size() != static_cast<size_t>(size))
    throw UsageError(fmt::format("all_gather_v: {} sizes given for a group of {}", bytes_per_rank.size(),
                                 size));
  size_t offset = 0, total = 0;
  for (size_t r = 0; r < bytes_per_rank.size(); ++r) {
    if (r == static_cast<size_t>(rank)) offset = total;
    if (bytes_per_rank[r] > std::numeric_limits<size_t>::max() - total)
      throw UsageError("all_gather_v: total size overflows");
    total += bytes_per_rank[r];
  }
  return {offset, total};
}

}  // namespace

WorkPtr Communicator::all_gather_v(const void* send, void* recv, const std::vector<size_t>& bytes_per_rank) {
  const auto [offset, total] = v_layout(bytes_per_rank, rank(), size());
  const size_t mine = bytes_per_rank[static_cast<size_t>(rank())];
  check_ptr(send, mine, "all_gather_v", "send");
  check_ptr(recv, total, "all_gather_v", "recv");
  const char* slot = recv ? static_cast<const char*>(recv) + offset : nullptr;
  check_alias(send, mine, recv, total, slot, "all_gather_v");
  return do_all_gather_v(send, recv, bytes_per_rank);
}

WorkPtr Communicator::all_gather_v(void* buffer, const std::vector<size_t>& bytes_per_rank) {
  const size_t offset = v_layout(bytes_per_rank, rank(), size()).first;
  return all_gather_v(buffer ? static_cast<char*>(buffer) + offset : nullptr, buffer, bytes_per_rank);
}

WorkPtr Communicator::reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                                     ReduceOp op) {
  check_reduction(dtype, op, "reduce_scatter");
  const size_t shard = checked_mul(count_per_rank, reduction_elem_bytes(dtype), "reduce_scatter");
  const size_t total = checked_mul(shard, static_cast<size_t>(size()), "reduce_scatter");
  check_ptr(send, total, "reduce_scatter", "send");
  check_ptr(recv, shard, "reduce_scatter", "recv");
  // Here the receive buffer is the slice: recv may be send's own slice, or disjoint from all of send.
  const char* slot = send ? static_cast<const char*>(send) + static_cast<size_t>(rank()) * shard : nullptr;
  check_alias(recv, shard, send, total, slot, "reduce_scatter");
  return do_reduce_scatter(send, recv, count_per_rank, dtype, op);
}

WorkPtr Communicator::reduce_scatter(void* buffer, size_t count_per_rank, DType dtype, ReduceOp op) {
  check_reduction(dtype, op, "reduce_scatter");
  const size_t shard = checked_mul(count_per_rank, reduction_elem_bytes(dtype), "reduce_scatter");
  char* slot = buffer ? static_cast<char*>(buffer) + static_cast<size_t>(rank()) * shard : nullptr;
  return reduce_scatter(buffer, slot, count_per_rank, dtype, op);
}

WorkPtr Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  check_reduction(dtype, op, "all_reduce");
  const size_t bytes = checked_mul(count, reduction_elem_bytes(dtype), "all_reduce");
  check_ptr(send, bytes, "all_reduce", "send");
  check_ptr(recv, bytes, "all_reduce", "recv");
  check_alias(send, bytes, recv, bytes, recv, "all_reduce");
  return do_all_reduce(send, recv, count, dtype, op);
}

WorkPtr Communicator::all_reduce(void* buffer, size_t count, DType dtype, ReduceOp op) {
  return all_reduce(buffer, buffer, count, dtype, op);
}

WorkPtr Communicator::broadcast(void* buffer, size_t bytes, int root) {
  check_root(root, size(), "broadcast");
  check_ptr(buffer, bytes, "broadcast", "buffer");
  return do_broadcast(buffer, bytes, root);
}

WorkPtr Communicator::barrier() { return do_barrier(); }

std::vector<std::vector<uint8_t>> Communicator::all_gather_bytes(const std::vector<uint8_t>& blob) {
  return do_all_gather_bytes(blob);
}

std::vector<std::vector<uint8_t>> Communicator::gather_bytes(const std::vector<uint8_t>& blob, int root) {
  check_root(root, size(), "gather_bytes");
  return do_gather_bytes(blob, root);
}

}  // namespace fpg::comm
