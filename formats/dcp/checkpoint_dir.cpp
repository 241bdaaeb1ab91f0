#include "formats/dcp/checkpoint_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ckpt/index.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {
namespace {

std::string errno_text() { return std::strerror(errno); }

const char* file_type(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

}  // namespace

DataFile::~DataFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DataFile::will_need(uint64_t offset, uint64_t len) const {
  if (offset < size_ && len > 0) fs::will_need(fd_, offset, std::min(len, size_ - offset));
}

void DataFile::read(uint64_t offset, void* dst, uint64_t len) const {
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < len) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(len - done, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd_, out + done, want, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw FormatError(path_ + ": cannot read [" + std::to_string(offset) + ", " +
                        std::to_string(offset + len) + "): " + errno_text());
    }
    if (got == 0)
      throw FormatError(path_ + ": ends at " + std::to_string(offset + done) + " while reading [" +
                        std::to_string(offset) + ", " + std::to_string(offset + len) +
                        ") (the file shrank after it was opened)");
    done += static_cast<uint64_t>(got);
  }
}

CheckpointDir::CheckpointDir(std::string path) : path_(std::move(path)) {
  dir_fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) throw FormatError(path_ + ": cannot open the checkpoint directory: " + errno_text());
}

CheckpointDir::~CheckpointDir() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string CheckpointDir::file_path(std::string_view name) const {
  std::string s = path_;
  if (!s.empty() && s.back() != '/') s += '/';
  s += name;
  return s;
}

bool CheckpointDir::is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

bool CheckpointDir::has_regular_file(std::string_view name) const {
  if (!is_plain_name(name)) return false;
  struct stat st {};
  return ::fstatat(dir_fd_, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode);
}

std::vector<std::string> CheckpointDir::regular_files() const {
  const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw FormatError(path_ + ": cannot list the checkpoint directory: " + errno_text());
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    throw FormatError(path_ + ": cannot list the checkpoint directory: " + errno_text());
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (has_regular_file(name)) names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::shared_ptr<const DataFile> CheckpointDir::open(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = open_.find(name); it != open_.end()) {
    it->second.last_use = ++uses_;
    return it->second.file;
  }
  if (!is_plain_name(name))
    throw FormatError(path_ + ": stored file name " + safetensors::quote_name(name) +
                      " is not a plain file name inside the checkpoint directory");
  const std::string n(name);
  const std::string shown = file_path(n);
  struct stat before {};
  if (::fstatat(dir_fd_, n.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0)
    throw FormatError(shown + ": cannot open: " + errno_text());
  if (!S_ISREG(before.st_mode))
    throw FormatError(shown + ": is " + file_type(before.st_mode) + ", not a regular file; refused");
  // O_NONBLOCK: should the entry become a FIFO after the check, opening it does not hang.
  const int fd = ::openat(dir_fd_, n.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw FormatError(shown + ": cannot open: " + errno_text());
  struct stat after {};
  if (::fstat(fd, &after) != 0 || !S_ISREG(after.st_mode) || after.st_dev != before.st_dev ||
      after.st_ino != before.st_ino) {
    ::close(fd);
    throw FormatError(shown + ": changed while it was opened; refused");
  }
  auto file = std::make_shared<const DataFile>(fd, static_cast<uint64_t>(after.st_size), shown);
  if (open_.size() >= kMaxOpenFiles) {
    auto oldest = open_.begin();
    for (auto it = open_.begin(); it != open_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    open_.erase(oldest);
  }
  open_[n] = OpenFile{file, ++uses_};
  return file;
}

std::optional<uint64_t> storage_file_rank(const std::string& relative_path) {
  // "__R_N.distcp": R and N runs of digits.
  const std::string_view name(relative_path);
  auto digit_run = [&](size_t at) {
    size_t n = 0;
    while (at + n < name.size() && name[at + n] >= '0' && name[at + n] <= '9') ++n;
    return n;
  };
  if (name.substr(0, 2) != "__") return std::nullopt;
  const size_t r = digit_run(2);
  if (r == 0 || name.substr(2 + r, 1) != "_") return std::nullopt;
  const size_t n = digit_run(3 + r);
  if (n == 0 || name.substr(3 + r + n) != ".distcp") return std::nullopt;
  const std::string digits(name.substr(2, r));
  const uint64_t rank = digits.size() > 7 ? UINT64_MAX : std::stoull(digits);  // 7 digits: no overflow
  if (rank >= ckpt::kMaxRanks)
    throw FormatError("storage file " + quoted_name(relative_path) + " names rank " + digits + ", beyond the " +
                      std::to_string(ckpt::kMaxRanks) + " ranks a checkpoint may hold");
  return rank;
}

}  // namespace fpg::dcp
