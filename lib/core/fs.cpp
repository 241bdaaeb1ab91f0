#include "core/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/staging.h"

namespace fpg::fs {

std::pair<std::string, std::string> split_path(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  if (slash == 0) return {"/", path.substr(1)};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string io_error_text(int err) {
  switch (err) {
    case ENOSPC: return "no space left on device";
    case EFBIG: return "file size limit exceeded";
    case EDQUOT: return "disk quota exceeded";
    case ECANCELED: return "interrupted";
    default: return std::strerror(err);
  }
}

namespace {

bool stat_of(const std::string& path, bool follow_symlinks, struct stat& st) {
  return (follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) == 0;
}

const char* file_kind(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

// Opens a regular file for reading, symlinks followed (FormatError otherwise), and returns its
// descriptor and size.
int open_regular_sized(const std::string& path, uint64_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(path + ": not a regular file");
  }
  size = static_cast<uint64_t>(st.st_size);
  return fd;
}

// read() until `size` bytes or end of file; returns the bytes read.
uint64_t read_some(int fd, const std::string& path, void* data, uint64_t size) {
  auto* p = static_cast<uint8_t*>(data);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FormatError(path + ": read failed: " + std::strerror(errno));
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  return done;
}

// Empties the directory open as `dir_fd` (which it closes), entries removed relative to it.
void remove_contents(int dir_fd) noexcept {
  DIR* d = ::fdopendir(dir_fd);
  if (!d) {
    ::close(dir_fd);
    return;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  for (const std::string& n : names) {
    struct stat st {};
    if (::fstatat(dir_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      // O_NOFOLLOW: a directory replaced by a link since fstatat is not entered.
      const int sub = ::openat(dir_fd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) remove_contents(sub);
      ::unlinkat(dir_fd, n.c_str(), AT_REMOVEDIR);
    } else {
      ::unlinkat(dir_fd, n.c_str(), 0);
    }
  }
  ::closedir(d);
}

}  // namespace

bool exists(const std::string& path, bool follow_symlinks) {
  struct stat st {};
  return stat_of(path, follow_symlinks, st);
}

bool is_directory(const std::string& path, bool follow_symlinks) {
  struct stat st {};
  return stat_of(path, follow_symlinks, st) && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path, bool follow_symlinks) {
  struct stat st {};
  return stat_of(path, follow_symlinks, st) && S_ISREG(st.st_mode);
}

int open_regular_file(const std::string& path, bool follow_symlinks) {
  spdlog::debug("open {}", path);
  struct stat before {};
  if (!stat_of(path, follow_symlinks, before)) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(before.st_mode)) throw FormatError(path + ": not a regular file (" + file_kind(before.st_mode) + ")");
  // O_NONBLOCK: should a FIFO take the file's place after the check, opening it returns at once.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_symlinks ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP) throw FormatError(path + ": not a regular file (a symbolic link)");
    throw FormatError(path + ": cannot open: " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != before.st_dev || st.st_ino != before.st_ino) {
    ::close(fd);
    throw FormatError(path + ": changed while it was being opened");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int create_file(const std::string& path, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw FormatError(path + ": cannot create: " + io_error_text(errno));
  return fd;
}

int create_temp_beside(const std::string& path, std::string& temp_path) {
  const auto [dir, base] = split_path(path);
  remove_stale_staging_beside(path);
  std::random_device rd;
  for (int attempt = 0;; ++attempt) {
    // Digits only: crash recovery recognises a stale ".latest.tmp-<digits>" by this form.
    const std::string tmp = join_path(dir, "." + base + ".tmp-" + std::to_string(rd()) + std::to_string(rd()));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      lock_staging(fd);  // held while the descriptor is open: the file is live staging
      temp_path = tmp;
      return fd;
    }
    if (errno != EEXIST || attempt >= 16)
      throw FormatError(path + ": cannot create a temporary file in " + dir + ": " + io_error_text(errno));
  }
}

namespace {
// pwrite until done or failed; `done` counts the bytes written. Returns 0 or the failure's errno;
// ECANCELED once a signal stopped the work (core/interrupt.h), unless `interruptible` is false.
int write_loop(int fd, uint64_t offset, const void* data, uint64_t size, uint64_t& done, bool interruptible = true) {
  const auto* p = static_cast<const uint8_t*>(data);
  done = 0;
  if (interruptible && interrupted()) return ECANCELED;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<uint64_t>(n);
  }
  return 0;
}
}  // namespace

int pwrite_full(int fd, uint64_t offset, const void* data, uint64_t size) {
  uint64_t done = 0;
  return write_loop(fd, offset, data, size, done);
}

void pwrite_all(int fd, const std::string& path, uint64_t offset, const void* data, uint64_t size) {
  uint64_t done = 0;
  if (const int e = write_loop(fd, offset, data, size, done))
    throw FormatError(path + ": write of bytes [" + std::to_string(offset + done) + ", " +
                      std::to_string(offset + size) + ") failed: " + io_error_text(e));
}

void start_writeback(int fd) {
#if defined(__linux__)
  if (fd >= 0) ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
  (void)fd;
#endif
}

namespace {

// A number of KiB from a one-line sysfs file, or 0.
uint64_t sysfs_kib(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return 0;
  unsigned long long v = 0;
  const bool ok = std::fscanf(f, "%llu", &v) == 1;
  std::fclose(f);
  return ok ? v : 0;
}

}  // namespace

uint64_t will_need_piece(int fd) {
  constexpr uint64_t kUnknown = uint64_t{1} << 20, kLeast = uint64_t{128} << 10, kMost = uint64_t{64} << 20;
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || major(st.st_dev) == 0) return kUnknown;  // 0: no block device (tmpfs, NFS)
  static std::mutex mu;
  static std::map<dev_t, uint64_t> known;
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = known.find(st.st_dev); it != known.end()) return it->second;
  // A partition's queue is its disk's, one level up.
  const std::string dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  uint64_t kib = 0;
  for (const char* queue : {"/queue/", "/../queue/"}) {
    kib = std::max(sysfs_kib(dev + queue + "read_ahead_kb"), sysfs_kib(dev + queue + "max_sectors_kb"));
    if (kib) break;
  }
  const uint64_t piece = kib ? std::clamp(kib << 10, kLeast, kMost) : kUnknown;
  known.emplace(st.st_dev, piece);
  return piece;
}

void will_need(int fd, uint64_t offset, uint64_t len) {
#if defined(__linux__)
  if (fd < 0 || len == 0) return;
  const uint64_t piece = will_need_piece(fd);
  for (uint64_t at = offset, end = offset + std::min(len, UINT64_MAX - offset); at < end; at += std::min(piece, end - at))
    ::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(std::min(piece, end - at)), POSIX_FADV_WILLNEED);
#else
  (void)fd, (void)offset, (void)len;
#endif
}

