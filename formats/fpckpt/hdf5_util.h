// Internal to formats/fpckpt (includes hdf5.h, which only libfpgather sees): RAII for HDF5 ids, the
// one mutex every HDF5 call holds (the library is serial on the GPU machine; compression, checksums,
// decoding and the reader's pread of chunk bytes run outside it in parallel), and errors that name
// the file and HDF5's own message.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

namespace fpg::fpckpt {

std::mutex& hdf5_mutex();

// Turns off HDF5's automatic error printing (we report errors ourselves). Idempotent; call with the
// mutex held before any other HDF5 call, on every thread that makes HDF5 calls (a thread-safe HDF5
// keeps that setting per thread).
void hdf5_init();

// The innermost message of HDF5's current error stack, or "".
std::string hdf5_error();

// Throws fpg::FormatError "<path>: <what>: <hdf5 message>".
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

// The registered HDF5 filter id of Zstandard (https://github.com/HDFGroup/hdf5_plugins).
constexpr H5Z_filter_t kZstdFilterId = 32015;

// fsync of a regular file by path; FormatError on failure.
void fsync_file(const std::string& path);

}  // namespace fpg::fpckpt
