#include "formats/dcp/reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "core/units.h"
#include "formats/dcp/hf_distributed.h"
#include "formats/dcp/metadata/rank_local_metadata.h"
#include "formats/dcp/zip/crc32.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {
namespace {

constexpr size_t kMaxImages = 64;

std::string chunk_name(const Entry& e, size_t chunk) {
  std::string s = "key " + safetensors::quote_name(e.fqn);
  if (e.is_tensor && chunk < e.tensor.chunks.size())
    s += " chunk " + std::to_string(chunk) + " at offsets " + shape_string(e.tensor.chunks[chunk].offsets);
  return s;
}

std::string hex_bytes(const uint8_t* b, uint64_t n) {
  std::string s;
  for (uint64_t i = 0; i < n; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", b[i]);
    s += buf;
  }
  return "bytes " + s;
}

bool is_zip(const uint8_t* head, size_t n) {
  return n >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
}

}  // namespace

bool is_dcp_directory(const std::string& dir) {
  try {
    const CheckpointDir files(dir);
    if (files.has_regular_file(kMetadataFileName)) return true;
    if (!hf_distributed_files(files).empty()) return true;
    // Rank-local metadata, or data files without their metadata: opening says which is missing.
    for (const std::string& name : files.regular_files()) {
      if (rank_metadata_rank(name)) return true;
      try {
        if (storage_file_rank(name)) return true;
      } catch (const FormatError&) {
        return true;
      }
    }
    return false;
  } catch (const FormatError&) {
    return false;
  }
}

std::string_view serialization_name(Serialization s) {
  return s == Serialization::torch_save ? "torch_save" : "safetensors";
}

uint64_t StoredChunk::nbytes() const {
  return serialization_ == Serialization::torch_save ? record_.nbytes() : tensor_->nbytes();
}

void StoredChunk::read(void* dst) const {
  if (serialization_ == Serialization::torch_save) {
    archive_->read_tensor(record_, dst);
  } else if (tensor_->nbytes() > 0) {
    std::memcpy(dst, image_->reader().data(*tensor_), tensor_->nbytes());
  }
}

StoredChunk::PartRead StoredChunk::read_part(uint64_t lo, uint64_t hi, void* dst) const {
  const uint64_t es = dtype_->element_bytes, n = nbytes() / std::max<uint64_t>(es, 1);
  if (lo > hi || hi > n)
    throw InternalError(name() + ": elements [" + std::to_string(lo) + ", " + std::to_string(hi) + ") asked of " +
                        std::to_string(n));
  PartRead p;
  if (lo == hi) return p;
  if (serialization_ == Serialization::safetensors) {
    std::memcpy(dst, image_->reader().data(*tensor_) + lo * es, (hi - lo) * es);
    return p;
  }
  if (!record_.contiguous()) {
    // A view with strides: through the whole storage, CRC-checked as it is read.
    std::vector<uint8_t> all(static_cast<size_t>(nbytes()));
    archive_->read_tensor(record_, all.data());
    std::memcpy(dst, all.data() + lo * es, (hi - lo) * es);
    return p;
  }
  const ZipEntry& rec = archive_->storage_entry(record_);
  p.tracked = true;
  p.offset = (record_.storage_offset + lo) * es;
  p.size = (hi - lo) * es;
  p.crc = archive_->zip().read_range(rec, p.offset, p.size, dst);
  p.record_size = rec.size;
  p.record_crc = rec.crc32;
  return p;
}

uint32_t StoredChunk::record_crc(uint64_t offset, uint64_t size) const {
  if (serialization_ != Serialization::torch_save) throw InternalError(name() + ": a safetensors item has no CRC");
  const ZipEntry& rec = archive_->storage_entry(record_);
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(kBlock, size)));
  uint32_t crc = 0;
  for (uint64_t at = 0; at < size; at += kBlock) {
    const uint64_t k = std::min(kBlock, size - at);
    crc = crc32_concat(crc, archive_->zip().read_range(rec, offset + at, k, buf.data()), k);
  }
  return crc;
}

