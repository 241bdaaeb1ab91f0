#include "formats/safetensors/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/fs.h"

namespace fpg::safetensors {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // Symbolic links are followed (a Hugging Face cache's snapshot links to its blobs); FIFOs and
  // devices are refused before they are opened.
  const int fd = fs::open_regular_file(path, true);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw FormatError(path + ": cannot stat: " + std::strerror(e));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    // The map outlives the descriptor. If another process truncates the file while it is mapped,
    // reads past the new end raise SIGBUS; nothing short of copying the file can prevent that.
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw FormatError(path + ": cannot map " + std::to_string(size_) + " bytes: " +
                        std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace fpg::safetensors
