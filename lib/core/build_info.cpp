#include "core/build_info.h"

#include <H5public.h>
#include <fmt/core.h>
#include <spdlog/version.h>
#include <zlib.h>
#include <openssl/opensslv.h>
#include <zstd.h>

#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(FPGATHER_HAVE_CUDA)
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#endif
#if defined(FPGATHER_HAVE_NCCL)
#include <nccl.h>
#endif
#if defined(FPGATHER_HAVE_MPI)
#define OMPI_SKIP_MPICXX 1  // the C API only, as lib/comm has it
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace fpg {
namespace {

std::string dotted(long major, long minor, long patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string cuda_version() {
#if defined(FPGATHER_HAVE_CUDA)
  // CUDART_VERSION is 1000 * major + 10 * minor.
  std::string v = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
                  " (cuBLAS " + dotted(CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
#if defined(FPGATHER_CUDA_ARCHITECTURES)
  v += "; kernels for " FPGATHER_CUDA_ARCHITECTURES;
#endif
  return v + ")";
#else
  return "";
#endif
}

std::string nccl_version() {
#if defined(FPGATHER_HAVE_NCCL)
  return dotted(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  return "";
#endif
}

std::string mpi_version() {
#if defined(FPGATHER_HAVE_MPI)
  const std::string standard = "MPI " + std::to_string(MPI_VERSION) + "." + std::to_string(MPI_SUBVERSION);
#if defined(OMPI_MAJOR_VERSION)
  return "Open MPI " + dotted(OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION) + " (" + standard + ")";
#elif defined(MPICH_VERSION)
  return std::string("MPICH ") + MPICH_VERSION + " (" + standard + ")";
#else
  return standard;
#endif
#else
  return "";
#endif
}

}  // namespace

std::vector<BuildComponent> build_components() {
  return {
      {"cuda", cuda_version()},
      {"nccl", nccl_version()},
      {"mpi", mpi_version()},
      {"hdf5", dotted(H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE)},
      {"zstd", ZSTD_VERSION_STRING},
      {"zlib", ZLIB_VERSION},
      {"openssl", dotted(OPENSSL_VERSION_MAJOR, OPENSSL_VERSION_MINOR, OPENSSL_VERSION_PATCH)},
      {"xxhash", dotted(XXH_VERSION_MAJOR, XXH_VERSION_MINOR, XXH_VERSION_RELEASE)},
      {"fmt", dotted(FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)},
      {"spdlog", dotted(SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH)},
      {"nlohmann_json",
       dotted(NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH)},
  };
}

std::string build_compiler() {
#if defined(__clang__)
  return "Clang " + dotted(__clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return "GCC " + dotted(__GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "an unknown compiler";
#endif
}

}  // namespace fpg
