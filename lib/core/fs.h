// The file-system operations every writer and reader of files shares: paths, opening, positional
// writes, fsync of files and directories, atomic replacement, writeback and removal. POSIX only.
// Failures throw fpg::FormatError naming the file; a failed write's errno is spelled the way a user
// acts on it (io_error_text).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>

namespace fpg::fs {

// ("dir", "name") of a path; dir is "." for a bare name, "/" for a name in the root.
std::pair<std::string, std::string> split_path(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// What a failed read or write's errno means, in the words a user acts on: ENOSPC "no space left on
// device", EFBIG "file size limit exceeded" (RLIMIT_FSIZE, or the file system's largest file),
// EDQUOT "disk quota exceeded", otherwise strerror().
std::string io_error_text(int err);

// ---- inspecting, without opening ----

// Whether anything is at `path`. Without `follow_symlinks` a symbolic link counts itself, whatever
// it points to (lstat); with it, a dangling link is nothing (stat).
bool exists(const std::string& path, bool follow_symlinks = false);
// Whether `path` is a directory / a regular file; with `follow_symlinks` false a symbolic link is
// neither.
bool is_directory(const std::string& path, bool follow_symlinks = true);
bool is_regular_file(const std::string& path, bool follow_symlinks = true);

// ---- opening ----

// Opens an existing regular file read-only (O_CLOEXEC). Anything else is refused before it is
// opened: opening a FIFO blocks until a writer comes, opening a device can act on it. With
// `follow_symlinks` false a symbolic link is refused too (O_NOFOLLOW). The opened file is checked
// to be the one inspected. FormatError "<path>: not a regular file (a FIFO)" and the like.
int open_regular_file(const std::string& path, bool follow_symlinks);

// Creates the new regular file `path` for writing (O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC: never
// an existing file, never through a symbolic link). FormatError "<path>: cannot create: <why>".
int create_file(const std::string& path, mode_t mode = 0666);

// Creates a new temporary file ".NAME.tmp-<random digits>" beside `path` (same directory, so a rename to
// `path` is atomic); returns its descriptor and sets `temp_path`. FormatError "<path>: cannot create
// a temporary file in <dir>: <why>".
int create_temp_beside(const std::string& path, std::string& temp_path);

// ---- writing ----

// pwrite until done, retrying short writes and EINTR. Returns 0, or the errno of the failure (EIO
// where the file takes no more bytes), for callers that name what was being written themselves.
int pwrite_full(int fd, uint64_t offset, const void* data, uint64_t size);
// pwrite_full, throwing FormatError "<path>: write of bytes [a, b) failed: <why>".
void pwrite_all(int fd, const std::string& path, uint64_t offset, const void* data, uint64_t size);

// Starts writeback of the file's dirty pages without waiting (sync_file_range where the system has
// it), so that a long write reaches the disk as it goes instead of all in the final fsync. A hint:
// never fails.
void start_writeback(int fd);

// Asks the kernel to read bytes [offset, offset + len) of an open file into the page cache without
// waiting for them (POSIX_FADV_WILLNEED). Linux reads at most the device's read-ahead or request size
// (read_ahead_kb, max_sectors_kb) per such request and drops the rest, so a longer range is asked
// for in pieces of that size. A hint: never fails.
void will_need(int fd, uint64_t offset, uint64_t len);
// The most bytes one WILLNEED reads on the device holding fd (1 MiB where the system does not say).
uint64_t will_need_piece(int fd);

// ---- durability ----

// fsync of an open file: FormatError "<path>: fsync failed: <why>".
void fsync_fd(int fd, const std::string& path);
// fsync of a regular file by path: FormatError "<path>: cannot open for fsync: ..." or as above.
void fsync_file(const std::string& path);
// fsync of a directory, so a rename or creation in it survives a crash. File systems that cannot
// fsync a directory (EINVAL) are accepted. FormatError "<dir>: directory fsync failed: ...".
void fsync_directory(const std::string& dir);
// close(2) of a written file; a deferred write error surfaces here. FormatError "<path>: close
// failed: <why>".
void close_fd(int fd, const std::string& path);

// rename(2) of `from` to `to`: FormatError "<to>: cannot rename <from> into place: <why>". The
// caller fsyncs the directory when the rename must survive a crash.
void rename_into_place(const std::string& from, const std::string& to);

// Writes `contents` to `path` atomically: temporary file in the same directory, fsync, rename,
// fsync of the directory. Never leaves the temporary file behind.
void write_file_atomic(const std::string& path, const std::string& contents);

// Copies the regular file `from` (symlinks followed) to the new file `to`, fsynced. Removes a
// partial `to`.
void copy_file(const std::string& from, const std::string& to);

// The contents of the regular file `path`, at most `limit` bytes (FormatError beyond, naming it).
std::string read_small_file(const std::string& path, uint64_t limit);

// ---- removal ----

// Removes `path` and, where it is a directory, everything below it. Symbolic links are removed,
// never followed: nothing outside the tree is touched, even where a link inside it points out or a
// directory is swapped for a link while the removal runs (each directory is opened O_NOFOLLOW and
// its entries removed relative to it). Best effort: what cannot be removed is left; nothing throws.
void remove_tree(const std::string& path) noexcept;

}  // namespace fpg::fs
