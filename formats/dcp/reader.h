// Reading a PyTorch Distributed Checkpoint directory (and Megatron's torch_dist, which is one):
// `.metadata` decoded at open, items read one at a time on request, never the whole checkpoint.
//
//   dcp::Reader r("ckpt");
//   for (const dcp::Entry& e : r.metadata().entries)
//     if (e.is_tensor)
//       for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
//         std::vector<uint8_t> buf(r.chunk_bytes(e, c));
//         r.read_chunk(e, c, buf.data(), buf.size());   // the chunk's box, row-major, its dtype
//       }
//     else
//       dcp::Value v = r.read_object(e);                 // a torch.save'd Python object
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/dcp/byte_source.h"
#include "formats/dcp/checkpoint_dir.h"
#include "formats/dcp/megatron/megatron_metadata.h"
#include "formats/dcp/metadata/metadata.h"
#include "formats/dcp/pickle/pickle_value.h"
#include "formats/dcp/safetensors_item.h"
#include "formats/dcp/torch_save/torch_save.h"
#include "formats/dcp/zstd_item.h"

namespace fpg::dcp {

// The checkpoint's commit file. A checkpoint saved without collectives has instead one
// `__<rank>.metadata` per rank (metadata/rank_local_metadata.h), read as one.
constexpr const char* kMetadataFileName = ".metadata";
// The largest .metadata read (decoding may take DecodeBudget's multiple of it).
// torch writes about 184 bytes per chunk, so this is some 5 million chunks; the unpickler's limit of
// 64 Mi values (PickleLimits::max_nodes) is reached first, near 4.4 million, so a larger cap would not
// open a larger checkpoint and none is offered.
constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30;
// Behind the ZStandard extension (zstd_item.h), what an item may decode to. A tensor chunk's item is
// a torch.save archive of its elements: their bytes plus the archive around them (data.pkl of one
// tensor, a few small records, zip headers: about 1.2 KB as torch writes it), bounded by this.
constexpr uint64_t kArchiveAroundChunkBytes = uint64_t{1} << 20;
// A bytes item declares no size: its decoded bytes are bounded as the largest data.pkl read is.
constexpr uint64_t kMaxDecodedBytesItem = uint64_t{1} << 30;
// Decoded items kept for reads that take a chunk in parts (each part would otherwise decode the
// whole item again); the most recent one is kept whatever its size.
constexpr uint64_t kDecodedCacheBytes = uint64_t{256} << 20;

// Whether `dir` is a directory holding a regular file `.metadata`, a rank-local `__<rank>.metadata`,
// torch's data files (`__<rank>_<n>.distcp`: opening them without their metadata says what is
// missing), or Hugging Face distributed shards (hf_distributed.h) and no model index.
bool is_dcp_directory(const std::string& dir);

enum class Serialization : uint8_t { torch_save, safetensors };

// Where the checkpoint's Metadata comes from: its .metadata, the ranks' __<rank>.metadata merged, or
// the headers of Hugging Face distributed shards (hf_distributed.h).
enum class MetadataSource : uint8_t { metadata, rank_local, hf_distributed };
std::string_view serialization_name(Serialization s);  // "torch_save", "safetensors"

// One stored tensor chunk, opened: what the file says it holds, and its bytes on request.
class StoredChunk {
 public:
  Serialization serialization() const { return serialization_; }
  const TorchDType& dtype() const { return *dtype_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  uint64_t nbytes() const;
  // Reads the elements, row-major, into `dst` (nbytes()); torch.save records are CRC-checked.
  void read(void* dst) const;

  // What read_part read of a CRC-protected record: its bytes [offset, offset + size) and their CRC,
  // left to a PartCrcLedger to check once the parts cover the record. `tracked` is false where
  // nothing is left to check: a safetensors item (it has no CRC) or a record read whole and checked.
  struct PartRead {
    bool tracked = false;
    uint64_t offset = 0, size = 0;
    uint32_t crc = 0;
    uint64_t record_size = 0;
    uint32_t record_crc = 0;
  };
  // Reads elements [lo, hi) of the chunk (row-major) into `dst`, only those bytes from disk where
  // the stored tensor is contiguous.
  PartRead read_part(uint64_t lo, uint64_t hi, void* dst) const;
  // The CRC-32 of bytes [offset, offset + size) of the torch.save record (read in blocks, nothing
  // kept); InternalError for a safetensors item.
  uint32_t record_crc(uint64_t offset, uint64_t size) const;
  const std::string& name() const { return source_->name(); }

 private:
  friend class Reader;
  Serialization serialization_ = Serialization::torch_save;
  const TorchDType* dtype_ = nullptr;
  std::vector<uint64_t> shape_;
  // The item: its range of the file, or what its zstd stream decoded to.
  std::shared_ptr<const ByteSource> source_;
  std::unique_ptr<TorchSaveArchive> archive_;
  TensorRecord record_;
  std::shared_ptr<const SafetensorsImage> image_;
  const safetensors::TensorInfo* tensor_ = nullptr;
};

class Reader {
 public:
  // Opens `dir` and decodes its .metadata (and metadata.json where present); without a .metadata,
  // its rank-local `__0.metadata` … `__<N-1>.metadata`, merged; without either, Hugging Face
  // distributed shards (hf_distributed.h). Throws fpg::FormatError naming the
  // file; a .metadata (or rank-local files together) larger than kMaxMetadataBytes (or
  // limits.max_bytes) or not starting as a pickle of protocol 2 to 5 is refused before it is read,
  // and rank-local metadata with a rank missing (below the highest rank of a metadata or data file)
  // is refused naming the missing files.
  explicit Reader(const std::string& dir, const PickleLimits& limits = {});

