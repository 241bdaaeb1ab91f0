// Small POSIX file helpers shared by the safetensors reader and writer and the checkpoint files.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace fpg::safetensors {

// ("dir", "name") of a path; dir is "." for a bare name.
std::pair<std::string, std::string> split_path(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// What a failed read or write's errno means, in the words a user acts on: ENOSPC "no space left on
// device", EFBIG "file size limit exceeded" (RLIMIT_FSIZE, or the file system's largest file),
// EDQUOT "disk quota exceeded", otherwise strerror().
std::string io_error_text(int err);

// Opens an existing regular file read-only (O_CLOEXEC). Anything else is refused before it is
// opened: opening a FIFO blocks until a writer comes, opening a device can act on it. With
// `follow_symlinks` false a symbolic link is refused too (O_NOFOLLOW). The opened file is checked
// to be the one inspected. FormatError "<path>: not a regular file (a FIFO)" and the like.
int open_regular_file(const std::string& path, bool follow_symlinks);

// pwrite until done (short writes, EINTR); throws fpg::FormatError naming `path` and the range.
void pwrite_all(int fd, const std::string& path, uint64_t offset, const void* data, uint64_t size);

// fsync of a directory, so a rename into it survives a crash; throws fpg::FormatError.
void fsync_directory(const std::string& dir);

// Writes `contents` to `path` atomically: temporary file in the same directory, fsync, rename,
// fsync of the directory. Throws fpg::FormatError; never leaves the temporary file behind.
void write_file_atomic(const std::string& path, const std::string& contents);

// Copies the regular file `from` (symlinks followed) to the new file `to`, fsynced. Throws
// fpg::FormatError naming the file; removes a partial `to`.
void copy_file(const std::string& from, const std::string& to);

// The contents of the regular file `path`, at most `limit` bytes (FormatError beyond, naming it).
std::string read_small_file(const std::string& path, uint64_t limit);

}  // namespace fpg::safetensors
