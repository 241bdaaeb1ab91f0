#include "formats/safetensors/reader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/strict_json.h"

namespace fpg::safetensors {
namespace {

std::string range_string(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

Reader::Reader(const std::string& path) : path_(path), map_(std::make_unique<MappedFile>(path)) {
  base_ = map_->data();
  file_size_ = map_->size();
  parse();
}

Reader Reader::from_buffer(std::string name, const uint8_t* data, uint64_t size) {
  Reader r;
  r.path_ = std::move(name);
  r.base_ = data;
  r.file_size_ = size;
  r.parse();
  return r;
}

Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

const TensorInfo* Reader::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& Reader::tensor(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  throw FormatError(path_ + ": no tensor " + quote_name(name));
}

void Reader::parse() {
  const std::string& f = path_;
  auto fail = [&](const std::string& what) -> FormatError { return FormatError(f + ": " + what); };

  if (file_size_ < 8)
    throw fail("file is " + std::to_string(file_size_) +
               " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];  // little-endian on any host
  if (n > kMaxHeaderSize)
    throw fail("header length " + std::to_string(n) + " exceeds the limit of " +
               std::to_string(kMaxHeaderSize) + " bytes");
  if (n > file_size_ - 8)
    throw fail("header of " + std::to_string(n) + " bytes runs past the end of the file (" +
               std::to_string(file_size_) + " bytes)");
  data_offset_ = 8 + n;
  const uint64_t data_size = file_size_ - data_offset_;
  const char* text = reinterpret_cast<const char*>(base_ + 8);
  // nlohmann skips a UTF-8 byte-order mark; the reference (serde_json) does not, so neither do we.
  if (n >= 3 && std::memcmp(text, "\xEF\xBB\xBF", 3) == 0)
    throw fail("header starts with a byte-order mark, which is not valid JSON here");

  const nlohmann::json header = parse_strict_json(f, "header", text, n);
  if (!header.is_object()) throw fail("header is JSON but not an object");

  tensors_.clear();
  by_name_.clear();
  metadata_.clear();
  has_metadata_ = false;
  tensors_.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (value.is_null()) continue;  // Option::None in the reference
      if (!value.is_object()) throw fail("\"__metadata__\" is not an object of strings");
      has_metadata_ = true;
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw fail("\"__metadata__\" entry " + quote_name(mk) + " is not a string");
        metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    const std::string tname = "tensor " + quote_name(key);
    if (!value.is_object()) throw fail(tname + ": entry is not an object");
    TensorInfo t;
    t.name = key;

    const auto dt = value.find("dtype");
    if (dt == value.end()) throw fail(tname + ": missing \"dtype\"");
    if (!dt->is_string()) throw fail(tname + ": \"dtype\" is not a string");
    const auto parsed = parse_dtype(dt->get_ref<const std::string&>());
    if (!parsed) throw fail(tname + ": unknown dtype " + quote_name(dt->get_ref<const std::string&>()));
    t.dtype = *parsed;

    const auto sh = value.find("shape");
    if (sh == value.end()) throw fail(tname + ": missing \"shape\"");
    if (!sh->is_array()) throw fail(tname + ": \"shape\" is not an array");
    for (const auto& d : *sh) {
      uint64_t v = 0;
      if (!json_to_u64(d, &v))
        throw fail(tname + ": \"shape\" holds " + d.dump() + ", not a non-negative integer");
      t.shape.push_back(v);
    }

    const auto off = value.find("data_offsets");
    if (off == value.end()) throw fail(tname + ": missing \"data_offsets\"");
    if (!off->is_array() || off->size() != 2)
      throw fail(tname + ": \"data_offsets\" is not an array of two integers");
    if (!json_to_u64((*off)[0], &t.begin) || !json_to_u64((*off)[1], &t.end))
      throw fail(tname + ": \"data_offsets\" " + off->dump() +
                 " are not non-negative integers");
    const std::string range = "data_offsets " + range_string(t.begin, t.end);
    if (t.end < t.begin) throw fail(tname + ": " + range + " end before they begin");

    const std::string what = std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape);
    if (!checked_numel(t.shape, &t.numel))
      throw fail(tname + ": shape " + shape_string(t.shape) + " overflows 64 bits");
    uint64_t nbytes = 0;
    if (!checked_nbytes(t.dtype, t.numel, &nbytes)) {
      if (dtype_bits(t.dtype) % 8 != 0)
        throw fail(tname + ": " + what + " is not a whole number of bytes");
      throw fail(tname + ": byte size of " + what + " overflows 64 bits");
    }
    if (t.end > data_size)
      throw fail(tname + ": " + range + " lie outside the data section of " +
                 std::to_string(data_size) + " bytes");
    if (t.nbytes() != nbytes)
      throw fail(tname + ": " + range + " hold " + std::to_string(t.nbytes()) + " bytes but " +
                 what + " needs " + std::to_string(nbytes));
    tensors_.push_back(std::move(t));
  }

  // File order. Equal ranges (empty tensors) stay in name order, the order of the parsed object;
  // the reference leaves them in hash order, so no writer can rely on any order there.
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::make_pair(a.begin, a.end) < std::make_pair(b.begin, b.end);
  });
  uint64_t covered = 0;  // the data section is covered up to here
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors_) {
    const std::string tname = "tensor " + quote_name(t.name) + " " + range_string(t.begin, t.end);
    if (t.begin < covered)
      throw fail(tname + " overlaps tensor " + quote_name(prev->name) + " " +
                 range_string(prev->begin, prev->end));
    if (t.begin > covered)
      throw fail("bytes " + range_string(covered, t.begin) + " of the data section before " + tname +
                 " belong to no tensor (offsets must be contiguous)");
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size) {
    throw fail("bytes " + range_string(covered, data_size) + " at the end of the data section " +
               (prev ? "after tensor " + quote_name(prev->name) : std::string("(no tensors)")) +
               " belong to no tensor (trailing bytes are refused)");
  }
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

}  // namespace fpg::safetensors
