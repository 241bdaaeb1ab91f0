// The `nccl` backend (built only with FPGATHER_HAVE_NCCL): ranks are GPUs, data buffers are device
// memory of the rank's GPU (MemorySpace::device).
//
// Two ways to run a group:
//  - one process driving `size` local GPUs (devices 0..size-1): communicators from ncclCommInitAll,
//    one host thread per GPU, each calling fn with cudaSetDevice done;
//  - under mpirun (builds with MPI too): one process per GPU, rank = MPI world rank, GPU = local rank
//    modulo the visible devices, NCCL's unique id broadcast over MPI_COMM_WORLD.
//
// Streams and handles: each rank has a compute stream (nccl_compute_stream) and a communication
// stream. A collective first makes the communication stream wait for the work already enqueued on
// the compute stream (the inputs), runs there, and records a CUDA event; Work::wait() makes the compute
// stream wait for that event and returns at once (torch's Work.wait()), Work::done() polls the event.
// So host code reading a result must synchronize the compute stream after wait(). barrier() and the
// blob gathers block the host until complete.
//
// Semantics against the threads backend (comm/reduce_op.h):
//  - sum: NCCL's order (ring/tree), not rank order. With 2 ranks every element is one addition, so F32
//    and BF16 (rounded once from the fp32 sum) equal the threads backend bit for bit; with more, F32 is
//    reassociated and BF16 is rounded to bf16 at every hop.
//  - max: run as an integer max over comm/max_key.h keys, not ncclMax (fmaxf drops NaN): NaN
//    propagates and +0 > −0 as with threads; a NaN result has its sign cleared and the largest payload.
//  - mismatched calls are undefined (NCCL cannot check them); a rank that throws aborts its NCCL
//    communicator and the others' blocking waits see the group fail (single-process) or mpirun ends
//    the job (one process per rank). CommOptions::timeout bounds the blocking waits; completion is
//    ignored. Limitation (seen on 2 H200s, NCCL 2.28): a rank failing before the ranks' first
//    collective of an algorithm leaves the others blocked inside the NCCL call that sets up its
//    connections, which no flag or timeout of ours reaches; the single-process group then hangs.
#pragma once

#include <memory>

#include "comm/group.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace fpg::comm {

std::unique_ptr<CommunicatorGroup> make_nccl_group(int size, const CommOptions& options = {});

// The rank's compute stream and CUDA device of an nccl communicator (UsageError for other backends).
cudaStream_t nccl_compute_stream(Communicator& comm);
int nccl_device(Communicator& comm);

}  // namespace fpg::comm
