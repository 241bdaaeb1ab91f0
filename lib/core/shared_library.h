// A shared library opened with dlopen on first use instead of linked.
//
// Every library the binary links is read and relocated by the dynamic loader before main, for every
// command: cuBLAS, NCCL and the BLAS are used only by GPU training, Muon and the CPU network, yet
// linked they cost each `inspect` or `convert` their startup (a cold start read a dozen more files
// from the disk) and their address space (NCCL alone maps 180 MB). Their users reach them through
// SharedLibrary instead: kernels/cublas_loader.cpp, lib/comm/nccl_loader.cpp, lib/core/blas.cpp.
#pragma once

#include <string>
#include <vector>

namespace fpg {

class SharedLibrary {
 public:
  // Opens the first of `names` that loads (a soname, searched as the dynamic loader does, or a
  // path). Throws Error(ExitCode::io) naming `what`, every name tried and the loader's first
  // complaint.
  SharedLibrary(std::vector<std::string> names, const std::string& what);
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The symbol's address, or null where the library has none.
  void* find(const char* symbol) const;
  // The symbol as a function of type F; throws Error(ExitCode::io) where the library has none.
  template <class F>
  F function(const char* symbol) const {
    return reinterpret_cast<F>(require(symbol));
  }
  // The name that loaded.
  const std::string& name() const { return name_; }

 private:
  void* require(const char* symbol) const;

  std::string name_;
  void* handle_ = nullptr;
};

// The directory of the shared object that holds `address` (with a trailing '/'), or "".
std::string directory_of(const void* address);

}  // namespace fpg
