#include "cmd/bench/scratch_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"

namespace fpg::bench {

ScratchDir::ScratchDir(const std::string& dir, const std::string& name)
    : path_(dir + "/fpgather-bench-" + name + "-" + std::to_string(getpid())) {
  if (mkdir(path_.c_str(), 0755) != 0) throw FormatError(path_ + ": cannot create: " + std::strerror(errno));
}

ScratchDir::~ScratchDir() { fs::remove_tree(path_); }

}  // namespace fpg::bench
