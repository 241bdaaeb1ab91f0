#include "core/shared_library.h"

#include <dlfcn.h>

#include "core/error.h"

namespace fpg {

SharedLibrary::SharedLibrary(std::vector<std::string> names, const std::string& what) {
  std::string first_error, tried;
  for (const std::string& n : names) {
    if (n.empty()) continue;
    // RTLD_LOCAL: the library's symbols stay its own, never resolving another library's references.
    handle_ = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_) {
      name_ = n;
      return;
    }
    if (first_error.empty()) {
      const char* e = dlerror();
      first_error = e ? e : "not found";
    }
    tried += (tried.empty() ? "" : ", ") + n;
  }
  // A file the work cannot do without is missing: exit 3, as for any missing input.
  throw Error(ExitCode::io, "cannot load " + what + " (tried " + tried + "): " + first_error +
                                "; install it or add its directory to LD_LIBRARY_PATH");
}

void* SharedLibrary::find(const char* symbol) const { return dlsym(handle_, symbol); }

void* SharedLibrary::require(const char* symbol) const {
  void* p = find(symbol);
  if (!p)
    throw Error(ExitCode::io, name_ + " has no symbol " + symbol + " (older than the headers fpgather was built with?)");
  return p;
}

std::string directory_of(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || !info.dli_fname) return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

}  // namespace fpg
