// The `mpi` backend: one rank per process under mpirun, host memory, the threads backend's semantics
// (built only with FPGATHER_HAVE_MPI).
//
//  - Reductions are deterministic and equal the threads backend bit for bit: each rank receives the
//    other ranks' contributions to the elements it owns (point-to-point) and reduces them with
//    reduce_rank_order (comm/host_reduce.h) in rank order, never with MPI_Reduce, whose order MPI
//    leaves unspecified. all_reduce = that reduction on rank-owned chunks + an all-gather of them.
//  - Gathers and broadcast move bytes with MPI_Bcast from each owner in turn, in pieces of at most
//    1 GiB, so sizes beyond MPI's int counts work.
//  - Every collective first all-gathers a small description of the call and compares it with rank
//    0's, so mismatched calls are a UsageError on every rank, as with threads.
//  - Completion is always immediate (CommOptions::completion and timeout are ignored): a rank that
//    fails exits, and mpirun ends the job rather than leaving others blocked.
#pragma once

#include <memory>

#include "comm/group.h"

namespace fpg::comm {

// The group of every process of MPI_COMM_WORLD; this process hosts its world rank. `size` must equal
// the world size (the number of processes mpirun started), else UsageError.
std::unique_ptr<CommunicatorGroup> make_mpi_group(int size, const CommOptions& options = {});

}  // namespace fpg::comm
