// Files of a checkpoint directory, opened so that nothing outside it is read: a stored
// `relative_path` must be a plain file name (no '/', not "." or "..", no NUL), a regular file
// (checked with lstat before opening and fstat after: symlinks, FIFOs, sockets and devices are
// refused, and a file swapped between the two checks is refused too), opened with O_NOFOLLOW.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fpg::dcp {

// An open regular file; reads are pread, safe from several threads.
class DataFile {
 public:
  DataFile(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  ~DataFile();
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // Reads exactly [offset, offset + len); throws fpg::FormatError naming the file and range on an
  // I/O error or when the file is shorter than it was at open.
  void read(uint64_t offset, void* dst, uint64_t len) const;
  // Asks the OS to start reading [offset, offset + len) into the page cache in the background (a
  // hint: errors are ignored), so that a read of it soon after does not wait for the disk.
  void will_need(uint64_t offset, uint64_t len) const;

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
};

class CheckpointDir {
 public:
  // Opens the directory `path` (following a symlink the user named: the checkpoint's own entries
  // are never followed). Throws fpg::FormatError if it is not a readable directory.
  explicit CheckpointDir(std::string path);
  ~CheckpointDir();
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;

  const std::string& path() const { return path_; }
  // "DIR/name" for messages.
  std::string file_path(std::string_view name) const;

  // Whether `name` is a plain file name as a stored relative_path must be.
  static bool is_plain_name(std::string_view name);

  // Whether `name` exists in the directory as a regular file (not following symlinks).
  bool has_regular_file(std::string_view name) const;

  // The names of the directory's regular files (not following symlinks), sorted.
  std::vector<std::string> regular_files() const;

  // Opens `name` as described above. The most recently used files stay open and are shared (at most
  // kMaxOpenFiles, so a checkpoint of thousands of files stays under the descriptor limit). Throws
  // fpg::FormatError naming the file and the reason.
  std::shared_ptr<const DataFile> open(std::string_view name) const;

 private:
  std::string path_;
  int dir_fd_ = -1;
  mutable std::mutex mutex_;
  static constexpr size_t kMaxOpenFiles = 64;
  struct OpenFile {
    std::shared_ptr<const DataFile> file;
    uint64_t last_use = 0;
  };
  mutable std::map<std::string, OpenFile, std::less<>> open_;
  mutable uint64_t uses_ = 0;
};

// The rank of a data file named as torch's FileSystemWriter names them, `__R_N.distcp`; nothing for
// other names. FormatError for a rank beyond what a checkpoint may hold (nothing may be sized by it).
std::optional<uint64_t> storage_file_rank(const std::string& relative_path);

}  // namespace fpg::dcp
