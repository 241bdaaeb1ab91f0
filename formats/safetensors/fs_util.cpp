#include "formats/safetensors/fs_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"

namespace fpg::safetensors {

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
    default: return std::strerror(err);
  }
}

namespace {
const char* file_kind(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}
}  // namespace

int open_regular_file(const std::string& path, bool follow_symlinks) {
  struct stat before {};
  if ((follow_symlinks ? ::stat(path.c_str(), &before) : ::lstat(path.c_str(), &before)) != 0)
    throw FormatError(path + ": cannot open: " + std::strerror(errno));
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

void pwrite_all(int fd, const std::string& path, uint64_t offset, const void* data, uint64_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      throw FormatError(path + ": write of bytes [" + std::to_string(offset + done) + ", " +
                        std::to_string(offset + size) + ") failed: " + io_error_text(e));
    }
    done += static_cast<uint64_t>(n);
  }
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

void write_file_atomic(const std::string& path, const std::string& contents) {
  const auto [dir, base] = split_path(path);
  std::random_device rd;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = join_path(dir, "." + base + ".tmp-" + std::to_string(rd()) + std::to_string(rd()));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 16))
      throw FormatError(path + ": cannot create a temporary file in " + dir + ": " +
                        io_error_text(errno));
  }
  try {
    pwrite_all(fd, tmp, 0, contents.data(), contents.size());
    if (::fsync(fd) != 0) throw FormatError(tmp + ": fsync failed: " + io_error_text(errno));
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw FormatError(tmp + ": close failed: " + io_error_text(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw FormatError(path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_directory(dir);
}

namespace {

// Opens a regular file for reading (FormatError otherwise) and returns its descriptor and size.
int open_regular(const std::string& path, uint64_t& size) {
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

}  // namespace

void copy_file(const std::string& from, const std::string& to) {
  uint64_t size = 0;
  const int in = open_regular(from, size);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
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
  const int fd = open_regular(path, size);
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

}  // namespace fpg::safetensors
