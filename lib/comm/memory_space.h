// Where the buffers handed to a communicator live.
#pragma once

#include <cstdint>
#include <string_view>

namespace fpg::comm {

// A communicator is bound to one memory space: every data buffer passed to its collectives must be
// there (the threads and MPI backends take host pointers, NCCL device pointers of the rank's GPU).
// Metadata blobs (all_gather_bytes, gather_bytes) are always host std::vectors.
enum class MemorySpace : uint8_t { host, device };

inline std::string_view memory_space_name(MemorySpace m) {
  return m == MemorySpace::host ? "host" : "device";
}

}  // namespace fpg::comm
