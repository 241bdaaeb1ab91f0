#include "formats/fpckpt/hdf5_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"

namespace fpg::fpckpt {

std::mutex& hdf5_mutex() {
  static std::mutex mu;
  return mu;
}

void hdf5_init() {
  static thread_local bool done = false;  // a thread-safe HDF5 keeps the error-printing setting per thread
  if (done) return;
  // No library shutdown at exit: it closes again any object whose close failed (divert_writes()
  // avoids those, this is the backstop), and fpgather closes every file it opens itself.
  H5dont_atexit();
  H5open();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  done = true;
}

namespace {

struct Cause {
  std::string innermost;  // the first record's message that is not the optional zstd filter's
  int system_error = 0;   // errno of a failed system call a record reports
};

herr_t walk(unsigned, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<Cause*>(data);
  if (!err->desc) return 0;
  const std::string desc = err->desc;
  // HDF5's sec2 driver reports a failed read or write as "..., errno = 28, error message = ...".
  const auto at = desc.find("errno = ");
  if (at != std::string::npos && out->system_error == 0) out->system_error = std::atoi(desc.c_str() + at + 8);
  const bool filter_note = desc.find("filter") != std::string::npos && desc.find("not registered") != std::string::npos;
  if (out->innermost.empty() && !filter_note) out->innermost = desc;
  return 0;
}

}  // namespace

std::string hdf5_error() {
  Cause cause;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &cause);
  H5Eclear2(H5E_DEFAULT);
  return cause.system_error > 0 ? fs::io_error_text(cause.system_error) : cause.innermost;
}

void hdf5_fail(const std::string& path, const std::string& what) {
  const std::string detail = hdf5_error();
  throw FormatError(path + ": " + what + (detail.empty() ? "" : ": " + detail));
}

Hid checked(hid_t id, Hid::Closer close, const std::string& path, const std::string& what) {
  if (id < 0) hdf5_fail(path, what);
  return Hid(id, close);
}

Hid open_checkpoint_file(const std::string& path) {
  struct stat want {};
  {
    const int fd = fs::open_regular_file(path, false);
    fstat(fd, &want);
    ::close(fd);
  }
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  if (is_hdf5 <= 0) throw FormatError(path + ": not an HDF5 file");
  Hid file = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, path, "cannot open");
  void* handle = nullptr;
  struct stat got {};
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || !handle || fstat(*static_cast<int*>(handle), &got) != 0 ||
      got.st_dev != want.st_dev || got.st_ino != want.st_ino) {
    H5Eclear2(H5E_DEFAULT);
    throw FormatError(path + ": changed while it was being opened");
  }
  return file;
}

namespace {

void require_hard_link(hid_t loc, const std::string& name, const std::string& path, const std::string& object) {
  H5L_info_t info{};
  if (H5Lget_info(loc, name.c_str(), &info, H5P_DEFAULT) < 0) hdf5_fail(path, "cannot open " + object);
  switch (info.type) {
    case H5L_TYPE_HARD: return;
    case H5L_TYPE_EXTERNAL:
      throw FormatError(path + ": " + object + " is an HDF5 external link (to another file), which a checkpoint never holds");
    case H5L_TYPE_SOFT:
      throw FormatError(path + ": " + object + " is an HDF5 soft link, which a checkpoint never holds");
    default:
      throw FormatError(path + ": " + object + " is a user-defined HDF5 link, which a checkpoint never holds");
  }
}

// Opens `name` (a hard link: nothing is traversed) and checks the kind of object it is.
Hid open_own(hid_t loc, const std::string& name, const std::string& path, const std::string& object, H5I_type_t want) {
  require_hard_link(loc, name, path, object);
  Hid obj = checked(H5Oopen(loc, name.c_str(), H5P_DEFAULT), H5Oclose, path, "cannot open " + object);
  if (H5Iget_type(obj) != want)
    throw FormatError(path + ": " + object + " is not " + (want == H5I_DATASET ? "a dataset" : "a group"));
  return obj;
}

}  // namespace

