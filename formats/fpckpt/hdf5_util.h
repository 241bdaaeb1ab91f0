// Internal to formats/fpckpt (includes hdf5.h, which only libfpgather sees): RAII for HDF5 ids, the
// one mutex every HDF5 call holds (the library is serial on the GPU machine; compression, checksums,
// decoding and the reader's pread of chunk bytes run outside it in parallel), and errors that name
// the file and HDF5's own message.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

#include "ckpt/zstd_frame.h"
#include "core/fs.h"

namespace fpg::fpckpt {

std::mutex& hdf5_mutex();

// Turns off HDF5's automatic error printing (we report errors ourselves). Idempotent; call with the
// mutex held before any other HDF5 call, on every thread that makes HDF5 calls (a thread-safe HDF5
// keeps that setting per thread).
void hdf5_init();

// What HDF5's current error stack says went wrong, and clears it: where a record carries a system
// error (a failed write on a full disk), that error in fs::io_error_text()'s words ("no space left on
// device", "file size limit exceeded"); otherwise the innermost message, or "". Records of the zstd
// filter not being registered are never the cause (that filter is optional: chunks arrive encoded).
std::string hdf5_error();

// Throws fpg::FormatError "<path>: <what>: <hdf5_error()>".
[[noreturn]] void hdf5_fail(const std::string& path, const std::string& what);

// An owned HDF5 id, closed with the matching H5?close.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }
  bool valid() const { return id_ >= 0; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// Checked constructors: throw via hdf5_fail when HDF5 returns a negative id.
Hid checked(hid_t id, Hid::Closer close, const std::string& path, const std::string& what);

// Opens an HDF5 file of a checkpoint read-only. It must be a regular file (not a symbolic link, FIFO
// or device: refused before anything opens it, so nothing blocks), and HDF5 must have opened that
// very file. FormatError naming the path otherwise. Call with the HDF5 mutex held.
Hid open_checkpoint_file(const std::string& path);

// Opens the object `name` (a plain name, no '/') below `loc` as a dataset or group of this file only:
// it must be a hard link (never a soft or external link, which could lead to another file) and a
// dataset must keep its bytes in this file (no external raw storage, no virtual dataset). Nothing is
// read from outside: FormatError "<path>: <object>: is an HDF5 external link ..." and the like, where
// `object` names it ("/documents/model"). Call with the HDF5 mutex held.
Hid open_own_dataset(hid_t loc, const std::string& name, const std::string& path, const std::string& object);
Hid open_own_group(hid_t loc, const std::string& name, const std::string& path, const std::string& object);

// For a file being abandoned after a failed write: points its POSIX descriptor at an anonymous
// scratch file, so that what HDF5 still writes while its datasets and the file are closed cannot
// fail again (full disk, file size limit) and every close succeeds. An HDF5 1.10 file whose close
// failed stays registered, half freed, and crashes the library when it ends at exit. The file's
// contents are lost; call only before removing it. Call with the HDF5 mutex held.
void divert_writes(hid_t file);

// An HDF5 file being written. close() first makes sure that the space its closing writes to is
// there; where it is not (a full disk, the file size limit) the file is abandoned before the error is
// thrown, never left half closed. Destroyed unclosed (an exception on the way), it is abandoned too:
// divert_writes(), then closed. Closing and destruction need the HDF5 mutex held.
class OutputFile {
 public:
  OutputFile() = default;
  OutputFile(Hid file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  OutputFile(OutputFile&&) = default;
  OutputFile& operator=(OutputFile&& o) noexcept {
    if (this != &o) {
      abandon();
      file_ = std::move(o.file_);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  ~OutputFile() { abandon(); }
  operator hid_t() const { return file_.get(); }
  bool is_open() const { return file_.valid(); }
  // FormatError "<path>: cannot write: no space left on device" and the like.
  void close();
  // Drops the file's unwritten contents and closes it; no-op once closed.
  void abandon();

 private:
  Hid file_;
  std::string path_;
};

constexpr H5Z_filter_t kZstdFilterId = ckpt::kZstdHdf5FilterId;

}  // namespace fpg::fpckpt