namespace {

// Decodes the metadata pickle `name` of `files`, refused unread above `cap` bytes or when it does not
// start as a pickle.
Metadata read_metadata_file(const CheckpointDir& files, const std::string& name, uint64_t cap,
                            const PickleLimits& limits) {
  const auto f = files.open(name);
  if (f->size() > cap)
    throw FormatError(f->path() + ": " + std::to_string(f->size()) + " bytes (" + byte_size(f->size()) +
                      "), larger than the " + std::to_string(cap) + " accepted for a .metadata");
  // The first opcode before the whole file: a file of zeros (sparse, say) is refused unread.
  uint8_t head[2] = {};
  f->read(0, head, static_cast<size_t>(std::min<uint64_t>(f->size(), sizeof head)));
  if (f->size() < 2 || head[0] != 0x80 || head[1] < 2 || head[1] > 5)
    throw FormatError(f->path() + ": not a pickle of protocol 2 to 5 (it starts with " +
                      (f->size() == 0 ? std::string("nothing: the file is empty") : hex_bytes(head, std::min<uint64_t>(f->size(), 2))) + ")");
  // Decoded as it is read, in a window: the file is never held whole (a million chunks' .metadata is
  // 190 MB, pages that would be faulted in and zeroed for one pass over them). The disk is asked for
  // all of it at once, to read ahead of the decoding.
  const auto size = static_cast<size_t>(f->size());
  f->will_need(0, size);
  return parse_metadata(f->path(), size, [&f](uint64_t at, uint8_t* dst, size_t n) { f->read(at, dst, n); }, limits);
}

bool has_rank_metadata(const CheckpointDir& files) {
  for (const std::string& name : files.regular_files())
    if (rank_metadata_rank(name)) return true;
  return false;
}

std::string name_list(const std::vector<std::string>& names, size_t most = 4) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > most) s += " and " + std::to_string(names.size() - most) + " more";
  return s;
}

}  // namespace

Reader::Reader(const std::string& dir, const PickleLimits& limits) : files_(dir) {
  const uint64_t cap = std::min(limits.max_bytes, kMaxMetadataBytes);
  if (files_.has_regular_file(kMetadataFileName)) {
    metadata_ = read_metadata_file(files_, kMetadataFileName, cap, limits);
    metadata_files_ = {kMetadataFileName};
  } else if (const std::vector<std::string> shards = hf_distributed_files(files_); !shards.empty() && !has_rank_metadata(files_)) {
    metadata_ = hf_distributed_metadata(files_, shards);
    metadata_files_ = shards;
    source_ = MetadataSource::hf_distributed;
  } else {
    read_rank_local(cap, limits);
    source_ = MetadataSource::rank_local;
  }
  megatron_ = read_megatron_metadata(files_);
}

void Reader::read_rank_local(uint64_t cap, const PickleLimits& limits) {
  // Ranks with metadata, and ranks whose data files are here: a rank that wrote data but no
  // metadata did not finish its save.
  std::map<uint64_t, std::string> with_metadata;
  std::set<uint64_t> with_data;
  std::vector<std::string> data_files;
  for (const std::string& name : files_.regular_files()) {
    if (const auto r = rank_metadata_rank(name)) with_metadata.emplace(*r, name);
    std::optional<uint64_t> r;
    try {
      r = storage_file_rank(name);
    } catch (const FormatError&) {
      // A rank number beyond any checkpoint's: not one of torch's data files.
    }
    if (r) {
      with_data.insert(*r);
      data_files.push_back(name);
    }
  }
  if (with_metadata.empty())
    throw FormatError(files_.path() + ": no " + kMetadataFileName + " and no rank-local " + rank_metadata_name(0) +
                      (data_files.empty() ? std::string(": not a PyTorch DCP checkpoint")
                                          : ": it holds DCP data files (" + name_list(data_files) +
                                                ") but no metadata, so the save did not finish"));
  const uint64_t last = std::max(with_metadata.rbegin()->first, with_data.empty() ? 0 : *with_data.rbegin());
  std::vector<std::string> missing;
  for (uint64_t r = 0; r <= last && missing.size() < 64; ++r)
    if (!with_metadata.count(r)) missing.push_back(rank_metadata_name(r));
  if (!missing.empty()) {
    std::vector<std::string> present;
    for (const auto& [r, name] : with_metadata) present.push_back(name);
    throw FormatError(files_.path() + ": a PyTorch DCP checkpoint of rank-local metadata (" + name_list(present) +
                      ") without " + name_list(missing) + ": the save of " +
                      (missing.size() == 1 ? "that rank" : "those ranks") + " did not finish");
  }
  // The ranks' files share the one cap, so that what they make fpgather hold is bounded as for one
  // .metadata of their total size.
  uint64_t total = 0;
  for (const auto& [r, name] : with_metadata) {
    const uint64_t size = files_.open(name)->size();
    total += size;
    if (total > cap)
      throw FormatError(files_.path() + ": rank-local metadata of " + std::to_string(total) + " bytes up to " + name +
                        ", larger than the " + std::to_string(cap) + " accepted for a checkpoint's metadata");
  }
  std::vector<RankMetadata> ranks;
  for (const auto& [r, name] : with_metadata) {
    ranks.push_back({r, read_metadata_file(files_, name, cap, limits)});
    metadata_files_.push_back(name);
  }
  const std::string shown = files_.file_path(metadata_files_.size() == 1
                                                 ? metadata_files_.front()
                                                 : metadata_files_.front() + " … " + metadata_files_.back());
  metadata_ = merge_rank_metadata(std::move(ranks), shown);
}