Hid open_own_dataset(hid_t loc, const std::string& name, const std::string& path, const std::string& object) {
  Hid ds = open_own(loc, name, path, object, H5I_DATASET);
  Hid dcpl = checked(H5Dget_create_plist(ds), H5Pclose, path, object);
  if (H5Pget_layout(dcpl) == H5D_VIRTUAL)
    throw FormatError(path + ": " + object +
                      " is an HDF5 virtual dataset (its data lies in other datasets or files), which a checkpoint never holds");
  if (H5Pget_external_count(dcpl) != 0)
    throw FormatError(path + ": " + object +
                      " keeps its data in external files (HDF5 external storage), which a checkpoint never holds");
  return ds;
}

Hid open_own_group(hid_t loc, const std::string& name, const std::string& path, const std::string& object) {
  return open_own(loc, name, path, object, H5I_GROUP);
}

void divert_writes(hid_t file) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || !handle) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  const int fd = *static_cast<int*>(handle);
  const int scratch = memfd_create("fpgather-abandoned-file", MFD_CLOEXEC);
  if (scratch < 0) return;
  dup3(scratch, fd, O_CLOEXEC);  // atomically: a write in flight lands in one file or the other
  ::close(scratch);
}

namespace {

// Whether closing `file` would write at or past the process's file size limit (ulimit -f): HDF5
// writes its cached metadata anywhere below its end of allocation.
bool closing_exceeds_file_size_limit(hid_t file) {
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return false;
#if H5_VERSION_GE(1, 10, 2)
  haddr_t eoa = 0;
  if (H5Fget_eoa(file, &eoa) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return true;
  }
  return eoa > limit.rlim_cur;
#else
  (void)file;
  return true;
#endif
}

// The space that closing an HDF5 file will write to, made sure of beforehand. Closing writes the
// cached metadata into space HDF5 has already allocated, below its end of allocation (closing only
// ever shrinks a file); the holes below that end are allocated now (FALLOC_FL_KEEP_SIZE). Where
// that fails the disk is full, and the file is abandoned cleanly instead of failing half closed.
// release() gives back, once the file is closed, what was reserved past its final end.
class CloseReservation {
 public:
  CloseReservation(const std::string& path, hid_t file) {
#if H5_VERSION_GE(1, 10, 2)
    haddr_t eoa = 0;
    if (H5Fget_eoa(file, &eoa) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return;
    }
    if (closing_exceeds_file_size_limit(file)) {
      error_ = EFBIG;
      return;
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);  // an offset of its own: HDF5's is left alone
    if (fd_ < 0) return;
    end_ = static_cast<off_t>(eoa);
    for (off_t at = 0; at < end_;) {
      const off_t hole = lseek(fd_, at, SEEK_HOLE);
      if (hole < 0 || hole >= end_) break;
      off_t data = lseek(fd_, hole, SEEK_DATA);
      if (data < 0 || data > end_) data = end_;  // ENXIO: a hole up to the end of the file
      if (fallocate(fd_, FALLOC_FL_KEEP_SIZE, hole, data - hole) != 0) {
        if (errno != EOPNOTSUPP && errno != ENOSYS) error_ = errno;
        break;
      }
      at = data;
    }
#else
    (void)path;
    (void)file;
#endif
  }
  ~CloseReservation() {
    if (fd_ >= 0) ::close(fd_);
  }
  CloseReservation(const CloseReservation&) = delete;
  CloseReservation& operator=(const CloseReservation&) = delete;
  int error() const { return error_; }
  void release() {
    struct stat st {};
    if (fd_ >= 0 && fstat(fd_, &st) == 0 && st.st_size < end_)
      fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, st.st_size, end_ - st.st_size);
  }

 private:
  int fd_ = -1;
  off_t end_ = 0;
  int error_ = 0;
};

}  // namespace

void OutputFile::close() {
  if (!file_.valid()) return;
  CloseReservation reserved(path_, file_);
  if (reserved.error() != 0) {
    abandon();
    throw FormatError(path_ + ": cannot write: " + fs::io_error_text(reserved.error()));
  }
  if (H5Fclose(file_.release()) < 0) hdf5_fail(path_, "cannot write");
  reserved.release();
}

void OutputFile::abandon() {
  if (!file_.valid()) return;
  divert_writes(file_);
  // Only past the file size limit can the scratch file refuse a write too; such a close fails half
  // way, and hdf5_init()'s H5dont_atexit() keeps the library from closing the file again at exit.
  file_.reset();
  H5Eclear2(H5E_DEFAULT);
}

}  // namespace fpg::fpckpt
