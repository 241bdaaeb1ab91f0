// What this build of fpgather holds: the optional backends (CUDA, NCCL, MPI) and the versions of the
// libraries it was compiled against, for `fpgather --version` and bug reports.
#pragma once

#include <string>
#include <vector>

namespace fpg {

struct BuildComponent {
  std::string name;     // "cuda", "hdf5", …
  std::string version;  // as compiled in; empty: not built
};

// The optional backends first (cuda, nccl, mpi), then the required libraries.
std::vector<BuildComponent> build_components();

// The compiler that built the library, e.g. "GCC 12.2.0".
std::string build_compiler();

}  // namespace fpg