const Entry& Reader::entry(std::string_view fqn) const {
  if (const Entry* e = metadata_.find(fqn)) return *e;
  throw UsageError(dir() + ": no key " + safetensors::quote_name(fqn) + " in the checkpoint");
}

const StorageEntry& Reader::storage(const Entry& e, size_t chunk) const {
  if (!e.is_tensor) throw UsageError(dir() + ": key " + safetensors::quote_name(e.fqn) + " is not a tensor");
  if (chunk >= e.tensor.chunks.size())
    throw UsageError(dir() + ": key " + safetensors::quote_name(e.fqn) + " has " +
                     std::to_string(e.tensor.chunks.size()) + " chunks, not " + std::to_string(chunk + 1));
  const int64_t s = e.tensor.chunks[chunk].storage;
  if (s == kNoStorage) throw FormatError(metadata_.file + ": " + chunk_name(e, chunk) + " has no storage_data entry");
  return metadata_.storage[static_cast<size_t>(s)];
}

const StorageEntry& Reader::storage(const Entry& e) const {
  if (e.is_tensor) throw UsageError(dir() + ": key " + safetensors::quote_name(e.fqn) + " is a tensor, not bytes");
  if (e.storage == kNoStorage) throw FormatError(metadata_.file + ": " + chunk_name(e, 0) + " has no storage_data entry");
  return metadata_.storage[static_cast<size_t>(e.storage)];
}

uint64_t Reader::chunk_bytes(const Entry& e, size_t chunk) const {
  if (!e.is_tensor || chunk >= e.tensor.chunks.size())
    throw UsageError(dir() + ": " + chunk_name(e, chunk) + " is not a tensor chunk of the checkpoint");
  uint64_t n = e.tensor.dtype->element_bytes;
  for (uint64_t d : e.tensor.chunks[chunk].sizes) {
    if (d != 0 && n > UINT64_MAX / d)
      throw FormatError(metadata_.file + ": " + chunk_name(e, chunk) + " of sizes " +
                        shape_string(e.tensor.chunks[chunk].sizes) + " overflows");
    n *= d;
  }
  return n;
}

uint64_t Reader::stored_chunk_bytes(const Entry& e, size_t chunk) const {
  const uint64_t n = chunk_bytes(e, chunk);
  const StorageEntry& s = storage(e, chunk);
  // Both serializations store a chunk's elements uncompressed; behind stream transforms an item is
  // only known to hold something (its decoded size is checked as it is decoded: open_chunk).
  const uint64_t need = s.transform_descriptors.empty() ? n : n > 0 ? 1 : 0;
  if (s.length < need)
    throw FormatError(files_.file_path(s.relative_path) + ": " + chunk_name(e, chunk) + " of " + std::to_string(n) +
                      " bytes is stored in an item of " + std::to_string(s.length) + " bytes at offset " +
                      std::to_string(s.offset) + ", too short to hold it");
  return n;
}

FileRangeSource Reader::stored_range(const StorageEntry& s) const {
  return FileRangeSource(files_.open(s.relative_path), s.offset, s.length);
}

std::shared_ptr<const ByteSource> Reader::bytes_item(const Entry& e) const {
  const StorageEntry& s = storage(e);
  auto raw = std::make_shared<FileRangeSource>(stored_range(s));
  const std::string what = raw->name() + ": the item of " + chunk_name(e, 0);
  if (!is_zstd_transform(s.transform_descriptors, what)) return raw;
  return decode_zstd_item(*raw, kMaxDecodedBytesItem, what);
}