void fsync_fd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) throw FormatError(path + ": fsync failed: " + io_error_text(errno));
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(path + ": cannot open for fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw FormatError(path + ": fsync failed: " + io_error_text(err));
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw FormatError(dir + ": cannot open directory to fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  // Some filesystems cannot fsync a directory (EINVAL); there is nothing more to make durable.
  if (rc != 0 && e != EINVAL) throw FormatError(dir + ": directory fsync failed: " + std::strerror(e));
}

void close_fd(int fd, const std::string& path) {
  if (::close(fd) != 0) throw FormatError(path + ": close failed: " + io_error_text(errno));
}

void rename_into_place(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw FormatError(to + ": cannot rename " + from + " into place: " + std::strerror(errno));
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  std::string tmp;
  int fd = create_temp_beside(path, tmp);
  try {
    // Not stopped by a signal: a small file (`latest`, a format's metadata) whose writer decides
    // at its commit whether to go on.
    uint64_t done = 0;
    if (const int e = write_loop(fd, 0, contents.data(), contents.size(), done, false))
      throw FormatError(tmp + ": write of bytes [" + std::to_string(done) + ", " + std::to_string(contents.size()) +
                        ") failed: " + io_error_text(e));
    fsync_fd(fd, tmp);
    const int to_close = fd;
    fd = -1;
    close_fd(to_close, tmp);
    rename_into_place(tmp, path);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_directory(split_path(path).first);
}

void copy_file(const std::string& from, const std::string& to) {
  uint64_t size = 0;
  const int in = open_regular_sized(from, size);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    throw FormatError(to + ": cannot create: " + std::strerror(e));
  }
  try {
    std::vector<uint8_t> buf(1 << 20);
    uint64_t offset = 0;
    while (const uint64_t n = read_some(in, from, buf.data(), buf.size())) {
      pwrite_all(out, to, offset, buf.data(), n);
      offset += n;
    }
    if (::fsync(out) != 0) throw FormatError(to + ": fsync failed: " + std::strerror(errno));
  } catch (...) {
    ::close(in);
    ::close(out);
    ::unlink(to.c_str());
    throw;
  }
  ::close(in);
  if (::close(out) != 0) {
    ::unlink(to.c_str());
    throw FormatError(to + ": close failed: " + std::strerror(errno));
  }
}

std::string read_small_file(const std::string& path, uint64_t limit) {
  uint64_t size = 0;
  const int fd = open_regular_sized(path, size);
  std::string text;
  try {
    if (size > limit)
      throw FormatError(path + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(limit) +
                        " read here");
    text.resize(size);
    text.resize(read_some(fd, path, text.data(), size));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

void remove_tree(const std::string& path) noexcept {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    ::unlink(path.c_str());
    return;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) remove_contents(fd);
  ::rmdir(path.c_str());
}

}  // namespace fpg::fs
