#include "formats/safetensors/writer.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "formats/safetensors/format.h"

namespace fpg::safetensors {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

Writer::Writer(std::string path, std::vector<TensorSpec> specs,
               std::map<std::string, std::string> metadata)
    : path_(std::move(path)) {
  // ---- layout ----
  std::set<std::string_view> names;
  for (const TensorSpec& s : specs) {
    if (s.name == kMetadataKey)
      throw UsageError(path_ + ": tensor name \"__metadata__\" is reserved by the format");
    if (!names.insert(s.name).second)
      throw UsageError(path_ + ": tensor " + quote_name(s.name) + " is declared twice");
  }
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return reference_order_less(a.dtype, a.name, b.dtype, b.name);
  });
  uint64_t offset = 0;
  tensors_.reserve(specs.size());
  for (TensorSpec& s : specs) {
    TensorInfo t;
    t.name = std::move(s.name);
    t.dtype = s.dtype;
    t.shape = std::move(s.shape);
    const std::string what = std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape);
    uint64_t nbytes = 0;
    if (!checked_numel(t.shape, &t.numel) || !checked_nbytes(t.dtype, t.numel, &nbytes) ||
        offset + nbytes < offset)
      throw UsageError(path_ + ": tensor " + quote_name(t.name) + ": " + what +
                       (dtype_bits(t.dtype) % 8 ? " is not a whole number of bytes or overflows"
                                                : " overflows 64-bit sizes"));
    t.begin = offset;
    t.end = offset + nbytes;
    offset = t.end;
    tensors_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
  coverage_.resize(tensors_.size());

  // ---- header: the reference's compact JSON, space-padded so the data starts 8-aligned ----
  // Assembled by hand: nlohmann's ordered_json would search keys linearly (quadratic in tensors).
  std::string text = "{";
  try {
    auto str = [](const std::string& v) {
      return nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    };
    if (!metadata.empty()) {
      text += std::string("\"") + kMetadataKey + "\":{";
      for (const auto& [k, v] : metadata) {  // std::map: sorted keys, a stable header
        if (text.back() != '{') text += ',';
        text += str(k) + ":" + str(v);
      }
      text += "}";
    }
    for (const TensorInfo& t : tensors_) {
      if (text.size() > 1) text += ',';
      text += str(t.name) + ":{\"dtype\":\"" + std::string(dtype_name(t.dtype)) + "\",\"shape\":[";
      for (size_t i = 0; i < t.shape.size(); ++i) {
        if (i) text += ',';
        text += std::to_string(t.shape[i]);
      }
      text += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
    }
    text += "}";
  } catch (const nlohmann::json::exception&) {
    throw UsageError(path_ + ": a tensor name or metadata string is not valid UTF-8");
  }
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  if (text.size() > kMaxHeaderSize)
    throw UsageError(path_ + ": header of " + std::to_string(text.size()) +
                     " bytes exceeds the format's limit of " + std::to_string(kMaxHeaderSize));
  data_offset_ = 8 + text.size();
  file_size_ = data_offset_ + offset;

  // ---- temporary file next to the final one (same filesystem, so rename is atomic) ----
  fd_ = fs::create_temp_beside(path_, temp_path_);
  try {
    // Preallocating fails early on a full disk and keeps the file unfragmented. Not in memory
    // (tmpfs): there it fragments nothing and allocates every page before the first is written, a
    // pass over the whole output before the export reads anything.
    struct statfs fs_info {};
    const bool in_memory = ::fstatfs(fd_, &fs_info) == 0 && fs_info.f_type == TMPFS_MAGIC;
    if (file_size_ > 0 && in_memory) {
      if (::ftruncate(fd_, static_cast<off_t>(file_size_)) != 0)
        throw FormatError(temp_path_ + ": cannot size to " + std::to_string(file_size_) + " bytes: " + errno_text(errno));
    } else if (file_size_ > 0) {
      const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(file_size_));
      if (rc == EOPNOTSUPP || rc == EINVAL) {
        if (::ftruncate(fd_, static_cast<off_t>(file_size_)) != 0)
          throw FormatError(temp_path_ + ": cannot size to " + std::to_string(file_size_) +
                            " bytes: " + errno_text(errno));
      } else if (rc != 0) {
        throw FormatError(temp_path_ + ": cannot preallocate " + std::to_string(file_size_) +
                          " bytes: " + errno_text(rc));
      }
    }
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
    fs::pwrite_all(fd_, temp_path_, 0, len, 8);
    fs::pwrite_all(fd_, temp_path_, 8, text.data(), text.size());
  } catch (...) {
    remove_temp();
    throw;
  }
}