std::shared_ptr<const DecodedItem> Reader::decoded_chunk(const Entry& e, size_t chunk, bool keep) const {
  const StorageEntry& s = storage(e, chunk);
  if (keep) {
    std::lock_guard<std::mutex> lock(decoded_mutex_);
    for (const auto& [entry, item] : decoded_)
      if (entry == &s) return item;
  }
  const FileRangeSource raw = stored_range(s);
  const std::string what = raw.name() + ": the item of " + chunk_name(e, chunk);
  const uint64_t need = chunk_bytes(e, chunk);
  const uint64_t most = need > UINT64_MAX - kArchiveAroundChunkBytes ? UINT64_MAX : need + kArchiveAroundChunkBytes;
  std::shared_ptr<const DecodedItem> item;
  try {
    item = decode_zstd_item(raw, most, what);
  } catch (const FormatError&) {
    // The SAFETENSORS serialization's empty frame, followed by whatever the file holds next.
    if (!(need > 0 && zstd_first_frame_is_empty(raw))) throw;
  }
  if ((!item || item->size() == 0) && need > 0)
    throw FormatError(what + " of " + std::to_string(need) +
                      " bytes is an empty zstd stream: torch's SAFETENSORS serialization with the ZStandard "
                      "extension writes the elements uncompressed in the file's safetensors image and records "
                      "an empty stream in their place, which neither torch nor fpgather reads back; save with "
                      "the default TORCH_SAVE serialization to compress");
  if (item->size() < need)
    throw FormatError(what + " decodes to " + std::to_string(item->size()) + " bytes, fewer than the chunk's " +
                      std::to_string(need));
  if (keep) {
    std::lock_guard<std::mutex> lock(decoded_mutex_);
    decoded_.emplace_back(&s, item);
    uint64_t total = 0;
    for (const auto& d : decoded_) total += d.second->size();
    while (decoded_.size() > 1 && total > kDecodedCacheBytes) {
      total -= decoded_.front().second->size();
      decoded_.pop_front();
    }
  }
  return item;
}

std::shared_ptr<const SafetensorsImage> Reader::image(const StorageEntry& s) const {
  std::lock_guard<std::mutex> lock(images_mutex_);
  auto key = std::make_pair(s.relative_path, s.offset);
  if (auto it = images_.find(key); it != images_.end()) return it->second;
  auto img = std::make_shared<const SafetensorsImage>(files_.open(s.relative_path), s.offset);
  if (images_.size() >= kMaxImages) images_.clear();
  images_.emplace(std::move(key), img);
  return img;
}

namespace {

std::optional<Serialization> serialization_of(const uint8_t* head, size_t n) {
  if (is_zip(head, n)) return Serialization::torch_save;
  if (looks_like_safetensors(head, n)) return Serialization::safetensors;
  return std::nullopt;
}

// From the item's first bytes, read from its file: a SAFETENSORS tensor item of zero bytes still
// starts where the image does.
std::optional<Serialization> serialization_of(const DataFile& file, uint64_t offset) {
  uint8_t head[9] = {};
  const size_t n = offset < file.size() ? static_cast<size_t>(std::min<uint64_t>(sizeof head, file.size() - offset)) : 0;
  file.read(offset, head, n);
  return serialization_of(head, n);
}

}  // namespace

std::optional<Serialization> Reader::item_serialization(const Entry& e, size_t chunk) const {
  const StorageEntry& s = storage(e, chunk);
  const FileRangeSource raw = stored_range(s);
  const std::string what = raw.name() + ": the item of " + chunk_name(e, chunk);
  if (is_zstd_transform(s.transform_descriptors, what)) {
    const std::vector<uint8_t> head = decode_zstd_prefix(raw, 9, what);
    // An empty stream in place of elements: the SAFETENSORS serialization's (decoded_chunk).
    if (head.empty() && chunk_bytes(e, chunk) > 0) return Serialization::safetensors;
    return serialization_of(head.data(), head.size());
  }
  return serialization_of(*files_.open(s.relative_path), raw.file_offset());
}

StoredChunk Reader::open_chunk(const Entry& e, size_t chunk) const { return open_chunk(e, chunk, false); }

