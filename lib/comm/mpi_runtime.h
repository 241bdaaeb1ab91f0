// The process-wide MPI state the mpi and nccl backends share: initialised once, on first use, and
// finalised at exit unless a rank failed (then the process exits without MPI_Finalize and mpirun
// tears the job down instead of leaving the other processes blocked in a collective).
#pragma once

#include <string>

namespace fpg::comm {

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun set these variables).
// Works in every build, so callers can refuse `--comm threads` under mpirun without MPI support.
bool launched_by_mpi();

// World rank and size as the launcher set them in the environment, without initialising MPI;
// -1 / 0 where not launched by MPI.
int launcher_rank();
int launcher_size();

}  // namespace fpg::comm

#if defined(FPGATHER_HAVE_MPI)
// The C API only: OpenMPI's and MPICH's C++ bindings would need their own library.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

namespace fpg::comm::mpi {

// MPI_Init_thread(MPI_THREAD_SERIALIZED) on the first call (idempotent); MPI_Finalize at exit.
void ensure_initialized();
int world_rank();
int world_size();

// A failed MPI call: CommAborted naming the call and MPI's own message.
void check(int rc, const char* what);

// A rank of this process failed: do not call MPI_Finalize at exit (it would wait for the others).
void mark_failed();

}  // namespace fpg::comm::mpi
#endif
