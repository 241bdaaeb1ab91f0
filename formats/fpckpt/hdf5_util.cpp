#include "formats/fpckpt/hdf5_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace fpg::fpckpt {

std::mutex& hdf5_mutex() {
  static std::mutex mu;
  return mu;
}

void hdf5_init() {
  static thread_local bool done = false;  // a thread-safe HDF5 keeps the error-printing setting per thread
  if (done) return;
  H5open();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  done = true;
}

namespace {
herr_t walk(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err->desc) *out = err->desc;  // the innermost call's message
  return 0;
}
}  // namespace

std::string hdf5_error() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg;
}

void hdf5_fail(const std::string& path, const std::string& what) {
  const std::string detail = hdf5_error();
  throw FormatError(path + ": " + what + (detail.empty() ? "" : ": " + detail));
}

Hid checked(hid_t id, Hid::Closer close, const std::string& path, const std::string& what) {
  if (id < 0) hdf5_fail(path, what);
  return Hid(id, close);
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(path + ": cannot open for fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw FormatError(path + ": fsync failed: " + std::strerror(err));
}

}  // namespace fpg::fpckpt