StoredChunk Reader::open_chunk(const Entry& e, size_t chunk, bool keep_decoded) const {
  const StorageEntry& s = storage(e, chunk);
  StoredChunk c;
  auto raw = std::make_shared<FileRangeSource>(stored_range(s));
  std::optional<Serialization> kind;
  if (is_zstd_transform(s.transform_descriptors, raw->name() + ": the item of " + chunk_name(e, chunk))) {
    auto decoded = decoded_chunk(e, chunk, keep_decoded);
    uint8_t head[9] = {};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof head, decoded->size()));
    decoded->read(0, head, n);
    if (!is_zip(head, n))
      throw FormatError(decoded->name() + ": the item of " + chunk_name(e, chunk) +
                        " does not decode to a torch.save archive");
    c.source_ = std::move(decoded);
    kind = Serialization::torch_save;
  } else {
    kind = serialization_of(*files_.open(s.relative_path), s.offset);
    c.source_ = std::move(raw);
  }
  if (kind == Serialization::torch_save) {
    c.serialization_ = Serialization::torch_save;
    c.archive_ = std::make_unique<TorchSaveArchive>(*c.source_);
    c.record_ = tensor_item_record(*c.archive_);
    c.dtype_ = c.record_.dtype;
    c.shape_ = c.record_.shape;
    return c;
  }
  if (kind == Serialization::safetensors) {
    c.serialization_ = Serialization::safetensors;
    c.image_ = image(s);
    c.tensor_ = &c.image_->chunk(e.fqn, e.tensor.chunks[chunk].offsets);
    const std::string_view tname = torch_dtype_name(c.tensor_->dtype);
    c.dtype_ = tname.empty() ? nullptr : find_torch_dtype(tname);
    if (!c.dtype_)
      throw FormatError(c.image_->name() + ": tensor " + safetensors::quote_name(e.fqn) + " has dtype " +
                        std::string(dtype_name(c.tensor_->dtype)) + ", which torch does not have");
    c.shape_ = c.tensor_->shape;
    if (c.tensor_->nbytes() != s.length)
      throw FormatError(c.image_->name() + ": tensor " + safetensors::quote_name(e.fqn) + " holds " +
                        std::to_string(c.tensor_->nbytes()) + " bytes; its storage entry records " +
                        std::to_string(s.length));
    return c;
  }
  throw FormatError(c.source_->name() + ": the item of " + chunk_name(e, chunk) +
                    " is neither a torch.save archive nor a safetensors image");
}

StoredChunk Reader::open_checked_chunk(const Entry& e, size_t chunk, bool keep_decoded) const {
  StoredChunk c = open_chunk(e, chunk, keep_decoded);
  if (&c.dtype() != e.tensor.dtype)
    throw FormatError(c.name() + ": " + chunk_name(e, chunk) + " is stored as " + std::string(c.dtype().name) +
                      ", the metadata says " + std::string(e.tensor.dtype->name));
  if (c.shape() != e.tensor.chunks[chunk].sizes)
    throw FormatError(c.name() + ": " + chunk_name(e, chunk) + " is stored with shape " + shape_string(c.shape()) +
                      ", the metadata's chunk has sizes " + shape_string(e.tensor.chunks[chunk].sizes));
  return c;
}

void Reader::read_chunk(const Entry& e, size_t chunk, void* dst, uint64_t dst_bytes) const {
  const uint64_t want = chunk_bytes(e, chunk);
  if (dst_bytes != want)
    throw InternalError("dcp::Reader::read_chunk: a buffer of " + std::to_string(dst_bytes) + " bytes for " +
                        chunk_name(e, chunk) + " of " + std::to_string(want));
  open_checked_chunk(e, chunk).read(dst);
}

StoredChunk::PartRead Reader::read_chunk_part(const Entry& e, size_t chunk, uint64_t lo, uint64_t hi, void* dst) const {
  return open_checked_chunk(e, chunk, true).read_part(lo, hi, dst);
}

void Reader::prefetch(const Entry& e, size_t chunk) const {
  if (!e.is_tensor || chunk >= e.tensor.chunks.size() || e.tensor.chunks[chunk].storage == kNoStorage) return;
  const StorageEntry& s = metadata_.storage[static_cast<size_t>(e.tensor.chunks[chunk].storage)];
  if (s.length == 0 || !CheckpointDir::is_plain_name(s.relative_path)) return;
  try {
    files_.open(s.relative_path)->will_need(s.offset, s.length);
  } catch (const FormatError&) {
    // A hint only: the read itself reports the file.
  }
}

std::vector<uint8_t> Reader::read_bytes(const Entry& e) const {
  const auto src = bytes_item(e);
  return src->read_vector(0, src->size());
}

Value Reader::read_object(const Entry& e) const {
  const auto src = bytes_item(e);
  const TorchSaveArchive archive(*src);
  return archive.to_value();
}

}  // namespace fpg::dcp