Writer::~Writer() {
  if (!committed_) remove_temp();
}

void Writer::remove_temp() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

size_t Writer::index(std::string_view name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end())
    throw InternalError(path_ + ": tensor " + quote_name(name) + " was not declared to the writer");
  return it->second;
}

void Writer::write(size_t index, uint64_t offset, const void* data, uint64_t size) {
  if (committed_ || fd_ < 0) throw InternalError(path_ + ": write after commit");
  if (index >= tensors_.size()) throw InternalError(path_ + ": no tensor #" + std::to_string(index));
  const TensorInfo& t = tensors_[index];
  if (offset > t.nbytes() || size > t.nbytes() - offset)
    throw InternalError(path_ + ": tensor " + quote_name(t.name) + ": write of bytes [" +
                        std::to_string(offset) + ", " + std::to_string(offset + size) +
                        ") outside its " + std::to_string(t.nbytes()) + " bytes");
  if (size == 0) return;
  fs::pwrite_all(fd_, temp_path_, data_offset_ + t.begin + offset, data, size);

  // Merge [offset, offset + size) into the tensor's interval set.
  std::lock_guard<std::mutex> lock(coverage_mutex_);
  auto& m = coverage_[index];
  uint64_t b = offset, e = offset + size;
  auto it = m.upper_bound(b);
  if (it != m.begin()) {
    auto p = std::prev(it);
    if (p->second >= b) {
      b = p->first;
      e = std::max(e, p->second);
      it = m.erase(p);
    }
  }
  while (it != m.end() && it->first <= e) {
    e = std::max(e, it->second);
    it = m.erase(it);
  }
  m.emplace(b, e);
}

void Writer::start_writeback() const {
  if (!committed_) fs::start_writeback(fd_);
}

void Writer::commit() {
  if (committed_) return;
  if (fd_ < 0) throw InternalError(path_ + ": commit of a writer that failed");
  {
    std::lock_guard<std::mutex> lock(coverage_mutex_);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorInfo& t = tensors_[i];
      if (t.nbytes() == 0) continue;
      const auto& m = coverage_[i];
      uint64_t gap_begin = 0, gap_end = t.nbytes();
      if (!m.empty()) {
        if (m.begin()->first > 0) {
          gap_end = m.begin()->first;
        } else if (m.begin()->second == t.nbytes()) {
          continue;  // one interval [0, nbytes): complete
        } else {
          gap_begin = m.begin()->second;
          const auto next = std::next(m.begin());
          gap_end = next == m.end() ? t.nbytes() : next->first;
        }
      }
      throw InternalError(path_ + ": tensor " + quote_name(t.name) + ": bytes [" +
                          std::to_string(gap_begin) + ", " + std::to_string(gap_end) +
                          ") were never written");
    }
  }
  fs::fsync_fd(fd_, temp_path_);
  const int fd = fd_;
  fd_ = -1;
  const std::string tmp = std::move(temp_path_);
  temp_path_.clear();
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw FormatError(path_ + ": closing the temporary file failed: " + errno_text(e));
  }
  try {
    fs::rename_into_place(tmp, path_);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  committed_ = true;
  fs::fsync_directory(fs::split_path(path_).first);  // makes the rename itself durable
}

}  // namespace fpg::safetensors