  const std::string& dir() const { return files_.path(); }
  const CheckpointDir& files() const { return files_; }
  const Metadata& metadata() const { return metadata_; }
  // The metadata files read: {".metadata"}, the rank-local ones by rank, or the Hugging Face shards.
  const std::vector<std::string>& metadata_files() const { return metadata_files_; }
  MetadataSource metadata_source() const { return source_; }
  const std::optional<MegatronMetadata>& megatron() const { return megatron_; }

  // The entry `fqn`; throws fpg::UsageError naming it when absent.
  const Entry& entry(std::string_view fqn) const;

  // The storage_data entry of a tensor chunk or a bytes entry; throws fpg::FormatError when the
  // checkpoint stores none.
  const StorageEntry& storage(const Entry& e, size_t chunk) const;
  const StorageEntry& storage(const Entry& e) const;

  // Bytes of chunk `chunk` of tensor `e`: volume × element size.
  uint64_t chunk_bytes(const Entry& e, size_t chunk) const;
  // chunk_bytes, for sizing a buffer to read the chunk into: throws fpg::FormatError (naming the key,
  // the chunk and its item) when the chunk's storage entry is too short to hold that many bytes, so
  // that a size the metadata claims is never allocated unless the checkpoint stores it.
  uint64_t stored_chunk_bytes(const Entry& e, size_t chunk) const;

  // How the item of a tensor chunk is serialized, from its first bytes (decoded, behind the ZStandard
  // extension); nullopt when it is neither a zip archive nor a safetensors image. Throws
  // fpg::FormatError when it cannot be read.
  std::optional<Serialization> item_serialization(const Entry& e, size_t chunk) const;

  // Opens the stored item of a tensor chunk (TORCH_SAVE archive or SAFETENSORS image, detected by
  // its first bytes) without reading its elements. Behind the ZStandard extension the item is
  // decoded first, to at most the chunk's bytes plus kArchiveAroundChunkBytes, and must decode to
  // at least the chunk's bytes; any other stream transform is refused naming it.
  StoredChunk open_chunk(const Entry& e, size_t chunk) const;

  // Reads chunk `chunk` of `e` into `dst` (chunk_bytes bytes): the stored tensor must have the
  // metadata's dtype and the chunk's sizes as its shape. Throws fpg::FormatError naming the file,
  // the key and the chunk otherwise, or on a CRC mismatch.
  void read_chunk(const Entry& e, size_t chunk, void* dst, uint64_t dst_bytes) const;

  // Reads elements [lo, hi) of chunk `chunk` of `e` (row-major in the chunk's box) into `dst`, with
  // read_chunk's checks; a torch.save record's CRC is left to the caller (StoredChunk::PartRead).
  StoredChunk::PartRead read_chunk_part(const Entry& e, size_t chunk, uint64_t lo, uint64_t hi, void* dst) const;

  // Hints that chunk `chunk` of `e` will be read soon: its item starts loading from disk in the
  // background. Does nothing where the chunk has no storage.
  void prefetch(const Entry& e, size_t chunk) const;

  // The bytes of a bytes entry's item (decoded, behind the ZStandard extension, to at most
  // kMaxDecodedBytesItem).
  std::vector<uint8_t> read_bytes(const Entry& e) const;
  // A bytes entry decoded as the torch.save'd object it holds (tensors inside read into tensor
  // values). Megatron's ShardedObjects are a list of the objects saved under the key.
  Value read_object(const Entry& e) const;

 private:
  void read_rank_local(uint64_t cap, const PickleLimits& limits);
  // The item's bytes as stored in its file.
  FileRangeSource stored_range(const StorageEntry& s) const;
  // A bytes entry's item, decoded where it is behind the ZStandard extension.
  std::shared_ptr<const ByteSource> bytes_item(const Entry& e) const;
  // A tensor chunk's zstd stream decoded, kept in decoded_ when `keep`.
  std::shared_ptr<const DecodedItem> decoded_chunk(const Entry& e, size_t chunk, bool keep) const;
  StoredChunk open_chunk(const Entry& e, size_t chunk, bool keep_decoded) const;
  // open_chunk, checked against the metadata: its dtype and the chunk's sizes.
  StoredChunk open_checked_chunk(const Entry& e, size_t chunk, bool keep_decoded = false) const;
  std::shared_ptr<const SafetensorsImage> image(const StorageEntry& s) const;

  CheckpointDir files_;
  Metadata metadata_;
  std::vector<std::string> metadata_files_;
  MetadataSource source_ = MetadataSource::metadata;
  std::optional<MegatronMetadata> megatron_;
  mutable std::mutex images_mutex_;
  mutable std::map<std::pair<std::string, uint64_t>, std::shared_ptr<const SafetensorsImage>> images_;
  mutable std::mutex decoded_mutex_;
  mutable std::deque<std::pair<const StorageEntry*, std::shared_ptr<const DecodedItem>>> decoded_;
};

}  // namespace fpg::dcp
